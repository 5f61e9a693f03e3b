// The randomFill kernel without a GPU: what the launcher passes for known shapes, and its checks.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { randomFill } from '../../../../src/backend/cuda/kernels/random.js';
import { ArgumentError, DTypeError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('normal fill of an aligned bf16 tensor: vector stores, one thread per 4 elements, parameters passed', () => {
  const host = new RecordingHost();
  randomFill(host, { out: deviceTensor([1000, 7], 'bf16'), distribution: 'normal', mean: 0.5, std: 0.02, seed: 42n, offset: 9n });
  const l = host.launches[0]!;
  assert.equal(l.key, 'random_fill.bf16.normal.v4');
  assert.equal(argValue(l, 1, 'u64'), 7000n);
  assert.equal(argValue(l, 2, 'u64'), 42n);
  assert.equal(argValue(l, 3, 'u64'), 9n);
  assert.equal(argValue(l, 4, 'f32'), 0.5);
  assert.equal(argValue(l, 5, 'f32'), 0.02);
  assert.equal(l.config.grid, Math.ceil(1750 / 256));
});

test('a view at an odd element offset falls back to scalar stores; uniform defaults to [0, 1)', () => {
  const host = new RecordingHost();
  randomFill(host, { out: deviceTensor([5], 'f32', 0x1000_0004n), distribution: 'uniform', seed: 1n, offset: 0n });
  const l = host.launches[0]!;
  assert.equal(l.key, 'random_fill.f32.uniform');
  assert.equal(argValue(l, 4, 'f32'), 0);
  assert.equal(argValue(l, 5, 'f32'), 1);
});

test('randomFill rejects integer tensors and bad parameters, naming the op', () => {
  const host = new RecordingHost();
  assert.throws(() => randomFill(host, { out: deviceTensor([4], 'u8'), distribution: 'uniform', seed: 1n, offset: 0n }), (e: Error) => e instanceof DTypeError && e.message.startsWith('randomFill:'));
  assert.throws(() => randomFill(host, { out: deviceTensor([4], 'f16'), distribution: 'uniform', low: 2, high: 1, seed: 1n, offset: 0n }), (e: Error) => e instanceof ArgumentError && /randomFill: 'high'/.test(e.message));
  assert.equal(host.launches.length, 0);
});
