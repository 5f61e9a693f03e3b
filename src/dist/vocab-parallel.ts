// Megatron's vocab-parallel embedding and LM head with cross-entropy: the token table W [Vp, C] (the
// vocabulary padded to Vp, a multiple of 64) is split by rows over the w ranks, rank r holding the ids
// [r·Vl, (r+1)·Vl), Vl = Vp/w, of which `classes` = clamp(V − r·Vl, 0, Vl) are real:
//
//   embedding    x_r = W_r[t − r·Vl] for the tokens this rank owns, 0 for the others (the masked lookup,
//                embeddingForward with vocabStart; rank 0 adds the position rows), one all-reduce of
//                [rows, C]: x = Σ_r x_r; then dropout on the replicated sum (the single-GPU mask).
//                Backward: every rank scatters the replicated dX into the rows it owns; the position
//                table (replicated) gets the same full gradient on every rank.
//   LM head      z_r = LN(x)·W_rᵀ [rows, Vl] (the columns of this rank's ids; no communication)
//   loss         M = max_r rowmax(z_r)                          all-reduce max   [rows]
//                (Σexp(z − M), z_t, Σz) summed over ranks       all-reduce sum   [3, rows]
//                lse = M + ln Σexp,  loss = (1−ε)(lse − z_t) + ε(lse − Σz/V)       (vocabShard* ops)
//   backward     dz_r = softmax − one-hot over this rank's columns (from the global lse); dW_r = dz_rᵀ·a;
//                da = Σ_r dz_r·W_r                              all-reduce sum   [rows, C]
//
// So a training step moves 2 [rows, C] all-reduces and 4·rows floats for the embedding and the loss,
// instead of every rank computing all [rows, Vp] logits. Logits for inference (logitsStep) are gathered:
// one all-gather of [rows, Vl] per rank (in place: this rank's GEMM writes its slot of the gathered
// buffer), then a permute to [rows, Vp].

import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { embeddingBackwardF32 } from '../nn/embedding-grad.js';
import type { Param } from '../nn/parameters.js';
import { paddedVocabSize } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams } from '../nn/transformer-block.js';
import type { CausalLmBatch } from '../models/language-model.js';
import type { Communicator, ReduceOp } from './communicator.js';

/** This rank's part of a vocabulary split over `worldSize` ranks. */
export interface VocabShard {
  /** The real vocabulary V. */
  readonly vocab: number;
  /** V padded to a multiple of 64 (the stored table's rows). */
  readonly padded: number;
  /** Rows of the stored table each rank holds: padded / worldSize. */
  readonly rows: number;
  /** The first id this rank holds. */
  readonly start: number;
  /** Real ids this rank holds (the rest of its rows are padding): clamp(V − start, 0, rows). */
  readonly classes: number;
}

export function vocabShard(vocab: number, worldSize: number, rank: number): VocabShard {
  const padded = paddedVocabSize(vocab);
  if (padded % worldSize !== 0) throw new ArgumentError(`vocab parallel: the padded vocabulary ${padded} (of ${vocab}) cannot be split over ${worldSize} ranks`);
  const rows = padded / worldSize, start = rank * rows;
  return { vocab, padded, rows, start, classes: Math.max(0, Math.min(rows, vocab - start)) };
}

/** comm.allReduce(t, op) when the step runs for real; nothing while it is traced (the op after reads t in place). */
function stepAllReduce(ctx: StepContext, comm: Communicator, t: Tensor, op: ReduceOp): void {
  if (!ctx.tracing && comm.worldSize > 1) comm.allReduce(t, op);
}

export interface VocabEmbeddingArgs {
  readonly tokens: Tensor;
  /** This rank's rows of the token table [Vl, C]. */
  readonly table: Param;
  readonly positions: Param;
  readonly shard: VocabShard;
  /** [B, L, C]: dropout(token row + position row), identical on every rank. */
  readonly out: Tensor;
  /** u8 [B, L, C], the dropout mask (kept for the backward). */
  readonly mask: Tensor;
  readonly dropout: ReturnType<StepContext['dropout']>;
}

/** The masked lookup, the all-reduce, then the dropout on the replicated sum. */
export function vocabParallelEmbeddingForward(ctx: StepContext, comm: Communicator, a: VocabEmbeddingArgs): void {
  const partial = ctx.buffer('embed.partial', a.out.shape, a.out.dtype);
  // p = 0 here (the dropout comes after the sum); the mask buffer is overwritten by that dropout.
  ctx.ops.embeddingForward({
    tokens: a.tokens, tokenTable: a.table.value, vocabStart: a.shard.start, out: partial, mask: a.mask, p: 0, seed: 0n, offset: 0n,
    ...(comm.rank === 0 ? { positionTable: a.positions.value } : {}),
  });
  stepAllReduce(ctx, comm, partial, 'sum');
  ctx.ops.dropout({ x: partial, out: a.out, mask: a.mask, ...a.dropout });
}

/** Scatters the replicated dX into this rank's token rows (accumulating onto a tied head's share) and the full position table. */
export function vocabParallelEmbeddingBackward(ctx: StepContext, a: { tokens: Tensor; dOut: Tensor; mask: Tensor; p: number; table: Param; positions: Param; shard: VocabShard; accumulate: boolean }): void {
  embeddingBackwardF32(ctx, {
    tokens: a.tokens, dOut: a.dOut, mask: a.mask, p: a.p, vocabStart: a.shard.start,
    tokenGrad: a.table.grad, accumulateTokenGrad: a.accumulate, positionGrad: a.positions.grad,
  });
}

