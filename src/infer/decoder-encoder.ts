// A decoder-only model (Llama / Qwen2 / Qwen3 / Mistral / GPT-2 architectures) as a sentence encoder: the
// final norm's hidden states of a batch, pooled into one vector a sequence — Qwen3-Embedding,
// gte-Qwen2, e5-mistral and their kind (sentence-transformers' lasttoken pooling: causal attention lets only
// the last token see the whole text).
//
// A pass is the inference engine's prefill without its KV cache: every layer by DecoderForward.blocks (the same
// fused kernels and GEMMs as generation) over the batch's tokens packed without padding — sequence s's rows
// cu[s] … cu[s + 1] − 1, positions 0 … lengths[s] − 1 — and attention over the pass's own keys, held in
// 16-position blocks of a pool that every layer reuses (shared-prefix.ts's suffixRows with no prefix):
//   q, k, v = qkvRopeAppend(qkv)      RoPE (+ Qwen3's per-head norm, Qwen2's bias); k, v into the pool's blocks
//   c       = flashAttentionForward   packed queries over paged keys, causal within each sequence: [R, Hq·d],
//                                     the O product's input as it stands
// then pooling.ts over the packed rows. No row computes padding, and no permute is needed (packedPasses; the
// padded form — B sequences right-padded to L, attention [B, Hq, L, d] permuted back to rows — with
// FUSEFORMER_PACKED_PASSES=0). Every real token's positions and keys are those of an unpadded run (HF pads these
// models at the left; RoPE sees only position differences, so the vectors agree up to rounding).
// The model is loaded without an untied LM head (LoadOptions.withoutHead). Activation buffers are sized
// once for maxPassTokens rows (DecoderForward); a batch of more rows is an error (Embedder forms batches under it).
// Last-token pooling over sequences that all start with the same tokens (a reranker's instruction and query, an
// embedding prompt) computes that prefix once: shared-prefix.ts has the paged pass that does it.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { DecoderForward } from './forward.js';
import type { RowViews } from './forward.js';
import type { DecoderModel } from './model.js';
import { loadDecoderModel } from './model.js';
import type { EmbeddingOptions, PendingEmbeddings, PooledBatch, TemporaryTensor } from './pooling.js';
import { checkedPooling, poolLater } from './pooling.js';
import type { PagedRows, PrefixStats } from './shared-prefix.js';
import { DEFAULT_MAX_SHARED_PREFIX, MIN_SHARED_PREFIX, PREFIX_BLOCK, PrefixCache, prefixRows, sharedPrefixLength, suffixRows } from './shared-prefix.js';

/** Rows one pass takes by default: 16 sequences of 1,024 tokens, 512 of 32. */
export const DEFAULT_PASS_TOKENS = 16384;

export interface DecoderEncoderOptions {
  /** Weights and activations (default bf16 on CUDA, f32 on the CPU). */
  readonly dtype?: FloatDType;
  /** The most tokens (batch × padded length) one pass takes; sizes the activation buffers (default DEFAULT_PASS_TOKENS). */
  readonly maxPassTokens?: number;
  /**
   * The longest token prefix computed once for a pass's sequences under last-token pooling (shared-prefix.ts;
   * default DEFAULT_MAX_SHARED_PREFIX, 0 never; FUSEFORMER_SHARED_PREFIX=0 makes 0 the default).
   */
  readonly maxSharedPrefix?: number;
  /**
   * Passes over the tokens packed without padding (default; FUSEFORMER_PACKED_PASSES=0 makes false the default),
   * else right-padded to the batch's longest sequence.
   */
  readonly packedPasses?: boolean;
}

/** FUSEFORMER_SHARED_PREFIX=0: every pass dense (the A / B switch of the benchmarks). */
const SHARED_PREFIX = process.env['FUSEFORMER_SHARED_PREFIX'] !== '0';
/** FUSEFORMER_PACKED_PASSES=0: passes padded to the batch's longest sequence (the A / B switch). */
const PACKED_PASSES = process.env['FUSEFORMER_PACKED_PASSES'] !== '0';

interface DecoderBatch extends PooledBatch {
  readonly ids: Int32Array;
}

export class DecoderEncoder {
  readonly kind = 'decoder';
  readonly maxPassTokens: number;
  readonly maxSharedPrefix: number;
  readonly packedPasses: boolean;
  /** Shared-prefix passes so far. */
  readonly prefixStats: PrefixStats = { passes: 0, computed: 0, cached: 0, savedTokens: 0 };
  private readonly forward: DecoderForward;
  private readonly prefixCache: PrefixCache;
  private freed = false;

