// Llama (Touvron et al. 2023; Llama 3, 2024) as Hugging Face's LlamaConfig describes it: token embedding,
// pre-RMSNorm blocks with rotary position embeddings (RoPE) and grouped-query attention (num_key_value_heads
// K/V heads, each shared by heads/kv_heads query heads), a SwiGLU MLP (down(act(gate(x)) ⊙ up(x))), a final
// RMSNorm and an LM head, tied to the embedding in the small Llama 3.2 models.
//
// RoPE settings come from rope_theta + rope_scaling (transformers 4.x) or from rope_parameters
// (transformers 5, which may leave the top-level rope_theta out: reading only the old fields would silently
// use the default base frequency). We write the 4.x fields, which both versions read.
//
// Three architectures of the same shape read as variants: Mistral (model_type "mistral": Llama's layers,
// with sliding-window attention in v0.1), Qwen2 ("qwen2": biases on the q, k and v projections, none on
// o) and Phi-3 ("phi3": q/k/v stored as one qkv_proj and gate/up as one gate_up_proj, the order we stack
// them in; its long-context LongRoPE scaling is refused by name, as is a partial rotary factor), Qwen3
// ("qwen3": an RMS norm over each query and key head — q_norm, k_norm [head_dim] — after the projection,
// before RoPE; head_dim 128 unless given, no biases unless attention_bias). A sliding
// window is recorded, and the engine's context is capped at it (infer/architecture.ts): within the
// window, sliding-window attention is full attention.

import { ConfigFields, hfActivationName, type JsonObject, type ModelActivation } from './config-fields.js';

/** RoPE frequency scaling for contexts longer than pre-training (HF's rope_type); null means none. */
export type RopeScaling =
  /** Positions divided by `factor` (position interpolation). */
  | { readonly type: 'linear'; readonly factor: number }
  /** NTK-aware: the base grows with the sequence length once it passes the original context. */
  | { readonly type: 'dynamic'; readonly factor: number; readonly originalMaxPositions?: number }
  /** Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth ramp between the two wavelengths. */
  | {
    readonly type: 'llama3'; readonly factor: number; readonly lowFreqFactor: number; readonly highFreqFactor: number;
    readonly originalMaxPositions: number;
  }
  /** YaRN (Peng et al. 2023): per-frequency interpolation between beta_fast and beta_slow, plus attention scaling. */
  | {
    readonly type: 'yarn'; readonly factor: number; readonly originalMaxPositions?: number;
    /** Multiplies the cos/sin tables; when absent, HF uses 0.1·ln(factor) + 1. */
    readonly attentionFactor?: number; readonly betaFast: number; readonly betaSlow: number;
  };

export const ROPE_SCALING_TYPES = ['linear', 'dynamic', 'llama3', 'yarn'] as const;

/** Architectures read as Llama variants: HF's model_type → its class name. */
export const LLAMA_VARIANTS = {
  llama: 'LlamaForCausalLM', mistral: 'MistralForCausalLM', qwen2: 'Qwen2ForCausalLM', qwen3: 'Qwen3ForCausalLM', phi3: 'Phi3ForCausalLM',
} as const;
export type LlamaVariant = keyof typeof LLAMA_VARIANTS;

export interface LlamaConfig {
  readonly vocabSize: number;
  readonly hidden: number;
  /** intermediate_size: the width of the gate and up projections. */
  readonly ffn: number;
  readonly layers: number;
  readonly heads: number;
  /** num_key_value_heads: divides `heads`; equal to it for multi-head attention, 1 for multi-query. */
  readonly kvHeads: number;
  /** head_dim: hidden/heads unless given; heads·headDim need not equal hidden. */
  readonly headDim: number;
  readonly maxPositions: number;
  readonly rmsNormEps: number;
  readonly ropeTheta: number;
  readonly ropeScaling: RopeScaling | null;
  readonly activation: ModelActivation;
  readonly tieWordEmbeddings: boolean;
  /** Biases on the q, k, v and o projections. */
  readonly attentionBias: boolean;
  /** Biases on the q, k and v projections only (Qwen2); absent: false. */
  readonly qkvBias?: boolean;
  /** An RMS norm over each query and key head before RoPE (Qwen3's q_norm / k_norm); absent: false. */
  readonly qkNorm?: boolean;
  /** The HF model_type this config came from when not "llama" (written back as it was read). */
  readonly variant?: Exclude<LlamaVariant, 'llama'>;
  /** Sliding-window attention's window (Mistral v0.1, Qwen2 with use_sliding_window); absent: none. */
  readonly slidingWindow?: number;
  /** Biases on the gate, up and down projections. */
  readonly mlpBias: boolean;
  readonly bosTokenId: number;
  /** Generation stops at any of these (HF's eos_token_id, an int or a list). */
  readonly eosTokenIds: readonly number[];
}

