// A Transformer encoder/decoder-only block, pre-LN (GPT-2, Llama-style) or post-LN (BERT, original):
//
//   pre-LN:   m = x + drop(Attn(LN1(x)) + bo);          y = m + drop(FFN(LN2(m)) + b2)
//   post-LN:  m = LN1(x + drop(Attn(x) + bo));          y = LN2(m + drop(FFN(m) + b2))
//   FFN(a) = drop(act(a·W1ᵀ + b1))·W2ᵀ
//
// Each "+ bias → dropout → + residual" is one fused kernel, and so is "+ b1 → activation → dropout";
// the GEMMs carry no epilogue (LightSeq2's split: cuBLAS for GEMMs, our kernels for the rest).
//
// Backward, pre-LN: the residual stream's gradient flows straight through each fused residual op and
// is folded into the LayerNorm backward (its dResidual input), so no separate add ever runs.
// Post-LN: the LayerNorm backward gives dR for r = x + branch; the branch's input gradient is then
// accumulated onto dR by the GEMM itself (beta = 1).

import type { Activation } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import type { Tensor } from '../tensor.js';
import type { AttentionSaved, AttentionShape, SelfAttention } from './attention.js';
import { attentionBackward, attentionForward } from './attention.js';
import type { Linear } from './linear.js';
import { linearForward, linearInputGrad, linearWeightGrad } from './linear.js';
import type { Param } from './parameters.js';
import type { Kept } from './checkpoint.js';
import { forwardKeeping, isCheckpointed, savedForBackward } from './checkpoint.js';
import type { StepContext } from './step-context.js';

export interface LayerNormParams {
  readonly gamma: Param;
  readonly beta: Param;
  readonly eps: number;
}

export interface TransformerBlock {
  readonly attention: SelfAttention;
  readonly ln1: LayerNormParams;
  readonly fc1: Linear;
  readonly fc2: Linear;
  readonly ln2: LayerNormParams;
  readonly activation: Activation;
  readonly preLayerNorm: boolean;
  /** Dropout after the attention and FFN output projections, and inside the FFN. */
  readonly residualDropout: number;
  readonly activationDropout: number;
}

export interface NormSaved { readonly x: Tensor; readonly mean: Tensor; readonly rstd: Tensor }

export interface BlockSaved {
  readonly x: Tensor;
  readonly ln1: NormSaved;
  readonly attention: AttentionSaved;
  readonly attnMask: Tensor;
  readonly mid: Tensor;
  readonly ln2: NormSaved;
  /** FFN input (LN2(m) for pre-LN, m for post-LN). */
  readonly ffnIn: Tensor;
  readonly fc1Out: Tensor;
  readonly actMask: Tensor;
  readonly hidden: Tensor;
  readonly ffnMask: Tensor;
}

/** x [rows, H] → a new normalised buffer, and what the backward needs. */
export function layerNorm(ctx: StepContext, p: LayerNormParams, x: Tensor, name: string): { out: Tensor; saved: NormSaved } {
  const rows = x.shape[0]!;
  const out = ctx.buffer(`${name}.out`, x.shape, x.dtype);
  const mean = ctx.buffer(`${name}.mean`, [rows], 'f32');
  const rstd = ctx.buffer(`${name}.rstd`, [rows], 'f32');
  ctx.ops.layerNormForward({ x, gamma: p.gamma.value, beta: p.beta.value, out, mean, rstd, eps: p.eps });
  return { out, saved: { x, mean, rstd } };
}

/** dX = LN'(dOut) (+ dResidual, fused); writes the norm's gain and bias gradients. */
export function layerNormBackward(ctx: StepContext, p: LayerNormParams, saved: NormSaved, dOut: Tensor, dX: Tensor, dResidual?: Tensor): void {
  ctx.ops.layerNormBackward({
    dOut, x: saved.x, gamma: p.gamma.value, mean: saved.mean, rstd: saved.rstd,
    dX, dGamma: p.gamma.grad, dBeta: p.beta.grad, ...(dResidual ? { dResidual } : {}),
  });
}

