// Sentence embeddings from a BERT-family directory or a decoder model's (Qwen3-Embedding, gte-Qwen2, …; plain, or
// sentence-transformers with modules.json), as `fuseformer embed` and the embeddings server use them: texts (or
// token ids) → tokens → padded batches → pooled, optionally normalised vectors. A sentence-transformers
// directory sets the defaults as SentenceTransformer.encode has them (pooling, Dense layers — run on the device
// after the pooling —, Normalize, max_seq_length truncation, do_lower_case, named prompts); without one, a text
// longer than the model's positions is an error naming it, and a decoder pools its last token, a BERT the mean.
//
// Batches are formed from the inputs sorted by length (longest first), so each pads only to its own
// longest member (rounded up to a few bucketed lengths, so that batches repeat shapes); vectors come back in
// the inputs' order.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { loadTokenizer } from '../io/tokenizer.js';
import { loadModelConfig } from '../models/registry.js';
import type { BertAttentionPath } from './bert.js';
import { BertEncoder, padSequences } from './bert.js';
import { DecoderEncoder } from './decoder-encoder.js';
import type { DenseLayer, EmbeddingOptions, PendingEmbeddings, Pooling } from './pooling.js';
import { checkedPooling } from './pooling.js';
import type { SentenceTransformersConfig } from './sentence-transformers.js';
import type { PrefixStats } from './shared-prefix.js';
import { chosenPrompt, readSentenceTransformersConfig, truncateTokens } from './sentence-transformers.js';

/** What the Embedder runs: a BERT-family encoder (bert.ts) or a decoder model's final hidden states (decoder-encoder.ts). */
export interface SentenceEncoder {
  /** 'BERT' or 'decoder', for messages. */
  readonly kind: string;
  readonly backend: Backend;
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly layerCount: number;
  readonly vocabSize: number;
  /** The id padded positions hold (never attended or pooled). */
  readonly padTokenId: number;
  /** The most tokens a sequence may have. */
  readonly maxTokens: number;
  /** The most tokens (sequences × padded length) one pass takes, where the encoder has such a bound. */
  readonly maxPassTokens?: number;
  /** A decoder's shared-prefix passes (decoder-encoder.ts). */
  readonly prefixStats?: PrefixStats;
  /** Whether a pass packs its sequences without padding (a decoder's packed passes): its cost then does not depend on how alike their lengths are. */
  readonly packedPasses?: boolean;
  embeddingsLater(inputIds: readonly (readonly number[])[], attentionMask: readonly (readonly number[])[] | undefined, options: EmbeddingOptions): PendingEmbeddings;
  free(): void;
}

export interface EmbedderOptions {
  readonly dtype?: FloatDType;
  /** BERT encoders only (decoders run the fused causal attention). */
  readonly attention?: BertAttentionPath;
  /** Default: the sentence-transformers Pooling module's mode, else last for a decoder, mean for a BERT. */
  readonly pooling?: Pooling;
  /** Default: whether a sentence-transformers Normalize module follows, else false. */
  readonly normalize?: boolean;
  /** Sequences per encoder pass (default 32). */
  readonly batchSize?: number;
  /** Decoders: the most tokens one pass takes (decoder-encoder.ts' DEFAULT_PASS_TOKENS); batches shrink to fit it. */
  readonly maxPassTokens?: number;
  /** Decoders under last-token pooling: the longest prefix a pass's texts share that is computed once (decoder-encoder.ts; default 2048, 0 never). */
  readonly maxSharedPrefix?: number;
  /** Decoders: passes packed without padding (decoder-encoder.ts; default true). */
  readonly packedPasses?: boolean;
}

/** Which prompt embed() puts before each text: one by name (config_sentence_transformers.json's prompts) or a text. */
export interface PromptOptions {
  readonly promptName?: string;
  readonly prompt?: string;
}

/** An input the model cannot take: `index` is its position in the call's inputs. */
export class EmbedInputError extends ArgumentError {
  constructor(readonly index: number, message: string) { super(message); }
}

export interface Embedded {
  readonly vectors: Float32Array[];
  /** Tokens encoded (after truncation), all inputs together. */
  readonly tokens: number;
  /** Inputs cut to max_seq_length. */
  readonly truncated: number;
}

