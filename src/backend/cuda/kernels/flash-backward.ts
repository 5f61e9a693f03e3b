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
//
// Three launches, no atomics, every output element written exactly once by one thread after a
// fixed-order loop (bitwise deterministic), nothing allocated (graph-capturable once the runtime's
// scratch has grown to 8·B·Hq·Lq bytes):
//   1. preprocess  grid ceil(B·Hq·Lq / 32), 128 threads, a quad per row: D_i (f32) and lse_i·log2 e
//                  (+∞ for lse = −∞, so a query that sees nothing has P = 0 without a mask) into
//                  the runtime's scratch. Reads 2·s·d + 4 bytes, writes 8 bytes per row.
//   2. dK/dV       grid (ceil(Lk/64), Hkv, B), 4 warps; warp w owns keys j0+16w .. j0+16w+15.
//                  K and V tiles [64, d] stay in shared memory; the block loops over the group's
//                  query heads and, per head, over the query tiles [BQ, d] that can see the kv tile
//                  (causal: from query j0 − (Lk − Lq) on), with Q, dO, D and lse·log2 e
//                  double-buffered by cp.async. Per query tile, each warp computes
//                    Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ    (A = K or V rows by ldmatrix, B = Q or dO rows by ldmatrix)
//                    Pᵀ, dSᵀ in registers          (the mma accumulator layout, rows = keys)
//                    dV += Pᵀ·dO, dK += dSᵀ·Q      (A = Pᵀ or dSᵀ repacked from the accumulators
//                                                   in registers, B = dO or Q by ldmatrix.trans)
//                  with dK, dV [16, d] per warp in f32 registers (d/2 floats each per thread).
//   3. dQ          grid (ceil(Lq/64), Hq, B), 4 warps; warp w owns queries q0+16w .. q0+16w+15,
//                  Q and dO tiles resident, K/V tiles [64, d] double-buffered by cp.async, up to
//                  the last key the tile's last row sees:
//                    S = Q·Kᵀ, dP = dO·Vᵀ, dS = P ⊙ (dP − D) in registers, dQ += dS·K
//                  (A = dS repacked in registers, B = K by ldmatrix.trans); dQ [16, d] per warp in
//                  registers. Blocks run in reverse tile order so that causal's longest rows start first.
// Tiles fully past the causal diagonal or the padding are never loaded; only tiles that straddle
// them evaluate the mask per element. Rows past Lq or Lk are zero-filled by cp.async; their
// results are never stored (and the rows they meet contribute 0: a zero dO or Q row, or a masked key).
// Outputs are staged through shared memory and stored as 16-byte vectors.
//
// Shared memory rows are d + 8 elements (2d + 16 bytes, an odd multiple of 16): the 8 rows one
// ldmatrix phase reads then fall in distinct 16-byte bank groups, with no swizzle, for every d.
//   dK/dV: (2·64 + 4·BQ)·(d+8)·s + 16·BQ bytes;  dQ: (2·64 + 4·64)·(d+8)·s bytes (104 KB at d = 128).
// Registers (ptxas sm_90, CUDA 13, no spills): dK/dV 177–184 at d = 64 (BQ = 64), 232–236 at d = 128
// (BQ = 32; BQ = 64 spills there), up to 254 at d = 96; dQ 127–164 at d = 64, 166–169 at d = 128.
// So two dK/dV blocks (8 warps) and two or three dQ blocks share an SM.
//
// FLOPs per (b, h) with Lk visible keys per query (half of them when causal and Lq = Lk): the
// backward executes 7 GEMMs of 2·Lq·Lk·d (Sᵀ, dPᵀ, dV, dK in kernel 2; S, dP, dQ in kernel 3) =
// 14·Lq·Lk·d, 3.5× the forward's 4·Lq·Lk·d. FA2 (one kernel, dq by float atomics, not deterministic)
// executes 5 GEMMs = 10·Lq·Lk·d = 2.5× forward; benchmarks that report FA2-comparable TFLOP/s count
// 10·Lq·Lk·d (the useful work), so our two recomputed GEMMs show up as lower throughput.
// Bytes (s = sizeof(dtype)) per kv head: kernel 2 reads K, V once and Q, dO (+8 bytes D, lse) once per
// kv tile per query head of the group: s·d·2·Lk + group·ceil(Lk/64)·Lq·(2·s·d + 8); kernel 3 reads
// Q, dO once and K, V once per query tile; most of the re-reads hit L2.

