// Quantized weights on a backend, and the forwards that replace a Linear's GEMM with them
// (nn/linear.ts: Linear.quantized, inference only):
//
//   W4A16   out = act(x·wᵀ + bias)            one int4Linear op (GEMV for decode, tensor cores for prefill)
//   W8A8    out = act(x·wᵀ + bias)            one int8Linear op, which is
//           xq, s_x = int8QuantizeRows(x)     per-token dynamic scales      [rows, K] i8, [rows] f32
//           acc = int8Gemm(xq, qweight)       cuBLASLt IMMA, exact i32      [rows, N]
//           out = int8Dequantize(acc, s_x, s_w, bias, act)
//           (on CUDA one GEMV kernel for ≤ 4 rows, kernels/gemv-int8.ts, with the same integers)
// The W8A8 intermediates are step buffers (ctx.buffer), so they live in the planned arena and the
// whole forward can still be captured into one CUDA graph. int4LinearOp / w8a8LinearOp issue the same
// ops for code that holds a Backend rather than a StepContext (an inference engine's own forward).

import type { Activation, Backend, RowArgmax } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { QuantizedForward } from '../nn/linear.js';
import type { StepContext } from '../nn/step-context.js';
import type { Tensor } from '../tensor.js';
import type { Int4HostWeight, Int8HostWeight, QuantizedHostWeight } from './weights.js';

export interface DeviceInt4Weight {
  readonly kind: 'int4';
  readonly inFeatures: number;
  readonly outFeatures: number;
  readonly groupSize: number;
  readonly qweight: Tensor;
  readonly scales: Tensor;
  readonly zeros: Tensor;
  /** i32 [K]: the weight's column j multiplies input channel inputOrder[j] (Int4HostWeight.inputOrder). */
  readonly inputOrder?: Tensor;
}

export interface DeviceInt8Weight {
  readonly kind: 'int8';
  readonly inFeatures: number;
  readonly outFeatures: number;
  readonly qweight: Tensor;
  readonly scales: Tensor;
}

export type DeviceQuantizedWeight = DeviceInt4Weight | DeviceInt8Weight;

export function uploadInt4(backend: Backend, w: Int4HostWeight): DeviceInt4Weight {
  const { inFeatures: K, outFeatures: N, groupSize: G } = w;
  return {
    kind: 'int4', inFeatures: K, outFeatures: N, groupSize: G,
    qweight: backend.fromArray(w.qweight, [N, K / 8], 'i32'),
    scales: backend.fromArray(w.scales, [N, K / G], 'f16'),
    zeros: backend.fromArray(w.zeros, [N, K / G], 'u8'),
    ...(w.inputOrder ? { inputOrder: backend.fromArray(w.inputOrder, [K], 'i32') } : {}),
  };
}

export function uploadInt8(backend: Backend, w: Int8HostWeight): DeviceInt8Weight {
  const { inFeatures: K, outFeatures: N } = w;
  return { kind: 'int8', inFeatures: K, outFeatures: N, qweight: backend.fromArray(w.qweight, [N, K], 'i8'), scales: backend.fromArray(w.scales, [N], 'f32') };
}

export function uploadQuantized(backend: Backend, w: QuantizedHostWeight): DeviceQuantizedWeight {
  return w.kind === 'int4' ? uploadInt4(backend, w) : uploadInt8(backend, w);
}

/** The host copy of an INT4 weight written by the backend (int4QuantizeWeights). */
export function downloadInt4(backend: Backend, w: DeviceInt4Weight): Int4HostWeight {
  return {
    kind: 'int4', inFeatures: w.inFeatures, outFeatures: w.outFeatures, groupSize: w.groupSize,
    qweight: backend.download(w.qweight) as Int32Array,
    scales: backend.download(w.scales) as Float32Array,
    zeros: backend.download(w.zeros) as Uint8Array,
    ...(w.inputOrder ? { inputOrder: backend.download(w.inputOrder) as Int32Array } : {}),
  };
}

export function freeQuantized(backend: Backend, w: DeviceQuantizedWeight): void {
  backend.free(w.qweight);
  backend.free(w.scales);
  if (w.kind === 'int4') {
    backend.free(w.zeros);
    if (w.inputOrder) backend.free(w.inputOrder);
  }
}

