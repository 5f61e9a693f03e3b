// How many pieces decode attention cuts each sequence's KV cache into (FlashDecoding's split-K; the
// kernel is backend/cuda/kernels/decode-attention.ts). A block of that kernel walks its keys in tiles of
// 128, one tile after another, and each tile costs a few memory latencies whatever the batch: with few
// sequences and KV heads (batch 1 of a GQA model: 8 blocks) the step is that chain of latencies, not
// bandwidth. So a cache long enough to split is cut into one-tile chunks, as long as the grid stays
// within a few blocks per SM; short caches are not split (the combine kernel costs a launch).
// The count is fixed per batch-size bucket from the cache capacity (graphs need a fixed grid); splits
// past a sequence's current length exit at once.

/** Keys a decode attention block takes per tile (DECODE_TILE of the kernel). */
export const DECODE_KEYS_PER_TILE = 128;
/** Caches up to this capacity are not split. */
const MIN_SPLIT_CAPACITY = 256;
/** Blocks the split grid aims for at most: 8 resident blocks on each of 132 SMs. */
const TARGET_BLOCKS = 1056;

/** Splits of each sequence's cache for `rows` sequences of `kvHeads` KV heads and `capacity` positions. */
export function decodeAttentionSplits(capacity: number, kvHeads: number, rows: number): number {
  if (capacity <= MIN_SPLIT_CAPACITY) return 1;
  const byLength = Math.ceil(capacity / DECODE_KEYS_PER_TILE);
  const byOccupancy = Math.ceil(TARGET_BLOCKS / (kvHeads * rows));
  return Math.max(1, Math.min(byLength, byOccupancy));
}
