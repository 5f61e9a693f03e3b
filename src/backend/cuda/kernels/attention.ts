// Fused attention (FlashAttention-2's op pair), forward and backward, without materialising the
// [Lq, Lk] scores in global memory.
//
// Two paths. 'mma': the tensor-core forward of flash-forward.ts (mma.sync m16n8k16, ldmatrix,
// cp.async), which flashAttentionForward takes for f16/bf16 with d a multiple of 16 up to 256,
// scale > 0 and 16-byte aligned tensors. 'simt': the tiled SIMT kernels below (f32 FMA inner loops,
// tiles in shared memory, scalar global loads) for everything else (f32, odd head dimensions). They
// implement FA2's algorithm and its tile schedule (online softmax; causal tiles past the diagonal
// skipped; a dK/dV kernel per kv tile and a dQ kernel per query tile, no atomics) but not its speed.
//
// Math (backend.ts has the contract). Per (batch b, query head h, kv head h/(Hq/Hkv)), with
// s_ij = q_i·k_j, key j visible to query i when j < n_i = min(Lk, keyLengths[b], causal ? i+Lk−Lq+1 : Lk):
//   forward   m_i = max_j scale·s_ij, l_i = Σ_j exp(scale·s_ij − m_i), out_i = Σ_j exp(…)·v_j / l_i,
//             lse_i = m_i + ln l_i, computed online over key tiles: for each tile, m' = max(m, tile max),
//             acc ← acc·2^(m−m') + Σ_j 2^(t_ij − m')·v_j, l likewise, in base 2 (t = scale·log2(e)·s:
//             one FMUL per score, exp2 is one SFU instruction). No visible key: out = 0, lse = −∞.
//   backward  P_ij = 2^(t_ij − lse_i·log2 e) (recomputed), D_i = dOut_i·out_i, dP_ij = dOut_i·v_j,
//             dS = P ⊙ (dP − D); dv_j = Σ_i P_ij dOut_i, dk_j = scale Σ_i dS_ij q_i (over the query
//             heads of the group too), dq_i = scale Σ_j dS_ij k_j.
//
// Tiles and threads (all kernels): 128 threads = 32 rows × 4 threads (a "quad" per row, lanes
// 4r..4r+3 of one warp); BQ = BK = 32. A thread owns output columns c = t4 + 4u (u < ceil(d/4)) of
// its row in registers, and the scores of keys (or queries) t4 + 4u of the tile; row max/sum reduce
// over the quad by two shuffles. Shared tiles are f32 with a row stride of d+1 (odd, so the 8 rows a
// warp reads at one column fall in different banks).
//   forward   grid (ceil(Lq/BQ), Hq, B). Q tile resident; K/V tiles of BK keys streamed up to the
//             last key the tile's last row sees (causal: tiles past the diagonal are never loaded).
//             Shared: (BQ + 2·BK)·(d+1) + BQ·(BK+1) floats = 53.8 KB at d = 128.
//   dK/dV     grid (ceil(Lk/BK), Hkv, B). K/V tile resident, dk/dv accumulators in registers; loops
//             over the group's query heads and over the query tiles that can see the kv tile
//             (causal: from row j0 − (Lk − Lq) on). D_i is recomputed per query tile from dOut and
//             out (d more reads per row, no scratch buffer, so the op is graph-capturable as is).
//             Shared: 4·32·(d+1) + 2·32·33 + 64 floats = 74.7 KB at d = 128.
//   dQ        grid (ceil(Lq/BQ), Hq, B). Q/dOut tile resident, dq in registers; loops over K/V tiles
//             as the forward. Shared: 4·32·(d+1) + 32·33 floats = 70.3 KB at d = 128.
//   paged     (forward only; spec.page = blockSize) the K/V tiles' rows come through the block table:
//             key j of sequence b is row j % PAGE of block block_table[b, j / PAGE] of the pool
//             [numBlocks, Hkv, PAGE, d] (load_kv_tile); the rest is the dense forward. With VARLEN,
//             packed queries over paged keys: sequence b has seq_keys[b] keys through table row
//             seq_rows[b] (b when null).
//   Every output element is written exactly once by one thread, after a fixed-order loop: bitwise
//   deterministic. Dynamic shared memory above 48 KiB is opted into by the runtime's launch path.
//
// FLOPs per (b, h) pair with Lk visible keys per row (half of them when causal and Lq = Lk):
//   forward 4·Lq·Lk·d; backward 14·Lq·Lk·d (S and dP are computed in both backward kernels; FA2's
//   single-kernel backward with atomic dq does 10·Lq·Lk·d).
// Bytes (s = sizeof(dtype)): forward reads q once and k, v once per query tile:
//   s·d·(2·Lq + 2·Lk·ceil(Lq/BQ)) + 4·Lq per head; backward about 2× that twice over.