/** linearForward's epilogue as the quantized ops' bias and activation (GPT-2's 'gelu_bias' is tanh-GELU, as cuBLASLt's). */
function epilogueParts(epilogue: 'none' | 'bias' | 'gelu_bias', bias: Tensor | undefined): { bias?: Tensor; activation?: Activation } {
  if (epilogue === 'none' || !bias) return {};
  return epilogue === 'gelu_bias' ? { bias, activation: 'gelu_tanh' } : { bias };
}

/** x [..., K] → [rows, K] (the ops take matrices). */
function asMatrix(ctx: StepContext, t: Tensor): Tensor {
  if (t.rank === 2) return t;
  const last = t.shape[t.rank - 1]!;
  return ctx.reshape(t, [t.numel / last, last]);
}

/**
 * out = act(x·wᵀ + bias) with INT4 weights, x [rows, K], out [rows, N], on any op issuer (a backend or
 * ctx.ops). A weight with an input order (act-order GPTQ) reads x's columns in that order: gatherColumns
 * into `ordered` [rows, K] (x's dtype) first.
 */
/** What a quantized product adds after its sums: bias, activation, the gated form, or (a head) the rows' greedy picks. */
export interface QuantizedEpilogue { bias?: Tensor; activation?: Activation; gated?: boolean; argmax?: RowArgmax }

export function int4LinearOp(ops: Backend, w: DeviceInt4Weight, x: Tensor, out: Tensor, epilogue: QuantizedEpilogue = {}, ordered?: Tensor): void {
  if (w.inputOrder) {
    if (!ordered) throw new ArgumentError(`int4 product of ${w.outFeatures} × ${w.inFeatures}: its weight reads its inputs in another order, and no buffer was given for them`);
    ops.gatherColumns({ x, index: w.inputOrder, out: ordered });
    x = ordered;
  }
  ops.int4Linear({ x, qweight: w.qweight, scales: w.scales, zeros: w.zeros, groupSize: w.groupSize, out, ...epilogue });
}

/** The W8A8 intermediates of `rows` tokens: i8 [rows, K], f32 [rows], i32 [rows, N] (and up [rows, N] for a gated product). */
export interface W8A8Scratch {
  readonly xq: Tensor;
  readonly rowScales: Tensor;
  readonly acc: Tensor;
  readonly up?: Tensor;
}

/**
 * out = act(x·wᵀ + bias) with INT8 weights and per-token INT8 activations (gated: act(g)·u), one
 * int8Linear: one GEMV kernel for decode's few rows on CUDA, else quantize → int8Gemm → dequantize
 * through the scratch.
 */
export function w8a8LinearOp(ops: Backend, w: DeviceInt8Weight, x: Tensor, out: Tensor, scratch: W8A8Scratch, epilogue: QuantizedEpilogue = {}): void {
  ops.int8Linear({ x, qweight: w.qweight, scales: w.scales, out, ...epilogue, scratch });
}

export class Int4Forward implements QuantizedForward {
  constructor(readonly weight: DeviceInt4Weight) {}

  forward(ctx: StepContext, x: Tensor, out: Tensor, epilogue: 'none' | 'bias' | 'gelu_bias', bias: Tensor | undefined): void {
    const x2 = asMatrix(ctx, x), w = this.weight;
    const ordered = w.inputOrder ? ctx.buffer('int4.ordered', [x2.shape[0]!, w.inFeatures], x2.dtype) : undefined;
    int4LinearOp(ctx.ops, w, x2, asMatrix(ctx, out), epilogueParts(epilogue, bias), ordered);
  }
}

export class Int8Forward implements QuantizedForward {
  constructor(readonly weight: DeviceInt8Weight) {}

  forward(ctx: StepContext, x: Tensor, out: Tensor, epilogue: 'none' | 'bias' | 'gelu_bias', bias: Tensor | undefined): void {
    const w = this.weight;
    const x2 = asMatrix(ctx, x);
    const rows = x2.shape[0]!;
    const scratch: W8A8Scratch = {
      xq: ctx.buffer('w8a8.x', [rows, w.inFeatures], 'i8'),
      rowScales: ctx.buffer('w8a8.rowScales', [rows], 'f32'),
      acc: ctx.buffer('w8a8.acc', [rows, w.outFeatures], 'i32'),
    };
    w8a8LinearOp(ctx.ops, w, x2, asMatrix(ctx, out), scratch, epilogueParts(epilogue, bias));
  }
}

export function quantizedForward(w: DeviceQuantizedWeight): QuantizedForward {
  return w.kind === 'int4' ? new Int4Forward(w) : new Int8Forward(w);
}
