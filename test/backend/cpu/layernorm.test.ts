import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { roundToDType } from '../../../src/dtype.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, numericGradient, randomValues, weightedSum } from './helpers.js';

const backend = new CpuBackend();
const f32 = (values: readonly number[], shape: number[]) => backend.fromArray(values, shape, 'f32');
const [rows, H] = [3, 6];
const eps = 1e-5;
const x = randomValues(1, rows * H, -2, 3);
const gamma = randomValues(2, H, 0.5, 1.5);
const beta = randomValues(3, H);
const w = randomValues(4, rows * H);
const row = (values: ArrayLike<number>, r: number) => Array.from(values).slice(r * H, (r + 1) * H);
const mean = (v: number[]) => v.reduce((s, a) => s + a, 0) / v.length;

function layerNorm(xs: readonly number[], g: readonly number[], b: readonly number[], dtype: 'f32' | 'bf16' = 'f32') {
  const out = backend.empty([rows, H], dtype), meanT = backend.empty([rows], 'f32'), rstd = backend.empty([rows], 'f32');
  backend.layerNormForward({ x: backend.fromArray(xs, [rows, H], dtype), gamma: backend.fromArray(g, [H], dtype), beta: backend.fromArray(b, [H], dtype), out, mean: meanT, rstd, eps });
  return { out: backend.download(out), mean: meanT, rstd };
}

function rmsNorm(xs: readonly number[], g: readonly number[]) {
  const out = backend.empty([rows, H], 'f32'), rstd = backend.empty([rows], 'f32');
  backend.rmsNormForward({ x: f32(xs, [rows, H]), gamma: f32(g, [H]), out, rstd, eps });
  return { out: backend.download(out), rstd };
}

describe('layerNorm', () => {
  test('before the affine step each row has mean 0 and variance 1; mean and rstd are saved', () => {
    const ones = new Array<number>(H).fill(1), zeros = new Array<number>(H).fill(0);
    const { out, mean: meanT, rstd } = layerNorm(x, ones, zeros);
    for (let r = 0; r < rows; r++) {
      const y = row(out, r), xr = row(x, r);
      const variance = mean(xr.map((v) => (v - mean(xr)) ** 2));
      assert.ok(Math.abs(mean(y)) < 1e-6, `row ${r} mean ${mean(y)}`);
      assertClose([mean(y.map((v) => v * v))], [variance / (variance + eps)], 1e-6, `row ${r} variance`);
      assertClose([backend.download(meanT)[r]!], [mean(xr)], 1e-6, 'mean');
      assertClose([backend.download(rstd)[r]!], [1 / Math.sqrt(variance + eps)], 1e-6, 'rstd');
    }
  });

  test('out = x̂·gamma + beta', () => {
    const plain = layerNorm(x, new Array<number>(H).fill(1), new Array<number>(H).fill(0)).out;
    assertClose(layerNorm(x, gamma, beta).out, Array.from(plain).map((v, i) => v * gamma[i % H]! + beta[i % H]!), 1e-6);
  });

  test('bf16 output holds bf16 values', () => {
    const { out } = layerNorm(x, gamma, beta, 'bf16');
    assert.ok(Array.from(out).every((v) => roundToDType(v, 'bf16') === v));
    assertClose(out, layerNorm(x, gamma, beta).out, 2 ** -7); // bf16 keeps 8 significant bits
  });

  test('backward matches finite differences for x, gamma and beta', () => {
    const { mean: meanT, rstd } = layerNorm(x, gamma, beta);
    const dX = backend.empty([rows, H], 'f32'), dGamma = f32(new Array<number>(H).fill(NaN), [H]), dBeta = f32(new Array<number>(H).fill(NaN), [H]);
    backend.layerNormBackward({ dOut: f32(w, [rows, H]), x: f32(x, [rows, H]), gamma: f32(gamma, [H]), mean: meanT, rstd, dX, dGamma, dBeta });
    assertClose(backend.download(dX), numericGradient((p) => weightedSum(layerNorm(p, gamma, beta).out, w), x), 2e-3, 'dX');
    assertClose(backend.download(dGamma), numericGradient((p) => weightedSum(layerNorm(x, p, beta).out, w), gamma), 2e-3, 'dGamma');
    assertClose(backend.download(dBeta), numericGradient((p) => weightedSum(layerNorm(x, gamma, p).out, w), beta), 2e-3, 'dBeta');
  });

  test('dResidual is added to dX; accumulate adds to dGamma and dBeta', () => {
    const { mean: meanT, rstd } = layerNorm(x, gamma, beta);
    const common = { dOut: f32(w, [rows, H]), x: f32(x, [rows, H]), gamma: f32(gamma, [H]), mean: meanT, rstd };
    const plain = { dX: backend.empty([rows, H], 'f32'), dGamma: backend.empty([H], 'f32'), dBeta: backend.empty([H], 'f32') };
    backend.layerNormBackward({ ...common, ...plain });
    const residual = randomValues(5, rows * H), startGamma = randomValues(6, H), startBeta = randomValues(7, H);
    const fused = { dX: backend.empty([rows, H], 'f32'), dGamma: f32(startGamma, [H]), dBeta: f32(startBeta, [H]) };
    backend.layerNormBackward({ ...common, ...fused, dResidual: f32(residual, [rows, H]), accumulate: true });
    assertClose(backend.download(fused.dX), Array.from(backend.download(plain.dX)).map((v, i) => v + residual[i]!), 1e-6, 'dX');
    assertClose(backend.download(fused.dGamma), Array.from(backend.download(plain.dGamma)).map((v, i) => v + startGamma[i]!), 1e-6, 'dGamma');
    assertClose(backend.download(fused.dBeta), Array.from(backend.download(plain.dBeta)).map((v, i) => v + startBeta[i]!), 1e-6, 'dBeta');
  });

  test('validation names the op and the argument', () => {
    const args = () => ({ x: backend.empty([2, 4], 'f32'), gamma: backend.empty([4], 'f32'), beta: backend.empty([4], 'f32'), out: backend.empty([2, 4], 'f32'), mean: backend.empty([2], 'f32'), rstd: backend.empty([2], 'f32'), eps });
    assertRejects(() => backend.layerNormForward({ ...args(), mean: backend.empty([2], 'bf16') }), 'layerNormForward', 'mean', DTypeError);
    assertRejects(() => backend.layerNormForward({ ...args(), gamma: backend.empty([5], 'f32') }), 'layerNormForward', 'gamma', ShapeError);
    assertRejects(() => backend.layerNormForward({ ...args(), rstd: backend.empty([3], 'f32') }), 'layerNormForward', 'rstd', ShapeError);
    assertRejects(() => backend.layerNormForward({ ...args(), eps: -1 }), 'layerNormForward', 'eps', ArgumentError);
    assertRejects(() => backend.layerNormForward({ ...args(), out: backend.empty([2, 4], 'f16') }), 'layerNormForward', 'out', DTypeError);
    const { x: xt, gamma: g, mean: m, rstd: s } = args();
    assertRejects(() => backend.layerNormBackward({ dOut: backend.empty([2, 4], 'f32'), x: xt, gamma: g, mean: m, rstd: s, dX: backend.empty([2, 4], 'f32'), dGamma: backend.empty([4], 'f32'), dBeta: backend.empty([4], 'f32'), dResidual: backend.empty([4, 2], 'f32') }), 'layerNormBackward', 'dResidual', ShapeError);
  });
});

