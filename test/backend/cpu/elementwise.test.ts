import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Activation } from '../../../src/backend/backend.js';
import { CpuBackend, CpuTensor } from '../../../src/backend/cpu/index.js';
import { philox4x32 } from '../../../src/backend/rng.js';
import { ArgumentError, DTypeError, LayoutError, ShapeError } from '../../../src/errors.js';
import type { Tensor } from '../../../src/tensor.js';
import { assertClose, assertRejects, numericGradient, randomValues, weightedSum } from './helpers.js';

const backend = new CpuBackend();
const f32 = (values: readonly number[], shape: number[]) => backend.fromArray(values, shape, 'f32');
const sumColumns = (values: ArrayLike<number>, H: number) => Array.from({ length: H }, (_, h) => Array.from(values).filter((_, i) => i % H === h).reduce((s, x) => s + x, 0));

/**
 * The documented keep rule, re-derived: element i uses Philox counter offset + ⌊i/8⌋, word ⌊(i % 8)/2⌋,
 * its low 16 bits for even i and high 16 bits for odd i, kept iff that is >= ⌈p·2^16⌉.
 */
function expectedKeep(i: number, p: number, seed: bigint, offset: bigint): number {
  const counter = offset + BigInt(Math.floor(i / 8));
  const words = philox4x32(Number(counter % 2n ** 32n), Number(counter / 2n ** 32n), 0, 0, Number(seed % 2n ** 32n), Number(seed / 2n ** 32n));
  const word = words[Math.floor((i % 8) / 2)]!;
  const uniform16 = i % 2 === 0 ? word % 2 ** 16 : Math.floor(word / 2 ** 16);
  return uniform16 >= Math.ceil(p * 2 ** 16) ? 1 : 0;
}

test('dropout keeps 1 − ⌈p·2^16⌉/2^16 of the elements; p just below 1 drops them all', () => {
  const n = 1 << 16, p = 0.3;
  const out = backend.empty([1, n], 'f32'), mask = backend.empty([1, n], 'u8');
  const zeros = backend.fromArray(new Array<number>(n).fill(0), [1, n], 'f32'), bias = backend.fromArray(new Array<number>(n).fill(0), [n], 'f32');
  backend.biasDropoutResidual({ input: zeros, bias, residual: zeros, out, mask, p, seed: 9n, offset: 0n });
  const kept = Array.from(backend.download(mask)).reduce((s, m) => s + m, 0) / n;
  const expected = 1 - Math.ceil(p * 2 ** 16) / 2 ** 16;
  assert.ok(Math.abs(kept - expected) < 4 * Math.sqrt(expected * (1 - expected) / n), `kept ${kept}, expected ${expected}`);
  backend.biasDropoutResidual({ input: zeros, bias, residual: zeros, out, mask, p: 1 - 2 ** -20, seed: 9n, offset: 0n });
  assert.ok(Array.from(backend.download(mask)).every((m) => m === 0));
});

function runBiasDropoutResidual(input: number[], bias: number[], residual: number[], rows: number, H: number, p: number, seed = 5n, offset = 0n) {
  const out = backend.empty([rows, H], 'f32'), mask = backend.empty([rows, H], 'u8');
  backend.biasDropoutResidual({ input: f32(input, [rows, H]), bias: f32(bias, [H]), residual: f32(residual, [rows, H]), out, mask, p, seed, offset });
  return { out: backend.download(out), mask: backend.download(mask), maskTensor: mask };
}

