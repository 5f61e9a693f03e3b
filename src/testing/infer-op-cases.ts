// Op cases of the decode-step ops (embedTokens, qkvRopeAppend, decodeAttention, residualNorm,
// gatedActivation, gatedLinear, tanhActivation, sampleTokens (with argmax slots too), gemm with argmax, tokenProbabilities, speculativeSample, decodeAdvance, feedTokens, gatherColumns, gptqRoundBlock, int4ClipGroups, scaleColumns, maskLogits, biasLogits, normMlp) for the GPU test suite: each runs on CUDA and on the CPU reference with
// the same random inputs, outputs poisoned first (op-cases.ts has the harness). Sampled tokens and the
// sequence state are compared exactly: the same seed must pick the same token on both backends.

import type { Activation, GemmEpilogue, ResidualNormArgs } from '../backend/backend.js';
import { argmaxColumn as columnOf, argmaxValue as valueOf } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { FLOAT_DTYPES } from '../dtype.js';
import type { Inputs, OpCase } from './op-cases.js';
import { CaseContext, floats, ints, randomInts, ropeInvFreq } from './op-cases.js';


function embedTokensCases(dtype: FloatDType): OpCase[] {
  return ([[5, 50, 768, true], [3, 1000, 2048, false], [7, 11, 30, true]] as const).map(([R, V, H, positions]): OpCase => ({
    name: `embedTokens ${dtype} R=${R} V=${V} H=${H}${positions ? ' +positions' : ''}`, dtype,
    inputs: (rng) => ({ tokens: randomInts(rng, [R], 0, V), table: floats(rng, [V, H], dtype), positions: randomInts(rng, [R], 0, 40), posTable: floats(rng, [40, H], dtype) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.embedTokens({ tokens: c.in('tokens'), tokenTable: c.in('table'), out: c.out('out', [R, H], dtype), scale: 1.5, ...(positions ? { positions: c.in('positions'), positionTable: c.in('posTable') } : {}) });
      return c.results();
    },
  }));
}

function qkvRopeAppendCases(dtype: FloatDType): OpCase[] {
  // B, L, Hq, Hkv, d, maxLen, rope, bias, copies (0 none, Hkv or Hq), and a per-head norm (Qwen3's q_norm / k_norm)
  const shapes: [number, number, number, number, number, number, boolean, boolean, 'none' | 'kv' | 'q', boolean?][] = [
    [3, 1, 32, 8, 64, 40, true, false, 'none'], [2, 17, 12, 12, 64, 20, false, true, 'kv'], [2, 9, 8, 2, 128, 16, true, true, 'q'],
    [1, 5, 4, 2, 32, 8, true, false, 'kv'],
    // A prefill long enough for blocks of many heads (qkv-rope-append.ts headsPerBlock), copies repeated and not.
    [2, 200, 8, 2, 128, 256, true, true, 'q'], [1, 130, 12, 12, 64, 160, false, true, 'kv'],
    // The head norm: Qwen3-like decode rows (d 128), a prefill of 4-head blocks whose last block has 2 spare heads,
    // an odd half (d 40: the scalar sum) with a bias and copies.
    [3, 1, 16, 8, 128, 40, true, false, 'none', true], [1, 300, 10, 2, 128, 320, true, false, 'none', true], [2, 7, 6, 2, 40, 12, true, true, 'kv', true],
  ];
  return shapes.map(([B, L, Hq, Hkv, d, maxLen, rope, bias, copies, headNorm]): OpCase => {
    const W = (Hq + 2 * Hkv) * d, copyHeads = copies === 'q' ? Hq : Hkv;
    return {
      name: `qkvRopeAppend ${dtype} B=${B} L=${L} Hq=${Hq} Hkv=${Hkv} d=${d}${rope ? ' rope' : ''}${bias ? ' bias' : ''}${headNorm ? ' headNorm' : ''} copies=${copies}`, dtype,
      inputs: (rng) => {
        // Decode rows (L = 1) at random positions; prefill rows at l (distinct within a sequence).
        const positions = Array.from({ length: B * L }, (_, r) => (L === 1 ? Math.floor(rng.next() * maxLen) : (r % L) + (maxLen - L > 0 ? 1 : 0)));
        return {
          qkv: floats(rng, [B * L, W], dtype), bias: floats(rng, [W], dtype), positions: ints([B * L], positions),
          invFreq: ropeInvFreq(d), qNorm: floats(rng, [d], dtype, 0.5, 1), kNorm: floats(rng, [d], dtype, 0.5, 1),
          kCache: floats(rng, [B, Hkv, maxLen, d], dtype), vCache: floats(rng, [B, Hkv, maxLen, d], dtype),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.qkvRopeAppend({
          qkv: c.in('qkv'), positions: c.in('positions'), q: c.out('q', [B, Hq, L, d], dtype),
          kCache: c.keep('kCache', c.in('kCache')), vCache: c.keep('vCache', c.in('vCache')),
          ...(bias ? { bias: c.in('bias') } : {}), ...(rope ? { rope: { invFreq: c.in('invFreq'), scale: 1.25 } } : {}),
          ...(headNorm ? { headNorm: { q: c.in('qNorm'), k: c.in('kNorm'), eps: 1e-6 } } : {}),
          ...(copies !== 'none' ? { kOut: c.out('kOut', [B, copyHeads, L, d], dtype), vOut: c.out('vOut', [B, copyHeads, L, d], dtype) } : {}),
        });
        return c.results();
      },
    };
  });
}

function decodeAttentionCases(dtype: FloatDType): OpCase[] {
  // B, Hq, Hkv, d, maxLen, splits, and H for the O projection (project: GPT-2's, unsplit and split), and an INT4
  // O weight's group size (Llama 3.2 1B's heads, unsplit and split; GPT-2's at group 64)
  const shapes: [number, number, number, number, number, number, number?, number?][] = [
    [4, 32, 8, 64, 300, 1], [4, 32, 8, 64, 300, 4], [2, 12, 12, 64, 160, 1], [1, 32, 8, 128, 2100, 8], [3, 16, 1, 64, 77, 3],
    [2, 4, 4, 80, 50, 2], [2, 64, 8, 128, 33, 1], [3, 12, 12, 64, 160, 1, 768], [2, 12, 12, 64, 300, 3, 768],
    [1, 32, 8, 64, 90, 1, 2048, 128], [2, 32, 8, 64, 600, 4, 2048, 32], [3, 12, 12, 64, 160, 1, 768, 64],
  ];
  // freshKeys (which keys the GPU may read before the previous op ends) varies by case: it must not change the result.
  return shapes.map(([B, Hq, Hkv, d, maxLen, splits, H, int4Group], i): OpCase => ({
    name: `decodeAttention ${dtype} B=${B} Hq=${Hq} Hkv=${Hkv} d=${d} maxLen=${maxLen} splits=${splits} fresh=${[0, 1, 7][i % 3]}${projectionLabel(H, int4Group)}`, dtype,
    inputs: (rng) => {
      const positions = Array.from({ length: B }, (_, b) => (b === 0 ? maxLen - 1 : b === 1 ? 0 : Math.floor(rng.next() * maxLen)));
      return {
        q: floats(rng, [B, Hq, d], dtype), k: floats(rng, [B, Hkv, maxLen, d], dtype), v: floats(rng, [B, Hkv, maxLen, d], dtype),
        positions: ints([B], positions), ...(H ? projectionInputs(rng, dtype, B, H, Hq * d, int4Group) : {}),
      };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.decodeAttention({
        q: c.in('q'), kCache: c.in('k'), vCache: c.in('v'), positions: c.in('positions'), out: c.out('out', [B, Hq, d], dtype),
        ...(splits > 1 ? { partials: b.empty([B, Hq, splits, d + 2], 'f32') } : {}), freshKeys: [0, 1, 7][i % 3]!, ...(H ? { project: projection(c, int4Group) } : {}),
      });
      return c.results();
    },
  }));
}

/** A case name's part for an O projection to H (with an INT4 weight of group size int4Group). */
function projectionLabel(H: number | undefined, int4Group: number | undefined): string {
  return H ? ` project H=${H}${int4Group ? ` int4 G=${int4Group}` : ''}` : '';
}

/**
 * decodeAttention's project inputs: the O weight [H, width] (int4Group: packed words of any bits, positive
 * f16 scales, zeros 0–15, so w = scale·(q − zero) spans ±15 scales of about 1/√width each), the accumulator's
 * starting values, a zero target.
 */
function projectionInputs(rng: Parameters<typeof floats>[0], dtype: FloatDType, B: number, H: number, width: number, int4Group?: number): Inputs {
  const weight: Inputs = int4Group
    ? {
      woQ: randomInts(rng, [H, width / 8], -(2 ** 31), 2 ** 31),
      woScales: floats(rng, [H, width / int4Group], 'f16', 0.02 / Math.sqrt(width), 0.1 / Math.sqrt(width)),
      woZeros: { values: Uint8Array.from(rng.ints(H * (width / int4Group), 0, 16)), shape: [H, width / int4Group], dtype: 'u8' as const },
    }
    : { wo: floats(rng, [H, width], dtype, 1 / Math.sqrt(width)) };
  return { ...weight, acc: floats(rng, [B, H], 'f32'), zero: floats(rng, [4, H], 'f32') };
}

/** The projection of a case with projectionInputs: the accumulator and zero target kept as outputs (added to, cleared). */
function projection(c: CaseContext, int4Group?: number) {
  const weight = int4Group ? { qweight: c.in('woQ'), scales: c.in('woScales'), zeros: c.in('woZeros'), groupSize: int4Group } : c.in('wo');
  return { weight, out: c.keep('acc', c.in('acc')), zero: c.keep('zero', c.in('zero')) };
}

/**
 * appendDecodeAttention: fused on CUDA where decode attention's pipelined variant takes the rows (d 64 at
 * 16 bit, d 32 at f32; d 128 at 16 bit on tensor cores), head norms included, else qkvRopeAppend + decodeAttention. Positions include 0 (the new key is the only
 * one) and maxLen − 1; the caches (updated in place) and out are checked, q is scratch.
 */
function appendDecodeAttentionCases(dtype: FloatDType): OpCase[] {
  // B, Hq, Hkv, d, maxLen, splits, rope, bias
  // ... and H for the O projection (project: GPT-2's at batch 1 and 3, split at 3), a per-head norm (the two ops on CUDA),
  // and an INT4 O weight's group size (Llama 3.2 1B's heads at batch 1 and 4, GPT-2's at batch 3)
  const shapes: [number, number, number, number, number, number, boolean, boolean, number?, boolean?, number?][] = [
    [1, 32, 8, 64, 160, 1, true, false], [4, 32, 8, 64, 300, 4, true, false], [2, 12, 12, 64, 100, 1, false, true],
    [3, 64, 2, 64, 200, 3, true, true], [3, 8, 2, 32, 70, 2, true, true], [2, 8, 2, 128, 50, 1, true, false], [5, 4, 4, 64, 9, 2, false, false],
    [1, 12, 12, 64, 160, 1, false, true, 768], [3, 12, 12, 64, 300, 3, false, true, 768], [2, 16, 8, 128, 50, 1, true, false, undefined, true],
    [3, 8, 2, 64, 70, 2, true, false, undefined, true], [3, 8, 2, 32, 70, 2, true, true, undefined, true], [1, 16, 8, 128, 300, 1, true, false, undefined, true],
    [1, 32, 8, 64, 160, 1, true, false, 2048, false, 128], [4, 32, 8, 64, 100, 1, true, false, 2048, false, 64], [3, 12, 12, 64, 160, 1, false, true, 768, false, 32],
  ];
  return shapes.map(([B, Hq, Hkv, d, maxLen, splits, rope, bias, H, headNorm, int4Group]): OpCase => {
    const W = (Hq + 2 * Hkv) * d;
    return {
      name: `appendDecodeAttention ${dtype} B=${B} Hq=${Hq} Hkv=${Hkv} d=${d} maxLen=${maxLen} splits=${splits}${rope ? ' rope' : ''}${bias ? ' bias' : ''}${headNorm ? ' headNorm' : ''}${projectionLabel(H, int4Group)}`, dtype,
      inputs: (rng) => ({
        qkv: floats(rng, [B, W], dtype), bias: floats(rng, [W], dtype), invFreq: ropeInvFreq(d),
        qNorm: floats(rng, [d], dtype, 0.5, 1), kNorm: floats(rng, [d], dtype, 0.5, 1),
        kCache: floats(rng, [B, Hkv, maxLen, d], dtype), vCache: floats(rng, [B, Hkv, maxLen, d], dtype),
        positions: ints([B], Array.from({ length: B }, (_, b) => (b === 0 ? maxLen - 1 : b === 1 ? 0 : Math.floor(rng.next() * maxLen)))),
        ...(H ? projectionInputs(rng, dtype, B, H, Hq * d, int4Group) : {}),
      }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.appendDecodeAttention({
          qkv: c.in('qkv'), positions: c.in('positions'), q: b.empty([B, Hq, d], dtype),
          kCache: c.keep('kCache', c.in('kCache')), vCache: c.keep('vCache', c.in('vCache')), out: c.out('out', [B, Hq, d], dtype),
          ...(bias ? { bias: c.in('bias') } : {}), ...(rope ? { rope: { invFreq: c.in('invFreq'), scale: 1.25 } } : {}),
          ...(headNorm ? { headNorm: { q: c.in('qNorm'), k: c.in('kNorm'), eps: 1e-6 } } : {}),
          ...(splits > 1 ? { partials: b.empty([B, Hq, splits, d + 2], 'f32') } : {}), ...(H ? { project: projection(c, int4Group) } : {}),
        });
        return c.results();
      },
    };
  });
}

/** A residualNorm case: rows, H, norm, residual, bias, and 'f32' for an f32 y (16-bit x only). */
type ResidualNormShape = readonly [number, number, 'layer' | 'rms', boolean, boolean, ('f32' | undefined)?];

function residualNormCases(dtype: FloatDType): OpCase[] {
  // An f32 y beside bf16 x (the f32 accumulator a fused MLP leaves): GPT-2's norm with its bias, Llama's.
  const f32Y: readonly ResidualNormShape[] = [[1, 768, 'layer', true, true, 'f32'], [3, 768, 'layer', true, true, 'f32'], [1, 2048, 'rms', true, false, 'f32'], [3, 2048, 'rms', true, false, 'f32']];
  const shapes: readonly ResidualNormShape[] = [
    [3, 768, 'layer', true, true], [512, 768, 'layer', true, true], [33, 2048, 'rms', true, false], [2, 4096, 'rms', false, false],
    [5, 130, 'rms', true, false], [4, 1024, 'layer', false, false], [2, 8192, 'rms', true, false], ...(dtype === 'bf16' ? f32Y : []),
  ];
  return shapes.map(([rows, H, norm, residual, bias, yDType]): OpCase => ({
    name: `residualNorm ${norm} ${dtype} rows=${rows} H=${H}${residual ? ` +y${yDType ? ` ${yDType}` : ''}` : ''}${bias ? ' +bias' : ''}`, dtype,
    inputs: (rng) => ({ x: floats(rng, [rows, H], dtype, 2, 0.5), y: floats(rng, [rows, H], yDType ?? dtype), bias: floats(rng, [H], dtype), gamma: floats(rng, [H], dtype, 0.5, 1), beta: floats(rng, [H], dtype) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.residualNorm({
        x: c.keep('x', c.in('x')), norm, gamma: c.in('gamma'), out: c.out('out', [rows, H], dtype), eps: 1e-5,
        ...(norm === 'layer' ? { beta: c.in('beta') } : {}), ...(residual ? { y: c.in('y') } : {}), ...(bias ? { bias: c.in('bias') } : {}),
      });
      return c.results();
    },
  }));
}

/** A normLinear case: rows, H, norm, residual, residual bias, product ([N, epilogue] or gated F), and 'f32' for an f32 y (16-bit x only). */
export type NormLinearShape = readonly [number, number, 'layer' | 'rms', boolean, boolean, { N: number; epilogue: GemmEpilogue } | { F: number; activation: Activation }, ('f32' | undefined)?];

const NORM_LINEAR_SHAPES: readonly NormLinearShape[] = [
  [1, 2048, 'rms', true, false, { N: 3072, epilogue: 'none' }], [4, 2048, 'rms', true, false, { F: 1024, activation: 'silu' }],
  [1, 768, 'layer', false, false, { N: 2304, epilogue: 'bias' }], [3, 768, 'layer', true, true, { N: 3072, epilogue: 'gelu_bias' }],
  [2, 136, 'layer', true, true, { F: 77, activation: 'relu' }], [6, 256, 'rms', true, false, { N: 130, epilogue: 'none' }],
  [1, 768, 'layer', true, true, { N: 2304, epilogue: 'none' }],  // GPT-2's QKV at batch 1
  // An f32 y (the f32 accumulator a fused MLP leaves; bf16 x only): GPT-2's QKV, Llama's, at batch 1 and 4.
  [1, 768, 'layer', true, true, { N: 2304, epilogue: 'bias' }, 'f32'], [4, 768, 'layer', true, true, { N: 2304, epilogue: 'bias' }, 'f32'],
  [1, 2048, 'rms', true, false, { N: 3072, epilogue: 'none' }, 'f32'], [4, 2048, 'rms', true, false, { N: 3072, epilogue: 'none' }, 'f32'],
];

/**
 * normLinear at decode and prefill row counts: 1–4 rows take the GEMV with the norm in its prologue
 * where CudaBackend.normGemv is on (x, h and the product all checked), the rest residualNorm + the product
 * (default shapes, or `shapes`).
 */
export function normLinearCases(dtype: FloatDType, shapes: readonly NormLinearShape[] = NORM_LINEAR_SHAPES): OpCase[] {
  return shapes.filter((s) => s[6] === undefined || dtype === 'bf16').map(([rows, H, norm, residual, bias, product, yDType]): OpCase => {
    const gated = 'F' in product, N = gated ? 2 * product.F : product.N;
    const what = gated ? `gated(${product.activation}) F=${product.F}` : `N=${product.N} ${product.epilogue}`;
    return {
      name: `normLinear ${norm} ${dtype} rows=${rows} H=${H}${residual ? ` +y${yDType ? ` ${yDType}` : ''}` : ''}${bias ? ' +bias' : ''} → ${what}`, dtype,
      inputs: (rng) => ({
        x: floats(rng, [rows, H], dtype, 2, 0.5), y: floats(rng, [rows, H], yDType ?? dtype), rbias: floats(rng, [H], dtype), gamma: floats(rng, [H], dtype, 0.5, 1),
        beta: floats(rng, [H], dtype), weight: floats(rng, [N, H], dtype, 2 / Math.sqrt(H)), bias: floats(rng, [N], dtype, 0.5),
      }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        const normArgs: ResidualNormArgs = {
          x: c.keep('x', c.in('x')), norm, gamma: c.in('gamma'), out: c.out('h', [rows, H], dtype), eps: 1e-5,
          ...(norm === 'layer' ? { beta: c.in('beta') } : {}), ...(residual ? { y: c.in('y') } : {}), ...(bias ? { bias: c.in('rbias') } : {}),
        };
        if ('F' in product) {
          b.normLinear({ norm: normArgs, linear: { kind: 'gated', weight: c.in('weight'), up: b.empty([rows, N], dtype), out: c.out('out', [rows, product.F], dtype), activation: product.activation } });
        } else {
          const withBias = product.epilogue !== 'none';
          b.normLinear({ norm: normArgs, linear: { kind: 'gemm', b: c.in('weight'), out: c.out('out', [rows, N], dtype), epilogue: product.epilogue, ...(withBias ? { bias: c.in('bias') } : {}) } });
        }
        return c.results();
      },
    };
  });
}

function gatedActivationCases(dtype: FloatDType): OpCase[] {
  return ([[5, 8192, 'silu'], [64, 384, 'gelu'], [3, 33, 'silu'], [7, 3072, 'gelu_tanh'], [2, 100, 'relu']] as [number, number, Activation][]).map(([rows, F, activation]): OpCase => ({
    name: `gatedActivation(${activation}) ${dtype} rows=${rows} F=${F}`, dtype,
    inputs: (rng) => ({ x: floats(rng, [rows, 2 * F], dtype, 2) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.gatedActivation({ x: c.in('x'), out: c.out('out', [rows, F], dtype), activation });
      return c.results();
    },
  }));
}

/**
 * gatedLinear at decode and prefill row counts: 1–4 rows take the gated GEMV where CudaBackend.decodeGemv
 * is on; 6 rows and K = 130 (not a multiple of 8) take cuBLASLt + gatedActivation either way.
 */
const GATED_LINEAR_SHAPES: readonly [number, number, number, Activation, boolean][] = [
  [1, 512, 768, 'silu', false], [3, 256, 384, 'gelu_tanh', true], [4, 136, 100, 'relu', true], [2, 1024, 257, 'silu', true], [6, 128, 96, 'silu', false], [2, 130, 64, 'gelu', false],
];

/** gatedLinear at 5–33 rows (kernels/gemv-mma.ts's gated kernel up to 32, with a partial row tile; then its cuBLASLt fallback). */
export const MMA_GATED_LINEAR_SHAPES: readonly [number, number, number, Activation, boolean][] = [
  [5, 2048, 1000, 'silu', false], [8, 768, 3072, 'gelu_tanh', true], [17, 512, 257, 'silu', true], [32, 2048, 2048, 'silu', false], [33, 256, 96, 'relu', true], [12, 100, 64, 'silu', false],
];

/** gatedLinear at decode's few rows and their fallbacks (default), or `shapes` [rows, K, F, activation, bias]. */
export function gatedLinearCases(dtype: FloatDType, shapes: readonly [number, number, number, Activation, boolean][] = GATED_LINEAR_SHAPES): OpCase[] {
  return shapes.map(([rows, K, F, activation, bias]): OpCase => ({
    name: `gatedLinear(${activation}) ${dtype} rows=${rows} K=${K} F=${F}${bias ? ' +bias' : ''}`, dtype,
    inputs: (rng) => ({ x: floats(rng, [rows, K], dtype, 1), weight: floats(rng, [2 * F, K], dtype, 2 / Math.sqrt(K)), bias: floats(rng, [2 * F], dtype, 0.5) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.gatedLinear({
        x: c.in('x'), weight: c.in('weight'), up: b.empty([rows, 2 * F], dtype), out: c.out('out', [rows, F], dtype), activation,
        ...(bias ? { bias: c.in('bias') } : {}),
      });
      return c.results();
    },
  }));
}

function tanhActivationCases(dtype: FloatDType): OpCase[] {
  // rows, H, bias, in place (out aliases x)
  return ([[8, 768, true, false], [3, 1024, false, false], [5, 33, true, true]] as const).map(([rows, H, bias, inPlace]): OpCase => ({
    name: `tanhActivation ${dtype} rows=${rows} H=${H}${bias ? ' +bias' : ''}${inPlace ? ' in place' : ''}`, dtype,
    inputs: (rng) => ({ x: floats(rng, [rows, H], dtype, 3), bias: floats(rng, [H], dtype) }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const x = inPlace ? c.keep('x', c.in('x')) : c.in('x');
      b.tanhActivation({ x, out: inPlace ? x : c.out('out', [rows, H], dtype), ...(bias ? { bias: c.in('bias') } : {}) });
      return c.results();
    },
  }));
}

/** Rows with every sampling mode: greedy, penalty, T, T + top-k, T + top-p, all together, a finished row. */
const SAMPLING_ROWS: readonly (readonly [number, number, number, number, number])[] = [
  // temperature, topK, topP, penalty, finished
  [0, 0, 1, 1, 0], [0, 0, 1, 1.3, 0], [1, 0, 1, 1, 0], [0.7, 40, 1, 1, 0], [1.2, 0, 0.9, 1, 0], [0.8, 50, 0.95, 1.2, 0],
  [1, 1, 1, 1, 0], [1, 0, 1, 1, 1],
];

function sampleTokensCases(dtype: FloatDType): OpCase[] {
  // 40 rows of Llama's vocabulary: with FUSEFORMER_SAMPLE_WAVE=1 on 132 SMs, 3 splits a row (an odd slice).
  // The last case's rows are peaked (logits spread ±40, a trained model's range): most tokens then fall below
  // the best score by more than any Gumbel noise, and the draw skips them (draw_vector).
  // 32000 (Llama 2, Mistral: 4000 16-bit vectors a row) and 40 rows of GPT-2's take 4-block clusters with
  // sampleTokensClusterFour (sample-tokens-cluster.ts; the default, FUSEFORMER_SAMPLE_CLUSTER_FOUR=0 turns it off), the one-block kernel without.
  return ([[50257, 50304, 16, 3], [1003, 1024, 16, 3], [128256, 128256, 16, 3], [300, 300, 16, 3], [128256, 128256, 40, 3], [50257, 50304, 16, 40], [32000, 32000, 8, 3], [50257, 50304, 40, 3]] as const).map(([V, Vp, B, spread]): OpCase => {
    const maxLen = 64;
    return {
      name: `sampleTokens ${dtype} V=${V} Vp=${Vp} B=${B}${spread > 3 ? ' peaked' : ''}`, dtype, exact: ['history', 'tokens', 'positions', 'finished'],
      inputs: (rng) => {
        const rows = Array.from({ length: B }, (_, b) => SAMPLING_ROWS[b % SAMPLING_ROWS.length]!);
        const positions = Array.from({ length: B }, () => Math.floor(rng.next() * (maxLen - 2)));
        return {
          logits: floats(rng, [B, Vp], dtype, spread),
          params: { values: Float32Array.from(rows.flatMap(([t, k, p, r]) => [t, k, p, r])), shape: [B, 4], dtype: 'f32' },
          seeds: randomInts(rng, [B, 2], -(2 ** 31), 2 ** 31 - 1), positions: ints([B], positions),
          history: randomInts(rng, [B, maxLen], 0, V), finished: ints([B], rows.map((r) => r[4])),
          limits: ints([B], positions.map((p, b) => (b % 5 === 4 ? p + 2 : maxLen))), stopIds: ints([3], [-1, 7, V - 1]),
          tokens: randomInts(rng, [B], 0, V),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.sampleTokens({
          logits: c.in('logits'), classes: V, params: c.in('params'), seeds: c.in('seeds'), positions: c.keep('positions', c.in('positions')),
          history: c.keep('history', c.in('history')), tokens: c.keep('tokens', c.in('tokens')), finished: c.keep('finished', c.in('finished')),
          limits: c.in('limits'), stopIds: c.in('stopIds'),
        });
        return c.results();
      },
    };
  });
}

/**
 * gemm with argmax (an LM head forming each row's greedy pick, RowArgmax): row m's winner column planted (its
 * weight row a multiple of a[m], far above the rest), row 0's also copied to a lower column (an exact tie: the
 * lower wins), a larger value planted past `classes` (padding: ignored); the slots start at a value every row
 * beats (a −∞ at column 0) but the last row's, which starts higher than anything and stays.
 */
function gemmArgmaxCases(dtype: FloatDType): OpCase[] {
  // rows, N, classes, K
  return ([[1, 4104, 4100, 768], [3, 1030, 1000, 256], [4, 136, 131, 64], [2, 520, 517, 2048]] as const).map(([M, N, classes, K]): OpCase => ({
    name: `gemm argmax ${dtype} M=${M} N=${N} classes=${classes} K=${K}`, dtype, exact: ['argmaxColumn'],
    inputs: (rng) => {
      const a = floats(rng, [M, K], dtype), w = floats(rng, [N, K], dtype, 0.05);
      const span = Math.floor((classes - 8) / M), winners = Array.from({ length: M }, (_, m) => 7 + m * span + Math.floor(rng.next() * span));
      const wv = w.values as Float32Array, av = a.values as Float32Array;
      const plant = (row: number, m: number, scale: number) => { for (let k = 0; k < K; k++) wv[row * K + k] = av[m * K + k]! * scale; };
      winners.forEach((c, m) => plant(c, m, 0.5));
      plant(Math.min(2, winners[0]! - 1), 0, 0.5);                  // row 0's tie, at a lower column
      for (let m = 0; m < M; m++) plant(classes + (m % (N - classes)), m, 0.9);  // padding: never counted
      const slots = Array.from({ length: M }, (_, m) => (m === M - 1 && M > 1 ? [0x7fffffff, -1] : [-1, 0x007fffff])).flat();
      return { a, w, argmax: ints([M, 2], slots) };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.gemm({ a: c.in('a'), b: c.in('w'), out: c.out('out', [M, N], dtype), transB: true, argmax: { out: c.keep('argmax', c.in('argmax')), classes } });
      // The packed words as their columns (exact) and values (compared as floats: f32 sums round apart in the last bit).
      const { argmax, ...rest } = c.results(), words = argmax as Int32Array;
      const argmaxColumn = Int32Array.from({ length: M }, (_, m) => columnOf(words[2 * m]!, words[2 * m + 1]!) ?? -1);
      const argmaxValue = Float32Array.from({ length: M }, (_, m) => valueOf(words[2 * m + 1]!));
      return { ...rest, argmaxColumn, argmaxValue };
    },
  }));
}

/**
 * sampleTokens with argmax slots: greedy rows without a penalty take the packed column (here not the logits'
 * argmax, so a backend that walked the row would be caught), a greedy row with an empty slot walks its row,
 * every other mode ignores its slot; every slot ends zeroed.
 */
function sampleTokensArgmaxCases(dtype: FloatDType): OpCase[] {
  return ([[50257, 50304, 16], [300, 300, 9]] as const).map(([V, Vp, B]): OpCase => {
    const maxLen = 64;
    return {
      name: `sampleTokens argmax ${dtype} V=${V} Vp=${Vp} B=${B}`, dtype, exact: ['history', 'tokens', 'positions', 'finished', 'argmax'],
      inputs: (rng) => {
        const rows = Array.from({ length: B }, (_, b) => SAMPLING_ROWS[b % SAMPLING_ROWS.length]!);
        const positions = Array.from({ length: B }, () => Math.floor(rng.next() * (maxLen - 2)));
        // Row b's slot: column (b·37) mod V packed with a key; row 8 (greedy, no penalty) empty.
        const slots = Array.from({ length: B }, (_, b) => (b === 8 ? [0, 0] : [(0xffffffff - ((b * 37) % V)) | 0, 0x90000000 | 0])).flat();
        return {
          logits: floats(rng, [B, Vp], dtype, 3),
          params: { values: Float32Array.from(rows.flatMap(([t, k, p, r]) => [t, k, p, r])), shape: [B, 4], dtype: 'f32' },
          seeds: randomInts(rng, [B, 2], -(2 ** 31), 2 ** 31 - 1), positions: ints([B], positions),
          history: randomInts(rng, [B, maxLen], 0, V), finished: ints([B], rows.map((r) => r[4])),
          limits: ints([B], positions.map(() => maxLen)), stopIds: ints([3], [-1, 7, V - 1]),
          tokens: randomInts(rng, [B], 0, V), argmax: ints([B, 2], slots),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.sampleTokens({
          logits: c.in('logits'), classes: V, params: c.in('params'), seeds: c.in('seeds'), positions: c.keep('positions', c.in('positions')),
          history: c.keep('history', c.in('history')), tokens: c.keep('tokens', c.in('tokens')), finished: c.keep('finished', c.in('finished')),
          limits: c.in('limits'), stopIds: c.in('stopIds'), argmax: c.keep('argmax', c.in('argmax')),
        });
        return c.results();
      },
    };
  });
}

/**
 * tokenProbabilities over the penalty-free sampling modes (greedy, T, T + top-k, T + top-p, both, top-k 1):
 * every other row's token is made likely (its logit raised by 5, so it is kept and its probability large),
 * the rest are random tokens, mostly outside a top-k set (probability 0) or tiny.
 */
function tokenProbabilitiesCases(dtype: FloatDType): OpCase[] {
  const modes = SAMPLING_ROWS.filter(([, , , penalty, finished]) => penalty === 1 && finished === 0);
  return ([[50257, 50304], [1003, 1024], [300, 300]] as const).map(([V, Vp]): OpCase => {
    const R = modes.length * 2;
    return {
      name: `tokenProbabilities ${dtype} V=${V} Vp=${Vp} R=${R}`, dtype, tolerance: 1e-4,
      inputs: (rng) => {
        const logits = floats(rng, [R, Vp], dtype, 3), tokens = randomInts(rng, [R], 0, V);
        for (let r = 0; r < R; r += 2) logits.values[r * Vp + tokens.values[r]!]! += 5;
        return {
          logits, tokens,
          params: { values: Float32Array.from(Array.from({ length: R }, (_, r) => modes[r % modes.length]!).flatMap(([t, k, p, ρ]) => [t, k, p, ρ])), shape: [R, 4], dtype: 'f32' },
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.tokenProbabilities({ logits: c.in('logits'), classes: V, params: c.in('params'), tokens: c.in('tokens'), out: c.out('out', [R], 'f32') });
        return c.results();
      },
    };
  });
}

/**
 * speculativeSample over the penalty-free sampling modes, with a draft (the residual draw) and without
 * (the bonus): the draft rows are drawn independently of the target's (a residual with mass), except the
 * last row's, a copy of its target row (no mass: the draw falls back to p).
 */
function speculativeSampleCases(dtype: FloatDType): OpCase[] {
  const modes = SAMPLING_ROWS.filter(([, , , penalty, finished]) => penalty === 1 && finished === 0);
  return ([[50257, 50304, true], [1003, 1024, true], [300, 300, false], [128256, 128256, true]] as const).map(([V, Vp, withDraft]): OpCase => {
    const R = modes.length + 1;
    return {
      name: `speculativeSample ${dtype} V=${V} Vp=${Vp} R=${R} ${withDraft ? 'residual' : 'bonus'}`, dtype, exact: ['out'],
      inputs: (rng) => {
        const target = floats(rng, [R, Vp], dtype, 3), draft = floats(rng, [R, Vp], dtype, 3);
        draft.values.set(target.values.subarray((R - 1) * Vp, R * Vp), (R - 1) * Vp);
        return {
          target, draft,
          // Every mode once, then the copied row's: temperature 1.
          params: { values: Float32Array.from([...modes.map(([t, k, p, ρ]) => [t, k, p, ρ]), [1, 0, 1, 1]].flat()), shape: [R, 4], dtype: 'f32' },
          seeds: randomInts(rng, [R, 2], -(2 ** 31), 2 ** 31 - 1), positions: randomInts(rng, [R], 0, 4096),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.speculativeSample({
          target: c.in('target'), ...(withDraft ? { draft: c.in('draft') } : {}), classes: V, params: c.in('params'), seeds: c.in('seeds'),
          positions: c.in('positions'), out: c.out('out', [R], 'i32'),
        });
        return c.results();
      },
    };
  });
}

/** decodeAdvance over rows with idle ones (cache position −1) among them, the record at a few counter values (one past its steps). */
function decodeAdvanceCases(): OpCase[] {
  return ([[5, 8, 4, 1], [37, 40, 8, 7], [300, 512, 3, 3]] as const).map(([rows, width, steps, counter]): OpCase => ({
    name: `decodeAdvance rows=${rows} width=${width} steps=${steps} step=${counter}`, dtype: 'f32',
    exact: ['tokens', 'positions', 'cachePositions', 'record', 'step'],
    inputs: (rng) => {
      const cache = randomInts(rng, [rows], 0, 1000);
      for (let r = 0; r < rows; r += 3) cache.values[r] = -1;  // idle rows
      return {
        sampled: randomInts(rng, [rows + 2], 0, 50000), tokens: randomInts(rng, [rows], 0, 50000), positions: randomInts(rng, [rows], 0, 1000),
        cachePositions: cache, record: randomInts(rng, [steps, width], 0, 50000), step: ints([1], [counter]),
      };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.decodeAdvance({
        sampled: c.in('sampled'), tokens: c.keep('tokens', c.in('tokens')), positions: c.keep('positions', c.in('positions')), cachePositions: c.keep('cachePositions', c.in('cachePositions')),
        record: c.keep('record', c.in('record')), step: c.keep('step', c.in('step')),
      });
      return c.results();
    },
  }));
}

/** feedTokens over a serving step's rows: some fed from sampled rows (repeats among them), the rest keeping their tokens. */
function feedTokensCases(): OpCase[] {
  return ([[5, 3], [300, 64], [2304, 512]] as const).map(([rows, n]): OpCase => ({
    name: `feedTokens rows=${rows} sampled=${n}`, dtype: 'f32',
    exact: ['tokens'],
    inputs: (rng) => {
      const from = randomInts(rng, [rows], -1, n);
      for (let r = 0; r < rows; r += 2) from.values[r] = -1;  // rows the host wrote
      return { sampled: randomInts(rng, [n], 0, 50000), from, tokens: randomInts(rng, [rows], 0, 50000) };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.feedTokens({ sampled: c.in('sampled'), from: c.in('from'), tokens: c.keep('tokens', c.in('tokens')) });
      return c.results();
    },
  }));
}

/** gatherColumns: an act-order product's input (a permutation of K columns), and a gather with repeats to fewer columns; awkward widths. */
function gatherColumnsCases(dtype: FloatDType): OpCase[] {
  return ([[1, 4096, 'permutation'], [17, 2048, 'permutation'], [3, 257, 'repeats']] as const).map(([rows, K, kind]): OpCase => ({
    name: `gatherColumns ${dtype} rows=${rows} K=${K} ${kind}`, dtype,
    exact: ['out'],
    inputs: (rng) => {
      const C = kind === 'permutation' ? K : 100;
      const index = randomInts(rng, [C], 0, K);
      if (kind === 'permutation') index.values.set(rng.permutation(K));
      return { x: floats(rng, [rows, K], dtype), index };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.gatherColumns({ x: c.in('x'), index: c.in('index'), out: c.out('out', [rows, (inputs['index']!.shape[0]!)], dtype) });
      return c.results();
    },
  }));
}

/**
 * gptqRoundBlock: blocks of 128 columns (G 128 and 32), 64 (G 64) and 256 (G 128) over row counts that are
 * not multiples of the kernel's 64-row blocks; U upper-triangular with a diagonal in [0.5, 1.5). Compared by
 * norm (the CPU's f64 product rounded once may differ from the GPU's fused multiply-add in the last bit).
 */
function gptqRoundBlockCases(): OpCase[] {
  return ([[128, 1000, 128], [128, 77, 32], [64, 4099, 64], [256, 300, 128]] as const).map(([width, N, G]): OpCase => ({
    name: `gptqRoundBlock width=${width} N=${N} G=${G}`, dtype: 'f32',
    tolerance: 1e-3,
    inputs: (rng) => {
      const u = floats(rng, [width, width], 'f32', 0.05);
      for (let i = 0; i < width; i++) {
        for (let j = 0; j < i; j++) u.values[i * width + j] = 0;
        u.values[i * width + i] = 0.5 + rng.next();
      }
      return { weights: floats(rng, [width, N], 'f32', 0.05), u };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.gptqRoundBlock({
        weights: c.keep('weights', c.in('weights')), u: c.in('u'), groupSize: G,
        q: c.out('q', [N, width], 'u8'), scales: c.out('scales', [N, width / G], 'f32'), zeros: c.out('zeros', [N, width / G], 'u8'), errors: c.out('errors', [width, N], 'f32'),
      });
      return c.results();
    },
  }));
}

/**
 * int4ClipGroups: AWQ's 11 ratios over groups of 128 (Llama's widths, a row count off the 8-warp blocks),
 * 32 and 256, with outliers so that clipping pays. Compared by norm: the GPU sums a group's error in f32,
 * the CPU in f64, so a near-tie may pick a neighbouring ratio.
 */
function int4ClipGroupsCases(): OpCase[] {
  const ratios = Array.from({ length: 11 }, (_, i) => 1 - i * 0.05);
  return ([[301, 2048, 128], [7, 96, 32], [40, 512, 256]] as const).map(([N, K, G]): OpCase => ({
    name: `int4ClipGroups N=${N} K=${K} G=${G}`, dtype: 'f32',
    tolerance: 1e-3,
    inputs: (rng) => {
      const weight = floats(rng, [N, K], 'f32', 0.02);
      for (let n = 0; n < N; n++) weight.values[n * K + ((n * 37) % K)] = 0.4 * (n % 2 ? -1 : 1);
      const meanSquare = floats(rng, [K], 'f32', 1);
      for (let k = 0; k < K; k++) meanSquare.values[k] = Math.abs(meanSquare.values[k]!) + 0.01;
      return { weight, meanSquare, ratios: { values: Float32Array.from(ratios), shape: [ratios.length], dtype: 'f32' } };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.int4ClipGroups({ weight: c.keep('weight', c.in('weight')), meanSquare: c.in('meanSquare'), ratios: c.in('ratios'), groupSize: G });
      return c.results();
    },
  }));
}

/**
 * normMlp (CUDA: one kernel, gemv-mlp.ts): GPT-2's MLP at batch 1 and 4 (an f32 y at 16 bit: the accumulator
 * the layer before left), a ReLU MLP without an up bias, a narrow f32 one. out starts random (the op adds to
 * it); x, h, out and the cleared `zero` are checked.
 */
function normMlpCases(dtype: FloatDType): OpCase[] {
  const shapes: readonly [number, number, number, Activation, boolean, boolean][] = [
    [1, 768, 3072, 'gelu_tanh', true, dtype !== 'f32'], [4, 768, 3072, 'gelu_tanh', true, false], [3, 1024, 4096, 'relu', false, false], [2, 136, 256, 'gelu_tanh', true, dtype !== 'f32'],
  ];
  return shapes.map(([rows, H, F, activation, upBias, yF32]) => normMlpCase(dtype, rows, H, F, activation, upBias, yF32));
}

/** normMlp of `rows` rows: a LayerNorm with residual and bias, the fc [F, H] (+ bias) and activation, the proj [H, F] added into an f32 accumulator. */
export function normMlpCase(dtype: FloatDType, rows: number, H: number, F: number, activation: Activation, upBias: boolean, yF32: boolean): OpCase {
  return {
    name: `normMlp ${dtype} rows=${rows} H=${H} F=${F} ${activation}${upBias ? ' +bias' : ''}${yF32 ? ' y f32' : ''}`, dtype,
    inputs: (rng) => ({
      x: floats(rng, [rows, H], dtype, 2, 0.5), y: floats(rng, [rows, H], yF32 ? 'f32' : dtype), rbias: floats(rng, [H], dtype), gamma: floats(rng, [H], dtype, 0.5, 1),
      beta: floats(rng, [H], dtype), up: floats(rng, [F, H], dtype, 2 / Math.sqrt(H)), upBias: floats(rng, [F], dtype, 0.5),
      down: floats(rng, [H, F], dtype, 2 / Math.sqrt(F)), out: floats(rng, [rows, H], 'f32'), zero: floats(rng, [4, H], 'f32'),
    }),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.normMlp({
        norm: { x: c.keep('x', c.in('x')), y: c.in('y'), bias: c.in('rbias'), norm: 'layer', gamma: c.in('gamma'), beta: c.in('beta'), out: c.out('h', [rows, H], dtype), eps: 1e-5 },
        up: c.in('up'), ...(upBias ? { upBias: c.in('upBias') } : {}), activation, down: c.in('down'), out: c.keep('out', c.in('out')), zero: c.keep('zero', c.in('zero')),
      });
      return c.results();
    },
  };
}

/**
 * maskLogits: constrained decoding's masks over some rows of a logits buffer — GPT-2's vocabulary in a padded row,
 * an odd class count, a mask that allows nearly everything and one that allows a few tokens; rows out of order.
 */
function maskLogitsCases(dtype: FloatDType): OpCase[] {
  return ([[6, 50257, 50304, [4, 0, 2], 0.99], [3, 1000, 1003, [1], 0.01], [40, 257, 257, [39, 7, 8, 20], 0.5]] as const).map(([n, classes, Vp, rows, density]): OpCase => ({
    name: `maskLogits ${dtype} n=${n} classes=${classes} Vp=${Vp} rows=${rows.length} allowed≈${density}`, dtype,
    exact: ['logits'],
    inputs: (rng) => {
      const words = Math.ceil(classes / 32), masks = randomInts(rng, [rows.length, words], 0, 1);
      for (let i = 0; i < masks.values.length; i++) {
        let word = 0;
        for (let bit = 0; bit < 32; bit++) if (rng.next() < density) word |= 1 << bit;
        masks.values[i] = word;
      }
      return { logits: floats(rng, [n, Vp], dtype, 3), rows: { values: Int32Array.from(rows), shape: [rows.length], dtype: 'i32' }, masks };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.maskLogits({ logits: c.keep('logits', c.in('logits')), rows: c.in('rows'), masks: c.in('masks'), classes });
      return c.results();
    },
  }));
}

/** biasLogits: the API's logit_bias on some rows (padded lists, a row with none), GPT-2's padded row and a small one. */
function biasLogitsCases(dtype: FloatDType): OpCase[] {
  return ([[5, 50304, [3, 0], 7], [9, 257, [8, 1, 4], 300]] as const).map(([n, Vp, rows, k]): OpCase => ({
    name: `biasLogits ${dtype} n=${n} Vp=${Vp} rows=${rows.length} k=${k}`, dtype,
    exact: ['logits'],
    inputs: (rng) => {
      const tokens = randomInts(rng, [rows.length, k], 0, 1);
      rows.forEach((_, i) => {
        // Distinct tokens (at most Vp of the k slots; −1 pads the rest); the last row: nothing listed.
        const count = i === rows.length - 1 ? 0 : 1 + Math.floor(rng.next() * Math.min(k, Vp));
        const chosen = rng.permutation(Vp).slice(0, count);
        for (let j = 0; j < k; j++) tokens.values[i * k + j] = j < count ? chosen[j]! : -1;
      });
      return { logits: floats(rng, [n, Vp], dtype, 3), rows: { values: Int32Array.from(rows), shape: [rows.length], dtype: 'i32' }, tokens, biases: floats(rng, [rows.length, k], 'f32', 40) };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      b.biasLogits({ logits: c.keep('logits', c.in('logits')), rows: c.in('rows'), tokens: c.in('tokens'), biases: c.in('biases') });
      return c.results();
    },
  }));
}

/** scaleColumns: a Llama-wide weight times its scales in f32, and awkward inputs over them in place. */
function scaleColumnsCases(dtype: FloatDType): OpCase[] {
  return ([[300, 2048, false], [7, 257, true]] as const).map(([rows, C, divide]): OpCase => ({
    name: `scaleColumns ${dtype} rows=${rows} C=${C}${divide ? ' divide in place' : ''}`, dtype,
    inputs: (rng) => {
      const scale = floats(rng, [C], 'f32', 0.5);
      for (let c = 0; c < C; c++) scale.values[c] = 0.25 + Math.abs(scale.values[c]!);
      return { x: floats(rng, [rows, C], dtype), scale };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const x = c.in('x');
      b.scaleColumns({ x, scale: c.in('scale'), out: divide ? c.keep('out', x) : c.out('out', [rows, C], dtype), divide });
      return c.results();
    },
  }));
}

export function inferOpCases(dtypes: readonly FloatDType[] = FLOAT_DTYPES): OpCase[] {
  return dtypes.flatMap((dtype) => [
    ...embedTokensCases(dtype), ...qkvRopeAppendCases(dtype), ...decodeAttentionCases(dtype), ...appendDecodeAttentionCases(dtype), ...residualNormCases(dtype),
    ...gatedActivationCases(dtype), ...gatedLinearCases(dtype), ...normLinearCases(dtype), ...tanhActivationCases(dtype), ...sampleTokensCases(dtype),
    ...gemmArgmaxCases(dtype), ...sampleTokensArgmaxCases(dtype), ...tokenProbabilitiesCases(dtype), ...speculativeSampleCases(dtype), ...gatherColumnsCases(dtype), ...scaleColumnsCases(dtype), ...maskLogitsCases(dtype), ...biasLogitsCases(dtype), ...normMlpCases(dtype),
  ]).concat(decodeAdvanceCases(), feedTokensCases(), gptqRoundBlockCases(), int4ClipGroupsCases());
}
