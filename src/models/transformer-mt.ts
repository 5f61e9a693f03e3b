// An encoder-decoder translation model with Marian's conventions (HF MarianMTModel; config in marian.ts),
// trainable on any Backend, forward and hand-written backward:
//
//   e0 = drop(√D·E[src] + P[0:Ls])                embedding op, sinusoidal table P   (B·Ls, D)
//   e_{i+1} = EncoderBlock_i(e_i)                  post-LN, keys masked by the source lengths
//   K_i, V_i = split(e_n·Wkvᵀ + bkv)               every decoder layer's K/V in one GEMM (cross-attention.ts)
//   d0 = drop(√D·E[tgt_in] + P[0:Lt])
//   d_{i+1} = DecoderBlock_i(d_i, K_i, V_i)        post-LN: causal self-attn, cross-attn, FFN
//   logits = d_n·Eᵀ + final_logits_bias           GEMM, bias epilogue (tied LM head)    (B·Lt, Vp)
//   loss_r = CE(logits_r, label_r), ignore index
//
// Marian has no embedding LayerNorm and no final LayerNorm (post-LN blocks end normalised). The sinusoidal
// table is fixed (HF keeps it as a frozen parameter): it is computed on the host once into a tensor that
// is not part of the parameter workspace. With shared embeddings, one table E (`model.shared.weight`)
// serves the encoder, the decoder and the LM head, so its gradient is written by the LM head's GEMM and
// accumulated into by both embedding backwards. Source padding never reaches the loss: the encoder's
// self-attention and the cross-attention mask keys ≥ the source length, so padded positions get exactly
// zero attention weight (and zero gradient).

import { embeddingBackwardF32 } from '../nn/embedding-grad.js';
import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { AttentionShape } from '../nn/attention.js';
import { selfAttention } from '../nn/attention.js';
import type { CrossAttentionShape, EncoderKvProjection } from '../nn/cross-attention.js';
import { crossAttention, encoderKvBackward, encoderKvForward, encoderKvGradBuffer, encoderKvProjection, encoderKvStoreGrad } from '../nn/cross-attention.js';
import type { DecoderBlock, DecoderBlockSaved } from '../nn/decoder-block.js';
import { decoderBlockBackward, decoderBlockForward } from '../nn/decoder-block.js';
import { linear } from '../nn/linear.js';
import type { Param, ParameterSpec } from '../nn/parameters.js';
import { ParameterStore, normal, ones, paddedVocabSize, zeros } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { LayerNormParams, TransformerBlock } from '../nn/transformer-block.js';
import type { Kept } from '../nn/checkpoint.js';
import { forwardKeeping, isCheckpointed, savedForBackward } from '../nn/checkpoint.js';
import { blockStackBackward, blockStackForward } from '../nn/transformer-block.js';
import type { CausalLmBatch, LanguageModel, SourceBatch } from './language-model.js';
import { ceOptions } from './language-model.js';
import type { MarianConfig } from './marian.js';

/** torch.nn.LayerNorm's default, which Marian uses. */
const LAYER_NORM_EPS = 1e-5;

/**
 * Marian's sinusoidal table [positions, dim]: column c < ⌈dim/2⌉ is sin(pos·ω_c), column ⌈dim/2⌉ + c is
 * cos(pos·ω_c), ω_c = 10000^(−2c/dim) (HF's MarianSinusoidalPositionalEmbedding: sines first, then cosines).
 */
export function sinusoidalPositions(positions: number, dim: number): Float32Array {
  const table = new Float32Array(positions * dim);
  const sentinel = Math.ceil(dim / 2);
  for (let pos = 0; pos < positions; pos++) {
    for (let c = 0; c < sentinel; c++) table[pos * dim + c] = Math.sin(pos / 10000 ** ((2 * c) / dim));
    for (let c = 0; sentinel + c < dim; c++) table[pos * dim + sentinel + c] = Math.cos(pos / 10000 ** ((2 * c) / dim));
  }
  return table;
}

/** Names of the token tables: [encoder, decoder] (one name when shared). */
function embeddingNames(config: MarianConfig): [string, string] {
  return config.shareEncoderDecoderEmbeddings
    ? ['model.shared.weight', 'model.shared.weight']
    : ['model.encoder.embed_tokens.weight', 'model.decoder.embed_tokens.weight'];
}

/**
 * HF's init (init_std 0.02 for Linear and Embedding weights; biases 0; LayerNorm (1, 0)). Each decoder
 * layer's cross-attention K and V are declared together after all layers, packed back to back, so all
 * layers' [2H, H] blocks form one [layers·2H, H] projection (and their biases one [layers·2H] vector).
 */
