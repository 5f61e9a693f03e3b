// decodeAttention: one new token per sequence attending over its KV cache (FlashDecoding's split-K
// scheme, GQA-aware), the splits combined by the last block of each (sequence, head block).
//
// Math (backend.ts has the contract): for sequence b, query head h, kv head g = h / group, keys
// j < n = min(positions[b] + 1, maxLen): out = Σ_j softmax_j(scale·q·k_j)·v_j. Scores are kept in base 2
// (q is pre-multiplied by scale·log2 e; exp2f), with FlashAttention's online softmax across key tiles:
// m' = max(m, tile max), acc ← acc·2^(m − m') + Σ_j 2^(s_j − m')·v_j, l likewise.
//
// Thread mapping. Grid (Hkv·headBlocks, B, S). A block serves GH query heads that share one kv head
// (GH = group, or a divisor of it ≤ MAX_HEADS_PER_BLOCK for very wide groups), so each key and value row
// is read once for all of them; split s covers keys [s·chunk, min((s + 1)·chunk, n)) with chunk =
// max(min_chunk, ⌈n / S⌉) from the sequence's own length n (on the device: a graph's fixed grid of S
// splits divides whatever length each step has evenly, instead of the cache capacity — a serving pool
// of 1,600 positions cut in 2 left all of a 512-key sequence to split 0). 128 threads, keys
// in tiles of 128:
//   scores  thread t takes key t of the tile: reads its d-element key row in 16-byte vectors (a
//           thread's loads cover whole 32-byte sectors) and dots it with the GH query rows held in
//           shared memory (broadcast reads) → GH scores in shared memory.
//   softmax per head: tile max and sum by warp shuffles and one shared round; every thread keeps the
//           same running (m, l) per head.
//   values  thread t = (key lane kl, column vector cv) with d/VEC column vectors per row: it walks keys
//           kl, kl + KEY_LANES, ... of the tile, reads 16 bytes of each value row (a warp reads whole
//           rows: coalesced) and accumulates GH × VEC outputs in registers. The rows' loads go out in
//           batches of up to 8 before any is used (a lane's 8 rows in a dependent chain cost 8 memory
//           latencies a tile, which made a 576-key decode step 15-17 µs); when a batch covers the lane's
//           whole tile (d ≤ 64) they are issued before the scores, overlapping the softmax's barriers.
//   end     the key lanes' partial sums are added through shared memory; without splits the block
//           writes out = acc / l, with splits an unnormalised partial (acc, m, l). The blocks of one
//           (sequence, head block) count themselves on a zeroed counter (KernelHost.counters); the
//           last to finish combines the partials — split s weighted by 2^(m_s − max m) — writes out
//           and sets the counter back to zero. (A separate combine kernel cost a launch and a memory
//           latency per layer: ~2 µs of a 4–8 µs op at batch 1.)
// Splits beyond a sequence's length do nothing and are not counted: every block recomputes n, so the
// grid is fixed (graph-capturable) while lengths change on the device.
// Throughput variant (spec.throughput; large grids of the serving engine, decodeAttentionThroughput): the
// value rows are loaded after the scores in batches of THROUGHPUT_V_BATCH instead of all before them, and
// __launch_bounds__ caps registers for THROUGHPUT_MIN_BLOCKS blocks an SM (96 against 168): with more
// blocks than fit, more of them resident hide each one's chain of tile latencies better than the prefetch.
// Pipelined variant (spec.pipelined; rows of 128 bytes — d 64 at 16 bit, d 32 at f32; the default for
// them, decodeAttentionPipelined): the K and V tiles go to shared memory by
// cp.async in two stages, XOR-swizzled, the next tile issued before the current one is computed, so a
// block's loads overlap its own math and barriers; the scores and values read the rows from shared memory (64 KiB of dynamic shared memory; the
// key lanes' sums reuse it at the end).
// Early copies (PIPELINED, args.freshKeys > 0): the caller vouches that only each query's last freshKeys
// keys were written by the op just before (this step's qkvRopeAppend); the first tile's copies of the
// others are issued before GRID_DEPENDENCY_WAIT, overlapping that op's tail under a programmatic launch.
// Safe because every kernel here triggers its dependents only after its own wait: when this kernel
// starts, every op but the one just before has finished (positions and block tables come from host
// uploads or earlier steps).
// Rows of 256 bytes (d 128 at 16 bit: Llama 3 8B, Qwen, Mistral): the tensor-core variant only — its warp
// tiles of RC = 16 chunks a row, the 128-byte swizzle applied within each half of a row (swizzled_offset<16>);
// a CUDA-core pipelined block's two 128-key stages of them would need 128 KiB.
// Fused append (spec.append, pipelined only; appendDecodeAttention): no q tensor and no qkvRopeAppend before
// it. After the wait each block forms its GH query heads from the QKV row (+ bias, RoPE: qkvRopeAppend's
// math, each value rounded to T as that op stores it) and, if its keys include this step's (position p),
// the new key and value of its kv head, into fresh_kv; the tile that holds row p takes it from there
// (a shared-memory copy where the other rows are cp.async'd), and head block 0 of the split that holds p
// writes it to the cache for later steps. No block reads row p from global memory in this kernel. With
// append.headNorm (Qwen3's q_norm / k_norm) the query heads and the key are each scaled by
// 1/sqrt(mean(x²) + eps) and their gamma between the bias and RoPE, as qkvRopeAppend does: the biased values
// and their pairs' squares go to shared memory first, and after a barrier every item sums its head's squares
// in one order (the same rstd for every item of a head).
// Paged (spec.page = blockSize > 0, a block table given; the serving engine's pool): key j's row is
// (block_table[b, j / PAGE]·Hkv + g)·PAGE + j % PAGE of the pool [numBlocks, Hkv, PAGE, d] instead of
// (b·Hkv + g)·max_len + j, max_len = maxBlocks·PAGE; PAGE is a compile-time constant and a block's PAGE
// rows of one kv head are contiguous, so each warp's loads stay whole rows as in the dense layout. The
// table entries a tile needs (TILE / PAGE of them) are read per key from L1. Idle rows (position < 0)
// have no keys: out = 0.
//
// Bytes: each key and value element is read once per head block: 2·n·d·s per (b, kv head), plus q and out
// (2·GH·d·s per block) and, with S splits, S·GH·(d + 2)·4 partial bytes written and read once.
// Precision: f32 scores, softmax and accumulation; stored in the tensors' dtype.

import { envSwitch } from '../env-switch.js';
import type { DecodeAttentionArgs, QkvRopeAppendArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkDecodeAttention, checkQkvRopeAppend } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { MMA_LIB } from './mma-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { HEAD_RSTD_CODE, ROPE_PAIR_CODE } from './qkv-rope-append.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface DecodeAttentionSpec {
  readonly dtype: FloatDType;
  readonly headDim: number;
  /** Query heads a kv head serves (Hq / Hkv). */
  readonly group: number;
  /** Query heads one block serves: group, or a divisor of it. */
  readonly headsPerBlock: number;
  /** Elements per vector access of a key or value row; divides headDim. */
  readonly vec: number;
  /** Split-K: write partials, the last block of each (sequence, head block) combines them. */
  readonly split: boolean;
  /** Positions per block of a paged cache (a block table given); 0 or absent for the contiguous cache. */
  readonly page?: number;
  /**
   * Many blocks resident rather than each block's latency hidden (decodeAttentionThroughput): value rows
   * in batches of THROUGHPUT_V_BATCH after the scores, not all prefetched before them, and registers capped
   * for THROUGHPUT_MIN_BLOCKS blocks an SM.
   */
  readonly throughput?: boolean;
  /**
   * K/V tiles staged in shared memory by cp.async, two stages, so a block's next tile is in flight while
   * it computes the current one (decodeAttentionPipelined; 128-byte rows only: d·sizeof(T) = 128).
   */
  readonly pipelined?: boolean;
  /**
   * appendDecodeAttention fused (pipelined only): the query heads and this step's key and value come from
   * the QKV projection's row (+ bias, RoPE on q and k), the key and value are written to the cache by one
   * block per (sequence, kv head) and read from shared memory by every block whose keys include them.
   */
  readonly append?: { readonly rope: boolean; readonly bias: boolean; readonly headNorm?: boolean };
  /**
   * The pipelined variant's scores and P·V on tensor cores, each warp walking its own key tiles
   * (MMA_WARP_TILES_CODE; 16-bit rows of 128 or 256 bytes; decodeAttentionMma).
   */
  readonly mma?: boolean;
  /** The tensor-core variant's warp tiles, stages and resident blocks (absent: DEFAULT_MMA_SHAPE). */
  readonly mmaShape?: MmaShape;
  /**
   * DecodeAttentionArgs.project: the block that writes its heads' outputs also
   * multiplies them by their columns of the O weight [H, Hq·D] and adds the H sums into an f32 accumulator
   * (PROJECT_CODE; the columns' rows prefetched into L2 before the wait). `chunks` > 1 (unsplit only): grid.z
   * is a chunk of H / chunks output rows, each block of a head group computing the same attention (a short
   * cache's few keys, cheap to repeat) and projecting only its chunk — the O weight then streams through
   * headGroups·chunks blocks instead of headGroups (projectionChunks); chunk 0 alone writes out and the cache.
   * `int4`: the O weight in int4Linear's layout (packed words, f16 scales, u8 zeros of `groupSize` columns).
   */
  readonly project?: { readonly hidden: number; readonly chunks?: number; readonly int4?: { readonly groupSize: number } };
}

/**
 * Keys a warp of the tensor-core variant takes per tile (16 or 32: one or two k-steps of P·V), the stages
 * of its own ring (2 or 3), and blocks an SM to cap registers for (__launch_bounds__; 0: no cap).
 */
export interface MmaShape { readonly tile: 16 | 32; readonly stages: 2 | 3; readonly blocksPerSm: number }
/** The measured shape (session 23): 32-key tiles, two stages, 64 KiB a block, 3 blocks an SM by shared memory. */
export const DEFAULT_MMA_SHAPE: MmaShape = { tile: 32, stages: 2, blocksPerSm: 0 };
/**
 * The shape for 256-byte rows (d 128 at 16 bit) on every grid: 16-key tiles, two stages — the same 64 KiB a
 * block as DEFAULT_MMA_SHAPE at 128-byte rows, so 3 blocks an SM (a wide grid's 4 would need 256 KiB).
 */
