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
//
// The part between the head split and the head merge (scores, softmax, dropout, context) is
// attendForward/attendBackward, shared with cross-attention (nn/cross-attention.ts), where the
// queries and the keys come from different streams (Lq ≠ Lk).
//
// The fused path (flashAttentionForward/Backward, no L×L buffer) takes attention dropout too: the op
// draws the keep flag of element (b, h, i, j) from the same Philox counter the dropout op would use on
// the materialised [B, heads, Lq, Lk] probabilities (the same seed and offset from ctx.dropout), so both
// paths drop the same elements; the backward redraws the mask from the saved dropout arguments.

import type { DropoutArgs } from '../backend/backend.js';
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
  /**
   * Use the fused attention op (flashAttentionForward/Backward: no L×L matrix in memory) instead of
   * the LightSeq path: always (true), never (false), or by shape ('auto', see preferFusedAttention).
   * Attention dropout is drawn inside the fused op.
   */
  readonly fused: FusedAttentionChoice;
}

export interface AttentionShape {
  readonly batch: number;
  readonly seqLen: number;
  /** i32 [batch]: keys at positions ≥ keyLengths[b] are padding (optional). */
  readonly keyLengths?: Tensor;
}

/** What the forward keeps for the backward (dropped: the probabilities after dropout and their keep mask). */
export interface AttentionSaved extends AttendSaved {
  readonly x: Tensor;
  readonly merged: Tensor;
}

export type FusedAttentionChoice = boolean | 'auto';

/**
 * The 'auto' rule: the fused op for 16-bit activations once the score matrix is large (Lk ≥
 * FUSED_ATTENTION_MIN_KEYS), where its tensor-core kernels beat two batched GEMMs plus a softmax that
 * write and read the L×L scores; the LightSeq path for short sequences, where those GEMMs are cheap.
 * Measured on the H200 (bench/train.ts, bf16, 2026-11-29): GPT-2 16 × 1024 32.9 ms fused against 38.8 ms
 * LightSeq; BERT-base 32 × 256 12.6 against 13.0 ms. Shorter sequences are unmeasured and stay LightSeq.
 * With attention dropout, 'auto' keeps the LightSeq path: the fused op's dropout (drawn inside the
 * kernels) is exact on the H200 (test/gpu/flash-dropout.test.ts) but its Philox draws hold it to 92–186
 * TFLOP/s (docs/perf.md), and no training step has compared the two paths with dropout yet; `true` takes it.
 */
export const FUSED_ATTENTION_MIN_KEYS = 256;

export function preferFusedAttention(choice: FusedAttentionChoice, dtype: string, dims: AttendDims, dropout = 0): boolean {
  if (choice !== 'auto') return choice;
  return dtype !== 'f32' && dims.keyLen >= FUSED_ATTENTION_MIN_KEYS && dropout === 0;
}

export function selfAttention(qkv: Linear, out: Linear, heads: number, causal: boolean, dropout = 0, fused: FusedAttentionChoice = 'auto'): SelfAttention {
  const hidden = out.outFeatures;
  if (qkv.outFeatures !== 3 * hidden || qkv.inFeatures !== hidden || out.inFeatures !== hidden) {
    throw new ArgumentError(`selfAttention: QKV projection must be [${hidden} → ${3 * hidden}] and output [${hidden} → ${hidden}]`);
  }
  if (hidden % heads !== 0) throw new ArgumentError(`selfAttention: hidden ${hidden} is not divisible by ${heads} heads`);
  if (!qkv.bias) throw new ArgumentError('selfAttention: the QKV projection needs a bias (it is fused into the head split)');
  return { qkv, out, heads, causal, dropout, fused };
}

/** Sizes of one attention: `batch` sequences, `heads` heads of size d, Lq queries against Lk keys. */
export interface AttendDims {
  readonly batch: number;
  readonly heads: number;
  readonly queryLen: number;
  readonly keyLen: number;
  readonly headDim: number;
}