  constructor(readonly model: DecoderModel, options: { maxPassTokens?: number; maxSharedPrefix?: number; packedPasses?: boolean } = {}) {
    this.maxPassTokens = options.maxPassTokens ?? DEFAULT_PASS_TOKENS;
    this.maxSharedPrefix = options.maxSharedPrefix ?? (SHARED_PREFIX ? DEFAULT_MAX_SHARED_PREFIX : 0);
    this.packedPasses = options.packedPasses ?? PACKED_PASSES;
    if (!Number.isSafeInteger(this.maxPassTokens) || this.maxPassTokens < 1) throw new ArgumentError(`decoder encoder: maxPassTokens must be a positive integer, got ${this.maxPassTokens}`);
    if (!Number.isSafeInteger(this.maxSharedPrefix) || this.maxSharedPrefix < 0) throw new ArgumentError(`decoder encoder: maxSharedPrefix must be a non-negative integer, got ${this.maxSharedPrefix}`);
    if (model.quantization) throw new ArgumentError(`${model.source}: a quantized model cannot encode embeddings (its float weights are not held)`);
    if (model.tensorParallel) throw new ArgumentError(`${model.source}: embeddings run on one device, not a tensor-parallel group`);
    this.forward = new DecoderForward(model, this.maxPassTokens, this.maxTokens);
    this.prefixCache = new PrefixCache(model.backend);
  }

  /** Loads an HF decoder directory (Qwen3Model / LlamaModel / …ForCausalLM checkpoints; an untied head is skipped). */
  static load(dir: string, backend: Backend, options: DecoderEncoderOptions = {}): { encoder: DecoderEncoder; unused: readonly string[] } {
    const { model, unused } = loadDecoderModel(dir, backend, { ...(options.dtype ? { dtype: options.dtype } : {}), withoutHead: true });
    try {
      const sizes = {
        ...(options.maxPassTokens !== undefined ? { maxPassTokens: options.maxPassTokens } : {}), ...(options.maxSharedPrefix !== undefined ? { maxSharedPrefix: options.maxSharedPrefix } : {}),
        ...(options.packedPasses !== undefined ? { packedPasses: options.packedPasses } : {}),
      };
      return { encoder: new DecoderEncoder(model, sizes), unused };
    } catch (error) {
      model.free();
      throw error;
    }
  }

  get backend(): Backend { return this.model.backend; }
  get dtype(): FloatDType { return this.model.dtype; }
  get hidden(): number { return this.model.arch.hidden; }
  get layerCount(): number { return this.model.arch.layers; }
  get vocabSize(): number { return this.model.vocabSize; }
  /** A decoder has no padding id of its own (padded positions are never attended or pooled): its first end-of-sequence id, else 0. */
  get padTokenId(): number { return this.model.arch.eosTokenIds[0] ?? 0; }
  /** The most tokens a sequence may have: the model's positions, within one pass. */
  get maxTokens(): number { return Math.min(this.model.arch.maxPositions, this.maxPassTokens); }

