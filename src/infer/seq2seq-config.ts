// The generation settings of an encoder-decoder model, as Hugging Face's GenerationConfig holds them in
// generation_config.json (falling back to config.json's special tokens where the file is absent):
//   decoder_start_token_id, pad_token_id, eos_token_id (one or a list), num_beams, max_length, max_new_tokens,
//   length_penalty, early_stopping (true, false or "never"), bad_words_ids (single-token lists only),
//   forced_eos_token_id (one or a list), renormalize_logits.
// Settings that would change the search and that we do not implement (sampling, beam groups, n-gram blocking,
// repetition penalty, minimum lengths, forced BOS, suppressed tokens, several returned sequences) are refused
// with the field named, never silently ignored. Sampling knobs (temperature, top_k, top_p) are inert without
// do_sample, as in HF.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigFields, readConfigFile, type JsonObject } from '../models/config-fields.js';
import type { MarianConfig } from '../models/marian.js';

export interface GenerationSettings {
  readonly decoderStartTokenId: number;
  readonly padTokenId: number;
  readonly eosTokenIds: readonly number[];
  readonly numBeams: number;
  /** HF's max_length: the longest decoder sequence, the start token included (HF's default 20). */
  readonly maxLength: number;
  /** When set, max_length becomes 1 + max_new_tokens (HF gives max_new_tokens precedence). */
  readonly maxNewTokens?: number;
  readonly lengthPenalty: number;
  readonly earlyStopping: boolean | 'never';
  /** bad_words_ids of one token each: those tokens never get picked. */
  readonly bannedTokens: readonly number[];
  /** At the last step every sequence is forced to end with one of these (ForcedEOSTokenLogitsProcessor). */
  readonly forcedEosTokenIds: readonly number[];
  /** Log-softmax again after the logits processors (LogitNormalization). */
  readonly renormalizeLogits: boolean;
}

/** Fields whose non-default values would change the search in ways we do not implement. */
const REFUSED: readonly { field: string; inert: (v: unknown) => boolean; why: string }[] = [
  { field: 'do_sample', inert: (v) => v === false, why: 'sampling is not part of the encoder-decoder search' },
  { field: 'num_beam_groups', inert: (v) => v === 1, why: 'diverse (group) beam search is not implemented' },
  { field: 'diversity_penalty', inert: (v) => v === 0, why: 'diverse (group) beam search is not implemented' },
  { field: 'no_repeat_ngram_size', inert: (v) => v === 0, why: 'n-gram blocking is not implemented' },
  { field: 'encoder_no_repeat_ngram_size', inert: (v) => v === 0, why: 'n-gram blocking is not implemented' },
  { field: 'repetition_penalty', inert: (v) => v === 1, why: 'the repetition penalty is not implemented for beam search' },
  { field: 'encoder_repetition_penalty', inert: (v) => v === 1, why: 'the repetition penalty is not implemented for beam search' },
  { field: 'min_length', inert: (v) => v === 0, why: 'minimum lengths are not implemented' },
  { field: 'min_new_tokens', inert: () => false, why: 'minimum lengths are not implemented' },
  { field: 'forced_bos_token_id', inert: () => false, why: 'a forced first token is not implemented' },
  { field: 'suppress_tokens', inert: (v) => Array.isArray(v) && v.length === 0, why: 'suppressed tokens are not implemented' },
  { field: 'begin_suppress_tokens', inert: (v) => Array.isArray(v) && v.length === 0, why: 'suppressed tokens are not implemented' },
  { field: 'num_return_sequences', inert: (v) => v === 1, why: 'one sequence is returned per input' },
  { field: 'constraints', inert: () => false, why: 'constrained beam search is not implemented' },
  { field: 'force_words_ids', inert: () => false, why: 'constrained beam search is not implemented' },
  { field: 'exponential_decay_length_penalty', inert: () => false, why: 'it is not implemented' },
  { field: 'sequence_bias', inert: () => false, why: 'it is not implemented' },
];

/** Reads `dir`/generation_config.json over the model's special tokens; `model` is the model's config. */
export function readGenerationSettings(dir: string, model: MarianConfig): GenerationSettings {
  const path = join(dir, 'generation_config.json');
  return generationSettingsFromJson(existsSync(path) ? readConfigFile(path) : {}, path, model);
}

export function generationSettingsFromJson(json: JsonObject, source: string, model: MarianConfig): GenerationSettings {
  const fields = new ConfigFields(json, source);
  for (const { field, inert, why } of REFUSED) {
    if (fields.has(field) && !inert(fields.value(field))) fields.fail(field, `its default (${why})`);
  }
  const vocab = model.decoderVocabSize;
  const tokenInVocab = (field: string, id: number): number => {
    if (id >= vocab) fields.fail(field, `token ids below the decoder vocabulary (${vocab})`);
    return id;
  };
  const tokenList = (field: string, fallback: readonly number[]): number[] => fields.tokenIds(field, fallback).map((id) => tokenInVocab(field, id));

  const badWords = fields.value('bad_words_ids');
  let bannedTokens: number[] = [];
  if (badWords !== undefined && badWords !== null) {
    if (!Array.isArray(badWords) || !badWords.every((w) => Array.isArray(w) && w.length === 1 && Number.isSafeInteger(w[0]) && (w[0] as number) >= 0)) {
      fields.fail('bad_words_ids', 'a list of one-token lists such as [[58100]] (longer bad words are not implemented)');
    }
    bannedTokens = (badWords as number[][]).map((w) => tokenInVocab('bad_words_ids', w[0]!));
  }
  const earlyStopping = fields.value('early_stopping');
  if (earlyStopping !== undefined && earlyStopping !== null && typeof earlyStopping !== 'boolean' && earlyStopping !== 'never') {
    fields.fail('early_stopping', 'true, false or "never"');
  }
  const lengthPenalty = fields.value('length_penalty');
  if (lengthPenalty !== undefined && lengthPenalty !== null && !(typeof lengthPenalty === 'number' && Number.isFinite(lengthPenalty))) {
    fields.fail('length_penalty', 'a finite number');
  }
  const maxNewTokens = fields.has('max_new_tokens') ? fields.positiveInteger('max_new_tokens') : undefined;
  return {
    decoderStartTokenId: tokenInVocab('decoder_start_token_id', fields.tokenId('decoder_start_token_id', model.decoderStartTokenId)),
    padTokenId: tokenInVocab('pad_token_id', fields.tokenId('pad_token_id', model.padTokenId)),
    eosTokenIds: tokenList('eos_token_id', [model.eosTokenId]),
    numBeams: fields.positiveInteger('num_beams', 1),
    maxLength: fields.positiveInteger('max_length', 20),
    ...(maxNewTokens !== undefined ? { maxNewTokens } : {}),
    lengthPenalty: (lengthPenalty as number | undefined | null) ?? 1,
    earlyStopping: (earlyStopping as boolean | 'never' | undefined | null) ?? false,
    bannedTokens,
    forcedEosTokenIds: fields.has('forced_eos_token_id') ? tokenList('forced_eos_token_id', []) : [],
    renormalizeLogits: fields.boolean('renormalize_logits', false),
  };
}
