// `fuseformer embed`: the texts tokenized with [CLS] … [SEP], encoded in right-padded batches, printed as
// one JSON object (OpenAI's embeddings shape) whose vectors equal BertEncoder.embeddings on the same tokens;
// a sentence-transformers directory's modules set the defaults; bad options and texts are clear errors.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

test('embed refuses missing texts, bad options, over-long texts; embeds a decoder directory', async () => {
  const rejects = (argv: string[], pattern: RegExp) => assert.rejects(captured(argv), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  await rejects(['--model', dir, '--backend', 'cpu'], /--text TEXT is required/);
  await rejects(['--text', 'hi'], /--model DIR is required/);
  await rejects(['--model', dir, '--text', 'hi', '--pooling', 'max', '--backend', 'cpu'], /--pooling must be mean, cls, last, got 'max'/);
  await rejects(['--model', dir, '--text', 'hi', '--batch-size', '0', '--backend', 'cpu'], /--batch-size must be a positive integer/);
  await rejects(['--model', dir, '--text', 'hi', '--dtype', 'f64', '--backend', 'cpu'], /--dtype must be bf16, f16 or f32/);
  await rejects(['--model', dir, '--text', 'hello '.repeat(39), '--backend', 'cpu'], /--text 1 has 41 tokens; the model takes at most 40/);
  const gpt2 = join(root, 'gpt2');
  writeModelFolder(gpt2, 'gpt2', TINY_GPT2, 1);
  // A decoder directory embeds too (last-token pooling of its final norm's rows).
  const fromDecoder = JSON.parse((await captured(['--model', gpt2, '--text', 'hi', '--backend', 'cpu'])).out) as Response;
  assert.equal(fromDecoder.data[0]!.embedding.length, TINY_GPT2.hidden);
});

test('a sentence-transformers directory sets the defaults: its pooling, Normalize, max_seq_length truncation', async () => {
  const st = join(root, 'st');
  writeBertFolder(st, TINY_BERT, 21, { maskedLm: false, stripPrefix: true });
  writeBertTokenizer(st);
  const modules = (...extra: object[]) => JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' }, ...extra]);
  writeFileSync(join(st, 'modules.json'), modules({ idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' }));
  mkdirSync(join(st, '1_Pooling'));
  const poolingConfig = (modes: Record<string, boolean>) => writeFileSync(join(st, '1_Pooling', 'config.json'), JSON.stringify({ word_embedding_dimension: 32, pooling_mode_cls_token: false, pooling_mode_mean_tokens: false, pooling_mode_max_tokens: false, ...modes }));
  poolingConfig({ pooling_mode_cls_token: true });
  writeFileSync(join(st, 'sentence_bert_config.json'), JSON.stringify({ max_seq_length: 6, do_lower_case: false }));
  const logs: string[] = [];
  let out = '';
  assert.equal(await runEmbed(['--model', st, ...TEXTS.flatMap((t) => ['--text', t]), '--backend', 'cpu'], { out: (t) => { out += t; }, log: (t) => { logs.push(t); } }), 0);
  const response = JSON.parse(out) as Response;
  // The second text (9 tokens) is cut to 6: [CLS] the cat sat on [SEP].
  const truncated = [TOKENS[0]!, [...TOKENS[1]!.slice(0, 5), 3], TOKENS[2]!];
  assert.equal(response.usage.prompt_tokens, 15);
  assert.match(logs.join(''), /note: 1 text\(s\) truncated to 6 tokens \(sentence_bert_config\.json max_seq_length/);
  assert.match(logs.join(''), /cls pooling, normalised \(sentence-transformers modules\.json\)/);
  const { encoder } = BertEncoder.load(st, new CpuBackend());
  const batch = padSequences(truncated, 0);
  const expected = encoder.embeddings(batch.inputIds, batch.attentionMask, { pooling: 'cls', normalize: true });
  const plain = encoder.embeddings(batch.inputIds, batch.attentionMask, { pooling: 'mean', normalize: false });
  encoder.free();
  response.data.forEach((d, i) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - expected[i]![h]!) < 1e-6, `text ${i} element ${h}`)));
  // The flags still override the directory.
  const overridden = JSON.parse((await captured(['--model', st, ...TEXTS.flatMap((t) => ['--text', t]), '--pooling', 'mean', '--no-normalize', '--backend', 'cpu'])).out) as Response;
  overridden.data.forEach((d, i) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - plain[i]![h]!) < 1e-6, `text ${i} element ${h}`)));

  const rejects = (pattern: RegExp) => assert.rejects(captured(['--model', st, '--text', 'hi', '--backend', 'cpu']), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  poolingConfig({ pooling_mode_max_tokens: true });
  await rejects(/1_Pooling\/config\.json: pooling_mode_max_tokens is not implemented \(fuseformer embed pools by mean, CLS or last token\)/);
  poolingConfig({ pooling_mode_mean_tokens: true, pooling_mode_cls_token: true });
  await rejects(/pooling modes pooling_mode_cls_token, pooling_mode_mean_tokens are on together/);
  poolingConfig({ pooling_mode_mean_tokens: true });
  writeFileSync(join(st, 'modules.json'), modules({ idx: 2, name: '2', path: '2_LayerNorm', type: 'sentence_transformers.models.LayerNorm' }));
  await rejects(/modules\.json: module 2 is sentence_transformers\.models\.LayerNorm \(2_LayerNorm\), which fuseformer embed does not run/);
  writeFileSync(join(st, 'modules.json'), '{"not": "a list"}');
  await rejects(/modules\.json: expected a list of modules, got {"not":"a list"}/);
  await assert.rejects(captured(['--model', dir, '--text', 'hi', '--normalize', '--no-normalize', '--backend', 'cpu']), /--normalize and --no-normalize: give one/);
});

