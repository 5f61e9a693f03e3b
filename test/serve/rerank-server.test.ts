// The rerank server on the CPU backend: POST /v1/rerank (and /rerank) answers with CrossEncoder's scores best
// first (test/fixtures/cross-encoder), top_n and return_documents, {"text"} documents; a decoder reranker's
// prompt_name (test/fixtures/qwen3-reranker); /v1/models, /health, /metrics; field errors named; a full queue (429);
// shutdown, with what is still queued past its timeout refused (503).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { isCrossEncoderDirectory } from '../../src/cli/model-directory.js';
import { Reranker } from '../../src/infer/reranker.js';
import { RerankServer } from '../../src/serve/rerank-server.js';
import { postTimed, slowRounds } from './timed-clients.js';

const FIXTURE = join('test', 'fixtures', 'cross-encoder');
const DECODER = join('test', 'fixtures', 'qwen3-reranker');
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as { query: string; documents: string[]; models: Record<string, Record<string, number[]>> };
const scores = expected.models['bert']!['62']!;
let server: RerankServer, reranker: Reranker, url: string;

before(async () => {
  reranker = Reranker.load(join(FIXTURE, 'bert'), new CpuBackend(), { dtype: 'f32', maxTokens: 62 });
  server = new RerankServer(reranker, { modelName: 'tiny-reranker', maxDocuments: 8 });
  const address = await server.listen(0);
  url = `http://127.0.0.1:${address.port}`;
});
after(() => reranker.free());

const post = async (path: string, body: unknown) => {
  const r = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() as Record<string, unknown> };
};

interface Ranked { index: number; relevance_score: number; document?: { text: string } }

test('reranker directories are told apart from embedding and generative ones', () => {
  assert.equal(isCrossEncoderDirectory(join(FIXTURE, 'bert')), true);
  assert.equal(isCrossEncoderDirectory(join(FIXTURE, 'xlm-roberta')), true);
  assert.equal(isCrossEncoderDirectory(join(DECODER, 'causal')), true, 'a CrossEncoder over a causal LM (modules.json)');
  assert.equal(isCrossEncoderDirectory(join(DECODER, 'seq-cls')), true, 'Qwen3ForSequenceClassification');
  assert.equal(isCrossEncoderDirectory(join('test', 'fixtures', 'roberta', 'roberta')), false);
  assert.equal(isCrossEncoderDirectory(join('test', 'fixtures', 'qwen3-embedding', 'model')), false, 'a SentenceTransformer');
  assert.equal(isCrossEncoderDirectory(join('test', 'fixtures', 'qwen3', 'model')), false, 'a causal LM without sentence-transformers files');
});

test('a decoder reranker served: prompt_name picks its instruction; an unknown one is a 400 naming the field', async () => {
  const expected = JSON.parse(readFileSync(join(DECODER, 'expected.json'), 'utf8')) as { query: string; documents: string[]; causal: { cases: { prompt_name: string | null; scores: number[] }[] } };
  const decoder = Reranker.load(join(DECODER, 'causal'), new CpuBackend(), { dtype: 'f32' });
  const served = new RerankServer(decoder, { modelName: 'qwen3-reranker' });
  const address = await served.listen(0);
  try {
    for (const c of expected.causal.cases) {
      const r = await fetch(`http://127.0.0.1:${address.port}/v1/rerank`, { method: 'POST', body: JSON.stringify({ query: expected.query, documents: expected.documents, ...(c.prompt_name ? { prompt_name: c.prompt_name } : {}) }) });
      assert.equal(r.status, 200);
      const results = (await r.json() as { results: Ranked[] }).results;
      results.forEach((x) => assert.ok(Math.abs(x.relevance_score - c.scores[x.index]!) < 1e-6, `${c.prompt_name}: document ${x.index}`));
    }
    const bad = await fetch(`http://127.0.0.1:${address.port}/v1/rerank`, { method: 'POST', body: JSON.stringify({ query: 'q', documents: ['d'], prompt_name: 'nope' }) });
    assert.equal(bad.status, 400);
    const error = (await bad.json() as { error: { param: string; message: string } }).error;
    assert.equal(error.param, 'prompt_name');
    assert.match(error.message, /no prompt named 'nope'; the model's prompts are 'web', 'whales'/);
    const wrongType = await fetch(`http://127.0.0.1:${address.port}/v1/rerank`, { method: 'POST', body: JSON.stringify({ query: 'q', documents: ['d'], prompt_name: 3 }) });
    assert.equal(wrongType.status, 400);
    assert.equal((await wrongType.json() as { error: { param: string } }).error.param, 'prompt_name');
    // The instruction and query before each document were computed once a pass: /metrics counts the tokens not computed.
    const saved = Number(/^fuseformer_shared_prefix_tokens_total (\d+)$/m.exec(await (await fetch(`http://127.0.0.1:${address.port}/metrics`)).text())?.[1]);
    assert.equal(saved, decoder.scorer.prefixStats!.savedTokens);
    assert.ok(saved > 0, 'a shared prefix was counted');
  } finally {
    await served.close();
    decoder.free();
  }
});

test('POST /v1/rerank: CrossEncoder\'s scores, best first; top_n, return_documents, {"text"} documents; /rerank too', async () => {
  const { status, json } = await post('/v1/rerank', { model: 'tiny-reranker', query: expected.query, documents: expected.documents, top_n: 2, return_documents: true });
  assert.equal(status, 200);
  const results = json['results'] as Ranked[];
  const best = scores.map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s).slice(0, 2);
  assert.deepEqual(results.map((r) => r.index), best.map((b) => b.i));
  results.forEach((r) => {
    assert.ok(Math.abs(r.relevance_score - scores[r.index]!) < 1e-6);
    assert.equal(r.document?.text, expected.documents[r.index]);
  });
  assert.equal(json['model'], 'tiny-reranker');
  assert.ok((json['usage'] as { total_tokens: number }).total_tokens > 0);
  const objects = await post('/rerank', { query: expected.query, documents: expected.documents.map((text) => ({ text })) });
  assert.equal(objects.status, 200);
  assert.equal((objects.json['results'] as Ranked[]).length, expected.documents.length);
  assert.equal((objects.json['results'] as Ranked[])[0]!.document, undefined);
});

