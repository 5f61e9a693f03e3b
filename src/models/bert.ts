// BERT (Devlin et al. 2018) as Hugging Face's BertConfig describes it: token + position + token-type
// embeddings followed by a LayerNorm, post-LayerNorm encoder blocks (separate Q, K, V projections), GELU
// (erf) MLP; on top either the pooler (BertModel) or the masked-LM head (BertForMaskedLM).
//
// The shape fields are required (HF always writes them); the rest fall back to BertConfig's defaults.
//
// RoBERTa and XLM-RoBERTa (model_type "roberta" / "xlm-roberta", as multilingual-e5 and bge-m3 are) are the
// same encoder with positions counted from pad_token_id + 1 (HF's create_position_ids_from_input_ids: a
// padding token sits at position pad_token_id, the i-th other token at pad_token_id + i), so their
// max_position_embeddings holds pad_token_id + 1 positions no token reaches, and one token type.
// MPNet (model_type "mpnet", all-mpnet-base-v2) counts positions the same way from a padding index fixed at 1,
// has no token types, and adds to every layer's attention scores one relative position bias: T5's
// bidirectional buckets (relative_attention_num_buckets, distances up to 128) looked up per head.
// DistilBERT (model_type "distilbert") is BERT with half the layers, no token types and no pooler, its fields
// named dim / n_layers / n_heads / hidden_dim / activation, its LayerNorms' eps fixed at 1e-12.

import { ConfigFields, hfActivationName, type JsonObject, type ModelActivation } from './config-fields.js';

export interface BertConfig {
  readonly vocabSize: number;
  readonly hidden: number;
  readonly layers: number;
  readonly heads: number;
  /** intermediate_size: the MLP inner width. */
  readonly ffn: number;
  readonly activation: ModelActivation;
  readonly maxPositions: number;
  /** Segment ids (sentence A / B): 2 for BERT. */
  readonly typeVocabSize: number;
  readonly layerNormEps: number;
  /** hidden_dropout_prob: on the embeddings and after each block's output projections. */
  readonly hiddenDropout: number;
  /** attention_probs_dropout_prob: on the attention probabilities. */
  readonly attentionDropout: number;
  readonly padTokenId: number;
  /** The HF config class: BERT (default), the RoBERTa family or MPNet, whose positions start past the padding id. */
  readonly modelType?: BertModelType;
  /** MPNet: the relative position buckets of its attention bias (relative_attention_num_buckets). */
  readonly relativeAttentionBuckets?: number;
}

export const BERT_MODEL_TYPES = ['bert', 'roberta', 'xlm-roberta', 'mpnet', 'distilbert'] as const;
export type BertModelType = (typeof BERT_MODEL_TYPES)[number];

/** MPNet's padding index: HF's MPNetEmbeddings fixes it at 1 whatever pad_token_id says. */
const MPNET_PADDING_INDEX = 1;

/** The padding id positions are counted from (RoBERTa family, MPNet); undefined for BERT (positions 0, 1, …). */
export function positionPaddingId(config: BertConfig): number | undefined {
  const type = config.modelType ?? 'bert';
  return type === 'bert' || type === 'distilbert' ? undefined : type === 'mpnet' ? MPNET_PADDING_INDEX : config.padTokenId;
}

/** The position a sequence's first token takes: 0 for BERT, the padding id + 1 for the RoBERTa family and MPNet. */
export function positionOffset(config: BertConfig): number {
  const pad = positionPaddingId(config);
  return pad === undefined ? 0 : pad + 1;
}

/** Whether the encoder has token-type (segment) embeddings: all but MPNet and DistilBERT. */
export function hasTokenTypes(config: BertConfig): boolean {
  return config.modelType !== 'mpnet' && config.modelType !== 'distilbert';
}

/** The most tokens a sequence may have: the position table's rows past the offset. */
export function maxSequenceTokens(config: BertConfig): number {
  return config.maxPositions - positionOffset(config);
}