import type { DropoutArgs, FlashAttentionBackwardArgs, FlashAttentionForwardArgs } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { FloatDType } from '../../../dtype.js';
import type { PackedLayout } from '../../op-checks/attention.js';
import { checkFlashAttentionBackward, checkFlashAttentionForward } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { flashForwardSupports, launchFlashForward, pagedSequenceArgs } from './flash-forward.js';
import { launchWgmmaForward, wgmmaAttentionApplies } from './flash-forward-wgmma.js';
import { flashAttentionBackwardTensorCore, flashBackwardApplies } from './flash-backward.js';
import { flashAttentionBackwardWgmma } from './flash-backward-wgmma.js';
import type { VarlenLayout } from './flash-lib.js';
import { ATTENTION_DROPOUT_OFFSET, ATTENTION_DROPOUT_PARAMS, attentionDropoutArgs, FLASH_LIB, VARLEN_PARAMS, varlenArgs, varlenDropoutStride } from './flash-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

// ---- specs -------------------------------------------------------------------------------------------

/** 'simt': f32 FMA inner loops, any dtype and d. 'mma': tensor-core kernels (f16/bf16, d % 16 = 0). */
export type AttentionPath = 'simt' | 'mma';

/**
 * The tensor-core path when it applies: f16/bf16, d a multiple of 16 up to 256, scale > 0 (its
 * softmax takes the row max of unscaled scores) and every tensor 16-byte aligned (cp.async and the
 * 16-byte stores; rows are then aligned too, since d·2 bytes is a multiple of 16).
 */
export function flashAttentionPath(dtype: FloatDType, headDim: number, scale: number, pointers: readonly bigint[]): AttentionPath {
  if (!flashForwardSupports(dtype, headDim) || !(scale > 0)) return 'simt';
  return pointers.every((p) => p % 16n === 0n) ? 'mma' : 'simt';
}

export interface AttentionSpec {
  readonly dtype: FloatDType;
  /** d, baked in. */
  readonly headDim: number;
  readonly causal: boolean;
  /** Padding mask from keyLengths. */
  readonly padding: boolean;
  readonly path: AttentionPath;
  /** Attention dropout drawn in the kernel (flash-lib.ts has the element index). */
  readonly dropout?: boolean;
  /** Packed variable-length sequences ([total, H, d], cuSeqlens). */
  readonly varlen?: boolean;
  /** Paged keys and values (forward only): positions per block of the pool; 0 or absent = dense. */
  readonly page?: number;
}

export type AttentionKernel = 'forward' | 'backward_dkdv' | 'backward_dq';

export function attentionKey(kernel: AttentionKernel, s: AttentionSpec): string {
  return `flash_attention_${kernel}.${s.dtype}.d${s.headDim}.q${BLOCK_Q}.k${BLOCK_K}.${s.path}${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}` +
    `${s.varlen ? '.varlen' : ''}${s.dropout ? '.dropout' : ''}${s.page ? `.paged${s.page}` : ''}`;
}

/** Query rows per tile, key rows per tile, threads per block (a quad of threads per tile row). */
export const BLOCK_Q = 32;
export const BLOCK_K = 32;
export const ATTENTION_THREADS = 128;
/** The largest head dimension the SIMT kernels take (a thread holds ceil(d/4) accumulators per output). */
export const MAX_HEAD_DIM = 256;
/** Largest grid y/z dimension (CUDA's limit), for heads and batch. */
const MAX_GRID_YZ = 65535;

/** Dynamic shared memory of each kernel, in bytes (the layouts are in the header comment). */
export function attentionSharedBytes(kernel: AttentionKernel, headDim: number): number {
  const row = headDim + 1, scores = BLOCK_Q * (BLOCK_K + 1);
  switch (kernel) {
    case 'forward': return 4 * ((BLOCK_Q + 2 * BLOCK_K) * row + scores);
    case 'backward_dkdv': return 4 * (2 * (BLOCK_Q + BLOCK_K) * row + 2 * scores + 2 * BLOCK_Q);
    case 'backward_dq': return 4 * (2 * (BLOCK_Q + BLOCK_K) * row + scores);
  }
}

// ---- sources -----------------------------------------------------------------------------------------

