// `fuseformer serve --model BERT_DIR`: a BERT-family, decoder embedding or sentence-transformers directory served as OpenAI's
// /v1/embeddings (serve/embedding-server.ts), a cross-encoder as /v1/rerank (serve/rerank-server.ts). runServe
// hands such a directory here with its options; the decoder server's options (KV cache, drafts, tensor
// parallelism, quantization) are refused by name.

import { basename, resolve } from 'node:path';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { Embedder } from '../infer/embedder.js';
import type { Pooling } from '../infer/pooling.js';
import { POOLINGS } from '../infer/pooling.js';
import type { PairTemplate } from '../infer/chat-pairs.js';
import { DecoderPairScorer } from '../infer/decoder-reranker.js';
import { Reranker } from '../infer/reranker.js';
import { EmbeddingServer } from '../serve/embedding-server.js';
import { RerankServer } from '../serve/rerank-server.js';
import type { AccessOptions } from '../serve/http-json.js';

export interface EmbeddingServeOptions {
  readonly access?: AccessOptions;
  readonly host?: string;
  readonly port: number;
  readonly servedName?: string;
  readonly dtype?: FloatDType;
  readonly backend?: string;
  readonly maxQueue?: number;
  readonly maxBodyBytes?: number;
  readonly batchSize?: number;
  readonly maxPassTokens?: number;
  readonly maxSharedPrefix?: number;
  readonly pooling?: string;
  readonly normalize?: boolean;
  /** Skip the start-up warm-up on CUDA (Embedder.warmUp / Reranker.warmUp). */
  readonly noWarmup?: boolean;
}

/** On CUDA (unless --no-warmup), the pass shapes the server will meet run once before it listens: compiles and GEMM tunings. */
function warmUpOnCuda(backendName: string, options: Pick<EmbeddingServeOptions, 'noWarmup'>, warmUp: () => number[]): void {
  if (backendName !== 'cuda' || options.noWarmup) return;
  const started = performance.now();
  const lengths = warmUp();
  process.stderr.write(`fuseformer serve: warmed up in ${((performance.now() - started) / 1000).toFixed(1)} s (passes of ${lengths.join(', ')} tokens)\n`);
}

/** Options of `fuseformer serve` that only a decoder model has. */
export const DECODER_ONLY_OPTIONS = [
  'max-len', 'max-running', 'max-batch-tokens', 'block-size', 'kv-blocks', 'kv-memory-fraction', 'no-prefix-caching', 'tp', 'draft',
  'draft-tokens', 'max-draft-tokens', 'fixed-draft-tokens', 'no-graphs', 'decode-steps', 'pipeline', 'no-pipeline', 'quantize', 'quantize-lm-head',
  'reasoning-parser', 'tool-call-parser', 'chat-template',
] as const;

/** Options of `fuseformer serve` that only an embedding model has. */
export const EMBEDDING_ONLY_OPTIONS = ['batch-size', 'max-pass-tokens', 'max-shared-prefix', 'pooling', 'normalize', 'no-normalize'] as const;

