// `fuseformer embed`: the texts tokenized with [CLS] … [SEP], encoded in right-padded batches, printed as
// one JSON object (OpenAI's embeddings shape) whose vectors equal BertEncoder.embeddings on the same tokens;
// bad options and texts are clear errors.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runEmbed } from '../../src/cli/embed.js';
import { ArgumentError } from '../../src/errors.js';
import { BertEncoder, padSequences } from '../../src/infer/bert.js';
import { BERT_TEST_VOCAB, TINY_BERT, writeBertFolder, writeBertTokenizer } from '../infer/bert-folder.js';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-embed-'));
after(() => rmSync(root, { recursive: true, force: true }));
const dir = join(root, 'bert');
writeBertFolder(dir, TINY_BERT, 21, { maskedLm: false, stripPrefix: true });
writeBertTokenizer(dir);

/** Runs the command with its JSON output collected. */
async function captured(argv: string[]): Promise<{ code: number; out: string }> {
  let out = '';
  const code = await runEmbed(argv, { out: (text) => { out += text; }, log: () => {} });
  return { code, out };
}

interface Response { object: string; data: { object: string; index: number; embedding: number[] }[]; model: string; usage: { prompt_tokens: number; total_tokens: number } }

const TEXTS = ['Hello world!', 'The cat sat on the mat.', 'cats'];
const id = (t: string) => BERT_TEST_VOCAB.indexOf(t);
const TOKENS = [
  [2, id('hello'), id('world'), id('!'), 3],
  [2, id('the'), id('cat'), id('sat'), id('on'), id('the'), id('mat'), id('.'), 3],
  [2, id('cat'), id('##s'), 3],
];

for (const [pooling, normalize] of [['mean', true], ['cls', false]] as const) {
  test(`embed --pooling ${pooling}${normalize ? ' --normalize' : ''} prints the encoder's vectors, batch by batch`, async () => {
    const { code, out } = await captured(['--model', dir, ...TEXTS.flatMap((t) => ['--text', t]), '--pooling', pooling, ...(normalize ? ['--normalize'] : []), '--backend', 'cpu', '--batch-size', '2']);
    assert.equal(code, 0);
    const response = JSON.parse(out) as Response;
    assert.equal(response.object, 'list');
    assert.deepEqual(response.usage, { prompt_tokens: 18, total_tokens: 18 });
    assert.deepEqual(response.data.map((d) => [d.object, d.index, d.embedding.length]), [['embedding', 0, 32], ['embedding', 1, 32], ['embedding', 2, 32]]);
    const { encoder } = BertEncoder.load(dir, new CpuBackend());
    const batch = padSequences(TOKENS, 0);
    const expected = encoder.embeddings(batch.inputIds, batch.attentionMask, { pooling, normalize });
    encoder.free();
    response.data.forEach((d, i) => {
      d.embedding.forEach((x, h) => assert.ok(Math.abs(x - expected[i]![h]!) < 1e-6, `text ${i} element ${h}: ${x} vs ${expected[i]![h]}`));
      if (normalize) assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-6);
    });
  });
}

test('embed refuses missing texts, bad options, over-long texts and non-BERT directories', async () => {
  const rejects = (argv: string[], pattern: RegExp) => assert.rejects(captured(argv), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  await rejects(['--model', dir, '--backend', 'cpu'], /--text TEXT is required/);
  await rejects(['--text', 'hi'], /--model DIR is required/);
  await rejects(['--model', dir, '--text', 'hi', '--pooling', 'max', '--backend', 'cpu'], /--pooling must be mean or cls, got 'max'/);
  await rejects(['--model', dir, '--text', 'hi', '--batch-size', '0', '--backend', 'cpu'], /--batch-size must be a positive integer/);
  await rejects(['--model', dir, '--text', 'hi', '--dtype', 'f64', '--backend', 'cpu'], /--dtype must be bf16, f16 or f32/);
  await rejects(['--model', dir, '--text', 'hello '.repeat(39), '--backend', 'cpu'], /--text 1 has 41 tokens; the model takes at most 40/);
  const gpt2 = join(root, 'gpt2');
  writeModelFolder(gpt2, 'gpt2', TINY_GPT2, 1);
  await rejects(['--model', gpt2, '--text', 'hi', '--backend', 'cpu'], /a gpt2 model; BERT encoding reads BertModel/);
});

test('fuseformer embed --help lists the options', () => {
  const main = join(fileURLToPath(new URL('.', import.meta.url)), '../../src/cli/main.js');
  const help = execFileSync(process.execPath, [main, 'embed', '--help'], { encoding: 'utf8' });
  assert.match(help, /^usage: fuseformer embed --model DIR --text TEXT/);
  assert.match(help, /--pooling mean\|cls/);
  assert.match(execFileSync(process.execPath, [main, '--help'], { encoding: 'utf8' }), /embed --model DIR --text TEXT +sentence embeddings/);
});
