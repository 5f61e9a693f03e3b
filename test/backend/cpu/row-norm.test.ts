// The RMS norm split across two products (backend.ts RowNormSquares / RowNormScale) on the CPU reference:
// a product adding into x that leaves x ⊙ γ and x's partial sums of squares, then a product (plain or
// gated) of x ⊙ γ with its rows scaled by 1/rms, equals the residual add, residualNorm and the product;
// and bad operands are rejected with errors that name them.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { GemmEpilogue } from '../../../src/backend/backend.js';
import { rowSquareSlots } from '../../../src/backend/backend.js';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { assertClose, randomValues } from './helpers.js';

const b = new CpuBackend();
const tensor = (seed: number, shape: number[], lo = -1, hi = 1) => b.fromArray(randomValues(seed, shape.reduce((x, y) => x * y, 1), lo, hi), shape, 'f32');

/** x [M, H] += a·woᵀ with rowSquares of γ; returns x after, x ⊙ γ and the sums, and the tensors. */
function producer(M: number, H: number, A: number, seed: number) {
  const x = tensor(seed, [M, H], -2, 2), a = tensor(seed + 1, [M, A]), wo = tensor(seed + 2, [H, A], -0.3, 0.3), gamma = tensor(seed + 3, [H], 0.5, 1.5);
  const before = b.download(x) as Float32Array;
  const scaled = b.empty([M, H], 'f32'), squares = b.empty([M, rowSquareSlots(H)], 'f32');
  b.fill(scaled, NaN);
  b.fill(squares, NaN);
  b.gemm({ a, b: wo, out: x, transB: true, beta: 1, rowSquares: { gamma, scaled, squares } });
  return { x, gamma, scaled, squares, before, a, wo };
}

test('rowSquares: out as stored, out ⊙ γ and each row\'s sums of squares over 16 columns', () => {
  for (const [M, H] of [[5, 96], [3, 70], [1, 16]] as const) {
    const { x, gamma, scaled, squares, before, a, wo } = producer(M, H, 24, 10 * M + H);
    const expected = b.empty([M, H], 'f32');
    b.copy(b.fromArray(before, [M, H], 'f32'), expected);
    b.gemm({ a, b: wo, out: expected, transB: true, beta: 1 });
    const xv = b.download(x) as Float32Array, g = b.download(gamma) as Float32Array;
    assertClose(xv, b.download(expected), 0, 'x');
    const slots = rowSquareSlots(H), sums = new Float64Array(M * slots), times = new Float64Array(M * H);
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < H; n++) {
        sums[m * slots + Math.floor(n / 16)] += xv[m * H + n]! ** 2;
        times[m * H + n] = Math.fround(xv[m * H + n]! * g[n]!);
      }
    }
    assertClose(b.download(squares), sums, 1e-6, `squares M=${M} H=${H}`);
    assertClose(b.download(scaled), times, 0, `scaled M=${M} H=${H}`);
  }
});

test('rowScale of x ⊙ γ equals residualNorm (RMS) then the product: plain GEMM epilogues and the gated product', () => {
  const M = 6, H = 80, N = 36, F = 20, eps = 1e-5;
  const { x, gamma, scaled, squares } = producer(M, H, 12, 7);
  const h = b.empty([M, H], 'f32');
  b.residualNorm({ x, norm: 'rms', gamma, out: h, eps });
  const w = tensor(21, [N, H], -0.2, 0.2), bias = tensor(22, [N]);
  for (const epilogue of ['none', 'bias', 'gelu_bias', 'relu_bias'] as GemmEpilogue[]) {
    const withBias = epilogue === 'none' ? {} : { bias };
    const expected = b.empty([M, N], 'f32'), actual = b.empty([M, N], 'f32');
    b.gemm({ a: h, b: w, out: expected, transB: true, epilogue, ...withBias });
    b.gemm({ a: scaled, b: w, out: actual, transB: true, epilogue, ...withBias, rowScale: { squares, eps } });
    assertClose(b.download(actual), b.download(expected), 1e-5, epilogue);
  }
  const wg = tensor(23, [2 * F, H], -0.2, 0.2), gbias = tensor(24, [2 * F]);
  for (const withBias of [{}, { bias: gbias }]) {
    const expected = b.empty([M, F], 'f32'), actual = b.empty([M, F], 'f32'), up = b.empty([M, 2 * F], 'f32');
    b.gatedLinear({ x: h, weight: wg, up, out: expected, activation: 'silu', ...withBias });
    b.gatedLinear({ x: scaled, weight: wg, up, out: actual, activation: 'silu', ...withBias, rowScale: { squares, eps } });
    assertClose(b.download(actual), b.download(expected), 1e-5, `gated ${'bias' in withBias ? 'with' : 'without'} bias`);
  }
});

test('rowSquares / rowScale: wrong shapes and dtypes are errors naming the operand', () => {
  const M = 4, H = 32;
  const a = tensor(1, [M, H]), w = tensor(2, [H, H]), out = tensor(3, [M, H]), gamma = tensor(4, [H]);
  const scaled = b.empty([M, H], 'f32'), squares = b.empty([M, rowSquareSlots(H)], 'f32');
  assert.throws(() => b.gemm({ a, b: w, out, transB: true, rowScale: { squares: b.empty([M, 3], 'f32'), eps: 1e-5 } }), /gemm: 'rowScale.squares' has shape \[4, 3\]/);
  assert.throws(() => b.gemm({ a, b: w, out, transB: true, rowScale: { squares: b.empty([M, 2], 'f16'), eps: 1e-5 } }), /'rowScale.squares' has dtype f16 but expected f32/);
  assert.throws(() => b.gemm({ a, b: w, out, transB: true, rowScale: { squares, eps: -1 } }), /rowScale.eps/);
  assert.throws(() => b.gemm({ a, b: w, out, transB: true, rowSquares: { gamma: tensor(5, [H + 1]), scaled, squares } }), /'rowSquares.gamma' has shape \[33\]/);
  assert.throws(() => b.gemm({ a, b: w, out, transB: true, rowSquares: { gamma, scaled: b.empty([M, H], 'f16'), squares } }), /'rowSquares.scaled' has dtype f16/);
  assert.throws(() => b.gatedLinear({ x: a, weight: tensor(6, [8, H]), up: b.empty([M, 8], 'f32'), out: b.empty([M, 4], 'f32'), activation: 'silu', rowScale: { squares: b.empty([M + 1, 2], 'f32'), eps: 0 } }), /gatedLinear: 'rowScale.squares'/);
});
