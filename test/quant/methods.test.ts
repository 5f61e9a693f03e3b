// The calibrated INT4 methods on synthetic layers: GPTQ's factorization and its error against
// round-to-nearest, AWQ's scale search (through the CPU backend's real ops) and clip search, and
// SmoothQuant's factors.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { dequantizeInt4, quantizeInt4 } from '../../src/backend/cpu/quant-math.js';
import { clipWeights, searchAwqScales } from '../../src/quant/awq.js';
import { gptqQuantize, inverseCholeskyUpper } from '../../src/quant/gptq.js';
import { gptqQuantizeOnBackend } from '../../src/quant/gptq-device.js';
import { smoothingFactors } from '../../src/quant/smoothquant.js';
import { dequantizeHostWeight } from '../../src/quant/weights.js';
import { Rng } from '../../src/testing/random.js';

/** Calibration inputs with correlated channels and a few large ones (as real activations have). */
function activations(rng: Rng, T: number, K: number): Float32Array {
  const X = new Float32Array(T * K);
  for (let t = 0; t < T; t++) {
    const shared = rng.normal();
    for (let k = 0; k < K; k++) X[t * K + k] = (k % 16 === 3 ? 8 : 1) * (0.7 * rng.normal() + 0.5 * shared);
  }
  return X;
}

function gram(X: Float32Array, T: number, K: number): Float64Array {
  const H = new Float64Array(K * K);
  for (let t = 0; t < T; t++) for (let i = 0; i < K; i++) for (let j = 0; j < K; j++) H[i * K + j]! += X[t * K + i]! * X[t * K + j]!;
  return H;
}

/** ‖X·(W − Ŵ)ᵀ‖² / ‖X·Wᵀ‖². */
function outputError(X: Float32Array, T: number, W: ArrayLike<number>, What: ArrayLike<number>, N: number, K: number): number {
  let err = 0, ref = 0;
  for (let t = 0; t < T; t++) {
    for (let n = 0; n < N; n++) {
      let d = 0, y = 0;
      for (let k = 0; k < K; k++) { d += X[t * K + k]! * (W[n * K + k]! - What[n * K + k]!); y += X[t * K + k]! * W[n * K + k]!; }
      err += d * d; ref += y * y;
    }
  }
  return err / ref;
}

test('inverseCholeskyUpper gives the upper factor of H⁻¹ (Uᵀ·U·H = I)', () => {
  const rng = new Rng(11), K = 24, T = 60;
  const H = gram(activations(rng, T, K), T, K);
  for (let k = 0; k < K; k++) H[k * K + k]! += 0.1;
  const U = inverseCholeskyUpper(H, K);
  for (let i = 0; i < K; i++) {
    for (let j = 0; j < i; j++) assert.equal(U[i * K + j], 0, 'U is upper triangular');
    assert.ok(U[i * K + i]! > 0);
  }
  for (let i = 0; i < K; i++) {
    for (let j = 0; j < K; j++) {
      let v = 0;
      for (let a = 0; a < K; a++) {
        let utu = 0;
        for (let b = 0; b < K; b++) utu += U[b * K + i]! * U[b * K + a]!;
        v += utu * H[a * K + j]!;
      }
      assert.ok(Math.abs(v - (i === j ? 1 : 0)) < 1e-8, `(UᵀU·H)[${i}, ${j}] = ${v}`);
    }
  }
});

test('GPTQ has a smaller output error than round-to-nearest on correlated inputs', () => {
  const rng = new Rng(12), K = 64, N = 24, T = 256, G = 32;
  const X = activations(rng, T, K);
  const W = Float64Array.from(rng.floats(N * K, 0.05));
  const rtn = quantizeInt4(W, N, K, G);
  const rtnError = outputError(X, T, W, dequantizeInt4(rtn.q, rtn.scales, rtn.zeros, N, K, G), N, K);
  const gptq = gptqQuantize(Float64Array.from(W), N, K, gram(X, T, K), { groupSize: G, blockSize: 16 });
  const gptqError = outputError(X, T, W, dequantizeHostWeight(gptq), N, K);
  assert.ok(gptqError < 0.8 * rtnError, `GPTQ error ${gptqError.toExponential(3)} vs RTN ${rtnError.toExponential(3)}`);
});

