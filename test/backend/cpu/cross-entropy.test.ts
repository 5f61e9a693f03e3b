import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, numericGradient, randomValues } from './helpers.js';

const backend = new CpuBackend();
const [rows, V] = [4, 5];
const logits = randomValues(1, rows * V, -3, 3);
const targets = [2, 0, -100, 4];

interface Options { labelSmoothing?: number; ignoreIndex?: number; classes?: number }

function forward(z: readonly number[], t: readonly number[], options: Options = { ignoreIndex: -100 }) {
  const loss = backend.empty([t.length], 'f32'), lse = backend.empty([t.length], 'f32');
  backend.crossEntropyForward({ logits: backend.fromArray(z, [t.length, z.length / t.length], 'f32'), targets: backend.fromArray(t, [t.length], 'i32'), loss, lse, ...options });
  return { loss: Array.from(backend.download(loss)), lse };
}

/** −log softmax(z)_j for one row, computed directly. */
function negativeLogSoftmax(row: readonly number[]): number[] {
  const total = row.reduce((s, z) => s + Math.exp(z), 0);
  return row.map((z) => -Math.log(Math.exp(z) / total));
}

describe('crossEntropyForward', () => {
  test('loss = −log softmax(z)[target]; lse = log Σ exp z; ignored rows get 0', () => {
    const { loss, lse } = forward(logits, targets);
    for (let r = 0; r < rows; r++) {
      const row = logits.slice(r * V, (r + 1) * V);
      assertClose([backend.download(lse)[r]!], [Math.log(row.reduce((s, z) => s + Math.exp(z), 0))], 1e-6, `lse[${r}]`);
      assertClose([loss[r]!], [targets[r] === -100 ? 0 : negativeLogSoftmax(row)[targets[r]!]!], 1e-6, `loss[${r}]`);
    }
    assert.equal(loss[2], 0);
  });

  test('label smoothing is cross-entropy against (1−ε)·onehot + ε/V', () => {
    const epsilon = 0.2;
    const { loss } = forward(logits, targets, { labelSmoothing: epsilon, ignoreIndex: -100 });
    for (let r = 0; r < rows; r++) {
      if (targets[r] === -100) continue;
      const nll = negativeLogSoftmax(logits.slice(r * V, (r + 1) * V));
      const smoothed = nll.reduce((s, l, j) => s + ((j === targets[r] ? 1 - epsilon : 0) + epsilon / V) * l, 0);
      assertClose([loss[r]!], [smoothed], 1e-6, `loss[${r}]`);
    }
  });

  test('huge logits stay finite (log-sum-exp is max-shifted)', () => {
    assertClose(forward([1000, 1000, -1000], [0]).loss, [Math.log(2)], 1e-6);
  });

  test('a target outside [0, V) that is not ignoreIndex is an error naming the target', () => {
    assertRejects(() => forward(logits, [2, 0, 5, 4]), 'crossEntropyForward', 'targets', ArgumentError);
    assertRejects(() => forward(logits, [2, 0, -100, 4], {}), 'crossEntropyForward', 'targets', ArgumentError);
    assert.throws(() => forward(logits, [2, 0, 7, 4]), /'targets'\[2\] = 7 is outside \[0, 5\)/);
  });

  test('validation names the op and the argument', () => {
    const args = () => ({ logits: backend.empty([2, 3], 'f32'), targets: backend.fromArray([0, 1], [2], 'i32'), loss: backend.empty([2], 'f32'), lse: backend.empty([2], 'f32') });
    assertRejects(() => backend.crossEntropyForward({ ...args(), targets: backend.empty([2], 'f32') }), 'crossEntropyForward', 'targets', DTypeError);
    assertRejects(() => backend.crossEntropyForward({ ...args(), loss: backend.empty([2], 'f16') }), 'crossEntropyForward', 'loss', DTypeError);
    assertRejects(() => backend.crossEntropyForward({ ...args(), lse: backend.empty([3], 'f32') }), 'crossEntropyForward', 'lse', ShapeError);
    assertRejects(() => backend.crossEntropyForward({ ...args(), labelSmoothing: 1.5 }), 'crossEntropyForward', 'labelSmoothing', ArgumentError);
    assertRejects(() => backend.crossEntropyForward({ ...args(), ignoreIndex: 0.5 }), 'crossEntropyForward', 'ignoreIndex', ArgumentError);
    assertRejects(() => backend.crossEntropyForward({ ...args(), ignoreIndex: 2 ** 31 }), 'crossEntropyForward', 'ignoreIndex', ArgumentError);
  });
});

