// Linear layers as cuBLASLt GEMMs. Two weight layouts exist in the checkpoints we load:
//   'out_in'  torch.nn.Linear: W [out, in],  y = x·Wᵀ        (BERT, Llama, Marian)
//   'in_out'  GPT-2's Conv1D:  W [in, out],  y = x·W
// We keep each model's layout as stored (no transposed copies) and pick the GEMM transposes instead.
//
// Backward (x [rows, in], dY [rows, out]):
//   dX = dY·W (out_in) or dY·Wᵀ (in_out)                          [rows, in]
//   dW = dYᵀ·x (out_in) or xᵀ·dY (in_out)                        the weight's shape
// With 'out_in', the bias gradient Σ_rows dY comes free from cuBLASLt's BGRADA epilogue on the dW
// GEMM. The fused elementwise backward ops (bias+dropout+residual, bias+activation, QKV split) also
// produce it, which is how GPT-2's Conv1D layers get theirs.

import type { GemmEpilogue } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { Param } from './parameters.js';
import type { StepContext } from './step-context.js';

export type WeightLayout = 'out_in' | 'in_out';

export interface Linear {
  readonly weight: Param;
  readonly bias?: Param;
  readonly layout: WeightLayout;
  readonly inFeatures: number;
  readonly outFeatures: number;
  /**
   * Inference only: when set, linearForward runs these quantized weights (src/quant/: INT4 W4A16 or
   * INT8 W8A8 through the backend's quantized ops) instead of the GEMM on `weight`; the backward refuses.
   */
  quantized?: QuantizedForward;
}

/** A quantized replacement for a Linear's forward GEMM: out [rows, out] = act(x·Wᵀ + bias) from x [rows, in]. */
export interface QuantizedForward {
  forward(ctx: StepContext, x: Tensor, out: Tensor, epilogue: 'none' | 'bias' | 'gelu_bias', bias: Tensor | undefined): void;
}

function refuseQuantized(layer: Linear): void {
  if (layer.quantized) throw new ArgumentError(`linear ${layer.weight.name}: quantized weights are for inference only; there is no backward`);
}

export function linear(weight: Param, bias: Param | undefined, layout: WeightLayout): Linear {
  const [d0, d1] = weight.value.shape as [number, number];
  const [inFeatures, outFeatures] = layout === 'out_in' ? [d1, d0] : [d0, d1];
  if (bias && (bias.value.rank !== 1 || bias.value.shape[0] !== outFeatures)) {
    throw new ArgumentError(`linear ${weight.name}: bias ${bias.name} must have shape [${outFeatures}]`);
  }
  return bias ? { weight, bias, layout, inFeatures, outFeatures } : { weight, layout, inFeatures, outFeatures };
}

/**
 * out [rows, out] = x·Wᵀ (+ bias with the epilogue). epilogue 'none' leaves the bias to a fused op
 * that follows (LightSeq's path: GEMM, then bias + dropout + residual in one kernel).
 */
export function linearForward(ctx: StepContext, layer: Linear, x: Tensor, out: Tensor, epilogue: 'none' | 'bias' | 'gelu_bias' = 'none', preActivation?: Tensor): void {
  const args: Parameters<typeof ctx.ops.gemm>[0] = {
    a: x, b: layer.weight.value, out, transB: layer.layout === 'out_in', epilogue,
  };
  if (epilogue !== 'none') {
    if (!layer.bias) throw new ArgumentError(`linear ${layer.weight.name}: epilogue '${epilogue}' needs a bias`);
    args.bias = layer.bias.value;
  }
  if (layer.quantized) {
    if (preActivation) throw new ArgumentError(`linear ${layer.weight.name}: quantized weights are for inference only; no preActivation is kept`);
    layer.quantized.forward(ctx, x, out, epilogue, args.bias);
    return;
  }
  if (preActivation) args.preActivation = preActivation;
  ctx.ops.gemm(args);
}

/** dX [rows, in] = dY·W (out_in) or dY·Wᵀ (in_out); with accumulate, dX += instead. */
export function linearInputGrad(ctx: StepContext, layer: Linear, dY: Tensor, dX: Tensor, accumulate = false): void {
  refuseQuantized(layer);
  ctx.ops.gemm({ a: dY, b: layer.weight.value, out: dX, transB: layer.layout === 'in_out', beta: accumulate ? 1 : 0 });
}

/**
 * Writes the weight gradient (and, with biasGrad and the 'out_in' layout, the bias gradient).
 * With accumulate the weight gradient is added to (gradient accumulation over micro-batches);
 * a fused bias gradient cannot accumulate, so the two options exclude each other.
 */
export function linearWeightGrad(ctx: StepContext, layer: Linear, x: Tensor, dY: Tensor, options: { biasGrad?: boolean; accumulate?: boolean } = {}): void {
  const { biasGrad = false, accumulate = false } = options;
  refuseQuantized(layer);
  if (biasGrad && (!layer.bias || layer.layout !== 'out_in' || accumulate)) {
    throw new ArgumentError(`linear ${layer.weight.name}: the fused bias gradient needs a bias, the 'out_in' layout and no accumulation`);
  }
  if (layer.layout === 'out_in') {
    const epilogue: GemmEpilogue = biasGrad ? 'bgrad_a' : 'none';
    ctx.ops.gemm({
      a: dY, b: x, out: layer.weight.grad, transA: true, epilogue, beta: accumulate ? 1 : 0,
      ...(biasGrad ? { biasGrad: layer.bias!.grad } : {}),
    });
  } else {
    ctx.ops.gemm({ a: x, b: dY, out: layer.weight.grad, transA: true, beta: accumulate ? 1 : 0 });
  }
}