export class Embedder {
  readonly pooling: Pooling;
  readonly normalize: boolean;
  readonly batchSize: number;
  /** The most tokens an input may have (after any truncation). */
  readonly maxTokens: number;
  /** sentence_bert_config.json's max_seq_length within the model's positions; undefined: no truncation. */
  readonly truncateAt: number | undefined;
  /** The sentence-transformers Dense layers on the device (empty without any). */
  private readonly dense: readonly DenseLayer[];

  private constructor(
    readonly encoder: SentenceEncoder, readonly tokenizer: Tokenizer, readonly sentenceTransformers: SentenceTransformersConfig | undefined,
    readonly unused: readonly string[], options: EmbedderOptions,
  ) {
    this.pooling = checkedPooling(options.pooling ?? sentenceTransformers?.pooling ?? (encoder.kind === 'decoder' ? 'last' : 'mean'), 'embeddings');
    this.normalize = options.normalize ?? sentenceTransformers?.normalize ?? false;
    this.batchSize = options.batchSize ?? 32;
    if (!Number.isSafeInteger(this.batchSize) || this.batchSize < 1) throw new ArgumentError(`batch size must be a positive integer, got ${this.batchSize}`);
    this.maxTokens = encoder.maxTokens;
    this.truncateAt = sentenceTransformers?.maxSeqLength === undefined ? undefined : Math.min(sentenceTransformers.maxSeqLength, this.maxTokens);
    const first = sentenceTransformers?.dense[0];
    if (first && first.inFeatures !== encoder.hidden) throw new ArgumentError(`${first.source}: in_features ${first.inFeatures}, but the encoder's vectors have ${encoder.hidden} values`);
    const backend = encoder.backend, dtype = encoder.dtype;
    this.dense = (sentenceTransformers?.dense ?? []).map((d) => ({
      weight: backend.fromArray(d.weight, [d.outFeatures, d.inFeatures], dtype),
      ...(d.bias ? { bias: backend.fromArray(d.bias, [d.outFeatures], dtype) } : {}),
      activation: d.activation,
    }));
  }

  /** A BERT, decoder or sentence-transformers directory onto `backend` (the encoder freed again if the rest fails). */
  static load(dir: string, backend: Backend, options: EmbedderOptions = {}): Embedder {
    const sentenceTransformers = readSentenceTransformersConfig(dir);
    const modelDir = sentenceTransformers?.modelDir ?? dir;
    const tokenizer = loadTokenizer(modelDir);
    const { encoder, unused } = loadSentenceEncoder(modelDir, backend, options);
    try {
      return new Embedder(encoder, tokenizer, sentenceTransformers, unused, options);
    } catch (error) {
      encoder.free();
      throw error;
    }
  }

  /** The width of the vectors: the last Dense layer's out_features, else the encoder's hidden size. */
  get dimensions(): number { return this.dense.length > 0 ? this.dense[this.dense.length - 1]!.weight.shape[0]! : this.encoder.hidden; }

  /**
   * One input's tokens as the model takes them: a text after `prompt` (sentence-transformers adds it to the text
   * before tokenizing), truncated to max_seq_length as the tokenizer truncates (sentence-transformers), else
   * checked against the positions. Token ids are taken as given (a prompt applies to texts only).
   */
  prepare(input: string | readonly number[], index: number, prompt = ''): { ids: number[]; truncated: boolean } {
    let ids: number[], truncated = false;
    if (typeof input === 'string') {
      const text = this.sentenceTransformers?.lowerCase ? (prompt + input).toLowerCase() : prompt + input;
      const limit = this.truncateAt;
      if (limit !== undefined && this.tokenizer.encodeTruncated) ({ ids, truncated } = this.tokenizer.encodeTruncated(text, limit));
      else ids = this.tokenizer.encode(text);
    } else {
      const V = this.encoder.vocabSize;
      const bad = input.find((t) => !Number.isSafeInteger(t) || t < 0 || t >= V);
      if (bad !== undefined) throw new EmbedInputError(index, `input ${index} holds token id ${bad}; the vocabulary has ${V} ids`);
      ids = [...input];
    }
    if (ids.length === 0) throw new EmbedInputError(index, `input ${index} gives no tokens`);
    if (this.truncateAt !== undefined && ids.length > this.truncateAt) return { ids: truncateTokens(ids, this.truncateAt), truncated: true };
    if (ids.length > this.maxTokens) throw new EmbedInputError(index, `input ${index} has ${ids.length} tokens; the model takes at most ${this.maxTokens} (${this.encoder.kind === 'decoder' && this.encoder.maxPassTokens === this.maxTokens ? 'tokens a pass' : 'max_position_embeddings'})`);
    return { ids, truncated };
  }