function preamble(spec: AttentionSpec): string {
  return `${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${FLASH_LIB}
${constants({ D: spec.headDim, BQ: BLOCK_Q, BK: BLOCK_K, THREADS: ATTENTION_THREADS, CAUSAL: spec.causal, PADDING: spec.padding, DROPOUT: spec.dropout ?? false, VARLEN: spec.varlen ?? false, PAGED: (spec.page ?? 0) > 0, PAGE: Math.max(1, spec.page ?? 0) })}
${launchBoundsMacro(ATTENTION_THREADS)}
constexpr int COLS = (D + 3) / 4;   // output columns per thread: c = t4 + 4u
constexpr int SD = D + 1;           // shared row stride of d-wide tiles (odd: conflict-free columns)
constexpr int SB = BK + 1;          // shared row stride of score tiles
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
static_assert(BQ == 32 && BK == 32 && THREADS == 128, "a quad of threads per tile row");

// Keys [0, n) are visible to query i (0 ≤ i < q_len) of a batch with "valid" keys.
__device__ __forceinline__ int visible_keys(int i, int q_len, int k_len, int valid) {
  int n = k_len;
  if (PADDING) n = min(n, valid);
  if (CAUSAL) n = min(n, i + (k_len - q_len) + 1);
  return max(n, 0);
}
// Rows [row0, row0 + ROWS) of a [len, D] matrix (global row stride "stride") into shared floats
// (stride SD); rows past len are 0.
template <int ROWS>
__device__ __forceinline__ void load_tile(float* dst, const T* __restrict__ src, int row0, int len, int stride) {
  for (int idx = threadIdx.x; idx < ROWS * D; idx += THREADS) {
    const int r = idx / D, c = idx - r * D;
    dst[r * SD + c] = row0 + r < len ? to_float(src[(long long)(row0 + r) * stride + c]) : 0.f;
  }
}
// A K or V tile: load_tile, or (PAGED) key j from row j % PAGE of block table[j / PAGE] (src = the head's
// row 0 of block 0; a block's rows of all heads are block_stride elements).
template <int ROWS>
__device__ __forceinline__ void load_kv_tile(float* dst, const T* __restrict__ src, int row0, int len, int stride,
                                             [[maybe_unused]] const int* __restrict__ table, [[maybe_unused]] long long block_stride) {
  if constexpr (!PAGED) {
    load_tile<ROWS>(dst, src, row0, len, stride);
  } else {
    for (int idx = threadIdx.x; idx < ROWS * D; idx += THREADS) {
      const int r = idx / D, c = idx - r * D, j = row0 + r;
      dst[r * SD + c] = j < len ? to_float(src[(long long)table[j / PAGE] * block_stride + (long long)(j % PAGE) * D + c]) : 0.f;
    }
  }
}
// D_i = dOut_i · out_i for row i of a head (0 when the row is past the sequence), reduced over the quad.
__device__ __forceinline__ float row_dot(const T* __restrict__ dout, const T* __restrict__ out, long long at, bool valid_row, int t4) {
  float part = 0.f;
  if (valid_row)
    for (int c = t4; c < D; c += 4) part += to_float(dout[at + c]) * to_float(out[at + c]);
  return quad_sum(part);
}
// Sequence b's lengths and layout: [B, H, L, D] (row stride D), or packed [total, H, D] (VARLEN: row
// stride H·D, rows [cu[b], cu[b+1])). rows = the lse/dropout row index of the head's row 0.
struct Head { int q_len, k_len; int q_stride, kv_stride; long long q_off, kv_off, rows; };
__device__ __forceinline__ Head head_layout(int b, int hq, int hk, int q_len, int k_len, int q_heads, int kv_heads,
                                            const int* cu_q, const int* cu_k, int total_q, const int* seq_keys = nullptr) {
  if constexpr (VARLEN && PAGED) {
    // Packed queries over paged keys: seq_keys[b] keys; kv_off as the dense paged layout's.
    const int qs = cu_q[b];
    return { max(0, cu_q[b + 1] - qs), seq_keys[b], q_heads * D, D, ((long long)qs * q_heads + hq) * D,
             (long long)hk * PAGE * D, (long long)hq * total_q + qs };
  } else if constexpr (VARLEN) {
    const int qs = cu_q[b], ks = cu_k[b];
    return { max(0, cu_q[b + 1] - qs), max(0, cu_k[b + 1] - ks), q_heads * D, kv_heads * D,
             ((long long)qs * q_heads + hq) * D, ((long long)ks * kv_heads + hk) * D, (long long)hq * total_q + qs };
  } else {
    // Paged: kv_off is the head's row 0 within a block (load_kv_tile adds the block's offset).
    return { q_len, k_len, D, D, ((long long)b * q_heads + hq) * q_len * D,
             PAGED ? (long long)hk * PAGE * D : ((long long)b * kv_heads + hk) * k_len * D, ((long long)b * q_heads + hq) * q_len };
  }
}
`;
}

const COMMON_PARAMS = 'const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v';
const FEATURE_PARAMS = `${VARLEN_PARAMS}, ${ATTENTION_DROPOUT_PARAMS}`;
const SHAPE_PARAMS = 'const int* __restrict__ key_lengths, int q_len, int k_len, int q_heads, int group';

