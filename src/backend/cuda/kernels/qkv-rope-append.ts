// qkvRopeAppend: the QKV projection's output turned into attention's inputs — bias, rotary position
// embedding on the query and key heads, the query heads written for attention and the key and value
// heads appended to the KV cache at each token's position — in one kernel (backend.ts has the contract).
//
// Math, per row r (token l of sequence b, position p = positions[r]) and head hh of the row's
// Hq + 2·Hkv heads, pair i < d/2 of the head: a = x_i + bias_i, z = x_{i+d/2} + bias_{i+d/2};
// for query and key heads with RoPE θ = fround(p·invFreq[i]) (f32, as HF), c = scale·cos θ,
// s = scale·sin θ: a' = a·c − z·s, z' = z·c + a·s (sincosf: full-precision range reduction, positions
// into the 100k range keep their accuracy). Query heads go to q[b, hh, l]; key and value heads to the
// cache at [b, g, p] (and to kOut/vOut [b, g', l], once per kv head or repeated for its query heads).
//
// Thread mapping: grid (R, ⌈(Hq + 2·Hkv) / HPB⌉), TPH = d/2 / PV threads per (row, head) and HPB heads a
// block, thread t of a head owning the PV pairs (i, i + d/2) from i = t·PV. Decode rows are few, so the
// grid is sized by heads (HPB = 1) and a thread takes one pair (PV = 1; a warp reads and writes 2 × 32
// consecutive elements of a head): a Llama 3.2 1B step at batch 1 runs 48 blocks. Hundreds of rows (a
// prefill, a serving step, an embedding batch) take 256 threads a block (headsPerBlock) and 16-byte vectors
// of pairs where the pointers allow (PV = 8 at 16 bit: a d-128 head is 8 threads of two 16-byte loads and
// stores); one pair a thread made Qwen3's prefill norm + RoPE 30% of copy speed (H100, session 55 profile).
// Rows whose position is outside [0, maxLen) skip the cache write.
// Paged (spec.page = blockSize > 0, a block table given): the caches are a block pool [numBlocks, Hkv,
// blockSize, d] and position p of sequence seq goes to block block_table[seq·table_stride + p / PAGE],
// row p % PAGE (PAGE is a compile-time constant: shifts for powers of two); one more 4-byte load per
// key/value head, from a row of the table every block of the sequence shares (L1). With table_rows
// (qkvRopeAppend's tableRows: a serving step's rows, each its own sequence) the row is table_rows[seq].
//
// headNorm (Qwen3's q_norm / k_norm; spec.headNorm): after the bias, each query and key head is scaled by
// 1/sqrt(mean(x²) + eps) and gamma; a head's TPH threads leave their pairs' Σ a² + z² in shared memory and,
// after one block barrier, each adds its head's TPH values in the same order (the same rstd for every thread
// of the head).
//
// Precision: f32 arithmetic, stored in the tensors' dtype.
// Bytes per row (s = sizeof(dtype), W = (Hq + 2·Hkv)·d): read W·s (+ W·s bias, cached) + 4·d/2 (invFreq,
// cached), write W·s (+ 2·Hkv·d·s or 2·Hq·d·s with kOut/vOut).

import type { QkvRopeAppendArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkQkvRopeAppend } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

/**
 * RoPE of one pair (a, z) = (x_i, x_{i+d/2}) at position p (device code, shared with decode attention's fused
 * append): θ = p·invFreq[i] in f32 as HF computes it, c = scale·cos θ, s = scale·sin θ (sincosf: full-precision
 * range reduction, so positions into the 100k range keep their accuracy); a' = a·c − z·s, z' = z·c + a·s.
 */
export const ROPE_PAIR_CODE = String.raw`
__device__ __forceinline__ void rope_pair(float& a, float& z, int p, float inv_freq, float scale) {
  float s, c;
  sincosf((float)p * inv_freq, &s, &c);
  c *= scale;
  s *= scale;
  const float rotated = a * c - z * s;
  z = z * c + a * s;
  a = rotated;
}
`;

/**
 * The head norm's scale (device code, shared with decode attention's fused append): 1/sqrt(mean(x²) + eps) of a
 * head of d values from N partial sums of squares at `sums` (16-byte aligned where N is a multiple of 4), added in
 * order, four at a time where N allows — every thread of the head that calls it gets the same value.
 */