/** x [B·L, H] → y [B·L, H] (a new buffer). */
export function blockForward(ctx: StepContext, block: TransformerBlock, shape: AttentionShape, x: Tensor): { y: Tensor; saved: BlockSaved } {
  const rows = x.shape[0]!, H = x.shape[1]!, F = block.fc1.outFeatures;
  const dtype = x.dtype as FloatDType;
  const pre = block.preLayerNorm;

  // attention branch
  const ln1 = pre ? layerNorm(ctx, block.ln1, x, 'ln1') : undefined;
  const attnIn = ln1 ? ln1.out : x;
  const attnProj = ctx.buffer('attn.proj', [rows, H], dtype);
  const attention = attentionForward(ctx, block.attention, shape, attnIn, attnProj);
  const attnMask = ctx.buffer('attn.mask', [rows, H], 'u8');
  const r1 = ctx.buffer(pre ? 'block.mid' : 'block.r1', [rows, H], dtype);
  ctx.ops.biasDropoutResidual({ input: attnProj, bias: block.attention.out.bias!.value, residual: x, out: r1, mask: attnMask, ...ctx.dropout(block.residualDropout, rows * H) });
  const postLn1 = pre ? undefined : layerNorm(ctx, block.ln1, r1, 'ln1');
  const mid = postLn1 ? postLn1.out : r1;

  // feed-forward branch
  const ln2 = pre ? layerNorm(ctx, block.ln2, mid, 'ln2') : undefined;
  const ffnIn = ln2 ? ln2.out : mid;
  const fc1Out = ctx.buffer('ffn.fc1', [rows, F], dtype);
  linearForward(ctx, block.fc1, ffnIn, fc1Out);
  const hidden = ctx.buffer('ffn.hidden', [rows, F], dtype);
  const actMask = ctx.buffer('ffn.actMask', [rows, F], 'u8');
  ctx.ops.biasActivationDropout({ input: fc1Out, bias: block.fc1.bias!.value, out: hidden, mask: actMask, activation: block.activation, ...ctx.dropout(block.activationDropout, rows * F) });
  const fc2Out = ctx.buffer('ffn.fc2', [rows, H], dtype);
  linearForward(ctx, block.fc2, hidden, fc2Out);
  const ffnMask = ctx.buffer('ffn.mask', [rows, H], 'u8');
  const r2 = ctx.buffer(pre ? 'block.out' : 'block.r2', [rows, H], dtype);
  ctx.ops.biasDropoutResidual({ input: fc2Out, bias: block.fc2.bias!.value, residual: mid, out: r2, mask: ffnMask, ...ctx.dropout(block.residualDropout, rows * H) });
  const postLn2 = pre ? undefined : layerNorm(ctx, block.ln2, r2, 'ln2');
  const y = postLn2 ? postLn2.out : r2;

  const saved: BlockSaved = {
    x, ln1: (ln1 ?? postLn1)!.saved, attention, attnMask, mid, ln2: (ln2 ?? postLn2)!.saved,
    ffnIn, fc1Out, actMask, hidden, ffnMask,
  };
  return { y, saved };
}

