// The decoder-only models the inference engine runs, reduced to what a decode step needs: sizes, which
// norm and MLP, which biases, how positions enter (learned table or RoPE), and the weight table — every
// tensor by its Hugging Face name with the shape we store it in — from a GPT-2 or Llama config.
//
// Storage decisions (all views of one weight workspace, nn/workspace.ts):
//   - Llama's q/k/v projections are stored back to back ([Hq·d + 2·Hkv·d, H]) and so are gate/up
//     ([2F, H]): one GEMM each, whose output column blocks are what qkvRopeAppend and gatedActivation
//     read. GPT-2's c_attn is already fused in the checkpoint.
//   - The vocabulary is padded to a multiple of 64 rows (nn/parameters.ts): the LM head GEMM's rows stay
//     16-byte aligned; the padding rows are zero and their logits are never sampled.
//   - Every matrix is stored [out, in] (torch Linear's layout): GPT-2's Conv1D [in, out] matrices are
//     transposed as they load ('transposed' specs), so one GEMM form (a·Wᵀ) serves both families and a
//     decode GEMM streams whole weight rows.

import type { Activation } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import { paddedVocabSize } from '../nn/parameters.js';
import type { TensorSpec } from '../nn/workspace.js';
import type { Gpt2Config } from '../models/gpt2.js';
import type { LlamaConfig } from '../models/llama.js';
import type { ModelConfig } from '../models/registry.js';

export type DecoderFamily = 'gpt2' | 'llama';

/** A stored weight: its name, stored shape, checkpoint shape (when padded), and whether it is optional in files. */
export interface WeightSpec extends TensorSpec {
  /** The shape in the checkpoint when the stored one differs (a padded vocabulary, a transposed matrix). */
  readonly fileShape?: readonly number[];
  /** Stored as the transpose of the checkpoint's matrix (GPT-2's Conv1D [in, out] stored [out, in]). */
  readonly transposed?: boolean;
}

/** Names of one block's weights; lists are tensors stored back to back and used as one. */
export interface LayerWeightNames {
  readonly norm1: { readonly gamma: string; readonly beta?: string };
  readonly qkv: readonly string[];
  readonly qkvBias?: readonly string[];
  /** Qwen3's RMS norms over each query and key head (q_norm, k_norm [headDim]). */
  readonly headNorm?: { readonly q: string; readonly k: string };
  readonly out: string;
  readonly outBias?: string;
  readonly norm2: { readonly gamma: string; readonly beta?: string };
  /** GPT-2: [c_fc]; Llama: [gate, up]. */
  readonly up: readonly string[];
  readonly upBias?: readonly string[];
  readonly down: string;
  readonly downBias?: string;
}

export interface DecoderArchitecture {
  readonly family: DecoderFamily;
  readonly config: ModelConfig;
  readonly vocabSize: number;
  /** Rows of the stored embedding and LM head: vocabSize rounded up to a multiple of 64. */
  readonly paddedVocab: number;
  readonly hidden: number;
  readonly layers: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly ffn: number;
  readonly maxPositions: number;
  readonly norm: 'layer' | 'rms';
  readonly normEps: number;
  readonly activation: Activation;
  /** act(gate)·up with gate and up from one GEMM (Llama), or act(fc) (GPT-2). */
  readonly gatedMlp: boolean;
  /** A learned position table (GPT-2) instead of RoPE (Llama). */
  readonly learnedPositions: boolean;
  readonly tiedEmbeddings: boolean;
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId?: number;
  /** Every stored tensor, in storage order (packed groups adjacent). */
  readonly weights: readonly WeightSpec[];
  readonly tokenEmbedding: string;
  readonly positionEmbedding?: string;
  readonly layerNames: readonly LayerWeightNames[];
  readonly finalNorm: { readonly gamma: string; readonly beta?: string };
  /** The LM head's weight: the token embedding when tied. */
  readonly lmHead: string;
  /** Prefixes a checkpoint may leave off (files saved from GPT2Model / LlamaModel). */
  readonly optionalPrefix: string;
}

/** The engine's view of a GPT-2 or Llama config; other families are refused by name. */
export function decoderArchitecture(model: ModelConfig): DecoderArchitecture {
  switch (model.family) {
    case 'gpt2': return gpt2Architecture(model.config, model);
    case 'llama': return llamaArchitecture(model.config, model);
    default:
      throw new ArgumentError(`the inference engine runs decoder-only GPT-2 and Llama models; this is a ${model.family} model (${model.family === 'marian' ? 'an encoder-decoder: use the seq2seq engine' : 'an encoder'})`);
  }
}

