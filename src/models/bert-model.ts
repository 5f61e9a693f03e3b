// BERT for masked-LM training (BertForMaskedLM) on any Backend, with HF names and HF init:
//
//   t  = wpe[0:L] + tte[0]                               position + segment-0 table    (L, H)
//   e  = wte[tokens] + t[positions]                      embedding op                  (B·L, H)
//   x0 = drop(LN_emb(e))
//   x_{i+1} = Block_i(x_i)                               post-LN blocks, key-padding mask
//   h  = LN_t(gelu(x_n·Wtᵀ + bt))                        MLM transform
//   logits = h·wteᵀ + b_dec                              GEMM with bias epilogue (tied decoder)
//   loss_r = CE(logits_r, target_r), ignore index −100 (only masked positions carry targets)
//
// Sparse head (default; options.sparseLoss): only ~15% of positions carry a target, so the MLM head
// (transform, LayerNorm, decoder GEMM, cross-entropy) runs on those rows only — gathered by the
// embedding op with the row indices as "tokens" and x as the "table", scattered back in the backward
// by the embedding backward (each index distinct, so each row gets exactly one add onto zero). The
// loss and every gradient are those of the dense head (HF's BertForMaskedLM computes logits for all
// positions); the decoder GEMM and the logits shrink ~6× (NVIDIA's BERT pretraining gathers the
// masked positions the same way).
//
// All sequences use segment 0 (single-segment masked-LM pretraining). The segment-0 row is added to
// the position table by a rank-1 GEMM (ones[L,1]·tte[0:1]), so the embedding op stays a two-table
// lookup; in the backward the same GEMM transposed sums the position-table gradient into tte[0].
// BERT stores Q, K and V as separate [H, H] Linear weights; they are laid out back to back in the
// workspace and used as one [3H, H] projection.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { AttentionShape } from '../nn/attention.js';
import type { FusedAttentionChoice } from '../nn/attention.js';
import { selfAttention } from '../nn/attention.js';
import { embeddingBackwardF32 } from '../nn/embedding-grad.js';
import { linear, linearForward, linearInputGrad, linearWeightGrad } from '../nn/linear.js';
import type { Param, ParameterSpec } from '../nn/parameters.js';
import { ParameterStore, normal, ones, paddedVocabSize, zeros } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams, TransformerBlock } from '../nn/transformer-block.js';
import { blockStackBackward, blockStackForward } from '../nn/transformer-block.js';
import type { BertConfig } from './bert.js';
import type { CausalLmBatch, LanguageModel } from './language-model.js';
import { ceOptions } from './language-model.js';

export function bertParameterSpecs(config: BertConfig): ParameterSpec[] {
  const { vocabSize: V, maxPositions: P, hidden: H, ffn: F, layers, typeVocabSize: T } = config;
  const Vp = paddedVocabSize(V);
  const std = 0.02;
  const layerNorm = (name: string): ParameterSpec[] => [
    { name: `${name}.weight`, shape: [H], init: ones, decay: false },
    { name: `${name}.bias`, shape: [H], init: zeros, decay: false },
  ];
  const dense = (name: string, out: number, inp: number, packWithPrevious = false): ParameterSpec[] => [
    { name: `${name}.weight`, shape: [out, inp], init: normal(std), decay: true, packWithPrevious },
    { name: `${name}.bias`, shape: [out], init: zeros, decay: false, packWithPrevious },
  ];
  const specs: ParameterSpec[] = [
    { name: 'bert.embeddings.word_embeddings.weight', shape: [Vp, H], fileShape: [V, H], init: normal(std), decay: true },
    { name: 'bert.embeddings.position_embeddings.weight', shape: [P, H], init: normal(std), decay: true },
    { name: 'bert.embeddings.token_type_embeddings.weight', shape: [T, H], init: normal(std), decay: true },
    ...layerNorm('bert.embeddings.LayerNorm'),
  ];
  for (let i = 0; i < layers; i++) {
    const l = `bert.encoder.layer.${i}`;
    specs.push(
      ...dense(`${l}.attention.self.query`, H, H),
      ...dense(`${l}.attention.self.key`, H, H, true),
      ...dense(`${l}.attention.self.value`, H, H, true),
      ...dense(`${l}.attention.output.dense`, H, H),
      ...layerNorm(`${l}.attention.output.LayerNorm`),
      ...dense(`${l}.intermediate.dense`, F, H),
      ...dense(`${l}.output.dense`, H, F),
      ...layerNorm(`${l}.output.LayerNorm`),
    );
  }
  specs.push(
    ...dense('cls.predictions.transform.dense', H, H),
    ...layerNorm('cls.predictions.transform.LayerNorm'),
    { name: 'cls.predictions.bias', shape: [Vp], fileShape: [V], init: zeros, decay: false },
  );
  return specs;
}

