// GPTQ (Frantar et al., 2022): INT4 quantization of one linear layer that compensates each column's
// rounding error on the columns not yet quantized, weighted by the inverse Hessian of the layer's
// squared output error, H = 2·XᵀX over calibration inputs X [tokens, K] (the factor 2 cancels).
//
// For W [N, K] (one row per output channel), columns k = 0 … K−1 in order:
//   q_k = quant(w_k);  e_k = (w_k − q_k) / U[k, k];  w_j −= e_k · U[k, j]  for j > k
// where U is the upper Cholesky factor of H⁻¹ (Uᵀ·U = H⁻¹). Updates are applied lazily per block of 128
// columns: inside the block immediately, to the columns after it once per block (one rank-128 update).
// Group parameters (scale, zero point) for columns [k, k + G) are computed from the current, already
// error-compensated weights when column k starts a group (GPTQ without "static groups").
// Before factoring: input channels that never fired (H[k, k] = 0) get H[k, k] = 1 and zero weights, and
// H += 1% of its mean diagonal ("percdamp"), which keeps the factorization well conditioned.
//
// U without forming H⁻¹: with P the order-reversing permutation, P·H·P = L·Lᵀ (ordinary Cholesky) gives
// H = V·Vᵀ with V = P·L·P upper triangular, so H⁻¹ = V⁻ᵀ·V⁻¹ and U = V⁻¹ (a triangular inverse).
// Cost: K³/3 (Cholesky) + K³/6 (inverse) + N·K² (the updates), in f64 on the host.

import { ArgumentError } from '../errors.js';
import { packInt4 } from '../backend/cpu/quant-math.js';
import { int4GroupParams, int4QuantizeValue } from '../backend/cpu/quant-math.js';
import type { Int4HostWeight } from './weights.js';

export interface GptqOptions {
  readonly groupSize: number;
  /** Fraction of the mean diagonal added to H (default 0.01). */
  readonly dampPercent?: number;
  /** Columns per lazy-update block (default 128). */
  readonly blockSize?: number;
  /**
   * Act-order (AutoGPTQ's desc_act): the input channels quantized in order of decreasing H[k, k] — the
   * ones with the most energy first, while the most unquantized columns remain to absorb their error —
   * and grouped in that order. The result stores its columns in that order (Int4HostWeight.inputOrder);
   * its product gathers its inputs to match.
   */
  readonly actOrder?: boolean;
}

/** Act-order's channel order: by decreasing H[k, k] (ties by index). */
export function actOrder(diagonal: (k: number) => number, K: number): Int32Array {
  return Int32Array.from(Array.from({ length: K }, (_, k) => k).sort((a, b) => diagonal(b) - diagonal(a) || a - b));
}

/** W [N, K] (n-major) and H [K, K] with their input channels taken in `order`: new arrays. */
export function permuteInputs<T extends Float32Array | Float64Array>(W: T, H: T, N: number, K: number, order: Int32Array): { W: T; H: T } {
  const make = (n: number) => new (W.constructor as { new(n: number): T })(n);
  const Wp = make(N * K), Hp = make(K * K);
  for (let n = 0; n < N; n++) for (let j = 0; j < K; j++) Wp[n * K + j] = W[n * K + order[j]!]!;
  for (let i = 0; i < K; i++) for (let j = 0; j < K; j++) Hp[i * K + j] = H[order[i]! * K + order[j]!]!;
  return { W: Wp, H: Hp };
}

/** Upper-triangular U with Uᵀ·U = H⁻¹ for symmetric positive definite H [K, K] (f64, row-major). */
export function inverseCholeskyUpper(H: Float64Array, K: number): Float64Array {
  // L = chol(P·H·P): (P·H·P)[i][j] = H[K−1−i][K−1−j].
  const L = new Float64Array(K * K);
  for (let i = 0; i < K; i++) {
    for (let j = 0; j <= i; j++) {
      let sum = H[(K - 1 - i) * K + (K - 1 - j)]!;
      const ri = i * K, rj = j * K;
      for (let p = 0; p < j; p++) sum -= L[ri + p]! * L[rj + p]!;
      if (i === j) {
        if (!(sum > 0)) throw new ArgumentError(`GPTQ: the Hessian is not positive definite at column ${K - 1 - i} (pivot ${sum}); use more calibration data or more damping`);
        L[ri + i] = Math.sqrt(sum);
      } else {
        L[ri + j] = sum / L[rj + j]!;
      }
    }
  }
  // V = P·L·P is upper triangular: V[a][b] = L[K−1−a][K−1−b]. U = V⁻¹, by back substitution per column.
  const V = (a: number, b: number) => L[(K - 1 - a) * K + (K - 1 - b)]!;
  const U = new Float64Array(K * K);
  for (let c = K - 1; c >= 0; c--) {
    U[c * K + c] = 1 / V(c, c);
    for (let r = c - 1; r >= 0; r--) {
      let sum = 0;
      for (let p = r + 1; p <= c; p++) sum += V(r, p) * U[p * K + c]!;
      U[r * K + c] = -sum / V(r, r);
    }
  }
  return U;
}

