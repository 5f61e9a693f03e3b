// The CUDA arena without a GPU: one block from a fake allocator, views at base + byte offset that own
// nothing, the shared offset and bounds checks, and release on free().

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ArenaMemory } from '../../../../src/backend/cuda/runtime/arena.js';
import { CudaArena } from '../../../../src/backend/cuda/runtime/arena.js';
import type { DeviceBlock } from '../../../../src/backend/cuda/runtime/tensor.js';
import { ArgumentError, ShapeError } from '../../../../src/errors.js';

class FakeMemory implements ArenaMemory {
  readonly calls: string[] = [];
  alloc(bytes: number): DeviceBlock {
    this.calls.push(`alloc ${bytes}`);
    return { ptr: 0x7000_0000_0000n, bytes, freed: false };
  }
  release(block: DeviceBlock): void {
    this.calls.push(`release ${block.bytes}`);
    block.freed = true;
  }
}

test('one allocation; views point inside it and own nothing; free() releases it once', () => {
  const memory = new FakeMemory();
  const arena = new CudaArena(1 << 20, memory);
  const a = arena.view(0, [4, 64], 'bf16');
  const b = arena.view(512, [3], 'i32');
  assert.equal(a.ptr, 0x7000_0000_0000n);
  assert.equal(b.ptr, 0x7000_0000_0200n);
  assert.equal(a.block, null);
  assert.deepEqual(b.shape, [3]);
  assert.equal(b.dtype, 'i32');
  arena.free();
  assert.deepEqual(memory.calls, [`alloc ${1 << 20}`, `release ${1 << 20}`]);
  assert.throws(() => arena.free(), (e: unknown) => e instanceof ArgumentError && /^arena\.free: .* already freed/.test(e.message));
  assert.throws(() => arena.view(0, [1], 'f32'), (e: unknown) => e instanceof ArgumentError && /^arena\.view: .* was freed/.test(e.message));
});

test('offsets are multiples of 256 and views fit in the arena', () => {
  const arena = new CudaArena(1024, new FakeMemory());
  assert.throws(() => arena.view(100, [1], 'f32'), (e: unknown) => e instanceof ArgumentError && /'byteOffset' must be a non-negative multiple of 256, got 100/.test(e.message));
  assert.throws(() => arena.view(512, [129], 'f32'), (e: unknown) => e instanceof ShapeError && /ends at 1028, past the arena's 1024 bytes/.test(e.message));
  assert.equal(arena.view(512, [128], 'f32').numel, 128);
  assert.throws(() => new CudaArena(1.5, new FakeMemory()), (e: unknown) => e instanceof ArgumentError && /^createArena: 'bytes'/.test(e.message));
});
