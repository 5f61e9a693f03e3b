// One model's forward pass over a serving step's rows, its keys and values kept in a paged KV pool that
// it reads and writes through the engine's block tables (engine.ts has the layout). The serving engine
// holds one for the target model and, with speculative decoding, one for the draft model: both pools
// have the same blocks, so one block table (one BlockPool, one scheduler) serves both.
//
// Rows of a step (StepRows): first a decode region, row s = slot s for s < S (one position per slot;
// cache position −1 marks an idle row: nothing written, no keys read), then each segment's positions
// [start, start + count) of one request as consecutive rows. Per layer the QKV GEMM covers all rows;
// attention is
//   decode region: one qkvRopeAppend + one decodeAttention over table rows [0, S);
//   each segment:  qkvRopeAppend writes its keys and values into its blocks, then one flash attention of
//                  its query heads [1, Hq, count, d] over its start + count keys through its table row,
//                  causal with the segment at the end (key j visible to query i iff j ≤ start + i);
//                  permute0213 turns [Hq, count, d] into rows [count, Hq·d].
// logits(rows) then runs the LM head on chosen rows of the last hidden state (gathered by the embedding
// op, so only those rows pay for the vocabulary GEMM).

import { byteSize } from '../dtype.js';
import { decodeAttentionSplits } from '../infer/attention-splits.js';
import { DecoderForward } from '../infer/forward.js';
import type { RowViews } from '../infer/forward.js';
import type { DecoderModel } from '../infer/model.js';
import type { Tensor } from '../tensor.js';

/** One request's consecutive positions in a step. */
export interface RowSegment {
  /** The request's block-table row. */
  readonly slot: number;
  /** Its first row in the step. */
  readonly r0: number;
  /** Its first position. */
  readonly start: number;
  readonly count: number;
}

export interface StepRows {
  /** Token and position of every row, [R]. */
  readonly tokens: Int32Array;
  readonly positions: Int32Array;
  /** Cache position of each decode-region row (row s = slot s), −1 for an idle slot; [S], S may be 0. */
  readonly decodePositions: Int32Array;
  readonly segments: readonly RowSegment[];
}

export interface PagedForwardOptions {
  /** Rows of a step at most. */
  readonly maxRows: number;
  /** Slots (block-table rows) and decode-region rows at most. */
  readonly maxRunning: number;
  readonly maxLen: number;
  readonly blockSize: number;
  readonly numBlocks: number;
  /** Rows logits() may be asked for at once. */
  readonly maxLogitRows: number;
  /** The engine's block tables: i32 [maxRunning, maxBlocksPerSeq] on the device. */
  readonly blockTables: Tensor;
}

/** Bytes one KV block of `model` takes (all layers, keys and values). */
export function kvBlockBytes(model: DecoderModel, blockSize: number): number {
  const { layers, kvHeads, headDim } = model.arch;
  return layers * 2 * kvHeads * blockSize * headDim * byteSize(model.dtype);
}

export class PagedForward {
  /** [layers, 2, numBlocks, Hkv, blockSize, d]: every key and value this model holds. */
  readonly kvPool: Tensor;
  private readonly forward: DecoderForward;
  private readonly io: Record<'tokens' | 'positions' | 'decodePositions' | 'gather' | 'logits' | 'q' | 'context' | 'lse', Tensor>;
  /** Split-K scratch of decode attention (f32 [maxRunning·Hq·maxSplits·(d + 2)]), when some decode region splits. */
  private readonly partials?: Tensor;
  /** The last run's row views (logits() reads its hidden state). */
  private last?: RowViews;
  private freed = false;

  constructor(readonly model: DecoderModel, readonly options: PagedForwardOptions) {
    const b = model.backend, arch = model.arch;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    const T = options.maxRows, N = options.maxRunning;
    this.forward = new DecoderForward(model, T, options.maxLen);
    const i32 = (shape: number[]) => b.empty(shape, 'i32');
    this.io = {
      tokens: i32([T]), positions: i32([T]), decodePositions: i32([N]), gather: i32([options.maxLogitRows]),
      logits: b.empty([options.maxLogitRows, arch.paddedVocab], model.dtype),
      q: b.empty([T * Hq * d], model.dtype), context: b.empty([T * Hq * d], model.dtype), lse: b.empty([T * Hq], 'f32'),
    };
    const maxSplits = Math.max(...Array.from({ length: N }, (_, i) => this.splits(i + 1)));
    if (maxSplits > 1) this.partials = b.empty([N * Hq * maxSplits * (d + 2)], 'f32');
    try {
      this.kvPool = b.empty([arch.layers, 2, options.numBlocks, Hkv, options.blockSize, d], model.dtype);
    } catch (error) {
      this.freeBuffers();
      throw error;
    }
    // Zero, so that nothing in the pool is ever NaN (the ops only read positions a request has written).
    b.fill(this.kvPool, 0);
  }

  get kvPoolBytes(): number { return this.kvPool.numel * byteSize(this.model.dtype); }

  /** The logits buffer [maxLogitRows, paddedVocab] (computeLogits() returns views of it). */
  get logitsBuffer(): Tensor { return this.io.logits; }

  /** Decode attention's split-K chunks for a decode region of n rows (attention-splits.ts). */
  splits(n: number): number {
    return decodeAttentionSplits(this.options.maxLen, this.model.arch.kvHeads, n);
  }