  /**
   * promptText(options) for `inputs`: a non-empty prompt asked for explicitly with token-id inputs is an error naming
   * the first (the default prompt leaves them as given).
   */
  promptFor(inputs: readonly (string | readonly number[])[], options: PromptOptions = {}): string {
    const prompt = this.promptText(options);
    if ((options.prompt !== undefined || options.promptName !== undefined) && prompt !== '') {
      const ids = inputs.findIndex((input) => typeof input !== 'string');
      if (ids >= 0) throw new EmbedInputError(ids, `input ${ids} is token ids; a prompt applies to texts only`);
    }
    return prompt;
  }

  /** The prompt texts get: `prompt`, the named one, or the sentence-transformers default ('' without any). */
  promptText(options: PromptOptions = {}): string {
    return chosenPrompt(this.sentenceTransformers?.prompts ?? {}, this.sentenceTransformers?.defaultPromptName, options, 'embeddings') ?? '';
  }

  /**
   * Vectors of prepared token sequences, in their order (batched longest first). Each batch is queued
   * before the one ahead of it is read (BertEncoder.embeddingsLater), so the GPU runs batch i while the
   * host pools batch i − 1 and pads batch i + 1.
   */
  embedSequences(sequences: readonly (readonly number[])[]): Float32Array[] {
    const vectors = new Array<Float32Array>(sequences.length);
    let inFlight: QueuedBatch | undefined;
    for (const batch of this.batches(sequences)) {
      const queued = this.queue(batch);
      if (inFlight) collect(inFlight, vectors);
      inFlight = queued;
      if (!PIPELINED) { collect(inFlight, vectors); inFlight = undefined; }
    }
    if (inFlight) collect(inFlight, vectors);
    return vectors;
  }

  /**
   * The pass shapes a server meets, run once before its first request (the embeddings server's start-up on
   * CUDA): a batch of batchSize sequences at each length encoderWarmUpLengths() gives, so that kernels compile
   * and GEMM row buckets tune now instead of inside requests. The sequences start with distinct tokens (no
   * prefix in common to cache); a decoder encoder's shared-prefix statistics are left as they were. Returns
   * the lengths run.
   */
  warmUp(): number[] {
    const lengths = encoderWarmUpLengths(this.truncateAt ?? this.maxTokens);
    const vocab = this.encoder.vocabSize, stats = this.encoder.prefixStats ? { ...this.encoder.prefixStats } : undefined;
    for (const length of lengths) {
      this.embedSequences(Array.from({ length: this.batchSize }, (_, s) => Array.from({ length }, (_, j) => (1 + s * 131 + j * 7) % vocab)));
    }
    if (stats) Object.assign(this.encoder.prefixStats!, stats);
    return lengths;
  }

  /**
   * embedSequences() for a server: the same batches, but while the GPU runs them the event loop runs too
   * (each read waits for its copy by yielding a turn at a time), so requests arrive and responses go out
   * during the computation instead of after it. `onEmbedded` is called after each batch is read with the
   * indices of the sequences it embedded and the vectors so far; where the encoder packs its passes (nothing to
   * pad) the batches then take the sequences in their given order, so that sequences given together (a server
   * request's) finish together.
   */
  async embedSequencesAsync(sequences: readonly (readonly number[])[], onEmbedded?: (indices: readonly number[], vectors: readonly Float32Array[]) => void): Promise<Float32Array[]> {
    const vectors = new Array<Float32Array>(sequences.length);
    const read = async (batch: QueuedBatch) => {
      await collectAsync(batch, vectors);
      onEmbedded?.(batch.members, vectors);
    };
    let inFlight: QueuedBatch | undefined;
    for (const batch of this.batches(sequences, onEmbedded !== undefined && this.encoder.packedPasses === true)) {
      const queued = this.queue(batch);
      if (inFlight) await read(inFlight);
      inFlight = queued;
      if (!PIPELINED) { await read(inFlight); inFlight = undefined; }
    }
    if (inFlight) await read(inFlight);
    return vectors;
  }