export interface AttendOptions {
  readonly causal: boolean;
  /** i32 [batch]: keys at positions ≥ keyLengths[b] are masked. */
  readonly keyLengths?: Tensor;
  /** Dropout on the probabilities. */
  readonly dropout: number;
  /** Multiplies the scores inside the softmax (1 when q is stored pre-scaled). */
  readonly scale: number;
  /** The fused attention op, dropout drawn inside it (see SelfAttention.fused; default false). */
  readonly fused?: FusedAttentionChoice;
}

/** What attendForward keeps for attendBackward. */
export interface AttendSaved {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  /** The LightSeq path's probabilities (absent on the fused path). */
  readonly probs?: Tensor;
  readonly dropped?: { readonly probs: Tensor; readonly mask: Tensor; readonly p: number };
  /** The fused path's output and log-sum-exp, and the masks (and dropout draw) its backward must repeat. */
  readonly fused?: { readonly out: Tensor; readonly lse: Tensor; readonly causal: boolean; readonly keyLengths?: Tensor; readonly dropout?: DropoutArgs };
}

/**
 * q [B, heads, Lq, d], k and v [B, heads, Lk, d] → merged heads [B·Lq, H]:
 * merge(dropout(softmax(scale·q·kᵀ + mask))·v).
 */
export function attendForward(ctx: StepContext, dims: AttendDims, q: Tensor, k: Tensor, v: Tensor, options: AttendOptions): { saved: AttendSaved; merged: Tensor } {
  const { batch: B, heads, queryLen: Lq, keyLen: Lk, headDim: d } = dims;
  const dtype = q.dtype;
  const bh = (t: Tensor, rows: number, cols: number) => ctx.reshape(t, [B * heads, rows, cols]);
  const drop = ctx.dropout(options.dropout, B * heads * Lq * Lk);
  const masks = { causal: options.causal, ...(options.keyLengths ? { keyLengths: options.keyLengths } : {}) };
  if (preferFusedAttention(options.fused ?? false, dtype, dims, drop.p)) {
    const out = ctx.buffer('attn.context', [B, heads, Lq, d], dtype);
    const lse = ctx.buffer('attn.lse', [B, heads, Lq], 'f32');
    const dropout = drop.p > 0 ? { dropout: drop } : {};
    ctx.ops.flashAttentionForward({ q, k, v, out, lse, scale: options.scale, ...masks, ...dropout });
    const merged = ctx.buffer('attn.merged', [B, Lq, heads, d], dtype);
    ctx.ops.permute0213({ x: out, out: merged });
    return { saved: { q, k, v, fused: { out, lse, ...masks, ...dropout } }, merged: ctx.reshape(merged, [B * Lq, heads * d]) };
  }
  const probs = ctx.buffer('attn.probs', [B, heads, Lq, Lk], dtype);
  ctx.ops.batchedGemm({ a: bh(q, Lq, d), b: bh(k, Lk, d), out: bh(probs, Lq, Lk), transB: true });
  ctx.ops.softmaxForward({
    x: probs, out: probs, causal: options.causal,
    ...(options.keyLengths ? { keyLengths: options.keyLengths } : {}), ...(options.scale !== 1 ? { scale: options.scale } : {}),
  });

  let dropped: AttendSaved['dropped'];
  if (drop.p > 0) {
    dropped = { probs: ctx.buffer('attn.dropped', [B, heads, Lq, Lk], dtype), mask: ctx.buffer('attn.dropMask', [B, heads, Lq, Lk], 'u8'), p: drop.p };
    ctx.ops.dropout({ x: probs, out: dropped.probs, mask: dropped.mask, ...drop });
  }
  const heads4 = ctx.buffer('attn.context', [B, heads, Lq, d], dtype);
  ctx.ops.batchedGemm({ a: bh(dropped ? dropped.probs : probs, Lq, Lk), b: bh(v, Lk, d), out: bh(heads4, Lq, d) });
  const merged = ctx.buffer('attn.merged', [B, Lq, heads, d], dtype);
  ctx.ops.permute0213({ x: heads4, out: merged });
  return { saved: { q, k, v, probs, ...(dropped ? { dropped } : {}) }, merged: ctx.reshape(merged, [B * Lq, heads * d]) };
}