export const WIDE_ROW_MMA_SHAPE: MmaShape = { tile: 16, stages: 2, blocksPerSm: 0 };
/**
 * The shape for grids of more than one wave at PIPELINED_BLOCKS_PER_SM blocks an SM (serving's big decode
 * steps): 16-key warp tiles, two stages, 4 blocks an SM (32 KiB each), so a serving step's 808 blocks at
 * 100 rows × 384 keys run in 2 rounds instead of 3. H200, session 24 (bench/results/gpu-pending-s24/): that
 * step 1.968 → 1.888 ms (profile), serving at 64 / 256 clients 19,846 / 36,932 → 20,828 / 38,563 tok/s
 * (same call); decode at batch 1 and 32 (one wave) keeps DEFAULT_MMA_SHAPE.
 */
export const WIDE_GRID_MMA_SHAPE: MmaShape = { tile: 16, stages: 2, blocksPerSm: 4 };

/**
 * The tensor-core variant's shape for a grid of `blocks` with rows of `rowBytes`: the forced one
 * (FUSEFORMER_DECODE_MMA_SHAPE), else WIDE_ROW_MMA_SHAPE for 256-byte rows, else by waves.
 */
export function mmaShapeFor(blocks: number, multiProcessorCount: number, forced: MmaShape = decodeAttentionOptions.mmaShape, rowBytes = 128): MmaShape {
  if (forced !== DEFAULT_MMA_SHAPE) return forced;
  if (rowBytes === 256) return WIDE_ROW_MMA_SHAPE;
  return blocks > PIPELINED_BLOCKS_PER_SM * multiProcessorCount ? WIDE_GRID_MMA_SHAPE : DEFAULT_MMA_SHAPE;
}

function mmaShapeSuffix(m: MmaShape | undefined): string {
  return m && (m.tile !== DEFAULT_MMA_SHAPE.tile || m.stages !== DEFAULT_MMA_SHAPE.stages || m.blocksPerSm !== DEFAULT_MMA_SHAPE.blocksPerSm) ? `_t${m.tile}s${m.stages}b${m.blocksPerSm}` : '';
}

/** Dynamic shared memory of the tensor-core variant: each warp's stages of a K and a V tile of `rowBytes` rows (the combine's partials fit in it). */
export function mmaSharedBytes(shape: MmaShape, rowBytes = 128): number {
  return (DECODE_THREADS / 32) * shape.stages * 2 * shape.tile * rowBytes;
}

/** FUSEFORMER_DECODE_MMA_SHAPE=tile,stages[,blocksPerSm] (a sweep knob: that shape for every grid), else DEFAULT_MMA_SHAPE (the launch then takes WIDE_GRID_MMA_SHAPE past one wave). */
export function parseMmaShape(raw: string | undefined): MmaShape {
  if (raw === undefined || raw === '') return DEFAULT_MMA_SHAPE;
  const [tile, stages, blocks = 0, ...rest] = raw.split(',').map((v) => Number(v.trim()));
  if ((tile !== 16 && tile !== 32) || (stages !== 2 && stages !== 3) || !Number.isInteger(blocks) || blocks < 0 || blocks > 8 || rest.length > 0) {
    throw new RangeError(`FUSEFORMER_DECODE_MMA_SHAPE must be 'tile,stages[,blocksPerSm]' with tile 16 or 32, stages 2 or 3, blocks 0..8; got '${raw}'`);
  }
  return { tile, stages, blocksPerSm: blocks };
}

/** Bytes of dynamic shared memory the pipelined variant stages: two stages of a K and a V tile of 128-byte rows. */
export const PIPELINED_STAGE_BYTES = 2 * 2 * 128 * 128;

/** Whether the pipelined variant takes rows of this many bytes (the XOR swizzle of mma-lib.ts over 8 chunks). */
export function pipelinedRows(headDim: number, elementBytes: number, vec: number): boolean {
  return headDim * elementBytes === 128 && vec * elementBytes === 16;
}

/** Whether the tensor-core variant takes these rows: 16-bit, 16-byte vectors, 128 or 256 bytes (d 64 or 128). */
export function mmaRows(headDim: number, elementBytes: number, vec: number): boolean {
  return elementBytes === 2 && vec * elementBytes === 16 && (headDim * elementBytes === 128 || headDim * elementBytes === 256);
}

/** The throughput variant's value-row batch and resident blocks an SM (ptxas sm_90, d 64 group 4: 96 registers, 32 bytes spilled; 168 without). */
export const THROUGHPUT_V_BATCH = 4;
export const THROUGHPUT_MIN_BLOCKS = 5;
/**
 * Grids above this many blocks take the throughput variant: more than the latency variant keeps resident
 * (168 registers: 3 blocks an SM on 132 SMs). Measured on the H200 (session 9, Llama 1.2B, paged): a
 * 128-row serving decode step's decodeAttention (2,048 blocks, 139 MB) 157 → 106 µs (23% → 32% of the
 * copy roof), the step 5.05 → 4.79 ms; serving at 64 / 256 clients 12,119 → 15,381 and 21,088 → 23,503
 * tokens/s (`bench/results/gpu-pending-s9/call6/`). Each block's tiles are a chain of latencies that 3
 * blocks an SM did not cover.
 */
export const THROUGHPUT_MIN_GRID = 3 * 132;

/**
 * Whether a grid of `blocks` takes the throughput variant: FUSEFORMER_DECODE_THROUGHPUT=1 always, =0 never;
 * by default ('auto') a paged cache's grid above THROUGHPUT_MIN_GRID blocks (the serving engine, where it
 * was measured; the decode engine's contiguous caches keep the latency variant until timed there).
 */
export function decodeAttentionThroughput(blocks: number, paged: boolean): boolean {
  const mode = decodeAttentionOptions.throughput;
  return mode === 'auto' ? paged && blocks > THROUGHPUT_MIN_GRID : mode;
}

/**
 * Whether rows the pipelined variant takes (pipelinedRows) get it: unless FUSEFORMER_DECODE_PIPELINED=0,
 * every such launch (the default, 'auto', and =1). Measured on the H200 (session 10, Llama 1.2B): a
 * paged serving step of 256 rows × 640 positions (352 MB a layer) 214 → 121 µs a layer against the
 * throughput variant (39% → 70% of the copy roof), the replayed step 5.46 → 4.19 ms, serving at 64 / 256
 * clients 16,701 → 18,496 and 28,214 → 32,965 tokens/s (`bench/results/gpu-pending-s10/call1/`); the
 * decode engine's contiguous caches, against the latency variant, GPT-2 b1 0.243 → 0.235 ms/token, b32
 * 0.450 → 0.440, Llama b1 0.857 → 0.845, b32 1.106 → 1.096 (`call3/decode-{default,pipe}.log`).
 */
export function decodeAttentionPipelined(): boolean {
  return decodeAttentionOptions.pipelined !== false;
}

/** Blocks of the pipelined variant an SM holds (64 KiB of staged tiles each, 168 registers): 3. */
export const PIPELINED_BLOCKS_PER_SM = 3;

/**
 * Whether a launch with rows of d elements of `elementBytes` (16-byte vectors) takes the pipelined variant:
 * 128-byte rows, or 256-byte 16-bit rows on tensor cores (stagedVariant).
 */
export function takesPipelined(headDim: number, elementBytes: number): boolean {
  return stagedVariant(headDim, elementBytes, 16 / elementBytes, elementBytes === 2 ? 'bf16' : 'f32') !== undefined;
}

/** The staged variant rows of this size take, if any: the pipelined one (128-byte rows) on tensor cores where it may, or the tensor-core one alone for 256-byte rows. */
export function stagedVariant(headDim: number, elementBytes: number, vec: number, dtype: FloatDType): { readonly mma: boolean } | undefined {
  if (!decodeAttentionPipelined()) return undefined;
  const mma = decodeAttentionMma(dtype) && mmaRows(headDim, elementBytes, vec);
  if (pipelinedRows(headDim, elementBytes, vec)) return { mma };
  return mma ? { mma } : undefined;
}

/** The default cap on a projected launch's output chunks (DecodeAttentionSpec.project.chunks), and the largest allowed. */
export const DEFAULT_PROJECTION_CHUNKS = 16;
export const MAX_PROJECTION_CHUNKS = 64;

/**
 * Process-wide choices of the decode-attention launcher: the most output chunks of the projection (projectionChunks,
 * FUSEFORMER_FUSED_O_CHUNKS; 1: the one-chunk form of 2026-12-05), the throughput variant (decodeAttentionThroughput),
 * the pipelined and tensor-core variants.
 */
export const decodeAttentionOptions: { projectChunks: number; throughput: boolean | 'auto'; pipelined: boolean | 'auto'; prefetch: boolean; append: boolean; mma: boolean | 'auto'; mmaShape: MmaShape } = {
  projectChunks: projectChunksFromEnv(process.env['FUSEFORMER_FUSED_O_CHUNKS']),
  // The pipelined variant's first-tile copies of keys older than freshKeys issued before the grid-dependency
  // wait (H200, session 11: serving at 64 clients 16,690 → 17,949 tok/s, decode unchanged);
  // FUSEFORMER_DECODE_PREFETCH=0 issues them all after it.
  prefetch: process.env['FUSEFORMER_DECODE_PREFETCH'] !== '0',
  // decodeAttentionPipelined (128-byte rows): on unless FUSEFORMER_DECODE_PIPELINED=0.
  pipelined: envSwitch(process.env['FUSEFORMER_DECODE_PIPELINED']),
  // appendDecodeAttention as one kernel where it takes it (fusedAppendDecodeAttention); FUSEFORMER_DECODE_APPEND=0
  // runs qkvRopeAppend and decodeAttention instead.
  append: process.env['FUSEFORMER_DECODE_APPEND'] !== '0',
  // decodeAttentionThroughput: 'auto' unless FUSEFORMER_DECODE_THROUGHPUT is 1 or 0.
  throughput: envSwitch(process.env['FUSEFORMER_DECODE_THROUGHPUT']),
  // decodeAttentionMma: on unless FUSEFORMER_DECODE_MMA=0.
  mma: envSwitch(process.env['FUSEFORMER_DECODE_MMA']),
  // The tensor-core variant's shape: FUSEFORMER_DECODE_MMA_SHAPE (parseMmaShape; for sweeps), else the default.
  mmaShape: parseMmaShape(process.env['FUSEFORMER_DECODE_MMA_SHAPE']),
};

/** Launches of the tensor-core variant, and of kernels with the O projection, so far (the GPU tests check that what they forced was taken). */
export const decodeAttentionLaunches = { mma: 0, projected: 0 };