export function bertConfigFromJson(json: JsonObject, source: string): BertConfig {
  const fields = new ConfigFields(json, source);
  const modelType = fields.has('model_type') ? fields.oneOf('model_type', BERT_MODEL_TYPES) : modelTypeOfArchitectures(fields.value('architectures'));
  if (modelType === 'distilbert') return distilBertConfigFromJson(fields);
  fields.oneOf('position_embedding_type', ['absolute'], 'absolute');
  const vocabSize = fields.positiveInteger('vocab_size');
  const hidden = fields.positiveInteger('hidden_size');
  const heads = fields.positiveInteger('num_attention_heads');
  if (hidden % heads !== 0) fields.fail('num_attention_heads', `a divisor of hidden_size (${hidden})`);
  const padTokenId = fields.tokenId('pad_token_id', modelType === 'bert' ? 0 : 1);
  if (padTokenId >= vocabSize) fields.fail('pad_token_id', `a token id below vocab_size (${vocabSize})`);
  const maxPositions = fields.positiveInteger('max_position_embeddings');
  const firstPosition = modelType === 'bert' ? 0 : (modelType === 'mpnet' ? MPNET_PADDING_INDEX : padTokenId) + 1;
  if (maxPositions <= firstPosition) fields.fail('max_position_embeddings', `more than ${firstPosition}: a ${modelType} model's positions start there`);
  return {
    vocabSize,
    hidden,
    layers: fields.positiveInteger('num_hidden_layers'),
    heads,
    ffn: fields.positiveInteger('intermediate_size'),
    activation: fields.activation('hidden_act', 'gelu'),
    maxPositions,
    // MPNet has no token types: one (0), with no embedding table.
    typeVocabSize: modelType === 'mpnet' ? 1 : fields.positiveInteger('type_vocab_size', 2),
    layerNormEps: fields.number('layer_norm_eps', 'positive', modelType === 'mpnet' ? 1e-5 : 1e-12),
    hiddenDropout: fields.number('hidden_dropout_prob', 'probability', 0.1),
    attentionDropout: fields.number('attention_probs_dropout_prob', 'probability', 0.1),
    padTokenId,
    ...(modelType === 'bert' ? {} : { modelType }),
    ...(modelType === 'mpnet' ? { relativeAttentionBuckets: fields.positiveInteger('relative_attention_num_buckets', 32) } : {}),
  };
}

/** DistilBertConfig's fields as a BertConfig (no token types: one, with no table; LayerNorm eps 1e-12 as HF fixes it). */
function distilBertConfigFromJson(fields: ConfigFields): BertConfig {
  const vocabSize = fields.positiveInteger('vocab_size');
  const hidden = fields.positiveInteger('dim');
  const heads = fields.positiveInteger('n_heads');
  if (hidden % heads !== 0) fields.fail('n_heads', `a divisor of dim (${hidden})`);
  const padTokenId = fields.tokenId('pad_token_id', 0);
  if (padTokenId >= vocabSize) fields.fail('pad_token_id', `a token id below vocab_size (${vocabSize})`);
  return {
    vocabSize, hidden, heads, padTokenId, modelType: 'distilbert',
    layers: fields.positiveInteger('n_layers'),
    ffn: fields.positiveInteger('hidden_dim'),
    activation: fields.activation('activation', 'gelu'),
    maxPositions: fields.positiveInteger('max_position_embeddings'),
    typeVocabSize: 1,
    layerNormEps: 1e-12,
    hiddenDropout: fields.number('dropout', 'probability', 0.1),
    attentionDropout: fields.number('attention_dropout', 'probability', 0.1),
  };
}