export function attentionForwardSource(spec: AttentionSpec): KernelSource {
  const name = kernelIdentifier(attentionKey('forward', spec));
  const body = String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(${COMMON_PARAMS}, T* __restrict__ out, float* __restrict__ lse,
    ${SHAPE_PARAMS}, float scale_log2e, ${FEATURE_PARAMS}, const int* __restrict__ block_table, int table_stride,
    const int* __restrict__ seq_keys, const int* __restrict__ seq_rows) {
  extern __shared__ float smem[];
  float* qs = smem;              // [BQ][SD]
  float* ks = qs + BQ * SD;      // [BK][SD]
  float* vs = ks + BK * SD;      // [BK][SD]
  float* ps = vs + BK * SD;      // [BQ][SB]: P of the current key tile
  const int r = threadIdx.x >> 2, t4 = threadIdx.x & 3;
  const int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z;
  const Head hd = head_layout(b, h, h / group, q_len, k_len, q_heads, q_heads / group, cu_seqlens_q, cu_seqlens_k, total_q, seq_keys);
  if (VARLEN && q0 >= hd.q_len) return;  // the whole block, before any barrier
  const int valid = PADDING ? key_lengths[b] : hd.k_len;
  const int i = q0 + r;
  const int n = i < hd.q_len ? visible_keys(i, hd.q_len, hd.k_len, valid) : 0;
  // n is non-decreasing in i: the tile's last row sees the most keys.
  const int kv_end = visible_keys(min(q0 + BQ, hd.q_len) - 1, hd.q_len, hd.k_len, valid);
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const int* __restrict__ table =
      PAGED ? block_table + (long long)(VARLEN && seq_rows != nullptr ? seq_rows[b] : b) * table_stride : nullptr;
  [[maybe_unused]] const long long block_stride = (long long)(q_heads / group) * PAGE * D;

  load_tile<BQ>(qs, q + hd.q_off, q0, hd.q_len, hd.q_stride);
  float acc[COLS];
  #pragma unroll
  for (int u = 0; u < COLS; u++) acc[u] = 0.f;
  float m = neg_inf(), l = 0.f;   // running max (base 2) and Σ 2^(t − m) of row i

  for (int j0 = 0; j0 < kv_end; j0 += BK) {
    __syncthreads();  // the previous tile's K, V and P are no longer read
    load_kv_tile<BK>(ks, k + hd.kv_off, j0, hd.k_len, hd.kv_stride, table, block_stride);
    load_kv_tile<BK>(vs, v + hd.kv_off, j0, hd.k_len, hd.kv_stride, table, block_stride);
    __syncthreads();
    float s[BK / 4];
    #pragma unroll
    for (int u = 0; u < BK / 4; u++) s[u] = 0.f;
    for (int c = 0; c < D; c++) {
      const float qc = qs[r * SD + c];
      #pragma unroll
      for (int u = 0; u < BK / 4; u++) s[u] += qc * ks[(t4 + 4 * u) * SD + c];
    }
    float tile_max = neg_inf();
    #pragma unroll
    for (int u = 0; u < BK / 4; u++) {
      s[u] = j0 + t4 + 4 * u < n ? s[u] * scale_log2e : neg_inf();
      tile_max = fmaxf(tile_max, s[u]);
    }
    const float m_new = fmaxf(m, quad_max(tile_max));
    // Nothing visible yet: shift by 0 so that 2^(−inf − shift) = 0 instead of NaN.
    const float shift = m_new == neg_inf() ? 0.f : m_new;
    const float alpha = exp2_fast(m - shift);
    float psum = 0.f;
    #pragma unroll
    for (int u = 0; u < BK / 4; u++) {
      float p = exp2_fast(s[u] - shift);
      psum += p;  // the undropped softmax's sum (lse)
      if (DROPOUT && !attn_keep(seed, offset, (u64)(hd.rows + i) * (u64)drop_stride + (u64)(j0 + t4 + 4 * u), threshold)) p = 0.f;
      ps[r * SB + t4 + 4 * u] = p;
    }
    l = l * alpha + quad_sum(psum);
    m = m_new;
    #pragma unroll
    for (int u = 0; u < COLS; u++) acc[u] *= alpha;
    __syncwarp();  // row r's P, written by its quad, is read by the same quad
    for (int j = 0; j < BK; j++) {
      const float p = ps[r * SB + j];
      #pragma unroll
      for (int u = 0; u < COLS; u++) if (t4 + 4 * u < D) acc[u] += p * vs[j * SD + t4 + 4 * u];
    }
  }
  if (i < hd.q_len) {
    const float inv = l > 0.f ? (DROPOUT ? keep_scale : 1.f) / l : 0.f;
    #pragma unroll
    for (int u = 0; u < COLS; u++) if (t4 + 4 * u < D) out[hd.q_off + (long long)i * hd.q_stride + t4 + 4 * u] = from_float<T>(acc[u] * inv);
    if (t4 == 0) lse[hd.rows + i] = l > 0.f ? (m + log2f(l)) * LN2 : neg_inf();
  }
}
`;
  return { name, source: preamble(spec) + body };
}

const BACKWARD_PARAMS = `${COMMON_PARAMS}, const T* __restrict__ out, const T* __restrict__ dout, const float* __restrict__ lse`;

export function attentionBackwardDkDvSource(spec: AttentionSpec): KernelSource {
  const name = kernelIdentifier(attentionKey('backward_dkdv', spec));
  const body = String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}, T* __restrict__ dk, T* __restrict__ dv,
    ${SHAPE_PARAMS}, float scale, float scale_log2e, ${FEATURE_PARAMS}) {
  extern __shared__ float smem[];
  float* ks = smem;              // [BK][SD]
  float* vs = ks + BK * SD;      // [BK][SD]
  float* qs = vs + BK * SD;      // [BQ][SD]
  float* dos = qs + BQ * SD;     // [BQ][SD]
  float* ps = dos + BQ * SD;     // [BQ][SB]: P (query row, key column), times z/(1 − p) with dropout
  float* dss = ps + BQ * SB;     // [BQ][SB]: dS
  float* lse_s = dss + BQ * SB;  // [BQ]: lse · log2(e)
  float* dd_s = lse_s + BQ;      // [BQ]: D
  const int r = threadIdx.x >> 2, t4 = threadIdx.x & 3;   // r: key row of the tile (query row when loading D)
  const int j0 = blockIdx.x * BK, kv_head = blockIdx.y, b = blockIdx.z;
  const int kv_heads = q_heads / group;
  const Head kh = head_layout(b, kv_head * group, kv_head, q_len, k_len, q_heads, kv_heads, cu_seqlens_q, cu_seqlens_k, total_q);
  if (VARLEN && j0 >= kh.k_len) return;  // the whole block, before any barrier
  const int valid = PADDING ? key_lengths[b] : kh.k_len;
  const int j = j0 + r;
  ${ATTENTION_DROPOUT_OFFSET}

  load_tile<BK>(ks, k + kh.kv_off, j0, kh.k_len, kh.kv_stride);
  load_tile<BK>(vs, v + kh.kv_off, j0, kh.k_len, kh.kv_stride);
  float dk_acc[COLS], dv_acc[COLS];
  #pragma unroll
  for (int u = 0; u < COLS; u++) { dk_acc[u] = 0.f; dv_acc[u] = 0.f; }

  // Query i sees key j0 from i = j0 − (Lk − Lq) on (causal); no query sees it past the padding.
  const int i_first = CAUSAL ? max(0, j0 - (kh.k_len - kh.q_len)) : 0;
  const bool seen = !PADDING || j0 < valid;
  for (int hh = 0; seen && hh < group; hh++) {
    const Head qh = head_layout(b, kv_head * group + hh, kv_head, q_len, k_len, q_heads, kv_heads, cu_seqlens_q, cu_seqlens_k, total_q);
    for (int i0 = (i_first / BQ) * BQ; i0 < qh.q_len; i0 += BQ) {
      __syncthreads();  // the previous query tile is no longer read
      load_tile<BQ>(qs, q + qh.q_off, i0, qh.q_len, qh.q_stride);
      load_tile<BQ>(dos, dout + qh.q_off, i0, qh.q_len, qh.q_stride);
      {
        const bool valid_row = i0 + r < qh.q_len;
        const float dot = row_dot(dout, out, qh.q_off + (long long)(i0 + r) * qh.q_stride, valid_row, t4);
        if (t4 == 0) { dd_s[r] = dot; lse_s[r] = valid_row ? lse[qh.rows + i0 + r] * LOG2E : 0.f; }
      }
      __syncthreads();
      // S and dP for queries i0 + t4 + 4u against key j.
      float s[BQ / 4], dp[BQ / 4];
      #pragma unroll
      for (int u = 0; u < BQ / 4; u++) { s[u] = 0.f; dp[u] = 0.f; }
      for (int c = 0; c < D; c++) {
        const float kc = ks[r * SD + c], vc = vs[r * SD + c];
        #pragma unroll
        for (int u = 0; u < BQ / 4; u++) {
          s[u] += qs[(t4 + 4 * u) * SD + c] * kc;
          dp[u] += dos[(t4 + 4 * u) * SD + c] * vc;
        }
      }
      #pragma unroll
      for (int u = 0; u < BQ / 4; u++) {
        const int iq = t4 + 4 * u, i = i0 + iq;
        const bool visible = i < qh.q_len && j < visible_keys(i, qh.q_len, kh.k_len, valid);
        const float p = visible ? exp2_fast(s[u] * scale_log2e - lse_s[iq]) : 0.f;
        if (DROPOUT) {
          const bool kept = attn_keep(seed, offset, (u64)(qh.rows + i) * (u64)drop_stride + (u64)j, threshold);
          ps[iq * SB + r] = kept ? p * keep_scale : 0.f;
          dss[iq * SB + r] = p * ((kept ? dp[u] * keep_scale : 0.f) - dd_s[iq]);
        } else {
          ps[iq * SB + r] = p;
          dss[iq * SB + r] = p * (dp[u] - dd_s[iq]);
        }
      }
      __syncwarp();  // key row r's column of P and dS was written by its own quad
      for (int iq = 0; iq < BQ; iq++) {
        const float p = ps[iq * SB + r], ds = dss[iq * SB + r];
        #pragma unroll
        for (int u = 0; u < COLS; u++) {
          if (t4 + 4 * u >= D) continue;
          dv_acc[u] += p * dos[iq * SD + t4 + 4 * u];
          dk_acc[u] += ds * qs[iq * SD + t4 + 4 * u];
        }
      }
    }
  }
  if (j < kh.k_len) {
    #pragma unroll
    for (int u = 0; u < COLS; u++) {
      if (t4 + 4 * u >= D) continue;
      dk[kh.kv_off + (long long)j * kh.kv_stride + t4 + 4 * u] = from_float<T>(scale * dk_acc[u]);
      dv[kh.kv_off + (long long)j * kh.kv_stride + t4 + 4 * u] = from_float<T>(dv_acc[u]);
    }
  }
}
`;
  return { name, source: preamble(spec) + body };
}