test('bad requests name the field; a wrong model is 404; wrong methods 405', async () => {
  const cases: [unknown, number, string][] = [
    [{ documents: ['a'] }, 400, 'query'], [{ query: 'q' }, 400, 'documents'], [{ query: 'q', documents: [] }, 400, 'documents'],
    [{ query: 'q', documents: [3] }, 400, 'documents'], [{ query: 'q', documents: ['a'], top_n: 0 }, 400, 'top_n'],
    [{ query: 'q', documents: ['a'], return_documents: 'yes' }, 400, 'return_documents'], [{ query: 'q', documents: Array(9).fill('a') }, 400, 'documents'],
    [{ query: 'q', documents: ['a'], model: 'other' }, 404, 'model'],
  ];
  for (const [body, status, param] of cases) {
    const r = await post('/v1/rerank', body);
    assert.equal(r.status, status, JSON.stringify(body));
    assert.equal((r.json['error'] as { param: string }).param, param, JSON.stringify(body));
  }
  const get = await fetch(`${url}/v1/rerank`);
  assert.equal(get.status, 405);
  await get.text();
});

test('/v1/models, /health and /metrics; close() stops the server', async () => {
  const models = await (await fetch(`${url}/v1/models`)).json() as { data: { id: string; max_model_len: number }[] };
  assert.deepEqual(models.data.map((m) => [m.id, m.max_model_len]), [['tiny-reranker', 62]]);
  assert.deepEqual(await (await fetch(`${url}/health`)).json(), { status: 'ok' });
  const metrics = await (await fetch(`${url}/metrics`)).text();
  assert.match(metrics, /fuseformer_rerank_documents_total \d+/);
  assert.doesNotMatch(metrics, /shared_prefix/, 'a BERT cross-encoder shares no prefix');
  await server.close();
  await assert.rejects(fetch(`${url}/health`));
});

test('concurrent rerank requests — other queries, other instructions — share rounds, each answered as it is alone', async () => {
  const expected = JSON.parse(readFileSync(join(DECODER, 'expected.json'), 'utf8')) as { query: string; documents: string[] };
  const decoder = Reranker.load(join(DECODER, 'causal'), new CpuBackend(), { dtype: 'f32' });
  // Each round takes 30 ms longer than the tiny model needs, so the requests arriving meanwhile queue up.
  const slow = Object.create(decoder) as Reranker;
  slow.scorePairsAsync = async (pairs) => { await new Promise((r) => setTimeout(r, 30)); return decoder.scorePairs(pairs); };
  const served = new RerankServer(slow, { modelName: 'qwen3-reranker' });
  const address = await served.listen(0);
  try {
    const requests = Array.from({ length: 12 }, (_, i) => ({
      query: i % 3 === 0 ? expected.query : `what is ${['a whale', 'krill', 'the sea'][i % 3]}?`,
      documents: expected.documents.slice(i % 4, 1 + (i % 4) + (i % 3)),
      ...(i % 2 === 0 ? { prompt_name: 'whales' } : {}),
    }));
    const alone = requests.map((r) => decoder.rerank(r.query, r.documents, r.prompt_name ? { promptName: r.prompt_name } : {}));
    // The clients in another process: in this one, the server's rounds would hold back their requests.
    const script = `const requests = ${JSON.stringify(requests)};
      const answers = await Promise.all(requests.map(async (r) => (await fetch('http://127.0.0.1:${address.port}/v1/rerank', { method: 'POST', body: JSON.stringify(r) })).json()));
      process.stdout.write(JSON.stringify(answers));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { maxBuffer: 1 << 24 });
    const answers = JSON.parse(stdout) as { results: Ranked[]; usage: { total_tokens: number } }[];
    answers.forEach((a, i) => {
      assert.equal(a.results.length, requests[i]!.documents.length);
      assert.equal(a.usage.total_tokens, alone[i]!.tokens, `request ${i}'s tokens`);
      a.results.forEach((x) => assert.ok(Math.abs(x.relevance_score - alone[i]!.scores[x.index]!) < 1e-6, `request ${i} document ${x.index}`));
    });
    const rounds = Number(/^fuseformer_rerank_rounds_total (\d+)/m.exec(served.metricsText())?.[1]);
    assert.ok(rounds >= 1 && rounds <= 6, `12 concurrent requests in ${rounds} rounds`);
  } finally {
    await served.close();
    decoder.free();
  }
});


