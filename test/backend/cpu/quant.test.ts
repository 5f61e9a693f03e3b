// The quantized-linear ops on the CPU reference: hand-computed values, the packing order, the exact
// rounding rules both backends share, and argument checks.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { int4GroupParams, packInt4, quantizeInt4, roundHalfEven, unpackInt4 } from '../../../src/backend/cpu/quant-math.js';
import { geluTanh } from '../../../src/backend/cpu/activation.js';
import { roundToDType } from '../../../src/dtype.js';
import { DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();

test('round half to even matches rintf', () => {
  assert.deepEqual([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -3.5001, 7].map(roundHalfEven), [0, 2, 2, -0, -2, -2, 2, -4, 7]);
});

test('nibbles pack 8 per word along k, low nibble first', () => {
  const q = [1, 2, 3, 4, 5, 6, 7, 15, 0, 9, 10, 11, 12, 13, 14, 8];
  const words = packInt4(q, 1, 16);
  assert.equal(words[0]! >>> 0, 0xf7654321);
  assert.equal(words[1]! >>> 0, 0x8edcba90);
  assert.deepEqual(Array.from(unpackInt4(words, 1, 16)), q);
});

test('a group quantizes with zero in range, an f16 scale, and error at most half a step', () => {
  // One group of 32 values in [-0.3, 0.9]: scale = f16(1.2 / 15), zero = rne(0.3 / scale) = 4.
  const values = Array.from({ length: 32 }, (_, i) => Math.fround(-0.3 + (1.2 * i) / 31));
  const p = int4GroupParams(values, 0, 32);
  assert.equal(p.scale, roundToDType(Math.fround(Math.fround(1.2) / 15), 'f16'));
  assert.equal(p.zero, 4);
  // All-positive groups keep zero = 0 (zero is always in the range).
  assert.equal(int4GroupParams(values.map((v) => Math.abs(v) + 1), 0, 32).zero, 0);
  const { q, scales, zeros } = quantizeInt4(values, 1, 32, 32);
  for (let i = 0; i < 32; i++) {
    assert.ok(q[i]! >= 0 && q[i]! <= 15);
    assert.ok(Math.abs(scales[0]! * (q[i]! - zeros[0]!) - values[i]!) <= scales[0]! / 2 + 1e-7, `value ${i}`);
  }
});

test('int4QuantizeWeights writes the packed words, scales and zeros of quantizeInt4', () => {
  const N = 3, K = 64, G = 32;
  const w = randomValues(7, N * K, -0.5, 0.5);
  const qweight = backend.empty([N, K / 8], 'i32'), scales = backend.empty([N, K / G], 'f16'), zeros = backend.empty([N, K / G], 'u8');
  backend.int4QuantizeWeights({ weight: backend.fromArray(w, [N, K], 'f32'), groupSize: G, qweight, scales, zeros });
  const expected = quantizeInt4(w, N, K, G);
  assert.deepEqual(Array.from(backend.download(qweight)), Array.from(packInt4(expected.q, N, K)));
  assert.deepEqual(Array.from(backend.download(scales)), Array.from(expected.scales));
  assert.deepEqual(Array.from(backend.download(zeros)), Array.from(expected.zeros));
});

test('int4Linear computes act(x·wᵀ + bias) with w = scale·(q − zero), per group', () => {
  const M = 2, N = 2, K = 64, G = 32;
  // Row 0: every q = 3, zero 1, scales 0.5 and 0.25 by group → w = 1 for k < 32, 0.5 after.
  // Row 1: q = k % 16, zero 8, scale 1 → w = k % 16 − 8.
  const q = new Array<number>(N * K);
  for (let k = 0; k < K; k++) { q[k] = 3; q[K + k] = k % 16; }
  const x = Array.from({ length: M * K }, (_, i) => (i < K ? 1 : (i % 3) - 1));
  const w = (n: number, k: number) => (n === 0 ? (k < 32 ? 1 : 0.5) : (k % 16) - 8);
  const args = {
    x: backend.fromArray(x, [M, K], 'f32'), qweight: backend.fromArray(packInt4(q, N, K), [N, K / 8], 'i32'),
    scales: backend.fromArray([0.5, 0.25, 1, 1], [N, 2], 'f16'), zeros: backend.fromArray([1, 1, 8, 8], [N, 2], 'u8'), groupSize: G,
  };
  const out = backend.empty([M, N], 'f32');
  backend.int4Linear({ ...args, out });
  const expected: number[] = [];
  for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) {
    let s = 0;
    for (let k = 0; k < K; k++) s += x[m * K + k]! * w(n, k);
    expected.push(s);
  }
  assert.deepEqual(Array.from(backend.download(out)), expected);
  backend.int4Linear({ ...args, out, bias: backend.fromArray([0.25, -1], [N], 'f32'), activation: 'gelu_tanh' });
  assertClose(backend.download(out), expected.map((v, i) => geluTanh(v + [0.25, -1][i % 2]!)), 1e-6);
});

