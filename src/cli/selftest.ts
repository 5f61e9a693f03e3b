// `fuseformer selftest`: every op on the selected backend against the CPU reference, with a summary.

import type { BackendChoice } from '../backend/index.js';
import { selectBackend } from '../backend/index.js';
import { CpuBackend } from '../backend/cpu/index.js';
import type { FloatDType } from '../dtype.js';
import { FLOAT_DTYPES } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { checkCase } from '../testing/conformance.js';
import { allOpCases } from '../testing/op-cases.js';
import { freshSeed } from '../testing/random.js';

export interface SelftestOptions {
  backend?: BackendChoice | undefined;
  dtype?: string | undefined;
  full: boolean;
}

export async function runSelftest(options: SelftestOptions): Promise<number> {
  let dtypes: readonly FloatDType[] = FLOAT_DTYPES;
  if (options.dtype !== undefined) {
    const d = FLOAT_DTYPES.find((f) => f === options.dtype);
    if (d === undefined) throw new ArgumentError(`--dtype must be f32, f16 or bf16, got '${options.dtype}'`);
    dtypes = [d];
  }
  const { backend, reason } = await selectBackend(options.backend);
  const reference = new CpuBackend();
  let cases = allOpCases(dtypes);
  // The quick run keeps the first shape of each op family and dtype; --full runs them all.
  if (!options.full) {
    const seen = new Set<string>();
    cases = cases.filter((c) => { const family = `${c.name.split(' ')[0]} ${c.dtype}`; if (seen.has(family)) return false; seen.add(family); return true; });
  }
  const seed = freshSeed();
  process.stdout.write(`selftest on ${backend.description} (${reason}); ${cases.length} cases, seed ${seed}\n`);
  if (backend.name === 'cpu') process.stdout.write('note: the CPU backend is the reference itself, so this run checks that every op runs, not that it is right.\n');
  let failures = 0;
  for (const c of cases) {
    const result = checkCase(c, backend, reference, seed);
    if (!result.ok) failures++;
    process.stdout.write(`${result.ok ? ' ok ' : 'FAIL'}  ${c.name.padEnd(64)} ${result.ms.toFixed(1).padStart(8)} ms\n`);
    for (const check of result.checks) if (!check.ok) process.stdout.write(`        ${check.output}: ${check.detail}\n`);
  }
  process.stdout.write(`\n${cases.length - failures} of ${cases.length} cases passed${failures ? `; ${failures} FAILED` : ''}\n`);
  return failures ? 1 : 0;
}
