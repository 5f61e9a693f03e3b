// What a trainable language model offers the trainer, and the shared LM head:
//   a = LN_f(x); logits = a·Wᵀ (W [V, C], an 'out_in' weight, often the tied token embedding);
//   loss_r = CE(logits_r, target_r) with optional label smoothing and an ignore index.
// The cross-entropy backward writes dLogits over the logits (in place: the [rows, V] buffer is the
// step's largest), then dW = dLogitsᵀ·a and dA = dLogits·W.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import type { Tensor } from '../tensor.js';
import type { Param, ParameterStore } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams } from '../nn/transformer-block.js';

/** The source side of a sequence-to-sequence batch (encoder input). */
export interface SourceBatch {
  readonly seqLen: number;
  /** i32 [batch, seqLen]; positions ≥ lengths[b] are padding (their tokens do not matter). */
  readonly tokens: Tensor;
  /** i32 [batch]: each source sequence's length (1..seqLen). */
  readonly lengths: Tensor;
}

/**
 * A batch of (decoder) tokens and their targets. For an encoder-decoder model (LanguageModel.source),
 * `tokens` are the target-side inputs and `source` carries the encoder input.
 */
export interface CausalLmBatch {
  readonly batch: number;
  readonly seqLen: number;
  /** i32 [batch, seqLen]. */
  readonly tokens: Tensor;
  /** i32 [batch·seqLen]: the next token, or ignoreIndex. With lossRows: i32 [count], row lossRows[i]'s target. */
  readonly targets: Tensor;
  /** f32 [batch·seqLen]: written with each position's loss (0 where ignored). With lossRows: f32 [count]. */
  readonly loss: Tensor;
  /**
   * Sparse-loss models only (LanguageModel.sparseLoss): i32 [count], the flattened rows (b·seqLen + l)
   * that carry a target, padded with entries whose target is ignored; the loss head runs on those rows only.
   */
  readonly lossRows?: Tensor;
  /**
   * i32 [batch]: each sequence's length; positions at or beyond it are padding, which bidirectional
   * models (BERT) mask out as keys. Causal models need no mask (padding only follows real tokens).
   */
  readonly lengths: Tensor;
  /** Multiplies the loss gradient: the loss scale over the number of positions averaged. */
  readonly lossGradScale: number;
  readonly labelSmoothing?: number;
  readonly ignoreIndex?: number;
  readonly source?: SourceBatch;
}

/** Which parts of a tensor-parallel model's gradient workspace are per-rank shards. */
export interface GradientSharding {
  /**
   * Element ranges [start, end) of the gradient workspace holding shards (each rank a different part of
   * a tensor); everything else is replicated (the same values on every rank).
   */
  readonly shardedRanges: readonly (readonly [number, number])[];
  /** Sums an f32 tensor over the model's ranks, in place (the caller skips it while a step is traced). */
  allReduceSum(t: Tensor): void;
}

export interface LanguageModel {
  readonly backend: Backend;
  readonly params: ParameterStore;
  readonly dtype: FloatDType;
  readonly vocabSize: number;
  /** Columns of the logits: the vocabulary padded for aligned GEMMs (≥ vocabSize; the rest are zeros). */
  readonly logitsWidth: number;
  readonly maxSeqLen: number;
  /**
   * Present on encoder-decoder models: every batch must carry `source`, with tokens below
   * `vocabSize` and at most `maxSeqLen` positions.
   */
  readonly source?: { readonly vocabSize: number; readonly maxSeqLen: number };
  /**
   * True when the loss needs only the rows with a target (a masked LM): the runner then passes
   * CausalLmBatch.lossRows and per-row targets/loss for those rows only.
   */
  readonly sparseLoss?: boolean;
  /**
   * Present on tensor-parallel models whose gradient workspace holds this rank's shards of some
   * tensors: the global gradient norm then sums the shards' squares over the ranks and counts the
   * replicated rest once (StepRunner).
   */
  readonly gradientSharding?: GradientSharding;
  /** Gradient checkpointing: every k-th block recomputed in the backward (0 = off). */
  checkpointEvery: number;
  /** Forward and loss; with `backward`, every parameter gradient too (overwritten, not accumulated). */
  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void;
}