export class BertModel implements LanguageModel {
  readonly params: ParameterStore;
  readonly blocks: readonly TransformerBlock[];
  /** ones [maxPositions, 1]: the rank-1 GEMM operand that broadcasts the segment-0 embedding. */
  private readonly ones: Tensor;
  private readonly wte: Param;
  private readonly wpe: Param;
  private readonly tte: Param;
  private readonly lnEmbed: LayerNormParams;
  private readonly transform;
  private readonly lnTransform: LayerNormParams;
  private readonly decoderBias: Param;
  /** Gradient checkpointing: every k-th block recomputed in the backward (0 = none). */
  checkpointEvery = 0;
  /** The MLM head runs on the rows with a target only (see the header). */
  readonly sparseLoss: boolean;

  /**
   * options.fusedAttention: the fused attention op instead of the LightSeq path (nn/attention.ts);
   * options.sparseLoss (default true): the MLM head on the target rows only.
   */
  constructor(readonly backend: Backend, readonly config: BertConfig, readonly dtype: FloatDType, options: { fusedAttention?: FusedAttentionChoice; sparseLoss?: boolean } = {}) {
    if ((config.modelType ?? 'bert') !== 'bert') {
      throw new ArgumentError(`BERT training builds model_type "bert" only; this config is "${config.modelType}" (its positions start past the padding id): RoBERTa-family directories are read for encoding and embeddings`);
    }
    this.sparseLoss = options.sparseLoss ?? true;
    this.params = new ParameterStore(backend, bertParameterSpecs(config), dtype);
    const p = (name: string) => this.params.param(name);
    const norm = (name: string): LayerNormParams => ({ gamma: p(`${name}.weight`), beta: p(`${name}.bias`), eps: config.layerNormEps });
    const activation = config.activation;
    this.blocks = Array.from({ length: config.layers }, (_, i): TransformerBlock => {
      const l = `bert.encoder.layer.${i}`;
      const self = `${l}.attention.self`;
      const qkvWeight = this.params.concatenated([`${self}.query.weight`, `${self}.key.weight`, `${self}.value.weight`]);
      const qkvBias = this.params.concatenated([`${self}.query.bias`, `${self}.key.bias`, `${self}.value.bias`]);
      return {
        attention: selfAttention(linear(qkvWeight, qkvBias, 'out_in'), linear(p(`${l}.attention.output.dense.weight`), p(`${l}.attention.output.dense.bias`), 'out_in'), config.heads, false, config.attentionDropout, options.fusedAttention ?? 'auto'),
        ln1: norm(`${l}.attention.output.LayerNorm`),
        fc1: linear(p(`${l}.intermediate.dense.weight`), p(`${l}.intermediate.dense.bias`), 'out_in'),
        fc2: linear(p(`${l}.output.dense.weight`), p(`${l}.output.dense.bias`), 'out_in'),
        ln2: norm(`${l}.output.LayerNorm`),
        activation,
        preLayerNorm: false,
        residualDropout: config.hiddenDropout,
        activationDropout: 0,
      };
    });
    this.wte = p('bert.embeddings.word_embeddings.weight');
    this.wpe = p('bert.embeddings.position_embeddings.weight');
    this.tte = p('bert.embeddings.token_type_embeddings.weight');
    this.lnEmbed = norm('bert.embeddings.LayerNorm');
    this.transform = linear(p('cls.predictions.transform.dense.weight'), p('cls.predictions.transform.dense.bias'), 'out_in');
    this.lnTransform = norm('cls.predictions.transform.LayerNorm');
    this.decoderBias = p('cls.predictions.bias');
    this.ones = backend.empty([config.maxPositions, 1], dtype);
    backend.fill(this.ones, 1);
  }

