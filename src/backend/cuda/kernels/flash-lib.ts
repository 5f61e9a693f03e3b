// Device code and launch arguments shared by the fused-attention kernels (flash-forward.ts,
// flash-backward.ts, their wgmma versions and attention.ts's SIMT kernels): quad reductions, the launch
// order's block decode, attention dropout drawn from the shared Philox stream, and the kernel parameters of the two optional features (dropout, packed variable-length
// sequences). Kernels include FLASH_LIB after DEVICE_LIB.
//
// Dropout (backend.ts's FlashAttentionForwardArgs.dropout). Element (row, key j) of the attention
// probabilities has index e = row·S + j, where row = (b·Hq + h)·Lq + i and S = Lk for the padded
// layout [B, Hq, Lq, Lk] — exactly the index the standalone dropout op would give the materialised
// probabilities, so the fused op drops the same elements as LightSeq's path — and row = h·totalQ +
// (cuSeqlensQ[b] + i), S = maxSeqlenK rounded up to 8, for the packed layout. Element e is decided as
// in rng.ts: Philox counter offset + ⌊e/8⌋, word ⌊(e mod 8)/2⌋, low or high 16 bits, kept iff that
// uniform ≥ ⌈p·2^16⌉. The mask is never stored: the backward redraws it from (seed, offset, e).
//
// One Philox call (~70 integer instructions) decides 8 consecutive keys of one row, and an mma
// accumulator spreads those 8 over several lanes, so lanes share calls instead of each making its own:
//   row-major tiles (rows = queries: the forward's S, the dQ kernel's S): the 4 lanes of a quad hold
//     columns 2t, 2t+1 of the same 8-column n-tile of the same row; each lane computes the counter of
//     one of 4 consecutive n-tiles and a 4×4 transpose by 3 xor-shuffles hands lane t word t of all 4
//     (quad_keep_bits): 1 call per lane per 4 n-tiles instead of 4.
//   transposed tiles (rows = keys: the dK/dV kernel's Pᵀ): lanes g = 0..7 with the same t hold the 8
//     consecutive keys of one counter, for 2 queries (2t, 2t+1) of each n-tile; the 8 lanes compute
//     the 8 counters of an n-tile pair (2 tiles × 2 queries × 2 key halves) and an 8×8 exchange by 7
//     xor-shuffles hands lane g word ⌊g/2⌋ of all 8 (transposed_keep_bits).
// Both need 8-aligned element runs: S a multiple of 8 (tiles start at multiples of 8). Otherwise
// (odd Lk in the padded layout) every element draws its own call (attn_keep): correct, slower.
// Dropped probabilities are zeroed after the row sum (lse is that of the undropped softmax), kept ones
// are scaled by 1/(1 − p) (the forward folds it into 1/l).

import type { DropoutArgs } from '../../backend.js';
import type { KernelArg } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DROPOUT_PARAMS, dropoutArgs } from './elementwise.js';
import type { OpCheck } from '../../validate.js';
import type { Tensor } from '../../../tensor.js';
import { devicePtr } from './row-kernels.js';

