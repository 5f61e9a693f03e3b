// One table of op cases that runs on any backend: the GPU test runs each case on CUDA and on the CPU
// reference with the same random inputs and compares every output. Inputs are fresh random values
// (never zeros); every output is poisoned (NaN, or 0xCD for integer outputs) before the op runs.

import type { Activation, Backend } from '../backend/backend.js';
import { dropoutOffsetAdvance } from '../backend/rng.js';
import type { DType, FloatDType } from '../dtype.js';
import { FLOAT_DTYPES } from '../dtype.js';
import type { HostArray, Tensor } from '../tensor.js';
import { Rng } from './random.js';

export interface HostTensor { values: HostArray; shape: number[]; dtype: DType }
export type Inputs = Record<string, HostTensor>;

export interface OpCase {
  name: string;
  dtype: FloatDType;
  /** Outputs compared bit-exactly (dropout masks, integer outputs). */
  exact?: readonly string[];
  /** Relative-norm tolerance override for float outputs. */
  tolerance?: number;
  inputs(rng: Rng): Inputs;
  run(backend: Backend, inputs: Inputs): Record<string, HostArray>;
}

/** Per-run helpers: upload inputs, allocate poisoned outputs, download results. */
export class CaseContext {
  private readonly outputs = new Map<string, Tensor>();
  constructor(readonly backend: Backend, readonly inputs: Inputs) {}

  in(name: string): Tensor {
    const h = this.inputs[name];
    if (!h) throw new Error(`case has no input '${name}'`);
    return this.backend.fromArray(h.values, h.shape, h.dtype);
  }

  out(name: string, shape: number[], dtype: DType): Tensor {
    const t = this.backend.empty(shape, dtype);
    this.backend.fill(t, dtype === 'f32' || dtype === 'f16' || dtype === 'bf16' ? NaN : 0xcd & (dtype === 'i8' ? 0x7f : 0xff));
    this.outputs.set(name, t);
    return t;
  }

  /** Registers an existing tensor (an input updated in place) as an output to compare. */
  keep(name: string, t: Tensor): Tensor { this.outputs.set(name, t); return t; }

  results(): Record<string, HostArray> {
    this.backend.synchronize();
    const r: Record<string, HostArray> = {};
    for (const [name, t] of this.outputs) r[name] = this.backend.download(t);
    return r;
  }
}

/** Random floats of `shape` (uniform in mean ± scale), for a case's inputs. */
export function floats(rng: Rng, shape: number[], dtype: DType, scale = 1, mean = 0): HostTensor {
  return { values: rng.floats(shape.reduce((a, b) => a * b, 1), scale, mean), shape, dtype };
}
/** Random i32 of `shape` in [low, high). */
export function randomInts(rng: Rng, shape: number[], low: number, high: number): HostTensor {
  return { values: rng.ints(shape.reduce((a, b) => a * b, 1), low, high), shape, dtype: 'i32' };
}
/**
 * Key lengths of a padded batch, each in [1, L]; the first at least ⌈L/2⌉, as a batch's longest
 * sequence is. With every length tiny the softmax gradient vanishes (one key: P = 1, dP − D = 0),
 * and the comparison's reference norm would be rounding noise rather than a gradient.
 */
export function paddedKeyLengths(rng: Rng, B: number, L: number): HostTensor {
  const lengths = randomInts(rng, [B], 1, L + 1);
  const values = lengths.values as Int32Array;
  values[0] = Math.max(values[0]!, Math.ceil(L / 2));
  return lengths;
}
/** Given i32 values of `shape`. */
export function ints(shape: number[], values: ArrayLike<number>): HostTensor {
  return { values: Int32Array.from(values), shape, dtype: 'i32' };
}
/** RoPE's inverse frequencies 10000^(−2i/d), i < d/2 (f32 [d/2]). */
export function ropeInvFreq(d: number): HostTensor {
  return { values: Float32Array.from({ length: d / 2 }, (_, i) => 1 / 10000 ** ((2 * i) / d)), shape: [d / 2], dtype: 'f32' };
}

/** A random (seed, offset) pair carried as an input, so both backends draw the same dropout masks. */
function randomDropoutSeed(rng: Rng): HostTensor {
  return { values: new Int32Array([Math.floor(rng.next() * 2 ** 31), Math.floor(rng.next() * 1e6)]), shape: [2], dtype: 'i32' };
}
function dropoutSeed(inputs: Inputs): { seed: bigint; offset: bigint } {
  const r = inputs.rand!.values as Int32Array;
  return { seed: BigInt(r[0]!) * 4294967296n + 12345n, offset: dropoutOffsetAdvance(r[1]!) };
}

