import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { AdamWArgs } from '../../../src/backend/backend.js';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import type { FloatDType } from '../../../src/dtype.js';
import { roundToDType } from '../../../src/dtype.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();
const hyper = { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 };

test('one step from zero state matches the hand-computed value', () => {
  const params = backend.fromArray([1, -2], [2], 'f32');
  const m = backend.empty([2], 'f32'), v = backend.empty([2], 'f32');
  backend.adamW({ params, grads: backend.fromArray([1, -0.5], [2], 'f32'), m, v, ...hyper, step: 1, gradScale: 0.5 });
  // g = (0.5, −0.25); m = 0.1·g; v = 0.001·g²; m̂ = g, v̂ = g², so the step is g/(|g| + eps) ≈ ±1:
  // θ₀ = 1 − 0.1·(0.5/(0.5 + 1e-8) + 0.01·1)        = 0.899000002
  // θ₁ = −2 − 0.1·(−0.25/(0.25 + 1e-8) + 0.01·(−2)) = −1.898000004
  assertClose(backend.download(params), [0.899000002, -1.898000004], 1e-7, 'params');
  assertClose(backend.download(m), [0.05, -0.025], 1e-7, 'm');
  assertClose(backend.download(v), [0.00025, 0.0000625], 1e-7, 'v');
});

/** The documented update, one scalar at a time, in float64. */
function referenceAdamW(theta: number[], grads: number[][], m0: number[], v0: number[], gradScale: number): number[] {
  const { lr, beta1, beta2, eps, weightDecay } = hyper;
  return theta.map((t, i) => {
    let [th, mi, vi] = [t, m0[i]!, v0[i]!];
    grads.forEach((g, s) => {
      const step = s + 1, grad = g[i]! * gradScale;
      mi = beta1 * mi + (1 - beta1) * grad;
      vi = beta2 * vi + (1 - beta2) * grad * grad;
      th -= lr * ((mi / (1 - beta1 ** step)) / (Math.sqrt(vi / (1 - beta2 ** step)) + eps) + weightDecay * th);
    });
    return th;
  });
}

function runSteps(dtype: FloatDType, withMaster: boolean, theta: number[], grads: number[][], m0: number[], v0: number[], gradScale: number) {
  const n = theta.length;
  const params = backend.fromArray(theta, [n], dtype);
  const master = withMaster ? backend.fromArray(theta, [n], 'f32') : undefined;
  const m = backend.fromArray(m0, [n], 'f32'), v = backend.fromArray(v0, [n], 'f32');
  grads.forEach((g, s) => backend.adamW({ params, grads: backend.fromArray(g, [n], dtype), m, v, ...(master ? { master } : {}), ...hyper, step: s + 1, gradScale }));
  return { params: Array.from(backend.download(params)), master: master ? Array.from(backend.download(master)) : undefined };
}

const n = 16;
const theta = randomValues(1, n, -2, 2);
const grads = [randomValues(2, n), randomValues(3, n), randomValues(4, n)];
const m0 = randomValues(5, n, -0.1, 0.1), v0 = randomValues(6, n, 0, 0.01);

test('three steps with non-zero starting state follow the documented update', () => {
  const { params } = runSteps('f32', false, theta, grads, m0, v0, 0.5);
  assertClose(params, referenceAdamW(theta, grads, m0, v0, 0.5), 1e-6);
});

test('in f32, master mode and no-master mode agree exactly', () => {
  const withMaster = runSteps('f32', true, theta, grads, m0, v0, 0.5);
  const without = runSteps('f32', false, theta, grads, m0, v0, 0.5);
  assert.deepEqual(withMaster.params, without.params);
  assert.deepEqual(withMaster.master, without.params);
});

test('with f16 params, the f32 master follows the update and params are the master rounded to f16', () => {
  const theta16 = theta.map((t) => roundToDType(t, 'f16')), grads16 = grads.map((g) => g.map((x) => roundToDType(x, 'f16')));
  const { params, master } = runSteps('f16', true, theta16, grads16, m0, v0, 1);
  assertClose(master!, referenceAdamW(theta16, grads16, m0, v0, 1), 1e-6, 'master');
  assert.deepEqual(params, master!.map((t) => roundToDType(t, 'f16')));
});

test('no-master mode with bf16 params keeps bf16 values and stays within bf16 precision of the update', () => {
  const thetaBf = theta.map((t) => roundToDType(t, 'bf16')), gradsBf = grads.map((g) => g.map((x) => roundToDType(x, 'bf16')));
  const { params } = runSteps('bf16', false, thetaBf, [gradsBf[0]!], m0, v0, 1);
  assert.ok(params.every((t) => roundToDType(t, 'bf16') === t));
  assertClose(params, referenceAdamW(thetaBf, [gradsBf[0]!], m0, v0, 1), 2 ** -8);
});

test('validation names the op and the argument', () => {
  const args = (): AdamWArgs => ({ params: backend.empty([4], 'f16'), grads: backend.empty([4], 'f16'), m: backend.empty([4], 'f32'), v: backend.empty([4], 'f32'), ...hyper, step: 1 });
  assertRejects(() => backend.adamW({ ...args(), m: backend.empty([4], 'f16') }), 'adamW', 'm', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), grads: backend.empty([4], 'f32') }), 'adamW', 'grads', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), master: backend.empty([4], 'bf16') }), 'adamW', 'master', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), v: backend.empty([5], 'f32') }), 'adamW', 'v', ShapeError);
  assertRejects(() => backend.adamW({ ...args(), step: 0 }), 'adamW', 'step', ArgumentError);
  assertRejects(() => backend.adamW({ ...args(), beta1: 1.5 }), 'adamW', 'beta1', ArgumentError);
  assertRejects(() => backend.adamW({ ...args(), lr: -1 }), 'adamW', 'lr', ArgumentError);
});
