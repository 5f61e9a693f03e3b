import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, numericGradient, randomValues } from './helpers.js';

const backend = new CpuBackend();
const [rows, V] = [4, 5];
const logits = randomValues(1, rows * V, -3, 3);
const targets = [2, 0, -100, 4];

interface Options { labelSmoothing?: number; ignoreIndex?: number }

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
