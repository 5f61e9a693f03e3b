// Request bodies of the OpenAI-compatible API, checked field by field. Every problem is an ApiError with
// the HTTP status and OpenAI's error body: {"error": {"message", "type", "param", "code"}} — the message
// names the field, the value's kind and what was expected.

import { FuseformerError } from '../errors.js';
import { alternatives, anyJsonObject, compileJsonSchema, SchemaError, textLiteral } from '../infer/structured/json-schema.js';
import type { GrammarNode } from '../infer/structured/json-schema.js';
import { MAX_LOGPROBS } from './engine.js';
import { REPETITION_PENALTY_RANGE } from '../infer/sampling.js';

export class ApiError extends FuseformerError {
  constructor(readonly status: number, message: string, readonly type = 'invalid_request_error', readonly param: string | null = null, readonly code: string | null = null) {
    super(message);
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/**
 * A chat message as chat templates take it (transformers' convention): an assistant's tool calls with their
 * arguments as objects (the API's JSON text parsed), a tool result with the id of the call it answers.
 * content is null only where the request had it null (an assistant message of tool calls).
 */
export interface ChatMessage {
  readonly role: string;
  readonly content: string | null;
  readonly name?: string;
  readonly tool_calls?: readonly TemplateToolCall[];
  readonly tool_call_id?: string;
  /** An earlier answer's reasoning (Qwen3's template renders it for turns after the last query). */
  readonly reasoning_content?: string;
}

export interface TemplateToolCall {
  readonly id: string;
  readonly type: 'function';
  readonly function: { readonly name: string; readonly arguments: Readonly<Record<string, unknown>> };
}

/** A function the model may call (OpenAI's {"type": "function", "function": {...}}), passed to the template as given. */
export interface ToolDefinition {
  readonly type: 'function';
  readonly function: { readonly name: string; readonly description?: string; readonly parameters?: Readonly<Record<string, unknown>>; readonly strict?: boolean };
}

/** none: the tools are left out of the prompt and no call is looked for; auto: the model decides. */
/** "required": some call of the tools; {name}: a call of that function (both forced by constrained decoding). */
export type ToolChoice = 'none' | 'auto' | 'required' | { readonly name: string };

/** The fields both endpoints share, checked (absent fields stay undefined: defaults come later). */
export interface CommonParams {
  readonly model?: string;
  readonly maxTokens?: number;
  readonly temperature?: number;
  readonly topP?: number;
  readonly topK?: number;
  readonly seed?: number;
  /** HF-style repetition penalty (a vLLM extension of the API; 1 = off). */
  readonly repetitionPenalty?: number;
  /** OpenAI's frequency_penalty / presence_penalty in [−2, 2] (absent: 0, off). */
  readonly frequencyPenalty?: number;
  readonly presencePenalty?: number;
  /** Choices per request (each its own engine request; seeds seed, seed + 1, …). */
  readonly n: number;
  readonly stop: string[];
  /** vLLM's extensions: more token ids that end the answer, and ignoring the model's own (EOS) ones. */
  readonly stopTokenIds: number[];
  readonly ignoreEos: boolean;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** Top alternatives per token (0 = none); `logprobs` asked at all. */
  readonly topLogprobs: number;
  readonly logprobs: boolean;
  /** Structured outputs (response_format json_object / json_schema): the grammar every choice is held to. */
  readonly responseFormat?: ResponseFormat;
  /** logit_bias as [token, bias] pairs (bias in [−100, 100]; the ids checked against the vocabulary by the server). */
  readonly logitBias: [number, number][];
}

/** A response_format that constrains the answer: its kind, and its grammar (json-schema.ts) compiled once for all choices. */
export interface ResponseFormat {
  readonly type: 'json_object' | 'json_schema' | 'choice';
  readonly grammar: GrammarNode;
}

export interface CompletionParams extends CommonParams {
  /** One or more prompts, each as text or token ids; each gets n choices. */
  readonly prompts: (string | number[])[];
  /** The prompt sent back in front of each choice's text. */
  readonly echo: boolean;
}
export interface ChatParams extends CommonParams {
  readonly messages: ChatMessage[];
  /** Extra variables for the chat template (vLLM's chat_template_kwargs, e.g. Qwen3's enable_thinking). */
  readonly chatTemplateKwargs: Readonly<Record<string, unknown>>;
  /** The functions the model may call (empty: none). */
  readonly tools: readonly ToolDefinition[];
  readonly toolChoice: ToolChoice;
}

/** Choices a request may ask for at most. */
export const MAX_CHOICES = 16;

/** Template variables a request may not set through chat_template_kwargs: the server sets them. */
const RESERVED_TEMPLATE_VARIABLES = ['messages', 'add_generation_prompt', 'tools'];

const bad = (param: string, message: string) => new ApiError(400, message, 'invalid_request_error', param);

function describe(v: unknown): string {
  if (v === undefined) return 'missing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  if (typeof v === 'string') return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v)}`;
  return `${typeof v} ${String(v)}`;
}

function body(raw: unknown): Record<string, unknown> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ApiError(400, `the request body is ${describe(raw)}; expected a JSON object`);
  return raw as Record<string, unknown>;
}

function number(o: Record<string, unknown>, key: string, ok: (x: number) => boolean, expected: string): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !ok(v)) throw bad(key, `'${key}' is ${describe(v)}; expected ${expected}`);
  return v;
}