  /**
   * The sequences as padded batches: sorted longest first, batchSize at a time, each padded to a bucketed length;
   * `inOrder`, batchSize at a time in their given order, each chunk's batches sorted within it.
   */
  private *batches(sequences: readonly (readonly number[])[], inOrder = false): Generator<PaddedBatch> {
    const pad = this.tokenizer.padTokenId ?? this.encoder.padTokenId;
    if (!inOrder) {
      yield* lengthSortedBatches(sequences, this.batchSize, pad, this.maxTokens, this.encoder.maxPassTokens);
      return;
    }
    for (let first = 0; first < sequences.length; first += this.batchSize) {
      for (const batch of lengthSortedBatches(sequences.slice(first, first + this.batchSize), this.batchSize, pad, this.maxTokens, this.encoder.maxPassTokens)) {
        yield { ...batch, members: batch.members.map((k) => first + k) };
      }
    }
  }

  private queue(batch: PaddedBatch): QueuedBatch {
    return { members: batch.members, pending: this.encoder.embeddingsLater(batch.inputIds, batch.attentionMask, { pooling: this.pooling, normalize: this.normalize, dense: this.dense }) };
  }

  /**
   * Vectors for `inputs`, in their order; `dimensions` keeps each vector's first n values (renormalised when
   * normalising); texts get the prompt promptText(options) names. Token-id inputs are taken as given: with an
   * explicit prompt they are an error (the prompt's tokens depend on the text after it).
   */
  embed(inputs: readonly (string | readonly number[])[], options: { dimensions?: number } & PromptOptions = {}): Embedded {
    const dimensions = this.checkedDimensions(options.dimensions);
    const prompt = this.promptFor(inputs, options);
    const prepared = inputs.map((input, i) => this.prepare(input, i, prompt));
    const vectors = this.embedSequences(prepared.map((p) => p.ids)).map((v) => this.shortened(v, dimensions));
    return { vectors, tokens: prepared.reduce((n, p) => n + p.ids.length, 0), truncated: prepared.filter((p) => p.truncated).length };
  }

  /** `dimensions` checked against the model's width (undefined: the full width). */
  checkedDimensions(dimensions: number | undefined): number {
    const H = this.dimensions;
    if (dimensions === undefined) return H;
    if (!Number.isSafeInteger(dimensions) || dimensions < 1 || dimensions > H) throw new ArgumentError(`dimensions must be an integer in [1, ${H}] (the model's embeddings have ${H}), got ${dimensions}`);
    return dimensions;
  }

  /** A vector's first n values, scaled back to unit length if the model normalises (Matryoshka-style truncation). */
  shortened(vector: Float32Array, n: number): Float32Array {
    if (n === vector.length) return vector;
    const head = vector.slice(0, n);
    if (!this.normalize) return head;
    const norm = Math.sqrt(head.reduce((a, x) => a + x * x, 0));
    return head.map((x) => x / Math.max(norm, 1e-12));
  }

  free(): void {
    for (const d of this.dense) {
      this.encoder.backend.free(d.weight);
      if (d.bias) this.encoder.backend.free(d.bias);
    }
    this.encoder.free();
  }
}

export interface PaddedBatch {
  /** The batch's rows: indices into the call's sequences. */
  readonly members: readonly number[];
  readonly inputIds: number[][];
  readonly attentionMask: number[][];
}

/**
 * `sequences` as padded batches of `batchSize`, sorted longest first (each pads only to its own longest member)
 * and padded on to a bucketed length at most `maxLength`, so batches repeat a few shapes: each new shape costs
 * the GEMMs a heuristic query (and a tuning), the allocator new size classes. The mask hides the extra columns.
 * With `maxPassTokens`, a batch holds fewer sequences where batchSize × its length would pass it.
 */
export function* lengthSortedBatches(sequences: readonly (readonly number[])[], batchSize: number, padId: number, maxLength: number, maxPassTokens = Infinity): Generator<PaddedBatch> {
  const order = sequences.map((_, i) => i).sort((a, b) => sequences[b]!.length - sequences[a]!.length);
  for (let first = 0; first < order.length;) {
    const longest = sequences[order[first]!]!.length;
    const length = Math.min(BUCKETED ? bucketedLength(longest) : longest, maxLength);
    const count = Math.max(1, Math.min(batchSize, Math.floor(maxPassTokens / length)));
    const members = order.slice(first, first + count);
    first += count;
    const batch = padSequences(members.map((i) => sequences[i]!), padId);
    for (let k = 0; k < members.length; k++) {
      while (batch.inputIds[k]!.length < length) { batch.inputIds[k]!.push(padId); batch.attentionMask[k]!.push(0); }
    }
    yield { members, ...batch };
  }
}