describe('biasDropoutResidual', () => {
  const [rows, H] = [4, 6];
  const input = randomValues(1, rows * H), bias = randomValues(2, H), residual = randomValues(3, rows * H);

  test('out = mask·(input + bias)/(1−p) + residual, with the documented Philox mask', () => {
    const p = 0.4, seed = 0x1234_5678_9abcn, offset = 77n;
    const { out, mask } = runBiasDropoutResidual(input, bias, residual, rows, H, p, seed, offset);
    mask.forEach((m, i) => assert.equal(m, expectedKeep(i, p, seed, offset), `mask[${i}]`));
    assert.ok(mask.includes(0) && mask.includes(1));
    assertClose(out, input.map((x, i) => (mask[i] ? (x + bias[i % H]!) / (1 - p) : 0) + residual[i]!), 1e-6);
  });

  test('p = 0 keeps everything: out = input + bias + residual', () => {
    const { out, mask } = runBiasDropoutResidual(input, bias, residual, rows, H, 0);
    assert.ok(mask.every((m) => m === 1));
    assert.deepEqual(Array.from(out), input.map((x, i) => Math.fround(x + bias[i % H]! + residual[i]!)));
  });

  test('the kept fraction is 1 − p over 1e5 elements', () => {
    for (const p of [0.1, 0.5, 0.9]) {
      const n = 100_000;
      const { mask } = runBiasDropoutResidual(new Array<number>(n).fill(1), new Array<number>(1000).fill(0), new Array<number>(n).fill(0), 100, 1000, p, 99n, 0n);
      const kept = Array.from(mask).reduce((s, m) => s + m, 0) / n;
      assert.ok(Math.abs(kept - (1 - p)) < 0.01, `p = ${p}: kept ${kept}`); // σ ≈ 0.0016
    }
  });

  test('same (seed, offset) → same mask; another offset or seed → another mask; offset + 1 shifts by 8 elements', () => {
    const mask = (seed: bigint, offset: bigint) => Array.from(runBiasDropoutResidual(input, bias, residual, rows, H, 0.5, seed, offset).mask);
    assert.deepEqual(mask(3n, 10n), mask(3n, 10n));
    assert.notDeepEqual(mask(3n, 10n), mask(3n, 11n));
    assert.notDeepEqual(mask(3n, 10n), mask(4n, 10n));
    assert.deepEqual(mask(3n, 11n).slice(0, rows * H - 8), mask(3n, 10n).slice(8));
  });

  test('backward matches finite differences of the forward, and dBias sums dInput over rows', () => {
    const p = 0.3, w = randomValues(4, rows * H);
    const loss = (inputs: number[], biases: number[]) => weightedSum(runBiasDropoutResidual(inputs, biases, residual, rows, H, p).out, w);
    const { maskTensor } = runBiasDropoutResidual(input, bias, residual, rows, H, p);
    const dInput = backend.empty([rows, H], 'f32'), dBias = backend.empty([H], 'f32');
    backend.biasDropoutResidualBackward({ dOut: f32(w, [rows, H]), mask: maskTensor, p, dInput, dBias });
    assertClose(backend.download(dInput), numericGradient((x) => loss(x, bias), input), 1e-3, 'dInput');
    assertClose(backend.download(dBias), numericGradient((b) => loss(input, b), bias), 1e-3, 'dBias');
    assertClose(backend.download(dBias), sumColumns(backend.download(dInput), H), 1e-6, 'dBias = Σ dInput');
  });

  test('dInput may alias dOut', () => {
    const { maskTensor } = runBiasDropoutResidual(input, bias, residual, rows, H, 0.5);
    const separate = backend.empty([rows, H], 'f32');
    backend.biasDropoutResidualBackward({ dOut: f32(input, [rows, H]), mask: maskTensor, p: 0.5, dInput: separate });
    const shared = f32(input, [rows, H]);
    backend.biasDropoutResidualBackward({ dOut: shared, mask: maskTensor, p: 0.5, dInput: shared });
    assert.deepEqual(Array.from(backend.download(shared)), Array.from(backend.download(separate)));
  });

  test('validation names the op and the argument', () => {
    const args = () => ({ input: backend.empty([2, 3], 'f32'), bias: backend.empty([3], 'f32'), residual: backend.empty([2, 3], 'f32'), out: backend.empty([2, 3], 'f32'), mask: backend.empty([2, 3], 'u8'), p: 0.1, seed: 1n, offset: 0n });
    assertRejects(() => backend.biasDropoutResidual({ ...args(), p: 1.5 }), 'biasDropoutResidual', 'p', ArgumentError);
    assertRejects(() => backend.biasDropoutResidual({ ...args(), bias: backend.empty([4], 'f32') }), 'biasDropoutResidual', 'bias', ShapeError);
    assertRejects(() => backend.biasDropoutResidual({ ...args(), residual: backend.empty([2, 3], 'bf16') }), 'biasDropoutResidual', 'residual', DTypeError);
    assertRejects(() => backend.biasDropoutResidual({ ...args(), mask: backend.empty([2, 3], 'f32') }), 'biasDropoutResidual', 'mask', DTypeError);
    assertRejects(() => backend.biasDropoutResidual({ ...args(), seed: -1n }), 'biasDropoutResidual', 'seed', ArgumentError);
    const transposed = new CpuTensor([2, 3], 'f32', new Float32Array(6), { strides: [1, 2] });
    assertRejects(() => backend.biasDropoutResidual({ ...args(), out: transposed }), 'biasDropoutResidual', 'out', LayoutError);
    assertRejects(() => backend.biasDropoutResidualBackward({ dOut: backend.empty([2, 3], 'f32'), mask: backend.empty([2, 3], 'u8'), p: -0.1, dInput: backend.empty([2, 3], 'f32') }), 'biasDropoutResidualBackward', 'p', ArgumentError);
  });
});

