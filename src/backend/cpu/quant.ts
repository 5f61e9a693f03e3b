// The quantized-linear ops on the CPU (backend.ts has the contract; quant-math.ts the exact scalar
// arithmetic both backends share):
//   int4Linear           out = act(x·wᵀ + bias), w = scale·(q − zero) dequantized exactly into f64 (gated: act(g)·u)
//   int4QuantizeWeights  round-to-nearest INT4 of a weight [N, K], the same bits as the GPU
//   int8QuantizeRows     per-row symmetric INT8 of activations, the same bits as the GPU
//   int8Gemm             exact integer product (i32)
//   int8Dequantize       act(acc·rowScale·colScale + bias)
//   int8Linear           the three above in one op (gated: act(g)·u of the dequantized gate and up columns)
// Products accumulate in f64 and round once to the output dtype.

import type { Activation, Int4LinearArgs, Int4QuantizeWeightsArgs, Int8DequantizeArgs, Int8GemmArgs, Int8LinearArgs, Int8QuantizeRowsArgs } from '../backend.js';
import {
  checkInt4Linear, checkInt4QuantizeWeights, checkInt8Dequantize, checkInt8Gemm, checkInt8Linear, checkInt8QuantizeRows,
} from '../op-checks/quant.js';
import { LayoutError } from '../../errors.js';
import { activationFunction } from './activation.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { dequantizeInt4, int8QuantizeRow, packInt4, quantizeInt4, unpackInt4 } from './quant-math.js';
import { combineRowArgmax } from './gemm.js';
import type { CpuTensor } from './tensor.js';
import { bytesOf, floatsOf, int32sOf, storeFloats } from './tensor.js';

function int8sOf(t: CpuTensor): Int8Array {
  if (!(t.storage instanceof Int8Array)) throw new LayoutError(`internal: ${t} is not an i8 tensor`);
  return t.storage.subarray(t.offset, t.offset + t.numel);
}

/** out[m, n] = act(product[m, n] + bias[n]) rounded to out's dtype. */
function storeWithEpilogue(out: CpuTensor, product: Float64Array, N: number, bias: CpuTensor | undefined, activation: Activation | undefined): void {
  if (bias) {
    const b = floatsOf(bias);
    for (let i = 0; i < product.length; i++) product[i]! += b[i % N]!;
  }
  if (activation) {
    const act = activationFunction(activation);
    for (let i = 0; i < product.length; i++) product[i] = act(product[i]!);
  }
  storeFloats(out, product);
}

/** out[m, n] = act(p[m, n] + bias[n])·(p[m, F + n] + bias[F + n]) for the product p [M, 2F], rounded once. */
function storeGated(out: CpuTensor, product: Float64Array, N: number, bias: CpuTensor | undefined, activation: Activation): void {
  const F = N / 2, M = product.length / N, act = activationFunction(activation);
  const b = bias ? floatsOf(bias) : undefined, result = new Float64Array(M * F);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < F; n++) {
      const g = product[m * N + n]! + (b ? b[n]! : 0), u = product[m * N + F + n]! + (b ? b[F + n]! : 0);
      result[m * F + n] = act(g) * u;
    }
  }
  storeFloats(out, result);
}

export function prepareInt4Linear(args: Int4LinearArgs): CpuWork {
  const check = new CpuCheck('int4Linear');
  const { x, qweight, scales, zeros, out, bias, activation, gated, groupSize, M, N, K, argmax } = checkInt4Linear(check, args);
  return check.work(() => {
    const w = dequantizeInt4(unpackInt4(int32sOf(qweight), N, K), floatsOf(scales), bytesOf(zeros), N, K, groupSize);
    const xs = Float64Array.from(floatsOf(x));
    const product = new Float64Array(M * N);
    for (let m = 0; m < M; m++) {
      const row = m * K;
      for (let n = 0; n < N; n++) {
        const wr = n * K;
        let sum = 0;
        for (let k = 0; k < K; k++) sum += xs[row + k]! * w[wr + k]!;
        product[m * N + n] = sum;
      }
    }
    if (gated) storeGated(out, product, N, bias, activation!);
    else storeWithEpilogue(out, product, N, bias, activation);
    if (argmax) combineRowArgmax(floatsOf(out), N, argmax.classes, int32sOf(argmax.out));
  });
}

