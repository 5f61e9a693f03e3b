// FlashAttention-2 forward on the tensor cores (f16, bf16; sm_80+): mma.sync m16n8k16 with f32
// accumulators, operands staged through XOR-swizzled shared memory by cp.async (mma-lib.ts has the
// fragment layouts). attention.ts dispatches here for half-precision inputs; f32 stays on its SIMT
// kernel. The math and the masks are backend.ts's contract, as in attention.ts:
//   key j is visible to query i when j < n_i = min(Lk, keyLengths[b], causal ? i + Lk − Lq + 1 : Lk);
//   out_i = Σ_j softmax_j(scale · q_i·k_j) v_j over visible keys, lse_i = ln Σ_j exp(scale · q_i·k_j)
//   (natural log, f32); a query with no visible key gets out = 0, lse = −∞.
//
// Thread mapping. Grid (ceil(Lq / BQ), Hq, B); a block of W warps owns BQ = RW·W query rows of one
// (batch, query head) and reads kv head h / (Hq / Hkv) (GQA). Warp w owns RW = 16·MT rows (MT = 1 or 2
// m16 tiles): lane 4g + t holds rows g and g + 8 of every accumulator tile (mma-lib.ts), so a row's
// max and sum reduce over the 4 lanes of a quad with 2 shuffles. Per K/V tile of BK keys, each warp:
//   S = Q·Kᵀ     RW×BK: D/16 k-steps × BK/8 n-tiles × MT mma. Q's A fragments stay in registers for the
//                whole kernel or are re-read by ldmatrix per tile (a tile option: 4·MT·d/16 registers);
//                K's B fragments come from ldmatrix (K is row-major [key][dim] = the "col" B layout),
//                each feeding MT mma.
//   softmax      online, in base 2 with scale·log2(e) folded into one FFMA per score:
//                m' = max(m, max_j s_ij), p_ij = 2^(s_ij·c − m'·c), α = 2^(m·c − m'·c), c = scale·log2 e,
//                l ← α·l + Σ_j p_ij (each lane keeps a partial l; the quad adds them once at the end),
//                O ← α·O. The row max uses raw scores, which is right only for scale > 0 (the launcher
//                sends scale ≤ 0 to the SIMT kernel).
//   O += P·V     P's accumulators, packed to 16 bits, are already the A fragments of P·V (16 keys per
//                k-step); V's B fragments come from ldmatrix.trans (V is row-major [key][dim]).
//                The rescale of O (MT·d/2 FMULs per thread per tile, against MT·BK/2 exponentials) is
//                skipped, per half of an m-tile, by a warp none of whose rows moved its max (α = 1
//                exactly), which after the first tiles is most of them (a warp vote per half);
//                tile.eagerRescale restores the unconditional rescale.
// Pipeline: Q, K0, V0 are issued as three cp.async groups; at tile j, after K(j) lands, the block
// issues K(j+1) and V(j+1) into the other of two shared stages, so the copies overlap S, the softmax
// and P·V of tile j; V(j) is waited for just before P·V. Two barriers per tile. tile.oneBarrier waits
// for K(j) and V(j) together at the top instead (both were issued a whole tile earlier), one barrier.
// Schedule: blocks are numbered in launch order (x fastest) and decoded to (query tile, head) so that,
// causal, the longest query tiles of a section of heads all start before any shorter one (longest
// processing time first: the last wave holds the shortest tiles instead of some head's longest). A
// section is as many heads as keep their K and V within SECTION_L2_BYTES of L2; non-causal tiles all
// cost the same, and sections are single heads (the head-major order: a head's blocks share K, V in L2).
// Waves: at L = 1024, B = 16 (d = 64, 32 heads) the grid is 8 × 32 × 16 = 4096 blocks of 128 rows on
// 132 SMs × 2 = 264 slots, 15.5 waves, so the partial last wave costs ~3%; causal, head-major order
// left up to a longest tile (8 units against a 4.5-unit mean) in the tail, which the sections remove.
// Dropout (spec.dropout; flash-lib.ts has the element index and the lane-shared Philox draws): after a
// row's sum, dropped probabilities are zeroed before P·V and 1/(1 − p) is folded into 1/l.
// Packed sequences (spec.varlen: flashAttentionForward with cuSeqlens): q, out [totalQ, Hq, d] and k, v
// [totalK, Hkv, d] with row stride H·d, sequence b's rows [cuSeqlens[b], cuSeqlens[b+1]); the grid
// covers maxSeqlenQ and blocks past their sequence's length exit at once; lse is [Hq, totalQ].
// Paged keys and values (spec.page = blockSize > 0: flashAttentionForward with `paged`, the serving
// engine's prefill over its block pool): k, v are [numBlocks, Hkv, PAGE, d] and the K/V tile loads
// (load_kv_tile) find key j's row at (block_table[b, j / PAGE]·Hkv + g)·PAGE + j % PAGE instead of
// (b·Hkv + g)·Lk + j. A block's PAGE rows of one head are contiguous (PAGE·d·s bytes: 2 KiB at PAGE 16,
// d 64, bf16), so each cp.async still moves whole 16-byte chunks of whole rows; the only extra work is a
// table read (L1) per chunk. Everything else — Q, the masks, the softmax, the epilogue — is the dense
// kernel's; a dense spec generates exactly the code it did before (PAGED is a compile-time false).
// Both (VARLEN and PAGED: packed queries over paged keys, the serving engine's prompt chunks of a step in
// one launch): sequence b's queries are packed rows [cu_seqlens_q[b], cu_seqlens_q[b+1]), its keys
// seq_keys[b] through table row seq_rows[b] (b when null); cu_seqlens_k is unused.
// Masks: tiles past the last key the block's last row sees are never loaded (causal: past the
// diagonal; padding: past keyLengths[b]); a warp skips the math of tiles none of its rows sees (it
// still joins the barriers), and masks a tile only if it reaches past the keys its first row sees
// (the diagonal tiles, the padding boundary, a ragged Lk tail). Causal grids run the longest query
// tiles first. Rows past Lq and keys past Lk are zero-filled in shared memory (cp.async with
// src-size 0), so every value the mma reads is finite.
// Epilogue: O / l rounded to the dtype goes through the warp's own RW rows of the Q tile in shared
// memory, then out as 16-byte row-contiguous stores; lse = (m·c + log2 l)·ln 2.
//
// Shared memory: (BQ + 4·BK) rows of RC·16 bytes, RC = d/8 rounded up to a multiple of 4 (the swizzle's
// unit). Default tiles (defaultFlashForwardTile; BQ = 128), from the tile sweep of bench/attention.ts on
// the H200 (bf16, L = 4096, 2026-11-29; TFLOP/s non-causal / causal): d = 64 4 warps × 32 rows, BK 64,
// Q in registers, one barrier per K/V tile 296 / 285 (two barriers 283 / 270; without Q in registers
// 274 / 255; 8 warps × 16 rows 199 / 189); d = 80–128 4 warps × 32 rows, BK 32, 2 blocks an SM, one
// barrier 311 / 303 (two barriers 309 / 287; 8 warps × 16 rows, BK 64, Q in registers 258 / 237).
// Shared: 48 KiB at d = 64, 48–64 KiB at d = 80–128, 128 KiB at d = 256.
// FLOPs 4·Lq·Lk·d per (b, h) (half when causal and Lq = Lk). Bytes: q and out once (2·s·Lq·d), k and v
// once per query tile (2·s·Lk·d·ceil(Lq/BQ), mostly from L2), lse 4·Lq.

