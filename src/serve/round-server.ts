// What the embeddings and rerank servers share: an HTTP server whose one POST endpoint queues each request's
// items (inputs, documents) for rounds.ts' loop, and the rest around it — /v1/models, /health, /metrics, OpenAI-
// shaped errors, a bound on queued items (429 queue_full), a request skipped when its client goes away, and a
// graceful close() that lets what is queued finish (up to a timeout) and refuses the rest with 503.
// A subclass names its routes and endpoint, answers its POST body, serves a round and adds its own metrics.

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { checkRoute, createApiServer, listenOn, modelsAnswer, sendJson, toApiError } from './http-json.js';
import type { AccessOptions, Routes } from './http-json.js';
import { gauge, Histogram, LabeledCounter, LATENCY_BUCKETS } from './metrics.js';
import { RoundLoop } from './rounds.js';
import type { RoundRequest } from './rounds.js';
import { ApiError } from './validation.js';

export interface RoundServerOptions {
  /** An API key, CORS origins (http-json.ts). */
  readonly access?: AccessOptions;
  /** The name /v1/models lists and requests' "model" must match (default "fuseformer"). */
  readonly modelName?: string;
  /** Request bodies larger than this are refused with 413 (default 8 MiB). */
  readonly maxBodyBytes?: number;
  /** How long close() lets queued requests finish before refusing them with 503 (default 30 s). */
  readonly shutdownTimeoutMs?: number;
}

/** What a subclass tells the base about its items. */
export interface RoundServerShape {
  /** Routes (method by path); the POST ones go to handle(). */
  readonly routes: Routes;
  /** Items a round takes at most (a larger request runs alone). */
  readonly maxRoundItems: number;
  /** Items waiting at most; a request that would pass it gets 429. */
  readonly maxQueuedItems: number;
  /** The items' name in messages and metric help ("inputs", "documents"). */
  readonly itemName: string;
  /** What a round does to its items ("embedded", "scored"). */
  readonly verb: string;
  /** The counter of rounds run: its Prometheus name and help. */
  readonly roundsMetric: { readonly name: string; readonly help: string };
}

export abstract class RoundServer<P extends RoundRequest & { done(result: unknown): void }> {
  readonly modelName: string;
  protected readonly access: AccessOptions;
  protected readonly maxBodyBytes: number;
  protected readonly created = Math.floor(Date.now() / 1000);
  protected readonly requests = new LabeledCounter('fuseformer_requests_total', 'HTTP requests by endpoint and status code');
  protected readonly latency = new Histogram('fuseformer_request_latency_seconds', 'Time from a request\'s arrival to its answer', LATENCY_BUCKETS);
  private readonly roundsRun: LabeledCounter;
  private readonly http: Server;
  private readonly rounds: RoundLoop<P>;
  private readonly shutdownTimeoutMs: number;
  private draining = false;
  private closing?: Promise<void>;

  constructor(private readonly shape: RoundServerShape, options: RoundServerOptions) {
    this.access = options.access ?? {};
    this.modelName = options.modelName ?? 'fuseformer';
    this.maxBodyBytes = options.maxBodyBytes ?? 8 << 20;
    this.shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30_000;
    this.roundsRun = new LabeledCounter(shape.roundsMetric.name, shape.roundsMetric.help);
    this.rounds = new RoundLoop<P>(shape.maxRoundItems, (round) => { this.roundsRun.inc({}); return this.runRound(round); });
    this.http = createApiServer((req, res) => { this.route(req, res).catch((error: unknown) => this.send(res, req, toApiError(error))); });
  }

  /** Answers a POST to `path` (one of the routes); it throws ApiErrors for bad requests. */
  protected abstract handle(path: string, req: IncomingMessage, res: ServerResponse): Promise<void>;
  /** Serves one round: answers every request of it (a failure included), each with done(). */
  protected abstract runRound(round: P[]): Promise<void>;
  /** The model card /v1/models lists, past its id, object, created and owned_by. */
  protected abstract modelCard(): Record<string, unknown>;
  /** The subclass's own metrics, in Prometheus text lines. */
  protected abstract ownMetrics(): string[];

  listen(port = 8000, host = '127.0.0.1'): Promise<AddressInfo> {
    return listenOn(this.http, port, host);
  }

  /** Graceful shutdown: refuse new requests, finish what is queued (up to the timeout), refuse the rest, stop. */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  metricsText(): string {
    return [
      this.requests.text(), ...this.ownMetrics(), this.roundsRun.text(),
      gauge('fuseformer_queue_depth', `Requests waiting to be ${this.shape.verb}`, this.rounds.length),
      gauge(`fuseformer_queued_${this.shape.itemName}`, `${this.shape.itemName[0]!.toUpperCase()}${this.shape.itemName.slice(1)} waiting to be ${this.shape.verb}`, this.rounds.items),
      this.latency.text(), '',
    ].join('\n');
  }

  /**
   * Queues `pending` for a round and waits for its answer: 503 while the server is shutting down, 429 when its
   * items would pass the queue's bound; a request whose client goes away before its round is skipped.
   */
  protected enqueue<T>(pending: Omit<P, 'done' | 'gone'>, res: ServerResponse): Promise<T | ApiError> {
    this.refuseWhileDraining();
    const queued = this.rounds.items;
    if (queued + pending.size > this.shape.maxQueuedItems) {
      throw new ApiError(429, `the server is busy: ${queued} ${this.shape.itemName} queued (limit ${this.shape.maxQueuedItems}); retry later`, 'rate_limit_error', null, 'queue_full');
    }
    return new Promise<T | ApiError>((resolve) => {
      const request = { ...pending, gone: false, done: resolve } as unknown as P;
      // The client went away before its round: its items are skipped, not computed.
      res.on('close', () => { request.gone = true; });
      this.rounds.push(request);
    });
  }

  /** 503 while close() runs. */
  protected refuseWhileDraining(): void {
    if (this.draining) throw new ApiError(503, 'the server is shutting down', 'server_error');
  }

  /** 404 unless `model` is absent or this server's name. */
  protected checkModel(model: string | undefined): void {
    if (model !== undefined && model !== this.modelName) {
      throw new ApiError(404, `the model '${model}' does not exist; this server has '${this.modelName}'`, 'invalid_request_error', 'model', 'model_not_found');
    }
  }

  protected send(res: ServerResponse, req: IncomingMessage, status: number | ApiError, body?: unknown): void {
    sendJson(res, req, this.shape.routes, this.requests, status, body);
  }

  private async shutDown(): Promise<void> {
    this.draining = true;
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeIdleConnections();
    await this.rounds.drain(Date.now() + this.shutdownTimeoutMs, (p) => p.done(new ApiError(503, 'the server is shutting down', 'server_error')));
    this.http.closeAllConnections();
    await closed;
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = checkRoute(req, res, this.shape.routes, this.access);
    if (path === undefined) return;  // a CORS preflight, answered
    if (this.shape.routes.get(path) === 'POST') return this.handle(path, req, res);
    if (path === '/health') return this.send(res, req, this.draining ? 503 : 200, { status: this.draining ? 'shutting down' : 'ok' });
    const models = modelsAnswer(req, path, { id: this.modelName, object: 'model', created: this.created, owned_by: 'fuseformer', ...this.modelCard() });
    if (models !== undefined) return this.send(res, req, 200, models);
    this.requests.inc({ endpoint: path, status: '200' });
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
    res.end(this.metricsText());
  }
}