// --- cases by family -----------------------------------------------------------------------------

const ROW_SHAPES: [number, number][] = [[7, 768], [33, 1024], [5, 4096], [3, 5120], [19, 771], [512, 768]];

function elementwiseCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  // 4400 rows: on 132 SMs the dBias backward's threads walk 2–3 rows each (two loaded per step,
  // then a clamped tail).
  for (const [rows, H] of [...ROW_SHAPES, [4400, 768] as [number, number]]) {
    const tag = `${dtype} rows=${rows} H=${H}`;
    cases.push({
      name: `biasDropoutResidual fwd+bwd ${tag}`, dtype, exact: ['mask'],
      inputs: (rng) => ({ input: floats(rng, [rows, H], dtype), bias: floats(rng, [H], dtype), residual: floats(rng, [rows, H], dtype), dOut: floats(rng, [rows, H], dtype), rand: randomDropoutSeed(rng) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const { seed, offset } = dropoutSeed(inputs);
        const p = 0.1;
        const mask = c.out('mask', [rows, H], 'u8');
        b.biasDropoutResidual({ input: c.in('input'), bias: c.in('bias'), residual: c.in('residual'), out: c.out('out', [rows, H], dtype), mask, p, seed, offset });
        b.biasDropoutResidualBackward({ dOut: c.in('dOut'), mask, p, dInput: c.out('dInput', [rows, H], dtype), dBias: c.out('dBias', [H], dtype) });
        return c.results();
      },
    });
    for (const activation of ['relu', 'gelu', 'gelu_tanh', 'silu'] as Activation[]) {
      if (activation !== 'gelu' && rows > 100) continue;
      cases.push({
        name: `biasActivationDropout(${activation}) fwd+bwd ${tag}`, dtype, exact: ['mask'],
        inputs: (rng) => ({ input: floats(rng, [rows, H], dtype), bias: floats(rng, [H], dtype), dOut: floats(rng, [rows, H], dtype), rand: randomDropoutSeed(rng) }),
        run: (b, inputs) => {
          const c = new CaseContext(b, inputs);
          const { seed, offset } = dropoutSeed(inputs);
          const p = 0.2;
          const mask = c.out('mask', [rows, H], 'u8');
          const input = c.in('input'), bias = c.in('bias');
          b.biasActivationDropout({ input, bias, out: c.out('out', [rows, H], dtype), mask, activation, p, seed, offset });
          b.biasActivationDropoutBackward({ dOut: c.in('dOut'), input, bias, mask, p, activation, dInput: c.out('dInput', [rows, H], dtype), dBias: c.out('dBias', [H], dtype) });
          return c.results();
        },
      });
    }
  }
  for (const [B, L, heads, d] of [[2, 17, 12, 64], [3, 128, 16, 64], [1, 5, 4, 80]] as const) {
    const hidden = heads * d;
    cases.push({
      name: `biasQkvSplit fwd+bwd ${dtype} B=${B} L=${L} heads=${heads} d=${d}`, dtype,
      inputs: (rng) => ({ qkv: floats(rng, [B, L, 3 * hidden], dtype), bias: floats(rng, [3 * hidden], dtype), dq: floats(rng, [B, heads, L, d], dtype), dk: floats(rng, [B, heads, L, d], dtype), dv: floats(rng, [B, heads, L, d], dtype) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const qScale = 1 / Math.sqrt(d);
        b.biasQkvSplit({ qkv: c.in('qkv'), bias: c.in('bias'), heads, q: c.out('q', [B, heads, L, d], dtype), k: c.out('k', [B, heads, L, d], dtype), v: c.out('v', [B, heads, L, d], dtype), qScale });
        b.biasQkvSplitBackward({ dq: c.in('dq'), dk: c.in('dk'), dv: c.in('dv'), heads, dQkv: c.out('dQkv', [B, L, 3 * hidden], dtype), dBias: c.out('dBias', [3 * hidden], dtype), qScale });
        return c.results();
      },
    });
  }
  return cases;
}

function normCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  // 8500 × 768 and 4300 × 1024: each warp of the staged 16-bit backward (2112 on an H200) takes 5
  // or 3 rows, so its row slots wrap around (4 or 3 slots at H = 768, 2 at H = 1024 with dResidual).
  for (const [rows, H] of [...ROW_SHAPES, [64, 100], [8500, 768], [4300, 1024]] as [number, number][]) {
    const tag = `${dtype} rows=${rows} H=${H}`;
    cases.push({
      name: `layerNorm fwd+bwd ${tag}`, dtype,
      inputs: (rng) => ({ x: floats(rng, [rows, H], dtype, 2, 0.5), gamma: floats(rng, [H], dtype, 0.5, 1), beta: floats(rng, [H], dtype), dOut: floats(rng, [rows, H], dtype), dResidual: floats(rng, [rows, H], dtype) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const x = c.in('x'), gamma = c.in('gamma');
        const mean = c.out('mean', [rows], 'f32'), rstd = c.out('rstd', [rows], 'f32');
        b.layerNormForward({ x, gamma, beta: c.in('beta'), out: c.out('out', [rows, H], dtype), mean, rstd, eps: 1e-5 });
        b.layerNormBackward({ dOut: c.in('dOut'), x, gamma, mean, rstd, dX: c.out('dX', [rows, H], dtype), dGamma: c.out('dGamma', [H], dtype), dBeta: c.out('dBeta', [H], dtype), dResidual: c.in('dResidual') });
        return c.results();
      },
    });
    cases.push({
      name: `rmsNorm fwd+bwd ${tag}`, dtype,
      inputs: (rng) => ({ x: floats(rng, [rows, H], dtype, 2, 0.5), gamma: floats(rng, [H], dtype, 0.5, 1), dOut: floats(rng, [rows, H], dtype) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const x = c.in('x'), gamma = c.in('gamma');
        const rstd = c.out('rstd', [rows], 'f32');
        b.rmsNormForward({ x, gamma, out: c.out('out', [rows, H], dtype), rstd, eps: 1e-6 });
        b.rmsNormBackward({ dOut: c.in('dOut'), x, gamma, rstd, dX: c.out('dX', [rows, H], dtype), dGamma: c.out('dGamma', [H], dtype) });
        return c.results();
      },
    });
  }
  // Accumulating gradients across two calls (dGamma/dBeta += ...).
  cases.push({
    name: `layerNorm bwd accumulate ${dtype} rows=40 H=1024`, dtype,
    inputs: (rng) => ({ x: floats(rng, [40, 1024], dtype), gamma: floats(rng, [1024], dtype, 0.5, 1), beta: floats(rng, [1024], dtype), dOut: floats(rng, [40, 1024], dtype), dGamma: floats(rng, [1024], dtype), dBeta: floats(rng, [1024], dtype) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const x = c.in('x'), gamma = c.in('gamma');
      const mean = c.out('mean', [40], 'f32'), rstd = c.out('rstd', [40], 'f32');
      b.layerNormForward({ x, gamma, beta: c.in('beta'), out: c.out('out', [40, 1024], dtype), mean, rstd, eps: 1e-5 });
      b.layerNormBackward({ dOut: c.in('dOut'), x, gamma, mean, rstd, dX: c.out('dX', [40, 1024], dtype), dGamma: c.keep('dGamma', c.in('dGamma')), dBeta: c.keep('dBeta', c.in('dBeta')), accumulate: true });
      return c.results();
    },
  });
  return cases;
}

function softmaxCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  const shapes: [number, number, number, number, boolean, boolean][] = [
    // B, heads, Lq, Lk, causal, padded
    [2, 3, 7, 7, false, false], [2, 2, 20, 20, true, true], [4, 12, 32, 32, false, true], [2, 4, 64, 64, true, false],
    [2, 3, 100, 257, false, true], [1, 12, 128, 1024, true, false], [1, 2, 4, 4096, false, true], [1, 1, 3, 32768, false, false],
    [2, 2, 1, 77, true, true],
  ];
  for (const [B, H, Lq, Lk, causal, padded] of shapes) {
    cases.push({
      name: `softmax fwd+bwd ${dtype} [${B},${H},${Lq},${Lk}]${causal ? ' causal' : ''}${padded ? ' padded' : ''}`, dtype,
      inputs: (rng) => ({ x: floats(rng, [B, H, Lq, Lk], dtype, 3), dY: floats(rng, [B, H, Lq, Lk], dtype), keyLengths: paddedKeyLengths(rng, B, Lk) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const scale = 0.125;
        const y = c.out('y', [B, H, Lq, Lk], dtype);
        b.softmaxForward({ x: c.in('x'), out: y, scale, causal, ...(padded ? { keyLengths: c.in('keyLengths') } : {}) });
        b.softmaxBackward({ y, dY: c.in('dY'), dX: c.out('dX', [B, H, Lq, Lk], dtype), scale });
        return c.results();
      },
    });
  }
  return cases;
}

/**
 * flashAttentionForward + Backward. lse is −∞ exactly for queries that see no key (causal with
 * Lq > Lk here); those entries are compared bit-exactly as the flag output 'lseMasked' and set to 0
 * in 'lse', so the norm comparison of the rest stays finite.
 */
function attentionCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  const shapes: [number, number, number, number, number, number, boolean, boolean][] = [
    // B, Hq, Hkv, Lq, Lk, d, causal, padded
    [2, 4, 4, 77, 77, 64, false, false], [2, 4, 4, 77, 77, 80, true, true], [1, 8, 2, 129, 129, 128, true, false],
    [1, 8, 2, 129, 129, 64, false, true], [1, 2, 1, 1000, 1000, 64, true, true], [2, 4, 2, 33, 200, 80, false, true],
    [2, 4, 4, 16, 300, 128, true, false], [1, 2, 1, 50, 20, 64, true, false], [3, 2, 2, 1, 77, 96, true, true],
  ];
  for (const [B, Hq, Hkv, Lq, Lk, d, causal, padded] of shapes) {
    cases.push({
      name: `flashAttention fwd+bwd ${dtype} q[${B},${Hq},${Lq},${d}] kv[${B},${Hkv},${Lk},${d}]${causal ? ' causal' : ''}${padded ? ' padded' : ''}`, dtype,
      exact: ['lseMasked'],
      inputs: (rng) => ({
        q: floats(rng, [B, Hq, Lq, d], dtype), k: floats(rng, [B, Hkv, Lk, d], dtype), v: floats(rng, [B, Hkv, Lk, d], dtype),
        dOut: floats(rng, [B, Hq, Lq, d], dtype), keyLengths: paddedKeyLengths(rng, B, Lk),
      }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const options = { causal, ...(padded ? { keyLengths: c.in('keyLengths') } : {}) };
        const q = c.in('q'), k = c.in('k'), v = c.in('v');
        const out = c.out('out', [B, Hq, Lq, d], dtype), lse = c.out('lse', [B, Hq, Lq], 'f32');
        b.flashAttentionForward({ q, k, v, out, lse, ...options });
        b.flashAttentionBackward({
          q, k, v, out, dOut: c.in('dOut'), lse, ...options,
          dq: c.out('dq', [B, Hq, Lq, d], dtype), dk: c.out('dk', [B, Hkv, Lk, d], dtype), dv: c.out('dv', [B, Hkv, Lk, d], dtype),
        });
        const results = c.results();
        const lseValues = Float32Array.from(results.lse!);
        results.lseMasked = Uint8Array.from(lseValues, (x) => (x === -Infinity ? 1 : 0));
        results.lse = lseValues.map((x) => (x === -Infinity ? 0 : x));
        return results;
      },
    });
  }
  return cases;
}

function crossEntropyCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  for (const [rows, V, smoothing] of [[17, 50257, 0], [9, 50257, 0.1], [64, 1000, 0.1], [5, 128256, 0], [33, 30522, 0]] as const) {
    cases.push({
      name: `crossEntropy fwd+bwd ${dtype} rows=${rows} V=${V} smoothing=${smoothing}`, dtype,
      inputs: (rng) => {
        const targets = randomInts(rng, [rows], 0, V);
        (targets.values as Int32Array)[1] = -100; // one ignored row
        return { logits: floats(rng, [rows, V], dtype, 2), targets };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const logits = c.in('logits'), targets = c.in('targets');
        const lse = c.out('lse', [rows], 'f32');
        b.crossEntropyForward({ logits, targets, loss: c.out('loss', [rows], 'f32'), lse, labelSmoothing: smoothing, ignoreIndex: -100 });
        b.crossEntropyBackward({ logits, targets, lse, dLogits: c.out('dLogits', [rows, V], dtype), gradScale: 1 / (rows - 1), labelSmoothing: smoothing, ignoreIndex: -100 });
        return c.results();
      },
    });
  }
  return cases;
}

/**
 * A padded vocabulary (llm.c's padded_vocab_size): logits [rows, Vp], only the first C columns are
 * classes. The padding holds large logits, so any use of it in lse, the smoothing mean or the
 * gradient shows; its gradient must be exactly 0 (compared bit-exactly as 'dLogitsPadding'), also
 * when the backward runs in place over the logits. 'fused' cases give the forward dLogits (LightSeq's
 * fused cross-entropy; Llama's 128256 classes do not fit in shared memory: the two-kernel fallback).
 */
function paddedCrossEntropyCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  const shapes = [
    [17, 50257, 50304, 0, true, false, false], [9, 50257, 50304, 0.1, false, true, false],
    [64, 1001, 1024, 0.1, true, false, false], [33, 1001, 1024, 0, false, true, false],
    [17, 50257, 50304, 0, true, true, true], [9, 50257, 50304, 0.1, false, false, true],
    [64, 1001, 1024, 0.1, true, true, true], [33, 30522, 30522, 0, true, true, true], [5, 128256, 128256, 0, false, true, true],
  ] as const;
  for (const [rows, C, Vp, smoothing, ignore, inPlace, fused] of shapes) {
    const ignoreOption = ignore ? { ignoreIndex: -100 } : {};
    cases.push({
      name: `crossEntropy ${fused ? 'fused' : 'fwd+bwd'} ${dtype} rows=${rows} C=${C} padded to ${Vp} smoothing=${smoothing}${ignore ? ' ignoreIndex' : ''}${inPlace ? ' in place' : ''}`,
      dtype, exact: ['dLogitsPadding'],
      inputs: (rng) => {
        const targets = randomInts(rng, [rows], 0, C);
        const tv = targets.values as Int32Array;
        tv[0] = C - 1; // the last real class
        if (ignore) tv[1] = -100; // one ignored row
        const logits = floats(rng, [rows, Vp], dtype, 2);
        const z = logits.values as Float32Array;
        for (let r = 0; r < rows; r++) for (let j = C; j < Vp; j++) z[r * Vp + j] = 30 + 4 * rng.next();
        return { logits, targets };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const logits = c.in('logits'), targets = c.in('targets');
        const lse = c.out('lse', [rows], 'f32'), loss = c.out('loss', [rows], 'f32');
        const dLogits = inPlace ? c.keep('dLogits', logits) : c.out('dLogits', [rows, Vp], dtype);
        if (fused) {
          b.crossEntropyForward({ logits, targets, loss, lse, labelSmoothing: smoothing, classes: C, ...ignoreOption, dLogits, gradScale: 1 / rows });
        } else {
          b.crossEntropyForward({ logits, targets, loss, lse, labelSmoothing: smoothing, classes: C, ...ignoreOption });
          b.crossEntropyBackward({ logits, targets, lse, dLogits, gradScale: 1 / rows, labelSmoothing: smoothing, classes: C, ...ignoreOption });
        }
        const results = c.results();
        const d = results.dLogits!, padding = new Float32Array(rows * (Vp - C));
        for (let r = 0; r < rows; r++) for (let j = C; j < Vp; j++) padding[r * (Vp - C) + j - C] = d[r * Vp + j]!;
        return { ...results, dLogitsPadding: padding };
      },
    });
  }
  return cases;
}

function embeddingCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  for (const [B, L, V, H, withPositions] of [[2, 9, 8000, 768, true], [4, 33, 1000, 1024, false], [1, 5, 3001, 771, true]] as const) {
    const P = L + 3;
    cases.push({
      name: `embedding fwd+bwd ${dtype} B=${B} L=${L} V=${V} H=${H}${withPositions ? ' +positions' : ''}`, dtype, exact: ['mask'],
      // Atomic accumulation order differs on the GPU; f16/bf16 tables get a looser tolerance.
      tolerance: dtype === 'f32' ? 1e-5 : dtype === 'f16' ? 5e-3 : 3e-2,
      inputs: (rng) => {
        const tokens = randomInts(rng, [B, L], 0, V);
        (tokens.values as Int32Array)[1] = (tokens.values as Int32Array)[0]!; // a repeated token accumulates twice
        return { tokens, tokenTable: floats(rng, [V, H], dtype, 0.02), positionTable: floats(rng, [P, H], dtype, 0.02), dOut: floats(rng, [B, L, H], dtype) };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const tokens = c.in('tokens');
        const mask = c.out('mask', [B, L, H], 'u8');
        const p = 0.1, scale = Math.sqrt(H), positionOffset = 2;
        const common = { tokens, mask, p, scale, positionOffset };
        b.embeddingForward({ ...common, tokenTable: c.in('tokenTable'), ...(withPositions ? { positionTable: c.in('positionTable') } : {}), out: c.out('out', [B, L, H], dtype), seed: 1234n, offset: 99n });
        const dTokenTable = c.out('dTokenTable', [V, H], dtype);
        b.fill(dTokenTable, 0);
        const dPositionTable = withPositions ? c.out('dPositionTable', [P, H], dtype) : undefined;
        if (dPositionTable) b.fill(dPositionTable, 0);
        b.embeddingBackward({ ...common, dOut: c.in('dOut'), dTokenTable, ...(dPositionTable ? { dPositionTable } : {}) });
        return c.results();
      },
    });
  }
  if (dtype !== 'f32') {
    // f32 gradient tables under f16/bf16 rows (nn/embedding-grad.ts): a 50-token vocabulary over 2048
    // positions gives each row ~40 adds, which the f32 tables must sum without 16-bit rounding.
    const [B, L, V, H] = [8, 256, 50, 768];
    cases.push({
      name: `embedding bwd ${dtype} rows, f32 tables B=${B} L=${L} V=${V} H=${H}`, dtype, tolerance: 1e-4,
      inputs: (rng) => ({ tokens: randomInts(rng, [B, L], 0, V), dOut: floats(rng, [B, L, H], dtype) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const mask = c.out('mask', [B, L, H], 'u8');
        b.fill(mask, 1);
        const dTokenTable = c.out('dTokenTable', [V, H], 'f32');
        b.fill(dTokenTable, 0.5);
        const dPositionTable = c.out('dPositionTable', [L, H], 'f32');
        b.fill(dPositionTable, 0);
        b.embeddingBackward({ tokens: c.in('tokens'), dOut: c.in('dOut'), mask, p: 0, scale: 2, dTokenTable, dPositionTable });
        return c.results();
      },
    });
  }
  return cases;
}

