// The server against request fields at and past their edges (found by an audit): values that round to
// nothing in f32 (a top_p of 1e-300 failed every request in the batch with a 500; a temperature of 1e-39
// picked token 0), OpenAI fields it does not implement (refused by name, not silently ignored), missing
// fields and bad token ids named, methods (405 with Allow, HEAD), metrics labels from a fixed set, and
// logprobs that cover exactly the text returned when a stop string cuts it.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-server-inputs-'));
let model: DecoderModel, tokenizer: Tokenizer, server: InferenceServer, engine: ServingEngine, base: string;

before(async () => {
  const dir = join(root, 'tiny-llama');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 96 }, 5, { generationConfig: { eos_token_id: 256, bos_token_id: 256 } });
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  tokenizer = loadTokenizer(dir);
  engine = new ServingEngine(model, { maxRunning: 8, maxBatchTokens: 64, blockSize: 4 });
  server = new InferenceServer(engine, tokenizer, { modelName: 'tiny' });
  base = `http://127.0.0.1:${(await server.listen(0)).port}`;
});

after(async () => {
  await server.close();
  engine.dispose();
  rmSync(root, { recursive: true, force: true });
});

interface Completion { choices: { text: string; finish_reason: string; logprobs: { tokens: string[]; text_offset: number[] } | null }[] }
interface ErrorBody { error: { message: string; param: string | null; code: string | null } }

const post = (path: string, body: unknown) => fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function complete(body: Record<string, unknown>): Promise<Completion> {
  const r = await post('/v1/completions', { model: 'tiny', ...body });
  assert.equal(r.status, 200, await r.clone().text());
  return await r.json() as Completion;
}

async function refused(body: Record<string, unknown>, param: string | null, pattern: RegExp, path = '/v1/completions'): Promise<ErrorBody> {
  const r = await post(path, body);
  const e = await r.json() as ErrorBody;
  assert.equal(r.status, 400, JSON.stringify(e));
  assert.equal(e.error.param, param);
  assert.match(e.error.message, pattern);
  return e;
}

test('top_p and temperature too small for f32 act as their limits (top-1, greedy), beside other requests', async () => {
  const prompt = 'Call me Ishmael';
  const greedy = (await complete({ prompt, max_tokens: 8, temperature: 0 })).choices[0]!.text;
  // Other requests in flight at the same time must not be failed by these.
  const others = Array.from({ length: 4 }, (_, i) => complete({ prompt: `other ${i}`, max_tokens: 12, temperature: 0.9, seed: i }));
  const [tinyP, tinyT] = await Promise.all([
    complete({ prompt, max_tokens: 8, temperature: 1, top_p: 1e-300, seed: 3 }),
    complete({ prompt, max_tokens: 8, temperature: 1e-39, seed: 3 }),
  ]);
  assert.equal(tinyP.choices[0]!.text, greedy, 'top_p below every probability keeps the most likely token alone');
  assert.equal(tinyT.choices[0]!.text, greedy, 'a temperature of 1e-39 is greedy');
  for (const o of await Promise.all(others)) assert.ok(o.choices[0]!.text.length > 0);
});

