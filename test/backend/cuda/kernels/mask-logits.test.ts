// maskLogits' launcher without a GPU: the kernel by dtype, a grid row a listed row and blocks along the classes,
// its arguments as a fake host records them; argument checks name the tensor; its catalog compiles with nvcc
// where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as mask from '../../../../src/backend/cuda/kernels/mask-logits.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

test('maskLogits: one kernel a dtype; grid (⌈classes / 256⌉, rows); Vp, classes and words as arguments', () => {
  const host = new RecordingHost();
  mask.maskLogits(host, { logits: deviceTensor([8, 50304], 'f32'), rows: deviceTensor([3], 'i32'), masks: deviceTensor([3, 1571], 'i32'), classes: 50257 });
  mask.maskLogits(host, { logits: deviceTensor([8, 50304], 'f32'), rows: deviceTensor([0], 'i32'), masks: deviceTensor([0, 1571], 'i32'), classes: 50257 });
  assert.equal(host.launches.length, 1, 'no rows, no launch');
  const [launch] = host.launches;
  assert.equal(launch!.key, 'mask_logits.f32');
  assert.deepEqual(launch!.config.grid, [197, 3, 1]);
  assert.equal(argValue(launch!, 3, 'i32'), 50304);
  assert.equal(argValue(launch!, 4, 'i32'), 50257);
  assert.equal(argValue(launch!, 5, 'i32'), 1571);
  assert.match(launch!.source, /masks\[\(u64\)i \* words \+ \(j >> 5\)\]/);
});

test('maskLogits: argument checks name the op and the tensor', () => {
  const host = new RecordingHost();
  assert.throws(() => mask.maskLogits(host, { logits: deviceTensor([2, 64], 'f32'), rows: deviceTensor([1], 'i32'), masks: deviceTensor([1, 3], 'i32'), classes: 64 }),
    (e: unknown) => e instanceof FuseformerError && /^maskLogits: .*'masks'/.test(e.message));
  assert.throws(() => mask.maskLogits(host, { logits: deviceTensor([2, 64], 'i32'), rows: deviceTensor([1], 'i32'), masks: deviceTensor([1, 2], 'i32'), classes: 64 }),
    (e: unknown) => e instanceof FuseformerError && /^maskLogits: .*'logits'/.test(e.message));
  assert.equal(host.launches.length, 0);
});

test('biasLogits: a block a listed row; Vp and the list length as arguments', () => {
  const host = new RecordingHost();
  mask.biasLogits(host, { logits: deviceTensor([4, 257], 'bf16'), rows: deviceTensor([2], 'i32'), tokens: deviceTensor([2, 300], 'i32'), biases: deviceTensor([2, 300], 'f32') });
  const [launch] = host.launches;
  assert.equal(launch!.key, 'bias_logits.bf16');
  assert.equal(launch!.config.grid, 2);
  assert.equal(argValue(launch!, 4, 'i32'), 257);
  assert.equal(argValue(launch!, 5, 'i32'), 300);
  assert.throws(() => mask.biasLogits(host, { logits: deviceTensor([4, 257], 'f32'), rows: deviceTensor([2], 'i32'), tokens: deviceTensor([2, 3], 'i32'), biases: deviceTensor([2, 3], 'f16') }),
    (e: unknown) => e instanceof FuseformerError && /^biasLogits: .*'biases'/.test(e.message));
});

const nvcc = findNvcc();
test('maskLogits and biasLogits kernels compile with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 5 * 60_000 }, async () => {
  const failures = await compileAll(nvcc!, mask.catalog());
  assert.deepEqual(failures, []);
});
