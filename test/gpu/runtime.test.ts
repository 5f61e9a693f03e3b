// The CUDA runtime on a real GPU: device, memory, copies, NVRTC kernels, the disk cache, graphs,
// events, shared-memory opt-in and the allocator. Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { arg, type KernelSource } from '../../src/backend/cuda/runtime/kernel.js';
import { probeCuda } from '../../src/cuda/library.js';
import { FuseformerError, KernelCompileError } from '../../src/errors.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

// y[i] = a·x[i] + b, one thread per element.
const axpb: KernelSource = {
  name: 'runtime_test_axpb',
  source: `
extern "C" __global__ void runtime_test_axpb(const float* __restrict__ x, float* __restrict__ y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
`,
};

// Keeps one thread busy for `cycles` clock cycles (~5 ms at 2e7 on an H200): work the host can run ahead of.
const spin: KernelSource = {
  name: 'runtime_test_spin',
  source: `
extern "C" __global__ void runtime_test_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
`,
};

// Reverses each block's chunk through dynamic shared memory (needs the > 48 KiB opt-in when large).
const reverseInShared: KernelSource = {
  name: 'runtime_test_reverse',
  source: `
extern "C" __global__ void runtime_test_reverse(const float* x, float* y, int perBlock) {
  extern __shared__ float tile[];
  const float* in = x + (size_t)blockIdx.x * perBlock;
  float* out = y + (size_t)blockIdx.x * perBlock;
  for (int i = threadIdx.x; i < perBlock; i += blockDim.x) tile[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < perBlock; i += blockDim.x) out[i] = tile[perBlock - 1 - i];
}
`,
};

