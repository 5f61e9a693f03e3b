// Marian (Junczys-Dowmunt et al. 2018) translation models as Hugging Face's MarianConfig describes them (the
// BART family's field names): the Transformer encoder-decoder of Vaswani et al. with post-LayerNorm blocks,
// fixed sinusoidal positions, token embeddings scaled by sqrt(d_model) (scale_embedding), and by default one
// embedding shared by encoder, decoder and LM head. HF's MarianMTModel adds a final_logits_bias buffer.
//
// HF's Marian is always post-LayerNorm and ignores normalize_before; a pre-norm network would also need a
// final LayerNorm that Marian checkpoints do not have, so normalize_before: true is refused, not misread.

import { ConfigFields, hfActivationName, type JsonObject, type ModelActivation } from './config-fields.js';

export interface MarianConfig {
  /** Source (and, when shared, target) vocabulary. */
  readonly vocabSize: number;
  /** decoder_vocab_size: the target vocabulary; equals vocabSize when embeddings are shared. */
  readonly decoderVocabSize: number;
  /** d_model. */
  readonly hidden: number;
  readonly encoderLayers: number;
  readonly decoderLayers: number;
  readonly encoderHeads: number;
  readonly decoderHeads: number;
  readonly encoderFfn: number;
  readonly decoderFfn: number;
  readonly activation: ModelActivation;
  /** Longest source or target sequence (rows of each sinusoidal table). */
  readonly maxPositions: number;
  /** Multiply token embeddings by sqrt(d_model) before adding positions. */
  readonly scaleEmbedding: boolean;
  /** One token embedding for encoder and decoder (the vocabularies must then be one). */
  readonly shareEncoderDecoderEmbeddings: boolean;
  /** The LM head reuses the decoder's token embedding. */
  readonly tieWordEmbeddings: boolean;
  /** The first decoder input; Marian uses the pad token. */
  readonly decoderStartTokenId: number;
  readonly padTokenId: number;
  readonly eosTokenId: number;
  /** dropout: on embeddings and after each sublayer. */
  readonly dropout: number;
  readonly attentionDropout: number;
  /** activation_dropout: inside the MLP, after the activation. */
  readonly activationDropout: number;
}

export function marianConfigFromJson(json: JsonObject, source: string): MarianConfig {
  const fields = new ConfigFields(json, source);
  fields.modelType('marian');
  fields.requireIfPresent('normalize_before', false, "Marian's blocks are post-LayerNorm");
  const vocabSize = fields.positiveInteger('vocab_size');
  const decoderVocabSize = fields.positiveInteger('decoder_vocab_size', vocabSize);
  const shareEncoderDecoderEmbeddings = fields.boolean('share_encoder_decoder_embeddings', true);
  if (shareEncoderDecoderEmbeddings && decoderVocabSize !== vocabSize) {
    fields.fail('decoder_vocab_size', `vocab_size (${vocabSize}) when share_encoder_decoder_embeddings is true`);
  }
  const hidden = fields.positiveInteger('d_model');
  const headsDividing = (field: string): number => {
    const heads = fields.positiveInteger(field);
    if (hidden % heads !== 0) fields.fail(field, `a divisor of d_model (${hidden})`);
    return heads;
  };
  const tokenBelow = (field: string, fallback: number, vocab: number, vocabField: string): number => {
    const id = fields.tokenId(field, fallback);
    if (id >= vocab) fields.fail(field, `a token id below ${vocabField} (${vocab})`);
    return id;
  };
  return {
    vocabSize,
    decoderVocabSize,
    hidden,
    encoderLayers: fields.positiveInteger('encoder_layers'),
    decoderLayers: fields.positiveInteger('decoder_layers'),
    encoderHeads: headsDividing('encoder_attention_heads'),
    decoderHeads: headsDividing('decoder_attention_heads'),
    encoderFfn: fields.positiveInteger('encoder_ffn_dim'),
    decoderFfn: fields.positiveInteger('decoder_ffn_dim'),
    activation: fields.activation('activation_function', 'gelu'),
    maxPositions: fields.positiveInteger('max_position_embeddings', 1024),
    scaleEmbedding: fields.boolean('scale_embedding', false),
    shareEncoderDecoderEmbeddings,
    tieWordEmbeddings: fields.boolean('tie_word_embeddings', true),
    // MarianConfig's defaults are opus-mt's: pad = decoder start = 58100 (the last id), eos = 0.
    decoderStartTokenId: tokenBelow('decoder_start_token_id', 58100, decoderVocabSize, 'decoder_vocab_size'),
    padTokenId: tokenBelow('pad_token_id', 58100, Math.min(vocabSize, decoderVocabSize), 'vocab_size and decoder_vocab_size'),
    eosTokenId: tokenBelow('eos_token_id', 0, decoderVocabSize, 'decoder_vocab_size'),
    dropout: fields.number('dropout', 'probability', 0.1),
    attentionDropout: fields.number('attention_dropout', 'probability', 0),
    activationDropout: fields.number('activation_dropout', 'probability', 0),
  };
}

