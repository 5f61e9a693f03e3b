// The permute0213 kernel without a GPU: keys, the vector width from D and the addresses, the launch
// arguments, and validation.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as permute from '../../../../src/backend/cuda/kernels/permute.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('keys differ in element size, row length and vector width; catalog names are unique', () => {
  const keys = [
    permute.permute0213Key({ elementBytes: 2, rowLength: 64, vec: 8 }), permute.permute0213Key({ elementBytes: 4, rowLength: 64, vec: 4 }),
    permute.permute0213Key({ elementBytes: 2, rowLength: 128, vec: 8 }), permute.permute0213Key({ elementBytes: 2, rowLength: 64, vec: 4 }),
  ];
  assert.equal(new Set(keys).size, keys.length);
  assert.equal(new Set(permute.catalog().map((s) => s.name)).size, permute.catalog().length);
});

test('f16/bf16 share a kernel, as do f32/i32; 16-byte vectors when D and the addresses allow', () => {
  const host = new RecordingHost();
  permute.permute0213(host, { x: deviceTensor([2, 12, 17, 64], 'f16'), out: deviceTensor([2, 17, 12, 64], 'f16') });
  permute.permute0213(host, { x: deviceTensor([2, 12, 17, 64], 'bf16'), out: deviceTensor([2, 17, 12, 64], 'bf16') });
  permute.permute0213(host, { x: deviceTensor([2, 12, 17, 64], 'i32'), out: deviceTensor([2, 17, 12, 64], 'i32') });
  permute.permute0213(host, { x: deviceTensor([3, 7, 5, 6], 'f16'), out: deviceTensor([3, 5, 7, 6], 'f16') });
  permute.permute0213(host, { x: deviceTensor([2, 12, 17, 64], 'f32', 0x5000_0008n), out: deviceTensor([2, 17, 12, 64], 'f32') });
  assert.deepEqual(host.launches.map((l) => l.key), [
    'permute0213.b2.d64.v8', 'permute0213.b2.d64.v8', 'permute0213.b4.d64.v4', 'permute0213.b2.d6.v2', 'permute0213.b4.d64.v2',
  ]);
  const l = host.launches[0]!;
  assert.equal(argValue(l, 2, 'u64'), BigInt(2 * 12 * 17 * 64 / 8));
  assert.equal(argValue(l, 3, 'u32'), 12);
  assert.equal(argValue(l, 4, 'u32'), 17);
  assert.equal(l.config.block, 256);
});

test('an empty tensor launches nothing; bad arguments are rejected naming the op', () => {
  const host = new RecordingHost();
  permute.permute0213(host, { x: deviceTensor([2, 0, 3, 4], 'f16'), out: deviceTensor([2, 3, 0, 4], 'f16') });
  assert.equal(host.launches.length, 0);
  const rejects = (fn: () => void, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  };
  rejects(() => permute.permute0213(host, { x: deviceTensor([2, 3, 4, 5], 'f16'), out: deviceTensor([2, 3, 4, 5], 'f16') }), /^permute0213: 'out' has shape \[2, 3, 4, 5\]/);
  rejects(() => permute.permute0213(host, { x: deviceTensor([2, 3, 4, 5], 'u8'), out: deviceTensor([2, 4, 3, 5], 'u8') }), /^permute0213: 'x' has dtype u8/);
  rejects(() => permute.permute0213(host, { x: deviceTensor([2, 3, 4, 5], 'f32'), out: deviceTensor([2, 4, 3, 5], 'i32') }), /^permute0213: 'out' has dtype i32 but 'x' has f32/);
  assert.equal(host.launches.length, 0);
});
