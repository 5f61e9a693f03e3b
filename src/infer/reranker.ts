// Reranking: each (query, document) pair scored by a cross-encoder — what sentence-transformers'
// CrossEncoder.predict returns for a one-label model: the logit through a sigmoid (or as it is, where the
// model's activation_fn is Identity). Two kinds of model score pairs (PairScorer):
//   BERT-family …ForSequenceClassification (cross-encoder/ms-marco-MiniLM, BAAI/bge-reranker): the pair as
//     the tokenizer's pair template joins it ([CLS] q [SEP] d [SEP], <s> q </s></s> d </s>), the longer side cut
//     first where it exceeds the length limit (truncation "longest_first"), the classification head's logit
//   decoders (decoder-reranker.ts): Qwen3-Reranker-style causal LMs (logit("yes") − logit("no") at the last
//     token, the pair rendered by the chat template) and …ForSequenceClassification decoders
// Named prompts (config_sentence_transformers.json's prompts, default_prompt_name) are the reranker's
// instruction: before the query, or the chat template's system message. Pairs are taken longest text first (as
// CrossEncoder.predict sorts them), a batch's worth encoded (tokenizing, a chat template's render) while the batch
// before it runs on the device, then padded by token length (lengthSortedBatches).

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { loadTokenizer } from '../io/tokenizer.js';
import { hasTokenTypes } from '../models/bert.js';
import { loadModelConfig } from '../models/registry.js';
import type { BertAttentionPath } from './bert.js';
import { BertEncoder } from './bert.js';
import type { EncodedPair, PairTemplate } from './chat-pairs.js';
import { DecoderPairScorer } from './decoder-reranker.js';
import type { PaddedBatch, PromptOptions } from './embedder.js';
import { encoderWarmUpLengths, lengthSortedBatches } from './embedder.js';
import type { CrossEncoderConfig } from './sentence-transformers.js';
import type { PrefixStats } from './shared-prefix.js';
import { chosenPrompt, readCrossEncoderConfig, tokenizerLengthLimit } from './sentence-transformers.js';

export interface RerankerOptions {
  readonly dtype?: FloatDType;
  /** BERT cross-encoders only (decoders run the fused causal attention). */
  readonly attention?: BertAttentionPath;
  /** Pairs per encoder pass (default 32). */
  readonly batchSize?: number;
  /** The most tokens a pair may have (default: the model's max_seq_length, else its tokenizer's limit, within its positions). */
  readonly maxTokens?: number;
  /** Decoders: the most tokens one pass takes (decoder-encoder.ts' DEFAULT_PASS_TOKENS); batches shrink to fit it. */
  readonly maxPassTokens?: number;
  /** Decoders: the longest prefix the pairs of a pass share that is computed once (decoder-encoder.ts; default 2048, 0 never). */
  readonly maxSharedPrefix?: number;
  /** Decoders: passes packed without padding (decoder-encoder.ts; default true). */
  readonly packedPasses?: boolean;
  /** Decoders: a chat template in place of the model's own (one that renders the query / document roles). */
  readonly chatTemplate?: PairTemplate;
}

export interface Reranked {
  /** One score per document, in the documents' order (in (0, 1) through the sigmoid). */
  readonly scores: number[];
  /** Tokens encoded, all pairs together (after truncation). */
  readonly tokens: number;
  /** Pairs cut to the length limit. */
  readonly truncated: number;
}

/** Logits queued on the device: wait() reads them, one a pair of the batch. */
export interface PendingLogits {
  wait(): number[];
  /** Whether wait() would return without blocking on the device. */
  ready(): boolean;
}

/** A (query, document) pair to score, with its instruction where it has one. */
export interface RerankPair {
  readonly query: string;
  readonly document: string;
  readonly prompt?: string;
}

/** Pairs' scores, token counts and whether each was cut, in the pairs' order. */
export interface ScoredPairs {
  readonly scores: number[];
  readonly tokens: number[];
  readonly truncated: boolean[];
}

function newScored(count: number): ScoredPairs {
  return { scores: new Array<number>(count), tokens: new Array<number>(count).fill(0), truncated: new Array<boolean>(count).fill(false) };
}