export function transformerMtParameterSpecs(config: MarianConfig): ParameterSpec[] {
  const { hidden: D, vocabSize: V, decoderVocabSize: VD } = config;
  const std = 0.02;
  const layerNorm = (name: string): ParameterSpec[] => [
    { name: `${name}.weight`, shape: [D], init: ones, decay: false },
    { name: `${name}.bias`, shape: [D], init: zeros, decay: false },
  ];
  const dense = (name: string, out: number, inp: number, packWithPrevious = false): ParameterSpec[] => [
    { name: `${name}.weight`, shape: [out, inp], init: normal(std), decay: true, packWithPrevious },
    { name: `${name}.bias`, shape: [out], init: zeros, decay: false, packWithPrevious },
  ];
  const selfAttn = (p: string): ParameterSpec[] => [
    ...dense(`${p}.q_proj`, D, D), ...dense(`${p}.k_proj`, D, D, true), ...dense(`${p}.v_proj`, D, D, true), ...dense(`${p}.out_proj`, D, D),
  ];
  const table = (name: string, vocab: number): ParameterSpec => ({ name, shape: [paddedVocabSize(vocab), D], fileShape: [vocab, D], init: normal(std), decay: true });
  const [encTable, decTable] = embeddingNames(config);
  const specs: ParameterSpec[] = [table(encTable, V)];
  if (decTable !== encTable) specs.push(table(decTable, VD));
  for (let i = 0; i < config.encoderLayers; i++) {
    const l = `model.encoder.layers.${i}`;
    specs.push(
      ...selfAttn(`${l}.self_attn`), ...layerNorm(`${l}.self_attn_layer_norm`),
      ...dense(`${l}.fc1`, config.encoderFfn, D), ...dense(`${l}.fc2`, D, config.encoderFfn), ...layerNorm(`${l}.final_layer_norm`),
    );
  }
  for (let i = 0; i < config.decoderLayers; i++) {
    const l = `model.decoder.layers.${i}`;
    specs.push(
      ...selfAttn(`${l}.self_attn`), ...layerNorm(`${l}.self_attn_layer_norm`),
      ...dense(`${l}.encoder_attn.q_proj`, D, D), ...dense(`${l}.encoder_attn.out_proj`, D, D), ...layerNorm(`${l}.encoder_attn_layer_norm`),
      ...dense(`${l}.fc1`, config.decoderFfn, D), ...dense(`${l}.fc2`, D, config.decoderFfn), ...layerNorm(`${l}.final_layer_norm`),
    );
  }
  for (let i = 0; i < config.decoderLayers; i++) {
    const a = `model.decoder.layers.${i}.encoder_attn`;
    specs.push(...dense(`${a}.k_proj`, D, D, i > 0), ...dense(`${a}.v_proj`, D, D, true));
  }
  const VDp = paddedVocabSize(VD);
  specs.push({ name: 'final_logits_bias', shape: [1, VDp], fileShape: [1, VD], init: zeros, decay: false });
  if (!config.tieWordEmbeddings) specs.push(table('lm_head.weight', VD));
  return specs;
}

export class TransformerMtModel implements LanguageModel {
  readonly params: ParameterStore;
  readonly encoderBlocks: readonly TransformerBlock[];
  readonly decoderBlocks: readonly DecoderBlock[];
  readonly encoderKv: EncoderKvProjection;
  readonly source: { readonly vocabSize: number; readonly maxSeqLen: number };
  /** The fixed sinusoidal table [maxPositions, D] (not a parameter). */
  readonly positions: Tensor;
  private readonly encoderTable: Param;
  private readonly decoderTable: Param;
  private readonly lmHead: Param;
  /** final_logits_bias [1, Vp] viewed as [Vp] (value and gradient), the GEMM epilogue's bias. */
  private readonly logitsBias: { value: Tensor; grad: Tensor };
  private readonly embedScale: number;
  /** Gradient checkpointing: every k-th encoder and decoder block recomputed in the backward (0 = none). */
  checkpointEvery = 0;

