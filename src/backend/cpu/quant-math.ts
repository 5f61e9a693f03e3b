// The scalar arithmetic of quantization, exactly as the GPU does it (f32 operations, IEEE rounding),
// so that CPU and GPU produce the same integers and scales bit for bit. Used by the CPU backend's
// quantized ops (quant.ts) and by the host-side quantizers in src/quant/ (GPTQ, AWQ's clip search).
//
// f32 exactness in JavaScript: a double result of +, −, ×, ÷ on f32 operands, rounded once with
// Math.fround, equals the correctly rounded f32 operation (53 ≥ 2·24 + 2 bits, so the double rounding
// is innocuous) — the same value as CUDA's __fdiv_rn / __fmul_rn.
//
// INT4 layout (backend.ts, Int4LinearArgs): q [N, K] nibbles packed 8 per i32 along k, low nibble first;
// scales f16 [N, K/G]; zeros u8 [N, K/G]; w = scale·(q − zero).

import { roundToDType } from '../../dtype.js';

/** Round half to even (rintf / __float2int_rn on the GPU). */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

const f32div = (a: number, b: number) => Math.fround(a / b);
const f32mul = (a: number, b: number) => Math.fround(a * b);

/** Smallest group range: keeps the scale a positive (possibly subnormal) f16. */
export const INT4_MIN_RANGE = 1e-5;
export const INT4_MAX_Q = 15;

export interface Int4GroupParams {
  /** The scale as stored (rounded to f16). */
  readonly scale: number;
  readonly zero: number;
}

/** Scale and zero of one group of f32 values (values[start .. start + length)), zero included in the range. */
export function int4GroupParams(values: ArrayLike<number>, start: number, length: number): Int4GroupParams {
  let lo = 0, hi = 0;
  for (let i = start; i < start + length; i++) {
    const v = values[i]!;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  const range = Math.max(Math.fround(hi - lo), Math.fround(INT4_MIN_RANGE));
  const scale = roundToDType(f32div(range, INT4_MAX_Q), 'f16');
  const zero = Math.min(INT4_MAX_Q, Math.max(0, roundHalfEven(f32div(-lo, scale))));
  return { scale, zero };
}

/** q = clamp(rne(v / scale) + zero, 0, 15). */
export function int4QuantizeValue(v: number, p: Int4GroupParams): number {
  return Math.min(INT4_MAX_Q, Math.max(0, roundHalfEven(f32div(v, p.scale)) + p.zero));
}

export interface Int4Quantized {
  /** One nibble value per element, [N, K] row-major. */
  readonly q: Uint8Array;
  /** f16-rounded scales [N, K/G]. */
  readonly scales: Float32Array;
  readonly zeros: Uint8Array;
}

/** Round-to-nearest quantization of weight [N, K] (f32 values) with groups of G along K. */
export function quantizeInt4(weight: ArrayLike<number>, N: number, K: number, G: number): Int4Quantized {
  const groups = K / G;
  const q = new Uint8Array(N * K), scales = new Float32Array(N * groups), zeros = new Uint8Array(N * groups);
  for (let n = 0; n < N; n++) {
    for (let g = 0; g < groups; g++) {
      const start = n * K + g * G;
      const p = int4GroupParams(weight, start, G);
      scales[n * groups + g] = p.scale;
      zeros[n * groups + g] = p.zero;
      for (let i = start; i < start + G; i++) q[i] = int4QuantizeValue(weight[i]!, p);
    }
  }
  return { q, scales, zeros };
}

/** Packs q [N, K] (values 0..15) into [N, K/8] words, nibble k%8 of word k/8 holding q[n, k]. */
export function packInt4(q: ArrayLike<number>, N: number, K: number): Int32Array {
  const words = new Int32Array(N * (K / 8));
  for (let i = 0; i < N * K; i += 8) {
    let w = 0;
    for (let j = 0; j < 8; j++) w |= (q[i + j]! & 0xf) << (4 * j);
    words[i / 8] = w;
  }
  return words;
}

/** The inverse of packInt4. */
export function unpackInt4(words: ArrayLike<number>, N: number, K: number): Uint8Array {
  const q = new Uint8Array(N * K);
  for (let i = 0; i < N * K; i++) q[i] = (words[i >> 3]! >>> (4 * (i & 7))) & 0xf;
  return q;
}

/** w[n, k] = scale·(q − zero) as float64 [N, K] (exact: the product of an f16 and a small integer). */
export function dequantizeInt4(q: ArrayLike<number>, scales: ArrayLike<number>, zeros: ArrayLike<number>, N: number, K: number, G: number): Float64Array {
  const out = new Float64Array(N * K);
  const groups = K / G;
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const g = n * groups + Math.floor(k / G);
      out[n * K + k] = scales[g]! * (q[n * K + k]! - zeros[g]!);
    }
  }
  return out;
}

/** INT8 per-row quantization of values[start .. start + length): the scale, and q written into out. */
export function int8QuantizeRow(values: ArrayLike<number>, start: number, length: number, out: Int8Array, outStart: number): number {
  let amax = 0;
  for (let i = start; i < start + length; i++) amax = Math.max(amax, Math.abs(values[i]!));
  if (amax === 0) {
    out.fill(0, outStart, outStart + length);
    return 0;
  }
  const inv = f32div(127, amax);
  for (let i = 0; i < length; i++) {
    out[outStart + i] = Math.min(127, Math.max(-127, roundHalfEven(f32mul(values[start + i]!, inv))));
  }
  return f32div(amax, 127);
}

/**
 * Symmetric per-output-channel INT8 weights: weight [N, K] → q [N, K] and scale [N] = max|w|/127
 * (a row of zeros gets scale 0), q = clamp(rne(w / scale), −127, 127), scale kept in f32.
 */
export function quantizeInt8Rows(weight: ArrayLike<number>, N: number, K: number): { q: Int8Array; scales: Float32Array } {
  const q = new Int8Array(N * K), scales = new Float32Array(N);
  for (let n = 0; n < N; n++) scales[n] = int8QuantizeRow(weight, n * K, K, q, n * K);
  return { q, scales };
}
