// The rerank server (`fuseformer serve --model RERANKER_DIR`): a cross-encoder's (or decoder reranker's) relevance
// scores over HTTP in the shape Jina's, Cohere's and vLLM's rerank APIs share.
//   POST /v1/rerank (also /rerank)   {query, documents: (string | {text})[], model?, top_n?, return_documents?,
//                                     prompt_name? (one of the model's sentence-transformers prompts: the instruction)}
//     → {id, model, results: [{index, relevance_score[, document: {text}]}] best first, usage: {total_tokens}}
//   GET  /v1/models, /health, /metrics (Prometheus text)
// Requests are scored in rounds: each round takes every waiting request (up to maxRoundDocuments documents,
// at least one request) and scores all their pairs together — for a cross-encoder sorted by length across
// requests, so a request's short documents share batches with others' rather than padding to its own longest;
// for a decoder reranker (packed passes: no padding) one query's requests in turn — yielding to the event loop
// while the device computes. Each request is answered as soon as its own pairs are scored, so its client's next
// request is queued while the round goes on. A request whose client went away before its round is skipped.
// Limits: body size (413), documents a request (400), queued documents (429); close() finishes what is queued
// (up to a timeout), then refuses the rest with 503 (round-server.ts has what both servers share).

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Reranker, RerankPair, ScoredPairs } from '../infer/reranker.js';
import { MODEL_ROUTE, readJsonBody } from './http-json.js';
import type { Routes } from './http-json.js';
import { gauge, LabeledCounter } from './metrics.js';
import { RoundServer } from './round-server.js';
import type { RoundServerOptions } from './round-server.js';
import { RoundAnswers } from './rounds.js';
import type { RoundRequest } from './rounds.js';
import { ApiError } from './validation.js';

export interface RerankServerOptions extends RoundServerOptions {
  /** Documents a request may hold at most (default 1,000). */
  readonly maxDocuments?: number;
  /** Documents scored in one round at most (default 512; a larger request runs alone). */
  readonly maxRoundDocuments?: number;
  /** Documents waiting to be scored at most; a request that would pass it gets 429 (default 16,384). */
  readonly maxQueuedDocuments?: number;
}

/** A request waiting for its round: its pairs, and how to answer it. */
interface Pending extends RoundRequest {
  readonly pairs: readonly RerankPair[];
  done(scored: ScoredPairs | ApiError): void;
}

/** A rerank request's fields, checked. */
export interface RerankParams {
  readonly model?: string;
  readonly query: string;
  readonly documents: string[];
  readonly topN?: number;
  readonly returnDocuments: boolean;
  readonly promptName?: string;
}

const ROUTES: Routes = new Map([['/v1/rerank', 'POST'], ['/rerank', 'POST'], ['/v1/models', 'GET'], [MODEL_ROUTE, 'GET'], ['/health', 'GET'], ['/metrics', 'GET']]);

