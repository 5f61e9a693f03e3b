// Activations and their derivatives in float64, matching device-lib.ts:
//   relu(x)      = max(x, 0),                       relu'(x) = 1 if x > 0 else 0
//   gelu(x)      = x·Φ(x) = ½x(1 + erf(x/√2)),      gelu'(x) = Φ(x) + x·φ(x)
//   gelu_tanh(x) = ½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³)   (GPT-2's "gelu_new")
//   gelu_tanh'(x) = ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²), t = tanh(u)
//   silu(x)      = x·σ(x),                           silu'(x) = σ(x)·(1 + x·(1 − σ(x)))

import type { Activation } from '../backend.js';

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
const GELU_TANH_CUBIC = 0.044715;

/**
 * erf(x) to float64 accuracy. JavaScript has no Math.erf. Uses the series with positive terms
 * erf(x) = 2/√π · e^(−x²) · Σ_n 2ⁿ x^(2n+1) / (1·3·…·(2n+1)), which has no cancellation; beyond
 * |x| = 6, erf is ±1 to within 2e-17.
 */
export function erf(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const ax = Math.abs(x);
  if (ax >= 6) return Math.sign(x);
  let term = ax;
  let sum = ax;
  for (let n = 1; term > sum * 1e-17; n++) {
    term *= (2 * ax * ax) / (2 * n + 1);
    sum += term;
  }
  return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * Math.exp(-ax * ax) * sum;
}

export function relu(x: number): number { return x > 0 ? x : 0; }
export function reluGrad(x: number): number { return x > 0 ? 1 : 0; }

export function geluErf(x: number): number { return 0.5 * x * (1 + erf(x * Math.SQRT1_2)); }
export function geluErfGrad(x: number): number {
  return 0.5 * (1 + erf(x * Math.SQRT1_2)) + x * INV_SQRT_2PI * Math.exp(-0.5 * x * x);
}

export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x)));
}
export function geluTanhGrad(x: number): number {
  const t = Math.tanh(SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x));
  const du = SQRT_2_OVER_PI * (1 + 3 * GELU_TANH_CUBIC * x * x);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
}

function sigmoid(x: number): number { return 1 / (1 + Math.exp(-x)); }
export function silu(x: number): number { return x * sigmoid(x); }
export function siluGrad(x: number): number {
  const s = sigmoid(x);
  return s * (1 + x * (1 - s));
}

export function activationFunction(activation: Activation): (x: number) => number {
  switch (activation) {
    case 'relu': return relu;
    case 'gelu': return geluErf;
    case 'gelu_tanh': return geluTanh;
    case 'silu': return silu;
  }
}

export function activationGradient(activation: Activation): (x: number) => number {
  switch (activation) {
    case 'relu': return reluGrad;
    case 'gelu': return geluErfGrad;
    case 'gelu_tanh': return geluTanhGrad;
    case 'silu': return siluGrad;
  }
}