  /** The model over the step's rows: writes their keys and values, leaves the last hidden state for logits(). */
  run(rows: StepRows): void {
    this.upload(rows);
    this.compute(rows.tokens.length, rows.decodePositions.length, rows.segments);
  }

  /** run()'s host-to-device part: the rows' tokens and positions into the forward's buffers. */
  upload(rows: StepRows): void {
    const b = this.model.backend, io = this.io, R = rows.tokens.length, S = rows.decodePositions.length;
    b.upload(b.view(io.tokens, 0, [R]), rows.tokens);
    b.upload(b.view(io.positions, 0, [R]), rows.positions);
    if (S > 0) b.upload(b.view(io.decodePositions, 0, [S]), rows.decodePositions);
  }

  /**
   * run()'s device part, over the rows upload() wrote: R rows, the first S of them the decode region,
   * then the segments. It only launches work on fixed buffers, so it can be captured in a CUDA graph.
   */
  compute(R: number, S: number, segments: readonly RowSegment[]): void {
    const b = this.model.backend, m = this.model, arch = m.arch, f = this.forward, io = this.io, o = this.options;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch, W = (Hq + 2 * Hkv) * d;
    const tokens = b.view(io.tokens, 0, [R]), positions = b.view(io.positions, 0, [R]);
    const decodePositions = S > 0 ? b.view(io.decodePositions, 0, [S]) : undefined;
    const v = f.rows(R);
    this.last = v;
    const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
    const scale = 1 / Math.sqrt(d);
    const M = o.blockTables.shape[1]!, NB = o.numBlocks, bs = o.blockSize;
    const poolView = (l: number, kv: number) => b.view(this.kvPool, (l * 2 + kv) * NB * Hkv * bs * d, [NB, Hkv, bs, d]);
    const tableRows = (first: number, count: number) => b.view(o.blockTables, first * M, [count, M]);
    f.embed(b, v, tokens, positions);
    f.blocks(b, v, (l) => {
      const bias = m.layers[l]!.qkvBias, kCache = poolView(l, 0), vCache = poolView(l, 1);
      if (decodePositions) {
        const blockTable = tableRows(0, S), splits = this.splits(S);
        const partials = splits > 1 ? { partials: b.view(this.partials!, 0, [S, Hq, splits, d + 2]) } : {};
        b.qkvRopeAppend({ qkv: b.view(v.qkv, 0, [S, W]), positions: decodePositions, q: b.view(io.q, 0, [S, Hq, 1, d]), kCache, vCache, blockTable, ...rope, ...(bias ? { bias } : {}) });
        b.decodeAttention({ q: b.view(io.q, 0, [S, Hq, d]), kCache, vCache, positions: decodePositions, out: b.view(v.attn, 0, [S, Hq, d]), scale, blockTable, ...partials });
      }
      for (const s of segments) {
        const c = s.count, blockTable = tableRows(s.slot, 1), qOffset = s.r0 * Hq * d;
        b.qkvRopeAppend({
          qkv: b.view(v.qkv, s.r0 * W, [c, W]), positions: b.view(io.positions, s.r0, [c]), q: b.view(io.q, qOffset, [1, Hq, c, d]),
          kCache, vCache, blockTable, ...rope, ...(bias ? { bias } : {}),
        });
        b.flashAttentionForward({
          q: b.view(io.q, qOffset, [1, Hq, c, d]), k: kCache, v: vCache, out: b.view(io.context, qOffset, [1, Hq, c, d]),
          lse: b.view(io.lse, s.r0 * Hq, [1, Hq, c]), scale, causal: true, paged: { blockTable, keys: s.start + c },
        });
        b.permute0213({ x: b.view(io.context, qOffset, [1, Hq, c, d]), out: b.view(v.attn, qOffset, [1, c, Hq, d]) });
      }
      return v.attn;
    });
  }

  /** The LM head over rows `rows` of the last run: logits [n, paddedVocab] (a view, valid until the next call). */
  logits(rows: readonly number[]): Tensor {
    this.uploadLogitRows(rows);
    return this.computeLogits(rows.length);
  }

  /** logits()'s host-to-device part: which rows of the last hidden state go through the head. */
  uploadLogitRows(rows: readonly number[]): void {
    const b = this.model.backend, n = rows.length;
    if (n < 1 || n > this.options.maxLogitRows) throw new Error(`internal: logits of ${n} rows (1..${this.options.maxLogitRows})`);
    b.upload(b.view(this.io.gather, 0, [n]), Int32Array.from(rows));
  }

  /** logits()'s device part, for the n rows uploadLogitRows() named (capturable, as compute()). */
  computeLogits(n: number): Tensor {
    const b = this.model.backend, v = this.last;
    if (!v) throw new Error('internal: logits before the forward');
    const gather = b.view(this.io.gather, 0, [n]);
    const last = this.forward.rows(n).y, logits = b.view(this.io.logits, 0, [n, this.model.arch.paddedVocab]);
    b.embedTokens({ tokens: gather, tokenTable: v.h, out: last });
    this.forward.lmHead(b, last, logits);
    return logits;
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    this.freeBuffers();
    this.model.backend.free(this.kvPool);
  }

  private freeBuffers(): void {
    const b = this.model.backend;
    for (const t of Object.values(this.io)) b.free(t);
    if (this.partials) b.free(this.partials);
    this.forward.free();
  }
}
