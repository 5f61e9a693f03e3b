// An arena on the CPU backend. The CPU stores f16 and bf16 as float32, so an arena of `bytes` GPU
// bytes is one ArrayBuffer of 4·bytes, and GPU byte offset o maps to byte 4·o of it. A view of n
// elements of dtype d takes at most 4·n·sizeof(d) bytes there (4n for float and i32 storage, n for
// i8/u8), i.e. it stays inside the image [4·o, 4·(o + n·sizeof(d))) of its GPU byte range: views
// whose planned byte ranges are disjoint are disjoint here too, and views at the same offset alias,
// as they do on the GPU. (Two views of different dtypes that overlap partially alias differently
// from the GPU; a plan only reuses bytes once a buffer is dead, so no op reads through both.)
//
// Views share the arena's allocation record, so ops refuse them once the arena is freed.

import type { DType } from '../../dtype.js';
import { ArgumentError } from '../../errors.js';
import type { Arena } from '../backend.js';
import { checkArenaBytes, checkArenaView } from '../op-checks/index.js';
import type { MemoryTracker } from './memory.js';
import type { CpuAllocation } from './tensor.js';
import { CpuTensor } from './tensor.js';

/** Bytes of CPU storage per GPU byte: float32 holds an f16/bf16 value. */
const CPU_BYTES_PER_BYTE = 4;

export class CpuArena implements Arena {
  private readonly buffer: ArrayBuffer;
  private readonly allocation: CpuAllocation;

  constructor(readonly bytes: number, private readonly memory: MemoryTracker) {
    checkArenaBytes(bytes);
    try {
      this.buffer = new ArrayBuffer(bytes * CPU_BYTES_PER_BYTE);
    } catch (error) {
      throw new ArgumentError(`createArena: cannot allocate ${bytes * CPU_BYTES_PER_BYTE} bytes of host memory for an arena of ${bytes} bytes (${(error as Error).message})`);
    }
    this.allocation = memory.track(bytes);
  }

  view(byteOffset: number, shape: readonly number[], dtype: DType): CpuTensor {
    checkArenaView(this.bytes, this.allocation.freed, byteOffset, shape, dtype);
    const start = byteOffset * CPU_BYTES_PER_BYTE, numel = shape.reduce((a, b) => a * b, 1);
    const storage = (() => {
      switch (dtype) {
        case 'f32': case 'f16': case 'bf16': return new Float32Array(this.buffer, start, numel);
        case 'i32': return new Int32Array(this.buffer, start, numel);
        case 'i8': return new Int8Array(this.buffer, start, numel);
        case 'u8': return new Uint8Array(this.buffer, start, numel);
      }
    })();
    return new CpuTensor(shape, dtype, storage, { allocation: this.allocation, isView: true });
  }

  free(): void {
    this.memory.release(this.allocation, `arena.free: the arena (${this.bytes} bytes)`);
  }
}