describe('rmsNorm', () => {
  test('with gamma = 1 each row has mean square ≈ 1; rstd = 1/√(mean(x²) + eps)', () => {
    const { out, rstd } = rmsNorm(x, new Array<number>(H).fill(1));
    for (let r = 0; r < rows; r++) {
      const meanSquare = mean(row(x, r).map((v) => v * v));
      assertClose([mean(row(out, r).map((v) => v * v))], [meanSquare / (meanSquare + eps)], 1e-6, `row ${r}`);
      assertClose([backend.download(rstd)[r]!], [1 / Math.sqrt(meanSquare + eps)], 1e-6, 'rstd');
    }
    assertClose(rmsNorm(x, gamma).out, Array.from(out).map((v, i) => v * gamma[i % H]!), 1e-6, 'gamma scales');
  });

  test('backward matches finite differences; dResidual adds and accumulate accumulates', () => {
    const { rstd } = rmsNorm(x, gamma);
    const common = { dOut: f32(w, [rows, H]), x: f32(x, [rows, H]), gamma: f32(gamma, [H]), rstd };
    const dX = backend.empty([rows, H], 'f32'), dGamma = f32(new Array<number>(H).fill(NaN), [H]);
    backend.rmsNormBackward({ ...common, dX, dGamma });
    assertClose(backend.download(dX), numericGradient((p) => weightedSum(rmsNorm(p, gamma).out, w), x), 2e-3, 'dX');
    assertClose(backend.download(dGamma), numericGradient((p) => weightedSum(rmsNorm(x, p).out, w), gamma), 2e-3, 'dGamma');

    const residual = randomValues(8, rows * H), start = randomValues(9, H);
    const fusedX = backend.empty([rows, H], 'f32'), fusedGamma = f32(start, [H]);
    backend.rmsNormBackward({ ...common, dX: fusedX, dGamma: fusedGamma, dResidual: f32(residual, [rows, H]), accumulate: true });
    assertClose(backend.download(fusedX), Array.from(backend.download(dX)).map((v, i) => v + residual[i]!), 1e-6, 'dX + dResidual');
    assertClose(backend.download(fusedGamma), Array.from(backend.download(dGamma)).map((v, i) => v + start[i]!), 1e-6, 'dGamma accumulated');
  });

  test('validation names the op and the argument', () => {
    assertRejects(() => backend.rmsNormForward({ x: backend.empty([2, 4], 'f32'), gamma: backend.empty([4], 'f32'), out: backend.empty([2, 4], 'f32'), rstd: backend.empty([2], 'f16'), eps }), 'rmsNormForward', 'rstd', DTypeError);
    assertRejects(() => backend.rmsNormBackward({ dOut: backend.empty([2, 4], 'f32'), x: backend.empty([2, 5], 'f32'), gamma: backend.empty([4], 'f32'), rstd: backend.empty([2], 'f32'), dX: backend.empty([2, 4], 'f32'), dGamma: backend.empty([4], 'f32') }), 'rmsNormBackward', 'x', ShapeError);
  });
});