test('GPTQ zeroes the weights of input channels that never fire', () => {
  const rng = new Rng(13), K = 32, N = 4, T = 64;
  const X = activations(rng, T, K);
  for (let t = 0; t < T; t++) X[t * K + 5] = 0;
  const w = gptqQuantize(Float64Array.from(rng.floats(N * K, 0.05)), N, K, gram(X, T, K), { groupSize: 32 });
  const dense = dequantizeHostWeight(w);
  for (let n = 0; n < N; n++) assert.equal(dense[n * K + 5], 0);
});

test('GPTQ with its factorization and updates as backend GEMMs matches the host form', () => {
  // Panels of 32, 64 and 128 columns (K 96, 320, 256), several column blocks, a channel that never fires.
  const backend = new CpuBackend();
  for (const [K, N, G, blockSize] of [[96, 20, 32, 32], [320, 12, 64, 128], [256, 9, 128, 128]] as const) {
    const rng = new Rng(K), T = 2 * K;
    const X = activations(rng, T, K);
    for (let t = 0; t < T; t++) X[t * K + 7] = 0;
    const W = rng.floats(N * K, 0.05);
    const H = gram(X, T, K);
    const host = gptqQuantize(Float64Array.from(W), N, K, Float64Array.from(H), { groupSize: G, blockSize });
    const Hdevice = backend.fromArray(Float32Array.from(H), [K, K], 'f32');
    const device = gptqQuantizeOnBackend(backend, W, N, K, Hdevice, { groupSize: G, blockSize });
    backend.free(Hdevice);
    const a = dequantizeHostWeight(host), b = dequantizeHostWeight(device);
    let same = 0;
    for (let i = 0; i < N * K; i++) if (a[i] === b[i]) same++;
    const hostError = outputError(X, T, W, a, N, K), deviceError = outputError(X, T, W, b, N, K);
    const what = `K ${K}: ${same} of ${N * K} weights equal; output error ${deviceError.toExponential(3)} against ${hostError.toExponential(3)}`;
    // f32 GEMMs against f64 loops: a rounding near a half step may go the other way (and feed forward);
    // on the CPU backend every weight comes out the same.
    assert.ok(same >= 0.995 * N * K, what);
    assert.ok(Math.abs(deviceError / hostError - 1) < 0.01, what);
    for (let n = 0; n < N; n++) assert.equal(b[n * K + 7], 0, `K ${K}: the dead channel's weights are zero`);
  }
});

test('GPTQ with act-order: channels by decreasing H[k, k], the order kept; smaller error than in order on outlier channels (12–38% in four seeds); host and backend forms agree', () => {
  const backend = new CpuBackend(), K = 128, N = 24, T = 256, G = 32;
  const rng = new Rng(31);
  const X = activations(rng, T, K);
  const W = rng.floats(N * K, 0.05);
  const H = gram(X, T, K);
  const plain = gptqQuantize(Float64Array.from(W), N, K, Float64Array.from(H), { groupSize: G });
  const ordered = gptqQuantize(Float64Array.from(W), N, K, Float64Array.from(H), { groupSize: G, actOrder: true });
  assert.ok(ordered.inputOrder, 'an input order');
  for (let j = 1; j < K; j++) assert.ok(H[ordered.inputOrder[j - 1]! * (K + 1)]! >= H[ordered.inputOrder[j]! * (K + 1)]!, `column ${j} by decreasing H[k, k]`);
  const plainError = outputError(X, T, W, dequantizeHostWeight(plain), N, K), orderedError = outputError(X, T, W, dequantizeHostWeight(ordered), N, K);
  assert.ok(orderedError < 0.95 * plainError, `act-order ${orderedError.toExponential(3)} against in order ${plainError.toExponential(3)}`);
  const Hdevice = backend.fromArray(Float32Array.from(H), [K, K], 'f32');
  const device = gptqQuantizeOnBackend(backend, W, N, K, Hdevice, { groupSize: G, actOrder: true });
  backend.free(Hdevice);
  assert.deepEqual(device.inputOrder, ordered.inputOrder);
  const a = dequantizeHostWeight(ordered), b = dequantizeHostWeight(device);
  let same = 0;
  for (let i = 0; i < N * K; i++) if (a[i] === b[i]) same++;
  assert.ok(same >= 0.995 * N * K, `${same} of ${N * K} weights as the host form's`);
});

