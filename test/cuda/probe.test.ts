import assert from 'node:assert/strict';
import { test } from 'node:test';
import { probeCuda } from '../../src/cuda/library.js';

test('probeCuda never throws and explains an unavailable GPU', () => {
  const probe = probeCuda();
  assert.deepEqual(probe.libraries.map((l) => l.name), ['cuda', 'nvrtc', 'cublasLt', 'nccl']);
  for (const library of probe.libraries) {
    if (library.path === null) assert.ok(library.error && library.error.length > 0, `${library.name} has no error text`);
  }
  if (probe.libraries[0]!.path === null) {
    // Machines without the NVIDIA driver (CI): unavailable, with the install advice as the reason.
    assert.equal(probe.available, false);
    assert.match(probe.reason ?? '', /NVIDIA driver/);
  }
  if (!probe.available) assert.ok(probe.reason && probe.reason.length > 0);
  else assert.ok(probe.devices && probe.devices.length > 0 && probe.driverVersion);
  assert.doesNotThrow(() => probeCuda(), 'a second probe (memoised failures) does not throw either');
});