export function attentionBackwardDqSource(spec: AttentionSpec): KernelSource {
  const name = kernelIdentifier(attentionKey('backward_dq', spec));
  const body = String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}, T* __restrict__ dq,
    ${SHAPE_PARAMS}, float scale, float scale_log2e, ${FEATURE_PARAMS}) {
  extern __shared__ float smem[];
  float* qs = smem;              // [BQ][SD]
  float* dos = qs + BQ * SD;     // [BQ][SD]
  float* ks = dos + BQ * SD;     // [BK][SD]
  float* vs = ks + BK * SD;      // [BK][SD]
  float* dss = vs + BK * SD;     // [BQ][SB]: dS of the current key tile
  const int r = threadIdx.x >> 2, t4 = threadIdx.x & 3;
  const int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z;
  const Head hd = head_layout(b, h, h / group, q_len, k_len, q_heads, q_heads / group, cu_seqlens_q, cu_seqlens_k, total_q);
  if (VARLEN && q0 >= hd.q_len) return;  // the whole block, before any barrier
  const int valid = PADDING ? key_lengths[b] : hd.k_len;
  const int i = q0 + r;
  const bool valid_row = i < hd.q_len;
  const int n = valid_row ? visible_keys(i, hd.q_len, hd.k_len, valid) : 0;
  const int kv_end = visible_keys(min(q0 + BQ, hd.q_len) - 1, hd.q_len, hd.k_len, valid);
  ${ATTENTION_DROPOUT_OFFSET}

  load_tile<BQ>(qs, q + hd.q_off, q0, hd.q_len, hd.q_stride);
  load_tile<BQ>(dos, dout + hd.q_off, q0, hd.q_len, hd.q_stride);
  const float dd = row_dot(dout, out, hd.q_off + (long long)i * hd.q_stride, valid_row, t4);
  const float lse2 = n > 0 ? lse[hd.rows + i] * LOG2E : 0.f;
  float dq_acc[COLS];
  #pragma unroll
  for (int u = 0; u < COLS; u++) dq_acc[u] = 0.f;

  for (int j0 = 0; j0 < kv_end; j0 += BK) {
    __syncthreads();  // the previous key tile and dS are no longer read
    load_tile<BK>(ks, k + hd.kv_off, j0, hd.k_len, hd.kv_stride);
    load_tile<BK>(vs, v + hd.kv_off, j0, hd.k_len, hd.kv_stride);
    __syncthreads();
    float s[BK / 4], dp[BK / 4];
    #pragma unroll
    for (int u = 0; u < BK / 4; u++) { s[u] = 0.f; dp[u] = 0.f; }
    for (int c = 0; c < D; c++) {
      const float qc = qs[r * SD + c], gc = dos[r * SD + c];
      #pragma unroll
      for (int u = 0; u < BK / 4; u++) {
        s[u] += qc * ks[(t4 + 4 * u) * SD + c];
        dp[u] += gc * vs[(t4 + 4 * u) * SD + c];
      }
    }
    #pragma unroll
    for (int u = 0; u < BK / 4; u++) {
      const int j = j0 + t4 + 4 * u;
      const float p = j < n ? exp2_fast(s[u] * scale_log2e - lse2) : 0.f;
      float dpk = dp[u];
      if (DROPOUT) dpk = attn_keep(seed, offset, (u64)(hd.rows + i) * (u64)drop_stride + (u64)j, threshold) ? dpk * keep_scale : 0.f;
      dss[r * SB + t4 + 4 * u] = p * (dpk - dd);
    }
    __syncwarp();  // row r's dS, written by its quad, is read by the same quad
    for (int jj = 0; jj < BK; jj++) {
      const float ds = dss[r * SB + jj];
      #pragma unroll
      for (int u = 0; u < COLS; u++) if (t4 + 4 * u < D) dq_acc[u] += ds * ks[jj * SD + t4 + 4 * u];
    }
  }
  if (valid_row) {
    #pragma unroll
    for (int u = 0; u < COLS; u++) if (t4 + 4 * u < D) dq[hd.q_off + (long long)i * hd.q_stride + t4 + 4 * u] = from_float<T>(scale * dq_acc[u]);
  }
}
`;
  return { name, source: preamble(spec) + body };
}

// ---- launchers ----------------------------------------------------------------------------------------

/** The kernels' own limits, beyond the shared argument checks. */
function checkLimits(check: OpCheck, host: KernelHost, sizes: { B: number; Hq: number; d: number }): void {
  if (sizes.d > MAX_HEAD_DIM) check.fail(`head dimension d = ${sizes.d} is larger than the CUDA kernels' limit of ${MAX_HEAD_DIM}`);
  if (sizes.Hq > MAX_GRID_YZ || sizes.B > MAX_GRID_YZ) check.fail(`B = ${sizes.B} and Hq = ${sizes.Hq} must each be at most ${MAX_GRID_YZ}`);
  const shared = attentionSharedBytes('backward_dkdv', sizes.d);
  if (shared > host.maxSharedBytesPerBlock) check.fail(`head dimension d = ${sizes.d} needs ${shared} bytes of shared memory; this GPU allows ${host.maxSharedBytesPerBlock}`);
}

