import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CachingAllocator, sizeClass, type RawDeviceAllocator } from '../../../../src/backend/cuda/runtime/memory.js';
import { ArgumentError, CudaError } from '../../../../src/errors.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A device of `capacity` bytes handing out fake addresses; records every call. */
class FakeDevice implements RawDeviceAllocator {
  used = 0;
  next = 0x7f0000000000n;
  readonly sizes = new Map<bigint, number>();
  readonly calls: string[] = [];

  constructor(readonly capacity = Number.MAX_SAFE_INTEGER) {}

  allocate(bytes: number): bigint | null {
    this.calls.push(`alloc ${bytes}`);
    if (this.used + bytes > this.capacity) return null;
    const ptr = this.next;
    this.next += BigInt(bytes);
    this.used += bytes;
    this.sizes.set(ptr, bytes);
    return ptr;
  }

  free(ptr: bigint): void {
    this.calls.push(`free ${this.sizes.get(ptr)}`);
    this.used -= this.sizes.get(ptr)!;
    this.sizes.delete(ptr);
  }

  synchronize(): void {
    this.calls.push('sync');
  }
}

test('size classes: 512 B steps up to 4 KiB, quarter powers of two up to 1 MiB, then 2 MiB steps', () => {
  const cases: [number, number][] = [
    [0, 512], [1, 512], [512, 512], [513, 1024], [4095, 4096], [4096, 4096], [4097, 5120],
    [6000, 6144], [8193, 10240], [100_000, 114_688], [MiB - 1, MiB], [MiB, MiB],
    [MiB + 1, 2 * MiB], [2 * MiB, 2 * MiB], [2 * MiB + 1, 4 * MiB], [1000 * MiB + 5, 1002 * MiB],
  ];
  for (const [request, expected] of cases) assert.equal(sizeClass(request), expected, `sizeClass(${request})`);
  for (let n = 1; n <= 4 * MiB; n = Math.ceil(n * 1.37)) {
    const size = sizeClass(n);
    assert.ok(size >= n && size % 512 === 0, `sizeClass(${n}) = ${size}`);
    if (n > 4 * KiB && n <= MiB) assert.ok(size <= n * 1.25 + 512, `at most 25% waste for ${n}: ${size}`);
  }
  assert.throws(() => sizeClass(-1), ArgumentError);
  assert.throws(() => sizeClass(1.5), ArgumentError);
});

test('released blocks are reused for the same size class; stats count hits and misses', () => {
  const device = new FakeDevice();
  const allocator = new CachingAllocator(device);
  const a = allocator.allocate(1000);
  assert.equal(a.bytes, 1024);
  const b = allocator.allocate(3 * MiB);
  assert.equal(b.bytes, 4 * MiB);
  assert.deepEqual(allocator.stats(), { allocations: 2, deviceAllocations: 2, bytesInUse: 1024 + 4 * MiB, peakBytesInUse: 1024 + 4 * MiB, bytesReserved: 1024 + 4 * MiB });

  allocator.release(a);
  assert.equal(a.freed, true);
  const c = allocator.allocate(1024);
  assert.equal(c.ptr, a.ptr, 'same class: the cached block comes back');
  assert.notEqual(c, a, 'as a new DeviceBlock, so the stale handle stays freed');
  assert.equal(a.freed, true);
  const d = allocator.allocate(2000);
  assert.notEqual(d.ptr, a.ptr, 'another class: a new device allocation');
  assert.deepEqual(allocator.stats(), { allocations: 4, deviceAllocations: 3, bytesInUse: 1024 + 4 * MiB + 2048, peakBytesInUse: 1024 + 4 * MiB + 2048, bytesReserved: 1024 + 4 * MiB + 2048 });

  allocator.release(b);
  allocator.release(d);
  assert.deepEqual(allocator.stats(), { allocations: 4, deviceAllocations: 3, bytesInUse: 1024, peakBytesInUse: 1024 + 4 * MiB + 2048, bytesReserved: 1024 + 4 * MiB + 2048 });
  assert.equal(device.used, 1024 + 4 * MiB + 2048, 'nothing went back to the device');

  allocator.emptyCache();
  assert.deepEqual(device.calls.slice(-3), ['sync', `free ${4 * MiB}`, 'free 2048'], 'synchronize first, then free');
  assert.equal(device.used, 1024);
  assert.deepEqual(allocator.stats(), { allocations: 4, deviceAllocations: 3, bytesInUse: 1024, peakBytesInUse: 1024 + 4 * MiB + 2048, bytesReserved: 1024 });
  allocator.resetPeak();
  assert.equal(allocator.stats().peakBytesInUse, 1024);
});

test('releasing a block twice, or a block from elsewhere, is an error', () => {
  const allocator = new CachingAllocator(new FakeDevice());
  const block = allocator.allocate(100);
  allocator.release(block);
  assert.throws(() => allocator.release(block), (err: unknown) => err instanceof ArgumentError && /already released/.test(err.message) && /512 bytes/.test(err.message));
  assert.throws(() => allocator.release({ ptr: 0x1000n, bytes: 512, freed: false }), /not allocated by this allocator/);
  const again = allocator.allocate(100);
  assert.equal(again.ptr, block.ptr);
  assert.equal(allocator.stats().bytesInUse, 512, 'the failed releases changed nothing');
});

test('out of memory: the cache is emptied and the allocation retried once', () => {
  const device = new FakeDevice(8 * MiB);
  const allocator = new CachingAllocator(device);
  const big = allocator.allocate(6 * MiB);
  allocator.release(big); // 6 MiB cached, in a class a 4 MiB request cannot use
  const other = allocator.allocate(4 * MiB);
  assert.equal(other.bytes, 4 * MiB);
  assert.deepEqual(device.calls, [`alloc ${6 * MiB}`, `alloc ${4 * MiB}`, 'sync', `free ${6 * MiB}`, `alloc ${4 * MiB}`]);
  assert.equal(allocator.stats().bytesReserved, 4 * MiB);
});

test('out of memory after the retry: the error states the bytes requested and in use', () => {
  const allocator = new CachingAllocator(new FakeDevice(8 * MiB));
  allocator.allocate(5 * MiB);
  assert.throws(() => allocator.allocate(3 * MiB), (err: unknown) => {
    assert.ok(err instanceof CudaError);
    assert.equal(err.errorName, 'CUDA_ERROR_OUT_OF_MEMORY');
    assert.match(err.message, /allocating 3145728 bytes \(4194304 with rounding\)/);
    assert.match(err.message, /6291456 bytes in use/);
    return true;
  });
  assert.equal(allocator.stats().allocations, 1, 'a failed allocation is not counted');
});
