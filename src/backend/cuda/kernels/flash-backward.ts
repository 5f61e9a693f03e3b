// FlashAttention-2's backward on the tensor cores (mma.sync m16n8k16, f16/bf16 in, f32 accumulate)
// for f16 and bf16 with head dimensions d = 16, 32, …, 128 (d % 16 = 0). attention.ts dispatches
// here; f32, other head dimensions and misaligned views stay on its SIMT kernels.
//
// Math (backend.ts has the contract; attention.ts the notation). Per (batch b, query head h, kv
// head h / group), with t_ij = scale·log2(e)·q_i·k_j and key j visible to query i when
// j < n_i = min(Lk, keyLengths[b], causal ? i + Lk − Lq + 1 : Lk):
//   P_ij = 2^(t_ij − lse_i·log2 e) (0 when masked),  D_i = dOut_i·out_i,
//   dP = dOut·vᵀ,  dS = P ⊙ (dP − D),  dv = Pᵀ·dOut,  dk = scale·dSᵀ·q (summed over the group's
//   query heads),  dq = scale·dS·k.
// With dropout (keep flags z_ij redrawn as the forward drew them, flash-lib.ts; r = 1/(1 − p)):
//   out = (P ⊙ z·r)·v, so dv = (P ⊙ z·r)ᵀ·dOut, dP_ij = z_ij·r·(dOut·vᵀ)_ij, and D_i = dOut_i·out_i
//   is still Σ_j P_ij dP_ij: dS = P ⊙ (dP − D) with that dP.
//
// Three launches, no atomics, every output element written exactly once by one thread after a
// fixed-order loop (bitwise deterministic), nothing allocated (graph-capturable once the runtime's
// scratch has grown to 8·B·Hq·Lq bytes):
//   1. preprocess  grid ceil(B·Hq·Lq / 32), 128 threads, a quad per row: D_i (f32) and lse_i·log2 e
//                  (+∞ for lse = −∞, so a query that sees nothing has P = 0 without a mask) into
//                  the runtime's scratch. Reads 2·s·d + 4 bytes, writes 8 bytes per row.
//   2. dK/dV       grid (ceil(Lk/BK), Hkv, B), W warps; warp w owns keys j0 + RK·w .. + RK − 1
//                  (RK = 16·MT keys, MT m16 tiles; BK = W·RK). K and V tiles [BK, d] stay in shared
//                  memory; the block loops over the group's query heads and, per head, over the
//                  query tiles [BQ, d] that can see the kv tile (causal: from query j0 − (Lk − Lq) on),
//                  with Q, dO, D and lse·log2 e double-buffered by cp.async. Per query tile, each warp
//                  computes
//                    Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ    (A = K or V rows by ldmatrix, B = Q or dO rows by ldmatrix)
//                    Pᵀ, dSᵀ in registers          (the mma accumulator layout, rows = keys)
//                    dV += Pᵀ·dO, dK += dSᵀ·Q      (A = Pᵀ or dSᵀ repacked from the accumulators
//                                                   in registers, B = dO or Q by ldmatrix.trans)
//                  with dK, dV [RK, d] per warp in f32 registers (MT·d/2 floats each per thread).
//                  Every Q/dO fragment read from shared memory feeds MT mma: MT = 2 halves the
//                  shared-memory traffic per FLOP, for MT·(d + BQ) accumulator registers.
//   3. dQ          grid (ceil(Lq/BQ), Hq, B), W warps; warp w owns queries q0 + RQ·w .. + RQ − 1
//                  (RQ = 16·MT), Q and dO tiles resident, K/V tiles [BKV, d] double-buffered by
//                  cp.async, up to the last key the tile's last row sees:
//                    S = Q·Kᵀ, dP = dO·Vᵀ, dS = P ⊙ (dP − D) in registers, dQ += dS·K
//                  (A = dS repacked in registers, B = K by ldmatrix.trans); dQ [RQ, d] per warp in
//                  registers.
// The tiles (W, MT, BQ / BKV, __launch_bounds__ min blocks per SM) of both kernels are a
// FlashBackwardTile; bench/attention.ts sweeps them. Launch order (both kernels): blocks are decoded
// from their linear index as in flash-forward.ts — causal, sections of heads whose streamed operands
// fit SECTION_L2_BYTES run every head's longest tile first (dK/dV: the first kv tiles, which the most
// queries see; dQ: the last query tiles); otherwise head-major.
// Tiles fully past the causal diagonal or the padding are never loaded; only tiles that straddle
// them evaluate the mask per element. Rows past Lq or Lk are zero-filled by cp.async; their
// results are never stored (and the rows they meet contribute 0: a zero dO or Q row, or a masked key).
// Outputs are staged through shared memory and stored as 16-byte vectors.
// Packed sequences (varlen: flashAttentionBackward with cuSeqlens): as in flash-forward.ts, rows of stride H·d
// within [total, H, d], per-sequence lengths from cuSeqlens, blocks past their sequence exit at once;
// D and lse·log2 e are indexed [Hq, totalQ] like lse.
//
// Shared memory rows are d + 8 elements (2d + 16 bytes, an odd multiple of 16): the 8 rows one
// ldmatrix phase reads then fall in distinct 16-byte bank groups, with no swizzle, for every d.
//   dK/dV: (2·BK + 4·BQ)·(d+8)·s + 16·BQ bytes;  dQ: (2·BQ + 4·BKV)·(d+8)·s bytes (104 KB at d = 128
//   with the default 64 × 64).
// Registers (ptxas sm_90, CUDA 13, bf16 causal; no spills unless said) of the default tiles: dK/dV 196
// at d = 64 (BQ = 64), 235 with dropout, ~236 at d = 128 (BQ = 32; BQ = 64 spills there); dQ 168 at
// d = 64, 244 at d = 128 with dropout and packed rows. So two dK/dV blocks (8 warps) and two or three dQ
// blocks share an SM. The sweep's candidates (bench/attention.ts), all spill-free:
//   dK/dV d = 64: 8w×16 keys BQ 64 176 · 4w×32 BQ 32 254 · 8w×32 BQ 32 249 · 4w×16 BQ 32 ≥3/SM 156;
//         d = 128: 8w×16 BQ 32 232 · 4w×16 BQ 16 217 · 4w×16 BQ 16 ≥3/SM 168.
//   dQ    d = 64: 8w×16 BKV 64 162 · 4w×32 BKV 32 218 · 8w×32 BKV 32 224 · 8w×16 BKV 32 ≥2/SM 126 ·
//                 4w×16 BKV 64 ≥3/SM 168;  d = 128: 8w×16 BKV 64 174 · 8w×16 BKV 32 ≥2/SM 128 · 8w×32 BKV 32 254.
//   Spilling (left out): dK/dV d = 64 4w×32 BQ 64, 8w×16 ≥2/SM, BQ 128, 4w×16 BQ 64 ≥3/SM; d = 128 BQ 64
//   with 8 warps, 4w×32; dQ 4w×32 BKV 64, BKV 128, d = 128 4w×16 BKV 64 ≥3/SM.
//
// FLOPs per (b, h) with Lk visible keys per query (half of them when causal and Lq = Lk): the
// backward executes 7 GEMMs of 2·Lq·Lk·d (Sᵀ, dPᵀ, dV, dK in kernel 2; S, dP, dQ in kernel 3) =
// 14·Lq·Lk·d, 3.5× the forward's 4·Lq·Lk·d. FA2 (one kernel, dq by float atomics, not deterministic)
// executes 5 GEMMs = 10·Lq·Lk·d = 2.5× forward; benchmarks that report FA2-comparable TFLOP/s count
// 10·Lq·Lk·d (the useful work), so our two recomputed GEMMs show up as lower throughput: matching FA2's
// time needs 1.4× its FLOP rate per executed FLOP. That is the price of determinism (the contract):
// FA2's single kernel adds every kv tile's dQ into f32 memory by atomics in no fixed order.
// Bytes (s = sizeof(dtype)) per kv head: kernel 2 reads K, V once and Q, dO (+8 bytes D, lse) once per
// kv tile per query head of the group: s·d·2·Lk + group·ceil(Lk/BK)·Lq·(2·s·d + 8); kernel 3 reads
// Q, dO once and K, V once per query tile; most of the re-reads hit L2 (BK = 128 halves kernel 2's).

