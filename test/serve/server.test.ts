// The HTTP server driven by the official `openai` client (and plain fetch for malformed requests) on
// the CPU backend with a tiny random Llama folder: completions and chat, streaming and not, stop strings,
// logprobs, OpenAI-shaped errors and limits (400, 404, 413, 429), concurrent requests equal to sequential
// ones, cancellation on disconnect (blocks freed), /metrics, /health, /v1/models, graceful shutdown.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { ServingEngineOptions } from '../../src/serve/engine.js';
import { ReasoningSplitter } from '../../src/serve/reasoning.js';
import { InferenceServer } from '../../src/serve/server.js';
import type { ServerOptions } from '../../src/serve/server.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-server-'));
const dir = join(root, 'tiny-llama');
// Qwen3's switch at the end: chat_template_kwargs {"enable_thinking": false} closes an empty block.
const TEMPLATE = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}" +
  "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}";
let model: DecoderModel, tokenizer: Tokenizer;

interface Running { server: InferenceServer; engine: ServingEngine; client: OpenAI; base: string }
const started: Running[] = [];

async function start(engineOptions: ServingEngineOptions = {}, serverOptions: ServerOptions = {}): Promise<Running> {
  const engine = new ServingEngine(model, { maxRunning: 8, maxBatchTokens: 64, blockSize: 4, ...engineOptions });
  const server = new InferenceServer(engine, tokenizer, { modelName: 'tiny', ...serverOptions });
  const address = await server.listen(0);
  const base = `http://127.0.0.1:${address.port}`;
  const r = { server, engine, base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }) };
  started.push(r);
  return r;
}

before(() => {
  // Weights with the GPT-2-like vocabulary of the byte tokenizer (256 bytes + 1 special = eos).
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 96 }, 5, { generationConfig: { eos_token_id: 256, bos_token_id: 256 } });
  const configPath = join(dir, 'tokenizer_config.json');
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), chat_template: TEMPLATE }));
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  tokenizer = loadTokenizer(dir);
});

after(async () => {
  for (const r of started) { await r.server.close(); r.engine.dispose(); }
  rmSync(root, { recursive: true, force: true });
});

/** The tokens a request gets alone in a fresh engine (greedy), and their text. */
function alone(prompt: number[], maxTokens: number): { tokens: number[]; text: string } {
  const engine = new ServingEngine(model, { maxRunning: 1 });
  const tokens: number[] = [];
  engine.submit({ prompt, maxTokens, sampling: { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n }, stopTokenIds: [256], onToken: (e) => tokens.push(e.token), onFinish: () => {} });
  engine.runToCompletion();
  engine.dispose();
  return { tokens, text: tokenizer.decode(tokens.filter((t) => t < 256), { skipSpecialTokens: true }) };
}

test('models, health, completions (streaming and not) equal the engine alone', async () => {
  const { client, base } = await start();
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['tiny']);
  const health = await fetch(`${base}/health`);
  assert.equal(health.status, 200);

  const prompt = 'The whale swam';
  const expected = alone(tokenizer.encode(prompt), 12);
  const done = await client.completions.create({ model: 'tiny', prompt, max_tokens: 12, temperature: 0 });
  assert.equal(done.choices[0]!.text, expected.text);
  assert.equal(done.object, 'text_completion');
  assert.equal(done.usage!.prompt_tokens, tokenizer.encode(prompt).length);
  assert.equal(done.usage!.completion_tokens, expected.tokens.length);
  assert.equal(done.choices[0]!.finish_reason, expected.tokens.includes(256) ? 'stop' : 'length');

  const stream = await client.completions.create({ model: 'tiny', prompt, max_tokens: 12, temperature: 0, stream: true });
  let text = '', last: string | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    if (chunk.choices[0]?.finish_reason) last = chunk.choices[0].finish_reason;
  }
  assert.equal(text, expected.text);
  assert.equal(last, done.choices[0]!.finish_reason);
});

