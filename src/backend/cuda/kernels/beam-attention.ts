// Attention for one decoding step of an encoder-decoder model under beam search (backend.ts has the
// contracts): beamSelfAttention (causal self-attention over a KV cache, beams reordered through the
// cache-row table instead of by copying the cache) and beamCrossAttention (a step's queries against the
// encoder's keys and values, read in place from the one packed K/V projection of all decoder layers).
//
// One block per (query row, head), THREADS threads (≥ d):
//   self:  q = (qkv_q + b_q)·scale into shared memory; this step's k, v (+ bias) stored to the cache at
//          (row, head, t); the cache row of every earlier position read from the table into shared memory.
//   both:  scores: warp w takes keys w, w + WARPS, ...; its lanes split the d dimensions (a warp reads one
//          key's d contiguous values), shuffle-sum → shared p[i];  softmax over p (block max, block sum);
//          output: thread (g, c) sums p_i·v_i[c] over keys i ≡ g (mod GROUPS), GROUPS = THREADS/d, and the
//          groups' partial sums are added through shared memory.
// Decode steps are latency-bound (a few rows of a few dozen keys); the cost that matters is reading each
// key and value once: 2·d·s bytes per key per head (s = sizeof(dtype)), plus 3·d·s of qkv, 2·d·s of new
// cache entries and d·s of output per head. Scores and sums are f32; the table lookups are 4 bytes a key.
// Shared memory: (d + keys) floats + keys ints (self) or (d + keys) floats (cross), sized at launch.