export const HEAD_RSTD_CODE = String.raw`
template <int N>
__device__ __forceinline__ float head_rstd(const float* sums, int d, float eps) {
  float total = 0.f;
  if constexpr (N % 4 == 0) {
    #pragma unroll 4
    for (int j = 0; j < N; j += 4) {
      const float4 v = *reinterpret_cast<const float4*>(sums + j);
      total += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int j = 0; j < N; j++) total += sums[j];
  }
  return rsqrtf(total * (1.f / d) + eps);
}
`;

/** Where the contiguous key/value copies go: none, one per kv head, or repeated for each query head. */
export type KvCopy = 'none' | 'kv' | 'repeat';

export interface QkvRopeAppendSpec {
  readonly dtype: FloatDType;
  readonly headDim: number;
  readonly queryHeads: number;
  readonly kvHeads: number;
  readonly rope: boolean;
  readonly bias: boolean;
  readonly copy: KvCopy;
  /** Positions per block of a paged cache (a block table given); 0 or absent for the contiguous cache. */
  readonly page?: number;
  /** Heads a block handles (1 or absent: one; see headsPerBlock()). */
  readonly headsPerBlock?: number;
  /** RMS norm of each query and key head before RoPE (HeadNormArgs); absent: none. */
  readonly headNorm?: boolean;
  /** Pairs a thread takes, as vectors of this many elements (1 or absent: one; qkvRopeAppend picks 8 at 16 bit for many rows where the pointers allow). */
  readonly pairs?: number;
}

export function qkvRopeAppendKey(s: QkvRopeAppendSpec): string {
  const hpb = s.headsPerBlock ?? 1;
  return `qkv_rope_append.${s.dtype}.d${s.headDim}.hq${s.queryHeads}.hkv${s.kvHeads}${s.rope ? '.rope' : ''}${s.bias ? '.bias' : ''}${s.headNorm ? '.qknorm' : ''}${s.copy === 'none' ? '' : `.copy_${s.copy}`}${s.page ? `.paged${s.page}` : ''}${hpb > 1 ? `.h${hpb}` : ''}${(s.pairs ?? 1) > 1 ? `.pv${s.pairs}` : ''}`;
}

/** FUSEFORMER_QKV_VECTORS=0: one pair a thread at every row count (the kernel before vectors of pairs, for A/B runs). */
export const qkvRopeAppendOptions = { vectorPairs: process.env['FUSEFORMER_QKV_VECTORS'] !== '0' };

/** Blocks of one head each up to this many (rows × heads); above it, a block takes 256 threads' worth of heads. */
export const QKV_ONE_HEAD_BLOCKS = 4096;

/**
 * Heads per block for R rows of `heads` heads of `threadsPerHead` threads each: 1 while the grid of one head
 * a block stays within QKV_ONE_HEAD_BLOCKS (decode rows: more, smaller blocks spread a latency-bound op over
 * more SMs), else 256 / threadsPerHead (at most all heads): a 642-row serving step of Llama 1.2B was 30,816
 * blocks of 32 threads, 38.7 µs for 7.9 MB (H200, session 9 profile), bound by block scheduling, not bandwidth.
 */
export function headsPerBlock(rows: number, heads: number, threadsPerHead: number): number {
  if (rows * heads <= QKV_ONE_HEAD_BLOCKS) return 1;
  return Math.max(1, Math.min(heads, Math.floor(256 / threadsPerHead)));
}

export function qkvRopeAppendSource(spec: QkvRopeAppendSpec): KernelSource {
  const name = kernelIdentifier(qkvRopeAppendKey(spec));
  const half = spec.headDim / 2;
  const group = spec.queryHeads / spec.kvHeads;
  const hpb = spec.headsPerBlock ?? 1;
  const pairs = spec.pairs ?? 1, threadsPerHead = half / pairs;
  if (!Number.isInteger(threadsPerHead) || pairs * byteSize(spec.dtype) > 16) throw new RangeError(`qkvRopeAppendSource: ${pairs} pairs a thread must divide the half head ${half} in at most 16 bytes`);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({
    D: spec.headDim, HALF: half, HQ: spec.queryHeads, HKV: spec.kvHeads, GROUP: group, WIDTH: (spec.queryHeads + 2 * spec.kvHeads) * spec.headDim,
    ROPE: spec.rope, BIAS: spec.bias, COPY: spec.copy !== 'none', COPY_HEADS: spec.copy === 'repeat' ? spec.queryHeads : spec.kvHeads,
    REPEAT: spec.copy === 'repeat', PAGED: (spec.page ?? 0) > 0, PAGE: Math.max(1, spec.page ?? 0), HPB: hpb,
    HEAD_NORM: spec.headNorm === true, PV: pairs, TPH: threadsPerHead,
  })}
