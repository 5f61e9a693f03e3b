// int4ClipGroups' launcher without a GPU: a warp a group in blocks of 8 warps, its arguments as a fake
// host records them; argument checks name the tensor; the kernel compiles with nvcc where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as clip from '../../../../src/backend/cuda/kernels/int4-clip-groups.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

test('int4ClipGroups: a warp a group, eight a block; R, K, G and the group count as arguments', () => {
  const host = new RecordingHost();
  clip.int4ClipGroups(host, { weight: deviceTensor([16384, 2048], 'f32'), meanSquare: deviceTensor([2048], 'f32'), ratios: deviceTensor([11], 'f32'), groupSize: 128 });
  clip.int4ClipGroups(host, { weight: deviceTensor([3, 96], 'f32'), meanSquare: deviceTensor([96], 'f32'), ratios: deviceTensor([2], 'f32'), groupSize: 32 });
  const [big, small] = host.launches;
  assert.equal(big!.key, 'int4_clip_groups');
  assert.equal(big!.config.block, 256);
  assert.equal(big!.config.grid, (16384 * 16) / 8);
  assert.deepEqual([argValue(big!, 3, 'i32'), argValue(big!, 4, 'i32'), argValue(big!, 5, 'i32'), argValue(big!, 6, 'u64')], [11, 2048, 128, BigInt(16384 * 16)]);
  assert.equal(small!.config.grid, 2);
  assert.deepEqual([argValue(small!, 3, 'i32'), argValue(small!, 6, 'u64')], [2, 9n]);
  assert.match(big!.source, /if \(error < best_error\)/, 'the first of equal errors is kept');
});

test('int4ClipGroups: argument checks name the tensor or the group size', () => {
  const host = new RecordingHost();
  assert.throws(() => clip.int4ClipGroups(host, { weight: deviceTensor([2, 64], 'f32'), meanSquare: deviceTensor([64], 'bf16'), ratios: deviceTensor([2], 'f32'), groupSize: 32 }),
    (e: unknown) => e instanceof FuseformerError && /^int4ClipGroups: .*'meanSquare'/.test(e.message));
  assert.throws(() => clip.int4ClipGroups(host, { weight: deviceTensor([2, 64], 'f32'), meanSquare: deviceTensor([64], 'f32'), ratios: deviceTensor([2], 'f32'), groupSize: 48 }),
    /int4ClipGroups: groupSize 48 must be a multiple of 32/);
  assert.equal(host.launches.length, 0);
});

const nvcc = findNvcc();
test('int4ClipGroups kernel compiles with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 5 * 60_000 }, async () => {
  assert.deepEqual(await compileAll(nvcc!, clip.catalog()), []);
});
