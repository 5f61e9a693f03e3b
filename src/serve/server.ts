// The OpenAI-compatible HTTP server on node:http, with one engine loop feeding every request.
//   POST /v1/completions, /v1/chat/completions   JSON, or SSE with stream: true ("data: {chunk}\n\n" … "data: [DONE]")
//   GET  /v1/models, /health, /metrics (Prometheus text)
//   POST /tokenize, /detokenize                  vLLM's: a prompt or chat messages to ids (with the count), ids to text
// Limits: body size (413), max_tokens within its limit (400, param max_tokens), prompt + max_tokens within
// the context window (400, code context_length_exceeded), requests in the engine (429 when the queue is full), 503 while
// shutting down. A client that goes away has its request cancelled at once (engine.cancel frees its KV
// blocks). close() is graceful: stop accepting, let running requests finish (up to a timeout, then
// cancel them), stop the loop.
//
// Text: generated ids pass through a TokenStreamDecoder (whole characters only, special tokens dropped)
// and a StopStringMatcher (text that may start a stop string is held back; a match ends the request with
// finish_reason "stop", the stop string not included).

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { defaultStopTokenIds } from '../infer/generate.js';
import { fileMaxNewTokens } from '../infer/generation-config.js';
import { resolveSampling } from '../infer/sampling.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import { ReasoningSplitter } from './reasoning.js';
import type { ReasoningParser } from './reasoning.js';
import { AnswerParts } from './answer-parts.js';
import { CALL_TRIGGER, forcedCallGrammar, strictCallGrammar, ToolCallExtractor } from './tool-calls.js';
import { TriggeredConstraint } from '../infer/structured/triggered.js';
import type { ToolCall, ToolCallParser } from './tool-calls.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { tokenByteTable } from '../io/token-bytes.js';
import { JsonConstraint, TokenVocabulary } from '../infer/structured/token-mask.js';
import type { ReasoningTokens, TokenConstraint } from '../infer/structured/token-mask.js';
import { ChoiceText, hasContent } from './choice-text.js';
import type { ChoiceUpdate, LogprobEntry } from './choice-text.js';
import { ChatTemplate } from './chat-template.js';
import type { ChatTemplateText } from './chat-template.js';
import { PromptEncoder } from './prompt-encoder.js';
import type { FinishReason, ServingEngine, TokenEvent } from './engine.js';
import { gauge, Histogram, LabeledCounter, LATENCY_BUCKETS } from './metrics.js';
import { checkRoute, createApiServer, listenOn, MODEL_ROUTE, modelsAnswer, readJsonBody, routeLabel, toApiError } from './http-json.js';
import type { AccessOptions } from './http-json.js';
import type { Routes } from './http-json.js';
import { ApiError, parseChatBody, parseCompletionBody, parseDetokenizeBody, parseTokenizeBody } from './validation.js';
import type { ChatParams, CommonParams, ToolDefinition } from './validation.js';
import { anyJsonObject, compileJsonSchema, SchemaError } from '../infer/structured/json-schema.js';
import type { GrammarNode } from '../infer/structured/json-schema.js';

export interface ServerOptions {
  /** An API key, CORS origins (http-json.ts). */
  readonly access?: AccessOptions;
  /** The name /v1/models lists and requests' "model" must match (default "fuseformer"). */
  readonly modelName?: string;
  /** Request bodies larger than this are refused with 413 (default 1 MiB). */
  readonly maxBodyBytes?: number;
  /** Requests in the engine (waiting + running) at most; more get 429 (default 256). */
  readonly maxQueue?: number;
  /** max_tokens at most (default: the context window − 1). */
  readonly maxTokensLimit?: number;
  /** How long close() lets running requests finish before cancelling them (default 30 s). */
  readonly shutdownTimeoutMs?: number;
  /** Chat answers split into reasoning_content and content (reasoning.ts); absent: all content. */
  readonly reasoningParser?: ReasoningParser;
  /** The syntax of the model's tool calls (tool-calls.ts); absent: the one its chat template teaches, if any. */
  readonly toolCallParser?: ToolCallParser;
  /** A chat template in place of the model's own (`--chat-template`). */
  readonly chatTemplate?: ChatTemplateText;
}

/**
 * What the server needs of an engine: a ServingEngine, or rank 0 of a tensor-parallel group
 * (replicated-engine.ts's ReplicatedLeader, which replicates these calls to the other ranks).
 */
export type ServedEngine = Pick<ServingEngine, 'model' | 'maxLen' | 'hasWork' | 'stats' | 'submit' | 'cancel' | 'step'>;

type Kind = 'completion' | 'chat';

interface Active {
  fail: (error: ApiError) => void;
}

