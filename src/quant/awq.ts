// AWQ (Lin et al., 2023), activation-aware INT4: a per-input-channel scale s protects the weights that
// meet large activations. A layer y = x·Wᵀ is rewritten as y = (x/s)·(W·diag(s))ᵀ — exact in real
// arithmetic — and W·diag(s) is quantized, so channels with s > 1 get relatively finer steps. The
// division by s is folded into whatever produces x (a LayerNorm's gain and bias, or the V columns of
// the QKV projection before the attention output), so inference runs unchanged kernels.
//
// Scale search (per layer, as AWQ's auto_scale): s = mean|x|^α, normalised by sqrt(max(s)·min(s)), for
// α on a grid of `grid` points in [0, 1); the loss of each α is the mean squared difference between
// the float output X·Wᵀ and the quantized layer's output on a sample of calibration rows — computed
// with the real ops: int4QuantizeWeights on W·diag(s), then int4Linear on X/s, in the model's dtype
// (the rescaling by scaleColumns on the backend too).
// α = 0 (s = 1) is plain round-to-nearest, so the search never does worse than RTN on that sample.
//
// Clipping (AWQ's auto_clip, simplified): per (output channel, group), the range [lo, hi] (zero
// included) shrinks to [r·lo, r·hi] for r ∈ {1, 0.95, …, 0.5}, the weights are clamped to it, and the r
// with the least Σ_k E[x_k²]·(w_k − ŵ_k)² is kept — the output error with the cross-channel terms of
// E[xxᵀ] dropped (its diagonal), which needs only the per-channel mean squares, not the activations.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';

export interface AwqSearchOptions {
  readonly groupSize: number;
  /** Points of α in [0, 1) (default 20, as AWQ). */
  readonly grid?: number;
}

export interface AwqSearchResult {
  /** The chosen scales s [K]. */
  readonly scales: Float64Array;
  readonly alpha: number;
  /** Mean squared output error at the chosen α, and at α = 0 (round-to-nearest). */
  readonly loss: number;
  readonly rtnLoss: number;
}

/**
 * Searches s for weight W [N, K] (n-major, f32) on sample inputs X [rows, K] (f32) with per-channel
 * mean |x| `absMean` [K], running the quantized layer on `backend` in `dtype`.
 */
export function searchAwqScales(backend: Backend, dtype: FloatDType, X: Float32Array, rows: number, W: Float32Array, N: number, K: number, absMean: ArrayLike<number>, options: AwqSearchOptions): AwqSearchResult {
  const grid = options.grid ?? 20, G = options.groupSize;
  const made = {
    x: backend.fromArray(X, [rows, K], dtype),
    w32: backend.fromArray(W, [N, K], 'f32'),
    w: backend.empty([N, K], dtype),
    s: backend.empty([K], 'f32'),
    yRef: backend.empty([rows, N], dtype),
    ws: backend.empty([N, K], 'f32'),
    qweight: backend.empty([N, K / 8], 'i32'),
    qscales: backend.empty([N, K / G], 'f16'),
    zeros: backend.empty([N, K / G], 'u8'),
    xs: backend.empty([rows, K], dtype),
    y: backend.empty([rows, N], dtype),
  };
  try {
    backend.copy(made.w32, made.w);  // the weight in the run's dtype, converted on the device (one upload)
    backend.gemm({ a: made.x, b: made.w, out: made.yRef, transB: true });
    const reference = backend.download(made.yRef) as Float32Array;
    const floor = 1e-4;
    let best: AwqSearchResult | undefined;
    let rtnLoss = NaN;
    for (let i = 0; i < grid; i++) {
      const alpha = i / grid;
      const s = new Float64Array(K);
      let max = 0, min = Infinity;
      for (let k = 0; k < K; k++) {
        s[k] = Math.max(absMean[k]!, floor) ** alpha;
        max = Math.max(max, s[k]!);
        min = Math.min(min, s[k]!);
      }
      const norm = Math.sqrt(max * min);
      for (let k = 0; k < K; k++) s[k]! /= norm;
      // W·diag(s) and X·diag(s)⁻¹ on the backend: the weights stay there across the grid (at Llama 1.2B's
      // gate/up, 134 MB of f32 a point that the host used to scale and upload).
      backend.upload(made.s, Float32Array.from(s));
      backend.scaleColumns({ x: made.w32, scale: made.s, out: made.ws });
      backend.scaleColumns({ x: made.x, scale: made.s, out: made.xs, divide: true });
      backend.int4QuantizeWeights({ weight: made.ws, groupSize: G, qweight: made.qweight, scales: made.qscales, zeros: made.zeros });
      backend.int4Linear({ x: made.xs, qweight: made.qweight, scales: made.qscales, zeros: made.zeros, groupSize: G, out: made.y });
      const y = backend.download(made.y) as Float32Array;
      let loss = 0;
      for (let j = 0; j < y.length; j++) loss += (y[j]! - reference[j]!) ** 2;
      loss /= y.length;
      if (i === 0) rtnLoss = loss;
      if (!best || loss < best.loss) best = { scales: s, alpha, loss, rtnLoss };
    }
    return { ...best!, rtnLoss };
  } finally {
    for (const t of Object.values(made)) backend.free(t);
  }
}

/** Clip ratios tried per group: 1, 0.95, …, 0.5. */
export const CLIP_RATIOS: readonly number[] = Array.from({ length: 11 }, (_, i) => 1 - i * 0.05);

/**
 * Clamps each group of W [N, K] (n-major, modified in place) to the shrunk range that minimises the
 * E[x²]-weighted rounding error (see the file comment); `meanSquare` [K] = E[x_k²] of the layer's input.
 * The search runs on `backend` (int4ClipGroups: a warp a group on the GPU).
 */
export function clipWeights(backend: Backend, W: Float32Array, N: number, K: number, G: number, meanSquare: ArrayLike<number>, ratios: readonly number[] = CLIP_RATIOS): void {
  const made = [
    backend.fromArray(W, [N, K], 'f32'),
    backend.fromArray(Float32Array.from(meanSquare), [K], 'f32'),
    backend.fromArray(Float32Array.from(ratios), [ratios.length], 'f32'),
  ] as const;
  try {
    const [weight, ms, rs] = made;
    backend.int4ClipGroups({ weight, meanSquare: ms, ratios: rs, groupSize: G });
    W.set(backend.download(weight) as Float32Array);
  } finally {
    for (const t of made) backend.free(t);
  }
}