test('OpenAI fields the server does not implement are refused by name unless they ask for nothing', async () => {
  await refused({ messages: [{ role: 'user', content: 'hi' }], echo: true }, 'echo', /'echo' is not supported/, '/v1/chat/completions');
  await refused({ prompt: 'x', echo: true, logprobs: 2 }, 'echo', /'echo' with 'logprobs' would need the prompt's log-probabilities/);
  await refused({ prompt: 'x', best_of: 3 }, 'best_of', /not supported/);
  await refused({ prompt: 'x', logit_bias: { 1: 101 } }, 'logit_bias', /'logit_bias\["1"\]' is number 101; expected a number in \[-100, 100\]/);
  await refused({ prompt: 'x', logit_bias: { a: 1 } }, 'logit_bias', /keys are token ids/);
  await refused({ prompt: 'x', logit_bias: { 999999: 1 } }, 'logit_bias', /'logit_bias' holds token id 999999/);
  await refused({ prompt: 'x', frequency_penalty: 5 }, 'frequency_penalty', /'frequency_penalty' is number 5; expected a number in \[-2, 2\] \(0 = off\)/);
  await refused({ prompt: 'x', presence_penalty: 'x' }, 'presence_penalty', /expected a number in \[-2, 2\]/);
  await refused({ prompt: 'x', user: 7 }, 'user', /'user' is number 7; expected a string/);
  await refused({ messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'email' } } } }, 'response_format.json_schema.schema', /#\/format: the keyword 'format' is not supported/, '/v1/chat/completions');
  await refused({ prompt: 'x', tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools', /'tools' is not supported/);
  await refused({ messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }, 'tool_choice', /names the function 'g', which 'tools' does not list/, '/v1/chat/completions');
  // The values that change nothing are accepted, as are fields outside the API.
  const ok = await complete({ prompt: 'x', max_tokens: 2, echo: false, best_of: 1, logit_bias: {}, frequency_penalty: 0, presence_penalty: 0, user: 'u', some_extension: 1 });
  assert.equal(ok.choices.length, 1);
});

test('frequency_penalty and presence_penalty change a greedy answer that repeats itself, and 0 changes nothing', async () => {
  const prompt = 'Call me Ishmael';
  const plain = (await complete({ prompt, max_tokens: 24, temperature: 0 })).choices[0]!.text;
  assert.equal((await complete({ prompt, max_tokens: 24, temperature: 0, frequency_penalty: 0, presence_penalty: 0 })).choices[0]!.text, plain);
  const penalised = await Promise.all([
    complete({ prompt, max_tokens: 24, temperature: 0, presence_penalty: 2 }),
    complete({ prompt, max_tokens: 24, temperature: 0, frequency_penalty: 2 }),
  ]);
  const distinct = (text: string) => new Set([...text]).size;
  for (const p of penalised) {
    assert.notEqual(p.choices[0]!.text, plain);
    assert.ok(distinct(p.choices[0]!.text) >= distinct(plain), `${JSON.stringify(p.choices[0]!.text)} repeats no more than ${JSON.stringify(plain)}`);
  }
});

test('missing fields, a bad token id, conflicting limits and stream_options without stream are named', async () => {
  await refused({}, 'prompt', /'prompt' is missing/);
  await refused({ prompt: [5, -1, 7] }, 'prompt', /'prompt\[1\]' is number -1/);
  await refused({ prompt: [5, 1.5] }, 'prompt', /'prompt\[1\]' is number 1.5/);
  await refused({ prompt: 'x', max_tokens: 4, max_completion_tokens: 5 }, 'max_completion_tokens', /disagree/);
  await refused({ prompt: 'x', max_tokens: 4, max_completion_tokens: 'x' }, 'max_completion_tokens', /expected an integer >= 1/);
  await refused({ prompt: 'x', stream_options: { include_usage: true } }, 'stream_options', /only allowed when 'stream' is true/);
  await refused({ messages: [{ role: 'user' }] }, 'messages[0].content', /'messages\[0\]\.content' is missing/, '/v1/chat/completions');
  await refused({ prompt: 'x', repetition_penalty: 0 }, 'repetition_penalty', /repetition_penalty/);
});

test('seeds up to 2^64 and the repetition penalty extension are taken', async () => {
  const a = await complete({ prompt: 'abc', max_tokens: 6, temperature: 1, seed: 2 ** 60 });
  const b = await complete({ prompt: 'abc', max_tokens: 6, temperature: 1, seed: 2 ** 60 });
  assert.equal(a.choices[0]!.text, b.choices[0]!.text, 'the same seed draws the same tokens');
  const penalised = await complete({ prompt: 'abcabcabc', max_tokens: 6, temperature: 0, repetition_penalty: 1.3 });
  assert.equal(penalised.choices.length, 1);
});

test('405 names the allowed methods; HEAD works where GET does; POST /health is 405, not 404', async () => {
  let r = await fetch(`${base}/v1/completions`);
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  r = await fetch(`${base}/health`, { method: 'POST' });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'GET, HEAD');
  assert.equal(((await r.json()) as ErrorBody).error.code, 'method_not_allowed');
  r = await fetch(`${base}/health`, { method: 'HEAD' });
  assert.equal(r.status, 200);
  r = await fetch(`${base}/v1/models`, { method: 'HEAD' });
  assert.equal(r.status, 200);
});

