// Fused AdamW over the whole flat parameter workspace in one launch (LightSeq2: parameters and
// gradients live in one contiguous buffer, so the optimizer is a single elementwise kernel).
//
// Math (backend.ts has the contract), per element, in f32:
//   g = grad · gradScale · clipScale            (unscaling a loss scale, and gradient clipping)
//   m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g²
//   θ = θ − lr·( (m / c1) / (sqrt(v / c2) + eps) + weightDecay·θ ),   c1 = 1 − β1^step, c2 = 1 − β2^step
// lr, gradScale, c1 and c2 are kernel arguments (c1, c2, 1−β1 and 1−β2 computed on the host in f64
// and passed as f32), or, with HAS_SCALARS, read by every thread from scalars[0..3] in device memory,
// so a captured CUDA graph replays with the values uploaded before each replay. With HAS_CLIP every
// thread reads S = sum_squares[0] and computes norm = sqrt(S)·gradScale: a non-finite norm (an fp16
// overflow) returns before touching anything — the whole step is skipped, uniformly across the grid —
// otherwise clipScale = min(1, maxNorm / (norm + 1e-6)) (maxNorm = Inf gives 1). Without HAS_CLIP,
// clipScale = 1. Weight decay is decoupled and uses θ before the update. With `master` (f32), θ is
// the master copy and params receive θ rounded to their dtype; without it (LightSeq2's no-master
// mode) θ is params itself, read into f32, updated, and rounded back to f16/bf16/f32 (small updates
// to 16-bit params can round away: the trade the no-master mode makes for 4 fewer bytes of state per
// parameter).
//
// Shapes: params, grads [n] (f32, f16 or bf16, the same dtype); m, v, master [n] f32.
//
// Thread mapping: a grid-stride loop over n/VEC vectors (64-bit indices: a workspace may pass 2^31
// elements), VEC = 16 bytes of params/grads (4 f32 or 8 f16/bf16; the f32 streams then move in 16-byte
// chunks too), narrower when a pointer is not aligned; the n mod VEC tail is taken by the first
// threads one element each. All loads of a vector are issued before any arithmetic.
//
// Bytes per parameter (s = sizeof(params dtype)):
//   no master: read 2s + 8 (grads, params, m, v), write s + 8 (params, m, v)            f16: 22, f32: 28
//   master:    read s + 12 (grads, m, v, master), write s + 12 (params, m, v, master)   f16: 28, f32: 32
// (scalars and sum_squares add 20 bytes per thread, all hits in L1/L2 after the first block.)
//
// Measured on an H200 (n = 2^27, CUDA-graph replay; memcpy D2D = 4.28 TB/s): bf16/f16 with master
// 3.63–3.68 TB/s, f32 3.86 TB/s; bf16 without master only 2.98 TB/s (about the same time per
// parameter as with master, though it moves 22 bytes instead of 28; cause not found yet).

import type { AdamWArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { checkAdamW } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { maxVectorElements, pickVectorWidth } from './elementwise.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface AdamWSpec {
  /** params' and grads' dtype. */
  readonly dtype: FloatDType;
  readonly hasMaster: boolean;
  /** Parameters per vector access. */
  readonly vec: number;
  /** lr, gradScale and the bias corrections come from a device f32 [4] instead of arguments. */
  readonly deviceScalars?: boolean;
  /** Reads Σ grad² for the clip and the non-finite skip. */
  readonly clip?: boolean;
}

export function adamWKey(s: AdamWSpec): string {
  return `adamw.${s.dtype}.v${s.vec}${s.hasMaster ? '.master' : ''}${s.deviceScalars ? '.scalars' : ''}${s.clip ? '.clip' : ''}`;
}

const BLOCK_THREADS = 256;
/** Resident 256-thread blocks per SM the grid aims for (the kernel needs ~40–64 registers). */
const BLOCKS_PER_SM = 8;

export function adamWSource(spec: AdamWSpec): KernelSource {
  const name = kernelIdentifier(adamWKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ VEC: spec.vec, BLOCK: BLOCK_THREADS, HAS_MASTER: spec.hasMaster, HAS_SCALARS: spec.deviceScalars ?? false, HAS_CLIP: spec.clip ?? false })}

// f32 state moves in chunks of at most 16 bytes.
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&out)[N]) {
  constexpr int W = N < 4 ? N : 4;
  #pragma unroll
  for (int i = 0; i < N; i += W) {
    const Vec<float, W> q = load_vec<float, W>(p + i);
    #pragma unroll
    for (int j = 0; j < W; j++) out[i + j] = q.v[j];
  }
}
template <int N>
__device__ __forceinline__ void store_f32(float* p, const float (&in)[N]) {
  constexpr int W = N < 4 ? N : 4;
  #pragma unroll
  for (int i = 0; i < N; i += W) {
    Vec<float, W> q;
    #pragma unroll
    for (int j = 0; j < W; j++) q.v[j] = in[i + j];
    store_vec<float, W>(p + i, q);
  }
}

struct AdamW {
  T* params;
  const T* grads;
  float* m;
  float* v;
  float* master;
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;

  // Updates the N parameters starting at i (N = VEC in the main loop, 1 in the tail).
  template <int N>
  __device__ __forceinline__ void step(u64 i) const {
    float g[N], mi[N], vi[N], theta[N];
    load_floats<T, N>(grads + i, g, N);
    if (HAS_MASTER) load_f32<N>(master + i, theta);
    else load_floats<T, N>(params + i, theta, N);
    load_f32<N>(m + i, mi);
    load_f32<N>(v + i, vi);
    #pragma unroll
    for (int k = 0; k < N; k++) {
      const float gk = g[k] * grad_scale;
      mi[k] = beta1 * mi[k] + one_minus_beta1 * gk;
      vi[k] = beta2 * vi[k] + one_minus_beta2 * gk * gk;
      const float update = (mi[k] / bias_correction1) / (sqrtf(vi[k] / bias_correction2) + eps);
      theta[k] -= lr * (update + weight_decay * theta[k]);
    }
    store_f32<N>(m + i, mi);
    store_f32<N>(v + i, vi);
    if (HAS_MASTER) store_f32<N>(master + i, theta);
    store_floats<T, N>(params + i, theta, N);
  }
};

