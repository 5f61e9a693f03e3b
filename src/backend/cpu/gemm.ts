// GEMM with cuBLASLt's epilogues, and strided-batched GEMM. Products accumulate in float64 and the
// epilogue runs on the float64 value; results are rounded once, to the output's dtype.
//   a: (M, K) or (K, M) with transA;  b: (K, N) or (N, K) with transB;  out: (M, N)
// The GELU epilogues use the tanh approximation (cuBLASLt's GELU is gelu_tanh).

import type { BatchedGemmArgs, GemmArgs, GemmEpilogue } from '../backend.js';
import { packArgmax } from '../backend.js';
import { checkRowArgmax } from '../op-checks/index.js';
import { geluTanh, geluTanhGrad } from './activation.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

const EPILOGUES: readonly GemmEpilogue[] = ['none', 'bias', 'relu_bias', 'gelu_bias', 'dgelu', 'dgelu_bgrad', 'bgrad_a'];
const WITH_BIAS: readonly GemmEpilogue[] = ['bias', 'relu_bias', 'gelu_bias'];
const READS_PRE_ACTIVATION: readonly GemmEpilogue[] = ['dgelu', 'dgelu_bgrad'];

/**
 * alpha · op(a) · op(b) as float64 (M, N), for matrices starting at aStart/bStart in a and b.
 * Operands are first copied to row-major float64 (which also resolves the transposes), then the
 * product runs in i-k-j order so the inner loop walks contiguous rows, blocked four rows × two k:
 * f64 sums, an order of magnitude faster in V8 than the textbook loop.
 */
function product(
  a: Float32Array, aStart: number, b: Float32Array, bStart: number,
  M: number, N: number, K: number, transA: boolean, transB: boolean, alpha: number,
): Float64Array {
  const A = new Float64Array(M * K);
  for (let m = 0; m < M; m++) for (let k = 0; k < K; k++) A[m * K + k] = a[aStart + (transA ? k * M + m : m * K + k)]!;
  const Bm = new Float64Array(K * N);
  if (transB) {
    for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) Bm[k * N + n] = b[bStart + n * K + k]!;
  } else {
    for (let i = 0; i < K * N; i++) Bm[i] = b[bStart + i]!;
  }
  const out = new Float64Array(M * N);
  // Four output rows × two k per pass: each B element loaded feeds eight products, and each output
  // element is loaded and stored once per two k (V8 keeps the eight A values in registers).
  let m = 0;
  for (; m + 4 <= M; m += 4) {
    const r0 = m * N, r1 = r0 + N, r2 = r1 + N, r3 = r2 + N;
    const p0 = m * K, p1 = p0 + K, p2 = p1 + K, p3 = p2 + K;
    let k = 0;
    for (; k + 2 <= K; k += 2) {
      const a0 = A[p0 + k]!, a1 = A[p0 + k + 1]!, b0 = A[p1 + k]!, b1 = A[p1 + k + 1]!;
      const c0 = A[p2 + k]!, c1 = A[p2 + k + 1]!, d0 = A[p3 + k]!, d1 = A[p3 + k + 1]!;
      const x = k * N, y = x + N;
      for (let n = 0; n < N; n++) {
        const bx = Bm[x + n]!, by = Bm[y + n]!;
        out[r0 + n]! += a0 * bx + a1 * by;
        out[r1 + n]! += b0 * bx + b1 * by;
        out[r2 + n]! += c0 * bx + c1 * by;
        out[r3 + n]! += d0 * bx + d1 * by;
      }
    }
    for (; k < K; k++) {
      const a0 = A[p0 + k]!, b0 = A[p1 + k]!, c0 = A[p2 + k]!, d0 = A[p3 + k]!, x = k * N;
      for (let n = 0; n < N; n++) {
        const bx = Bm[x + n]!;
        out[r0 + n]! += a0 * bx; out[r1 + n]! += b0 * bx; out[r2 + n]! += c0 * bx; out[r3 + n]! += d0 * bx;
      }
    }
  }
  for (; m < M; m++) {
    const row = m * N, arow = m * K;
    for (let k = 0; k < K; k++) {
      const av = A[arow + k]!, col = k * N;
      for (let n = 0; n < N; n++) out[row + n]! += av * Bm[col + n]!;
    }
  }
  if (alpha !== 1) for (let i = 0; i < M * N; i++) out[i]! *= alpha;
  return out;
}