import type { DropoutArgs } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { OpCheck } from '../../validate.js';
import type { KernelArg, KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { MMA_LIB } from './mma-lib.js';
import type { VarlenLayout } from './flash-lib.js';
import { ATTENTION_DROPOUT_OFFSET, ATTENTION_DROPOUT_PARAMS, attentionDropoutArgs, FLASH_LIB, VARLEN_PARAMS, varlenArgs, varlenDropoutStride } from './flash-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

// ---- spec ----------------------------------------------------------------------------------------------

export type HalfDType = 'f16' | 'bf16';

export interface FlashForwardTile {
  /** Warps per block. */
  readonly warps: number;
  /** Query rows per warp: 16 (one m16 tile) or 32 (two, each K/V fragment feeding two mma). BQ = rowsPerWarp · warps. */
  readonly rowsPerWarp: 16 | 32;
  /** Keys per K/V tile (a multiple of 16). */
  readonly blockK: number;
  /** Q's mma fragments stay in registers (4·d/16 registers) instead of being re-read per K/V tile. */
  readonly qInRegisters: boolean;
  /** __launch_bounds__ minimum blocks per SM: caps registers at 65536 / (32·warps·minBlocks). */
  readonly minBlocks: number;
  /** Rescale O by α on every tile (the original schedule); by default a warp skips it when no row's max moved. */
  readonly eagerRescale?: boolean;
  /** One barrier per K/V tile (K(j) and V(j) waited for together) instead of two. */
  readonly oneBarrier?: boolean;
}

export interface FlashForwardSpec {
  readonly dtype: HalfDType;
  /** d: a multiple of 16, at most MAX_FLASH_HEAD_DIM. */
  readonly headDim: number;
  readonly causal: boolean;
  /** Padding mask from keyLengths. */
  readonly padding: boolean;
  readonly tile: FlashForwardTile;
  /** Attention dropout drawn in the kernel (flash-lib.ts). */
  readonly dropout?: boolean;
  /** Packed variable-length sequences ([total, H, d], cuSeqlens). */
  readonly varlen?: boolean;
  /** Paged keys and values: positions per block of the pool (0 or absent: dense). */
  readonly page?: number;
}

export const MAX_FLASH_HEAD_DIM = 256;

/** Whether the tensor-core forward takes this dtype and head dimension. */
export function flashForwardSupports(dtype: string, headDim: number): dtype is HalfDType {
  return (dtype === 'bf16' || dtype === 'f16') && headDim % 16 === 0 && headDim >= 16 && headDim <= MAX_FLASH_HEAD_DIM;
}

/**
 * The tile per head dimension, chosen from ptxas register counts (no spills) and shared-memory traffic.
 * Each warp's ldmatrix traffic per K/V tile is 4·BK·d bytes (K and V) for 4·16·MT·BK·d FLOPs, so two
 * m-tiles per warp (MT = 2) halve it per FLOP; registers per thread are about 2·MT·d (O) + MT·BK/2 (S)
 * + MT·d/4 (Q, when held) + ~50 (addresses, loop state, softmax state).
 *   d ≤ 64   4 warps × 32 rows, BK 64, Q re-read from shared memory: ~230 registers, 2 blocks per SM.
 *   d ≤ 128  8 warps × 16 rows, BK 64, Q in registers: ~220 registers (32 rows per warp would spill).
 *   d = 256  8 warps × 16 rows, BK 32, Q re-read: O alone is 128 registers.
 * BQ = 128 everywhere, so K and V are re-read from L2 once per 128 queries.
 */
export function defaultFlashForwardTile(headDim: number): FlashForwardTile {
  if (headDim <= 64) return { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: true, minBlocks: 2, oneBarrier: true };
  if (headDim <= 128) return { warps: 4, rowsPerWarp: 32, blockK: 32, qInRegisters: false, minBlocks: 2, oneBarrier: true };
  return { warps: 8, rowsPerWarp: 16, blockK: 32, qInRegisters: false, minBlocks: 1 };
}

/**
 * Tiles the tile sweep of bench/attention.ts times (L = 4096), per d: the default first, the default
 * with the previous schedule (eager rescale) and with one barrier per K/V tile, and the runner-up of the
 * previous sweep. Every one compiles without spills (ptxas sm_90: 233–254 registers) and
 * test/gpu/flash-tiles.test.ts checks each against the CPU reference.
 */
export const FLASH_FORWARD_SWEEP: Readonly<Record<number, readonly FlashForwardTile[]>> = {
  64: [
    { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: true, minBlocks: 2, oneBarrier: true },
    { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: true, minBlocks: 2 },
    { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: true, minBlocks: 2, eagerRescale: true, oneBarrier: true },
    { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: false, minBlocks: 2, oneBarrier: true },
  ],
  128: [
    { warps: 4, rowsPerWarp: 32, blockK: 32, qInRegisters: false, minBlocks: 2, oneBarrier: true },
    { warps: 4, rowsPerWarp: 32, blockK: 32, qInRegisters: false, minBlocks: 2 },
    { warps: 4, rowsPerWarp: 32, blockK: 32, qInRegisters: false, minBlocks: 2, eagerRescale: true, oneBarrier: true },
    { warps: 4, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 2, oneBarrier: true },
  ],
};

/** 16-byte chunks per shared row: d/8 rounded up to a multiple of 4 (mma-lib.ts's swizzle unit). */
function rowChunks(headDim: number): number {
  return Math.ceil(headDim / 32) * 4;
}

/** Query rows per block (BQ). */
export function blockRows(tile: FlashForwardTile): number {
  return tile.rowsPerWarp * tile.warps;
}

/** Dynamic shared memory: the Q tile and two stages of K and V tiles. */
export function flashForwardSharedBytes(headDim: number, tile: FlashForwardTile): number {
  return (blockRows(tile) + 4 * tile.blockK) * rowChunks(headDim) * 16;
}

export function flashForwardKey(s: FlashForwardSpec): string {
  const t = s.tile;
  return `flash_forward.${s.dtype}.d${s.headDim}.q${blockRows(t)}.k${t.blockK}.w${t.warps}.b${t.minBlocks}${t.qInRegisters ? '.qreg' : ''}` +
    `${t.eagerRescale ? '.eager' : ''}${t.oneBarrier ? '.bar1' : ''}${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}` +
    `${s.varlen ? '.varlen' : ''}${s.dropout ? '.dropout' : ''}${s.page ? `.paged${s.page}` : ''}`;
}

/** Why a tile cannot be generated for this head dimension, or null when it can. */
function tileProblem(headDim: number, tile: FlashForwardTile): string | null {
  if (![2, 4, 8].includes(tile.warps)) return `tile warps must be 2, 4 or 8, got ${tile.warps}`;
  if (tile.rowsPerWarp !== 16 && tile.rowsPerWarp !== 32) return `tile rowsPerWarp must be 16 or 32, got ${String(tile.rowsPerWarp)}`;
  if (tile.blockK < 16 || tile.blockK > 128 || tile.blockK % 16 !== 0) return `tile blockK must be a multiple of 16 in [16, 128], got ${tile.blockK}`;
  if (!Number.isInteger(tile.minBlocks) || tile.minBlocks < 1 || tile.minBlocks > 4) return `tile minBlocks must be 1..4, got ${tile.minBlocks}`;
  if (headDim % 16 !== 0 || headDim < 16 || headDim > MAX_FLASH_HEAD_DIM) return `head dimension must be a multiple of 16 in [16, ${MAX_FLASH_HEAD_DIM}], got ${headDim}`;
  return null;
}

// ---- source ----------------------------------------------------------------------------------------------

export function flashForwardSource(spec: FlashForwardSpec): KernelSource {
  const { tile } = spec;
  const problem = tileProblem(spec.headDim, tile);
  if (problem) throw new RangeError(`flashForwardSource: ${problem}`);
  const name = kernelIdentifier(flashForwardKey(spec));
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${FLASH_LIB}
${typedefLine('T', spec.dtype)}
${constants({
    D: spec.headDim, WARPS: tile.warps, MT: tile.rowsPerWarp / 16, BK: tile.blockK, CAUSAL: spec.causal, PADDING: spec.padding,
    Q_IN_REGS: tile.qInRegisters, LAZY_RESCALE: !tile.eagerRescale, ONE_BARRIER: tile.oneBarrier ?? false,
    DROPOUT: spec.dropout ?? false, VARLEN: spec.varlen ?? false, PAGED: (spec.page ?? 0) > 0, PAGE: Math.max(1, spec.page ?? 0),
  })}
${launchBoundsMacro(32 * tile.warps, tile.minBlocks)}
constexpr int THREADS = 32 * WARPS;
constexpr int RW = 16 * MT;               // query rows per warp: MT m-tiles of 16
constexpr int BQ = RW * WARPS;            // query rows per block
constexpr int DC = D / 8;                 // 16-byte chunks of a row in global memory
constexpr int RC = (DC + 3) / 4 * 4;      // 16-byte chunks of a row in shared memory (swizzle unit)
constexpr int ROW_BYTES = RC * 16;
constexpr int KSTEPS = D / 16;            // k-steps of Q·Kᵀ = 16-column groups of O
constexpr int ONT = D / 8;                // 8-column n-tiles of O
constexpr int SNT = BK / 8;               // 8-key n-tiles of S
constexpr float LN2 = 0.6931471805599453f;
static_assert(D % 16 == 0 && BK % 16 == 0, "mma k-steps of 16");

// Keys [0, n) are visible to query i of a sequence with "valid" keys (non-decreasing in i).
__device__ __forceinline__ int visible_keys(int i, int q_len, int k_len, int valid) {
  int n = k_len;
  if (PADDING) n = min(n, valid);
  if (CAUSAL) n = min(n, i + (k_len - q_len) + 1);
  return max(n, 0);
}
// Rows [row0, row0 + ROWS) of a head's [len, D] matrix (row stride "stride" elements) into a swizzled
// shared tile by cp.async (one 16-byte chunk per thread per step, consecutive threads along a row);
// rows past len are zero-filled.
template <int ROWS>
__device__ __forceinline__ void load_tile(u32 dst, const T* __restrict__ src, int row0, int len, int stride) {
  constexpr int CHUNKS = ROWS * DC;
  #pragma unroll
  for (int step = 0; step < (CHUNKS + THREADS - 1) / THREADS; step++) {
    const int idx = step * THREADS + (int)threadIdx.x;
    if (CHUNKS % THREADS != 0 && idx >= CHUNKS) break;
    const int r = idx / DC, c = idx - r * DC;
    const bool inside = row0 + r < len;
    cp_async_16(dst + swizzled_offset<RC>(r, c), src + (long long)(inside ? row0 + r : 0) * stride + c * 8, inside);
  }
}
// A K or V tile: load_tile, or (PAGED) rows found through the sequence's block table: key j is row j % PAGE
// of block table[j / PAGE], whose head rows start block_stride elements apart (src = the head's row 0 of block 0).
template <int ROWS>
__device__ __forceinline__ void load_kv_tile(u32 dst, const T* __restrict__ src, int row0, int len, int stride,
                                             [[maybe_unused]] const int* __restrict__ table, [[maybe_unused]] long long block_stride) {
  if constexpr (!PAGED) {
    load_tile<ROWS>(dst, src, row0, len, stride);
  } else {
    constexpr int CHUNKS = ROWS * DC;
    #pragma unroll
    for (int step = 0; step < (CHUNKS + THREADS - 1) / THREADS; step++) {
      const int idx = step * THREADS + (int)threadIdx.x;
      if (CHUNKS % THREADS != 0 && idx >= CHUNKS) break;
      const int r = idx / DC, c = idx - r * DC, j = row0 + r;
      const bool inside = j < len;
      const long long at = inside ? (long long)table[j / PAGE] * block_stride + (long long)(j % PAGE) * D : 0;
      cp_async_16(dst + swizzled_offset<RC>(r, c), src + at + c * 8, inside);
    }
  }
}

extern "C" __global__ void KERNEL_BOUNDS ${name}(const T* __restrict__ q, const T* __restrict__ k,
    const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse, const int* __restrict__ key_lengths,
    int q_len, int k_len, int q_heads, int group, float scale_log2e, int section_heads,
    ${VARLEN_PARAMS}, ${ATTENTION_DROPOUT_PARAMS}, const int* __restrict__ block_table, int table_stride,
    const int* __restrict__ seq_keys, const int* __restrict__ seq_rows) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 q_s = smem_u32(smem);                 // [BQ] rows
  const u32 k_s = q_s + BQ * ROW_BYTES;           // [2 stages][BK] rows
  const u32 v_s = k_s + 2 * BK * ROW_BYTES;       // [2 stages][BK] rows
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

  // Block → (query tile, batch·head) in launch order: sections of section_heads heads, and within a
  // section every head's longest tile (causal) before any head's next one, so the short tiles run last
  // (the launcher sizes sections so that their K and V stay in L2; 1 = head-major).
  const int q_tiles = (int)gridDim.x;
  int tile_rank, head;
  decode_block(section_heads, tile_rank, head);
  const int b = head / q_heads, h = head - b * q_heads;
  const int q_tile = CAUSAL ? q_tiles - 1 - tile_rank : tile_rank;   // causal: longest rows first
  const int q0 = q_tile * BQ;
  const int kv_heads = q_heads / group;

  // Where this (sequence, head) lives: [B, H, L, D] (row stride D) or packed [total, H, D] (VARLEN,
  // row stride H·D, lengths from cu_seqlens). row_base + i indexes lse (and the dropout rows).
  int seq_q = q_len, seq_k = k_len, q_stride = D, kv_stride = D;
  long long q_offset, kv_offset, row_base;
  if constexpr (VARLEN) {
    const int q_start = cu_seqlens_q[b];
    seq_q = max(0, cu_seqlens_q[b + 1] - q_start);
    q_stride = q_heads * D;
    q_offset = ((long long)q_start * q_heads + h) * D;
    row_base = (long long)h * total_q + q_start;
    if (q0 >= seq_q) return;  // the whole block: before any barrier
    if constexpr (PAGED) {
      // Packed queries over paged keys: seq_keys[b] keys through table row seq_rows[b] (or b).
      seq_k = seq_keys[b];
      kv_offset = (long long)(h / group) * PAGE * D;
    } else {
      const int k_start = cu_seqlens_k[b];
      seq_k = max(0, cu_seqlens_k[b + 1] - k_start);
      kv_stride = kv_heads * D;
      kv_offset = ((long long)k_start * kv_heads + h / group) * D;
    }
  } else {
    q_offset = ((long long)b * q_heads + h) * q_len * D;
    // Paged: the kv head's rows within block 0 (load_kv_tile adds table[j / PAGE]·block_stride).
    kv_offset = PAGED ? (long long)(h / group) * PAGE * D : ((long long)b * kv_heads + h / group) * k_len * D;
    row_base = ((long long)b * q_heads + h) * q_len;
  }
  const T* __restrict__ k_head = k + kv_offset;
  const T* __restrict__ v_head = v + kv_offset;
  [[maybe_unused]] const int* __restrict__ table =
      PAGED ? block_table + (long long)(VARLEN && seq_rows != nullptr ? seq_rows[b] : b) * table_stride : nullptr;
  [[maybe_unused]] const long long block_stride = (long long)kv_heads * PAGE * D;
  const int valid = PADDING ? key_lengths[b] : seq_k;
  const int kv_end = visible_keys(min(q0 + BQ, seq_q) - 1, seq_q, seq_k, valid);  // keys the last row sees
  const int tiles = (kv_end + BK - 1) / BK;
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const bool drop_aligned = drop_stride % 8 == 0;

  // Three cp.async groups: Q, K0, V0 (the K/V groups are empty when no key is visible).
  load_tile<BQ>(q_s, q + q_offset, q0, seq_q, q_stride);
  cp_async_commit();
  if (tiles > 0) load_kv_tile<BK>(k_s, k_head, 0, seq_k, kv_stride, table, block_stride);
  cp_async_commit();
  if (tiles > 0) load_kv_tile<BK>(v_s, v_head, 0, seq_k, kv_stride, table, block_stride);
  cp_async_commit();

  // Warp w owns rows w·RW .. w·RW + RW − 1 of the tile (RW = 16·MT): in m-tile mt, lane 4g + t holds
  // rows 16mt + g ("half" 0) and 16mt + g + 8 (half 1). RW is a multiple of 8, so the swizzle of a row
  // only depends on its index within the warp's slice.
  const u32 q_warp = q_s + warp * RW * ROW_BYTES;
  const int warp_row0 = q0 + warp * RW + g;
  // Keys this warp's last valid row sees (0 for a warp wholly past the sequence: it skips every tile)
  // and keys its first row sees (tiles below need no mask). Warps skip the tiles none of their rows
  // see (the far side of the causal diagonal) but still join the block's barriers.
  const int warp_first = q0 + warp * RW, warp_last = min(warp_first + RW, seq_q) - 1;
  const int warp_kv_end = warp_first < seq_q ? visible_keys(warp_last, seq_q, seq_k, valid) : 0;
  const int warp_kv_full = visible_keys(warp_first, seq_q, seq_k, valid);
  int visible[MT][2];
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    visible[mt][0] = visible_keys(warp_row0 + 16 * mt, seq_q, seq_k, valid);
    visible[mt][1] = visible_keys(warp_row0 + 16 * mt + 8, seq_q, seq_k, valid);
  }

  u32 qf[Q_IN_REGS ? MT : 1][Q_IN_REGS ? KSTEPS : 1][4];
  if constexpr (Q_IN_REGS) {
    cp_async_wait<2>();
    __syncthreads();
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      #pragma unroll
      for (int ks = 0; ks < KSTEPS; ks++) ldsm_x4(q_warp + swizzled_offset<RC>(16 * mt + (lane & 15), 2 * ks + (lane >> 4)), qf[mt][ks]);
    }
  }

  float o[MT][ONT][4];
  float m[MT][2], l[MT][2];  // running max of the raw scores of each row; this lane's part of Σ 2^(s·c − m·c)
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    #pragma unroll
    for (int nt = 0; nt < ONT; nt++) o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.f;
    m[mt][0] = m[mt][1] = neg_inf();
    l[mt][0] = l[mt][1] = 0.f;
  }

  for (int j = 0; j < tiles; j++) {
    const int j0 = j * BK;
    const u32 k_cur = k_s + (j & 1) * BK * ROW_BYTES, v_cur = v_s + (j & 1) * BK * ROW_BYTES;
    // Two barriers: K(j) landed (V(j) may be in flight), and below, V(j) landed. One barrier: both.
    if constexpr (ONE_BARRIER) cp_async_wait<0>(); else cp_async_wait<1>();
    __syncthreads();     // everyone's copies landed, and every warp is past tile j − 1, whose stage is refilled next
    if (j + 1 < tiles) load_kv_tile<BK>(k_s + ((j + 1) & 1) * BK * ROW_BYTES, k_head, j0 + BK, seq_k, kv_stride, table, block_stride);
    cp_async_commit();
    if (j + 1 < tiles) load_kv_tile<BK>(v_s + ((j + 1) & 1) * BK * ROW_BYTES, v_head, j0 + BK, seq_k, kv_stride, table, block_stride);
    cp_async_commit();

    // S = Q·K(j)ᵀ: RW × BK per warp; each K fragment feeds MT mma.
    const bool active = j0 < warp_kv_end;
    float s[MT][SNT][4];
    if (active) {  // warp-uniform: the barriers below stay outside
      #pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        #pragma unroll
        for (int nt = 0; nt < SNT; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
      }
      #pragma unroll
      for (int ks = 0; ks < KSTEPS; ks++) {
        u32 a[MT][4];
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          if constexpr (Q_IN_REGS) {
            a[mt][0] = qf[mt][ks][0]; a[mt][1] = qf[mt][ks][1]; a[mt][2] = qf[mt][ks][2]; a[mt][3] = qf[mt][ks][3];
          } else {
            ldsm_x4(q_warp + swizzled_offset<RC>(16 * mt + (lane & 15), 2 * ks + (lane >> 4)), a[mt]);
          }
        }
        #pragma unroll
        for (int nn = 0; nn < SNT / 2; nn++) {
          u32 kb[4];
          ldsm_x4(k_cur + swizzled_offset<RC>(16 * nn + (lane & 7) + ((lane >> 4) << 3), 2 * ks + ((lane >> 3) & 1)), kb);
          #pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            mma_16816<T>(s[mt][2 * nn], a[mt], kb[0], kb[1]);
            mma_16816<T>(s[mt][2 * nn + 1], a[mt], kb[2], kb[3]);
          }
        }
      }

      if (j0 + BK > warp_kv_full) {  // a tile some row of the warp does not see whole
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          #pragma unroll
          for (int nt = 0; nt < SNT; nt++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
              if (j0 + 8 * nt + 2 * t + (e & 1) >= visible[mt][e >> 1]) s[mt][nt][e] = neg_inf();
            }
          }
        }
      }

      // Online softmax (base 2; c = scale·log2 e > 0, so the max of raw scores is the max of scaled ones).
      #pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        #pragma unroll
        for (int half = 0; half < 2; half++) {
          float mx = m[mt][half];
          #pragma unroll
          for (int nt = 0; nt < SNT; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
          mx = quad_max(mx);
          // A row with nothing visible yet shifts by 0, so that 2^(−inf − shift) = 0 instead of NaN.
          const float shift = mx == neg_inf() ? 0.f : mx * scale_log2e;
          // An unchanged max (also −inf staying −inf) needs no rescale: α = 1 exactly.
          const bool moved = mx != m[mt][half];
          const float alpha = moved ? exp2_fast(m[mt][half] * scale_log2e - shift) : 1.f;
          m[mt][half] = mx;
          float sum = 0.f;
          #pragma unroll
          for (int nt = 0; nt < SNT; nt++) {
            s[mt][nt][2 * half] = exp2_fast(fmaf(s[mt][nt][2 * half], scale_log2e, -shift));
            s[mt][nt][2 * half + 1] = exp2_fast(fmaf(s[mt][nt][2 * half + 1], scale_log2e, -shift));
            sum += s[mt][nt][2 * half] + s[mt][nt][2 * half + 1];
          }
          l[mt][half] = l[mt][half] * alpha + sum;
          // O ← α·O, skipped by the whole warp when none of its rows (of this half) moved its max.
          if (!LAZY_RESCALE || __any_sync(0xffffffffu, moved)) {
            #pragma unroll
            for (int nt = 0; nt < ONT; nt++) {
              o[mt][nt][2 * half] *= alpha;
              o[mt][nt][2 * half + 1] *= alpha;
            }
          }
          if constexpr (DROPOUT) {  // after the row sum: lse is the undropped softmax's
            const u64 e0 = (u64)(row_base + warp_row0 + 16 * mt + 8 * half) * (u64)drop_stride + (u64)j0;
            #pragma unroll
            for (int nb = 0; nb < (SNT + 3) / 4; nb++) {
              const u32 bits = row_keep_bits(seed, offset, threshold, e0 + 32 * nb, drop_aligned);
              #pragma unroll
              for (int sub = 0; sub < 4; sub++) {
                if (4 * nb + sub < SNT) {
                  if (!((bits >> (2 * sub)) & 1u)) s[mt][4 * nb + sub][2 * half] = 0.f;
                  if (!((bits >> (2 * sub + 1)) & 1u)) s[mt][4 * nb + sub][2 * half + 1] = 0.f;
                }
              }
            }
          }
        }
      }
    }

    // O += P·V(j): P's accumulator pairs are the A fragments (keys 16kk..16kk+15 per k-step).
    if constexpr (!ONE_BARRIER) {
      cp_async_wait<2>();  // V(j) landed (K(j+1), V(j+1) may be in flight)
      __syncthreads();
    }
    if (active) {
      #pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) {
        u32 pa[MT][4];
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
        #pragma unroll
        for (int dn = 0; dn < KSTEPS; dn++) {
          u32 vb[4];
          ldsm_x4_trans(v_cur + swizzled_offset<RC>(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * dn + (lane >> 4)), vb);
          #pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            mma_16816<T>(o[mt][2 * dn], pa[mt], vb[0], vb[1]);
            mma_16816<T>(o[mt][2 * dn + 1], pa[mt], vb[2], vb[3]);
          }
        }
      }
    }
  }
  if (tiles == 0) {  // Q's copies were never waited for; the epilogue reuses its shared rows
    cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue: O / l (times 1/(1 − p) with dropout) as T through this warp's own RW rows of the Q tile
  // (no other warp reads them), then 16-byte stores of whole rows.
  float inv[MT][2];
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
      l[mt][half] = quad_sum(l[mt][half]);
      inv[mt][half] = l[mt][half] > 0.f ? (DROPOUT ? keep_scale : 1.f) / l[mt][half] : 0.f;
    }
  }
  unsigned char* o_s = smem + warp * RW * ROW_BYTES;
  __syncwarp();
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    #pragma unroll
    for (int nt = 0; nt < ONT; nt++) {
      *reinterpret_cast<u32*>(o_s + swizzled_offset<RC>(16 * mt + g, nt) + 4 * t) = pack2<T>(o[mt][nt][0] * inv[mt][0], o[mt][nt][1] * inv[mt][0]);
      *reinterpret_cast<u32*>(o_s + swizzled_offset<RC>(16 * mt + g + 8, nt) + 4 * t) = pack2<T>(o[mt][nt][2] * inv[mt][1], o[mt][nt][3] * inv[mt][1]);
    }
  }
  __syncwarp();
  T* __restrict__ out_head = out + q_offset;
  #pragma unroll
  for (int idx = lane; idx < RW * DC; idx += 32) {
    const int r = idx / DC, c = idx - r * DC, row = q0 + warp * RW + r;
    if (row < seq_q) *reinterpret_cast<uint4*>(out_head + (long long)row * q_stride + 8 * c) = *reinterpret_cast<const uint4*>(o_s + swizzled_offset<RC>(r, c));
  }
  if (t == 0) {
    float* __restrict__ lse_head = lse + row_base;
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      #pragma unroll
      for (int half = 0; half < 2; half++) {
        const int row = warp_row0 + 16 * mt + 8 * half;
        if (row < seq_q) lse_head[row] = l[mt][half] > 0.f ? (m[mt][half] * scale_log2e + log2f(l[mt][half])) * LN2 : neg_inf();
      }
    }
  }
}
`;
  return { name, source };
}

// ---- launcher ------------------------------------------------------------------------------------------

export interface FlashForwardTensors {
  q: Tensor; k: Tensor; v: Tensor; out: Tensor; lse: Tensor; keyLengths: Tensor | undefined;
  /** Packed sequences: q, out [totalQ, Hq, d], k, v [totalK, Hkv, d], lse [Hq, totalQ]; Lq, Lk are then the max lengths. */
  varlen?: VarlenLayout;
  /** Attention dropout (p > 0), drawn in the kernel. */
  dropout?: DropoutArgs;
  /**
   * Paged keys and values: k, v [numBlocks, Hkv, blockSize, d] read through blockTable i32 [B, maxBlocks];
   * with varlen (packed queries; its cuSeqlensK unused), sequence b's keys seqKeys[b] through row seqRows[b].
   */
  paged?: { blockTable: Tensor; blockSize: number; maxBlocks: number; seqKeys?: Tensor; seqRows?: Tensor | undefined };
}
export interface FlashForwardSizes {
  B: number; Hq: number; Lq: number; Lk: number; d: number; group: number; scale: number; causal: boolean;
}

/** Largest grid y/z dimension (CUDA's limit), for heads and batch. */
const MAX_GRID_YZ = 65535;
/** L2 bytes the K and V of one causal section of heads may fill (the H200 has 60 MB of L2, the H100 50). */
export const SECTION_L2_BYTES = 16 << 20;

/**
 * Heads per launch-order section (the kernel's schedule): 1 (head-major) unless causal and dense;
 * then as many heads as keep their K and V (2·Lk·d·s bytes per kv head, shared by `group` query
 * heads) within SECTION_L2_BYTES.
 */
export function flashSectionHeads(causal: boolean, varlen: boolean, heads: number, Lk: number, d: number, group: number, elementBytes = 2): number {
  if (!causal || varlen || heads <= 1) return 1;
  const perHead = (2 * Lk * d * elementBytes) / group;
  return Math.max(1, Math.min(heads, Math.floor(SECTION_L2_BYTES / Math.max(perHead, 1))));
}

/**
 * Launches the tensor-core forward on arguments that checkFlashAttentionForward has validated and
 * that attention.ts's flashAttentionPath sent to the tensor cores (f16/bf16, d % 16 = 0, scale > 0,
 * 16-byte aligned). `tile` overrides the per-d default and `sectionHeads` the launch-order sections
 * (benchmarks sweep both; 1 = head-major).
 */
export function launchFlashForward(host: KernelHost, check: OpCheck, t: FlashForwardTensors, s: FlashForwardSizes, tile?: FlashForwardTile, sectionHeads?: number): void {
  const dtype = t.q.dtype;
  if (!flashForwardSupports(dtype, s.d)) check.fail(`the tensor-core forward takes f16/bf16 with d a multiple of 16 up to ${MAX_FLASH_HEAD_DIM}, got ${dtype} d = ${s.d}`);
  if (!(s.scale > 0)) check.fail(`the tensor-core forward needs scale > 0, got ${s.scale}`);
  if (s.Hq > MAX_GRID_YZ || s.B > MAX_GRID_YZ) check.fail(`B = ${s.B} and Hq = ${s.Hq} must each be at most ${MAX_GRID_YZ}`);
  const chosen = tile ?? defaultFlashForwardTile(s.d);
  const problem = tileProblem(s.d, chosen);
  if (problem) check.fail(problem);
  const sharedBytes = flashForwardSharedBytes(s.d, chosen);
  if (sharedBytes > host.maxSharedBytesPerBlock) check.fail(`head dimension d = ${s.d} needs ${sharedBytes} bytes of shared memory; this GPU allows ${host.maxSharedBytesPerBlock}`);
  if (sectionHeads !== undefined && !(Number.isInteger(sectionHeads) && sectionHeads >= 1)) check.fail(`sectionHeads must be a positive integer, got ${sectionHeads}`);
  if (s.B * s.Hq * s.Lq === 0) return;
  const pointers = { q: devicePtr(check, 'q', t.q), k: devicePtr(check, 'k', t.k), v: devicePtr(check, 'v', t.v), out: devicePtr(check, 'out', t.out) };
  for (const [name, p] of Object.entries(pointers)) {
    if (p % 16n !== 0n) check.fail(`the tensor-core forward needs 16-byte aligned tensors; '${name}' is at 0x${p.toString(16)}`);
  }

  const dropout = t.dropout && t.dropout.p > 0 ? t.dropout : undefined;
  const varlen = t.varlen !== undefined;
  const spec: FlashForwardSpec = {
    dtype, headDim: s.d, causal: s.causal, padding: t.keyLengths !== undefined, tile: chosen,
    ...(dropout ? { dropout: true } : {}), ...(varlen ? { varlen: true } : {}), ...(t.paged ? { page: t.paged.blockSize } : {}),
  };
  const kernel = host.kernel(flashForwardKey(spec), () => flashForwardSource(spec));
  kernel.launch(
    { grid: [Math.ceil(s.Lq / blockRows(chosen)), s.Hq, s.B], block: 32 * chosen.warps, sharedBytes },
    [
      arg.ptr(pointers.q), arg.ptr(pointers.k), arg.ptr(pointers.v), arg.ptr(pointers.out), arg.ptr(devicePtr(check, 'lse', t.lse)),
      arg.ptr(t.keyLengths ? devicePtr(check, 'keyLengths', t.keyLengths) : 0n),
      arg.i32(s.Lq), arg.i32(s.Lk), arg.i32(s.Hq), arg.i32(s.group), arg.f32(s.scale * Math.LOG2E),
      arg.i32(varlen ? 1 : sectionHeads ?? flashSectionHeads(s.causal, varlen, s.B * s.Hq, s.Lk, s.d, s.group)),
      ...varlenArgs(check, t.varlen),
      ...attentionDropoutArgs(dropout, varlen ? varlenDropoutStride(s.Lk) : s.Lk),
      arg.ptr(t.paged ? devicePtr(check, 'paged.blockTable', t.paged.blockTable) : 0n), arg.i32(t.paged ? t.paged.maxBlocks : 0),
      ...pagedSequenceArgs(check, t.paged),
    ],
  );
}

/** seq_keys and seq_rows: packed queries over paged keys (null pointers otherwise). */
export function pagedSequenceArgs(check: OpCheck, paged: { seqKeys?: Tensor; seqRows?: Tensor | undefined } | undefined): KernelArg[] {
  return [
    arg.ptr(paged?.seqKeys ? devicePtr(check, 'paged.seqKeys', paged.seqKeys) : 0n),
    arg.ptr(paged?.seqRows ? devicePtr(check, 'paged.seqRows', paged.seqRows) : 0n),
  ];
}

// ---- catalog -------------------------------------------------------------------------------------------

/** Head dimensions of the models we build (GPT-2/BERT 64, 80, 96, Llama 128) and the largest (256). */
export const FLASH_CATALOG_HEAD_DIMS = [64, 80, 96, 128, 256] as const;

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const headDim of FLASH_CATALOG_HEAD_DIMS) {
      for (const causal of [false, true]) {
        // Padding alternates with the head dimension so both settings compile with both masks.
        const padding = (headDim === 80 || headDim === 128) !== causal;
        sources.push(flashForwardSource({ dtype, headDim, causal, padding, tile: defaultFlashForwardTile(headDim) }));
      }
    }
  }
  // 16 rows per warp, 8 warps, Q in registers (the sweep's other shape): the generator's remaining branch.
  sources.push(flashForwardSource({ dtype: 'f16', headDim: 128, causal: true, padding: true, tile: { warps: 8, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 1 } }));
  // The original schedule (eager rescale, two barriers per tile); dropout; packed sequences.
  sources.push(flashForwardSource({ dtype: 'bf16', headDim: 64, causal: true, padding: false, tile: { ...defaultFlashForwardTile(64), eagerRescale: true, oneBarrier: false } }));
  sources.push(flashForwardSource({ dtype: 'bf16', headDim: 64, causal: true, padding: true, dropout: true, tile: defaultFlashForwardTile(64) }));
  sources.push(flashForwardSource({ dtype: 'f16', headDim: 128, causal: false, padding: false, dropout: true, varlen: true, tile: defaultFlashForwardTile(128) }));
  sources.push(flashForwardSource({ dtype: 'bf16', headDim: 96, causal: true, padding: false, varlen: true, tile: defaultFlashForwardTile(96) }));
  // Paged keys and values (the serving engine's prefill): Llama 3.2 1B (d 64) with blocks of 16, 8B (d 128) with blocks of 32.
  sources.push(flashForwardSource({ dtype: 'bf16', headDim: 64, causal: true, padding: false, page: 16, tile: defaultFlashForwardTile(64) }));
  sources.push(flashForwardSource({ dtype: 'f16', headDim: 128, causal: true, padding: false, page: 32, tile: defaultFlashForwardTile(128) }));
  // Packed queries over paged keys (a serving step's prompt chunks in one launch).
  sources.push(flashForwardSource({ dtype: 'bf16', headDim: 64, causal: true, padding: false, varlen: true, page: 16, tile: defaultFlashForwardTile(64) }));
  sources.push(flashForwardSource({ dtype: 'f16', headDim: 128, causal: true, padding: false, varlen: true, page: 32, tile: defaultFlashForwardTile(128) }));
  return sources;
}