/** One fused attention, dense or packed, after its op check. */
interface AttentionProblem {
  q: Tensor; k: Tensor; v: Tensor; out: Tensor; lse: Tensor;
  keyLengths: Tensor | undefined;
  scale: number; causal: boolean;
  /** Dense: the sizes; packed: B sequences, Lq and Lk the max lengths. */
  B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; group: number;
  varlen?: VarlenLayout;
  dropout?: DropoutArgs | undefined;
  /** Paged keys and values (forward): the checked pool sizes and table; with varlen, each sequence's keys and table row. */
  paged?: { blockTable: Tensor; blockSize: number; maxBlocks: number; seqKeys?: Tensor; seqRows?: Tensor | undefined } | undefined;
}
interface AttentionBackwardProblem extends AttentionProblem { dOut: Tensor; dq: Tensor; dk: Tensor; dv: Tensor }

/** The dropout element row stride: Lk dense, maxSeqlenK rounded up to 8 packed. */
function dropoutStride(p: AttentionProblem): number {
  return p.varlen ? varlenDropoutStride(p.Lk) : p.Lk;
}

function runForward(host: KernelHost, check: OpCheck, p: AttentionProblem): void {
  const { q, k, v, out, lse, keyLengths, scale, causal, B, Hq, Lq, Lk, d, group, varlen, paged } = p;
  checkLimits(check, host, { B, Hq, d });
  if (B * Hq * Lq === 0) return;
  const dropout = p.dropout && p.dropout.p > 0 ? p.dropout : undefined;

  const dtype = q.dtype as FloatDType;
  const pointers = [devicePtr(check, 'q', q), devicePtr(check, 'k', k), devicePtr(check, 'v', v), devicePtr(check, 'out', out)];
  if (flashAttentionPath(dtype, d, scale, pointers) === 'mma') {
    if (wgmmaAttentionApplies(host, dtype, d, p)) {
      launchWgmmaForward(host, check, { q, k, v, out, lse, keyLengths, dropout, varlen }, { B, Hq, Lq, Lk, d, group, scale, causal });
      return;
    }
    launchFlashForward(host, check, { q, k, v, out, lse, keyLengths, ...(varlen ? { varlen } : {}), ...(dropout ? { dropout } : {}), ...(paged ? { paged } : {}) },
      { B, Hq, Lq, Lk, d, group, scale, causal });
    return;
  }
  const spec: AttentionSpec = {
    dtype, headDim: d, causal, padding: keyLengths !== undefined, path: 'simt', ...(dropout ? { dropout: true } : {}), ...(varlen ? { varlen: true } : {}),
    ...(paged ? { page: paged.blockSize } : {}),
  };
  const kernel = host.kernel(attentionKey('forward', spec), () => attentionForwardSource(spec));
  kernel.launch(
    { grid: [Math.ceil(Lq / BLOCK_Q), Hq, B], block: ATTENTION_THREADS, sharedBytes: attentionSharedBytes('forward', d) },
    [
      arg.ptr(devicePtr(check, 'q', q)), arg.ptr(devicePtr(check, 'k', k)), arg.ptr(devicePtr(check, 'v', v)),
      arg.ptr(devicePtr(check, 'out', out)), arg.ptr(devicePtr(check, 'lse', lse)),
      arg.ptr(keyLengths ? devicePtr(check, 'keyLengths', keyLengths) : 0n),
      arg.i32(Lq), arg.i32(Lk), arg.i32(Hq), arg.i32(group), arg.f32(scale * Math.LOG2E),
      ...varlenArgs(check, varlen), ...attentionDropoutArgs(dropout, dropoutStride(p)),
      arg.ptr(paged ? devicePtr(check, 'paged.blockTable', paged.blockTable) : 0n), arg.i32(paged ? paged.maxBlocks : 0),
      ...pagedSequenceArgs(check, paged),
    ],
  );
}

