// INT4 weight-only kernels (W4A16): the dequantizing GEMV for decode, the tensor-core GEMM for
// prefill, and the round-to-nearest weight quantizer. backend.ts (Int4LinearArgs) has the contract.
//
// Weight layout ("n-major", one row of packed words per output feature):
//   qweight u32 [N, K/8]   q[n, k] = nibble k%8 (bits 4·(k%8)) of qweight[n, k/8]
//   scales  f16 [N, K/G]   zeros u8 [N, K/G]      w[n, k] = scale·(q − zero), G = groupSize
// A row of N's packed words is K/2 bytes, 16-byte aligned because K is a multiple of 32.
//
// ==== GEMV (M ≤ 8 rows per block; also f32 activations at any M) ======================================
// Memory-bound: every weight byte is read once, as 16-byte vectors, and x (a few KiB) stays in L1/L2.
// Thread mapping: a lane owns 32 consecutive k (4 packed words = one 16-byte load per column) of COLS
// columns; a warp covers 1024 k per step ("chunk"), so one warp-wide load reads 512 contiguous bytes
// of one column's row. A block has KW × CG warps: CG column groups of COLS columns, and KW warps
// splitting K (warp kw takes chunks kw, kw + KW, …). Rows: the block handles MR rows (blockIdx.y picks
// the row chunk), reusing each dequantized nibble for all MR rows.
// Dequantization without int→float conversions: a nibble q becomes the float 1 + q/16 by OR-ing it into
// the mantissa of 1.0 (0x3F800000 | q << 19). Over the lane's 32 k (one group, since G ≥ 32 and the
// chunks are aligned):  Σ x·s·(q − z) = s·(16·Σ x·(1 + q/16) − (16 + z)·Σ x),
// so the inner loop is one FMA per weight per row (plus the OR), and the group's scale is applied once.
// Reduction: shuffles within a warp, then the KW partial sums through shared memory in a fixed order
// (deterministic), and warp kw = 0 writes act(Σ + bias).
// Latency: a lane's first chunk of weights (words, scales, zeros) is loaded before GRID_DEPENDENCY_WAIT,
// so under a programmatic launch it is in flight during the previous kernel's tail (the weights never
// depend on it), and each further chunk is loaded before the current one is used.
// Bytes: K·N/2 (weights) + K·N/G·3 (scales, zeros) + M·K·s (x, cached) + M·N·s (out).
//
// ==== tiled GEMM (f16/bf16, M > 8) =================================================================
// Block tile BM × BN × 64 (BM ∈ {32, 64, 128}, BN ∈ {64, 128}), 256 threads = 8 warps as 2 (M) × 4 (N),
// warp tile (BM/2) × (BN/4) of mma.sync m16n8k16 with f32 accumulators. Per 64-k step:
//   A (x) goes global → shared with cp.async (16-byte chunks, zero-filled past M or K);
//   B: each of 2·BN threads loads one 16-byte vector of packed words (32 k of one column) plus its
//   group's scale and zero into registers one step ahead, and after the step's MMAs dequantizes them
//   into the other shared stage as the activation dtype ([n][k] rows, like Kᵀ in attention);
//   fragments come from shared memory by ldmatrix (XOR-swizzled 128-byte rows: conflict-free).
// Two stages: the next tile's loads are in flight while the current one is multiplied.
// Precision: each dequantized weight is rounded to the activation dtype before the tensor-core
// product (the CPU reference keeps it exact): a relative change of at most 2^-9 (bf16) per weight.
// Split-K when the M × N tiles alone cannot fill the GPU: grid.z = S slices of K write f32 partials
// [S, M, N] to scratch, and a second kernel adds them in slice order (deterministic) with bias and
// activation. Bytes: K·N/2·⌈M/BM⌉ (weights, per row tile) + M·K·s·⌈N/BN⌉ (x) + M·N·s (+ 8·S·M·N split-K).
//
// ==== weight quantizer ===========================================================================
// One thread per (row n, group): min/max over the group's G values (zero included), the f16 scale, the
// zero point, then the G nibbles packed 8 per word — the same f32 operations as backend/cpu/quant-math.ts
// (__fdiv_rn, rintf), so the integers and scales match the CPU bit for bit.