/** A config without model_type: the family its architectures name (RobertaModel, XLMRobertaForMaskedLM, ...), else BERT. */
function modelTypeOfArchitectures(architectures: unknown): BertModelType {
  const names = Array.isArray(architectures) ? architectures.filter((a): a is string => typeof a === 'string') : [];
  if (names.some((a) => a.startsWith('XLMRoberta'))) return 'xlm-roberta';
  if (names.some((a) => a.startsWith('Roberta'))) return 'roberta';
  if (names.some((a) => a.startsWith('MPNet'))) return 'mpnet';
  if (names.some((a) => a.startsWith('DistilBert'))) return 'distilbert';
  return 'bert';
}

/** The config.json fields for `config`, as BertConfig reads them. */
export function bertConfigToJson(config: BertConfig): JsonObject {
  const modelType = config.modelType ?? 'bert';
  if (modelType === 'distilbert') {
    return {
      architectures: ['DistilBertForMaskedLM'], model_type: modelType, vocab_size: config.vocabSize, dim: config.hidden,
      n_layers: config.layers, n_heads: config.heads, hidden_dim: config.ffn, activation: hfActivationName(config.activation),
      max_position_embeddings: config.maxPositions, dropout: config.hiddenDropout, attention_dropout: config.attentionDropout,
      pad_token_id: config.padTokenId,
    };
  }
  return {
    architectures: [{ bert: 'BertForMaskedLM', roberta: 'RobertaForMaskedLM', 'xlm-roberta': 'XLMRobertaForMaskedLM', mpnet: 'MPNetForMaskedLM' }[modelType as Exclude<BertModelType, 'distilbert'>]],
    model_type: modelType,
    vocab_size: config.vocabSize,
    hidden_size: config.hidden,
    num_hidden_layers: config.layers,
    num_attention_heads: config.heads,
    intermediate_size: config.ffn,
    hidden_act: hfActivationName(config.activation),
    max_position_embeddings: config.maxPositions,
    type_vocab_size: config.typeVocabSize,
    layer_norm_eps: config.layerNormEps,
    hidden_dropout_prob: config.hiddenDropout,
    attention_probs_dropout_prob: config.attentionDropout,
    pad_token_id: config.padTokenId,
    position_embedding_type: 'absolute',
    ...(config.relativeAttentionBuckets !== undefined ? { relative_attention_num_buckets: config.relativeAttentionBuckets } : {}),
  };
}

/**
 * Parameters of the encoder with one of its heads:
 *  - 'pooler' (default): BertModel, embeddings + blocks + the pooler's dense layer (109,482,240 for bert-base);
 *  - 'masked-lm': BertForMaskedLM, embeddings + blocks + the MLM head's transform (dense + LayerNorm) and
 *    decoder bias; the decoder weight is the word embedding (tied), and this model has no pooler.
 */
export function bertParameterCount(config: BertConfig, head: 'pooler' | 'masked-lm' = 'pooler'): number {
  const { vocabSize: V, hidden: H, ffn: F, layers: L } = config;
  const layerNorm = 2 * H;
  const dense = H * H + H;
  const embeddings = (V + config.maxPositions + config.typeVocabSize) * H + layerNorm;
  const block = 4 * dense + layerNorm + (H * F + F) + (F * H + H) + layerNorm;
  const headParameters = head === 'pooler' ? dense : dense + layerNorm + V;
  return embeddings + L * block + headParameters;
}

const BERT_BASE: BertConfig = {
  vocabSize: 30522, hidden: 768, layers: 12, heads: 12, ffn: 3072, activation: 'gelu', maxPositions: 512,
  typeVocabSize: 2, layerNormEps: 1e-12, hiddenDropout: 0.1, attentionDropout: 0.1, padTokenId: 0,
};

export const BERT_PRESETS: Readonly<Record<string, BertConfig>> = {
  /** bert-base-uncased. */
  'bert-base': BERT_BASE,
  /** google/bert_uncased_L-2_H-128_A-2 (BERT-Tiny of Turc et al. 2019): the same vocabulary, 4.4M parameters. */
  'bert-tiny': { ...BERT_BASE, hidden: 128, layers: 2, heads: 2, ffn: 512 },
};
