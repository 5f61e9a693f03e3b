// One residual sublayer of a Transformer block, around any branch f whose output projection's bias is
// left to the fused op (the branch writes proj = f(input) without it):
//
//   pre-LN:   y = x + drop(f(LN(x)) + b)
//   post-LN:  y = LN(x + drop(f(x) + b))
//
// "+ b → dropout → + residual" is one fused kernel. Backward, pre-LN: dProj = drop'(dY) (with db), the
// branch writes dIn, and the LayerNorm backward adds the residual's gradient dY itself (dResidual).
// Post-LN: dR = LN'(dY); dProj = drop'(dR) (with db); the branch's input gradient is accumulated onto
// dR by its last GEMM (beta = 1), which is then dX.
//
// Also the feed-forward branch f(a) = drop(act(a·W1ᵀ + b1))·W2ᵀ, with "+ b1 → act → dropout" fused.

import type { Activation } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';
import type { Linear } from './linear.js';
import { linearForward, linearInputGrad, linearWeightGrad } from './linear.js';
import type { Param } from './parameters.js';
import type { StepContext } from './step-context.js';
import type { LayerNormParams, NormSaved } from './transformer-block.js';
import { layerNorm, layerNormBackward } from './transformer-block.js';

export interface Sublayer {
  readonly norm: LayerNormParams;
  /** The branch's output bias, added by the fused residual op. */
  readonly bias: Param;
  readonly preLayerNorm: boolean;
  readonly dropout: number;
}

export interface SublayerSaved<S> {
  readonly norm: NormSaved;
  readonly mask: Tensor;
  /** The dropout probability the forward used (0 in evaluation). */
  readonly p: number;
  readonly branch: S;
}

/** x [rows, H] → y [rows, H] (a new buffer); `branch(input, proj)` writes proj [rows, H] and returns what its backward needs. */
export function sublayerForward<S>(ctx: StepContext, layer: Sublayer, x: Tensor, name: string, branch: (input: Tensor, proj: Tensor) => S): { y: Tensor; saved: SublayerSaved<S> } {
  const rows = x.shape[0]!, H = x.shape[1]!;
  const pre = layer.preLayerNorm ? layerNorm(ctx, layer.norm, x, `${name}.ln`) : undefined;
  const proj = ctx.buffer(`${name}.proj`, [rows, H], x.dtype);
  const branchSaved = branch(pre ? pre.out : x, proj);
  const mask = ctx.buffer(`${name}.mask`, [rows, H], 'u8');
  const r = ctx.buffer(`${name}.residual`, [rows, H], x.dtype);
  const drop = ctx.dropout(layer.dropout, rows * H);
  ctx.ops.biasDropoutResidual({ input: proj, bias: layer.bias.value, residual: x, out: r, mask, ...drop });
  const post = pre ? undefined : layerNorm(ctx, layer.norm, r, `${name}.ln`);
  return { y: post ? post.out : r, saved: { norm: (pre ?? post)!.saved, mask, p: drop.p, branch: branchSaved } };
}

/**
 * dY [rows, H] → dX [rows, H] (a new buffer); `branch(dProj, dIn, accumulate)` writes (or adds to) the
 * gradient of its input and its own parameter gradients.
 */
export function sublayerBackward<S>(ctx: StepContext, layer: Sublayer, saved: SublayerSaved<S>, dY: Tensor, name: string, branch: (branchSaved: S, dProj: Tensor, dIn: Tensor, accumulate: boolean) => void): Tensor {
  const rows = dY.shape[0]!, H = dY.shape[1]!, dtype = dY.dtype;
  const dProj = ctx.buffer(`${name}.dProj`, [rows, H], dtype);
  if (layer.preLayerNorm) {
    ctx.ops.biasDropoutResidualBackward({ dOut: dY, mask: saved.mask, p: saved.p, dInput: dProj, dBias: layer.bias.grad });
    const dIn = ctx.buffer(`${name}.dIn`, [rows, H], dtype);
    branch(saved.branch, dProj, dIn, false);
    const dX = ctx.buffer(`${name}.dX`, [rows, H], dtype);
    layerNormBackward(ctx, layer.norm, saved.norm, dIn, dX, dY);
    return dX;
  }
  const dR = ctx.buffer(`${name}.dX`, [rows, H], dtype);
  layerNormBackward(ctx, layer.norm, saved.norm, dY, dR);
  ctx.ops.biasDropoutResidualBackward({ dOut: dR, mask: saved.mask, p: saved.p, dInput: dProj, dBias: layer.bias.grad });
  branch(saved.branch, dProj, dR, true);
  return dR;
}

export interface FeedForward {
  readonly fc1: Linear;
  readonly fc2: Linear;
  readonly activation: Activation;
  /** Dropout after the activation. */
  readonly dropout: number;
}

export interface FeedForwardSaved {
  readonly input: Tensor;
  readonly fc1Out: Tensor;
  readonly mask: Tensor;
  readonly hidden: Tensor;
  readonly p: number;
}

/** input [rows, H] → proj [rows, H] = drop(act(input·W1ᵀ + b1))·W2ᵀ (without b2). */
export function feedForwardForward(ctx: StepContext, ffn: FeedForward, input: Tensor, proj: Tensor): FeedForwardSaved {
  const rows = input.shape[0]!, F = ffn.fc1.outFeatures;
  const fc1Out = ctx.buffer('ffn.fc1', [rows, F], input.dtype);
  linearForward(ctx, ffn.fc1, input, fc1Out);
  const hidden = ctx.buffer('ffn.hidden', [rows, F], input.dtype);
  const mask = ctx.buffer('ffn.actMask', [rows, F], 'u8');
  const drop = ctx.dropout(ffn.dropout, rows * F);
  ctx.ops.biasActivationDropout({ input: fc1Out, bias: ffn.fc1.bias!.value, out: hidden, mask, activation: ffn.activation, ...drop });
  linearForward(ctx, ffn.fc2, hidden, proj);
  return { input, fc1Out, mask, hidden, p: drop.p };
}

/** dProj [rows, H] → dIn [rows, H] (written, or added to with accumulate); writes W1, b1, W2's gradients. */
export function feedForwardBackward(ctx: StepContext, ffn: FeedForward, saved: FeedForwardSaved, dProj: Tensor, dIn: Tensor, accumulate: boolean): void {
  const rows = dProj.shape[0]!, F = ffn.fc1.outFeatures;
  linearWeightGrad(ctx, ffn.fc2, saved.hidden, dProj);
  const dHidden = ctx.buffer('ffn.dHidden', [rows, F], dProj.dtype);
  linearInputGrad(ctx, ffn.fc2, dProj, dHidden);
  ctx.ops.biasActivationDropoutBackward({
    dOut: dHidden, input: saved.fc1Out, bias: ffn.fc1.bias!.value, mask: saved.mask, p: saved.p,
    activation: ffn.activation, dInput: dHidden, dBias: ffn.fc1.bias!.grad,
  });
  linearWeightGrad(ctx, ffn.fc1, saved.input, dHidden);
  linearInputGrad(ctx, ffn.fc1, dHidden, dIn, accumulate);
}