function boolean(o: Record<string, unknown>, key: string): boolean {
  const v = o[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw bad(key, `'${key}' is ${describe(v)}; expected true or false`);
  return v;
}

function common(o: Record<string, unknown>): Omit<CommonParams, 'topLogprobs' | 'logprobs'> {
  const model = o['model'];
  if (model !== undefined && typeof model !== 'string') throw bad('model', `'model' is ${describe(model)}; expected a string`);
  const n = number(o, 'n', (x) => Number.isSafeInteger(x) && x >= 1 && x <= MAX_CHOICES, `an integer in [1, ${MAX_CHOICES}] (choices per request)`) ?? 1;
  const maxTokensField = number(o, 'max_tokens', (x) => Number.isSafeInteger(x) && x >= 1, 'an integer >= 1');
  const maxCompletionTokens = number(o, 'max_completion_tokens', (x) => Number.isSafeInteger(x) && x >= 1, 'an integer >= 1');
  if (maxTokensField !== undefined && maxCompletionTokens !== undefined && maxTokensField !== maxCompletionTokens) {
    throw bad('max_completion_tokens', `'max_tokens' (${maxTokensField}) and 'max_completion_tokens' (${maxCompletionTokens}) disagree; give one of them`);
  }
  const maxTokens = maxTokensField ?? maxCompletionTokens;
  const temperature = number(o, 'temperature', (x) => Number.isFinite(x) && x >= 0 && x <= 2, 'a number in [0, 2]');
  const topP = number(o, 'top_p', (x) => x > 0 && x <= 1, 'a number in (0, 1]');
  const topKRaw = number(o, 'top_k', (x) => Number.isSafeInteger(x) && x >= -1, 'an integer >= 0 (0 or -1 = off)');
  // Any u64 (JSON numbers past 2^53 arrive rounded to a double, as in every JavaScript or Python client).
  const seed = number(o, 'seed', (x) => Number.isInteger(x) && x >= 0 && x < 2 ** 64, 'an integer in [0, 2^64)');
  const repetitionPenalty = number(o, 'repetition_penalty', (x) => x >= REPETITION_PENALTY_RANGE[0] && x <= REPETITION_PENALTY_RANGE[1], `a number in [${REPETITION_PENALTY_RANGE.join(', ')}] (1 = off)`);
  const frequencyPenalty = number(o, 'frequency_penalty', (x) => x >= -2 && x <= 2, 'a number in [-2, 2] (0 = off)');
  const presencePenalty = number(o, 'presence_penalty', (x) => x >= -2 && x <= 2, 'a number in [-2, 2] (0 = off)');
  refuseUnsupported(o);
  const stopRaw = o['stop'];
  let stop: string[] = [];
  if (typeof stopRaw === 'string') stop = [stopRaw];
  else if (Array.isArray(stopRaw)) stop = stopRaw as string[];
  else if (stopRaw !== undefined && stopRaw !== null) throw bad('stop', `'stop' is ${describe(stopRaw)}; expected a string or an array of up to 4 strings`);
  if (stop.length > 4 || stop.some((s) => typeof s !== 'string' || s.length === 0)) throw bad('stop', `'stop' must hold up to 4 non-empty strings, got ${JSON.stringify(stopRaw).slice(0, 80)}`);
  const stopIdsRaw = o['stop_token_ids'] ?? [];
  if (!Array.isArray(stopIdsRaw) || stopIdsRaw.some((t) => typeof t !== 'number' || !Number.isSafeInteger(t) || t < 0)) {
    throw bad('stop_token_ids', `'stop_token_ids' is ${describe(stopIdsRaw)}; expected an array of token ids (integers >= 0)`);
  }
  const ignoreEos = boolean(o, 'ignore_eos');
  const stream = boolean(o, 'stream');
  const streamOptions = o['stream_options'];
  if (streamOptions !== undefined && streamOptions !== null && (typeof streamOptions !== 'object' || Array.isArray(streamOptions))) throw bad('stream_options', `'stream_options' is ${describe(streamOptions)}; expected an object`);
  if (streamOptions !== undefined && streamOptions !== null && !stream) throw bad('stream_options', `'stream_options' is only allowed when 'stream' is true`);
  const includeUsage = streamOptions ? boolean(streamOptions as Record<string, unknown>, 'include_usage') : false;
  return {
    ...(model !== undefined ? { model } : {}), ...(maxTokens !== undefined ? { maxTokens } : {}), ...(temperature !== undefined ? { temperature } : {}),
    ...(topP !== undefined ? { topP } : {}), ...(topKRaw !== undefined ? { topK: Math.max(0, topKRaw) } : {}), ...(seed !== undefined ? { seed } : {}),
    ...(repetitionPenalty !== undefined ? { repetitionPenalty } : {}),
    ...(frequencyPenalty ? { frequencyPenalty } : {}), ...(presencePenalty ? { presencePenalty } : {}),
    n, stop, stopTokenIds: stopIdsRaw as number[], ignoreEos, stream, includeUsage, ...structuredOutputOf(o), logitBias: logitBiasOf(o['logit_bias']),
  };
}

/**
 * OpenAI fields this server does not implement, with the values that ask for nothing (what it does anyway).
 * Any other value would silently give a different answer than asked for, so it is refused by name; fields
 * outside the API (other servers' extensions) are ignored.
 */
const UNSUPPORTED: readonly { key: string; inert: (v: unknown) => boolean; expected?: [(v: unknown) => boolean, string] }[] = [
  { key: 'best_of', inert: (v) => v === 1 },
  { key: 'suffix', inert: (v) => v === '' },
  { key: 'functions', inert: (v) => Array.isArray(v) && v.length === 0 },
  { key: 'function_call', inert: (v) => v === 'none' },
  // Several calls in one answer are what a model may write; keeping it to one would need constrained decoding.
  { key: 'parallel_tool_calls', inert: (v) => v === true },
];

/**
 * response_format: {"type": "text"} (the default: no constraint), {"type": "json_object"} (any JSON object), or
 * {"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}} — the schema compiled
 * here, so a schema the grammar cannot enforce is this request's 400 naming the keyword and its path.
 */
/** OpenAI's logit_bias: {"token id": bias} with biases in [−100, 100] (−100 bans a token, 100 all but forces it). */
function logitBiasOf(v: unknown): [number, number][] {
  if (v === undefined || v === null) return [];
  if (typeof v !== 'object' || Array.isArray(v)) throw bad('logit_bias', `'logit_bias' is ${describe(v)}; expected an object of {"token id": bias}`);
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > MAX_LOGIT_BIAS) throw bad('logit_bias', `'logit_bias' lists ${entries.length} tokens; at most ${MAX_LOGIT_BIAS}`);
  return entries.map(([key, bias]) => {
    if (!/^(0|[1-9][0-9]{0,9})$/.test(key)) throw bad('logit_bias', `'logit_bias' has the key ${JSON.stringify(key)}; keys are token ids (non-negative integers)`);
    if (typeof bias !== 'number' || !(bias >= -100 && bias <= 100)) throw bad('logit_bias', `'logit_bias["${key}"]' is ${describe(bias)}; expected a number in [-100, 100]`);
    return [Number(key), bias];
  });
}