test('int8QuantizeRows: per-row scale amax/127, values rne(x·127/amax); a zero row stays zero', () => {
  const x = backend.fromArray([1, -2, 0.5, 0, 0, 0, 0, 0, 3, 3, -3, 0.012], [3, 4], 'f32');
  const out = backend.empty([3, 4], 'i8'), scales = backend.empty([3], 'f32');
  backend.int8QuantizeRows({ x, out, scales });
  // Row 0: 1·63.5 = 63.5 → 64 (half to even), −2 → −127, 0.5·63.5 = 31.75 → 32.
  // Row 2: inv = 127/3 = 42.333… (f32); 0.012·inv = 0.508 → 1.
  assert.deepEqual(Array.from(backend.download(out)), [64, -127, 32, 0, 0, 0, 0, 0, 127, 127, -127, 1]);
  assertClose(backend.download(scales), [2 / 127, 0, 3 / 127], 1e-7);
});

test('int8Gemm is exact in integers; int8Dequantize scales rows and columns, adds bias, activates', () => {
  const a = backend.fromArray([127, -127, 1, 2, -3, 4, 0, 5], [2, 4], 'i8');
  const b = backend.fromArray([127, 127, 127, 127, 1, -1, 1, -1, 0, 0, 0, 1], [3, 4], 'i8');
  const acc = backend.empty([2, 3], 'i32');
  backend.int8Gemm({ a, b, out: acc });
  assert.deepEqual(Array.from(backend.download(acc)), [127 * 3, 127 + 127 + 1 - 2, 2, 127 * 6, -3 - 4 + 0 - 5, 5]);
  const out = backend.empty([2, 3], 'bf16');
  backend.int8Dequantize({ acc, rowScales: backend.fromArray([0.5, 2], [2], 'f32'), colScales: backend.fromArray([0.01, 1, -1], [3], 'f32'), out, bias: backend.fromArray([1, 0, 0], [3], 'bf16'), activation: 'relu' });
  const expected = [381 * 0.5 * 0.01 + 1, 253 * 0.5, 0, 762 * 2 * 0.01 + 1, 0, 0].map((v) => roundToDType(Math.max(0, v), 'bf16'));
  assert.deepEqual(Array.from(backend.download(out)), expected);
});

