// Multi-head self-attention, LightSeq's path (the score matrix is materialised):
//   qkv  = x·Wqkvᵀ                      GEMM, no bias              [B·L, 3·H]
//   q,k,v = split(qkv + b), q·1/√d      fused bias + reshape       [B, heads, L, d] each
//   s    = q·kᵀ                         batched GEMM               [B·heads, L, L]
//   p    = softmax(s + mask)            in place; causal and/or key-padding mask
//   p'   = dropout(p)                   only with attention dropout (p is kept for the backward)
//   c    = p'·v                         batched GEMM               [B·heads, L, d]
//   ctx  = merge heads(c)               permute 0213               [B·L, H]
//   y    = ctx·Woᵀ                      GEMM, no bias: the block fuses bias + dropout + residual next
//
// Backward, from dY [B·L, H] (the gradient of y):
//   dWo = ..., dCtx = dY·Wo → dC = split heads(dCtx)
//   dP = dC·vᵀ, dV = pᵀ·dC;  dS = softmax'(p, dP) (in place);  dQ = dS·k, dK = dSᵀ·q
//   dQkv = merge(dQ·1/√d, dK, dV), dBqkv = Σ dQkv  (fused);  dWqkv, dX = dQkv·Wqkv
// q is stored pre-scaled, so dK = dSᵀ·(q/√d) needs no extra scaling and dQ is scaled once in the merge.

import type { Tensor } from '../tensor.js';
import { ArgumentError } from '../errors.js';
import type { Linear } from './linear.js';
import { linearForward, linearInputGrad, linearWeightGrad } from './linear.js';
import type { StepContext } from './step-context.js';

export interface SelfAttention {
  readonly qkv: Linear;
  readonly out: Linear;
  readonly heads: number;
  readonly causal: boolean;
  /** Dropout on the attention probabilities. */
  readonly dropout: number;
}

export interface AttentionShape {
  readonly batch: number;
  readonly seqLen: number;
  /** i32 [batch]: keys at positions ≥ keyLengths[b] are padding (optional). */
  readonly keyLengths?: Tensor;
}

/** What the forward keeps for the backward. */
export interface AttentionSaved {
  readonly x: Tensor;
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly probs: Tensor;
  /** The probabilities after dropout and their keep mask (absent without attention dropout). */
  readonly dropped?: { readonly probs: Tensor; readonly mask: Tensor; readonly p: number };
  readonly merged: Tensor;
}

export function selfAttention(qkv: Linear, out: Linear, heads: number, causal: boolean, dropout = 0): SelfAttention {
  const hidden = out.outFeatures;
  if (qkv.outFeatures !== 3 * hidden || qkv.inFeatures !== hidden || out.inFeatures !== hidden) {
    throw new ArgumentError(`selfAttention: QKV projection must be [${hidden} → ${3 * hidden}] and output [${hidden} → ${hidden}]`);
  }
  if (hidden % heads !== 0) throw new ArgumentError(`selfAttention: hidden ${hidden} is not divisible by ${heads} heads`);
  if (!qkv.bias) throw new ArgumentError('selfAttention: the QKV projection needs a bias (it is fused into the head split)');
  return { qkv, out, heads, causal, dropout };
}

