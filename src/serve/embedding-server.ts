// The OpenAI-compatible embeddings server (`fuseformer serve --model BERT_DIR`): sentence embeddings from a
// BERT, decoder embedding model or sentence-transformers directory over HTTP, for the retrieval half of an application in Node.
//   POST /v1/embeddings   {input: string | string[] | ids | ids[], model?, encoding_format?: float | base64, dimensions?,
//                          prompt_name? (one of the model's sentence-transformers prompts, before each text)}
//   GET  /v1/models, /health, /metrics (Prometheus text)
// Each request's inputs are tokenized (and checked: a text past the model's positions is a 400
// context_length_exceeded, unless sentence-transformers' max_seq_length truncates it) when it arrives; one
// loop embeds what is queued — the inputs of every waiting request in shared, length-sorted batches — so
// concurrent requests batch together. Limits: body size (413), 2,048 inputs a request, queued inputs (429);
// a request whose client went away is dropped before it is computed; close() finishes what is queued (up to a
// timeout), then refuses the rest with 503.

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Embedder } from '../infer/embedder.js';
import { EmbedInputError } from '../infer/embedder.js';
import { checkRoute, createApiServer, listenOn, MODEL_ROUTE, modelsAnswer, readJsonBody, sendJson, toApiError } from './http-json.js';
import type { AccessOptions } from './http-json.js';
import type { Routes } from './http-json.js';
import { gauge, Histogram, LabeledCounter, LATENCY_BUCKETS } from './metrics.js';
import { RoundAnswers, RoundLoop } from './rounds.js';
import type { RoundRequest } from './rounds.js';
import { ApiError, parseEmbeddingBody } from './validation.js';

export interface EmbeddingServerOptions {
  /** An API key, CORS origins (http-json.ts). */
  readonly access?: AccessOptions;
  /** The name /v1/models lists and requests' "model" must match (default "fuseformer"). */
  readonly modelName?: string;
  /** Request bodies larger than this are refused with 413 (default 8 MiB: 2,048 texts of a few KB). */
  readonly maxBodyBytes?: number;
  /** Inputs waiting to be embedded at most; a request that would pass it gets 429 (default 16,384). */
  readonly maxQueuedInputs?: number;
  /** Inputs embedded in one round of the loop at most (default 512; a larger request runs alone). */
  readonly maxRoundInputs?: number;
  /** How long close() lets queued requests finish before refusing them (default 30 s). */
  readonly shutdownTimeoutMs?: number;
}

interface Pending extends RoundRequest {
  readonly sequences: number[][];
  readonly dimensions: number;
  done(vectors: Float32Array[] | ApiError): void;
}

const ROUTES: Routes = new Map([['/v1/embeddings', 'POST'], ['/v1/models', 'GET'], [MODEL_ROUTE, 'GET'], ['/health', 'GET'], ['/metrics', 'GET']]);

export class EmbeddingServer {
  readonly modelName: string;
  private readonly access: AccessOptions;
  private readonly http: Server;
  private readonly maxBodyBytes: number;
  private readonly maxQueuedInputs: number;
  private readonly shutdownTimeoutMs: number;
  private readonly rounds: RoundLoop<Pending>;
  private draining = false;
  private closing?: Promise<void>;
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly metrics = {
    requests: new LabeledCounter('fuseformer_requests_total', 'HTTP requests by endpoint and status code'),
    inputs: new LabeledCounter('fuseformer_embedding_inputs_total', 'Inputs embedded'),
    tokens: new LabeledCounter('fuseformer_prompt_tokens_total', 'Tokens of the inputs embedded'),
    truncated: new LabeledCounter('fuseformer_embedding_inputs_truncated_total', 'Inputs cut to the model\'s max_seq_length'),
    rounds: new LabeledCounter('fuseformer_embedding_rounds_total', 'Rounds of the embedding loop (each embeds every queued request it takes)'),
    latency: new Histogram('fuseformer_request_latency_seconds', 'Time from a request\'s arrival to its answer', LATENCY_BUCKETS),
  };

  constructor(readonly embedder: Embedder, options: EmbeddingServerOptions = {}) {
    this.access = options.access ?? {};
    this.modelName = options.modelName ?? 'fuseformer';
    this.maxBodyBytes = options.maxBodyBytes ?? 8 << 20;
    this.maxQueuedInputs = options.maxQueuedInputs ?? 16_384;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30_000;
    this.rounds = new RoundLoop<Pending>(options.maxRoundInputs ?? 512, (round) => this.embedRound(round));
    this.http = createApiServer((req, res) => { this.route(req, res).catch((error: unknown) => this.send(res, req, toApiError(error))); });
  }

  async listen(port = 8000, host = '127.0.0.1'): Promise<AddressInfo> {
    return listenOn(this.http, port, host);
  }