export async function serveEmbeddings(dir: string, options: EmbeddingServeOptions): Promise<number> {
  if (options.pooling !== undefined && !POOLINGS.includes(options.pooling as Pooling)) throw new ArgumentError(`--pooling must be ${POOLINGS.join(', ')}, got '${options.pooling}'`);
  const { backend } = await selectBackend(options.backend as BackendChoice | undefined);
  const embedder = Embedder.load(dir, backend, {
    ...(options.dtype ? { dtype: options.dtype } : {}), ...(options.batchSize !== undefined ? { batchSize: options.batchSize } : {}),
    ...(options.maxPassTokens !== undefined ? { maxPassTokens: options.maxPassTokens } : {}),
    ...(options.maxSharedPrefix !== undefined ? { maxSharedPrefix: options.maxSharedPrefix } : {}),
    ...(options.pooling !== undefined ? { pooling: options.pooling as Pooling } : {}), ...(options.normalize !== undefined ? { normalize: options.normalize } : {}),
  });
  try {
    warmUpOnCuda(backend.name, options, () => embedder.warmUp());
    const server = new EmbeddingServer(embedder, {
      modelName: options.servedName ?? basename(resolve(dir)), ...(options.access ? { access: options.access } : {}),
      ...(options.maxQueue !== undefined ? { maxQueuedInputs: options.maxQueue } : {}), ...(options.maxBodyBytes !== undefined ? { maxBodyBytes: options.maxBodyBytes } : {}),
    });
    const address = await server.listen(options.port, options.host ?? '127.0.0.1');
    const e = embedder;
    process.stderr.write(`fuseformer serve: '${server.modelName}' (embeddings: ${e.encoder.kind}, ${e.encoder.layerCount} layers, ${e.dimensions} dimensions, ${e.pooling} pooling${e.normalize ? ', normalised' : ''}`
      + `${e.sentenceTransformers ? ', sentence-transformers modules.json' : ''}; ${e.encoder.dtype}) on ${backend.description}; inputs up to ${e.truncateAt ?? e.maxTokens} tokens`
      + `${e.truncateAt !== undefined ? ' (longer ones truncated)' : ''}; listening on http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}\n`);
    await untilStopSignal('finishing queued requests');
    await server.close();
  } finally {
    embedder.free();
  }
  return 0;
}

/** A reranker directory served as /v1/rerank until SIGINT / SIGTERM. */
export async function serveRerank(dir: string, options: Pick<EmbeddingServeOptions, 'access' | 'host' | 'port' | 'servedName' | 'dtype' | 'backend' | 'maxBodyBytes' | 'maxQueue' | 'batchSize' | 'maxPassTokens' | 'maxSharedPrefix' | 'noWarmup'> & { chatTemplate?: PairTemplate }): Promise<number> {
  const { backend } = await selectBackend(options.backend as BackendChoice | undefined);
  const reranker = Reranker.load(dir, backend, {
    ...(options.dtype ? { dtype: options.dtype } : {}), ...(options.batchSize !== undefined ? { batchSize: options.batchSize } : {}),
    ...(options.maxPassTokens !== undefined ? { maxPassTokens: options.maxPassTokens } : {}), ...(options.chatTemplate ? { chatTemplate: options.chatTemplate } : {}),
    ...(options.maxSharedPrefix !== undefined ? { maxSharedPrefix: options.maxSharedPrefix } : {}),
  });
  try {
    warmUpOnCuda(backend.name, options, () => reranker.warmUp());
    const server = new RerankServer(reranker, {
      modelName: options.servedName ?? basename(resolve(dir)), ...(options.access ? { access: options.access } : {}),
      ...(options.maxBodyBytes !== undefined ? { maxBodyBytes: options.maxBodyBytes } : {}), ...(options.maxQueue !== undefined ? { maxQueuedDocuments: options.maxQueue } : {}),
    });
    const address = await server.listen(options.port, options.host ?? '127.0.0.1');
    process.stderr.write(`fuseformer serve: '${server.modelName}' (rerank: ${describeReranker(reranker)}) on ${backend.description}; `
      + `pairs up to ${reranker.maxTokens} tokens; listening on http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}\n`);
    await untilStopSignal('finishing queued requests');
    await server.close();
  } finally {
    reranker.free();
  }
  return 0;
}

/** 'a BERT cross-encoder of 6 layers; bf16', 'a decoder of 28 layers scoring logit("yes") − logit("no"); bf16'. */
export function describeReranker(reranker: Reranker): string {
  const s = reranker.scorer;
  const what = s instanceof DecoderPairScorer ? `a decoder of ${s.layerCount} layers scoring ${s.headDescription}, pairs by ${s.pairFormat}` : `a ${s.kind} cross-encoder of ${s.layerCount} layers`;
  return `${what}; ${s.dtype}`;
}

/** Resolves at SIGINT or SIGTERM (Ctrl-C, a service manager's stop), saying what the server does next. */
export function untilStopSignal(doing: string): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = () => { process.stderr.write(`fuseformer serve: shutting down (${doing})\n`); resolve(); };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
