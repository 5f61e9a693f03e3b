// prefetchL2: a cache hint (backend.ts has the contract) — the leading part of each row of a tensor
// pulled from HBM into L2 by the copy engines, with no effect on results. A batch-1 decode step reads
// its weights once, most kernels at a third to two thirds of HBM bandwidth, and some kernels (decode
// attention, the norms, RoPE) hardly read at all: issued before them, the next products' weights stream
// into L2 meanwhile, and those products then read part of their bytes from L2.
//
// Mapping: a grid-stride loop over rows, one thread a row, each issuing one cp.async.bulk.prefetch.L2
// (sm_90: fire and forget — the thread moves on at once, the transfer proceeds without it) for the
// row's first `bytes` (a multiple of 16 from a 16-byte-aligned start, as the instruction needs). The
// kernel reads nothing and writes nothing. Launched programmatically (runtime/launch.ts), it starts while
// the previous kernel drains and lets the next one start at once, adding no step to the chain.

import type { PrefetchL2Args } from '../../backend.js';
import { checkPrefetchL2 } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { devicePtr, kernelIdentifier } from './row-kernels.js';

const THREADS = 128;
const KEY = 'prefetch_l2';
/** Blocks at most (a row a thread: 16384 rows take 128 blocks). */
const MAX_BLOCKS = 132;

export function prefetchL2Source(): KernelSource {
  const name = kernelIdentifier(KEY);
  const source = String.raw`${DEVICE_LIB}
// Rows of row_bytes from base (16-byte aligned); each row's first bytes (a multiple of 16, > 0).
extern "C" __global__ void __launch_bounds__(${THREADS}) ${name}(const char* base, long long rows, long long row_bytes, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (long long)gridDim.x * blockDim.x) {
    const char* p = base + r * row_bytes;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
  }
#endif
  // Launched programmatically: the next kernel may start now, but this grid must not finish before the
  // one it follows — the next kernel's wait covers only this grid, so that is what orders it after the
  // previous one (which it reads).
  GRID_DEPENDENCY_TRIGGER();
  GRID_DEPENDENCY_WAIT();
}
`;
  return { name, source, gridDependencyWait: true };
}

export function prefetchL2(host: KernelHost, args: PrefetchL2Args): void {
  const c = new OpCheck('prefetchL2', 'cuda');
  const { x, fraction, rows, rowBytes } = checkPrefetchL2(c, args);
  const ptr = devicePtr(c, 'x', x);
  // Whole 16-byte units from an aligned start: a row that starts off 16 bytes (an odd view) is not
  // prefetched; rows of a stride that is not a multiple of 16 are taken as one flat range.
  const flat = rowBytes % 16 !== 0, total = rows * rowBytes;
  const [n, stride, span] = flat ? [1, total, total * fraction] : [rows, rowBytes, rowBytes * fraction];
  const bytes = Math.floor(span / 16) * 16;
  if (ptr % 16n !== 0n || bytes < 16) return;
  // One instruction's size is 32-bit; more than 1 GiB of a row is more than L2 holds anyway.
  host.kernel(KEY, prefetchL2Source).launch({ grid: Math.max(1, Math.min(MAX_BLOCKS, Math.ceil(n / THREADS))), block: THREADS }, [
    arg.ptr(ptr), arg.i64(BigInt(n)), arg.i64(BigInt(stride)), arg.u32(Math.min(bytes, 1 << 30)),
  ]);
}

export function catalog(): KernelSource[] {
  return [prefetchL2Source()];
}