import type { Activation, Int4LinearArgs, Int4QuantizeWeightsArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import type { Tensor } from '../../../tensor.js';
import { byteSize } from '../../../dtype.js';
import { checkInt4Linear, checkInt4QuantizeWeights } from '../../op-checks/quant.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';
import { int4StreamEpilogue, launchStreamInt4, planStreamInt4, streamInt4Applies } from './gemm-stream.js';
import { envFlag } from '../env-switch.js';
import { gatedActivation } from './gated-activation.js';
import { INT4_MMA_CHUNK_K, INT4_MMA_MAX_ROWS, int4MmaGemvApplies, int4MmaNormFits, launchInt4MmaGemv } from './gemv-int4-mma.js';
import type { CheckedNorm } from './gemv.js';
import { normGemvApplies, prologueNorm, QUANT_NORM_PROLOGUE_AUTO_MAX_K } from './gemv.js';
import { CudaTensor } from '../runtime/tensor.js';
import { weightLoadCode } from './weight-stream.js';

export type EpilogueActivation = Activation | 'none';

/** f32 device expressions of the epilogue activations (precision over speed: they run once per output). */
export const EPILOGUE_ACTIVATION_CODE = String.raw`
__device__ __forceinline__ float epilogue_silu(float x) { return x / (1.f + expf(-x)); }
`;

export function activationExpression(activation: EpilogueActivation, v: string): string {
  switch (activation) {
    case 'none': return v;
    case 'relu': return `relu_f(${v})`;
    case 'gelu': return `gelu_erf(${v})`;
    case 'gelu_tanh': return `gelu_tanh(${v})`;
    case 'silu': return `epilogue_silu(${v})`;
  }
}

/** Packed words, streamed past L1 (each is read once). */
function streamLoadCode(): string {
  return String.raw`
${weightLoadCode('load_stream_u4', 'u32', 'int4', { volatile: false })}
__device__ __forceinline__ u32 word_of(const uint4& w, int j) { return j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w; }
`;
}

// ==== GEMV ==========================================================================================

export interface Int4GemvSpec {
  readonly dtype: FloatDType;
  /** Rows per block (MR): 1, 2, 4 or 8. */
  readonly rows: number;
  readonly K: number;
  readonly groupSize: number;
  /** Columns per lane (COLS): 1, 2 or 4. */
  readonly cols: number;
  /** Warps splitting K (KW), 1..8. */
  readonly kWarps: number;
  /** Column groups (warps along N) per block (CG); kWarps · colGroups ≤ 8. */
  readonly colGroups: number;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
  /**
   * Gated (int4Linear's `gated`): each of a lane's COLS output columns n reads two weight rows, the
   * gate's n and the up projection's F + n, and the lane writes act(g)·u; N (the launch argument) is F.
   */
  readonly gated?: boolean;
}

export function int4GemvKey(s: Int4GemvSpec): string {
  return `int4_gemv.${s.dtype}.r${s.rows}.k${s.K}.g${s.groupSize}.c${s.cols}.kw${s.kWarps}.cg${s.colGroups}${s.bias ? '.bias' : ''}.${s.activation}${s.gated ? '.gated' : ''}`;
}

const CHUNK_K = 1024;

export function int4GemvSource(spec: Int4GemvSpec): KernelSource {
  const name = kernelIdentifier(int4GemvKey(spec));
  const threads = 32 * spec.kWarps * spec.colGroups;
  const source = String.raw`${DEVICE_LIB}
${streamLoadCode()}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({
    MR: spec.rows, K: spec.K, G: spec.groupSize, COLS: spec.cols, KW: spec.kWarps, CG: spec.colGroups, THREADS: threads,
    WORDS_PER_ROW: spec.K / 8, GROUPS: spec.K / spec.groupSize, CHUNKS: Math.ceil(spec.K / CHUNK_K), HAS_BIAS: spec.bias,
    GATED: spec.gated === true, NC: spec.gated ? 2 * spec.cols : spec.cols,
  })}

// Internal column j of a lane: its output column n0 + j % COLS, and the weight row it reads (gated: the
// gate's row for j < COLS, the up projection's F + n for the others; N is F then).
__device__ __forceinline__ int weight_row(int n0, int j, int N) { return GATED && j >= COLS ? N + n0 + j - COLS : n0 + j; }

// 1 + q/16 for nibble j of w: q in the top mantissa bits of 1.0.
__device__ __forceinline__ float nibble_float(u32 w, int j) {
  return __int_as_float(0x3F800000u | (((w >> (4 * j)) & 0xFu) << 19));
}

extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const T* __restrict__ x, const u32* __restrict__ qweight, const __half* __restrict__ scales,
    const unsigned char* __restrict__ zeros, const T* __restrict__ bias, T* __restrict__ out, int M, int N) {
  __shared__ float partial[KW > 1 ? (KW - 1) * CG * NC * MR : 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int kw = warp % KW, cg = warp / KW;
  const int n0 = (blockIdx.x * CG + cg) * COLS;
  const int m0 = blockIdx.y * MR;
  const int rows = min(MR, M - m0);

  float acc[NC][MR];
  #pragma unroll
  for (int c = 0; c < NC; c++)
    #pragma unroll
    for (int m = 0; m < MR; m++) acc[c][m] = 0.f;

  // A lane's packed words, scales and zeros of one chunk (zeros past K or N: they add nothing).
  uint4 w[NC];
  float s[NC], zf[NC];
  auto load_chunk = [&](int chunk) {
    const int k0 = chunk * ${CHUNK_K} + lane * 32;
    const int group = k0 / G;
    #pragma unroll
    for (int c = 0; c < NC; c++) {
      const int r = weight_row(n0, c, N);
      if (chunk < CHUNKS && k0 < K && n0 + c % COLS < N) {
        w[c] = load_stream_u4(qweight + (size_t)r * WORDS_PER_ROW + k0 / 8);
        s[c] = __half2float(scales[(size_t)r * GROUPS + group]);
        zf[c] = 16.f + (float)zeros[(size_t)r * GROUPS + group];
      } else {
        w[c] = make_uint4(0u, 0u, 0u, 0u);
        s[c] = 0.f;
        zf[c] = 16.f;
      }
    }
  };
  // The first chunk's weights are in flight before waiting for the kernel that writes x (programmatic
  // launch: the weights never depend on it); the next chunk's are loaded before this one is used.
  load_chunk(kw);
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();

  for (int chunk = kw; chunk < CHUNKS; chunk += KW) {
    const int k0 = chunk * ${CHUNK_K} + lane * 32;
    if (k0 >= K) break; // k0 only grows with chunk
    uint4 wcur[NC];
    float scur[NC], zcur[NC];
    #pragma unroll
    for (int c = 0; c < NC; c++) { wcur[c] = w[c]; scur[c] = s[c]; zcur[c] = zf[c]; }
    if (chunk + KW < CHUNKS) load_chunk(chunk + KW);
    float dot[NC][MR], xs[MR];
    #pragma unroll
    for (int m = 0; m < MR; m++) {
      xs[m] = 0.f;
      #pragma unroll
      for (int c = 0; c < NC; c++) dot[c][m] = 0.f;
    }
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      float f[NC][8];
      #pragma unroll
      for (int c = 0; c < NC; c++) {
        const u32 word = word_of(wcur[c], j);
        #pragma unroll
        for (int e = 0; e < 8; e++) f[c][e] = nibble_float(word, e);
      }
      #pragma unroll
      for (int m = 0; m < MR; m++) {
        if (m < rows) {
          float xv[8];
          load_floats<T, 8>(x + (size_t)(m0 + m) * K + k0 + 8 * j, xv, 8);
          #pragma unroll
          for (int e = 0; e < 8; e++) {
            xs[m] += xv[e];
            #pragma unroll
            for (int c = 0; c < NC; c++) dot[c][m] = fmaf(xv[e], f[c][e], dot[c][m]);
          }
        }
      }
    }
    #pragma unroll
    for (int c = 0; c < NC; c++)
      #pragma unroll
      for (int m = 0; m < MR; m++) acc[c][m] = fmaf(scur[c], fmaf(16.f, dot[c][m], -zcur[c] * xs[m]), acc[c][m]);
  }

  #pragma unroll
  for (int c = 0; c < NC; c++)
    #pragma unroll
    for (int m = 0; m < MR; m++) acc[c][m] = warp_sum(acc[c][m]);
  if (KW > 1) {
    if (kw > 0 && lane == 0) {
      #pragma unroll
      for (int c = 0; c < NC; c++)
        #pragma unroll
        for (int m = 0; m < MR; m++) partial[(((kw - 1) * CG + cg) * NC + c) * MR + m] = acc[c][m];
    }
    __syncthreads();
  }
  if (kw != 0) return;
  #pragma unroll
  for (int c = 0; c < COLS; c++) {
    #pragma unroll
    for (int m = 0; m < MR; m++) {
      if (lane == c * MR + m) {
        const int n = n0 + c;
        if (n < N && m < rows) {
          float v = acc[c][m];
          #pragma unroll
          for (int p = 1; p < KW; p++) v += partial[(((p - 1) * CG + cg) * NC + c) * MR + m];
          if (HAS_BIAS) v += to_float(bias[n]);
          if (GATED) {
            float u = acc[COLS + c][m];
            #pragma unroll
            for (int p = 1; p < KW; p++) u += partial[(((p - 1) * CG + cg) * NC + COLS + c) * MR + m];
            if (HAS_BIAS) u += to_float(bias[N + n]);
            out[(size_t)(m0 + m) * N + n] = from_float<T>(${activationExpression(spec.activation, 'v')} * u);
          } else {
            out[(size_t)(m0 + m) * N + n] = from_float<T>(${activationExpression(spec.activation, 'v')});
          }
        }
      }
    }
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export interface GemvPlan {
  readonly spec: Int4GemvSpec;
  readonly grid: readonly [number, number];
  readonly block: number;
}

const MAX_GEMV_ROWS = 8;
const GEMV_WARPS = 8;

/**
 * Rows per block (a power of two ≤ 8), K split over up to 8 warps, and as many columns per lane as still
 * give two waves of blocks. N is the output width (F when gated: each column then reads two weight
 * rows, so at most 2 columns a lane keep the loads in flight per lane as without gating).
 */
export function planInt4Gemv(dtype: FloatDType, M: number, N: number, K: number, groupSize: number, bias: boolean, activation: EpilogueActivation, multiProcessorCount: number, gated = false): GemvPlan {
  let rows = 1;
  while (rows < Math.min(M, MAX_GEMV_ROWS)) rows *= 2;
  const rowChunks = Math.ceil(M / rows);
  const kWarps = Math.min(GEMV_WARPS, Math.ceil(K / CHUNK_K));
  const colGroups = Math.max(1, Math.floor(GEMV_WARPS / kWarps));
  let cols = gated ? 2 : 4;
  while (cols > 1 && Math.ceil(N / (colGroups * cols)) * rowChunks < 2 * multiProcessorCount) cols /= 2;
  const spec: Int4GemvSpec = { dtype, rows, K, groupSize, cols, kWarps, colGroups, bias, activation, ...(gated ? { gated: true } : {}) };
  return { spec, grid: [Math.ceil(N / (colGroups * cols)), rowChunks], block: 32 * kWarps * colGroups };
}

// ==== tiled GEMM ====================================================================================

export interface Int4GemmSpec {
  readonly dtype: 'f16' | 'bf16';
  readonly K: number;
  readonly groupSize: number;
  /** Block rows: 32, 64 or 128. */
  readonly bm: number;
  /** Block columns: 64 or 128. */
  readonly bn: number;
  /** Split-K: f32 partials to scratch instead of the epilogue (the finish kernel applies it). */
  readonly splitK: boolean;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
}

export function int4GemmKey(s: Int4GemmSpec): string {
  const epilogue = s.splitK ? 'partials' : `${s.bias ? 'bias.' : ''}${s.activation}`;
  return `int4_gemm.${s.dtype}.k${s.K}.g${s.groupSize}.m${s.bm}.n${s.bn}.${epilogue}`;
}

const GEMM_THREADS = 256;
const BK = 64;

/** Dynamic shared memory of the tiled kernel: two stages of A (BM × 64) and B (BN × 64), 16-bit. */
export function int4GemmSharedBytes(bm: number, bn: number): number {
  return 2 * (bm + bn) * BK * 2;
}

/**
 * What the INT4 GEMM adds to mma-lib.ts's building blocks: its tiles have 128-byte rows (8 chunks, the
 * swizzle of swizzled_offset<8>), a 16-byte shared store for dequantized weights, and the nibble trick.
 */
const INT4_MMA_CODE = String.raw`
__device__ __forceinline__ u32 tile_offset(int row, int chunk) { return swizzled_offset<8>(row, chunk); }
__device__ __forceinline__ void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// q (0..15) as an exact float: OR-ed into the mantissa of 2^23, minus 2^23 folded into the zero.
__device__ __forceinline__ float nibble_plus_2p23(u32 w, int shift) { return __int_as_float(0x4B000000u | ((w >> shift) & 0xFu)); }
`;

export function int4GemmSource(spec: Int4GemmSpec): KernelSource {
  const name = kernelIdentifier(int4GemmKey(spec));
  const { bm, bn } = spec;
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${INT4_MMA_CODE}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({
    K: spec.K, G: spec.groupSize, BM: bm, BN: bn, BK, THREADS: GEMM_THREADS, MT: bm / 32, NT: bn / 32,
    WORDS_PER_ROW: spec.K / 8, GROUPS: spec.K / spec.groupSize, KT: Math.ceil(spec.K / BK),
    A_STAGE: bm * BK * 2, B_STAGE: bn * BK * 2, SPLIT_K: spec.splitK, HAS_BIAS: spec.bias,
  })}

// out [M, N] (or f32 partials [gridDim.z, M, N] with SPLIT_K); blockIdx.z = the slice of K's 64-wide steps.
// Two blocks per SM (≤ 128 registers a thread): one block's MMAs overlap the other's loads and dequantization.
extern "C" __global__ void __launch_bounds__(THREADS, 2) ${name}(
    const T* __restrict__ x, const u32* __restrict__ qweight, const __half* __restrict__ scales,
    const unsigned char* __restrict__ zeros, const T* __restrict__ bias, T* __restrict__ out,
    float* __restrict__ partials, int M, int N) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 sA = smem_u32(smem), sB = sA + 2 * A_STAGE;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int kt_begin = (int)(((long long)KT * blockIdx.z) / gridDim.z);
  const int kt_end = (int)(((long long)KT * (blockIdx.z + 1)) / gridDim.z);

  // A: BM rows × 8 chunks, BM/32 chunks per thread.
  auto load_a = [&](int kt, int stage) {
    #pragma unroll
    for (int i = 0; i < BM / 32; i++) {
      const int idx = tid + i * THREADS, row = idx >> 3, chunk = idx & 7;
      const int gm = m0 + row, gk = kt * BK + chunk * 8;
      const bool ok = gm < M && gk < K;
      cp_async_16(sA + stage * A_STAGE + tile_offset(row, chunk), ok ? (const void*)(x + (size_t)gm * K + gk) : (const void*)x, ok);
    }
  };
  // B: thread t < 2·BN owns column t/2, words 4·(t%2) .. +3 (k 32·(t%2) .. +31 of the step).
  const bool b_loader = tid < 2 * BN;
  const int b_col = tid >> 1, b_half = tid & 1, b_n = n0 + b_col;
  uint4 bw = make_uint4(0u, 0u, 0u, 0u);
  float bs = 0.f, bz = 0.f;
  auto fetch_b = [&](int kt) {
    const int gk = kt * BK + b_half * 32;
    if (b_loader && b_n < N && gk < K) {
      bw = *reinterpret_cast<const uint4*>(qweight + (size_t)b_n * WORDS_PER_ROW + gk / 8);
      const size_t g = (size_t)b_n * GROUPS + gk / G;
      bs = __half2float(scales[g]);
      bz = 8388608.f + (float)zeros[g];
    } else {
      bw = make_uint4(0u, 0u, 0u, 0u);
      bs = 0.f;
      bz = 8388608.f;
    }
  };
  auto store_b = [&](int stage) {
    if (!b_loader) return;
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      const u32 w = j == 0 ? bw.x : j == 1 ? bw.y : j == 2 ? bw.z : bw.w;
      u32 p[4];
      #pragma unroll
      for (int e = 0; e < 4; e++) {
        p[e] = pack2<T>(bs * (nibble_plus_2p23(w, 8 * e) - bz), bs * (nibble_plus_2p23(w, 8 * e + 4) - bz));
      }
      st_shared_v4(sB + stage * B_STAGE + tile_offset(b_col, b_half * 4 + j), p[0], p[1], p[2], p[3]);
    }
  };

  float acc[MT][NT][4];
  #pragma unroll
  for (int i = 0; i < MT; i++)
    #pragma unroll
    for (int j = 0; j < NT; j++)
      #pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

  auto compute = [&](int stage) {
    const u32 a_base = sA + stage * A_STAGE, b_base = sB + stage * B_STAGE;
    #pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
      u32 a[MT][4];
      #pragma unroll
      for (int i = 0; i < MT; i++) ldsm_x4(a_base + tile_offset(wm * (BM / 2) + i * 16 + (lane & 15), kk * 2 + (lane >> 4)), a[i]);
      u32 b[NT][2];
      #pragma unroll
      for (int jp = 0; jp < NT / 2; jp++) {
        u32 r[4];
        ldsm_x4(b_base + tile_offset(wn * (BN / 4) + jp * 16 + (lane & 7) + 8 * (lane >> 4), kk * 2 + ((lane >> 3) & 1)), r);
        b[2 * jp][0] = r[0]; b[2 * jp][1] = r[1]; b[2 * jp + 1][0] = r[2]; b[2 * jp + 1][1] = r[3];
      }
      #pragma unroll
      for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++) mma_16816<T>(acc[i][j], a[i], b[j][0], b[j][1]);
    }
  };

  if (kt_begin < kt_end) {
    load_a(kt_begin, 0);
    cp_async_commit();
    fetch_b(kt_begin);
    store_b(0);
    cp_async_wait<0>();
    __syncthreads();
    for (int kt = kt_begin; kt < kt_end; kt++) {
      const int stage = (kt - kt_begin) & 1;
      const bool more = kt + 1 < kt_end;
      if (more) {
        load_a(kt + 1, stage ^ 1);
        cp_async_commit();
        fetch_b(kt + 1);
      }
      compute(stage);
      if (more) store_b(stage ^ 1);
      cp_async_wait<0>();
      __syncthreads();
    }
  }

  const int g = lane >> 2, t = lane & 3;
  #pragma unroll
  for (int i = 0; i < MT; i++) {
    #pragma unroll
    for (int j = 0; j < NT; j++) {
      const int col = n0 + wn * (BN / 4) + j * 8 + 2 * t;
      #pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = m0 + wm * (BM / 2) + i * 16 + g + 8 * h;
        if (row >= M) continue;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (SPLIT_K) {
          float* p = partials + ((size_t)blockIdx.z * M + row) * N + col;
          if (col < N) p[0] = v0;
          if (col + 1 < N) p[1] = v1;
          continue;
        }
        if (HAS_BIAS) {
          if (col < N) v0 += to_float(bias[col]);
          if (col + 1 < N) v1 += to_float(bias[col + 1]);
        }
        v0 = ${activationExpression(spec.activation, 'v0')};
        v1 = ${activationExpression(spec.activation, 'v1')};
        T* p = out + (size_t)row * N + col;
        if ((N & 1) == 0 && col + 1 < N) {
          *reinterpret_cast<u32*>(p) = pack2<T>(v0, v1);
        } else {
          if (col < N) p[0] = from_float<T>(v0);
          if (col + 1 < N) p[1] = from_float<T>(v1);
        }
      }
    }
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export interface Int4SplitFinishSpec {
  readonly dtype: FloatDType;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
}

export function int4SplitFinishKey(s: Int4SplitFinishSpec): string {
  return `int4_split_finish.${s.dtype}${s.bias ? '.bias' : ''}.${s.activation}`;
}

const FINISH_THREADS = 256;

/** out[i] = act(Σ_s partials[s, i] + bias[i % N]), the slices added in order. */
export function int4SplitFinishSource(spec: Int4SplitFinishSpec): KernelSource {
  const name = kernelIdentifier(int4SplitFinishKey(spec));
  const source = String.raw`${DEVICE_LIB}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({ THREADS: FINISH_THREADS, HAS_BIAS: spec.bias })}

extern "C" __global__ void __launch_bounds__(THREADS) ${name}(const float* __restrict__ partials, const T* __restrict__ bias, T* __restrict__ out, long long count, int N, int slices) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < count; i += (long long)gridDim.x * THREADS) {
    float v = 0.f;
    for (int s = 0; s < slices; s++) v += partials[(size_t)s * count + i];
    if (HAS_BIAS) v += to_float(bias[i % N]);
    out[i] = from_float<T>(${activationExpression(spec.activation, 'v')});
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export interface GemmPlan {
  readonly spec: Int4GemmSpec;
  readonly grid: readonly [number, number, number];
  readonly sharedBytes: number;
  readonly slices: number;
}

/** Largest split of K: each slice keeps at least 4 of the 64-wide steps. */
const MIN_STEPS_PER_SLICE = 4;
const MAX_SLICES = 16;

/**
 * The largest tiles that still give one block per SM, then split-K up to about two blocks per SM
 * (each slice at least 4 k-steps).
 */
export function planInt4Gemm(dtype: 'f16' | 'bf16', M: number, N: number, K: number, groupSize: number, bias: boolean, activation: EpilogueActivation, multiProcessorCount: number): GemmPlan {
  let bm = 128, bn = 128;
  const blocks = () => Math.ceil(M / bm) * Math.ceil(N / bn);
  while (blocks() < multiProcessorCount && (bm > 32 || bn > 64)) {
    if (bm > 64 || (bm === 64 && M <= 32)) bm /= 2;
    else if (bn > 64) bn /= 2;
    else bm /= 2;
  }
  const steps = Math.ceil(K / BK);
  const maxSlices = Math.max(1, Math.min(MAX_SLICES, Math.floor(steps / MIN_STEPS_PER_SLICE)));
  const slices = Math.max(1, Math.min(maxSlices, Math.floor((2 * multiProcessorCount) / blocks())));
  const spec: Int4GemmSpec = { dtype, K, groupSize, bm, bn, splitK: slices > 1, bias: slices > 1 ? false : bias, activation: slices > 1 ? 'none' : activation };
  return { spec, grid: [Math.ceil(N / bn), Math.ceil(M / bm), slices], sharedBytes: int4GemmSharedBytes(bm, bn), slices };
}

// ==== the op ==========================================================================================

/** Largest M the GEMV takes for 16-bit activations; above it the tensor-core kernel runs. */
export const INT4_GEMV_MAX_ROWS = 8;

export type Int4Path = 'auto' | 'gemv' | 'gemm' | 'mma' | 'tma';

/**
 * When int4Linear's 'auto' path takes the INT4 form of the streamed GEMM (gemm-stream.ts: the packed
 * weights through a tensor-map ring, x staged once a block) instead of the mma GEMV (gemv-int4-mma.ts,
 * whose every block reads all M rows of x: at 32 rows 8× the bytes of its own weights). `enabled`:
 * FUSEFORMER_INT4_TMA=0 turns it off. `minRows` (FUSEFORMER_INT4_TMA_MIN_ROWS, 1–32) sets one row floor
 * for every product; 'auto' (unset) takes the measured ones: the gated MLP product from
 * INT4_TMA_AUTO_GATED_MIN_ROWS, the others from INT4_TMA_AUTO_PLAIN_MIN_ROWS. `gatedOnly`
 * (FUSEFORMER_INT4_TMA_GATED_ONLY): 1 the gated product alone, 0 every product; 'auto' (unset) the gated
 * product and the wide projections (N ≥ INT4_TMA_WIDE_MIN_N features of K ≤ INT4_TMA_WIDE_MAX_K).
 * Measured on the H200, each kernel alone (session 32, gemv-sweep --paths, Llama 1.2B, µs mma / streamed):
 *   QKV (3072 × 2048)   8 rows 4.09 / 4.33, 16 rows 5.67 / 5.20, 32 rows 8.31 / 6.71
 *   out (2048 × 2048)   3.37 / 3.56, 4.14 / 4.28, 5.64 / 5.81
 *   gate/up (gated)     8.15 / 12.71, 13.74 / 14.12, 26.28 / 15.95
 *   down (2048 × 8192)  6.99 / 9.53, 8.81 / 17.46, 14.55 / 21.60
 *   LM head (128256)    50.2 / 71.4, 92.1 / 78.6, 203.8 / 108.2
 * (session 26 had routed the gated product from 5 rows: slower there at 8.) At one row the streamed form
 * loses everywhere (gated 17.7 against 10.0 µs, session 26).
 */
export interface Int4TmaOptions { enabled: boolean; minRows: number | 'auto'; gatedOnly: boolean | 'auto' }

/** The rows the routing may take (gemm-stream.ts's STREAM_MIN_ROWS and STREAM_ROUTED_MAX_ROWS; literals here: the
 * options are read as this module loads, inside an import cycle with gemm-stream.ts). */
export const INT4_TMA_DEFAULT_MIN_ROWS = 5, INT4_TMA_MAX_ROWS = 32;
/** minRows 'auto': the gated product from 17 rows (the mma GEMV faster at 8, even at 16), the wide projections from 9. */
export const INT4_TMA_AUTO_GATED_MIN_ROWS = 17, INT4_TMA_AUTO_PLAIN_MIN_ROWS = 9;
/** gatedOnly 'auto': a projection is wide from this many output features, for K up to INT4_TMA_WIDE_MAX_K. */
export const INT4_TMA_WIDE_MIN_N = 3072, INT4_TMA_WIDE_MAX_K = 2048;

export function int4TmaOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): Int4TmaOptions {
  const rows = env['FUSEFORMER_INT4_TMA_MIN_ROWS'];
  let minRows: number | 'auto' = 'auto';
  if (rows !== undefined && rows !== '') {
    minRows = Number(rows);
    if (!Number.isInteger(minRows) || minRows < 1 || minRows > INT4_TMA_MAX_ROWS) {
      throw new Error(`FUSEFORMER_INT4_TMA_MIN_ROWS must be an integer from 1 to ${INT4_TMA_MAX_ROWS}, got '${rows}'`);
    }
  }
  const gatedOnly = env['FUSEFORMER_INT4_TMA_GATED_ONLY'];
  return {
    enabled: envFlag('FUSEFORMER_INT4_TMA', env['FUSEFORMER_INT4_TMA'], true),
    minRows,
    gatedOnly: gatedOnly === undefined || gatedOnly === '' ? 'auto' : envFlag('FUSEFORMER_INT4_TMA_GATED_ONLY', gatedOnly, true),
  };
}