// scalars (HAS_SCALARS): [lr, grad_scale, bias_correction1, bias_correction2], replacing those arguments.
// sum_squares (HAS_CLIP): Σ of the squared raw grads; max_norm may be +Inf.
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(
    T* params, const T* grads, float* m, float* v, float* master, u64 n,
    float lr, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2, float eps,
    float weight_decay, float bias_correction1, float bias_correction2, float grad_scale,
    const float* scalars, const float* sum_squares, float max_norm) {
  if (HAS_SCALARS) {
    lr = scalars[0];
    grad_scale = scalars[1];
    bias_correction1 = scalars[2];
    bias_correction2 = scalars[3];
  }
  if (HAS_CLIP) {
    const float norm = sqrtf(sum_squares[0]) * grad_scale;
    if (!isfinite(norm)) return;  // overflow: skip the whole update (every thread sees the same norm)
    grad_scale *= fminf(1.f, max_norm / (norm + 1e-6f));
  }
  const AdamW adam{params, grads, m, v, master, lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps,
                   weight_decay, bias_correction1, bias_correction2, grad_scale};
  const u64 vectors = n / VEC;
  const u64 first = (u64)blockIdx.x * BLOCK + threadIdx.x;
  for (u64 vi = first; vi < vectors; vi += (u64)gridDim.x * BLOCK) adam.step<VEC>(vi * VEC);
  const u64 tail = vectors * VEC + first;
  if (tail < n) adam.step<1>(tail);
}
`;
  return { name, source };
}

export function adamW(host: KernelHost, args: AdamWArgs): void {
  const c = new OpCheck('adamW', 'cuda');
  const { params, grads, m, v, master, scalars, clip, n } = checkAdamW(c, args);
  const dtype = params.dtype as FloatDType;
  const ptrs = {
    params: devicePtr(c, 'params', params), grads: devicePtr(c, 'grads', grads), m: devicePtr(c, 'm', m), v: devicePtr(c, 'v', v),
    master: master ? devicePtr(c, 'master', master) : 0n,
    scalars: scalars.kind === 'device' ? devicePtr(c, 'scalars', scalars.scalars) : 0n,
    sumSquares: clip ? devicePtr(c, 'clip.sumSquares', clip.sumSquares) : 0n,
  };
  if (n === 0) return;
  const s = byteSize(dtype);
  const vec = pickVectorWidth(maxVectorElements(dtype), [
    { ptr: ptrs.params, elementBytes: s }, { ptr: ptrs.grads, elementBytes: s }, { ptr: ptrs.m, elementBytes: 4 }, { ptr: ptrs.v, elementBytes: 4 },
    ...(master ? [{ ptr: ptrs.master, elementBytes: 4 }] : []),
  ]);
  const spec: AdamWSpec = { dtype, hasMaster: master !== undefined, vec, ...(scalars.kind === 'device' ? { deviceScalars: true } : {}), ...(clip ? { clip: true } : {}) };
  const { beta1, beta2, eps, weightDecay } = args;
  // With device scalars the kernel overwrites these placeholders with scalars[0..3].
  const numbers = scalars.kind === 'host'
    ? { lr: scalars.lr, gradScale: scalars.gradScale, c1: 1 - beta1 ** scalars.step, c2: 1 - beta2 ** scalars.step }
    : { lr: 0, gradScale: 1, c1: 1, c2: 1 };
  host.kernel(adamWKey(spec), () => adamWSource(spec)).launch(
    { grid: flatGridSize(Math.floor(n / vec), host.multiProcessorCount, BLOCKS_PER_SM), block: BLOCK_THREADS },
    [
      arg.ptr(ptrs.params), arg.ptr(ptrs.grads), arg.ptr(ptrs.m), arg.ptr(ptrs.v), arg.ptr(ptrs.master), arg.u64(BigInt(n)),
      arg.f32(numbers.lr), arg.f32(beta1), arg.f32(1 - beta1), arg.f32(beta2), arg.f32(1 - beta2), arg.f32(eps), arg.f32(weightDecay),
      arg.f32(numbers.c1), arg.f32(numbers.c2), arg.f32(numbers.gradScale),
      arg.ptr(ptrs.scalars), arg.ptr(ptrs.sumSquares), arg.f32(clip ? clip.maxNorm : Infinity),
    ],
  );
}

/** Each dtype with and without master weights, the narrow paths for misaligned workspaces, and the
 *  device-scalar and clip variants. */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    for (const hasMaster of [false, true]) out.push(adamWSource({ dtype, hasMaster, vec: maxVectorElements(dtype) }));
  }
  out.push(adamWSource({ dtype: 'f16', hasMaster: true, vec: 2 }));
  out.push(adamWSource({ dtype: 'bf16', hasMaster: false, vec: 1 }));
  // The graph-captured step: device scalars, with and without the clip / overflow skip.
  out.push(adamWSource({ dtype: 'bf16', hasMaster: true, vec: 8, deviceScalars: true, clip: true }));
  out.push(adamWSource({ dtype: 'f16', hasMaster: true, vec: 8, clip: true }));
  out.push(adamWSource({ dtype: 'f32', hasMaster: false, vec: 4, deviceScalars: true }));
  return out;
}
