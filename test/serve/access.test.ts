// Who may call the server (http-json.ts AccessOptions, `serve --api-key / --allowed-origins`) and the name it answers to: without the key every
// route but /health and /metrics is a 401 naming what to send (the openai client's AuthenticationError), with it
// the server answers as before; browsers from an allowed origin get CORS headers and their preflight answered,
// other origins none; the options are checked by name; a repository from the Hugging Face cache is served under its id.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { accessOptions, defaultServedName } from '../../src/cli/serve.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-access-'));
let model: DecoderModel, server: InferenceServer, engine: ServingEngine, base: string;

before(async () => {
  const dir = join(root, 'tiny-llama');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 96 }, 5);
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 64, blockSize: 4 });
  server = new InferenceServer(engine, loadTokenizer(dir), { modelName: 'tiny', access: { apiKey: 'sekrit-key', allowedOrigins: ['http://app.test'] } });
  base = `http://127.0.0.1:${(await server.listen(0)).port}`;
});

after(async () => {
  await server.close();
  engine.dispose();
  model.free();
  rmSync(root, { recursive: true, force: true });
});

test('the API key guards every route but /health and /metrics', async () => {
  const client = (apiKey: string) => new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0 });
  await assert.rejects(client('wrong').completions.create({ model: 'tiny', prompt: 'Hi', max_tokens: 2 }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
    assert.equal(e.code, 'invalid_api_key');
    assert.match(e.message, /not this server's/);
    return true;
  });
  const done = await client('sekrit-key').completions.create({ model: 'tiny', prompt: 'Hi', max_tokens: 2, temperature: 0 });
  assert.equal(done.choices.length, 1);
  assert.deepEqual((await client('sekrit-key').models.list()).data.map((m) => m.id), ['tiny']);
  const bare = await fetch(`${base}/v1/models`);
  assert.equal(bare.status, 401);
  assert.match(((await bare.json()) as { error: { message: string } }).error.message, /send it as "Authorization: Bearer KEY"/);
  assert.equal((await fetch(`${base}/tokenize`, { method: 'POST', body: '{"prompt": "x"}' })).status, 401, 'vLLM\'s routes too');
  assert.equal((await fetch(`${base}/health`)).status, 200);
  const metrics = await fetch(`${base}/metrics`);
  assert.equal(metrics.status, 200);
  assert.match(await metrics.text(), /fuseformer_requests_total\{endpoint="\/v1\/models",status="401"\}/, '401s are counted');
});

test('CORS: an allowed origin gets its headers and its preflight answered; another origin gets none', async () => {
  const preflight = await fetch(`${base}/v1/chat/completions`, {
    method: 'OPTIONS', headers: { origin: 'http://app.test', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });
  assert.equal(preflight.status, 204, 'no key needed: a browser sends none with a preflight');
  assert.equal(preflight.headers.get('access-control-allow-origin'), 'http://app.test');
  assert.equal(preflight.headers.get('access-control-allow-methods'), 'POST, OPTIONS');
  assert.match(preflight.headers.get('access-control-allow-headers') ?? '', /authorization/);
  const call = await fetch(`${base}/v1/models`, { headers: { origin: 'http://app.test', authorization: 'Bearer sekrit-key' } });
  assert.equal(call.status, 200);
  assert.equal(call.headers.get('access-control-allow-origin'), 'http://app.test');
  const denied = await fetch(`${base}/v1/models`, { headers: { origin: 'http://evil.test', authorization: 'Bearer sekrit-key' } });
  assert.equal(denied.headers.get('access-control-allow-origin'), null);
  const otherPreflight = await fetch(`${base}/v1/models`, { method: 'OPTIONS', headers: { origin: 'http://evil.test', 'access-control-request-method': 'GET' } });
  assert.equal(otherPreflight.status, 405, 'not answered as a preflight');
  assert.equal(otherPreflight.headers.get('access-control-allow-origin'), null);
});

test('--api-key and --allowed-origins are checked by name', () => {
  assert.deepEqual(accessOptions(undefined, undefined), {});
  assert.deepEqual(accessOptions('k', ' http://a.test , https://b.test:8443 '), { apiKey: 'k', allowedOrigins: ['http://a.test', 'https://b.test:8443'] });
  assert.deepEqual(accessOptions(undefined, '*'), { allowedOrigins: ['*'] });
  assert.throws(() => accessOptions(' ', undefined), /--api-key is empty/);
  assert.throws(() => accessOptions(undefined, ','), /--allowed-origins is empty/);
  assert.throws(() => accessOptions(undefined, 'http://a.test/path'), /'http:\/\/a.test\/path' is not an origin/);
});

test('the default served name: a directory\'s name, or a cached repository\'s id as given (not its snapshot hash)', () => {
  const dir = join(root, 'tiny-llama');
  assert.equal(defaultServedName(dir, dir), 'tiny-llama');
  const snapshot = '/cache/hub/models--Qwen--Qwen3-0.6B/snapshots/c1899de289a04d12100db370d81485cdf75e47ca';
  assert.equal(defaultServedName('Qwen/Qwen3-0.6B', snapshot), 'Qwen/Qwen3-0.6B');
  assert.equal(defaultServedName('Qwen/Qwen3-0.6B@main', snapshot), 'Qwen/Qwen3-0.6B');
});
