// feedTokens on the CPU reference: rows with a feeding row take that row's sampled token, the others keep
// theirs; a feeding row past the sampled ones and wrong dtypes or shapes are rejected naming the argument.
// And downloadLater: the values at the point of the call, whatever is written after.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';

const b = new CpuBackend();
const i32 = (values: number[]) => b.fromArray(values, [values.length], 'i32');
const read = (t: ReturnType<typeof b.empty>) => Array.from(b.download(t));

test('feedTokens gives the fed rows their sampled tokens and leaves the others', () => {
  const sampled = i32([70, 71, 72, 73, 74]), tokens = i32([1, 2, 3, 4, 5, 6]);
  b.feedTokens({ sampled, from: i32([-1, 4, 0, -1, 4, 2]), tokens });
  assert.deepEqual(read(tokens), [1, 74, 70, 4, 74, 72]);
  b.feedTokens({ sampled, from: i32([-1, -1, -1, -1, -1, -1]), tokens });
  assert.deepEqual(read(tokens), [1, 74, 70, 4, 74, 72], 'no row fed: nothing changes');
});

test('feedTokens rejects a feeding row past the sampled ones, wrong dtypes and mismatched rows', () => {
  const ok = () => ({ sampled: i32([1, 2]), from: i32([0, 1, -1]), tokens: i32([0, 0, 0]) });
  assert.throws(() => b.feedTokens({ ...ok(), from: i32([0, 2, -1]) }), /feedTokens: 'from'\[1\] = 2 is past the 2 sampled rows/);
  assert.throws(() => b.feedTokens({ ...ok(), tokens: i32([0, 0]) }), /feedTokens.*tokens/);
  assert.throws(() => b.feedTokens({ ...ok(), sampled: b.fromArray([1, 2], [2], 'f32') }), /feedTokens.*sampled/);
});

test('downloadLater gives the values at the point of the call', () => {
  const t = i32([5, 6, 7]);
  const pending = b.downloadLater(t);
  b.upload(t, [8, 9, 10]);
  assert.deepEqual(Array.from(pending.wait()), [5, 6, 7]);
  assert.equal(pending.wait(), pending.wait(), 'the same array on every call');
  assert.throws(() => b.captureGraph(() => { b.downloadLater(t); }), /downloadLater: not allowed during graph capture/);
});
