// SmoothQuant (Xiao et al., 2023): activations have a few channels with large magnitudes, weights do
// not, and per-token INT8 quantization of such activations wastes its range on those channels. The
// migration moves part of the difficulty into the weights, exactly in real arithmetic:
//   y = x·Wᵀ = (x / s)·(W·diag(s))ᵀ,   s_k = max|x_k|^α / max_n |W[n, k]|^(1−α)
// with α = 0.5 by default. x / s is folded into the LayerNorm that produces x (γ/s, β/s), so it costs
// nothing at inference; only layers fed by a norm (the QKV projection and the MLP's first product) are
// smoothed. max|x_k| comes from calibration activations.

import { ArgumentError } from '../errors.js';

/** Smoothing factors s [K] for weight W [N, K] (n-major) and per-channel activation maxima [K]. */
export function smoothingFactors(activationMax: ArrayLike<number>, W: ArrayLike<number>, N: number, K: number, alpha: number): Float64Array {
  if (!(alpha >= 0 && alpha <= 1)) throw new ArgumentError(`SmoothQuant: alpha must be in [0, 1], got ${alpha}`);
  const weightMax = new Float64Array(K);
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) weightMax[k] = Math.max(weightMax[k]!, Math.abs(W[n * K + k]!));
  const floor = 1e-5;
  const s = new Float64Array(K);
  for (let k = 0; k < K; k++) s[k] = Math.max(activationMax[k]!, floor) ** alpha / Math.max(weightMax[k]!, floor) ** (1 - alpha);
  return s;
}

/** LayerNorm γ and β (RMSNorm: γ alone) divided by s (in place): the norm's output becomes x / s. */
export function foldIntoLayerNorm(gamma: Float32Array, beta: Float32Array | undefined, s: ArrayLike<number>): void {
  for (let k = 0; k < gamma.length; k++) {
    gamma[k] = gamma[k]! / s[k]!;
    if (beta) beta[k] = beta[k]! / s[k]!;
  }
}

/** W [N, K] (n-major, in place) times diag(s): column k scaled by s_k. */
export function scaleInputChannels(W: Float32Array, N: number, K: number, s: ArrayLike<number>): void {
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) W[n * K + k] = W[n * K + k]! * s[k]!;
}