${ROPE_PAIR_CODE}
${HEAD_RSTD_CODE}
// qkv [R, WIDTH]; q [B, HQ, L, D]; caches [B, HKV, max_len, D] (paged: [blocks, HKV, PAGE, D] through
// block_table [B, table_stride], max_len = table_stride·PAGE); copies [B, COPY_HEADS, L, D].
// Grid (R, ⌈(HQ + 2·HKV) / HPB⌉), block TPH·HPB.
extern "C" __global__ void __launch_bounds__(TPH * HPB) ${name}(
    const T* __restrict__ qkv, const T* __restrict__ bias, const int* __restrict__ positions, const float* __restrict__ inv_freq,
    float rope_scale, T* __restrict__ q, T* __restrict__ k_cache, T* __restrict__ v_cache, T* __restrict__ k_out,
    T* __restrict__ v_out, int L, int max_len, const int* __restrict__ block_table, int table_stride,
    const int* __restrict__ table_rows, const T* __restrict__ q_norm, const T* __restrict__ k_norm, float norm_eps) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  // Block (r, y) takes heads y·HPB .. y·HPB + HPB − 1 of row r, TPH threads each; a head's thread t owns
  // the PV pairs (i, i + HALF), i = t·PV .. t·PV + PV − 1, read and written as vectors of PV elements.
  const int r = blockIdx.x, hh = blockIdx.y * HPB + (int)threadIdx.x / TPH, i0 = ((int)threadIdx.x % TPH) * PV;
  // The last block's spare heads (HPB > 1) do nothing, but with HEAD_NORM they still meet the barrier.
  const bool live = !(HPB > 1 && hh >= HQ + 2 * HKV);
  if (!HEAD_NORM && !live) return;
  const int seq = r / L, l = r - seq * L;
  float a[PV], z[PV];
  #pragma unroll
  for (int e = 0; e < PV; e++) a[e] = z[e] = 0.f;
  if (live) {
    const T* src = qkv + (size_t)r * WIDTH + hh * D + i0;
    const Vec<T, PV> xa = load_vec<T, PV>(src), xz = load_vec<T, PV>(src + HALF);
    #pragma unroll
    for (int e = 0; e < PV; e++) {
      a[e] = to_float(xa.v[e]);
      z[e] = to_float(xz.v[e]);
    }
    if (BIAS) {
      const Vec<T, PV> ba = load_vec<T, PV>(bias + hh * D + i0), bz = load_vec<T, PV>(bias + hh * D + i0 + HALF);
      #pragma unroll
      for (int e = 0; e < PV; e++) {
        a[e] += to_float(ba.v[e]);
        z[e] += to_float(bz.v[e]);
      }
    }
  }
  if (HEAD_NORM) {
    // Each thread's PV pairs' squares, then every thread of the head adds the head's TPH partials in the same
    // order after one barrier (the same rstd for all of them).
    __shared__ __align__(16) float squares[TPH * HPB];
    float own = 0.f;
    #pragma unroll
    for (int e = 0; e < PV; e++) own += a[e] * a[e] + z[e] * z[e];
    squares[threadIdx.x] = own;
    __syncthreads();
    if (!live) return;
    if (hh < HQ + HKV) {
      const float rstd = head_rstd<TPH>(squares + ((int)threadIdx.x / TPH) * TPH, D, norm_eps);
      const T* gamma = (hh < HQ ? q_norm : k_norm) + i0;
      const Vec<T, PV> ga = load_vec<T, PV>(gamma), gz = load_vec<T, PV>(gamma + HALF);
      #pragma unroll
      for (int e = 0; e < PV; e++) {
        a[e] *= rstd * to_float(ga.v[e]);
        z[e] *= rstd * to_float(gz.v[e]);
      }
    }
  }
  const int p = positions[r];
  if (ROPE && hh < HQ + HKV) {
    #pragma unroll
    for (int e = 0; e < PV; e++) rope_pair(a[e], z[e], p, inv_freq[i0 + e], rope_scale);
  }
  Vec<T, PV> ya, yz;
  #pragma unroll
  for (int e = 0; e < PV; e++) {
    ya.v[e] = from_float<T>(a[e]);
    yz.v[e] = from_float<T>(z[e]);
  }
  const auto put = [&](T* dst) {
    store_vec<T, PV>(dst + i0, ya);
    store_vec<T, PV>(dst + i0 + HALF, yz);
  };
  if (hh < HQ) {
    put(q + (((size_t)seq * HQ + hh) * L + l) * D);
    return;
  }
  const bool value = hh >= HQ + HKV;
  const int g = value ? hh - HQ - HKV : hh - HQ;
  if (p >= 0 && p < max_len) {
    const size_t table_row = PAGED && table_rows != nullptr ? table_rows[seq] : seq;
    const size_t row = PAGED ? ((size_t)block_table[table_row * table_stride + p / PAGE] * HKV + g) * PAGE + p % PAGE
                             : ((size_t)seq * HKV + g) * max_len + p;
    put((value ? v_cache : k_cache) + row * D);
  }
  if (COPY) {
    T* base = value ? v_out : k_out;
    #pragma unroll
    for (int rep = 0; rep < (REPEAT ? GROUP : 1); rep++) {
      const int head = REPEAT ? g * GROUP + rep : g;
      put(base + (((size_t)seq * COPY_HEADS + head) * L + l) * D);
    }
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export function qkvRopeAppend(host: KernelHost, args: QkvRopeAppendArgs): void {
  const c = new OpCheck('qkvRopeAppend', 'cuda');
  const { qkv, bias, headNorm, positions, q, kCache, vCache, kOut, vOut, invFreq, ropeScale, B, L, Hq, Hkv, d, maxLen, kOutHeads, blockTable, tableRows, paged } = checkQkvRopeAppend(c, args);
  const ptr = (name: string, t: typeof qkv | undefined) => (t ? devicePtr(c, name, t) : 0n);
  const rows = B * L;
  if (rows === 0) return;
  if (d / 2 > 1024) c.fail(`head size ${d} is larger than the largest supported (2048)`);
  if (Hq + 2 * Hkv > 65535) c.fail(`${Hq + 2 * Hkv} heads a row: at most 65535 are supported`);
  const copy = kOut === undefined ? 'none' : kOutHeads === Hkv ? 'kv' : 'repeat';
  const heads = Hq + 2 * Hkv, dtype = qkv.dtype as FloatDType;
  // Many rows: vectors of pairs where every tensor a thread reads or writes a vector of is aligned for them.
  const manyRows = rows * heads > QKV_ONE_HEAD_BLOCKS && qkvRopeAppendOptions.vectorPairs;
  const vectorTensors = { qkv, bias, q, kCache, vCache, kOut, vOut, 'headNorm.q': headNorm?.q, 'headNorm.k': headNorm?.k };
  const pairs = manyRows ? pickVectorWidth(16 / byteSize(dtype), Object.entries(vectorTensors)
    .flatMap(([name, t]) => (t === undefined ? [] : [{ ptr: devicePtr(c, name, t), elementBytes: byteSize(dtype) }])), d / 2) : 1;
  const threadsPerHead = d / 2 / pairs, hpb = headsPerBlock(rows, heads, threadsPerHead);
  const spec: QkvRopeAppendSpec = {
    dtype, headDim: d, queryHeads: Hq, kvHeads: Hkv, rope: invFreq !== undefined, bias: bias !== undefined, copy,
    ...(paged ? { page: paged.blockSize } : {}), ...(hpb > 1 ? { headsPerBlock: hpb } : {}), ...(headNorm ? { headNorm: true } : {}),
    ...(pairs > 1 ? { pairs } : {}),
  };
  host.kernel(qkvRopeAppendKey(spec), () => qkvRopeAppendSource(spec)).launch(
    { grid: [rows, Math.ceil(heads / hpb)], block: hpb * threadsPerHead },
    [
      arg.ptr(ptr('qkv', qkv)), arg.ptr(ptr('bias', bias)), arg.ptr(ptr('positions', positions)), arg.ptr(ptr('rope.invFreq', invFreq)),
      arg.f32(ropeScale), arg.ptr(ptr('q', q)), arg.ptr(ptr('kCache', kCache)), arg.ptr(ptr('vCache', vCache)),
      arg.ptr(ptr('kOut', kOut)), arg.ptr(ptr('vOut', vOut)), arg.i32(L), arg.i32(maxLen),
      arg.ptr(ptr('blockTable', blockTable)), arg.i32(paged ? paged.maxBlocks : 0), arg.ptr(ptr('tableRows', tableRows)),
      arg.ptr(ptr('headNorm.q', headNorm?.q)), arg.ptr(ptr('headNorm.k', headNorm?.k)), arg.f32(headNorm?.eps ?? 0),
    ],
  );
}

/** GPT-2 (bias, no RoPE), Llama 3.2 1B and 3.1 8B (GQA, RoPE), prefill copies both ways, f32. */
export function catalog(): KernelSource[] {
  return [
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 12, kvHeads: 12, rope: false, bias: true, copy: 'none' }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 12, kvHeads: 12, rope: false, bias: true, copy: 'kv' }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 32, kvHeads: 8, rope: true, bias: false, copy: 'none' }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 32, kvHeads: 8, rope: true, bias: false, copy: 'repeat' }),
    qkvRopeAppendSource({ dtype: 'f16', headDim: 128, queryHeads: 32, kvHeads: 8, rope: true, bias: true, copy: 'kv' }),
    qkvRopeAppendSource({ dtype: 'f32', headDim: 32, queryHeads: 4, kvHeads: 2, rope: true, bias: false, copy: 'none' }),
    // Paged (the serving engine's pool): Llama 3.2 1B with blocks of 16, GPT-2 with blocks of 32, f32 with blocks of 8.
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 32, kvHeads: 8, rope: true, bias: false, copy: 'none', page: 16 }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 12, kvHeads: 12, rope: false, bias: true, copy: 'none', page: 32 }),
    qkvRopeAppendSource({ dtype: 'f32', headDim: 16, queryHeads: 8, kvHeads: 2, rope: true, bias: false, copy: 'none', page: 8 }),
    // Many heads a block (a serving step's hundreds of rows): Llama 3.2 1B paged, GPT-2 prefill copies (a partial last block), d 128 repeated.
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 32, kvHeads: 8, rope: true, bias: false, copy: 'none', page: 16, headsPerBlock: 8 }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 12, kvHeads: 12, rope: false, bias: true, copy: 'kv', headsPerBlock: 8 }),
    qkvRopeAppendSource({ dtype: 'f16', headDim: 128, queryHeads: 32, kvHeads: 8, rope: true, bias: true, copy: 'repeat', headsPerBlock: 4 }),
    // Vectors of pairs (many rows): Llama 3.2 1B paged at 8 pairs a thread (32 heads of 4 threads a block), GPT-2's prefill copies, f32 at 4.
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 32, kvHeads: 8, rope: true, bias: false, copy: 'none', page: 16, headsPerBlock: 48, pairs: 8 }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 64, queryHeads: 12, kvHeads: 12, rope: false, bias: true, copy: 'kv', headsPerBlock: 36, pairs: 8 }),
    qkvRopeAppendSource({ dtype: 'f32', headDim: 128, queryHeads: 32, kvHeads: 8, rope: true, bias: true, copy: 'repeat', headsPerBlock: 16, pairs: 4 }),
    // Qwen3's q_norm / k_norm (head 128, 16 query and 8 kv heads): decode, paged with many heads a block, a
    // prefill's vectors of 8 pairs (the embedding and rerank batches); an odd half (d 40) takes the scalar sum.
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 128, queryHeads: 16, kvHeads: 8, rope: true, bias: false, copy: 'none', headsPerBlock: 32, headNorm: true, pairs: 8 }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 128, queryHeads: 16, kvHeads: 8, rope: true, bias: false, copy: 'none', headNorm: true }),
    qkvRopeAppendSource({ dtype: 'bf16', headDim: 128, queryHeads: 16, kvHeads: 8, rope: true, bias: false, copy: 'none', page: 16, headsPerBlock: 4, headNorm: true }),
    qkvRopeAppendSource({ dtype: 'f16', headDim: 40, queryHeads: 6, kvHeads: 2, rope: true, bias: true, copy: 'kv', headsPerBlock: 6, headNorm: true }),
  ];
}