/** What scores pairs: a BERT-family cross-encoder or a decoder (decoder-reranker.ts). */
export interface PairScorer {
  /** 'BERT' or 'decoder', for messages. */
  readonly kind: string;
  readonly backend: Backend;
  readonly dtype: FloatDType;
  readonly layerCount: number;
  /** The most tokens a pair may have: the model's positions (within one pass). */
  readonly maxTokens: number;
  readonly maxPassTokens?: number;
  readonly padTokenId: number;
  /** A decoder's shared-prefix passes (decoder-encoder.ts). */
  readonly prefixStats?: PrefixStats;
  /** Whether a pass computes its pairs' common prefix once (a decoder's shared prefix): batches then keep one query's pairs together. */
  readonly sharesPrefixes?: boolean;
  /** Whether a pass packs its pairs without padding (a decoder's packed passes): its cost then does not depend on how alike their lengths are. */
  readonly packedPasses?: boolean;
  /** The pair's tokens, at most `maxTokens`; `prompt` is the instruction, where one is given. */
  encode(query: string, document: string, maxTokens: number, prompt?: string): EncodedPair;
  logitsLater(batch: PaddedBatch & { readonly typeIds: readonly (readonly number[])[] }): PendingLogits;
  free(): void;
}

export class Reranker {
  readonly batchSize: number;
  readonly maxTokens: number;
  readonly activation: 'sigmoid' | 'identity';
  readonly prompts: Readonly<Record<string, string>>;
  readonly defaultPromptName?: string;

  private constructor(readonly scorer: PairScorer, crossEncoder: CrossEncoderConfig | undefined, modelDir: string, options: RerankerOptions) {
    this.batchSize = options.batchSize ?? 32;
    if (!Number.isSafeInteger(this.batchSize) || this.batchSize < 1) throw new ArgumentError(`batch size must be a positive integer, got ${this.batchSize}`);
    // CrossEncoder truncates to its max_length, else to the tokenizer's model_max_length.
    this.maxTokens = Math.min(options.maxTokens ?? crossEncoder?.maxSeqLength ?? tokenizerLengthLimit(modelDir) ?? Infinity, scorer.maxTokens);
    if (!Number.isSafeInteger(this.maxTokens) || this.maxTokens < 4) throw new ArgumentError(`the length limit must be an integer of at least 4, got ${options.maxTokens}`);
    this.activation = crossEncoder?.activation ?? 'sigmoid';
    this.prompts = crossEncoder?.prompts ?? {};
    if (crossEncoder?.defaultPromptName !== undefined) this.defaultPromptName = crossEncoder.defaultPromptName;
  }

  /**
   * A reranker directory onto `backend`: a BERT / RoBERTa / XLM-RoBERTa cross-encoder, or a decoder (a causal LM
   * scored by its "yes" / "no" logits, or a …ForSequenceClassification decoder); plain HF or sentence-transformers
   * (modules.json). The model is freed again if the rest fails.
   */
  static load(dir: string, backend: Backend, options: RerankerOptions = {}): Reranker {
    const crossEncoder = readCrossEncoderConfig(dir);
    const modelDir = crossEncoder?.modelDir ?? dir;
    const tokenizer = loadTokenizer(modelDir);
    const family = loadModelConfig(modelDir).family;
    let scorer: PairScorer;
    if (family === 'bert') {
      if (options.chatTemplate) throw new ArgumentError(`${modelDir}: a chat template is for decoder rerankers; this is a BERT-family cross-encoder (its tokenizer joins the pair)`);
      if (options.maxSharedPrefix !== undefined) throw new ArgumentError(`${modelDir}: maxSharedPrefix applies to decoder rerankers; a BERT cross-encoder attends both ways, so no prefix is computed once`);
      if (options.packedPasses !== undefined) throw new ArgumentError(`${modelDir}: packedPasses applies to decoder rerankers; a BERT cross-encoder's passes are padded`);
      scorer = BertPairScorer.load(modelDir, backend, tokenizer, options);
    } else if (family === 'llama' || family === 'gpt2') {
      if (options.attention) throw new ArgumentError(`${modelDir}: the attention path is for BERT cross-encoders; a decoder reranker runs the fused causal attention`);
      scorer = DecoderPairScorer.load(modelDir, backend, tokenizer, crossEncoder, options);
    } else {
      throw new ArgumentError(`${modelDir}: a ${family} model does not rerank (a cross-encoder is a BERT-family or decoder model with a classification head, or a causal LM reranker)`);
    }
    try {
      return new Reranker(scorer, crossEncoder, modelDir, options);
    } catch (error) {
      scorer.free();
      throw error;
    }
  }

