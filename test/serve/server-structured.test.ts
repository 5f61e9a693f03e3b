// Structured outputs over HTTP (response_format json_schema / json_object), driven by the official `openai`
// client on the CPU backend with a tiny random Llama: answers — chat and completions, streaming and not, several
// choices, seeded sampling — parse and fit their schema (the client's own chat.completions.parse reads them);
// the tokens equal the engine's with the same constraint alone; schemas and combinations the server cannot
// enforce are 400s naming the field and the keyword.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { compileJsonSchema } from '../../src/infer/structured/json-schema.js';
import { JsonConstraint, TokenVocabulary } from '../../src/infer/structured/token-mask.js';
import { tokenByteTable } from '../../src/io/token-bytes.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import type { ServerOptions } from '../../src/serve/server.js';
import { writeQuietLlamaFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-server-structured-'));
const dir = join(root, 'tiny-llama');
const TEMPLATE = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
let model: DecoderModel, tokenizer: Tokenizer;
const EOS = 256;

interface Running { server: InferenceServer; engine: ServingEngine; client: OpenAI; base: string }
const started: Running[] = [];

async function start(serverOptions: ServerOptions = {}): Promise<Running> {
  const engine = new ServingEngine(model, { maxRunning: 8, maxBatchTokens: 64, blockSize: 4 });
  const server = new InferenceServer(engine, tokenizer, { modelName: 'tiny', ...serverOptions });
  const address = await server.listen(0);
  const base = `http://127.0.0.1:${address.port}`;
  const r = { server, engine, base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }) };
  started.push(r);
  return r;
}

before(() => {
  writeQuietLlamaFolder(dir, 400, 6, TEMPLATE);
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  tokenizer = loadTokenizer(dir);
});

after(async () => {
  for (const r of started) { await r.server.close(); r.engine.dispose(); }
  rmSync(root, { recursive: true, force: true });
});

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 8 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 2 },
  },
  required: ['name', 'age', 'pets'],
  additionalProperties: false,
};

function checkPerson(text: string): void {
  const value = JSON.parse(text) as { name: string; age: number; pets: string[] };
  assert.deepEqual(Object.keys(value), ['name', 'age', 'pets'], text);
  assert.ok(typeof value.name === 'string' && [...value.name].length <= 8, text);
  assert.ok(Number.isInteger(value.age) && value.age >= 0 && value.age <= 120, text);
  assert.ok(Array.isArray(value.pets) && value.pets.length <= 2 && value.pets.every((p) => p === 'cat' || p === 'dog'), text);
}

const personFormat = { type: 'json_schema' as const, json_schema: { name: 'person', schema: PERSON, strict: true } };

test('chat with a json_schema: the answer fits the schema, ends with finish_reason stop, and equals the engine alone', async () => {
  const { client } = await start();
  const messages = [{ role: 'user' as const, content: 'Describe a person.' }];
  const answer = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 300, temperature: 0, response_format: personFormat });
  const text = answer.choices[0]!.message.content!;
  assert.equal(answer.choices[0]!.finish_reason, 'stop', text);
  checkPerson(text);
  // The engine alone with the same constraint, from the same prompt.
  const prompt = tokenizer.encode(`${tokenizer.decode([EOS])}<user>Describe a person.\n<assistant>`, { addSpecialTokens: false });
  const engine = new ServingEngine(model, { maxRunning: 1 });
  const tokens: number[] = [];
  engine.submit({
    prompt, maxTokens: 300, sampling: { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n }, stopTokenIds: [EOS],
    constraint: new JsonConstraint(compileJsonSchema(PERSON), new TokenVocabulary(tokenByteTable(tokenizer, 257)), [EOS]),
    onToken: (e) => tokens.push(e.token), onFinish: () => {},
  });
  engine.runToCompletion();
  engine.dispose();
  assert.equal(text, tokenizer.decode(tokens.filter((t) => t !== EOS)));
  assert.equal(answer.usage!.completion_tokens, tokens.length);
  // The client's own parser reads it.
  const parsed = await client.chat.completions.parse({ model: 'tiny', messages, max_tokens: 300, temperature: 0, response_format: personFormat });
  assert.deepEqual(parsed.choices[0]!.message.parsed, JSON.parse(text));
});

test('streamed, several seeded choices, and completions with json_object: every answer is valid JSON', async () => {
  const { client } = await start();
  const stream = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: 'Again.' }], max_tokens: 300, temperature: 1, seed: 7, n: 3, stream: true, response_format: personFormat,
  });
  const texts = ['', '', ''], reasons: (string | null)[] = [null, null, null];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      texts[c.index] += c.delta.content ?? '';
      if (c.finish_reason) reasons[c.index] = c.finish_reason;
    }
  }
  texts.forEach((t) => checkPerson(t));
  assert.deepEqual(reasons, ['stop', 'stop', 'stop']);
  assert.ok(new Set(texts).size > 1, 'seeded choices differ');
  const again = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Again.' }], max_tokens: 300, temperature: 1, seed: 7, n: 3, response_format: personFormat });
  assert.deepEqual(again.choices.map((c) => c.message.content), texts, 'a seed replays, streamed or not');

  const completion = await client.completions.create({ model: 'tiny', prompt: ['JSON:', 'More JSON:'], max_tokens: 300, temperature: 0.7, seed: 3, response_format: { type: 'json_object' } } as OpenAI.CompletionCreateParamsNonStreaming);
  for (const c of completion.choices) {
    if (c.finish_reason === 'stop') {
      const value = JSON.parse(c.text) as unknown;
      assert.ok(typeof value === 'object' && value !== null && !Array.isArray(value), c.text);
    } else {
      assert.equal(c.finish_reason, 'length');
      assert.ok(c.text.trimStart().startsWith('{'), c.text);
    }
  }
});