  get vocabSize(): number { return this.config.vocabSize; }
  get logitsWidth(): number { return paddedVocabSize(this.config.vocabSize); }
  get maxSeqLen(): number { return this.config.maxPositions; }

  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void {
    const { batch: B, seqLen: L } = batch;
    if (L > this.config.maxPositions) throw new ArgumentError(`BERT: sequence length ${L} exceeds max_position_embeddings ${this.config.maxPositions}`);
    const H = this.config.hidden, rows = B * L, dtype = this.dtype;
    const shape: AttentionShape = { batch: B, seqLen: L, keyLengths: batch.lengths };
    const onesL = ctx.reshape(this.backend.view(this.ones, 0, [L, 1]), [L, 1]);
    const tteRow0 = (t: Tensor) => this.backend.view(t, 0, [1, H]);

    // Embeddings: (wpe + tte[0]) table, lookup, LayerNorm, dropout.
    const positionTable = ctx.buffer('embed.positions', [L, H], dtype);
    ctx.ops.copy(this.backend.view(this.wpe.value, 0, [L, H]), positionTable);
    ctx.ops.gemm({ a: onesL, b: tteRow0(this.tte.value), out: positionTable, beta: 1 });
    const summed = ctx.buffer('embed.sum', [B, L, H], dtype);
    const noMask = ctx.buffer('embed.noMask', [B, L, H], 'u8');
    ctx.ops.embeddingForward({ tokens: batch.tokens, tokenTable: this.wte.value, positionTable, out: summed, mask: noMask, ...ctx.dropout(0, rows * H) });
    const e = ctx.reshape(summed, [rows, H]);
    const normed = ctx.buffer('embed.normed', [rows, H], dtype);
    const embMean = ctx.buffer('embed.mean', [rows], 'f32'), embRstd = ctx.buffer('embed.rstd', [rows], 'f32');
    ctx.ops.layerNormForward({ x: e, gamma: this.lnEmbed.gamma.value, beta: this.lnEmbed.beta.value, out: normed, mean: embMean, rstd: embRstd, eps: this.lnEmbed.eps });
    const drop = ctx.dropout(this.config.hiddenDropout, rows * H);
    let x = normed;
    let embedDropMask: Tensor | undefined;
    if (drop.p > 0) {
      x = ctx.buffer('embed.out', [rows, H], dtype);
      embedDropMask = ctx.buffer('embed.dropMask', [rows, H], 'u8');
      ctx.ops.dropout({ x: normed, out: x, mask: embedDropMask, ...drop });
    }

    const stack = blockStackForward(ctx, this.blocks, shape, x, this.checkpointEvery, backward);
    x = stack.y;

    // Sparse head: gather the target rows (the embedding op with row indices as tokens).
    const lossRows = batch.lossRows;
    const headRows = lossRows ? lossRows.shape[0]! : rows;
    let gatherMask: Tensor | undefined;
    if (lossRows) {
      const gathered = ctx.buffer('head.rows', [1, headRows, H], dtype);
      gatherMask = ctx.buffer('head.rowsMask', [1, headRows, H], 'u8');
      ctx.ops.embeddingForward({ tokens: ctx.reshape(lossRows, [1, headRows]), tokenTable: x, out: gathered, mask: gatherMask, ...ctx.dropout(0, headRows * H) });
      x = ctx.reshape(gathered, [headRows, H]);
    }
    return this.headStep(ctx, batch, backward, x, headRows, (dHead) => {
      let dX = dHead;
      if (lossRows) {
        dX = ctx.buffer('head.dXScattered', [rows, H], dtype);
        ctx.ops.fill(dX, 0);
        ctx.ops.embeddingBackward({ tokens: ctx.reshape(lossRows, [1, headRows]), dOut: ctx.reshape(dHead, [1, headRows, H]), mask: gatherMask!, p: 0, dTokenTable: dX });
      }
      this.encoderBackward(ctx, shape, stack, dX, { tokens: batch.tokens, e, embMean, embRstd, noMask, embedDropMask, dropP: drop.p, onesL, tteRow0 });
    });
  }

