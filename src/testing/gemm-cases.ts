// The GEMM conformance table: every epilogue × dtype × transpose pair over square, odd, degenerate
// (M = 1, N = 1), vocabulary-sized and Transformer-sized shapes, plus strided-batched GEMMs and a
// misaligned view. Each case runs on the backend under test and on the reference with the same
// fresh random inputs; outputs start poisoned (NaN) unless beta ≠ 0 reads them. Cases cuBLASLt
// cannot do (the GELU aux matrix needs N % 8 = 0; bias gradients of a need transA) must be refused
// with an ArgumentError.

import type { Backend, GemmEpilogue } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { HostArray, Tensor } from '../tensor.js';
import { compareArrays, describe } from './compare.js';
import { Rng } from './random.js';

/** What a GEMM conformance run needs from a backend. */
export type GemmBackend = Pick<Backend, 'name' | 'empty' | 'fromArray' | 'fill' | 'download' | 'view' | 'free' | 'gemm' | 'batchedGemm' | 'synchronize'>;

/** Relative-norm tolerances: f32 compute everywhere; f16/bf16 add one rounding of each output. */
export const GEMM_TOLERANCE: Readonly<Record<FloatDType, number>> = { f32: 1e-4, f16: 2e-3, bf16: 1e-2 };

export interface GemmCase {
  name: string;
  dtype: FloatDType;
  batch: number | null; // null: gemm; a number: batchedGemm
  M: number;
  N: number;
  K: number;
  transA: boolean;
  transB: boolean;
  epilogue: GemmEpilogue;
  /** 'gelu_bias' only: also store the pre-activation. */
  storePreActivation: boolean;
  beta: number;
  alpha: number;
  /** Start `a` this many elements into a larger allocation (a misaligned view). */
  aOffset: number;
  /** Why the backend under test must refuse this case (ArgumentError), or null. */
  mustRefuse: string | null;
}

const DTYPES: readonly FloatDType[] = ['f32', 'f16', 'bf16'];
const TRANSPOSES: readonly (readonly [boolean, boolean])[] = [[false, false], [false, true], [true, false], [true, true]];

interface Variant { epilogue: GemmEpilogue; storePreActivation?: boolean; beta?: number }
const ALL_VARIANTS: readonly Variant[] = [
  { epilogue: 'none' }, { epilogue: 'none', beta: 0.5 }, { epilogue: 'bias' }, { epilogue: 'relu_bias' },
  { epilogue: 'gelu_bias' }, { epilogue: 'gelu_bias', storePreActivation: true }, { epilogue: 'dgelu' },
  { epilogue: 'dgelu_bgrad' }, { epilogue: 'bgrad_a' },
];

function usesAux(v: Variant): boolean {
  return v.epilogue === 'dgelu' || v.epilogue === 'dgelu_bgrad' || (v.epilogue === 'gelu_bias' && v.storePreActivation === true);
}

function gemmCase(dtype: FloatDType, [M, N, K]: readonly number[], [transA, transB]: readonly boolean[], v: Variant, extra: Partial<GemmCase> = {}): GemmCase {
  const variant = `${v.epilogue}${v.storePreActivation ? '+pre' : ''}${v.beta ? ` beta=${v.beta}` : ''}`;
  const refuse = usesAux(v) && N! % 8 !== 0 ? `N = ${N} is not a multiple of 8 (cuBLASLt's GELU aux leading dimension)`
    : v.epilogue === 'bgrad_a' && !transA ? 'bgrad_a without transA (cuBLASLt has no BGRADB kernel for it)' : null;
  const c: GemmCase = {
    name: '', dtype, batch: null, M: M!, N: N!, K: K!, transA: transA!, transB: transB!, epilogue: v.epilogue,
    storePreActivation: v.storePreActivation ?? false, beta: v.beta ?? 0, alpha: 1, aOffset: 0, mustRefuse: refuse, ...extra,
  };
  const shape = c.batch === null ? `${M}x${N}x${K}` : `batch ${c.batch} ${M}x${N}x${K}`;
  c.name = `${c.batch === null ? 'gemm' : 'batchedGemm'} ${dtype} ${shape} ${transA ? 'T' : 'N'}${transB ? 'T' : 'N'} ${variant}` +
    `${c.alpha !== 1 ? ` alpha=${c.alpha}` : ''}${c.aOffset ? ` a at +${c.aOffset}` : ''}`;
  return c;
}