test('gated int4Linear: act(gate)·up of the stacked product, bias on both halves, rounded once', () => {
  const M = 3, F = 5, N = 2 * F, K = 64, G = 32;
  const q = Array.from({ length: N * K }, (_, i) => (i * 7 + 3) % 16);
  const scales = Array.from({ length: N * 2 }, (_, i) => 0.01 + 0.003 * i), zeros = Array.from({ length: N * 2 }, (_, i) => i % 16);
  const x = randomValues(11, M * K), bias = randomValues(12, N, -0.5, 0.5);
  const weight = {
    x: backend.fromArray(x, [M, K], 'f32'), qweight: backend.fromArray(packInt4(q, N, K), [N, K / 8], 'i32'),
    scales: backend.fromArray(scales, [N, 2], 'f16'), zeros: backend.fromArray(zeros, [N, 2], 'u8'), groupSize: G, bias: backend.fromArray(bias, [N], 'f32'),
  };
  // The unfused composition: the whole [M, 2F] product with bias, then silu(g)·u in f64.
  const product = backend.empty([M, N], 'f32');
  backend.int4Linear({ ...weight, out: product });
  const p = backend.download(product), silu = (v: number) => v / (1 + Math.exp(-v));
  const expected = Array.from({ length: M * F }, (_, i) => { const m = Math.floor(i / F), n = i % F; return silu(p[m * N + n]!) * p[m * N + F + n]!; });
  const out = backend.empty([M, F], 'f32');
  backend.int4Linear({ ...weight, out, gated: true, activation: 'silu' });
  assertClose(backend.download(out), expected, 1e-6);
  assertRejects(() => backend.int4Linear({ ...weight, out, gated: true }), 'int4Linear', 'activation');
  assertRejects(() => backend.int4Linear({ ...weight, out: backend.empty([M, N], 'f32'), gated: true, activation: 'silu' }), 'int4Linear', 'out', ShapeError);
  const odd = { ...weight, qweight: backend.empty([N - 1, K / 8], 'i32'), scales: backend.empty([N - 1, 2], 'f16'), zeros: backend.empty([N - 1, 2], 'u8'), bias: backend.empty([N - 1], 'f32') };
  assert.throws(() => backend.int4Linear({ ...odd, out: backend.empty([M, F], 'f32'), gated: true, activation: 'silu' }), /int4Linear: a gated int4Linear's weight holds the gate's rows then the up projection's, so an even N; got N = 9/);
});

test('int8Linear is quantize → int8Gemm → dequantize in one op; gated: act(g)·u of the dequantized halves', () => {
  const M = 3, K = 32, F = 6, N = 2 * F;
  const x = randomValues(21, M * K, -2, 2);
  x.fill(0, K, 2 * K); // a zero row
  const q = Array.from({ length: N * K }, (_, i) => ((i * 37 + 11) % 255) - 127);
  const args = {
    x: backend.fromArray(x, [M, K], 'bf16'), qweight: backend.fromArray(q, [N, K], 'i8'),
    scales: backend.fromArray(randomValues(22, N, 1e-3, 3e-3), [N], 'f32'), bias: backend.fromArray(randomValues(23, N, -0.5, 0.5), [N], 'bf16'),
  };
  // The three ops, then act(g)·u of their f32 product (the gated reference).
  const xq = backend.empty([M, K], 'i8'), rowScales = backend.empty([M], 'f32'), acc = backend.empty([M, N], 'i32'), product = backend.empty([M, N], 'f32');
  backend.int8QuantizeRows({ x: args.x, out: xq, scales: rowScales });
  backend.int8Gemm({ a: xq, b: args.qweight, out: acc });
  const three = backend.empty([M, N], 'bf16');
  backend.int8Dequantize({ acc, rowScales, colScales: args.scales, out: three, bias: args.bias, activation: 'gelu_tanh' });
  const out = backend.empty([M, N], 'bf16');
  backend.int8Linear({ ...args, out, activation: 'gelu_tanh' });
  assert.deepEqual(Array.from(backend.download(out)), Array.from(backend.download(three)));
  assert.ok(Array.from(backend.download(out)).slice(N, 2 * N).every((v, n) => v === roundToDType(geluTanh(Array.from(backend.download(args.bias))[n]!), 'bf16')), 'a zero row is act(bias)');

  backend.int8Dequantize({ acc, rowScales, colScales: args.scales, out: product, bias: backend.fromArray(Array.from(backend.download(args.bias)), [N], 'f32') });
  const p = backend.download(product), silu = (v: number) => v / (1 + Math.exp(-v));
  const expected = Array.from({ length: M * F }, (_, i) => { const m = Math.floor(i / F), n = i % F; return silu(p[m * N + n]!) * p[m * N + F + n]!; });
  const gated = backend.empty([M, F], 'bf16');
  backend.int8Linear({ ...args, out: gated, gated: true, activation: 'silu' });
  assertClose(backend.download(gated), expected, 1e-2);
  assertRejects(() => backend.int8Linear({ ...args, out: gated, gated: true }), 'int8Linear', 'activation');
  assertRejects(() => backend.int8Linear({ ...args, out: backend.empty([M, N], 'bf16'), gated: true, activation: 'silu' }), 'int8Linear', 'out', ShapeError);
  assertRejects(() => backend.int8Linear({ ...args, qweight: backend.empty([N, K], 'u8'), out }), 'int8Linear', 'qweight', DTypeError);
  assertRejects(() => backend.int8Linear({ ...args, out, scratch: { xq, rowScales, acc: backend.empty([M, N + 1], 'i32') } }), 'int8Linear', 'scratch.acc', ShapeError);
  assertRejects(() => backend.int8Linear({ ...args, out: gated, gated: true, activation: 'silu', scratch: { xq, rowScales, acc } }), 'int8Linear', 'up');
});

test('bad arguments are rejected naming the op and the argument', () => {
  const N = 4, K = 64;
  const ok = { x: backend.empty([2, K], 'f32'), qweight: backend.empty([N, K / 8], 'i32'), scales: backend.empty([N, 2], 'f16'), zeros: backend.empty([N, 2], 'u8'), groupSize: 32, out: backend.empty([2, N], 'f32') };
  assertRejects(() => backend.int4Linear({ ...ok, groupSize: 48 }), 'int4Linear', 'groupSize');
  assertRejects(() => backend.int4Linear({ ...ok, groupSize: 128 }), 'int4Linear', 'groupSize');
  assertRejects(() => backend.int4Linear({ ...ok, scales: backend.empty([N, 2], 'f32') }), 'int4Linear', 'scales', DTypeError);
  assertRejects(() => backend.int4Linear({ ...ok, qweight: backend.empty([N, K / 4], 'i32') }), 'int4Linear', 'qweight', ShapeError);
  assertRejects(() => backend.int4Linear({ ...ok, out: backend.empty([2, N], 'bf16') }), 'int4Linear', 'out', DTypeError);
  assertRejects(() => backend.int4Linear({ ...ok, activation: 'tanh' as never }), 'int4Linear', 'activation');
  assertRejects(() => backend.int8QuantizeRows({ x: backend.empty([2, 8], 'f32'), out: backend.empty([2, 8], 'u8'), scales: backend.empty([2], 'f32') }), 'int8QuantizeRows', 'out', DTypeError);
  assertRejects(() => backend.int8Gemm({ a: backend.empty([2, 8], 'i8'), b: backend.empty([4, 4], 'i8'), out: backend.empty([2, 4], 'i32') }), 'int8Gemm', 'b', ShapeError);
  assertRejects(() => backend.int8Dequantize({ acc: backend.empty([2, 4], 'i32'), rowScales: backend.empty([2], 'f32'), colScales: backend.empty([4], 'f32'), out: backend.empty([2, 4], 'i32') }), 'int8Dequantize', 'out', DTypeError);
  assert.throws(() => backend.int4QuantizeWeights({ weight: backend.fromArray(new Array(N * K).fill(NaN), [N, K], 'f32'), groupSize: 32, qweight: ok.qweight, scales: ok.scales, zeros: ok.zeros }),
    /int4QuantizeWeights: 'weight' has a non-finite value NaN at \[0, 0\]/);
});
