// A caching device allocator. cuMemAlloc/cuMemFree are slow (tens to hundreds of µs, and cuMemFree
// synchronizes the device), so released blocks are kept in free lists per size class and handed out
// again; nothing goes back to the driver until emptyCache() or an out-of-memory retry.
//
// Size classes: requests up to 4 KiB round up to 512 B multiples; up to 1 MiB, to a quarter of their
// power of two (so at most 25% is wasted); above 1 MiB, to 2 MiB multiples — the driver maps large
// allocations in 2 MiB pages anyway, so rounding there costs no memory. A cached block serves only a
// request of its own class.
//
// Invariant: all work runs on one stream, so a block released now can be handed to the next
// allocation at once — the stream orders its new use after its old use. Freeing to the driver goes
// through `synchronize()` first, because the device may still be using a cached block.

import { ArgumentError, CudaError } from '../../../errors.js';
import type { MemoryStats } from '../../backend.js';
import type { DeviceBlock } from './tensor.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const SMALL_STEP = 512;
const LARGE_THRESHOLD = 1 * MiB;
const LARGE_STEP = 2 * MiB;

/** The device allocator under the cache (cuMemAlloc in production, a fake in tests). */
export interface RawDeviceAllocator {
  /** Device memory of exactly `bytes`, or null when the device is out of memory. */
  allocate(bytes: number): bigint | null;
  free(ptr: bigint): void;
  /** Waits until the device no longer uses any memory handed out (before memory is freed). */
  synchronize(): void;
}

/** The bytes actually reserved for a request of `bytes`. */
export function sizeClass(bytes: number): number {
  if (!Number.isSafeInteger(bytes) || bytes < 0) {
    throw new ArgumentError(`device allocation of ${bytes} bytes: expected a non-negative integer`);
  }
  const n = Math.max(bytes, 1);
  if (n > LARGE_THRESHOLD) return roundUp(n, LARGE_STEP);
  const powerOfTwo = 2 ** Math.floor(Math.log2(n));
  return roundUp(n, Math.max(SMALL_STEP, powerOfTwo / 4));
}

function roundUp(n: number, step: number): number {
  return Math.ceil(n / step) * step;
}

export class CachingAllocator {
  private readonly freeBlocks = new Map<number, bigint[]>();
  private readonly live = new Set<DeviceBlock>();
  private allocations = 0;
  private deviceAllocations = 0;
  private bytesInUse = 0;
  private peakBytesInUse = 0;
  private bytesCached = 0;

  constructor(private readonly raw: RawDeviceAllocator) {}

  /** A block of at least `bytes` (its `bytes` is the rounded size); from the cache when possible. */
  allocate(bytes: number): DeviceBlock {
    const size = sizeClass(bytes);
    const cached = this.freeBlocks.get(size)?.pop();
    let ptr: bigint;
    if (cached !== undefined) {
      ptr = cached;
      this.bytesCached -= size;
    } else {
      ptr = this.allocateFromDevice(bytes, size);
      this.deviceAllocations++;
    }
    const block: DeviceBlock = { ptr, bytes: size, freed: false };
    this.live.add(block);
    this.allocations++;
    this.bytesInUse += size;
    this.peakBytesInUse = Math.max(this.peakBytesInUse, this.bytesInUse);
    return block;
  }

  /** Returns a block to the cache. Releasing a block twice, or one from elsewhere, is an error. */
  release(block: DeviceBlock): void {
    if (!this.live.has(block)) {
      const what = block.freed ? 'was already released' : 'was not allocated by this allocator';
      throw new ArgumentError(`cannot release the device block at 0x${block.ptr.toString(16)} (${block.bytes} bytes): it ${what}`);
    }
    this.live.delete(block);
    block.freed = true;
    this.bytesInUse -= block.bytes;
    this.bytesCached += block.bytes;
    let list = this.freeBlocks.get(block.bytes);
    if (list === undefined) {
      list = [];
      this.freeBlocks.set(block.bytes, list);
    }
    list.push(block.ptr);
  }

  /** Frees every cached (unused) block back to the device. */
  emptyCache(): void {
    if (this.bytesCached === 0) return;
    this.raw.synchronize();
    for (const [size, list] of this.freeBlocks) {
      while (list.length > 0) {
        this.raw.free(list.pop()!);
        this.bytesCached -= size;
      }
    }
    this.freeBlocks.clear();
  }

  stats(): MemoryStats {
    return {
      allocations: this.allocations,
      deviceAllocations: this.deviceAllocations,
      bytesInUse: this.bytesInUse,
      peakBytesInUse: this.peakBytesInUse,
      bytesReserved: this.bytesInUse + this.bytesCached,
    };
  }

  /** Starts a new peak measurement from the current use. */
  resetPeak(): void {
    this.peakBytesInUse = this.bytesInUse;
  }

  private allocateFromDevice(requested: number, size: number): bigint {
    const first = this.raw.allocate(size);
    if (first !== null) return first;
    // The cache may hold enough memory in other size classes: give it back and try once more.
    const cachedBefore = this.bytesCached;
    this.emptyCache();
    const second = this.raw.allocate(size);
    if (second !== null) return second;
    throw new CudaError('cuMemAlloc_v2', 2, 'CUDA_ERROR_OUT_OF_MEMORY',
      `out of device memory allocating ${requested} bytes (${size} with rounding); ${this.bytesInUse} bytes in use, ` +
      `${cachedBefore} cached bytes were freed before retrying`);
  }
}
