// FlashAttention forward on Hopper's warpgroup MMA (sm_90a: wgmma.mma_async), FlashAttention-3's
// schedule without its producer warps. Same math, masks and outputs as flash-forward.ts (backend.ts's
// contract): key j is visible to query i when j < n_i = min(Lk, keyLengths[b], causal ? i + Lk − Lq + 1 : Lk);
// out_i = Σ_j softmax_j(scale · q_i·k_j) v_j, lse_i = ln Σ_j exp(scale · q_i·k_j); no visible key gives
// out = 0, lse = −∞. [B, H, L, d] tensors or packed sequences (spec.varlen: flash-forward.ts's layout),
// d = 64 or 128, f16/bf16; attention.ts sends everything else (paged keys, other d, pre-Hopper GPUs) to
// flash-forward.ts. Attention dropout
// (spec.dropout) is flash-forward.ts's: dropped probabilities zeroed after the row sum, 1/(1 − p) folded
// into 1/l, the keep flags drawn by flash-lib.ts's row_keep_bits (the accumulator layout is mma.sync's).
//
// Why wgmma: mma.sync (flash-forward.ts) tops out near 300 TFLOP/s on the H200 because each warp feeds
// the tensor cores 16×8×16 at a time from registers it loaded with ldmatrix; a warpgroup's wgmma reads
// its operands straight from shared memory and runs asynchronously, so the softmax of one tile can run
// while the tensor cores multiply another.
//
// Mapping. A block of WGS warpgroups (128 threads each) owns BQ = 64·WGS query rows of one (batch, query
// head); warpgroup w owns rows 64w .. 64w + 63, warp i of it rows 16i .. 16i + 15. With wgmma's
// accumulator layout (wgmma-lib.ts) each thread owns two rows, a row's max and sum reduce over a quad
// with two shuffles, and the f32 scores of two adjacent n-tiles, packed to 16 bits, are exactly wgmma's
// A fragment from registers (as with mma.sync).
//   S = Q·Kᵀ    64 × BK per warpgroup: D/16 wgmma m64nBKk16, A = Q and B = K from shared memory, both
//               "K-major" (d contiguous).
//   O += P·V    64 × D: BK/16 wgmma m64nDk16, A = P from registers, B = V from shared memory read
//               "MN-major" (V is [key][d]: d, wgmma's N, contiguous; imm-trans-b = 1).
// Shared memory: Q and two stages of K and V in wgmma-lib.ts's 128-byte-swizzled layout (Q and K read
// K-major, V MN-major).
//
// Schedule per K/V tile j ≥ 1 (FA3's intra-warpgroup overlap; the first tile only computes S and P):
//   wait for K(j), V(j − 1) (cp.async + a proxy fence + one block barrier), issue the copies of K(j + 1)
//   and V(j) into the stages tiles j − 1 and j − 2 used; issue S(j) = Q·K(j)ᵀ, then O += P(j − 1)·V(j − 1),
//   two commit groups; wait for S(j) only, and run the masks and the online softmax of tile j while the
//   tensor cores still multiply P(j − 1)·V(j − 1); wait for that, rescale O by α(j) = 2^(c·(m(j−1) − m(j))),
//   keep P(j) for the next tile. After the last tile, O += P(last)·V(last).
// So O always holds Σ_{i<j} P(i)·V(i) relative to the max m(j − 1) when α(j) is applied: exactly the
// flash-forward.ts recurrence, one tile later. The online softmax is flash-forward.ts's: base 2 with
// c = scale·log2 e folded into one FFMA per score, a row with nothing visible yet shifting by 0, and O's
// rescale applied every tile (α = 1 exactly where a row's max did not move).
// Registers per thread (d = 128, BK = 128): S 64, O 64, P 32 (16-bit pairs), P(j) 32 while it forms:
// two warpgroups and one block an SM (160 KiB of shared memory: Q 32 KiB, two stages of K and V). At
// d = 64 the default (BK = 64) needs 114 registers, and two blocks share an SM.
// Block order: flash-forward.ts's (causal sections of heads, longest query tiles first).
// Masks: a tile is masked only if it reaches past the keys the warpgroup's first row sees (a
// warpgroup-uniform test, so the wgmma that follow stay converged); keys past Lk are zero-filled.
// Epilogue: O / l rounded to the dtype, 4-byte stores of each thread's pairs; lse = (m·c + log2 l)·ln 2.