/** The process's setting, read once (tests set it directly). */
export const int4TmaOptions: Int4TmaOptions = int4TmaOptionsFromEnv();

/**
 * Whether the options route an 'auto' int4Linear of M rows (gated or not; N output features and K inputs
 * of a projection) to the INT4 streamed GEMM, if it applies.
 */
export function int4TmaRoutes(M: number, gated: boolean, N: number, K: number, options: Int4TmaOptions = int4TmaOptions): boolean {
  if (!options.enabled) return false;
  const floor = options.minRows !== 'auto' ? options.minRows : gated ? INT4_TMA_AUTO_GATED_MIN_ROWS : INT4_TMA_AUTO_PLAIN_MIN_ROWS;
  if (M < floor) return false;
  if (gated) return true;
  return options.gatedOnly === 'auto' ? N >= INT4_TMA_WIDE_MIN_N && K <= INT4_TMA_WIDE_MAX_K : !options.gatedOnly;
}

/**
 * int4Linear on the GPU. `path` forces a kernel (benchmarks and tests); 'auto' takes the INT4 streamed
 * GEMM ('tma', gemm-stream.ts) where int4TmaOptions route it (the gated MLP product at 5–32 rows) and it
 * applies, then the tensor-core GEMV (gemv-int4-mma.ts) for
 * 1–32 rows of 16-bit x in groups of a multiple of 128 when `mma` allows, else the SIMT GEMV for M ≤ 8 or
 * f32 activations, and the tiled tensor-core GEMM otherwise.
 */
