// Generation on top of the decode engine:
//   generate(model, promptTokens, options)       an async iterator of the new token ids of one sequence
//   generateBatch(model, prompts, options)       every sequence's new tokens, decoded together
//   generateText(model, tokenizer, prompt, opts) an async iterator of text pieces, with stop strings
// Defaults come from the model directory's generation_config.json (HF's rules; sampling.ts), the stop
// ids from its eos_token_id (or the config's). Tokens reach the host every `syncEvery` steps (1, 2, 4,
// ... up to 16 by default, so the first tokens show at once and later ones cost few round trips); a
// sequence that stops in the middle of a chunk only wastes the rest of the chunk's steps.

import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { TokenStreamDecoder } from '../io/token-stream-decoder.js';
import { newTokenBudget } from './generation-config.js';
import { DecodeEngine } from './engine.js';
import type { EngineOptions, SequenceRequest } from './engine.js';
import type { DecoderModel } from './model.js';
import { resolveSampling } from './sampling.js';
import type { SamplingOptions } from './sampling.js';
import { StopStringMatcher } from './stop-strings.js';
import { speculativeGenerate } from './speculative.js';
import type { SpeculativeSettings } from './speculative.js';

export interface GenerateOptions extends SamplingOptions {
  /** New tokens at most (default: generation_config.json's max_new_tokens, else 256). */
  readonly maxNewTokens?: number;
  /** Token ids that end a sequence (default: generation_config.json's eos_token_id, else the config's). */
  readonly stopTokenIds?: readonly number[];
  /** Decode steps between reads of the new tokens (default: 1, 2, 4, ... then 16). */
  readonly syncEvery?: number;
  /** An engine to reuse (its maxLen must fit the prompt and the new tokens); by default one is made and disposed. */
  readonly engine?: DecodeEngine;
  /** Options for the engine made when none is given. */
  readonly engineOptions?: Partial<EngineOptions>;
  /** Decode speculatively with a draft model (generate() and generateText() only; speculative.ts). */
  readonly speculative?: SpeculativeSettings;
}

export interface TextGenerateOptions extends GenerateOptions {
  /** Text that ends generation when it appears (not included in the output). */
  readonly stopStrings?: readonly string[];
}

const MAX_SYNC_EVERY = 16;

/** The stop ids for `model`: given, else generation_config.json's eos_token_id, else the config's. */
export function defaultStopTokenIds(model: DecoderModel): readonly number[] {
  return model.generation.eosTokenIds ?? model.arch.eosTokenIds;
}

function requestsFor(model: DecoderModel, prompts: readonly (readonly number[])[], options: GenerateOptions): { requests: SequenceRequest[]; maxNewTokens: number } {
  if (!Array.isArray(prompts)) throw new ArgumentError(`the prompts must be an array of token-id arrays, got ${typeof prompts}`);
  prompts.forEach((p, i) => { if (!Array.isArray(p) && !ArrayBuffer.isView(p)) throw new ArgumentError(`prompt ${i} must be an array of token ids, got ${typeof p} ${String(p).slice(0, 40)}`); });
  const budgets = prompts.map((p) => newTokenBudget(model.generation, p.length, options.maxNewTokens));
  const sampling = resolveSampling(options, model.generation);
  return {
    maxNewTokens: Math.max(0, ...budgets),
    requests: prompts.map((prompt, row) => ({ prompt, maxNewTokens: budgets[row]!, sampling: { ...sampling, seed: sampling.seed + BigInt(row) } })),
  };
}

function engineFor(model: DecoderModel, prompts: readonly (readonly number[])[], maxNewTokens: number, options: GenerateOptions): { engine: DecodeEngine; owned: boolean } {
  if (options.engine) return { engine: options.engine, owned: false };
  const longest = Math.max(...prompts.map((p) => p.length));
  const maxLen = Math.min(model.arch.maxPositions, longest + maxNewTokens);
  if (longest >= model.arch.maxPositions) throw new ArgumentError(`the prompt has ${longest} tokens; the model takes at most ${model.arch.maxPositions} positions, leaving no room for a new token`);
  return { engine: new DecodeEngine(model, { maxBatch: prompts.length, maxLen, ...options.engineOptions }), owned: true };
}

