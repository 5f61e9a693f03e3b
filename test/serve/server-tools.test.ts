// Tool calling through the HTTP server, driven by the official `openai` client: a request's tools rendered by
// the model's chat template, the model's <tool_call> blocks returned as message.tool_calls (delta.tool_calls
// when streaming) with finish_reason "tool_calls", the SDK's own runTools() loop (call, run the function,
// send its result back, get the answer) end to end, and the requests that cannot be served refused by name.
// The engine is scripted: it answers each request with given text (the tiny random model would never write a
// call), so what is tested is the server's part; the prompts it was handed are checked against the template.

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
import { ChatTemplate } from '../../src/serve/chat-template.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, GenerationRequest } from '../../src/serve/engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import type { ServedEngine, ServerOptions } from '../../src/serve/server.js';
import { parseChatBody } from '../../src/serve/validation.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-server-tools-'));
const TEMPLATE = readFileSync(join('test', 'fixtures', 'tool-template', 'template.jinja'), 'utf8');
const EOS = 256;
let model: DecoderModel, tokenizer: Tokenizer, inner: ServingEngine;

/** Answers each request with the next scripted text (then EOS), a few tokens a step; records the prompts. */
class ScriptedEngine implements ServedEngine {
  readonly prompts: number[][] = [];
  private readonly live: { id: string; request: GenerationRequest; tokens: number[] }[] = [];
  private next = 0;
  constructor(private readonly answers: string[]) {}
  get model() { return inner.model; }
  get maxLen() { return inner.maxLen; }
  get hasWork() { return this.live.length > 0; }
  stats() { return { ...inner.stats(), running: this.live.length }; }
  submit(request: GenerationRequest): string {
    this.prompts.push([...request.prompt]);
    const answer = this.answers.shift();
    assert.ok(answer !== undefined, 'a request the script has no answer for');
    const id = `s${this.next++}`;
    this.live.push({ id, request, tokens: [...tokenizer.encode(answer, { addSpecialTokens: false }), EOS] });
    return id;
  }
  cancel(id: string, reason: FinishReason = 'cancelled'): boolean {
    const i = this.live.findIndex((r) => r.id === id);
    if (i < 0) return false;
    this.live.splice(i, 1)[0]!.request.onFinish(reason);
    return true;
  }
  step(): boolean {
    for (const r of [...this.live]) {
      for (const token of r.tokens.splice(0, 3)) r.request.onToken({ token });
      if (r.tokens.length === 0 && this.live.includes(r)) {
        this.live.splice(this.live.indexOf(r), 1);
        r.request.onFinish('stop');
      }
    }
    return true;
  }
}

const started: InferenceServer[] = [];
async function serve(answers: string[], template = TEMPLATE, options: ServerOptions = {}): Promise<{ engine: ScriptedEngine; client: OpenAI; base: string }> {
  const dir = join(root, `model-${started.length}`);
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 1024 }, 5, { generationConfig: { eos_token_id: EOS, bos_token_id: EOS } });
  withTemplate(dir, template);
  const engine = new ScriptedEngine(answers);
  const server = new InferenceServer(engine, loadTokenizer(dir), { modelName: 'tiny', ...options });
  started.push(server);
  const base = `http://127.0.0.1:${(await server.listen(0)).port}`;
  return { engine, base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

function withTemplate(dir: string, template: string): void {
  const configPath = join(dir, 'tokenizer_config.json');
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), chat_template: template }));
}

before(() => {
  const dir = join(root, 'inner');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 1024 }, 5);
  withTemplate(dir, TEMPLATE);
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  tokenizer = loadTokenizer(dir);
  inner = new ServingEngine(model, { maxRunning: 1 });
});

after(async () => {
  for (const s of started) await s.close();
  inner.dispose();
  rmSync(root, { recursive: true, force: true });
});