import type { BeamCrossAttentionArgs, BeamSelfAttentionArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { FLOAT_DTYPES } from '../../../dtype.js';
import { checkBeamCrossAttention, checkBeamSelfAttention } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

export interface BeamAttentionSpec {
  readonly dtype: FloatDType;
  readonly heads: number;
  readonly headDim: number;
  readonly threads: number;
}

export function beamSelfAttentionKey(s: BeamAttentionSpec): string {
  return `beam_self_attention.${s.dtype}.h${s.heads}.d${s.headDim}.t${s.threads}`;
}

export function beamCrossAttentionKey(s: BeamAttentionSpec): string {
  return `beam_cross_attention.${s.dtype}.h${s.heads}.d${s.headDim}.t${s.threads}`;
}

/** 128 threads, or d rounded up to a warp when heads are wider. */
export function planBeamAttention(dtype: FloatDType, heads: number, headDim: number): BeamAttentionSpec {
  return { dtype, heads, headDim, threads: Math.max(128, Math.ceil(headDim / 32) * 32) };
}

function preamble(s: BeamAttentionSpec): string {
  if (s.headDim > 1024) throw new Error(`internal: beam attention head size ${s.headDim} above 1024`);
  return String.raw`${DEVICE_LIB}
${typedefLine('T', s.dtype)}
${constants({ HEADS: s.heads, D: s.headDim, H: s.heads * s.headDim, THREADS: s.threads, WARPS: s.threads / 32, GROUPS: Math.floor(s.threads / s.headDim) })}
${launchBoundsMacro(s.threads)}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// p[0..n) holds scores; leaves the softmax numerators in p and returns their sum (0 when n = 0).
__device__ __forceinline__ float softmax_in_place(float* p, int n, float* reduce_buf) {
  float m = neg_inf();
  for (int i = threadIdx.x; i < n; i += THREADS) m = fmaxf(m, p[i]);
  m = block_max(m, reduce_buf);
  float sum = 0.f;
  for (int i = threadIdx.x; i < n; i += THREADS) {
    const float e = __expf(p[i] - m);
    p[i] = e;
    sum += e;
  }
  return block_sum(sum, reduce_buf);  // its barriers also publish p[]
}

// out[c] = Σ_i p_i·value(i)[c] / sum over n keys; value(i) points at key i's d values.
template <typename ValueRow>
__device__ __forceinline__ void weighted_sum(const float* p, int n, float sum, ValueRow value, T* out, float* partial) {
  const int g = threadIdx.x / D, c = threadIdx.x - g * D;
  float acc = 0.f;
  if (g < GROUPS) for (int i = g; i < n; i += GROUPS) acc = fmaf(p[i], to_float(value(i)[c]), acc);
  partial[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x < D) {
    float s = 0.f;
    for (int k = 0; k < GROUPS; k++) s += partial[k * D + threadIdx.x];
    out[threadIdx.x] = from_float<T>(n > 0 ? s / sum : 0.f);
  }
}

// p[i] = q · key(i) for i < n: warp w takes keys w, w + WARPS, ...; lanes split the d values.
template <typename KeyRow>
__device__ __forceinline__ void scores(const float* q, int n, KeyRow key, float* p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = warp; i < n; i += WARPS) {
    const T* k = key(i);
    float dot = 0.f;
    for (int c = lane; c < D; c += 32) dot = fmaf(q[c], to_float(k[c]), dot);
    dot = warp_sum(dot);
    if (lane == 0) p[i] = dot;
  }
  __syncthreads();
}
`;
}

export function beamSelfAttentionSource(spec: BeamAttentionSpec): KernelSource {
  const name = kernelIdentifier(beamSelfAttentionKey(spec));
  const source = preamble(spec) + String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* __restrict__ qkv, const T* __restrict__ bias, T* k_cache, T* v_cache, const int* __restrict__ cache_rows,
    const int* __restrict__ positions, T* __restrict__ out, int rows, int cap, float scale) {
  extern __shared__ float smem[];
  float* q = smem;                                   // [D]
  float* p = smem + D;                               // [cap] scores, then softmax numerators
  int* key_row = reinterpret_cast<int*>(p + cap);    // [cap] the cache row of each position
  __shared__ float reduce_buf[32];
  __shared__ float partial[THREADS];
  const int r = blockIdx.x, h = blockIdx.y;
  const int t = positions[r];
  T* o = out + (long long)r * H + h * D;
  if (t < 0 || t >= cap) {
    for (int c = threadIdx.x; c < D; c += THREADS) o[c] = from_float<T>(0.f);
    return;
  }
  const T* x = qkv + (long long)r * 3 * H + h * D;
  const long long head = ((long long)r * HEADS + h) * cap;
  for (int c = threadIdx.x; c < D; c += THREADS) {
    q[c] = (to_float(x[c]) + to_float(bias[h * D + c])) * scale;
    k_cache[(head + t) * D + c] = from_float<T>(to_float(x[H + c]) + to_float(bias[H + h * D + c]));
    v_cache[(head + t) * D + c] = from_float<T>(to_float(x[2 * H + c]) + to_float(bias[2 * H + h * D + c]));
  }
  const int* history = cache_rows + ((long long)(t & 1) * rows + r) * cap;
  for (int i = threadIdx.x; i <= t; i += THREADS) key_row[i] = i < t ? min(max(history[i], 0), rows - 1) : r;
  __syncthreads();  // also makes this block's cache writes visible to its own reads below
  auto at = [&](int i) { return (((long long)key_row[i] * HEADS + h) * cap + i) * D; };
  scores(q, t + 1, [&](int i) { return k_cache + at(i); }, p);
  const float sum = softmax_in_place(p, t + 1, reduce_buf);
  weighted_sum(p, t + 1, sum, [&](int i) { return v_cache + at(i); }, o, partial);
}
`;
  return { name, source };
}

export function beamCrossAttentionSource(spec: BeamAttentionSpec): KernelSource {
  const name = kernelIdentifier(beamCrossAttentionKey(spec));
  const source = preamble(spec) + String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* __restrict__ q_in, const T* __restrict__ kv, const int* __restrict__ key_lengths, T* __restrict__ out,
    int beams, int key_len, int row_width, int k_column, float scale) {
  extern __shared__ float smem[];
  float* q = smem;        // [D]
  float* p = smem + D;    // [key_len]
  __shared__ float reduce_buf[32];
  __shared__ float partial[THREADS];
  const int r = blockIdx.x, h = blockIdx.y, b = r / beams;
  const int n = min(max(key_lengths[b], 0), key_len);
  for (int c = threadIdx.x; c < D; c += THREADS) q[c] = to_float(q_in[(long long)r * H + h * D + c]) * scale;
  __syncthreads();
  const T* keys = kv + (long long)b * key_len * row_width + k_column + h * D;
  scores(q, n, [&](int i) { return keys + (long long)i * row_width; }, p);
  const float sum = softmax_in_place(p, n, reduce_buf);
  weighted_sum(p, n, sum, [&](int i) { return keys + (long long)i * row_width + H; }, out + (long long)r * H + h * D, partial);
}
`;
  return { name, source };
}