  get dtype(): FloatDType { return this.scorer.dtype; }

  /** The instruction the options ask for: `prompt` as given, a named one, else the model's default (none without one). */
  promptText(options: PromptOptions = {}): string | undefined {
    return chosenPrompt(this.prompts, this.defaultPromptName, options, 'rerank');
  }

  /** Each document's relevance to `query`, in the documents' order. */
  rerank(query: string, documents: readonly string[], options: PromptOptions = {}): Reranked {
    if (typeof query !== 'string') throw new ArgumentError(`the query must be text, got ${typeof query}`);
    documents.forEach((d, i) => { if (typeof d !== 'string') throw new ArgumentError(`document ${i} must be text, got ${d === null ? 'null' : typeof d}`); });
    const prompt = this.promptText(options);
    const scored = this.scorePairs(documents.map((document) => ({ query, document, ...(prompt !== undefined ? { prompt } : {}) })));
    return { scores: scored.scores, tokens: scored.tokens.reduce((a, b) => a + b, 0), truncated: scored.truncated.filter((t) => t).length };
  }

  /**
   * The pass shapes a server meets, run once before its first request (the rerank server's start-up on CUDA): a
   * batch of batchSize pairs whose documents reach each length encoderWarmUpLengths() gives (cut to the pair
   * limit), so that kernels compile and GEMM row buckets tune now instead of inside requests. A decoder's
   * shared-prefix statistics are left as they were. Returns the lengths run.
   */
  warmUp(): number[] {
    const lengths = encoderWarmUpLengths(this.maxTokens), stats = this.scorer.prefixStats ? { ...this.scorer.prefixStats } : undefined;
    for (const length of lengths) {
      const document = Array.from({ length }, (_, j) => WARMUP_WORDS[j % WARMUP_WORDS.length]).join(' ');
      this.scorePairs(Array.from({ length: this.batchSize }, (_, i) => ({ query: `warm-up query ${i % 4}`, document })));
    }
    if (stats) Object.assign(this.scorer.prefixStats!, stats);
    return lengths;
  }

  /** Each pair's score (its own query and instruction), in the pairs' order: several requests' pairs in shared batches. */
  scorePairs(pairs: readonly RerankPair[]): ScoredPairs {
    const out = newScored(pairs.length);
    for (const _pending of this.scoring(pairs, out)) { /* wait() reads each batch in turn */ }
    return out;
  }