const WEATHER_FUNCTION = { name: 'get_weather', description: 'Current weather in a city, in °C', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };
const WEATHER: OpenAI.ChatCompletionFunctionTool = { type: 'function', function: WEATHER_FUNCTION };
const CALL = 'I will look it up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>';
const USER: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Zürich?' }];

/** The prompt ids the server should hand the engine for this request body (through our template path). */
function promptOf(body: unknown): number[] {
  const chat = parseChatBody(body);
  return tokenizer.encode(new ChatTemplate(tokenizer).render(chat.messages, chat.chatTemplateKwargs, chat.toolChoice === 'none' ? [] : chat.tools), { addSpecialTokens: false });
}

test('a call comes back as message.tool_calls with finish_reason "tool_calls"; the tools were in the prompt', async () => {
  const { client, engine } = await serve([CALL, 'Sunny, 21 °C.']);
  const done = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER] });
  const choice = done.choices[0]!;
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, 'I will look it up.');
  assert.equal(choice.message.tool_calls?.length, 1);
  const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  assert.equal(call.type, 'function');
  assert.deepEqual({ name: call.function.name, args: JSON.parse(call.function.arguments) }, { name: 'get_weather', args: { city: 'Zürich' } });
  assert.deepEqual(engine.prompts[0], promptOf({ messages: USER, tools: [WEATHER] }));
  assert.ok(tokenizer.decode(engine.prompts[0]!).includes('"name": "get_weather"'), 'the tool\'s schema is in the prompt');
  // An answer without a call is plain content, finish_reason "stop", no tool_calls field.
  const plain = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER] });
  assert.deepEqual([plain.choices[0]!.message.content, plain.choices[0]!.finish_reason, plain.choices[0]!.message.tool_calls], ['Sunny, 21 °C.', 'stop', undefined]);
});

test('streaming: delta.tool_calls that the SDK\'s stream helper assembles into the same message', async () => {
  const { client } = await serve([CALL]);
  const stream = client.chat.completions.stream({ model: 'tiny', messages: USER, tools: [WEATHER] });
  const deltas: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
  stream.on('chunk', (chunk) => deltas.push(...(chunk.choices[0]?.delta.tool_calls ?? [])));
  const final = await stream.finalChatCompletion();
  const message = final.choices[0]!.message;
  assert.equal(final.choices[0]!.finish_reason, 'tool_calls');
  assert.equal(message.content, 'I will look it up.');
  assert.equal(deltas.length, 1, 'the call goes out whole, once its block closes');
  assert.equal(deltas[0]!.index, 0);
  const call = message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
  assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments)], [deltas[0]!.id, 'get_weather', { city: 'Zürich' }]);
});

test('the SDK\'s runTools() loop: the call, our function\'s result sent back as a tool turn, then the answer', async () => {
  const { client, engine } = await serve([CALL, 'It is 21 °C and sunny in Zürich.']);
  const seen: unknown[] = [];
  const runner = client.chat.completions.runTools({
    model: 'tiny', messages: USER,
    tools: [{ type: 'function', function: { ...WEATHER_FUNCTION, parse: JSON.parse, function: (args: { city: string }) => { seen.push(args); return { temp: 21, sky: 'sunny' }; } } }],
  });
  assert.equal(await runner.finalContent(), 'It is 21 °C and sunny in Zürich.');
  assert.deepEqual(seen, [{ city: 'Zürich' }]);
  // The second prompt holds the assistant's call and the tool's result as the template renders them.
  const second = tokenizer.decode(engine.prompts[1]!);
  assert.ok(second.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'), second);
  assert.ok(second.includes('<tool_response>\n{"temp":21,"sky":"sunny"}\n</tool_response>'), second);
  // The SDK sends the tool's fields in its own order, which the template's tojson keeps.
  const sent = { type: 'function', function: { name: WEATHER_FUNCTION.name, parameters: WEATHER_FUNCTION.parameters, description: WEATHER_FUNCTION.description } };
  assert.deepEqual(engine.prompts[1], promptOf({ messages: runner.messages.slice(0, 3), tools: [sent] }));
});

test('tool_choice "none" leaves the tools out of the prompt and the answer unparsed', async () => {
  const { client, engine } = await serve([CALL]);
  const done = await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER], tool_choice: 'none' });
  assert.deepEqual([done.choices[0]!.message.content, done.choices[0]!.finish_reason, done.choices[0]!.message.tool_calls], [CALL, 'stop', undefined]);
  assert.deepEqual(engine.prompts[0], promptOf({ messages: USER }));
});