test('formats the server cannot enforce are 400s naming the field and the keyword', async () => {
  const { base } = await start();
  const post = async (body: Record<string, unknown>) => {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4, ...body }) });
    return { status: r.status, error: ((await r.json()) as { error: { message: string; param: string } }).error };
  };
  const pattern = await post({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { id: { type: 'string', pattern: '^[a-z]+$' } } } } } });
  assert.equal(pattern.status, 400);
  assert.equal(pattern.error.param, 'response_format.json_schema.schema');
  assert.match(pattern.error.message, /#\/properties\/id\/pattern: the keyword 'pattern' is not supported/);
  const type = await post({ response_format: { type: 'xml' } });
  assert.equal(type.status, 400);
  assert.equal(type.error.param, 'response_format.type');
  const name = await post({ response_format: { type: 'json_schema', json_schema: { schema: PERSON } } });
  assert.equal(name.error.param, 'response_format.json_schema.name');
  const tools = await post({ response_format: { type: 'json_object' }, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] });
  assert.equal(tools.status, 400);
  assert.equal(tools.error.param, 'response_format');
  assert.equal((await post({ response_format: { type: 'text' } })).status, 200, 'text is the default: no constraint');
});

test('with a reasoning parser the answer is constrained after </think>; a vocabulary without it is a 400', async () => {
  const { base } = await start({ reasoningParser: 'qwen3' });
  const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4, response_format: { type: 'json_object' } }) });
  assert.equal(r.status, 400);
  assert.match(((await r.json()) as { error: { message: string } }).error.message, /needs <think> and <\/think> as tokens of the vocabulary/);
});

test('vLLM\'s guided_json, guided_choice and structured_outputs: the same constraints; regex and grammar forms refused by name', async () => {
  const { base } = await start();
  const post = async (body: Record<string, unknown>, path = '/v1/completions') => {
    const r = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'Pick:', max_tokens: 300, temperature: 0, ...body }) });
    return { status: r.status, body: (await r.json()) as { choices: { text: string; finish_reason: string }[]; error: { message: string; param: string } } };
  };
  for (const guided of [PERSON, JSON.stringify(PERSON)]) {
    const r = await post({ guided_json: guided });
    assert.equal(r.status, 200);
    assert.equal(r.body.choices[0]!.finish_reason, 'stop');
    checkPerson(r.body.choices[0]!.text);
  }
  const options = ['red', 'green', 'blue', 'dark blue'];
  for (const body of [{ guided_choice: options }, { structured_outputs: { choice: options } }, { guided_choice: options, temperature: 1, seed: 3 }]) {
    const r = await post(body);
    assert.equal(r.status, 200);
    assert.ok(options.includes(r.body.choices[0]!.text), r.body.choices[0]!.text);
    assert.equal(r.body.choices[0]!.finish_reason, 'stop');
  }
  const refused = async (body: Record<string, unknown>, param: string, pattern: RegExp) => {
    const r = await post(body);
    assert.equal(r.status, 400);
    assert.equal(r.body.error.param, param);
    assert.match(r.body.error.message, pattern);
  };
  await refused({ guided_regex: '[a-z]+' }, 'guided_regex', /not supported by this server/);
  await refused({ structured_outputs: { grammar: 'root ::= "a"' } }, 'structured_outputs.grammar', /not supported/);
  await refused({ guided_json: PERSON, response_format: { type: 'json_object' } }, 'guided_json', /'response_format' and 'guided_json' both constrain the answer/);
  await refused({ guided_choice: [] }, 'guided_choice', /non-empty array of non-empty strings/);
  await refused({ guided_json: '{"type": ' }, 'guided_json', /not JSON/);
  await refused({ guided_json: { type: 'string', format: 'uri' } }, 'guided_json', /#\/format: the keyword 'format' is not supported/);
});

test('logit_bias over HTTP: +100 all but forces a token, −100 bans tokens', async () => {
  const { client } = await start();
  const forced = await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 5, temperature: 0, logit_bias: { 65: 100 } });
  assert.equal(forced.choices[0]!.text, 'AAAAA');
  // Every byte but printable ASCII banned (161 of the byte tokenizer's ids): the answer is printable ASCII.
  const banned = Object.fromEntries([...Array.from({ length: 32 }, (_, b) => b), ...Array.from({ length: 129 }, (_, i) => 127 + i)].map((b) => [b, -100]));
  for (const temperature of [0, 1]) {
    const answer = await client.completions.create({ model: 'tiny', prompt: 'The whale', max_tokens: 40, temperature, seed: 4, logit_bias: banned });
    assert.match(answer.choices[0]!.text, /^[\x20-\x7e]+$/);
  }
});
