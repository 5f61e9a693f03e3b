// maskLogits on the CPU reference: the listed rows' classes whose bit is 0 become −∞, in every float dtype;
// other rows, allowed classes and the padding past `classes` stay; a row outside the buffer and mismatched
// shapes are rejected naming the argument.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';

const b = new CpuBackend();

test('maskLogits sets the refused classes of the listed rows to −∞ and nothing else', () => {
  for (const dtype of ['f32', 'bf16', 'f16'] as const) {
    const values = Array.from({ length: 3 * 40 }, (_, i) => (i % 7) - 3);
    const logits = b.fromArray(values, [3, 40], dtype);
    // Row 2: classes 0 and 33 allowed (of 34); row 0: all but class 5.
    b.maskLogits({ logits, rows: b.fromArray([2, 0], [2], 'i32'), masks: b.fromArray([1, 2, ~(1 << 5), -1], [2, 2], 'i32'), classes: 34 });
    const got = Array.from(b.download(logits));
    const expected = values.map((v, k) => {
      const row = Math.floor(k / 40), j = k % 40;
      if (j >= 34 || row === 1) return v;
      if (row === 2) return j === 0 || j === 33 ? v : -Infinity;
      return j === 5 ? -Infinity : v;
    });
    assert.deepEqual(got, expected, dtype);
  }
});

test('maskLogits rejects a row outside the buffer, a mask of the wrong width and classes past the row', () => {
  const logits = b.empty([2, 64], 'f32');
  assert.throws(() => { b.maskLogits({ logits, rows: b.fromArray([2], [1], 'i32'), masks: b.fromArray([0, 0], [1, 2], 'i32'), classes: 64 }); b.synchronize(); }, /maskLogits: rows\[0\] is 2, outside \[0, 2\)/);
  assert.throws(() => b.maskLogits({ logits, rows: b.fromArray([0], [1], 'i32'), masks: b.fromArray([0], [1, 1], 'i32'), classes: 64 }), /maskLogits.*masks/);
  assert.throws(() => b.maskLogits({ logits, rows: b.fromArray([0], [1], 'i32'), masks: b.fromArray([0, 0, 0], [1, 3], 'i32'), classes: 65 }), /maskLogits: 'classes' must be an integer in \[1, 64\]/);
  assert.throws(() => b.maskLogits({ logits, rows: b.fromArray([0], [1], 'f32'), masks: b.fromArray([0, 0], [1, 2], 'i32'), classes: 64 }), /maskLogits.*rows/);
});

test('biasLogits adds each listed row\'s biases to its tokens (−1 pads a list); other rows and tokens stay', () => {
  const values = Array.from({ length: 2 * 8 }, (_, i) => i / 4);
  const logits = b.fromArray(values, [2, 8], 'f32');
  b.biasLogits({ logits, rows: b.fromArray([1], [1], 'i32'), tokens: b.fromArray([6, -1, 0], [1, 3], 'i32'), biases: b.fromArray([-100, 5, 2.5], [1, 3], 'f32') });
  const expected = values.slice();
  expected[8 + 6] = values[8 + 6]! - 100;
  expected[8 + 0] = values[8 + 0]! + 2.5;
  assert.deepEqual(Array.from(b.download(logits)), expected);
  assert.throws(() => { b.biasLogits({ logits, rows: b.fromArray([0], [1], 'i32'), tokens: b.fromArray([8], [1, 1], 'i32'), biases: b.fromArray([1], [1, 1], 'f32') }); b.synchronize(); }, /biasLogits: tokens\[0, 0\] is 8, outside the 8 columns/);
  assert.throws(() => { b.biasLogits({ logits, rows: b.fromArray([0], [1], 'i32'), tokens: b.fromArray([3, -1, 3], [1, 3], 'i32'), biases: b.fromArray([1, 1, 1], [1, 3], 'f32') }); b.synchronize(); }, /biasLogits: tokens\[0, 2\] is 3, listed twice in row 0/);
  assert.throws(() => b.biasLogits({ logits, rows: b.fromArray([0], [1], 'i32'), tokens: b.fromArray([1], [1, 1], 'i32'), biases: b.fromArray([1], [1, 1], 'bf16') }), /biasLogits.*biases/);
});
