// normMlp on the CPU reference: the residual norm, then out += act(h·upᵀ + upBias)·downᵀ into an f32
// accumulator, equals residualNorm, the fc GEMM with its epilogue and the down GEMM added to what out held
// (bf16 too: the hidden row rounded as the unfused fc stores it); `zero` is cleared; bad operands are named.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { FloatDType } from '../../../src/dtype.js';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { assertClose, randomValues } from './helpers.js';

const b = new CpuBackend();
const tensor = (seed: number, shape: number[], dtype: FloatDType = 'f32', lo = -1, hi = 1) => b.fromArray(randomValues(seed, shape.reduce((x, y) => x * y, 1), lo, hi), shape, dtype);
const floats = (t: Parameters<CpuBackend['download']>[0]) => Array.from(b.download(t) as ArrayLike<number>);

/** The operands of a GPT-2-like MLP of M rows, width H, F hidden features; y is f32 when `yF32`. */
function operands(M: number, H: number, F: number, dtype: FloatDType, seed: number, yF32 = false) {
  return {
    x: tensor(seed, [M, H], dtype, -2, 2), y: tensor(seed + 1, [M, H], yF32 ? 'f32' : dtype), bias: tensor(seed + 2, [H], dtype),
    gamma: tensor(seed + 3, [H], dtype, 0.5, 1.5), beta: tensor(seed + 4, [H], dtype), up: tensor(seed + 5, [F, H], dtype, -0.3, 0.3),
    upBias: tensor(seed + 6, [F], dtype), down: tensor(seed + 7, [H, F], dtype, -0.3, 0.3), out: tensor(seed + 8, [M, H], 'f32'),
  };
}

test('normMlp equals residualNorm, the fc GEMM with its activation and the down GEMM added into out', () => {
  for (const [M, H, F, dtype, yF32] of [[1, 32, 64, 'f32', false], [3, 48, 96, 'bf16', true], [4, 16, 40, 'f16', false]] as const) {
    const seed = 100 * M + H;
    const fused = operands(M, H, F, dtype, seed, yF32), usual = operands(M, H, F, dtype, seed, yF32);
    const outBefore = floats(usual.out), zero = tensor(seed + 9, [2, H], 'f32');
    const h = b.empty([M, H], dtype);
    b.normMlp({
      norm: { x: fused.x, y: fused.y, bias: fused.bias, norm: 'layer', gamma: fused.gamma, beta: fused.beta, out: h, eps: 1e-5 },
      up: fused.up, upBias: fused.upBias, activation: 'gelu_tanh', down: fused.down, out: fused.out, zero,
    });
    const uh = b.empty([M, H], dtype), act = b.empty([M, F], dtype), y2 = b.empty([M, H], 'f32');
    b.residualNorm({ x: usual.x, y: usual.y, bias: usual.bias, norm: 'layer', gamma: usual.gamma, beta: usual.beta, out: uh, eps: 1e-5 });
    b.gemm({ a: uh, b: usual.up, out: act, transB: true, epilogue: 'gelu_bias', bias: usual.upBias });
    const actF32 = b.empty([M, F], 'f32'), upF32 = b.empty([H, F], 'f32');
    b.copy(act, actF32);
    b.copy(usual.down, upF32);
    b.gemm({ a: actF32, b: upF32, out: y2, transB: true });
    const expected = floats(y2).map((v, i) => v + outBefore[i]!);
    const label = `${M}×${H}×${F} ${dtype}${yF32 ? ' (f32 y)' : ''}`;
    assert.deepEqual(floats(fused.x), floats(usual.x), `${label}: x += y + bias`);
    assert.deepEqual(floats(h), floats(uh), `${label}: the norm's output`);
    assertClose(floats(fused.out), expected, 1e-5, `${label}: out`);
    assert.ok(floats(fused.out).some((v, i) => Math.abs(v - outBefore[i]!) > 1e-3), `${label}: out changed`);
    assert.deepEqual(floats(zero), new Array(2 * H).fill(0), `${label}: zero cleared`);
  }
});

test('normMlp names bad operands', () => {
  const o = operands(2, 16, 32, 'bf16', 7);
  const args = () => ({
    norm: { x: o.x, y: o.y, bias: o.bias, norm: 'layer' as const, gamma: o.gamma, beta: o.beta, out: b.empty([2, 16], 'bf16'), eps: 1e-5 },
    up: o.up, upBias: o.upBias, activation: 'gelu_tanh' as const, down: o.down, out: o.out,
  });
  assert.throws(() => b.normMlp({ ...args(), out: b.empty([2, 16], 'bf16') }), /normMlp.*'out'/);
  assert.throws(() => b.normMlp({ ...args(), out: b.empty([3, 16], 'f32') }), /normMlp.*'out'/);
  assert.throws(() => b.normMlp({ ...args(), down: tensor(1, [32, 16], 'bf16') }), /normMlp.*'down'/);
  assert.throws(() => b.normMlp({ ...args(), up: tensor(1, [32, 16], 'f32') }), /normMlp.*'up'/);
  assert.throws(() => b.normMlp({ ...args(), zero: o.out }), /normMlp.*'zero'/);
  assert.throws(() => b.normMlp({ ...args(), zero: b.empty([4], 'bf16') }), /normMlp.*'zero'/);
  assert.throws(() => b.normMlp({ ...args(), activation: 'swish' as never }), /normMlp.*activation/);
});
