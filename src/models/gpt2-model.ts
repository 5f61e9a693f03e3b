// GPT-2 as a trainable model on any Backend: the parameter table (HF names, HF init), and the
// language-modelling step — forward and backward with hand-written gradients:
//
//   x0 = drop(wte[tokens] + wpe[positions])                 embedding op           (B·L, C)
//   x_{i+1} = Block_i(x_i)                                   pre-LN blocks
//   logits = LN_f(x_n)·wteᵀ                                  GEMM (tied LM head)    (B·L, V)
//   loss_r = CE(logits_r, target_r)                          fused softmax + CE     (B·L)
//
// Backward mirrors it; the tied embedding's gradient is written by the LM head's weight GEMM and then
// accumulated into by the embedding backward. GPT-2's Conv1D weights are [in, out] ('in_out' layout).

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { AttentionShape } from '../nn/attention.js';
import type { FusedAttentionChoice } from '../nn/attention.js';
import { selfAttention } from '../nn/attention.js';
import { linear } from '../nn/linear.js';
import type { Param, ParameterSpec } from '../nn/parameters.js';
import { ParameterStore, normal, ones, paddedVocabSize, zeros } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams, TransformerBlock } from '../nn/transformer-block.js';
import { blockStackBackward, blockStackForward } from '../nn/transformer-block.js';
import type { Gpt2Config } from './gpt2.js';
import type { CausalLmBatch, LanguageModel } from './language-model.js';
import { embeddingBackwardF32 } from '../nn/embedding-grad.js';
import { lmHeadBackward, lmHeadForward } from './language-model.js';

/** HF's GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/√(2·layers)), LN (1, 0), biases 0. */
export function gpt2ParameterSpecs(config: Gpt2Config): ParameterSpec[] {
  const { vocabSize: V, maxPositions: P, hidden: C, ffn: F, layers } = config;
  const Vp = paddedVocabSize(V);
  const std = 0.02, residualStd = 0.02 / Math.sqrt(2 * layers);
  const specs: ParameterSpec[] = [
    { name: 'transformer.wte.weight', shape: [Vp, C], fileShape: [V, C], init: normal(std), decay: true },
    { name: 'transformer.wpe.weight', shape: [P, C], init: normal(std), decay: true },
  ];
  const layerNorm = (name: string) => [
    { name: `${name}.weight`, shape: [C], init: ones, decay: false },
    { name: `${name}.bias`, shape: [C], init: zeros, decay: false },
  ];
  for (let i = 0; i < layers; i++) {
    const h = `transformer.h.${i}`;
    specs.push(
      ...layerNorm(`${h}.ln_1`),
      { name: `${h}.attn.c_attn.weight`, shape: [C, 3 * C], init: normal(std), decay: true },
      { name: `${h}.attn.c_attn.bias`, shape: [3 * C], init: zeros, decay: false },
      { name: `${h}.attn.c_proj.weight`, shape: [C, C], init: normal(residualStd), decay: true },
      { name: `${h}.attn.c_proj.bias`, shape: [C], init: zeros, decay: false },
      ...layerNorm(`${h}.ln_2`),
      { name: `${h}.mlp.c_fc.weight`, shape: [C, F], init: normal(std), decay: true },
      { name: `${h}.mlp.c_fc.bias`, shape: [F], init: zeros, decay: false },
      { name: `${h}.mlp.c_proj.weight`, shape: [F, C], init: normal(residualStd), decay: true },
      { name: `${h}.mlp.c_proj.bias`, shape: [C], init: zeros, decay: false },
    );
  }
  specs.push(...layerNorm('transformer.ln_f'));
  if (!config.tieWordEmbeddings) specs.push({ name: 'lm_head.weight', shape: [Vp, C], fileShape: [V, C], init: normal(std), decay: true });
  return specs;
}

export class Gpt2Model implements LanguageModel {
  readonly params: ParameterStore;
  readonly blocks: readonly TransformerBlock[];
  private readonly wte: Param;
  private readonly wpe: Param;
  private readonly lnF: LayerNormParams;
  private readonly lmHead: Param;

  /**
   * Gradient checkpointing: every `checkpointEvery`-th block (0 = none, 1 = all) keeps only its input
   * in the forward; its activations are recomputed in the backward, just before they are needed.
   */
  checkpointEvery = 0;

