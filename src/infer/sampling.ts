// Sampling settings: what the caller asked for, completed from the model's generation_config.json the way
// HF's generate() completes them, checked, and packed into the sampler's per-sequence parameter row.
//   greedy             temperature 0 (do_sample false: HF's default)
//   sampling           temperature T > 0, then top-k (HF's default 50 when sampling; 0 = off) and top-p
//                      (default 1 = off); draws are Philox-seeded (backend.ts, sampleTokens)
//   repetition penalty ρ (default 1 = off), applied before either
// Row b of a batch draws with seed + b, so a single-sequence call with seed s and row 0 of a batch call
// with seed s give the same tokens.

import { ArgumentError } from '../errors.js';
import type { GenerationDefaults } from './generation-config.js';

export interface SamplingOptions {
  /** 0 = greedy. */
  readonly temperature?: number;
  /** Keep the k most likely tokens (0 = all). */
  readonly topK?: number;
  /** Keep the smallest set of most likely tokens holding this probability (1 = all). */
  readonly topP?: number;
  readonly repetitionPenalty?: number;
  /** A u64 seed (default 0). */
  readonly seed?: number | bigint;
}

export interface ResolvedSampling {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly repetitionPenalty: number;
  readonly seed: bigint;
}

/** HF GenerationConfig's top_k when sampling and nothing says otherwise. */
export const HF_DEFAULT_TOP_K = 50;

/**
 * Temperatures below this sample greedily: logits ÷ T overflow f32 for a tiny T (every top logit becomes
 * +∞ and ties), and T → 0 is greedy in the limit anyway (vLLM draws the same line).
 */
export const GREEDY_BELOW_TEMPERATURE = 1e-5;
/**
 * Smaller top-p values act as this one: the sampler's parameters are f32, where 1e-300 is 0 (refused), and
 * any p below the top token's probability (≥ 1/V) keeps that token alone.
 */
export const MIN_TOP_P = 1e-30;
/** Temperature and repetition penalty bounds that stay finite and non-zero in f32 arithmetic. */
export const MAX_TEMPERATURE = 1e6;
export const REPETITION_PENALTY_RANGE: readonly [number, number] = [1e-6, 1e6];

/** The values at f32's edges as the sampler must see them (see GREEDY_BELOW_TEMPERATURE and MIN_TOP_P). */
const f32Temperature = (t: number): number => (t > 0 && t < GREEDY_BELOW_TEMPERATURE ? 0 : t);
const f32TopP = (p: number): number => (p > 0 && p < MIN_TOP_P ? MIN_TOP_P : p);

function seedOf(seed: number | bigint): bigint {
  if (typeof seed === 'bigint') return seed;
  if (typeof seed !== 'number' || !Number.isInteger(seed)) throw new ArgumentError(`seed must be an integer in [0, 2^64), got ${typeof seed === 'number' ? seed : `${typeof seed} ${String(seed)}`}`);
  return BigInt(seed);
}

export function resolveSampling(options: SamplingOptions, defaults: GenerationDefaults = {}): ResolvedSampling {
  const fromConfig = defaults.doSample === true;
  const temperature = options.temperature ?? (fromConfig ? defaults.temperature ?? 1 : 0);
  const sampling = temperature > 0;
  const topP = options.topP ?? (fromConfig ? defaults.topP : undefined) ?? 1;
  const resolved: ResolvedSampling = {
    temperature: f32Temperature(temperature),
    topK: options.topK ?? (sampling ? (fromConfig ? defaults.topK : undefined) ?? HF_DEFAULT_TOP_K : 0),
    topP: f32TopP(topP),
    repetitionPenalty: options.repetitionPenalty ?? defaults.repetitionPenalty ?? 1,
    seed: seedOf(options.seed ?? 0),
  };
  checkSampling(resolved);
  return resolved;
}

export function checkSampling(s: ResolvedSampling): void {
  if (!Number.isFinite(s.temperature) || s.temperature < 0 || s.temperature > MAX_TEMPERATURE) throw new ArgumentError(`temperature must be a number in [0, ${MAX_TEMPERATURE}] (0 = greedy), got ${s.temperature}`);
  if (!Number.isSafeInteger(s.topK) || s.topK < 0) throw new ArgumentError(`top-k must be an integer >= 0 (0 = off), got ${s.topK}`);
  if (!(s.topP > 0 && s.topP <= 1)) throw new ArgumentError(`top-p must be in (0, 1] (1 = off), got ${s.topP}`);
  const [minPenalty, maxPenalty] = REPETITION_PENALTY_RANGE;
  if (!(s.repetitionPenalty >= minPenalty && s.repetitionPenalty <= maxPenalty)) throw new ArgumentError(`repetition penalty must be a number in [${minPenalty}, ${maxPenalty}] (1 = off), got ${s.repetitionPenalty}`);
  if (s.seed < 0n || s.seed >= 1n << 64n) throw new ArgumentError(`seed must be an integer in [0, 2^64), got ${s.seed}`);
}

/** The sampler's f32 parameter row: (temperature, top-k, top-p, repetition penalty). */
export function samplingParamsRow(s: ResolvedSampling): number[] {
  // Also for settings that did not come through resolveSampling (an engine's caller may build them).
  return [f32Temperature(s.temperature), s.topK, f32TopP(s.topP), s.repetitionPenalty];
}

/** The seed of row `row` of a batch, as the sampler's two i32 words (low first). */
export function seedWords(seed: bigint, row: number): [number, number] {
  const s = (seed + BigInt(row)) & ((1n << 64n) - 1n);
  return [Number(s & 0xffffffffn) | 0, Number(s >> 32n) | 0];
}
