// Command-line inputs a second audit found mishandled: info taking flags it ignored, serve --host "" (every
// interface), a short-context draft ending a generation early, speculative K quietly lowered by the server,
// a draft directory's load error not naming --draft.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDraftDirectory } from '../../src/cli/model-directory.js';
import { generate } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { BERT_PRESETS, bertConfigToJson } from '../../src/models/bert.js';
import { writeFileSync } from 'node:fs';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'fuseformer-cli-inputs-'));
after(() => rmSync(root, { recursive: true, force: true }));
const cli = (...args: string[]) => spawnSync(process.execPath, [main, ...args], { encoding: 'utf8', env: { ...process.env, FUSEFORMER_BACKEND: 'cpu' } });

test('info refuses the flags it does not read; commands refuse stray words', () => {
  for (const [args, pattern] of [[['info', '--backend', 'cuda'], /--backend is not an option of info/], [['info', 'extra'], /info takes no arguments, got 'extra'/], [['frobnicate'], /unknown command 'frobnicate'/]] as const) {
    const r = cli(...args);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, pattern);
    assert.ok(!r.stderr.includes('    at '), 'no stack trace');
  }
});

test('serve --host "" is refused (it would listen on every interface)', () => {
  const dir = join(root, 'gpt2');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 1);
  const r = cli('serve', '--model', dir, '--host', '', '--port', '0');
  assert.equal(r.status, 1);
  assert.match(r.stderr, /--host is empty/);
});

test('a draft with fewer positions than the target is refused when the generation needs them; the server keeps asked K or refuses it', async () => {
  const backend = new CpuBackend();
  const targetDir = join(root, 'target'), draftDir = join(root, 'draft');
  writeModelFolder(targetDir, 'gpt2', { ...TINY_GPT2, maxPositions: 64 }, 1);
  writeModelFolder(draftDir, 'gpt2', { ...TINY_GPT2, maxPositions: 16, layers: 1 }, 2);
  const target = loadDecoderModel(targetDir, backend, { dtype: 'f32' }).model, draft = loadDecoderModel(draftDir, backend, { dtype: 'f32' }).model;
  try {
    const run = async (maxNewTokens: number) => { const out: number[] = []; for await (const t of generate(target, [1, 2, 3], { maxNewTokens, speculative: { draft } })) out.push(t); return out; };
    assert.equal((await run(10)).length, 10, 'within the draft\'s positions');
    await assert.rejects(run(30), /the draft model .* takes 16 positions, the target 64; a prompt of 3 tokens plus 30 new ones needs 33/);
    const engine = (speculative: Record<string, number>) => new ServingEngine(target, { maxBatchTokens: 8, maxLen: 16, speculative: { draft, ...speculative } });
    assert.throws(() => engine({ draftTokens: 9 }), /K up to 9 needs K \+ 1 = 10 positions in a step; maxBatchTokens is 8/);
    assert.throws(() => engine({ draftTokens: 4, maxDraftTokens: 3 }), /maxDraftTokens 3 is below draftTokens 4/);
    const defaults = engine({});
    assert.equal(defaults.maxDraftTokens, 7, 'the default maximum bends to the batch');
    defaults.dispose();
  } finally {
    target.free();
    draft.free();
  }
});

test('a --draft directory that is not a decoder is named as the --draft', () => {
  const dir = join(root, 'bert');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 1);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(bertConfigToJson(BERT_PRESETS['bert-tiny']!)));
  assert.throws(() => loadDraftDirectory(dir, new CpuBackend()), /^ArgumentError: --draft '.*bert': .*this is a bert model/);
});