function adamCases(dtype: FloatDType): OpCase[] {
  return [1, 1000, 4099, 1 << 20].flatMap((n) => [true, false].map((withMaster): OpCase => ({
    name: `adamW ${dtype} n=${n}${withMaster ? ' master' : ' no-master'}`, dtype,
    inputs: (rng) => ({ params: floats(rng, [n], dtype), grads: floats(rng, [n], dtype, 0.1), m: floats(rng, [n], 'f32', 0.01), v: { values: rng.floats(n, 0.001).map(Math.abs), shape: [n], dtype: 'f32' } }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const params = c.keep('params', c.in('params'));
      const master = withMaster ? c.keep('master', b.empty([n], 'f32')) : undefined;
      if (master) b.copy(params, master);
      b.adamW({ params, grads: c.in('grads'), m: c.keep('m', c.in('m')), v: c.keep('v', c.in('v')), ...(master ? { master } : {}), lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, step: 7, gradScale: 0.5 });
      return c.results();
    },
  })));
}

function adamGraphCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  const adamInputs = (n: number) => (rng: Rng): Inputs => ({
    params: floats(rng, [n], dtype), grads: floats(rng, [n], dtype, 0.1), m: floats(rng, [n], 'f32', 0.01),
    v: { values: rng.floats(n, 0.001).map(Math.abs), shape: [n], dtype: 'f32' },
  });
  const hyper = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 };
  const scalarValues = (lr: number, gradScale: number, step: number): number[] => [lr, gradScale, 1 - hyper.beta1 ** step, 1 - hyper.beta2 ** step];
  for (const n of [4099, 1 << 20]) {
    for (const withMaster of [true, false]) {
      // A captured step replayed twice with new scalars uploaded in between; clipping active (norm ≈ 0.05·√n > maxNorm).
      cases.push({
        name: `adamW ${dtype} n=${n}${withMaster ? ' master' : ' no-master'} device scalars + clip, graph replayed twice`, dtype,
        inputs: adamInputs(n),
        run: (b, inputs) => {
          const c = new CaseContext(b, inputs);
          const params = c.keep('params', c.in('params')), grads = c.in('grads'), m = c.keep('m', c.in('m')), v = c.keep('v', c.in('v'));
          const master = withMaster ? c.keep('master', b.empty([n], 'f32')) : undefined;
          if (master) b.copy(params, master);
          const sumSquares = c.out('sumSquares', [1], 'f32');
          const scalars = b.fromArray(scalarValues(1e-3, 0.5, 1), [4], 'f32');
          b.sumSquares({ x: grads, out: sumSquares }); // sizes the scratch memory, which cannot grow during capture
          const graph = b.captureGraph(() => {
            b.sumSquares({ x: grads, out: sumSquares });
            b.adamW({ params, grads, m, v, ...(master ? { master } : {}), ...hyper, scalars, clip: { sumSquares, maxNorm: 1 } });
          });
          graph.replay();
          b.upload(scalars, scalarValues(2e-3, 0.25, 2));
          graph.replay();
          const results = c.results();
          graph.dispose();
          return results;
        },
      });
    }
  }
  // fp16 overflow: an Inf in the grads makes Σ g² Inf and the whole update is skipped (maxNorm = Inf: no clipping otherwise).
  cases.push({
    name: `adamW ${dtype} n=4099 master clip skips a step with Inf grads`, dtype, exact: ['sumSquares', 'params', 'master', 'm', 'v'],
    inputs: (rng) => {
      const inputs = adamInputs(4099)(rng);
      (inputs.grads!.values as Float32Array)[1234] = Infinity;
      return inputs;
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const params = c.keep('params', c.in('params')), grads = c.in('grads');
      const master = c.keep('master', b.empty([4099], 'f32'));
      b.copy(params, master);
      const sumSquares = c.out('sumSquares', [1], 'f32');
      b.sumSquares({ x: grads, out: sumSquares });
      b.adamW({ params, grads, m: c.keep('m', c.in('m')), v: c.keep('v', c.in('v')), master, ...hyper, lr: 1e-3, step: 3, gradScale: 1 / 1024, clip: { sumSquares, maxNorm: Infinity } });
      return c.results();
    },
  });
  return cases;
}