describe('crossEntropyBackward', () => {
  function backward(z: readonly number[], options: Options, gradScale: number, alias = false) {
    const { lse } = forward(z, targets, options);
    const logitsT = backend.fromArray(z, [rows, V], 'f32');
    const dLogits = alias ? logitsT : backend.fromArray(new Array<number>(rows * V).fill(NaN), [rows, V], 'f32');
    backend.crossEntropyBackward({ logits: logitsT, targets: backend.fromArray(targets, [rows], 'i32'), lse, dLogits, gradScale, ...options });
    return Array.from(backend.download(dLogits));
  }

  for (const labelSmoothing of [0, 0.1]) {
    test(`matches finite differences of gradScale·Σ loss (labelSmoothing ${labelSmoothing}); ignored rows get zero`, () => {
      const options = { labelSmoothing, ignoreIndex: -100 };
      const gradScale = 1 / 3;
      const analytic = backward(logits, options, gradScale);
      const numeric = numericGradient((z) => gradScale * forward(z, targets, options).loss.reduce((s, l) => s + l, 0), logits);
      assertClose(analytic, numeric, 2e-3);
      assert.deepEqual(analytic.slice(2 * V, 3 * V), [0, 0, 0, 0, 0]);
    });
  }

  test('dLogits may alias logits', () => {
    const options = { labelSmoothing: 0.1, ignoreIndex: -100 };
    assert.deepEqual(backward(logits, options, 0.5, true), backward(logits, options, 0.5));
  });

  test('an out-of-range target is an error; validation names the op and the argument', () => {
    const lse = backend.empty([2], 'f32');
    const args = { logits: backend.empty([2, 3], 'f32'), lse, dLogits: backend.empty([2, 3], 'f32'), gradScale: 1 };
    assertRejects(() => backend.crossEntropyBackward({ ...args, targets: backend.fromArray([0, 3], [2], 'i32') }), 'crossEntropyBackward', 'targets', ArgumentError);
    assertRejects(() => backend.crossEntropyBackward({ ...args, targets: backend.fromArray([0, 1], [2], 'i32'), dLogits: backend.empty([2, 3], 'bf16') }), 'crossEntropyBackward', 'dLogits', DTypeError);
    assertRejects(() => backend.crossEntropyBackward({ ...args, targets: backend.fromArray([0, 1], [2], 'i32'), gradScale: NaN }), 'crossEntropyBackward', 'gradScale', ArgumentError);
  });
});