import type { DropoutArgs } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import type { FlashForwardSizes, HalfDType } from './flash-forward.js';
import { flashSectionHeads } from './flash-forward.js';
import type { VarlenLayout } from './flash-lib.js';
import { ATTENTION_DROPOUT_OFFSET, ATTENTION_DROPOUT_PARAMS, attentionDropoutArgs, FLASH_LIB, VARLEN_PARAMS, varlenArgs, varlenDropoutStride } from './flash-lib.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';
import { WGMMA_LIB, wgmmaType, wgmmaWrappers } from './wgmma-lib.js';

// ---- spec ----------------------------------------------------------------------------------------------

export interface WgmmaForwardTile {
  /** Warpgroups per block, 64 query rows each (BQ = 64 · warpgroups). */
  readonly warpgroups: 1 | 2 | 3;
  /** Keys per K/V tile: wgmma's N for S (a multiple of 16, at most 256). */
  readonly blockK: number;
}

export interface WgmmaForwardSpec {
  readonly dtype: HalfDType;
  /** 64 or 128. */
  readonly headDim: number;
  readonly causal: boolean;
  readonly padding: boolean;
  readonly tile: WgmmaForwardTile;
  /** Attention dropout drawn in the kernel (flash-lib.ts: the same elements as every other path). */
  readonly dropout?: boolean;
  /** Packed variable-length sequences ([total, H, d], cuSeqlens). */
  readonly varlen?: boolean;
}

export const WGMMA_HEAD_DIMS: readonly number[] = [64, 128];

/**
 * Default tiles, from the sweep of bench/attention.ts on the H200 (bf16, B·L = 16k, 2026-12-02,
 * bench/results/gpu-pending-s15/call1; TFLOP/s non-causal / causal at L = 1k and 4k):
 *   d = 64   two warpgroups × 64 keys: 114 registers, so two blocks share an SM — 327 / 272, 366 / 345
 *            (three warpgroups × 128 keys, one block an SM: 267 / 185, 326 / 297).
 *   d = 128  two warpgroups × 128 keys (S 64 + O 64 + P 32 registers, 160 KiB shared) — 367 / 284,
 *            424 / 374 (× 64 keys: 353 / 279, 409 / 368).
 */
export function defaultWgmmaForwardTile(headDim: number): WgmmaForwardTile {
  return headDim <= 64 ? { warpgroups: 2, blockK: 64 } : { warpgroups: 2, blockK: 128 };
}

/** Tiles the attention benchmark sweeps; the default first. Each compiles without spills for sm_90a. */
export const WGMMA_FORWARD_SWEEP: Readonly<Record<number, readonly WgmmaForwardTile[]>> = {
  64: [{ warpgroups: 2, blockK: 64 }, { warpgroups: 2, blockK: 128 }, { warpgroups: 3, blockK: 128 }, { warpgroups: 3, blockK: 64 }],
  128: [{ warpgroups: 2, blockK: 128 }, { warpgroups: 2, blockK: 64 }, { warpgroups: 1, blockK: 128 }],
};

/** Whether the wgmma forward takes this problem (the caller also checks the GPU is sm_90). */
export function wgmmaForwardSupports(dtype: string, headDim: number): dtype is HalfDType {
  return (dtype === 'bf16' || dtype === 'f16') && WGMMA_HEAD_DIMS.includes(headDim);
}

/**
 * Packed sequences (varlen) on the wgmma kernels (default since session 16: the packed GPU tests pass and
 * they run 1.26–1.32× the mma.sync kernels forward, 1.17–1.51× forward+backward,
 * bench/results/gpu-pending-s16/call2/); FUSEFORMER_WGMMA_VARLEN=0 keeps them on the mma.sync kernels.
 */
export function wgmmaVarlenEnabled(): boolean {
  return process.env['FUSEFORMER_WGMMA_VARLEN'] !== '0';
}

/**
 * Whether an attention forward or backward goes to the wgmma kernels instead of mma.sync: an sm_90 GPU,
 * f16/bf16 with d = 64 or 128, dense or packed sequences with or without dropout (packed ones not with
 * FUSEFORMER_WGMMA_VARLEN=0; paged keys never). FUSEFORMER_WGMMA_ATTENTION=0 turns it off.
 */
