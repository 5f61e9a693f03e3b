// Concurrent HTTP clients in another process (in this one, a server's rounds would hold back the requests they make),
// each answer timed: the servers' tests of when a round answers its requests.

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/** POSTs each of `bodies` to `url` at once — all but the first `staggerMs` later — and gives each JSON answer with its ms since the start. */
export async function postTimed<A>(url: string, bodies: readonly unknown[], staggerMs: number): Promise<{ ms: number; answer: A }[]> {
  const script = `const t0 = performance.now();
    const answers = await Promise.all(${JSON.stringify(bodies)}.map(async (body, i) => {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, ${staggerMs}));
      const answer = await (await fetch(${JSON.stringify(url)}, { method: 'POST', body: JSON.stringify(body) })).json();
      return { ms: performance.now() - t0, answer };
    }));
    process.stdout.write(JSON.stringify(answers));`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { maxBuffer: 1 << 24 });
  return JSON.parse(stdout) as { ms: number; answer: A }[];
}

/**
 * A round function for those tests: round 1 takes 300 ms (so the requests sent meanwhile queue up and share round
 * 2); round 2 reports its first two items done, takes 400 ms more, then reports the rest. `compute` gives the results.
 */
export function slowRounds<I, R>(compute: (items: readonly I[]) => R): (items: readonly I[], report?: (indices: readonly number[], result: R) => void) => Promise<R> {
  let calls = 0;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  return async (items, report) => {
    const round = ++calls, result = compute(items);
    if (round === 1) await sleep(300);
    else {
      report?.([0, 1], result);
      await sleep(400);
    }
    report?.(items.map((_, i) => i).slice(round === 1 ? 0 : 2), result);
    return result;
  };
}
