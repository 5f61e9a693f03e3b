// scaleColumns' launcher without a GPU: a kernel per dtype and direction, the flat grid over rows·C, its
// arguments as a fake host records them; the catalog compiles with nvcc where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as scale from '../../../../src/backend/cuda/kernels/scale-columns.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

test('scaleColumns: a kernel per dtype and direction; C and the element count as arguments', () => {
  const host = new RecordingHost();
  scale.scaleColumns(host, { x: deviceTensor([16384, 2048], 'f32'), scale: deviceTensor([2048], 'f32'), out: deviceTensor([16384, 2048], 'f32') });
  scale.scaleColumns(host, { x: deviceTensor([5, 33], 'bf16'), scale: deviceTensor([33], 'f32'), out: deviceTensor([5, 33], 'bf16'), divide: true });
  const [mul, div] = host.launches;
  assert.equal(mul!.key, 'scale_columns.f32.mul');
  assert.equal(div!.key, 'scale_columns.bf16.div');
  assert.deepEqual([argValue(mul!, 3, 'i32'), argValue(mul!, 4, 'u64')], [2048, BigInt(16384 * 2048)]);
  assert.deepEqual([argValue(div!, 3, 'i32'), argValue(div!, 4, 'u64')], [33, 165n]);
  assert.match(div!.source, /__fdiv_rn\(to_float\(x\[v\]\), scale\[c\]\)/);
  assert.throws(() => scale.scaleColumns(host, { x: deviceTensor([2, 4], 'f16'), scale: deviceTensor([4], 'f16'), out: deviceTensor([2, 4], 'f16') }),
    (e: unknown) => e instanceof FuseformerError && /^scaleColumns: .*'scale'/.test(e.message));
  assert.equal(host.launches.length, 2);
});

const nvcc = findNvcc();
test('scaleColumns kernels compile with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 5 * 60_000 }, async () => {
  assert.deepEqual(await compileAll(nvcc!, scale.catalog()), []);
});