function gpt2Architecture(c: Gpt2Config, model: ModelConfig): DecoderArchitecture {
  const C = c.hidden, F = c.ffn, Vp = paddedVocabSize(c.vocabSize);
  const weights: WeightSpec[] = [
    { name: 'transformer.wte.weight', shape: [Vp, C], fileShape: [c.vocabSize, C] },
    { name: 'transformer.wpe.weight', shape: [c.maxPositions, C] },
  ];
  const layerNames: LayerWeightNames[] = [];
  const norm = (name: string) => ({ gamma: `${name}.weight`, beta: `${name}.bias` });
  // A Conv1D matrix [in, out] in the file, stored [out, in].
  const conv1d = (name: string, inputs: number, outputs: number): WeightSpec => ({ name, shape: [outputs, inputs], fileShape: [inputs, outputs], transposed: true });
  const normSpecs = (name: string): WeightSpec[] => [{ name: `${name}.weight`, shape: [C] }, { name: `${name}.bias`, shape: [C] }];
  for (let i = 0; i < c.layers; i++) {
    const h = `transformer.h.${i}`;
    weights.push(
      ...normSpecs(`${h}.ln_1`),
      conv1d(`${h}.attn.c_attn.weight`, C, 3 * C), { name: `${h}.attn.c_attn.bias`, shape: [3 * C] },
      conv1d(`${h}.attn.c_proj.weight`, C, C), { name: `${h}.attn.c_proj.bias`, shape: [C] },
      ...normSpecs(`${h}.ln_2`),
      conv1d(`${h}.mlp.c_fc.weight`, C, F), { name: `${h}.mlp.c_fc.bias`, shape: [F] },
      conv1d(`${h}.mlp.c_proj.weight`, F, C), { name: `${h}.mlp.c_proj.bias`, shape: [C] },
    );
    layerNames.push({
      norm1: norm(`${h}.ln_1`), qkv: [`${h}.attn.c_attn.weight`], qkvBias: [`${h}.attn.c_attn.bias`],
      out: `${h}.attn.c_proj.weight`, outBias: `${h}.attn.c_proj.bias`, norm2: norm(`${h}.ln_2`),
      up: [`${h}.mlp.c_fc.weight`], upBias: [`${h}.mlp.c_fc.bias`], down: `${h}.mlp.c_proj.weight`, downBias: `${h}.mlp.c_proj.bias`,
    });
  }
  weights.push(...normSpecs('transformer.ln_f'));
  if (!c.tieWordEmbeddings) weights.push({ name: 'lm_head.weight', shape: [Vp, C], fileShape: [c.vocabSize, C] });
  return {
    family: 'gpt2', config: model, vocabSize: c.vocabSize, paddedVocab: Vp, hidden: C, layers: c.layers, heads: c.heads, kvHeads: c.heads,
    headDim: C / c.heads, ffn: F, maxPositions: c.maxPositions, norm: 'layer', normEps: c.layerNormEps, activation: c.activation,
    gatedMlp: false, learnedPositions: true, tiedEmbeddings: c.tieWordEmbeddings,
    // config.json's eos_token_id (GPT2Config's default <|endoftext|> where the vocabulary has it);
    // generation_config.json's, when there is one, takes precedence (defaultStopTokenIds).
    eosTokenIds: c.eosTokenIds ?? [], weights, tokenEmbedding: 'transformer.wte.weight', positionEmbedding: 'transformer.wpe.weight', layerNames,
    finalNorm: norm('transformer.ln_f'), lmHead: c.tieWordEmbeddings ? 'transformer.wte.weight' : 'lm_head.weight', optionalPrefix: 'transformer.',
  };
}