/**
 * dMerged [B·Lq, H] (gradient of the merged heads) → dq [B, heads, Lq, d] (a new buffer), and dk, dv
 * [B, heads, Lk, d] written into the caller's buffers. With the softmax scale s, dS = s·softmax'(dP),
 * so dq = dS·k and dk = dSᵀ·q need no further scaling.
 */
export function attendBackward(ctx: StepContext, dims: AttendDims, saved: AttendSaved, scale: number, dMerged: Tensor, dk: Tensor, dv: Tensor): Tensor {
  const { batch: B, heads, queryLen: Lq, keyLen: Lk, headDim: d } = dims;
  const dtype = dMerged.dtype;
  const bh = (t: Tensor, rows: number, cols: number) => ctx.reshape(t, [B * heads, rows, cols]);
  const dContext = ctx.buffer('attn.dContext', [B, heads, Lq, d], dtype);
  ctx.ops.permute0213({ x: ctx.reshape(dMerged, [B, Lq, heads, d]), out: dContext });
  if (saved.fused) {
    const dq = ctx.buffer('attn.dq', [B, heads, Lq, d], dtype);
    const { out, lse, causal, keyLengths, dropout } = saved.fused;
    ctx.ops.flashAttentionBackward({
      q: saved.q, k: saved.k, v: saved.v, out, dOut: dContext, lse, dq, dk, dv, scale, causal,
      ...(keyLengths ? { keyLengths } : {}), ...(dropout ? { dropout } : {}),
    });
    return dq;
  }
  const probs = saved.probs!;

  const dProbs = ctx.buffer('attn.dProbs', [B, heads, Lq, Lk], dtype);
  ctx.ops.batchedGemm({ a: bh(dContext, Lq, d), b: bh(saved.v, Lk, d), out: bh(dProbs, Lq, Lk), transB: true });
  ctx.ops.batchedGemm({ a: bh(saved.dropped ? saved.dropped.probs : probs, Lq, Lk), b: bh(dContext, Lq, d), out: bh(dv, Lk, d), transA: true });
  if (saved.dropped) ctx.ops.biasDropoutResidualBackward({ dOut: dProbs, mask: saved.dropped.mask, p: saved.dropped.p, dInput: dProbs });
  ctx.ops.softmaxBackward({ y: probs, dY: dProbs, dX: dProbs, ...(scale !== 1 ? { scale } : {}) });

  const dq = ctx.buffer('attn.dq', [B, heads, Lq, d], dtype);
  ctx.ops.batchedGemm({ a: bh(dProbs, Lq, Lk), b: bh(saved.k, Lk, d), out: bh(dq, Lq, d) });
  ctx.ops.batchedGemm({ a: bh(dProbs, Lq, Lk), b: bh(saved.q, Lq, d), out: bh(dk, Lk, d), transA: true });
  return dq;
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
  const dims: AttendDims = { batch: B, heads, queryLen: L, keyLen: L, headDim: d };
  const { saved, merged } = attendForward(ctx, dims, q, k, v, {
    causal: layer.causal, dropout: layer.dropout, scale: 1, fused: layer.fused, ...(shape.keyLengths ? { keyLengths: shape.keyLengths } : {}),
  });
  linearForward(ctx, layer.out, merged, y);
  return { x, ...saved, merged };
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
  const dMerged = ctx.buffer('attn.dMerged', [B * L, H], dtype);
  linearInputGrad(ctx, layer.out, dY, dMerged);
  const dk = ctx.buffer('attn.dk', [B, heads, L, d], dtype);
  const dv = ctx.buffer('attn.dv', [B, heads, L, d], dtype);
  const dq = attendBackward(ctx, { batch: B, heads, queryLen: L, keyLen: L, headDim: d }, saved, 1, dMerged, dk, dv);

  const dQkv = ctx.buffer('attn.dQkv', [B * L, 3 * H], dtype);
  ctx.ops.biasQkvSplitBackward({ dq, dk, dv, heads, dQkv: ctx.reshape(dQkv, [B, L, 3 * H]), dBias: layer.qkv.bias!.grad, qScale: 1 / Math.sqrt(d) });
  linearWeightGrad(ctx, layer.qkv, saved.x, dQkv);
  linearInputGrad(ctx, layer.qkv, dQkv, dX, accumulateDx);
}