export function int4Linear(host: KernelHost, args: Int4LinearArgs, path: Int4Path = 'auto', mma = true): void {
  const c = new OpCheck('int4Linear', 'cuda');
  const { x, qweight, scales, zeros, out, bias, activation, gated, groupSize, M, N, K, argmax } = checkInt4Linear(c, args);
  const dtype = x.dtype as FloatDType;
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out), qPtr = devicePtr(c, 'qweight', qweight);
  if (xPtr % 16n !== 0n || qPtr % 16n !== 0n) c.fail(`'x' and 'qweight' must be 16-byte aligned (the kernels read 16-byte vectors); make a contiguous copy of an offset view`);
  if (dtype === 'f32' && xPtr % 32n !== 0n) c.fail(`f32 'x' must be 32-byte aligned`);
  if (M === 0 || N === 0) return;
  const act: EpilogueActivation = activation ?? 'none';
  const biasPtr = bias ? devicePtr(c, 'bias', bias) : 0n;
  const scalesPtr = devicePtr(c, 'scales', scales), zerosPtr = devicePtr(c, 'zeros', zeros);
  const common = [arg.ptr(xPtr), arg.ptr(qPtr), arg.ptr(scalesPtr), arg.ptr(zerosPtr), arg.ptr(biasPtr), arg.ptr(outPtr)];
  if (argmax) {
    // RowArgmax: formed by the tensor-core GEMV only (an LM head of 1–4 decode rows).
    if (!mma || (path !== 'auto' && path !== 'mma') || !int4MmaGemvApplies(dtype, M, groupSize) || M > 4) {
      c.fail(`'argmax' is formed by the INT4 tensor-core GEMV only: 1–4 rows of f16/bf16 x, groups a multiple of ${INT4_MMA_CHUNK_K}${mma ? '' : ' (the mma GEMV is off)'}; got ${M} rows of ${dtype}, groups of ${groupSize}, path '${path}'`);
    }
    launchInt4MmaGemv(host, {
      dtype: dtype as 'bf16' | 'f16', M, N, K, groupSize, gated, activation: act, x: xPtr, qweight: qPtr,
      scales: scalesPtr, zeros: zerosPtr, bias: biasPtr, out: outPtr, argmax: { out: devicePtr(c, 'argmax.out', argmax.out), classes: argmax.classes },
    });
    return;
  }
  if (path === 'tma' || (path === 'auto' && mma && int4TmaRoutes(M, gated, N, K))) {
    const applies = streamInt4Applies(host, dtype, M, K, groupSize, gated, bias !== undefined, act);
    if (!applies && path === 'tma') {
      c.fail(`the INT4 streamed GEMM takes 1–32 rows of f16/bf16 x on a GPU with tensor-map copies, K a multiple of 256, groups a multiple of 128 dividing K, and (not gated) no activation, a bias alone, or ReLU / tanh-GELU with a bias; got ${M} rows of ${dtype}, K ${K}, groups of ${groupSize}${gated ? ', gated' : `, ${bias ? 'a bias' : 'no bias'} and activation ${act}`}`);
    }
    if (applies) {
      const width = gated ? N / 2 : N;
      const gate = gated ? { activation: activation!, bias: bias !== undefined } : undefined;
      const plan = planStreamInt4(dtype as 'bf16' | 'f16', M, width, K, groupSize, gated ? 'none' : int4StreamEpilogue(bias !== undefined, act)!, gate, host.multiProcessorCount);
      launchStreamInt4(host, plan, { x: xPtr, qweight: qPtr, scales: scalesPtr, zeros: zerosPtr, bias: biasPtr, out: outPtr, M, N: width, K });
      return;
    }
  }
  if (path === 'mma' || (path === 'auto' && mma && int4MmaGemvApplies(dtype, M, groupSize))) {
    if (!int4MmaGemvApplies(dtype, M, groupSize)) c.fail(`the mma GEMV takes 1–${INT4_MMA_MAX_ROWS} rows of f16/bf16 x in groups of a multiple of ${INT4_MMA_CHUNK_K}; got ${M} rows of ${dtype}, groups of ${groupSize}`);
    launchInt4MmaGemv(host, {
      dtype: dtype as 'bf16' | 'f16', M, N, K, groupSize, gated, activation: act, x: xPtr, qweight: qPtr,
      scales: scalesPtr, zeros: zerosPtr, bias: biasPtr, out: outPtr,
    });
    return;
  }
  const useGemv = path === 'gemv' || (path === 'auto' && (dtype === 'f32' || M <= INT4_GEMV_MAX_ROWS));
  if (useGemv) {
    const width = gated ? N / 2 : N;
    const plan = planInt4Gemv(dtype, M, width, K, groupSize, bias !== undefined, act, host.multiProcessorCount, gated);
    host.kernel(int4GemvKey(plan.spec), () => int4GemvSource(plan.spec)).launch(
      { grid: plan.grid, block: plan.block }, [...common, arg.i32(M), arg.i32(width)]);
    return;
  }
  if (dtype === 'f32') c.fail(`the tensor-core path needs f16 or bf16 activations, got f32`);
  if (outPtr % 16n !== 0n) c.fail(`'out' must be 16-byte aligned`);
  const plan = planInt4Gemm(dtype as 'f16' | 'bf16', M, N, K, groupSize, bias !== undefined, gated ? 'none' : act, host.multiProcessorCount);
  // Gated above the GEMV's rows: the [M, 2F] product (bias added) into scratch after the split-K partials, then act(g)·u.
  const partialBytes = plan.slices > 1 ? Math.ceil((plan.slices * M * N * 4) / 256) * 256 : 0; // the product 16-byte aligned
  const productBytes = gated ? M * N * byteSize(dtype) : 0;
  const scratch = partialBytes + productBytes > 0 ? host.scratch(partialBytes + productBytes) : 0n;
  const partials = plan.slices > 1 ? scratch : 0n;
  const productPtr = gated ? scratch + BigInt(partialBytes) : outPtr;
  const gemmArgs = gated ? [...common.slice(0, 5), arg.ptr(productPtr)] : common;
  host.kernel(int4GemmKey(plan.spec), () => int4GemmSource(plan.spec)).launch(
    { grid: plan.grid, block: GEMM_THREADS, sharedBytes: plan.sharedBytes }, [...gemmArgs, arg.ptr(partials), arg.i32(M), arg.i32(N)]);
  if (plan.slices > 1) {
    const finish: Int4SplitFinishSpec = { dtype, bias: bias !== undefined, activation: gated ? 'none' : act };
    const count = M * N;
    host.kernel(int4SplitFinishKey(finish), () => int4SplitFinishSource(finish)).launch(
      { grid: Math.min(Math.ceil(count / FINISH_THREADS), host.multiProcessorCount * 8), block: FINISH_THREADS },
      [arg.ptr(partials), arg.ptr(biasPtr), arg.ptr(productPtr), arg.i64(BigInt(count)), arg.i32(N), arg.i32(plan.slices)]);
  }
  if (gated) {
    gatedActivation(host, { x: new CudaTensor(productPtr, [M, N], dtype, null), out, activation: activation! });
  }
}