/**
 * f16/bf16 with d a multiple of 16 up to 128 and 16-byte aligned tensors: the tensor-core kernels of
 * flash-backward.ts (a D preprocess, then dK/dV and dQ). Otherwise the SIMT pair: dK/dV (a block per
 * kv tile) then dQ (a block per query tile). Neither path uses atomics.
 */
function runBackward(host: KernelHost, check: OpCheck, p: AttentionBackwardProblem): void {
  const { q, k, v, out, dOut, lse, dq, dk, dv, keyLengths, scale, causal, B, Hq, Hkv, Lq, Lk, d, group, varlen } = p;
  checkLimits(check, host, { B, Hq, d });
  const dropout = p.dropout && p.dropout.p > 0 ? p.dropout : undefined;
  const problem = {
    q, k, v, out, dOut, lse, dq, dk, dv, keyLengths, scale, causal, B, Hq, Hkv, Lq, Lk, d, group,
    ...(varlen ? { varlen } : {}), ...(dropout ? { dropout } : {}),
  };
  if (flashBackwardApplies(host, check, problem)) {
    if (wgmmaAttentionApplies(host, problem.q.dtype, problem.d, problem)) flashAttentionBackwardWgmma(host, check, problem);
    else flashAttentionBackwardTensorCore(host, check, problem);
    return;
  }

  const spec: AttentionSpec = {
    dtype: q.dtype as FloatDType, headDim: d, causal, padding: keyLengths !== undefined, path: 'simt',
    ...(dropout ? { dropout: true } : {}), ...(varlen ? { varlen: true } : {}),
  };
  const inputs = [
    arg.ptr(devicePtr(check, 'q', q)), arg.ptr(devicePtr(check, 'k', k)), arg.ptr(devicePtr(check, 'v', v)),
    arg.ptr(devicePtr(check, 'out', out)), arg.ptr(devicePtr(check, 'dOut', dOut)), arg.ptr(devicePtr(check, 'lse', lse)),
  ];
  const shape = [
    arg.ptr(keyLengths ? devicePtr(check, 'keyLengths', keyLengths) : 0n),
    arg.i32(Lq), arg.i32(Lk), arg.i32(Hq), arg.i32(group), arg.f32(scale), arg.f32(scale * Math.LOG2E),
    ...varlenArgs(check, varlen), ...attentionDropoutArgs(dropout, dropoutStride(p)),
  ];
  if (B * Hkv * Lk > 0) {
    const dkdv = host.kernel(attentionKey('backward_dkdv', spec), () => attentionBackwardDkDvSource(spec));
    dkdv.launch(
      { grid: [Math.ceil(Lk / BLOCK_K), Hkv, B], block: ATTENTION_THREADS, sharedBytes: attentionSharedBytes('backward_dkdv', d) },
      [...inputs, arg.ptr(devicePtr(check, 'dk', dk)), arg.ptr(devicePtr(check, 'dv', dv)), ...shape],
    );
  }
  if (B * Hq * Lq > 0) {
    const dqKernel = host.kernel(attentionKey('backward_dq', spec), () => attentionBackwardDqSource(spec));
    dqKernel.launch(
      { grid: [Math.ceil(Lq / BLOCK_Q), Hq, B], block: ATTENTION_THREADS, sharedBytes: attentionSharedBytes('backward_dq', d) },
      [...inputs, arg.ptr(devicePtr(check, 'dq', dq)), ...shape],
    );
  }
}