test('metrics label requests by route, never by the path a client made up', async () => {
  for (let i = 0; i < 5; i++) assert.equal((await fetch(`${base}/made-up-${i}`)).status, 404);
  const metrics = await (await fetch(`${base}/metrics`)).text();
  assert.ok(!metrics.includes('made-up'), 'no series per unknown path');
  assert.match(metrics, /fuseformer_requests_total\{endpoint="other",status="404"\} 5/);
});

test('with a stop string, logprobs cover exactly the text returned (streaming and not)', async () => {
  const prompt = 'Call me Ishmael.';
  const full = (await complete({ prompt, max_tokens: 24, temperature: 0 })).choices[0]!.text;
  const stop = full.slice(6, 8);
  const done = await complete({ prompt, max_tokens: 24, temperature: 0, stop, logprobs: 1 });
  const choice = done.choices[0]!;
  assert.equal(choice.finish_reason, 'stop');
  assert.equal(choice.logprobs!.tokens.join(''), choice.text, 'the stop string\'s tokens are not in the logprobs');
  assert.deepEqual(choice.logprobs!.text_offset, choice.logprobs!.tokens.map((_, i) => choice.logprobs!.tokens.slice(0, i).join('').length));

  const r = await post('/v1/completions', { model: 'tiny', prompt, max_tokens: 24, temperature: 0, stop, logprobs: 1, stream: true });
  let text = '';
  const tokens: string[] = [];
  for (const line of (await r.text()).split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const c = (JSON.parse(line.slice(6)) as Completion).choices[0]!;
    text += c.text;
    tokens.push(...(c.logprobs?.tokens ?? []));
  }
  assert.equal(text, choice.text);
  assert.equal(tokens.join(''), text);
});

test('a long prompt is encoded off the engine loop and refused by its token count; streams keep flowing meanwhile', async () => {
  const long = 'Call me Ishmael. '.repeat(2000);
  const stream = post('/v1/completions', { model: 'tiny', prompt: 'a stream', max_tokens: 40, temperature: 0.7, seed: 1, stream: true });
  const e = await refused({ prompt: long, max_tokens: 4 }, 'prompt', /maximum context length is 96 tokens; the request asks for \d+/);
  assert.equal(e.error.code, 'context_length_exceeded');
  assert.match(await (await stream).text(), /data: \[DONE\]/);
});

/** The greedy tokens of `prompt` from the engine alone, never stopping early. */
function greedyTokens(prompt: string, maxTokens: number): number[] {
  const alone = new ServingEngine(model, { maxRunning: 1 });
  const tokens: number[] = [];
  alone.submit({ prompt: tokenizer.encode(prompt), maxTokens, sampling: { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n }, stopTokenIds: [], onToken: (e) => tokens.push(e.token), onFinish: () => {} });
  alone.runToCompletion();
  alone.dispose();
  return tokens;
}

test('stop_token_ids end the answer before their token; ignore_eos runs past EOS to max_tokens (vLLM\'s extensions)', async () => {
  // A prompt whose greedy answer meets EOS (256) with text before it (the weights are fixed, so the search is too).
  const prompt = Array.from({ length: 40 }, (_, i) => `Prompt number ${i}:`).find((p) => greedyTokens(p, 24).indexOf(256) > 2);
  assert.ok(prompt !== undefined, 'some prompt reaches EOS within 24 tokens');
  const tokens = greedyTokens(prompt, 24), eos = tokens.indexOf(256);
  const text = (ids: number[]) => tokenizer.decode(ids.filter((t) => t !== 256), { skipSpecialTokens: true });
  // By default EOS ends it; with ignore_eos the answer goes on to max_tokens, EOS's text (none: it is special) left out.
  const plain = await complete({ prompt, max_tokens: 24, temperature: 0 }) as Completion & { usage: { completion_tokens: number } };
  assert.deepEqual([plain.choices[0]!.text, plain.choices[0]!.finish_reason, plain.usage.completion_tokens], [text(tokens.slice(0, eos)), 'stop', eos + 1]);
  const past = await complete({ prompt, max_tokens: 24, temperature: 0, ignore_eos: true }) as Completion & { usage: { completion_tokens: number } };
  assert.deepEqual([past.choices[0]!.text, past.choices[0]!.finish_reason, past.usage.completion_tokens], [text(tokens), 'length', 24]);
  // A stop id: the answer ends at its first occurrence, its own text not included.
  const stopAt = 2, stopId = tokens[stopAt]!, first = tokens.indexOf(stopId);
  const cut = await complete({ prompt, max_tokens: 24, temperature: 0, stop_token_ids: [stopId] }) as Completion & { usage: { completion_tokens: number } };
  assert.deepEqual([cut.choices[0]!.text, cut.choices[0]!.finish_reason, cut.usage.completion_tokens], [text(tokens.slice(0, first)), 'stop', first + 1]);
  await refused({ prompt, stop_token_ids: [1, -2] }, 'stop_token_ids', /expected an array of token ids/);
  await refused({ prompt, stop_token_ids: [9999] }, 'stop_token_ids', /token id 9999; the vocabulary has 257 ids/);
  await refused({ prompt, ignore_eos: 'yes' }, 'ignore_eos', /expected true or false/);
});

