// How many pieces decode attention cuts each sequence's KV cache into (FlashDecoding's split-K; the
// kernel is backend/cuda/kernels/decode-attention.ts). A block of that kernel walks its keys in tiles of
// 128, one tile after another, and each tile costs a few memory latencies whatever the batch: with few
// sequences and KV heads (batch 1 of a GQA model: 8 blocks) the step is that chain of latencies, not
// bandwidth. So a cache long enough to split is cut into one-tile chunks, as long as the grid stays
// within what the SMs hold at once; short caches are not split (the combine costs the partials' round
// trip). The kernel divides each sequence's own length among the splits (at least 64 keys a split), so
// a split count chosen from the capacity still spreads a short sequence over several blocks.
// The count is fixed per batch-size bucket from the cache capacity (graphs need a fixed grid).
// The pipelined variant (128-byte rows: d 64 at 16 bit; on tensor cores 256-byte rows too, d 128) holds 3 blocks an SM and overlaps a block's
// tiles with each other, so it wants few long blocks: its grid aims for one wave of them, the other
// variants' for 8 blocks an SM.

import { PIPELINED_BLOCKS_PER_SM, takesPipelined } from '../backend/cuda/kernels/decode-attention.js';
import { byteSize } from '../dtype.js';
import type { DType } from '../dtype.js';

/** Keys a decode attention block takes per tile (DECODE_TILE of the kernel). */
export const DECODE_KEYS_PER_TILE = 128;
/**
 * Caches up to this capacity are not split (FUSEFORMER_DECODE_MIN_SPLIT_CAPACITY overrides it, for sweeps:
 * GPT-2's decode bench runs a 160-position cache, 12 blocks of two tiles each at batch 1).
 */
const MIN_SPLIT_CAPACITY = envInteger('FUSEFORMER_DECODE_MIN_SPLIT_CAPACITY', 256);

function envInteger(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got '${raw}'`);
  return value;
}
/** SMs the targets assume (an H100 / H200). */
const SMS = 132;
/** Blocks the split grid aims for at most: 8 resident blocks on each SM; the pipelined variant's one wave. */
const TARGET_BLOCKS = 8 * SMS;
/** The pipelined variant's target; FUSEFORMER_DECODE_SPLIT_TARGET overrides it (for sweeps of the split count). */
const PIPELINED_TARGET_BLOCKS = envInteger('FUSEFORMER_DECODE_SPLIT_TARGET', PIPELINED_BLOCKS_PER_SM * SMS);

/** Splits of each sequence's cache for `rows` sequences of `kvHeads` KV heads and `capacity` positions. */
export function decodeAttentionSplits(capacity: number, kvHeads: number, rows: number, pipelined = false): number {
  if (capacity <= MIN_SPLIT_CAPACITY) return 1;
  const byLength = Math.ceil(capacity / DECODE_KEYS_PER_TILE);
  const byOccupancy = Math.ceil((pipelined ? PIPELINED_TARGET_BLOCKS : TARGET_BLOCKS) / (kvHeads * rows));
  return Math.max(1, Math.min(byLength, byOccupancy));
}

/** decodeAttentionSplits for a model's heads (the pipelined variant's target where its rows take it). */
export function modelAttentionSplits(arch: { readonly kvHeads: number; readonly headDim: number }, dtype: DType, capacity: number, rows: number): number {
  return decodeAttentionSplits(capacity, arch.kvHeads, rows, takesPipelined(arch.headDim, byteSize(dtype)));
}