describe('biasActivationDropout', () => {
  const [rows, H] = [3, 5];
  // Keep x + bias away from 0 so relu's kink never falls inside a finite-difference step.
  const input = randomValues(6, rows * H, -2, 2).map((x) => (Math.abs(x) < 0.1 ? x + 0.3 : x));
  const bias = new Array<number>(H).fill(0);

  const forward = (activation: Activation, x: readonly number[], b: readonly number[], p: number, mask?: Tensor) => {
    const out = backend.empty([rows, H], 'f32'), m = mask ?? backend.empty([rows, H], 'u8');
    backend.biasActivationDropout({ input: f32(x, [rows, H]), bias: f32(b, [H]), out, mask: m, activation, p, seed: 11n, offset: 3n });
    return { out: backend.download(out), mask: m };
  };

  test('activation values against hand-computed ones (p = 0)', () => {
    const x = [1, -0.5, 2, 0, -3];
    const single = (activation: Activation) => {
      const out = backend.empty([1, 5], 'f32');
      backend.biasActivationDropout({ input: f32(x, [1, 5]), bias: f32([0, 0, 0, 0, 0], [5]), out, mask: backend.empty([1, 5], 'u8'), activation, p: 0, seed: 0n, offset: 0n });
      return backend.download(out);
    };
    assertClose(single('relu'), [1, 0, 2, 0, 0], 0);
    // gelu(x) = x·Φ(x): Φ(1) = 0.8413447460685429, Φ(−0.5) = 0.3085375387259869, Φ(2) = 0.9772498680518208, Φ(−3) = 0.0013498980316301
    assertClose(single('gelu'), [0.8413447460685429, -0.5 * 0.3085375387259869, 2 * 0.9772498680518208, 0, -3 * 0.0013498980316301], 1e-7);
    const tanhGelu = (v: number) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));
    assertClose(single('gelu_tanh'), x.map(tanhGelu), 1e-7);
    // The two GELUs differ measurably (by ~1e-4 .. 1e-3 here), so a swap would not pass.
    assert.ok(Math.abs(single('gelu')[4]! - single('gelu_tanh')[4]!) > 1e-4);
  });

  for (const activation of ['relu', 'gelu', 'gelu_tanh', 'silu'] as const) {
    test(`${activation}: dropout applies after the activation, and the backward matches finite differences`, () => {
      const p = 0.25, w = randomValues(7, rows * H), biasValues = randomValues(8, H, -0.05, 0.05);
      const { out, mask } = forward(activation, input, biasValues, p);
      const keep = backend.download(mask);
      assert.ok(keep.includes(0) && keep.includes(1));
      out.forEach((v, i) => { if (!keep[i]) assert.equal(v, 0, `dropped element ${i}`); });

      const loss = (x: readonly number[], b: readonly number[]) => weightedSum(forward(activation, x, b, p, mask).out, w);
      const dInput = backend.empty([rows, H], 'f32'), dBias = backend.empty([H], 'f32');
      backend.biasActivationDropoutBackward({ dOut: f32(w, [rows, H]), input: f32(input, [rows, H]), bias: f32(biasValues, [H]), mask, p, activation, dInput, dBias });
      assertClose(backend.download(dInput), numericGradient((x) => loss(x, biasValues), input), 2e-3, 'dInput');
      assertClose(backend.download(dBias), numericGradient((b) => loss(input, b), biasValues), 2e-3, 'dBias');
    });
  }

  test('validation names the op and the argument', () => {
    const args = () => ({ input: backend.empty([2, 3], 'f32'), bias: backend.empty([3], 'f32'), out: backend.empty([2, 3], 'f32'), mask: backend.empty([2, 3], 'u8'), activation: 'gelu' as Activation, p: 0.1, seed: 1n, offset: 0n });
    assertRejects(() => backend.biasActivationDropout({ ...args(), activation: 'swish' as Activation }), 'biasActivationDropout', 'activation', ArgumentError);
    assertRejects(() => backend.biasActivationDropout({ ...args(), p: 1 }), 'biasActivationDropout', 'p', ArgumentError);
    assertRejects(() => backend.biasActivationDropout({ ...args(), out: backend.empty([3, 3], 'f32') }), 'biasActivationDropout', 'out', ShapeError);
    assertRejects(() => backend.biasActivationDropoutBackward({ dOut: backend.empty([2, 3], 'f16'), input: backend.empty([2, 3], 'f32'), bias: backend.empty([3], 'f32'), mask: backend.empty([2, 3], 'u8'), p: 0.1, activation: 'relu', dInput: backend.empty([2, 3], 'f16') }), 'biasActivationDropoutBackward', 'input', DTypeError);
  });
});

