// `--json` and `--json-schema` on `fuseformer generate` and `fuseformer chat` (CPU, a tiny random Llama whose
// whitespace quietened: hf-folder.ts quietWhitespace): the answer on stdout parses and
// fits the schema, from a file or given inline, greedy and sampled; every chat answer too; the options that cannot
// go with it, a missing file and a keyword the grammar cannot enforce are named.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { writeQuietLlamaFolder } from '../infer/hf-folder.js';

const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'fuseformer-json-cli-'));
const dir = join(root, 'tiny-llama');
const TEMPLATE = '{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}';
const SCHEMA = { type: 'object', properties: { title: { type: 'string', maxLength: 10 }, year: { type: 'integer', minimum: 1800, maximum: 2100 }, done: { type: 'boolean' } }, required: ['title', 'year', 'done'], additionalProperties: false };

before(() => {
  writeQuietLlamaFolder(dir, 400, 6, TEMPLATE);
  writeFileSync(join(root, 'book.json'), JSON.stringify(SCHEMA));
});
after(() => rmSync(root, { recursive: true, force: true }));

function cli(args: string[], input?: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [main, ...args, '--backend', 'cpu'], { encoding: 'utf8', ...(input !== undefined ? { input } : {}) });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function checkBook(text: string): void {
  const value = JSON.parse(text) as { title: string; year: number; done: boolean };
  assert.deepEqual(Object.keys(value), ['title', 'year', 'done'], text);
  assert.ok([...value.title].length <= 10 && Number.isInteger(value.year) && value.year >= 1800 && value.year <= 2100 && typeof value.done === 'boolean', text);
}

test('generate --json-schema (a file, or inline) and --json: the answer after the prompt is JSON of the schema', () => {
  const prompt = 'A book:';
  for (const [schema, extra] of [[join(root, 'book.json'), []], [JSON.stringify(SCHEMA), ['--temperature', '1', '--seed', '4']]] as const) {
    const r = cli(['generate', '--model', dir, '--prompt', prompt, '--json-schema', schema, '--max-tokens', '300', ...extra]);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(r.stdout.startsWith(prompt), r.stdout);
    checkBook(r.stdout.slice(prompt.length).trimEnd());
  }
  const any = cli(['generate', '--model', dir, '--prompt', prompt, '--json', '--max-tokens', '300', '--temperature', '0.8', '--seed', '1']);
  assert.equal(any.status, 0, any.stderr);
  const text = any.stdout.slice(prompt.length).trimEnd();
  assert.ok(text.trimStart().startsWith('{'), text);
});

test('chat --json-schema: every answer of the conversation is JSON of the schema', () => {
  const r = cli(['chat', '--model', dir, '--json-schema', join(root, 'book.json'), '--max-tokens', '120'], 'a book\nanother one\n');
  assert.equal(r.status, 0, r.stderr);
  // Answers may span lines (pretty-printed JSON): split where a prefix parses as one value.
  const answers: string[] = [];
  let rest = r.stdout;
  while (rest.trim() !== '') {
    const end = [...rest.matchAll(/}\n/g)].map((m) => m.index + 1).find((i) => { try { JSON.parse(rest.slice(0, i)); return true; } catch { return false; } });
    assert.ok(end !== undefined, `no JSON value at the start of ${JSON.stringify(rest)}`);
    answers.push(rest.slice(0, end));
    rest = rest.slice(end + 1);
  }
  assert.equal(answers.length, 2, r.stdout);
  answers.forEach(checkBook);
});

test('what cannot go with a constrained answer, and schemas it cannot hold to, are named', () => {
  const refused = (args: string[], pattern: RegExp) => {
    const r = cli(['generate', '--model', dir, '--prompt', 'x', ...args]);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, pattern);
  };
  refused(['--json', '--json-schema', '{}'], /--json and --json-schema: give one/);
  refused(['--json', '--stop', 'x'], /--json with --stop/);
  refused(['--json-schema', join(root, 'missing.json')], /--json-schema: '.*missing.json' is neither a file nor a JSON object/);
  refused(['--json-schema', '{"type": "string", "pattern": "a+"}'], /--json-schema: the schema given at #\/pattern: the keyword 'pattern' is not supported/);
  refused(['--json-schema', '{"type": '], /--json-schema: the schema given is not JSON/);
});
