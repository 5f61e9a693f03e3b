// The contract between kernel launchers (backend/cuda/kernels/*) and the runtime: a launcher turns
// its spec into CUDA C once, asks the runtime for the compiled kernel under a cache key, and launches
// it with typed arguments on the runtime's current stream.

import type { TensorMap2d } from '../../../cuda/driver.js';

export type { TensorMap2d };

/** One kernel parameter, typed so it can be packed with the C ABI's size and alignment. */
export type KernelArg =
  | { readonly type: 'ptr'; readonly value: bigint }
  | { readonly type: 'i32'; readonly value: number }
  | { readonly type: 'u32'; readonly value: number }
  | { readonly type: 'f32'; readonly value: number }
  | { readonly type: 'i64'; readonly value: bigint }
  | { readonly type: 'u64'; readonly value: bigint }
  | { readonly type: 'tensorMap'; readonly value: TensorMap2d };


export const arg = {
  /** A device pointer (a CudaTensor's `ptr`, or any device address). */
  ptr: (value: bigint | { readonly ptr: bigint }): KernelArg => ({ type: 'ptr', value: typeof value === 'bigint' ? value : value.ptr }),
  i32: (value: number): KernelArg => ({ type: 'i32', value }),
  u32: (value: number): KernelArg => ({ type: 'u32', value }),
  f32: (value: number): KernelArg => ({ type: 'f32', value }),
  i64: (value: bigint): KernelArg => ({ type: 'i64', value }),
  u64: (value: bigint): KernelArg => ({ type: 'u64', value }),
  tensorMap: (value: TensorMap2d): KernelArg => ({ type: 'tensorMap', value }),
};

export type Dim3 = number | readonly [number, number?, number?];

export interface LaunchConfig {
  grid: Dim3;
  block: Dim3;
  /** Dynamic shared memory in bytes (above 48 KiB the runtime raises the kernel's limit first). */
  sharedBytes?: number;
}

/** CUDA C for one `extern "C" __global__` kernel named `name`. */
export interface KernelSource {
  readonly name: string;
  readonly source: string;
  /**
   * The kernel runs GRID_DEPENDENCY_WAIT (device-lib.ts) before it reads anything earlier kernels wrote,
   * so it may be launched programmatically (launch.ts): it may then start before the kernel ahead of it ends.
   */
  readonly gridDependencyWait?: boolean;
  /**
   * The kernel uses sm_90a-only instructions (wgmma): it is compiled for the device's arch with the
   * "a" suffix (sm_90 → sm_90a), and launchers send it only to an sm_90 GPU (KernelHost.arch).
   */
  readonly archSpecific?: boolean;
}

/**
 * What a kernel is compiled from: its source, preceded for a kernel that may be launched programmatically
 * (gridDependencyWait) by PROGRAMMATIC_PRELUDE, which defines `__restrict__` away. Such a kernel can run
 * while the kernel before it still writes its inputs. A `const T* __restrict__` parameter lets the compiler
 * read it by the non-coherent path (ld.global.nc: memory read-only for the kernel's whole life), and ptxas
 * schedules .nc loads freely across griddepcontrol.wait — seen in the SASS of a 4-row INT4 GEMV, whose x
 * loads it put above the wait (session 30). Without the qualifier those reads are coherent loads, which
 * stay after it. The weights keep their explicit .nc loads (weight-stream.ts): nothing writes them. (The
 * switch back to the qualifiers for A/B timing, FUSEFORMER_PROGRAMMATIC_RESTRICT, built that race; removed in
 * session 58.)
 */
export const PROGRAMMATIC_PRELUDE = '#define __restrict__ /* programmatic launch: coherent reads of what earlier kernels write (kernel.ts compiledSource) */\n';

export function compiledSource(kernel: Pick<KernelSource, 'source' | 'gridDependencyWait'>): string {
  return kernel.gridDependencyWait === true ? PROGRAMMATIC_PRELUDE + kernel.source : kernel.source;
}

export interface CompiledKernel {
  readonly name: string;
  launch(config: LaunchConfig, args: readonly KernelArg[]): void;
}

/** What a kernel launcher needs from the CUDA runtime. */
export interface KernelHost {
  /**
   * The compiled kernel for `key` (a string derived from the kernel family and its spec). `build`
   * runs only on the first request for a key in this process; compiled code is also cached on disk.
   */
  kernel(key: string, build: () => KernelSource): CompiledKernel;
  /** Device scratch memory of at least `bytes`, valid until the next scratch() call; stream-ordered. */
  scratch(bytes: number): bigint;
  /**
   * A device array of at least `count` u32 counters that are zero whenever no kernel runs: a kernel
   * that counts on them (a "last block done" reduction) must set them back to zero before it ends.
   * Persistent (CUDA graphs may keep the address); it only grows, and not during a graph capture.
   */
  counters(count: number): bigint;
  readonly multiProcessorCount: number;
  /** Largest dynamic shared memory a block may opt into, in bytes. */
  readonly maxSharedBytesPerBlock: number;
  /** The device's architecture ("sm_90"), where known: kernels with sm_90a-only instructions need "sm_90". */
  readonly arch?: string;
  /**
   * Whether kernels may use 2-D tensor-map copies (cp.async.bulk.tensor) with arg.tensorMap arguments:
   * compute capability 9.0 or newer and a driver with cuTensorMapEncodeTiled. Absent: no.
   */
  readonly tensorMaps?: boolean;
  /** Whether kernels may run in thread-block clusters (__cluster_dims__): compute capability 9.0 or newer. Absent: no. */
  readonly clusters?: boolean;
}