  /** MLM head over x [n, H] (all rows, or the gathered target rows): forward, loss, backward to dX. */
  private headStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean, x: Tensor, rows: number, encoderBackward: (dX: Tensor) => void): void {
    const H = this.config.hidden, dtype = this.dtype, V = this.logitsWidth;
    // MLM head: dense + GELU (erf) + LayerNorm, then the tied decoder with its own bias.
    const transformed = ctx.buffer('head.dense', [rows, H], dtype);
    linearForward(ctx, this.transform, x, transformed);
    const activated = ctx.buffer('head.act', [rows, H], dtype);
    const actMask = ctx.buffer('head.actMask', [rows, H], 'u8');
    ctx.ops.biasActivationDropout({ input: transformed, bias: this.transform.bias!.value, out: activated, mask: actMask, activation: this.config.activation, ...ctx.dropout(0, rows * H) });
    const headIn = ctx.buffer('head.normed', [rows, H], dtype);
    const headMean = ctx.buffer('head.mean', [rows], 'f32'), headRstd = ctx.buffer('head.rstd', [rows], 'f32');
    ctx.ops.layerNormForward({ x: activated, gamma: this.lnTransform.gamma.value, beta: this.lnTransform.beta.value, out: headIn, mean: headMean, rstd: headRstd, eps: this.lnTransform.eps });
    const logits = ctx.buffer('head.logits', [rows, V], dtype);
    ctx.ops.gemm({ a: headIn, b: this.wte.value, out: logits, transB: true, epilogue: 'bias', bias: this.decoderBias.value });
    const lse = ctx.buffer('head.lse', [rows], 'f32');
    const ce = ceOptions({ ...batch, ignoreIndex: batch.ignoreIndex ?? -100 }, this.config.vocabSize);
    // With a backward to follow, the loss gradient is written over the logits in the same pass (fused).
    ctx.ops.crossEntropyForward({ logits, targets: batch.targets, loss: batch.loss, lse, ...ce, ...(backward ? { dLogits: logits, gradScale: batch.lossGradScale } : {}) });
    if (!backward) return;

    // ---- backward (the logits now hold dLogits) ----
    ctx.ops.gemm({ a: logits, b: headIn, out: this.wte.grad, transA: true, epilogue: 'bgrad_a', biasGrad: this.decoderBias.grad });
    const dHeadIn = ctx.buffer('head.dNormed', [rows, H], dtype);
    ctx.ops.gemm({ a: logits, b: this.wte.value, out: dHeadIn });
    const dActivated = ctx.buffer('head.dAct', [rows, H], dtype);
    ctx.ops.layerNormBackward({ dOut: dHeadIn, x: activated, gamma: this.lnTransform.gamma.value, mean: headMean, rstd: headRstd, dX: dActivated, dGamma: this.lnTransform.gamma.grad, dBeta: this.lnTransform.beta.grad });
    ctx.ops.biasActivationDropoutBackward({ dOut: dActivated, input: transformed, bias: this.transform.bias!.value, mask: actMask, p: 0, activation: this.config.activation, dInput: dActivated, dBias: this.transform.bias!.grad });
    linearWeightGrad(ctx, this.transform, x, dActivated);
    const dHead = ctx.buffer('head.dX', [rows, H], dtype);
    linearInputGrad(ctx, this.transform, dActivated, dHead);
    encoderBackward(dHead);
  }

  /** The encoder's and the embeddings' backward from the gradient of the last block's output. */
  private encoderBackward(ctx: StepContext, shape: AttentionShape, stack: BlockStack, dOut: Tensor, saved: EmbeddingSaved): void {
    const { batch: B, seqLen: L } = shape;
    const H = this.config.hidden, rows = B * L, dtype = this.dtype;
    const { tokens, e, embMean, embRstd, noMask, embedDropMask, dropP, onesL, tteRow0 } = saved;
    const dX = blockStackBackward(ctx, this.blocks, shape, stack.kept, dOut);

    if (embedDropMask) ctx.ops.biasDropoutResidualBackward({ dOut: dX, mask: embedDropMask, p: dropP, dInput: dX });
    const dE = ctx.buffer('embed.dSum', [B, L, H], dtype);
    ctx.ops.layerNormBackward({ dOut: dX, x: e, gamma: this.lnEmbed.gamma.value, mean: embMean, rstd: embRstd, dX: ctx.reshape(dE, [rows, H]), dGamma: this.lnEmbed.gamma.grad, dBeta: this.lnEmbed.beta.grad });
    const dPositions = ctx.buffer('embed.dPositions', [L, H], dtype);
    embeddingBackwardF32(ctx, { tokens, dOut: dE, mask: noMask, p: 0, tokenGrad: this.wte.grad, accumulateTokenGrad: true, positionGrad: dPositions });
    ctx.ops.fill(this.wpe.grad, 0);
    ctx.ops.copy(dPositions, this.backend.view(this.wpe.grad, 0, [L, H]));
    ctx.ops.fill(this.tte.grad, 0);
    ctx.ops.gemm({ a: onesL, b: dPositions, out: tteRow0(this.tte.grad), transA: true });
  }
}

type BlockStack = ReturnType<typeof blockStackForward>;

/** What the embeddings' backward needs from their forward. */
interface EmbeddingSaved {
  readonly tokens: Tensor;
  readonly e: Tensor;
  readonly embMean: Tensor;
  readonly embRstd: Tensor;
  readonly noMask: Tensor;
  readonly embedDropMask: Tensor | undefined;
  readonly dropP: number;
  readonly onesL: Tensor;
  readonly tteRow0: (t: Tensor) => Tensor;
}
