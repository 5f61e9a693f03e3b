// The kernel emulator itself (src/testing/emulator): hand-written kernels whose results are known exactly —
// block barriers over shared memory, warp shuffles at their edges, votes, atomics across blocks, dynamic
// shared memory, inline PTX — and the errors it must give: a warp exchange some lanes never reach, a write
// past a block's end, an instruction it does not model. Skips where g++ or the CUDA headers are missing.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { arg } from '../../../src/backend/cuda/runtime/kernel.js';
import { EmulatorHost, EmulatorMemory, EmulatorUnsupported, emulatorUnavailable } from '../../../src/testing/emulator/host.js';
import { emulatedSource, rewriteAsm, rewriteShared } from '../../../src/testing/emulator/rewrite.js';

const unavailable = emulatorUnavailable();
const skip = unavailable ?? false;

function host(): EmulatorHost {
  return new EmulatorHost(new EmulatorMemory());
}

/** An i32 device array holding `values`. */
function ints(h: EmulatorHost, values: number[]): bigint {
  const block = h.memory.alloc(4 * values.length);
  h.memory.write(block.ptr, new Uint8Array(Int32Array.from(values).buffer));
  return block.ptr;
}

function readInts(h: EmulatorHost, ptr: bigint, n: number): number[] {
  const bytes = new Uint8Array(4 * n);
  h.memory.read(ptr, bytes);
  return [...new Int32Array(bytes.buffer)];
}

function run(h: EmulatorHost, name: string, source: string, grid: number, block: number, args: ReturnType<typeof arg.ptr>[], sharedBytes = 0): void {
  h.kernel(name, () => ({ name, source })).launch({ grid, block, sharedBytes }, args);
}

test('rewriteShared: statics declared to the emulator inside functions, plain statics at file scope, extern arrays on the dynamic memory', () => {
  const out = rewriteShared('__shared__ int g[4];\n__global__ void k() { __shared__ __align__(16) float s[2][8]; [[maybe_unused]] extern __shared__ __align__(128) unsigned char dyn[]; }');
  assert.match(out, /^static int g\[4\];/);
  assert.match(out, /static __align__\(16\) float s\[2\]\[8\]; emu::declare_shared\(&s, sizeof\(s\)\);/);
  assert.match(out, /\[\[maybe_unused\]\] unsigned char\* dyn = reinterpret_cast<unsigned char\*>\(emu::dynamic_shared\);/);
  assert.throws(() => rewriteShared('void f() { __shared__ int a, b; }'), EmulatorUnsupported);
});