test('chat completions through the chat template, streaming and not; usage in the stream', async () => {
  const { client } = await start();
  const messages = [{ role: 'system' as const, content: 'Be brief.' }, { role: 'user' as const, content: 'Hello there' }];
  const promptIds = tokenizer.encode(renderByHand(messages), { addSpecialTokens: false });
  const expected = alone(promptIds, 10);
  const done = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 10, temperature: 0 });
  assert.equal(done.object, 'chat.completion');
  assert.equal(done.choices[0]!.message.role, 'assistant');
  assert.equal(done.choices[0]!.message.content, expected.text);
  assert.equal(done.usage!.prompt_tokens, promptIds.length);

  const stream = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '', role: string | undefined, usage: OpenAI.CompletionUsage | undefined | null;
  for await (const chunk of stream) {
    role ??= chunk.choices[0]?.delta.role;
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, expected.text);
  assert.equal(usage?.completion_tokens, expected.tokens.length);
});

function renderByHand(messages: { role: string; content: string }[]): string {
  return `${tokenizer.idToToken(256)}${messages.map((m) => `<${m.role}>${m.content}\n`).join('')}<assistant>`;
}

test('chat_template_kwargs reach the template (Qwen3\'s enable_thinking); bad ones are refused by name', async () => {
  const { client, base } = await start();
  const messages = [{ role: 'user' as const, content: 'Hello there' }];
  const promptIds = tokenizer.encode(`${renderByHand(messages)}<think></think>`, { addSpecialTokens: false });
  const expected = alone(promptIds, 6);
  const body = { model: 'tiny', messages, max_tokens: 6, temperature: 0, chat_template_kwargs: { enable_thinking: false } };
  const done = await client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
  assert.equal(done.usage!.prompt_tokens, promptIds.length);
  assert.equal(done.choices[0]!.message.content, expected.text);
  const thinking = await client.chat.completions.create({ ...body, chat_template_kwargs: { enable_thinking: true } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  assert.equal(thinking.usage!.prompt_tokens, tokenizer.encode(renderByHand(messages), { addSpecialTokens: false }).length);
  for (const [kwargs, param, pattern] of [
    [5, 'chat_template_kwargs', /'chat_template_kwargs' is number 5; expected an object of template variables/],
    [{ messages: [] }, 'chat_template_kwargs.messages', /'chat_template_kwargs\.messages' is set by the server/],
  ] as const) {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, chat_template_kwargs: kwargs }) });
    const e = await r.json() as { error: { message: string; param: string } };
    assert.equal(r.status, 400);
    assert.equal(e.error.param, param);
    assert.match(e.error.message, pattern);
  }
});

test('--reasoning-parser: chat answers come back as reasoning_content and content, the split of the plain answer, streaming and not', async () => {
  const messages = [{ role: 'user' as const, content: 'Think first' }];
  const plain = await (await start()).client.chat.completions.create({ model: 'tiny', messages, max_tokens: 16, temperature: 0 });
  const text = plain.choices[0]!.message.content!;
  for (const parser of ['qwen3', 'deepseek-r1'] as const) {
    const { client } = await start({}, { reasoningParser: parser });
    const splitter = new ReasoningSplitter(parser), now = splitter.push(text), rest = splitter.flush();
    const expected = { reasoning: now.reasoning + rest.reasoning, content: now.content + rest.content };
    const done = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 16, temperature: 0 });
    const message = done.choices[0]!.message as { content: string | null; reasoning_content?: string | null };
    assert.deepEqual({ reasoning: message.reasoning_content ?? '', content: message.content }, expected, parser);
    assert.ok('reasoning_content' in message, `${parser}: the field is there (null without reasoning)`);
    const stream = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 16, temperature: 0, stream: true });
    let reasoning = '', content = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      reasoning += delta?.reasoning_content ?? '';
      content += delta?.content ?? '';
    }
    assert.deepEqual({ reasoning, content }, expected, `${parser}, streamed`);
  }
  // Completions are never split.
  const { client } = await start({}, { reasoningParser: 'deepseek-r1' });
  const completion = await client.completions.create({ model: 'tiny', prompt: 'Think first', max_tokens: 8, temperature: 0 });
  assert.ok(completion.choices[0]!.text.length > 0);
});

