// decodeAttentionSplits: how many blocks decode attention cuts each cache into, by capacity, batch and variant.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeAttentionSplits, modelAttentionSplits } from '../../src/infer/attention-splits.js';

test('short caches are not split; longer ones are cut into one-tile chunks up to the grid target (8 blocks an SM, the pipelined variant one wave of 3 an SM)', () => {
  assert.equal(decodeAttentionSplits(160, 8, 1), 1, 'a 160-position cache: one block per kv head');
  assert.equal(decodeAttentionSplits(256, 8, 1, true), 1);
  // Batch 1, 8 kv heads, 2048 positions: 16 one-tile chunks either way (the grid stays small).
  assert.deepEqual([decodeAttentionSplits(2048, 8, 1), decodeAttentionSplits(2048, 8, 1, true)], [16, 16]);
  // A serving pool of 1,600 positions: 128 rows × 8 kv heads = 1,024 blocks already fill the pipelined
  // variant's wave (396 blocks); the others aim at 1,056 blocks.
  assert.deepEqual([decodeAttentionSplits(1600, 8, 128), decodeAttentionSplits(1600, 8, 128, true)], [2, 1]);
  assert.deepEqual([decodeAttentionSplits(1600, 8, 64), decodeAttentionSplits(1600, 8, 64, true)], [3, 1]);
  assert.deepEqual([decodeAttentionSplits(1600, 8, 16), decodeAttentionSplits(1600, 8, 16, true)], [9, 4]);
  // A model's heads pick the target: 128-byte rows (d 64 at 16 bit, d 32 at f32) and 16-bit 256-byte rows (d 128, on
  // tensor cores) the pipelined variant's; f32 256-byte rows the others'.
  const heads = (headDim: number) => ({ kvHeads: 8, headDim });
  assert.deepEqual([modelAttentionSplits(heads(64), 'bf16', 1600, 64), modelAttentionSplits(heads(32), 'f32', 1600, 64), modelAttentionSplits(heads(128), 'bf16', 1600, 64), modelAttentionSplits(heads(64), 'f32', 1600, 64)], [1, 1, 1, 3]);
});