  /** Graceful shutdown: refuse new requests, embed what is queued (up to the timeout), refuse the rest, stop. */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    this.draining = true;
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeIdleConnections();
    await this.rounds.drain(Date.now() + this.shutdownTimeoutMs, (p) => p.done(new ApiError(503, 'the server is shutting down', 'server_error')));
    this.http.closeAllConnections();
    await closed;
  }

  metricsText(): string {
    const m = this.metrics, prefix = this.embedder.encoder.prefixStats;
    return [
      m.requests.text(), m.inputs.text(), m.tokens.text(), m.truncated.text(), m.rounds.text(),
      ...(prefix ? [gauge('fuseformer_shared_prefix_tokens_total', 'Input tokens not computed: a prefix the texts of a pass share, computed once (or cached)', prefix.savedTokens, 'counter')] : []),
      gauge('fuseformer_queue_depth', 'Requests waiting to be embedded', this.rounds.length),
      gauge('fuseformer_queued_inputs', 'Inputs waiting to be embedded', this.rounds.items),
      m.latency.text(), '',
    ].join('\n');
  }

  /**
   * One round: the inputs of every request it took in shared batches (length-sorted, or in turn where the encoder
   * packs its passes); each request answered once its inputs are embedded.
   */
  private async embedRound(round: Pending[]): Promise<void> {
    this.metrics.rounds.inc({});
    let vectors: readonly Float32Array[] = [];
    const answers = new RoundAnswers(round.map((p) => p.sequences.length), (r, [at, end]) => {
      round[r]!.done(vectors.slice(at, end).map((v) => this.embedder.shortened(v, round[r]!.dimensions)));
    });
    try {
      const sequences = round.flatMap((p) => p.sequences);
      vectors = ASYNC_ROUNDS
        ? await this.embedder.embedSequencesAsync(sequences, (indices, sofar) => { vectors = sofar; answers.finished(indices); })
        : this.embedder.embedSequences(sequences);
      answers.answerRest();
    } catch (error) {
      const failure = new ApiError(500, `embedding failed: ${(error as Error).message}`, 'server_error');
      answers.answerRest((r) => round[r]!.done(failure));
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = checkRoute(req, res, ROUTES, this.access);
    if (path === undefined) return;  // a CORS preflight, answered
    if (path === '/v1/embeddings') return this.embeddings(req, res);
    if (path === '/health') return this.send(res, req, this.draining ? 503 : 200, { status: this.draining ? 'shutting down' : 'ok' });
    const models = modelsAnswer(req, path, { id: this.modelName, object: 'model', created: this.created, owned_by: 'fuseformer', max_model_len: this.embedder.truncateAt ?? this.embedder.maxTokens, dimensions: this.embedder.dimensions });
    if (models !== undefined) return this.send(res, req, 200, models);
    this.metrics.requests.inc({ endpoint: path, status: '200' });
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
    res.end(this.metricsText());
  }

  private async embeddings(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = performance.now();
    if (this.draining) throw new ApiError(503, 'the server is shutting down', 'server_error');
    const params = parseEmbeddingBody(await readJsonBody(req, this.maxBodyBytes));
    if (params.model !== undefined && params.model !== this.modelName) {
      throw new ApiError(404, `the model '${params.model}' does not exist; this server has '${this.modelName}'`, 'invalid_request_error', 'model', 'model_not_found');
    }
    let dimensions: number;
    try {
      dimensions = this.embedder.checkedDimensions(params.dimensions);
    } catch (error) {
      throw new ApiError(400, (error as Error).message, 'invalid_request_error', 'dimensions');
    }
    let prompt: string;
    try {
      prompt = this.embedder.promptFor(params.inputs, params.promptName !== undefined ? { promptName: params.promptName } : {});
    } catch (error) {
      const message = (error as Error).message.replace(/^input (\d+)/, (_, i: string) => `'input${params.inputs.length > 1 ? `[${i}]` : ''}'`);
      throw new ApiError(400, message, 'invalid_request_error', 'prompt_name');
    }
    const prepared = params.inputs.map((input, i) => {
      try {
        return this.embedder.prepare(input, i, prompt);
      } catch (error) {
        if (!(error instanceof EmbedInputError)) throw error;
        const name = params.inputs.length > 1 ? `input[${i}]` : 'input';
        const message = error.message.replace(/^input \d+/, `'${name}'`);
        throw new ApiError(400, message, 'invalid_request_error', 'input', /tokens; the model takes at most/.test(message) ? 'context_length_exceeded' : null);
      }
    });
    if (this.draining) throw new ApiError(503, 'the server is shutting down', 'server_error');
    if (this.rounds.items + prepared.length > this.maxQueuedInputs) {
      throw new ApiError(429, `the server is busy: ${this.rounds.items} inputs queued (limit ${this.maxQueuedInputs}); retry later`, 'rate_limit_error', null, 'queue_full');
    }
    const vectors = await new Promise<Float32Array[] | ApiError>((resolve) => {
      const pending: Pending = { sequences: prepared.map((p) => p.ids), size: prepared.length, dimensions, done: resolve, gone: false };
      // The client went away before its round: its inputs are skipped, not computed.
      res.on('close', () => { pending.gone = true; });
      this.rounds.push(pending);
    });
    if (vectors instanceof ApiError) throw vectors;
    const tokens = prepared.reduce((n, p) => n + p.ids.length, 0);
    this.metrics.inputs.inc({}, vectors.length);
    this.metrics.tokens.inc({}, tokens);
    this.metrics.truncated.inc({}, prepared.filter((p) => p.truncated).length);
    this.metrics.latency.observe((performance.now() - arrival) / 1000);
    this.send(res, req, 200, {
      object: 'list',
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: params.encodingFormat === 'base64' ? base64(v) : Array.from(v) })),
      model: this.modelName,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  private send(res: ServerResponse, req: IncomingMessage, status: number | ApiError, body?: unknown): void {
    sendJson(res, req, ROUTES, this.metrics.requests, status, body);
  }
}

/** A vector as OpenAI's base64 encoding: its little-endian f32 bytes. */
function base64(vector: Float32Array): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  vector.forEach((x, i) => view.setFloat32(i * 4, x, true));
  return Buffer.from(bytes).toString('base64');
}

/** Rounds that yield to the event loop while the GPU computes (default; FUSEFORMER_EMBED_ASYNC=0 blocks the loop for a round, for A/B runs). */
const ASYNC_ROUNDS = process.env['FUSEFORMER_EMBED_ASYNC'] !== '0';