import type { DropoutArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import type { Tensor } from '../../../tensor.js';
import type { OpCheck } from '../../validate.js';
import type { KernelArg, KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import type { VarlenLayout } from './flash-lib.js';
import { ATTENTION_DROPOUT_OFFSET, ATTENTION_DROPOUT_PARAMS, attentionDropoutArgs, FLASH_LIB, VARLEN_PARAMS, varlenArgs, varlenDropoutStride } from './flash-lib.js';
import { flashSectionHeads } from './flash-forward.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

// ---- specs -------------------------------------------------------------------------------------------

export type FlashBackwardDType = 'bf16' | 'f16';

/** The dK/dV kernel's block: W warps of RK = 16·MT keys each (BK = W·RK keys per block). */
export interface FlashDkDvTile {
  readonly warps: number;
  /** Keys per warp: 16 (one m16 tile) or 32 (two, each Q/dO fragment feeding two mma). */
  readonly keysPerWarp: 16 | 32;
  /** Query rows per tile of the loop over queries (a multiple of 16, at most 128). */
  readonly blockQ: number;
  /** __launch_bounds__ minimum blocks per SM (caps registers at 65536 / (32·warps·minBlocks)). */
  readonly minBlocks: number;
}

/** The dQ kernel's block: W warps of RQ = 16·MT queries each (BQ = W·RQ queries per block). */
export interface FlashDqTile {
  readonly warps: number;
  /** Query rows per warp: 16 or 32 (each K/V fragment feeding two mma). */
  readonly rowsPerWarp: 16 | 32;
  /** Keys per K/V tile (a multiple of 16, at most 128). */
  readonly blockK: number;
  readonly minBlocks: number;
}

export interface FlashBackwardTile {
  readonly dkdv: FlashDkDvTile;
  readonly dq: FlashDqTile;
}

export interface FlashBackwardSpec {
  readonly dtype: FlashBackwardDType;
  /** d, baked in: a multiple of 16, at most MAX_HEAD_DIM. */
  readonly headDim: number;
  readonly causal: boolean;
  /** Padding mask from keyLengths. */
  readonly padding: boolean;
  /** Default: defaultFlashBackwardTile(headDim). */
  readonly tile?: FlashBackwardTile;
  /** Attention dropout, redrawn (flash-lib.ts). */
  readonly dropout?: boolean;
  /** Packed variable-length sequences. */
  readonly varlen?: boolean;
}

export type FlashBackwardKernel = 'preprocess' | 'dkdv' | 'dq';

/** Threads of the preprocess kernel (a quad per row). */
export const FLASH_BACKWARD_THREADS = 128;
/** Rows per preprocess block (a quad of threads per row). */
const PREPROCESS_ROWS = FLASH_BACKWARD_THREADS / 4;
/** dK and dV live in registers: d/2 floats each per thread; past 128 they no longer fit beside S and dP. */
export const MAX_HEAD_DIM = 128;
const MAX_GRID_YZ = 65535;

/**
 * The tiles per head dimension, from the sweep of bench/attention.ts on the H200 (bf16, L = 4096,
 * 2026-11-29; backward TFLOP/s non-causal / causal against the previous 4 warps × 16 rows everywhere):
 *   d ≤ 64   dK/dV 4 warps × 32 keys, 32-query tiles 229 / 211 (was 197 / 184); dQ 4 warps × 32 rows,
 *            32-key tiles 212 / 190 (was 197 / 184) — two m-tiles per warp halve the ldmatrix per mma.
 *   d ≤ 128  dK/dV 4 warps × 16 keys (registers: d for dK, dV + BQ for Sᵀ, dPᵀ; BQ = 64 would pass 255
 *            at d = 128, so it halves); dQ 8 warps × 32 rows, 32-key tiles 209 / 201 (was 196 / 195).
 */
export function defaultFlashBackwardTile(headDim: number): FlashBackwardTile {
  if (headDim <= 64) {
    return {
      dkdv: { warps: 4, keysPerWarp: 32, blockQ: 32, minBlocks: 1 },
      dq: { warps: 4, rowsPerWarp: 32, blockK: 32, minBlocks: 1 },
    };
  }
  return {
    dkdv: { warps: 4, keysPerWarp: 16, blockQ: headDim > 96 ? 32 : 64, minBlocks: 1 },
    dq: headDim > 96 ? { warps: 8, rowsPerWarp: 32, blockK: 32, minBlocks: 1 } : { warps: 4, rowsPerWarp: 16, blockK: 64, minBlocks: 1 },
  };
}

/**
 * The candidates bench/attention.ts sweeps against the default tiles (L = 4096), per d; every one
 * compiles without spills (registers in the header) and test/gpu/flash-tiles.test.ts checks each
 * against the CPU reference.
 */
export const FLASH_DKDV_SWEEP: Readonly<Record<number, readonly FlashDkDvTile[]>> = {
  64: [
    { warps: 8, keysPerWarp: 16, blockQ: 64, minBlocks: 1 },   // 128 keys per block: Q, dO re-read half as often
    { warps: 4, keysPerWarp: 16, blockQ: 64, minBlocks: 1 },   // the previous default: 64 keys per block
    { warps: 8, keysPerWarp: 32, blockQ: 32, minBlocks: 1 },   // 256 keys
    { warps: 4, keysPerWarp: 16, blockQ: 32, minBlocks: 3 },   // ≤ 170 registers: 3 blocks an SM
  ],
  128: [
    { warps: 8, keysPerWarp: 16, blockQ: 32, minBlocks: 1 },   // 128 keys per block
    { warps: 4, keysPerWarp: 16, blockQ: 16, minBlocks: 1 },
    { warps: 4, keysPerWarp: 16, blockQ: 16, minBlocks: 3 },   // ≤ 170 registers: 3 blocks an SM
  ],
};
export const FLASH_DQ_SWEEP: Readonly<Record<number, readonly FlashDqTile[]>> = {
  64: [
    { warps: 8, rowsPerWarp: 16, blockK: 64, minBlocks: 1 },   // 128 queries per block: K, V re-read half as often
    { warps: 4, rowsPerWarp: 16, blockK: 64, minBlocks: 1 },   // the previous default: 64 queries per block
    { warps: 8, rowsPerWarp: 32, blockK: 32, minBlocks: 1 },   // 256 queries
    { warps: 8, rowsPerWarp: 16, blockK: 32, minBlocks: 2 },   // ≤ 128 registers: 16 warps an SM
    { warps: 4, rowsPerWarp: 16, blockK: 64, minBlocks: 3 },   // ≤ 170 registers: 3 blocks an SM
  ],
  128: [
    { warps: 8, rowsPerWarp: 16, blockK: 64, minBlocks: 1 },
    { warps: 8, rowsPerWarp: 16, blockK: 32, minBlocks: 2 },   // ≤ 128 registers: 16 warps an SM
    { warps: 4, rowsPerWarp: 16, blockK: 64, minBlocks: 1 },   // the previous default
  ],
};

/** Keys per dK/dV block and queries per dQ block. */
export function dkdvBlockKeys(t: FlashDkDvTile): number { return t.warps * t.keysPerWarp; }
export function dqBlockRows(t: FlashDqTile): number { return t.warps * t.rowsPerWarp; }

/** Why a tile cannot be generated, or null when it can. */
export function flashBackwardTileProblem(tile: FlashBackwardTile): string | null {
  const { dkdv, dq } = tile;
  for (const [name, w] of [['dkdv', dkdv.warps], ['dq', dq.warps]] as const) {
    if (![1, 2, 4, 8].includes(w)) return `${name} tile warps must be 1, 2, 4 or 8, got ${w}`;
  }
  if (dkdv.keysPerWarp !== 16 && dkdv.keysPerWarp !== 32) return `dkdv tile keysPerWarp must be 16 or 32, got ${String(dkdv.keysPerWarp)}`;
  if (dq.rowsPerWarp !== 16 && dq.rowsPerWarp !== 32) return `dq tile rowsPerWarp must be 16 or 32, got ${String(dq.rowsPerWarp)}`;
  if (dkdv.blockQ < 16 || dkdv.blockQ > 128 || dkdv.blockQ % 16 !== 0) return `dkdv tile blockQ must be a multiple of 16 in [16, 128], got ${dkdv.blockQ}`;
  if (dq.blockK < 16 || dq.blockK > 128 || dq.blockK % 16 !== 0) return `dq tile blockK must be a multiple of 16 in [16, 128], got ${dq.blockK}`;
  for (const [name, b] of [['dkdv', dkdv.minBlocks], ['dq', dq.minBlocks]] as const) {
    if (!Number.isInteger(b) || b < 1 || b > 4) return `${name} tile minBlocks must be 1..4, got ${b}`;
  }
  return null;
}

/** The head dimensions and dtypes these kernels take. */
export function flashBackwardSupports(dtype: FloatDType, headDim: number): dtype is FlashBackwardDType {
  return (dtype === 'bf16' || dtype === 'f16') && headDim % 16 === 0 && headDim >= 16 && headDim <= MAX_HEAD_DIM;
}

function tileOf(s: FlashBackwardSpec): FlashBackwardTile {
  return s.tile ?? defaultFlashBackwardTile(s.headDim);
}

/** Warps (when not 4) and min blocks (when above 1) join the key; BQ and BK fix the rows per warp. */
function shapeSuffix(warps: number, minBlocks: number): string {
  return `${warps !== 4 ? `.w${warps}` : ''}${minBlocks > 1 ? `.b${minBlocks}` : ''}`;
}

export function flashBackwardKey(kernel: FlashBackwardKernel, s: FlashBackwardSpec): string {
  const features = `${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}${s.varlen ? '.varlen' : ''}${s.dropout ? '.dropout' : ''}`;
  const { dkdv, dq } = tileOf(s);
  switch (kernel) {
    case 'preprocess': return `flash_attention_backward_preprocess.${s.dtype}.d${s.headDim}${s.varlen ? '.varlen' : ''}`;
    case 'dkdv': return `flash_attention_backward_dkdv.${s.dtype}.d${s.headDim}.q${dkdv.blockQ}.k${dkdvBlockKeys(dkdv)}${shapeSuffix(dkdv.warps, dkdv.minBlocks)}.mma${features}`;
    case 'dq': return `flash_attention_backward_dq.${s.dtype}.d${s.headDim}.q${dqBlockRows(dq)}.k${dq.blockK}${shapeSuffix(dq.warps, dq.minBlocks)}.mma${features}`;
  }
}

/** Dynamic shared memory of each kernel, in bytes (the layouts are in the header comment). */
export function flashBackwardSharedBytes(kernel: FlashBackwardKernel, headDim: number, tile: FlashBackwardTile = defaultFlashBackwardTile(headDim)): number {
  const row = 2 * (headDim + 8);
  switch (kernel) {
    case 'preprocess': return 0;
    case 'dkdv': { const bq = tile.dkdv.blockQ; return (2 * dkdvBlockKeys(tile.dkdv) + 4 * bq) * row + 16 * bq; }
    case 'dq': return (2 * dqBlockRows(tile.dq) + 4 * tile.dq.blockK) * row;
  }
}

// ---- sources -----------------------------------------------------------------------------------------

function preamble(spec: FlashBackwardSpec, threads: number, minBlocks: number | undefined, values: Record<string, number | boolean>, tiles: boolean): string {
  return `${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ D: spec.headDim, THREADS: threads, VARLEN: spec.varlen ?? false, ...values })}
${launchBoundsMacro(threads, minBlocks !== undefined && minBlocks > 1 ? minBlocks : undefined)}
${tiles ? MMA_LIB + FLASH_LIB + TILE_DEVICE_CODE : ''}`;
}

/**
 * Sequence b's rows in the dense [B, H, L, D] or packed [total, H, D] (VARLEN) layout: lengths, element
 * offsets of a head's row 0, the per-row index (lse, D, dropout rows). Needs the constants D and VARLEN;
 * shared with flash-backward-wgmma.ts.
 */
export const SEQUENCE_DEVICE_CODE = String.raw`// Sequence b's query and key rows: lengths, and (VARLEN) the first packed row of each.
struct Sequence { int q_len, k_len, q_start, k_start; };
__device__ __forceinline__ Sequence sequence_of(int b, int q_len, int k_len, const int* cu_q, const int* cu_k) {
  if constexpr (VARLEN) {
    const int qs = cu_q[b], ks = cu_k[b];
    return { max(0, cu_q[b + 1] - qs), max(0, cu_k[b + 1] - ks), qs, ks };
  } else {
    return { q_len, k_len, 0, 0 };
  }
}
// Element offset of row 0 of query head hq's [len, D] rows (or of kv head hk's), its row stride, and
// the per-row index (lse, D, dropout rows) of query head hq's row 0.
__device__ __forceinline__ long long q_rows_offset(const Sequence& s, int b, int hq, int q_heads) {
  return VARLEN ? ((long long)s.q_start * q_heads + hq) * D : ((long long)b * q_heads + hq) * s.q_len * D;
}
__device__ __forceinline__ long long kv_rows_offset(const Sequence& s, int b, int hk, int kv_heads) {
  return VARLEN ? ((long long)s.k_start * kv_heads + hk) * D : ((long long)b * kv_heads + hk) * s.k_len * D;
}
__device__ __forceinline__ long long row_index_base(const Sequence& s, int b, int hq, int q_heads, int total_q) {
  return VARLEN ? (long long)hq * total_q + s.q_start : ((long long)b * q_heads + hq) * s.q_len;
}
`;

/**
 * Shared tiles of rows [row0, row0 + ROWS) of a [len, D] matrix with row stride "stride" elements
 * in global memory; shared row stride SD = D + 8 elements, so the 8 rows of an ldmatrix phase (or of
 * a warp's accumulator stores) hit 8 distinct bank groups for every D (2·SD bytes is an odd multiple
 * of 16). Tiles are addressed as u32 shared byte addresses. The block decode and the sequence layout
 * are shared by both kernels.
 */
const TILE_DEVICE_CODE = String.raw`
constexpr int WARPS = THREADS / 32;
constexpr int SD = D + 8;           // shared row stride in elements
constexpr int ROW_BYTES = 2 * SD;
constexpr int CHUNKS = D / 8;       // 16-byte chunks per row, and n8 tiles across d
constexpr int KD = D / 16;          // k16 steps across d, and pairs of n8 tiles
static_assert(D % 16 == 0, "head dimension must be a multiple of 16");

// Rows past len are zero-filled (and their source clamped to row 0, a valid address).
template <int ROWS>
__device__ __forceinline__ void load_rows_async(u32 dst, const T* __restrict__ src, int row0, int len, int stride) {
  constexpr int TOTAL = ROWS * CHUNKS;
  #pragma unroll
  for (int n = 0; n < (TOTAL + THREADS - 1) / THREADS; n++) {
    const int idx = n * THREADS + threadIdx.x;
    if (TOTAL % THREADS == 0 || idx < TOTAL) {
      const int r = idx / CHUNKS, c = idx - r * CHUNKS;
      const bool in = row0 + r < len;
      cp_async_16(dst + r * ROW_BYTES + c * 16, src + (long long)(in ? row0 + r : 0) * stride + c * 8, in);
    }
  }
}
// Entries [row0, row0 + ROWS) of a per-row f32 array, zeros past len.
template <int ROWS>
__device__ __forceinline__ void load_floats_async(u32 dst, const float* __restrict__ src, int row0, int len) {
  for (int r = threadIdx.x; r < ROWS; r += THREADS) {
    const bool in = row0 + r < len;
    cp_async_4(dst + 4 * r, src + (in ? row0 + r : 0), in);
  }
}
// A staged [ROWS][SD] tile of T to rows [row0, row0 + ROWS) of dst below len, as 16-byte stores.
template <int ROWS>
__device__ __forceinline__ void store_rows(T* __restrict__ dst, const T* staged, int row0, int len, int stride) {
  for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += THREADS) {
    const int r = idx / CHUNKS, c = idx - r * CHUNKS;
    if (row0 + r < len)
      *reinterpret_cast<uint4*>(dst + (long long)(row0 + r) * stride + c * 8) = *reinterpret_cast<const uint4*>(staged + r * SD + c * 8);
  }
}
// Accumulators of n8 tile n (rows g and g + 8 of a warp's m16 tile, columns 8n + 2t, +1), times "mul",
// rounded to T into a staged [rows][SD] tile at row "row0" (the m16 tile's first row).
template <int TILES>
__device__ __forceinline__ void stage_accumulators(T* staged, int row0, const float (&acc)[TILES][4], float mul) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  #pragma unroll
  for (int n = 0; n < TILES; n++) {
    *reinterpret_cast<u32*>(staged + (row0 + g) * SD + n * 8 + 2 * t) = pack2<T>(mul * acc[n][0], mul * acc[n][1]);
    *reinterpret_cast<u32*>(staged + (row0 + g + 8) * SD + n * 8 + 2 * t) = pack2<T>(mul * acc[n][2], mul * acc[n][3]);
  }
}
// The A fragment (16×16) made of the accumulators of n8 tiles n and n + 1 (mma-lib.ts).
__device__ __forceinline__ void accumulators_to_a(u32 (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}
${SEQUENCE_DEVICE_CODE}`;

export function flashBackwardPreprocessSource(spec: FlashBackwardSpec): KernelSource {
  const name = kernelIdentifier(flashBackwardKey('preprocess', spec));
  const body = String.raw`
constexpr float LOG2E = 1.4426950408889634f;
// D_i = Σ_c dOut_ic·out_ic and lse_i·log2 e (+∞ where lse = −∞) for every row i of lse's layout:
// [B·Hq·Lq] rows of D elements, or (VARLEN) row h·total_q + token of [total_q, q_heads, D].
extern "C" __global__ void KERNEL_BOUNDS ${name}(const T* __restrict__ out, const T* __restrict__ dout,
    const float* __restrict__ lse, float* __restrict__ delta, float* __restrict__ lse_log2, long long rows,
    int total_q, int q_heads) {
  const long long row = (long long)blockIdx.x * (THREADS / 4) + (threadIdx.x >> 2);
  const int t4 = threadIdx.x & 3;
  long long at = row * D;
  if (VARLEN && row < rows) {
    const long long h = row / total_q, token = row - h * total_q;
    at = (token * q_heads + h) * D;
  }
  float part = 0.f;
  if (row < rows) {
    for (int c = t4 * 8; c < D; c += 32) {
      const Vec<T, 8> o = load_vec<T, 8>(out + at + c), g = load_vec<T, 8>(dout + at + c);
      #pragma unroll
      for (int e = 0; e < 8; e++) part += to_float(o.v[e]) * to_float(g.v[e]);
    }
  }
  part += __shfl_xor_sync(0xffffffffu, part, 1);
  part += __shfl_xor_sync(0xffffffffu, part, 2);
  if (row < rows && t4 == 0) {
    const float l = lse[row];
    delta[row] = part;
    lse_log2[row] = l == __int_as_float(0xff800000) ? __int_as_float(0x7f800000) : l * LOG2E;
  }
}
`;
  return { name, source: preamble(spec, FLASH_BACKWARD_THREADS, undefined, {}, false) + body };
}

const BACKWARD_PARAMS = 'const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, ' +
  'const float* __restrict__ delta, const float* __restrict__ lse_log2';
const SHAPE_PARAMS = 'const int* __restrict__ key_lengths, int q_len, int k_len, int q_heads, int group, float scale, float scale_log2e, int section_heads';

export function flashBackwardDkDvSource(spec: FlashBackwardSpec): KernelSource {
  const tile = tileOf(spec);
  const problem = flashBackwardTileProblem(tile);
  if (problem) throw new RangeError(`flashBackwardDkDvSource: ${problem}`);
  const name = kernelIdentifier(flashBackwardKey('dkdv', spec));
  const t = tile.dkdv;
  const body = String.raw`
constexpr int RK = 16 * MT;  // keys per warp
static_assert(BK == WARPS * RK && BQ % 16 == 0, "a warp per RK keys");
constexpr int QT = BQ / 8;   // n8 tiles across the query tile

extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}, T* __restrict__ dk, T* __restrict__ dv,
    ${SHAPE_PARAMS}, ${VARLEN_PARAMS}, ${ATTENTION_DROPOUT_PARAMS}) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem);   // [BK][SD]
  T* vs = ks + BK * SD;                 // [BK][SD]
  T* qs = vs + BK * SD;                 // [2][BQ][SD]
  T* dos = qs + 2 * BQ * SD;            // [2][BQ][SD]
  float* dd_s = reinterpret_cast<float*>(dos + 2 * BQ * SD);  // [2][BQ]: D
  float* l2_s = dd_s + 2 * BQ;                                 // [2][BQ]: lse·log2 e
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int tile_rank, head;
  decode_block(section_heads, tile_rank, head);    // causal: the first kv tiles (the most queries) first
  const int kv_heads = q_heads / group;
  const int b = head / kv_heads, kv_head = head - b * kv_heads;
  const int j0 = tile_rank * BK;
  const Sequence seq = sequence_of(b, q_len, k_len, cu_seqlens_q, cu_seqlens_k);
  if (VARLEN && j0 >= seq.k_len) return;  // the whole block: no rows of this sequence here
  const int q_stride = VARLEN ? q_heads * D : D, kv_stride = VARLEN ? kv_heads * D : D;
  const long long kv_off = kv_rows_offset(seq, b, kv_head, kv_heads);
  const int valid = PADDING ? max(0, min(key_lengths[b], seq.k_len)) : seq.k_len;
  const int offset_causal = seq.k_len - seq.q_len;  // causal: query i sees keys j <= i + offset_causal
  // Query i sees key j0 from i = j0 − offset on; nothing sees a tile past the padding.
  const int i_start = CAUSAL ? (max(0, j0 - offset_causal) / BQ) * BQ : 0;
  const int tiles = j0 < valid && i_start < seq.q_len ? (seq.q_len - i_start + BQ - 1) / BQ : 0;
  const int iterations = tiles * group;   // (query head of the group, query tile), head-major
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const bool drop_aligned = drop_stride % 8 == 0;

  auto load_query_tile = [&](int it, int stage) {
    const int hh = it / tiles, i0 = i_start + (it - hh * tiles) * BQ;
    const int hq = kv_head * group + hh;
    const long long rows = row_index_base(seq, b, hq, q_heads, total_q);
    const long long q_off = q_rows_offset(seq, b, hq, q_heads);
    load_rows_async<BQ>(smem_u32(qs + stage * BQ * SD), q + q_off, i0, seq.q_len, q_stride);
    load_rows_async<BQ>(smem_u32(dos + stage * BQ * SD), dout + q_off, i0, seq.q_len, q_stride);
    load_floats_async<BQ>(smem_u32(dd_s + stage * BQ), delta + rows, i0, seq.q_len);
    load_floats_async<BQ>(smem_u32(l2_s + stage * BQ), lse_log2 + rows, i0, seq.q_len);
  };
  if (iterations > 0) {
    load_rows_async<BK>(smem_u32(ks), k + kv_off, j0, seq.k_len, kv_stride);
    load_rows_async<BK>(smem_u32(vs), v + kv_off, j0, seq.k_len, kv_stride);
    load_query_tile(0, 0);
  }
  cp_async_commit();

  float dk_acc[MT][CHUNKS][4], dv_acc[MT][CHUNKS][4];
  #pragma unroll
  for (int mt = 0; mt < MT; mt++)
    #pragma unroll
    for (int n = 0; n < CHUNKS; n++)
      #pragma unroll
      for (int e = 0; e < 4; e++) { dk_acc[mt][n][e] = 0.f; dv_acc[mt][n][e] = 0.f; }
  // This lane's ldmatrix addresses (mma-lib.ts): A operands and .trans B operands from row-major
  // [m or k][..] tiles use (a_row, a_col); B operands from row-major [n][k] tiles use (b_row, b_col).
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
  const u32 k_frag = smem_u32(ks + (warp * RK + a_row) * SD + a_col);   // + mt·16 rows
  const u32 v_frag = smem_u32(vs + (warp * RK + a_row) * SD + a_col);

  for (int it = 0; it < iterations; it++) {
    const int stage = it & 1;
    if (it + 1 < iterations) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // this stage's tile (and K, V) landed for every thread
    const int hh = it / tiles, i0 = i_start + (it - hh * tiles) * BQ;
    const u32 q_b = smem_u32(qs + stage * BQ * SD + b_row * SD + b_col);
    const u32 do_b = smem_u32(dos + stage * BQ * SD + b_row * SD + b_col);
    const u32 q_bt = smem_u32(qs + stage * BQ * SD + a_row * SD + a_col);
    const u32 do_bt = smem_u32(dos + stage * BQ * SD + a_row * SD + a_col);
    const float* ddt = dd_s + stage * BQ;
    const float* l2t = l2_s + stage * BQ;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this warp's RK keys × BQ queries; each Q/dO fragment feeds MT mma.
    float st[MT][QT][4], dpt[MT][QT][4];
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
      #pragma unroll
      for (int n = 0; n < QT; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) { st[mt][n][e] = 0.f; dpt[mt][n][e] = 0.f; }
    #pragma unroll
    for (int kk = 0; kk < KD; kk++) {
      u32 ak[MT][4], av[MT][4];
      #pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        ldsm_x4(k_frag + mt * 16 * ROW_BYTES + kk * 32, ak[mt]);
        ldsm_x4(v_frag + mt * 16 * ROW_BYTES + kk * 32, av[mt]);
      }
      #pragma unroll
      for (int np = 0; np < QT / 2; np++) {
        u32 bq[4], bo[4];
        ldsm_x4(q_b + np * 16 * ROW_BYTES + kk * 32, bq);
        ldsm_x4(do_b + np * 16 * ROW_BYTES + kk * 32, bo);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma_16816<T>(st[mt][2 * np], ak[mt], bq[0], bq[1]);
          mma_16816<T>(st[mt][2 * np + 1], ak[mt], bq[2], bq[3]);
          mma_16816<T>(dpt[mt][2 * np], av[mt], bo[0], bo[1]);
          mma_16816<T>(dpt[mt][2 * np + 1], av[mt], bo[2], bo[3]);
        }
      }
    }
    // Pᵀ (times z/(1 − p) with dropout) and dSᵀ in place. Element (mt, n, e): key
    // j0 + RK·warp + 16mt + g + 8·(e/2), query i0 + 8n + 2t + e%2.
    const bool masked = (PADDING && j0 + BK > valid) || (CAUSAL && i0 + offset_causal < j0 + BK - 1);
    [[maybe_unused]] const long long q_rows = row_index_base(seq, b, kv_head * group + hh, q_heads, total_q);
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      #pragma unroll
      for (int np = 0; np < QT / 2; np++) {
        u32 keep = 0xffffffffu;
        if constexpr (DROPOUT)
          keep = transposed_keep_bits(seed, offset, threshold, (u64)(q_rows + i0 + 16 * np + 2 * t) * (u64)drop_stride, drop_stride,
                                      j0 + warp * RK + 16 * mt, drop_aligned);
        #pragma unroll
        for (int nn = 0; nn < 2; nn++) {
          const int n = 2 * np + nn;
          const float2 l2 = *reinterpret_cast<const float2*>(l2t + n * 8 + 2 * t);
          const float2 dd = *reinterpret_cast<const float2*>(ddt + n * 8 + 2 * t);
          #pragma unroll
          for (int e = 0; e < 4; e++) {
            float p = exp2_fast(fmaf(st[mt][n][e], scale_log2e, -((e & 1) ? l2.y : l2.x)));
            if (masked) {
              const int j = j0 + warp * RK + 16 * mt + g + (e >> 1) * 8, i = i0 + n * 8 + 2 * t + (e & 1);
              if ((PADDING && j >= valid) || (CAUSAL && j > i + offset_causal)) p = 0.f;
            }
            const float d_i = (e & 1) ? dd.y : dd.x;
            if constexpr (DROPOUT) {
              const bool kept = (keep >> (4 * nn + 2 * (e & 1) + (e >> 1))) & 1u;
              st[mt][n][e] = kept ? p * keep_scale : 0.f;
              dpt[mt][n][e] = p * ((kept ? dpt[mt][n][e] * keep_scale : 0.f) - d_i);
            } else {
              st[mt][n][e] = p;
              dpt[mt][n][e] = p * (dpt[mt][n][e] - d_i);
            }
          }
        }
      }
    }
    // dV += Pᵀ·dO and dK += dSᵀ·Q over the tile's queries (k), across d (n); each dO/Q fragment feeds MT mma.
    #pragma unroll
    for (int kq = 0; kq < BQ / 16; kq++) {
      u32 ap[MT][4], as[MT][4];
      #pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        accumulators_to_a(ap[mt], st[mt][2 * kq], st[mt][2 * kq + 1]);
        accumulators_to_a(as[mt], dpt[mt][2 * kq], dpt[mt][2 * kq + 1]);
      }
      #pragma unroll
      for (int np = 0; np < KD; np++) {
        u32 bo[4], bq[4];
        ldsm_x4_trans(do_bt + kq * 16 * ROW_BYTES + np * 32, bo);
        ldsm_x4_trans(q_bt + kq * 16 * ROW_BYTES + np * 32, bq);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma_16816<T>(dv_acc[mt][2 * np], ap[mt], bo[0], bo[1]);
          mma_16816<T>(dv_acc[mt][2 * np + 1], ap[mt], bo[2], bo[3]);
          mma_16816<T>(dk_acc[mt][2 * np], as[mt], bq[0], bq[1]);
          mma_16816<T>(dk_acc[mt][2 * np + 1], as[mt], bq[2], bq[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // K and V are no longer read (and no copy into them is in flight): stage dK, dV there
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    stage_accumulators<CHUNKS>(ks, warp * RK + 16 * mt, dk_acc[mt], scale);
    stage_accumulators<CHUNKS>(vs, warp * RK + 16 * mt, dv_acc[mt], 1.f);
  }
  __syncthreads();
  store_rows<BK>(dk + kv_off, ks, j0, seq.k_len, kv_stride);
  store_rows<BK>(dv + kv_off, vs, j0, seq.k_len, kv_stride);
}
`;
  const values = { BK: dkdvBlockKeys(t), BQ: t.blockQ, MT: t.keysPerWarp / 16, CAUSAL: spec.causal, PADDING: spec.padding, DROPOUT: spec.dropout ?? false };
  return { name, source: preamble(spec, 32 * t.warps, t.minBlocks, values, true) + body };
}

export function flashBackwardDqSource(spec: FlashBackwardSpec): KernelSource {
  const tile = tileOf(spec);
  const problem = flashBackwardTileProblem(tile);
  if (problem) throw new RangeError(`flashBackwardDqSource: ${problem}`);
  const name = kernelIdentifier(flashBackwardKey('dq', spec));
  const t = tile.dq;
  const body = String.raw`
constexpr int RQ = 16 * MT;   // queries per warp
static_assert(BQ == WARPS * RQ && BKV % 16 == 0, "a warp per RQ queries");
constexpr int KT = BKV / 8;   // n8 tiles across the key tile

extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}, T* __restrict__ dq,
    ${SHAPE_PARAMS}, ${VARLEN_PARAMS}, ${ATTENTION_DROPOUT_PARAMS}) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);   // [BQ][SD]
  T* dos = qs + BQ * SD;                // [BQ][SD]
  T* ks = dos + BQ * SD;                // [2][BKV][SD]
  T* vs = ks + 2 * BKV * SD;            // [2][BKV][SD]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int tile_rank, head;
  decode_block(section_heads, tile_rank, head);
  const int b = head / q_heads, h = head - b * q_heads;
  // Causal: the last query tiles see the most keys, so they start first.
  const int q0 = (CAUSAL ? (int)gridDim.x - 1 - tile_rank : tile_rank) * BQ;
  const Sequence seq = sequence_of(b, q_len, k_len, cu_seqlens_q, cu_seqlens_k);
  if (VARLEN && q0 >= seq.q_len) return;  // the whole block
  const int kv_heads = q_heads / group;
  const int q_stride = VARLEN ? q_heads * D : D, kv_stride = VARLEN ? kv_heads * D : D;
  const long long q_off = q_rows_offset(seq, b, h, q_heads);
  const long long kv_off = kv_rows_offset(seq, b, h / group, kv_heads);
  const long long q_rows = row_index_base(seq, b, h, q_heads, total_q);
  const int key_limit = PADDING ? max(0, min(key_lengths[b], seq.k_len)) : seq.k_len;
  const int offset_causal = seq.k_len - seq.q_len;  // causal: query i sees keys j <= i + offset_causal
  // The tile's last row sees the most keys.
  const int kv_end = CAUSAL ? max(0, min(key_limit, min(q0 + BQ, seq.q_len) + offset_causal)) : key_limit;
  const int kv_tiles = (kv_end + BKV - 1) / BKV;
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const bool drop_aligned = drop_stride % 8 == 0;

  if (kv_tiles > 0) {
    load_rows_async<BQ>(smem_u32(qs), q + q_off, q0, seq.q_len, q_stride);
    load_rows_async<BQ>(smem_u32(dos), dout + q_off, q0, seq.q_len, q_stride);
    load_rows_async<BKV>(smem_u32(ks), k + kv_off, 0, seq.k_len, kv_stride);
    load_rows_async<BKV>(smem_u32(vs), v + kv_off, 0, seq.k_len, kv_stride);
  }
  cp_async_commit();
  // This thread's rows: q0 + RQ·warp + 16mt + g and 8 below. Rows past the sequence: D = lse = 0 (never stored).
  int rows[MT][2];
  float dd[MT][2], l2[MT][2];
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    #pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      rows[mt][hf] = q0 + warp * RQ + 16 * mt + g + 8 * hf;
      const bool in = rows[mt][hf] < seq.q_len;
      dd[mt][hf] = in ? delta[q_rows + rows[mt][hf]] : 0.f;
      l2[mt][hf] = in ? lse_log2[q_rows + rows[mt][hf]] : 0.f;
    }
  }
  float dq_acc[MT][CHUNKS][4];
  #pragma unroll
  for (int mt = 0; mt < MT; mt++)
    #pragma unroll
    for (int n = 0; n < CHUNKS; n++)
      #pragma unroll
      for (int e = 0; e < 4; e++) dq_acc[mt][n][e] = 0.f;
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
  const u32 q_frag = smem_u32(qs + (warp * RQ + a_row) * SD + a_col);   // + mt·16 rows
  const u32 do_frag = smem_u32(dos + (warp * RQ + a_row) * SD + a_col);

  for (int jt = 0; jt < kv_tiles; jt++) {
    const int stage = jt & 1, j0 = jt * BKV;
    if (jt + 1 < kv_tiles) {
      load_rows_async<BKV>(smem_u32(ks + (stage ^ 1) * BKV * SD), k + kv_off, j0 + BKV, seq.k_len, kv_stride);
      load_rows_async<BKV>(smem_u32(vs + (stage ^ 1) * BKV * SD), v + kv_off, j0 + BKV, seq.k_len, kv_stride);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const u32 k_b = smem_u32(ks + stage * BKV * SD + b_row * SD + b_col);
    const u32 v_b = smem_u32(vs + stage * BKV * SD + b_row * SD + b_col);
    const u32 k_bt = smem_u32(ks + stage * BKV * SD + a_row * SD + a_col);

    // S = Q·Kᵀ and dP = dO·Vᵀ for this warp's RQ queries × BKV keys; each K/V fragment feeds MT mma.
    float s[MT][KT][4], dp[MT][KT][4];
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
      #pragma unroll
      for (int n = 0; n < KT; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) { s[mt][n][e] = 0.f; dp[mt][n][e] = 0.f; }
    #pragma unroll
    for (int kk = 0; kk < KD; kk++) {
      u32 aq[MT][4], ao[MT][4];
      #pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        ldsm_x4(q_frag + mt * 16 * ROW_BYTES + kk * 32, aq[mt]);
        ldsm_x4(do_frag + mt * 16 * ROW_BYTES + kk * 32, ao[mt]);
      }
      #pragma unroll
      for (int np = 0; np < KT / 2; np++) {
        u32 bk[4], bv[4];
        ldsm_x4(k_b + np * 16 * ROW_BYTES + kk * 32, bk);
        ldsm_x4(v_b + np * 16 * ROW_BYTES + kk * 32, bv);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma_16816<T>(s[mt][2 * np], aq[mt], bk[0], bk[1]);
          mma_16816<T>(s[mt][2 * np + 1], aq[mt], bk[2], bk[3]);
          mma_16816<T>(dp[mt][2 * np], ao[mt], bv[0], bv[1]);
          mma_16816<T>(dp[mt][2 * np + 1], ao[mt], bv[2], bv[3]);
        }
      }
    }
    // dS in place of S. Element (mt, n, e): query rows[mt][e/2], key j0 + 8n + 2t + e%2. Keys past
    // Lk are masked here too: their zero-filled K gives S = 0, whose P is not 0.
    const bool masked = j0 + BKV > key_limit || (CAUSAL && j0 + BKV - 1 > q0 + offset_causal);
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      #pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        [[maybe_unused]] const u64 e0 = (u64)(q_rows + rows[mt][hf]) * (u64)drop_stride + (u64)j0;
        #pragma unroll
        for (int nb = 0; nb < (KT + 3) / 4; nb++) {
          u32 keep = 0xffffffffu;
          if constexpr (DROPOUT) keep = row_keep_bits(seed, offset, threshold, e0 + 32 * nb, drop_aligned);
          #pragma unroll
          for (int sub = 0; sub < 4; sub++) {
            const int n = 4 * nb + sub;
            if (n < KT) {
              #pragma unroll
              for (int c = 0; c < 2; c++) {
                const int e = 2 * hf + c;
                float p = exp2_fast(fmaf(s[mt][n][e], scale_log2e, -l2[mt][hf]));
                if (masked) {
                  const int j = j0 + n * 8 + 2 * t + c;
                  if (j >= key_limit || (CAUSAL && j > rows[mt][hf] + offset_causal)) p = 0.f;
                }
                if constexpr (DROPOUT) {
                  const bool kept = (keep >> (2 * sub + c)) & 1u;
                  s[mt][n][e] = p * ((kept ? dp[mt][n][e] * keep_scale : 0.f) - dd[mt][hf]);
                } else {
                  s[mt][n][e] = p * (dp[mt][n][e] - dd[mt][hf]);
                }
              }
            }
          }
        }
      }
    }
    // dQ += dS·K over the tile's keys (k), across d (n); each K fragment feeds MT mma.
    #pragma unroll
    for (int kk = 0; kk < BKV / 16; kk++) {
      u32 a[MT][4];
      #pragma unroll
      for (int mt = 0; mt < MT; mt++) accumulators_to_a(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
      #pragma unroll
      for (int np = 0; np < KD; np++) {
        u32 bk[4];
        ldsm_x4_trans(k_bt + kk * 16 * ROW_BYTES + np * 32, bk);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma_16816<T>(dq_acc[mt][2 * np], a[mt], bk[0], bk[1]);
          mma_16816<T>(dq_acc[mt][2 * np + 1], a[mt], bk[2], bk[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // Q is no longer read: stage dQ there
  #pragma unroll
  for (int mt = 0; mt < MT; mt++) stage_accumulators<CHUNKS>(qs, warp * RQ + 16 * mt, dq_acc[mt], scale);
  __syncthreads();
  store_rows<BQ>(dq + q_off, qs, q0, seq.q_len, q_stride);
}
`;
  const values = { BQ: dqBlockRows(t), BKV: t.blockK, MT: t.rowsPerWarp / 16, CAUSAL: spec.causal, PADDING: spec.padding, DROPOUT: spec.dropout ?? false };
  return { name, source: preamble(spec, 32 * t.warps, t.minBlocks, values, true) + body };
}

// ---- launcher ----------------------------------------------------------------------------------------

/** flashAttentionBackward's arguments after checkFlashAttentionBackward. */
export interface FlashBackwardProblem {
  q: Tensor; k: Tensor; v: Tensor; out: Tensor; dOut: Tensor; lse: Tensor;
  dq: Tensor; dk: Tensor; dv: Tensor;
  keyLengths: Tensor | undefined;
  scale: number;
  causal: boolean;
  /** With varlen: B sequences, Lq and Lk the max lengths. */
  B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; group: number;
  /** Packed sequences (flashAttentionBackward with cuSeqlens). */
  varlen?: VarlenLayout;
  /** The forward's attention dropout (p > 0). */
  dropout?: DropoutArgs;
}

const ALIGNED_TENSORS = ['q', 'k', 'v', 'out', 'dOut', 'dq', 'dk', 'dv'] as const;

/**
 * Whether the tensor-core kernels take this problem: f16/bf16, d a multiple of 16 up to 128, every
 * [.., d] tensor 16-byte aligned (cp.async and the 16-byte stores), and the grid and shared memory
 * within the device's limits. Otherwise the SIMT kernels run.
 */
export function flashBackwardApplies(host: KernelHost, check: OpCheck, p: FlashBackwardProblem, tile?: FlashBackwardTile): boolean {
  if (!flashBackwardSupports(p.q.dtype as FloatDType, p.d)) return false;
  if (p.Hq > MAX_GRID_YZ || p.B > MAX_GRID_YZ) return false;
  if (ALIGNED_TENSORS.some((name) => devicePtr(check, name, p[name]) % 16n !== 0n)) return false;
  const chosen = tile ?? defaultFlashBackwardTile(p.d);
  return Math.max(flashBackwardSharedBytes('dkdv', p.d, chosen), flashBackwardSharedBytes('dq', p.d, chosen)) <= host.maxSharedBytesPerBlock;
}

/**
 * preprocess (D, lse·log2 e into scratch) → dK/dV (a block per kv tile) → dQ (a block per query
 * tile). Call only where flashBackwardApplies. `tile` overrides the per-d default and `sectionHeads` the
 * launch-order sections of both kernels (the bench sweeps them; 1 = head-major).
 */
/**
 * Kernel 1, the preprocess: D_i and lse_i·log2 e of every row of lse's layout (B·Hq·Lq, or Hq·totalQ
 * packed) into the runtime's scratch; returns their device addresses (rows floats each). The GEMM
 * kernels of both backwards (this file's and flash-backward-wgmma.ts's) read them.
 */
export function launchBackwardPreprocess(host: KernelHost, check: OpCheck, p: FlashBackwardProblem): { delta: bigint; lseLog2: bigint } {
  const { B, Hq, Lq, varlen } = p;
  const rows = varlen ? Hq * varlen.totalQ : B * Hq * Lq;
  const delta = host.scratch(Math.max(16, 8 * rows));
  const lseLog2 = delta + BigInt(4 * rows);
  if (rows > 0) {
    const spec: FlashBackwardSpec = { dtype: p.q.dtype as FlashBackwardDType, headDim: p.d, causal: false, padding: false, ...(varlen ? { varlen: true } : {}) };
    const preprocess = host.kernel(flashBackwardKey('preprocess', spec), () => flashBackwardPreprocessSource(spec));
    preprocess.launch(
      { grid: Math.ceil(rows / PREPROCESS_ROWS), block: FLASH_BACKWARD_THREADS },
      [arg.ptr(devicePtr(check, 'out', p.out)), arg.ptr(devicePtr(check, 'dOut', p.dOut)), arg.ptr(devicePtr(check, 'lse', p.lse)),
        arg.ptr(delta), arg.ptr(lseLog2), arg.i64(BigInt(rows)), arg.i32(varlen ? varlen.totalQ : 0), arg.i32(Hq)],
    );
  }
  return { delta, lseLog2 };
}

export function flashAttentionBackwardTensorCore(host: KernelHost, check: OpCheck, p: FlashBackwardProblem, tile?: FlashBackwardTile, sectionHeads?: number): void {
  const { B, Hq, Hkv, Lq, Lk, d, group, scale, causal, keyLengths, varlen } = p;
  const chosen = tile ?? defaultFlashBackwardTile(d);
  const problem = flashBackwardTileProblem(chosen);
  if (problem) check.fail(problem);
  const dropout = p.dropout && p.dropout.p > 0 ? p.dropout : undefined;
  const spec: FlashBackwardSpec = {
    dtype: p.q.dtype as FlashBackwardDType, headDim: d, causal, padding: keyLengths !== undefined,
    ...(tile ? { tile } : {}), ...(dropout ? { dropout: true } : {}), ...(varlen ? { varlen: true } : {}),
  };
  const rows = varlen ? Hq * varlen.totalQ : B * Hq * Lq;
  const { delta, lseLog2 } = launchBackwardPreprocess(host, check, p);
  const inputs = [
    arg.ptr(devicePtr(check, 'q', p.q)), arg.ptr(devicePtr(check, 'k', p.k)), arg.ptr(devicePtr(check, 'v', p.v)),
    arg.ptr(devicePtr(check, 'dOut', p.dOut)), arg.ptr(delta), arg.ptr(lseLog2),
  ];
  const shape = (sectionHeads: number): KernelArg[] => [
    arg.ptr(keyLengths ? devicePtr(check, 'keyLengths', keyLengths) : 0n),
    arg.i32(Lq), arg.i32(Lk), arg.i32(Hq), arg.i32(group), arg.f32(scale), arg.f32(scale * Math.LOG2E), arg.i32(sectionHeads),
    ...varlenArgs(check, varlen),
    ...attentionDropoutArgs(dropout, varlen ? varlenDropoutStride(Lk) : Lk),
  ];
  if (B * Hkv * Lk > 0) {
    const dkdv = host.kernel(flashBackwardKey('dkdv', spec), () => flashBackwardDkDvSource(spec));
    // Causal sections: the Q and dO of a kv head's group stream through every kv tile of that head.
    const sections = varlen ? 1 : sectionHeads ?? flashSectionHeads(causal, false, B * Hkv, Lq, d, 1 / group);
    dkdv.launch(
      { grid: [Math.ceil(Lk / dkdvBlockKeys(chosen.dkdv)), Hkv, B], block: 32 * chosen.dkdv.warps, sharedBytes: flashBackwardSharedBytes('dkdv', d, chosen) },
      [...inputs, arg.ptr(devicePtr(check, 'dk', p.dk)), arg.ptr(devicePtr(check, 'dv', p.dv)), ...shape(sections)],
    );
  }
  if (rows > 0) {
    const dq = host.kernel(flashBackwardKey('dq', spec), () => flashBackwardDqSource(spec));
    const sections = varlen ? 1 : sectionHeads ?? flashSectionHeads(causal, false, B * Hq, Lk, d, group);
    dq.launch(
      { grid: [Math.ceil(Lq / dqBlockRows(chosen.dq)), Hq, B], block: 32 * chosen.dq.warps, sharedBytes: flashBackwardSharedBytes('dq', d, chosen) },
      [...inputs, arg.ptr(devicePtr(check, 'dq', p.dq)), ...shape(sections)],
    );
  }
}

// ---- catalog -------------------------------------------------------------------------------------------

/** The head dimensions of the models we build (GPT-2/BERT 64, 80, 96; Llama 128). */
export const CATALOG_HEAD_DIMS = [64, 80, 96, 128] as const;

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const headDim of CATALOG_HEAD_DIMS) {
      sources.push(flashBackwardPreprocessSource({ dtype, headDim, causal: false, padding: false }));
      for (const causal of [false, true]) {
        // Padding rotates with the head dimension so both settings compile with both masks.
        const spec: FlashBackwardSpec = { dtype, headDim, causal, padding: (headDim === 80 || headDim === 128) !== causal };
        sources.push(flashBackwardDkDvSource(spec), flashBackwardDqSource(spec));
      }
    }
  }
  // Two m16 tiles per warp and 8 warps (the sweep's other shapes), dropout, packed sequences — at head
  // dimensions outside CATALOG_HEAD_DIMS (48, 112, 32), so each catalog d keeps one kernel per mask.
  const wide: FlashBackwardTile = { dkdv: { warps: 8, keysPerWarp: 16, blockQ: 64, minBlocks: 1 }, dq: { warps: 4, rowsPerWarp: 32, blockK: 32, minBlocks: 1 } };
  const twoTiles: FlashBackwardTile = { dkdv: { warps: 4, keysPerWarp: 32, blockQ: 32, minBlocks: 1 }, dq: { warps: 8, rowsPerWarp: 16, blockK: 64, minBlocks: 2 } };
  sources.push(flashBackwardDkDvSource({ dtype: 'bf16', headDim: 48, causal: true, padding: false, tile: wide }), flashBackwardDqSource({ dtype: 'bf16', headDim: 48, causal: true, padding: false, tile: wide }));
  sources.push(flashBackwardDkDvSource({ dtype: 'f16', headDim: 48, causal: false, padding: true, tile: twoTiles }), flashBackwardDqSource({ dtype: 'f16', headDim: 48, causal: false, padding: true, tile: twoTiles }));
  const dropout: FlashBackwardSpec = { dtype: 'bf16', headDim: 32, causal: true, padding: true, dropout: true };
  const varlen: FlashBackwardSpec = { dtype: 'f16', headDim: 112, causal: true, padding: false, varlen: true, dropout: true };
  sources.push(flashBackwardDkDvSource(dropout), flashBackwardDqSource(dropout));
  sources.push(flashBackwardPreprocessSource(varlen), flashBackwardDkDvSource(varlen), flashBackwardDqSource(varlen));
  return sources;
}