/** logit_bias entries a request may give (OpenAI's own limit). */
const MAX_LOGIT_BIAS = 300;

/**
 * The constraint a request asks for: OpenAI's response_format, or vLLM's extensions — guided_json (a schema, as an
 * object or JSON text), guided_choice (the answer exactly one of these strings), or the same as
 * structured_outputs {json | choice} — one of them at most. vLLM's regex and grammar forms are refused by name:
 * ignored, they would give an unconstrained answer to a request that asked for a constrained one.
 */
function structuredOutputOf(o: Record<string, unknown>): { responseFormat?: ResponseFormat } {
  const structured = o['structured_outputs'];
  if (structured !== undefined && structured !== null && (typeof structured !== 'object' || Array.isArray(structured))) throw bad('structured_outputs', `'structured_outputs' is ${describe(structured)}; expected an object such as {"json": {...}} or {"choice": [...]}`);
  const so = (structured ?? {}) as Record<string, unknown>;
  const given: [string, unknown][] = [['response_format', o['response_format']], ['guided_json', o['guided_json']], ['guided_choice', o['guided_choice']],
    ['structured_outputs.json', so['json']], ['structured_outputs.choice', so['choice']]];
  for (const key of ['guided_regex', 'guided_grammar', 'structured_outputs.regex', 'structured_outputs.grammar', 'structured_outputs.structural_tag']) {
    const v = key.startsWith('structured_outputs.') ? so[key.slice('structured_outputs.'.length)] : o[key];
    if (v !== undefined && v !== null) throw new ApiError(400, `'${key}' is not supported by this server (JSON schemas and choices are: response_format, guided_json, guided_choice)`, 'invalid_request_error', key, 'unsupported_parameter');
  }
  const asked = given.filter(([key, v]) => v !== undefined && v !== null && !(key === 'response_format' && (v as Record<string, unknown>)?.['type'] === 'text'));
  if (asked.length > 1) throw bad(asked[1]![0], `'${asked[0]![0]}' and '${asked[1]![0]}' both constrain the answer; give one`);
  const [key, v] = asked[0] ?? given[0]!;
  if (key === 'response_format') return responseFormatOf(v);
  if (key.endsWith('choice')) {
    if (!Array.isArray(v) || v.length === 0 || v.some((c) => typeof c !== 'string' || c === '')) throw bad(key, `'${key}' is ${describe(v)}; expected a non-empty array of non-empty strings`);
    const options = (v as string[]).map((c) => textLiteral(c));
    return { responseFormat: { type: 'choice', grammar: { kind: 'sequence', parts: [alternatives(options)] } } };
  }
  let schema = v;
  if (typeof v === 'string') {
    try { schema = JSON.parse(v); } catch { throw bad(key, `'${key}' is a string that is not JSON; expected a JSON Schema (an object, or its JSON text)`); }
  }
  return { responseFormat: { type: 'json_schema', grammar: schemaGrammar(schema, key) } };
}