  constructor(readonly backend: Backend, readonly config: MarianConfig, readonly dtype: FloatDType) {
    this.params = new ParameterStore(backend, transformerMtParameterSpecs(config), dtype);
    const p = (name: string) => this.params.param(name);
    const norm = (name: string): LayerNormParams => ({ gamma: p(`${name}.weight`), beta: p(`${name}.bias`), eps: LAYER_NORM_EPS });
    const dense = (name: string) => linear(p(`${name}.weight`), p(`${name}.bias`), 'out_in');
    const qkv = (a: string) => linear(
      this.params.concatenated([`${a}.q_proj.weight`, `${a}.k_proj.weight`, `${a}.v_proj.weight`]),
      this.params.concatenated([`${a}.q_proj.bias`, `${a}.k_proj.bias`, `${a}.v_proj.bias`]), 'out_in');
    const { dropout, attentionDropout, activationDropout, activation } = config;

    this.encoderBlocks = Array.from({ length: config.encoderLayers }, (_, i): TransformerBlock => {
      const l = `model.encoder.layers.${i}`;
      return {
        attention: selfAttention(qkv(`${l}.self_attn`), dense(`${l}.self_attn.out_proj`), config.encoderHeads, false, attentionDropout),
        ln1: norm(`${l}.self_attn_layer_norm`), fc1: dense(`${l}.fc1`), fc2: dense(`${l}.fc2`), ln2: norm(`${l}.final_layer_norm`),
        activation, preLayerNorm: false, residualDropout: dropout, activationDropout,
      };
    });
    this.decoderBlocks = Array.from({ length: config.decoderLayers }, (_, i): DecoderBlock => {
      const l = `model.decoder.layers.${i}`;
      return {
        selfAttention: selfAttention(qkv(`${l}.self_attn`), dense(`${l}.self_attn.out_proj`), config.decoderHeads, true, attentionDropout),
        selfNorm: norm(`${l}.self_attn_layer_norm`),
        crossAttention: crossAttention(dense(`${l}.encoder_attn.q_proj`), dense(`${l}.encoder_attn.out_proj`), config.decoderHeads, attentionDropout),
        crossNorm: norm(`${l}.encoder_attn_layer_norm`),
        ffn: { fc1: dense(`${l}.fc1`), fc2: dense(`${l}.fc2`), activation, dropout: activationDropout },
        ffnNorm: norm(`${l}.final_layer_norm`),
        preLayerNorm: false,
        residualDropout: dropout,
      };
    });
    const kvNames = (part: 'weight' | 'bias') => Array.from({ length: config.decoderLayers }, (_, i) => {
      const a = `model.decoder.layers.${i}.encoder_attn`;
      return [`${a}.k_proj.${part}`, `${a}.v_proj.${part}`];
    }).flat();
    this.encoderKv = encoderKvProjection(linear(this.params.concatenated(kvNames('weight')), this.params.concatenated(kvNames('bias')), 'out_in'), config.decoderLayers, config.decoderHeads);

    const [encTable, decTable] = embeddingNames(config);
    this.encoderTable = p(encTable);
    this.decoderTable = p(decTable);
    this.lmHead = config.tieWordEmbeddings ? this.decoderTable : p('lm_head.weight');
    const bias = p('final_logits_bias'), Vp = bias.value.numel;
    this.logitsBias = { value: backend.view(bias.value, 0, [Vp]), grad: backend.view(bias.grad, 0, [Vp]) };
    this.embedScale = config.scaleEmbedding ? Math.sqrt(config.hidden) : 1;
    this.positions = backend.fromArray(sinusoidalPositions(config.maxPositions, config.hidden), [config.maxPositions, config.hidden], dtype);
    this.source = { vocabSize: config.vocabSize, maxSeqLen: config.maxPositions };
  }

  /** The target vocabulary (decoder inputs and labels). */
  get vocabSize(): number { return this.config.decoderVocabSize; }
  get logitsWidth(): number { return paddedVocabSize(this.config.decoderVocabSize); }
  get maxSeqLen(): number { return this.config.maxPositions; }

  /** tokens i32 [B, L] → drop(scale·E[tokens] + P[0:L]) [B·L, D], and what its backward needs. */
  private embed(ctx: StepContext, table: Param, tokens: Tensor, name: string): { x: Tensor; mask: Tensor; p: number } {
    const [B, L] = tokens.shape as [number, number];
    const D = this.config.hidden;
    const out = ctx.buffer(`${name}.out`, [B, L, D], this.dtype);
    const mask = ctx.buffer(`${name}.mask`, [B, L, D], 'u8');
    const drop = ctx.dropout(this.config.dropout, B * L * D);
    ctx.ops.embeddingForward({ tokens, tokenTable: table.value, positionTable: this.positions, scale: this.embedScale, out, mask, ...drop });
    return { x: ctx.reshape(out, [B * L, D]), mask, p: drop.p };
  }

