// FlashAttention backward on Hopper's warpgroup MMA (sm_90a): flash-backward.ts's deterministic
// three-launch scheme — its preprocess (D_i = dOut_i·out_i and lse_i·log2 e into scratch), then a dK/dV
// kernel and a dQ kernel, no atomics, every output element written once after a fixed-order loop — with
// the two GEMM kernels on wgmma instead of mma.sync. Same math (backend.ts; flash-backward.ts's header):
//   P_ij = 2^(c·q_i·k_j − lse_i·log2 e) (0 when masked), dP = dOut·vᵀ, dS = P ⊙ (dP − D),
//   dv = Pᵀ·dOut, dk = scale·dSᵀ·q (summed over the group's query heads), dq = scale·dS·k.
// [B, H, L, d] tensors or packed sequences (varlen: flash-backward.ts's layout), d = 64 or 128, f16/bf16;
// flash-backward.ts keeps the rest. Attention
// dropout is flash-backward.ts's (keep flags z redrawn by flash-lib.ts, r = 1/(1 − p)): dv = (P⊙z·r)ᵀ·dOut,
// dS = P ⊙ (z·r·dP − D).
// Shared tiles are wgmma-lib.ts's 128-byte-swizzled layout, each read K-major or MN-major as needed.
//
//   dK/dV  grid (ceil(Lk / BK), Hkv, B), WGS warpgroups; warpgroup w owns keys j0 + 64w .. + 63 (BK =
//          64·WGS). K and V of the block stay in shared memory; the block loops over the group's query
//          heads and, per head, over the query tiles [BQ, d] that can see its keys (causal: from query
//          j0 − (Lk − Lq) on), Q, dO, D and lse·log2 e double-buffered by cp.async. Per query tile:
//            Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ     wgmma m64nBQk16 × d/16 each, K, V, Q, dO all K-major
//            Pᵀ, dSᵀ in registers         (rows = keys, columns = queries)
//            dV += Pᵀ·dO, dK += dSᵀ·Q     wgmma m64nDk16 × BQ/16 each, A = Pᵀ or dSᵀ packed from the
//                                         accumulators, B = dO or Q MN-major
//          dK, dV [64, d] per warpgroup in f32 registers (d/2 each per thread).
//   dQ     grid (ceil(Lq / BQ), Hq, B), WGS warpgroups; warpgroup w owns queries q0 + 64w .. + 63 (BQ =
//          64·WGS). Q and dO stay in shared memory, K/V tiles [BK, d] double-buffered, up to the last key
//          the block's last row sees. Per K/V tile:
//            S = Q·Kᵀ, dP = dO·Vᵀ         wgmma m64nBKk16 × d/16 each, all K-major
//            dS = P ⊙ (dP − D)            in registers, D and lse·log2 e of the thread's two rows held
//            dQ += dS·K                   wgmma m64nDk16 × BK/16, A = dS packed, B = K MN-major
// Per tile each kernel waits for its copies (cp.async + proxy fence + one block barrier), issues the next
// tile's copies into the other stage, then runs its GEMMs; their MMA work per element of S is 4 (dK/dV)
// or 3 (dQ) products of d, against the forward's 2, so the elementwise part between them weighs less.
// Masks: a warpgroup masks a tile per element only when it straddles the causal diagonal or the padding
// (a warpgroup-uniform test); rows past Lq or Lk are zero-filled and never stored (a zero Q or dO row
// contributes 0, a key past the padding is masked).
// Block order: flash-backward.ts's (decode_block: causal sections of heads; dK/dV the first kv tiles
// first, dQ the last query tiles first).