test('echo sends the prompt back in front of each choice\'s text, streaming and not; token-id prompts as their text', async () => {
  const prompt = 'Call me Ishmael';
  const plain = (await complete({ prompt, max_tokens: 6, temperature: 0 })).choices[0]!.text;
  const echoed = await complete({ prompt, max_tokens: 6, temperature: 0, echo: true, n: 2 });
  assert.deepEqual(echoed.choices.map((c) => c.text), [prompt + plain, prompt + plain]);
  const ids = tokenizer.encode(prompt);
  assert.equal((await complete({ prompt: ids, max_tokens: 6, temperature: 0, echo: true })).choices[0]!.text, tokenizer.decode(ids) + plain);
  const r = await post('/v1/completions', { model: 'tiny', prompt, max_tokens: 6, temperature: 0, echo: true, stream: true });
  const text = (await r.text()).split('\n').filter((l) => l.startsWith('data: {')).map((l) => (JSON.parse(l.slice(6)) as Completion).choices[0]?.text ?? '').join('');
  assert.equal(text, prompt + plain);
});

test('several prompts in one completions request (strings or token-id arrays): n choices each, in order, seeds seed + k, prompt tokens counted once a prompt', async () => {
  const prompts = ['Call me Ishmael', 'The whale'];
  const one = async (prompt: string | number[], seed: number) => (await complete({ prompt, max_tokens: 5, temperature: 0.9, top_k: 0, seed })).choices[0]!.text;
  const expected = [await one(prompts[0]!, 7), await one(prompts[0]!, 8), await one(prompts[1]!, 9), await one(prompts[1]!, 10)];
  const both = await complete({ prompt: prompts, max_tokens: 5, temperature: 0.9, top_k: 0, seed: 7, n: 2, echo: true }) as Completion & { usage: { prompt_tokens: number } };
  assert.deepEqual(both.choices.map((c) => c.text), expected.map((t, k) => prompts[Math.floor(k / 2)]! + t));
  assert.equal(both.usage.prompt_tokens, tokenizer.encode(prompts[0]!).length + tokenizer.encode(prompts[1]!).length);
  const ids = prompts.map((p) => tokenizer.encode(p));
  const byIds = await complete({ prompt: ids, max_tokens: 5, temperature: 0.9, top_k: 0, seed: 7, n: 2 });
  assert.deepEqual(byIds.choices.map((c) => c.text), expected);
  await refused({ prompt: ['x', ''] }, 'prompt', /'prompt\[1\]' is empty/);
  await refused({ prompt: ['x', [1, -2]] }, 'prompt', /'prompt\[1\]\[1\]' is number -2/);
  await refused({ prompt: ['x', 5] }, 'prompt', /'prompt\[0\]' is the string "x"; a prompt of token ids/);
  await refused({ prompt: Array.from({ length: 9 }, () => 'x'), n: 8 }, 'prompt', /9 prompts × n 8 = 72 choices; at most 64/);
  await refused({ prompt: ['x', 'y'.repeat(200)], max_tokens: 4 }, 'prompt', /the request asks for \d+ \(prompt 1\)/);
});