  private embedBackward(ctx: StepContext, table: Param, tokens: Tensor, saved: { mask: Tensor; p: number }, dX: Tensor): void {
    embeddingBackwardF32(ctx, { tokens, dOut: ctx.reshape(dX, saved.mask.shape), mask: saved.mask, p: saved.p, scale: this.embedScale, tokenGrad: table.grad, accumulateTokenGrad: true });
  }

  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void {
    const source: SourceBatch | undefined = batch.source;
    if (!source) throw new ArgumentError('Transformer MT: the batch has no source side (batch.source)');
    const { batch: B, seqLen: Lt } = batch, Ls = source.seqLen;
    const P = this.config.maxPositions;
    if (Lt > P || Ls > P) throw new ArgumentError(`Transformer MT: source length ${Ls} and target length ${Lt} must not exceed max_position_embeddings ${P}`);
    const D = this.config.hidden, rows = B * Lt, dtype = this.dtype;
    const encShape: AttentionShape = { batch: B, seqLen: Ls, keyLengths: source.lengths };
    const decShape: CrossAttentionShape = { batch: B, queryLen: Lt, keyLen: Ls, keyLengths: source.lengths };

    // ---- encoder ----
    const srcEmbed = this.embed(ctx, this.encoderTable, source.tokens, 'enc.embed');
    const encoder = blockStackForward(ctx, this.encoderBlocks, encShape, srcEmbed.x, this.checkpointEvery, backward);
    const kv = encoderKvForward(ctx, this.encoderKv, decShape, encoder.y);

    // ---- decoder ----
    const tgtEmbed = this.embed(ctx, this.decoderTable, batch.tokens, 'dec.embed');
    let y = tgtEmbed.x;
    const decKept: Kept<DecoderBlockSaved, Tensor>[] = [];
    this.decoderBlocks.forEach((block, i) => {
      const r = forwardKeeping(ctx, isCheckpointed(i, this.checkpointEvery, backward), y, (input) => decoderBlockForward(ctx, block, decShape, input, kv.layers[i]!));
      decKept.push(r.kept);
      y = r.y;
    });

    // ---- LM head and loss ----
    const Vp = this.lmHead.value.shape[0]!;
    const logits = ctx.buffer('head.logits', [rows, Vp], dtype);
    ctx.ops.gemm({ a: y, b: this.lmHead.value, out: logits, transB: true, epilogue: 'bias', bias: this.logitsBias.value });
    const lse = ctx.buffer('head.lse', [rows], 'f32');
    const ce = ceOptions(batch, this.vocabSize);
    ctx.ops.crossEntropyForward({ logits, targets: batch.targets, loss: batch.loss, lse, ...ce });
    if (!backward) return;

    // ---- backward: head (writes the LM head's and final_logits_bias's gradients) ----
    ctx.ops.crossEntropyBackward({ logits, targets: batch.targets, lse, dLogits: logits, gradScale: batch.lossGradScale, ...ce });
    ctx.ops.gemm({ a: logits, b: y, out: this.lmHead.grad, transA: true, epilogue: 'bgrad_a', biasGrad: this.logitsBias.grad });
    let dY = ctx.buffer('head.dX', [rows, D], dtype);
    ctx.ops.gemm({ a: logits, b: this.lmHead.value, out: dY });

    // ---- decoder: each layer's dK/dV lands in one buffer for the single K/V weight GEMM ----
    const dKvSlices = encoderKvGradBuffer(ctx, this.encoderKv, decShape, dtype);
    for (let i = this.decoderBlocks.length - 1; i >= 0; i--) {
      const block = this.decoderBlocks[i]!;
      const saved = savedForBackward(ctx, decKept[i]!, (input) => decoderBlockForward(ctx, block, decShape, input, kv.layers[i]!));
      const r = decoderBlockBackward(ctx, block, decShape, saved, dY);
      encoderKvStoreGrad(ctx, this.encoderKv, decShape, dKvSlices, i, r.dKv);
      dY = r.dX;
    }
    // Token tables accumulate: zero those the LM head's GEMM did not just write.
    if (this.decoderTable.name !== this.lmHead.name) ctx.ops.fill(this.decoderTable.grad, 0);
    this.embedBackward(ctx, this.decoderTable, batch.tokens, tgtEmbed, dY);

    // ---- encoder ----
    const dEncoderOut = ctx.buffer('enc.dOut', [B * Ls, D], dtype);
    encoderKvBackward(ctx, this.encoderKv, decShape, kv, dKvSlices, dEncoderOut);
    const dX = blockStackBackward(ctx, this.encoderBlocks, encShape, encoder.kept, dEncoderOut);
    if (this.encoderTable.name !== this.decoderTable.name && this.encoderTable.name !== this.lmHead.name) ctx.ops.fill(this.encoderTable.grad, 0);
    this.embedBackward(ctx, this.encoderTable, source.tokens, srcEmbed, dX);
  }
}