function schemaGrammar(schema: unknown, param: string): GrammarNode {
  try {
    return compileJsonSchema(schema);
  } catch (e) {
    if (e instanceof SchemaError) throw bad(param, `'${param}' ${e.message.startsWith('#:') ? e.message.slice(3) : `at ${e.message}`}`);
    throw e;
  }
}

function responseFormatOf(v: unknown): { responseFormat?: ResponseFormat } {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw bad('response_format', `'response_format' is ${describe(v)}; expected an object such as {"type": "json_object"}`);
  const o = v as Record<string, unknown>, type = o['type'];
  if (type === 'text') return {};
  if (type === 'json_object') return { responseFormat: { type, grammar: anyJsonObject() } };
  if (type !== 'json_schema') throw bad('response_format.type', `'response_format.type' is ${describe(type)}; expected "text", "json_object" or "json_schema"`);
  const spec = o['json_schema'];
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) throw bad('response_format.json_schema', `'response_format.json_schema' is ${describe(spec)}; expected an object with "name" and "schema"`);
  const j = spec as Record<string, unknown>;
  if (typeof j['name'] !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(j['name'])) throw bad('response_format.json_schema.name', `'response_format.json_schema.name' is ${describe(j['name'])}; expected a name of up to 64 letters, digits, '_' or '-'`);
  if (j['strict'] !== undefined && j['strict'] !== null && typeof j['strict'] !== 'boolean') throw bad('response_format.json_schema.strict', `'response_format.json_schema.strict' is ${describe(j['strict'])}; expected true or false`);
  if (j['schema'] === undefined) return { responseFormat: { type, grammar: anyJsonObject() } }; // OpenAI: no schema, any JSON object
  return { responseFormat: { type, grammar: schemaGrammar(j['schema'], 'response_format.json_schema.schema') } };
}

/** The completions endpoint has no tools (chat's are parsed by parseTools); chat has no echo (completions' is parsed there). */
const CHAT_UNSUPPORTED: typeof UNSUPPORTED = [{ key: 'echo', inert: (v) => v === false }];
const COMPLETION_UNSUPPORTED: typeof UNSUPPORTED = [
  { key: 'tools', inert: (v) => Array.isArray(v) && v.length === 0 },
  { key: 'tool_choice', inert: (v) => v === 'none' },
];

function refuseUnsupported(o: Record<string, unknown>, fields = UNSUPPORTED): void {
  const user = o['user'];
  if (user !== undefined && user !== null && typeof user !== 'string') throw bad('user', `'user' is ${describe(user)}; expected a string`);
  for (const { key, inert, expected } of fields) {
    const v = o[key];
    if (v === undefined || v === null) continue;
    if (expected && !expected[0](v)) throw bad(key, `'${key}' is ${describe(v)}; expected ${expected[1]}`);
    if (!inert(v)) throw new ApiError(400, `'${key}' is not supported by this server (got ${JSON.stringify(v).slice(0, 60)}); leave it out`, 'invalid_request_error', key, 'unsupported_parameter');
  }
}

