// Shared by the emulator's op-table tests: the cases FUSEFORMER_EMULATOR_OPS selects, and each case run on a
// fresh emulated CUDA backend against the CPU reference as a subtest (one seed, printed for a rerun).

import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { caseFailures } from '../../../src/testing/conformance.js';
import { emulatedCudaBackend } from '../../../src/testing/emulator/host.js';
import type { OpCase } from '../../../src/testing/op-cases.js';
import { freshSeed } from '../../../src/testing/random.js';

const words = (process.env['FUSEFORMER_EMULATOR_OPS'] ?? '').split(',').map((w) => w.trim()).filter((w) => w !== '');

/** The cases whose name contains one of FUSEFORMER_EMULATOR_OPS's words (all of them when it is unset). */
export function selectedCases(cases: OpCase[]): OpCase[] {
  const chosen = cases.filter((c) => words.length === 0 || words.some((w) => c.name.includes(w)));
  assert.ok(chosen.length > 0 || words.length > 0, 'the table has cases');
  return chosen;
}

export async function checkOnEmulator(t: TestContext, cases: OpCase[]): Promise<void> {
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
}