/** The checked arguments as a problem: packed sequences carry their layout, Lq and Lk are then the max lengths. */
function problemOf<P extends { packed: PackedLayout | undefined }>(c: P): Omit<P, 'packed'> & { varlen?: VarlenLayout } {
  const { packed, ...rest } = c;
  return packed ? { ...rest, varlen: { cuSeqlensQ: packed.cuSeqlensQ, cuSeqlensK: packed.cuSeqlensK, totalQ: packed.totalQ } } : rest;
}

/**
 * Dense or packed sequences (flash-lib.ts, flash-forward.ts): the same kernels either way. Packed, the
 * grid covers maxSeqlenQ query rows (maxSeqlenK keys in the dK/dV kernel) per sequence, and blocks past
 * their sequence's length exit at once.
 */
export function flashAttentionForward(host: KernelHost, args: FlashAttentionForwardArgs): void {
  const check = new OpCheck('flashAttentionForward', 'cuda');
  const { paged, ...checked } = checkFlashAttentionForward(check, args);
  const packedQ = paged?.packedQ;
  if (packedQ) {
    // Packed queries over paged keys: the varlen kernels with the keys' layout from the pool.
    const pool = { blockTable: paged.blockTable, blockSize: paged.blockSize, maxBlocks: paged.maxBlocks, seqKeys: packedQ.seqKeys, seqRows: packedQ.seqRows };
    runForward(host, check, { ...checked, varlen: { cuSeqlensQ: packedQ.cuSeqlensQ, totalQ: packedQ.totalQ }, paged: pool });
    return;
  }
  runForward(host, check, { ...problemOf(checked), ...(paged ? { paged } : {}) });
}

export function flashAttentionBackward(host: KernelHost, args: FlashAttentionBackwardArgs): void {
  const check = new OpCheck('flashAttentionBackward', 'cuda');
  runBackward(host, check, problemOf(checkFlashAttentionBackward(check, args)));
}

// ---- catalog -------------------------------------------------------------------------------------------

/** Head dimensions of the models we build (GPT-2/BERT 64, 80, 96, Llama 128); f32 adds an odd one (33). */
export const CATALOG_HEAD_DIMS = [64, 80, 96, 128] as const;

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const headDim of CATALOG_HEAD_DIMS) {
      for (const causal of [false, true]) {
        // Padding rotates with the head dimension so both settings compile with both masks.
        const spec: AttentionSpec = { dtype, headDim, causal, padding: (headDim === 80 || headDim === 128) !== causal, path: 'simt' };
        sources.push(attentionForwardSource(spec), attentionBackwardDkDvSource(spec), attentionBackwardDqSource(spec));
      }
    }
  }
  for (const [headDim, causal, padding] of [[64, true, true], [128, false, false], [33, false, true]] as const) {
    const spec: AttentionSpec = { dtype: 'f32', headDim, causal, padding, path: 'simt' };
    sources.push(attentionForwardSource(spec), attentionBackwardDkDvSource(spec), attentionBackwardDqSource(spec));
  }
  // Dropout and packed sequences (f32 and the 16-bit types that miss the tensor cores: odd d).
  const features: AttentionSpec[] = [
    { dtype: 'f32', headDim: 64, causal: true, padding: true, path: 'simt', dropout: true },
    { dtype: 'bf16', headDim: 72, causal: true, padding: false, path: 'simt', varlen: true, dropout: true },
    { dtype: 'f32', headDim: 33, causal: false, padding: false, path: 'simt', varlen: true },
  ];
  for (const spec of features) sources.push(attentionForwardSource(spec), attentionBackwardDkDvSource(spec), attentionBackwardDqSource(spec));
  // Paged keys and values (the serving engine's prefill; forward only): f32 with blocks of 16, an odd bf16 d with blocks of 32.
  sources.push(attentionForwardSource({ dtype: 'f32', headDim: 64, causal: true, padding: false, path: 'simt', page: 16 }));
  sources.push(attentionForwardSource({ dtype: 'bf16', headDim: 72, causal: true, padding: true, path: 'simt', page: 32 }));
  sources.push(attentionForwardSource({ dtype: 'f32', headDim: 64, causal: true, padding: false, path: 'simt', varlen: true, page: 16 }));
  return sources;
}
