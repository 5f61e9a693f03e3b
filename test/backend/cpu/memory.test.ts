import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError } from '../../../src/errors.js';
import { assertRejects } from './helpers.js';

test('memoryStats counts allocations and the dtype bytes of live tensors', () => {
  const backend = new CpuBackend();
  assert.deepEqual(backend.memoryStats(), { allocations: 0, deviceAllocations: 0, bytesInUse: 0, peakBytesInUse: 0, bytesReserved: 0 });
  const a = backend.empty([3, 4], 'f16'); // 24 bytes: f16 counts 2 bytes an element
  const b = backend.fromArray([1, 2, 3], [3], 'f32'); // 12 bytes
  const c = backend.empty([5], 'u8'); // 5 bytes
  backend.view(a, 0, [6]); // a view allocates nothing
  assert.deepEqual(backend.memoryStats(), { allocations: 3, deviceAllocations: 3, bytesInUse: 41, peakBytesInUse: 41, bytesReserved: 41 });
  backend.free(a);
  backend.free(c);
  assert.deepEqual(backend.memoryStats(), { allocations: 3, deviceAllocations: 3, bytesInUse: 12, peakBytesInUse: 41, bytesReserved: 12 });
  backend.free(b);
  assert.equal(backend.memoryStats().bytesInUse, 0);
});

test('freeing a view frees nothing; freeing twice is an error', () => {
  const backend = new CpuBackend();
  const t = backend.empty([4], 'f32');
  const v = backend.view(t, 1, [2]);
  backend.free(v);
  assert.equal(backend.memoryStats().bytesInUse, 16);
  backend.fill(v, 1); // still usable: its base is alive
  backend.free(t);
  assert.throws(() => backend.free(t), ArgumentError);
});

test('a freed tensor (or a view of it) is rejected by ops, naming the argument', () => {
  const backend = new CpuBackend();
  const t = backend.empty([4], 'f32');
  const v = backend.view(t, 0, [2]);
  backend.free(t);
  assertRejects(() => backend.fill(t, 0), 'fill', 't', ArgumentError);
  assertRejects(() => backend.download(v), 'download', 't', ArgumentError);
});
