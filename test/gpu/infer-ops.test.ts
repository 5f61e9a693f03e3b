// The decode-step ops (src/testing/infer-op-cases.ts) on the CUDA backend against the CPU reference, on
// fresh random inputs with poisoned outputs; sampled tokens must match exactly; decode attention again
// with its cluster combine (decodeAttentionOptions.clusterCombine). Skips without a GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { checkCase } from '../../src/testing/conformance.js';
import { inferOpCases } from '../../src/testing/infer-op-cases.js';
import { pagedOpCases } from '../../src/testing/paged-op-cases.js';
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

test('decode attention with the split-K combine inside a thread-block cluster matches the CPU reference, twice in a row', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const { decodeAttentionOptions } = await import('../../src/backend/cuda/kernels/decode-attention.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  decodeAttentionOptions.clusterCombine = true;
  try {
    const cases = [...inferOpCases(), ...pagedOpCases()].filter((c) => /^(paged )?decodeAttention /.test(c.name));
    assert.ok(cases.some((c) => /splits=[2-8]\b/.test(c.name)), 'cases with 2–8 splits exercise the cluster path');
    for (const c of cases) {
      await t.test(c.name, () => {
        for (let run = 0; run < 2; run++) {
          const failed = checkCase(c, gpu, cpu, seed + run).checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
          assert.deepEqual(failed, [], failed.join('\n'));
        }
      });
    }
  } finally {
    decodeAttentionOptions.clusterCombine = false;
  }
});