interface QueuedBatch {
  readonly members: readonly number[];
  readonly pending: PendingEmbeddings;
}

/** A queued batch's vectors into their inputs' places. */
function collect(batch: QueuedBatch, vectors: Float32Array[]): void {
  const pooled = batch.pending.wait();
  batch.members.forEach((i, k) => { vectors[i] = pooled[k]!; });
}

/** collect() once the batch's copy has landed, yielding to the event loop until then. */
async function collectAsync(batch: QueuedBatch, vectors: Float32Array[]): Promise<void> {
  while (!batch.pending.ready()) await new Promise<void>((resolve) => setImmediate(resolve));
  collect(batch, vectors);
}

/** Batches queued one ahead of the read (default on; FUSEFORMER_EMBED_PIPELINE=0 reads each before queuing the next, for A/B runs). */
const PIPELINED = process.env['FUSEFORMER_EMBED_PIPELINE'] !== '0';

/** Bucketed batch lengths (default on; FUSEFORMER_EMBED_BUCKETS=0 pads each batch to its longest member only, for A/B runs). */
const BUCKETED = process.env['FUSEFORMER_EMBED_BUCKETS'] !== '0';

/** A padded length rounded up: to a multiple of 8 up to 64 tokens, of 16 up to 256, of 32 beyond (≤ 10% more tokens past 64). */
export function bucketedLength(length: number): number {
  const step = length <= 64 ? 8 : length <= 256 ? 16 : 32;
  return Math.ceil(length / step) * step;
}

/** The encoder of a model directory by its config's family: BERT-family, or a decoder the inference engine runs. */
function loadSentenceEncoder(dir: string, backend: Backend, options: EmbedderOptions): { encoder: SentenceEncoder; unused: readonly string[] } {
  const family = loadModelConfig(dir).family;
  const dtype = options.dtype ? { dtype: options.dtype } : {};
  if (family === 'bert') {
    if (options.maxPassTokens !== undefined) throw new ArgumentError(`${dir}: maxPassTokens applies to decoder models; a BERT encoder's batches are bounded by batchSize`);
    if (options.maxSharedPrefix !== undefined) throw new ArgumentError(`${dir}: maxSharedPrefix applies to decoder models; a BERT encoder attends both ways, so no prefix is computed once`);
    if (options.packedPasses !== undefined) throw new ArgumentError(`${dir}: packedPasses applies to decoder models; a BERT encoder's passes are padded`);
    return BertEncoder.load(dir, backend, { ...(options.attention ? { attention: options.attention } : {}), ...dtype });
  }
  if (family === 'llama' || family === 'gpt2') {
    if (options.attention !== undefined && options.attention !== 'auto' && options.attention !== 'flash') {
      throw new ArgumentError(`${dir}: attention '${options.attention}' applies to BERT encoders; a decoder model runs the fused causal attention`);
    }
    return DecoderEncoder.load(dir, backend, {
      ...dtype, ...(options.maxPassTokens !== undefined ? { maxPassTokens: options.maxPassTokens } : {}),
      ...(options.maxSharedPrefix !== undefined ? { maxSharedPrefix: options.maxSharedPrefix } : {}),
      ...(options.packedPasses !== undefined ? { packedPasses: options.packedPasses } : {}),
    });
  }
  throw new ArgumentError(`${dir}: a ${family} model; embeddings run BERT-family encoders and decoder models (Llama, Qwen2/3, Mistral, GPT-2 architectures)`);
}

/** Longest sequence an encoder's warm-up runs: longer inputs are rarer, and a pass of them costs seconds on a decoder. */
const ENCODER_WARMUP_MAX_LENGTH = 512;

/** The lengths an encoder's warm-up runs: every power of two from 16 below min(maxTokens, ENCODER_WARMUP_MAX_LENGTH), then that. */
export function encoderWarmUpLengths(maxTokens: number): number[] {
  const top = Math.min(maxTokens, ENCODER_WARMUP_MAX_LENGTH), lengths: number[] = [];
  for (let n = 16; n < top; n *= 2) lengths.push(n);
  lengths.push(top);
  return lengths;
}
