// gatherColumns' launcher without a GPU: the kernel by dtype, the flat grid over rows·C outputs and its
// arguments as a fake host records them; argument checks name the tensor; its catalog compiles with nvcc
// where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as gather from '../../../../src/backend/cuda/kernels/gather-columns.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

test('gatherColumns: one kernel a dtype; K, C and the output count as arguments', () => {
  const host = new RecordingHost();
  gather.gatherColumns(host, { x: deviceTensor([17, 2048], 'bf16'), index: deviceTensor([2048], 'i32'), out: deviceTensor([17, 2048], 'bf16') });
  gather.gatherColumns(host, { x: deviceTensor([3, 257], 'f32'), index: deviceTensor([100], 'i32'), out: deviceTensor([3, 100], 'f32') });
  const [first, second] = host.launches;
  assert.equal(first!.key, 'gather_columns.bf16');
  assert.equal(first!.config.block, 256);
  assert.equal(argValue(first!, 3, 'i32'), 2048);
  assert.equal(argValue(first!, 4, 'i32'), 2048);
  assert.equal(argValue(first!, 5, 'u64'), BigInt(17 * 2048));
  assert.equal(second!.key, 'gather_columns.f32');
  assert.equal(argValue(second!, 3, 'i32'), 257);
  assert.equal(argValue(second!, 4, 'i32'), 100);
  assert.equal(argValue(second!, 5, 'u64'), 300n);
  assert.match(first!.source, /out\[v\] = x\[r \* \(u64\)K \+ \(u64\)index\[j\]\]/);
});

test('gatherColumns: argument checks name the op and the tensor', () => {
  const host = new RecordingHost();
  assert.throws(() => gather.gatherColumns(host, { x: deviceTensor([2, 8], 'bf16'), index: deviceTensor([8], 'i32'), out: deviceTensor([2, 8], 'f16') }),
    (e: unknown) => e instanceof FuseformerError && /^gatherColumns: .*'out'/.test(e.message));
  assert.throws(() => gather.gatherColumns(host, { x: deviceTensor([2, 8], 'f32'), index: deviceTensor([4], 'i32'), out: deviceTensor([2, 8], 'f32') }),
    (e: unknown) => e instanceof FuseformerError && /^gatherColumns: .*'out'/.test(e.message));
  assert.throws(() => gather.gatherColumns(host, { x: deviceTensor([2, 8], 'f32'), index: deviceTensor([8], 'f32'), out: deviceTensor([2, 8], 'f32') }),
    (e: unknown) => e instanceof FuseformerError && /^gatherColumns: .*'index'/.test(e.message));
  assert.equal(host.launches.length, 0);
});

const nvcc = findNvcc();
test('gatherColumns kernels compile with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 5 * 60_000 }, async () => {
  const failures = await compileAll(nvcc!, gather.catalog());
  assert.deepEqual(failures, []);
});
