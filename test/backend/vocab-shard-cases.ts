// Shared by the CPU and GPU tests of the vocab-parallel ops: runs the split cross-entropy (the three
// forward ops with the all-reduces done on the host, and the backward) for w shards of a [rows, V]
// logits matrix on one backend, and the masked embedding lookup of every shard, returning host arrays.

import type { Backend } from '../../src/backend/backend.js';
import type { FloatDType } from '../../src/dtype.js';

export interface ShardCase {
  readonly rows: number;
  /** The real vocabulary V. */
  readonly vocab: number;
  /** Columns per shard (w·Vl ≥ V; the last shards may hold padding only). */
  readonly shardWidth: number;
  readonly worldSize: number;
  readonly dtype: FloatDType;
  readonly smoothing: number;
  readonly ignoreIndex?: number;
  readonly logits: Float32Array;
  readonly targets: Int32Array;
}

export function makeCase(rows: number, vocab: number, shardWidth: number, worldSize: number, dtype: FloatDType, smoothing: number, seed: number): ShardCase {
  let s = seed;
  const rand = () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648; };
  const logits = Float32Array.from({ length: rows * vocab }, () => 8 * rand() - 4);
  const targets = Int32Array.from({ length: rows }, (_, r) => (r % 5 === 3 ? -100 : Math.floor(rand() * vocab)));
  return { rows, vocab, shardWidth, worldSize, dtype, smoothing, ignoreIndex: -100, logits, targets };
}

/** Shard r's columns [r·Vl, (r+1)·Vl) of the logits, zero-padded past V. */
export function shardColumns(c: ShardCase, r: number): Float32Array {
  const out = new Float32Array(c.rows * c.shardWidth);
  for (let i = 0; i < c.rows; i++) {
    for (let j = 0; j < c.shardWidth; j++) {
      const col = r * c.shardWidth + j;
      if (col < c.vocab) out[i * c.shardWidth + j] = c.logits[i * c.vocab + col]!;
    }
  }
  return out;
}

export interface ShardResult {
  readonly rowMax: Float32Array[];
  readonly sums: Float32Array[];
  readonly loss: Float32Array;
  readonly lse: Float32Array;
  /** [rows, V]: the shards' gradients side by side (padding columns checked to be zero). */
  readonly dLogits: Float32Array;
  readonly paddingGradientsZero: boolean;
}

/** The split cross-entropy on `b`: per-shard ops, host all-reduces (max, then sum) in rank order. */
export function runShardedCrossEntropy(b: Backend, c: ShardCase, gradScale: number): ShardResult {
  const { rows, shardWidth: Vl, worldSize: w } = c;
  const targets = b.fromArray(c.targets, [rows], 'i32');
  const shards = Array.from({ length: w }, (_, r) => b.fromArray(shardColumns(c, r), [rows, Vl], c.dtype));
  const classes = (r: number) => Math.max(0, Math.min(Vl, c.vocab - r * Vl));
  const opts = { labelSmoothing: c.smoothing, ...(c.ignoreIndex !== undefined ? { ignoreIndex: c.ignoreIndex } : {}) };
  const rowMaxT = shards.map(() => b.empty([rows], 'f32'));
  shards.forEach((logits, r) => b.vocabShardMax({ logits, classes: classes(r), rowMax: rowMaxT[r]! }));
  const rowMax = rowMaxT.map((t) => b.download(t) as Float32Array);
  const globalMax = Float32Array.from({ length: rows }, (_, i) => Math.max(...rowMax.map((m) => m[i]!)));
  const m = b.fromArray(globalMax, [rows], 'f32');
  const sumsT = shards.map(() => b.empty([3, rows], 'f32'));
  shards.forEach((logits, r) => b.vocabShardSums({ logits, targets, vocabStart: r * Vl, classes: classes(r), rowMax: m, sums: sumsT[r]! }));
  const sums = sumsT.map((t) => b.download(t) as Float32Array);
  const total = Float32Array.from({ length: 3 * rows }, (_, i) => sums.reduce((a, s) => a + s[i]!, 0));
  const sumsAll = b.fromArray(total, [3, rows], 'f32');
  const loss = b.empty([rows], 'f32'), lse = b.empty([rows], 'f32');
  b.vocabShardLoss({ rowMax: m, sums: sumsAll, targets, totalClasses: c.vocab, loss, lse, ...opts });
  const dLogits = new Float32Array(rows * c.vocab);
  let paddingGradientsZero = true;
  shards.forEach((logits, r) => {
    // In place, as the LM head runs it.
    b.vocabShardCrossEntropyBackward({ logits, targets, lse, dLogits: logits, vocabStart: r * Vl, classes: classes(r), totalClasses: c.vocab, gradScale, ...opts });
    const d = b.download(logits) as Float32Array;
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < Vl; j++) {
        const col = r * Vl + j;
        if (col < c.vocab) dLogits[i * c.vocab + col] = d[i * Vl + j]!;
        else if (d[i * Vl + j] !== 0) paddingGradientsZero = false;
      }
    }
  });
  return { rowMax, sums, loss: b.download(loss) as Float32Array, lse: b.download(lse) as Float32Array, dLogits, paddingGradientsZero };
}

/** Each shard's masked embedding lookup of every token (no positions, no dropout), summed on the host. */
export function runShardedEmbedding(b: Backend, table: Float32Array, vocab: number, hidden: number, shardRows: number, worldSize: number, tokens: Int32Array, dtype: FloatDType): Float32Array {
  const L = tokens.length;
  const sum = new Float32Array(L * hidden);
  const tok = b.fromArray(tokens, [1, L], 'i32');
  for (let r = 0; r < worldSize; r++) {
    const rows = new Float32Array(shardRows * hidden);
    const real = Math.max(0, Math.min(shardRows, vocab - r * shardRows));
    rows.set(table.subarray(r * shardRows * hidden, (r * shardRows + real) * hidden));
    const out = b.empty([1, L, hidden], dtype), mask = b.empty([1, L, hidden], 'u8');
    b.embeddingForward({ tokens: tok, tokenTable: b.fromArray(rows, [shardRows, hidden], dtype), vocabStart: r * shardRows, out, mask, p: 0, seed: 0n, offset: 0n });
    (b.download(out) as Float32Array).forEach((x, i) => { sum[i]! += x; });
  }
  return sum;
}