/**
 * Whether the pipelined variant's launches at 16 bit run on tensor cores (DecodeAttentionSpec.mma): unless
 * FUSEFORMER_DECODE_MMA=0, every such launch. Measured on the H200 (session 23, Llama 1.2B bf16, against the
 * CUDA-core pipelined kernel, same call): a paged serving step of 100 rows × 384 positions 2.375 → 2.061 ms
 * (its attention 46.8 → 33.3 µs a layer); serving at 64 / 256 clients 19,225 → 19,783 and 35,537 → 36,848
 * tokens/s (decode steps at 43–46% → 49–50% of the roofline); decode Llama b1 0.827 → 0.812 ms/token, b32
 * 1.051 → 1.022, GPT-2 b1 0.223 → 0.219, b32 0.346 → 0.341 (`bench/results/gpu-pending-s23/call4/`).
 */
export function decodeAttentionMma(dtype: FloatDType): boolean {
  return dtype !== 'f32' && decodeAttentionOptions.mma !== false;
}

export function decodeAttentionKey(s: DecodeAttentionSpec): string {
  return `decode_attention.${s.dtype}.d${s.headDim}.g${s.group}.gh${s.headsPerBlock}.v${s.vec}${s.split ? '.split' : ''}${s.page ? `.paged${s.page}` : ''}${s.throughput ? '.throughput' : ''}${s.pipelined ? '.pipelined' : ''}${s.append ? `.append${s.append.rope ? '_rope' : ''}${s.append.bias ? '_bias' : ''}${s.append.headNorm ? '_qknorm' : ''}` : ''}${s.mma ? `.mma${mmaShapeSuffix(s.mmaShape)}` : ''}${s.project ? `.proj${s.project.hidden}${s.project.int4 ? `q4g${s.project.int4.groupSize}` : ''}${(s.project.chunks ?? 1) > 1 ? `c${s.project.chunks}` : ''}` : ''}`;
}

export const DECODE_THREADS = 128;
/** Keys a block scores at once (a key per thread). */
export const DECODE_TILE = DECODE_THREADS;
/** GH·VEC accumulators a thread holds; 8 heads × 8 columns = 64 registers. */
export const MAX_HEADS_PER_BLOCK = 8;
export const MAX_HEAD_DIM = 256;

/** The largest divisor of `group` that is at most MAX_HEADS_PER_BLOCK. */
export function headsPerBlock(group: number): number {
  for (let gh = Math.min(group, MAX_HEADS_PER_BLOCK); gh > 1; gh--) if (group % gh === 0) return gh;
  return 1;
}

/**
 * Fewest keys a split takes (the kernel's min_chunk): shorter sequences use fewer splits, so a split's
 * work stays above its fixed cost (the partials and the combine).
 */
export const MIN_SPLIT_KEYS = 64;

/** Keys each split of a sequence of n keys covers (the kernel computes the same on the device). */
export function splitChunk(n: number, splits: number): number {
  return Math.max(MIN_SPLIT_KEYS, Math.ceil(n / splits));
}


// The tensor-core variant (spec.mma): each warp walks its own tiles of WT keys — tiles w, w + WARPS, ... of
// the block's range — through its own WST stages of the block's staged memory ([K0 | V0 | K1 | V1 ...], WT
// rows of 128 bytes each, the pipelined variant's swizzle; MmaShape), with no block barrier until the end. Scores
// S = Q·Kᵀ by mma.sync m16n8k16: A = the block's GH query heads as rows 0..GH−1 of a 16-row tile (the
// others zero), B = the key rows by ldmatrix; the online softmax per row in the accumulators' layout (a
// quad of lanes holds a row's 8 scores of each 32-key tile); P·V with P packed to T as the A operand
// straight from the score accumulators and V by ldmatrix.trans. Each warp keeps its own (m, l, acc); the
// block combines its warps' partials like splits. Rows 8..15 of every tile are padding (GH ≤ 8): the
// tensor cores have cycles to spare; the loads are the work.
// Defines load_warp_tile(stage, t0, part) (part as load_stage's) and issues the warp's first copies of
// keys written before the previous op (part 1) ahead of the grid-dependency wait.
const MMA_WARP_TILES_CODE = String.raw`
  constexpr int WSTAGE = WT * RC * 16;  // bytes of a warp tile's K (or V)
  unsigned char* const warp_tiles = stages + warp * WST * 2 * WSTAGE;
  const int warp_t0 = j_begin + warp * WT;
  const auto load_warp_tile = [&](int stage, int t0, int part) {
    unsigned char* const k_tile = warp_tiles + stage * 2 * WSTAGE;
    copy_rows(k_tile, k_tile + WSTAGE, WT, t0, part, lane, 32);
  };
  const bool warp_prefetched = fresh_keys > 0 && warp_t0 < j_end && warp_t0 < stable_end;
  if (warp_prefetched) load_warp_tile(0, warp_t0, 1);
`;

// The tensor-core variant's ring, issued: two stages (the measured default, in the form measured), or three.
const TWO_STAGE_ISSUE = String.raw`    if (warp_t0 < j_end) load_warp_tile(0, warp_t0, warp_prefetched ? 2 : 0);
    cp_async_commit();
    for (int tile = warp, it = 0; tile < tiles; tile += WARPS, it++) {
      const int t0 = j_begin + tile * WT, stage = it & 1;
      if (tile + WARPS < tiles) load_warp_tile(stage ^ 1, t0 + WARPS * WT, 0);
      cp_async_commit();
      cp_async_wait<1>();`;
const DEEP_ISSUE = String.raw`    #pragma unroll
    for (int p = 0; p < WST - 1; p++) {
      const int tile = warp + p * WARPS;
      if (tile < tiles) load_warp_tile(p, j_begin + tile * WT, p == 0 && warp_prefetched ? 2 : 0);
      cp_async_commit();
    }
    for (int tile = warp, it = 0; tile < tiles; tile += WARPS, it++) {
      const int t0 = j_begin + tile * WT, stage = it % WST, ahead = tile + (WST - 1) * WARPS;
      if (ahead < tiles) load_warp_tile((it + WST - 1) % WST, j_begin + ahead * WT, 0);
      cp_async_commit();
      cp_async_wait<WST - 1>();`;

// The tensor-core variant's key loop (see MMA_WARP_TILES_CODE) for a ring of `stages`, ending with each warp's (m, l, acc) of its
// heads in warp_stat / warp_acc. fr = lane / 4 is the accumulator row (query head h0 + fr), fc = lane % 4.
const mmaLoopCode = (stages: number): string => String.raw`
    const int fr = lane >> 2, fc = lane & 3;
    const bool head_row = fr < GH;
    const int qr = head_row ? fr : 0;
    u32 qa[D / 16][4];
    #pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      qa[ks][0] = head_row ? pack2<T>(qs[qr][16 * ks + 2 * fc], qs[qr][16 * ks + 2 * fc + 1]) : 0u;
      qa[ks][1] = 0u;
      qa[ks][2] = head_row ? pack2<T>(qs[qr][16 * ks + 8 + 2 * fc], qs[qr][16 * ks + 9 + 2 * fc]) : 0u;
      qa[ks][3] = 0u;
    }
    float o[D / 8][4];
    #pragma unroll
    for (int nt = 0; nt < D / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
    float m_row = __int_as_float(0xff800000), l_row = 0.f;
    const int tiles = (j_end - j_begin + WT - 1) / WT;
    // The warp's first WST − 1 tiles, then each iteration issues the one WST − 1 ahead.
${stages === 2 ? TWO_STAGE_ISSUE : DEEP_ISSUE}
      __syncwarp();
      const u32 k_tile = smem_u32(warp_tiles + stage * 2 * WSTAGE), v_tile = k_tile + WSTAGE;
      // S = Q·Kᵀ: n-tiles of 8 keys, ldmatrix.x4 giving two of them per 16 columns of d.
      float sc[WT / 8][4];
      #pragma unroll
      for (int nt = 0; nt < WT / 8; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
      #pragma unroll
      for (int ks = 0; ks < D / 16; ks++) {
        #pragma unroll
        for (int np = 0; np < WT / 16; np++) {
          const int r = 16 * np + (lane & 7) + 8 * (lane >> 4), ch = 2 * ks + ((lane >> 3) & 1);
          u32 bk[4];
          ldsm_x4(k_tile + swizzled_offset<RC>(r, ch), bk);
          mma_16816<T>(sc[2 * np], qa[ks], bk[0], bk[1]);
          mma_16816<T>(sc[2 * np + 1], qa[ks], bk[2], bk[3]);
        }
      }
      // Online softmax of row fr (base 2): keys past j_end (zero-filled rows) masked.
      float mx = __int_as_float(0xff800000);
      #pragma unroll
      for (int nt = 0; nt < WT / 8; nt++) {
        #pragma unroll
        for (int e = 0; e < 2; e++) {
          const float sv = t0 + 8 * nt + 2 * fc + e < j_end ? sc[nt][e] * scale_log2 : __int_as_float(0xff800000);
          sc[nt][e] = sv;
          mx = fmaxf(mx, sv);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_row, mx), alpha = exp2f(m_row - m_new);  // every tile has a key: m_new finite
      m_row = m_new;
      l_row *= alpha;
      #pragma unroll
      for (int nt = 0; nt < D / 8; nt++) {
        o[nt][0] *= alpha;
        o[nt][1] *= alpha;
      }
      // P (rounded to T) as the A operand of P·V: score n-tiles 2kk, 2kk + 1 are k-step kk's columns.
      u32 pa[WT / 16][4];
      #pragma unroll
      for (int kk = 0; kk < WT / 16; kk++) {
        const float p0 = exp2f(sc[2 * kk][0] - m_new), p1 = exp2f(sc[2 * kk][1] - m_new);
        const float p2 = exp2f(sc[2 * kk + 1][0] - m_new), p3 = exp2f(sc[2 * kk + 1][1] - m_new);
        l_row += (p0 + p1) + (p2 + p3);
        pa[kk][0] = pack2<T>(p0, p1);
        pa[kk][1] = 0u;
        pa[kk][2] = pack2<T>(p2, p3);
        pa[kk][3] = 0u;
      }
      #pragma unroll
      for (int kk = 0; kk < WT / 16; kk++) {
        #pragma unroll
        for (int np = 0; np < D / 16; np++) {
          const int r = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1), ch = 2 * np + (lane >> 4);
          u32 bv[4];
          ldsm_x4_trans(v_tile + swizzled_offset<RC>(r, ch), bv);
          mma_16816<T>(o[2 * np], pa[kk], bv[0], bv[1]);
          mma_16816<T>(o[2 * np + 1], pa[kk], bv[2], bv[3]);
        }
      }
      __syncwarp();  // every lane is done with this stage before the next iteration refills it
    }
    cp_async_wait<0>();
    l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);
    l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);
    __syncthreads();  // every warp is done with its stages: warp_stat / warp_acc overwrite them
    if (head_row) {
      if (fc == 0) {
        warp_stat[(2 * warp) * GH + fr] = m_row;
        warp_stat[(2 * warp + 1) * GH + fr] = l_row;
      }
      #pragma unroll
      for (int nt = 0; nt < D / 8; nt++) {
        warp_acc[(warp * GH + fr) * D + 8 * nt + 2 * fc] = o[nt][0];
        warp_acc[(warp * GH + fr) * D + 8 * nt + 2 * fc + 1] = o[nt][1];
      }
    }
    __syncthreads();
`;

