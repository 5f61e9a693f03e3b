// Runs op cases on a backend and on the reference backend with identical inputs and compares every
// output. Used by the GPU test suite and by `fuseformer selftest`.

import type { Backend } from '../backend/backend.js';
import { compareArrays, describe, TOLERANCE } from './compare.js';
import type { OpCase } from './op-cases.js';
import { Rng } from './random.js';

export interface OutputCheck {
  output: string;
  ok: boolean;
  detail: string;
}

export interface CaseResult {
  name: string;
  ok: boolean;
  checks: OutputCheck[];
  /** Wall time of the case on the backend under test, in ms (includes upload/download). */
  ms: number;
}

/** The outputs of checkCase that differ from the reference, one line each (empty when the case passes). */
export function caseFailures(c: OpCase, backend: Backend, reference: Backend, seed: number): string[] {
  return checkCase(c, backend, reference, seed).checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
}

/**
 * The cases FUSEFORMER_TEST_OPS=a,b selects: those whose name contains one of the comma-separated
 * substrings (every case when it is unset), and the substrings. FUSEFORMER_TEST_SHARD=i/n then keeps every
 * n-th of those from the i-th (0 ≤ i < n), so n processes side by side run a suite's cases once between them.
 */
export function casesSelectedByEnv<C extends { readonly name: string }>(cases: readonly C[], env: NodeJS.ProcessEnv = process.env): { cases: C[]; words: string[] } {
  const words = (env['FUSEFORMER_TEST_OPS'] ?? '').split(',').map((w) => w.trim()).filter((w) => w !== '');
  const matched = cases.filter((c) => words.length === 0 || words.some((w) => c.name.includes(w)));
  const shard = testShardFromEnv(env);
  return { cases: shard ? matched.filter((_, i) => i % shard.count === shard.index) : matched, words };
}

/** FUSEFORMER_TEST_SHARD=i/n as { index: i, count: n }; unset or empty: undefined; anything else an error naming it. */
export function testShardFromEnv(env: NodeJS.ProcessEnv = process.env): { index: number; count: number } | undefined {
  const value = env['FUSEFORMER_TEST_SHARD']?.trim();
  if (value === undefined || value === '') return undefined;
  const m = /^(\d+)\/(\d+)$/.exec(value);
  const index = m ? Number(m[1]) : NaN, count = m ? Number(m[2]) : NaN;
  if (!m || count < 1 || index >= count) throw new Error(`FUSEFORMER_TEST_SHARD must be i/n with 0 <= i < n (e.g. 0/2), got '${value}'`);
  return { index, count };
}

function nameHash(name: string): number {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
  return h >>> 0;
}

export function checkCase(c: OpCase, backend: Backend, reference: Backend, seed: number): CaseResult {
  const inputs = c.inputs(new Rng(seed ^ nameHash(c.name)));
  const expected = c.run(reference, inputs);
  const start = performance.now();
  const actual = c.run(backend, inputs);
  const ms = performance.now() - start;
  const checks: OutputCheck[] = [];
  for (const [output, ref] of Object.entries(expected)) {
    const got = actual[output];
    if (!got) { checks.push({ output, ok: false, detail: `output missing on ${backend.name}` }); continue; }
    if (c.exact?.includes(output)) {
      let mismatches = 0, first = -1;
      for (let i = 0; i < ref.length; i++) if (got[i] !== ref[i]) { mismatches++; if (first < 0) first = i; }
      checks.push({
        output, ok: mismatches === 0,
        detail: mismatches === 0 ? 'bit-exact' : `${mismatches} of ${ref.length} elements differ (first at [${first}]: got ${got[first]}, expected ${ref[first]})`,
      });
      continue;
    }
    const cmp = compareArrays(got, ref);
    const tolerance = c.tolerance ?? TOLERANCE[c.dtype];
    const ok = cmp.unwritten === 0 && cmp.relativeError <= tolerance;
    checks.push({ output, ok, detail: `${describe(cmp, got, ref)} (tolerance ${tolerance})` });
  }
  return { name: c.name, ok: checks.every((x) => x.ok), checks, ms };
}
