// Quantized weights on the host: our layout, and the conversions from the two INT4 layouts published
// Hugging Face checkpoints use (GPTQ and AWQ). Our layout is the backend's (backend.ts, Int4LinearArgs):
//
//   INT4   qweight i32 [N, K/8]  q[n, k] = nibble k%8 (bits 4·(k%8)) of word [n, k/8]
//          scales  f16 [N, K/G]  zeros u8 [N, K/G]          w[n, k] = scale·(q − zero)
//   INT8   qweight i8  [N, K]    scales f32 [N]             w[n, k] = scale·q        (per output channel)
//
// N = output features, K = input features: one row per output channel ("n-major"), which is what the
// GEMV streams and what cuBLASLt's int8 "TN" GEMM takes without a transposed copy.
//
// GPTQ (AutoGPTQ / GPTQModel, HF "quant_method": "gptq"), for a layer with K inputs and N outputs:
//   qweight i32 [K/8, N]   q[k, n] = nibble k%8 of qweight[k/8, n]          (packed along k)
//   qzeros  i32 [K/G, N/8] z[g, n] = nibble n%8 of qzeros[g, n/8] (+1 in the "gptq" v1 checkpoint
//                          format, which stores zero − 1; "gptq_v2" stores the zero itself)
//   scales  f16 [K/G, N]   g_idx i32 [K]: the group of each k (floor(k/G) unless act-order reordered it)
//   w[k, n] = scale[g, n]·(q[k, n] − z[g, n]),  g = g_idx[k]
// AWQ (AutoAWQ "gemm" version, "quant_method": "awq"):
//   qweight i32 [K, N/8]   packed along n in the order [0, 2, 4, 6, 1, 3, 5, 7]: nibble i of word
//                          [k, n/8] holds column 8·(n/8) + ORDER[i], so column j sits in nibble
//                          REVERSE[j] = [0, 4, 1, 5, 2, 6, 3, 7][j]
//   qzeros  i32 [K/G, N/8] the same packing, zeros stored as is;  scales f16 [K/G, N]
//   w[k, n] = scale[g, n]·(q[k, n] − z[g, n]),  g = floor(k/G)
// Both reduce exactly to ours: the same w = s·(q − z) with integer zero points, only transposed and
// repacked, so importing loses nothing.

import { ArgumentError } from '../errors.js';
import { dequantizeInt4, packInt4 } from '../backend/cpu/quant-math.js';

export interface Int4HostWeight {
  readonly kind: 'int4';
  /** K. */
  readonly inFeatures: number;
  /** N. */
  readonly outFeatures: number;
  readonly groupSize: number;
  /** [N, K/8]. */
  readonly qweight: Int32Array;
  /** [N, K/G], values already rounded to f16. */
  readonly scales: Float32Array;
  /** [N, K/G]. */
  readonly zeros: Uint8Array;
  /**
   * [K], a permutation: column j of the weight multiplies input channel inputOrder[j] (an act-order
   * GPTQ checkpoint's channels sorted by group, so its groups are contiguous); absent: the identity.
   */
  readonly inputOrder?: Int32Array;
}

export interface Int8HostWeight {
  readonly kind: 'int8';
  readonly inFeatures: number;
  readonly outFeatures: number;
  /** [N, K]. */
  readonly qweight: Int8Array;
  /** [N]. */
  readonly scales: Float32Array;
}

export type QuantizedHostWeight = Int4HostWeight | Int8HostWeight;

/** The float weight a quantized one stands for, as [N, K] float64 (n-major). */
export function dequantizeHostWeight(w: QuantizedHostWeight): Float64Array {
  const N = w.outFeatures, K = w.inFeatures;
  if (w.kind === 'int8') {
    const out = new Float64Array(N * K);
    for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) out[n * K + k] = w.scales[n]! * w.qweight[n * K + k]!;
    return out;
  }
  const q = new Uint8Array(N * K);
  for (let i = 0; i < N * K; i++) q[i] = (w.qweight[i >> 3]! >>> (4 * (i & 7))) & 0xf;
  const stored = dequantizeInt4(q, w.scales, w.zeros, N, K, w.groupSize);
  const order = w.inputOrder;
  if (!order) return stored;
  const out = new Float64Array(N * K);
  for (let n = 0; n < N; n++) for (let j = 0; j < K; j++) out[n * K + order[j]!] = stored[n * K + j]!;
  return out;
}