export function wgmmaAttentionApplies(host: KernelHost, dtype: string, headDim: number, p: { varlen?: unknown; paged?: unknown }): dtype is HalfDType {
  if (process.env['FUSEFORMER_WGMMA_ATTENTION'] === '0') return false;
  return hostRunsWgmma(host) && wgmmaForwardSupports(dtype, headDim) && p.paged === undefined && (p.varlen === undefined || wgmmaVarlenEnabled());
}

/** Whether `host` runs sm_90a code (wgmma exists only on compute capability 9.0 exactly). */
export function hostRunsWgmma(host: KernelHost): boolean {
  return host.arch === 'sm_90';
}

export function wgmmaForwardSharedBytes(headDim: number, tile: WgmmaForwardTile): number {
  // Q, two stages of K and V, and 1 KiB to align the base to the swizzle's 1024-byte period.
  return (64 * tile.warpgroups + 4 * tile.blockK) * headDim * 2 + 1024;
}

export function wgmmaForwardKey(s: WgmmaForwardSpec): string {
  return `flash_forward_wgmma.${s.dtype}.d${s.headDim}.wg${s.tile.warpgroups}.k${s.tile.blockK}${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}${s.varlen ? '.varlen' : ''}${s.dropout ? '.dropout' : ''}`;
}

function tileProblem(headDim: number, tile: WgmmaForwardTile): string | null {
  if (!WGMMA_HEAD_DIMS.includes(headDim)) return `head dimension must be one of ${WGMMA_HEAD_DIMS.join(', ')}, got ${headDim}`;
  if (![1, 2, 3].includes(tile.warpgroups)) return `tile warpgroups must be 1, 2 or 3, got ${tile.warpgroups}`;
  if (!Number.isInteger(tile.blockK) || tile.blockK < 16 || tile.blockK > 256 || tile.blockK % 16 !== 0) return `tile blockK must be a multiple of 16 in [16, 256], got ${tile.blockK}`;
  return null;
}

// ---- source ----------------------------------------------------------------------------------------------

