// One model's forward pass over a serving step's rows, its keys and values kept in a paged KV pool that
// it reads and writes through the engine's block tables (engine.ts has the layout). The serving engine
// holds one for the target model and, with speculative decoding, one for the draft model: both pools
// have the same blocks, so one block table (one BlockPool, one scheduler) serves both.
//
// Rows of a step (StepRows): first a decode region, row s = slot s for s < S (one position per slot;
// cache position −1 marks an idle row: nothing written, no keys read), then each segment's positions
// [start, start + count) of one request as consecutive rows, then (a padded step, StepShape) rows that
// belong to nobody (cache position −1). Per layer, whatever the number of segments, three attention ops:
//   appendDecodeAttention  the decode region, table rows [0, S): row s's key and value appended at its cache
//                   position and its query attending over its keys (one kernel on CUDA);
//   qkvRopeAppend   the rows past it at once: row r's keys and values go to its cache position through
//                   block-table row tableRows[r] (the request's slot), its query heads to q [R, Hq, d];
//   flash attention the segments as packed queries over paged keys: segment i is rows cu[i]..cu[i+1] of
//                   q past the decode region, with start + count keys through its slot's table row,
//                   causal with the segment at the end (key j visible to query i iff j ≤ start + i); its
//                   output lands in the rows of the attention output directly.
// So a step's launches depend only on its shape (R, S, the segment slots G and the longest segment the
// grid covers): the engine captures a step of each shape as a CUDA graph (engine.ts). Every per-step
// value — tokens, positions, cache positions, table rows, the segments' offsets, keys and rows, the rows
// the LM head gathers — travels in one i32 buffer, uploaded once.
// logits(rows) then runs the LM head on chosen rows of the last hidden state (gathered by the embedding
// op, so only those rows pay for the vocabulary GEMM).

import { byteSize } from '../dtype.js';
import { modelAttentionSplits } from '../infer/attention-splits.js';
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

/**
 * The launches of a step: `rows` rows (those of StepRows, then padding), the first `decodeRows` the decode
 * region; `segments` segment slots (those of StepRows, then empty ones) whose flash attention grid covers
 * `maxSegmentRows` rows each. Steps of one shape launch the same kernels on the same buffers.
 */
export interface StepShape {
  readonly rows: number;
  readonly decodeRows: number;
  readonly segments: number;
  readonly maxSegmentRows: number;
}

