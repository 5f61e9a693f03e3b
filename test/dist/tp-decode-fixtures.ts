// The decode run of the tensor-parallel inference tests: one model (random weights or a model folder),
// the decode engine on it, prefill logits, greedy and seeded-sampling tokens. The same function runs
// single-rank (no communicator) in the test and as every rank of an in-process group
// (runInProcessRanks imports this module in each worker).

import type { Backend } from '../../src/backend/backend.js';
import { broadcastSeed } from '../../src/cli/tensor-parallel-group.js';
import type { Communicator } from '../../src/dist/communicator.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { loadDecoderModel, randomDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import type { ModelConfig } from '../../src/models/registry.js';

export interface TpDecodeInput {
  /** Random weights for this config (seed, std), or a model folder. */
  readonly model: { readonly config: ModelConfig; readonly seed: number; readonly std: number } | { readonly dir: string };
  readonly prompts: readonly (readonly number[])[];
  readonly steps: number;
}

export interface TpDecodeOutput {
  /** Logits at every position of prompt 0 (one prefill pass). */
  readonly promptLogits: Float32Array;
  /** Each sequence's logits after start() (the prefill's last position). */
  readonly firstLogits: Float32Array[];
  /** Greedy tokens per sequence: the first sampled by start(), then `steps` decode steps. */
  readonly greedy: number[][];
  /** The same with seeded sampling (temperature 0.9, top-k 20, top-p 0.95). */
  readonly sampled: number[][];
  /** Key/value heads the rank's KV cache holds. */
  readonly cacheKvHeads: number;
}

function modelFor(backend: Backend, input: TpDecodeInput, comm?: Communicator): DecoderModel {
  const tensorParallel = comm ? { tensorParallel: comm } : {};
  if ('dir' in input.model) return loadDecoderModel(input.model.dir, backend, { dtype: 'f32', ...tensorParallel }).model;
  return randomDecoderModel(input.model.config, backend, { dtype: 'f32', seed: BigInt(input.model.seed), std: input.model.std, ...tensorParallel });
}

function tokensOf(engine: DecodeEngine, input: TpDecodeInput, sampling: SamplingOptions): { tokens: number[][]; first: Float32Array[] } {
  const resolved = resolveSampling(sampling);
  engine.start(input.prompts.map((prompt, i) => ({ prompt, maxNewTokens: input.steps + 1, sampling: { ...resolved, seed: resolved.seed + BigInt(i) } })), []);
  const first = engine.logits();
  const tokens = input.prompts.map((): number[] => []);
  engine.collect().forEach((u, b) => tokens[b]!.push(...u.tokens));
  engine.decode(input.steps);
  engine.collect().forEach((u, b) => tokens[b]!.push(...u.tokens));
  return { tokens, first };
}

/** The decode run on `backend`, single-rank without `comm`, one rank's shards with it. */
export function decodeRun(backend: Backend, input: TpDecodeInput, comm?: Communicator): TpDecodeOutput {
  const model = modelFor(backend, input, comm);
  const longest = Math.max(...input.prompts.map((p) => p.length));
  const engine = new DecodeEngine(model, { maxBatch: input.prompts.length, maxLen: longest + input.steps + 2 });
  try {
    const promptLogits = engine.promptLogits(input.prompts[0]!);
    const greedy = tokensOf(engine, input, { temperature: 0 });
    const sampled = tokensOf(engine, input, { temperature: 0.9, topK: 20, topP: 0.95, seed: 1234n });
    return { promptLogits, firstLogits: greedy.first, greedy: greedy.tokens, sampled: sampled.tokens, cacheKvHeads: engine.cache.kvHeads };
  } finally {
    engine.dispose();
    model.free();
  }
}

/** One rank of an in-process tensor-parallel group. */
export function tpDecodeRank(comm: Communicator, input: TpDecodeInput): TpDecodeOutput {
  return decodeRun(comm.backend, input, comm);
}

/** `fuseformer generate --tp`'s seed exchange: this rank's seed (decimal text) in, rank 0's out. */
export function seedOfRankZero(comm: Communicator, seeds: readonly string[]): string {
  return String(broadcastSeed(comm, BigInt(seeds[comm.rank]!)));
}