/** Columns of the O weight in one 16-byte vector: 16 bytes of the dtype, or 32 INT4 nibbles. */
function projectionVectorColumns(dtype: FloatDType, int4: boolean): number {
  return int4 ? 32 : 16 / byteSize(dtype);
}

/**
 * Lanes a row of the O weight takes in the projection (PROJECT): the block's GH·D columns in 16-byte vectors,
 * a power of two dividing 32 (a warp holds 32 / LPR whole rows); 1 where the spec has no projection.
 */
export function projectLanes(spec: Pick<DecodeAttentionSpec, 'dtype' | 'headDim' | 'headsPerBlock' | 'project'>): number {
  return spec.project ? (spec.headsPerBlock * spec.headDim) / projectionVectorColumns(spec.dtype, spec.project.int4 !== undefined) : 1;
}

/**
 * The O weight's bytes a block may read in its projection for the backend to offer it (projectsAttention):
 * GPT-2's 768 rows × one head's 64 columns are 98 KB, from L2 after the prefetch; Llama 1B's four heads a block
 * would read 1 MB each over only 8 blocks, slower than the O GEMV over all SMs.
 */
export const PROJECTION_MAX_BYTES = 128 * 1024;

/**
 * FUSEFORMER_FUSED_O_CHUNKS: the most output chunks (a power of two, 1 = the one-chunk form, 0 taken as 1); unset,
 * DEFAULT_PROJECTION_CHUNKS. A sweep knob until the chunked projection is measured.
 */
export function projectChunksFromEnv(value: string | undefined): number {
  if (value === undefined || value === '') return DEFAULT_PROJECTION_CHUNKS;
  const n = Number(value);
  if (n === 0) return 1;
  if (!Number.isInteger(n) || n < 1 || n > MAX_PROJECTION_CHUNKS || (n & (n - 1)) !== 0) {
    throw new Error(`FUSEFORMER_FUSED_O_CHUNKS must be a power of two from 1 to ${MAX_PROJECTION_CHUNKS} (0: 1), got '${value}'`);
  }
  return n;
}

/**
 * Output chunks for an unsplit projected launch of `blocks` blocks (head groups × sequences): the most, a power
 * of two up to decodeAttentionOptions.projectChunks dividing H, that keeps the grid within two blocks an SM (one
 * wave: the pipelined variant holds three); 1 when split.
 */
export function projectionChunks(blocks: number, hidden: number, multiProcessors: number, split: boolean): number {
  if (split) return 1;
  let chunks = 1;
  while (chunks < decodeAttentionOptions.projectChunks && hidden % (2 * chunks) === 0 && blocks * 2 * chunks <= 2 * multiProcessors) chunks *= 2;
  return chunks;
}

/**
 * Whether the projection takes these heads: whole 16-byte vectors, LPR dividing 32, D a multiple of a vector
 * (`int4`: of 32 columns, each inside one group of a multiple of 32, so a head's columns start a vector).
 */
export function projectionFits(dtype: FloatDType, headDim: number, headsPerBlockCount: number, int4 = false): boolean {
  const columns = projectionVectorColumns(dtype, int4), lanes = (headsPerBlockCount * headDim) / columns;
  return headDim % columns === 0 && Number.isInteger(lanes) && lanes >= 1 && lanes <= 32 && 32 % lanes === 0;
}

// The projection (PROJECT): lane lr of a row group takes vector lr of the block's columns of a row of w_o
// (8 lanes × 16 bytes = one 128-byte row segment at GPT-2's d 64: a warp reads 4 whole segments), multiplies
// it by the same columns of the outputs, the row's LPR lanes add by shuffles and one adds the sum to
// proj_row[n] (an f32 atomic: the blocks of the other heads add theirs). Rows n = r0, r0 + RPI, …; every lane
// runs every round (the shuffles take the whole warp).
const PROJECT_CODE = String.raw`constexpr int RPI = PROJECT ? THREADS / LPR : 1;
// A block projects PHC rows: its chunk (block z of PCHUNKS) of the PH output rows, from row N0.
constexpr int PHC = PH / PCHUNKS;
#define N0 (PCHUNKS > 1 ? (int)blockIdx.z * PHC : 0)
// PINT4: w_o holds packed words (u32 [PH, hq·D/8], nibble k % 8 of word k / 8), w_scales f16 and w_zeros u8
// [PH, hq·D/PG]; a lane's PCOLS = 32 columns are one 16-byte vector inside one group. Otherwise w_o is T [PH, hq·D].
constexpr int PCOLS = PINT4 ? 32 : PV;
// Lane lr's 16-byte vector of row n (columns h0·D + lr·PCOLS on), and its group (PINT4).
__device__ __forceinline__ const void* projection_vector(const void* w_o, int n, int hq, int h0, int lr) {
  if constexpr (PINT4) return static_cast<const unsigned*>(w_o) + ((size_t)n * hq * D + h0 * D + lr * PCOLS) / 8;
  else return static_cast<const T*>(w_o) + (size_t)n * hq * D + h0 * D + lr * PCOLS;
}
__device__ __forceinline__ size_t projection_group(int n, int hq, int h0, int lr) {
  return ((size_t)n * hq * D + h0 * D + lr * PCOLS) / PG;
}
__device__ __forceinline__ void prefetch_projection(const void* w_o, const __half* w_scales, const unsigned char* w_zeros, int hq, int h0) {
  const int lr = threadIdx.x % LPR, r0 = threadIdx.x / LPR;
  for (int n = N0 + r0; n < N0 + PHC; n += RPI) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(projection_vector(w_o, n, hq, h0, lr)));
    if (PINT4 && lr == 0) {
      asm volatile("prefetch.global.L2 [%0];" :: "l"(w_scales + projection_group(n, hq, h0, 0)));
      asm volatile("prefetch.global.L2 [%0];" :: "l"(w_zeros + projection_group(n, hq, h0, 0)));
    }
  }
}
// A lane's rounds go in batches of PROJECT_BATCH loads issued before any is used: one L2 latency a batch, not
// a round (GPT-2: 48 rounds, 4 batches).
constexpr int PROJECT_ROUNDS = (PHC + RPI - 1) / RPI, PROJECT_BATCH = PROJECT_ROUNDS < 12 ? PROJECT_ROUNDS : 12;
// PINT4: a lane's 32 nibbles of a row dequantized as scale·(q − zero), each q − zero formed exactly in one FADD
// (the nibble OR-ed into the mantissa of 2^23, minus 2^23 + zero), the dot with ov times the group's scale.
__device__ __forceinline__ void project_outputs_int4(const float* proj_s, const void* w_o, const __half* w_scales, const unsigned char* w_zeros, float* proj_row, int hq, int h0) {
  const int lr = threadIdx.x % LPR, r0 = threadIdx.x / LPR;
  float ov[PCOLS];
  #pragma unroll
  for (int e = 0; e < PCOLS; e++) ov[e] = proj_s[lr * PCOLS + e];
  for (int first = 0; first < PROJECT_ROUNDS; first += PROJECT_BATCH) {
    uint4 w[PROJECT_BATCH];
    float scale[PROJECT_BATCH], zero[PROJECT_BATCH];
    #pragma unroll
    for (int k = 0; k < PROJECT_BATCH; k++) {
      const int n = N0 + r0 + (first + k) * RPI;
      const bool inside = first + k < PROJECT_ROUNDS && n < N0 + PHC;
      w[k] = inside ? *static_cast<const uint4*>(projection_vector(w_o, n, hq, h0, lr)) : make_uint4(0u, 0u, 0u, 0u);
      const size_t group = projection_group(inside ? n : N0, hq, h0, lr);
      scale[k] = inside ? __half2float(w_scales[group]) : 0.f;
      zero[k] = inside ? (float)w_zeros[group] : 0.f;
    }
    #pragma unroll
    for (int k = 0; k < PROJECT_BATCH; k++) {
      const int n = N0 + r0 + (first + k) * RPI;
      const unsigned words[4] = {w[k].x, w[k].y, w[k].z, w[k].w};
      const float bias = 8388608.f + zero[k];
      float dot = 0.f;
      #pragma unroll
      for (int i = 0; i < 4; i++) {
        #pragma unroll
        for (int j = 0; j < 8; j++) dot = fmaf(ov[8 * i + j], __uint_as_float(0x4B000000u | ((words[i] >> (4 * j)) & 0xfu)) - bias, dot);
      }
      float sum = scale[k] * dot;
      #pragma unroll
      for (int o = LPR / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lr == 0 && first + k < PROJECT_ROUNDS && n < N0 + PHC) atomicAdd(proj_row + n, sum);
    }
  }
}
__device__ __forceinline__ void project_outputs(const float* proj_s, const void* w_o, const __half* w_scales, const unsigned char* w_zeros, float* proj_row, int hq, int h0) {
  if constexpr (PINT4) {
    project_outputs_int4(proj_s, w_o, w_scales, w_zeros, proj_row, hq, h0);
  } else {
    const int lr = threadIdx.x % LPR, r0 = threadIdx.x / LPR;
    float ov[PV];
    #pragma unroll
    for (int e = 0; e < PV; e++) ov[e] = proj_s[lr * PV + e];
    for (int first = 0; first < PROJECT_ROUNDS; first += PROJECT_BATCH) {
      Vec<T, PV> w[PROJECT_BATCH];
      #pragma unroll
      for (int k = 0; k < PROJECT_BATCH; k++) {
        const int n = N0 + r0 + (first + k) * RPI;
        if (first + k < PROJECT_ROUNDS && n < N0 + PHC) w[k] = load_vec<T, PV>(static_cast<const T*>(projection_vector(w_o, n, hq, h0, lr)));
        else {
          #pragma unroll
          for (int e = 0; e < PV; e++) w[k].v[e] = from_float<T>(0.f);
        }
      }
      #pragma unroll
      for (int k = 0; k < PROJECT_BATCH; k++) {
        const int n = N0 + r0 + (first + k) * RPI;
        float sum = 0.f;
        #pragma unroll
        for (int e = 0; e < PV; e++) sum = fmaf(ov[e], to_float(w[k].v[e]), sum);
        #pragma unroll
        for (int o = LPR / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lr == 0 && first + k < PROJECT_ROUNDS && n < N0 + PHC) atomicAdd(proj_row + n, sum);
      }
    }
  }
}`;