test('stop strings cut the text before the match (finish_reason stop), streaming and not', async () => {
  const { client } = await start();
  const prompt = 'Call me Ishmael.';
  const full = alone(tokenizer.encode(prompt), 24).text;
  const stop = full.slice(6, 8);
  assert.ok(stop.length === 2, `the greedy text is long enough (${JSON.stringify(full)})`);
  const cut = full.slice(0, full.indexOf(stop));
  const done = await client.completions.create({ model: 'tiny', prompt, max_tokens: 24, temperature: 0, stop: [stop, 'never-appears'] });
  assert.equal(done.choices[0]!.text, cut);
  assert.equal(done.choices[0]!.finish_reason, 'stop');
  let text = '';
  for await (const c of await client.completions.create({ model: 'tiny', prompt, max_tokens: 24, temperature: 0, stop, stream: true })) text += c.choices[0]?.text ?? '';
  assert.equal(text, cut);
});

test('logprobs: completions (top 5) and chat (top_logprobs 3)', async () => {
  const { client } = await start();
  const done = await client.completions.create({ model: 'tiny', prompt: 'abc', max_tokens: 5, temperature: 0, logprobs: 5 });
  const lp = done.choices[0]!.logprobs!;
  assert.equal(lp.token_logprobs!.length, done.usage!.completion_tokens);
  for (const [i, top] of lp.top_logprobs!.entries()) {
    const values = Object.values(top);
    assert.ok(values.length >= 1 && values.length <= 5);
    assert.ok(Math.abs(Math.max(...values) - lp.token_logprobs![i]!) < 1e-6, 'greedy: the token is the most likely');
  }
  const chat = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = chat.choices[0]!.logprobs!.content!;
  assert.equal(content.length, chat.usage!.completion_tokens);
  for (const c of content) { assert.equal(c.top_logprobs.length, 3); assert.ok(c.logprob <= 0); }
});

test('OpenAI-shaped errors: validation, unknown model, context length, malformed JSON, body size, unknown route', async () => {
  const { client, base } = await start({ maxLen: 64 }, { maxBodyBytes: 2000 });
  const expectError = async (call: () => Promise<unknown>, status: number, pattern: RegExp, param?: string) => {
    await assert.rejects(call, (e: unknown) => {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.equal(e.status, status);
      assert.match(e.message, pattern);
      if (param) assert.equal((e.error as { param?: string }).param, param);
      return true;
    });
  };
  await expectError(() => client.completions.create({ model: 'tiny', prompt: 'x', n: 17 }), 400, /'n' is number 17; expected an integer in \[1, 16\]/, 'n');
  await expectError(() => client.completions.create({ model: 'tiny', prompt: 'x', temperature: 3 }), 400, /'temperature' is number 3/, 'temperature');
  await expectError(() => client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 0 }), 400, /'max_tokens'/, 'max_tokens');
  await expectError(() => client.completions.create({ model: 'other', prompt: 'x' }), 404, /model 'other' does not exist/, 'model');
  await expectError(() => client.completions.create({ model: 'tiny', prompt: 'y'.repeat(60), max_tokens: 10 }), 400, /maximum context length is 64 tokens/, 'prompt');
  await expectError(() => client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 64 }), 400, /at most 63/, 'max_tokens');
  await expectError(() => client.chat.completions.create({ model: 'tiny', messages: [{ role: 'wizard' as 'user', content: 'x' }] }), 400, /messages\[0\]\.role/);
  await expectError(() => client.completions.create({ model: 'tiny', prompt: 'x', stop: ['a', 'b', 'c', 'd', 'e'] }), 400, /up to 4/, 'stop');

  const post = (path: string, body: string) => fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  let r = await post('/v1/completions', '{"prompt": "x",');
  assert.equal(r.status, 400);
  const err = await r.json() as { error: { message: string; type: string } };
  assert.match(err.error.message, /not valid JSON/);
  assert.equal(err.error.type, 'invalid_request_error');
  r = await post('/v1/completions', JSON.stringify({ prompt: 'z'.repeat(5000) }));
  assert.equal(r.status, 413);
  r = await post('/v1/completions', '[1, 2]');
  assert.equal(r.status, 400);
  assert.match(((await r.json()) as { error: { message: string } }).error.message, /expected a JSON object/);
  r = await fetch(`${base}/v1/nothing`);
  assert.equal(r.status, 404);
  r = await fetch(`${base}/v1/completions`);
  assert.equal(r.status, 405);
});

