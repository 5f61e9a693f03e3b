// A closed-loop HTTP load from another process (the server's own event loop would hold back clients in this one):
// `clients` concurrent clients POST `bodies` to `url` in turn, each sending its next body when the answer to its last
// has come; the whole set runs once as a warm-up, then `reps` times. Any answer but 200 fails the run.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { promisify } from 'node:util';

/** The median wall time (ms) of posting every body of `bodiesFile` (a JSON array) with `clients` clients. */
export async function httpLoadMs(url: string, bodiesFile: string, bodies: readonly unknown[], clients: number, reps: number): Promise<number> {
  writeFileSync(bodiesFile, JSON.stringify(bodies));
  const script = `const bodies = JSON.parse(require('fs').readFileSync(${JSON.stringify(bodiesFile)}, 'utf8'));
    const run = async () => { let next = 0; const t0 = performance.now();
      await Promise.all(Array.from({ length: ${clients} }, async () => { while (next < bodies.length) { const body = bodies[next++];
        const r = await fetch(${JSON.stringify(url)}, { method: 'POST', body: JSON.stringify(body) });
        if (r.status !== 200) throw new Error('status ' + r.status + ': ' + await r.text()); await r.json(); } }));
      return performance.now() - t0; };
    (async () => { await run(); const t = []; for (let i = 0; i < ${reps}; i++) t.push(await run()); t.sort((a, b) => a - b); process.stdout.write(String(t[t.length >> 1])); })();`;
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', script], { maxBuffer: 1 << 20 });
  return Number(stdout);
}