export interface VocabHeadSaved {
  readonly x: Tensor;
  readonly mean: Tensor;
  readonly rstd: Tensor;
  readonly normed: Tensor;
  /** [rows, Vl]: this rank's logits (overwritten by their gradient in the backward). */
  readonly logits: Tensor;
  readonly lse: Tensor;
}

function normalize(ctx: StepContext, norm: LayerNormParams, x: Tensor): { normed: Tensor; mean: Tensor; rstd: Tensor } {
  const rows = x.shape[0]!, C = x.shape[1]!;
  const normed = ctx.buffer('head.normed', [rows, C], x.dtype);
  const mean = ctx.buffer('head.mean', [rows], 'f32');
  const rstd = ctx.buffer('head.rstd', [rows], 'f32');
  ctx.ops.layerNormForward({ x, gamma: norm.gamma.value, beta: norm.beta.value, out: normed, mean, rstd, eps: norm.eps });
  return { normed, mean, rstd };
}

/** LN_f, this rank's logits, and the cross-entropy over the split vocabulary (batch.loss on every rank). */
export function vocabParallelHeadForward(ctx: StepContext, comm: Communicator, norm: LayerNormParams, weight: Param, shard: VocabShard, x: Tensor, batch: CausalLmBatch): VocabHeadSaved {
  const rows = x.shape[0]!;
  const { normed, mean, rstd } = normalize(ctx, norm, x);
  const logits = ctx.buffer('head.logits', [rows, shard.rows], x.dtype);
  ctx.ops.gemm({ a: normed, b: weight.value, out: logits, transB: true });
  const rowMax = ctx.buffer('head.rowMax', [rows], 'f32');
  ctx.ops.vocabShardMax({ logits, classes: shard.classes, rowMax });
  stepAllReduce(ctx, comm, rowMax, 'max');
  const sums = ctx.buffer('head.sums', [3, rows], 'f32');
  ctx.ops.vocabShardSums({ logits, targets: batch.targets, vocabStart: shard.start, classes: shard.classes, rowMax, sums });
  stepAllReduce(ctx, comm, sums, 'sum');
  const lse = ctx.buffer('head.lse', [rows], 'f32');
  ctx.ops.vocabShardLoss({ rowMax, sums, targets: batch.targets, totalClasses: shard.vocab, loss: batch.loss, lse, ...lossOptions(batch) });
  return { x, mean, rstd, normed, logits, lse };
}

function lossOptions(batch: CausalLmBatch): { labelSmoothing?: number; ignoreIndex?: number } {
  return {
    ...(batch.labelSmoothing !== undefined ? { labelSmoothing: batch.labelSmoothing } : {}),
    ...(batch.ignoreIndex !== undefined ? { ignoreIndex: batch.ignoreIndex } : {}),
  };
}

/** Returns dX [rows, C] (identical on every rank); writes this rank's weight gradient (overwriting) and the norm's. */
export function vocabParallelHeadBackward(ctx: StepContext, comm: Communicator, norm: LayerNormParams, weight: Param, shard: VocabShard, saved: VocabHeadSaved, batch: CausalLmBatch): Tensor {
  const rows = saved.x.shape[0]!, C = saved.x.shape[1]!, dtype = saved.x.dtype;
  const dLogits = saved.logits;
  ctx.ops.vocabShardCrossEntropyBackward({
    logits: saved.logits, targets: batch.targets, lse: saved.lse, dLogits, vocabStart: shard.start, classes: shard.classes,
    totalClasses: shard.vocab, gradScale: batch.lossGradScale, ...lossOptions(batch),
  });
  ctx.ops.gemm({ a: dLogits, b: saved.normed, out: weight.grad, transA: true });
  const dNormed = ctx.buffer('head.dNormed', [rows, C], dtype);
  ctx.ops.gemm({ a: dLogits, b: weight.value, out: dNormed });
  stepAllReduce(ctx, comm, dNormed, 'sum');
  const dX = ctx.buffer('head.dX', [rows, C], dtype);
  ctx.ops.layerNormBackward({ dOut: dNormed, x: saved.x, gamma: norm.gamma.value, mean: saved.mean, rstd: saved.rstd, dX, dGamma: norm.gamma.grad, dBeta: norm.beta.grad });
  return dX;
}

/** Full logits [rows, Vp] on every rank: this rank's [rows, Vl] into its slot of a gathered buffer, all-gathered, permuted. */
export function vocabParallelLogits(ctx: StepContext, comm: Communicator, norm: LayerNormParams, weight: Param, shard: VocabShard, x: Tensor, logits: Tensor): void {
  const rows = x.shape[0]!, w = comm.worldSize;
  if (logits.shape.length !== 2 || logits.shape[0] !== rows || logits.shape[1] !== shard.padded) {
    throw new ArgumentError(`vocab parallel logits: the output must be [${rows}, ${shard.padded}], got [${logits.shape.join(', ')}]`);
  }
  const { normed } = normalize(ctx, norm, x);
  if (w === 1) {
    ctx.ops.gemm({ a: normed, b: weight.value, out: logits, transB: true });
    return;
  }
  const gathered = ctx.buffer('head.gathered', [w, rows, shard.rows], logits.dtype as FloatDType);
  const local = ctx.ops.view(gathered, comm.rank * rows * shard.rows, [rows, shard.rows]);
  ctx.ops.gemm({ a: normed, b: weight.value, out: local, transB: true });
  if (!ctx.tracing) comm.allGather(local, gathered);
  ctx.ops.permute0213({ x: ctx.reshape(gathered, [1, w, rows, shard.rows]), out: ctx.ops.view(logits, 0, [1, rows, w, shard.rows]) });
}