export function decodeAttentionSource(spec: DecodeAttentionSpec): KernelSource {
  const name = kernelIdentifier(decodeAttentionKey(spec));
  const vecs = spec.headDim / spec.vec;
  const chunks = spec.project?.chunks ?? 1;
  if (chunks > 1 && (spec.split || spec.project!.hidden % chunks !== 0)) throw new RangeError(`decodeAttentionSource: ${chunks} projection chunks need an unsplit launch and H (${spec.project!.hidden}) a multiple of them`);
  const keyLanes = Math.max(1, Math.floor(DECODE_THREADS / vecs));
  // Value rows a key lane reads per tile, and how many of them it loads before using any (see "values").
  const perLane = Math.ceil(DECODE_TILE / keyLanes), vBatch = Math.min(perLane, spec.throughput ? THROUGHPUT_V_BATCH : 8);
  // (The split pipelined variant takes 172 registers: 2 blocks an SM, where its stages would allow 3;
  // __launch_bounds__(THREADS, 3) fits it in 168 with 68 bytes spilled — not yet timed.)
  const size = byteSize(spec.dtype), rowBytes = spec.headDim * size;
  const mmaBlocks = spec.mma ? (spec.mmaShape ?? DEFAULT_MMA_SHAPE).blocksPerSm : 0;
  const bounds = spec.throughput ? `__launch_bounds__(THREADS, ${THROUGHPUT_MIN_BLOCKS})` : mmaBlocks > 0 ? `__launch_bounds__(THREADS, ${mmaBlocks})` : '__launch_bounds__(THREADS)';
  if (spec.append && !spec.pipelined) throw new RangeError('decodeAttentionSource: the fused append takes the pipelined variant');
  if (spec.mma && (!spec.pipelined || spec.dtype === 'f32')) throw new RangeError(`decodeAttentionSource: the tensor-core variant takes the pipelined variant's 16-bit rows, got ${spec.dtype}${spec.pipelined ? '' : ' not pipelined'}`);
  if (spec.mma && mmaSharedBytes(spec.mmaShape ?? DEFAULT_MMA_SHAPE, rowBytes) < 4 * (DECODE_THREADS / 32) * spec.headsPerBlock * (2 + spec.headDim)) throw new RangeError('decodeAttentionSource: the tensor-core variant\'s stages do not hold its warps\' partials');
  if (spec.pipelined && !pipelinedRows(spec.headDim, size, spec.vec) && !(spec.mma && mmaRows(spec.headDim, size, spec.vec))) {
    throw new RangeError(`decodeAttentionSource: the pipelined variant takes 128-byte rows of 16-byte vectors (the tensor-core one 256-byte rows too), got d ${spec.headDim} ${spec.dtype} vec ${spec.vec}${spec.mma ? ' on tensor cores' : ''}`);
  }
  // MMA_LIB for the pipelined variant's cp.async and shared addresses (its code is compiled in every variant, if unused).
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${typedefLine('T', spec.dtype)}
${constants({
    D: spec.headDim, GROUP: spec.group, GH: spec.headsPerBlock, HEAD_BLOCKS: spec.group / spec.headsPerBlock, VEC: spec.vec, VECS: vecs,
    THREADS: DECODE_THREADS, TILE: DECODE_TILE, WARPS: DECODE_THREADS / 32, KEY_LANES: keyLanes, SPLIT: spec.split,
    PER_LANE: perLane, V_BATCH: vBatch, EARLY_V: !spec.throughput && !spec.pipelined && perLane <= vBatch, PIPELINED: spec.pipelined ?? false,
    PAGED: (spec.page ?? 0) > 0, PAGE: Math.max(1, spec.page ?? 0),
    APPEND: spec.append !== undefined, ROPE: spec.append?.rope ?? false, BIAS: spec.append?.bias ?? false, HALF: spec.headDim / 2,
    HEAD_NORM: spec.append?.headNorm ?? false, RC: spec.pipelined ? rowBytes / 16 : 8,
    MMA: spec.mma ?? false, WT: (spec.mmaShape ?? DEFAULT_MMA_SHAPE).tile, WST: (spec.mmaShape ?? DEFAULT_MMA_SHAPE).stages,
    PROJECT: spec.project !== undefined, PH: spec.project?.hidden ?? 1, PCHUNKS: chunks, PV: 16 / byteSize(spec.dtype), LPR: projectLanes(spec),
    PINT4: spec.project?.int4 !== undefined, PG: spec.project?.int4?.groupSize ?? 1,
  })}
${PROJECT_CODE}
${ROPE_PAIR_CODE}
${HEAD_RSTD_CODE}
// q, out [B, Hq, D]; caches [B, Hkv, max_len, D] (paged: [blocks, Hkv, PAGE, D] through block_table
// [B, table_stride]); partials f32 [B, Hq, splits, D + 2]; counters u32 [B, Hkv·HEAD_BLOCKS] (zero;
// left zero). Grid (Hkv·HEAD_BLOCKS, B, splits), block THREADS. APPEND: q unused; qkv [B, (hq + 2·hkv)·D],
// qkv_bias [(hq + 2·hkv)·D] (BIAS), inv_freq f32 [D/2] (ROPE), q_norm / k_norm [D] (HEAD_NORM).
extern "C" __global__ void ${bounds} ${name}(
    const T* __restrict__ q, const T* __restrict__ k_cache, const T* __restrict__ v_cache, const int* __restrict__ positions,
    T* __restrict__ out, float* __restrict__ partials, float scale_log2, int hq, int max_len, int min_chunk,
    const int* __restrict__ block_table, int table_stride, unsigned int* __restrict__ counters, int fresh_keys,
    const T* __restrict__ qkv, const T* __restrict__ qkv_bias, const float* __restrict__ inv_freq, float rope_scale,
    const void* __restrict__ w_o, float* __restrict__ proj_out, float* __restrict__ proj_zero, int zero_count,
    const T* __restrict__ q_norm, const T* __restrict__ k_norm, float norm_eps, const __half* __restrict__ w_scales, const unsigned char* __restrict__ w_zeros) {
  // May be launched programmatically (kernel.ts gridDependencyWait): nothing the previous kernel writes
  // is read before GRID_DEPENDENCY_WAIT below. PIPELINED with fresh_keys > 0: the keys and values at
  // positions < n − fresh_keys were written before that kernel (earlier steps; see the header), so the
  // first tile's copies of them are issued before the wait.
  // The block's query heads, pre-scaled by scale·log2 e (MMA: unscaled, each exactly a T: the A operand).
  __shared__ float qs[GH][D];
  [[maybe_unused]] const float Q_SCALE = MMA ? 1.f : scale_log2;
  __shared__ float ps[MMA ? 1 : GH][TILE];
  __shared__ float red[GH][WARPS];
  // The key lanes' partial sums at the end (PIPELINED: in the stage buffers, done with by then).
  __shared__ float accs_own[PIPELINED ? 1 : KEY_LANES * GH * D];
  [[maybe_unused]] extern __shared__ __align__(128) unsigned char stages[];  // PIPELINED: [K0 | K1 | V0 | V1], TILE rows of 128 bytes each
  float* accs = PIPELINED ? reinterpret_cast<float*>(stages) : accs_own;
  __shared__ bool last_block;
  // PROJECT: the block's outputs as stored (GH heads × D), the projection's input.
  [[maybe_unused]] __shared__ __align__(16) float proj_s[PROJECT ? GH * D : 1];
  // APPEND: this step's key and value of kv head g as the cache will hold them ([key | value], D each).
  [[maybe_unused]] __shared__ __align__(16) T fresh_kv[APPEND ? 2 * D : 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = blockIdx.x / HEAD_BLOCKS, h0 = g * GROUP + (blockIdx.x % HEAD_BLOCKS) * GH;
  const int b = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int hkv = hq / GROUP;
  const int n = min(max(positions[b] + 1, 0), max_len);
  const int chunk = SPLIT ? max(min_chunk, (n + splits - 1) / splits) : n;  // splitChunk
  const int j_begin = SPLIT ? split * chunk : 0;
  const int j_end = SPLIT ? min(n, j_begin + chunk) : n;
  // APPEND: the position this step's key goes to (−1 if none: an idle row, or past the cache), and
  // whether this block's keys include it.
  [[maybe_unused]] const int fresh_row = APPEND && positions[b] >= 0 && positions[b] < max_len ? positions[b] : -1;
  [[maybe_unused]] const bool holds_fresh = APPEND && fresh_row >= j_begin && fresh_row < j_end;
  // Element offset of key j's row (kv head g of sequence b).
  [[maybe_unused]] const int* __restrict__ table = PAGED ? block_table + (size_t)b * table_stride : nullptr;
  const auto key_row = [&](int j) -> size_t {
    if constexpr (PAGED) return (((size_t)table[j / PAGE] * hkv + g) * PAGE + j % PAGE) * D;
    else return (((size_t)b * hkv + g) * max_len + j) * D;
  };
  // PIPELINED: tile rows [t0, t0 + TILE) of K and V into stage s by cp.async (rows past j_end zero-filled),
  // RC chunks a row, chunk c of row r at chunk c ^ (r & 7) (mma-lib.ts's swizzle, within each 128 bytes: a
  // phase of 8 threads reading one chunk column of 8 rows, or 8 chunks of a row, hits 8 distinct bank groups).
  // part: 0 every row; 1 the rows below stable_end (before the wait); 2 the others (after it) — together, each row once.
  constexpr int STAGE = TILE * RC * 16;
  const int stable_end = n - fresh_keys;
  // Rows [t0, t0 + rows) of K and V into the tiles at k_tile / v_tile, workers threads (this one is
  // worker) a 16-byte chunk each per step (rows and workers are constants at every call, so it unrolls).
  [[maybe_unused]] const auto copy_rows = [&](unsigned char* k_tile, unsigned char* v_tile, int rows, int t0, int part, int worker, int workers) {
    const u32 k_dst = smem_u32(k_tile), v_dst = smem_u32(v_tile);
    #pragma unroll
    for (int step = 0; step < rows * RC / workers; step++) {
      const int idx = step * workers + worker, r = idx / RC, c = idx % RC, j = t0 + r;
      if (part == 1 ? j >= stable_end || j >= j_end : part == 2 && j < stable_end && j < j_end) continue;
      const bool inside = j < j_end;
      const size_t at = key_row(inside ? j : j_begin) + c * VEC;
      const u32 off = swizzled_offset<RC>(r, c);
      if (APPEND && j == fresh_row) {
        // This step's key and value: from fresh_kv (filled before the barrier that precedes every call after the wait).
        *reinterpret_cast<uint4*>(k_tile + off) = *reinterpret_cast<const uint4*>(&fresh_kv[c * VEC]);
        *reinterpret_cast<uint4*>(v_tile + off) = *reinterpret_cast<const uint4*>(&fresh_kv[D + c * VEC]);
        continue;
      }
      cp_async_16(k_dst + off, k_cache + at, inside);
      cp_async_16(v_dst + off, v_cache + at, inside);
    }
  };
  [[maybe_unused]] const auto load_stage = [&](int stage, int t0, int part) {
    copy_rows(stages + stage * STAGE, stages + (2 + stage) * STAGE, TILE, t0, part, tid, THREADS);
  };
  [[maybe_unused]] const bool prefetched = PIPELINED && fresh_keys > 0 && j_begin < j_end && j_begin < stable_end;
${spec.mma ? MMA_WARP_TILES_CODE : ''}
  if constexpr (PIPELINED && !MMA) {
    if (prefetched) load_stage(0, j_begin, 1);
  }
  // PROJECT: the rows of w_o this block may read, asked of L2 now (weights: no kernel of the step writes them).
  if constexpr (PROJECT) prefetch_projection(w_o, w_scales, w_zeros, hq, h0);
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  if constexpr (PROJECT) {
    // A later accumulator (its readers ended before the wait returned), by every block, before any returns.
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), blocks = gridDim.x * gridDim.y * gridDim.z;
    for (int i = block * THREADS + tid; i < zero_count; i += blocks * THREADS) proj_zero[i] = 0.f;
  }
  if (SPLIT && j_begin >= j_end) {
    // Not counted: the last block combines only the splits below n. No keys at all (an idle row): split 0 writes zeros.
    if (n == 0 && split == 0) for (int i = tid; i < GH * D; i += THREADS) out[((size_t)b * hq + h0 + i / D) * D + i % D] = from_float<T>(0.f);
    return;
  }

  if constexpr (APPEND) {
    // qkvRopeAppend's math for this block's query heads and, if its keys include this step's, the new key
    // and value of kv head g: item (head hh, pair e) — hh < GH query head h0 + hh, GH the key, GH + 1 the
    // value. Each value is rounded to T as the unfused ops store it, so the result is theirs.
    const T* row = qkv + (size_t)b * (hq + 2 * hkv) * D;
    const int p = positions[b];
    // One block per (sequence, kv head) writes the cache (with projection chunks: chunk 0's).
    const bool writer = holds_fresh && blockIdx.x % HEAD_BLOCKS == 0 && (PCHUNKS == 1 || blockIdx.z == 0);
    const int items = (holds_fresh ? GH + 2 : GH) * HALF;
    const auto column = [&](int hh, int e) { return (hh < GH ? h0 + hh : hh == GH ? hq + g : hq + hkv + g) * D + e; };
    const auto biased = [&](int col, float& a, float& z) {
      a = to_float(row[col]);
      z = to_float(row[col + HALF]);
      if constexpr (BIAS) {
        a += to_float(qkv_bias[col]);
        z += to_float(qkv_bias[col + HALF]);
      }
    };
    // HEAD_NORM: the biased pairs and their squares, [GH + 2][D] and [GH + 2][HALF], before any head's sum.
    [[maybe_unused]] __shared__ __align__(16) float norm_x[HEAD_NORM ? (GH + 2) * D : 1];
    [[maybe_unused]] __shared__ __align__(16) float norm_sq[HEAD_NORM ? (GH + 2) * HALF : 1];
    if constexpr (HEAD_NORM) {
      for (int i = tid; i < items; i += THREADS) {
        const int hh = i / HALF, e = i % HALF;
        float a, z;
        biased(column(hh, e), a, z);
        norm_x[hh * D + e] = a;
        norm_x[hh * D + e + HALF] = z;
        norm_sq[hh * HALF + e] = a * a + z * z;
      }
      __syncthreads();
    }
    for (int i = tid; i < items; i += THREADS) {
      const int hh = i / HALF, e = i % HALF;
      float a, z;
      if constexpr (HEAD_NORM) {
        a = norm_x[hh * D + e];
        z = norm_x[hh * D + e + HALF];
        if (hh <= GH) {
          const float rstd = head_rstd<HALF>(norm_sq + hh * HALF, D, norm_eps);
          const T* gamma = hh < GH ? q_norm : k_norm;
          a *= rstd * to_float(gamma[e]);
          z *= rstd * to_float(gamma[e + HALF]);
        }
      } else {
        biased(column(hh, e), a, z);
      }
      if (ROPE && hh <= GH) rope_pair(a, z, p, inv_freq[e], rope_scale);
      const T ta = from_float<T>(a), tz = from_float<T>(z);
      if (hh < GH) {
        qs[hh][e] = to_float(ta) * Q_SCALE;
        qs[hh][e + HALF] = to_float(tz) * Q_SCALE;
      } else {
        const int kv = hh - GH;
        fresh_kv[kv * D + e] = ta;
        fresh_kv[kv * D + e + HALF] = tz;
        if (writer) {
          T* dst = const_cast<T*>(kv == 0 ? k_cache : v_cache) + key_row(fresh_row);
          dst[e] = ta;
          dst[e + HALF] = tz;
        }
      }
    }
  } else {
    for (int i = tid; i < GH * D; i += THREADS) qs[i / D][i % D] = to_float(q[((size_t)b * hq + h0 + i / D) * D + i % D]) * Q_SCALE;
  }
  float m[GH], l[GH], acc[GH][VEC];
  #pragma unroll
  for (int h = 0; h < GH; h++) {
    m[h] = __int_as_float(0xff800000);
    l[h] = 0.f;
    #pragma unroll
    for (int e = 0; e < VEC; e++) acc[h][e] = 0.f;
  }
  __syncthreads();
  [[maybe_unused]] const int key_lane = tid / VECS, cv = tid % VECS;
  // MMA's per-warp partials for the combine below, in the stages (done with by then).
  [[maybe_unused]] float* warp_stat = reinterpret_cast<float*>(stages);  // [WARPS][m | l][GH]
  [[maybe_unused]] float* warp_acc = warp_stat + WARPS * 2 * GH;         // [WARPS][GH][D]
  if constexpr (MMA) {
${spec.mma ? mmaLoopCode((spec.mmaShape ?? DEFAULT_MMA_SHAPE).stages) : ''}
  } else {
    [[maybe_unused]] const auto stage_row = [&](int kv, int stage, int r, int c) -> Vec<T, VEC> {
      return *reinterpret_cast<const Vec<T, VEC>*>(stages + (kv * 2 + stage) * STAGE + swizzled_offset<RC>(r, c));
    };
    if constexpr (PIPELINED) {
      if (j_begin < j_end) load_stage(0, j_begin, prefetched ? 2 : 0);
      cp_async_commit();
    }

    for (int t0 = j_begin, it = 0; t0 < j_end; t0 += TILE, it++) {
      const int keys = min(TILE, j_end - t0);
      [[maybe_unused]] const int stage = it & 1;
      if constexpr (PIPELINED) {
        // The next tile into the other stage (every thread was done with it at the last tile's end barrier),
        // then wait for this one.
        if (t0 + TILE < j_end) load_stage(stage ^ 1, t0 + TILE, 0);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
      }
      // Scores of this thread's key for the block's heads.
      float s[GH];
      #pragma unroll
      for (int h = 0; h < GH; h++) s[h] = __int_as_float(0xff800000);
      // EARLY_V (the lane's value rows of the tile fit one batch): their loads are issued now, so they are
      // in flight during the scores and the softmax's barriers instead of after them.
      [[maybe_unused]] Vec<T, VEC> v_early[EARLY_V ? V_BATCH : 1];
      if constexpr (EARLY_V) {
        if (key_lane < KEY_LANES) {
          #pragma unroll
          for (int i = 0; i < V_BATCH; i++) {
            const int j = key_lane + i * KEY_LANES;
            if (j < keys) v_early[i] = load_vec<T, VEC>(v_cache + key_row(t0 + j) + cv * VEC);
          }
        }
      }
      if (tid < keys) {
        #pragma unroll
        for (int h = 0; h < GH; h++) s[h] = 0.f;
        [[maybe_unused]] const T* kr = PIPELINED ? nullptr : k_cache + key_row(t0 + tid);
        #pragma unroll 16
        for (int c = 0; c < VECS; c++) {
          const Vec<T, VEC> kv = PIPELINED ? stage_row(0, stage, tid, c) : load_vec<T, VEC>(kr + c * VEC);
          #pragma unroll
          for (int e = 0; e < VEC; e++) {
            const float kf = to_float(kv.v[e]);
            #pragma unroll
            for (int h = 0; h < GH; h++) s[h] = fmaf(qs[h][c * VEC + e], kf, s[h]);
          }
        }
      }
      // Tile maxima per head.
      #pragma unroll
      for (int h = 0; h < GH; h++) {
        const float x = warp_max(s[h]);
        if (lane == 0) red[h][warp] = x;
      }
      __syncthreads();
      float m_new[GH], alpha[GH];
      #pragma unroll
      for (int h = 0; h < GH; h++) {
        float x = red[h][0];
        #pragma unroll
        for (int w = 1; w < WARPS; w++) x = fmaxf(x, red[h][w]);
        m_new[h] = fmaxf(m[h], x);
        alpha[h] = exp2f(m[h] - m_new[h]);
        const float p = tid < keys ? exp2f(s[h] - m_new[h]) : 0.f;
        ps[h][tid] = p;
        s[h] = p;
      }
      __syncthreads();  // every thread has read red[][] (maxima) and written its ps
      #pragma unroll
      for (int h = 0; h < GH; h++) {
        const float x = warp_sum(s[h]);
        if (lane == 0) red[h][warp] = x;
      }
      __syncthreads();
      #pragma unroll
      for (int h = 0; h < GH; h++) {
        float sum = 0.f;
        #pragma unroll
        for (int w = 0; w < WARPS; w++) sum += red[h][w];
        l[h] = l[h] * alpha[h] + sum;
        m[h] = m_new[h];
        #pragma unroll
        for (int e = 0; e < VEC; e++) acc[h][e] *= alpha[h];
      }
      // Probability-weighted value rows: a lane's rows j = key_lane + i·KEY_LANES in batches of V_BATCH,
      // every load of a batch issued before the first is used (one memory latency per batch, not per row).
      if (key_lane < KEY_LANES) {
        for (int base = key_lane; base < keys; base += V_BATCH * KEY_LANES) {
          Vec<T, VEC> vv[V_BATCH];
          if constexpr (EARLY_V) {
            #pragma unroll
            for (int i = 0; i < V_BATCH; i++) vv[i] = v_early[i];
          } else {
            #pragma unroll
            for (int i = 0; i < V_BATCH; i++) {
              const int j = base + i * KEY_LANES;
              if (j < keys) vv[i] = PIPELINED ? stage_row(1, stage, j, cv) : load_vec<T, VEC>(v_cache + key_row(t0 + j) + cv * VEC);
            }
          }
          #pragma unroll
          for (int i = 0; i < V_BATCH; i++) {
            const int j = base + i * KEY_LANES;
            if (j < keys) {
              #pragma unroll
              for (int h = 0; h < GH; h++) {
                const float p = ps[h][j];
                #pragma unroll
                for (int e = 0; e < VEC; e++) acc[h][e] = fmaf(p, to_float(vv[i].v[e]), acc[h][e]);
              }
            }
          }
        }
      }
      __syncthreads();  // ps and red are rewritten by the next tile (PIPELINED: and this stage refilled)
    }
    if constexpr (PIPELINED) cp_async_wait<0>();  // the last (empty) group, before accs reuses the stages

    if (key_lane < KEY_LANES) {
      #pragma unroll
      for (int h = 0; h < GH; h++) {
        #pragma unroll
        for (int e = 0; e < VEC; e++) accs[(key_lane * GH + h) * D + cv * VEC + e] = acc[h][e];
      }
    }
    __syncthreads();
  }  // MMA
  // The block's result per (head, column): sum = Σ_j 2^(s_j − mh)·v_j over its keys, lh = Σ_j 2^(s_j − mh).
  for (int i = tid; i < GH * D; i += THREADS) {
    const int h = i / D, c = i % D;
    float sum = 0.f, mh, lh;
    if constexpr (MMA) {
      // The warps' partials (an empty warp: m = −∞, l = 0, weighs nothing), as the split combine below.
      mh = __int_as_float(0xff800000);
      lh = 0.f;
      #pragma unroll
      for (int w = 0; w < WARPS; w++) mh = fmaxf(mh, warp_stat[(2 * w) * GH + h]);
      #pragma unroll
      for (int w = 0; w < WARPS; w++) {
        const float mw = warp_stat[(2 * w) * GH + h];
        const float wt = mw == __int_as_float(0xff800000) ? 0.f : exp2f(mw - mh);
        lh = fmaf(warp_stat[(2 * w + 1) * GH + h], wt, lh);
        sum = fmaf(warp_acc[(w * GH + h) * D + c], wt, sum);
      }
    } else {
      #pragma unroll
      for (int kl = 0; kl < KEY_LANES; kl++) sum += accs[(kl * GH + h) * D + c];
      mh = m[h];
      lh = l[h];
    }
    const size_t row = (size_t)b * hq + h0 + h;
    if (SPLIT) {
      float* part = partials + (row * splits + split) * (D + 2);
      part[c] = sum;
      if (c == 0) { part[D] = mh; part[D + 1] = lh; }
    } else {
      const T value = from_float<T>(n > 0 ? sum / lh : 0.f);
      if (PCHUNKS == 1 || blockIdx.z == 0) out[row * D + c] = value;  // projection chunks: chunk 0 writes out
      if constexpr (PROJECT) proj_s[i] = to_float(value);
    }
  }
  if constexpr (PROJECT && !SPLIT) {
    __syncthreads();
    project_outputs(proj_s, w_o, w_scales, w_zeros, proj_out + (size_t)b * PH, hq, h0);
  }
  if (!SPLIT) return;
  // The last block of this (sequence, head block) to finish combines the used splits (release: each
  // block's partials are visible device-wide before it counts; acquire: the last one fences after).
  __threadfence();
  __syncthreads();
  const int used = (n + chunk - 1) / chunk;  // ≥ 1: this block has keys
  unsigned int* counter = counters + (size_t)b * gridDim.x + blockIdx.x;
  if (tid == 0) last_block = atomicAdd(counter, 1u) == (unsigned int)(used - 1);
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  for (int i = tid; i < GH * D; i += THREADS) {
    const int h = i / D, c = i % D;
    const size_t row = (size_t)b * hq + h0 + h;
    const float* base = partials + row * splits * (D + 2);
    float top = __int_as_float(0xff800000);
    for (int s = 0; s < used; s++) top = fmaxf(top, __ldcg(base + s * (D + 2) + D));
    float total = 0.f, value = 0.f;
    for (int s = 0; s < used; s++) {
      const float w = exp2f(__ldcg(base + s * (D + 2) + D) - top);
      total = fmaf(__ldcg(base + s * (D + 2) + D + 1), w, total);
      value = fmaf(__ldcg(base + s * (D + 2) + c), w, value);
    }
    const T stored = from_float<T>(value / total);
    out[row * D + c] = stored;
    if constexpr (PROJECT) proj_s[i] = to_float(stored);
  }
  if constexpr (PROJECT) {
    __syncthreads();
    project_outputs(proj_s, w_o, w_scales, w_zeros, proj_out + (size_t)b * PH, hq, h0);
  }
  if (tid == 0) *counter = 0u;
}
`;
  return { name, source, gridDependencyWait: true };
}

export function decodeAttention(host: KernelHost, args: DecodeAttentionArgs): void {
  const c = new OpCheck('decodeAttention', 'cuda');
  launchDecodeAttention(host, checkDecodeAttention(c, args), c);
}

/** The appended key's inputs of a fused appendDecodeAttention (kernel arguments qkv, qkv_bias, inv_freq, rope_scale, q_norm, k_norm, norm_eps; 0n: absent). */
interface AppendInputs {
  readonly qkv: bigint; readonly bias: bigint; readonly invFreq: bigint; readonly ropeScale: number;
  readonly headNorm?: { readonly q: bigint; readonly k: bigint; readonly eps: number };
}

/**
 * Plans the variant and launches it. With `append` (the fused appendDecodeAttention) only where the plan is
 * the pipelined variant; otherwise nothing is launched and it returns false.
 */
function launchDecodeAttention(host: KernelHost, checked: ReturnType<typeof checkDecodeAttention>, c: OpCheck, append?: AppendInputs): boolean {
  const { q, kCache, vCache, positions, out, partials, scale, B, Hq, Hkv, d, maxLen, group, splits, blockTable, paged, freshKeys, project } = checked;
  const ptr = (name: string, t: typeof q | undefined) => (t ? devicePtr(c, name, t) : 0n);
  const p = { q: append ? 0n : ptr('q', q), k: ptr('kCache', kCache), v: ptr('vCache', vCache), positions: ptr('positions', positions), out: ptr('out', out), partials: ptr('partials', partials) };
  if (B === 0 || Hq === 0) return true;
  if (d > MAX_HEAD_DIM) c.fail(`head size ${d} is larger than the largest supported (${MAX_HEAD_DIM})`);
  if (B > 65535 || splits > 65535) c.fail(`batch ${B} or splits ${splits} above CUDA's grid limit of 65535`);
  const dtype = q.dtype as FloatDType, size = byteSize(dtype);
  const vec = pickVectorWidth(16 / size, [p.k, p.v].map((a) => ({ ptr: a, elementBytes: size })), d);
  if (d / vec > DECODE_THREADS) c.fail(`head size ${d} needs ${d / vec} vectors a row with ${vec}-element vectors: at most ${DECODE_THREADS} are supported (align the caches to 16 bytes)`);
  const split = splits > 1;
  const headGroups = Hkv * (group / headsPerBlock(group));
  const chunks = project ? projectionChunks(headGroups * B, project.H, host.multiProcessorCount, split) : 1;
  let spec: DecodeAttentionSpec = {
    dtype, headDim: d, group, headsPerBlock: headsPerBlock(group), vec, split, ...(paged ? { page: paged.blockSize } : {}),
    ...(project ? { project: { hidden: project.H, ...(chunks > 1 ? { chunks } : {}), ...(project.int4 ? { int4: { groupSize: project.int4.groupSize } } : {}) } } : {}),
  };
  const projectWeight = project?.int4?.qweight ?? project?.weight;
  if (project) {
    const aligned = [projectWeight, project.out].every((t) => devicePtr(c, 'project', t!) % 16n === 0n);
    if (!projectionFits(dtype, d, spec.headsPerBlock, project.int4 !== undefined) || !aligned) {
      const vector = project.int4 ? '16-byte vectors of 32 INT4 columns' : '16-byte vectors';
      c.fail(`'project' takes a block's ${spec.headsPerBlock} heads × ${d} columns in ${vector}, 1–32 of them dividing 32, and 16-byte aligned weight and out; got ${dtype}, d ${d}`);
    }
  }
  const blocks = headGroups * B * splits * chunks;
  const staged = stagedVariant(d, size, vec, dtype);
  if (staged) {
    const shape = mmaShapeFor(blocks, host.multiProcessorCount, decodeAttentionOptions.mmaShape, d * size);
    spec = { ...spec, pipelined: true, ...(staged.mma ? { mma: true, ...(shape !== DEFAULT_MMA_SHAPE ? { mmaShape: shape } : {}) } : {}) };
  }
  else if (decodeAttentionThroughput(blocks, paged !== undefined)) spec = { ...spec, throughput: true };
  if (append) {
    if (!spec.pipelined) return false;
    spec = { ...spec, append: { rope: append.invFreq !== 0n, bias: append.bias !== 0n, ...(append.headNorm ? { headNorm: true } : {}) } };
  }
  const counters = split ? host.counters(B * headGroups) : 0n;
  if (spec.mma) decodeAttentionLaunches.mma++;
  if (spec.project) decodeAttentionLaunches.projected++;
  host.kernel(decodeAttentionKey(spec), () => decodeAttentionSource(spec)).launch(
    { grid: [headGroups, B, splits * chunks], block: DECODE_THREADS, ...(spec.pipelined ? { sharedBytes: spec.mma ? mmaSharedBytes(spec.mmaShape ?? DEFAULT_MMA_SHAPE, d * size) : PIPELINED_STAGE_BYTES } : {}) },
    [
      arg.ptr(p.q), arg.ptr(p.k), arg.ptr(p.v), arg.ptr(p.positions), arg.ptr(p.out), arg.ptr(p.partials), arg.f32(scale * Math.LOG2E), arg.i32(Hq), arg.i32(maxLen), arg.i32(MIN_SPLIT_KEYS),
      arg.ptr(ptr('blockTable', blockTable)), arg.i32(paged ? paged.maxBlocks : 0), arg.ptr(counters), arg.i32(decodeAttentionOptions.prefetch ? freshKeys : 0),
      arg.ptr(append?.qkv ?? 0n), arg.ptr(append?.bias ?? 0n), arg.ptr(append?.invFreq ?? 0n), arg.f32(append?.ropeScale ?? 1),
      arg.ptr(ptr('project.weight', projectWeight)), arg.ptr(ptr('project.out', project?.out)), arg.ptr(ptr('project.zero', project?.zero)), arg.i32(project?.zero?.numel ?? 0),
      arg.ptr(append?.headNorm?.q ?? 0n), arg.ptr(append?.headNorm?.k ?? 0n), arg.f32(append?.headNorm?.eps ?? 0),
      arg.ptr(ptr('project.weight.scales', project?.int4?.scales)), arg.ptr(ptr('project.weight.zeros', project?.int4?.zeros)),
    ],
  );
  return true;
}