function llamaArchitecture(c: LlamaConfig, model: ModelConfig): DecoderArchitecture {
  const H = c.hidden, F = c.ffn, D = c.headDim, Vp = paddedVocabSize(c.vocabSize);
  const q = c.heads * D, kv = c.kvHeads * D;
  const weights: WeightSpec[] = [{ name: 'model.embed_tokens.weight', shape: [Vp, H], fileShape: [c.vocabSize, H] }];
  const layerNames: LayerWeightNames[] = [];
  for (let i = 0; i < c.layers; i++) {
    const l = `model.layers.${i}`, a = `${l}.self_attn`, m = `${l}.mlp`;
    // Phi-3 stores q/k/v as one qkv_proj and gate/up as one gate_up_proj, in the order we stack them.
    const fused = c.variant === 'phi3';
    const qkvSpecs: WeightSpec[] = fused ? [{ name: `${a}.qkv_proj.weight`, shape: [q + 2 * kv, H] }] : [
      { name: `${a}.q_proj.weight`, shape: [q, H] }, { name: `${a}.k_proj.weight`, shape: [kv, H], packWithPrevious: true },
      { name: `${a}.v_proj.weight`, shape: [kv, H], packWithPrevious: true },
    ];
    const upSpecs: WeightSpec[] = fused ? [{ name: `${m}.gate_up_proj.weight`, shape: [2 * F, H] }] : [
      { name: `${m}.gate_proj.weight`, shape: [F, H] }, { name: `${m}.up_proj.weight`, shape: [F, H], packWithPrevious: true },
    ];
    weights.push(
      { name: `${l}.input_layernorm.weight`, shape: [H] },
      ...qkvSpecs,
      ...(c.attentionBias || c.qkvBias ? [
        { name: `${a}.q_proj.bias`, shape: [q] }, { name: `${a}.k_proj.bias`, shape: [kv], packWithPrevious: true },
        { name: `${a}.v_proj.bias`, shape: [kv], packWithPrevious: true },
      ] : []),
      ...(c.qkNorm ? [{ name: `${a}.q_norm.weight`, shape: [D] }, { name: `${a}.k_norm.weight`, shape: [D] }] : []),
      ...(c.attentionBias ? [{ name: `${a}.o_proj.bias`, shape: [H] }] : []),
      { name: `${a}.o_proj.weight`, shape: [H, q] },
      { name: `${l}.post_attention_layernorm.weight`, shape: [H] },
      ...upSpecs,
      ...(c.mlpBias ? [
        { name: `${m}.gate_proj.bias`, shape: [F] }, { name: `${m}.up_proj.bias`, shape: [F], packWithPrevious: true },
        { name: `${m}.down_proj.bias`, shape: [H] },
      ] : []),
      { name: `${m}.down_proj.weight`, shape: [H, F] },
    );
    layerNames.push({
      norm1: { gamma: `${l}.input_layernorm.weight` },
      qkv: qkvSpecs.map((w) => w.name),
      ...(c.attentionBias || c.qkvBias ? { qkvBias: [`${a}.q_proj.bias`, `${a}.k_proj.bias`, `${a}.v_proj.bias`] } : {}),
      ...(c.qkNorm ? { headNorm: { q: `${a}.q_norm.weight`, k: `${a}.k_norm.weight` } } : {}),
      ...(c.attentionBias ? { outBias: `${a}.o_proj.bias` } : {}),
      out: `${a}.o_proj.weight`,
      norm2: { gamma: `${l}.post_attention_layernorm.weight` },
      up: upSpecs.map((w) => w.name),
      ...(c.mlpBias ? { upBias: [`${m}.gate_proj.bias`, `${m}.up_proj.bias`], downBias: `${m}.down_proj.bias` } : {}),
      down: `${m}.down_proj.weight`,
    });
  }
  weights.push({ name: 'model.norm.weight', shape: [H] });
  if (!c.tieWordEmbeddings) weights.push({ name: 'lm_head.weight', shape: [Vp, H], fileShape: [c.vocabSize, H] });
  return {
    family: 'llama', config: model, vocabSize: c.vocabSize, paddedVocab: Vp, hidden: H, layers: c.layers, heads: c.heads, kvHeads: c.kvHeads,
    // A sliding window caps the context: within it, sliding-window attention is full attention.
    headDim: D, ffn: F, maxPositions: Math.min(c.maxPositions, c.slidingWindow ?? Infinity), norm: 'rms', normEps: c.rmsNormEps, activation: c.activation,
    gatedMlp: true, learnedPositions: false, tiedEmbeddings: c.tieWordEmbeddings,
    eosTokenIds: c.eosTokenIds, bosTokenId: c.bosTokenId, weights, tokenEmbedding: 'model.embed_tokens.weight', layerNames,
    finalNorm: { gamma: 'model.norm.weight' }, lmHead: c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight', optionalPrefix: 'model.',
  };
}

/**
 * Bytes of the weights one decode step reads, for bandwidth floors: every matrix and vector once, the LM
 * head once (the token embedding when tied); an untied embedding table and a position table are only
 * gathered a row per token, so they do not count.
 */
export function decodeWeightBytes(arch: DecoderArchitecture, bytesPerElement: number): number {
  const all = arch.weights.reduce((n, w) => n + (w.fileShape ?? w.shape).reduce((a, b) => a * b, 1), 0);
  const gathered = (arch.tiedEmbeddings ? 0 : arch.vocabSize * arch.hidden) + (arch.learnedPositions ? arch.maxPositions * arch.hidden : 0);
  return (all - gathered) * bytesPerElement;
}