export class InferenceServer {
  readonly modelName: string;
  private readonly access: AccessOptions;
  private readonly http: Server;
  private readonly chat: ChatTemplate;
  private readonly encoder: PromptEncoder;
  private readonly maxBodyBytes: number;
  private readonly maxQueue: number;
  private readonly maxTokensLimit: number;
  private readonly shutdownTimeoutMs: number;
  private readonly reasoningParser?: ReasoningParser;
  private readonly toolCallParser?: ToolCallParser;
  private readonly stopTokenIds: readonly number[];
  /** The vocabulary's trie for structured outputs, built at the first request with a response_format. */
  private vocabulary?: TokenVocabulary;
  private readonly active = new Set<Active>();
  private draining = false;
  private loopStopped = false;
  private wake: (() => void) | null = null;
  private loopDone: Promise<void> = Promise.resolve();
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly metrics = {
    requests: new LabeledCounter('fuseformer_requests_total', 'HTTP requests by endpoint and status code'),
    finished: new LabeledCounter('fuseformer_requests_finished_total', 'Generation requests by how they ended (stop, length, cancelled, error)'),
    promptTokens: new LabeledCounter('fuseformer_prompt_tokens_total', 'Prompt tokens of accepted requests'),
    generatedTokens: new LabeledCounter('fuseformer_generation_tokens_total', 'Tokens generated'),
    ttft: new Histogram('fuseformer_time_to_first_token_seconds', 'Time from a request\'s arrival to its first generated token', LATENCY_BUCKETS),
    itl: new Histogram('fuseformer_inter_token_latency_seconds', 'Time between consecutive generated tokens of a request', LATENCY_BUCKETS),
    e2e: new Histogram('fuseformer_request_latency_seconds', 'Time from a request\'s arrival to its last token', LATENCY_BUCKETS),
  };

  constructor(readonly engine: ServedEngine, readonly tokenizer: Tokenizer, options: ServerOptions = {}) {
    this.access = options.access ?? {};
    this.modelName = options.modelName ?? 'fuseformer';
    this.maxBodyBytes = options.maxBodyBytes ?? 1 << 20;
    this.maxQueue = options.maxQueue ?? 256;
    this.maxTokensLimit = options.maxTokensLimit ?? engine.maxLen - 1;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30_000;
    this.reasoningParser = options.reasoningParser;
    this.stopTokenIds = defaultStopTokenIds(engine.model);
    this.chat = new ChatTemplate(tokenizer, options.chatTemplate);
    this.toolCallParser = options.toolCallParser ?? this.chat.toolCallParser;
    this.encoder = new PromptEncoder(tokenizer);
    this.http = createApiServer((req, res) => { this.route(req, res).catch((error: unknown) => this.sendError(res, req, toApiError(error))); });
  }

  /** Starts listening and the engine loop; resolves with the bound address. */
  async listen(port = 8000, host = '127.0.0.1'): Promise<AddressInfo> {
    this.loopDone = this.loop();
    return listenOn(this.http, port, host);
  }

