// Command-line numbers checked by name, and the sampling options `generate` and `chat` share.

import { ArgumentError } from '../errors.js';
import { MAX_TEMPERATURE, REPETITION_PENALTY_RANGE } from '../infer/sampling.js';
import type { SamplingOptions } from '../infer/sampling.js';

/** `--name VALUE` as a number that passes `check`; undefined when not given; else an error naming the option. */
export function numberOption(name: string, value: string | undefined, check: (x: number) => boolean, expected: string): number | undefined {
  if (value === undefined) return undefined;
  const x = Number(value);
  if (value.trim() === '' || !check(x)) throw new ArgumentError(`--${name} must be ${expected}, got '${value}'`);
  return x;
}

export interface SamplingFlags {
  readonly temperature?: string | undefined;
  readonly 'top-k'?: string | undefined;
  readonly 'top-p'?: string | undefined;
  readonly 'repetition-penalty'?: string | undefined;
  readonly seed?: string | undefined;
}

/** --temperature, --top-k, --top-p, --repetition-penalty (only those given) and --seed (default random), checked. */
export function samplingFlags(values: SamplingFlags): { sampling: Omit<SamplingOptions, 'seed'>; seed: bigint } {
  const nonNegative = (x: number) => Number.isSafeInteger(x) && x >= 0;
  const temperature = numberOption('temperature', values.temperature, (x) => x >= 0 && x <= MAX_TEMPERATURE, `a number in [0, ${MAX_TEMPERATURE}] (0 = greedy)`);
  const topK = numberOption('top-k', values['top-k'], nonNegative, 'a non-negative integer');
  const topP = numberOption('top-p', values['top-p'], (x) => x > 0 && x <= 1, 'a number in (0, 1]');
  const repetitionPenalty = numberOption('repetition-penalty', values['repetition-penalty'], (x) => x >= REPETITION_PENALTY_RANGE[0] && x <= REPETITION_PENALTY_RANGE[1], `a number in [${REPETITION_PENALTY_RANGE.join(', ')}] (1 = off)`);
  const seed = values.seed === undefined ? BigInt(Math.floor(Math.random() * 2 ** 48)) : BigInt(numberOption('seed', values.seed, nonNegative, 'a non-negative integer')!);
  return {
    sampling: {
      ...(temperature !== undefined ? { temperature } : {}), ...(topK !== undefined ? { topK } : {}),
      ...(topP !== undefined ? { topP } : {}), ...(repetitionPenalty !== undefined ? { repetitionPenalty } : {}),
    },
    seed,
  };
}