test('concurrent requests (continuous batching) give the same text as one at a time', async () => {
  const { client, engine } = await start({ maxRunning: 4, maxBatchTokens: 16 });
  const prompts = ['It was the best', 'It was the worst of', 'Whale', 'Call me Ishmael. Some years ago', 'It was the best of times', 'Q', 'abcabcabc', 'It was'];
  const expected = prompts.map((p) => alone(tokenizer.encode(p), 15).text);
  const got = await Promise.all(prompts.map((prompt) => client.completions.create({ model: 'tiny', prompt, max_tokens: 15, temperature: 0 })));
  assert.deepEqual(got.map((c) => c.choices[0]!.text), expected);
  assert.ok(engine.stats().prefixHits > 0, 'the shared "It was the" prefix hit the cache');
  assert.equal(engine.pool.usedBlocks, 0);
});

test('a client that disconnects has its request cancelled and its blocks freed; /metrics reports it', async () => {
  const { base, engine } = await start();
  const controller = new AbortController();
  const response = await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ model: 'tiny', prompt: 'Stream me a long text', max_tokens: 70, temperature: 0.8, stream: true }),
  });
  const reader = response.body!.getReader();
  await reader.read();
  // The first chunk can arrive before the engine's next step admits the request: wait for that step.
  for (let i = 0; i < 200 && engine.pool.usedBlocks === 0; i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(engine.pool.usedBlocks > 0, 'the request holds blocks while it runs');
  controller.abort();
  for (let i = 0; i < 200 && (engine.hasWork || engine.pool.usedBlocks > 0); i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(engine.hasWork, false);
  assert.equal(engine.pool.usedBlocks, 0);
  const metrics = await (await fetch(`${base}/metrics`)).text();
  assert.match(metrics, /fuseformer_requests_finished_total\{reason="cancelled"\} 1/);
  assert.match(metrics, /fuseformer_time_to_first_token_seconds_count 1/);
  for (const name of ['fuseformer_queue_depth', 'fuseformer_kv_usage_ratio', 'fuseformer_prefix_cache_hit_rate', 'fuseformer_inter_token_latency_seconds_bucket', 'fuseformer_generation_tokens_total']) {
    assert.ok(metrics.includes(name), name);
  }
});

test('a full queue answers 429; graceful shutdown lets running requests finish', async () => {
  const { client, server, base } = await start({}, { maxQueue: 1 });
  // The first request is known to be running once its first chunk has arrived (greedy on these fixed
  // weights it runs for many engine steps): the second then finds the queue full.
  const first = await client.completions.create({ model: 'tiny', prompt: 'one', max_tokens: 80, temperature: 0, stream: true });
  const chunks = first[Symbol.asyncIterator]();
  assert.equal((await chunks.next()).done, false);
  await assert.rejects(client.completions.create({ model: 'tiny', prompt: 'two', max_tokens: 4 }), (e: unknown) => e instanceof OpenAI.APIError && e.status === 429 && /busy/.test(e.message));
  const closing = server.close();
  let rest = 0;
  for (let c = await chunks.next(); !c.done; c = await chunks.next()) rest++;
  assert.ok(rest > 0, 'the running stream finished after close() was called');
  await closing;
  await assert.rejects(fetch(`${base}/health`));
});

test('an engine failure answers every active request with a 500 error body (JSON and SSE) and the server keeps serving', async () => {
  const { client, engine, base } = await start();
  const realStep = engine.step.bind(engine);
  let fail = true;
  engine.step = () => { if (fail) { fail = false; throw new Error('device lost'); } return realStep(); };
  const plain = fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'a', max_tokens: 3 }) });
  const r = await plain;
  assert.equal(r.status, 500);
  assert.match(((await r.json()) as { error: { message: string } }).error.message, /the engine failed: device lost/);
  assert.equal(engine.pool.usedBlocks, 0, 'the failed request released its blocks');
  fail = true;
  const stream = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'b' }], max_tokens: 3, stream: true }) });
  assert.equal(stream.status, 200, 'the stream had started (role chunk) before the step failed');
  assert.match(await stream.text(), /data: \{"error":\{"message":"the engine failed: device lost"/);
  const after = await client.completions.create({ model: 'tiny', prompt: 'c', max_tokens: 2, temperature: 0 });
  assert.equal(after.choices.length, 1);
});

