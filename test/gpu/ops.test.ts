// Every op × dtype × shape on the CUDA backend against the CPU reference, forward and backward,
// on fresh random inputs with poisoned outputs. Skips cleanly without a CUDA GPU.
// FUSEFORMER_TEST_OPS=a,b runs only the cases whose name contains one of the substrings (e.g. "Norm").

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { checkCase } from '../../src/testing/conformance.js';
import { allOpCases } from '../../src/testing/op-cases.js';
import { freshSeed } from '../../src/testing/random.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

test('CUDA ops match the CPU reference', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  const only = (process.env['FUSEFORMER_TEST_OPS'] ?? '').split(',').map((w) => w.trim()).filter((w) => w !== '');
  const cases = allOpCases().filter((c) => only.length === 0 || only.some((w) => c.name.includes(w)));
  if (only.length > 0) t.diagnostic(`FUSEFORMER_TEST_OPS: ${cases.length} cases`);
  assert.ok(cases.length > 0, `FUSEFORMER_TEST_OPS=${only.join(',')} matches no op case`);
  for (const c of cases) {
    await t.test(c.name, () => {
      const result = checkCase(c, gpu, cpu, seed);
      const failed = result.checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
      assert.deepEqual(failed, [], failed.join('\n'));
    });
  }
});