  /** options.fusedAttention: the fused attention op instead of the LightSeq path (nn/attention.ts). */
  constructor(readonly backend: Backend, readonly config: Gpt2Config, readonly dtype: FloatDType, options: { fusedAttention?: FusedAttentionChoice } = {}) {
    this.params = new ParameterStore(backend, gpt2ParameterSpecs(config), dtype);
    const p = (name: string) => this.params.param(name);
    const norm = (name: string): LayerNormParams => ({ gamma: p(`${name}.weight`), beta: p(`${name}.bias`), eps: config.layerNormEps });
    const act = config.activation;
    this.blocks = Array.from({ length: config.layers }, (_, i): TransformerBlock => {
      const h = `transformer.h.${i}`;
      return {
        attention: selfAttention(
          linear(p(`${h}.attn.c_attn.weight`), p(`${h}.attn.c_attn.bias`), 'in_out'),
          linear(p(`${h}.attn.c_proj.weight`), p(`${h}.attn.c_proj.bias`), 'in_out'),
          config.heads, true, config.attentionDropout, options.fusedAttention ?? 'auto'),
        ln1: norm(`${h}.ln_1`),
        fc1: linear(p(`${h}.mlp.c_fc.weight`), p(`${h}.mlp.c_fc.bias`), 'in_out'),
        fc2: linear(p(`${h}.mlp.c_proj.weight`), p(`${h}.mlp.c_proj.bias`), 'in_out'),
        ln2: norm(`${h}.ln_2`),
        activation: act,
        preLayerNorm: true,
        residualDropout: config.residualDropout,
        activationDropout: 0,
      };
    });
    this.wte = p('transformer.wte.weight');
    this.wpe = p('transformer.wpe.weight');
    this.lnF = norm('transformer.ln_f');
    this.lmHead = config.tieWordEmbeddings ? this.wte : p('lm_head.weight');
  }

  get vocabSize(): number { return this.config.vocabSize; }
  get logitsWidth(): number { return paddedVocabSize(this.config.vocabSize); }
  get maxSeqLen(): number { return this.config.maxPositions; }

  /** Forward only: logits [batch·seqLen, logitsWidth] (columns ≥ vocabSize are 0) for tokens i32 [batch, seqLen] (dropout off in eval steps). */
  logitsStep(ctx: StepContext, tokens: Tensor, logits: Tensor): void {
    const [B, L] = tokens.shape as [number, number];
    const C = this.config.hidden, rows = B * L;
    const x0 = ctx.buffer('embed.out', [B, L, C], this.dtype);
    const embedMask = ctx.buffer('embed.mask', [B, L, C], 'u8');
    ctx.ops.embeddingForward({ tokens, tokenTable: this.wte.value, positionTable: this.wpe.value, out: x0, mask: embedMask, ...ctx.dropout(this.config.embeddingDropout, rows * C) });
    const x = blockStackForward(ctx, this.blocks, { batch: B, seqLen: L }, ctx.reshape(x0, [rows, C]), 0, false).y;
    const normed = ctx.buffer('head.normed', [rows, C], this.dtype);
    const mean = ctx.buffer('head.mean', [rows], 'f32'), rstd = ctx.buffer('head.rstd', [rows], 'f32');
    ctx.ops.layerNormForward({ x, gamma: this.lnF.gamma.value, beta: this.lnF.beta.value, out: normed, mean, rstd, eps: this.lnF.eps });
    ctx.ops.gemm({ a: normed, b: this.lmHead.value, out: logits, transB: true });
  }

  /** Forward, loss and (when `backward`) every parameter gradient for one batch. */
  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void {
    const { batch: B, seqLen: L } = batch;
    if (L > this.config.maxPositions) throw new ArgumentError(`GPT-2: sequence length ${L} exceeds n_positions ${this.config.maxPositions}`);
    const C = this.config.hidden, rows = B * L, dtype = this.dtype;
    const shape: AttentionShape = { batch: B, seqLen: L };

    const x0 = ctx.buffer('embed.out', [B, L, C], dtype);
    const embedMask = ctx.buffer('embed.mask', [B, L, C], 'u8');
    const embedDropout = ctx.dropout(this.config.embeddingDropout, rows * C);
    ctx.ops.embeddingForward({ tokens: batch.tokens, tokenTable: this.wte.value, positionTable: this.wpe.value, out: x0, mask: embedMask, ...embedDropout });

    const stack = blockStackForward(ctx, this.blocks, shape, ctx.reshape(x0, [rows, C]), this.checkpointEvery, backward);
    const head = lmHeadForward(ctx, this.lnF, this.lmHead, stack.y, batch, this.config.vocabSize, backward);
    if (!backward) return;

    const dX = blockStackBackward(ctx, this.blocks, shape, stack.kept, lmHeadBackward(ctx, this.lnF, this.lmHead, head, batch));

    // wte's gradient was written by the LM head's GEMM when tied, and is accumulated onto.
    embeddingBackwardF32(ctx, {
      tokens: batch.tokens, dOut: ctx.reshape(dX, [B, L, C]), mask: embedMask, p: embedDropout.p,
      tokenGrad: this.wte.grad, accumulateTokenGrad: this.config.tieWordEmbeddings, positionGrad: this.wpe.grad,
    });
  }
}

export type { Tensor };