describe('biasQkvSplit', () => {
  test('splits a hand-built example into heads, adds the bias, scales q', () => {
    // B = 1, L = 2, heads = 2, d = 1: each row of qkv is [q_h0, q_h1, k_h0, k_h1, v_h0, v_h1].
    const qkv = f32([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 6]);
    const bias = f32([0.5, 0, 0, 0.25, 0, -1], [6]);
    const [q, k, v] = [backend.empty([1, 2, 2, 1], 'f32'), backend.empty([1, 2, 2, 1], 'f32'), backend.empty([1, 2, 2, 1], 'f32')];
    backend.biasQkvSplit({ qkv, bias, heads: 2, q, k, v, qScale: 2 });
    // q[0, h, l, 0]: (h0: 1.5, 7.5; h1: 2, 8) · 2
    assert.deepEqual(Array.from(backend.download(q)), [3, 15, 4, 16]);
    assert.deepEqual(Array.from(backend.download(k)), [3, 9, 4.25, 10.25]);
    assert.deepEqual(Array.from(backend.download(v)), [5, 11, 5, 11]);
  });

  test('the backward is the adjoint of the forward (⟨split(x), y⟩ = ⟨x, merge(y)⟩), and dBias sums over B and L', () => {
    const [B, L, heads, d] = [2, 3, 2, 2];
    const width = 3 * heads * d, size = B * heads * L * d;
    const x = randomValues(30, B * L * width), ys = [31, 32, 33].map((s) => randomValues(s, size));
    const [q, k, v] = [backend.empty([B, heads, L, d], 'f32'), backend.empty([B, heads, L, d], 'f32'), backend.empty([B, heads, L, d], 'f32')];
    backend.biasQkvSplit({ qkv: f32(x, [B, L, width]), bias: f32(new Array<number>(width).fill(0), [width]), heads, q, k, v, qScale: 0.5 });
    const lhs = weightedSum(backend.download(q), ys[0]!) + weightedSum(backend.download(k), ys[1]!) + weightedSum(backend.download(v), ys[2]!);
    const dQkv = backend.empty([B, L, width], 'f32'), dBias = backend.empty([width], 'f32');
    backend.biasQkvSplitBackward({ dq: f32(ys[0]!, [B, heads, L, d]), dk: f32(ys[1]!, [B, heads, L, d]), dv: f32(ys[2]!, [B, heads, L, d]), heads, dQkv, dBias, qScale: 0.5 });
    assertClose([weightedSum(x, backend.download(dQkv))], [lhs], 1e-6, '⟨x, merge(y)⟩');
    assertClose(backend.download(dBias), sumColumns(backend.download(dQkv), width), 1e-6, 'dBias');
  });

  test('validation names the op and the argument', () => {
    const four = () => backend.empty([1, 2, 3, 2], 'f32');
    assertRejects(() => backend.biasQkvSplit({ qkv: backend.empty([1, 3, 10], 'f32'), bias: backend.empty([10], 'f32'), heads: 2, q: four(), k: four(), v: four() }), 'biasQkvSplit', 'qkv', ArgumentError);
    assertRejects(() => backend.biasQkvSplit({ qkv: backend.empty([1, 3, 12], 'f32'), bias: backend.empty([12], 'f32'), heads: 2, q: four(), k: four(), v: backend.empty([1, 2, 3, 3], 'f32') }), 'biasQkvSplit', 'v', ShapeError);
    assertRejects(() => backend.biasQkvSplit({ qkv: backend.empty([1, 3, 12], 'f32'), bias: backend.empty([12], 'f32'), heads: 0, q: four(), k: four(), v: four() }), 'biasQkvSplit', 'heads', ArgumentError);
    assertRejects(() => backend.biasQkvSplitBackward({ dq: four(), dk: four(), dv: four(), heads: 2, dQkv: backend.empty([1, 3, 12], 'f32'), dBias: backend.empty([12], 'f16') }), 'biasQkvSplitBackward', 'dBias', DTypeError);
  });
});