test('/tokenize and /detokenize (vLLM\'s): a prompt or chat messages to ids, ids back to text; bad ids named', async () => {
  const { base } = await start();
  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, body: await r.json() as Record<string, unknown> & { error?: { param: string; message: string } } };
  };
  const prompt = 'The whale swam';
  assert.deepEqual((await post('/tokenize', { model: 'tiny', prompt })).body, { count: tokenizer.encode(prompt).length, max_model_len: 96, tokens: tokenizer.encode(prompt) });
  assert.deepEqual((await post('/tokenize', { prompt, add_special_tokens: false })).body['tokens'], tokenizer.encode(prompt, { addSpecialTokens: false }));
  const messages = [{ role: 'user', content: 'Hello there' }];
  assert.deepEqual((await post('/tokenize', { messages })).body['tokens'], tokenizer.encode(renderByHand(messages), { addSpecialTokens: false }), 'the prompt a chat request gets');
  const withoutPrompt = renderByHand(messages).slice(0, -'<assistant>'.length);
  assert.deepEqual((await post('/tokenize', { messages, add_generation_prompt: false })).body['tokens'], tokenizer.encode(withoutPrompt, { addSpecialTokens: false }));
  const ids = tokenizer.encode(prompt, { addSpecialTokens: false });
  assert.deepEqual((await post('/detokenize', { tokens: ids })).body, { prompt });
  for (const [path, body, status, param] of [
    ['/detokenize', { tokens: [5, -1] }, 400, 'tokens'], ['/detokenize', { tokens: [9999] }, 400, 'tokens'], ['/tokenize', { prompt: 5 }, 400, 'prompt'],
    ['/tokenize', { prompt, messages }, 400, 'messages'], ['/tokenize', { model: 'other', prompt }, 404, 'model'],
  ] as const) {
    const r = await post(path, body);
    assert.equal(r.status, status, JSON.stringify(r.body));
    assert.equal(r.body.error?.param, param);
  }
});

test('GET /v1/models/ID (the openai client\'s models.retrieve): the card for this model, 404 model_not_found for another', async () => {
  const { client, base } = await start();
  const card = await client.models.retrieve('tiny');
  assert.deepEqual([card.id, card.object, (card as unknown as { max_model_len: number }).max_model_len], ['tiny', 'model', 96]);
  await assert.rejects(client.models.retrieve('gpt-4o'), (e: unknown) => {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.equal(e.code, 'model_not_found');
    assert.match(e.message, /the model 'gpt-4o' does not exist; this server has 'tiny'/);
    return true;
  });
  assert.equal((await fetch(`${base}/v1/models/tiny`, { method: 'POST' })).status, 405);
  assert.match(await (await fetch(`${base}/metrics`)).text(), /fuseformer_requests_total\{endpoint="\/v1\/models\/\{id\}",status="404"\} 1/, 'one metrics label for every ID');
});

/** The text a request gets alone in a fresh engine with this sampling (seeded), and its token count. */
function aloneSampled(prompt: number[], maxTokens: number, sampling: { temperature: number; topK: number; topP: number; seed: bigint }): { text: string; tokens: number } {
  const engine = new ServingEngine(model, { maxRunning: 1 });
  const tokens: number[] = [];
  engine.submit({ prompt, maxTokens, sampling: { ...sampling, repetitionPenalty: 1 }, stopTokenIds: [256], onToken: (e) => tokens.push(e.token), onFinish: () => {} });
  engine.runToCompletion();
  engine.dispose();
  return { text: tokenizer.decode(tokens.filter((t) => t < 256), { skipSpecialTokens: true }), tokens: tokens.length };
}

