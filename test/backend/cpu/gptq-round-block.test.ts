// gptqRoundBlock on the CPU reference: with U the identity it is round-to-nearest (quant-math.ts's
// quantizeInt4) and its errors are the rounding residuals; with a general U it follows an independent
// f64 transcription of GPTQ's column loop; argument checks name the tensor or the group size.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { int4GroupParams, int4QuantizeValue, quantizeInt4 } from '../../../src/backend/cpu/quant-math.js';
import { Rng } from '../../../src/testing/random.js';

const b = new CpuBackend();

function run(W: Float32Array, U: Float32Array, width: number, N: number, G: number) {
  const weights = b.fromArray(W, [width, N], 'f32');
  const out = { q: b.empty([N, width], 'u8'), scales: b.empty([N, width / G], 'f32'), zeros: b.empty([N, width / G], 'u8'), errors: b.empty([width, N], 'f32') };
  b.gptqRoundBlock({ weights, u: b.fromArray(U, [width, width], 'f32'), groupSize: G, ...out });
  return {
    weights: b.download(weights) as Float32Array, q: b.download(out.q) as Uint8Array, scales: b.download(out.scales) as Float32Array,
    zeros: b.download(out.zeros) as Uint8Array, errors: b.download(out.errors) as Float32Array,
  };
}

/** Wᵀ [width, N] of a weight [N, width]. */
function transposed(W: Float32Array, N: number, width: number): Float32Array {
  const t = new Float32Array(width * N);
  for (let n = 0; n < N; n++) for (let i = 0; i < width; i++) t[i * N + n] = W[n * width + i]!;
  return t;
}

test('gptqRoundBlock with U = I is round-to-nearest, its errors the rounding residuals', () => {
  const rng = new Rng(5), N = 13, width = 64, G = 32;
  const W = rng.floats(N * width, 0.05);
  const U = new Float32Array(width * width);
  for (let i = 0; i < width; i++) U[i * width + i] = 1;
  const got = run(transposed(W, N, width), U, width, N, G);
  const rtn = quantizeInt4(W, N, width, G);
  assert.deepEqual(Array.from(got.q), Array.from(rtn.q));
  assert.deepEqual(Array.from(got.scales), Array.from(rtn.scales));
  assert.deepEqual(Array.from(got.zeros), Array.from(rtn.zeros));
  for (let n = 0; n < N; n++) {
    for (let i = 0; i < width; i++) {
      const g = n * (width / G) + Math.floor(i / G);
      const residual = W[n * width + i]! - rtn.scales[g]! * (rtn.q[n * width + i]! - rtn.zeros[g]!);
      assert.ok(Math.abs(got.errors[i * N + n]! - residual) <= 1e-7, `row ${n} column ${i}`);
    }
  }
});

test('gptqRoundBlock feeds each column\'s error forward through U (against an f64 transcription of GPTQ\'s loop)', () => {
  const rng = new Rng(11), N = 9, width = 96, G = 32;
  const W = rng.floats(N * width, 0.05);
  const U = rng.floats(width * width, 0.05);
  for (let i = 0; i < width; i++) {
    for (let j = 0; j < i; j++) U[i * width + j] = 0;
    U[i * width + i] = 0.5 + rng.next();
  }
  const got = run(transposed(W, N, width), U, width, N, G);
  let same = 0, maxError = 0;
  for (let n = 0; n < N; n++) {
    const row = Float64Array.from(W.subarray(n * width, (n + 1) * width));
    let p = { scale: 1, zero: 0 };
    for (let i = 0; i < width; i++) {
      if (i % G === 0) p = int4GroupParams(Float32Array.from(row), i, G);
      const qv = int4QuantizeValue(Math.fround(row[i]!), p);
      if (qv === got.q[n * width + i]) same++;
      const e = (row[i]! - p.scale * (qv - p.zero)) / U[i * width + i]!;
      maxError = Math.max(maxError, Math.abs(e - got.errors[i * N + n]!));
      for (let j = i + 1; j < width; j++) row[j]! -= e * U[i * width + j]!;
    }
  }
  assert.ok(same >= 0.99 * N * width, `${same} of ${N * width} values as the f64 loop's`);
  assert.ok(maxError < 1e-3, `errors within ${maxError}`);
  // The feed-forward changed the later columns: not plain round-to-nearest.
  const rtn = quantizeInt4(W, N, width, G);
  assert.ok(got.q.some((v, i) => v !== rtn.q[i]), 'some values differ from round-to-nearest');
  // The block is left as the loop leaves it: column i's value after columns < i fed it their errors.
  for (let n = 0; n < N; n++) assert.equal(got.weights[0 * N + n], W[n * width]!, 'column 0 takes no update');
});

test('gptqRoundBlock rejects mismatched shapes, dtypes, a group size not dividing the block and a non-positive pivot', () => {
  const width = 64, N = 4;
  const args = () => ({
    weights: b.empty([width, N], 'f32'), u: b.fromArray(Float32Array.from({ length: width * width }, (_, i) => (i % (width + 1) === 0 ? 1 : 0)), [width, width], 'f32'), groupSize: 32,
    q: b.empty([N, width], 'u8'), scales: b.empty([N, 2], 'f32'), zeros: b.empty([N, 2], 'u8'), errors: b.empty([width, N], 'f32'),
  });
  assert.doesNotThrow(() => b.gptqRoundBlock(args()));
  assert.throws(() => b.gptqRoundBlock({ ...args(), q: b.empty([N, width], 'i32') }), /gptqRoundBlock.*'q'/);
  assert.throws(() => b.gptqRoundBlock({ ...args(), errors: b.empty([N, width], 'f32') }), /gptqRoundBlock.*'errors'/);
  assert.throws(() => b.gptqRoundBlock({ ...args(), u: b.empty([width, 32], 'f32') }), /gptqRoundBlock.*'u'/);
  assert.throws(() => b.gptqRoundBlock({ ...args(), groupSize: 16 }), /gptqRoundBlock: groupSize 16 times the 2 groups of scales is not the block's 64 columns/);
  const bad = args();
  b.upload(bad.u, new Float32Array(width * width));
  assert.throws(() => b.gptqRoundBlock(bad), /gptqRoundBlock: U\[0\]\[0\] = 0 must be positive/);
});