/** x [B·L, H] → y [B·L, H], the output projection before its bias. */
export function attentionForward(ctx: StepContext, layer: SelfAttention, shape: AttentionShape, x: Tensor, y: Tensor): AttentionSaved {
  const { batch: B, seqLen: L } = shape;
  const H = layer.out.outFeatures, heads = layer.heads, d = H / heads;
  const dtype = x.dtype;
  const qkvRaw = ctx.buffer('attn.qkv', [B * L, 3 * H], dtype);
  linearForward(ctx, layer.qkv, x, qkvRaw);
  const q = ctx.buffer('attn.q', [B, heads, L, d], dtype);
  const k = ctx.buffer('attn.k', [B, heads, L, d], dtype);
  const v = ctx.buffer('attn.v', [B, heads, L, d], dtype);
  ctx.ops.biasQkvSplit({ qkv: ctx.reshape(qkvRaw, [B, L, 3 * H]), bias: layer.qkv.bias!.value, heads, q, k, v, qScale: 1 / Math.sqrt(d) });

  const probs = ctx.buffer('attn.probs', [B, heads, L, L], dtype);
  ctx.ops.batchedGemm({ a: ctx.reshape(q, [B * heads, L, d]), b: ctx.reshape(k, [B * heads, L, d]), out: ctx.reshape(probs, [B * heads, L, L]), transB: true });
  ctx.ops.softmaxForward({ x: probs, out: probs, causal: layer.causal, ...(shape.keyLengths ? { keyLengths: shape.keyLengths } : {}) });

  const drop = ctx.dropout(layer.dropout, B * heads * L * L);
  let dropped: AttentionSaved['dropped'];
  if (drop.p > 0) {
    dropped = { probs: ctx.buffer('attn.dropped', [B, heads, L, L], dtype), mask: ctx.buffer('attn.dropMask', [B, heads, L, L], 'u8'), p: drop.p };
    ctx.ops.dropout({ x: probs, out: dropped.probs, mask: dropped.mask, ...drop });
  }
  const heads4 = ctx.buffer('attn.context', [B, heads, L, d], dtype);
  ctx.ops.batchedGemm({ a: ctx.reshape(dropped ? dropped.probs : probs, [B * heads, L, L]), b: ctx.reshape(v, [B * heads, L, d]), out: ctx.reshape(heads4, [B * heads, L, d]) });
  const merged = ctx.buffer('attn.merged', [B, L, heads, d], dtype);
  ctx.ops.permute0213({ x: heads4, out: merged });
  const merged2d = ctx.reshape(merged, [B * L, H]);
  linearForward(ctx, layer.out, merged2d, y);
  return { x, q, k, v, probs, ...(dropped ? { dropped } : {}), merged: merged2d };
}

/**
 * dY [B·L, H] (gradient of the output projection's result; its bias gradient is the caller's) →
 * dX [B·L, H] (written, or added to with accumulateDx) and every weight gradient of the layer.
 */
export function attentionBackward(ctx: StepContext, layer: SelfAttention, shape: AttentionShape, saved: AttentionSaved, dY: Tensor, dX: Tensor, accumulateDx = false): void {
  const { batch: B, seqLen: L } = shape;
  const H = layer.out.outFeatures, heads = layer.heads, d = H / heads;
  const dtype = dY.dtype;
  linearWeightGrad(ctx, layer.out, saved.merged, dY);
  const dMerged = ctx.buffer('attn.dMerged', [B, L, heads, d], dtype);
  linearInputGrad(ctx, layer.out, dY, ctx.reshape(dMerged, [B * L, H]));
  const dContext = ctx.buffer('attn.dContext', [B, heads, L, d], dtype);
  ctx.ops.permute0213({ x: dMerged, out: dContext });

  const bh = (t: Tensor, rows: number, cols: number) => ctx.reshape(t, [B * heads, rows, cols]);
  const dProbs = ctx.buffer('attn.dProbs', [B, heads, L, L], dtype);
  ctx.ops.batchedGemm({ a: bh(dContext, L, d), b: bh(saved.v, L, d), out: bh(dProbs, L, L), transB: true });
  const dv = ctx.buffer('attn.dv', [B, heads, L, d], dtype);
  ctx.ops.batchedGemm({ a: bh(saved.dropped ? saved.dropped.probs : saved.probs, L, L), b: bh(dContext, L, d), out: bh(dv, L, d), transA: true });
  if (saved.dropped) ctx.ops.biasDropoutResidualBackward({ dOut: dProbs, mask: saved.dropped.mask, p: saved.dropped.p, dInput: dProbs });
  ctx.ops.softmaxBackward({ y: saved.probs, dY: dProbs, dX: dProbs });

  const dq = ctx.buffer('attn.dq', [B, heads, L, d], dtype);
  ctx.ops.batchedGemm({ a: bh(dProbs, L, L), b: bh(saved.k, L, d), out: bh(dq, L, d) });
  const dk = ctx.buffer('attn.dk', [B, heads, L, d], dtype);
  ctx.ops.batchedGemm({ a: bh(dProbs, L, L), b: bh(saved.q, L, d), out: bh(dk, L, d), transA: true });

  const dQkv = ctx.buffer('attn.dQkv', [B * L, 3 * H], dtype);
  ctx.ops.biasQkvSplitBackward({ dq, dk, dv, heads, dQkv: ctx.reshape(dQkv, [B, L, 3 * H]), dBias: layer.qkv.bias!.grad, qScale: 1 / Math.sqrt(d) });
  linearWeightGrad(ctx, layer.qkv, saved.x, dQkv);
  linearInputGrad(ctx, layer.qkv, dQkv, dX, accumulateDx);
}