test('rewriteAsm: operands bound once, instructions translated, comments left alone, unknown instructions named', () => {
  const out = rewriteAsm('// asm("bogus");\nasm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");');
  assert.match(out, /^\/\/ asm\("bogus"\);/);
  assert.match(out, /const auto _e0 = \(p\);/);
  assert.match(out, /emu::red_add_f32\(_base \+ 12, emu::bits_as<float>\(_e4\)\);/);
  // Refused when reached, not when compiled: a spec's source may hold instructions on paths it never takes.
  assert.match(rewriteAsm('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");'), /emu::unsupported\("the PTX instruction 'wgmma.fence.sync.aligned' is not modelled by the emulator"\)/);
  assert.match(rewriteAsm('asm("@p bra L;");'), /emu::unsupported\("PTX with predicates or local registers: '@p bra L'"\)/);
  assert.match(emulatedSource('extern "C" __global__ void k(int* p) {}', 'k'), /emu::launch\(k, gx, gy, gz/);
});

test('block barriers and shared memory: a reversal through a __shared__ array, a count vote, three blocks', { skip, timeout: 5 * 60_000 }, () => {
  const h = host();
  const n = 3 * 96;
  const data = ints(h, Array.from({ length: n }, (_, i) => i * 7 - 50)), out = ints(h, new Array(n).fill(0)), votes = ints(h, [0, 0, 0]);
  run(h, 'reverse', `extern "C" __global__ void reverse(const int* in, int* out, int* votes) {
    __shared__ int s[96];
    const int t = threadIdx.x, base = blockIdx.x * 96;
    s[t] = in[base + t];
    __syncthreads();
    out[base + t] = s[95 - t];
    const int odd = __syncthreads_count(in[base + t] & 1);
    if (t == 0) votes[blockIdx.x] = odd;
  }`, 3, 96, [arg.ptr(data), arg.ptr(out), arg.ptr(votes)]);
  const got = readInts(h, out, n);
  for (let b = 0; b < 3; b++) for (let t = 0; t < 96; t++) assert.equal(got[b * 96 + t], (b * 96 + 95 - t) * 7 - 50);
  assert.deepEqual(readInts(h, votes, 3), [48, 48, 48], 'half of each block holds an odd value');
});

test('FUSEFORMER_EMULATOR_BLOCK_ORDER: blocks forward, reversed or shuffled (a permutation); any other value is a launch error naming it', { skip, timeout: 5 * 60_000 }, () => {
  const h = host();
  const n = 6, order = ints(h, new Array(n).fill(-1)), counter = ints(h, [0]);
  const orderWith = (mode: string | undefined): number[] => {
    const saved = process.env['FUSEFORMER_EMULATOR_BLOCK_ORDER'];
    if (mode === undefined) delete process.env['FUSEFORMER_EMULATOR_BLOCK_ORDER'];
    else process.env['FUSEFORMER_EMULATOR_BLOCK_ORDER'] = mode;
    try {
      h.memory.write(counter, new Uint8Array(4));
      run(h, 'block_order', `extern "C" __global__ void block_order(int* order, unsigned* counter) {
        if (threadIdx.x == 0) order[atomicAdd(counter, 1u)] = blockIdx.x;
      }`, n, 32, [arg.ptr(order), arg.ptr(counter)]);
      return readInts(h, order, n);
    } finally {
      if (saved === undefined) delete process.env['FUSEFORMER_EMULATOR_BLOCK_ORDER'];
      else process.env['FUSEFORMER_EMULATOR_BLOCK_ORDER'] = saved;
    }
  };
  const identity = [0, 1, 2, 3, 4, 5];
  assert.deepEqual(orderWith(undefined), identity);
  assert.deepEqual(orderWith('forward'), identity);
  assert.deepEqual(orderWith('reverse'), [5, 4, 3, 2, 1, 0]);
  const shuffled = [orderWith('shuffle:7'), orderWith('shuffle:7'), orderWith('shuffle')];
  for (const o of shuffled) assert.deepEqual([...o].sort((a, b) => a - b), identity, `a permutation: ${o}`);
  assert.ok(shuffled.some((o) => o.join() !== identity.join()), 'three shuffles are not all in order');
  assert.throws(() => orderWith('sideways'), /FUSEFORMER_EMULATOR_BLOCK_ORDER must be forward, reverse, shuffle or shuffle:SEED, got 'sideways'/);
});

test('warp shuffles: a butterfly sum, shifts that keep their own value at the edges, widths of 8, a ballot', { skip, timeout: 5 * 60_000 }, () => {
  const h = host();
  const out = ints(h, new Array(64 * 5).fill(0));
  run(h, 'shuffles', `extern "C" __global__ void shuffles(int* out) {
    const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
    int sum = l * l;
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    int* o = out + 5 * (32 * w + l);
    o[0] = sum;
    o[1] = __shfl_down_sync(0xffffffffu, 100 + l, 3);
    o[2] = __shfl_up_sync(0xffffffffu, 100 + l, 2, 8);
    o[3] = __shfl_sync(0xffffffffu, 100 + l, 1, 8);
    o[4] = (int)__ballot_sync(0xffffffffu, l % 3 == 0) + w;
  }`, 1, 64, [arg.ptr(out)]);
  const got = readInts(h, out, 64 * 5);
  let ballot = 0;
  for (let l = 0; l < 32; l += 3) ballot |= 1 << l;
  for (let w = 0; w < 2; w++) {
    for (let l = 0; l < 32; l++) {
      const o = got.slice(5 * (32 * w + l), 5 * (32 * w + l) + 5);
      assert.equal(o[0], 10416, 'Σ l² over the warp');
      assert.equal(o[1], 100 + (l + 3 < 32 ? l + 3 : l), `down by 3 at lane ${l}`);
      assert.equal(o[2], 100 + (l % 8 >= 2 ? l - 2 : l), `up by 2 within 8 at lane ${l}`);
      assert.equal(o[3], 100 + (l & ~7) + 1, `lane 1 of each 8 at lane ${l}`);
      assert.equal(o[4], ballot + w);
    }
  }
});

test('atomics across blocks, a last-block hand-off through a counter, dynamic shared memory, PTX loads and reductions', { skip, timeout: 5 * 60_000 }, () => {
  const h = host();
  const total = ints(h, [0, 0, 0]), counter = ints(h, [0]);
  const floats = h.memory.alloc(16);
  h.memory.write(floats.ptr, new Uint8Array(Float32Array.from([1, 2, 3, 4]).buffer));
  run(h, 'handoff', `extern "C" __global__ void handoff(int* total, unsigned* counter, float* f) {
    extern __shared__ __align__(16) int dyn[];
    dyn[threadIdx.x] = threadIdx.x + 1;
    __syncthreads();
    if (threadIdx.x == 0) {
      int s = 0;
      for (int i = 0; i < blockDim.x; i++) s += dyn[i];
      atomicAdd(total, s);
      if (atomicAdd(counter, 1u) == gridDim.x - 1) { total[1] = *total; *counter = 0; }
      uint4 r;
      asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(f));
      float v = __uint_as_float(r.w);
      asm volatile("red.global.add.f32 [%0], %1;" :: "l"(f), "f"(v) : "memory");
    }
  }`, 5, 40, [arg.ptr(total), arg.ptr(counter), arg.ptr(floats.ptr)], 40 * 4);
  const s = 40 * 41 / 2;
  assert.deepEqual(readInts(h, total, 3), [5 * s, 5 * s, 0], 'the last block read the whole sum');
  assert.deepEqual(readInts(h, counter, 1), [0]);
  const f = new Uint8Array(16);
  h.memory.read(floats.ptr, f);
  assert.deepEqual([...new Float32Array(f.buffer)], [1 + 5 * 4, 2, 3, 4], 'f[0] += f[3] five times');
});

test('errors: a shuffle that lanes which exited never reach, a write past the block, an instruction not modelled, an uninitialised shared read shows as NaN', { skip, timeout: 5 * 60_000 }, () => {
  const h = host();
  const out = ints(h, [0, 0, 0, 0]);
  assert.throws(() => run(h, 'deadlock', `extern "C" __global__ void deadlock(int* out) {
    if (threadIdx.x >= 16) return;
    out[0] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
  }`, 1, 32, [arg.ptr(out)]), /deadlock in block 0,0,0: 0 threads at __syncthreads, 16 at a warp exchange/);
  assert.throws(() => run(h, 'overrun', `extern "C" __global__ void overrun(int* out) { out[threadIdx.x] = 1; }`, 1, 5 + 64, [arg.ptr(out)]),
    /memory \d+ bytes past the end of the block at 0x[0-9a-f]+ \(256 bytes\) was written/);
  assert.throws(() => run(h, 'tensorcore', `extern "C" __global__ void tensorcore(int* out) {
    if (threadIdx.x == 3) asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    out[0] = 1;
  }`, 1, 32, [arg.ptr(out)]), /tensorcore: the PTX instruction 'wgmma.fence.sync.aligned' is not modelled by the emulator \(block 0,0,0 thread 3,0,0\)/);
  const f = h.memory.alloc(4);
  run(h, 'unset', `extern "C" __global__ void unset(float* out) { __shared__ float s[4]; if (threadIdx.x == 0) out[0] = s[2]; }`, 1, 32, [arg.ptr(f.ptr)]);
  const bytes = new Uint8Array(4);
  h.memory.read(f.ptr, bytes);
  assert.ok(Number.isNaN(new Float32Array(bytes.buffer)[0]), 'shared memory nobody wrote reads as poison');
});

test('spin-waits: a thread polling a flag another thread of its block sets gets it; one waiting for a later block is stopped with an error', { skip, timeout: 5 * 60_000 }, () => {
  const h = host();
  const out = ints(h, [0, 0]), flag = ints(h, [0]);
  run(h, 'handshake', `extern "C" __global__ void handshake(int* out, unsigned* flag) {
    if (threadIdx.x == 0) {
      unsigned seen = 0;
      while ((seen = *(volatile unsigned*)flag) == 0) __nanosleep(32);
      out[0] = (int)seen;
    } else if (threadIdx.x == 40) {
      *(volatile unsigned*)flag = 7;
    }
  }`, 1, 64, [arg.ptr(out), arg.ptr(flag)]);
  assert.deepEqual(readInts(h, out, 1), [7]);
  h.memory.write(flag, new Uint8Array(4));
  assert.throws(() => run(h, 'crossblock', `extern "C" __global__ void crossblock(int* out, unsigned* flag) {
    if (blockIdx.x == 0) { while (*(volatile unsigned*)flag == 0) __nanosleep(32); out[1] = 1; }
    else *(volatile unsigned*)flag = 1;
  }`, 2, 1, [arg.ptr(out), arg.ptr(flag)]), /crossblock: a spin-wait that never ends/);
});
