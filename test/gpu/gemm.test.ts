// cuBLASLt GEMMs on the CUDA backend against the CPU reference: every epilogue × dtype × transpose
// pair over square, odd, degenerate, vocabulary-sized and Transformer-sized shapes, strided-batched
// GEMMs and a misaligned view, on fresh random inputs with NaN-poisoned outputs (the case table is
// src/testing/gemm-cases.ts). Cases cuBLASLt cannot do must be refused with an ArgumentError.
// Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { checkGemmCase, gemmCases } from '../../src/testing/gemm-cases.js';
import { freshSeed } from '../../src/testing/random.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

test('cuBLASLt GEMMs match the CPU reference', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of gemmCases()) {
    await t.test(c.name, () => {
      const result = checkGemmCase(c, gpu, cpu, seed);
      assert.ok(result.ok, result.details.join('\n'));
    });
  }
});
