// Launch planning shared by the row-reduction kernel families (layernorm.ts, softmax.ts,
// cross-entropy.ts): each of them reduces along the last dimension of a [rows, n] tensor, holds a
// row in registers where it fits, and reads it with the widest vector the row length and the
// tensors' addresses allow.
//
// Thread mapping shared by the register-resident kernels: a row of n elements is split into
// n / vec vectors; thread t of the row's `threadsPerRow` threads owns vectors t, t + threadsPerRow,
// t + 2·threadsPerRow, ... (so one warp-wide load instruction reads consecutive 16-byte chunks), and
// holds ceil(vectors / threadsPerRow) of them. threadsPerRow = 32 is one warp per row (several rows
// per block, reductions by shuffles only); above 32 it is a whole block per row.

import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import type { OpCheck } from '../../validate.js';
import type { Tensor } from '../../../tensor.js';
import { CudaTensor } from '../runtime/tensor.js';

/** The device address of a tensor the op has already validated as a contiguous CUDA tensor. */
export function devicePtr(check: OpCheck, name: string, t: Tensor): bigint {
  if (!(t instanceof CudaTensor)) check.fail(`'${name}' is not a CudaTensor (it has no device address)`);
  return t.ptr;
}

/**
 * The widest vector (a power of two, at most 16 bytes) that divides `rowLength` and to which every
 * pointer is aligned. Rows then start on vector boundaries too, because the row length is a
 * multiple of the vector; a view at an odd offset falls back to narrower accesses instead of faulting.
 */
export function rowVectorWidth(dtype: FloatDType, rowLength: number, pointers: readonly bigint[]): number {
  const size = byteSize(dtype);
  let vec = 16 / size;
  while (vec > 1 && (rowLength % vec !== 0 || pointers.some((p) => p % BigInt(vec * size) !== 0n))) vec /= 2;
  return vec;
}

/** The widest vector every pointer is aligned to, independent of any row length. */
export function alignedVectorWidth(dtype: FloatDType, pointers: readonly bigint[]): number {
  const size = byteSize(dtype);
  let vec = 16 / size;
  while (vec > 1 && pointers.some((p) => p % BigInt(vec * size) !== 0n)) vec /= 2;
  return vec;
}

export interface RowMapping {
  /** 32: one warp per row; a larger multiple of 32: one block per row. */
  readonly threadsPerRow: number;
  /** Vectors each thread holds in registers: ceil(vectorsPerRow / threadsPerRow). */
  readonly vecsPerThread: number;
}

export const MAX_BLOCK_THREADS = 1024;

/**
 * One warp per row while a lane holds at most `warpMaxElements` elements; otherwise a block per row
 * with the fewest warps that keep each thread at or under `blockMaxElements`. Returns null when more
 * than `maxThreads` threads would be needed: the row does not fit in registers that way. (A block of
 * n threads gets at most 65536/n registers per thread from __launch_bounds__, so register-hungry
 * kernels pass a smaller maxThreads.)
 */
export function planRowMapping(vectorsPerRow: number, vec: number, warpMaxElements: number, blockMaxElements: number, maxThreads = MAX_BLOCK_THREADS): RowMapping | null {
  const warpVecs = Math.ceil(vectorsPerRow / 32);
  if (warpVecs * vec <= warpMaxElements) return { threadsPerRow: 32, vecsPerThread: warpVecs };
  const maxVecsPerThread = Math.max(1, Math.floor(blockMaxElements / vec));
  const threads = Math.ceil(Math.ceil(vectorsPerRow / maxVecsPerThread) / 32) * 32;
  if (threads > maxThreads) return null;
  return { threadsPerRow: threads, vecsPerThread: Math.ceil(vectorsPerRow / threads) };
}

/** A C identifier from a cache key: kernel names show up in profiles, so they carry the spec. */
export function kernelIdentifier(key: string): string {
  return key.replace(/[^A-Za-z0-9]+/g, '_').replace(/^_+|_+$/g, '');
}

/**
 * Device code for the thread mapping above, given the constants VECS_PER_ROW, THREADS_PER_ROW,
 * ROWS_PER_BLOCK and VECS_PER_THREAD, for blocks of (THREADS_PER_ROW, ROWS_PER_BLOCK) threads.
 * `owns_vec(k, t)` is a compile-time `true` for every k but a ragged last one, because all the
 * constants are baked in and k is unrolled.
 *
 * The row reductions: shuffles within each warp; when a row spans several warps, one barrier
 * round through `shared` (ROWS_PER_BLOCK × WARPS_PER_ROW slots, i.e. BLOCK_THREADS / 32), so every
 * thread of the block must call them together. Every thread of a row gets bit-identical results.
 */
export const ROW_MAPPING_DEVICE_CODE = String.raw`
constexpr int WARPS_PER_ROW = THREADS_PER_ROW / 32;
__device__ __forceinline__ bool owns_vec(int k, int t) {
  return (k + 1) * THREADS_PER_ROW <= VECS_PER_ROW || k * THREADS_PER_ROW + t < VECS_PER_ROW;
}
__device__ __forceinline__ float row_sum(float x, float* shared) {
  x = warp_sum(x);
  if (WARPS_PER_ROW == 1) return x;
  const int lane = threadIdx.x & 31;
  float* slots = shared + threadIdx.y * WARPS_PER_ROW;
  __syncthreads();
  if (lane == 0) slots[threadIdx.x >> 5] = x;
  __syncthreads();
  return warp_sum(lane < WARPS_PER_ROW ? slots[lane] : 0.f);
}
__device__ __forceinline__ float row_max(float x, float* shared) {
  x = warp_max(x);
  if (WARPS_PER_ROW == 1) return x;
  const int lane = threadIdx.x & 31;
  float* slots = shared + threadIdx.y * WARPS_PER_ROW;
  __syncthreads();
  if (lane == 0) slots[threadIdx.x >> 5] = x;
  __syncthreads();
  return warp_max(lane < WARPS_PER_ROW ? slots[lane] : __int_as_float(0xff800000));
}
__device__ __forceinline__ float2 row_sum2(float2 x, float2* shared) {
  x = warp_sum2(x);
  if (WARPS_PER_ROW == 1) return x;
  const int lane = threadIdx.x & 31;
  float2* slots = shared + threadIdx.y * WARPS_PER_ROW;
  __syncthreads();
  if (lane == 0) slots[threadIdx.x >> 5] = x;
  __syncthreads();
  return warp_sum2(lane < WARPS_PER_ROW ? slots[lane] : make_float2(0.f, 0.f));
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
`;

/** `constexpr int NAME = value;` lines for the spec values a kernel bakes in. */
export function constants(values: Record<string, number | boolean>): string {
  return Object.entries(values)
    .map(([name, value]) => (typeof value === 'boolean' ? `constexpr bool ${name} = ${value};` : `constexpr int ${name} = ${value};`))
    .join('\n');
}

/** Defined before the kernel so the `extern "C" __global__ void KERNEL_BOUNDS name(` line stays greppable. */
export function launchBoundsMacro(threads: number, minBlocksPerSm?: number): string {
  return `#define KERNEL_BOUNDS __launch_bounds__(${threads}${minBlocksPerSm ? `, ${minBlocksPerSm}` : ''})`;
}
