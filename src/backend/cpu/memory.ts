// Allocation bookkeeping for the CPU backend. The garbage collector owns the real memory; this
// counts what the program asked for, in the dtype's own bytes (an f16 tensor counts 2 bytes an
// element although it is stored as float32), so the numbers are comparable with the GPU's.
// There is no cache: every allocation is a "device" allocation and reserved equals in use.

import type { DType } from '../../dtype.js';
import { ArgumentError } from '../../errors.js';
import type { MemoryStats } from '../backend.js';
import { CpuTensor, newStorage, storageBytes } from './tensor.js';

export class MemoryTracker {
  private allocations = 0;
  private bytesInUse = 0;
  private peakBytesInUse = 0;
  /** Allocations made here (a CpuTensor built by hand has its own record, which is not counted). */
  private readonly tracked = new WeakSet<object>();

  allocate(shape: readonly number[], dtype: DType): CpuTensor {
    const bytes = storageBytes(shape, dtype);
    const numel = shape.reduce((a, b) => a * b, 1);
    const allocation = { bytes, freed: false };
    const tensor = new CpuTensor(shape, dtype, newStorage(dtype, numel), { allocation });
    this.tracked.add(allocation);
    this.allocations++;
    this.bytesInUse += bytes;
    this.peakBytesInUse = Math.max(this.peakBytesInUse, this.bytesInUse);
    return tensor;
  }

  /** Views own nothing and are ignored; freeing an allocation twice is an error. */
  free(t: CpuTensor): void {
    if (t.isView) return;
    if (t.allocation.freed) throw new ArgumentError(`free: ${t} was already freed`);
    t.allocation.freed = true;
    if (this.tracked.has(t.allocation)) this.bytesInUse -= t.allocation.bytes;
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
