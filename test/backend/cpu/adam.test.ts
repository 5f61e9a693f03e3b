import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { AdamWArgs, AdamWCommonArgs, AdamWHostScalars } from '../../../src/backend/backend.js';
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
  const args = (): AdamWCommonArgs & AdamWHostScalars => ({ params: backend.empty([4], 'f16'), grads: backend.empty([4], 'f16'), m: backend.empty([4], 'f32'), v: backend.empty([4], 'f32'), ...hyper, step: 1 });
  assertRejects(() => backend.adamW({ ...args(), m: backend.empty([4], 'f16') }), 'adamW', 'm', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), grads: backend.empty([4], 'f32') }), 'adamW', 'grads', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), master: backend.empty([4], 'bf16') }), 'adamW', 'master', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), v: backend.empty([5], 'f32') }), 'adamW', 'v', ShapeError);
  assertRejects(() => backend.adamW({ ...args(), step: 0 }), 'adamW', 'step', ArgumentError);
  assertRejects(() => backend.adamW({ ...args(), beta1: 1.5 }), 'adamW', 'beta1', ArgumentError);
  assertRejects(() => backend.adamW({ ...args(), lr: -1 }), 'adamW', 'lr', ArgumentError);
  const scalars = backend.empty([4], 'f32');
  const { lr: _lr, step: _step, gradScale: _gradScale, ...noHost } = args();
  assertRejects(() => backend.adamW({ ...args(), scalars } as unknown as AdamWArgs), 'adamW', 'lr', ArgumentError);
  assertRejects(() => backend.adamW({ ...noHost, scalars: backend.empty([3], 'f32') }), 'adamW', 'scalars', ShapeError);
  assertRejects(() => backend.adamW({ ...noHost, scalars: backend.empty([4], 'f16') }), 'adamW', 'scalars', DTypeError);
  assertRejects(() => backend.adamW({ ...args(), clip: { sumSquares: backend.empty([2], 'f32'), maxNorm: 1 } }), 'adamW', 'clip.sumSquares', ShapeError);
  assertRejects(() => backend.adamW({ ...args(), clip: { sumSquares: backend.empty([1], 'f32'), maxNorm: 0 } }), 'adamW', 'clip.maxNorm', ArgumentError);
  assertRejects(() => backend.adamW({ ...args(), clip: { sumSquares: backend.empty([1], 'f32'), maxNorm: NaN } }), 'adamW', 'clip.maxNorm', ArgumentError);
});

// --- device scalars and the clip ---------------------------------------------------------------------

/** [lr, gradScale, 1 − β1^step, 1 − β2^step] as the f32 tensor the graph-captured step reads. */
function scalarValues(lr: number, gradScale: number, step: number): number[] {
  return [lr, gradScale, 1 - hyper.beta1 ** step, 1 - hyper.beta2 ** step];
}

function state(withMaster: boolean) {
  return {
    params: backend.fromArray(theta, [n], 'f32'), grads: backend.fromArray(grads[0]!, [n], 'f32'),
    m: backend.fromArray(m0, [n], 'f32'), v: backend.fromArray(v0, [n], 'f32'),
    ...(withMaster ? { master: backend.fromArray(theta, [n], 'f32') } : {}),
  };
}

function snapshot(s: ReturnType<typeof state>): number[][] {
  return [s.params, s.m, s.v, ...(s.master ? [s.master] : [])].map((t) => Array.from(backend.download(t)));
}

const { lr: _lr, ...hyperNoLr } = hyper;

test('device scalars give the update of the same host numbers', () => {
  // The host path computes the bias corrections in f64, the scalars hold them rounded to f32.
  const lr = 0.125, gradScale = 0.5;
  const a = state(true), b = state(true);
  const [, , c1, c2] = scalarValues(lr, gradScale, 3).map(Math.fround);
  backend.adamW({ ...a, ...hyperNoLr, scalars: backend.fromArray([lr, gradScale, c1!, c2!], [4], 'f32') });
  backend.adamW({ ...b, ...hyperNoLr, lr, step: 3, gradScale });
  const [pa, ma, va] = snapshot(a), [pb, mb, vb] = snapshot(b);
  assertClose(pa!, pb!, 1e-6, 'params');
  assertClose(ma!, mb!, 1e-7, 'm');
  assertClose(va!, vb!, 1e-7, 'v');
});

