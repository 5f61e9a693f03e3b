// Reranking with a cross-encoder (BertForSequenceClassification: cross-encoder/ms-marco-MiniLM; XLMRoberta-
// ForSequenceClassification: BAAI/bge-reranker): each (query, document) pair is encoded together as the
// tokenizer's pair template joins them ([CLS] q [SEP] d [SEP], <s> q </s></s> d </s>), the longer side cut
// first where the pair exceeds the length limit (truncation "longest_first"), and the classification head's
// one logit becomes the relevance score through a sigmoid — what sentence-transformers' CrossEncoder.predict
// returns for a one-label model. Pairs are batched by length as the Embedder's inputs are (lengthSortedBatches).

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { loadTokenizer } from '../io/tokenizer.js';
import { hasTokenTypes } from '../models/bert.js';
import type { BertAttentionPath } from './bert.js';
import { BertEncoder } from './bert.js';
import { lengthSortedBatches } from './embedder.js';

export interface RerankerOptions {
  readonly dtype?: FloatDType;
  readonly attention?: BertAttentionPath;
  /** Pairs per encoder pass (default 32). */
  readonly batchSize?: number;
  /** The most tokens a pair may have (default: the model's positions). */
  readonly maxTokens?: number;
}

export interface Reranked {
  /** One score in (0, 1) per document, in the documents' order. */
  readonly scores: number[];
  /** Tokens encoded, all pairs together (after truncation). */
  readonly tokens: number;
  /** Pairs cut to the length limit. */
  readonly truncated: number;
}

export class Reranker {
  readonly batchSize: number;
  readonly maxTokens: number;

  private constructor(readonly encoder: BertEncoder, readonly tokenizer: Tokenizer, options: RerankerOptions) {
    const labels = encoder.labels;
    if (labels === undefined) throw new ArgumentError(`${encoder.source}: no sequence-classification head (classifier.weight or classifier.out_proj.weight): not a cross-encoder`);
    if (labels !== 1) throw new ArgumentError(`${encoder.source}: a classification head of ${labels} labels; a reranker scores with one (num_labels 1)`);
    if (!tokenizer.encodePair) throw new ArgumentError(`${encoder.source}: its tokenizer cannot encode a text pair`);
    this.batchSize = options.batchSize ?? 32;
    if (!Number.isSafeInteger(this.batchSize) || this.batchSize < 1) throw new ArgumentError(`batch size must be a positive integer, got ${this.batchSize}`);
    this.maxTokens = Math.min(options.maxTokens ?? Infinity, encoder.maxTokens);
    if (!Number.isSafeInteger(this.maxTokens) || this.maxTokens < 4) throw new ArgumentError(`the length limit must be an integer of at least 4, got ${options.maxTokens}`);
  }

  /** A cross-encoder directory onto `backend` (the encoder freed again if the rest fails). */
  static load(dir: string, backend: Backend, options: RerankerOptions = {}): Reranker {
    const tokenizer = loadTokenizer(dir);
    const { encoder } = BertEncoder.load(dir, backend, { ...(options.attention ? { attention: options.attention } : {}), ...(options.dtype ? { dtype: options.dtype } : {}) });
    try {
      return new Reranker(encoder, tokenizer, options);
    } catch (error) {
      encoder.free();
      throw error;
    }
  }

  /** Each document's relevance to `query`, in the documents' order. */
  rerank(query: string, documents: readonly string[]): Reranked {
    if (typeof query !== 'string') throw new ArgumentError(`the query must be text, got ${typeof query}`);
    documents.forEach((d, i) => { if (typeof d !== 'string') throw new ArgumentError(`document ${i} must be text, got ${d === null ? 'null' : typeof d}`); });
    const pairs = documents.map((d) => this.tokenizer.encodePair!(query, d, this.maxTokens));
    // Token types where the model has two (BERT); RoBERTa-family models take none (zeros), as HF passes them.
    const typed = hasTokenTypes(this.encoder.config) && this.encoder.config.typeVocabSize > 1;
    const padId = this.tokenizer.padTokenId ?? this.encoder.config.padTokenId;
    const scores = new Array<number>(pairs.length);
    for (const { members, inputIds, attentionMask } of lengthSortedBatches(pairs.map((p) => p.ids), this.batchSize, padId, this.encoder.maxTokens)) {
      const length = inputIds[0]!.length;
      const types = members.map((i) => Array.from({ length }, (_, l) => (typed ? pairs[i]!.typeIds[l] ?? 0 : 0)));
      const logits = this.encoder.classify(inputIds, attentionMask, types);
      members.forEach((i, k) => { scores[i] = 1 / (1 + Math.exp(-logits[k]!)); });
    }
    return { scores, tokens: pairs.reduce((n, p) => n + p.ids.length, 0), truncated: pairs.filter((p) => p.truncated).length };
  }

  free(): void { this.encoder.free(); }
}