/** The shape of exactly these rows (no padding): what an eager step runs. */
export function exactShape(rows: StepRows): StepShape {
  return {
    rows: rows.tokens.length, decodeRows: rows.decodePositions.length, segments: rows.segments.length,
    maxSegmentRows: Math.max(0, ...rows.segments.map((s) => s.count)),
  };
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
  /**
   * Pipelined steps: the previous step's sampled tokens (i32, on the device). upload() then takes, per
   * row, the row of it that feeds the row's token (feedTokens, ahead of the embedding; −1: the host's token).
   */
  readonly feedFrom?: Tensor;
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
  private readonly io: Record<'meta' | 'logits' | 'q' | 'lse', Tensor>;
  /** Host copy of io.meta, filled by upload(); sections at the offsets of `at`. */
  private readonly meta: Int32Array;
  private readonly at: Record<'tokens' | 'positions' | 'cachePositions' | 'tableRows' | 'cu' | 'seqKeys' | 'seqRows' | 'gather' | 'feed', number>;
  /** Split-K scratch of decode attention (f32 [maxRunning·Hq·maxSplits·(d + 2)]), when some decode region splits. */
  private readonly partials?: Tensor;
  /** The last run's row views (logits() reads its hidden state). */
  private last?: RowViews;
  private freed = false;

  constructor(readonly model: DecoderModel, readonly options: PagedForwardOptions) {
    const b = model.backend, arch = model.arch;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    const T = options.maxRows, N = options.maxRunning, G = N;
    this.forward = new DecoderForward(model, T, options.maxLen);
    // i32 sections: tokens, positions, cache positions, table rows [T] each; segment offsets [G + 1],
    // keys and table rows [G] each; the LM head's rows [maxLogitRows]; with feedFrom, the feeding rows [T].
    let offset = 0;
    const section = (n: number) => { const o = offset; offset += n; return o; };
    this.at = {
      tokens: section(T), positions: section(T), cachePositions: section(T), tableRows: section(T),
      cu: section(G + 1), seqKeys: section(G), seqRows: section(G), gather: section(options.maxLogitRows),
      feed: section(options.feedFrom ? T : 0),
    };
    this.meta = new Int32Array(offset);
    this.io = {
      meta: b.empty([offset], 'i32'),
      logits: b.empty([options.maxLogitRows, arch.paddedVocab], model.dtype),
      q: b.empty([T * Hq * d], model.dtype), lse: b.empty([T * Hq], 'f32'),
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

  /**
   * Moves the decode region's S rows of the uploaded step on to the next step on the device
   * (decodeAdvance): each active row's token becomes its sampled one and its positions grow by one, and
   * the sampled tokens go to row step[0] of `record`. Device work only: capturable with compute().
   */
  advanceDecode(S: number, sampled: Tensor, record: Tensor, step: Tensor): void {
    const b = this.model.backend, view = (at: number) => b.view(this.io.meta, at, [S]);
    b.decodeAdvance({
      sampled, tokens: view(this.at.tokens), positions: view(this.at.positions), cachePositions: view(this.at.cachePositions),
      record, step,
    });
  }

  /** Decode attention's split-K chunks for a decode region of n rows (attention-splits.ts). */
  splits(n: number): number {
    return modelAttentionSplits(this.model.arch, this.model.dtype, this.options.maxLen, n);
  }

  /** The model over the step's rows: writes their keys and values, leaves the last hidden state for logits(). */
  run(rows: StepRows): void {
    const shape = exactShape(rows);
    this.upload(rows, shape);
    this.compute(shape);
  }

  /**
   * run()'s host-to-device part: the rows' tokens, positions, cache positions and table rows, the
   * segments, (when given) the rows logits will gather and (with feedFrom) the rows of feedFrom that
   * feed rows' tokens — `feeds`: [row, feeding row] pairs — in one upload. `shape` may pad the rows and
   * the segments of `rows` (a graph's shape): padded rows have cache position −1, padded segments none.
   */
  upload(rows: StepRows, shape: StepShape, logitRows?: readonly number[], feeds: readonly (readonly [number, number])[] = []): void {
    const m = this.meta, at = this.at, o = this.options, R = rows.tokens.length, S = rows.decodePositions.length;
    const { rows: Rp, segments: G } = shape;
    if (shape.decodeRows !== S || Rp < R || Rp > o.maxRows || G < rows.segments.length || G > o.maxRunning) {
      throw new Error(`internal: step of ${R} rows (${S} decode, ${rows.segments.length} segments) in shape ${JSON.stringify(shape)}`);
    }
    m.set(rows.tokens, at.tokens);
    m.fill(0, at.tokens + R, at.tokens + Rp);
    m.set(rows.positions, at.positions);
    m.fill(0, at.positions + R, at.positions + Rp);
    m.set(rows.decodePositions, at.cachePositions);
    m.set(rows.positions.subarray(S), at.cachePositions + S);
    m.fill(-1, at.cachePositions + R, at.cachePositions + Rp);
    for (let s = 0; s < S; s++) m[at.tableRows + s] = s;
    m.fill(0, at.tableRows + S, at.tableRows + Rp);
    m[at.cu] = 0;
    rows.segments.forEach((seg, i) => {
      if (seg.count > shape.maxSegmentRows) throw new Error(`internal: a segment of ${seg.count} rows in a step shaped for ${shape.maxSegmentRows}`);
      m.fill(seg.slot, at.tableRows + seg.r0, at.tableRows + seg.r0 + seg.count);
      m[at.cu + i + 1] = seg.r0 + seg.count - S;
      m[at.seqKeys + i] = seg.start + seg.count;
      m[at.seqRows + i] = seg.slot;
    });
    for (let i = rows.segments.length; i < G; i++) {
      m[at.cu + i + 1] = m[at.cu + i]!;
      m[at.seqKeys + i] = 0;
      m[at.seqRows + i] = 0;
    }
    if (logitRows) this.setLogitRows(logitRows);
    if (o.feedFrom) {
      m.fill(-1, at.feed, at.feed + Rp);
      for (const [row, from] of feeds) m[at.feed + row] = from;
    } else if (feeds.length > 0) {
      throw new Error('internal: rows fed from the previous step without feedFrom');
    }
    const b = this.model.backend;
    const used = o.feedFrom ? at.feed + Rp : logitRows ? at.gather + logitRows.length : at.seqRows + G;
    b.upload(b.view(this.io.meta, 0, [used]), m.subarray(0, used));
  }

  /**
   * run()'s device part, over the rows upload() wrote, in `shape`. It only launches work on fixed
   * buffers, and the same work for the same shape, so it can be captured in a CUDA graph.
   */
  compute(shape: StepShape): void {
    const b = this.model.backend, m = this.model, arch = m.arch, f = this.forward, io = this.io, o = this.options, at = this.at;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch, W = (Hq + 2 * Hkv) * d;
    const { rows: R, decodeRows: S, segments: G } = shape, P = R - S;
    const meta = (offset: number, n: number) => b.view(io.meta, offset, [n]);
    const tokens = meta(at.tokens, R), positions = meta(at.positions, R), cachePositions = meta(at.cachePositions, R), tableRows = meta(at.tableRows, R);
    const v = f.rows(R);
    this.last = v;
    const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
    const scale = 1 / Math.sqrt(d);
    const M = o.blockTables.shape[1]!, NB = o.numBlocks, bs = o.blockSize;
    const poolView = (l: number, kv: number) => b.view(this.kvPool, (l * 2 + kv) * NB * Hkv * bs * d, [NB, Hkv, bs, d]);
    const splits = S > 0 ? this.splits(S) : 1;
    const partials = splits > 1 ? { partials: b.view(this.partials!, 0, [S, Hq, splits, d + 2]) } : {};
    const segments = G > 0 && P > 0 ? {
      cuSeqlensQ: meta(at.cu, G + 1), maxSeqlenQ: Math.min(P, shape.maxSegmentRows),
      paged: { blockTable: o.blockTables, seqKeys: meta(at.seqKeys, G), seqRows: meta(at.seqRows, G) },
    } : undefined;
    if (o.feedFrom) b.feedTokens({ sampled: o.feedFrom, from: meta(at.feed, R), tokens });
    f.embed(b, v, tokens, positions);
    f.blocks(b, v, (l) => {
      const extras = f.qkvExtras(l), kCache = poolView(l, 0), vCache = poolView(l, 1);
      if (S > 0) {
        // The decode region (table rows [0, S)): its keys and values appended and attended to in one op.
        b.appendDecodeAttention({
          qkv: b.view(v.qkv, 0, [S, W]), positions: b.view(cachePositions, 0, [S]), q: b.view(io.q, 0, [S, Hq, d]), kCache, vCache,
          out: b.view(v.attn, 0, [S, Hq, d]), scale, blockTable: b.view(o.blockTables, 0, [S, M]), ...partials, ...rope, ...extras,
        });
      }
      if (P > 0) {
        b.qkvRopeAppend({
          qkv: b.view(v.qkv, S * W, [P, W]), positions: b.view(cachePositions, S, [P]), q: b.view(io.q, S * Hq * d, [P, Hq, 1, d]),
          kCache, vCache, blockTable: o.blockTables, tableRows: b.view(tableRows, S, [P]), ...rope, ...extras,
        });
      }
      if (segments) {
        b.flashAttentionForward({
          q: b.view(io.q, S * Hq * d, [P, Hq, d]), k: kCache, v: vCache, out: b.view(v.attn, S * Hq * d, [P, Hq, d]),
          lse: b.view(io.lse, 0, [Hq, P]), scale, causal: true, ...segments,
        });
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
    this.setLogitRows(rows);
    const b = this.model.backend;
    b.upload(b.view(this.io.meta, this.at.gather, [rows.length]), this.meta.subarray(this.at.gather, this.at.gather + rows.length));
  }

  /** logits()'s device part, for the n rows uploadLogitRows() (or upload()) named (capturable, as compute()). */
  computeLogits(n: number): Tensor {
    const b = this.model.backend, v = this.last;
    if (!v) throw new Error('internal: logits before the forward');
    const gather = b.view(this.io.meta, this.at.gather, [n]);
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

  private setLogitRows(rows: readonly number[]): void {
    const n = rows.length;
    if (n < 1 || n > this.options.maxLogitRows) throw new Error(`internal: logits of ${n} rows (1..${this.options.maxLogitRows})`);
    this.meta.set(rows, this.at.gather);
  }

  private freeBuffers(): void {
    const b = this.model.backend;
    for (const t of Object.values(this.io)) b.free(t);
    if (this.partials) b.free(this.partials);
    this.forward.free();
  }
}
