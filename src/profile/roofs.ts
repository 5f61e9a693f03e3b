// The two roofs of the roofline, measured on the device in the same process as the profile:
//   bandwidth  a 1 GiB device-to-device copy (cuMemcpyDtoDAsync through Backend.copy), counted as
//              bytes read + bytes written, median of COPY_REPEATS: what a streaming kernel can reach.
//   compute    an 8192 × 8192 × 8192 GEMM on cuBLASLt (Backend.gemm, autotuned like every large GEMM)
//              in the profile's dtype on random inputs (constant inputs toggle fewer bits and run
//              faster), 2·M·N·K FLOPs, median of GEMM_REPEATS.
// A kernel of arithmetic intensity AI (FLOP/B) can reach at most min(peak, AI · bandwidth); the
// ridge, peak / bandwidth, separates memory-bound from compute-bound kernels (~190 FLOP/B for bf16
// on an H200). Measured once per backend and dtype per process (≈ 0.1–1 s, mostly the autotuning)
// and cached. The CPU backend has no roofs: its profiles give times and counts only.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';

export interface Roofs {
  /** Device-to-device copy bandwidth, bytes read + written, GB/s (10⁹ B/s). */
  readonly copyGBps: number;
  /** Dense GEMM rate of cuBLASLt in `gemmDtype`, TFLOP/s (10¹² FLOP/s). */
  readonly gemmTflops: number;
  readonly gemmDtype: FloatDType;
  /** [M, N, K] of the GEMM that measured the peak. */
  readonly gemmShape: readonly [number, number, number];
  /** The arithmetic intensity where the two roofs meet: peak / bandwidth, FLOP/B. */
  readonly ridge: number;
}

const COPY_BYTES = 1 << 30;
const COPY_REPEATS = 9;
const GEMM_SIZE = 8192;
const GEMM_REPEATS = 9;

const cache = new WeakMap<Backend, Map<FloatDType, Roofs>>();

/** The roofs of `backend` for `dtype` GEMMs (measured on first use, then cached); undefined on the CPU. */
export function measureRoofs(backend: Backend, dtype: FloatDType = 'bf16'): Roofs | undefined {
  if (backend.name !== 'cuda') return undefined;
  let perDtype = cache.get(backend);
  if (!perDtype) cache.set(backend, (perDtype = new Map()));
  const known = perDtype.get(dtype);
  if (known) return known;
  const copyGBps = (2 * COPY_BYTES) / (copyMs(backend) / 1e3) / 1e9;
  const gemmTflops = (2 * GEMM_SIZE ** 3) / (gemmMs(backend, dtype) / 1e3) / 1e12;
  const roofs: Roofs = { copyGBps, gemmTflops, gemmDtype: dtype, gemmShape: [GEMM_SIZE, GEMM_SIZE, GEMM_SIZE], ridge: (gemmTflops * 1e12) / (copyGBps * 1e9) };
  perDtype.set(dtype, roofs);
  return roofs;
}

/** The time the best kernel could take for `flops` and `bytes`: max(flops / peak, bytes / bandwidth), ms. */
export function roofMs(roofs: Roofs, flops: number, bytes: number): number {
  return Math.max(flops / (roofs.gemmTflops * 1e9), bytes / (roofs.copyGBps * 1e6));
}

/** Median ms of `region` between two markers, after one untimed run. */
export function medianMarkedMs(backend: Backend, region: () => void, repeats: number): number {
  region();
  backend.synchronize();
  const samples: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const start = backend.mark();
    region();
    const end = backend.mark();
    samples.push(end.elapsedSince(start));
    start.dispose();
    end.dispose();
  }
  return median(samples);
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function copyMs(backend: Backend): number {
  const src = backend.empty([COPY_BYTES], 'u8'), dst = backend.empty([COPY_BYTES], 'u8');
  try {
    backend.fill(src, 7);
    return medianMarkedMs(backend, () => backend.copy(src, dst), COPY_REPEATS);
  } finally {
    backend.free(src);
    backend.free(dst);
  }
}

function gemmMs(backend: Backend, dtype: FloatDType): number {
  const n = GEMM_SIZE;
  const a = backend.empty([n, n], dtype), b = backend.empty([n, n], dtype), out = backend.empty([n, n], dtype);
  try {
    backend.randomFill({ out: a, distribution: 'normal', seed: 1n, offset: 0n });
    backend.randomFill({ out: b, distribution: 'normal', seed: 2n, offset: 0n });
    backend.gemm({ a, b, out }); // autotunes once for this shape
    return medianMarkedMs(backend, () => backend.gemm({ a, b, out }), GEMM_REPEATS);
  } finally {
    for (const t of [a, b, out]) backend.free(t);
  }
}