import type { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import type { FlashBackwardProblem } from './flash-backward.js';
import { launchBackwardPreprocess, SEQUENCE_DEVICE_CODE } from './flash-backward.js';
import { flashSectionHeads } from './flash-forward.js';
import type { HalfDType } from './flash-forward.js';
import { WGMMA_HEAD_DIMS, wgmmaAttentionApplies } from './flash-forward-wgmma.js';
import { ATTENTION_DROPOUT_OFFSET, ATTENTION_DROPOUT_PARAMS, attentionDropoutArgs, FLASH_LIB, VARLEN_PARAMS, varlenArgs, varlenDropoutStride } from './flash-lib.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';
import { WGMMA_LIB, wgmmaType, wgmmaWrappers } from './wgmma-lib.js';

// ---- spec ----------------------------------------------------------------------------------------------

export interface WgmmaBackwardTile {
  /** dK/dV: warpgroups of 64 keys (BK = 64·warpgroups) and queries per tile of the loop. */
  readonly dkdv: { readonly warpgroups: 1 | 2 | 3; readonly blockQ: number };
  /** dQ: warpgroups of 64 queries (BQ = 64·warpgroups) and keys per K/V tile. */
  readonly dq: { readonly warpgroups: 1 | 2 | 3; readonly blockK: number };
}

export type WgmmaBackwardKernel = 'dkdv' | 'dq';

export interface WgmmaBackwardSpec {
  readonly dtype: HalfDType;
  /** 64 or 128. */
  readonly headDim: number;
  readonly causal: boolean;
  readonly padding: boolean;
  readonly tile: WgmmaBackwardTile;
  /** Attention dropout, redrawn as the forward drew it (flash-lib.ts). */
  readonly dropout?: boolean;
  /** Packed variable-length sequences (flash-backward.ts's layout). */
  readonly varlen?: boolean;
}

/**
 * Default tiles, from the sweep of bench/attention.ts on the H200 (bf16, L = 4096, B·L = 16k,
 * 2026-12-02, bench/results/gpu-pending-s15/call2; backward alone, TFLOP/s as FA2 counts,
 * non-causal / causal; the mma.sync backward 251 / 222 at d = 64, 210 / 201 at d = 128):
 *   d = 64   dK/dV 2 warpgroups × 64 keys, 128-query tiles 338 / 301 (64-query tiles 321 / 282);
 *            dQ 2 warpgroups × 64 rows, 64-key tiles (128-key 295 / 267, 3 warpgroups 289 / 258).
 *   d = 128  dK/dV 2 warpgroups, 64-query tiles; dQ 2 warpgroups, 128-key tiles 358 / 336 (64-key
 *            359 / 327); one warpgroup for either kernel 353–359 / 323–331.
 * Registers per thread (ptxas sm_90a, no spills): dK/dV holds dK and dV (d/2 floats each) beside Sᵀ
 * and dPᵀ (BQ/2 each): 234 at d = 64 with BQ = 128, 234–242 at d = 128; dQ holds dQ (d/2) beside S and
 * dP (BK/2 each): 125 at d = 64, 247 at d = 128 with BK = 128. One block an SM.
 */
export function defaultWgmmaBackwardTile(headDim: number): WgmmaBackwardTile {
  return headDim <= 64
    ? { dkdv: { warpgroups: 2, blockQ: 128 }, dq: { warpgroups: 2, blockK: 64 } }
    : { dkdv: { warpgroups: 2, blockQ: 64 }, dq: { warpgroups: 2, blockK: 128 } };
}

/** Tiles bench/attention.ts sweeps (each kernel's alternatives with the other's default), the default first. */
export const WGMMA_BACKWARD_SWEEP: Readonly<Record<number, readonly WgmmaBackwardTile[]>> = {
  64: [
    defaultWgmmaBackwardTile(64),
    { dkdv: { warpgroups: 2, blockQ: 64 }, dq: { warpgroups: 2, blockK: 64 } },
    { dkdv: { warpgroups: 3, blockQ: 64 }, dq: { warpgroups: 2, blockK: 64 } },
    { dkdv: { warpgroups: 2, blockQ: 128 }, dq: { warpgroups: 2, blockK: 128 } },
    { dkdv: { warpgroups: 2, blockQ: 128 }, dq: { warpgroups: 3, blockK: 64 } },
  ],
  128: [
    defaultWgmmaBackwardTile(128),
    { dkdv: { warpgroups: 2, blockQ: 64 }, dq: { warpgroups: 2, blockK: 64 } },
    { dkdv: { warpgroups: 1, blockQ: 64 }, dq: { warpgroups: 2, blockK: 128 } },
    { dkdv: { warpgroups: 2, blockQ: 64 }, dq: { warpgroups: 1, blockK: 64 } },
  ],
};

export function wgmmaBackwardKey(kernel: WgmmaBackwardKernel, s: WgmmaBackwardSpec): string {
  const masks = `${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}${s.varlen ? '.varlen' : ''}${s.dropout ? '.dropout' : ''}`;
  return kernel === 'dkdv'
    ? `flash_backward_wgmma_dkdv.${s.dtype}.d${s.headDim}.wg${s.tile.dkdv.warpgroups}.q${s.tile.dkdv.blockQ}${masks}`
    : `flash_backward_wgmma_dq.${s.dtype}.d${s.headDim}.wg${s.tile.dq.warpgroups}.k${s.tile.dq.blockK}${masks}`;
}

/** Dynamic shared memory, with 1 KiB to align the base to the swizzle's 1024-byte period. */
export function wgmmaBackwardSharedBytes(kernel: WgmmaBackwardKernel, headDim: number, tile: WgmmaBackwardTile): number {
  if (kernel === 'dkdv') {
    const bk = 64 * tile.dkdv.warpgroups, bq = tile.dkdv.blockQ;
    return (2 * bk + 4 * bq) * headDim * 2 + 16 * bq + 1024;   // K, V; two stages of Q, dO; two of D, lse·log2 e
  }
  const bq = 64 * tile.dq.warpgroups, bk = tile.dq.blockK;
  return (2 * bq + 4 * bk) * headDim * 2 + 1024;                // Q, dO; two stages of K, V
}

export function wgmmaBackwardTileProblem(headDim: number, tile: WgmmaBackwardTile): string | null {
  if (!WGMMA_HEAD_DIMS.includes(headDim)) return `head dimension must be one of ${WGMMA_HEAD_DIMS.join(', ')}, got ${headDim}`;
  for (const [name, w] of [['dkdv', tile.dkdv.warpgroups], ['dq', tile.dq.warpgroups]] as const) {
    if (![1, 2, 3].includes(w)) return `${name} tile warpgroups must be 1, 2 or 3, got ${w}`;
  }
  for (const [name, n] of [['dkdv blockQ', tile.dkdv.blockQ], ['dq blockK', tile.dq.blockK]] as const) {
    if (!Number.isInteger(n) || n < 16 || n > 256 || n % 16 !== 0) return `${name} must be a multiple of 16 in [16, 256], got ${n}`;
  }
  return null;
}

// ---- sources ---------------------------------------------------------------------------------------------

/** Device code both kernels share: the mask rule and the f32 row loads (FLASH_LIB has decode_block). */
const BACKWARD_DEVICE_CODE = String.raw`
// Keys [0, n) are visible to query i (non-decreasing in i); key_limit = min(Lk, keyLengths[b]).
__device__ __forceinline__ int visible_keys(int i, int offset_causal, int key_limit) {
  return max(0, CAUSAL ? min(key_limit, i + offset_causal + 1) : key_limit);
}
// Entries [row0, row0 + ROWS) of a per-row f32 array into shared memory, zeros past len.
template <int ROWS>
__device__ __forceinline__ void load_row_floats(u32 dst, const float* __restrict__ src, int row0, int len) {
  for (int r = threadIdx.x; r < ROWS; r += THREADS) {
    const bool in = row0 + r < len;
    cp_async_4(dst + 4 * r, src + (in ? row0 + r : 0), in);
  }
}
`;

const PARAMS = 'const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, ' +
  'const float* __restrict__ delta, const float* __restrict__ lse_log2';
const SHAPE_PARAMS = 'const int* __restrict__ key_lengths, int q_len, int k_len, int q_heads, int group, float scale, float scale_log2e, int section_heads, ' +
  `${VARLEN_PARAMS}, ${ATTENTION_DROPOUT_PARAMS}`;

function preamble(spec: WgmmaBackwardSpec, values: Record<string, number | boolean>, sharedShared: number, registerShared: number): string {
  return `${DEVICE_LIB}
${MMA_LIB}
${FLASH_LIB}
${typedefLine('T', spec.dtype)}
${constants({ D: spec.headDim, CAUSAL: spec.causal, PADDING: spec.padding, DROPOUT: spec.dropout ?? false, VARLEN: spec.varlen ?? false, ...values })}
${SEQUENCE_DEVICE_CODE}
constexpr int DSTEPS = D / 16;   // k-steps over d
${WGMMA_LIB}
${wgmmaWrappers(wgmmaType(spec.dtype), [sharedShared], [registerShared])}
`;
}

export function wgmmaBackwardDkDvSource(spec: WgmmaBackwardSpec): KernelSource {
  const problem = wgmmaBackwardTileProblem(spec.headDim, spec.tile);
  if (problem) throw new RangeError(`wgmmaBackwardDkDvSource: ${problem}`);
  const { warpgroups, blockQ } = spec.tile.dkdv;
  const name = kernelIdentifier(wgmmaBackwardKey('dkdv', spec));
  const source = preamble(spec, { WGS: warpgroups, BQ: blockQ, THREADS: 128 * warpgroups }, blockQ, spec.headDim) + String.raw`
constexpr int BK = 64 * WGS;          // keys per block
constexpr int QSTEPS = BQ / 16;       // k-steps of dV += Pᵀ·dO over the tile's queries
constexpr u32 KV_BYTES = BK * D * 2;  // K (or V) of the block
constexpr u32 QT_BYTES = BQ * D * 2;  // one stage of Q (or dO)
${BACKWARD_DEVICE_CODE}

extern "C" __global__ void __launch_bounds__(THREADS, 1) ${name}(${PARAMS}, T* __restrict__ dk, T* __restrict__ dv, ${SHAPE_PARAMS}) {
  extern __shared__ unsigned char smem_raw[];
  const u32 k_s = (smem_u32(smem_raw) + 1023u) & ~1023u;   // [D/64][BK][64]
  const u32 v_s = k_s + KV_BYTES;                          // [D/64][BK][64]
  const u32 q_s = v_s + KV_BYTES;                          // [2 stages][D/64][BQ][64]
  const u32 do_s = q_s + 2 * QT_BYTES;                     // [2 stages][D/64][BQ][64]
  const u32 dd_s = do_s + 2 * QT_BYTES;                    // [2 stages][BQ] f32: D
  const u32 l2_s = dd_s + 2 * BQ * 4;                      // [2 stages][BQ] f32: lse·log2 e
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int tile_rank, head;
  decode_block(section_heads, tile_rank, head);   // causal: the first kv tiles (the most queries) first
  const int kv_heads = q_heads / group;
  const int b = head / kv_heads, kv_head = head - b * kv_heads;
  const int j0 = tile_rank * BK, wg_j0 = j0 + 64 * wg;
  const Sequence seq = sequence_of(b, q_len, k_len, cu_seqlens_q, cu_seqlens_k);
  if (VARLEN && j0 >= seq.k_len) return;   // the whole block: no keys of this sequence here
  const int q_stride = VARLEN ? q_heads * D : D, kv_stride = VARLEN ? kv_heads * D : D;
  const long long kv_off = kv_rows_offset(seq, b, kv_head, kv_heads);
  const int key_limit = PADDING ? max(0, min(key_lengths[b], seq.k_len)) : seq.k_len;
  const int offset_causal = seq.k_len - seq.q_len;   // causal: query i sees keys j <= i + offset_causal
  const int i_start = CAUSAL ? (max(0, j0 - offset_causal) / BQ) * BQ : 0;
  const int tiles = j0 < key_limit && i_start < seq.q_len ? (seq.q_len - i_start + BQ - 1) / BQ : 0;
  const int iterations = tiles * group;   // (query head of the group, query tile), head-major
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const bool drop_aligned = drop_stride % 8 == 0;

  auto load_query_tile = [&](int it, int stage) {
    const int member = it / tiles, i0 = i_start + (it - member * tiles) * BQ, hq = kv_head * group + member;
    const long long rows = row_index_base(seq, b, hq, q_heads, total_q), q_off = q_rows_offset(seq, b, hq, q_heads);
    load_sw128<BQ, D, THREADS>(q_s + stage * QT_BYTES, q + q_off, i0, seq.q_len, q_stride, threadIdx.x);
    load_sw128<BQ, D, THREADS>(do_s + stage * QT_BYTES, dout + q_off, i0, seq.q_len, q_stride, threadIdx.x);
    load_row_floats<BQ>(dd_s + stage * BQ * 4, delta + rows, i0, seq.q_len);
    load_row_floats<BQ>(l2_s + stage * BQ * 4, lse_log2 + rows, i0, seq.q_len);
  };
  if (iterations > 0) {
    load_sw128<BK, D, THREADS>(k_s, k + kv_off, j0, seq.k_len, kv_stride, threadIdx.x);
    load_sw128<BK, D, THREADS>(v_s, v + kv_off, j0, seq.k_len, kv_stride, threadIdx.x);
    load_query_tile(0, 0);
  }
  cp_async_commit();

  float dk_acc[D / 2], dv_acc[D / 2];
  #pragma unroll
  for (int i = 0; i < D / 2; i++) { dk_acc[i] = 0.f; dv_acc[i] = 0.f; }
  const u32 k_wg = k_s + (u32)(64 * wg) * 128u, v_wg = v_s + (u32)(64 * wg) * 128u;
  // This thread's keys: wg_j0 + 16·warp + g (half 0) and 8 below (half 1).
  const int key0 = wg_j0 + 16 * warp + g;

  for (int it = 0; it < iterations; it++) {
    const int stage = it & 1;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();   // tile it landed for every thread; every warpgroup is done with tile it − 1's stage
    if (it + 1 < iterations) load_query_tile(it + 1, stage ^ 1);
    cp_async_commit();
    const int member = it / tiles, i0 = i_start + (it - member * tiles) * BQ;
    [[maybe_unused]] const long long q_rows = row_index_base(seq, b, kv_head * group + member, q_heads, total_q);
    const u32 q_t = q_s + stage * QT_BYTES, do_t = do_s + stage * QT_BYTES;
    const float* dd_t = reinterpret_cast<const float*>(smem_raw + (dd_s - smem_u32(smem_raw)) + stage * BQ * 4);
    const float* l2_t = reinterpret_cast<const float*>(smem_raw + (l2_s - smem_u32(smem_raw)) + stage * BQ * 4);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: this warpgroup's 64 keys × BQ queries.
    float st[BQ / 2], dpt[BQ / 2];
    hold(dk_acc);
    hold(dv_acc);
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < DSTEPS; ks++) wgmma_ss_n${blockQ}(st, k_major_desc<BK>(k_wg, ks), k_major_desc<BQ>(q_t, ks), ks > 0);
    #pragma unroll
    for (int ks = 0; ks < DSTEPS; ks++) wgmma_ss_n${blockQ}(dpt, k_major_desc<BK>(v_wg, ks), k_major_desc<BQ>(do_t, ks), ks > 0);
    wgmma_commit();
    wgmma_wait<0>();
    hold(st);
    hold(dpt);

    // Pᵀ (times z/(1 − p) with dropout) and dSᵀ in place. Element (n, e): key key0 + 8·(e/2), query
    // i0 + 8n + 2t + e%2; with dropout, bit 4·(n % 2) + 2·(e % 2) + e/2 of the n-tile pair's keep flags.
    const bool masked = (PADDING && wg_j0 + 64 > key_limit) || (CAUSAL && i0 + offset_causal < wg_j0 + 63);
    #pragma unroll
    for (int np = 0; np < BQ / 16; np++) {
      u32 keep = 0xffffffffu;
      if constexpr (DROPOUT)
        keep = transposed_keep_bits(seed, offset, threshold, (u64)(q_rows + i0 + 16 * np + 2 * t) * (u64)drop_stride, drop_stride, wg_j0 + 16 * warp, drop_aligned);
      #pragma unroll
      for (int nn = 0; nn < 2; nn++) {
        const int n = 2 * np + nn;
        const float2 l2 = *reinterpret_cast<const float2*>(l2_t + 8 * n + 2 * t);
        const float2 dd = *reinterpret_cast<const float2*>(dd_t + 8 * n + 2 * t);
        #pragma unroll
        for (int e = 0; e < 4; e++) {
          float p = exp2_fast(fmaf(st[4 * n + e], scale_log2e, -((e & 1) ? l2.y : l2.x)));
          if (masked) {
            const int j = key0 + 8 * (e >> 1), i = i0 + 8 * n + 2 * t + (e & 1);
            if (j >= visible_keys(i, offset_causal, key_limit)) p = 0.f;
          }
          const float d_i = (e & 1) ? dd.y : dd.x;
          if constexpr (DROPOUT) {
            const bool kept = (keep >> (4 * nn + 2 * (e & 1) + (e >> 1))) & 1u;
            st[4 * n + e] = kept ? p * keep_scale : 0.f;
            dpt[4 * n + e] = p * ((kept ? dpt[4 * n + e] * keep_scale : 0.f) - d_i);
          } else {
            st[4 * n + e] = p;
            dpt[4 * n + e] = p * (dpt[4 * n + e] - d_i);
          }
        }
      }
    }
    u32 pf[QSTEPS][4], sf[QSTEPS][4];
    #pragma unroll
    for (int kk = 0; kk < QSTEPS; kk++) {
      accumulators_to_fragment(pf[kk], st, kk);
      accumulators_to_fragment(sf[kk], dpt, kk);
    }
    // dV += Pᵀ·dO, dK += dSᵀ·Q over the tile's queries; dO and Q read MN-major.
    hold(pf);
    hold(sf);
    wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < QSTEPS; kk++) {
      wgmma_rs_n${spec.headDim}(dv_acc, pf[kk], mn_major_desc<BQ>(do_t, kk));
      wgmma_rs_n${spec.headDim}(dk_acc, sf[kk], mn_major_desc<BQ>(q_t, kk));
    }
    wgmma_commit();
    wgmma_wait<0>();
    hold(dv_acc);
    hold(dk_acc);
    hold(pf);
    hold(sf);
  }
  cp_async_wait<0>();

  // dK·scale and dV as T pairs straight from the accumulators (a key no query sees gets zeros).
  #pragma unroll
  for (int half = 0; half < 2; half++) {
    const int j = key0 + 8 * half;
    if (j < seq.k_len) {
      T* __restrict__ dk_row = dk + kv_off + (long long)j * kv_stride;
      T* __restrict__ dv_row = dv + kv_off + (long long)j * kv_stride;
      #pragma unroll
      for (int n = 0; n < D / 8; n++) {
        *reinterpret_cast<u32*>(dk_row + 8 * n + 2 * t) = pack2<T>(scale * dk_acc[4 * n + 2 * half], scale * dk_acc[4 * n + 2 * half + 1]);
        *reinterpret_cast<u32*>(dv_row + 8 * n + 2 * t) = pack2<T>(dv_acc[4 * n + 2 * half], dv_acc[4 * n + 2 * half + 1]);
      }
    }
  }
}
`;
  return { name, source, archSpecific: true };
}

export function wgmmaBackwardDqSource(spec: WgmmaBackwardSpec): KernelSource {
  const problem = wgmmaBackwardTileProblem(spec.headDim, spec.tile);
  if (problem) throw new RangeError(`wgmmaBackwardDqSource: ${problem}`);
  const { warpgroups, blockK } = spec.tile.dq;
  const name = kernelIdentifier(wgmmaBackwardKey('dq', spec));
  const source = preamble(spec, { WGS: warpgroups, BK: blockK, THREADS: 128 * warpgroups }, blockK, spec.headDim) + String.raw`
constexpr int BQ = 64 * WGS;          // queries per block
constexpr int KSTEPS = BK / 16;       // k-steps of dQ += dS·K over the tile's keys
constexpr u32 QT_BYTES = BQ * D * 2;  // Q (or dO) of the block
constexpr u32 KV_BYTES = BK * D * 2;  // one stage of K (or V)
${BACKWARD_DEVICE_CODE}

extern "C" __global__ void __launch_bounds__(THREADS, 1) ${name}(${PARAMS}, T* __restrict__ dq, ${SHAPE_PARAMS}) {
  extern __shared__ unsigned char smem_raw[];
  const u32 q_s = (smem_u32(smem_raw) + 1023u) & ~1023u;   // [D/64][BQ][64]
  const u32 do_s = q_s + QT_BYTES;                         // [D/64][BQ][64]
  const u32 k_s = do_s + QT_BYTES;                         // [2 stages][D/64][BK][64]
  const u32 v_s = k_s + 2 * KV_BYTES;                      // [2 stages][D/64][BK][64]
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int tile_rank, head;
  decode_block(section_heads, tile_rank, head);
  const int b = head / q_heads, h = head - b * q_heads;
  const int q0 = (CAUSAL ? (int)gridDim.x - 1 - tile_rank : tile_rank) * BQ;   // causal: the longest rows first
  const int kv_heads = q_heads / group;
  const Sequence seq = sequence_of(b, q_len, k_len, cu_seqlens_q, cu_seqlens_k);
  if (VARLEN && q0 >= seq.q_len) return;   // the whole block
  const int q_stride = VARLEN ? q_heads * D : D, kv_stride = VARLEN ? kv_heads * D : D;
  const long long rows = row_index_base(seq, b, h, q_heads, total_q);
  const long long q_off = q_rows_offset(seq, b, h, q_heads);
  const long long kv_off = kv_rows_offset(seq, b, h / group, kv_heads);
  const int key_limit = PADDING ? max(0, min(key_lengths[b], seq.k_len)) : seq.k_len;
  const int offset_causal = seq.k_len - seq.q_len;
  const int kv_tiles = (visible_keys(min(q0 + BQ, seq.q_len) - 1, offset_causal, key_limit) + BK - 1) / BK;
  ${ATTENTION_DROPOUT_OFFSET}
  [[maybe_unused]] const bool drop_aligned = drop_stride % 8 == 0;

  if (kv_tiles > 0) {
    load_sw128<BQ, D, THREADS>(q_s, q + q_off, q0, seq.q_len, q_stride, threadIdx.x);
    load_sw128<BQ, D, THREADS>(do_s, dout + q_off, q0, seq.q_len, q_stride, threadIdx.x);
    load_sw128<BK, D, THREADS>(k_s, k + kv_off, 0, seq.k_len, kv_stride, threadIdx.x);
    load_sw128<BK, D, THREADS>(v_s, v + kv_off, 0, seq.k_len, kv_stride, threadIdx.x);
  }
  cp_async_commit();

  // This thread's rows (half 0: row0, half 1: row0 + 8), their D, lse·log2 e and visible keys. Rows past
  // Lq: D = lse·log2 e = 0 with zero Q and dO rows, so dS = 0 there (never stored anyway).
  const int row0 = q0 + 64 * wg + 16 * warp + g;
  float dd[2], l2[2];
  int visible[2];
  #pragma unroll
  for (int half = 0; half < 2; half++) {
    const int row = row0 + 8 * half;
    const bool in = row < seq.q_len;
    dd[half] = in ? delta[rows + row] : 0.f;
    l2[half] = in ? lse_log2[rows + row] : 0.f;
    visible[half] = visible_keys(row, offset_causal, key_limit);
  }
  const int wg_unmasked = visible_keys(q0 + 64 * wg, offset_causal, key_limit);   // keys the warpgroup's first row sees
  const u32 q_wg = q_s + (u32)(64 * wg) * 128u, do_wg = do_s + (u32)(64 * wg) * 128u;
  float dq_acc[D / 2];
  #pragma unroll
  for (int i = 0; i < D / 2; i++) dq_acc[i] = 0.f;

  for (int jt = 0; jt < kv_tiles; jt++) {
    const int stage = jt & 1, j0 = jt * BK;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();   // tile jt landed for every thread; every warpgroup is done with tile jt − 1's stage
    if (jt + 1 < kv_tiles) {
      load_sw128<BK, D, THREADS>(k_s + (stage ^ 1) * KV_BYTES, k + kv_off, j0 + BK, seq.k_len, kv_stride, threadIdx.x);
      load_sw128<BK, D, THREADS>(v_s + (stage ^ 1) * KV_BYTES, v + kv_off, j0 + BK, seq.k_len, kv_stride, threadIdx.x);
    }
    cp_async_commit();
    const u32 k_t = k_s + stage * KV_BYTES, v_t = v_s + stage * KV_BYTES;

    // S = Q·Kᵀ and dP = dO·Vᵀ: this warpgroup's 64 queries × BK keys.
    float s[BK / 2], dp[BK / 2];
    hold(dq_acc);
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < DSTEPS; ks++) wgmma_ss_n${blockK}(s, k_major_desc<BQ>(q_wg, ks), k_major_desc<BK>(k_t, ks), ks > 0);
    #pragma unroll
    for (int ks = 0; ks < DSTEPS; ks++) wgmma_ss_n${blockK}(dp, k_major_desc<BQ>(do_wg, ks), k_major_desc<BK>(v_t, ks), ks > 0);
    wgmma_commit();
    wgmma_wait<0>();
    hold(s);
    hold(dp);

    // dS = P ⊙ (dP − D) in place of dP (dP times z/(1 − p) with dropout). Element (n, e): row
    // row0 + 8·(e/2), key j0 + 8n + 2t + e%2; with dropout, bit 2·(n % 4) + e % 2 of its row's keep flags.
    const bool masked = j0 + BK > wg_unmasked;
    #pragma unroll
    for (int half = 0; half < 2; half++) {
      [[maybe_unused]] const u64 e0 = (u64)(rows + row0 + 8 * half) * (u64)drop_stride + (u64)j0;
      #pragma unroll
      for (int nb = 0; nb < (BK / 8 + 3) / 4; nb++) {
        u32 keep = 0xffffffffu;
        if constexpr (DROPOUT) keep = row_keep_bits(seed, offset, threshold, e0 + 32 * nb, drop_aligned);
        #pragma unroll
        for (int sub = 0; sub < 4; sub++) {
          const int n = 4 * nb + sub;
          if (n < BK / 8) {
            #pragma unroll
            for (int c = 0; c < 2; c++) {
              const int e = 2 * half + c;
              float p = exp2_fast(fmaf(s[4 * n + e], scale_log2e, -l2[half]));
              if (masked && j0 + 8 * n + 2 * t + c >= visible[half]) p = 0.f;
              if constexpr (DROPOUT) {
                const bool kept = (keep >> (2 * sub + c)) & 1u;
                dp[4 * n + e] = p * ((kept ? dp[4 * n + e] * keep_scale : 0.f) - dd[half]);
              } else {
                dp[4 * n + e] = p * (dp[4 * n + e] - dd[half]);
              }
            }
          }
        }
      }
    }
    u32 sf[KSTEPS][4];
    #pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) accumulators_to_fragment(sf[kk], dp, kk);
    // dQ += dS·K over the tile's keys; K read MN-major.
    hold(sf);
    wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) wgmma_rs_n${spec.headDim}(dq_acc, sf[kk], mn_major_desc<BK>(k_t, kk));
    wgmma_commit();
    wgmma_wait<0>();
    hold(dq_acc);
    hold(sf);
  }
  cp_async_wait<0>();

  #pragma unroll
  for (int half = 0; half < 2; half++) {
    const int row = row0 + 8 * half;
    if (row < seq.q_len) {
      T* __restrict__ dq_row = dq + q_off + (long long)row * q_stride;
      #pragma unroll
      for (int n = 0; n < D / 8; n++) {
        *reinterpret_cast<u32*>(dq_row + 8 * n + 2 * t) = pack2<T>(scale * dq_acc[4 * n + 2 * half], scale * dq_acc[4 * n + 2 * half + 1]);
      }
    }
  }
}
`;
  return { name, source, archSpecific: true };
}

// ---- launcher ------------------------------------------------------------------------------------------

/**
 * Launches the dK/dV and dQ kernels after flash-backward.ts's preprocess has written D and lse·log2 e
 * (device addresses `delta`, `lseLog2`, B·Hq·Lq floats each), on a problem wgmmaAttentionApplies takes.
 * `tile` overrides the default and `sectionHeads` the launch order's sections (benchmarks sweep both).
 */
export function launchWgmmaBackward(host: KernelHost, check: OpCheck, p: FlashBackwardProblem, scratch: { delta: bigint; lseLog2: bigint }, tile?: WgmmaBackwardTile, sectionHeads?: number): void {
  const dtype = p.q.dtype;
  if (!wgmmaAttentionApplies(host, dtype, p.d, p)) check.fail(`the wgmma backward takes dense f16/bf16 with d = ${WGMMA_HEAD_DIMS.join(' or ')} on an sm_90 GPU; got ${p.varlen ? 'packed ' : ''}${dtype} d = ${p.d} on ${host.arch ?? 'an unknown GPU'}`);
  const chosen = tile ?? defaultWgmmaBackwardTile(p.d);
  const problem = wgmmaBackwardTileProblem(p.d, chosen);
  if (problem) check.fail(problem);
  for (const kernel of ['dkdv', 'dq'] as const) {
    const bytes = wgmmaBackwardSharedBytes(kernel, p.d, chosen);
    if (bytes > host.maxSharedBytesPerBlock) check.fail(`the wgmma backward's ${kernel} tile needs ${bytes} bytes of shared memory; this GPU allows ${host.maxSharedBytesPerBlock}`);
  }
  const dropout = p.dropout && p.dropout.p > 0 ? p.dropout : undefined;
  const varlen = p.varlen !== undefined;
  const spec: WgmmaBackwardSpec = {
    dtype, headDim: p.d, causal: p.causal, padding: p.keyLengths !== undefined, tile: chosen, ...(dropout ? { dropout: true } : {}), ...(varlen ? { varlen: true } : {}),
  };
  const inputs = [
    arg.ptr(devicePtr(check, 'q', p.q)), arg.ptr(devicePtr(check, 'k', p.k)), arg.ptr(devicePtr(check, 'v', p.v)),
    arg.ptr(devicePtr(check, 'dOut', p.dOut)), arg.ptr(scratch.delta), arg.ptr(scratch.lseLog2),
  ];
  const shape = (sections: number) => [
    arg.ptr(p.keyLengths ? devicePtr(check, 'keyLengths', p.keyLengths) : 0n),
    arg.i32(p.Lq), arg.i32(p.Lk), arg.i32(p.Hq), arg.i32(p.group), arg.f32(p.scale), arg.f32(p.scale * Math.LOG2E), arg.i32(varlen ? 1 : sections),
    ...varlenArgs(check, p.varlen),
    ...attentionDropoutArgs(dropout, varlen ? varlenDropoutStride(p.Lk) : p.Lk),
  ];
  if (p.B * p.Hkv * p.Lk > 0) {
    const kernel = host.kernel(wgmmaBackwardKey('dkdv', spec), () => wgmmaBackwardDkDvSource(spec));
    const keys = 64 * chosen.dkdv.warpgroups;
    kernel.launch(
      { grid: [Math.ceil(p.Lk / keys), p.Hkv, p.B], block: 128 * chosen.dkdv.warpgroups, sharedBytes: wgmmaBackwardSharedBytes('dkdv', p.d, chosen) },
      [...inputs, arg.ptr(devicePtr(check, 'dk', p.dk)), arg.ptr(devicePtr(check, 'dv', p.dv)),
        ...shape(sectionHeads ?? flashSectionHeads(p.causal, false, p.B * p.Hkv, p.Lq, p.d, 1 / p.group))],
    );
  }
  if (p.B * p.Hq * p.Lq > 0) {
    const kernel = host.kernel(wgmmaBackwardKey('dq', spec), () => wgmmaBackwardDqSource(spec));
    const rows = 64 * chosen.dq.warpgroups;
    kernel.launch(
      { grid: [Math.ceil(p.Lq / rows), p.Hq, p.B], block: 128 * chosen.dq.warpgroups, sharedBytes: wgmmaBackwardSharedBytes('dq', p.d, chosen) },
      [...inputs, arg.ptr(devicePtr(check, 'dq', p.dq)), ...shape(sectionHeads ?? flashSectionHeads(p.causal, false, p.B * p.Hq, p.Lk, p.d, p.group))],
    );
  }
}

/** The whole backward on wgmma: flash-backward.ts's preprocess, then launchWgmmaBackward. */
export function flashAttentionBackwardWgmma(host: KernelHost, check: OpCheck, p: FlashBackwardProblem, tile?: WgmmaBackwardTile, sectionHeads?: number): void {
  launchWgmmaBackward(host, check, p, launchBackwardPreprocess(host, check, p), tile, sectionHeads);
}

// ---- catalog -------------------------------------------------------------------------------------------

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const headDim of WGMMA_HEAD_DIMS) {
      for (const causal of [false, true]) {
        const spec: WgmmaBackwardSpec = { dtype, headDim, causal, padding: (headDim === 128) !== causal, tile: defaultWgmmaBackwardTile(headDim) };
        sources.push(wgmmaBackwardDkDvSource(spec), wgmmaBackwardDqSource(spec));
      }
    }
  }
  // Attention dropout, both head dimensions; packed sequences.
  const extras: WgmmaBackwardSpec[] = [
    ...WGMMA_HEAD_DIMS.map((headDim): WgmmaBackwardSpec => ({ dtype: 'bf16', headDim, causal: headDim === 64, padding: true, dropout: true, tile: defaultWgmmaBackwardTile(headDim) })),
    { dtype: 'bf16', headDim: 64, causal: true, padding: false, varlen: true, tile: defaultWgmmaBackwardTile(64) },
    { dtype: 'f16', headDim: 128, causal: false, padding: false, varlen: true, dropout: true, tile: defaultWgmmaBackwardTile(128) },
  ];
  for (const spec of extras) sources.push(wgmmaBackwardDkDvSource(spec), wgmmaBackwardDqSource(spec));
  // The swept tiles beyond the defaults (bf16, causal with padding), each kernel once per distinct tile.
  for (const headDim of WGMMA_HEAD_DIMS) {
    const base = defaultWgmmaBackwardTile(headDim);
    const seen = new Set([wgmmaBackwardKey('dkdv', { dtype: 'bf16', headDim, causal: true, padding: true, tile: base }), wgmmaBackwardKey('dq', { dtype: 'bf16', headDim, causal: true, padding: true, tile: base })]);
    for (const tile of WGMMA_BACKWARD_SWEEP[headDim]!) {
      const spec: WgmmaBackwardSpec = { dtype: 'bf16', headDim, causal: true, padding: true, tile };
      for (const [kernel, build] of [['dkdv', wgmmaBackwardDkDvSource], ['dq', wgmmaBackwardDqSource]] as const) {
        const key = wgmmaBackwardKey(kernel, spec);
        if (!seen.has(key)) { seen.add(key); sources.push(build(spec)); }
      }
    }
  }
  return sources;
}