export function llamaConfigFromJson(json: JsonObject, source: string): LlamaConfig {
  const fields = new ConfigFields(json, source);
  const variant = fields.oneOf('model_type', Object.keys(LLAMA_VARIANTS) as LlamaVariant[], 'llama');
  // Phi-4-mini's partial rotary embedding (RoPE on a fraction of each head) is not implemented.
  if (fields.number('partial_rotary_factor', 'positive', 1) !== 1) fields.fail('partial_rotary_factor', '1 (RoPE over whole heads; a partial rotary factor is not supported)');
  const vocabSize = fields.positiveInteger('vocab_size');
  const hidden = fields.positiveInteger('hidden_size');
  const heads = fields.positiveInteger('num_attention_heads');
  const kvHeads = fields.positiveInteger('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) fields.fail('num_key_value_heads', `a divisor of num_attention_heads (${heads})`);
  // Qwen3Config's head_dim defaults to 128 whatever hidden_size / num_attention_heads is.
  if (!fields.has('head_dim') && variant !== 'qwen3' && hidden % heads !== 0) fields.fail('num_attention_heads', `a divisor of hidden_size (${hidden}), or a head_dim field`);
  const headDim = fields.positiveInteger('head_dim', variant === 'qwen3' ? 128 : hidden / heads);
  if (headDim % 2 !== 0) {
    const why = 'RoPE rotates pairs of dimensions';
    if (fields.has('head_dim')) fields.fail('head_dim', `an even number (${why})`);
    fields.fail('num_attention_heads', `a divisor of hidden_size (${hidden}) giving an even head size (${why})`);
  }
  const maxPositions = fields.positiveInteger('max_position_embeddings', 2048);
  const { ropeTheta, ropeScaling } = ropeSettings(fields);
  const bosTokenId = fields.tokenId('bos_token_id', 1);
  const eosTokenIds = fields.tokenIds('eos_token_id', [2]);
  if (bosTokenId >= vocabSize) fields.fail('bos_token_id', `a token id below vocab_size (${vocabSize})`);
  if (eosTokenIds.some((id) => id >= vocabSize)) fields.fail('eos_token_id', `token ids below vocab_size (${vocabSize})`);
  return {
    vocabSize,
    hidden,
    ffn: fields.positiveInteger('intermediate_size'),
    layers: fields.positiveInteger('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    maxPositions,
    rmsNormEps: fields.number('rms_norm_eps', 'positive', 1e-6),
    ropeTheta,
    ropeScaling,
    activation: fields.activation('hidden_act', 'silu'),
    tieWordEmbeddings: fields.boolean('tie_word_embeddings', false),
    // Qwen2 has no attention_bias field: its q, k and v always carry biases, its o none. Phi-3 has none.
    attentionBias: variant === 'qwen2' || variant === 'phi3' ? false : fields.boolean('attention_bias', false),
    mlpBias: variant === 'phi3' ? false : fields.boolean('mlp_bias', false),
    bosTokenId,
    eosTokenIds,
    ...(variant === 'qwen2' ? { qkvBias: true } : {}),
    ...(variant === 'qwen3' ? { qkNorm: true } : {}),
    ...(variant !== 'llama' ? { variant } : {}),
    ...slidingWindow(fields, variant),
  };
}

/** Mistral's and Phi-3's sliding_window (null: none); Qwen2's and Qwen3's when use_sliding_window is true. */
function slidingWindow(fields: ConfigFields, variant: LlamaVariant): { slidingWindow?: number } {
  if (variant === 'llama') return {};
  if ((variant === 'qwen2' || variant === 'qwen3') && !fields.boolean('use_sliding_window', false)) return {};
  const value = fields.value('sliding_window');
  return value === undefined || value === null ? {} : { slidingWindow: fields.positiveInteger('sliding_window') };
}

function ropeSettings(fields: ConfigFields): { ropeTheta: number; ropeScaling: RopeScaling | null } {
  const topLevelTheta = fields.number('rope_theta', 'positive', 10000);
  // transformers 5 leaves rope_type out of rope_parameters for plain RoPE; in rope_scaling it is required.
  const parameters = fields.object('rope_parameters');
  if (parameters !== undefined) {
    return { ropeTheta: parameters.number('rope_theta', 'positive', topLevelTheta), ropeScaling: ropeScalingFrom(parameters, 'default') };
  }
  const scaling = fields.object('rope_scaling');
  return { ropeTheta: topLevelTheta, ropeScaling: scaling ? ropeScalingFrom(scaling) : null };
}

/** Reads HF's rope_scaling (or rope_parameters) object; "type" is the older spelling of "rope_type". */
function ropeScalingFrom(scaling: ConfigFields, defaultType?: 'default'): RopeScaling | null {
  const typeField = scaling.has('rope_type') || !scaling.has('type') ? 'rope_type' : 'type';
  const type = scaling.oneOf(typeField, ['default', ...ROPE_SCALING_TYPES], defaultType);
  if (type === 'default') return null;
  const factor = scaling.number('factor', 'atLeastOne');
  // Optional for dynamic and yarn (HF then uses max_position_embeddings); kept absent when absent, to round-trip.
  const originalMaxPositions = (): { originalMaxPositions?: number } =>
    scaling.has('original_max_position_embeddings') ? { originalMaxPositions: scaling.positiveInteger('original_max_position_embeddings') } : {};
  switch (type) {
    case 'linear':
      return { type, factor };
    case 'dynamic':
      return { type, factor, ...originalMaxPositions() };
    case 'llama3': {
      const lowFreqFactor = scaling.number('low_freq_factor', 'positive');
      const highFreqFactor = scaling.number('high_freq_factor', 'positive');
      // The ramp between the two wavelengths divides by (high − low).
      if (highFreqFactor <= lowFreqFactor) scaling.fail('high_freq_factor', `a number above low_freq_factor (${lowFreqFactor})`);
      return { type, factor, lowFreqFactor, highFreqFactor, originalMaxPositions: scaling.positiveInteger('original_max_position_embeddings') };
    }
    case 'yarn': {
      const betaFast = scaling.number('beta_fast', 'positive', 32);
      const betaSlow = scaling.number('beta_slow', 'positive', 1);
      if (betaFast < betaSlow) scaling.fail('beta_fast', `a number at least beta_slow (${betaSlow})`);
      const attentionFactor = scaling.has('attention_factor') ? { attentionFactor: scaling.number('attention_factor', 'positive') } : {};
      return { type, factor, betaFast, betaSlow, ...originalMaxPositions(), ...attentionFactor };
    }
  }
}

/** The config.json fields for `config`, as LlamaConfig reads them (transformers 4.x spelling, read by 5.x too). */
export function llamaConfigToJson(config: LlamaConfig): JsonObject {
  const variant = config.variant ?? 'llama';
  const window = variant === 'mistral' || variant === 'phi3' ? { sliding_window: config.slidingWindow ?? null }
    : variant === 'qwen2' || variant === 'qwen3' ? { use_sliding_window: config.slidingWindow !== undefined, ...(config.slidingWindow !== undefined ? { sliding_window: config.slidingWindow } : {}) } : {};
  return {
    architectures: [LLAMA_VARIANTS[variant]],
    model_type: variant,
    ...window,
    vocab_size: config.vocabSize,
    hidden_size: config.hidden,
    intermediate_size: config.ffn,
    num_hidden_layers: config.layers,
    num_attention_heads: config.heads,
    num_key_value_heads: config.kvHeads,
    head_dim: config.headDim,
    max_position_embeddings: config.maxPositions,
    rms_norm_eps: config.rmsNormEps,
    rope_theta: config.ropeTheta,
    rope_scaling: config.ropeScaling === null ? null : ropeScalingToJson(config.ropeScaling),
    hidden_act: hfActivationName(config.activation),
    tie_word_embeddings: config.tieWordEmbeddings,
    ...(variant !== 'qwen2' && variant !== 'phi3' ? { attention_bias: config.attentionBias } : {}),
    ...(variant !== 'phi3' ? { mlp_bias: config.mlpBias } : {}),
    bos_token_id: config.bosTokenId,
    eos_token_id: config.eosTokenIds.length === 1 ? config.eosTokenIds[0] : [...config.eosTokenIds],
  };
}

function ropeScalingToJson(scaling: RopeScaling): JsonObject {
  const json: JsonObject = { rope_type: scaling.type, factor: scaling.factor };
  if (scaling.type === 'llama3') {
    json['low_freq_factor'] = scaling.lowFreqFactor;
    json['high_freq_factor'] = scaling.highFreqFactor;
  }
  if (scaling.type === 'yarn') {
    json['beta_fast'] = scaling.betaFast;
    json['beta_slow'] = scaling.betaSlow;
    if (scaling.attentionFactor !== undefined) json['attention_factor'] = scaling.attentionFactor;
  }
  if (scaling.type !== 'linear' && scaling.originalMaxPositions !== undefined) {
    json['original_max_position_embeddings'] = scaling.originalMaxPositions;
  }
  return json;
}

/**
 * Parameters of LlamaForCausalLM: embedding, blocks (q/k/v/o, gate/up/down, two RMSNorm weights), the final
 * RMSNorm, and the LM head only when untied. The RoPE tables are buffers, not parameters.
 */
export function llamaParameterCount(config: LlamaConfig): number {
  const { vocabSize: V, hidden: H, ffn: F, headDim: D } = config;
  const q = config.heads * D;
  const kv = config.kvHeads * D;
  const attention = H * (q + 2 * kv) + q * H + (config.attentionBias ? q + 2 * kv + H : config.qkvBias ? q + 2 * kv : 0);
  const mlp = 3 * H * F + (config.mlpBias ? 2 * F + H : 0);
  const block = attention + mlp + 2 * H + (config.qkNorm ? 2 * D : 0);
  return V * H + config.layers * block + H + (config.tieWordEmbeddings ? 0 : V * H);
}

const LLAMA_3_ROPE_SCALING = { type: 'llama3', lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 } as const;

export const LLAMA_PRESETS: Readonly<Record<string, LlamaConfig>> = {
  /** Llama 3.2 1B (1,235,814,400 parameters, embedding tied). */
  'llama-1.2B': {
    vocabSize: 128256, hidden: 2048, ffn: 8192, layers: 16, heads: 32, kvHeads: 8, headDim: 64, maxPositions: 131072,
    rmsNormEps: 1e-5, ropeTheta: 500000, ropeScaling: { ...LLAMA_3_ROPE_SCALING, factor: 32 }, activation: 'silu',
    tieWordEmbeddings: true, attentionBias: false, mlpBias: false, bosTokenId: 128000, eosTokenIds: [128001],
  },
  /** Qwen3-0.6B (596,049,920 parameters, embedding tied; q_norm / k_norm; head_dim 128 beside hidden 1024 / 16 heads). */
  'qwen3-0.6B': {
    vocabSize: 151936, hidden: 1024, ffn: 3072, layers: 28, heads: 16, kvHeads: 8, headDim: 128, maxPositions: 40960,
    rmsNormEps: 1e-6, ropeTheta: 1000000, ropeScaling: null, activation: 'silu', tieWordEmbeddings: true, attentionBias: false,
    mlpBias: false, bosTokenId: 151643, eosTokenIds: [151645], variant: 'qwen3', qkNorm: true,
  },
  /** Llama 3.1 8B (8,030,261,248 parameters, embedding untied). */
  'llama-8B': {
    vocabSize: 128256, hidden: 4096, ffn: 14336, layers: 32, heads: 32, kvHeads: 8, headDim: 128, maxPositions: 131072,
    rmsNormEps: 1e-5, ropeTheta: 500000, ropeScaling: { ...LLAMA_3_ROPE_SCALING, factor: 8 }, activation: 'silu',
    tieWordEmbeddings: false, attentionBias: false, mlpBias: false, bosTokenId: 128000, eosTokenIds: [128001],
  },
  /**
   * For tests and CPU training: grouped-query attention (4 heads sharing 2 K/V heads) at a size that runs in
   * seconds, with GPT-2's tokenizer (vocabulary 50257; <|endoftext|> = 50256 as BOS and EOS), since that is
   * the tokenizer we ship. FFN 384 = 8/3 · hidden rounded up to a multiple of 128, as Llama sizes its MLP.
   */
  'llama-tiny': {
    vocabSize: 50257, hidden: 128, ffn: 384, layers: 4, heads: 4, kvHeads: 2, headDim: 32, maxPositions: 256,
    rmsNormEps: 1e-5, ropeTheta: 10000, ropeScaling: null, activation: 'silu',
    tieWordEmbeddings: true, attentionBias: false, mlpBias: false, bosTokenId: 50256, eosTokenIds: [50256],
  },
};