/** A rerank body checked field by field; each error names the field (param) as OpenAI's errors do. */
export function parseRerankBody(body: unknown, maxDocuments: number): RerankParams {
  const fail = (param: string, message: string): never => { throw new ApiError(400, message, 'invalid_request_error', param); };
  if (typeof body !== 'object' || body === null || Array.isArray(body)) fail('body', 'the request body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (b['model'] !== undefined && typeof b['model'] !== 'string') fail('model', `'model' must be a string`);
  if (typeof b['query'] !== 'string') fail('query', `'query' is required and must be a string`);
  const docs = b['documents'];
  if (!Array.isArray(docs) || docs.length === 0) fail('documents', `'documents' is required: a non-empty list of strings (or {"text": …} objects)`);
  if ((docs as unknown[]).length > maxDocuments) fail('documents', `'documents' has ${(docs as unknown[]).length} entries; the limit is ${maxDocuments}`);
  const documents = (docs as unknown[]).map((d, i) => {
    if (typeof d === 'string') return d;
    if (typeof d === 'object' && d !== null && typeof (d as Record<string, unknown>)['text'] === 'string') return (d as Record<string, string>)['text']!;
    return fail('documents', `'documents[${i}]' must be a string or {"text": string}`);
  });
  const topN = b['top_n'];
  if (topN !== undefined && topN !== null && !(Number.isSafeInteger(topN) && (topN as number) >= 1)) fail('top_n', `'top_n' must be a positive integer`);
  const returnDocuments = b['return_documents'] ?? false;
  if (typeof returnDocuments !== 'boolean') fail('return_documents', `'return_documents' must be true or false`);
  const promptName = b['prompt_name'];
  if (promptName !== undefined && promptName !== null && typeof promptName !== 'string') fail('prompt_name', `'prompt_name' must be a string`);
  return {
    query: b['query'] as string, documents, returnDocuments: returnDocuments as boolean,
    ...(typeof b['model'] === 'string' ? { model: b['model'] } : {}), ...(typeof topN === 'number' ? { topN } : {}),
    ...(typeof promptName === 'string' ? { promptName } : {}),
  };
}

export class RerankServer extends RoundServer<Pending> {
  private readonly maxDocuments: number;
  private requestCount = 0;
  private readonly metrics = {
    documents: new LabeledCounter('fuseformer_rerank_documents_total', 'Documents scored'),
    tokens: new LabeledCounter('fuseformer_prompt_tokens_total', 'Tokens of the (query, document) pairs scored'),
    truncated: new LabeledCounter('fuseformer_rerank_pairs_truncated_total', 'Pairs cut to the length limit'),
  };

  constructor(readonly reranker: Reranker, options: RerankServerOptions = {}) {
    super({
      routes: ROUTES, maxRoundItems: options.maxRoundDocuments ?? 512, maxQueuedItems: options.maxQueuedDocuments ?? 16_384, itemName: 'documents', verb: 'scored',
      roundsMetric: { name: 'fuseformer_rerank_rounds_total', help: 'Rounds of the rerank loop (each scores every queued request it takes)' },
    }, options);
    this.maxDocuments = options.maxDocuments ?? 1000;
  }

  protected ownMetrics(): string[] {
    const m = this.metrics, prefix = this.reranker.scorer.prefixStats;
    return [
      m.documents.text(), m.tokens.text(), m.truncated.text(),
      ...(prefix ? [gauge('fuseformer_shared_prefix_tokens_total', 'Pair tokens not computed: the query\'s prefix, computed once a pass (or cached)', prefix.savedTokens, 'counter')] : []),
    ];
  }

  protected modelCard(): Record<string, unknown> {
    return { max_model_len: this.reranker.maxTokens };
  }

  /** One round: the pairs of every request it took, scored together; each request answered once its pairs are in. */
  protected async runRound(round: Pending[]): Promise<void> {
    let scored: ScoredPairs | undefined;
    const answers = new RoundAnswers(round.map((p) => p.pairs.length), (r, [at, end]) => {
      round[r]!.done({ scores: scored!.scores.slice(at, end), tokens: scored!.tokens.slice(at, end), truncated: scored!.truncated.slice(at, end) });
    });
    try {
      scored = await this.reranker.scorePairsAsync(round.flatMap((p) => p.pairs), (indices, sofar) => {
        scored = sofar;
        answers.finished(indices);
      });
      answers.answerRest();
    } catch (error) {
      const failure = new ApiError(500, `reranking failed: ${(error as Error).message}`, 'server_error');
      answers.answerRest((r) => round[r]!.done(failure));
    }
  }

  protected handle(_path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.rerank(req, res);
  }

  private async rerank(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = performance.now();
    this.refuseWhileDraining();
    const params = parseRerankBody(await readJsonBody(req, this.maxBodyBytes), this.maxDocuments);
    this.checkModel(params.model);
    let prompt: string | undefined;
    try {
      prompt = this.reranker.promptText(params.promptName !== undefined ? { promptName: params.promptName } : {});
    } catch (error) {
      throw new ApiError(400, (error as Error).message, 'invalid_request_error', 'prompt_name');
    }
    const pairs = params.documents.map((document) => ({ query: params.query, document, ...(prompt !== undefined ? { prompt } : {}) }));
    const scored = await this.enqueue<ScoredPairs>({ pairs, size: pairs.length }, res);
    if (scored instanceof ApiError) throw scored;
    const { scores } = scored, tokens = scored.tokens.reduce((a, b) => a + b, 0);
    const ranked = scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score || a.index - b.index).slice(0, params.topN ?? scores.length);
    this.metrics.documents.inc({}, scores.length);
    this.metrics.tokens.inc({}, tokens);
    this.metrics.truncated.inc({}, scored.truncated.filter((t) => t).length);
    this.latency.observe((performance.now() - arrival) / 1000);
    this.send(res, req, 200, {
      id: `rerank-${++this.requestCount}`,
      model: this.modelName,
      results: ranked.map(({ index, score }) => ({ index, relevance_score: score, ...(params.returnDocuments ? { document: { text: params.documents[index] } } : {}) })),
      usage: { total_tokens: tokens },
    });
  }
}