test('a round answers each request as soon as its own pairs are scored, not when the round ends', async () => {
  const expected = JSON.parse(readFileSync(join(DECODER, 'expected.json'), 'utf8')) as { query: string; documents: string[] };
  const decoder = Reranker.load(join(DECODER, 'causal'), new CpuBackend(), { dtype: 'f32' });
  // Round 2 (the later two requests) reports the first of them (its two pairs), then takes 400 ms more for the rest.
  const slow = Object.create(decoder) as Reranker;
  slow.scorePairsAsync = slowRounds((pairs) => decoder.scorePairs(pairs));
  const served = new RerankServer(slow, { modelName: 'qwen3-reranker' });
  const address = await served.listen(0);
  try {
    const requests = [expected.documents.slice(0, 1), expected.documents.slice(0, 2), expected.documents.slice(1, 3)].map((documents) => ({ query: expected.query, documents }));
    const answers = await postTimed<{ results: Ranked[] }>(`http://127.0.0.1:${address.port}/v1/rerank`, requests, 100);
    assert.equal(Number(/^fuseformer_rerank_rounds_total (\d+)/m.exec(served.metricsText())?.[1]), 2, 'the later two requests in one round');
    assert.ok(answers[2]!.ms - answers[1]!.ms > 250, `round 2's first request answered at ${answers[1]!.ms.toFixed(0)} ms, its second at ${answers[2]!.ms.toFixed(0)} ms`);
    requests.forEach((r, i) => {
      const alone = decoder.rerank(r.query, r.documents);
      answers[i]!.answer.results.forEach((x) => assert.ok(Math.abs(x.relevance_score - alone.scores[x.index]!) < 1e-6, `request ${i} document ${x.index}`));
    });
  } finally {
    await served.close();
    decoder.free();
  }
});

test('a full queue answers 429; close() lets the running round finish and refuses what is queued past its timeout with 503', async () => {
  const expected = JSON.parse(readFileSync(join(DECODER, 'expected.json'), 'utf8')) as { query: string; documents: string[] };
  const decoder = Reranker.load(join(DECODER, 'causal'), new CpuBackend(), { dtype: 'f32' });
  // Round 1 takes 300 ms; 200 ms into it the server is closed, with no time for queued requests (shutdownTimeoutMs 0).
  let served: RerankServer | undefined, closing: Promise<void> | undefined;
  const slow = Object.create(decoder) as Reranker;
  slow.scorePairsAsync = async (pairs) => {
    setTimeout(() => { closing ??= served!.close(); }, 200);
    await new Promise((r) => setTimeout(r, 300));
    return decoder.scorePairs(pairs);
  };
  served = new RerankServer(slow, { modelName: 'qwen3-reranker', maxQueuedDocuments: 2, shutdownTimeoutMs: 0 });
  const address = await served.listen(0);
  const endpoint = `http://127.0.0.1:${address.port}/v1/rerank`;
  try {
    const full = await fetch(endpoint, { method: 'POST', body: JSON.stringify({ query: expected.query, documents: expected.documents.slice(0, 3) }) });
    assert.equal(full.status, 429);
    const error = (await full.json() as { error: { type: string; code: string; message: string } }).error;
    assert.deepEqual([error.type, error.code], ['rate_limit_error', 'queue_full']);
    assert.match(error.message, /the server is busy: 0 documents queued \(limit 2\); retry later/);
    assert.match(served.metricsText(), /^fuseformer_queued_documents 0$/m);
    // The first request's round runs; the second, sent 100 ms later, waits in the queue when close() comes.
    const bodies = [expected.documents.slice(0, 2), expected.documents.slice(2, 3)].map((documents) => ({ query: expected.query, documents }));
    const answers = await postTimed<{ results?: Ranked[]; error?: { message: string } }>(endpoint, bodies, 100);
    assert.equal(answers[0]!.answer.results?.length, 2, `the running round's request answered: ${JSON.stringify(answers[0]!.answer)}`);
    assert.match(answers[1]!.answer.error?.message ?? '', /the server is shutting down/);
    assert.ok(closing !== undefined, 'closed during round 1');
    await closing;
    await assert.rejects(fetch(`http://127.0.0.1:${address.port}/health`));
  } finally {
    await served.close();
    decoder.free();
  }
});