export function wgmmaForwardSource(spec: WgmmaForwardSpec): KernelSource {
  const problem = tileProblem(spec.headDim, spec.tile);
  if (problem) throw new RangeError(`wgmmaForwardSource: ${problem}`);
  const { headDim: D, tile } = spec;
  const name = kernelIdentifier(wgmmaForwardKey(spec));
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${FLASH_LIB}
${typedefLine('T', spec.dtype)}
${constants({ D, WGS: tile.warpgroups, BK: tile.blockK, CAUSAL: spec.causal, PADDING: spec.padding, DROPOUT: spec.dropout ?? false, VARLEN: spec.varlen ?? false })}
constexpr int THREADS = 128 * WGS;
constexpr int BQ = 64 * WGS;               // query rows per block
constexpr int SREGS = BK / 2;              // S accumulators per thread
constexpr int OREGS = D / 2;               // O accumulators per thread
constexpr int PSTEPS = BK / 16;            // k-steps of P·V
constexpr int QSTEPS = D / 16;             // k-steps of Q·Kᵀ
constexpr u32 Q_BYTES = BQ * D * 2;
constexpr u32 KV_BYTES = BK * D * 2;       // one stage of K (or of V)
constexpr float LN2 = 0.6931471805599453f;
static_assert(D % 64 == 0 && BK % 16 == 0, "128-byte swizzle blocks of 64 columns; k-steps of 16");

__device__ __forceinline__ int visible_keys(int i, int q_len, int k_len, int valid) {
  int n = k_len;
  if (PADDING) n = min(n, valid);
  if (CAUSAL) n = min(n, i + (k_len - q_len) + 1);
  return max(n, 0);
}

${WGMMA_LIB}
${wgmmaWrappers(wgmmaType(spec.dtype), [tile.blockK], [D])}

extern "C" __global__ void __launch_bounds__(THREADS, 1) ${name}(const T* __restrict__ q, const T* __restrict__ k,
    const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse, const int* __restrict__ key_lengths,
    int q_len, int k_len, int q_heads, int group, float scale_log2e, int section_heads, ${VARLEN_PARAMS}, ${ATTENTION_DROPOUT_PARAMS}) {
  extern __shared__ unsigned char smem_raw[];
  const u32 q_s = (smem_u32(smem_raw) + 1023u) & ~1023u;   // [D/64][BQ][64]
  const u32 k_s = q_s + Q_BYTES;                           // [2 stages][D/64][BK][64]
  const u32 v_s = k_s + 2 * KV_BYTES;                      // [2 stages][D/64][BK][64]
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  // Block → (query tile, batch·head): flash-forward.ts's launch order.
  const int q_tiles = (int)gridDim.x;
  int tile_rank, head;
  decode_block(section_heads, tile_rank, head);
  const int b = head / q_heads, h = head - b * q_heads;
  const int q0 = (CAUSAL ? q_tiles - 1 - tile_rank : tile_rank) * BQ;
  const int kv_heads = q_heads / group;
  // Where this (sequence, head) lives: [B, H, L, D] (row stride D) or packed [total, H, D] (VARLEN,
  // row stride H·D, lengths from cu_seqlens; q_len and k_len are then the longest). row_base + i indexes
  // lse and the dropout rows.
  int seq_q = q_len, seq_k = k_len, q_stride = D, kv_stride = D;
  long long q_offset, kv_offset, row_base;
  if constexpr (VARLEN) {
    const int q_start = cu_seqlens_q[b], k_start = cu_seqlens_k[b];
    seq_q = max(0, cu_seqlens_q[b + 1] - q_start);
    seq_k = max(0, cu_seqlens_k[b + 1] - k_start);
    q_stride = q_heads * D;
    kv_stride = kv_heads * D;
    q_offset = ((long long)q_start * q_heads + h) * D;
    kv_offset = ((long long)k_start * kv_heads + h / group) * D;
    row_base = (long long)h * total_q + q_start;
    if (q0 >= seq_q) return;  // the whole block, before any barrier
  } else {
    q_offset = ((long long)b * q_heads + h) * q_len * D;
    kv_offset = ((long long)b * kv_heads + h / group) * k_len * D;
    row_base = ((long long)b * q_heads + h) * q_len;
  }
  const T* __restrict__ k_head = k + kv_offset;
  const T* __restrict__ v_head = v + kv_offset;
  const int valid = PADDING ? key_lengths[b] : seq_k;
  const int tiles = (visible_keys(min(q0 + BQ, seq_q) - 1, seq_q, seq_k, valid) + BK - 1) / BK;
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const bool drop_aligned = drop_stride % 8 == 0;

  // Two cp.async groups: Q with K(0), then V(0).
  load_sw128<BQ, D, THREADS>(q_s, q + q_offset, q0, seq_q, q_stride, threadIdx.x);
  if (tiles > 0) load_sw128<BK, D, THREADS>(k_s, k_head, 0, seq_k, kv_stride, threadIdx.x);
  cp_async_commit();
  if (tiles > 0) load_sw128<BK, D, THREADS>(v_s, v_head, 0, seq_k, kv_stride, threadIdx.x);
  cp_async_commit();

  // This thread's rows (half 0: g, half 1: g + 8 of its warp's 16) and the keys each sees; the
  // warpgroup's first row sees the fewest, so tiles below its count need no mask.
  const int row0 = q0 + 64 * wg + 16 * warp + g;
  const int visible[2] = { visible_keys(row0, seq_q, seq_k, valid), visible_keys(row0 + 8, seq_q, seq_k, valid) };
  const int wg_unmasked = visible_keys(q0 + 64 * wg, seq_q, seq_k, valid);
  // Q's descriptor base for this warpgroup's 64 rows; K and V stages.
  const u32 q_wg = q_s + (u32)(64 * wg) * 128u;

  float o[OREGS];
  #pragma unroll
  for (int i = 0; i < OREGS; i++) o[i] = 0.f;
  float m[2] = { neg_inf(), neg_inf() }, l[2] = { 0.f, 0.f };
  u32 p[PSTEPS][4];   // P of the previous tile: A fragments of P·V

  // Issues S = Q·K(stage)ᵀ (one commit group).
  auto issue_scores = [&](float (&s)[SREGS], u32 k_stage) {
    #pragma unroll
    for (int ks = 0; ks < QSTEPS; ks++) wgmma_ss_n${tile.blockK}(s, k_major_desc<BQ>(q_wg, ks), k_major_desc<BK>(k_stage, ks), ks > 0);
    wgmma_commit();
  };
  // Issues O += P·V(stage) (one commit group); V read MN-major, its column blocks BK·128 bytes apart.
  auto issue_values = [&](u32 v_stage) {
    #pragma unroll
    for (int kk = 0; kk < PSTEPS; kk++) wgmma_rs_n${D}(o, p[kk], mn_major_desc<BK>(v_stage, kk));
    wgmma_commit();
  };
  // Masks tile j0's scores, moves the running max and sum, turns S into P(j) (16-bit A fragments) and
  // returns each row's α = 2^(c·(m_old − m_new)) (1 exactly when the max did not move).
  auto online_softmax = [&](float (&s)[SREGS], int j0, u32 (&pn)[PSTEPS][4], float (&alpha)[2]) {
    if (j0 + BK > wg_unmasked) {
      #pragma unroll
      for (int nt = 0; nt < BK / 8; nt++) {
        #pragma unroll
        for (int e = 0; e < 4; e++) {
          if (j0 + 8 * nt + 2 * t + (e & 1) >= visible[e >> 1]) s[4 * nt + e] = neg_inf();
        }
      }
    }
    #pragma unroll
    for (int half = 0; half < 2; half++) {
      float mx = m[half];
      #pragma unroll
      for (int nt = 0; nt < BK / 8; nt++) mx = fmaxf(mx, fmaxf(s[4 * nt + 2 * half], s[4 * nt + 2 * half + 1]));
      mx = quad_max(mx);
      const float shift = mx == neg_inf() ? 0.f : mx * scale_log2e;
      alpha[half] = mx != m[half] ? exp2_fast(m[half] * scale_log2e - shift) : 1.f;
      m[half] = mx;
      float sum = 0.f;
      #pragma unroll
      for (int nt = 0; nt < BK / 8; nt++) {
        s[4 * nt + 2 * half] = exp2_fast(fmaf(s[4 * nt + 2 * half], scale_log2e, -shift));
        s[4 * nt + 2 * half + 1] = exp2_fast(fmaf(s[4 * nt + 2 * half + 1], scale_log2e, -shift));
        sum += s[4 * nt + 2 * half] + s[4 * nt + 2 * half + 1];
      }
      l[half] = l[half] * alpha[half] + sum;
      if constexpr (DROPOUT) {  // after the row sum: lse is the undropped softmax's
        const u64 e0 = (u64)(row_base + row0 + 8 * half) * (u64)drop_stride + (u64)j0;
        #pragma unroll
        for (int nb = 0; nb < (BK / 8 + 3) / 4; nb++) {
          const u32 bits = row_keep_bits(seed, offset, threshold, e0 + 32 * nb, drop_aligned);
          #pragma unroll
          for (int sub = 0; sub < 4; sub++) {
            if (4 * nb + sub < BK / 8) {
              if (!((bits >> (2 * sub)) & 1u)) s[4 * (4 * nb + sub) + 2 * half] = 0.f;
              if (!((bits >> (2 * sub + 1)) & 1u)) s[4 * (4 * nb + sub) + 2 * half + 1] = 0.f;
            }
          }
        }
      }
    }
    #pragma unroll
    for (int kk = 0; kk < PSTEPS; kk++) accumulators_to_fragment(pn[kk], s, kk);
  };

  if (tiles > 0) {
    cp_async_wait<1>();     // Q and K(0)
    fence_proxy_async();
    __syncthreads();
    if (tiles > 1) load_sw128<BK, D, THREADS>(k_s + KV_BYTES, k_head, BK, seq_k, kv_stride, threadIdx.x);
    cp_async_commit();
    float s[SREGS];
    wgmma_fence();
    issue_scores(s, k_s);
    wgmma_wait<0>();
    hold(s);
    float alpha[2];
    online_softmax(s, 0, p, alpha);   // O is still 0: nothing to rescale
  }
  for (int j = 1; j < tiles; j++) {
    cp_async_wait<0>();     // K(j) and V(j − 1)
    fence_proxy_async();
    __syncthreads();        // every warpgroup is past tile j − 1: K(j − 1)'s and V(j − 2)'s stages are free
    if (j + 1 < tiles) load_sw128<BK, D, THREADS>(k_s + ((j + 1) & 1) * KV_BYTES, k_head, (j + 1) * BK, seq_k, kv_stride, threadIdx.x);
    load_sw128<BK, D, THREADS>(v_s + (j & 1) * KV_BYTES, v_head, j * BK, seq_k, kv_stride, threadIdx.x);
    cp_async_commit();

    float s[SREGS];
    hold(o);                // O's rescale and P's copy stay before the fence
    hold(p);
    wgmma_fence();
    issue_scores(s, k_s + (j & 1) * KV_BYTES);
    issue_values(v_s + ((j - 1) & 1) * KV_BYTES);
    wgmma_wait<1>();        // S(j) is ready; P(j − 1)·V(j − 1) may still run
    hold(s);
    u32 pn[PSTEPS][4];
    float alpha[2];
    online_softmax(s, j * BK, pn, alpha);
    wgmma_wait<0>();
    hold(o);
    hold(p);
    // Unconditional: a rescale skipped by some warps (flash-forward.ts's vote) leaves O in different
    // registers on the two paths, and ptxas then serializes the next tile's wgmma behind the moves.
    #pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
      o[4 * nt] *= alpha[0];
      o[4 * nt + 1] *= alpha[0];
      o[4 * nt + 2] *= alpha[1];
      o[4 * nt + 3] *= alpha[1];
    }
    #pragma unroll
    for (int kk = 0; kk < PSTEPS; kk++) { p[kk][0] = pn[kk][0]; p[kk][1] = pn[kk][1]; p[kk][2] = pn[kk][2]; p[kk][3] = pn[kk][3]; }
  }
  if (tiles > 0) {
    cp_async_wait<0>();     // V(last)
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
    issue_values(v_s + ((tiles - 1) & 1) * KV_BYTES);
    wgmma_wait<0>();
    hold(o);
    hold(p);
  } else {
    cp_async_wait<0>();
  }

  // Epilogue: O / l as T pairs straight from the accumulators; lse from the quad's total.
  float inv[2];
  #pragma unroll
  for (int half = 0; half < 2; half++) {
    l[half] = quad_sum(l[half]);
    inv[half] = l[half] > 0.f ? (DROPOUT ? keep_scale : 1.f) / l[half] : 0.f;
  }
  T* __restrict__ out_head = out + q_offset;
  #pragma unroll
  for (int half = 0; half < 2; half++) {
    const int row = row0 + 8 * half;
    if (row < seq_q) {
      #pragma unroll
      for (int nt = 0; nt < D / 8; nt++) {
        *reinterpret_cast<u32*>(out_head + (long long)row * q_stride + 8 * nt + 2 * t) = pack2<T>(o[4 * nt + 2 * half] * inv[half], o[4 * nt + 2 * half + 1] * inv[half]);
      }
      if (t == 0) lse[row_base + row] = l[half] > 0.f ? (m[half] * scale_log2e + log2f(l[half])) * LN2 : neg_inf();
    }
  }
}
`;
  return { name, source, archSpecific: true };
}

// ---- launcher ------------------------------------------------------------------------------------------

export interface WgmmaForwardTensors {
  q: Tensor; k: Tensor; v: Tensor; out: Tensor; lse: Tensor; keyLengths: Tensor | undefined;
  /** Attention dropout (p > 0), drawn in the kernel. */
  dropout?: DropoutArgs | undefined;
  /** Packed sequences: q, out [totalQ, Hq, d], k, v [totalK, Hkv, d], lse [Hq, totalQ]; Lq, Lk are then the longest. */
  varlen?: VarlenLayout | undefined;
}

/**
 * Launches the wgmma forward on arguments checkFlashAttentionForward has validated (dense, contiguous,
 * 16-byte aligned; wgmmaAttentionApplies). `tile` overrides the default (benchmarks sweep it).
 */
export function launchWgmmaForward(host: KernelHost, check: OpCheck, t: WgmmaForwardTensors, s: FlashForwardSizes, tile?: WgmmaForwardTile): void {
  const dtype = t.q.dtype;
  if (!hostRunsWgmma(host)) check.fail(`the wgmma forward needs an sm_90 GPU (Hopper), this one is ${host.arch ?? 'unknown'}`);
  if (!wgmmaForwardSupports(dtype, s.d)) check.fail(`the wgmma forward takes f16/bf16 with d = ${WGMMA_HEAD_DIMS.join(' or ')}, got ${dtype} d = ${s.d}`);
  if (!(s.scale > 0)) check.fail(`the wgmma forward needs scale > 0, got ${s.scale}`);
  const chosen = tile ?? defaultWgmmaForwardTile(s.d);
  const problem = tileProblem(s.d, chosen);
  if (problem) check.fail(problem);
  const sharedBytes = wgmmaForwardSharedBytes(s.d, chosen);
  if (sharedBytes > host.maxSharedBytesPerBlock) check.fail(`the wgmma forward's tile needs ${sharedBytes} bytes of shared memory; this GPU allows ${host.maxSharedBytesPerBlock}`);
  if (s.B * s.Hq * s.Lq === 0) return;
  const pointers = { q: devicePtr(check, 'q', t.q), k: devicePtr(check, 'k', t.k), v: devicePtr(check, 'v', t.v), out: devicePtr(check, 'out', t.out) };
  for (const [name, p] of Object.entries(pointers)) {
    if (p % 16n !== 0n) check.fail(`the wgmma forward needs 16-byte aligned tensors; '${name}' is at 0x${p.toString(16)}`);
  }
  const dropout = t.dropout && t.dropout.p > 0 ? t.dropout : undefined;
  const varlen = t.varlen !== undefined;
  const spec: WgmmaForwardSpec = {
    dtype, headDim: s.d, causal: s.causal, padding: t.keyLengths !== undefined, tile: chosen, ...(dropout ? { dropout: true } : {}), ...(varlen ? { varlen: true } : {}),
  };
  const kernel = host.kernel(wgmmaForwardKey(spec), () => wgmmaForwardSource(spec));
  kernel.launch(
    { grid: [Math.ceil(s.Lq / (64 * chosen.warpgroups)), s.Hq, s.B], block: 128 * chosen.warpgroups, sharedBytes },
    [
      arg.ptr(pointers.q), arg.ptr(pointers.k), arg.ptr(pointers.v), arg.ptr(pointers.out), arg.ptr(devicePtr(check, 'lse', t.lse)),
      arg.ptr(t.keyLengths ? devicePtr(check, 'keyLengths', t.keyLengths) : 0n),
      arg.i32(s.Lq), arg.i32(s.Lk), arg.i32(s.Hq), arg.i32(s.group), arg.f32(s.scale * Math.LOG2E),
      arg.i32(varlen ? 1 : flashSectionHeads(s.causal, false, s.B * s.Hq, s.Lk, s.d, s.group)),
      ...varlenArgs(check, t.varlen),
      ...attentionDropoutArgs(dropout, varlen ? varlenDropoutStride(s.Lk) : s.Lk),
    ],
  );
}