function floatsToBytes(values: Float32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

function bytesToFloats(bytes: Uint8Array): Float32Array {
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

function assertClose(actual: Float32Array, expected: (i: number) => number, what: string): void {
  assert.equal(actual.length > 0, true);
  for (let i = 0; i < actual.length; i++) {
    const e = expected(i);
    if (!(Math.abs(actual[i]! - e) <= 1e-6 * Math.max(1, Math.abs(e)))) {
      assert.fail(`${what}: element ${i} is ${actual[i]}, expected ${e}`);
    }
  }
}

test('CUDA runtime on the GPU', { skip }, async (t) => {
  const { CudaRuntime } = await import('../../src/backend/cuda/runtime/runtime.js');
  const { Event } = await import('../../src/backend/cuda/runtime/device.js');
  const cacheDir = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-kernels-'));
  t.after(() => rmSync(cacheDir, { recursive: true, force: true }));
  const runtime = CudaRuntime.create(0, { kernelCacheDir: cacheDir });
  const seed = freshSeed();
  const rng = new Rng(seed);
  t.diagnostic(`seed ${seed}`);

  await t.test('device properties are sane', () => {
    const p = runtime.device.properties;
    t.diagnostic(JSON.stringify(p));
    assert.ok(p.name.length > 0);
    assert.ok(p.computeCapability.major >= 5);
    assert.equal(p.arch, `sm_${p.computeCapability.major}${p.computeCapability.minor}`);
    assert.ok(p.multiProcessorCount > 0);
    assert.ok(p.totalMemoryBytes > 1 << 30);
    assert.ok(p.l2CacheBytes > 0);
    assert.ok(p.maxSharedBytesPerBlockOptin >= 48 * 1024);
    assert.equal(p.warpSize, 32);
    assert.ok(p.driverVersion >= 12000);
    assert.equal(runtime.multiProcessorCount, p.multiProcessorCount);
    const info = runtime.device.memoryInfo();
    assert.ok(info.freeBytes > 0 && info.freeBytes <= info.totalBytes);
  });

  await t.test('upload and download round-trip random bytes', () => {
    const bytes = (1 << 20) + 13;
    const data = new Uint8Array(bytes);
    for (let i = 0; i < bytes; i++) data[i] = Math.floor(rng.next() * 256);
    const block = runtime.alloc(bytes);
    runtime.uploadBytes(block.ptr, data);
    assert.deepEqual(runtime.downloadBytes(block.ptr, bytes), data);
    runtime.release(block);
  });

  await t.test('memset8, memset32 and device-to-device copy', () => {
    const bytes = 4096 + 8;
    const a = runtime.alloc(bytes);
    const b = runtime.alloc(bytes);
    runtime.memset8(a.ptr, 0xab, bytes);
    assert.ok(runtime.downloadBytes(a.ptr, bytes).every((v) => v === 0xab));
    runtime.memset32(a.ptr, 0x3f800000, 16); // 1.0f
    runtime.memset8(b.ptr, 0, bytes);
    runtime.copyDeviceToDevice(b.ptr + 8n, a.ptr, 64);
    const copied = runtime.downloadBytes(b.ptr, bytes);
    assert.ok(copied.subarray(0, 8).every((v) => v === 0));
    assert.deepEqual(Array.from(bytesToFloats(copied.slice(8, 72))), new Array(16).fill(1));
    assert.ok(copied.subarray(72).every((v) => v === 0));
    runtime.release(a);
    runtime.release(b);
  });

  const n = 1_000_003;
  const x = rng.floats(n);
  const xBlock = runtime.alloc(n * 4);
  const yBlock = runtime.alloc(n * 4);
  const zBlock = runtime.alloc(n * 4);
  runtime.uploadBytes(xBlock.ptr, floatsToBytes(x));
  const poison = () => {
    runtime.memset8(yBlock.ptr, 0xff, n * 4); // 0xffffffff is a NaN
    runtime.memset8(zBlock.ptr, 0xff, n * 4);
  };
  const launchAxpb = (src: bigint, dst: bigint, a: number, b: number) =>
    runtime.kernel('test/axpb', () => axpb).launch({ grid: Math.ceil(n / 256), block: 256 }, [arg.ptr(src), arg.ptr(dst), arg.f32(a), arg.f32(b), arg.i32(n)]);

  await t.test('an NVRTC kernel computes y = a·x + b over 1e6+3 floats', () => {
    poison();
    launchAxpb(xBlock.ptr, yBlock.ptr, 2.5, -1);
    const y = bytesToFloats(runtime.downloadBytes(yBlock.ptr, n * 4));
    assertClose(y, (i) => 2.5 * x[i]! - 1, 'y');
  });

  await t.test('asyncUploads: uploads queued behind kernels send the bytes of the call (the source overwritten at once) and later kernels read them', () => {
    const previous = runtime.asyncUploads;
    runtime.asyncUploads = true;
    try {
      const w = rng.floats(n), bytes = floatsToBytes(w.slice()), sent = bytes.slice(); // bytes: a copy of w, overwritten below
      for (let round = 0; round < 3; round++) {
        poison();
        for (let i = 0; i < 20; i++) launchAxpb(xBlock.ptr, yBlock.ptr, 1, i); // ~ms of queued work writing y
        runtime.uploadBytes(yBlock.ptr, bytes);  // after them in stream order: y = w
        bytes.fill(0x5a);                        // the caller's array changes as soon as the call returns
        launchAxpb(yBlock.ptr, zBlock.ptr, 2, 1);
        const z = bytesToFloats(runtime.downloadBytes(zBlock.ptr, n * 4));
        assertClose(z, (i) => 2 * w[i]! + 1, `z, round ${round}`);
        bytes.set(sent);
      }
      // Small uploads of one reused array, back to back (a decode step's tokens and positions).
      const small = runtime.alloc(64 * 4), words = new Uint8Array(4);
      for (let i = 0; i < 64; i++) { words.set(floatsToBytes(new Float32Array([i + 0.5]))); runtime.uploadBytes(small.ptr + BigInt(4 * i), words); }
      assert.deepEqual(Array.from(bytesToFloats(runtime.downloadBytes(small.ptr, 64 * 4))), Array.from({ length: 64 }, (_, i) => i + 0.5));
      runtime.release(small);
    } finally {
      runtime.asyncUploads = previous;
    }
  });

  await t.test('downloadLater: returns at once behind queued kernels; wait() gives the values of that point, not of the kernels queued after', () => {
    const spinFor = (cycles: number) => runtime.kernel('test/spin', () => spin).launch({ grid: 1, block: 1 }, [arg.i64(BigInt(cycles))]);
    for (let round = 0; round < 3; round++) {
      poison();
      spinFor(2e7);                                                          // ~5 ms the download must wait for
      for (let i = 0; i < 20; i++) launchAxpb(xBlock.ptr, yBlock.ptr, 1, i); // the last writes y = x + 19
      const started = performance.now();
      const pending = runtime.downloadLater(yBlock.ptr, n * 4);
      const queuedMs = performance.now() - started;
      for (let i = 0; i < 20; i++) launchAxpb(xBlock.ptr, yBlock.ptr, 1, 100 + i); // overwrites y after the download
      const later = runtime.downloadLater(yBlock.ptr + 4n, 64);          // a second one in flight, another buffer
      const waitStarted = performance.now();
      const bytes = pending.wait();
      const waitedMs = performance.now() - waitStarted;
      assertClose(bytesToFloats(bytes), (i) => x[i]! + 19, `round ${round}`);
      assert.equal(pending.wait(), bytes, 'the same bytes on every call');
      assertClose(bytesToFloats(later.wait()), (i) => x[i + 1]! + 119, `the second download, round ${round}`);
      t.diagnostic(`downloadLater: queued in ${queuedMs.toFixed(3)} ms, wait() ${waitedMs.toFixed(3)} ms behind a ~5 ms kernel`);
      // Round 0 allocates the page-locked buffers (cuMemHostAlloc pins 4 MiB); later rounds reuse them.
      if (round > 0) assert.ok(queuedMs < 1 && waitedMs > 1, `downloadLater returned after ${queuedMs} ms and wait() after ${waitedMs} ms: the call must not wait, wait() must`);
    }
  });

  await t.test('pinnedUploads: uploads behind a ~5 ms kernel return at once, through page-locked buffers; later kernels read their bytes', () => {
    const saved = [runtime.asyncUploads, runtime.pinnedUploads];
    runtime.asyncUploads = runtime.pinnedUploads = true;
    const small = runtime.alloc(32 * 4);
    try {
      const spinFor = (cycles: number) => runtime.kernel('test/spin', () => spin).launch({ grid: 1, block: 1 }, [arg.i64(BigInt(cycles))]);
      for (let round = 0; round < 3; round++) {
        poison();
        spinFor(2e7);
        const w = rng.floats(n), bytes = floatsToBytes(w.slice()), started = performance.now();
        runtime.uploadBytes(yBlock.ptr, bytes);           // 4 MB: at PINNED_UPLOAD_MAX_BYTES, through a buffer
        const words = new Uint8Array(4);
        // A step's worth of small uploads (fewer than the buffers' cap, past which an upload waits for the oldest copy).
        for (let i = 0; i < 32; i++) { words.set(floatsToBytes(new Float32Array([i + round]))); runtime.uploadBytes(small.ptr + BigInt(4 * i), words); }
        const queuedMs = performance.now() - started;
        bytes.fill(0x5a);
        launchAxpb(yBlock.ptr, zBlock.ptr, 2, 1);
        assertClose(bytesToFloats(runtime.downloadBytes(zBlock.ptr, n * 4)), (i) => 2 * w[i]! + 1, `z, round ${round}`);
        assert.deepEqual(Array.from(bytesToFloats(runtime.downloadBytes(small.ptr, 32 * 4))), Array.from({ length: 32 }, (_, i) => i + round));
        t.diagnostic(`pinned uploads: 33 queued in ${queuedMs.toFixed(3)} ms behind a ~5 ms kernel`);
        if (round > 0) assert.ok(queuedMs < 3, `33 uploads took ${queuedMs} ms: they waited for the kernel`);
      }
    } finally {
      [runtime.asyncUploads, runtime.pinnedUploads] = saved as [boolean, boolean];
      runtime.release(small);
    }
  });

  await t.test('a second runtime (fresh in-memory cache) loads the kernel from the disk cache', () => {
    const first = runtime.jit.compile(axpb);
    const other = CudaRuntime.create(0, { kernelCacheDir: cacheDir });
    const again = other.jit.compile(axpb);
    assert.equal(again.origin, 'disk');
    assert.equal(again.key, first.key);
  });

  await t.test('graph capture of two launches, then replay', () => {
    poison();
    runtime.kernel('test/axpb', () => axpb); // compiled before capture
    const graph = runtime.captureGraph(() => {
      launchAxpb(xBlock.ptr, yBlock.ptr, 3, 1);
      launchAxpb(yBlock.ptr, zBlock.ptr, 0.5, 2);
    });
    runtime.synchronize();
    assert.ok(Number.isNaN(bytesToFloats(runtime.downloadBytes(zBlock.ptr, 16))[0]!), 'capture does not run the work');
    graph.replay();
    graph.replay();
    const z = bytesToFloats(runtime.downloadBytes(zBlock.ptr, n * 4));
    assertClose(z, (i) => 0.5 * Math.fround(3 * x[i]! + 1) + 2, 'z');
    graph.dispose();
    assert.throws(() => graph.replay(), /after dispose/);
  });

  await t.test('a failing capture ends cleanly and the stream stays usable', () => {
    assert.throws(() => runtime.captureGraph(() => {
      launchAxpb(xBlock.ptr, yBlock.ptr, 1, 0);
      throw new Error('fn failed');
    }), /fn failed/);
    assert.throws(() => runtime.captureGraph(() => { runtime.uploadBytes(yBlock.ptr, new Uint8Array(4)); }), FuseformerError);
    const bigger = 64 * 1024 * 1024;
    assert.throws(() => runtime.captureGraph(() => { runtime.scratch(bigger); }), /scratch memory must grow/);
    assert.throws(() => runtime.captureGraph(() => { runtime.alloc(3 * 1024 * 1024 * 1024); }), /while a CUDA graph is being captured/);
    assert.equal(runtime.isCapturing, false);
    assert.equal(runtime.stream.isCapturing, false);
    poison();
    launchAxpb(xBlock.ptr, yBlock.ptr, 1, 1);
    assertClose(bytesToFloats(runtime.downloadBytes(yBlock.ptr, n * 4)), (i) => x[i]! + 1, 'y after failed captures');
  });

  await t.test('zeroed counters: zero when handed out, the same block while it is large enough, grown outside captures only', () => {
    const first = runtime.counters(5);
    assert.ok(runtime.downloadBytes(first, 4 * 1024).every((v) => v === 0), 'zero');
    assert.equal(runtime.counters(3), first, 'the same block');
    assert.throws(() => runtime.captureGraph(() => { runtime.counters(1 << 20); }), /counters must grow/);
    const grown = runtime.counters(1 << 20);
    assert.notEqual(grown, first);
    assert.ok(runtime.downloadBytes(grown, 4 << 20).every((v) => v === 0), 'the grown block is zero too');
    assert.throws(() => runtime.counters(0), /positive integer/);
  });

  await t.test('events time a kernel', () => {
    const start = runtime.createEvent();
    const end = runtime.createEvent();
    start.record(runtime.stream);
    for (let i = 0; i < 10; i++) launchAxpb(xBlock.ptr, yBlock.ptr, 1, 2);
    end.record(runtime.stream);
    end.synchronize();
    const ms = Event.elapsedMs(start, end);
    t.diagnostic(`10 launches over ${n} floats: ${ms.toFixed(3)} ms (${((10 * 8 * n) / (ms * 1e6)).toFixed(0)} GB/s)`);
    assert.ok(ms > 0);
    start.destroy();
    end.destroy();
  });

  await t.test('launch overhead from JS', () => {
    const launches = 20_000;
    const kernel = runtime.kernel('test/axpb', () => axpb);
    const args = [arg.ptr(xBlock.ptr), arg.ptr(yBlock.ptr), arg.f32(1), arg.f32(0), arg.i32(256)];
    runtime.synchronize();
    const started = performance.now();
    for (let i = 0; i < launches; i++) kernel.launch({ grid: 1, block: 256 }, args);
    const issueMs = performance.now() - started;
    runtime.synchronize();
    t.diagnostic(`${((issueMs * 1000) / launches).toFixed(2)} µs per launch issued from JS`);
    assert.ok(issueMs / launches < 0.05, `${issueMs / launches} ms per launch`);
  });

  await t.test('dynamic shared memory above 48 KiB is opted into', () => {
    const perBlock = 25_000; // 100 000 bytes of shared memory
    const blocks = 8;
    const values = rng.floats(perBlock * blocks);
    const src = runtime.alloc(values.byteLength);
    const dst = runtime.alloc(values.byteLength);
    runtime.uploadBytes(src.ptr, floatsToBytes(values));
    runtime.memset8(dst.ptr, 0xff, values.byteLength);
    runtime.kernel('test/reverse', () => reverseInShared).launch({ grid: blocks, block: 256, sharedBytes: perBlock * 4 }, [arg.ptr(src), arg.ptr(dst), arg.i32(perBlock)]);
    const out = bytesToFloats(runtime.downloadBytes(dst.ptr, values.byteLength));
    assertClose(out, (i) => values[Math.floor(i / perBlock) * perBlock + (perBlock - 1 - (i % perBlock))]!, 'reversed');
    runtime.release(src);
    runtime.release(dst);
  });

  await t.test('a compile error throws KernelCompileError with the numbered source', () => {
    const broken: KernelSource = { name: 'runtime_test_broken', source: 'extern "C" __global__ void runtime_test_broken(float* y) {\n  y[0] = undefined_name;\n}\n' };
    assert.throws(() => runtime.kernel('test/broken', () => broken), (err: unknown) => {
      assert.ok(err instanceof KernelCompileError);
      assert.match(err.message, /undefined_name/);
      assert.match(err.message, /runtime_test_broken\.cu\(2\)/);
      assert.match(err.message, /\n2 \|   y\[0\] = undefined_name;/);
      return true;
    });
  });

  await t.test('allocator statistics follow alloc and release', () => {
    runtime.synchronize();
    const before = runtime.memoryStats();
    const block = runtime.alloc(3 * 1024 * 1024);
    const during = runtime.memoryStats();
    assert.equal(during.allocations, before.allocations + 1);
    assert.equal(during.bytesInUse, before.bytesInUse + 4 * 1024 * 1024);
    assert.ok(during.peakBytesInUse >= during.bytesInUse);
    runtime.release(block);
    assert.throws(() => runtime.release(block), /already released/);
    const after = runtime.memoryStats();
    assert.equal(after.bytesInUse, before.bytesInUse);
    assert.equal(after.bytesReserved, during.bytesReserved, 'released memory stays cached');
    const reused = runtime.alloc(3 * 1024 * 1024);
    assert.equal(reused.ptr, block.ptr);
    assert.equal(runtime.memoryStats().deviceAllocations, during.deviceAllocations, 'served from the cache');
    runtime.release(reused);
    runtime.emptyCache();
    assert.equal(runtime.memoryStats().bytesReserved, runtime.memoryStats().bytesInUse);
  });

  runtime.release(xBlock);
  runtime.release(yBlock);
  runtime.release(zBlock);
});