test('a captured graph reads the scalars uploaded before each replay', () => {
  const s = state(false);
  const scalars = backend.fromArray(scalarValues(0.1, 0.5, 1), [4], 'f32');
  const graph = backend.captureGraph(() => backend.adamW({ ...s, ...hyperNoLr, scalars }));
  graph.replay();
  backend.upload(scalars, scalarValues(0.1, 0.5, 2));
  graph.replay();
  // The same two steps with the grads of step 1 both times.
  assertClose(backend.download(s.params), referenceAdamW(theta, [grads[0]!, grads[0]!], m0, v0, 0.5), 1e-6, 'params');
});

test('clip: the gradient is scaled by min(1, maxNorm / (norm + 1e-6)), norm = sqrt(Σ g²)·gradScale', () => {
  const gradScale = 0.5;
  const sumSquares = backend.empty([1], 'f32');
  const s = state(true);
  backend.sumSquares({ x: s.grads, out: sumSquares });
  const norm = Math.sqrt(backend.download(sumSquares)[0]!) * gradScale;
  const maxNorm = norm / 4;
  backend.adamW({ ...s, ...hyper, step: 1, gradScale, clip: { sumSquares, maxNorm } });
  const clipScale = maxNorm / (norm + 1e-6);
  assertClose(backend.download(s.master!), referenceAdamW(theta, [grads[0]!], m0, v0, gradScale * clipScale), 1e-6, 'master');

  // A norm under maxNorm (or maxNorm = Infinity) leaves the gradient alone.
  for (const bound of [norm * 2, Infinity]) {
    const t = state(false);
    backend.adamW({ ...t, ...hyper, step: 1, gradScale, clip: { sumSquares, maxNorm: bound } });
    assertClose(backend.download(t.params), referenceAdamW(theta, [grads[0]!], m0, v0, gradScale), 1e-6, `params (maxNorm ${bound})`);
  }
});

test('clip: a non-finite norm skips the whole update, with or without master, also with maxNorm = Infinity', () => {
  for (const bad of [Infinity, NaN]) {
    for (const withMaster of [true, false]) {
      const s = state(withMaster);
      const before = snapshot(s);
      const sumSquares = backend.fromArray([bad], [1], 'f32');
      backend.adamW({ ...s, ...hyper, step: 1, clip: { sumSquares, maxNorm: Infinity } });
      assert.deepEqual(snapshot(s), before, `sumSquares = ${bad}, master ${withMaster}`);
    }
  }
  // A finite Σ whose norm overflows f32 only after gradScale also counts as non-finite (as on the GPU).
  const s = state(false);
  const before = snapshot(s);
  backend.adamW({ ...s, ...hyper, step: 1, gradScale: 1e30, clip: { sumSquares: backend.fromArray([1e30], [1], 'f32'), maxNorm: 1 } });
  assert.deepEqual(snapshot(s), before);
});

test('clip with device scalars uses the gradScale from the scalars', () => {
  const s = state(false), t = state(false);
  const sumSquares = backend.fromArray([16], [1], 'f32'); // norm = 4·gradScale = 2
  backend.adamW({ ...s, ...hyperNoLr, scalars: backend.fromArray(scalarValues(0.1, 0.5, 1), [4], 'f32'), clip: { sumSquares, maxNorm: 1 } });
  backend.adamW({ ...t, ...hyper, step: 1, gradScale: 0.5, clip: { sumSquares, maxNorm: 1 } });
  assertClose(backend.download(s.params), backend.download(t.params), 1e-6);
  assertClose(backend.download(s.params), referenceAdamW(theta, [grads[0]!], m0, v0, 0.5 * (1 / (2 + 1e-6))), 1e-6);
});