export const FLASH_LIB = String.raw`
// ---- rows of accumulators and the launch order ---------------------------------------------------------------
// An mma/wgmma accumulator row is spread over the 4 lanes of a quad: its max and sum take two shuffles.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// Block → (tile rank, head) in launch order: sections of section_heads heads (gridDim.y·gridDim.z in
// all), every head's rank-0 tile of a section before its rank-1 tiles (the launchers size sections so
// that a section's K and V, or Q and dO, stay in L2; 1 = head-major).
__device__ __forceinline__ void decode_block(int section_heads, int& tile_rank, int& head) {
  const int tiles = (int)gridDim.x;
  const long long id = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
  const long long per_section = (long long)section_heads * tiles;
  const long long section = id / per_section, rank = id - section * per_section;
  const int heads_total = (int)(gridDim.y * gridDim.z);
  const int in_section = (int)min((long long)section_heads, heads_total - section * section_heads);
  tile_rank = (int)(rank / in_section);
  head = (int)(section * section_heads + rank % in_section);
}

// ---- attention dropout ------------------------------------------------------------------------------------
// Keep flag of element e (one Philox call).
__device__ __forceinline__ bool attn_keep(u64 seed, u64 offset, u64 e, u32 threshold) {
  const uint4 w = dropout_words(seed, offset, e >> 3);
  return dropout_keep16(word_at(w, (int)((e & 7) >> 1)), (int)(e & 1), threshold);
}
// Row-major accumulators, 4 n8-tiles of one row starting at element e0 (a multiple of 8 when
// aligned): bit 2s + c = keep flag of column 8s + 2t + c (the lane's columns of n-tile s).
__device__ __forceinline__ u32 row_keep_bits(u64 seed, u64 offset, u32 threshold, u64 e0, bool aligned) {
  const int t = threadIdx.x & 3;
  u32 bits = 0;
  if (aligned) {
    const uint4 w = dropout_words(seed, offset, (e0 >> 3) + t);  // counter of n-tile t
    #pragma unroll
    for (int k = 0; k < 4; k++) {
      // Lane s sends word s ^ k of its counter to lane s ^ k: lane t receives word t of n-tile t ^ k.
      const u32 send = word_at(w, t ^ k);
      const u32 got = k == 0 ? send : __shfl_xor_sync(0xffffffffu, send, k);
      const u32 pair = (u32)((got & 0xffffu) >= threshold) | ((u32)((got >> 16) >= threshold) << 1);
      bits |= pair << (2 * (t ^ k));
    }
  } else {
    #pragma unroll
    for (int s = 0; s < 4; s++) {
      const u64 e = e0 + 8 * s + 2 * t;
      bits |= ((u32)attn_keep(seed, offset, e, threshold) | ((u32)attn_keep(seed, offset, e + 1, threshold) << 1)) << (2 * s);
    }
  }
  return bits;
}
// Transposed accumulators (rows = keys g and g + 8 of an m16 tile starting at key "key0", columns =
// queries 2t, 2t+1 of n8 tiles 0 and 1 of a pair). q_elem0 = element index of (query 0 of the pair's
// lane-independent base + 2t, key 0) = (row of query i0 + 2t)·stride; the pair's query rows are
// i0 + 8·nn + 2t + c. Returns bit 4·nn + 2·c + hh = keep flag of (query 8nn + 2t + c, key g + 8hh).
__device__ __forceinline__ u32 transposed_keep_bits(u64 seed, u64 offset, u32 threshold, u64 q_elem0, long long stride, int key0, bool aligned) {
  const int lane = threadIdx.x & 31, g = lane >> 2;
  u32 bits = 0;
  if (aligned) {
    // Lane g computes counter u = g: n-tile nn = g >> 2, query parity c = (g >> 1) & 1, key half hh = g & 1.
    const u64 e = q_elem0 + (u64)(8 * (g >> 2) + ((g >> 1) & 1)) * (u64)stride + (u64)(key0 + 8 * (g & 1));
    const uint4 w = dropout_words(seed, offset, e >> 3);
    #pragma unroll
    for (int k = 0; k < 8; k++) {
      // Lane s sends word (s ^ k) / 2 of counter s to lane s ^ k: lane g receives word g / 2 of counter g ^ k.
      const u32 send = word_at(w, (g ^ k) >> 1);
      const u32 got = k == 0 ? send : __shfl_xor_sync(0xffffffffu, send, k << 2);
      const u32 uniform = (g & 1) ? got >> 16 : got & 0xffffu;
      bits |= (u32)(uniform >= threshold) << (g ^ k);
    }
  } else {
    #pragma unroll
    for (int u = 0; u < 8; u++) {
      const u64 e = q_elem0 + (u64)(8 * (u >> 2) + ((u >> 1) & 1)) * (u64)stride + (u64)(key0 + 8 * (u & 1) + g);
      bits |= (u32)attn_keep(seed, offset, e, threshold) << u;
    }
  }
  return bits;
}
`;

/** Kernel parameters of the packed variable-length layout (null pointers and 0 when dense). */
export const VARLEN_PARAMS = 'const int* __restrict__ cu_seqlens_q, const int* __restrict__ cu_seqlens_k, int total_q';
/** Kernel parameters of attention dropout: DROPOUT_PARAMS and the row stride S of the element index. */
export const ATTENTION_DROPOUT_PARAMS = `${DROPOUT_PARAMS}, long long drop_stride`;
/** The counter offset the kernel draws from (offset + the device offsetBase, when given). */
export const ATTENTION_DROPOUT_OFFSET = '[[maybe_unused]] const u64 offset = offset_arg + (offset_base != nullptr ? *offset_base : 0ull);';

/** Packed sequences: cuSeqlens for queries and keys (i32 [B+1]; no keys' when paged) and the total query rows. */
export interface VarlenLayout {
  cuSeqlensQ: Tensor;
  cuSeqlensK?: Tensor;
  totalQ: number;
}

export function varlenArgs(check: OpCheck, varlen: VarlenLayout | undefined): KernelArg[] {
  if (!varlen) return [arg.ptr(0n), arg.ptr(0n), arg.i32(0)];
  const keys = varlen.cuSeqlensK ? devicePtr(check, 'cuSeqlensK', varlen.cuSeqlensK) : 0n;
  return [arg.ptr(devicePtr(check, 'cuSeqlensQ', varlen.cuSeqlensQ)), arg.ptr(keys), arg.i32(varlen.totalQ)];
}

/** The dropout arguments (p = 0 placeholders when off) and the element row stride. */
export function attentionDropoutArgs(dropout: DropoutArgs | undefined, stride: number): KernelArg[] {
  return [...dropoutArgs(dropout ?? { p: 0, seed: 0n, offset: 0n }), arg.i64(BigInt(stride))];
}

/** The dropout row stride S of the packed layout: maxSeqlenK rounded up to a multiple of 8. */
export function varlenDropoutStride(maxSeqlenK: number): number {
  return Math.ceil(maxSeqlenK / 8) * 8;
}