export interface LmHeadSaved {
  readonly x: Tensor;
  readonly mean: Tensor;
  readonly rstd: Tensor;
  readonly normed: Tensor;
  readonly logits: Tensor;
  readonly lse: Tensor;
  readonly classes: number;
  /** The forward already wrote the loss gradient over the logits (fused cross-entropy). */
  readonly gradientWritten: boolean;
}

/** The cross-entropy options of a batch; `classes` is the real vocabulary when the logits are padded. */
export function ceOptions(batch: CausalLmBatch, classes: number): { classes: number; labelSmoothing?: number; ignoreIndex?: number } {
  return {
    classes,
    ...(batch.labelSmoothing !== undefined ? { labelSmoothing: batch.labelSmoothing } : {}),
    ...(batch.ignoreIndex !== undefined ? { ignoreIndex: batch.ignoreIndex } : {}),
  };
}

/**
 * W may be padded to Vp ≥ classes rows (zeros): logits are [rows, Vp] and only `classes` columns count.
 * `backward`: a backward follows, so the cross-entropy writes the loss gradient over the logits in the
 * same pass (LightSeq's fused cross-entropy: the logits are read once instead of twice).
 */
export function lmHeadForward(ctx: StepContext, norm: LayerNormParams, weight: Param, x: Tensor, batch: CausalLmBatch, classes: number, backward = false): LmHeadSaved {
  const rows = x.shape[0]!, C = x.shape[1]!, V = weight.value.shape[0]!;
  const normed = ctx.buffer('head.normed', [rows, C], x.dtype);
  const mean = ctx.buffer('head.mean', [rows], 'f32');
  const rstd = ctx.buffer('head.rstd', [rows], 'f32');
  ctx.ops.layerNormForward({ x, gamma: norm.gamma.value, beta: norm.beta.value, out: normed, mean, rstd, eps: norm.eps });
  const logits = ctx.buffer('head.logits', [rows, V], x.dtype);
  ctx.ops.gemm({ a: normed, b: weight.value, out: logits, transB: true });
  const lse = ctx.buffer('head.lse', [rows], 'f32');
  ctx.ops.crossEntropyForward({
    logits, targets: batch.targets, loss: batch.loss, lse, ...ceOptions(batch, classes),
    ...(backward ? { dLogits: logits, gradScale: batch.lossGradScale } : {}),
  });
  return { x, mean, rstd, normed, logits, lse, classes, gradientWritten: backward };
}

/** Returns dX [rows, C]; writes W's gradient (overwriting) and the norm's. */
export function lmHeadBackward(ctx: StepContext, norm: LayerNormParams, weight: Param, saved: LmHeadSaved, batch: CausalLmBatch): Tensor {
  const rows = saved.x.shape[0]!, C = saved.x.shape[1]!;
  const dLogits = saved.logits;
  if (!saved.gradientWritten) {
    ctx.ops.crossEntropyBackward({ logits: saved.logits, targets: batch.targets, lse: saved.lse, dLogits, gradScale: batch.lossGradScale, ...ceOptions(batch, saved.classes) });
  }
  ctx.ops.gemm({ a: dLogits, b: saved.normed, out: weight.grad, transA: true });
  const dNormed = ctx.buffer('head.dNormed', [rows, C], saved.x.dtype);
  ctx.ops.gemm({ a: dLogits, b: weight.value, out: dNormed });
  const dX = ctx.buffer('head.dX', [rows, C], saved.x.dtype);
  ctx.ops.layerNormBackward({ dOut: dNormed, x: saved.x, gamma: norm.gamma.value, mean: saved.mean, rstd: saved.rstd, dX, dGamma: norm.gamma.grad, dBeta: norm.beta.grad });
  return dX;
}
