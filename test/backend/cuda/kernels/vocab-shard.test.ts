// The vocab-parallel cross-entropy kernels without a GPU: one block per row (a grid-stride loop for the
// loss), the arguments in the kernels' order, argument checks naming the op, and every catalog source
// compiling with nvcc for sm_90 (skipped without nvcc).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as vs from '../../../../src/backend/cuda/kernels/vocab-shard.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

const nvcc = findNvcc();

test('the split cross-entropy launchers: one block per row, shard geometry and loss options as arguments', () => {
  const host = new RecordingHost();
  const rows = 6, Vl = 25152;
  const logits = deviceTensor([rows, Vl], 'bf16'), targets = deviceTensor([rows], 'i32');
  const rowMax = deviceTensor([rows], 'f32'), sums = deviceTensor([3, rows], 'f32'), lse = deviceTensor([rows], 'f32');
  vs.vocabShardMax(host, { logits, classes: 25105, rowMax });
  vs.vocabShardSums(host, { logits, targets, vocabStart: 25152, classes: 25105, rowMax, sums });
  vs.vocabShardLoss(host, { rowMax, sums, targets, totalClasses: 50257, loss: deviceTensor([rows], 'f32'), lse, labelSmoothing: 0.1, ignoreIndex: -100 });
  vs.vocabShardCrossEntropyBackward(host, { logits, targets, lse, dLogits: logits, vocabStart: 25152, classes: 25105, totalClasses: 50257, gradScale: 0.5 });
  const [max, sum, loss, back] = host.launches;
  assert.equal(max!.key, 'vocab_shard_max.bf16.t256');
  assert.deepEqual([max!.config.grid, max!.config.block], [rows, 256]);
  assert.deepEqual([argValue(max!, 2, 'i32'), argValue(max!, 3, 'i32')], [Vl, 25105]);
  assert.deepEqual([4, 5, 6, 7].map((i) => argValue(sum!, i, 'i32')), [rows, Vl, 25105, 25152]);
  assert.equal(loss!.key, vs.VOCAB_SHARD_LOSS_KEY);
  assert.deepEqual([argValue(loss!, 5, 'i32'), argValue(loss!, 6, 'i32')], [rows, 50257]);
  assert.ok(Math.abs((argValue(loss!, 7, 'f32') as number) - 0.1) < 1e-7);
  assert.deepEqual([argValue(loss!, 8, 'i32'), argValue(loss!, 9, 'i32')], [1, -100]);
  assert.deepEqual([4, 5, 6, 7].map((i) => argValue(back!, i, 'i32')), [Vl, 25105, 25152, 50257]);
  assert.equal(argValue(back!, 8, 'f32'), 0.5);
  assert.equal(argValue(back!, 10, 'i32'), 0, 'no ignoreIndex: no row is ignored');
});

test('the split cross-entropy launchers reject bad arguments by name', () => {
  const host = new RecordingHost();
  const logits = deviceTensor([2, 8], 'f16');
  const rejects = (fn: () => void, pattern: RegExp) => assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  rejects(() => vs.vocabShardMax(host, { logits, classes: 9, rowMax: deviceTensor([2], 'f32') }), /^vocabShardMax: 'classes' must be at most/);
  rejects(() => vs.vocabShardMax(host, { logits, rowMax: deviceTensor([2], 'f16') }), /^vocabShardMax: 'rowMax' has dtype f16/);
  rejects(() => vs.vocabShardSums(host, { logits, targets: deviceTensor([2], 'i32'), vocabStart: -1, rowMax: deviceTensor([2], 'f32'), sums: deviceTensor([3, 2], 'f32') }), /^vocabShardSums: 'vocabStart' must be an integer >= 0/);
  rejects(() => vs.vocabShardLoss(host, { rowMax: deviceTensor([2], 'f32'), sums: deviceTensor([3, 2], 'f32'), targets: deviceTensor([2], 'i32'), totalClasses: 0, loss: deviceTensor([2], 'f32'), lse: deviceTensor([2], 'f32') }), /^vocabShardLoss: 'totalClasses' must be an integer >= 1/);
  rejects(() => vs.vocabShardCrossEntropyBackward(host, { logits, targets: deviceTensor([2], 'i32'), lse: deviceTensor([2], 'f32'), dLogits: deviceTensor([2, 8], 'bf16'), vocabStart: 0, totalClasses: 8, gradScale: 1 }), /^vocabShardCrossEntropyBackward: 'dLogits' has dtype bf16/);
});

test('every vocab-shard kernel compiles with nvcc for sm_90', { skip: nvcc ? false : 'nvcc not found' }, async () => {
  const failures = await compileAll(nvcc!, vs.catalog(), 2);
  assert.deepEqual(failures, []);
});