test('fuseformer embed --help lists the options', () => {
  const main = join(fileURLToPath(new URL('.', import.meta.url)), '../../src/cli/main.js');
  const help = execFileSync(process.execPath, [main, 'embed', '--help'], { encoding: 'utf8' });
  assert.match(help, /^usage: fuseformer embed --model DIR --text TEXT/);
  assert.match(help, /--pooling mean\|cls/);
  assert.match(execFileSync(process.execPath, [main, '--help'], { encoding: 'utf8' }), /embed --model DIR --text TEXT +sentence embeddings/);
});

test('embed reads a RoBERTa directory (test/fixtures/roberta): transformers\' mean-pooled vectors; too long a text names the 64-token limit', async () => {
  const fixtures = 'test/fixtures/roberta';
  const expected = JSON.parse(readFileSync(join(fixtures, 'outputs.json'), 'utf8')) as { roberta: { texts: string[]; text_ids: number[][]; embeddings: number[][] } };
  const { texts, text_ids: ids, embeddings } = expected.roberta;
  const { code, out } = await captured(['--model', join(fixtures, 'roberta'), ...texts.flatMap((t) => ['--text', t]), '--normalize', '--backend', 'cpu', '--dtype', 'f32']);
  assert.equal(code, 0);
  const response = JSON.parse(out) as Response;
  assert.equal(response.usage.prompt_tokens, ids.reduce((n, s) => n + s.length, 0));
  response.data.forEach((d, i) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - embeddings[i]![h]!) < 1e-5, `text ${i} element ${h}: ${x} vs ${embeddings[i]![h]}`)));
  await assert.rejects(captured(['--model', join(fixtures, 'roberta'), '--text', 'whale '.repeat(70), '--backend', 'cpu']), /--text 1 has \d+ tokens; the model takes at most 64/);
});

