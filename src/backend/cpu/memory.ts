// Allocation bookkeeping for the CPU backend. The garbage collector owns the real memory; this
// counts what the program asked for, in the dtype's own bytes (an f16 tensor counts 2 bytes an
// element although it is stored as float32), so the numbers are comparable with the GPU's.
// There is no cache: every allocation is a "device" allocation and reserved equals in use.

import type { DType } from '../../dtype.js';
import { ArgumentError } from '../../errors.js';
import type { MemoryStats } from '../backend.js';
import type { CpuAllocation } from './tensor.js';
import { CpuTensor, newStorage, storageBytes } from './tensor.js';
import { checkShape } from '../../tensor.js';

export class MemoryTracker {
  private allocations = 0;
  private bytesInUse = 0;
  private peakBytesInUse = 0;
  /** Allocations made here (a CpuTensor built by hand has its own record, which is not counted). */
  private readonly tracked = new WeakSet<object>();

  allocate(shape: readonly number[], dtype: DType): CpuTensor {
    checkShape(shape); // before the bytes are counted: a NaN dimension would make every later statistic NaN
    const numel = shape.reduce((a, b) => a * b, 1);
    const allocation = this.track(storageBytes(shape, dtype));
    return new CpuTensor(shape, dtype, newStorage(dtype, numel), { allocation });
  }

  /** Starts peak tracking afresh from the bytes in use now. */
  resetPeak(): void {
    this.peakBytesInUse = this.bytesInUse;
  }

  /** A counted allocation record of `bytes` (a tensor's, or an arena's that its views share). */
  track(bytes: number): CpuAllocation {
    const allocation = { bytes, freed: false };
    this.tracked.add(allocation);
    this.allocations++;
    this.bytesInUse += bytes;
    this.peakBytesInUse = Math.max(this.peakBytesInUse, this.bytesInUse);
    return allocation;
  }

  /** Views own nothing and are ignored; freeing an allocation twice is an error. */
  free(t: CpuTensor): void {
    if (t.isView) return;
    this.release(t.allocation, `free: ${t}`);
  }

  /** Marks the record freed (its tensors and views are then refused by every op). */
  release(allocation: CpuAllocation, what: string): void {
    if (allocation.freed) throw new ArgumentError(`${what} was already freed`);
    allocation.freed = true;
    if (this.tracked.has(allocation)) this.bytesInUse -= allocation.bytes;
  }

  stats(): MemoryStats {
    return {
      allocations: this.allocations,
      deviceAllocations: this.allocations,
      bytesInUse: this.bytesInUse,
      peakBytesInUse: this.peakBytesInUse,
      bytesReserved: this.bytesInUse,
    };
  }
}