export function prepareInt4QuantizeWeights(args: Int4QuantizeWeightsArgs): CpuWork {
  const check = new CpuCheck('int4QuantizeWeights');
  const { weight, qweight, scales, zeros, groupSize, N, K } = checkInt4QuantizeWeights(check, args);
  return check.work(() => {
    const values = floatsOf(weight);
    for (let i = 0; i < values.length; i++) {
      if (!Number.isFinite(values[i]!)) check.fail(`'weight' has a non-finite value ${values[i]} at [${Math.floor(i / K)}, ${i % K}]`);
    }
    const quantized = quantizeInt4(values, N, K, groupSize);
    int32sOf(qweight).set(packInt4(quantized.q, N, K));
    floatsOf(scales).set(quantized.scales);
    bytesOf(zeros).set(quantized.zeros);
  });
}

export function prepareInt8QuantizeRows(args: Int8QuantizeRowsArgs): CpuWork {
  const check = new CpuCheck('int8QuantizeRows');
  const { x, out, scales, M, K } = checkInt8QuantizeRows(check, args);
  return check.work(() => {
    const values = floatsOf(x), q = int8sOf(out), s = floatsOf(scales);
    for (let m = 0; m < M; m++) s[m] = int8QuantizeRow(values, m * K, K, q, m * K);
  });
}

export function prepareInt8Gemm(args: Int8GemmArgs): CpuWork {
  const check = new CpuCheck('int8Gemm');
  const { a, b, out, M, N, K } = checkInt8Gemm(check, args);
  return check.work(() => {
    const av = int8sOf(a), bv = int8sOf(b), result = int32sOf(out);
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        // |Σ| ≤ 127²·K < 2^31 for K < 133,000: exact in doubles and in i32.
        let sum = 0;
        for (let k = 0; k < K; k++) sum += av[m * K + k]! * bv[n * K + k]!;
        result[m * N + n] = sum;
      }
    }
  });
}

export function prepareInt8Dequantize(args: Int8DequantizeArgs): CpuWork {
  const check = new CpuCheck('int8Dequantize');
  const { acc, rowScales, colScales, out, bias, activation, M, N } = checkInt8Dequantize(check, args);
  return check.work(() => {
    const values = int32sOf(acc), rs = floatsOf(rowScales), cs = floatsOf(colScales);
    const product = new Float64Array(M * N);
    for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) product[m * N + n] = values[m * N + n]! * rs[m]! * cs[n]!;
    storeWithEpilogue(out, product, N, bias, activation);
  });
}

export function prepareInt8Linear(args: Int8LinearArgs): CpuWork {
  const check = new CpuCheck('int8Linear');
  const { x, qweight, scales, out, bias, activation, gated, M, N, K, argmax } = checkInt8Linear(check, args);
  return check.work(() => {
    const values = floatsOf(x), w = int8sOf(qweight), cs = floatsOf(scales);
    const xq = new Int8Array(M * K), product = new Float64Array(M * N);
    for (let m = 0; m < M; m++) {
      const rowScale = int8QuantizeRow(values, m * K, K, xq, m * K);
      for (let n = 0; n < N; n++) {
        let sum = 0; // exact: |Σ| < 2^31 (checked)
        for (let k = 0; k < K; k++) sum += xq[m * K + k]! * w[n * K + k]!;
        product[m * N + n] = sum * rowScale * cs[n]!;
      }
    }
    if (gated) storeGated(out, product, N, bias, activation!);
    else storeWithEpilogue(out, product, N, bias, activation);
    if (argmax) combineRowArgmax(floatsOf(out), N, argmax.classes, int32sOf(argmax.out));
  });
}
