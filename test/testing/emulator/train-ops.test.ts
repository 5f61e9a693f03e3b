// The training ops' cases (src/testing/op-cases.ts: bias + dropout + residual, bias + activation + dropout, the
// QKV split, LayerNorm / RMSNorm, softmax, FlashAttention forward and backward, cross-entropy, embedding,
// AdamW, the RNG, dropout, sum of squares) and the paged-cache cases (src/testing/paged-op-cases.ts) on the CUDA
// backend's kernels run by the kernel emulator, against the CPU reference — the tables `npm run test:gpu` runs on
// the GPU. The emulator picks no sm_90a kernel, so FlashAttention runs its mma.sync kernels here (the wgmma ones
// only on an H100 / H200). FUSEFORMER_EMULATOR_OPS=a,b runs only the cases whose name contains one of the words.
// Skips where the emulator cannot compile (no g++ or CUDA headers).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { caseFailures } from '../../../src/testing/conformance.js';
import { emulatedCudaBackend, emulatorUnavailable } from '../../../src/testing/emulator/host.js';
import { allOpCases } from '../../../src/testing/op-cases.js';
import { pagedOpCases } from '../../../src/testing/paged-op-cases.js';
import { freshSeed } from '../../../src/testing/random.js';

const skip = emulatorUnavailable() ?? false;
const words = (process.env['FUSEFORMER_EMULATOR_OPS'] ?? '').split(',').map((w) => w.trim()).filter((w) => w !== '');

test('training and paged-cache ops on the emulated CUDA backend match the CPU reference', { skip, timeout: 60 * 60_000 }, async (t) => {
  const cases = [...allOpCases(), ...pagedOpCases()].filter((c) => words.length === 0 || words.some((w) => c.name.includes(w)));
  assert.ok(cases.length > 0 || words.length > 0, 'the tables have cases');
  const { backend } = emulatedCudaBackend();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of cases) {
    await t.test(c.name, () => {
      const failed = caseFailures(c, backend, cpu, seed);
      assert.deepEqual(failed, [], failed.join('\n'));
    });
  }
});