/** Checks a host INT4 weight's array sizes (a corrupt checkpoint must not index out of range). */
export function checkInt4HostWeight(w: Int4HostWeight, what: string): void {
  const { inFeatures: K, outFeatures: N, groupSize: G } = w;
  if (!(Number.isInteger(G) && G >= 32 && G % 32 === 0 && K % G === 0)) {
    throw new ArgumentError(`${what}: group size ${G} must be a multiple of 32 dividing the ${K} input features`);
  }
  const expect = (name: string, actual: number, wanted: number) => {
    if (actual !== wanted) throw new ArgumentError(`${what}: ${name} has ${actual} elements, expected ${wanted} for ${N} outputs × ${K} inputs, group ${G}`);
  };
  expect('qweight', w.qweight.length, N * K / 8);
  expect('scales', w.scales.length, N * K / G);
  expect('zeros', w.zeros.length, N * K / G);
  if (w.inputOrder) {
    expect('input_order', w.inputOrder.length, K);
    const seen = new Uint8Array(K);
    w.inputOrder.forEach((k, j) => {
      if (!(k >= 0 && k < K) || seen[k]) throw new ArgumentError(`${what}: input_order[${j}] = ${k} is not part of a permutation of the ${K} inputs`);
      seen[k] = 1;
    });
  }
}

// --- layout helpers -------------------------------------------------------------------------------

