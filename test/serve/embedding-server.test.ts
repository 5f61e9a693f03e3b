// The embeddings server driven by the official `openai` client (its default base64 transport and floats) and
// plain fetch, on the CPU backend with a tiny random BERT: vectors equal the encoder's on the same tokens,
// OpenAI's four input forms, `dimensions`, concurrent requests batched together and equal to sequential ones,
// sentence-transformers truncation, OpenAI-shaped errors (400, 404, 405, 413, 429), /v1/models, /health,
// /metrics, graceful shutdown; and `fuseformer serve` picking the embeddings server for a BERT directory.

import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { BertEncoder, padSequences } from '../../src/infer/bert.js';
import { Embedder } from '../../src/infer/embedder.js';
import { EmbeddingServer } from '../../src/serve/embedding-server.js';
import type { EmbeddingServerOptions } from '../../src/serve/embedding-server.js';
import { BERT_TEST_VOCAB, TINY_BERT, writeBertFolder, writeBertTokenizer } from '../infer/bert-folder.js';
import { postTimed, slowRounds } from './timed-clients.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-embedding-server-'));
const dir = join(root, 'bert'), st = join(root, 'st');
const MAIN_JS = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const id = (t: string) => BERT_TEST_VOCAB.indexOf(t);
const TEXTS = ['Hello world!', 'The cat sat on the mat.', 'cats'];
const TOKENS = [
  [2, id('hello'), id('world'), id('!'), 3],
  [2, id('the'), id('cat'), id('sat'), id('on'), id('the'), id('mat'), id('.'), 3],
  [2, id('cat'), id('##s'), 3],
];
let embedder: Embedder, stEmbedder: Embedder;

interface Running { server: EmbeddingServer; client: OpenAI; base: string }
const started: Running[] = [];

async function start(on: Embedder, options: EmbeddingServerOptions = {}): Promise<Running> {
  const server = new EmbeddingServer(on, { modelName: 'tiny-bert', ...options });
  const address = await server.listen(0);
  const base = `http://127.0.0.1:${address.port}`;
  const r = { server, base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }) };
  started.push(r);
  return r;
}

before(() => {
  writeBertFolder(dir, TINY_BERT, 21, { maskedLm: false, stripPrefix: true });
  writeBertTokenizer(dir);
  embedder = Embedder.load(dir, new CpuBackend());
  // sentence-transformers: CLS pooling, Normalize, max_seq_length 6.
  writeBertFolder(st, TINY_BERT, 21, { maskedLm: false, stripPrefix: true });
  writeBertTokenizer(st);
  writeFileSync(join(st, 'modules.json'), JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
    { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' },
  ]));
  mkdirSync(join(st, '1_Pooling'));
  writeFileSync(join(st, '1_Pooling', 'config.json'), JSON.stringify({ word_embedding_dimension: 32, pooling_mode_cls_token: true, pooling_mode_mean_tokens: false }));
  writeFileSync(join(st, 'sentence_bert_config.json'), JSON.stringify({ max_seq_length: 6, do_lower_case: false }));
  stEmbedder = Embedder.load(st, new CpuBackend());
});

after(async () => {
  for (const r of started) await r.server.close();
  embedder.free();
  stEmbedder.free();
  rmSync(root, { recursive: true, force: true });
});

/** The encoder's own vectors for token sequences (one padded batch), mean-pooled as the plain directory is. */
function reference(tokens: number[][], pooling: 'mean' | 'cls' = 'mean', normalize = false, from = dir): Float32Array[] {
  const { encoder } = BertEncoder.load(from, new CpuBackend());
  const batch = padSequences(tokens, 0);
  const vectors = encoder.embeddings(batch.inputIds, batch.attentionMask, { pooling, normalize });
  encoder.free();
  return vectors;
}

function close(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string): void {
  assert.equal(actual.length, expected.length, what);
  for (let h = 0; h < expected.length; h++) assert.ok(Math.abs(actual[h]! - expected[h]!) < 1e-6, `${what} element ${h}: ${actual[h]} vs ${expected[h]}`);
}

