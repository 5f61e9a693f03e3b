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

function floats(rng: Rng, shape: number[], dtype: DType, scale = 1, mean = 0): HostTensor {
  return { values: rng.floats(shape.reduce((a, b) => a * b, 1), scale, mean), shape, dtype };
}
function ints(rng: Rng, shape: number[], low: number, high: number): HostTensor {
  return { values: rng.ints(shape.reduce((a, b) => a * b, 1), low, high), shape, dtype: 'i32' };
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
  for (const [rows, H] of ROW_SHAPES) {
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
    for (const activation of ['relu', 'gelu', 'gelu_tanh'] as Activation[]) {
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
  for (const [rows, H] of [...ROW_SHAPES, [64, 100] as [number, number]]) {
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
      inputs: (rng) => ({ x: floats(rng, [B, H, Lq, Lk], dtype, 3), dY: floats(rng, [B, H, Lq, Lk], dtype), keyLengths: ints(rng, [B], 1, Lk + 1) }),
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

function crossEntropyCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  for (const [rows, V, smoothing] of [[17, 50257, 0], [9, 50257, 0.1], [64, 1000, 0.1], [5, 128256, 0], [33, 30522, 0]] as const) {
    cases.push({
      name: `crossEntropy fwd+bwd ${dtype} rows=${rows} V=${V} smoothing=${smoothing}`, dtype,
      inputs: (rng) => {
        const targets = ints(rng, [rows], 0, V);
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

function embeddingCases(dtype: FloatDType): OpCase[] {
  const cases: OpCase[] = [];
  for (const [B, L, V, H, withPositions] of [[2, 9, 8000, 768, true], [4, 33, 1000, 1024, false], [1, 5, 3001, 771, true]] as const) {
    const P = L + 3;
    cases.push({
      name: `embedding fwd+bwd ${dtype} B=${B} L=${L} V=${V} H=${H}${withPositions ? ' +positions' : ''}`, dtype, exact: ['mask'],
      // Atomic accumulation order differs on the GPU; f16/bf16 tables get a looser tolerance.
      tolerance: dtype === 'f32' ? 1e-5 : dtype === 'f16' ? 5e-3 : 3e-2,
      inputs: (rng) => {
        const tokens = ints(rng, [B, L], 0, V);
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
    ...elementwiseCases(dtype), ...normCases(dtype), ...softmaxCases(dtype),
    ...crossEntropyCases(dtype), ...embeddingCases(dtype), ...adamCases(dtype), ...randomFillCases(dtype),
  ]);
}