test('GPTQ on the backend names a Hessian that is not positive definite', () => {
  const backend = new CpuBackend(), K = 32;
  const H = new Float32Array(K * K);
  for (let k = 0; k < K; k++) H[k * K + k] = 1;
  H[3 * K + 3] = -50;  // damping (1% of the mean diagonal) cannot lift it
  const t = backend.fromArray(H, [K, K], 'f32');
  assert.throws(() => gptqQuantizeOnBackend(backend, new Float32Array(K), 1, K, t, { groupSize: 32 }), /GPTQ: the Hessian is not positive definite at column 3/);
  backend.free(t);
});

test('AWQ scale search on the CPU backend beats round-to-nearest when a few channels are large', () => {
  const rng = new Rng(14), K = 64, N = 32, T = 64, G = 64;
  const X = activations(rng, T, K);
  const W = rng.floats(N * K, 0.05);
  const absMean = new Float64Array(K);
  for (let t = 0; t < T; t++) for (let k = 0; k < K; k++) absMean[k]! += Math.abs(X[t * K + k]!) / T;
  const result = searchAwqScales(new CpuBackend(), 'f32', X, T, W, N, K, absMean, { groupSize: G, grid: 10 });
  assert.ok(result.alpha > 0, `α = ${result.alpha}`);
  assert.ok(result.loss < 0.9 * result.rtnLoss, `loss ${result.loss} vs round-to-nearest ${result.rtnLoss}`);
  // The large channels get the larger scales.
  assert.ok(result.scales[3]! > result.scales[4]!);
});

test('clip search shrinks a group around an outlier when it lowers the weighted error', () => {
  const rng = new Rng(15), K = 32, N = 1, G = 32;
  const W = rng.floats(K, 0.02);
  W[7] = 0.5; // an outlier whose input channel is nearly silent
  const meanSquare = new Float64Array(K).fill(1);
  meanSquare[7] = 1e-4;
  const errorOf = (w: Float32Array) => {
    const q = quantizeInt4(w, N, K, G), d = dequantizeInt4(q.q, q.scales, q.zeros, N, K, G);
    let e = 0;
    for (let k = 0; k < K; k++) e += meanSquare[k]! * (W[k]! - d[k]!) ** 2;
    return e;
  };
  const clipped = Float32Array.from(W);
  clipWeights(new CpuBackend(), clipped, N, K, G, meanSquare);
  assert.ok(clipped[7]! < 0.5, 'the outlier is clamped');
  assert.ok(errorOf(clipped) < 0.5 * errorOf(W), `clipped error ${errorOf(clipped)} vs ${errorOf(W)}`);
});

test('SmoothQuant factors balance activation and weight maxima (α = 0.5: max|x|/s = max|w|·s)', () => {
  const K = 3, N = 2;
  const W = [0.5, -1, 2, 0.25, 0.5, -4];
  const s = smoothingFactors([16, 1, 4], W, N, K, 0.5);
  [Math.sqrt(16 / 0.5), 1, 1].forEach((expected, k) => assert.ok(Math.abs(s[k]! - expected) < 1e-12, `s[${k}] = ${s[k]}`));
  for (let k = 0; k < K; k++) assert.ok(Math.abs([16, 1, 4][k]! / s[k]! - [0.5, 1, 4][k]! * s[k]!) < 1e-12);
});
