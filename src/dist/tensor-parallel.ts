// Megatron-style tensor parallelism of a pre-LN Transformer block over `worldSize` ranks. Every rank
// holds the full activations x [rows, C] (replicated) and a slice of each weight:
//
//   column-parallel  Y_r = X·W[:, cols_r]          (QKV projection: the columns of this rank's heads in
//                                                   each of q, k and v; FFN fc1: F/w columns)
//                    no communication forward; backward dX = Σ_r dY_r·W[:, cols_r]ᵀ  → one all-reduce
//   row-parallel     Y = Σ_r X[:, rows_r]·W[rows_r, :]   (attention output and FFN fc2; the input slice
//                                                   is exactly what the column-parallel layer produced)
//                    forward: one all-reduce of the partial products, then bias + dropout + residual
//                    on the full sum (the bias is replicated and added once); backward: no communication
//
// So each block does 2 all-reduces of [rows, C] forward (after attention, after FFN) and 2 backward
// (the input gradients of the QKV and fc1 projections) — Megatron's f/g operators. Attention runs on
// heads/w local heads with the same attendForward/attendBackward as the single-GPU layer. Replicated
// parameters (layer norms, output biases) get identical gradients on every rank, because every input
// of theirs is replicated; no reduction is needed for them.
//
// Collectives inside a planned step: while the step is traced (ctx.tracing) they are skipped — the
// trace only measures buffer lifetimes, and every all-reduce here is in place on a buffer that the op
// before it writes and the op after it reads, so its lifetime is already covered.

import type { Activation } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { AttendDims, AttendSaved, AttentionShape, FusedAttentionChoice } from '../nn/attention.js';
import { attendBackward, attendForward } from '../nn/attention.js';
import type { Linear } from '../nn/linear.js';
import { linearForward, linearInputGrad, linearWeightGrad } from '../nn/linear.js';
import type { StepContext } from '../nn/step-context.js';
import type { BlockSaved, LayerNormParams } from '../nn/transformer-block.js';
import { layerNorm, layerNormBackward } from '../nn/transformer-block.js';
import type { Communicator } from './communicator.js';

/** comm.allReduce(t) when the step runs for real; nothing while it is traced. */
export function stepAllReduce(ctx: StepContext, comm: Communicator, t: Tensor): void {
  if (!ctx.tracing && comm.worldSize > 1) comm.allReduce(t, 'sum');
}

// --- parallel linear layers ----------------------------------------------------------------------

/** Column-parallel forward: out [rows, out/w] = x·W_r (+ fused epilogue). x is replicated. */
export function columnParallelForward(ctx: StepContext, layer: Linear, x: Tensor, out: Tensor, epilogue: 'none' | 'bias' | 'gelu_bias' = 'none'): void {
  linearForward(ctx, layer, x, out, epilogue);
}

/** Column-parallel input gradient: dX [rows, in] = Σ_r dY_r·W_rᵀ (one all-reduce). */
export function columnParallelInputGrad(ctx: StepContext, comm: Communicator, layer: Linear, dY: Tensor, dX: Tensor): void {
  linearInputGrad(ctx, layer, dY, dX);
  stepAllReduce(ctx, comm, dX);
}

/** Row-parallel forward, before its bias: out [rows, out] = Σ_r x_r·W_r (one all-reduce). */
export function rowParallelForward(ctx: StepContext, comm: Communicator, layer: Linear, x: Tensor, out: Tensor): void {
  linearForward(ctx, layer, x, out);
  stepAllReduce(ctx, comm, out);
}

/** Row-parallel backward: dW_r = x_rᵀ·dY, dX_r = dY·W_rᵀ — local, dY being replicated. */
export function rowParallelBackward(ctx: StepContext, layer: Linear, x: Tensor, dY: Tensor, dX: Tensor): void {
  linearWeightGrad(ctx, layer, x, dY);
  linearInputGrad(ctx, layer, dY, dX);
}

