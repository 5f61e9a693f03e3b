// tool_choice "required" and a named function, over HTTP with the openai client: the call is forced by
// constrained decoding, so even a tiny random Llama (which on its own never writes a call) answers with a call in
// its template's syntax — hermes and llama3_json — whose arguments fit the function's parameters, returned as
// message.tool_calls (streamed as delta.tool_calls) with finish_reason "tool_calls"; strict functions are taken
// there; parameters the grammar cannot enforce are a 400 naming the tool.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
import { InferenceServer } from '../../src/serve/server.js';
import type { ServerOptions } from '../../src/serve/server.js';
import { writeQuietLlamaFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-forced-tools-'));
const dir = join(root, 'tiny-llama');
const TEMPLATE = readFileSync(join('test', 'fixtures', 'tool-template', 'template.jinja'), 'utf8');
const EOS = 256;
let model: DecoderModel, tokenizer: Tokenizer;
const started: { server: InferenceServer; engine: ServingEngine }[] = [];

async function start(options: ServerOptions = {}): Promise<{ client: OpenAI; base: string }> {
  const engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 256, blockSize: 16 });
  const server = new InferenceServer(engine, tokenizer, { modelName: 'tiny', ...options });
  started.push({ server, engine });
  const base = `http://127.0.0.1:${(await server.listen(0)).port}`;
  return { base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

before(() => {
  writeQuietLlamaFolder(dir, 2048, 6, TEMPLATE);
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  tokenizer = loadTokenizer(dir);
});

after(async () => {
  for (const { server, engine } of started) { await server.close(); engine.dispose(); }
  rmSync(root, { recursive: true, force: true });
});

const WEATHER: OpenAI.ChatCompletionFunctionTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false }, strict: true },
};
const TIME: OpenAI.ChatCompletionFunctionTool = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'integer', minimum: -12, maximum: 14 } }, required: ['zone'] } } };
const USER: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Oslo?' }];

function checkArguments(call: { function: { name: string; arguments: string } }): void {
  const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
  if (call.function.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city', 'unit'], call.function.arguments);
    assert.ok(typeof args['city'] === 'string' && [...(args['city'] as string)].length <= 10 && ['c', 'f'].includes(args['unit'] as string), call.function.arguments);
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.ok(Number.isInteger(args['zone']) && (args['zone'] as number) >= -12 && (args['zone'] as number) <= 14, call.function.arguments);
  }
}

test('a named function (hermes): the answer is one call of it, its arguments fitting the parameters', async () => {
  const { client } = await start();
  for (const temperature of [0, 1]) {
    const done = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER, TIME], tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 300, temperature, seed: 2 });
    const choice = done.choices[0]!;
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls?.length, 1);
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(call.function.name, 'get_weather');
    checkArguments(call);
  }
});

test('"required", streamed and with several choices: each a call of one of the tools', async () => {
  const { client } = await start();
  const stream = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER, TIME], tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 9, n: 3, stream: true });
  const calls: { function: { name: string; arguments: string } }[][] = [[], [], []], reasons: (string | null)[] = [null, null, null];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const t of c.delta.tool_calls ?? []) calls[c.index]!.push({ function: { name: t.function!.name!, arguments: t.function!.arguments! } });
      if (c.finish_reason) reasons[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(reasons, ['tool_calls', 'tool_calls', 'tool_calls']);
  for (const c of calls) {
    assert.equal(c.length, 1);
    checkArguments(c[0]!);
  }
});

test('llama3_json: the forced call is the answer\'s one {"name", "parameters"} object', async () => {
  const { client } = await start({ toolCallParser: 'llama3_json' });
  const done = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER, TIME], tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 200, temperature: 0 });
  assert.equal(done.choices[0]!.finish_reason, 'tool_calls');
  checkArguments(done.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall);
});

test('parameters a forced call cannot be held to are a 400 naming the tool', async () => {
  const { base } = await start();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages: USER, tools: [WEATHER, { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { id: { type: 'string', pattern: 'x+' } } } } }], tool_choice: 'required' }),
  });
  const e = (await r.json()) as { error: { message: string; param: string } };
  assert.equal(r.status, 400);
  assert.equal(e.error.param, 'tools[1].function.parameters');
  assert.match(e.error.message, /#\/properties\/id\/pattern: the keyword 'pattern' is not supported/);
});

test('strict functions under tool_choice "auto": the answer is free text (a random model opens no call), and a 200', async () => {
  const { client } = await start();
  const done = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER, TIME], max_tokens: 20, temperature: 0 });
  assert.equal(done.choices[0]!.finish_reason, 'length');
  assert.equal(typeof done.choices[0]!.message.content, 'string');
});
