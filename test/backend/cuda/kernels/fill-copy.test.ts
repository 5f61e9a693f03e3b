// The fill and copy kernels without a GPU: what the launchers pass for known shapes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fc from '../../../../src/backend/cuda/kernels/fill-copy.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('fill passes the value as bits of the tensor dtype', () => {
  const bitsFor = (dtype: 'f32' | 'f16' | 'bf16' | 'i32' | 'i8' | 'u8', value: number): number => {
    const host = new RecordingHost();
    fc.fill(host, deviceTensor([1000], dtype), value);
    return Number(argValue(host.launches[0]!, 2, 'u32'));
  };
  assert.equal(bitsFor('f16', 1.5), 0x3e00);
  assert.equal(bitsFor('bf16', -2), 0xc000);
  assert.equal(bitsFor('f32', 1), 0x3f800000);
  assert.equal(bitsFor('i32', -1), 0xffffffff);
  assert.equal(bitsFor('i8', -3), 0xfd);
  assert.equal(bitsFor('u8', 255), 0xff);
  assert.ok(Number.isNaN(NaN) && bitsFor('f32', NaN) === 0x7fc00000);
});

test('fill and copy pick vectors from alignment and hand the tail to the kernel', () => {
  const host = new RecordingHost();
  fc.fill(host, deviceTensor([1001], 'u8', 0x2000_0003n), 7);
  fc.copy(host, deviceTensor([1001], 'f32'), deviceTensor([1001], 'f16'));
  fc.copy(host, deviceTensor([1001], 'f16', 0x3000_0002n), deviceTensor([1001], 'f32'));
  assert.deepEqual(host.launches.map((l) => l.key), ['fill.b1.v1', 'copy.f32.f16.v4', 'copy.f16.f32.v1']);
  assert.equal(argValue(host.launches[1]!, 2, 'u64'), 1001n);
});
