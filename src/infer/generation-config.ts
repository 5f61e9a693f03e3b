// generation_config.json: the defaults a model directory ships for generation (HF's GenerationConfig):
// end-of-sequence ids and, for models meant to be sampled (Llama 3: do_sample, temperature 0.6,
// top_p 0.9), the sampling settings. Absent file: no defaults. Fields are checked like config.json's
// (config-fields.ts): an error names the file, the field and what was expected.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ArgumentError } from '../errors.js';
import { ConfigFields, readConfigFile } from '../models/config-fields.js';
import { MAX_TEMPERATURE, REPETITION_PENALTY_RANGE } from './sampling.js';

export interface GenerationDefaults {
  readonly eosTokenIds?: readonly number[];
  readonly bosTokenId?: number;
  readonly padTokenId?: number;
  /** false (HF's default): greedy; the sampling fields below then do not apply. */
  readonly doSample?: boolean;
  readonly temperature?: number;
  readonly topK?: number;
  readonly topP?: number;
  readonly repetitionPenalty?: number;
  readonly maxNewTokens?: number;
  /** Prompt + new tokens (HF's max_length), when max_new_tokens is not given. */
  readonly maxLength?: number;
}

export function readGenerationConfig(dir: string, vocabSize?: number): GenerationDefaults {
  const path = join(dir, 'generation_config.json');
  if (!existsSync(path)) return {};
  const defaults = generationDefaultsFromJson(readConfigFile(path), path);
  // A stop id the model cannot produce is the file's mistake: say so here, not as an engine error later.
  const bad = vocabSize === undefined ? undefined : defaults.eosTokenIds?.find((id) => id >= vocabSize);
  if (bad !== undefined) throw new ArgumentError(`${path}: eos_token_id ${bad} is outside the model's vocabulary of ${vocabSize} tokens`);
  return defaults;
}

export function generationDefaultsFromJson(json: Record<string, unknown>, source: string): GenerationDefaults {
  const f = new ConfigFields(json, source);
  const out: { -readonly [K in keyof GenerationDefaults]: GenerationDefaults[K] } = {};
  if (f.has('eos_token_id')) out.eosTokenIds = f.tokenIds('eos_token_id', []);
  if (f.has('bos_token_id')) out.bosTokenId = f.tokenId('bos_token_id');
  if (f.has('pad_token_id')) out.padTokenId = f.tokenId('pad_token_id');
  if (f.has('do_sample')) out.doSample = f.boolean('do_sample');
  if (f.has('temperature')) {
    const t = f.value('temperature');
    if (typeof t !== 'number' || !Number.isFinite(t) || t < 0 || t > MAX_TEMPERATURE) f.fail('temperature', `a number in [0, ${MAX_TEMPERATURE}]`);
    out.temperature = t as number;
  }
  if (f.has('top_k')) {
    const k = f.value('top_k');
    if (typeof k !== 'number' || !Number.isSafeInteger(k) || k < 0) f.fail('top_k', 'an integer >= 0 (0 disables top-k)');
    out.topK = k as number;
  }
  if (f.has('top_p')) {
    const p = f.value('top_p');
    if (typeof p !== 'number' || !(p > 0 && p <= 1)) f.fail('top_p', 'a number in (0, 1]');
    out.topP = p as number;
  }
  if (f.has('repetition_penalty')) {
    const [low, high] = REPETITION_PENALTY_RANGE, r = f.number('repetition_penalty', 'positive');
    if (r < low || r > high) f.fail('repetition_penalty', `a number in [${low}, ${high}] (1 = off)`);
    out.repetitionPenalty = r;
  }
  if (f.has('max_new_tokens')) out.maxNewTokens = f.positiveInteger('max_new_tokens');
  if (f.has('max_length')) out.maxLength = f.positiveInteger('max_length');
  return out;
}

/** New tokens a generation call makes when neither it nor generation_config.json says. */
export const DEFAULT_MAX_NEW_TOKENS = 256;

/**
 * New tokens a prompt of `promptLength` gets by the file's defaults: max_new_tokens, else what max_length
 * (prompt + new tokens, HF's older field) leaves after the prompt — possibly nothing (≤ 0); undefined when
 * the file names neither.
 */
export function fileMaxNewTokens(defaults: GenerationDefaults, promptLength: number): number | undefined {
  return defaults.maxNewTokens ?? (defaults.maxLength === undefined ? undefined : defaults.maxLength - promptLength);
}

/**
 * A library generation's new-token budget: `requested` (checked), else the file's (an error when its
 * max_length leaves no room), else DEFAULT_MAX_NEW_TOKENS.
 */
export function newTokenBudget(defaults: GenerationDefaults, promptLength: number, requested: number | undefined): number {
  if (requested !== undefined) {
    if (!Number.isInteger(requested) || requested < 0) throw new ArgumentError(`maxNewTokens must be a non-negative integer, got ${requested}`);
    return requested;
  }
  const fromFile = fileMaxNewTokens(defaults, promptLength);
  if (fromFile !== undefined && fromFile < 1) throw new ArgumentError(`generation_config.json's max_length ${defaults.maxLength} leaves no room for new tokens after a prompt of ${promptLength} tokens; give the number of new tokens to generate (maxNewTokens, --max-tokens or max_tokens)`);
  return fromFile ?? DEFAULT_MAX_NEW_TOKENS;
}