// ---- launchers ------------------------------------------------------------------------------------------

/** Largest dynamic shared memory the kernels ask for, in floats beyond d: keys of one row. */
function checkSharedFits(check: OpCheck, host: KernelHost, bytes: number, what: string): void {
  if (bytes + 2048 > host.maxSharedBytesPerBlock) check.fail(`${what} needs ${bytes} bytes of shared memory per block; the device allows ${host.maxSharedBytesPerBlock}`);
}

export function beamSelfAttention(host: KernelHost, args: BeamSelfAttentionArgs): void {
  const check = new OpCheck('beamSelfAttention', 'cuda');
  const { qkv, bias, kCache, vCache, cacheRows, positions, out, heads, rows, d, L } = checkBeamSelfAttention(check, args);
  if (rows === 0) return;
  const spec = planBeamAttention(qkv.dtype as FloatDType, heads, d);
  const sharedBytes = (d + 2 * L) * 4;
  checkSharedFits(check, host, sharedBytes, `a cache of ${L} positions`);
  host.kernel(beamSelfAttentionKey(spec), () => beamSelfAttentionSource(spec)).launch({ grid: [rows, heads], block: spec.threads, sharedBytes }, [
    arg.ptr(devicePtr(check, 'qkv', qkv)), arg.ptr(devicePtr(check, 'bias', bias)), arg.ptr(devicePtr(check, 'kCache', kCache)),
    arg.ptr(devicePtr(check, 'vCache', vCache)), arg.ptr(devicePtr(check, 'cacheRows', cacheRows)), arg.ptr(devicePtr(check, 'positions', positions)),
    arg.ptr(devicePtr(check, 'out', out)), arg.i32(rows), arg.i32(L), arg.f32(1 / Math.sqrt(d)),
  ]);
}

export function beamCrossAttention(host: KernelHost, args: BeamCrossAttentionArgs): void {
  const check = new OpCheck('beamCrossAttention', 'cuda');
  const { q, kv, keyLengths, out, layer, layers, heads, beams, rows, H, d, Lk } = checkBeamCrossAttention(check, args);
  if (rows === 0) return;
  const spec = planBeamAttention(q.dtype as FloatDType, heads, d);
  const sharedBytes = (d + Lk) * 4;
  checkSharedFits(check, host, sharedBytes, `a source of ${Lk} positions`);
  host.kernel(beamCrossAttentionKey(spec), () => beamCrossAttentionSource(spec)).launch({ grid: [rows, heads], block: spec.threads, sharedBytes }, [
    arg.ptr(devicePtr(check, 'q', q)), arg.ptr(devicePtr(check, 'kv', kv)), arg.ptr(devicePtr(check, 'keyLengths', keyLengths)),
    arg.ptr(devicePtr(check, 'out', out)), arg.i32(beams), arg.i32(Lk), arg.i32(2 * layers * H), arg.i32(2 * layer * H), arg.f32(1 / Math.sqrt(d)),
  ]);
}

// ---- catalog ---------------------------------------------------------------------------------------------

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    // Marian/Transformer-base (8 heads of 64); odd head sizes (a partial warp of lanes, idle threads).
    for (const [heads, d] of [[8, 64], [3, 40], [2, 160]] as const) {
      const spec = planBeamAttention(dtype, heads, d);
      sources.push(beamSelfAttentionSource(spec), beamCrossAttentionSource(spec));
    }
  }
  return sources;
}
