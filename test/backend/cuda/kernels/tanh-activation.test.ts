// tanhActivation's launcher without a GPU: the spec (vector width from the alignment, bias on/off), the
// grid and the arguments a fake host records; its catalog compiles with nvcc where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tanh from '../../../../src/backend/cuda/kernels/tanh-activation.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('tanhActivation: 16-byte vectors when aligned, narrower otherwise; the bias pointer only when given', () => {
  const host = new RecordingHost();
  tanh.tanhActivation(host, { x: deviceTensor([32, 768], 'bf16'), bias: deviceTensor([768], 'bf16'), out: deviceTensor([32, 768], 'bf16') });
  const first = host.launches[0]!;
  assert.equal(first.key, 'tanh_activation.bf16.h768.v8.bias');
  assert.equal(first.config.block, 256);
  assert.equal(argValue(first, 3, 'u64'), BigInt(32 * 768 / 8));
  assert.notEqual(argValue(first, 1, 'ptr'), 0n);
  // An f32 tensor at an 8-byte offset: two-element vectors; no bias: a null pointer and the plain kernel.
  tanh.tanhActivation(host, { x: deviceTensor([3, 34], 'f32', 0x2000_0008n), out: deviceTensor([3, 34], 'f32') });
  const second = host.launches[1]!;
  assert.equal(second.key, 'tanh_activation.f32.h34.v2');
  assert.equal(argValue(second, 1, 'ptr'), 0n);
  assert.equal(argValue(second, 3, 'u64'), BigInt(3 * 34 / 2));
  assert.match(first.source, /tanhf\(values\[i\]\)/);
});

test('tanhActivation: argument checks name the op and the tensor', () => {
  const host = new RecordingHost();
  assert.throws(() => tanh.tanhActivation(host, { x: deviceTensor([2, 8], 'bf16'), out: deviceTensor([2, 8], 'f16') }),
    (e: unknown) => e instanceof FuseformerError && /^tanhActivation: .*'out'/.test(e.message));
  assert.throws(() => tanh.tanhActivation(host, { x: deviceTensor([2, 8], 'f32'), bias: deviceTensor([4], 'f32'), out: deviceTensor([2, 8], 'f32') }),
    (e: unknown) => e instanceof FuseformerError && /^tanhActivation: .*'bias'/.test(e.message));
  assert.equal(host.launches.length, 0);
});