/**
 * normLinear of an int4Linear (`args.x` is norm.out) as the tensor-core GEMV with the residual norm in its
 * prologue, if that kernel takes it (1–4 rows of 16-bit x whose normed rows fit its shared memory) and `mode` does ('auto': norms of at most QUANT_NORM_PROLOGUE_AUTO_MAX_K values;
 * CudaBackend.int4NormGemv); returns whether it launched. The caller runs residualNorm + int4Linear otherwise.
 */
export function int4NormLinear(host: KernelHost, c: OpCheck, norm: CheckedNorm, args: Int4LinearArgs, mode: boolean | 'auto' = 'auto'): boolean {
  if (mode === false || (mode === 'auto' && norm.H > QUANT_NORM_PROLOGUE_AUTO_MAX_K)) return false;
  const { qweight, scales, zeros, out, bias, activation, gated, groupSize, M, N, K } = checkInt4Linear(c, args);
  const dtype = norm.x.dtype;
  if (dtype !== 'bf16' && dtype !== 'f16') return false;
  if (M === 0 || N === 0 || norm.rows !== M || !normGemvApplies(norm) || !int4MmaGemvApplies(dtype, M, groupSize) || !int4MmaNormFits(M, K)) return false;
  const qPtr = devicePtr(c, 'qweight', qweight), scalesPtr = devicePtr(c, 'scales', scales), zerosPtr = devicePtr(c, 'zeros', zeros);
  if (qPtr % 16n !== 0n) return false; // int4Linear names the problem
  if (int4TmaRoutes(M, gated, N, K) && streamInt4Applies(host, dtype, M, K, groupSize, gated, bias !== undefined, activation ?? 'none')) return false;
  const ptr = (name: string, t: Tensor | undefined) => (t ? devicePtr(c, name, t) : 0n);
  launchInt4MmaGemv(host, {
    dtype, M, N, K, groupSize, gated, activation: activation ?? 'none', x: 0n, qweight: qPtr, scales: scalesPtr, zeros: zerosPtr,
    bias: ptr('bias', bias), out: devicePtr(c, 'out', out),
  }, undefined, {
    norm: prologueNorm('int4', norm, K),
    x: ptr('norm.x', norm.x), y: ptr('norm.y', norm.y), bias: ptr('norm.bias', norm.bias), gamma: ptr('norm.gamma', norm.gamma),
    beta: ptr('norm.beta', norm.beta), h: ptr('norm.out', norm.out), eps: norm.eps,
  });
  return true;
}