describe('crossEntropy with a padded vocabulary (classes < V)', () => {
  const [C, Vp] = [3, 5];
  // The first C columns of each row are the logits above; the padding holds large values that
  // would dominate lse if it were counted.
  const real = randomValues(2, rows * C, -3, 3);
  const padded: number[] = [];
  for (let r = 0; r < rows; r++) padded.push(...real.slice(r * C, (r + 1) * C), 40, -7);
  const t = [2, 0, -100, 1];

  function unpadded(z: readonly number[], options: Options) {
    const loss = backend.empty([rows], 'f32'), lse = backend.empty([rows], 'f32');
    backend.crossEntropyForward({ logits: backend.fromArray(z, [rows, C], 'f32'), targets: backend.fromArray(t, [rows], 'i32'), loss, lse, ...options });
    return { loss, lse };
  }

  function run(options: Options, alias: boolean) {
    const logits = backend.fromArray(padded, [rows, Vp], 'f32'), targets = backend.fromArray(t, [rows], 'i32');
    const loss = backend.empty([rows], 'f32'), lse = backend.empty([rows], 'f32');
    backend.crossEntropyForward({ logits, targets, loss, lse, classes: C, ...options });
    const dLogits = alias ? logits : backend.fromArray(new Array<number>(rows * Vp).fill(NaN), [rows, Vp], 'f32');
    backend.crossEntropyBackward({ logits, targets, lse, dLogits, gradScale: 0.5, classes: C, ...options });
    return { loss: Array.from(backend.download(loss)), lse: Array.from(backend.download(lse)), dLogits: Array.from(backend.download(dLogits)) };
  }

  for (const labelSmoothing of [0, 0.2]) {
    for (const alias of [false, true]) {
      test(`equals the unpadded op on the first C columns; the padding's gradient is exactly 0 (ε ${labelSmoothing}${alias ? ', in place' : ''})`, () => {
        const options = { labelSmoothing, ignoreIndex: -100 };
        const got = run(options, alias);
        const ref = unpadded(real, options);
        const refLogits = backend.fromArray(real, [rows, C], 'f32');
        const refD = backend.fromArray(new Array<number>(rows * C).fill(NaN), [rows, C], 'f32');
        backend.crossEntropyBackward({ logits: refLogits, targets: backend.fromArray(t, [rows], 'i32'), lse: ref.lse, dLogits: refD, gradScale: 0.5, ...options });
        assertClose(got.loss, Array.from(backend.download(ref.loss)), 1e-6, 'loss');
        assertClose(got.lse, Array.from(backend.download(ref.lse)), 1e-6, 'lse');
        const refGrad = Array.from(backend.download(refD));
        for (let r = 0; r < rows; r++) {
          assertClose(got.dLogits.slice(r * Vp, r * Vp + C), refGrad.slice(r * C, (r + 1) * C), 1e-6, `dLogits[${r}]`);
          assert.deepEqual(got.dLogits.slice(r * Vp + C, (r + 1) * Vp), [0, 0], `padding of dLogits[${r}]`);
        }
      });
    }
  }

  test('smoothing spreads ε/C over the real classes only', () => {
    const epsilon = 0.2;
    const { loss } = run({ labelSmoothing: epsilon, ignoreIndex: -100 }, false);
    for (let r = 0; r < rows; r++) {
      if (t[r] === -100) continue;
      const nll = negativeLogSoftmax(real.slice(r * C, (r + 1) * C));
      const smoothed = nll.reduce((s, l, j) => s + ((j === t[r] ? 1 - epsilon : 0) + epsilon / C) * l, 0);
      assertClose([loss[r]!], [smoothed], 1e-6, `loss[${r}]`);
    }
  });

  test('a target in the padding [C, V) is out of range', () => {
    const logits = backend.fromArray(padded, [rows, Vp], 'f32');
    const args = { logits, loss: backend.empty([rows], 'f32'), lse: backend.empty([rows], 'f32'), classes: C, ignoreIndex: -100 };
    assert.throws(() => backend.crossEntropyForward({ ...args, targets: backend.fromArray([2, 0, 3, 1], [rows], 'i32') }), /crossEntropyForward: 'targets'\[2\] = 3 is outside \[0, 3\)/);
    const back = { logits, lse: backend.empty([rows], 'f32'), dLogits: backend.empty([rows, Vp], 'f32'), gradScale: 1, classes: C };
    assertRejects(() => backend.crossEntropyBackward({ ...back, targets: backend.fromArray([2, 0, 4, 1], [rows], 'i32') }), 'crossEntropyBackward', 'targets', ArgumentError);
  });

  test('classes defaults to V and must be an integer in [1, V]', () => {
    const options = { labelSmoothing: 0.1, ignoreIndex: -100 };
    const z = backend.fromArray(logits, [rows, V], 'f32');
    const a = { loss: backend.empty([rows], 'f32'), lse: backend.empty([rows], 'f32') };
    const b = { loss: backend.empty([rows], 'f32'), lse: backend.empty([rows], 'f32') };
    backend.crossEntropyForward({ logits: z, targets: backend.fromArray(targets, [rows], 'i32'), ...a, ...options });
    backend.crossEntropyForward({ logits: z, targets: backend.fromArray(targets, [rows], 'i32'), ...b, classes: V, ...options });
    assert.deepEqual(Array.from(backend.download(a.loss)), Array.from(backend.download(b.loss)));
    const args = () => ({ logits: backend.empty([2, 3], 'f32'), targets: backend.fromArray([0, 1], [2], 'i32'), loss: backend.empty([2], 'f32'), lse: backend.empty([2], 'f32') });
    for (const classes of [0, -1, 1.5, NaN, 4]) {
      assertRejects(() => backend.crossEntropyForward({ ...args(), classes }), 'crossEntropyForward', 'classes', ArgumentError);
    }
    assert.throws(() => backend.crossEntropyForward({ ...args(), classes: 4 }), /^.*crossEntropyForward: 'classes' must be at most the logits' last dimension \(3\), got 4/);
    const back = { logits: backend.empty([2, 3], 'f32'), targets: backend.fromArray([0, 1], [2], 'i32'), lse: backend.empty([2], 'f32'), dLogits: backend.empty([2, 3], 'f32'), gradScale: 1 };
    assertRejects(() => backend.crossEntropyBackward({ ...back, classes: 0 }), 'crossEntropyBackward', 'classes', ArgumentError);
    assertRejects(() => backend.crossEntropyBackward({ ...back, classes: 5 }), 'crossEntropyBackward', 'classes', ArgumentError);
  });
});

describe('crossEntropyForward with dLogits (fused)', () => {
  test('writes the same loss, lse and gradient as the forward followed by the backward, also in place', () => {
    for (const options of [{ ignoreIndex: -100 }, { ignoreIndex: -100, labelSmoothing: 0.1 }, { ignoreIndex: -100, classes: 4 }] as Options[]) {
      const z = backend.fromArray(logits, [rows, V], 'f32'), t = backend.fromArray(targets.map((x) => (options.classes !== undefined && x === 4 ? 3 : x)), [rows], 'i32');
      const loss = backend.empty([rows], 'f32'), lse = backend.empty([rows], 'f32'), dLogits = backend.empty([rows, V], 'f32');
      backend.crossEntropyForward({ logits: z, targets: t, loss, lse, ...options });
      backend.crossEntropyBackward({ logits: z, targets: t, lse, dLogits, gradScale: 0.7, ...options });
      const fusedLoss = backend.empty([rows], 'f32'), fusedLse = backend.empty([rows], 'f32'), inPlace = backend.fromArray(logits, [rows, V], 'f32');
      backend.crossEntropyForward({ logits: inPlace, targets: t, loss: fusedLoss, lse: fusedLse, ...options, dLogits: inPlace, gradScale: 0.7 });
      assert.deepEqual(Array.from(backend.download(fusedLoss)), Array.from(backend.download(loss)));
      assert.deepEqual(Array.from(backend.download(fusedLse)), Array.from(backend.download(lse)));
      assert.deepEqual(Array.from(backend.download(inPlace)), Array.from(backend.download(dLogits)), JSON.stringify(options));
    }
  });

  test('dLogits needs gradScale and the logits shape', () => {
    const z = backend.fromArray(logits, [rows, V], 'f32'), t = backend.fromArray(targets, [rows], 'i32');
    const loss = backend.empty([rows], 'f32'), lse = backend.empty([rows], 'f32');
    assert.throws(() => backend.crossEntropyForward({ logits: z, targets: t, loss, lse, ignoreIndex: -100, dLogits: z }), /'dLogits' needs 'gradScale'/);
    assert.throws(() => backend.crossEntropyForward({ logits: z, targets: t, loss, lse, ignoreIndex: -100, dLogits: backend.empty([rows, V + 1], 'f32'), gradScale: 1 }), ShapeError);
  });
});
