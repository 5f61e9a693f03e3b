// sumSquares: out[0] = Σ x² over a flat f32/f16/bf16 tensor (or out[0] += Σ x² with accumulate), in
// f32 — the squared gradient norm for clipping and the fp16 overflow check.
//
// Two launches, a fixed reduction tree (no atomics, so the same n on the same device gives the same bits):
//  1. partial: G blocks, G = min(ceil(vectors / BLOCK), SMs · BLOCKS_PER_SM) — fixed by n, the vector
//     width and the device. A grid-stride loop over the n/VEC vectors (64-bit indices: 4e8 elements
//     and beyond), two vectors per iteration loaded before either is summed; each thread keeps VEC
//     running sums (one per vector lane: VEC independent add chains); the n mod VEC tail goes to the
//     first threads. The thread adds its lanes, the block reduces by shuffles and one shared-memory
//     round (block_sum), and thread 0 writes partial[block] (f32) to the scratch buffer.
//  2. finish: one block of FINISH_THREADS adds the G partials (thread t: partials t, t + FINISH_THREADS, …),
//     reduces them the same way, and thread 0 writes out[0] (adding to it with accumulate).
// NaN and Inf: there are only additions of x² ≥ 0, so a NaN anywhere reaches out as NaN and an Inf
// (or an f32 overflow of the sum) as +Inf.
// Precision: each thread adds ~n/(G·BLOCK·VEC) terms per lane in f32 (a few hundred at n = 4e8 on 132 SMs),
// then the tree; the relative error stays around 1e-6, far below what clipping needs.
//
// Bytes: reads s per element; writes 4·G bytes and reads them back, plus out (4 bytes).

import type { SumSquaresArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { checkSumSquares } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { maxVectorElements, pickVectorWidth } from './elementwise.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface SumSquaresSpec {
  readonly dtype: FloatDType;
  /** Elements per vector access. */
  readonly vec: number;
}

export function sumSquaresKey(s: SumSquaresSpec): string {
  return `sum_squares.${s.dtype}.v${s.vec}`;
}

export interface SumSquaresFinishSpec {
  readonly accumulate: boolean;
}

export function sumSquaresFinishKey(s: SumSquaresFinishSpec): string {
  return `sum_squares_finish${s.accumulate ? '.accumulate' : ''}`;
}

const BLOCK_THREADS = 256;
/** Resident blocks per SM for the partial pass (2048 threads: one full wave). */
const BLOCKS_PER_SM = 8;
const FINISH_THREADS = 512;

export function sumSquaresSource(spec: SumSquaresSpec): KernelSource {
  const name = kernelIdentifier(sumSquaresKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ VEC: spec.vec, BLOCK: BLOCK_THREADS })}

// partials: gridDim.x floats, one per block.
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(const T* __restrict__ x, u64 n, float* __restrict__ partials) {
  __shared__ float shared[BLOCK / 32];
  float acc[VEC];
  #pragma unroll
  for (int k = 0; k < VEC; k++) acc[k] = 0.f;
  const u64 vectors = n / VEC;
  const u64 first = (u64)blockIdx.x * BLOCK + threadIdx.x;
  const u64 stride = (u64)gridDim.x * BLOCK;
  for (u64 v = first; v < vectors; v += 2 * stride) {
    const u64 w = v + stride;
    float a[VEC], b[VEC];
    load_floats<T, VEC>(x + v * VEC, a, VEC);
    if (w < vectors) load_floats<T, VEC>(x + w * VEC, b, VEC);
    else {
      #pragma unroll
      for (int k = 0; k < VEC; k++) b[k] = 0.f;
    }
    #pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = fmaf(b[k], b[k], fmaf(a[k], a[k], acc[k]));
  }
  const u64 tail = vectors * VEC + first;
  if (tail < n) {
    const float t = to_float(x[tail]);
    acc[0] = fmaf(t, t, acc[0]);
  }
  float sum = 0.f;
  #pragma unroll
  for (int k = 0; k < VEC; k++) sum += acc[k];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}
`;
  return { name, source };
}

export function sumSquaresFinishSource(spec: SumSquaresFinishSpec): KernelSource {
  const name = kernelIdentifier(sumSquaresFinishKey(spec));
  const source = String.raw`${DEVICE_LIB}
${constants({ FINISH_THREADS, ACCUMULATE: spec.accumulate })}

// count may be 0 (an empty x): out becomes 0, or stays as it is with accumulate.
extern "C" __global__ void __launch_bounds__(FINISH_THREADS) ${name}(const float* __restrict__ partials, u32 count, float* __restrict__ out) {
  __shared__ float shared[FINISH_THREADS / 32];
  float sum = 0.f;
  for (u32 i = threadIdx.x; i < count; i += FINISH_THREADS) sum += partials[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) out[0] = ACCUMULATE ? out[0] + sum : sum;
}
`;
  return { name, source };
}

export function sumSquares(host: KernelHost, args: SumSquaresArgs): void {
  const c = new OpCheck('sumSquares', 'cuda');
  const { x, out, accumulate, n } = checkSumSquares(c, args);
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out);
  const dtype = x.dtype as FloatDType;
  let blocks = 0, partials = 0n;
  if (n > 0) {
    const vec = pickVectorWidth(maxVectorElements(dtype), [{ ptr: xPtr, elementBytes: byteSize(dtype) }]);
    const spec: SumSquaresSpec = { dtype, vec };
    blocks = flatGridSize(Math.floor(n / vec), host.multiProcessorCount, BLOCKS_PER_SM);
    partials = host.scratch(blocks * 4);
    host.kernel(sumSquaresKey(spec), () => sumSquaresSource(spec)).launch(
      { grid: blocks, block: BLOCK_THREADS },
      [arg.ptr(xPtr), arg.u64(BigInt(n)), arg.ptr(partials)],
    );
  }
  const finish: SumSquaresFinishSpec = { accumulate };
  host.kernel(sumSquaresFinishKey(finish), () => sumSquaresFinishSource(finish)).launch(
    { grid: 1, block: FINISH_THREADS },
    [arg.ptr(partials), arg.u32(blocks), arg.ptr(outPtr)],
  );
}

/** Each dtype at full width and scalar (a misaligned view), and both finishes. */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    out.push(sumSquaresSource({ dtype, vec: maxVectorElements(dtype) }));
    out.push(sumSquaresSource({ dtype, vec: 1 }));
  }
  out.push(sumSquaresFinishSource({ accumulate: false }), sumSquaresFinishSource({ accumulate: true }));
  return out;
}
