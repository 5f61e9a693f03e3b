import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { GemmEpilogue } from '../../../src/backend/backend.js';
import { CpuBackend, CpuTensor } from '../../../src/backend/cpu/index.js';
import { roundToDType } from '../../../src/dtype.js';
import { ArgumentError, DTypeError, LayoutError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, numericGradient, randomValues, weightedSum } from './helpers.js';

const backend = new CpuBackend();

/** Row-major (rows, cols) matrix element, read from `values` stored transposed when `transposed`. */
function at(values: readonly number[], rows: number, cols: number, r: number, c: number, transposed: boolean): number {
  return transposed ? values[c * rows + r]! : values[r * cols + c]!;
}

/** The textbook triple loop: alpha·op(A)·op(B) + beta·C. */
function naiveGemm(a: number[], b: number[], c: number[], M: number, N: number, K: number, transA: boolean, transB: boolean, alpha: number, beta: number): number[] {
  const out: number[] = [];
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += at(a, M, K, m, k, transA) * at(b, K, N, k, n, transB);
      out.push(alpha * s + beta * c[m * N + n]!);
    }
  }
  return out;
}

/** GPT-2's tanh GELU, written out independently of the backend. */
const geluTanhReference = (x: number): number => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

describe('gemm', () => {
  const [M, N, K] = [3, 4, 5];
  const a = randomValues(1, M * K), b = randomValues(2, K * N), c = randomValues(3, M * N);

  for (const transA of [false, true]) {
    for (const transB of [false, true]) {
      test(`matches the triple loop (transA=${transA}, transB=${transB}, alpha and beta)`, () => {
        const out = backend.fromArray(c, [M, N], 'f32');
        backend.gemm({
          a: backend.fromArray(a, transA ? [K, M] : [M, K], 'f32'), b: backend.fromArray(b, transB ? [N, K] : [K, N], 'f32'),
          out, transA, transB, alpha: 0.75, beta: -0.5,
        });
        assertClose(backend.download(out), naiveGemm(a, b, c, M, N, K, transA, transB, 0.75, -0.5), 1e-6);
      });
    }
  }

  test('beta = 0 never reads out (NaN there does not leak)', () => {
    const out = backend.fromArray(new Array<number>(M * N).fill(NaN), [M, N], 'f32');
    backend.gemm({ a: backend.fromArray(a, [M, K], 'f32'), b: backend.fromArray(b, [K, N], 'f32'), out });
    assertClose(backend.download(out), naiveGemm(a, b, c, M, N, K, false, false, 1, 0), 1e-6);
  });

  test('f16 output holds the f64 product rounded to f16', () => {
    const a16 = backend.fromArray(a, [M, K], 'f16'), b16 = backend.fromArray(b, [K, N], 'f16');
    const out = backend.empty([M, N], 'f16');
    backend.gemm({ a: a16, b: b16, out });
    const expected = naiveGemm(Array.from(backend.download(a16)), Array.from(backend.download(b16)), c, M, N, K, false, false, 1, 0);
    assert.deepEqual(Array.from(backend.download(out)), expected.map((x) => roundToDType(x, 'f16')));
  });

  describe('epilogues', () => {
    const bias = randomValues(4, N);
    const product = naiveGemm(a, b, c, M, N, K, false, false, 1.5, 0);
    const run = (epilogue: GemmEpilogue, extra: { bias?: CpuTensor; preActivation?: CpuTensor; biasGrad?: CpuTensor } = {}) => {
      const out = backend.empty([M, N], 'f32');
      backend.gemm({ a: backend.fromArray(a, [M, K], 'f32'), b: backend.fromArray(b, [K, N], 'f32'), out, alpha: 1.5, epilogue, ...extra });
      return Array.from(backend.download(out));
    };

    test('bias and relu_bias', () => {
      const withBias = product.map((x, i) => x + bias[i % N]!);
      assertClose(run('bias', { bias: backend.fromArray(bias, [N], 'f32') }), withBias, 1e-6);
      const relu = run('relu_bias', { bias: backend.fromArray(bias, [N], 'f32') });
      assert.ok(withBias.some((x) => x < 0) && withBias.some((x) => x > 0), 'the case has both signs');
      assertClose(relu, withBias.map((x) => Math.max(x, 0)), 1e-6);
    });

    test('gelu_bias applies tanh-GELU and stores the pre-activation', () => {
      const pre = backend.empty([M, N], 'f32');
      const out = run('gelu_bias', { bias: backend.fromArray(bias, [N], 'f32'), preActivation: pre });
      const withBias = product.map((x, i) => x + bias[i % N]!);
      assertClose(backend.download(pre), withBias, 1e-6, 'preActivation');
      assertClose(out, withBias.map(geluTanhReference), 1e-6, 'out');
      assertClose(run('gelu_bias', { bias: backend.fromArray(bias, [N], 'f32') }), withBias.map(geluTanhReference), 1e-6, 'without preActivation');
    });

    test('dgelu multiplies by the tanh-GELU derivative; dgelu_bgrad also sums columns', () => {
      const preValues = randomValues(5, M * N, -3, 3);
      const derivative = (x: number) => (geluTanhReference(x + 1e-5) - geluTanhReference(x - 1e-5)) / 2e-5;
      const expected = product.map((x, i) => x * derivative(preValues[i]!));
      assertClose(run('dgelu', { preActivation: backend.fromArray(preValues, [M, N], 'f32') }), expected, 1e-6, 'dgelu');
      const biasGrad = backend.empty([N], 'f32');
      const out = run('dgelu_bgrad', { preActivation: backend.fromArray(preValues, [M, N], 'f32'), biasGrad });
      assertClose(out, expected, 1e-6, 'dgelu_bgrad out');
      const columnSums = Array.from({ length: N }, (_, n) => expected.filter((_, i) => i % N === n).reduce((s, x) => s + x, 0));
      assertClose(backend.download(biasGrad), columnSums, 1e-6, 'biasGrad');
    });

    test("bgrad_a sums op(a)'s rows (a's columns when transposed), without alpha", () => {
      const biasGrad = backend.empty([M], 'f32');
      assertClose(run('bgrad_a', { biasGrad }), product, 1e-6, 'out');
      assertClose(backend.download(biasGrad), Array.from({ length: M }, (_, m) => a.slice(m * K, (m + 1) * K).reduce((s, x) => s + x, 0)), 1e-6, 'biasGrad');
      const transposedGrad = backend.empty([M], 'f32');
      backend.gemm({ a: backend.fromArray(a, [K, M], 'f32'), b: backend.fromArray(b, [K, N], 'f32'), out: backend.empty([M, N], 'f32'), transA: true, epilogue: 'bgrad_a', biasGrad: transposedGrad });
      assertClose(backend.download(transposedGrad), Array.from({ length: M }, (_, m) => a.filter((_, i) => i % M === m).reduce((s, x) => s + x, 0)), 1e-6, 'biasGrad (transA)');
    });
  });

  test('a Linear→GELU→Linear backward built from the epilogues matches finite differences', () => {
    // PyTorch layout: y = gelu(x·W1ᵀ + b1)·W2ᵀ + b2;  x (Mr, Kin), W1 (Hd, Kin), W2 (Nout, Hd).
    const [Mr, Kin, Hd, Nout] = [3, 4, 5, 2];
    const init = { x: randomValues(10, Mr * Kin), w1: randomValues(11, Hd * Kin), b1: randomValues(12, Hd), w2: randomValues(13, Nout * Hd), b2: randomValues(14, Nout) };
    const g = randomValues(15, Mr * Nout);
    const forward = (p: typeof init) => {
      const h = backend.empty([Mr, Hd], 'f32'), pre = backend.empty([Mr, Hd], 'f32'), y = backend.empty([Mr, Nout], 'f32');
      const x = backend.fromArray(p.x, [Mr, Kin], 'f32'), w1 = backend.fromArray(p.w1, [Hd, Kin], 'f32'), w2 = backend.fromArray(p.w2, [Nout, Hd], 'f32');
      backend.gemm({ a: x, b: w1, transB: true, out: h, epilogue: 'gelu_bias', bias: backend.fromArray(p.b1, [Hd], 'f32'), preActivation: pre });
      backend.gemm({ a: h, b: w2, transB: true, out: y, epilogue: 'bias', bias: backend.fromArray(p.b2, [Nout], 'f32') });
      return { x, w1, w2, h, pre, loss: weightedSum(backend.download(y), g) };
    };
    const { x, w1, w2, h, pre } = forward(init);
    const dY = backend.fromArray(g, [Mr, Nout], 'f32');
    const dW2 = backend.empty([Nout, Hd], 'f32'), db2 = backend.empty([Nout], 'f32');
    backend.gemm({ a: dY, transA: true, b: h, out: dW2, epilogue: 'bgrad_a', biasGrad: db2 });
    const dPre = backend.empty([Mr, Hd], 'f32'), db1 = backend.empty([Hd], 'f32');
    backend.gemm({ a: dY, b: w2, out: dPre, epilogue: 'dgelu_bgrad', preActivation: pre, biasGrad: db1 });
    const dW1 = backend.empty([Hd, Kin], 'f32'), dX = backend.empty([Mr, Kin], 'f32');
    backend.gemm({ a: dPre, transA: true, b: x, out: dW1 });
    backend.gemm({ a: dPre, b: w1, out: dX });

    const analytic = { x: dX, w1: dW1, b1: db1, w2: dW2, b2: db2 };
    for (const name of Object.keys(init) as (keyof typeof init)[]) {
      const numeric = numericGradient((point) => forward({ ...init, [name]: point }).loss, init[name]);
      assertClose(backend.download(analytic[name]), numeric, 2e-3, `d${name}`);
    }
  });

  test('validation names the op and the argument', () => {
    const a23 = backend.empty([2, 3], 'f32'), b34 = backend.empty([3, 4], 'f32'), out24 = backend.empty([2, 4], 'f32');
    assertRejects(() => backend.gemm({ a: a23, b: backend.empty([4, 4], 'f32'), out: out24 }), 'gemm', 'b', ShapeError);
    assertRejects(() => backend.gemm({ a: a23, b: b34, out: backend.empty([2, 4], 'f16') }), 'gemm', 'out', DTypeError);
    assertRejects(() => backend.gemm({ a: a23, b: b34, out: out24, epilogue: 'bias' }), 'gemm', 'bias', ArgumentError);
    assertRejects(() => backend.gemm({ a: a23, b: b34, out: out24, epilogue: 'bias', bias: backend.empty([4], 'f32'), beta: 1 }), 'gemm', 'beta', ArgumentError);
    assertRejects(() => backend.gemm({ a: a23, b: b34, out: out24, biasGrad: backend.empty([4], 'f32') }), 'gemm', 'biasGrad', ArgumentError);
    assertRejects(() => backend.gemm({ a: a23, b: b34, out: out24, epilogue: 'dgelu_bgrad', preActivation: out24, biasGrad: backend.empty([2], 'f32') }), 'gemm', 'biasGrad', ShapeError);
    const transposed = new CpuTensor([2, 3], 'f32', new Float32Array(6), { strides: [1, 2] });
    assertRejects(() => backend.gemm({ a: transposed, b: b34, out: out24 }), 'gemm', 'a', LayoutError);
    assertRejects(() => backend.gemm({ a: backend.empty([2, 3], 'i32'), b: backend.empty([3, 4], 'i32'), out: backend.empty([2, 4], 'i32') }), 'gemm', 'a', DTypeError);
  });
});