test('openai client: base64 (its default) and float vectors equal the encoder\'s; usage counts the tokens', async () => {
  const { client } = await start(embedder);
  const expected = reference(TOKENS);
  const viaBase64 = await client.embeddings.create({ model: 'tiny-bert', input: TEXTS });
  assert.equal(viaBase64.object, 'list');
  assert.equal(viaBase64.model, 'tiny-bert');
  assert.deepEqual(viaBase64.usage, { prompt_tokens: 18, total_tokens: 18 });
  viaBase64.data.forEach((d, i) => { assert.equal(d.index, i); close(d.embedding, expected[i]!, `text ${i} (base64)`); });
  const viaFloat = await client.embeddings.create({ model: 'tiny-bert', input: TEXTS, encoding_format: 'float' });
  viaFloat.data.forEach((d, i) => close(d.embedding, expected[i]!, `text ${i} (float)`));
  // One string, token ids, and arrays of token ids.
  close((await client.embeddings.create({ model: 'tiny-bert', input: TEXTS[1]! })).data[0]!.embedding, expected[1]!, 'one string');
  close((await client.embeddings.create({ model: 'tiny-bert', input: TOKENS[2]! })).data[0]!.embedding, expected[2]!, 'token ids');
  const ids = await client.embeddings.create({ model: 'tiny-bert', input: [TOKENS[0]!, TOKENS[2]!] });
  close(ids.data[1]!.embedding, expected[2]!, 'arrays of token ids');
  // dimensions: the first n values (no renormalisation: this model does not normalise).
  const short = await client.embeddings.create({ model: 'tiny-bert', input: TEXTS[0]!, dimensions: 8 });
  close(short.data[0]!.embedding, expected[0]!.subarray(0, 8), 'dimensions 8');
});

test('concurrent requests are batched together and answered as they would be alone', async () => {
  // Each round takes 30 ms longer than the tiny model needs, so the requests arriving meanwhile queue up.
  const slow = Object.create(embedder) as Embedder;
  slow.embedSequences = (sequences) => { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 30); return embedder.embedSequences(sequences); };
  const { base } = await start(slow);
  const singles = TEXTS.map((_, i) => reference([TOKENS[i]!])[0]!);
  // The 24 clients in another process: in this one, the server's rounds would hold back their requests.
  const script = `const texts = ${JSON.stringify(TEXTS)};
    const answers = await Promise.all(Array.from({ length: 24 }, async (_, k) => (await fetch('${base}/v1/embeddings', { method: 'POST', body: JSON.stringify({ model: 'tiny-bert', input: texts[k % 3] }) })).json()));
    process.stdout.write(JSON.stringify(answers));`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { maxBuffer: 1 << 24 });
  const answers = JSON.parse(stdout) as { data: { embedding: number[] }[] }[];
  answers.forEach((a, k) => close(a.data[0]!.embedding, singles[k % 3]!, `request ${k}`));
  const metrics = await (await fetch(`${base}/metrics`)).text();
  const rounds = Number(/^fuseformer_embedding_rounds_total (\d+)/m.exec(metrics)?.[1]);
  assert.ok(rounds >= 1 && rounds <= 6, `24 concurrent requests in ${rounds} rounds`);
  assert.match(metrics, /^fuseformer_embedding_inputs_total 24$/m);
  assert.match(metrics, /^fuseformer_requests_total\{endpoint="\/v1\/embeddings",status="200"\} 24$/m);
});

test('a sentence-transformers directory: CLS pooling, unit length, texts cut to max_seq_length, dimensions renormalised', async () => {
  const { client, base } = await start(stEmbedder);
  const truncated = [TOKENS[0]!, [...TOKENS[1]!.slice(0, 5), 3], TOKENS[2]!];
  const expected = reference(truncated, 'cls', true, st);
  const answer = await client.embeddings.create({ model: 'tiny-bert', input: TEXTS, encoding_format: 'float' });
  assert.equal(answer.usage.prompt_tokens, 15);
  answer.data.forEach((d, i) => close(d.embedding, expected[i]!, `text ${i}`));
  const short = (await client.embeddings.create({ model: 'tiny-bert', input: TEXTS[0]!, dimensions: 4, encoding_format: 'float' })).data[0]!.embedding;
  const head = Array.from(expected[0]!.subarray(0, 4)), norm = Math.hypot(...head);
  close(short, head.map((x) => x / norm), 'dimensions 4, renormalised');
  const models = await (await fetch(`${base}/v1/models`)).json() as { data: { id: string; max_model_len: number; dimensions: number }[] };
  assert.deepEqual(models.data.map((m) => [m.id, m.max_model_len, m.dimensions]), [['tiny-bert', 6, 32]]);
  assert.match(await (await fetch(`${base}/metrics`)).text(), /^fuseformer_embedding_inputs_truncated_total 1$/m);
});