/** [A, B, C, D] shapes: merging heads, splitting them back, odd D (narrow vectors), a middle dimension of 1. */
const PERMUTE_SHAPES: [number, number, number, number][] = [
  [2, 12, 17, 64], [2, 17, 12, 64], [4, 16, 128, 64], [1, 5, 3, 80], [3, 7, 5, 3], [2, 1, 9, 6], [2, 5, 3, 1], [1, 40, 8, 128],
];

/** Standalone dropout over awkward sizes (not a multiple of 8: partial Philox groups), 4-D attention probabilities, a misaligned view. */
function dropoutCases(dtype: FloatDType): OpCase[] {
  const shapes: [number[], boolean][] = [[[2, 3, 37, 37], false], [[1001], false], [[4, 12, 64, 64], false], [[3, 777], true]];
  // The last case adds a device-side counter base (offsetBase: the graph-replay path).
  return shapes.map(([shape, misaligned], index) => {
    const numel = shape.reduce((a, b) => a * b, 1);
    const withBase = index === shapes.length - 1;
    return {
      name: `dropout ${dtype} [${shape.join(', ')}]${misaligned ? ' misaligned x' : ''}${withBase ? ' offsetBase' : ''}`, dtype, exact: ['mask'],
      inputs: (rng: Rng) => ({
        x: floats(rng, [numel + 1], dtype), rand: randomDropoutSeed(rng),
        base: { values: new Int32Array([Math.floor(rng.next() * 2 ** 31), Math.floor(rng.next() * 1000)]), shape: [2], dtype: 'i32' as const },
      }),
      run: (b: Backend, inputs: Inputs) => {
        const c = new CaseContext(b, inputs);
        const { seed, offset } = dropoutSeed(inputs);
        const x = b.view(c.in('x'), misaligned ? 1 : 0, shape);
        b.dropout({ x, out: c.out('out', shape, dtype), mask: c.out('mask', shape, 'u8'), p: 0.15, seed, offset, ...(withBase ? { offsetBase: c.in('base') } : {}) });
        return c.results();
      },
    };
  });
}

function permuteCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  const permuteCase = (shape: [number, number, number, number], storage: DType, misaligned: boolean): OpCase => {
    const [A, B, C, D] = shape;
    const numel = A * B * C * D;
    return {
      name: `permute0213 ${storage} [${shape.join(', ')}]${misaligned ? ' misaligned x' : ''}`, dtype, exact: ['out'],
      inputs: (rng) => ({ x: storage === 'i32' ? randomInts(rng, [numel + 1], -1 << 30, 1 << 30) : floats(rng, [numel + 1], storage) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const x = b.view(c.in('x'), misaligned ? 1 : 0, shape);
        b.permute0213({ x, out: c.out('out', [A, C, B, D], storage) });
        return c.results();
      },
    };
  };
  for (const shape of PERMUTE_SHAPES) cases.push(permuteCase(shape, dtype, false));
  cases.push(permuteCase([2, 12, 17, 64], dtype, true));
  if (dtype === 'f32') for (const shape of PERMUTE_SHAPES.slice(0, 5)) cases.push(permuteCase(shape, 'i32', false));
  return cases;
}

function sumSquaresCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  for (const shape of [[1], [7], [4099], [3, 1000, 771], [(1 << 22) + 5]]) {
    cases.push({
      name: `sumSquares ${dtype} [${shape.join(', ')}]`, dtype,
      inputs: (rng) => ({ x: floats(rng, shape, dtype) }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.sumSquares({ x: c.in('x'), out: c.out('out', [1], 'f32') });
        return c.results();
      },
    });
  }
  cases.push({
    name: `sumSquares ${dtype} misaligned view, accumulate`, dtype,
    inputs: (rng) => ({ x: floats(rng, [100003], dtype), acc: floats(rng, [1], 'f32', 1, 50) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.sumSquares({ x: b.view(c.in('x'), 1, [100002]), out: c.keep('out', c.in('acc')), accumulate: true });
      return c.results();
    },
  });
  // Large values (f16: their squares are far past the f16 range) and an Inf, which must reach out as +Inf.
  cases.push({
    name: `sumSquares ${dtype} large values and one Inf`, dtype, exact: ['withInf'],
    inputs: (rng) => {
      const x = floats(rng, [5000], dtype, 1e4);
      const withInf = floats(rng, [5000], dtype);
      (withInf.values as Float32Array)[4321] = -Infinity;
      return { x, withInf };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.sumSquares({ x: c.in('x'), out: c.out('out', [1], 'f32') });
      b.sumSquares({ x: c.in('withInf'), out: c.out('withInf', [1], 'f32') });
      return c.results();
    },
  });
  return cases;
}