/**
 * appendDecodeAttention as one kernel where it takes them: decodeAttention's pipelined variant (rows of
 * 128 bytes in 16-byte vectors: Llama's and GPT-2's d 64 at 16 bit, d 32 at f32; on tensor cores also 256-byte
 * rows, d 128 at 16 bit; not turned off) with the query heads and the new key and value formed from the QKV
 * row in its prologue (the header's APPEND; Qwen3's head norms too), over contiguous or paged caches, one
 * token a sequence. Returns false (nothing launched) otherwise: the backend then runs qkvRopeAppend and decodeAttention.
 */
export function fusedAppendDecodeAttention(host: KernelHost, parts: { readonly append: QkvRopeAppendArgs; readonly attention: DecodeAttentionArgs }): boolean {
  const c = new OpCheck('appendDecodeAttention', 'cuda');
  const append = checkQkvRopeAppend(c, parts.append);
  const attention = checkDecodeAttention(c, parts.attention);
  if (!decodeAttentionOptions.append || append.L !== 1 || append.kOut !== undefined || append.tableRows !== undefined) return false;
  const ptr = (name: string, t: typeof append.qkv | undefined) => (t ? devicePtr(c, name, t) : 0n);
  const headNorm = append.headNorm;
  return launchDecodeAttention(host, attention, c, {
    qkv: ptr('qkv', append.qkv), bias: ptr('bias', append.bias), invFreq: ptr('rope.invFreq', append.invFreq), ropeScale: append.ropeScale,
    ...(headNorm ? { headNorm: { q: ptr('headNorm.q', headNorm.q), k: ptr('headNorm.k', headNorm.k), eps: headNorm.eps } } : {}),
  });
}

