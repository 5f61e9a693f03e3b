// The decode-step ops (src/testing/infer-op-cases.ts) on the CUDA backend against the CPU reference, on
// fresh random inputs with poisoned outputs; sampled tokens must match exactly. Skips without a GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { checkCase } from '../../src/testing/conformance.js';
import { inferOpCases } from '../../src/testing/infer-op-cases.js';
import { freshSeed } from '../../src/testing/random.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

test('CUDA decode-step ops match the CPU reference', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of inferOpCases()) {
    await t.test(c.name, () => {
      const result = checkCase(c, gpu, cpu, seed);
      const failed = result.checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
      assert.deepEqual(failed, [], failed.join('\n'));
    });
  }
});
