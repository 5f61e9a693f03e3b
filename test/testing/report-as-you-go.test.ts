// test/gpu/report-as-you-go.ts: under `node --test`, a file whose subtests are synchronous work (as the GPU
// suites' are) reports each subtest when it ends, so a run cut by its time bound still shows what passed.
// Also: every GPU suite imports it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const hook = join(here, '..', 'gpu', 'report-as-you-go.js');

/** A suite of three subtests, each 1.5 s of synchronous work, with the hook imported or not. */
function fixture(withHook: boolean): string {
  return [
    "import { test } from 'node:test';",
    withHook ? `import ${JSON.stringify(pathToFileURL(hook).href)};` : '',
    'const busy = (ms) => { const end = Date.now() + ms; while (Date.now() < end); };',
    "test('suite', async (t) => { for (let i = 0; i < 3; i++) await t.test(`case ${i}`, () => busy(1500)); });",
  ].join('\n');
}

/** Milliseconds between the first subtest's "ok" line reaching us and the process's exit. */
function leadOfFirstResult(file: string): Promise<number> {
  return new Promise((resolve, reject) => {
    // Without NODE_TEST_CONTEXT: the child is a runner of its own, not a file of this run.
    const env = { ...process.env };
    delete env['NODE_TEST_CONTEXT'];
    const child = spawn(process.execPath, ['--test', '--test-reporter=tap', file], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '', firstAt: number | undefined;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      text += chunk;
      if (firstAt === undefined && /ok 1 - case 0/.test(text)) firstAt = Date.now();
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`fixture exited ${code}:\n${text}`));
      if (firstAt === undefined) return reject(new Error(`no "ok 1 - case 0" line:\n${text}`));
      resolve(Date.now() - firstAt);
    });
  });
}

test('with the hook, a synchronous subtest is reported when it ends, not when its suite does', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-report-'));
  try {
    const withHook = join(dir, 'with.test.mjs'), without = join(dir, 'without.test.mjs');
    writeFileSync(withHook, fixture(true));
    writeFileSync(without, fixture(false));
    // Two more 1.5 s subtests follow the first: reported as it ends, its line comes ~3 s before the exit.
    const lead = await leadOfFirstResult(withHook);
    assert.ok(lead > 1500, `the first result came ${lead} ms before the exit`);
    // The control: without the hook every line comes at the end (this is what the hook is for).
    const leadWithout = await leadOfFirstResult(without);
    assert.ok(leadWithout < lead - 1000, `without the hook ${leadWithout} ms, with it ${lead} ms`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every GPU suite imports the hook', () => {
  const suites = join(here, '..', '..', '..', 'test', 'gpu');
  const files = readdirSync(suites).filter((name) => name.endsWith('.test.ts'));
  assert.ok(files.length > 20, `${files.length} suites under ${suites}`);
  const missing = files.filter((name) => !readFileSync(join(suites, name), 'utf8').includes("import './report-as-you-go.js';"));
  assert.deepEqual(missing, [], 'GPU suites without the hook');
});