// ==== weight quantizer ================================================================================

export interface Int4QuantizeSpec {
  readonly dtype: FloatDType;
  readonly K: number;
  readonly groupSize: number;
}

export function int4QuantizeKey(s: Int4QuantizeSpec): string {
  return `int4_quantize.${s.dtype}.k${s.K}.g${s.groupSize}`;
}

const QUANTIZE_THREADS = 256;

export function int4QuantizeSource(spec: Int4QuantizeSpec): KernelSource {
  const name = kernelIdentifier(int4QuantizeKey(spec));
  const vec = 16 / byteSize(spec.dtype);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ K: spec.K, G: spec.groupSize, VEC: vec, THREADS: QUANTIZE_THREADS, WORDS_PER_ROW: spec.K / 8, GROUPS: spec.K / spec.groupSize })}

// One thread per (row, group): task = n · GROUPS + group.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(const T* __restrict__ weight, u32* __restrict__ qweight,
    __half* __restrict__ scales, unsigned char* __restrict__ zeros, long long tasks) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  const long long task = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (task >= tasks) return;
  const long long n = task / GROUPS;
  const int group = (int)(task % GROUPS);
  const T* v = weight + n * K + group * G;
  float lo = 0.f, hi = 0.f;
  for (int i = 0; i < G; i += VEC) {
    float f[VEC];
    load_floats<T, VEC>(v + i, f, VEC);
    #pragma unroll
    for (int e = 0; e < VEC; e++) { lo = fminf(lo, f[e]); hi = fmaxf(hi, f[e]); }
  }
  const __half s16 = __float2half_rn(__fdiv_rn(fmaxf(__fsub_rn(hi, lo), 1e-5f), 15.f));
  const float s = __half2float(s16);
  const float z = fminf(15.f, fmaxf(0.f, rintf(__fdiv_rn(-lo, s))));
  u32* q = qweight + n * WORDS_PER_ROW + group * (G / 8);
  for (int w = 0; w < G / 8; w++) {
    float f[8];
    load_floats<T, 8>(v + 8 * w, f, 8);
    u32 word = 0u;
    #pragma unroll
    for (int e = 0; e < 8; e++) word |= (u32)fminf(15.f, fmaxf(0.f, rintf(__fdiv_rn(f[e], s)) + z)) << (4 * e);
    q[w] = word;
  }
  scales[task] = s16;
  zeros[task] = (unsigned char)z;
}
`;
  return { name, source, gridDependencyWait: true };
}

export function int4QuantizeWeights(host: KernelHost, args: Int4QuantizeWeightsArgs): void {
  const c = new OpCheck('int4QuantizeWeights', 'cuda');
  const { weight, qweight, scales, zeros, groupSize, N, K } = checkInt4QuantizeWeights(c, args);
  const dtype = weight.dtype as FloatDType;
  const wPtr = devicePtr(c, 'weight', weight);
  if (wPtr % 32n !== 0n) c.fail(`'weight' must be 32-byte aligned (the kernel reads 16-byte vectors, and 8 f32 at once)`);
  const tasks = N * (K / groupSize);
  if (tasks === 0) return;
  const spec: Int4QuantizeSpec = { dtype, K, groupSize };
  host.kernel(int4QuantizeKey(spec), () => int4QuantizeSource(spec)).launch(
    { grid: Math.ceil(tasks / QUANTIZE_THREADS), block: QUANTIZE_THREADS },
    [arg.ptr(wPtr), arg.ptr(devicePtr(c, 'qweight', qweight)), arg.ptr(devicePtr(c, 'scales', scales)), arg.ptr(devicePtr(c, 'zeros', zeros)), arg.i64(BigInt(tasks))]);
}

// ==== catalog ==========================================================================================

/** Every kernel at representative specs: decode and prefill shapes, each dtype, group sizes, epilogues. */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  out.push(int4GemvSource({ dtype: 'bf16', rows: 1, K: 2048, groupSize: 128, cols: 1, kWarps: 2, colGroups: 4, bias: false, activation: 'none' }));
  out.push(int4GemvSource({ dtype: 'f16', rows: 4, K: 5120, groupSize: 64, cols: 4, kWarps: 5, colGroups: 1, bias: true, activation: 'gelu_tanh' }));
  out.push(int4GemvSource({ dtype: 'f32', rows: 8, K: 128, groupSize: 32, cols: 2, kWarps: 1, colGroups: 8, bias: true, activation: 'silu' }));
  // Gated (a Llama MLP's gate/up + SwiGLU): one lane's two columns read four weight rows.
  out.push(int4GemvSource({ dtype: 'bf16', rows: 1, K: 2048, groupSize: 128, cols: 2, kWarps: 2, colGroups: 4, bias: false, activation: 'silu', gated: true }));
  out.push(int4GemvSource({ dtype: 'f16', rows: 8, K: 1024, groupSize: 64, cols: 1, kWarps: 1, colGroups: 8, bias: true, activation: 'gelu', gated: true }));
  out.push(int4GemmSource({ dtype: 'bf16', K: 4096, groupSize: 128, bm: 128, bn: 128, splitK: false, bias: true, activation: 'none' }));
  out.push(int4GemmSource({ dtype: 'f16', K: 2080, groupSize: 32, bm: 32, bn: 64, splitK: true, bias: false, activation: 'none' }));
  out.push(int4GemmSource({ dtype: 'bf16', K: 768, groupSize: 64, bm: 64, bn: 128, splitK: false, bias: true, activation: 'gelu' }));
  out.push(int4SplitFinishSource({ dtype: 'bf16', bias: true, activation: 'relu' }));
  out.push(int4QuantizeSource({ dtype: 'bf16', K: 4096, groupSize: 128 }));
  out.push(int4QuantizeSource({ dtype: 'f32', K: 512, groupSize: 32 }));
  return out;
}