  /** Graceful shutdown: refuse new work, let running requests finish (or cancel them at the timeout), stop the loop. */
  async close(): Promise<void> {
    if (this.draining) return this.loopDone;
    this.draining = true;
    // The listener stays open while running requests finish: a client connecting now gets a 503 JSON body
    // (and /health says "shutting down"), not a reset from a closed accept queue.
    const deadline = Date.now() + this.shutdownTimeoutMs;
    while (this.engine.hasWork && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeIdleConnections();
    for (const a of [...this.active]) a.fail(new ApiError(503, 'the server is shutting down', 'server_error'));
    this.loopStopped = true;
    this.wake?.();
    await this.loopDone;
    this.http.closeAllConnections();
    await closed;
    await this.encoder.close();
  }

  metricsText(): string {
    const s = this.engine.stats(), m = this.metrics;
    return [
      m.requests.text(), m.finished.text(), m.promptTokens.text(), m.generatedTokens.text(),
      gauge('fuseformer_queue_depth', 'Requests waiting to be scheduled', s.waiting),
      gauge('fuseformer_running_requests', 'Requests holding KV blocks', s.running),
      gauge('fuseformer_kv_blocks_used', 'KV cache blocks in use', s.blocksUsed),
      gauge('fuseformer_kv_blocks_total', 'KV cache blocks in the pool', s.blocksTotal),
      gauge('fuseformer_kv_usage_ratio', 'Fraction of KV cache blocks in use', s.blocksUsed / s.blocksTotal),
      gauge('fuseformer_prefix_cache_queries_total', 'Full prompt blocks looked up in the prefix cache', s.prefixQueried, 'counter'),
      gauge('fuseformer_prefix_cache_hits_total', 'Full prompt blocks found in the prefix cache', s.prefixHits, 'counter'),
      gauge('fuseformer_prefix_cache_hit_rate', 'Prefix cache hits / queries since start', s.prefixQueried > 0 ? s.prefixHits / s.prefixQueried : 0),
      gauge('fuseformer_preemptions_total', 'Requests preempted (to be recomputed) when KV blocks ran out', s.preemptions, 'counter'),
      gauge('fuseformer_engine_steps_total', 'Engine iterations run', s.steps, 'counter'),
      gauge('fuseformer_speculative_rounds_total', 'Speculative decoding rounds (target verification passes)', s.speculativeRounds, 'counter'),
      gauge('fuseformer_speculative_draft_tokens_total', 'Draft tokens proposed', s.draftedTokens, 'counter'),
      gauge('fuseformer_speculative_accepted_tokens_total', 'Draft tokens the target accepted', s.acceptedTokens, 'counter'),
      gauge('fuseformer_speculative_acceptance_rate', 'Accepted / proposed draft tokens since start', s.draftedTokens > 0 ? s.acceptedTokens / s.draftedTokens : 0),
      m.ttft.text(), m.itl.text(), m.e2e.text(), '',
    ].join('\n');
  }

  // --- the engine loop ------------------------------------------------------------------------------

  private async loop(): Promise<void> {
    while (!this.loopStopped) {
      if (!this.engine.hasWork) {
        await new Promise<void>((resolve) => { this.wake = resolve; });
        this.wake = null;
        continue;
      }
      try {
        this.engine.step();
      } catch (error) {
        const failure = new ApiError(500, `the engine failed: ${(error as Error).message}`, 'server_error');
        for (const a of [...this.active]) a.fail(failure);
      }
      // Let the event loop deliver new requests, disconnects and socket writes between steps.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  // --- routing --------------------------------------------------------------------------------------

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = checkRoute(req, res, ROUTES, this.access);
    if (path === undefined) return;  // a CORS preflight, answered
    if (path === '/v1/completions' || path === '/v1/chat/completions') return this.generate(path === '/v1/completions' ? 'completion' : 'chat', req, res);
    if (path === '/health') return this.send(res, req, this.draining ? 503 : 200, { status: this.draining ? 'shutting down' : 'ok' });
    if (path === '/tokenize') return this.send(res, req, 200, await this.tokenize(await readJsonBody(req, this.maxBodyBytes)));
    if (path === '/detokenize') {
      const { model, tokens } = parseDetokenizeBody(await readJsonBody(req, this.maxBodyBytes));
      this.checkModel(model);
      return this.send(res, req, 200, { prompt: this.tokenizer.decode(this.checkedIds(tokens, 'tokens')) });
    }
    const models = modelsAnswer(req, path, { id: this.modelName, object: 'model', created: this.created, owned_by: 'fuseformer', max_model_len: this.engine.maxLen });
    if (models !== undefined) return this.send(res, req, 200, models);
    if (path === '/metrics') {
      this.metrics.requests.inc({ endpoint: path, status: '200' });
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
      res.end(this.metricsText());
      return;
    }
    throw new ApiError(404, `no route for ${req.method} ${path}`, 'invalid_request_error', null, 'not_found');
  }

  private send(res: ServerResponse, req: IncomingMessage, status: number, body: unknown): void {
    this.metrics.requests.inc({ endpoint: routeLabel(req, ROUTES), status: String(status) });
    if (res.headersSent || res.destroyed) return;
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  private sendError(res: ServerResponse, req: IncomingMessage, error: ApiError): void {
    if (res.headersSent) {
      // A stream already under way (its 200 sent): the error as a last event (as OpenAI does), then the end.
      this.metrics.requests.inc({ endpoint: routeLabel(req, ROUTES), status: String(res.statusCode) });
      if (!res.destroyed) res.end(`data: ${JSON.stringify(error.body())}\n\n`);
      return;
    }
    this.send(res, req, error.status, error.body());
  }

  // --- generation -----------------------------------------------------------------------------------

  private async generate(kind: Kind, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = performance.now();
    if (this.draining) throw new ApiError(503, 'the server is shutting down', 'server_error');
    const raw = await readJsonBody(req, this.maxBodyBytes);
    const params = kind === 'completion' ? parseCompletionBody(raw) : parseChatBody(raw);
    this.checkModel(params.model);
    const chat = kind === 'chat' ? params as ReturnType<typeof parseChatBody> : undefined;
    const completion = kind === 'completion' ? params as ReturnType<typeof parseCompletionBody> : undefined;
    const tools = chat ? promptTools(chat) : [];
    if (params.responseFormat && tools.length > 0) {
      throw new ApiError(400, `'response_format' and 'tools' together are not supported: the answer is held to the format, so the model could never write a tool call; leave one out (or set tool_choice to "none")`, 'invalid_request_error', 'response_format');
    }
    const toolParser = tools.length > 0 ? this.checkedToolParser() : undefined;
    const calls = chat && toolParser ? constrainedCalls(chat, toolParser) : undefined;
    const constraintOf = params.responseFormat ? this.constraintMaker({ grammar: params.responseFormat.grammar }) : calls ? this.constraintMaker(calls) : undefined;
    const prompts = chat
      ? [this.checkedEncoding(await this.encoder.encode(this.chat.render(chat.messages, chat.chatTemplateKwargs, tools), false), 'messages')]
      : await Promise.all(completion!.prompts.map((p) => this.promptIds(p)));
    if (this.draining) throw new ApiError(503, 'the server is shutting down', 'server_error');
    this.checkedIds(params.stopTokenIds, 'stop_token_ids');
    this.checkedIds(params.logitBias.map(([token]) => token), 'logit_bias');
    if (params.maxTokens !== undefined && params.maxTokens > this.maxTokensLimit) throw new ApiError(400, `'max_tokens' is ${params.maxTokens}; this server allows at most ${this.maxTokensLimit}`, 'invalid_request_error', 'max_tokens');
    const maxTokens = prompts.map((prompt, i) => this.checkedMaxTokens(params.maxTokens, prompt.length, kind === 'chat' ? 'messages' : 'prompt', prompts.length > 1 ? ` (prompt ${i})` : ''));
    const s = this.engine.stats(), count = prompts.length * params.n;
    if (s.waiting + s.running + count > this.maxQueue) {
      throw new ApiError(429, `the server is busy: ${s.waiting + s.running} requests queued or running (limit ${this.maxQueue})${count > 1 ? `, and this one asks for ${count} choices` : ''}; retry later`, 'rate_limit_error', null, 'queue_full');
    }
    // Choice k (prompt ⌊k / n⌋) draws with seed + k (mod 2^64): a seeded request replays, its choices differ.
    const seed = params.seed !== undefined ? BigInt(params.seed) : BigInt(Math.floor(Math.random() * 2 ** 48));
    const sampling = (k: number) => resolveSampling({
      ...(params.temperature !== undefined ? { temperature: params.temperature } : {}), ...(params.topP !== undefined ? { topP: params.topP } : {}),
      ...(params.topK !== undefined ? { topK: params.topK } : {}), ...(params.repetitionPenalty !== undefined ? { repetitionPenalty: params.repetitionPenalty } : {}),
      seed: (seed + BigInt(k)) % 2n ** 64n,
    }, this.engine.model.generation);
    this.metrics.promptTokens.inc({}, prompts.reduce((sum, p) => sum + p.length, 0));
    const names = new Set(tools.map((t) => t.function.name));
    const partsOfChoice = () => (kind === 'chat' && (this.reasoningParser || toolParser) ? new AnswerParts(
      this.reasoningParser ? new ReasoningSplitter(this.reasoningParser) : undefined,
      toolParser ? new ToolCallExtractor(toolParser, names) : undefined,
    ) : undefined);
    const echoOf = (i: number) => {
      if (!completion?.echo) return '';
      const given = completion.prompts[i]!;
      return typeof given === 'string' ? given : this.tokenizer.decode(given);
    };
    const plan = prompts.flatMap((prompt, i) => Array.from({ length: params.n }, (_, j): ChoicePlan => ({
      prompt, group: i, maxTokens: maxTokens[i]!, sampling: sampling(i * params.n + j), echo: echoOf(i),
    })));
    await this.run(kind, req, res, params, plan, arrival, partsOfChoice, constraintOf);
  }

  /**
   * Makes each choice's constraint (the stop ids it may end with given later): the whole answer held to a
   * grammar — a response_format's, a forced tool call's — or, with a trigger, free text whose calls are held to
   * it once opened (strict functions under tool_choice "auto"). The vocabulary's trie is built once, at the first
   * such request. With a reasoning parser the model first thinks unconstrained, up to its </think> token.
   */
  private constraintMaker(what: { grammar: GrammarNode; trigger?: string }): (stopIds: readonly number[]) => TokenConstraint {
    const reasoning = what.trigger === undefined ? this.reasoningTokens() : undefined;
    try {
      this.vocabulary ??= new TokenVocabulary(tokenByteTable(this.tokenizer, this.engine.model.vocabSize));
    } catch (e) {
      throw new ApiError(400, `constrained decoding (response_format, strict or forced tool calls) is not possible with this model's tokenizer: ${(e as Error).message}`, 'invalid_request_error', 'response_format');
    }
    const vocabulary = this.vocabulary, { grammar, trigger } = what;
    if (trigger !== undefined) {
      const bytes = new TextEncoder().encode(trigger);
      return () => new TriggeredConstraint(bytes, grammar, vocabulary);
    }
    return (stopIds) => new JsonConstraint(grammar, vocabulary, stopIds, reasoning);
  }

  private reasoningTokens(): ReasoningTokens | undefined {
    if (!this.reasoningParser) return undefined;
    const open = this.tokenizer.tokenToId('<think>'), close = this.tokenizer.tokenToId('</think>');
    if (open === undefined || close === undefined) {
      throw new ApiError(400, `constrained decoding (response_format, or tool_choice forcing a call) with --reasoning-parser ${this.reasoningParser} needs <think> and </think> as tokens of the vocabulary (the answer is constrained after </think>); this tokenizer has no such tokens`, 'invalid_request_error', 'response_format');
    }
    return { open, close, opensItself: this.reasoningParser === 'qwen3' };
  }

  /**
   * A prompt's max_tokens: the request's, or generation_config.json's max_new_tokens (or what its max_length leaves),
   * within the context window; 400 context_length_exceeded when prompt and completion do not fit.
   */
  private checkedMaxTokens(asked: number | undefined, promptLength: number, param: string, which: string): number {
    const window = this.engine.maxLen, n = promptLength;
    const fromFile = fileMaxNewTokens(this.engine.model.generation, n);
    const maxTokens = asked ?? Math.min(this.maxTokensLimit, window - n, fromFile !== undefined && fromFile >= 1 ? fromFile : Infinity);
    if (n + maxTokens > window || maxTokens < 1) {
      throw new ApiError(400, `this model's maximum context length is ${window} tokens; the request asks for ${n + Math.max(maxTokens, 1)}${which} (${n} in the prompt, ${Math.max(maxTokens, 1)} for the completion)`, 'invalid_request_error', param, 'context_length_exceeded');
    }
    return maxTokens;
  }

  /** The parser for a request's tools; a template that never reads `tools`, or no known syntax, is the request's error. */
  private checkedToolParser(): ToolCallParser {
    if (this.chat.available && !this.chat.takesTools) {
      throw new ApiError(400, `this model's chat template does not use 'tools' (the model would never see them); leave 'tools' out or serve a model whose template takes them`, 'invalid_request_error', 'tools');
    }
    if (this.toolCallParser === undefined) {
      throw new ApiError(400, `'tools' need the tool-call syntax of this model, which its chat template does not show: start the server with --tool-call-parser hermes (Qwen2.5, Qwen3, Hermes) or llama3_json (Llama 3.1+)`, 'invalid_request_error', 'tools');
    }
    return this.toolCallParser;
  }

  private checkModel(model: string | undefined): void {
    if (model !== undefined && model !== this.modelName) {
      throw new ApiError(404, `the model '${model}' does not exist; this server has '${this.modelName}'`, 'invalid_request_error', 'model', 'model_not_found');
    }
  }

  /** POST /tokenize: the ids a prompt (or chat messages, through the template) encodes to, as vLLM answers it. */
  private async tokenize(raw: unknown): Promise<{ count: number; max_model_len: number; tokens: number[] }> {
    const params = parseTokenizeBody(raw);
    this.checkModel(params.model);
    let ids: number[];
    if ('chat' in params) {
      const { chat } = params;
      ids = await this.encoder.encode(this.chat.render(chat.messages, chat.chatTemplateKwargs, promptTools(chat), params.addGenerationPrompt), params.addSpecialTokens);
    } else ids = await this.encoder.encode(params.prompt, params.addSpecialTokens);
    return { count: ids.length, max_model_len: this.engine.maxLen, tokens: ids };
  }

  /** Why chat requests cannot be served (the model's chat template does not parse, …); undefined when they can. */
  get chatTemplateProblem(): string | undefined { return this.chat.problem; }

  private async promptIds(prompt: string | number[]): Promise<number[]> {
    if (typeof prompt === 'string') return this.checkedEncoding(await this.encoder.encode(prompt), 'prompt');
    return this.checkedIds(prompt, 'prompt');
  }

  /** Token ids a request gave in `param`, each inside the model's vocabulary (400 naming the first that is not). */
  private checkedIds(ids: number[], param: string): number[] {
    const V = this.engine.model.vocabSize, bad = ids.find((t) => t >= V);
    if (bad !== undefined) throw new ApiError(400, `'${param}' holds token id ${bad}; the vocabulary has ${V} ids`, 'invalid_request_error', param);
    return ids;
  }

  /**
   * Text the tokenizer encodes to an id past the model's embedding rows (tokenizer.json defines more tokens
   * than config.json's vocab_size: the model directory's inconsistency, named as such; the text can avoid it).
   */
  private checkedEncoding(ids: number[], param: string): number[] {
    const V = this.engine.model.vocabSize, bad = ids.find((t) => t >= V);
    if (bad === undefined) return ids;
    throw new ApiError(400, `the text encodes to token ${JSON.stringify(this.tokenizer.decode([bad]))} (id ${bad}), which the model's tokenizer.json defines but its vocabulary (config.json vocab_size ${V}) lacks`, 'invalid_request_error', param);
  }

  /**
   * One engine request per choice of the plan, their text streamed or gathered (choice-text.ts); `partsOfChoice`: a
   * chat answer's reasoning and tool calls taken apart from its content (absent: all content).
   */
  private run(kind: Kind, req: IncomingMessage, res: ServerResponse, params: CommonParams, plan: readonly ChoicePlan[], arrival: number, partsOfChoice: () => AnswerParts | undefined,
    constraintOf?: (stopIds: readonly number[]) => TokenConstraint): Promise<void> {
    const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID()}`, created = Math.floor(Date.now() / 1000);
    // The model's own stop ids (unless ignore_eos) and the request's stop_token_ids; the token that ends the
    // answer is not part of its text (EOS is special anyway; a stop_token_ids token is left out as vLLM does).
    const stopIds = new Set([...(params.ignoreEos ? [] : this.stopTokenIds), ...params.stopTokenIds]);
    const path = kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    const object = kind === 'chat' ? (params.stream ? 'chat.completion.chunk' : 'chat.completion') : 'text_completion';
    const choices = plan.map(({ prompt }) => {
      const parts = partsOfChoice();
      return new ChoiceText(this.tokenizer, prompt, { stop: params.stop, stopIds, topLogprobs: params.topLogprobs, ...(parts ? { parts } : {}) });
    });
    // Prompt tokens count once a prompt, however many choices it has.
    const promptTokens = plan.reduce((sum, c, k) => sum + (k === 0 || plan[k - 1]!.group !== c.group ? c.prompt.length : 0), 0);
    const reasons: (FinishReason | undefined)[] = choices.map(() => undefined);
    const lastTokenAt = choices.map(() => 0);
    const engineIds: string[] = [];
    let finished = false, firstToken = true, abandoned = false;
    let releaseFollowers = (_lead: number) => {};

    const chunk = (index: number, update: ChoiceUpdate, finish: string | null) => {
      const { piece, logprobs: lp } = update;
      const delta = {
        ...(piece.reasoning !== '' ? { reasoning_content: piece.reasoning } : {}),
        ...(piece.content !== '' || (piece.reasoning === '' && piece.calls.length === 0 && finish === null) ? { content: piece.content } : {}),
        ...(piece.calls.length > 0 ? { tool_calls: piece.calls.map(apiToolCall) } : {}),
      };
      const choice = kind === 'chat'
        ? { index, delta, logprobs: params.logprobs ? chatLogprobs(lp) : null, finish_reason: finish }
        : { index, text: piece.content, logprobs: params.logprobs ? completionLogprobs(lp) : null, finish_reason: finish };
      return { id, object, created, model: this.modelName, choices: [choice] };
    };
    const generated = () => choices.reduce((sum, c) => sum + c.generated, 0);
    const usage = () => ({ prompt_tokens: promptTokens, completion_tokens: generated(), total_tokens: promptTokens + generated() });
    const write = (body: unknown) => { if (!res.destroyed) res.write(`data: ${JSON.stringify(body)}\n\n`); };
    const cancelAll = () => { for (const engineId of engineIds) this.engine.cancel(engineId); };

    return new Promise<void>((resolve) => {
      const active: Active = {
        fail: (error) => {
          if (finished) return;
          finished = true;
          this.active.delete(active);
          cancelAll();
          this.metrics.finished.inc({ reason: 'error' });
          this.sendError(res, req, error);
          resolve();
        },
      };
      /** The whole answer, once every choice has finished. */
      const complete = () => {
        finished = true;
        this.active.delete(active);
        if (reasons.includes('cancelled')) {
          // The client went away: a stream counts with the 200 it was sent, an answer never sent as 499
          // (nginx's "client closed request").
          this.metrics.requests.inc({ endpoint: path, status: res.headersSent ? String(res.statusCode) : '499' });
          resolve();
          return;
        }
        this.metrics.e2e.observe((performance.now() - arrival) / 1000);
        if (params.stream) {
          if (params.includeUsage) write({ id, object, created, model: this.modelName, choices: [], usage: usage() });
          this.metrics.requests.inc({ endpoint: path, status: '200' });
          if (!res.destroyed) res.end('data: [DONE]\n\n');
        } else {
          const answers = choices.map((c, index) => {
            const lp = params.logprobs ? (kind === 'chat' ? chatLogprobs(c.logprobs) : completionLogprobs(c.logprobs)) : null;
            const finishReason = c.finishReason(reasons[index]!);
            return kind === 'chat'
              ? { index, message: chatMessage(c.content, c.reasoning, c.calls, this.reasoningParser !== undefined), logprobs: lp, finish_reason: finishReason }
              : { index, text: plan[index]!.echo + c.text, logprobs: lp, finish_reason: finishReason };
          });
          this.send(res, req, 200, { id, object, created, model: this.modelName, choices: answers, usage: usage() });
        }
        resolve();
      };
      const onFinish = (i: number) => (reason: FinishReason) => {
        releaseFollowers(i);
        if (finished || reasons[i] !== undefined) return;
        reasons[i] = reason;
        this.metrics.finished.inc({ reason });
        if (reason !== 'cancelled') {
          const last = choices[i]!.end();
          if (params.stream) {
            if (hasContent(last)) write(chunk(i, last, null));
            write(chunk(i, { piece: { reasoning: '', content: '', calls: [] }, logprobs: [] }, choices[i]!.finishReason(reason)));
          }
        }
        if (reasons.every((r) => r !== undefined)) complete();
      };
      const onToken = (i: number) => (e: TokenEvent) => {
        releaseFollowers(i);
        const now = performance.now();
        if (firstToken) this.metrics.ttft.observe((now - arrival) / 1000);
        else if (lastTokenAt[i]! > 0) this.metrics.itl.observe((now - lastTokenAt[i]!) / 1000);
        firstToken = false;
        lastTokenAt[i] = now;
        this.metrics.generatedTokens.inc();
        const update = choices[i]!.token(e);
        if (update && params.stream && hasContent(update)) write(chunk(i, update, null));
        if (choices[i]!.stopped) this.engine.cancel(engineIds[i]!, 'stop');
      };
      const submit = (k: number) => {
        const { prompt, maxTokens, sampling } = plan[k]!;
        engineIds[k] = this.engine.submit({
          prompt, maxTokens, sampling, stopTokenIds: [...stopIds], logprobs: params.logprobs ? Math.max(params.topLogprobs, 1) : 0,
          ...(constraintOf ? { constraint: constraintOf([...stopIds]) } : {}), ...(params.logitBias.length > 0 ? { logitBias: params.logitBias } : {}),
          ...(params.frequencyPenalty ? { frequencyPenalty: params.frequencyPenalty } : {}), ...(params.presencePenalty ? { presencePenalty: params.presencePenalty } : {}),
          onToken: onToken(k), onFinish: onFinish(k),
        });
      };
      // A prompt's first choice computes it; its other choices are submitted once that one's first token (or its end)
      // shows the prompt's blocks computed, so they read its full blocks from the prefix cache rather than computing
      // them again. Queued as a microtask: this runs inside the engine's step, and the step ends first.
      const leads = plan.map((c, k) => k === 0 || plan[k - 1]!.group !== c.group);
      const released = plan.map((_, k) => leads[k]!);
      releaseFollowers = (lead: number) => {
        if (!leads[lead] || (lead + 1 < plan.length && released[lead + 1])) return;
        const followers: number[] = [];
        for (let k = lead + 1; k < plan.length && !leads[k]; k++) { released[k] = true; followers.push(k); }
        if (followers.length === 0) return;
        queueMicrotask(() => {
          for (const k of followers) {
            if (finished) return;
            if (abandoned) { onFinish(k)('cancelled'); continue; }
            try {
              submit(k);
            } catch (error) {
              active.fail(toApiError(error));
            }
          }
          this.wake?.();
        });
      };
      // Submitted before any header is sent, so that a request the engine refuses still gets a plain error
      // response (the executor's throw rejects this promise); tokens only arrive from later engine steps.
      try {
        leads.forEach((lead, k) => { if (lead) submit(k); });
      } catch (error) {
        finished = true;
        cancelAll();
        throw error;
      }
      if (params.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
        if (kind === 'chat') choices.forEach((_, index) => write({ id, object, created, model: this.modelName, choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] }));
        plan.forEach(({ echo }, index) => { if (echo !== '') write(chunk(index, { piece: { reasoning: '', content: echo, calls: [] }, logprobs: [] }, null)); });
      }
      this.active.add(active);
      // The client went away before the answer was complete: cancel, which frees the requests' blocks now.
      res.on('close', () => {
        if (finished) return;
        abandoned = true;
        cancelAll();
      });
      this.wake?.();
    });
  }
}

/** One choice of a request: its prompt (group: which of the request's prompts), length limit, sampling and echo. */
interface ChoicePlan {
  readonly prompt: readonly number[];
  readonly group: number;
  readonly maxTokens: number;
  readonly sampling: ResolvedSampling;
  readonly echo: string;
}

/** The tools a chat prompt shows: tool_choice "none" leaves them out, so the model is not asked to call them. */
function promptTools(chat: ChatParams): readonly ToolDefinition[] {
  return chat.toolChoice === 'none' ? [] : chat.tools;
}

/**
 * The constrained tool calls of a chat request, undefined where there are none. tool_choice "required" (a call of
 * any of the tools) or a named function: the whole answer is that call in the parser's syntax, each function's
 * arguments held to its parameters. "auto" with strict functions (hermes syntax): the text is free, and a call the
 * model opens is held to the grammar up to its end — strict functions' arguments to their parameters, the others'
 * to any object. Parameters are compiled here: a schema the grammar cannot enforce is the request's 400, naming
 * the tool.
 */
function constrainedCalls(chat: ChatParams, parser: ToolCallParser): { grammar: GrammarNode; trigger?: string } | undefined {
  const choice = chat.toolChoice;
  const strict = chat.tools.findIndex((t) => t.function.strict === true);
  if (choice === 'none' || (choice === 'auto' && strict < 0)) return undefined;
  if (choice === 'auto' && parser !== 'hermes') {
    throw new ApiError(400, `'tools[${strict}].function.strict' is true with tool_choice "auto": strict arguments are held to their schema once the model opens a <tool_call> block (hermes syntax), but this model's calls are ${parser} (the whole answer one call); force the call (tool_choice "required" or the function's name) or leave strict out`, 'invalid_request_error', `tools[${strict}].function.strict`, 'unsupported_parameter');
  }
  const functions = chat.tools.flatMap((t, i) => {
    if (typeof choice === 'object' && t.function.name !== choice.name) return [];
    if (choice === 'auto' && t.function.strict !== true) return [{ name: t.function.name, parameters: anyJsonObject() }];
    try {
      return [{ name: t.function.name, parameters: compileJsonSchema(t.function.parameters ?? { type: 'object' }) }];
    } catch (e) {
      if (e instanceof SchemaError) throw new ApiError(400, `'tools[${i}].function.parameters' ${e.message.startsWith('#:') ? e.message.slice(3) : `at ${e.message}`} (${choice === 'auto' ? 'the function is strict' : 'tool_choice forces a call'}, so its arguments are constrained to this schema)`, 'invalid_request_error', `tools[${i}].function.parameters`);
      throw e;
    }
  });
  return choice === 'auto' ? { grammar: strictCallGrammar(functions), trigger: CALL_TRIGGER } : { grammar: forcedCallGrammar(parser, functions) };
}

/** A final chat message: content null where the answer is tool calls alone; reasoning_content with a reasoning parser. */
function chatMessage(content: string, reasoning: string, calls: readonly ToolCall[], splitsReasoning: boolean) {
  return {
    role: 'assistant', content: content === '' && calls.length > 0 ? null : content,
    ...(splitsReasoning ? { reasoning_content: reasoning === '' ? null : reasoning } : {}),
    ...(calls.length > 0 ? { tool_calls: calls.map(({ index: _index, ...call }) => apiToolCall(call)) } : {}),
  };
}

/** A call as the API sends it: {id, type, function: {name, arguments}}, with its index in a stream's delta. */
function apiToolCall(call: Omit<ToolCall, 'index'> & { index?: number }) {
  return { ...(call.index !== undefined ? { index: call.index } : {}), id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } };
}

/** Each route and the method it takes; metrics label requests by these paths only ('other' for the rest). */
const ROUTES: Routes = new Map([
  ['/v1/completions', 'POST'], ['/v1/chat/completions', 'POST'], ['/v1/models', 'GET'], [MODEL_ROUTE, 'GET'], ['/health', 'GET'], ['/metrics', 'GET'],
  ['/tokenize', 'POST'], ['/detokenize', 'POST'],
]);

function completionLogprobs(lp: readonly LogprobEntry[]) {
  return {
    tokens: lp.map((e) => e.token), token_logprobs: lp.map((e) => e.logprob),
    top_logprobs: lp.map((e) => {
      // Keyed by text, as OpenAI's format is: tokens with the same text (partial UTF-8 bytes) keep the most likely.
      const top: Record<string, number> = {};
      for (const t of e.top) if (!(t.token in top)) top[t.token] = t.logprob;
      return top;
    }),
    text_offset: lp.map((e) => e.offset),
  };
}

function chatLogprobs(lp: readonly { token: string; logprob: number; top: { token: string; logprob: number }[] }[]) {
  const bytes = (s: string) => [...Buffer.from(s, 'utf8')];
  return { content: lp.map((e) => ({ token: e.token, logprob: e.logprob, bytes: bytes(e.token), top_logprobs: e.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: bytes(t.token) })) })) };
}