/**
 * GPTQ of weight [N, K] (n-major, f64 — modified in place, unless act-order permutes a copy) with Hessian H
 * [K, K] (likewise).
 */
export function gptqQuantize(W: Float64Array, N: number, K: number, H: Float64Array, options: GptqOptions): Int4HostWeight {
  if (options.actOrder) {
    const order = actOrder((k) => H[k * K + k]!, K);
    const permuted = permuteInputs(W, H, N, K, order);
    return { ...gptqQuantize(permuted.W, N, K, permuted.H, { ...options, actOrder: false }), inputOrder: order };
  }
  const G = options.groupSize;
  if (!(Number.isInteger(G) && G >= 32 && G % 32 === 0 && K % G === 0)) throw new ArgumentError(`GPTQ: group size ${G} must be a multiple of 32 dividing K = ${K}`);
  if (W.length !== N * K || H.length !== K * K) throw new ArgumentError(`GPTQ: weight has ${W.length} values (expected ${N}×${K}) and Hessian ${H.length} (expected ${K}×${K})`);
  const damp = options.dampPercent ?? 0.01, B = options.blockSize ?? 128;

  let diagonal = 0;
  for (let k = 0; k < K; k++) {
    if (H[k * K + k] === 0) {
      H[k * K + k] = 1;
      for (let n = 0; n < N; n++) W[n * K + k] = 0;
    }
    diagonal += H[k * K + k]!;
  }
  const add = damp * (diagonal / K);
  for (let k = 0; k < K; k++) H[k * K + k]! += add;
  const U = inverseCholeskyUpper(H, K);

  const groups = K / G;
  const q = new Uint8Array(N * K), scales = new Float32Array(N * groups), zeros = new Uint8Array(N * groups);
  const params = Array.from({ length: N }, () => ({ scale: 1, zero: 0 }));
  for (let b0 = 0; b0 < K; b0 += B) {
    const b1 = Math.min(b0 + B, K), width = b1 - b0;
    const err = new Float64Array(N * width);
    for (let k = b0; k < b1; k++) {
      if (k % G === 0) {
        const g = k / G;
        for (let n = 0; n < N; n++) {
          const p = int4GroupParams(W.subarray(n * K + k, n * K + k + G), 0, G);
          params[n] = p;
          scales[n * groups + g] = p.scale;
          zeros[n * groups + g] = p.zero;
        }
      }
      const d = U[k * K + k]!;
      for (let n = 0; n < N; n++) {
        const row = n * K, p = params[n]!;
        // The weight in f32, as the backend quantizer sees it, so that the packed result is what int4Linear computes.
        const w = Math.fround(W[row + k]!);
        const qv = int4QuantizeValue(w, p);
        q[row + k] = qv;
        const e = (W[row + k]! - p.scale * (qv - p.zero)) / d;
        err[n * width + (k - b0)] = e;
        for (let j = k + 1; j < b1; j++) W[row + j]! -= e * U[k * K + j]!;
      }
    }
    if (b1 < K) {
      for (let n = 0; n < N; n++) {
        const row = n * K, erow = n * width;
        for (let i = 0; i < width; i++) {
          const e = err[erow + i]!;
          if (e === 0) continue;
          const urow = (b0 + i) * K;
          for (let j = b1; j < K; j++) W[row + j]! -= e * U[urow + j]!;
        }
      }
    }
  }
  return { kind: 'int4', inFeatures: K, outFeatures: N, groupSize: G, qweight: packInt4(q, N, K), scales, zeros };
}