test('requests that cannot be served are refused by name', async () => {
  const refused = async (base: string, body: Record<string, unknown>, param: string, pattern: RegExp) => {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: USER, ...body }) });
    const e = await r.json() as { error: { message: string; param: string } };
    assert.equal(r.status, 400, JSON.stringify(e));
    assert.equal(e.error.param, param);
    assert.match(e.error.message, pattern);
  };
  const { base } = await serve([]);
  await refused(base, { tool_choice: 'required' }, 'tool_choice', /"required" but the request has no 'tools'/);
  await refused(base, { tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_time' } } }, 'tool_choice', /names the function 'get_time', which 'tools' does not list/);
  await refused(base, { tools: [WEATHER], tool_choice: { type: 'function', name: 'get_weather' } }, 'tool_choice', /expected \{"type": "function", "function": \{"name"/);
  await refused(base, { tool_choice: 'auto' }, 'tool_choice', /no 'tools'/);
  await refused(base, { tools: [{ type: 'function', function: { name: 'get weather' } }] }, 'tools[0].function.name', /letters, digits/);
  await refused(base, { tools: [WEATHER, WEATHER] }, 'tools', /'get_weather' twice/);
  const { base: llama3 } = await serve([], TEMPLATE, { toolCallParser: 'llama3_json' });
  await refused(llama3, { tools: [{ ...WEATHER, function: { ...WEATHER.function, strict: true } }] }, 'tools[0].function.strict', /strict arguments are held to their schema once the model opens a <tool_call> block \(hermes syntax\), but this model's calls are llama3_json/);
  await refused(base, { tools: [WEATHER], parallel_tool_calls: false }, 'parallel_tool_calls', /not supported/);
  const call = { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": ' } };
  await refused(base, { messages: [...USER, { role: 'assistant', content: null, tool_calls: [call] }] }, 'messages[1].tool_calls[0].function.arguments', /is not JSON/);
  await refused(base, { messages: [...USER, { role: 'tool', content: '21' }] }, 'messages[1].tool_call_id', /names the call it answers/);
  await refused(base, { messages: [{ role: 'user', content: 'x', tool_calls: [] }] }, 'messages[0].tool_calls', /only allowed on an assistant message/);
  // A template that never reads `tools`: the model could not know them.
  const { base: plain } = await serve([], '{% for m in messages %}{{ m.content }}{% endfor %}');
  await refused(plain, { tools: [WEATHER] }, 'tools', /does not use 'tools'/);
  // A template that takes tools but shows no call syntax needs the option.
  const { base: unknown } = await serve([], '{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}');
  await refused(unknown, { tools: [WEATHER] }, 'tools', /--tool-call-parser hermes/);
  // --chat-template: a model whose own template has no tools served with one that does.
  const { client: overridden } = await serve([CALL], '{% for m in messages %}{{ m.content }}{% endfor %}', { chatTemplate: { text: TEMPLATE, source: 'tools.jinja' } });
  assert.equal((await overridden.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER] })).choices[0]!.finish_reason, 'tool_calls');
  // With the option, the same server parses calls.
  const { client } = await serve([CALL], '{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}', { toolCallParser: 'hermes' });
  assert.equal((await client.chat.completions.create({ model: 'tiny', messages: USER, tools: [WEATHER] })).choices[0]!.finish_reason, 'tool_calls');
});