test('a decoder embedding model (the Qwen3-Embedding-shaped fixture): SentenceTransformer.encode\'s vectors, prompt_name before each text, an unknown prompt a 400', async () => {
  const fixture = join('test', 'fixtures', 'qwen3-embedding');
  const expected = (JSON.parse(readFileSync(join(fixture, 'expected.json'), 'utf8')) as { texts: string[]; cases: { prompt_name: string | null; vectors: number[][] }[] });
  const decoder = Embedder.load(join(fixture, 'model'), new CpuBackend(), { dtype: 'f32' });
  try {
    const { client, base } = await start(decoder);
    for (const c of expected.cases) {
      const body = { model: 'tiny-bert', input: expected.texts, encoding_format: 'float' as const, ...(c.prompt_name ? { prompt_name: c.prompt_name } : {}) };
      const answer = await client.embeddings.create(body as Parameters<typeof client.embeddings.create>[0]);
      answer.data.forEach((d, i) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - c.vectors[i]![h]!) < 2e-6, `${c.prompt_name ?? 'no prompt'} text ${i} element ${h}`)));
    }
    const bad = await fetch(`${base}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: 'whale', prompt_name: 'passage' }) });
    assert.equal(bad.status, 400);
    const error = (await bad.json() as { error: { param: string; message: string } }).error;
    assert.equal(error.param, 'prompt_name');
    assert.match(error.message, /no prompt named 'passage'; the model's prompts are 'document', 'query'/);
    const ids = await fetch(`${base}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: [[5, 6]], prompt_name: 'query' }) });
    assert.equal(ids.status, 400);
    assert.match((await ids.json() as { error: { message: string } }).error.message, /'input' is token ids; a prompt applies to texts only/);
  } finally {
    const running = started.pop()!;
    await running.server.close();
    decoder.free();
  }
});

test('embedSequencesAsync reports each batch as it is read: a packed decoder\'s sequences in their given order, a BERT\'s longest first', async () => {
  const decoder = Embedder.load(join('test', 'fixtures', 'qwen3-embedding', 'model'), new CpuBackend(), { dtype: 'f32', batchSize: 2 });
  const bert = Embedder.load(dir, new CpuBackend(), { batchSize: 2 });
  try {
    for (const [name, on] of [['decoder', decoder], ['BERT', bert]] as const) {
      const sequences = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14], [15, 16, 17, 18], [19, 20]].map((ids) => (on === bert ? [2, ...ids, 3] : ids));
      const reported: number[][] = [];
      const vectors = await on.embedSequencesAsync(sequences, (indices, sofar) => {
        reported.push([...indices].sort((a, b) => a - b));
        indices.forEach((i) => assert.ok(sofar[i] instanceof Float32Array, `${name}: sequence ${i} embedded when reported`));
      });
      assert.deepEqual(reported.flat().sort((a, b) => a - b), [0, 1, 2, 3, 4], `${name}: every sequence reported once`);
      if (on === decoder) assert.deepEqual(reported, [[0, 1], [2, 3], [4]]);
      else assert.deepEqual(reported[0], [1, 3], 'the two longest first');
      const alone = on.embedSequences(sequences);
      vectors.forEach((v, i) => v.forEach((x, h) => assert.ok(Math.abs(x - alone[i]![h]!) < 1e-6, `${name}: sequence ${i} element ${h}`)));
    }
  } finally {
    decoder.free();
    bert.free();
  }
});

test('a round answers each request as soon as its own inputs are embedded, not when the round ends', async () => {
  // Round 2 (the later two requests) reports the first of them (its two inputs), then takes 400 ms more for the rest.
  const slow = Object.create(embedder) as Embedder;
  slow.embedSequencesAsync = slowRounds((sequences) => embedder.embedSequences(sequences));
  const { server, base } = await start(slow);
  try {
    const requests = [[TEXTS[0]], [TEXTS[0], TEXTS[1]], [TEXTS[1], TEXTS[2]]].map((input) => ({ input, encoding_format: 'float' }));
    const answers = await postTimed<{ data: { embedding: number[] }[] }>(`${base}/v1/embeddings`, requests, 100);
    assert.equal(Number(/^fuseformer_embedding_rounds_total (\d+)/m.exec(server.metricsText())?.[1]), 2, 'the later two requests in one round');
    assert.ok(answers[2]!.ms - answers[1]!.ms > 250, `round 2's first request answered at ${answers[1]!.ms.toFixed(0)} ms, its second at ${answers[2]!.ms.toFixed(0)} ms`);
    requests.forEach((r, i) => {
      const alone = embedder.embed(r.input as string[]).vectors;
      answers[i]!.answer.data.forEach((d, k) => d.embedding.forEach((x, h) => assert.ok(Math.abs(x - alone[k]![h]!) < 1e-6, `request ${i} input ${k}`)));
    });
  } finally {
    started.splice(started.findIndex((x) => x.server === server), 1);
    await server.close();
  }
});

