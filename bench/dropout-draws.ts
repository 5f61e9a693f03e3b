// Experiment (not production code): how much of bias + GELU + dropout's time is the Philox draw?
//
// bias + GELU(tanh) + dropout forward measured 2.18 TB/s on the H200 (52% of copy), bound by
// instructions rather than bytes. This times three standalone variants of the same elementwise
// kernel over [rows, H] bf16, one thread per 8 elements, on identical random inputs:
//   none      no dropout at all (the ceiling without any RNG)
//   philox4   the former rule: one Philox4x32-10 call per 4 elements, 24-bit uniforms
//   philox8   the current rule (rng.ts): one call per 8 elements, 16-bit uniforms (each 32-bit word
//             gives two decisions)
// Measured on the H200: none 82.6 µs, philox4 118.3, philox8 111 µs at 16384 × 3072. Caveat: the
// grid (132 × 8 blocks of 256, grid-stride) assumes 2048 resident threads an SM; variants using
// more than 32 registers fit fewer blocks and run a partial second wave, so the Philox variants
// also pay an occupancy penalty here that the production kernels (one row a thread, 32-register
// launch bounds) do not. The IEEE division in gelu_fast also costs ~10 instructions an element.
//
//   node dist/bench/dropout-draws.js

import { CudaBackend } from '../src/backend/cuda/index.js';
import { Event } from '../src/backend/cuda/runtime/device.js';
import { arg } from '../src/backend/cuda/runtime/kernel.js';
import { DEVICE_LIB } from '../src/backend/cuda/kernels/device-lib.js';
import { probeCuda } from '../src/cuda/probe.js';

type Variant = 'none' | 'philox4' | 'philox8';

export function source(variant: Variant, hidden: number): string {
  const loop = {
    none: `#pragma unroll
    for (int k = 0; k < 8; k++) keep[k] = true;`,
    // Two Philox calls per 8 elements, 24-bit uniforms (the production rule).
    philox4: `#pragma unroll
    for (int g = 0; g < 8; g += 4) {
      const uint4 w = dropout_words(seed, offset, (i + g) >> 2);
      #pragma unroll
      for (int j = 0; j < 4; j++) keep[g + j] = (word_at(w, j) >> 8) >= threshold24;
    }`,
    // One Philox call per 8 elements, two 16-bit uniforms per word.
    philox8: `{
      const uint4 w = dropout_words(seed, offset, i >> 3);
      #pragma unroll
      for (int k = 0; k < 8; k++) { const u32 word = word_at(w, k >> 1); keep[k] = ((k & 1 ? word >> 16 : word) & 0xffffu) >= threshold16; }
    }`,
  }[variant];
  return String.raw`${DEVICE_LIB}
typedef __nv_bfloat16 T;
__device__ __forceinline__ float gelu_fast(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.f + __expf(-2.f * u));
}
extern "C" __global__ void __launch_bounds__(256) dropout_${variant}(
    const T* input, const T* bias, T* out, unsigned char* mask, u64 n, u64 seed, u64 offset,
    u32 threshold24, u32 threshold16, float scale) {
  for (u64 v = (u64)blockIdx.x * 256 + threadIdx.x; v < n / 8; v += (u64)gridDim.x * 256) {
    const u64 i = v * 8;
    const Vec<T, 8> x = load_vec<T, 8>(input + i);
    const Vec<T, 8> b = load_vec<T, 8>(bias + (i % ${hidden}));
    bool keep[8];
    ${loop}
    Vec<T, 8> y;
    Vec<unsigned char, 8> m;
    #pragma unroll
    for (int k = 0; k < 8; k++) {
      y.v[k] = from_float<T>(keep[k] ? gelu_fast(to_float(x.v[k]) + to_float(b.v[k])) * scale : 0.f);
      m.v[k] = keep[k];
    }
    store_vec<T, 8>(out + i, y);
    store_vec<unsigned char, 8>(mask + i, m);
  }
}
`;
}

function main(): void {
  const probe = probeCuda();
  if (!probe.available) { process.stderr.write(`dropout-draws needs a CUDA GPU: ${probe.reason}\n`); process.exitCode = 1; return; }
  const b = CudaBackend.create();
  const rows = 16384, hidden = 3072, n = rows * hidden, p = 0.1;
  const input = b.empty([n], 'bf16'), bias = b.empty([hidden], 'bf16'), out = b.empty([n], 'bf16'), mask = b.empty([n], 'u8');
  b.randomFill({ out: input, distribution: 'normal', seed: 1n, offset: 0n });
  b.randomFill({ out: bias, distribution: 'normal', seed: 2n, offset: 0n });
  const start = b.runtime.createEvent({ timing: true }), end = b.runtime.createEvent({ timing: true });
  const rowsOut: string[] = [];
  for (const variant of ['none', 'philox4', 'philox8'] as Variant[]) {
    const kernel = b.runtime.kernel(`experiment.dropout.${variant}.${hidden}`, () => ({ name: `dropout_${variant}`, source: source(variant, hidden) }));
    const launch = () => kernel.launch({ grid: 132 * 8, block: 256 }, [
      arg.ptr(input), arg.ptr(bias), arg.ptr(out), arg.ptr(mask), arg.u64(BigInt(n)), arg.u64(42n), arg.u64(0n),
      arg.u32(Math.ceil(p * 2 ** 24)), arg.u32(Math.ceil(p * 2 ** 16)), arg.f32(1 / (1 - p)),
    ]);
    const graph = b.captureGraph(() => { for (let i = 0; i < 20; i++) launch(); });
    graph.replay();
    b.synchronize();
    const samples: number[] = [];
    for (let r = 0; r < 15; r++) {
      start.record(b.runtime.stream); graph.replay(); end.record(b.runtime.stream); end.synchronize();
      samples.push((Event.elapsedMs(start, end) / 20) * 1e3);
    }
    graph.dispose();
    samples.sort((x, y) => x - y);
    const us = samples[7]!;
    let keptCount = 0;
    for (const x of b.download(mask)) keptCount += x;
    const kept = keptCount / n;
    rowsOut.push(`| ${variant} | ${us.toFixed(1)} | ${((n * 5) / (us * 1e-6) / 1e9).toFixed(0)} | ${kept.toFixed(4)} |`);
  }
  process.stdout.write(['| variant | µs | GB/s (5 B/element) | kept fraction |', '|---|---:|---:|---:|', ...rowsOut, ''].join('\n'));
}

main();