export function gemmCases(): GemmCase[] {
  const cases: GemmCase[] = [];
  for (const dtype of DTYPES) {
    // Every epilogue and transpose pair on a square and on an odd shape (the latter refuses aux epilogues).
    for (const shape of [[64, 64, 64], [127, 33, 65]]) {
      for (const t of TRANSPOSES) for (const v of ALL_VARIANTS) cases.push(gemmCase(dtype, shape, t, v));
    }
    // Degenerate sizes: a single row, a single column, K = 1.
    for (const shape of [[1, 8, 1], [5, 1, 3], [1, 1, 7]]) {
      for (const t of TRANSPOSES) for (const v of [ALL_VARIANTS[0]!, ALL_VARIANTS[2]!, ALL_VARIANTS[8]!]) cases.push(gemmCase(dtype, shape, t, v));
    }
    // A language-model head over GPT-2's vocabulary for one token: logits [1, 50257] = x [1, 768] · Wᵀ
    // (one case per dtype: W has 38.6 M elements, and the reference's host-side work dominates).
    cases.push(gemmCase(dtype, [1, 50257, 768], [false, true], ALL_VARIANTS[2]!));
    // A Transformer Linear at GPT-2 width: forward x·Wᵀ (+bias/act), backward dX = dY·W, dW = dYᵀ·X.
    const linear = [128, 768, 768];
    for (const v of [ALL_VARIANTS[2]!, ALL_VARIANTS[3]!, ALL_VARIANTS[5]!]) cases.push(gemmCase(dtype, linear, [false, true], v));
    for (const v of [ALL_VARIANTS[0]!, ALL_VARIANTS[6]!, ALL_VARIANTS[7]!]) cases.push(gemmCase(dtype, linear, [false, false], v));
    for (const v of [ALL_VARIANTS[8]!, ALL_VARIANTS[1]!]) cases.push(gemmCase(dtype, linear, [true, false], v));
    // alpha scales the product before the epilogue.
    cases.push(gemmCase(dtype, [64, 64, 64], [false, true], ALL_VARIANTS[5]!, { alpha: 0.25 }));
    // A view one element into its allocation: cuBLASLt must be told the 2- or 4-byte alignment.
    cases.push(gemmCase(dtype, [48, 40, 24], [false, false], ALL_VARIANTS[0]!, { aOffset: 1 }));
    // Strided-batched, with and without accumulation, every transpose pair; attention-like shapes.
    for (const t of TRANSPOSES) {
      for (const beta of [0, 0.5]) cases.push(gemmCase(dtype, [37, 45, 29], t, { epilogue: 'none', beta }, { batch: 3 }));
    }
    cases.push(gemmCase(dtype, [128, 128, 64], [false, true], ALL_VARIANTS[0]!, { batch: 12 })); // Q·Kᵀ
    cases.push(gemmCase(dtype, [128, 64, 128], [false, false], ALL_VARIANTS[0]!, { batch: 12 })); // P·V
    cases.push(gemmCase(dtype, [16, 16, 16], [true, true], ALL_VARIANTS[1]!, { batch: 1 }));
  }
  return cases;
}

/**
 * Decode-step GEMMs (kernels/gemv.ts when CudaBackend.decodeGemv is on): M ≤ 4 rows against [N, K]
 * weights at GPT-2 and Llama widths, odd N and K (a partial last step), every forward epilogue; then
 * cases the GEMV kernel must leave to cuBLASLt (5 rows, beta, alpha, a misaligned a, K not a multiple of
 * the vector width, a stored pre-activation, an untransposed weight). `gemv` says which path it takes.
 */
export function decodeGemmCases(): (GemmCase & { gemv: boolean })[] {
  const cases: (GemmCase & { gemv: boolean })[] = [];
  const variants = [ALL_VARIANTS[0]!, ALL_VARIANTS[2]!, ALL_VARIANTS[3]!, ALL_VARIANTS[4]!];
  for (const dtype of DTYPES) {
    const vec = dtype === 'f32' ? 4 : 8;
    const shapes = [[1, 3072, 2048], [3, 2304, 768], [4, 2048, 8192], [2, 131, 96], [2, 768, 3072], [4, 77, 136], [3, 1000, 4104]];
    shapes.forEach((shape, i) => cases.push({ ...gemmCase(dtype, shape, [false, true], variants[i % variants.length]!), gemv: shape[2]! % vec === 0 }));
    cases.push({ ...gemmCase(dtype, [1, 50257, 768], [false, true], ALL_VARIANTS[2]!), gemv: true });
    cases.push({ ...gemmCase(dtype, [5, 512, 256], [false, true], ALL_VARIANTS[0]!), gemv: false });
    cases.push({ ...gemmCase(dtype, [2, 512, 256], [false, true], ALL_VARIANTS[1]!), gemv: false });
    cases.push({ ...gemmCase(dtype, [2, 512, 256], [false, true], ALL_VARIANTS[0]!, { alpha: 0.25 }), gemv: false });
    cases.push({ ...gemmCase(dtype, [2, 512, 256], [false, true], ALL_VARIANTS[0]!, { aOffset: 1 }), gemv: false });
    cases.push({ ...gemmCase(dtype, [2, 512, 258], [false, true], ALL_VARIANTS[0]!), gemv: false });
    cases.push({ ...gemmCase(dtype, [2, 512, 256], [false, true], ALL_VARIANTS[5]!), gemv: false });
    cases.push({ ...gemmCase(dtype, [2, 512, 256], [false, false], ALL_VARIANTS[0]!), gemv: false });
  }
  return cases;
}

