// The paged attention ops (src/testing/paged-op-cases.ts: qkvRopeAppend, decodeAttention and
// flashAttentionForward reading and writing a block pool through a block table) on the CUDA backend
// against the CPU reference, on fresh random inputs with poisoned outputs: GQA, blocks of 8, 16 and 32,
// contexts ending mid-block, unused table entries −1, idle rows, split-K decode, the tensor-core and the
// SIMT prefill kernels. Skips without a GPU.

import { test } from 'node:test';
import { pagedOpCases } from '../../src/testing/paged-op-cases.js';
import { createGpuBackend, gpuSkip } from './device.js';
import { checkOpCasesOnGpu } from './op-case-suite.js';
import './report-as-you-go.js';

const skip = gpuSkip();

test('CUDA paged attention ops match the CPU reference', { skip }, async (t) => {
  await checkOpCasesOnGpu(t, pagedOpCases(), await createGpuBackend());
});

