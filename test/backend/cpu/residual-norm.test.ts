// residualNorm with an f32 y beside bf16 x (the f32 accumulator a fused MLP leaves) against a direct
// float64 computation: x ← bf16(x + y + bias), out = bf16(norm(x)); and the op check's refusal of any other y dtype.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { roundToDType } from '../../../src/dtype.js';
import { DTypeError } from '../../../src/errors.js';
import { assertClose, assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();
const bf16 = (x: number) => roundToDType(x, 'bf16');
const read = (t: ReturnType<CpuBackend['empty']>) => Array.from(backend.download(t));

/** x + y + bias rounded to bf16, then LayerNorm (beta given) or RMSNorm of those rows, in float64, rounded to bf16. */
function reference(x: number[], y: number[], bias: number[] | undefined, gamma: number[], beta: number[] | undefined, rows: number, H: number, eps: number) {
  const sum = x.map((v, i) => bf16(v + y[i]! + (bias ? bias[i % H]! : 0)));
  const out: number[] = [];
  for (let r = 0; r < rows; r++) {
    const row = sum.slice(r * H, (r + 1) * H);
    const mean = beta ? row.reduce((a, b) => a + b, 0) / H : 0;
    const rstd = 1 / Math.sqrt(row.reduce((a, v) => a + (v - mean) ** 2, 0) / H + eps);
    row.forEach((v, h) => out.push(bf16((v - mean) * rstd * gamma[h]! + (beta ? beta[h]! : 0))));
  }
  return { sum, out };
}

test('residualNorm reads an f32 y at full precision beside bf16 x: x = bf16(x + y + bias), out = bf16(norm(x)), LayerNorm and RMSNorm', () => {
  const [rows, H, eps] = [3, 96, 1e-5];
  // bf16 inputs hold bf16 values; y keeps its f32 bits (randomValues rounds to f32 only).
  const x = randomValues(21, rows * H, -2, 2).map(bf16), y = randomValues(22, rows * H, -1, 1);
  const bias = randomValues(23, H, -0.5, 0.5).map(bf16), gamma = randomValues(24, H, 0.5, 1.5).map(bf16), beta = randomValues(25, H, -0.5, 0.5).map(bf16);
  assert.ok(y.some((v) => v !== bf16(v)), 'y has bits past bf16');
  for (const norm of ['layer', 'rms'] as const) {
    const layer = norm === 'layer';
    const xt = backend.fromArray(x, [rows, H], 'bf16'), out = backend.empty([rows, H], 'bf16');
    backend.residualNorm({
      x: xt, y: backend.fromArray(y, [rows, H], 'f32'), ...(layer ? { bias: backend.fromArray(bias, [H], 'bf16'), beta: backend.fromArray(beta, [H], 'bf16') } : {}),
      norm, gamma: backend.fromArray(gamma, [H], 'bf16'), out, eps,
    });
    const expected = reference(x, y, layer ? bias : undefined, gamma, layer ? beta : undefined, rows, H, eps);
    assertClose(read(xt), expected.sum, 0, `${norm} x`);
    assertClose(read(out), expected.out, 2 ** -8, `${norm} out`); // one bf16 rounding apart at most
    // y was not rounded to x's dtype first: that would store a different x somewhere.
    const roundedFirst = reference(x, y.map(bf16), layer ? bias : undefined, gamma, layer ? beta : undefined, rows, H, eps);
    assert.ok(roundedFirst.sum.some((v, i) => v !== expected.sum[i]), `${norm}: the inputs tell an f32 y from a bf16 one`);
  }
});

test('residualNorm: y in x\'s dtype or f32, anything else refused naming y, its dtype and what is allowed; the other tensors keep x\'s dtype', () => {
  const [rows, H] = [2, 8];
  const values = randomValues(31, rows * H);
  const t = (dtype: 'bf16' | 'f16' | 'f32', shape: number[]) => backend.fromArray(values.slice(0, shape.reduce((a, b) => a * b, 1)), shape, dtype);
  const args = (xDType: 'bf16' | 'f32', y: ReturnType<CpuBackend['empty']>) => ({
    x: t(xDType, [rows, H]), y, norm: 'rms' as const, gamma: t(xDType, [H]), out: backend.empty([rows, H], xDType), eps: 1e-5,
  });
  const refused = (call: () => void, pattern: RegExp) => {
    assertRejects(call, 'residualNorm', 'y', DTypeError);
    assert.throws(call, pattern);
  };
  refused(() => backend.residualNorm(args('bf16', t('f16', [rows, H]))), /'y' has dtype f16 but expected x's dtype \(bf16\) or f32/);
  refused(() => backend.residualNorm(args('bf16', backend.fromArray(Array.from({ length: rows * H }, (_, i) => i), [rows, H], 'i32'))), /'y' has dtype i32 but expected x's dtype \(bf16\) or f32/);
  refused(() => backend.residualNorm(args('f32', t('bf16', [rows, H]))), /'y' has dtype bf16 but expected x's dtype \(f32\)$/);
  // Only y may differ from x: an f32 gamma or out beside bf16 x is still refused by name.
  assertRejects(() => backend.residualNorm({ ...args('bf16', t('f32', [rows, H])), gamma: t('f32', [H]) }), 'residualNorm', 'gamma', DTypeError);
  assertRejects(() => backend.residualNorm({ ...args('bf16', t('f32', [rows, H])), out: backend.empty([rows, H], 'f32') }), 'residualNorm', 'out', DTypeError);
  // And an f32 y beside f16 x is taken (as beside bf16).
  backend.residualNorm({ x: t('f16', [rows, H]), y: t('f32', [rows, H]), norm: 'rms', gamma: t('f16', [H]), out: backend.empty([rows, H], 'f16'), eps: 1e-5 });
});
