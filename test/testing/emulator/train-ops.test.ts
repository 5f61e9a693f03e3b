// The training ops' cases (src/testing/op-cases.ts: bias + dropout + residual, bias + activation + dropout, the
// QKV split, LayerNorm / RMSNorm, softmax, FlashAttention forward and backward, cross-entropy, embedding,
// AdamW, the RNG, dropout, sum of squares) and the paged-cache cases (src/testing/paged-op-cases.ts) on the CUDA
// backend's kernels run by the kernel emulator, against the CPU reference — the tables `npm run test:gpu` runs on
// the GPU. The emulator picks no sm_90a kernel, so FlashAttention runs its mma.sync kernels here (the wgmma ones
// only on an H100 / H200). FUSEFORMER_EMULATOR_OPS=a,b runs only the cases whose name contains one of the words.
// Skips where the emulator cannot compile (no g++ or CUDA headers).

import { test } from 'node:test';
import { emulatorUnavailable } from '../../../src/testing/emulator/host.js';
import { allOpCases } from '../../../src/testing/op-cases.js';
import { pagedOpCases } from '../../../src/testing/paged-op-cases.js';
import { checkOnEmulator, selectedCases } from './emulated-cases.js';

const skip = emulatorUnavailable() ?? false;

test('training and paged-cache ops on the emulated CUDA backend match the CPU reference', { skip, timeout: 60 * 60_000 }, async (t) => {
  await checkOnEmulator(t, selectedCases([...allOpCases(), ...pagedOpCases()]));
});