/**
 * Decode GEMMs whose GEMV grid passes the resident blocks (two an SM of 132), for the looping form
 * (kernels/gemv.ts GemvSpec.loop): GPT-2's LM head at one row, a 30000-wide product at four, one of a K that
 * is not a whole chunk — each dtype, with a bias or an activation epilogue among them.
 */
export function loopGemmCases(): GemmCase[] {
  const cases: GemmCase[] = [];
  for (const dtype of DTYPES) {
    cases.push(gemmCase(dtype, [1, 50257, 768], [false, true], ALL_VARIANTS[2]!));
    cases.push(gemmCase(dtype, [4, 30000, 1024], [false, true], ALL_VARIANTS[0]!));
    cases.push(gemmCase(dtype, [3, 40000, 136], [false, true], ALL_VARIANTS[3]!));
  }
  return cases;
}

/**
 * Batched-decode GEMMs (kernels/gemv-mma.ts when CudaBackend.mmaGemv is on): 5–64 rows against [N, K]
 * 16-bit weights — whole and partial row tiles of 8, N not a multiple of 16, K at GPT-2 and Llama
 * widths and just a multiple of 32 — every forward epilogue; then what the kernel leaves alone (65 rows,
 * K not a multiple of 32, f32, beta, a misaligned a). `mma` says which path it must take.
 */
export function mmaGemmCases(): (GemmCase & { mma: boolean })[] {
  const cases: (GemmCase & { mma: boolean })[] = [];
  const variants = [ALL_VARIANTS[0]!, ALL_VARIANTS[2]!, ALL_VARIANTS[3]!, ALL_VARIANTS[4]!];
  for (const dtype of ['bf16', 'f16'] as const) {
    const shapes = [[5, 3072, 2048], [8, 2304, 768], [13, 2048, 8192], [16, 131, 96], [24, 768, 3072], [32, 1000, 2048], [33, 77, 160], [64, 4096, 1024], [40, 50257, 768]];
    shapes.forEach((shape, i) => cases.push({ ...gemmCase(dtype, shape, [false, true], variants[i % variants.length]!), mma: true }));
    cases.push({ ...gemmCase(dtype, [65, 512, 256], [false, true], ALL_VARIANTS[0]!), mma: false });
    cases.push({ ...gemmCase(dtype, [16, 512, 264], [false, true], ALL_VARIANTS[0]!), mma: false });
    cases.push({ ...gemmCase(dtype, [16, 512, 256], [false, true], ALL_VARIANTS[1]!), mma: false });
    cases.push({ ...gemmCase(dtype, [16, 512, 256], [false, true], ALL_VARIANTS[0]!, { aOffset: 1 }), mma: false });
  }
  cases.push({ ...gemmCase('f32', [16, 512, 256], [false, true], ALL_VARIANTS[0]!), mma: false });
  return cases;
}

/**
 * Products that add into out (beta = 1, epilogue 'none') at 5–32 rows: a decode step's O and down
 * projections accumulating into the residual stream (the streamed GEMM with its accumulate epilogue,
 * split or not, with partial feature tiles and K at 64 a stage); `stream` says where it must run.
 */
export function accumulateGemmCases(): (GemmCase & { stream: boolean })[] {
  const cases: (GemmCase & { stream: boolean })[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const shape of [[32, 2048, 2048], [32, 2048, 8192], [5, 3072, 2048], [13, 1000, 768], [24, 130, 320]]) {
      cases.push({ ...gemmCase(dtype, shape as [number, number, number], [false, true], { epilogue: 'none', beta: 1 }), stream: true });
    }
    cases.push({ ...gemmCase(dtype, [40, 512, 256], [false, true], { epilogue: 'none', beta: 1 }), stream: false });
  }
  return cases;
}

// --- running a case -------------------------------------------------------------------------------------

export interface GemmCaseInputs {
  a: Float32Array;
  b: Float32Array;
  bias: Float32Array;
  preActivation: Float32Array;
  out: Float32Array;
}

