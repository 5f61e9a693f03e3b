// int4ClipGroups on the CPU reference: each group takes the ratio of least weighted error (against a
// direct evaluation of every ratio), ratio 1 alone leaves the weights as they are, the first of equal
// errors wins, and bad arguments are named.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { int4GroupParams, int4QuantizeValue } from '../../../src/backend/cpu/quant-math.js';
import { Rng } from '../../../src/testing/random.js';

const b = new CpuBackend();
const RATIOS = Array.from({ length: 11 }, (_, i) => Math.fround(1 - i * 0.05));

function clip(W: Float32Array, N: number, K: number, G: number, ms: Float32Array, ratios: readonly number[] = RATIOS): Float32Array {
  const weight = b.fromArray(W, [N, K], 'f32');
  b.int4ClipGroups({ weight, meanSquare: b.fromArray(ms, [K], 'f32'), ratios: b.fromArray(ratios, [ratios.length], 'f32'), groupSize: G });
  return b.download(weight) as Float32Array;
}

/** Σ ms·(w − ŵ)² of one group of `original` rounded after clamping to `clamped`'s values. */
function groupError(original: ArrayLike<number>, clamped: Float32Array, ms: ArrayLike<number>): number {
  const p = int4GroupParams(clamped, 0, clamped.length);
  let e = 0;
  for (let i = 0; i < clamped.length; i++) e += ms[i]! * (original[i]! - p.scale * (int4QuantizeValue(clamped[i]!, p) - p.zero)) ** 2;
  return e;
}

test('int4ClipGroups clamps each group to the ratio of least weighted error', () => {
  const rng = new Rng(3), N = 5, K = 256, G = 64;
  const W = rng.floats(N * K, 0.02);
  for (let n = 0; n < N; n++) W[n * K + 3 + 70 * (n % 3)] = 0.3 * (n % 2 ? -1 : 1);  // outliers: clipping pays
  const ms = Float32Array.from({ length: K }, () => 0.1 + rng.next());
  const got = clip(W, N, K, G, ms);
  let clamped = 0;
  for (let n = 0; n < N; n++) {
    for (let g0 = 0; g0 < K; g0 += G) {
      const original = W.subarray(n * K + g0, n * K + g0 + G), result = got.subarray(n * K + g0, n * K + g0 + G);
      const errors = RATIOS.map((r) => {
        let lo = 0, hi = 0;
        for (const v of original) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
        const a = Math.fround(lo * r), c = Math.fround(hi * r);
        return groupError(original, Float32Array.from(original, (v) => Math.min(c, Math.max(a, v))), ms.subarray(g0, g0 + G));
      });
      const best = errors.indexOf(Math.min(...errors));
      assert.ok(Math.abs(groupError(original, result, ms.subarray(g0, g0 + G)) - errors[best]!) <= 1e-12 * errors[best]!, `row ${n} group ${g0 / G}: the least error`);
      if (best > 0) clamped++;
    }
  }
  assert.ok(clamped > 0, 'some group clamped');
});

test('int4ClipGroups with the ratio 1 alone leaves the weights; of equal errors the first ratio wins', () => {
  const rng = new Rng(4), N = 3, K = 64, G = 32;
  const W = rng.floats(N * K, 0.05), ms = Float32Array.from({ length: K }, () => 1);
  assert.deepEqual(Array.from(clip(W, N, K, G, ms, [1])), Array.from(W));
  // Zero weights: every ratio's error is 0, so 1 (first) keeps them; a silent input (ms 0) likewise.
  const zeros = new Float32Array(N * K);
  assert.deepEqual(Array.from(clip(zeros, N, K, G, ms, [1, 0.5])), Array.from(zeros));
  assert.deepEqual(Array.from(clip(W, N, K, G, new Float32Array(K), [1, 0.5])), Array.from(W));
});

test('int4ClipGroups names bad arguments', () => {
  const args = (K: number, G: number) => ({ weight: b.empty([2, K], 'f32'), meanSquare: b.empty([K], 'f32'), ratios: b.fromArray([1, 0.9], [2], 'f32'), groupSize: G });
  assert.throws(() => b.int4ClipGroups(args(96, 64)), /int4ClipGroups: groupSize 64 must be a multiple of 32 up to 256 dividing K = 96/);
  assert.throws(() => b.int4ClipGroups(args(512, 512)), /int4ClipGroups: groupSize 512 must be a multiple of 32 up to 256/);
  assert.throws(() => b.int4ClipGroups({ ...args(64, 32), meanSquare: b.empty([32], 'f32') }), /int4ClipGroups.*'meanSquare'/);
  assert.throws(() => b.int4ClipGroups({ ...args(64, 32), weight: b.empty([2, 64], 'bf16') }), /int4ClipGroups.*'weight'/);
  assert.throws(() => b.int4ClipGroups({ ...args(64, 32), ratios: b.empty([0], 'f32') }), /int4ClipGroups: 'ratios' is empty/);
  assert.throws(() => b.int4ClipGroups({ ...args(64, 32), ratios: b.fromArray([1, 1.5], [2], 'f32') }), /int4ClipGroups: ratios\[1\] = 1.5 is outside \(0, 1\]/);
});