/**
 * Runs `fn` (which draws one dropout over `localNumel` elements of this rank's heads) on a counter range
 * of its own: rank r starts r·⌈localNumel/4⌉ Philox counters past the step's cursor, and afterwards the
 * cursor moves past all w ranges. Masks are independent across ranks, and every later dropout (on the
 * replicated activations) draws the counters the single-GPU model draws whenever localNumel is a
 * multiple of 4 (then w ranges are exactly the single-GPU call's range).
 */
export function rankDropoutRange<R>(ctx: StepContext, comm: Communicator, p: number, localNumel: number, fn: () => R): R {
  const blocks = Math.ceil(localNumel / 4);
  const result = ctx.replayDropout(ctx.dropoutCursor + BigInt(comm.rank * blocks), fn);
  ctx.dropout(p, 4 * blocks * comm.worldSize);
  return result;
}

// --- attention with the heads split across ranks ------------------------------------------------

export interface ParallelAttention {
  /** Column-parallel: [C → 3·C/w], this rank's q, k, v columns back to back; its bias [3·C/w]. */
  readonly qkv: Linear;
  /** Row-parallel: [C/w → C]; its bias [C] is replicated and added after the all-reduce. */
  readonly out: Linear;
  /** Heads on this rank (heads / worldSize). */
  readonly localHeads: number;
  readonly causal: boolean;
  readonly dropout: number;
  readonly fused: FusedAttentionChoice;
}

export interface ParallelAttentionSaved extends AttendSaved {
  readonly x: Tensor;
  readonly merged: Tensor;
}

function attentionDims(layer: ParallelAttention, shape: AttentionShape): AttendDims {
  const localHidden = layer.out.inFeatures;
  return { batch: shape.batch, heads: layer.localHeads, queryLen: shape.seqLen, keyLen: shape.seqLen, headDim: localHidden / layer.localHeads };
}

/** x [B·L, C] (replicated) → y [B·L, C] = Σ_r attention of rank r's heads, before the output bias. */
export function parallelAttentionForward(ctx: StepContext, comm: Communicator, layer: ParallelAttention, shape: AttentionShape, x: Tensor, y: Tensor): ParallelAttentionSaved {
  const dims = attentionDims(layer, shape);
  const { batch: B, queryLen: L, heads, headDim: d } = dims;
  const local = heads * d, dtype = x.dtype;
  const qkvRaw = ctx.buffer('attn.qkv', [B * L, 3 * local], dtype);
  columnParallelForward(ctx, layer.qkv, x, qkvRaw);
  const q = ctx.buffer('attn.q', [B, heads, L, d], dtype);
  const k = ctx.buffer('attn.k', [B, heads, L, d], dtype);
  const v = ctx.buffer('attn.v', [B, heads, L, d], dtype);
  ctx.ops.biasQkvSplit({ qkv: ctx.reshape(qkvRaw, [B, L, 3 * local]), bias: layer.qkv.bias!.value, heads, q, k, v, qScale: 1 / Math.sqrt(d) });
  const { saved, merged } = rankDropoutRange(ctx, comm, layer.dropout, B * heads * L * L, () => attendForward(ctx, dims, q, k, v, {
    causal: layer.causal, dropout: layer.dropout, scale: 1, fused: layer.fused, ...(shape.keyLengths ? { keyLengths: shape.keyLengths } : {}),
  }));
  rowParallelForward(ctx, comm, layer.out, merged, y);
  return { x, ...saved, merged };
}

