import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import type { DType } from '../../../src/dtype.js';

test('views at disjoint byte ranges are independent; views at the same offset alias', () => {
  const backend = new CpuBackend();
  const arena = backend.createArena(4096);
  const a = arena.view(0, [64], 'f16'); // bytes [0, 128)
  const b = arena.view(256, [2, 32], 'f32'); // bytes [256, 512)
  const c = arena.view(512, [100], 'u8'); // bytes [512, 612)
  const d = arena.view(768, [8], 'i32');
  backend.fill(a, 1.5);
  backend.fill(b, -2);
  backend.fill(c, 7);
  backend.fill(d, 123456);
  assert.ok(Array.from(backend.download(a)).every((x) => x === 1.5));
  assert.ok(Array.from(backend.download(b)).every((x) => x === -2));
  assert.ok(Array.from(backend.download(c)).every((x) => x === 7));
  assert.ok(Array.from(backend.download(d)).every((x) => x === 123456));
  // Another view of a's bytes (a buffer reusing a dead one's memory) sees and changes the same elements.
  const alias = arena.view(0, [8, 8], 'f16');
  assert.deepEqual(Array.from(backend.download(alias)), Array.from(backend.download(a)));
  backend.fill(alias, 3);
  assert.ok(Array.from(backend.download(a)).every((x) => x === 3));
  assert.ok(Array.from(backend.download(b)).every((x) => x === -2));
});

test('the largest view of every dtype fits, and views do not spill into the next planned range', () => {
  const dtypes: [DType, number][] = [['f32', 4], ['f16', 2], ['bf16', 2], ['i32', 4], ['i8', 1], ['u8', 1]];
  for (const [dtype, size] of dtypes) {
    const backend = new CpuBackend();
    const arena = backend.createArena(1024);
    const first = arena.view(0, [512 / size], dtype); // exactly bytes [0, 512)
    const second = arena.view(512, [512 / size], dtype); // exactly bytes [512, 1024)
    backend.fill(second, 5);
    backend.fill(first, 1);
    assert.ok(Array.from(backend.download(second)).every((x) => x === 5), dtype);
    assert.ok(Array.from(backend.download(first)).every((x) => x === 1), dtype);
  }
});

test('views work with ops, and a view of a view stays inside the arena', () => {
  const backend = new CpuBackend();
  const arena = backend.createArena(1 << 16);
  const x = arena.view(0, [2, 3, 4, 5], 'bf16');
  const out = arena.view(1024, [2, 4, 3, 5], 'bf16');
  const values = Array.from({ length: 120 }, (_, i) => i);
  backend.upload(x, values);
  backend.permute0213({ x, out });
  const back = arena.view(2048, [2, 3, 4, 5], 'bf16');
  backend.permute0213({ x: out, out: back });
  assert.deepEqual(Array.from(backend.download(back)), values);
  const sum = arena.view(4096, [1], 'f32');
  backend.sumSquares({ x: backend.view(back, 1, [3]), out: sum });
  assert.deepEqual(Array.from(backend.download(sum)), [1 + 4 + 9]);
});

test('memory stats count the arena once; freeing a view frees nothing; free() releases it and its views are refused', () => {
  const backend = new CpuBackend();
  const arena = backend.createArena(1000);
  const v = arena.view(256, [10], 'f32');
  assert.equal(arena.bytes, 1000);
  assert.equal(backend.memoryStats().bytesInUse, 1000);
  assert.equal(backend.memoryStats().allocations, 1);
  backend.free(v);
  backend.fill(v, 1);
  assert.equal(backend.memoryStats().bytesInUse, 1000);
  arena.free();
  assert.equal(backend.memoryStats().bytesInUse, 0);
  assert.throws(() => backend.fill(v, 0), (e: unknown) => e instanceof ArgumentError && /^fill: 't' was freed/.test(e.message));
  assert.throws(() => arena.view(0, [1], 'f32'), (e: unknown) => e instanceof ArgumentError && /^arena\.view: the arena \(1000 bytes\) was freed/.test(e.message));
  assert.throws(() => arena.free(), (e: unknown) => e instanceof ArgumentError && /^arena\.free: .* was already freed/.test(e.message));
});

test('offsets must be multiples of 256 and views must fit; messages name the value', () => {
  const backend = new CpuBackend();
  const arena = backend.createArena(1024);
  const rejects = (fn: () => unknown, type: new (...args: never[]) => Error, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof type && pattern.test(e.message));
  };
  rejects(() => arena.view(128, [4], 'f32'), ArgumentError, /^arena\.view: 'byteOffset' must be a non-negative multiple of 256, got 128/);
  rejects(() => arena.view(-256, [4], 'f32'), ArgumentError, /'byteOffset'/);
  rejects(() => arena.view(768, [65], 'f32'), ShapeError, /^arena\.view: 'shape' \[65\] f32 \(260 bytes\) at byte offset 768 ends at 1028, past the arena's 1024 bytes/);
  rejects(() => arena.view(0, [2.5], 'f32'), ShapeError, /'shape'/);
  rejects(() => arena.view(0, [2], 'f64' as DType), DTypeError, /unknown dtype 'f64'/);
  rejects(() => backend.createArena(-1), ArgumentError, /^createArena: 'bytes' must be a non-negative integer, got -1/);
  // An empty view at the very end is fine.
  assert.equal(arena.view(1024, [0], 'f16').numel, 0);
});
