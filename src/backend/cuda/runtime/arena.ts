// An arena on the GPU: one block from the caching allocator, and views that are tensors pointing
// inside it (base + byte offset). The block comes from cuMemAlloc (256-byte aligned or better) and
// view offsets are multiples of ARENA_ALIGNMENT, so every view can take 16-byte vector accesses.
// Views own nothing (CudaTensor.block is null, so Backend.free of a view is a no-op); free() hands the
// block back to the allocator, after which the views must not be used (the GPU cannot check that).

import type { DType } from '../../../dtype.js';
import { ArgumentError } from '../../../errors.js';
import type { Arena } from '../../backend.js';
import { checkArenaBytes, checkArenaView } from '../../op-checks/index.js';
import type { DeviceBlock } from './tensor.js';
import { CudaTensor } from './tensor.js';

/** Where the arena's block comes from (the CudaRuntime; a fake in tests). */
export interface ArenaMemory {
  alloc(bytes: number): DeviceBlock;
  release(block: DeviceBlock): void;
}

export class CudaArena implements Arena {
  private readonly block: DeviceBlock;
  private freed = false;

  constructor(readonly bytes: number, private readonly memory: ArenaMemory) {
    checkArenaBytes(bytes);
    this.block = memory.alloc(bytes);
  }

  /** The device address of byte 0. */
  get ptr(): bigint {
    return this.block.ptr;
  }

  view(byteOffset: number, shape: readonly number[], dtype: DType): CudaTensor {
    checkArenaView(this.bytes, this.freed, byteOffset, shape, dtype);
    return new CudaTensor(this.block.ptr + BigInt(byteOffset), shape, dtype, null);
  }

  free(): void {
    if (this.freed) throw new ArgumentError(`arena.free: the arena (${this.bytes} bytes) was already freed`);
    this.memory.release(this.block);
    this.freed = true;
  }
}