/** dY [B·L, C] (replicated) → dX [B·L, C] (all-reduced), and this rank's weight gradients. */
export function parallelAttentionBackward(ctx: StepContext, comm: Communicator, layer: ParallelAttention, shape: AttentionShape, saved: ParallelAttentionSaved, dY: Tensor, dX: Tensor): void {
  const dims = attentionDims(layer, shape);
  const { batch: B, queryLen: L, heads, headDim: d } = dims;
  const local = heads * d, dtype = dY.dtype;
  const dMerged = ctx.buffer('attn.dMerged', [B * L, local], dtype);
  rowParallelBackward(ctx, layer.out, saved.merged, dY, dMerged);
  const dk = ctx.buffer('attn.dk', [B, heads, L, d], dtype);
  const dv = ctx.buffer('attn.dv', [B, heads, L, d], dtype);
  const dq = attendBackward(ctx, dims, saved, 1, dMerged, dk, dv);
  const dQkv = ctx.buffer('attn.dQkv', [B * L, 3 * local], dtype);
  ctx.ops.biasQkvSplitBackward({ dq, dk, dv, heads, dQkv: ctx.reshape(dQkv, [B, L, 3 * local]), dBias: layer.qkv.bias!.grad, qScale: 1 / Math.sqrt(d) });
  linearWeightGrad(ctx, layer.qkv, saved.x, dQkv);
  columnParallelInputGrad(ctx, comm, layer.qkv, dQkv, dX);
}

// --- the block ----------------------------------------------------------------------------------

export interface ParallelBlock {
  readonly attention: ParallelAttention;
  readonly ln1: LayerNormParams;
  /** Column-parallel [C → F/w], bias [F/w]. */
  readonly fc1: Linear;
  /** Row-parallel [F/w → C], bias [C] (replicated). */
  readonly fc2: Linear;
  readonly ln2: LayerNormParams;
  readonly activation: Activation;
  readonly residualDropout: number;
}

/** Checks that a block's local shapes fit together; names the layer that does not. */
export function checkParallelBlock(block: ParallelBlock, hidden: number): void {
  const a = block.attention;
  const local = a.out.inFeatures;
  if (a.qkv.inFeatures !== hidden || a.qkv.outFeatures !== 3 * local || a.out.outFeatures !== hidden) {
    throw new ArgumentError(`parallel attention: QKV must be [${hidden} → ${3 * local}] and output [${local} → ${hidden}]`);
  }
  if (local % a.localHeads !== 0) throw new ArgumentError(`parallel attention: local width ${local} is not divisible by ${a.localHeads} local heads`);
  if (block.fc1.inFeatures !== hidden || block.fc2.outFeatures !== hidden || block.fc1.outFeatures !== block.fc2.inFeatures) {
    throw new ArgumentError(`parallel FFN: fc1 must be [${hidden} → F/w] and fc2 [F/w → ${hidden}]`);
  }
  if (!a.qkv.bias || !a.out.bias || !block.fc1.bias || !block.fc2.bias) throw new ArgumentError('parallel block: every projection needs a bias');
}

/** What a tensor-parallel block keeps for its backward: BlockSaved's, with its rank's attention. */
export type ParallelBlockSaved = Omit<BlockSaved, 'attention'> & { readonly attention: ParallelAttentionSaved };