/** dY [B·L, H] → dX [B·L, H] (a new buffer); writes every parameter gradient of the block. */
export function blockBackward(ctx: StepContext, block: TransformerBlock, shape: AttentionShape, saved: BlockSaved, dY: Tensor): Tensor {
  const rows = dY.shape[0]!, H = dY.shape[1]!, F = block.fc1.outFeatures;
  const dtype = dY.dtype;
  const pre = block.preLayerNorm;

  // Gradient of the FFN residual sum r2 (pre-LN: r2 is the output itself).
  let dR2 = dY;
  if (!pre) {
    dR2 = ctx.buffer('block.dR2', [rows, H], dtype);
    layerNormBackward(ctx, block.ln2, saved.ln2, dY, dR2);
  }
  const dFc2 = ctx.buffer('ffn.dFc2', [rows, H], dtype);
  ctx.ops.biasDropoutResidualBackward({ dOut: dR2, mask: saved.ffnMask, p: block.residualDropout, dInput: dFc2, dBias: block.fc2.bias!.grad });
  linearWeightGrad(ctx, block.fc2, saved.hidden, dFc2);
  const dHidden = ctx.buffer('ffn.dHidden', [rows, F], dtype);
  linearInputGrad(ctx, block.fc2, dFc2, dHidden);
  ctx.ops.biasActivationDropoutBackward({
    dOut: dHidden, input: saved.fc1Out, bias: block.fc1.bias!.value, mask: saved.actMask, p: block.activationDropout,
    activation: block.activation, dInput: dHidden, dBias: block.fc1.bias!.grad,
  });
  linearWeightGrad(ctx, block.fc1, saved.ffnIn, dHidden);

  // Gradient of the middle stream m.
  let dMid: Tensor;
  if (pre) {
    // m feeds LN2 and the residual: dM = LN2'(dFfnIn) + dR2, fused into the LayerNorm backward.
    const dFfnIn = ctx.buffer('ffn.dIn', [rows, H], dtype);
    linearInputGrad(ctx, block.fc1, dHidden, dFfnIn);
    dMid = ctx.buffer('block.dMid', [rows, H], dtype);
    layerNormBackward(ctx, block.ln2, saved.ln2, dFfnIn, dMid, dR2);
  } else {
    // m feeds the FFN and the residual: dM = dR2 + dHidden·W1, accumulated by the GEMM onto dR2.
    linearInputGrad(ctx, block.fc1, dHidden, dR2, true);
    dMid = dR2;
  }

  // Attention branch.
  let dR1 = dMid;
  if (!pre) {
    dR1 = ctx.buffer('block.dR1', [rows, H], dtype);
    layerNormBackward(ctx, block.ln1, saved.ln1, dMid, dR1);
  }
  const dAttnProj = ctx.buffer('attn.dProj', [rows, H], dtype);
  ctx.ops.biasDropoutResidualBackward({ dOut: dR1, mask: saved.attnMask, p: block.residualDropout, dInput: dAttnProj, dBias: block.attention.out.bias!.grad });
  if (pre) {
    const dAttnIn = ctx.buffer('attn.dIn', [rows, H], dtype);
    attentionBackward(ctx, block.attention, shape, saved.attention, dAttnProj, dAttnIn);
    const dX = ctx.buffer('block.dX', [rows, H], dtype);
    layerNormBackward(ctx, block.ln1, saved.ln1, dAttnIn, dX, dR1);
    return dX;
  }
  attentionBackward(ctx, block.attention, shape, saved.attention, dAttnProj, dR1, true);
  return dR1;
}

/** A stack of blocks, forward: every `checkpointEvery`-th block checkpointed (when a backward follows). */
export function blockStackForward(ctx: StepContext, blocks: readonly TransformerBlock[], shape: AttentionShape, x: Tensor, checkpointEvery: number, backward: boolean): { y: Tensor; kept: Kept<BlockSaved, Tensor>[] } {
  const kept: Kept<BlockSaved, Tensor>[] = [];
  let y = x;
  blocks.forEach((block, i) => {
    const r = forwardKeeping(ctx, isCheckpointed(i, checkpointEvery, backward), y, (input) => blockForward(ctx, block, shape, input));
    kept.push(r.kept);
    y = r.y;
  });
  return { y, kept };
}

/** The stack's backward, last block first (recomputing checkpointed blocks); returns dX. */
export function blockStackBackward(ctx: StepContext, blocks: readonly TransformerBlock[], shape: AttentionShape, kept: readonly Kept<BlockSaved, Tensor>[], dY: Tensor): Tensor {
  let dX = dY;
  for (let i = blocks.length - 1; i >= 0; i--) {
    const block = blocks[i]!;
    dX = blockBackward(ctx, block, shape, savedForBackward(ctx, kept[i]!, (input) => blockForward(ctx, block, shape, input)), dX);
  }
  return dX;
}