export function gemmCaseInputs(c: GemmCase, rng: Rng): GemmCaseInputs {
  const batch = c.batch ?? 1;
  // Scale b by 1/√K so products stay O(1): GELU and its derivative then see their interesting range.
  return {
    a: rng.floats(batch * c.M * c.K),
    b: rng.floats(batch * c.K * c.N, 1 / Math.sqrt(c.K)),
    bias: rng.floats(c.N, 0.5),
    preActivation: rng.floats(c.M * c.N, 1.5),
    out: rng.floats(batch * c.M * c.N),
  };
}

/** Runs the case; returns every output it writes (out, and preActivation or biasGrad when produced). */
export function runGemmCase(c: GemmCase, backend: GemmBackend, inputs: GemmCaseInputs): Record<string, HostArray> {
  const lead = c.batch === null ? [] : [c.batch];
  const made: Tensor[] = [];
  const keep = (t: Tensor) => { made.push(t); return t; };
  const upload = (values: Float32Array, shape: number[]) => keep(backend.fromArray(values, shape, c.dtype));
  const poisoned = (shape: number[]) => { const t = keep(backend.empty(shape, c.dtype)); backend.fill(t, NaN); return t; };
  try {
    const aShape = [...lead, ...(c.transA ? [c.K, c.M] : [c.M, c.K])];
    const bShape = [...lead, ...(c.transB ? [c.N, c.K] : [c.K, c.N])];
    let a: Tensor;
    if (c.aOffset > 0) {
      const padded = new Float32Array(inputs.a.length + c.aOffset);
      padded.set(inputs.a, c.aOffset);
      a = backend.view(upload(padded, [padded.length]), c.aOffset, aShape);
    } else a = upload(inputs.a, aShape);
    const b = upload(inputs.b, bShape);
    const out = c.beta !== 0 ? upload(inputs.out, [...lead, c.M, c.N]) : poisoned([...lead, c.M, c.N]);
    if (c.batch !== null) {
      backend.batchedGemm({ a, b, out, transA: c.transA, transB: c.transB, alpha: c.alpha, beta: c.beta });
      backend.synchronize();
      return { out: backend.download(out) };
    }
    const results: Record<string, Tensor> = { out };
    const args: Parameters<GemmBackend['gemm']>[0] = { a, b, out, transA: c.transA, transB: c.transB, alpha: c.alpha, epilogue: c.epilogue };
    if (c.beta !== 0) args.beta = c.beta;
    if (c.epilogue === 'bias' || c.epilogue === 'relu_bias' || c.epilogue === 'gelu_bias') args.bias = upload(inputs.bias, [c.N]);
    if (c.epilogue === 'gelu_bias' && c.storePreActivation) args.preActivation = results['preActivation'] = poisoned([c.M, c.N]);
    if (c.epilogue === 'dgelu' || c.epilogue === 'dgelu_bgrad') args.preActivation = upload(inputs.preActivation, [c.M, c.N]);
    if (c.epilogue === 'dgelu_bgrad') args.biasGrad = results['biasGrad'] = poisoned([c.N]);
    if (c.epilogue === 'bgrad_a') args.biasGrad = results['biasGrad'] = poisoned([c.M]);
    backend.gemm(args);
    backend.synchronize();
    return Object.fromEntries(Object.entries(results).map(([name, t]) => [name, backend.download(t)]));
  } finally {
    for (const t of made) backend.free(t);
  }
}

export interface GemmCaseResult {
  name: string;
  ok: boolean;
  details: string[];
}

function nameHash(name: string): number {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
  return h >>> 0;
}

/** Runs one case on `backend` and `reference` and compares, or checks the refusal it must give. */
export function checkGemmCase(c: GemmCase, backend: GemmBackend, reference: GemmBackend, seed: number): GemmCaseResult {
  const inputs = gemmCaseInputs(c, new Rng(seed ^ nameHash(c.name)));
  if (c.mustRefuse !== null) {
    try {
      runGemmCase(c, backend, inputs);
      return { name: c.name, ok: false, details: [`ran, but must refuse: ${c.mustRefuse}`] };
    } catch (err) {
      const ok = err instanceof ArgumentError;
      return { name: c.name, ok, details: [ok ? `refused: ${err.message}` : `failed with ${String(err)} instead of an ArgumentError`] };
    }
  }
  const expected = runGemmCase(c, reference, inputs);
  const actual = runGemmCase(c, backend, inputs);
  const details: string[] = [];
  let ok = true;
  for (const [output, ref] of Object.entries(expected)) {
    const got = actual[output];
    if (got === undefined) { ok = false; details.push(`${output}: missing`); continue; }
    const cmp = compareArrays(got, ref);
    const pass = cmp.unwritten === 0 && cmp.relativeError <= GEMM_TOLERANCE[c.dtype];
    ok &&= pass;
    details.push(`${output}: ${describe(cmp, got, ref)} (tolerance ${GEMM_TOLERANCE[c.dtype]})`);
  }
  return { name: c.name, ok, details };
}
