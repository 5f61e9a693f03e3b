import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, numericGradient, randomValues, weightedSum } from './helpers.js';

const backend = new CpuBackend();

interface Options { scale?: number; causal?: boolean; keyLengths?: number[] }

function softmax(x: readonly number[], shape: [number, number, number, number], options: Options = {}): number[] {
  const out = backend.empty(shape, 'f32');
  backend.softmaxForward({
    x: backend.fromArray(x, shape, 'f32'), out, scale: options.scale, causal: options.causal,
    ...(options.keyLengths ? { keyLengths: backend.fromArray(options.keyLengths, [shape[0]], 'i32') } : {}),
  });
  return Array.from(backend.download(out));
}

/** softmax(scale·v) over the first `visible` entries of a row, zeros after. */
function referenceRow(v: readonly number[], visible: number, scale: number): number[] {
  const exps = v.slice(0, visible).map((z) => Math.exp(scale * z));
  const total = exps.reduce((s, e) => s + e, 0);
  return v.map((_, j) => (j < visible ? exps[j]! / total : 0));
}

describe('softmaxForward', () => {
  test('unmasked rows equal exp(scale·x)/Σ and sum to 1', () => {
    const shape: [number, number, number, number] = [2, 2, 3, 5];
    const x = randomValues(1, 60, -3, 3);
    const y = softmax(x, shape, { scale: 0.7 });
    for (let r = 0; r < 12; r++) {
      const got = y.slice(r * 5, (r + 1) * 5);
      assertClose(got, referenceRow(x.slice(r * 5, (r + 1) * 5), 5, 0.7), 1e-6, `row ${r}`);
      assertClose([got.reduce((s, v) => s + v, 0)], [1], 1e-6, `row ${r} sum`);
    }
  });

  test('padding: keys at or past keyLengths[b] get exactly 0', () => {
    const shape: [number, number, number, number] = [2, 1, 2, 5];
    const x = randomValues(2, 20);
    const y = softmax(x, shape, { keyLengths: [2, 4] });
    for (let r = 0; r < 4; r++) {
      const visible = r < 2 ? 2 : 4;
      assertClose(y.slice(r * 5, (r + 1) * 5), referenceRow(x.slice(r * 5, (r + 1) * 5), visible, 1), 1e-6, `row ${r}`);
      assert.ok(y.slice(r * 5 + visible, (r + 1) * 5).every((v) => v === 0));
    }
  });

  test('causal masking uses the Lk − Lq offset (queries are the last Lq positions)', () => {
    const shape: [number, number, number, number] = [1, 1, 2, 4];
    const x = randomValues(3, 8);
    const y = softmax(x, shape, { causal: true });
    assertClose(y.slice(0, 4), referenceRow(x.slice(0, 4), 3, 1), 1e-6, 'query 0 sees keys 0..2');
    assertClose(y.slice(4, 8), referenceRow(x.slice(4, 8), 4, 1), 1e-6, 'query 1 sees keys 0..3');
    assert.equal(y[3], 0);
  });

  test('causal and padding combine; a row with every key masked is all zeros', () => {
    // Lq = 3 > Lk = 2: query 0 may see keys j <= 0 + (2 − 3) = −1, i.e. none.
    const causalOnly = softmax(randomValues(4, 6), [1, 1, 3, 2], { causal: true });
    assert.deepEqual(causalOnly.slice(0, 2), [0, 0]);
    assertClose([causalOnly[2]! + causalOnly[3]!], [1], 1e-6, 'query 1 still normalised');
    const noKeys = softmax(randomValues(5, 8), [2, 1, 1, 4], { keyLengths: [0, 4], causal: true });
    assert.deepEqual(noKeys.slice(0, 4), [0, 0, 0, 0]);
    // Lq = 3, Lk = 4, keyLengths 3: query i sees keys j <= i + 1 and j < 3, i.e. 2, 3 and 3 keys.
    const xs = randomValues(6, 12);
    const combined = softmax(xs, [1, 1, 3, 4], { causal: true, keyLengths: [3] });
    [2, 3, 3].forEach((visible, i) => assertClose(combined.slice(i * 4, i * 4 + 4), referenceRow(xs.slice(i * 4, i * 4 + 4), visible, 1), 1e-6, `query ${i}`));
  });

  test('out may alias x', () => {
    const x = randomValues(7, 24, -2, 2);
    const t = backend.fromArray(x, [1, 2, 3, 4], 'f32');
    backend.softmaxForward({ x: t, out: t, scale: 2, causal: true });
    assert.deepEqual(Array.from(backend.download(t)), softmax(x, [1, 2, 3, 4], { scale: 2, causal: true }));
  });

  test('validation names the op and the argument', () => {
    const x = backend.empty([2, 1, 3, 4], 'f32');
    assertRejects(() => backend.softmaxForward({ x, out: x, keyLengths: backend.empty([2], 'f32') }), 'softmaxForward', 'keyLengths', DTypeError);
    assertRejects(() => backend.softmaxForward({ x, out: x, keyLengths: backend.empty([3], 'i32') }), 'softmaxForward', 'keyLengths', ShapeError);
    assertRejects(() => backend.softmaxForward({ x: backend.empty([3, 4], 'f32'), out: x }), 'softmaxForward', 'x', ShapeError);
    assertRejects(() => backend.softmaxForward({ x, out: x, scale: Infinity }), 'softmaxForward', 'scale', ArgumentError);
    assertRejects(() => backend.softmaxForward({ x, out: backend.empty([2, 1, 3, 4], 'bf16') }), 'softmaxForward', 'out', DTypeError);
  });
});

describe('softmaxBackward', () => {
  test('matches finite differences of the masked, scaled forward', () => {
    const shape: [number, number, number, number] = [2, 1, 3, 4];
    const options = { scale: 0.8, causal: true, keyLengths: [4, 3] };
    const x = randomValues(8, 24, -2, 2), w = randomValues(9, 24);
    const y = backend.fromArray(softmax(x, shape, options), shape, 'f32');
    const dX = backend.empty(shape, 'f32');
    backend.softmaxBackward({ y, dY: backend.fromArray(w, shape, 'f32'), dX, scale: 0.8 });
    const numeric = numericGradient((p) => weightedSum(softmax(p, shape, options), w), x);
    assertClose(backend.download(dX), numeric, 2e-3);
  });

  test('dX may alias dY', () => {
    const shape: [number, number, number, number] = [1, 1, 2, 3];
    const y = backend.fromArray(softmax(randomValues(10, 6), shape), shape, 'f32');
    const w = randomValues(11, 6);
    const separate = backend.empty(shape, 'f32');
    backend.softmaxBackward({ y, dY: backend.fromArray(w, shape, 'f32'), dX: separate });
    const shared = backend.fromArray(w, shape, 'f32');
    backend.softmaxBackward({ y, dY: shared, dX: shared });
    assert.deepEqual(Array.from(backend.download(shared)), Array.from(backend.download(separate)));
  });

  test('validation names the op and the argument', () => {
    const t = backend.empty([1, 1, 2, 3], 'f32');
    assertRejects(() => backend.softmaxBackward({ y: t, dY: backend.empty([1, 1, 2, 4], 'f32'), dX: t }), 'softmaxBackward', 'dY', ShapeError);
  });
});
