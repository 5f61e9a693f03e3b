// The GPU op-case suites' common run: each case on a fresh CUDA backend against the CPU reference with one
// fresh seed (printed for a rerun), a subtest per case that fails with the outputs that differ. A suite may pass
// its backend (test/gpu/device.ts's createGpuBackend, which is the emulated one under FUSEFORMER_TEST_EMULATE=1).

import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import type { CudaBackend } from '../../src/backend/cuda/index.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { caseFailures } from '../../src/testing/conformance.js';
import type { OpCase } from '../../src/testing/op-cases.js';
import { freshSeed } from '../../src/testing/random.js';

export async function checkOpCasesOnGpu(t: TestContext, cases: readonly OpCase[], backend?: CudaBackend): Promise<void> {
  const gpu = backend ?? (await import('../../src/backend/cuda/index.js')).CudaBackend.create(), cpu = new CpuBackend(), seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of cases) {
    await t.test(c.name, () => {
      const failed = caseFailures(c, gpu, cpu, seed);
      assert.deepEqual(failed, [], failed.join('\n'));
    });
  }
}