export function prepareGemm(args: GemmArgs): CpuWork {
  const check = new CpuCheck('gemm');
  const transA = args.transA ?? false;
  const transB = args.transB ?? false;
  const epilogue = args.epilogue ?? 'none';
  if (!EPILOGUES.includes(epilogue)) check.fail(`'epilogue' must be one of ${EPILOGUES.join(', ')}, got '${String(epilogue)}'`);

  const a = check.tensor('a', args.a);
  const b = check.tensor('b', args.b);
  const out = check.tensor('out', args.out);
  check.float('a', a);
  check.sameDType(['a', 'b', 'out'], [a, b, out]);
  check.shape('a', a, transA ? ['K', 'M'] : ['M', 'K']);
  check.shape('b', b, transB ? ['N', 'K'] : ['K', 'N']);
  check.shape('out', out, ['M', 'N']);
  const [M, N, K] = [check.size('M'), check.size('N'), check.size('K')];

  const alpha = args.alpha ?? 1;
  check.finite('alpha', alpha);
  const beta = args.beta ?? 0;
  check.finite('beta', beta);
  if (beta !== 0 && epilogue !== 'none') check.fail(`'beta' is only supported with epilogue 'none', got epilogue '${epilogue}'`);

  const on = `with epilogue '${epilogue}'`;
  let bias: CpuTensor | undefined;
  if (WITH_BIAS.includes(epilogue)) {
    bias = check.tensor('bias', args.bias);
    check.shape('bias', bias, ['N']);
    check.sameDType(['out', 'bias'], [out, bias]);
  } else check.absent('bias', args.bias, on);

  let pre: CpuTensor | undefined;
  if (READS_PRE_ACTIVATION.includes(epilogue) || (epilogue === 'gelu_bias' && args.preActivation)) {
    pre = check.tensor('preActivation', args.preActivation);
    check.shape('preActivation', pre, ['M', 'N']);
    check.sameDType(['out', 'preActivation'], [out, pre]);
  } else check.absent('preActivation', args.preActivation, on);

  let biasGrad: CpuTensor | undefined;
  if (epilogue === 'dgelu_bgrad' || epilogue === 'bgrad_a') {
    biasGrad = check.tensor('biasGrad', args.biasGrad);
    check.shape('biasGrad', biasGrad, [epilogue === 'bgrad_a' ? 'M' : 'N']);
    check.sameDType(['out', 'biasGrad'], [out, biasGrad]);
  } else check.absent('biasGrad', args.biasGrad, on);

  const argmax = args.argmax ? checkRowArgmax(check, args.argmax, M, N) : undefined;

  return check.work(() => {
    const av = floatsOf(a);
    const result = product(av, 0, floatsOf(b), 0, M, N, K, transA, transB, alpha);
    const biasValues = bias ? floatsOf(bias) : undefined;
    const preValues = pre ? floatsOf(pre) : undefined;
    const old = floatsOf(out);
    const preActivationOut = new Float64Array(M * N);

    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        const i = m * N + n;
        const x = result[i]!;
        switch (epilogue) {
          case 'none': result[i] = beta === 0 ? x : x + beta * old[i]!; break; // beta = 0 never reads out (BLAS)
          case 'bias': result[i] = x + biasValues![n]!; break;
          case 'relu_bias': result[i] = Math.max(x + biasValues![n]!, 0); break;
          case 'gelu_bias': preActivationOut[i] = x + biasValues![n]!; result[i] = geluTanh(preActivationOut[i]!); break;
          case 'dgelu': case 'dgelu_bgrad': result[i] = x * geluTanhGrad(preValues![i]!); break;
          case 'bgrad_a': break;
        }
      }
    }

    if (epilogue === 'dgelu_bgrad') {
      const sums = new Float64Array(N);
      for (let i = 0; i < M * N; i++) sums[i % N] += result[i]!;
      storeFloats(biasGrad!, sums);
    }
    if (epilogue === 'bgrad_a') {
      // Σ_k op(a)[m, k]: a's rows when not transposed, its columns when transposed.
      const sums = new Float64Array(M);
      for (let m = 0; m < M; m++) for (let k = 0; k < K; k++) sums[m] += av[transA ? k * M + m : m * K + k]!;
      storeFloats(biasGrad!, sums);
    }
    if (epilogue === 'gelu_bias' && pre) storeFloats(pre, preActivationOut);
    storeFloats(out, result);
    if (argmax) combineRowArgmax(floatsOf(out), N, argmax.classes, int32sOf(argmax.out));
  });
}

/** RowArgmax: each row's packed (key, column) of its largest stored value in [0, classes), max-combined into `packed`. */
export function combineRowArgmax(values: ArrayLike<number>, N: number, classes: number, packed: Int32Array): void {
  for (let m = 0; m < packed.length / 2; m++) {
    let [low, high] = [packed[2 * m]! >>> 0, packed[2 * m + 1]! >>> 0];
    for (let n = 0; n < classes; n++) {
      const v = values[m * N + n]!;
      if (Number.isNaN(v)) continue;
      const [l, h] = packArgmax(v, n);
      if (h > high || (h === high && l > low)) [low, high] = [l, h];
    }
    packed[2 * m] = low | 0;
    packed[2 * m + 1] = high | 0;
  }
}

/** out[i] = alpha·op(a[i])·op(b[i]) + beta·out[i] over the leading batch dimension. */
export function prepareBatchedGemm(args: BatchedGemmArgs): CpuWork {
  const check = new CpuCheck('batchedGemm');
  const transA = args.transA ?? false;
  const transB = args.transB ?? false;
  const a = check.tensor('a', args.a);
  const b = check.tensor('b', args.b);
  const out = check.tensor('out', args.out);
  check.float('a', a);
  check.sameDType(['a', 'b', 'out'], [a, b, out]);
  check.shape('a', a, transA ? ['batch', 'K', 'M'] : ['batch', 'M', 'K']);
  check.shape('b', b, transB ? ['batch', 'N', 'K'] : ['batch', 'K', 'N']);
  check.shape('out', out, ['batch', 'M', 'N']);
  const [batch, M, N, K] = [check.size('batch'), check.size('M'), check.size('N'), check.size('K')];
  const alpha = args.alpha ?? 1;
  const beta = args.beta ?? 0;
  check.finite('alpha', alpha);
  check.finite('beta', beta);

  return check.work(() => {
    const av = floatsOf(a);
    const bv = floatsOf(b);
    const old = floatsOf(out);
    const result = new Float64Array(batch * M * N);
    for (let i = 0; i < batch; i++) {
      const slice = product(av, i * M * K, bv, i * K * N, M, N, K, transA, transB, alpha);
      for (let j = 0; j < M * N; j++) result[i * M * N + j] = beta === 0 ? slice[j]! : slice[j]! + beta * old[i * M * N + j]!;
    }
    storeFloats(out, result);
  });
}