import type { FloatDType } from '../../../dtype.js';
import type { Tensor } from '../../../tensor.js';
import type { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

// ---- specs -------------------------------------------------------------------------------------------

export type FlashBackwardDType = 'bf16' | 'f16';

export interface FlashBackwardSpec {
  readonly dtype: FlashBackwardDType;
  /** d, baked in: a multiple of 16, at most MAX_HEAD_DIM. */
  readonly headDim: number;
  readonly causal: boolean;
  /** Padding mask from keyLengths. */
  readonly padding: boolean;
}

export type FlashBackwardKernel = 'preprocess' | 'dkdv' | 'dq';

/** 4 warps of 16 rows each: keys per dK/dV block, queries per dQ block. */
export const FLASH_BACKWARD_THREADS = 128;
export const KV_BLOCK = 64;
export const Q_BLOCK = 64;
/** Key rows per K/V tile streamed by the dQ kernel. */
export const DQ_KEY_TILE = 64;
/** Rows per preprocess block (a quad of threads per row). */
const PREPROCESS_ROWS = FLASH_BACKWARD_THREADS / 4;
/** dK and dV live in registers: d/2 floats each per thread; past 128 they no longer fit beside S and dP. */
export const MAX_HEAD_DIM = 128;
const MAX_GRID_YZ = 65535;

/**
 * Query rows per tile of the dK/dV loop. Registers per thread are d (dK, dV) + BQ (Sᵀ, dPᵀ) floats
 * plus addressing; at d = 128 BQ = 64 would pass 255, so it halves.
 */
export function dkdvQueryTile(headDim: number): number {
  return headDim > 96 ? 32 : 64;
}

/** The head dimensions and dtypes these kernels take. */
export function flashBackwardSupports(dtype: FloatDType, headDim: number): dtype is FlashBackwardDType {
  return (dtype === 'bf16' || dtype === 'f16') && headDim % 16 === 0 && headDim >= 16 && headDim <= MAX_HEAD_DIM;
}

export function flashBackwardKey(kernel: FlashBackwardKernel, s: FlashBackwardSpec): string {
  switch (kernel) {
    case 'preprocess': return `flash_attention_backward_preprocess.${s.dtype}.d${s.headDim}`;
    case 'dkdv': return `flash_attention_backward_dkdv.${s.dtype}.d${s.headDim}.q${dkdvQueryTile(s.headDim)}.k${KV_BLOCK}.mma${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}`;
    case 'dq': return `flash_attention_backward_dq.${s.dtype}.d${s.headDim}.q${Q_BLOCK}.k${DQ_KEY_TILE}.mma${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}`;
  }
}

/** Dynamic shared memory of each kernel, in bytes (the layouts are in the header comment). */
export function flashBackwardSharedBytes(kernel: FlashBackwardKernel, headDim: number): number {
  const row = 2 * (headDim + 8);
  switch (kernel) {
    case 'preprocess': return 0;
    case 'dkdv': { const bq = dkdvQueryTile(headDim); return (2 * KV_BLOCK + 4 * bq) * row + 16 * bq; }
    case 'dq': return (2 * Q_BLOCK + 4 * DQ_KEY_TILE) * row;
  }
}

// ---- sources -----------------------------------------------------------------------------------------

function preamble(spec: FlashBackwardSpec, values: Record<string, number | boolean>): string {
  return `${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ D: spec.headDim, THREADS: FLASH_BACKWARD_THREADS, ...values })}
${launchBoundsMacro(FLASH_BACKWARD_THREADS)}
${values.BQ === undefined ? '' : MMA_LIB + TILE_DEVICE_CODE}`;
}

/**
 * Shared tiles of rows [row0, row0 + ROWS) of a [len, D] matrix: row stride SD = D + 8 elements, so
 * the 8 rows of an ldmatrix phase (or of a warp's accumulator stores) hit 8 distinct bank groups for
 * every D (2·SD bytes is an odd multiple of 16). Tiles are addressed as u32 shared byte addresses.
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
__device__ __forceinline__ void load_rows_async(u32 dst, const T* __restrict__ src, int row0, int len) {
  constexpr int TOTAL = ROWS * CHUNKS;
  #pragma unroll
  for (int n = 0; n < (TOTAL + THREADS - 1) / THREADS; n++) {
    const int idx = n * THREADS + threadIdx.x;
    if (TOTAL % THREADS == 0 || idx < TOTAL) {
      const int r = idx / CHUNKS, c = idx - r * CHUNKS;
      const bool in = row0 + r < len;
      cp_async_16(dst + r * ROW_BYTES + c * 16, src + (long long)(in ? row0 + r : 0) * D + c * 8, in);
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
__device__ __forceinline__ void store_rows(T* __restrict__ dst, const T* staged, int row0, int len) {
  for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += THREADS) {
    const int r = idx / CHUNKS, c = idx - r * CHUNKS;
    if (row0 + r < len)
      *reinterpret_cast<uint4*>(dst + (long long)(row0 + r) * D + c * 8) = *reinterpret_cast<const uint4*>(staged + r * SD + c * 8);
  }
}
// Accumulators of n8 tile n (rows g and g + 8 of the warp's 16, columns 8n + 2t, +1), times "mul",
// rounded to T into a staged [rows][SD] tile at row "row0" (the warp's first row).
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
`;

export function flashBackwardPreprocessSource(spec: FlashBackwardSpec): KernelSource {
  const name = kernelIdentifier(flashBackwardKey('preprocess', spec));
  const body = String.raw`
constexpr float LOG2E = 1.4426950408889634f;
// D_i = Σ_c dOut_ic·out_ic and lse_i·log2 e (+∞ where lse = −∞) for every row of [rows, D].
extern "C" __global__ void KERNEL_BOUNDS ${name}(const T* __restrict__ out, const T* __restrict__ dout,
    const float* __restrict__ lse, float* __restrict__ delta, float* __restrict__ lse_log2, long long rows) {
  const long long row = (long long)blockIdx.x * (THREADS / 4) + (threadIdx.x >> 2);
  const int t4 = threadIdx.x & 3;
  float part = 0.f;
  if (row < rows) {
    for (int c = t4 * 8; c < D; c += 32) {
      const Vec<T, 8> o = load_vec<T, 8>(out + row * D + c), g = load_vec<T, 8>(dout + row * D + c);
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
  return { name, source: preamble(spec, {}) + body };
}

const BACKWARD_PARAMS = 'const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, ' +
  'const float* __restrict__ delta, const float* __restrict__ lse_log2';
const SHAPE_PARAMS = 'const int* __restrict__ key_lengths, int q_len, int k_len, int q_heads, int group, float scale, float scale_log2e';

export function flashBackwardDkDvSource(spec: FlashBackwardSpec): KernelSource {
  const name = kernelIdentifier(flashBackwardKey('dkdv', spec));
  const body = String.raw`
static_assert(BK == WARPS * 16 && BQ % 16 == 0, "a warp per 16 keys");
constexpr int QT = BQ / 8;   // n8 tiles across the query tile

extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}, T* __restrict__ dk, T* __restrict__ dv,
    ${SHAPE_PARAMS}) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem);   // [BK][SD]
  T* vs = ks + BK * SD;                 // [BK][SD]
  T* qs = vs + BK * SD;                 // [2][BQ][SD]
  T* dos = qs + 2 * BQ * SD;            // [2][BQ][SD]
  float* dd_s = reinterpret_cast<float*>(dos + 2 * BQ * SD);  // [2][BQ]: D
  float* l2_s = dd_s + 2 * BQ;                                 // [2][BQ]: lse·log2 e
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int j0 = blockIdx.x * BK, kv_head = blockIdx.y, b = blockIdx.z;
  const long long kv_row0 = ((long long)b * (q_heads / group) + kv_head) * k_len;
  const int valid = PADDING ? max(0, min(key_lengths[b], k_len)) : k_len;
  const int offset = k_len - q_len;  // causal: query i sees keys j <= i + offset
  // Query i sees key j0 from i = j0 − offset on; nothing sees a tile past the padding.
  const int i_start = CAUSAL ? (max(0, j0 - offset) / BQ) * BQ : 0;
  const int tiles = j0 < valid && i_start < q_len ? (q_len - i_start + BQ - 1) / BQ : 0;
  const int iterations = tiles * group;   // (query head of the group, query tile), head-major

  auto load_query_tile = [&](int it, int stage) {
    const int hh = it / tiles, i0 = i_start + (it - hh * tiles) * BQ;
    const long long q_row0 = ((long long)b * q_heads + kv_head * group + hh) * q_len;
    load_rows_async<BQ>(smem_u32(qs + stage * BQ * SD), q + q_row0 * D, i0, q_len);
    load_rows_async<BQ>(smem_u32(dos + stage * BQ * SD), dout + q_row0 * D, i0, q_len);
    load_floats_async<BQ>(smem_u32(dd_s + stage * BQ), delta + q_row0, i0, q_len);
    load_floats_async<BQ>(smem_u32(l2_s + stage * BQ), lse_log2 + q_row0, i0, q_len);
  };
  if (iterations > 0) {
    load_rows_async<BK>(smem_u32(ks), k + kv_row0 * D, j0, k_len);
    load_rows_async<BK>(smem_u32(vs), v + kv_row0 * D, j0, k_len);
    load_query_tile(0, 0);
  }
  cp_async_commit();

  float dk_acc[CHUNKS][4], dv_acc[CHUNKS][4];
  #pragma unroll
  for (int n = 0; n < CHUNKS; n++)
    #pragma unroll
    for (int e = 0; e < 4; e++) { dk_acc[n][e] = 0.f; dv_acc[n][e] = 0.f; }
  // This lane's ldmatrix addresses (mma-lib.ts): A operands and .trans B operands from row-major
  // [m or k][..] tiles use (a_row, a_col); B operands from row-major [n][k] tiles use (b_row, b_col).
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
  const u32 k_frag = smem_u32(ks + (warp * 16 + a_row) * SD + a_col);
  const u32 v_frag = smem_u32(vs + (warp * 16 + a_row) * SD + a_col);

  for (int it = 0; it < iterations; it++) {
    const int stage = it & 1;
    if (it + 1 < iterations) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // this stage's tile (and K, V) landed for every thread
    const int i0 = i_start + (it % tiles) * BQ;
    const u32 q_b = smem_u32(qs + stage * BQ * SD + b_row * SD + b_col);
    const u32 do_b = smem_u32(dos + stage * BQ * SD + b_row * SD + b_col);
    const u32 q_bt = smem_u32(qs + stage * BQ * SD + a_row * SD + a_col);
    const u32 do_bt = smem_u32(dos + stage * BQ * SD + a_row * SD + a_col);
    const float* ddt = dd_s + stage * BQ;
    const float* l2t = l2_s + stage * BQ;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this warp's 16 keys × BQ queries.
    float st[QT][4], dpt[QT][4];
    #pragma unroll
    for (int n = 0; n < QT; n++)
      #pragma unroll
      for (int e = 0; e < 4; e++) { st[n][e] = 0.f; dpt[n][e] = 0.f; }
    #pragma unroll
    for (int kk = 0; kk < KD; kk++) {
      u32 ak[4], av[4];
      ldsm_x4(k_frag + kk * 32, ak);
      ldsm_x4(v_frag + kk * 32, av);
      #pragma unroll
      for (int np = 0; np < QT / 2; np++) {
        u32 bq[4], bo[4];
        ldsm_x4(q_b + np * 16 * ROW_BYTES + kk * 32, bq);
        ldsm_x4(do_b + np * 16 * ROW_BYTES + kk * 32, bo);
        mma_16816<T>(st[2 * np], ak, bq[0], bq[1]);
        mma_16816<T>(st[2 * np + 1], ak, bq[2], bq[3]);
        mma_16816<T>(dpt[2 * np], av, bo[0], bo[1]);
        mma_16816<T>(dpt[2 * np + 1], av, bo[2], bo[3]);
      }
    }
    // Pᵀ and dSᵀ in place. Element (n, e): key j0 + 16·warp + g + 8·(e/2), query i0 + 8n + 2t + e%2.
    const bool masked = (PADDING && j0 + BK > valid) || (CAUSAL && i0 + offset < j0 + BK - 1);
    #pragma unroll
    for (int n = 0; n < QT; n++) {
      const float2 l2 = *reinterpret_cast<const float2*>(l2t + n * 8 + 2 * t);
      const float2 dd = *reinterpret_cast<const float2*>(ddt + n * 8 + 2 * t);
      #pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = exp2_fast(fmaf(st[n][e], scale_log2e, -((e & 1) ? l2.y : l2.x)));
        if (masked) {
          const int j = j0 + warp * 16 + g + (e >> 1) * 8, i = i0 + n * 8 + 2 * t + (e & 1);
          if ((PADDING && j >= valid) || (CAUSAL && j > i + offset)) p = 0.f;
        }
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - ((e & 1) ? dd.y : dd.x));
      }
    }
    // dV += Pᵀ·dO and dK += dSᵀ·Q over the tile's queries (k), across d (n).
    #pragma unroll
    for (int kq = 0; kq < BQ / 16; kq++) {
      u32 ap[4], as[4];
      accumulators_to_a(ap, st[2 * kq], st[2 * kq + 1]);
      accumulators_to_a(as, dpt[2 * kq], dpt[2 * kq + 1]);
      #pragma unroll
      for (int np = 0; np < KD; np++) {
        u32 bo[4], bq[4];
        ldsm_x4_trans(do_bt + kq * 16 * ROW_BYTES + np * 32, bo);
        ldsm_x4_trans(q_bt + kq * 16 * ROW_BYTES + np * 32, bq);
        mma_16816<T>(dv_acc[2 * np], ap, bo[0], bo[1]);
        mma_16816<T>(dv_acc[2 * np + 1], ap, bo[2], bo[3]);
        mma_16816<T>(dk_acc[2 * np], as, bq[0], bq[1]);
        mma_16816<T>(dk_acc[2 * np + 1], as, bq[2], bq[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // K and V are no longer read (and no copy into them is in flight): stage dK, dV there
  stage_accumulators<CHUNKS>(ks, warp * 16, dk_acc, scale);
  stage_accumulators<CHUNKS>(vs, warp * 16, dv_acc, 1.f);
  __syncthreads();
  store_rows<BK>(dk + kv_row0 * D, ks, j0, k_len);
  store_rows<BK>(dv + kv_row0 * D, vs, j0, k_len);
}
`;
  return { name, source: preamble(spec, { BK: KV_BLOCK, BQ: dkdvQueryTile(spec.headDim), CAUSAL: spec.causal, PADDING: spec.padding }) + body };
}

export function flashBackwardDqSource(spec: FlashBackwardSpec): KernelSource {
  const name = kernelIdentifier(flashBackwardKey('dq', spec));
  const body = String.raw`
static_assert(BQ == WARPS * 16 && BKV % 16 == 0, "a warp per 16 queries");
constexpr int KT = BKV / 8;   // n8 tiles across the key tile

extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}, T* __restrict__ dq,
    ${SHAPE_PARAMS}) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);   // [BQ][SD]
  T* dos = qs + BQ * SD;                // [BQ][SD]
  T* ks = dos + BQ * SD;                // [2][BKV][SD]
  T* vs = ks + 2 * BKV * SD;            // [2][BKV][SD]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Reverse order: with a causal mask the last query tiles see the most keys, so they start first.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ, h = blockIdx.y, b = blockIdx.z;
  const long long q_row0 = ((long long)b * q_heads + h) * q_len;
  const long long kv_row0 = ((long long)b * (q_heads / group) + h / group) * k_len;
  const int key_limit = PADDING ? max(0, min(key_lengths[b], k_len)) : k_len;
  const int offset = k_len - q_len;  // causal: query i sees keys j <= i + offset
  // The tile's last row sees the most keys.
  const int kv_end = CAUSAL ? max(0, min(key_limit, min(q0 + BQ, q_len) + offset)) : key_limit;
  const int kv_tiles = (kv_end + BKV - 1) / BKV;

  if (kv_tiles > 0) {
    load_rows_async<BQ>(smem_u32(qs), q + q_row0 * D, q0, q_len);
    load_rows_async<BQ>(smem_u32(dos), dout + q_row0 * D, q0, q_len);
    load_rows_async<BKV>(smem_u32(ks), k + kv_row0 * D, 0, k_len);
    load_rows_async<BKV>(smem_u32(vs), v + kv_row0 * D, 0, k_len);
  }
  cp_async_commit();
  // This thread's two rows: q0 + 16·warp + g and 8 below. Rows past Lq: D = lse = 0 (never stored).
  int rows[2];
  float dd[2], l2[2];
  #pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    rows[hf] = q0 + warp * 16 + g + 8 * hf;
    const bool in = rows[hf] < q_len;
    dd[hf] = in ? delta[q_row0 + rows[hf]] : 0.f;
    l2[hf] = in ? lse_log2[q_row0 + rows[hf]] : 0.f;
  }
  float dq_acc[CHUNKS][4];
  #pragma unroll
  for (int n = 0; n < CHUNKS; n++)
    #pragma unroll
    for (int e = 0; e < 4; e++) dq_acc[n][e] = 0.f;
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
  const u32 q_frag = smem_u32(qs + (warp * 16 + a_row) * SD + a_col);
  const u32 do_frag = smem_u32(dos + (warp * 16 + a_row) * SD + a_col);

  for (int jt = 0; jt < kv_tiles; jt++) {
    const int stage = jt & 1, j0 = jt * BKV;
    if (jt + 1 < kv_tiles) {
      load_rows_async<BKV>(smem_u32(ks + (stage ^ 1) * BKV * SD), k + kv_row0 * D, j0 + BKV, k_len);
      load_rows_async<BKV>(smem_u32(vs + (stage ^ 1) * BKV * SD), v + kv_row0 * D, j0 + BKV, k_len);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const u32 k_b = smem_u32(ks + stage * BKV * SD + b_row * SD + b_col);
    const u32 v_b = smem_u32(vs + stage * BKV * SD + b_row * SD + b_col);
    const u32 k_bt = smem_u32(ks + stage * BKV * SD + a_row * SD + a_col);

    // S = Q·Kᵀ and dP = dO·Vᵀ for this warp's 16 queries × BKV keys.
    float s[KT][4], dp[KT][4];
    #pragma unroll
    for (int n = 0; n < KT; n++)
      #pragma unroll
      for (int e = 0; e < 4; e++) { s[n][e] = 0.f; dp[n][e] = 0.f; }
    #pragma unroll
    for (int kk = 0; kk < KD; kk++) {
      u32 aq[4], ao[4];
      ldsm_x4(q_frag + kk * 32, aq);
      ldsm_x4(do_frag + kk * 32, ao);
      #pragma unroll
      for (int np = 0; np < KT / 2; np++) {
        u32 bk[4], bv[4];
        ldsm_x4(k_b + np * 16 * ROW_BYTES + kk * 32, bk);
        ldsm_x4(v_b + np * 16 * ROW_BYTES + kk * 32, bv);
        mma_16816<T>(s[2 * np], aq, bk[0], bk[1]);
        mma_16816<T>(s[2 * np + 1], aq, bk[2], bk[3]);
        mma_16816<T>(dp[2 * np], ao, bv[0], bv[1]);
        mma_16816<T>(dp[2 * np + 1], ao, bv[2], bv[3]);
      }
    }
    // dS in place of S. Element (n, e): query rows[e/2], key j0 + 8n + 2t + e%2. Keys past Lk are
    // masked here too: their zero-filled K gives S = 0, whose P is not 0.
    const bool masked = j0 + BKV > key_limit || (CAUSAL && j0 + BKV - 1 > q0 + offset);
    #pragma unroll
    for (int n = 0; n < KT; n++) {
      #pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = exp2_fast(fmaf(s[n][e], scale_log2e, -l2[e >> 1]));
        if (masked) {
          const int j = j0 + n * 8 + 2 * t + (e & 1);
          if (j >= key_limit || (CAUSAL && j > rows[e >> 1] + offset)) p = 0.f;
        }
        s[n][e] = p * (dp[n][e] - dd[e >> 1]);
      }
    }
    // dQ += dS·K over the tile's keys (k), across d (n).
    #pragma unroll
    for (int kk = 0; kk < BKV / 16; kk++) {
      u32 a[4];
      accumulators_to_a(a, s[2 * kk], s[2 * kk + 1]);
      #pragma unroll
      for (int np = 0; np < KD; np++) {
        u32 bk[4];
        ldsm_x4_trans(k_bt + kk * 16 * ROW_BYTES + np * 32, bk);
        mma_16816<T>(dq_acc[2 * np], a, bk[0], bk[1]);
        mma_16816<T>(dq_acc[2 * np + 1], a, bk[2], bk[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // Q is no longer read: stage dQ there
  stage_accumulators<CHUNKS>(qs, warp * 16, dq_acc, scale);
  __syncthreads();
  store_rows<BQ>(dq + q_row0 * D, qs, q0, q_len);
}
`;
  return { name, source: preamble(spec, { BQ: Q_BLOCK, BKV: DQ_KEY_TILE, CAUSAL: spec.causal, PADDING: spec.padding }) + body };
}

// ---- launcher ----------------------------------------------------------------------------------------

/** flashAttentionBackward's arguments after checkFlashAttentionBackward. */
export interface FlashBackwardProblem {
  q: Tensor; k: Tensor; v: Tensor; out: Tensor; dOut: Tensor; lse: Tensor;
  dq: Tensor; dk: Tensor; dv: Tensor;
  keyLengths: Tensor | undefined;
  scale: number;
  causal: boolean;
  B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; group: number;
}

const ALIGNED_TENSORS = ['q', 'k', 'v', 'out', 'dOut', 'dq', 'dk', 'dv'] as const;

/**
 * Whether the tensor-core kernels take this problem: f16/bf16, d a multiple of 16 up to 128, every
 * [.., d] tensor 16-byte aligned (cp.async and the 16-byte stores), and the grid and shared memory
 * within the device's limits. Otherwise the SIMT kernels run.
 */
export function flashBackwardApplies(host: KernelHost, check: OpCheck, p: FlashBackwardProblem): boolean {
  if (!flashBackwardSupports(p.q.dtype as FloatDType, p.d)) return false;
  if (p.Hq > MAX_GRID_YZ || p.B > MAX_GRID_YZ) return false;
  if (ALIGNED_TENSORS.some((name) => devicePtr(check, name, p[name]) % 16n !== 0n)) return false;
  return Math.max(flashBackwardSharedBytes('dkdv', p.d), flashBackwardSharedBytes('dq', p.d)) <= host.maxSharedBytesPerBlock;
}

/**
 * preprocess (D, lse·log2 e into scratch) → dK/dV (a block per kv tile) → dQ (a block per query
 * tile). Call only where flashBackwardApplies.
 */
export function flashAttentionBackwardTensorCore(host: KernelHost, check: OpCheck, p: FlashBackwardProblem): void {
  const { B, Hq, Hkv, Lq, Lk, d, group, scale, causal, keyLengths } = p;
  const spec: FlashBackwardSpec = { dtype: p.q.dtype as FlashBackwardDType, headDim: d, causal, padding: keyLengths !== undefined };
  const rows = B * Hq * Lq;
  // D then lse·log2 e, rows floats each.
  const delta = host.scratch(Math.max(16, 8 * rows));
  const lseLog2 = delta + BigInt(4 * rows);
  const inputs = [
    arg.ptr(devicePtr(check, 'q', p.q)), arg.ptr(devicePtr(check, 'k', p.k)), arg.ptr(devicePtr(check, 'v', p.v)),
    arg.ptr(devicePtr(check, 'dOut', p.dOut)), arg.ptr(delta), arg.ptr(lseLog2),
  ];
  const shape = [
    arg.ptr(keyLengths ? devicePtr(check, 'keyLengths', keyLengths) : 0n),
    arg.i32(Lq), arg.i32(Lk), arg.i32(Hq), arg.i32(group), arg.f32(scale), arg.f32(scale * Math.LOG2E),
  ];
  if (rows > 0) {
    const preprocess = host.kernel(flashBackwardKey('preprocess', spec), () => flashBackwardPreprocessSource(spec));
    preprocess.launch(
      { grid: Math.ceil(rows / PREPROCESS_ROWS), block: FLASH_BACKWARD_THREADS },
      [arg.ptr(devicePtr(check, 'out', p.out)), arg.ptr(devicePtr(check, 'dOut', p.dOut)), arg.ptr(devicePtr(check, 'lse', p.lse)),
        arg.ptr(delta), arg.ptr(lseLog2), arg.i64(BigInt(rows))],
    );
  }
  if (B * Hkv * Lk > 0) {
    const dkdv = host.kernel(flashBackwardKey('dkdv', spec), () => flashBackwardDkDvSource(spec));
    dkdv.launch(
      { grid: [Math.ceil(Lk / KV_BLOCK), Hkv, B], block: FLASH_BACKWARD_THREADS, sharedBytes: flashBackwardSharedBytes('dkdv', d) },
      [...inputs, arg.ptr(devicePtr(check, 'dk', p.dk)), arg.ptr(devicePtr(check, 'dv', p.dv)), ...shape],
    );
  }
  if (rows > 0) {
    const dq = host.kernel(flashBackwardKey('dq', spec), () => flashBackwardDqSource(spec));
    dq.launch(
      { grid: [Math.ceil(Lq / Q_BLOCK), Hq, B], block: FLASH_BACKWARD_THREADS, sharedBytes: flashBackwardSharedBytes('dq', d) },
      [...inputs, arg.ptr(devicePtr(check, 'dq', p.dq)), ...shape],
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
  return sources;
}