export function parseCompletionBody(raw: unknown): CompletionParams {
  const o = body(raw);
  const prompts = completionPrompts(o['prompt']);
  const topLogprobs = number(o, 'logprobs', (x) => Number.isSafeInteger(x) && x >= 0 && x <= MAX_LOGPROBS, `an integer in [0, ${MAX_LOGPROBS}]`);
  refuseUnsupported(o, COMPLETION_UNSUPPORTED);
  const echo = boolean(o, 'echo');
  // The prompt's own log-probabilities are not computed (the engine scores the positions it generates).
  if (echo && topLogprobs !== undefined) throw new ApiError(400, `'echo' with 'logprobs' would need the prompt's log-probabilities, which this server does not compute; ask for one of them`, 'invalid_request_error', 'echo', 'unsupported_parameter');
  const params = common(o);
  if (prompts.length * params.n > MAX_PROMPT_CHOICES) throw bad('prompt', `${prompts.length} prompts × n ${params.n} = ${prompts.length * params.n} choices; at most ${MAX_PROMPT_CHOICES} a request`);
  return { ...params, prompts, echo, logprobs: topLogprobs !== undefined, topLogprobs: topLogprobs ?? 0 };
}

/** Choices a completions request may make at most, over all its prompts. */
export const MAX_PROMPT_CHOICES = 64;

/**
 * A completions request's prompts (OpenAI's four forms): a string, an array of token ids, an array of strings, or an
 * array of arrays of token ids — each prompt one choice (n choices).
 */
function completionPrompts(prompt: unknown): (string | number[])[] {
  const isId = (t: unknown) => typeof t === 'number' && Number.isSafeInteger(t) && t >= 0;
  const expected = 'expected a string, a non-empty array of token ids, or an array of either';
  if (typeof prompt === 'string') return [nonEmpty(prompt, 'prompt')];
  if (!Array.isArray(prompt) || prompt.length === 0) throw bad('prompt', `'prompt' is ${describe(prompt)}; ${expected}`);
  if (prompt.some((t) => typeof t === 'number')) {
    const i = prompt.findIndex((t) => !isId(t));
    if (i >= 0) throw bad('prompt', `'prompt[${i}]' is ${describe(prompt[i])}; a prompt of token ids holds integers >= 0`);
    return [prompt as number[]];
  }
  return prompt.map((p: unknown, i) => {
    if (typeof p === 'string') return nonEmpty(p, `prompt[${i}]`);
    if (Array.isArray(p) && p.length > 0) {
      const j = p.findIndex((t) => !isId(t));
      if (j >= 0) throw bad('prompt', `'prompt[${i}][${j}]' is ${describe(p[j])}; a prompt of token ids holds integers >= 0`);
      return p as number[];
    }
    throw bad('prompt', `'prompt[${i}]' is ${describe(p)}; ${expected}`);
  });
}

function nonEmpty(text: string, at: string): string {
  if (text.length === 0) throw bad('prompt', `'${at}' is empty; give some text`);
  return text;
}