/** Decode steps until the next read: 1, 2, 4, ... up to syncEvery (or the fixed option). */
function* chunkSizes(syncEvery: number | undefined): Generator<number> {
  if (syncEvery !== undefined) {
    if (!Number.isInteger(syncEvery) || syncEvery < 1) throw new ArgumentError(`syncEvery must be a positive integer, got ${syncEvery}`);
    for (;;) yield syncEvery;
  }
  for (let n = 1; ; n = Math.min(2 * n, MAX_SYNC_EVERY)) yield n;
}

/** The new tokens of one sequence, as they are generated (the stop token, if one ended it, included). */
export async function* generate(model: DecoderModel, promptTokens: readonly number[], options: GenerateOptions = {}): AsyncGenerator<number, void, undefined> {
  if (options.speculative) {
    yield* speculativeGenerate(model, promptTokens, { ...options, speculative: options.speculative });
    return;
  }
  const { requests, maxNewTokens } = requestsFor(model, [promptTokens], options);
  if (maxNewTokens === 0) return;
  const { engine, owned } = engineFor(model, [promptTokens], maxNewTokens, options);
  try {
    engine.start(requests, options.stopTokenIds ?? defaultStopTokenIds(model));
    const chunks = chunkSizes(options.syncEvery);
    for (;;) {
      const [update] = engine.collect();
      for (const t of update!.tokens) yield t;
      if (update!.finished) return;
      const remaining = requests[0]!.prompt.length + maxNewTokens - engine.lengths[0]!;
      engine.decode(Math.max(1, Math.min(chunks.next().value as number, remaining)));
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    if (owned) engine.dispose();
  }
}

/** Every sequence's new tokens (stop tokens included), generated as one batch. */
export async function generateBatch(model: DecoderModel, prompts: readonly (readonly number[])[], options: GenerateOptions = {}): Promise<number[][]> {
  if (prompts.length === 0) return [];
  if (options.speculative) throw new ArgumentError('speculative decoding runs one sequence: use generate() (generateBatch() decodes batches without a draft)');
  const { requests, maxNewTokens } = requestsFor(model, prompts, options);
  if (maxNewTokens === 0) return prompts.map(() => []);
  const { engine, owned } = engineFor(model, prompts, maxNewTokens, options);
  const out = prompts.map((): number[] => []);
  try {
    engine.start(requests, options.stopTokenIds ?? defaultStopTokenIds(model));
    const chunks = chunkSizes(options.syncEvery);
    for (;;) {
      engine.collect().forEach((u, b) => out[b]!.push(...u.tokens));
      if (engine.done) return out;
      const remaining = Math.max(...engine.lengths.map((len, b) => requests[b]!.prompt.length + maxNewTokens - len));
      engine.decode(Math.max(1, Math.min(chunks.next().value as number, remaining)));
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    if (owned) engine.dispose();
  }
}

/**
 * Text continuing `prompt` (a string, encoded with the tokenizer's special tokens, or token ids), as
 * pieces that are safe to show (whole characters; never the start of a stop string). Special tokens
 * (an end-of-text token) are not shown.
 */
export async function* generateText(model: DecoderModel, tokenizer: Tokenizer, prompt: string | readonly number[], options: TextGenerateOptions = {}): AsyncGenerator<string, void, undefined> {
  if (typeof prompt !== 'string' && !Array.isArray(prompt)) throw new ArgumentError(`the prompt must be text or an array of token ids, got ${typeof prompt}`);
  const ids = typeof prompt === 'string' ? tokenizer.encode(prompt) : prompt;
  if (ids.length === 0) throw new ArgumentError('the prompt encodes to no tokens; give some text (or a tokenizer that adds a BOS token)');
  const decoder = new TokenStreamDecoder(tokenizer, { skipSpecialTokens: true, context: ids });
  const stops = new StopStringMatcher(options.stopStrings ?? []);
  for await (const token of generate(model, ids, options)) {
    if (token >= tokenizer.vocabSize) continue; // a padded-vocabulary id the tokenizer cannot decode
    const { text, stopped } = stops.push(decoder.push(token));
    if (text !== '') yield text;
    if (stopped) return;
  }
  const { text } = stops.push(decoder.flush());
  const rest = text + stops.flush();
  if (rest !== '') yield rest;
}