test('embed --input FILE: one JSON line a line of the file, equal to --text\'s vectors; --output is written whole; errors name the line', async () => {
  const lines = ['Hello world!', 'The cat sat on the mat.', '', 'cats'];
  const input = join(root, 'lines.txt');
  writeFileSync(input, `${lines.join('\n')}\n`);
  const byText = JSON.parse((await captured(['--model', dir, ...lines.flatMap((t) => ['--text', t]), '--backend', 'cpu'])).out) as Response;
  const { code, out } = await captured(['--model', dir, '--input', input, '--backend', 'cpu', '--batch-size', '3']);
  assert.equal(code, 0);
  const rows = out.trim().split('\n').map((l) => JSON.parse(l) as { index: number; embedding: number[] });
  assert.deepEqual(rows.map((r) => r.index), [0, 1, 2, 3]);
  rows.forEach((r, i) => assert.deepEqual(r.embedding, byText.data[i]!.embedding));
  const file = join(root, 'vectors.jsonl');
  const written = await captured(['--model', dir, '--input', input, '--output', file, '--backend', 'cpu']);
  assert.equal(written.out, '');
  assert.equal(readFileSync(file, 'utf8'), out);
  const rejects = (argv: string[], pattern: RegExp) => assert.rejects(captured(argv), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  await rejects(['--model', dir, '--input', input, '--text', 'x', '--backend', 'cpu'], /--text and --input: give one/);
  await rejects(['--model', dir, '--text', 'x', '--output', file, '--backend', 'cpu'], /--output FILE goes with --input FILE/);
  await rejects(['--model', dir, '--input', join(root, 'missing.txt'), '--backend', 'cpu'], /--input: cannot read/);
  await rejects(['--model', dir, '--input', input, '--output', join(root, 'no-such-dir', 'v.jsonl'), '--backend', 'cpu'], /--output: the directory of .* does not exist/);
  const long = join(root, 'long.txt');
  writeFileSync(long, `short\n${'hello '.repeat(39)}\n`);
  // A failed run leaves the earlier output as it was.
  await rejects(['--model', dir, '--input', long, '--output', file, '--backend', 'cpu'], /--input .*long\.txt line 2 has 41 tokens; the model takes at most 40/);
  assert.equal(readFileSync(file, 'utf8'), out);
});

test('embed a Qwen3-Embedding-shaped directory: SentenceTransformer\'s vectors with --prompt-name query; --dimensions keeps the first values, renormalised', async () => {
  const fixture = join('test', 'fixtures', 'qwen3-embedding');
  const expected = JSON.parse(readFileSync(join(fixture, 'expected.json'), 'utf8')) as { texts: string[]; cases: { prompt_name: string | null; vectors: number[][] }[] };
  const query = expected.cases.find((c) => c.prompt_name === 'query')!;
  const args = ['--model', join(fixture, 'model'), ...expected.texts.flatMap((t) => ['--text', t]), '--backend', 'cpu', '--dtype', 'f32'];
  const full = JSON.parse((await captured([...args, '--prompt-name', 'query'])).out) as Response;
  full.data.forEach((d, i) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - query.vectors[i]![h]!) < 2e-6, `text ${i} element ${h}`)));
  const short = JSON.parse((await captured([...args, '--prompt-name', 'query', '--dimensions', '8'])).out) as Response;
  short.data.forEach((d, i) => {
    const head = query.vectors[i]!.slice(0, 8), norm = Math.hypot(...head);
    d.embedding.forEach((x, h) => assert.ok(Math.abs(x - head[h]! / norm) < 2e-6, `text ${i} element ${h} of 8`));
  });
  const rejects = (extra: string[], pattern: RegExp) => assert.rejects(captured([...args, ...extra]), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  await rejects(['--dimensions', '64'], /--dimensions must be an integer in \[1, 32\]/);
  await rejects(['--dimensions', 'x'], /--dimensions must be a positive integer, got 'x'/);
  await rejects(['--prompt-name', 'passage'], /no prompt named 'passage'/);
  await rejects(['--prompt-name', 'query', '--prompt', 'Q:'], /--prompt and --prompt-name: give one/);
  await rejects(['--max-pass-tokens', '0'], /--max-pass-tokens must be a positive integer, got '0'/);
  await rejects(['--max-shared-prefix', 'x'], /--max-shared-prefix must be a non-negative integer, got 'x'/);
  const whole = JSON.parse((await captured([...args, '--prompt-name', 'query', '--max-shared-prefix', '0'])).out) as Response;
  whole.data.forEach((d, i) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - query.vectors[i]![h]!) < 2e-6, `--max-shared-prefix 0: text ${i} element ${h}`)));
  // A pass of 8 tokens bounds the inputs too: the texts are cut to 8 (sentence-transformers' truncation).
  const small = JSON.parse((await captured([...args, '--max-pass-tokens', '8'])).out) as Response;
  assert.equal(small.usage.prompt_tokens, 8 + 8 + 4 + 2);
  await assert.rejects(captured(['--model', dir, '--text', 'hi', '--backend', 'cpu', '--max-pass-tokens', '64']), /maxPassTokens applies to decoder models/);
  await assert.rejects(captured(['--model', dir, '--text', 'hi', '--backend', 'cpu', '--max-shared-prefix', '64']), /maxSharedPrefix applies to decoder models/);
});