/** [rows, cols] → [cols, rows]. */
export function transpose<T extends Float32Array | Float64Array>(values: T, rows: number, cols: number): T {
  const out = new (values.constructor as { new(n: number): T })(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = values[r * cols + c]!;
  return out;
}

// --- Hugging Face GPTQ and AWQ ---------------------------------------------------------------------

/** GPTQ's checkpoint_format: "gptq" (v1) stores zero − 1, "gptq_v2" the zero point itself. */
export type GptqCheckpointFormat = 'gptq' | 'gptq_v2';

export interface GptqTensors {
  /** i32 [K/8, N]. */
  readonly qweight: Int32Array;
  /** i32 [K/G, N/8]. */
  readonly qzeros: Int32Array;
  /** f16 values [K/G, N]. */
  readonly scales: Float32Array;
  /** i32 [K], optional. */
  readonly gIdx?: Int32Array;
}

/**
 * The input order of a GPTQ layer: undefined when g_idx is absent or sequential (k/G); for an act-order
 * (desc_act) checkpoint, whose g_idx assigns the channels to groups out of order, the channels sorted by
 * group (stable), so that each group's G channels are contiguous — every group must hold exactly G.
 */
function gptqInputOrder(gIdx: Int32Array | undefined, K: number, G: number, what: string): Int32Array | undefined {
  if (!gIdx) return undefined;
  if (gIdx.length !== K) throw new ArgumentError(`${what}: g_idx has ${gIdx.length} entries, expected ${K}`);
  if (gIdx.every((g, k) => g === Math.floor(k / G))) return undefined;
  const groups = K / G, members = new Int32Array(groups);
  gIdx.forEach((g, k) => {
    if (!(Number.isInteger(g) && g >= 0 && g < groups)) throw new ArgumentError(`${what}: g_idx[${k}] = ${g} is not a group of ${groups}`);
    members[g]!++;
  });
  const uneven = members.findIndex((m) => m !== G);
  if (uneven >= 0) throw new ArgumentError(`${what}: g_idx puts ${members[uneven]} channels in group ${uneven}, not ${G}; such act-order checkpoints are not supported`);
  return Int32Array.from(Array.from({ length: K }, (_, k) => k).sort((a, b) => gIdx[a]! - gIdx[b]! || a - b));
}

/**
 * A GPTQ layer of K inputs and N outputs in our layout. An act-order (desc_act) checkpoint's columns are
 * stored sorted by group, with inputOrder saying which input channel each column multiplies.
 */
export function fromGptq(t: GptqTensors, K: number, N: number, G: number, format: GptqCheckpointFormat, what: string): Int4HostWeight {
  checkShapes(what, K, N, G, [['qweight', t.qweight.length, (K / 8) * N], ['qzeros', t.qzeros.length, (K / G) * (N / 8)], ['scales', t.scales.length, (K / G) * N]]);
  const order = gptqInputOrder(t.gIdx, K, G, what);
  const groups = K / G, offset = format === 'gptq' ? 1 : 0;
  const q = new Uint8Array(N * K);
  for (let j = 0; j < K; j++) {
    const k = order ? order[j]! : j, row = (k >> 3) * N, shift = 4 * (k & 7);
    for (let n = 0; n < N; n++) q[n * K + j] = (t.qweight[row + n]! >>> shift) & 0xf;
  }
  const scales = new Float32Array(N * groups), zeros = new Uint8Array(N * groups);
  for (let g = 0; g < groups; g++) {
    for (let n = 0; n < N; n++) {
      scales[n * groups + g] = t.scales[g * N + n]!;
      zeros[n * groups + g] = ((t.qzeros[g * (N / 8) + (n >> 3)]! >>> (4 * (n & 7))) & 0xf) + offset;
    }
  }
  return { kind: 'int4', inFeatures: K, outFeatures: N, groupSize: G, qweight: packInt4(q, N, K), scales, zeros, ...(order ? { inputOrder: order } : {}) };
}

/** Nibble holding column j of a packed group of 8 (AutoAWQ's AWQ_REVERSE_ORDER). */
export const AWQ_NIBBLE_OF_COLUMN = [0, 4, 1, 5, 2, 6, 3, 7] as const;

export interface AwqTensors {
  /** i32 [K, N/8]. */
  readonly qweight: Int32Array;
  /** i32 [K/G, N/8]. */
  readonly qzeros: Int32Array;
  /** f16 values [K/G, N]. */
  readonly scales: Float32Array;
}

/** An AWQ ("gemm" version) layer of K inputs and N outputs in our layout. */
export function fromAwq(t: AwqTensors, K: number, N: number, G: number, what: string): Int4HostWeight {
  checkShapes(what, K, N, G, [['qweight', t.qweight.length, K * (N / 8)], ['qzeros', t.qzeros.length, (K / G) * (N / 8)], ['scales', t.scales.length, (K / G) * N]]);
  const groups = K / G, words = N / 8;
  const nibble = (packed: Int32Array, row: number, n: number) => (packed[row * words + (n >> 3)]! >>> (4 * AWQ_NIBBLE_OF_COLUMN[n & 7]!)) & 0xf;
  const q = new Uint8Array(N * K);
  for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) q[n * K + k] = nibble(t.qweight, k, n);
  const scales = new Float32Array(N * groups), zeros = new Uint8Array(N * groups);
  for (let g = 0; g < groups; g++) {
    for (let n = 0; n < N; n++) {
      scales[n * groups + g] = t.scales[g * N + n]!;
      zeros[n * groups + g] = nibble(t.qzeros, g, n);
    }
  }
  return { kind: 'int4', inFeatures: K, outFeatures: N, groupSize: G, qweight: packInt4(q, N, K), scales, zeros };
}

function checkShapes(what: string, K: number, N: number, G: number, arrays: readonly [string, number, number][]): void {
  if (!(K % 8 === 0 && N % 8 === 0 && Number.isInteger(G) && G >= 32 && G % 32 === 0 && K % G === 0)) {
    throw new ArgumentError(`${what}: ${K} inputs × ${N} outputs with group size ${G} cannot be read (K and N multiples of 8, G a multiple of 32 dividing K)`);
  }
  for (const [name, actual, expected] of arrays) {
    if (actual !== expected) throw new ArgumentError(`${what}: '${name}' has ${actual} elements, expected ${expected} for ${K} inputs × ${N} outputs, group size ${G}`);
  }
}