/**
 * Activations carved from one arena: ops on views (a float view of the case's dtype, an f32 scalar, a u8
 * mask), and a view at a dead buffer's offset with another shape reusing its bytes.
 */
function arenaCases(dtype: FloatDType): OpCase[] {
  const [B, heads, L, d] = [2, 4, 33, 64];
  const numel = B * heads * L * d;
  const align = (bytes: number): number => Math.ceil(bytes / 256) * 256;
  const slot = align(numel * (dtype === 'f32' ? 4 : 2));
  return [{
    name: `arena views ${dtype} [${B}, ${heads}, ${L}, ${d}]`, dtype, exact: ['mask'],
    inputs: (rng) => ({ x: floats(rng, [B, heads, L, d], dtype), bias: floats(rng, [d], dtype), rand: randomDropoutSeed(rng) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const bias = c.in('bias');
      // Byte layout: [0, slot) x then split; [slot, 2·slot) merged; [2·slot, 3·slot) activated; then sum (f32) and mask (u8).
      const arena = b.createArena(3 * slot + 256 + numel);
      try {
        const x = arena.view(0, [B, heads, L, d], dtype);
        const merged = c.keep('merged', arena.view(slot, [B, L, heads, d], dtype));
        const activated = c.keep('activated', arena.view(2 * slot, [B * L, heads * d], dtype));
        const sum = c.keep('sum', arena.view(3 * slot, [1], 'f32'));
        const mask = c.keep('mask', arena.view(3 * slot + 256, [B * L, heads * d], 'u8'));
        for (const t of [merged, activated, sum]) b.fill(t, NaN);
        b.fill(mask, 0xcd);
        b.upload(x, inputs.x!.values);
        b.permute0213({ x, out: merged });
        b.sumSquares({ x: merged, out: sum });
        // x is dead from here: its bytes take the heads split back out, through a view of another shape.
        const split = c.keep('split', arena.view(0, [B * heads, L * d], dtype));
        b.permute0213({ x: merged, out: b.view(split, 0, [B, heads, L, d]) });
        const { seed, offset } = dropoutSeed(inputs);
        const tiled = b.view(merged, 0, [B * L * heads, d]);
        b.biasActivationDropout({ input: tiled, bias, out: b.view(activated, 0, [B * L * heads, d]), mask: b.view(mask, 0, [B * L * heads, d]), activation: 'gelu', p: 0.1, seed, offset });
        return c.results();
      } finally {
        arena.free();
      }
    },
  }];
}

function randomFillCases(dtype: FloatDType): OpCase[] {
  const shapes = [[1], [7], [4099], [257, 771]];
  return shapes.flatMap((shape) => (['uniform', 'normal'] as const).map((distribution): OpCase => ({
    name: `randomFill(${distribution}) ${dtype} [${shape.join(', ')}]`, dtype,
    inputs: (rng) => ({ rand: randomDropoutSeed(rng) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const { seed, offset } = dropoutSeed(inputs);
      const out = c.out('out', shape, dtype);
      if (distribution === 'uniform') b.randomFill({ out, distribution, low: -0.5, high: 2, seed, offset });
      else b.randomFill({ out, distribution, mean: 0.25, std: 0.02, seed, offset });
      return c.results();
    },
  })));
}

export function allOpCases(dtypes: readonly FloatDType[] = FLOAT_DTYPES): OpCase[] {
  return dtypes.flatMap((dtype) => [
    ...elementwiseCases(dtype), ...normCases(dtype), ...softmaxCases(dtype), ...attentionCases(dtype),
    ...crossEntropyCases(dtype), ...paddedCrossEntropyCases(dtype), ...embeddingCases(dtype), ...adamCases(dtype), ...adamGraphCases(dtype), ...randomFillCases(dtype),
    ...permuteCases(dtype), ...dropoutCases(dtype), ...sumSquaresCases(dtype), ...arenaCases(dtype),
  ]);
}