test('bad requests get OpenAI-shaped errors naming the field', async () => {
  const { client, base } = await start(embedder, { maxBodyBytes: 4096 });
  const post = async (body: unknown, path = '/v1/embeddings') => {
    const r = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    return { status: r.status, error: ((await r.json()) as { error: { message: string; param: string | null; code: string | null } }).error };
  };
  const cases: [unknown, number, RegExp, string | null][] = [
    [{ input: '' }, 400, /'input' is an empty string/, 'input'],
    [{ input: ['a', ''] }, 400, /'input\[1\]' is an empty string/, 'input'],
    [{ input: [] }, 400, /'input' is an array; expected a string/, 'input'],
    [{ input: ['ok', 5] }, 400, /'input\[1\]' is number 5; expected a string or a non-empty array of token ids/, 'input'],
    [{ input: [2, 99999] }, 400, /'input' holds token id 99999; the vocabulary has 99 ids/, 'input'],
    [{ input: 'hello '.repeat(39) }, 400, /'input' has 41 tokens; the model takes at most 40/, 'input'],
    [{ input: 'hi', encoding_format: 'int8' }, 400, /'encoding_format' is the string "int8"; expected "float" or "base64"/, 'encoding_format'],
    [{ input: 'hi', dimensions: 64 }, 400, /dimensions must be an integer in \[1, 32\]/, 'dimensions'],
    [{ input: 'hi', model: 'other' }, 404, /the model 'other' does not exist; this server has 'tiny-bert'/, 'model'],
    [{ input: Array.from({ length: 2049 }, () => 'a') }, 413, /exceeds the limit of 4096 bytes|has \d+ bytes; the limit is 4096/, null],
    ['{not json', 400, /not valid JSON/, null],
  ];
  for (const [body, status, message, param] of cases) {
    const r = await post(body);
    assert.equal(r.status, status, JSON.stringify(body).slice(0, 80));
    assert.match(r.error.message, message);
    assert.equal(r.error.param, param, JSON.stringify(body).slice(0, 80));
  }
  assert.equal((await post({ input: 'hello '.repeat(39) })).error.code, 'context_length_exceeded');
  const wrongMethod = await fetch(`${base}/v1/embeddings`);
  assert.equal(wrongMethod.status, 405);
  assert.equal(wrongMethod.headers.get('allow'), 'POST');
  assert.equal((await fetch(`${base}/v1/completions`, { method: 'POST', body: '{}' })).status, 404);
  await assert.rejects(client.embeddings.create({ model: 'tiny-bert', input: '' }), (e: unknown) => e instanceof OpenAI.BadRequestError);
  // More inputs than OpenAI allows a request, in a body the limit lets through.
  const big = await start(embedder, { maxBodyBytes: 1 << 20 });
  const r = await fetch(`${big.base}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: Array.from({ length: 2049 }, () => 'a') }) });
  assert.equal(r.status, 400);
  assert.match(((await r.json()) as { error: { message: string } }).error.message, /'input' holds 2049 inputs; at most 2048 a request/);
});

test('a full queue answers 429; shutdown answers 503 and /health says so', async () => {
  const { client, server, base } = await start(embedder, { maxQueuedInputs: 2 });
  await assert.rejects(client.embeddings.create({ model: 'tiny-bert', input: TEXTS }), (e: unknown) => e instanceof OpenAI.RateLimitError && /2 inputs queued|0 inputs queued \(limit 2\)/.test((e as Error).message));
  assert.equal((await client.embeddings.create({ model: 'tiny-bert', input: TEXTS.slice(0, 2) })).data.length, 2);
  const closing = server.close();
  const health = await fetch(`${base}/health`).catch(() => undefined);
  if (health) assert.equal(health.status, 503);
  await closing;
  await assert.rejects(fetch(`${base}/health`));
});

test('fuseformer serve --model BERT_DIR serves /v1/embeddings; generative-model options are refused by name', async () => {
  const refused = spawnSync(process.execPath, [MAIN_JS, 'serve', '--model', dir, '--backend', 'cpu', '--draft', dir], { encoding: 'utf8' });
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /--draft: '.*bert' is an embedding model, served as \/v1\/embeddings; the option is for generative models/);
  const child = spawn(process.execPath, [MAIN_JS, 'serve', '--model', dir, '--backend', 'cpu', '--port', '0', '--served-name', 'b'], { stdio: ['ignore', 'ignore', 'pipe'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      let err = '';
      child.stderr.on('data', (c: Buffer) => {
        err += c.toString();
        const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
        if (m) resolve(Number(m[1]));
      });
      child.on('exit', (code) => reject(new Error(`serve exited with ${code}: ${err}`)));
    });
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
    const answer = await client.embeddings.create({ model: 'b', input: TEXTS[0]! });
    close(answer.data[0]!.embedding, reference([TOKENS[0]!])[0]!, 'over the CLI');
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
  }
});
