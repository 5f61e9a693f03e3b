// decodeAdvance on the CPU reference: the sampled tokens recorded at the step counter and fed to the
// active rows (cache position ≥ 0) with their positions moved on by one, idle rows left alone, the
// counter advanced; bad arguments rejected naming the op and the argument.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';

const b = new CpuBackend();
const i32 = (values: number[]) => b.fromArray(values, [values.length], 'i32');
const read = (t: ReturnType<typeof b.empty>) => Array.from(b.download(t));

test('decodeAdvance feeds the sampled tokens to the active rows, moves their positions on and records the step', () => {
  const sampled = i32([11, 12, 13, 14, 99]), tokens = i32([1, 2, 3, 4]), positions = i32([5, 0, 7, 8]);
  const cache = i32([5, -1, 7, 8]);
  const record = b.fromArray(new Array(3 * 6).fill(-7), [3, 6], 'i32'), step = i32([1]);
  const args = { sampled, tokens, positions, cachePositions: cache, record, step };
  b.decodeAdvance(args);
  assert.deepEqual(read(tokens), [11, 2, 13, 14], 'the idle row keeps its token');
  assert.deepEqual(read(positions), [6, 0, 8, 9]);
  assert.deepEqual(read(cache), [6, -1, 8, 9]);
  assert.deepEqual(read(record).slice(6, 12), [11, 12, 13, 14, -7, -7], 'step 1 recorded, every row of it, the columns past the rows untouched');
  assert.deepEqual(read(record).slice(0, 6), new Array(6).fill(-7));
  assert.deepEqual(read(step), [2]);
  b.decodeAdvance(args);
  b.decodeAdvance(args);  // counter 3 = steps: nothing recorded, the rows still advance
  assert.deepEqual(read(record).slice(12), [11, 12, 13, 14, -7, -7]);
  assert.deepEqual([read(positions), read(step)], [[8, 0, 10, 11], [4]]);
});

test('decodeAdvance rejects wrong dtypes and too few sampled rows or record columns', () => {
  const ok = () => ({ sampled: i32([1, 2]), tokens: i32([0, 0]), positions: i32([0, 0]), cachePositions: i32([0, 0]), record: b.fromArray([0, 0, 0, 0], [2, 2], 'i32'), step: i32([0]) });
  assert.throws(() => b.decodeAdvance({ ...ok(), sampled: i32([1]) }), /decodeAdvance: 'sampled' has 1 rows, fewer than the 2 decode rows/);
  assert.throws(() => b.decodeAdvance({ ...ok(), record: b.fromArray([0, 0], [2, 1], 'i32') }), /decodeAdvance: 'record' rows hold 1 tokens/);
  assert.throws(() => b.decodeAdvance({ ...ok(), positions: b.fromArray([0, 0], [2], 'f32') }), /decodeAdvance.*positions/);
  assert.throws(() => b.decodeAdvance({ ...ok(), step: i32([0, 0]) }), /decodeAdvance.*step/);
});