  /**
   * One vector a sequence, queued (wait() reads it): `inputIds` [B][L] with `attentionMask` (default all ones)
   * marking each row's tokens as one run of ones — at the right (right padding) or the left (left padding).
   */
  embeddingsLater(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], options: EmbeddingOptions = {}): PendingEmbeddings {
    const pooling = checkedPooling(options.pooling, 'decoder embeddings');
    const batch = this.check(inputIds, attentionMask);
    const pool = ({ batch: pooled, hidden, temp }: PassResult) => poolLater(this.backend, hidden, pooled, options, temp, 'decoder embeddings');
    const prefix = pooling === 'last' ? this.sharedPrefix(batch) : undefined;
    return prefix || this.packedPasses ? this.packedPass(batch, prefix, pool) : this.paddedPass(batch, pool);
  }

  embeddings(inputIds: readonly (readonly number[])[], attentionMask?: readonly (readonly number[])[], options: EmbeddingOptions = {}): Float32Array[] {
    return this.embeddingsLater(inputIds, attentionMask, options).wait();
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    this.prefixCache.clear();
    this.forward.free();
    this.model.free();
  }

  /** The batch as the pass reads it: each row's tokens moved to the front (right padding), lengths counted. */
  private check(inputIds: readonly (readonly number[])[], attentionMask: readonly (readonly number[])[] | undefined): DecoderBatch {
    if (this.freed) throw new ArgumentError('decoder encoder: used after free()');
    const B = inputIds.length, L = inputIds[0]?.length ?? 0, V = this.vocabSize;
    if (B === 0 || L === 0) throw new ArgumentError(`decoder embeddings: input_ids must be a non-empty [B, L] batch, got ${B} × ${L}`);
    if (attentionMask !== undefined && attentionMask.length !== B) throw new ArgumentError(`decoder embeddings: attention_mask has ${attentionMask.length} rows, input_ids ${B}`);
    if (B * L > this.maxPassTokens) throw new ArgumentError(`decoder embeddings: a batch of ${B} × ${L} tokens is more than one pass takes (maxPassTokens = ${this.maxPassTokens})`);
    if (L > this.model.arch.maxPositions) throw new ArgumentError(`decoder embeddings: sequences of ${L} tokens; the model has ${this.model.arch.maxPositions} positions`);
    const ids = new Int32Array(B * L), lengths = new Int32Array(B);
    for (let s = 0; s < B; s++) {
      const row = inputIds[s]!, mask = attentionMask?.[s];
      if (row.length !== L) throw new ArgumentError(`decoder embeddings: input_ids[${s}] has ${row.length} tokens, input_ids[0] ${L}; a batch is rectangular`);
      if (mask !== undefined && mask.length !== L) throw new ArgumentError(`decoder embeddings: attention_mask[${s}] has ${mask.length} entries, input_ids[${s}] ${L}`);
      const on = (l: number) => (mask === undefined ? 1 : mask[l]);
      let first = 0;
      while (first < L && on(first) === 0) first++;
      let end = first;
      while (end < L && on(end) === 1) end++;
      for (let l = 0; l < L; l++) {
        const m = on(l);
        if (m !== 0 && m !== 1) throw new ArgumentError(`decoder embeddings: attention_mask[${s}][${l}] is ${String(m)}; expected 0 or 1`);
        if (m === 1 && l >= end) throw new ArgumentError(`decoder embeddings: attention_mask[${s}] has a gap (a 0 at ${end} between ones); a row's tokens are one run, padded at the left or the right`);
      }
      if (end === first) throw new ArgumentError(`decoder embeddings: attention_mask[${s}] is all zeros; every sequence needs at least one token`);
      for (let l = first; l < end; l++) {
        const t = row[l]!;
        if (!Number.isSafeInteger(t) || t < 0 || t >= V) throw new ArgumentError(`decoder embeddings: input_ids[${s}][${l}] is ${t}, outside the vocabulary [0, ${V})`);
        ids[s * L + l - first] = t;
      }
      ids.fill(this.padTokenId, s * L + end - first, (s + 1) * L);
      lengths[s] = end - first;
    }
    return { batch: B, length: L, ids, lengths };
  }

  /**
   * The prefix this batch's pass computes once: the cached one if every sequence starts with it, else (two
   * sequences or more) their common prefix in whole blocks, when at least MIN_SHARED_PREFIX tokens; else none.
   */
  private sharedPrefix(batch: DecoderBatch): SharedPrefix | undefined {
    const common = sharedPrefixLength(batch.ids, batch.lengths, batch.length, this.maxSharedPrefix);
    if (common < MIN_SHARED_PREFIX) return undefined;
    const cached = this.prefixCache.match(batch.ids.subarray(0, common), common);
    if (cached >= MIN_SHARED_PREFIX) return { length: cached, cached: true };
    return batch.batch > 1 ? { length: common, cached: false } : undefined;
  }

  /** Every layer over `batch` padded to its longest sequence, then `read(pass)` before the pass's temporaries are freed. */
  private paddedPass<T>(batch: DecoderBatch, read: (pass: PassResult) => T): T {
    const b = this.backend, f = this.forward, arch = this.model.arch, dtype = this.dtype;
    const { batch: B, length: L } = batch, R = B * L, { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    const temporaries: Tensor[] = [];
    const temp: TemporaryTensor = (shape, type) => { const t = b.empty(shape, type); temporaries.push(t); return t; };
    try {
      const tokens = temp([R], 'i32'), positions = temp([R], 'i32'), lengths = temp([B], 'i32');
      b.upload(tokens, batch.ids);
      b.upload(positions, Int32Array.from({ length: R }, (_, r) => r % L));
      b.upload(lengths, batch.lengths);
      const v = f.rows(R);
      const keys = temp([B, Hkv, L, d], dtype), values = temp([B, Hkv, L, d], dtype), context = temp([B, Hq, L, d], dtype), lse = temp([B, Hq, L], 'f32');
      const q = b.view(v.q, 0, [B, Hq, L, d]), merged = b.view(v.attn, 0, [B, L, Hq, d]);
      const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
      f.embed(b, v, tokens, positions);
      f.blocks(b, v, (l) => {
        // The pass's keys and values are its whole "cache": [B, Hkv, L, d], position l of row b at [b, :, l].
        b.qkvRopeAppend({ qkv: v.qkv, positions, q, kCache: keys, vCache: values, ...rope, ...f.qkvExtras(l) });
        b.flashAttentionForward({ q, k: keys, v: values, out: context, lse, scale: 1 / Math.sqrt(d), causal: true, keyLengths: lengths });
        b.permute0213({ x: context, out: merged });
        return v.attn;
      });
      return read({ batch, hidden: v.h, temp });
    } finally {
      // Freed while queued work may still read them: the CUDA allocator is stream-ordered; the CPU ran the ops already.
      for (const t of temporaries) b.free(t);
    }
  }

  /**
   * `batch` packed, every sequence's rows after the first P tokens (none without a prefix); with a shared prefix
   * (shared-prefix.ts) its keys and values come from the cache or one pass over the prefix alone, the suffixes
   * packed over them. `read` pools the packed rows.
   */
  private packedPass<T>(batch: DecoderBatch, prefix: SharedPrefix | undefined, read: (pass: PassResult) => T): T {
    const b = this.backend, arch = this.model.arch, layers = arch.layers, P = prefix?.length ?? 0, nP = P / PREFIX_BLOCK;
    const temporaries: Tensor[] = [];
    const temp: TemporaryTensor = (shape, type) => { const t = b.empty(shape, type); temporaries.push(t); return t; };
    try {
      const suffix = suffixRows(batch.ids, batch.lengths, batch.length, P, layers);
      const poolShape = [suffix.blocks, arch.kvHeads, PREFIX_BLOCK, arch.headDim];
      const keys = temp(poolShape, this.dtype), values = temp(poolShape, this.dtype);
      if (prefix) {
        const prefixIds = batch.ids.subarray(0, P);
        const stats = this.prefixStats;
        if (prefix.cached) {
          this.prefixCache.restore(keys, values);
        } else {
          this.pagedRows(prefixRows(prefixIds, P, layers), keys, values, temp);
          this.prefixCache.store(prefixIds, keys, values, layers * nP);
        }
        stats.passes++;
        stats[prefix.cached ? 'cached' : 'computed']++;
        stats.savedTokens += (batch.batch - (prefix.cached ? 0 : 1)) * P;
      }
      const v = this.pagedRows(suffix, keys, values, temp);
      const lengths = Int32Array.from({ length: batch.batch }, (_, s) => suffix.cu[s + 1]! - suffix.cu[s]!);
      return read({ batch: { batch: batch.batch, length: batch.length, lengths, rowStarts: suffix.cu }, hidden: v.h, temp });
    } finally {
      for (const t of temporaries) b.free(t);
    }
  }

  /** Every layer over packed `rows`, their keys and values written to and read from the pools through each layer's table. */
  private pagedRows(rows: PagedRows, keys: Tensor, values: Tensor, temp: TemporaryTensor): RowViews {
    const b = this.backend, f = this.forward, { heads: Hq, headDim: d } = this.model.arch;
    const R = rows.tokens.length, B = rows.seqKeys.length, M = rows.maxBlocks;
    // One upload: tokens, positions, each row's sequence, the offsets, the key counts, the tables.
    const sections = [rows.tokens, rows.positions, rows.sequenceOf, rows.cu, rows.seqKeys, rows.tables];
    const meta = temp([sections.reduce((n, a) => n + a.length, 0)], 'i32'), host = new Int32Array(meta.numel);
    const views: Tensor[] = [];
    let offset = 0;
    for (const a of sections) {
      host.set(a, offset);
      views.push(b.view(meta, offset, [a.length]));
      offset += a.length;
    }
    b.upload(meta, host);
    const [tokens, positions, sequenceOf, cu, seqKeys, tables] = views as [Tensor, Tensor, Tensor, Tensor, Tensor, Tensor];
    const table = (l: number) => b.view(tables, l * B * M, [B, M]);
    const v = f.rows(R), lse = temp([Hq, R], 'f32');
    const q = b.view(v.q, 0, [R, Hq, d]);
    const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
    f.embed(b, v, tokens, positions);
    f.blocks(b, v, (l) => {
      b.qkvRopeAppend({
        qkv: v.qkv, positions, q: b.view(v.q, 0, [R, Hq, 1, d]), kCache: keys, vCache: values,
        blockTable: table(l), tableRows: sequenceOf, ...rope, ...f.qkvExtras(l),
      });
      b.flashAttentionForward({
        q, k: keys, v: values, out: b.view(v.attn, 0, [R, Hq, d]), lse, scale: 1 / Math.sqrt(d), causal: true,
        cuSeqlensQ: cu, maxSeqlenQ: rows.maxRows, paged: { blockTable: table(l), seqKeys },
      });
      return v.attn;
    });
    return v;
  }
}

/** The prefix a pass shares: its length and whether the cache holds it. */
interface SharedPrefix {
  readonly length: number;
  readonly cached: boolean;
}

interface PassResult {
  readonly batch: PooledBatch;
  readonly hidden: Tensor;
  readonly temp: TemporaryTensor;
}
