// Importing Hugging Face GPTQ and AWQ layouts: tensors packed here the way AutoGPTQ and AutoAWQ pack
// them (written from their published pack() code, independently of src/quant/weights.ts) must unpack
// to the same integers, scales and zeros in our layout.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { unpackInt4 } from '../../src/backend/cpu/quant-math.js';
import { dequantizeHostWeight, fromAwq, fromGptq } from '../../src/quant/weights.js';
import { Rng } from '../../src/testing/random.js';

const K = 64, N = 16, G = 32;

/** A random INT4 layer as q [K, N], zeros [K/G, N] and f16-exact scales [K/G, N] (the [in, out] orientation HF uses). */
function randomLayer(seed: number) {
  const rng = new Rng(seed);
  const q = Array.from({ length: K * N }, () => Math.floor(rng.next() * 16));
  const z = Array.from({ length: (K / G) * N }, () => Math.floor(rng.next() * 16));
  const s = Array.from({ length: (K / G) * N }, () => (1 + Math.floor(rng.next() * 64)) / 256);
  return { q, z, s };
}

/** AutoGPTQ: qweight[k/8, n] |= q[k, n] << 4·(k % 8); qzeros[g, n/8] |= (z − 1) << 4·(n % 8) in the v1 format. */
function packGptq(q: number[], z: number[], v1: boolean) {
  const qweight = new Int32Array((K / 8) * N), qzeros = new Int32Array((K / G) * (N / 8));
  for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) qweight[(k >> 3) * N + n]! |= q[k * N + n]! << (4 * (k & 7));
  for (let g = 0; g < K / G; g++) for (let n = 0; n < N; n++) qzeros[g * (N / 8) + (n >> 3)]! |= ((z[g * N + n]! - (v1 ? 1 : 0)) & 0xf) << (4 * (n & 7));
  return { qweight, qzeros };
}

/** AutoAWQ (WQLinear_GEMM.from_linear): for each packed column, nibble i holds column 8·col + order_map[i]. */
function packAwq(values: number[], rows: number) {
  const orderMap = [0, 2, 4, 6, 1, 3, 5, 7];
  const out = new Int32Array(rows * (N / 8));
  for (let r = 0; r < rows; r++) {
    for (let col = 0; col < N / 8; col++) {
      for (let i = 0; i < 8; i++) out[r * (N / 8) + col]! |= values[r * N + col * 8 + orderMap[i]!]! << (4 * i);
    }
  }
  return out;
}

function expectOurs(w: ReturnType<typeof fromGptq>, layer: ReturnType<typeof randomLayer>): void {
  const q = unpackInt4(w.qweight, N, K);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) assert.equal(q[n * K + k], layer.q[k * N + n], `q[${n}, ${k}]`);
    for (let g = 0; g < K / G; g++) {
      assert.equal(w.zeros[n * (K / G) + g], layer.z[g * N + n], `zero[${n}, ${g}]`);
      assert.equal(w.scales[n * (K / G) + g], layer.s[g * N + n], `scale[${n}, ${g}]`);
    }
  }
  const dense = dequantizeHostWeight(w);
  assert.equal(dense[3 * K + 40], layer.s[1 * N + 3]! * (layer.q[40 * N + 3]! - layer.z[1 * N + 3]!));
}

test('GPTQ v1 (zero − 1 stored) and v2 checkpoints convert to our layout exactly', () => {
  const layer = randomLayer(1);
  // v1 cannot store a zero of 0 (it would be −1 and spill into the next nibble); AutoGPTQ's symmetric default is 8.
  const v1Layer = { ...layer, z: layer.z.map((v) => Math.max(1, v)) };
  const scales = Float32Array.from(layer.s);
  const v1 = packGptq(v1Layer.q, v1Layer.z, true);
  expectOurs(fromGptq({ ...v1, scales: Float32Array.from(v1Layer.s) }, K, N, G, 'gptq', 'test'), v1Layer);
  const v2 = packGptq(layer.q, layer.z, false);
  const gIdx = Int32Array.from({ length: K }, (_, k) => Math.floor(k / G));
  expectOurs(fromGptq({ ...v2, scales, gIdx }, K, N, G, 'gptq_v2', 'test'), layer);
});

test('GPTQ act-order checkpoints (g_idx out of order): the columns sorted by group, the input order kept; every weight as AutoGPTQ dequantizes it', () => {
  const layer = randomLayer(2);
  const packed = packGptq(layer.q, layer.z, false);
  // AutoGPTQ with desc_act: channels quantized in a permuted order, g_idx[k] = (position of k) / G.
  const order = new Rng(5).permutation(K);
  const gIdx = new Int32Array(K);
  order.forEach((k, position) => { gIdx[k] = Math.floor(position / G); });
  const w = fromGptq({ ...packed, scales: Float32Array.from(layer.s), gIdx }, K, N, G, 'gptq_v2', 'layer.0');
  assert.ok(w.inputOrder, 'an input order');
  // Each group's columns are contiguous, in channel order within the group.
  for (let j = 0; j < K; j++) assert.equal(gIdx[w.inputOrder[j]!], Math.floor(j / G), `column ${j}`);
  // AutoGPTQ's dequantization: w[k, n] = scale[g_idx[k], n] · (q[k, n] − zero[g_idx[k], n]).
  const dense = dequantizeHostWeight(w);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const g = gIdx[k]!;
      assert.equal(dense[n * K + k], layer.s[g * N + n]! * (layer.q[k * N + n]! - layer.z[g * N + n]!), `w[${n}, ${k}]`);
    }
  }
  // A sequential g_idx needs no order.
  assert.equal(fromGptq({ ...packed, scales: Float32Array.from(layer.s), gIdx: Int32Array.from({ length: K }, (_, k) => Math.floor(k / G)) }, K, N, G, 'gptq_v2', 'x').inputOrder, undefined);
});

test('GPTQ checkpoints with uneven groups or wrong sizes are refused with the reason', () => {
  const layer = randomLayer(2);
  const packed = packGptq(layer.q, layer.z, false);
  const uneven = Int32Array.from({ length: K }, (_, k) => (k < 40 ? 0 : 1));
  assert.throws(() => fromGptq({ ...packed, scales: Float32Array.from(layer.s), gIdx: uneven }, K, N, G, 'gptq_v2', 'layer.0'), /layer\.0: g_idx puts 40 channels in group 0, not 32/);
  const outside = Int32Array.from({ length: K }, (_, k) => (k === 5 ? 7 : Math.floor(k / G)));
  assert.throws(() => fromGptq({ ...packed, scales: Float32Array.from(layer.s), gIdx: outside }, K, N, G, 'gptq_v2', 'layer.0'), /g_idx\[5\] = 7 is not a group of 2/);
  assert.throws(() => fromGptq({ ...packed, scales: Float32Array.from(layer.s) }, K, N, 48, 'gptq_v2', 'layer.0'), /group size 48/);
  assert.throws(() => fromGptq({ ...packed, qweight: packed.qweight.subarray(1), scales: Float32Array.from(layer.s) }, K, N, G, 'gptq_v2', 'layer.0'), /'qweight' has 127 elements, expected 128/);
});

test('AWQ gemm checkpoints (interleaved nibble order) convert to our layout exactly', () => {
  const layer = randomLayer(3);
  const w = fromAwq({ qweight: packAwq(layer.q, K), qzeros: packAwq(layer.z, K / G), scales: Float32Array.from(layer.s) }, K, N, G, 'test');
  expectOurs(w, layer);
});