describe('batchedGemm', () => {
  const [batch, M, N, K] = [3, 2, 4, 3];
  for (const [transA, transB] of [[false, false], [true, false], [false, true], [true, true]] as const) {
    test(`matches the triple loop per batch (transA=${transA}, transB=${transB})`, () => {
      const a = randomValues(20, batch * M * K), b = randomValues(21, batch * K * N), c = randomValues(22, batch * M * N);
      const out = backend.fromArray(c, [batch, M, N], 'f32');
      backend.batchedGemm({
        a: backend.fromArray(a, transA ? [batch, K, M] : [batch, M, K], 'f32'), b: backend.fromArray(b, transB ? [batch, N, K] : [batch, K, N], 'f32'),
        out, transA, transB, alpha: 2, beta: 0.5,
      });
      const expected = Array.from({ length: batch }, (_, i) => naiveGemm(
        a.slice(i * M * K, (i + 1) * M * K), b.slice(i * K * N, (i + 1) * K * N), c.slice(i * M * N, (i + 1) * M * N), M, N, K, transA, transB, 2, 0.5,
      )).flat();
      assertClose(backend.download(out), expected, 1e-6);
    });
  }

  test('validation names the op and the argument', () => {
    assertRejects(() => backend.batchedGemm({ a: backend.empty([2, 2, 3], 'f32'), b: backend.empty([3, 3, 4], 'f32'), out: backend.empty([2, 2, 4], 'f32') }), 'batchedGemm', 'b', ShapeError);
    assertRejects(() => backend.batchedGemm({ a: backend.empty([2, 2, 3], 'f32'), b: backend.empty([2, 3, 4], 'f32'), out: backend.empty([2, 2, 4], 'f32'), alpha: NaN }), 'batchedGemm', 'alpha', ArgumentError);
  });
});
