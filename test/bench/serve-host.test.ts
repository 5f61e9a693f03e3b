// bench/serve-host.ts: the serving engine's host work per step on a backend whose kernels do nothing.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hostOnlyBackend, measureHost } from '../../bench/serve-host.js';

test('the host-only backend keeps memory and transfers real and makes every kernel op a no-op', () => {
  const b = hostOnlyBackend();
  const x = b.fromArray([1, 2, 3], [3], 'f32');
  b.fill(x, 9); // a kernel op: nothing happens
  assert.deepEqual(Array.from(b.download(x)), [1, 2, 3]);
  b.upload(x, Float32Array.from([4, 5, 6]));
  assert.deepEqual(Array.from(b.download(x)), [4, 5, 6]);
});

test('measureHost runs a closed loop to the end and reports steps, host ms per step and positions per step', () => {
  const r = measureHost(hostOnlyBackend(), 4);
  assert.equal(r.concurrency, 4);
  assert.ok(r.steps > 16, `${r.steps} steps`);
  assert.ok(r.msPerStep > 0 && Number.isFinite(r.msPerStep));
  // 16 requests of at least 16 + 16 positions each, over the steps.
  assert.ok(r.positionsPerStep * r.steps >= 16 * 32, `${r.positionsPerStep} positions a step`);
});