  /**
   * scorePairs, yielding to the event loop while the device computes (the rerank server's rounds); `onScored` is
   * called after each batch is read with the indices of the pairs it scored and the scores so far (the server
   * answers a request as soon as all of its pairs are in).
   */
  async scorePairsAsync(pairs: readonly RerankPair[], onScored?: (indices: readonly number[], scored: ScoredPairs) => void): Promise<ScoredPairs> {
    const out = newScored(pairs.length);
    for (const pending of this.scoring(pairs, out, onScored)) {
      while (!pending.ready()) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    return out;
  }

  /**
   * Scores `pairs` into `out`, yielding each queued batch before reading it: pairs are taken longest text first
   * (as CrossEncoder.predict sorts them, so a batch pads little) — in their given order where batches are reported
   * (onScored) and the scorer packs its passes (nothing to pad), so that pairs given together (a server request's)
   * finish together — with one query's pairs (with its instruction) together first where the scorer shares
   * prefixes; a batch's worth encoded while the batch before it runs on the device.
   */
  private *scoring(pairs: readonly RerankPair[], out: ScoredPairs, onScored?: (indices: readonly number[], scored: ScoredPairs) => void): Generator<PendingLogits, void, void> {
    const size = (p: RerankPair) => p.query.length + p.document.length;
    const group = this.scorer.sharesPrefixes ? queryGroups(pairs) : undefined, bySize = !(onScored && this.scorer.packedPasses === true);
    const order = pairs.map((_, i) => i).sort((a, b) => (group ? group[a]! - group[b]! : 0) || (bySize ? size(pairs[b]!) - size(pairs[a]!) : 0) || a - b);
    let queued: { members: readonly number[]; pending: PendingLogits } | undefined;
    const read = (q: { members: readonly number[]; pending: PendingLogits }) => {
      q.pending.wait().forEach((logit, k) => { out.scores[q.members[k]!] = this.activation === 'sigmoid' ? 1 / (1 + Math.exp(-logit)) : logit; });
      onScored?.(q.members, out);
    };
    for (let first = 0; first < order.length; first += this.batchSize) {
      const chunk = order.slice(first, first + this.batchSize);
      const encoded = chunk.map((i) => this.scorer.encode(pairs[i]!.query, pairs[i]!.document, this.maxTokens, pairs[i]!.prompt));
      chunk.forEach((i, k) => { out.tokens[i] = encoded[k]!.ids.length; out.truncated[i] = encoded[k]!.truncated; });
      for (const batch of lengthSortedBatches(encoded.map((p) => p.ids), this.batchSize, this.scorer.padTokenId, this.scorer.maxTokens, this.scorer.maxPassTokens)) {
        const length = batch.inputIds[0]!.length;
        const typeIds = batch.members.map((k) => Array.from({ length }, (_, l) => encoded[k]!.typeIds?.[l] ?? 0));
        const next = { members: batch.members.map((k) => chunk[k]!), pending: this.scorer.logitsLater({ ...batch, typeIds }) };
        if (queued) { yield queued.pending; read(queued); }
        queued = next;
      }
    }
    if (queued) { yield queued.pending; read(queued); }
  }

  free(): void { this.scorer.free(); }
}

/** Each pair's group: pairs of one query and instruction share a number (groups numbered by first appearance). */
function queryGroups(pairs: readonly RerankPair[]): Int32Array {
  const numbers = new Map<string, number>();
  return Int32Array.from(pairs, (p) => {
    const key = `${p.prompt ?? ''}\u0000${p.query}`;
    let n = numbers.get(key);
    if (n === undefined) numbers.set(key, (n = numbers.size));
    return n;
  });
}

/** A BERT-family …ForSequenceClassification model with one label; the tokenizer's pair template joins the pair. */
class BertPairScorer implements PairScorer {
  readonly kind = 'BERT';

  private constructor(readonly encoder: BertEncoder, private readonly tokenizer: Tokenizer) {
    const labels = encoder.labels;
    if (labels === undefined) throw new ArgumentError(`${encoder.source}: no sequence-classification head (classifier.weight or classifier.out_proj.weight): not a cross-encoder`);
    if (labels !== 1) throw new ArgumentError(`${encoder.source}: a classification head of ${labels} labels; a reranker scores with one (num_labels 1)`);
    if (!tokenizer.encodePair) throw new ArgumentError(`${encoder.source}: its tokenizer cannot encode a text pair`);
  }

  static load(dir: string, backend: Backend, tokenizer: Tokenizer, options: RerankerOptions): BertPairScorer {
    const { encoder } = BertEncoder.load(dir, backend, { ...(options.attention ? { attention: options.attention } : {}), ...(options.dtype ? { dtype: options.dtype } : {}) });
    try {
      return new BertPairScorer(encoder, tokenizer);
    } catch (error) {
      encoder.free();
      throw error;
    }
  }

  get backend(): Backend { return this.encoder.backend; }
  get dtype(): FloatDType { return this.encoder.dtype; }
  get layerCount(): number { return this.encoder.config.layers; }
  get maxTokens(): number { return this.encoder.maxTokens; }
  get padTokenId(): number { return this.tokenizer.padTokenId ?? this.encoder.config.padTokenId; }

  encode(query: string, document: string, maxTokens: number, prompt?: string): EncodedPair {
    const pair = this.tokenizer.encodePair!((prompt ?? '') + query, document, maxTokens);
    // Token types where the model has two (BERT); RoBERTa-family models take none (zeros), as HF passes them.
    const typed = hasTokenTypes(this.encoder.config) && this.encoder.config.typeVocabSize > 1;
    return typed ? pair : { ids: pair.ids, truncated: pair.truncated };
  }

  logitsLater(batch: PaddedBatch & { readonly typeIds: readonly (readonly number[])[] }): PendingLogits {
    const logits = this.encoder.classify(batch.inputIds, batch.attentionMask, batch.typeIds);
    return { wait: () => [...logits], ready: () => true };
  }

  free(): void { this.encoder.free(); }
}

/** Words of the warm-up's documents: about a token each in any vocabulary. */
const WARMUP_WORDS = ['the', 'sea', 'whale', 'ship', 'night', 'water', 'cold', 'light'];
