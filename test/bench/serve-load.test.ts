// bench/serve.ts (`npm run bench:serve`, issue #6's bounded load test) end to end on the CPU at a small size: every
// valid request completes, every malformed body (one of each kind at this share) gets a 4xx with an error body, the
// disconnecting clients' requests are cancelled, no KV block is left held. It caught a request the bench still
// called malformed after the API came to take it (n: 2, once n choices were served).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const scratch = mkdtempSync(join(tmpdir(), 'fuseformer-serve-load-'));
after(() => rmSync(scratch, { recursive: true, force: true }));
const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'serve.js');

test('bench:serve passes its checks on the CPU: valid requests answered, malformed ones refused, nothing leaked', () => {
  const json = join(scratch, 'serve.json');
  const run = spawnSync(process.execPath, [script, '--backend', 'cpu', '--requests', '60', '--concurrency', '8', '--malformed', '0.3', '--disconnect', '0.1', '--max-tokens', '6', '--json', json], { encoding: 'utf8' });
  assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
  const result = JSON.parse(readFileSync(json, 'utf8')) as { checks: Record<string, boolean>; counts: { valid: number; malformed: number; disconnected: number; errors: number } };
  assert.deepEqual(Object.values(result.checks), Object.values(result.checks).map(() => true), JSON.stringify(result.checks));
  assert.ok(result.counts.malformed >= 10, `every kind of malformed body is sent (${result.counts.malformed})`);
  assert.ok(result.counts.valid > 20 && result.counts.errors === 0);
});