// ---- catalog -------------------------------------------------------------------------------------------

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const headDim of WGMMA_HEAD_DIMS) {
      for (const causal of [false, true]) {
        const padding = (headDim === 128) !== causal;
        sources.push(wgmmaForwardSource({ dtype, headDim, causal, padding, tile: defaultWgmmaForwardTile(headDim) }));
      }
    }
  }
  // Attention dropout, both head dimensions; packed sequences.
  for (const headDim of WGMMA_HEAD_DIMS) sources.push(wgmmaForwardSource({ dtype: 'bf16', headDim, causal: headDim === 64, padding: true, dropout: true, tile: defaultWgmmaForwardTile(headDim) }));
  sources.push(wgmmaForwardSource({ dtype: 'bf16', headDim: 64, causal: true, padding: false, varlen: true, tile: defaultWgmmaForwardTile(64) }));
  sources.push(wgmmaForwardSource({ dtype: 'f16', headDim: 128, causal: false, padding: false, varlen: true, dropout: true, tile: defaultWgmmaForwardTile(128) }));
  // The swept tiles beyond the defaults (bf16, causal with padding: every branch).
  for (const headDim of WGMMA_HEAD_DIMS) {
    for (const tile of WGMMA_FORWARD_SWEEP[headDim]!.slice(1)) sources.push(wgmmaForwardSource({ dtype: 'bf16', headDim, causal: true, padding: true, tile }));
  }
  return sources;
}