/** The config.json fields for `config`, as MarianConfig reads them. */
export function marianConfigToJson(config: MarianConfig): JsonObject {
  return {
    architectures: ['MarianMTModel'],
    model_type: 'marian',
    is_encoder_decoder: true,
    vocab_size: config.vocabSize,
    decoder_vocab_size: config.decoderVocabSize,
    d_model: config.hidden,
    encoder_layers: config.encoderLayers,
    decoder_layers: config.decoderLayers,
    encoder_attention_heads: config.encoderHeads,
    decoder_attention_heads: config.decoderHeads,
    encoder_ffn_dim: config.encoderFfn,
    decoder_ffn_dim: config.decoderFfn,
    activation_function: hfActivationName(config.activation),
    max_position_embeddings: config.maxPositions,
    scale_embedding: config.scaleEmbedding,
    normalize_before: false,
    share_encoder_decoder_embeddings: config.shareEncoderDecoderEmbeddings,
    tie_word_embeddings: config.tieWordEmbeddings,
    decoder_start_token_id: config.decoderStartTokenId,
    pad_token_id: config.padTokenId,
    eos_token_id: config.eosTokenId,
    forced_eos_token_id: config.eosTokenId,
    dropout: config.dropout,
    attention_dropout: config.attentionDropout,
    activation_dropout: config.activationDropout,
  };
}

/**
 * Trainable parameters of MarianMTModel: token embeddings (one table when shared), encoder and decoder blocks
 * (attention projections with biases, MLP, LayerNorms; the decoder adds cross-attention), and the LM head
 * only when untied. Not counted: final_logits_bias (a buffer) and the two fixed sinusoidal tables, which HF
 * stores as frozen parameters, so its model.num_parameters() is 2 · max_positions · d_model higher.
 */
export function marianParameterCount(config: MarianConfig): number {
  const { hidden: D, vocabSize: V, decoderVocabSize: VD } = config;
  const attention = 4 * (D * D + D);
  const layerNorm = 2 * D;
  const mlp = (ffn: number): number => (D * ffn + ffn) + (ffn * D + D);
  const encoderBlock = attention + layerNorm + mlp(config.encoderFfn) + layerNorm;
  const decoderBlock = 2 * (attention + layerNorm) + mlp(config.decoderFfn) + layerNorm;
  const embeddings = V * D + (config.shareEncoderDecoderEmbeddings ? 0 : VD * D);
  const lmHead = config.tieWordEmbeddings ? 0 : VD * D;
  return embeddings + config.encoderLayers * encoderBlock + config.decoderLayers * decoderBlock + lmHead;
}

export const MARIAN_PRESETS: Readonly<Record<string, MarianConfig>> = {
  /**
   * Transformer-base (d_model 512, 6 + 6 layers, 8 heads, FFN 2048) exactly as Helsinki-NLP/opus-mt-en-de
   * ships it: 58101 shared SentencePiece tokens, SiLU ("swish"), 73,886,208 trainable parameters.
   */
  'marian-base': {
    vocabSize: 58101, decoderVocabSize: 58101, hidden: 512, encoderLayers: 6, decoderLayers: 6, encoderHeads: 8,
    decoderHeads: 8, encoderFfn: 2048, decoderFfn: 2048, activation: 'silu', maxPositions: 512, scaleEmbedding: true,
    shareEncoderDecoderEmbeddings: true, tieWordEmbeddings: true, decoderStartTokenId: 58100, padTokenId: 58100,
    eosTokenId: 0, dropout: 0.1, attentionDropout: 0, activationDropout: 0,
  },
};