/** Pre-LN block: m = x + drop(Attn(LN1(x)) + bo); y = m + drop(FFN(LN2(m)) + b2), both branches split. */
export function parallelBlockForward(ctx: StepContext, comm: Communicator, block: ParallelBlock, shape: AttentionShape, x: Tensor): { y: Tensor; saved: ParallelBlockSaved } {
  const rows = x.shape[0]!, C = x.shape[1]!, F = block.fc1.outFeatures;
  const dtype = x.dtype as FloatDType;
  const ln1 = layerNorm(ctx, block.ln1, x, 'ln1');
  const attnProj = ctx.buffer('attn.proj', [rows, C], dtype);
  const attention = parallelAttentionForward(ctx, comm, block.attention, shape, ln1.out, attnProj);
  const attnMask = ctx.buffer('attn.mask', [rows, C], 'u8');
  const mid = ctx.buffer('block.mid', [rows, C], dtype);
  ctx.ops.biasDropoutResidual({ input: attnProj, bias: block.attention.out.bias!.value, residual: x, out: mid, mask: attnMask, ...ctx.dropout(block.residualDropout, rows * C) });

  const ln2 = layerNorm(ctx, block.ln2, mid, 'ln2');
  const fc1Out = ctx.buffer('ffn.fc1', [rows, F], dtype);
  columnParallelForward(ctx, block.fc1, ln2.out, fc1Out);
  const hidden = ctx.buffer('ffn.hidden', [rows, F], dtype);
  const actMask = ctx.buffer('ffn.actMask', [rows, F], 'u8');
  ctx.ops.biasActivationDropout({ input: fc1Out, bias: block.fc1.bias!.value, out: hidden, mask: actMask, activation: block.activation, ...ctx.dropout(0, rows * F) });
  const fc2Out = ctx.buffer('ffn.fc2', [rows, C], dtype);
  rowParallelForward(ctx, comm, block.fc2, hidden, fc2Out);
  const ffnMask = ctx.buffer('ffn.mask', [rows, C], 'u8');
  const y = ctx.buffer('block.out', [rows, C], dtype);
  ctx.ops.biasDropoutResidual({ input: fc2Out, bias: block.fc2.bias!.value, residual: mid, out: y, mask: ffnMask, ...ctx.dropout(block.residualDropout, rows * C) });
  return { y, saved: { x, ln1: ln1.saved, attention, attnMask, mid, ln2: ln2.saved, ffnIn: ln2.out, fc1Out, actMask, hidden, ffnMask } };
}

/** dY [rows, C] → dX [rows, C] (a new buffer, identical on every rank); writes this rank's gradients. */
export function parallelBlockBackward(ctx: StepContext, comm: Communicator, block: ParallelBlock, shape: AttentionShape, saved: ParallelBlockSaved, dY: Tensor): Tensor {
  const rows = dY.shape[0]!, C = dY.shape[1]!, F = block.fc1.outFeatures;
  const dtype = dY.dtype;
  const dFc2 = ctx.buffer('ffn.dFc2', [rows, C], dtype);
  ctx.ops.biasDropoutResidualBackward({ dOut: dY, mask: saved.ffnMask, p: block.residualDropout, dInput: dFc2, dBias: block.fc2.bias!.grad });
  const dHidden = ctx.buffer('ffn.dHidden', [rows, F], dtype);
  rowParallelBackward(ctx, block.fc2, saved.hidden, dFc2, dHidden);
  ctx.ops.biasActivationDropoutBackward({
    dOut: dHidden, input: saved.fc1Out, bias: block.fc1.bias!.value, mask: saved.actMask, p: 0,
    activation: block.activation, dInput: dHidden, dBias: block.fc1.bias!.grad,
  });
  linearWeightGrad(ctx, block.fc1, saved.ffnIn, dHidden);
  const dFfnIn = ctx.buffer('ffn.dIn', [rows, C], dtype);
  columnParallelInputGrad(ctx, comm, block.fc1, dHidden, dFfnIn);
  const dMid = ctx.buffer('block.dMid', [rows, C], dtype);
  layerNormBackward(ctx, block.ln2, saved.ln2, dFfnIn, dMid, dY);

  const dAttnProj = ctx.buffer('attn.dProj', [rows, C], dtype);
  ctx.ops.biasDropoutResidualBackward({ dOut: dMid, mask: saved.attnMask, p: block.residualDropout, dInput: dAttnProj, dBias: block.attention.out.bias!.grad });
  const dAttnIn = ctx.buffer('attn.dIn', [rows, C], dtype);
  parallelAttentionBackward(ctx, comm, block.attention, shape, saved.attention, dAttnProj, dAttnIn);
  const dX = ctx.buffer('block.dX', [rows, C], dtype);
  layerNormBackward(ctx, block.ln1, saved.ln1, dAttnIn, dX, dMid);
  return dX;
}