test('n choices: each its own request with seed + i, the prompt computed once, streamed by index as the SDK assembles them; a disconnect cancels them all', async () => {
  const { client, base, engine } = await start();
  const prompt = 'The whale swam';
  const sampling = (i: number) => ({ temperature: 0.9, topK: 0, topP: 1, seed: 5n + BigInt(i) });
  const expected = [0, 1, 2].map((i) => aloneSampled(tokenizer.encode(prompt), 10, sampling(i)));
  assert.ok(new Set(expected.map((e) => e.text)).size > 1, 'the seeds give different choices');
  const hitsBefore = engine.stats().prefixHits;
  const done = await client.completions.create({ model: 'tiny', prompt, max_tokens: 10, temperature: 0.9, top_k: 0, seed: 5, n: 3 } as OpenAI.CompletionCreateParamsNonStreaming);
  assert.deepEqual(done.choices.map((c) => [c.index, c.text]), expected.map((e, i) => [i, e.text]));
  // Choices 1 and 2 start once choice 0 has computed the prompt: its full blocks (4 positions each) come from the cache.
  const fullBlocks = Math.floor(tokenizer.encode(prompt).length / 4);
  assert.ok(fullBlocks >= 3);
  assert.equal(engine.stats().prefixHits - hitsBefore, 2 * fullBlocks, 'the prompt is computed once');
  assert.equal(done.usage!.completion_tokens, expected.reduce((sum, e) => sum + e.tokens, 0));

  // Chat, streamed: the SDK's stream helper gathers each index's deltas into its own message.
  const messages = [{ role: 'user' as const, content: 'Hello there' }];
  const chatPrompt = tokenizer.encode(renderByHand(messages), { addSpecialTokens: false });
  const chatExpected = [0, 1].map((i) => aloneSampled(chatPrompt, 8, sampling(i)).text);
  const stream = client.chat.completions.stream({ model: 'tiny', messages, max_tokens: 8, temperature: 0.9, seed: 5, n: 2, top_k: 0 } as Parameters<typeof client.chat.completions.stream>[0]);
  const final = await stream.finalChatCompletion();
  assert.deepEqual(final.choices.map((c) => [c.index, c.message.content, c.message.role]), chatExpected.map((t, i) => [i, t, 'assistant']));
  assert.ok(final.choices.every((c) => c.finish_reason === 'stop' || c.finish_reason === 'length'));

  // A client that goes away: every choice is cancelled, their blocks freed.
  const controller = new AbortController();
  const response = await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
    // ignore_eos: a choice that drew EOS before the abort would end 'stop' (its seed is random), not 'cancelled'.
    body: JSON.stringify({ model: 'tiny', prompt: 'Stream me a long text', max_tokens: 70, temperature: 0.8, stream: true, n: 3, ignore_eos: true }),
  });
  await response.body!.getReader().read();
  for (let i = 0; i < 200 && engine.stats().running < 3; i++) await new Promise((r) => setTimeout(r, 5));
  controller.abort();
  for (let i = 0; i < 200 && (engine.hasWork || engine.pool.usedBlocks > 0); i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(engine.hasWork, false);
  assert.equal(engine.pool.usedBlocks, 0);
  assert.match(await (await fetch(`${base}/metrics`)).text(), /fuseformer_requests_finished_total\{reason="cancelled"\} 3/);
  // Gone at once (as a rule before choice 0's first token, so choices 1 and 2 were never submitted): all end cancelled.
  const early = new AbortController();
  await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: early.signal,
    body: JSON.stringify({ model: 'tiny', prompt: 'Stream me a long text', max_tokens: 70, temperature: 0.8, stream: true, n: 3, ignore_eos: true }),
  });
  early.abort();
  for (let i = 0; i < 200 && (engine.hasWork || engine.pool.usedBlocks > 0); i++) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(engine.hasWork, false);
  assert.equal(engine.pool.usedBlocks, 0);
  assert.match(await (await fetch(`${base}/metrics`)).text(), /fuseformer_requests_finished_total\{reason="cancelled"\} 6/);
});

test('n choices count against the queue: a request that would pass it is a 429', async () => {
  const { client } = await start({}, { maxQueue: 2 });
  await assert.rejects(client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 2, n: 3 }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.RateLimitError, String(e));
    assert.match(e.message, /this one asks for 3 choices/);
    return true;
  });
  assert.equal((await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 2, n: 2, temperature: 0 })).choices.length, 2);
});