export function parseChatBody(raw: unknown): ChatParams {
  const o = body(raw);
  const messages = o['messages'];
  if (!Array.isArray(messages) || messages.length === 0) throw bad('messages', `'messages' is ${describe(messages)}; expected a non-empty array of {role, content}`);
  const checked = messages.map(chatMessage);
  const logprobs = boolean(o, 'logprobs');
  const top = number(o, 'top_logprobs', (x) => Number.isSafeInteger(x) && x >= 0 && x <= MAX_LOGPROBS, `an integer in [0, ${MAX_LOGPROBS}]`);
  if (top !== undefined && top > 0 && !logprobs) throw bad('top_logprobs', `'top_logprobs' needs 'logprobs': true`);
  const kwargs = o['chat_template_kwargs'] ?? {};
  if (typeof kwargs !== 'object' || kwargs === null || Array.isArray(kwargs)) throw bad('chat_template_kwargs', `'chat_template_kwargs' is ${describe(kwargs)}; expected an object of template variables (e.g. {"enable_thinking": false})`);
  const reserved = Object.keys(kwargs).find((k) => RESERVED_TEMPLATE_VARIABLES.includes(k));
  if (reserved !== undefined) throw bad(`chat_template_kwargs.${reserved}`, `'chat_template_kwargs.${reserved}' is set by the server; leave it out`);
  refuseUnsupported(o, CHAT_UNSUPPORTED);
  const { tools, toolChoice } = parseTools(o);
  return { ...common(o), messages: checked, chatTemplateKwargs: kwargs as Record<string, unknown>, tools, toolChoice, logprobs, topLogprobs: top ?? 0 };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Text content: a string, or an array of {type: "text", text} parts joined. */
function textContent(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (Array.isArray(content) && content.every((p) => isObject(p) && p['type'] === 'text' && typeof p['text'] === 'string')) {
    return (content as { text: string }[]).map((p) => p.text).join('');
  }
  return undefined;
}

function chatMessage(m: unknown, i: number): ChatMessage {
  const at = `messages[${i}]`;
  if (!isObject(m)) throw bad(at, `'${at}' is ${describe(m)}; expected an object {role, content}`);
  const { role, content, name, tool_calls: toolCalls, tool_call_id: toolCallId, reasoning_content: reasoning } = m;
  if (typeof role !== 'string' || !['system', 'developer', 'user', 'assistant', 'tool'].includes(role)) throw bad(`${at}.role`, `'${at}.role' is ${describe(role)}; expected system, developer, user, assistant or tool`);
  if (name !== undefined && name !== null && typeof name !== 'string') throw bad(`${at}.name`, `'${at}.name' is ${describe(name)}; expected a string`);
  const text = textContent(content);
  const calls = role === 'assistant' && toolCalls !== undefined && toolCalls !== null ? messageToolCalls(toolCalls, `${at}.tool_calls`) : undefined;
  if (role !== 'assistant' && toolCalls !== undefined && toolCalls !== null) throw bad(`${at}.tool_calls`, `'${at}.tool_calls' is only allowed on an assistant message (this one is ${role})`);
  // An assistant message may leave content out (null), its tool calls or an empty turn being the message.
  if (text === undefined && !((content === null || content === undefined) && role === 'assistant')) {
    throw bad(`${at}.content`, `'${at}.content' is ${describe(content)}; expected a string or an array of {type: "text", text} parts`);
  }
  if (role === 'tool' && typeof toolCallId !== 'string') throw bad(`${at}.tool_call_id`, `'${at}.tool_call_id' is ${describe(toolCallId)}; a tool message names the call it answers (a string)`);
  if (role !== 'tool' && toolCallId !== undefined && toolCallId !== null) throw bad(`${at}.tool_call_id`, `'${at}.tool_call_id' is only allowed on a tool message (this one is ${role})`);
  if (reasoning !== undefined && reasoning !== null && (role !== 'assistant' || typeof reasoning !== 'string')) throw bad(`${at}.reasoning_content`, `'${at}.reasoning_content' is ${describe(reasoning)}; expected a string, on an assistant message`);
  return {
    role, content: text ?? (calls ? null : ''),
    ...(typeof name === 'string' ? { name } : {}), ...(calls ? { tool_calls: calls } : {}),
    ...(typeof toolCallId === 'string' ? { tool_call_id: toolCallId } : {}), ...(typeof reasoning === 'string' ? { reasoning_content: reasoning } : {}),
  };
}

/** An assistant message's tool_calls: [{id, type: "function", function: {name, arguments: JSON text}}], arguments parsed. */
function messageToolCalls(raw: unknown, at: string): TemplateToolCall[] {
  if (!Array.isArray(raw)) throw bad(at, `'${at}' is ${describe(raw)}; expected an array of {id, type: "function", function: {name, arguments}}`);
  return raw.map((c: unknown, j): TemplateToolCall => {
    const here = `${at}[${j}]`;
    if (!isObject(c)) throw bad(here, `'${here}' is ${describe(c)}; expected {id, type: "function", function: {name, arguments}}`);
    if (typeof c['id'] !== 'string') throw bad(`${here}.id`, `'${here}.id' is ${describe(c['id'])}; expected a string`);
    if (c['type'] !== 'function') throw bad(`${here}.type`, `'${here}.type' is ${describe(c['type'])}; expected "function"`);
    const f = c['function'];
    if (!isObject(f) || typeof f['name'] !== 'string') throw bad(`${here}.function`, `'${here}.function' is ${describe(f)}; expected {name, arguments}`);
    const args = f['arguments'];
    if (typeof args !== 'string') throw bad(`${here}.function.arguments`, `'${here}.function.arguments' is ${describe(args)}; expected a string of JSON`);
    let parsed: unknown;
    try { parsed = args.trim() === '' ? {} : JSON.parse(args); } catch (error) {
      throw bad(`${here}.function.arguments`, `'${here}.function.arguments' is not JSON (${(error as Error).message}): ${JSON.stringify(args.slice(0, 60))}`);
    }
    if (!isObject(parsed)) throw bad(`${here}.function.arguments`, `'${here}.function.arguments' is JSON of ${describe(parsed)}; expected a JSON object`);
    return { id: c['id'], type: 'function', function: { name: f['name'], arguments: parsed } };
  });
}

/** OpenAI's function names: letters, digits, '_' and '-', at most 64. */
const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * tools: [{type: "function", function: {name, description?, parameters?, strict?}}], names unique;
 * tool_choice: "none", "auto" (the default with tools), "required" or {type: "function", function: {name}} (a
 * call forced by constrained decoding, its arguments held to the function's parameters). strict: true holds a
 * call's arguments to its parameters (server.ts: with "auto", once the model opens a call).
 */
function parseTools(o: Record<string, unknown>): { tools: ToolDefinition[]; toolChoice: ToolChoice } {
  const raw = o['tools'];
  let tools: ToolDefinition[] = [];
  if (raw !== undefined && raw !== null) {
    if (!Array.isArray(raw)) throw bad('tools', `'tools' is ${describe(raw)}; expected an array of {type: "function", function: {name, description, parameters}}`);
    tools = raw.map((t: unknown, i): ToolDefinition => {
      const at = `tools[${i}]`;
      if (!isObject(t) || t['type'] !== 'function') throw bad(at, `'${at}' is ${describe(t)}; expected {type: "function", function: {...}}`);
      const f = t['function'];
      if (!isObject(f)) throw bad(`${at}.function`, `'${at}.function' is ${describe(f)}; expected {name, description, parameters}`);
      if (typeof f['name'] !== 'string' || !FUNCTION_NAME.test(f['name'])) throw bad(`${at}.function.name`, `'${at}.function.name' is ${describe(f['name'])}; expected 1 to 64 letters, digits, '_' or '-'`);
      if (f['description'] !== undefined && f['description'] !== null && typeof f['description'] !== 'string') throw bad(`${at}.function.description`, `'${at}.function.description' is ${describe(f['description'])}; expected a string`);
      if (f['parameters'] !== undefined && f['parameters'] !== null && !isObject(f['parameters'])) throw bad(`${at}.function.parameters`, `'${at}.function.parameters' is ${describe(f['parameters'])}; expected a JSON Schema object`);
      return t as unknown as ToolDefinition;
    });
    const names = tools.map((t) => t.function.name), twice = names.find((n, i) => names.indexOf(n) !== i);
    if (twice !== undefined) throw bad('tools', `'tools' names the function '${twice}' twice`);
  }
  const choice = o['tool_choice'] ?? (tools.length > 0 ? 'auto' : 'none');
  let toolChoice: ToolChoice;
  if (choice === 'none' || choice === 'auto' || choice === 'required') {
    if (choice !== 'none' && tools.length === 0) throw bad('tool_choice', `'tool_choice' is "${choice}" but the request has no 'tools'`);
    toolChoice = choice;
  } else if (isObject(choice)) {
    const name = isObject(choice['function']) ? choice['function']['name'] : undefined;
    if (choice['type'] !== 'function' || typeof name !== 'string') throw bad('tool_choice', `'tool_choice' is ${JSON.stringify(choice).slice(0, 80)}; expected {"type": "function", "function": {"name": ...}}`);
    if (!tools.some((t) => t.function.name === name)) throw bad('tool_choice', `'tool_choice' names the function '${name}', which 'tools' does not list`);
    toolChoice = { name };
  } else {
    throw bad('tool_choice', `'tool_choice' is ${describe(choice)}; expected "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`);
  }
  return { tools, toolChoice };
}

export interface EmbeddingParams {
  readonly model?: string;
  /** Texts, or token-id arrays, in the request's order. */
  readonly inputs: (string | number[])[];
  readonly encodingFormat: 'float' | 'base64';
  readonly dimensions?: number;
  /** One of the model's named prompts, put before each text (an extension, as text-embeddings-inference has it). */
  readonly promptName?: string;
}

/** OpenAI's limit on inputs in one embeddings request. */
export const MAX_EMBEDDING_INPUTS = 2048;

/**
 * An embeddings request: `input` a string, an array of strings, an array of token ids, or an array of such
 * arrays (OpenAI's four forms); `encoding_format` float or base64 (little-endian f32); `dimensions`.
 */
export function parseEmbeddingBody(raw: unknown): EmbeddingParams {
  const o = body(raw);
  const model = o['model'];
  if (model !== undefined && typeof model !== 'string') throw bad('model', `'model' is ${describe(model)}; expected a string`);
  const user = o['user'];
  if (user !== undefined && user !== null && typeof user !== 'string') throw bad('user', `'user' is ${describe(user)}; expected a string`);
  const input = o['input'];
  const isIds = (x: unknown): x is number[] => Array.isArray(x) && x.length > 0 && x.every((t) => typeof t === 'number' && Number.isSafeInteger(t) && t >= 0);
  let inputs: (string | number[])[];
  if (typeof input === 'string') inputs = [input];
  else if (isIds(input)) inputs = [input];
  else if (Array.isArray(input) && input.length > 0) {
    inputs = input.map((x: unknown, i) => {
      if (typeof x === 'string' || isIds(x)) return x;
      throw bad('input', `'input[${i}]' is ${describe(x)}; expected a string or a non-empty array of token ids (integers >= 0)`);
    });
  } else throw bad('input', `'input' is ${describe(input)}; expected a string, an array of strings, or token ids`);
  if (inputs.length > MAX_EMBEDDING_INPUTS) throw bad('input', `'input' holds ${inputs.length} inputs; at most ${MAX_EMBEDDING_INPUTS} a request`);
  const empty = inputs.findIndex((x) => x.length === 0);
  if (empty >= 0) throw bad('input', `'input${inputs.length > 1 || Array.isArray(input) ? `[${empty}]` : ''}' is an empty string; give some text`);
  const format = o['encoding_format'] ?? 'float';
  if (format !== 'float' && format !== 'base64') throw bad('encoding_format', `'encoding_format' is ${describe(format)}; expected "float" or "base64"`);
  const dimensions = number(o, 'dimensions', (x) => Number.isSafeInteger(x) && x >= 1, 'an integer >= 1');
  // text-embeddings-inference's extension: one of the model's named prompts (sentence-transformers' prompts).
  const promptName = o['prompt_name'];
  if (promptName !== undefined && promptName !== null && typeof promptName !== 'string') throw bad('prompt_name', `'prompt_name' is ${describe(promptName)}; expected a string`);
  return {
    ...(model !== undefined ? { model } : {}), inputs, encodingFormat: format, ...(dimensions !== undefined ? { dimensions } : {}),
    ...(typeof promptName === 'string' ? { promptName } : {}),
  };
}

/** POST /tokenize (vLLM's): a prompt, or chat messages rendered by the template; special tokens as the request says. */
export type TokenizeParams =
  | { readonly model?: string; readonly prompt: string; readonly addSpecialTokens: boolean }
  | { readonly model?: string; readonly chat: ChatParams; readonly addGenerationPrompt: boolean; readonly addSpecialTokens: boolean };

export function parseTokenizeBody(raw: unknown): TokenizeParams {
  const o = body(raw);
  const model = o['model'];
  if (model !== undefined && typeof model !== 'string') throw bad('model', `'model' is ${describe(model)}; expected a string`);
  const named = model !== undefined ? { model } : {};
  if (o['prompt'] !== undefined && o['messages'] !== undefined) throw bad('messages', `give 'prompt' or 'messages', not both`);
  if (o['messages'] !== undefined) {
    const addGenerationPrompt = o['add_generation_prompt'] === undefined ? true : boolean(o, 'add_generation_prompt');
    // The template has the special tokens: none are added again unless asked for.
    return { ...named, chat: parseChatBody(o), addGenerationPrompt, addSpecialTokens: boolean(o, 'add_special_tokens') };
  }
  const prompt = o['prompt'];
  if (typeof prompt !== 'string') throw bad('prompt', `'prompt' is ${describe(prompt)}; expected a string (or give 'messages')`);
  return { ...named, prompt, addSpecialTokens: o['add_special_tokens'] === undefined ? true : boolean(o, 'add_special_tokens') };
}

/** POST /detokenize (vLLM's): token ids back to text. */
export function parseDetokenizeBody(raw: unknown): { readonly model?: string; readonly tokens: number[] } {
  const o = body(raw);
  const model = o['model'];
  if (model !== undefined && typeof model !== 'string') throw bad('model', `'model' is ${describe(model)}; expected a string`);
  const tokens = o['tokens'];
  if (!Array.isArray(tokens) || tokens.some((t) => typeof t !== 'number' || !Number.isSafeInteger(t) || t < 0)) throw bad('tokens', `'tokens' is ${describe(tokens)}; expected an array of token ids (integers >= 0)`);
  return { ...(model !== undefined ? { model } : {}), tokens: tokens as number[] };
}
