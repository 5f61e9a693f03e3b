// GPT-2 (Radford et al. 2019) as Hugging Face's GPT2Config describes it: learned token and position
// embeddings, pre-LayerNorm blocks (fused QKV projection "c_attn", output "c_proj", MLP "c_fc" → GELU →
// "c_proj"), a final LayerNorm, and an LM head that reuses the token embedding unless untied.
//
// The shape fields (vocab_size, n_positions, n_embd, n_layer, n_head) are required: HF always writes them,
// so a file without them is not a GPT-2 config. Every other field falls back to GPT2Config's default.

import { ConfigFields, hfActivationName, type JsonObject, type ModelActivation } from './config-fields.js';

export interface Gpt2Config {
  readonly vocabSize: number;
  readonly maxPositions: number;
  readonly hidden: number;
  readonly layers: number;
  readonly heads: number;
  /** MLP inner width: n_inner, or 4·hidden when null. */
  readonly ffn: number;
  readonly layerNormEps: number;
  readonly activation: ModelActivation;
  /** resid_pdrop: after the attention and MLP output projections. */
  readonly residualDropout: number;
  /** embd_pdrop: on the sum of token and position embeddings. */
  readonly embeddingDropout: number;
  /** attn_pdrop: on the attention probabilities. */
  readonly attentionDropout: number;
  readonly tieWordEmbeddings: boolean;
  /**
   * Generation stops at any of these (eos_token_id, an int or a list). Absent from the file, GPT2Config's
   * default 50256 (<|endoftext|>) where the vocabulary has that id; left out when there are none.
   */
  readonly eosTokenIds?: readonly number[];
}

/** GPT2Config's default bos_token_id and eos_token_id: <|endoftext|>, the last id of GPT-2's vocabulary. */
const GPT2_CONFIG_END_OF_TEXT = 50256;

export function gpt2ConfigFromJson(json: JsonObject, source: string): Gpt2Config {
  const fields = new ConfigFields(json, source);
  fields.modelType('gpt2');
  // These change the block's math (unscaled scores, scores divided by the layer index, cross-attention);
  // we implement the standard GPT-2 block only, so a file asking for them is refused rather than misread.
  fields.requireIfPresent('scale_attn_weights', true, 'attention scores are always scaled by 1/sqrt(head size)');
  fields.requireIfPresent('scale_attn_by_inverse_layer_idx', false, 'per-layer attention scaling is not supported');
  fields.requireIfPresent('add_cross_attention', false, 'GPT-2 with cross-attention is not supported');
  const hidden = fields.positiveInteger('n_embd');
  const heads = fields.positiveInteger('n_head');
  if (hidden % heads !== 0) fields.fail('n_head', `a divisor of n_embd (${hidden})`);
  const vocabSize = fields.positiveInteger('vocab_size');
  const eosTokenIds = json['eos_token_id'] === null ? []
    : fields.tokenIds('eos_token_id', vocabSize > GPT2_CONFIG_END_OF_TEXT ? [GPT2_CONFIG_END_OF_TEXT] : []);
  if (eosTokenIds.some((id) => id >= vocabSize)) fields.fail('eos_token_id', `token ids below vocab_size (${vocabSize})`);
  return {
    vocabSize,
    maxPositions: fields.positiveInteger('n_positions'),
    hidden,
    layers: fields.positiveInteger('n_layer'),
    heads,
    ffn: fields.positiveInteger('n_inner', 4 * hidden),
    layerNormEps: fields.number('layer_norm_epsilon', 'positive', 1e-5),
    activation: fields.activation('activation_function', 'gelu_tanh'),
    residualDropout: fields.number('resid_pdrop', 'probability', 0.1),
    embeddingDropout: fields.number('embd_pdrop', 'probability', 0.1),
    attentionDropout: fields.number('attn_pdrop', 'probability', 0.1),
    tieWordEmbeddings: fields.boolean('tie_word_embeddings', true),
    ...(eosTokenIds.length > 0 ? { eosTokenIds } : {}),
  };
}

/** The config.json fields for `config`, as GPT2Config reads them (for checkpoints HF can load). */
export function gpt2ConfigToJson(config: Gpt2Config): JsonObject {
  return {
    architectures: ['GPT2LMHeadModel'],
    model_type: 'gpt2',
    vocab_size: config.vocabSize,
    n_positions: config.maxPositions,
    n_embd: config.hidden,
    n_layer: config.layers,
    n_head: config.heads,
    n_inner: config.ffn,
    layer_norm_epsilon: config.layerNormEps,
    activation_function: hfActivationName(config.activation),
    resid_pdrop: config.residualDropout,
    embd_pdrop: config.embeddingDropout,
    attn_pdrop: config.attentionDropout,
    tie_word_embeddings: config.tieWordEmbeddings,
    ...(config.eosTokenIds !== undefined && config.eosTokenIds.length > 0
      ? { eos_token_id: config.eosTokenIds.length === 1 ? config.eosTokenIds[0]! : [...config.eosTokenIds] } : {}),
  };
}

/**
 * Parameters of GPT2LMHeadModel: embeddings, blocks, final LayerNorm, plus the LM head only when it is
 * untied (tied, it is the token embedding). The causal-mask buffers are not parameters.
 */
export function gpt2ParameterCount(config: Gpt2Config): number {
  const { vocabSize: V, maxPositions: P, hidden: C, ffn: F, layers: L } = config;
  const layerNorm = 2 * C;
  const attention = (C * 3 * C + 3 * C) + (C * C + C);
  const mlp = (C * F + F) + (F * C + C);
  const block = layerNorm + attention + layerNorm + mlp;
  const lmHead = config.tieWordEmbeddings ? 0 : V * C;
  return V * C + P * C + L * block + layerNorm + lmHead;
}

const GPT2_124M: Gpt2Config = {
  vocabSize: 50257, maxPositions: 1024, hidden: 768, layers: 12, heads: 12, ffn: 3072, layerNormEps: 1e-5,
  activation: 'gelu_tanh', residualDropout: 0.1, embeddingDropout: 0.1, attentionDropout: 0.1, tieWordEmbeddings: true,
};

export const GPT2_PRESETS: Readonly<Record<string, Gpt2Config>> = {
  /** HF's "gpt2": the 124M model (124,439,808 parameters). */
  'gpt2-124M': GPT2_124M,
  /**
   * Small enough to train on a CPU in minutes (859,008 parameters): GPT-2's architecture with a
   * byte-level vocabulary (256 bytes + <|endoftext|>, io/byte-tokenizer.ts), so the LM head does not
   * dwarf the blocks as GPT-2's 50257-token head would (it would hold 89% of the parameters).
   * No dropout: a run of a few minutes underfits, and dropout would only slow it down.
   */
  'gpt2-tiny': {
    ...GPT2_124M, vocabSize: 257, maxPositions: 256, hidden: 128, layers: 4, heads: 4, ffn: 512,
    residualDropout: 0, embeddingDropout: 0, attentionDropout: 0,
  },
};