/** GPT-2 (group 1), Llama 3.2 1B (d 64, group 4) and 8B (d 128), split and not, MQA-wide groups, f32. */
export function catalog(): KernelSource[] {
  return [
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true }),
    decodeAttentionSource({ dtype: 'f16', headDim: 128, group: 4, headsPerBlock: 4, vec: 8, split: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 128, group: 32, headsPerBlock: 8, vec: 8, split: false }),
    decodeAttentionSource({ dtype: 'f32', headDim: 32, group: 2, headsPerBlock: 2, vec: 4, split: false }),
    decodeAttentionSource({ dtype: 'f32', headDim: 80, group: 1, headsPerBlock: 1, vec: 4, split: true }),
    // The O projection (DecodeAttentionArgs.project): GPT-2 unsplit and split, f32 (not pipelined), Llama 3.2 1B's four heads a block.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, project: { hidden: 768 } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: true, project: { hidden: 768 } }),
    decodeAttentionSource({ dtype: 'f32', headDim: 64, group: 1, headsPerBlock: 1, vec: 4, split: false, project: { hidden: 768 } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, project: { hidden: 2048 } }),
    // Paged (the serving engine's pool): Llama 3.2 1B with blocks of 16, split and not; GPT-2 with blocks of 32; f32 blocks of 8.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16 }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, page: 16 }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, page: 32 }),
    decodeAttentionSource({ dtype: 'f32', headDim: 16, group: 4, headsPerBlock: 4, vec: 4, split: true, page: 8 }),
    // The throughput variant (large grids): Llama 3.2 1B paged, split and not; GPT-2 paged; f32.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16, throughput: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, page: 16, throughput: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, page: 32, throughput: true }),
    decodeAttentionSource({ dtype: 'f32', headDim: 16, group: 4, headsPerBlock: 4, vec: 4, split: true, page: 8, throughput: true }),
    // The pipelined variant (128-byte rows): Llama 3.2 1B paged, split and not; GPT-2 contiguous; f32 d 32.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16, pipelined: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, page: 16, pipelined: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: true, pipelined: true }),
    decodeAttentionSource({ dtype: 'f32', headDim: 32, group: 2, headsPerBlock: 2, vec: 4, split: false, pipelined: true }),
    // appendDecodeAttention fused: Llama 3.2 1B (RoPE) split and not, GPT-2 (bias), a wide group (4 head blocks), f32 with both.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, pipelined: true, append: { rope: true, bias: false } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, pipelined: true, append: { rope: true, bias: false } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, pipelined: true, append: { rope: false, bias: true } }),
    decodeAttentionSource({ dtype: 'f16', headDim: 64, group: 32, headsPerBlock: 8, vec: 8, split: true, pipelined: true, append: { rope: true, bias: true } }),
    decodeAttentionSource({ dtype: 'f32', headDim: 32, group: 2, headsPerBlock: 2, vec: 4, split: true, pipelined: true, append: { rope: true, bias: true } }),
    // ... and paged (the serving engine's decode rows): Llama 3.2 1B with blocks of 16, split and not.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16, pipelined: true, append: { rope: true, bias: false } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, page: 16, pipelined: true, append: { rope: true, bias: false } }),
    // The tensor-core variant: Llama 3.2 1B fused and paged (the serving step), GPT-2 (group 1, bias), f16 with 8 heads a block, plain.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16, pipelined: true, append: { rope: true, bias: false }, mma: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, pipelined: true, append: { rope: true, bias: false }, mma: true }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, pipelined: true, append: { rope: false, bias: true }, mma: true }),
    // GPT-2's batch-1 step with the O projection fused (the fused MLP's companion).
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, pipelined: true, append: { rope: false, bias: true }, mma: true, project: { hidden: 768 } }),
    // ... in 16 output chunks (GPT-2 at batch 1 on 132 SMs), 4 (batch 4); Llama 3.2 1B's four heads a block in 16.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, pipelined: true, append: { rope: false, bias: true }, mma: true, project: { hidden: 768, chunks: 16 } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, pipelined: true, append: { rope: false, bias: true }, mma: true, project: { hidden: 768, chunks: 4 } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, pipelined: true, append: { rope: true, bias: false }, mma: true, project: { hidden: 2048, chunks: 16 } }),
    decodeAttentionSource({ dtype: 'f32', headDim: 64, group: 1, headsPerBlock: 1, vec: 4, split: false, project: { hidden: 768, chunks: 8 } }),
    // ... with an INT4 O weight: Llama 3.2 1B (group 128) in 16 chunks, GPT-2 (group 64) at batch 4, split (group 32), f32.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, pipelined: true, append: { rope: true, bias: false }, mma: true, project: { hidden: 2048, chunks: 16, int4: { groupSize: 128 } } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 1, headsPerBlock: 1, vec: 8, split: false, pipelined: true, append: { rope: false, bias: true }, mma: true, project: { hidden: 768, chunks: 4, int4: { groupSize: 64 } } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, project: { hidden: 2048, int4: { groupSize: 32 } } }),
    decodeAttentionSource({ dtype: 'f32', headDim: 64, group: 1, headsPerBlock: 1, vec: 4, split: false, project: { hidden: 768, chunks: 8, int4: { groupSize: 128 } } }),
    decodeAttentionSource({ dtype: 'f16', headDim: 64, group: 32, headsPerBlock: 8, vec: 8, split: true, page: 16, pipelined: true, mma: true }),
    // Its other shapes (FUSEFORMER_DECODE_MMA_SHAPE): 16-key tiles in three stages at 4 blocks an SM, 32-key tiles in three.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16, pipelined: true, append: { rope: true, bias: false }, mma: true, mmaShape: { tile: 16, stages: 3, blocksPerSm: 4 } }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, pipelined: true, mma: true, mmaShape: { tile: 32, stages: 3, blocksPerSm: 0 } }),
    // 256-byte rows on tensor cores (d 128 at 16 bit: Llama 3 8B's group 4, Qwen3's group 2 with its head norms), plain, split, paged, fused.
    decodeAttentionSource({ dtype: 'bf16', headDim: 128, group: 4, headsPerBlock: 4, vec: 8, split: false, pipelined: true, mma: true, mmaShape: WIDE_ROW_MMA_SHAPE }),
    decodeAttentionSource({ dtype: 'f16', headDim: 128, group: 8, headsPerBlock: 8, vec: 8, split: true, pipelined: true, mma: true, mmaShape: WIDE_ROW_MMA_SHAPE }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 128, group: 4, headsPerBlock: 4, vec: 8, split: true, page: 16, pipelined: true, append: { rope: true, bias: false }, mma: true, mmaShape: WIDE_ROW_MMA_SHAPE }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 128, group: 2, headsPerBlock: 2, vec: 8, split: false, pipelined: true, append: { rope: true, bias: false, headNorm: true }, mma: true, mmaShape: WIDE_ROW_MMA_SHAPE }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 128, group: 7, headsPerBlock: 7, vec: 8, split: true, page: 16, pipelined: true, append: { rope: true, bias: true }, mma: true, mmaShape: WIDE_ROW_MMA_SHAPE }),
    // The wide-grid shape (serving's big decode steps): paged, fused, split and not.
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, page: 16, pipelined: true, append: { rope: true, bias: false }, mma: true, mmaShape: WIDE_GRID_MMA_SHAPE }),
    decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: true, page: 16, pipelined: true, append: { rope: true, bias: false }, mma: true, mmaShape: WIDE_GRID_MMA_SHAPE }),
  ];
}
