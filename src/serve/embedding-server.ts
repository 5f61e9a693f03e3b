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

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Embedder } from '../infer/embedder.js';
import { EmbedInputError } from '../infer/embedder.js';
import { MODEL_ROUTE, readJsonBody } from './http-json.js';
import type { Routes } from './http-json.js';
import { gauge, LabeledCounter } from './metrics.js';
import { RoundServer } from './round-server.js';
import type { RoundServerOptions } from './round-server.js';
import { RoundAnswers } from './rounds.js';
import type { RoundRequest } from './rounds.js';
import { ApiError, parseEmbeddingBody } from './validation.js';

export interface EmbeddingServerOptions extends RoundServerOptions {
  /** Inputs waiting to be embedded at most; a request that would pass it gets 429 (default 16,384). */
  readonly maxQueuedInputs?: number;
  /** Inputs embedded in one round of the loop at most (default 512; a larger request runs alone). */
  readonly maxRoundInputs?: number;
}

interface Pending extends RoundRequest {
  readonly sequences: number[][];
  readonly dimensions: number;
  done(vectors: Float32Array[] | ApiError): void;
}

const ROUTES: Routes = new Map([['/v1/embeddings', 'POST'], ['/v1/models', 'GET'], [MODEL_ROUTE, 'GET'], ['/health', 'GET'], ['/metrics', 'GET']]);

export class EmbeddingServer extends RoundServer<Pending> {
  private readonly metrics = {
    inputs: new LabeledCounter('fuseformer_embedding_inputs_total', 'Inputs embedded'),
    tokens: new LabeledCounter('fuseformer_prompt_tokens_total', 'Tokens of the inputs embedded'),
    truncated: new LabeledCounter('fuseformer_embedding_inputs_truncated_total', 'Inputs cut to the model\'s max_seq_length'),
  };

  constructor(readonly embedder: Embedder, options: EmbeddingServerOptions = {}) {
    super({
      routes: ROUTES, maxRoundItems: options.maxRoundInputs ?? 512, maxQueuedItems: options.maxQueuedInputs ?? 16_384, itemName: 'inputs', verb: 'embedded',
      roundsMetric: { name: 'fuseformer_embedding_rounds_total', help: 'Rounds of the embedding loop (each embeds every queued request it takes)' },
    }, options);
  }

  protected ownMetrics(): string[] {
    const m = this.metrics, prefix = this.embedder.encoder.prefixStats;
    return [
      m.inputs.text(), m.tokens.text(), m.truncated.text(),
      ...(prefix ? [gauge('fuseformer_shared_prefix_tokens_total', 'Input tokens not computed: a prefix the texts of a pass share, computed once (or cached)', prefix.savedTokens, 'counter')] : []),
    ];
  }

  protected modelCard(): Record<string, unknown> {
    return { max_model_len: this.embedder.truncateAt ?? this.embedder.maxTokens, dimensions: this.embedder.dimensions };
  }

  /**
   * One round: the inputs of every request it took in shared batches (length-sorted, or in turn where the encoder
   * packs its passes); each request answered once its inputs are embedded.
   */
  protected async runRound(round: Pending[]): Promise<void> {
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

  protected handle(_path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.embeddings(req, res);
  }

  private async embeddings(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = performance.now();
    this.refuseWhileDraining();
    const params = parseEmbeddingBody(await readJsonBody(req, this.maxBodyBytes));
    this.checkModel(params.model);
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
    const vectors = await this.enqueue<Float32Array[]>({ sequences: prepared.map((p) => p.ids), size: prepared.length, dimensions }, res);
    if (vectors instanceof ApiError) throw vectors;
    const tokens = prepared.reduce((n, p) => n + p.ids.length, 0);
    this.metrics.inputs.inc({}, vectors.length);
    this.metrics.tokens.inc({}, tokens);
    this.metrics.truncated.inc({}, prepared.filter((p) => p.truncated).length);
    this.latency.observe((performance.now() - arrival) / 1000);
    this.send(res, req, 200, {
      object: 'list',
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: params.encodingFormat === 'base64' ? base64(v) : Array.from(v) })),
      model: this.modelName,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
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
