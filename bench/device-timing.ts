// Timing on the GPU for the benchmarks that time single ops (bench/kernels.ts, bench/quant.ts,
// bench/gemv-sweep.ts): CUDA events around a region, median of `repeats`; and CALLS launches captured
// into one CUDA graph, its replays timed, so a few-µs kernel is not measured with the ~4 µs a launch
// from JS costs. And their inputs: random tensors drawn on the GPU.

import type { CudaBackend } from '../src/backend/cuda/index.js';
import { Event } from '../src/backend/cuda/runtime/device.js';
import { dropoutOffsetAdvance } from '../src/backend/rng.js';
import type { DType } from '../src/dtype.js';
import type { Tensor } from '../src/tensor.js';
import type { Rng } from '../src/testing/random.js';

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Median ms per call of `region` (which makes `calls` calls), after 3 warm-up runs. */
export function timeRegion(b: CudaBackend, region: () => void, calls: number, repeats: number): number {
  const start = b.runtime.createEvent({ timing: true }), end = b.runtime.createEvent({ timing: true });
  for (let i = 0; i < 3; i++) region();
  b.synchronize();
  const samples: number[] = [];
  for (let r = 0; r < repeats; r++) {
    start.record(b.runtime.stream);
    region();
    end.record(b.runtime.stream);
    end.synchronize();
    samples.push(Event.elapsedMs(start, end) / calls);
  }
  start.destroy(); end.destroy();
  return median(samples);
}

/** Median ms per call of `calls` launches rotating over `launches` (weight sets past the L2), replayed as one graph. */
export function timeGraph(b: CudaBackend, launches: (() => void)[], calls: number, repeats: number): number {
  const all = () => { for (let i = 0; i < calls; i++) launches[i % launches.length]!(); };
  all(); // compile, tune and size scratch memory before the capture
  b.synchronize();
  const graph = b.captureGraph(all);
  const ms = timeRegion(b, () => graph.replay(), calls, repeats);
  graph.dispose();
  return ms;
}

/** Device-to-device copy bandwidth in GB/s (bytes read + written), the memory roof of a run. */
export function copyBandwidth(b: CudaBackend, repeats: number): number {
  const bytes = 1 << 30;
  const src = b.empty([bytes], 'u8'), dst = b.empty([bytes], 'u8');
  b.fill(src, 7);
  const ms = timeRegion(b, () => b.runtime.copyDeviceToDevice(dst.ptr, src.ptr, bytes), 1, repeats);
  b.free(src); b.free(dst);
  return (2 * bytes) / (ms / 1e3) / 1e9;
}

let randomOffset = 0n;
/**
 * A normal(0, std) tensor drawn on the GPU (host-generated data for hundreds of millions of elements
 * takes minutes), its seed from `rng`, each draw at a fresh Philox offset.
 */
export function randomTensor(b: CudaBackend, rng: Rng, shape: number[], dtype: DType, std = 1): Tensor {
  const t = b.empty(shape, dtype);
  b.randomFill({ out: t, distribution: 'normal', std, seed: BigInt(Math.floor(rng.next() * 2 ** 32)), offset: randomOffset });
  randomOffset += dropoutOffsetAdvance(t.numel);
  return t;
}
