// The paged attention ops (src/testing/paged-op-cases.ts: qkvRopeAppend, decodeAttention and
// flashAttentionForward reading and writing a block pool through a block table) on the CUDA backend
// against the CPU reference, on fresh random inputs with poisoned outputs: GQA, blocks of 8, 16 and 32,
// contexts ending mid-block, unused table entries −1, idle rows, split-K decode, the tensor-core and the
// SIMT prefill kernels. Skips without a GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { checkCase } from '../../src/testing/conformance.js';
import { pagedOpCases } from '../../src/testing/paged-op-cases.js';
import { freshSeed } from '../../src/testing/random.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

test('CUDA paged attention ops match the CPU reference', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of pagedOpCases()) {
    await t.test(c.name, () => {
      const result = checkCase(c, gpu, cpu, seed);
      const failed = result.checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
      assert.deepEqual(failed, [], failed.join('\n'));
    });
  }
});

