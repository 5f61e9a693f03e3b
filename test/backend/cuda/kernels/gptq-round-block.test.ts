// gptqRoundBlock's launcher without a GPU: a thread a row in blocks of ROW_THREADS, the block's rows in
// dynamic shared memory, its arguments as a fake host records them; argument checks name the tensor; a
// block wider than the kernel's shared memory is refused; the kernel compiles with nvcc where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as gptq from '../../../../src/backend/cuda/kernels/gptq-round-block.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

const args = (width: number, N: number, G: number) => ({
  weights: deviceTensor([width, N], 'f32'), u: deviceTensor([width, width], 'f32'), groupSize: G,
  q: deviceTensor([N, width], 'u8'), scales: deviceTensor([N, width / G], 'f32'), zeros: deviceTensor([N, width / G], 'u8'), errors: deviceTensor([width, N], 'f32'),
});

test('gptqRoundBlock: a thread a row, the block\'s rows in shared memory; width, N and G as arguments', () => {
  const host = new RecordingHost();
  gptq.gptqRoundBlock(host, args(128, 16384, 128));
  gptq.gptqRoundBlock(host, args(64, 77, 32));
  const [big, small] = host.launches;
  assert.equal(big!.key, 'gptq_round_block');
  assert.equal(big!.config.block, gptq.ROW_THREADS);
  assert.equal(big!.config.grid, 16384 / gptq.ROW_THREADS);
  assert.equal(big!.config.sharedBytes, 128 * gptq.ROW_THREADS * 4);
  assert.deepEqual([argValue(big!, 6, 'i32'), argValue(big!, 7, 'i32'), argValue(big!, 8, 'i32')], [128, 16384, 128]);
  assert.equal(small!.config.grid, 2);
  assert.deepEqual([argValue(small!, 6, 'i32'), argValue(small!, 7, 'i32'), argValue(small!, 8, 'i32')], [64, 77, 32]);
  assert.match(big!.source, /w\[j \* 64 \+ t\] = __fmaf_rn\(-e, __ldg\(urow \+ j\), w\[j \* 64 \+ t\]\)/, 'the error fed forward by a fused multiply-add');
  assert.match(big!.source, /__float2half_rn\(__fdiv_rn\(range, 15\.f\)\)/, 'the scale rounded to f16 as quant-math.ts does');
});

test('gptqRoundBlock: argument checks name the tensor; a block wider than shared memory allows is refused', () => {
  const host = new RecordingHost();
  assert.throws(() => gptq.gptqRoundBlock(host, { ...args(64, 8, 32), q: deviceTensor([8, 64], 'i32') }),
    (e: unknown) => e instanceof FuseformerError && /^gptqRoundBlock: .*'q'/.test(e.message));
  assert.throws(() => gptq.gptqRoundBlock(host, { ...args(64, 8, 32), weights: deviceTensor([64, 8], 'bf16') }),
    (e: unknown) => e instanceof FuseformerError && /^gptqRoundBlock: .*'weights'/.test(e.message));
  assert.throws(() => gptq.gptqRoundBlock(host, args(1024, 8, 128)), /gptqRoundBlock: a block of 1024 columns is wider than the kernel's 512/);
  assert.equal(host.launches.length, 0);
});

const nvcc = findNvcc();
test('gptqRoundBlock kernel compiles with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 5 * 60_000 }, async () => {
  assert.deepEqual(await compileAll(nvcc!, gptq.catalog()), []);
});
