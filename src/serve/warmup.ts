// Warm-up: the step shapes a serving engine will meet, run once before the first real request, so that
// no client pays for what a shape costs the first time it is seen — a kernel's compile (~0.1–1 s each
// without the disk cache), cuBLASLt's autotuning of each GEMM row-count bucket (gemm.ts: ~0.1 s per
// problem; a serving step's row count changes nearly every step, and tuning inside live steps once cost a
// 16-client run three quarters of its time), and the CUDA graph of each decode bucket (engine.ts).
//
// What it runs, one request at a time on an idle engine:
//   prompts of every power-of-two length from 16 up to the step budget (maxBatchTokens, and maxLen − 2),
//     then maxBatchTokens itself: each is one prompt step of that many rows, the first use of the
//     GEMMs of its bucket (round sizes tune on first use), with one sampled token;
//   then a wave of n requests for each decode bucket n (engine.ts decodeBucket: 1, 2, 4, … 32, then
//     multiples of 32, and maxRunning), each with a 2-token prompt and 3 new tokens: decode steps of n
//     rows, twice (a decode bucket's graph is captured on its second step), and the LM head over n rows.
// Prompts are a fixed pseudo-random pattern per length; their blocks enter the prefix cache like any
// request's and are evicted like any (least recently used first). The engine's counters include the
// warm-up's steps. GEMMs tune only here (ServingEngine.gemmTuning is on while it runs): live steps adopt
// the winners of the warm-up's row buckets and their neighbours, or keep cuBLASLt's first choice.

import { ArgumentError } from '../errors.js';
import { resolveSampling } from '../infer/sampling.js';
import { decodeBucket } from './engine.js';
import type { ServingEngine } from './engine.js';

/** What warmUp() needs of an engine (ServingEngine, or the tensor-parallel ReplicatedLeader). */
export type WarmableEngine = Pick<ServingEngine, 'submit' | 'step' | 'hasWork' | 'maxLen'> & {
  /** GEMM autotuning inside steps (ServingEngine.gemmTuning): on during the warm-up. */
  gemmTuning?: boolean;
  readonly maxRunning: number;
  readonly maxBatchTokens: number;
  readonly model: { readonly vocabSize: number };
};

export interface WarmupReport {
  /** The prompt lengths and decode batch sizes it ran. */
  readonly promptLengths: number[];
  readonly decodeBatches: number[];
  readonly steps: number;
  readonly ms: number;
}

/** Runs the engine's step shapes once (see the header); the engine must be idle, and is idle again after. */
export function warmUp(engine: WarmableEngine): WarmupReport {
  if (engine.hasWork) throw new ArgumentError('serving warm-up: the engine already has requests; warm it up before submitting any');
  const started = performance.now();
  const tuning = engine.gemmTuning;
  if (tuning !== undefined) engine.gemmTuning = true;
  try {
    return runWarmup(engine, started);
  } finally {
    if (tuning !== undefined) engine.gemmTuning = tuning;
  }
}

function runWarmup(engine: WarmableEngine, started: number): WarmupReport {
  const greedy = resolveSampling({ temperature: 0 });
  const V = engine.model.vocabSize;
  let steps = 0;
  const run = (prompts: number[][], maxTokens: number): void => {
    for (const prompt of prompts) {
      engine.submit({ prompt, maxTokens, sampling: greedy, stopTokenIds: [], onToken: () => {}, onFinish: () => {} });
    }
    while (engine.hasWork) {
      engine.step();
      steps++;
    }
  };
  // A pattern no real prompt is likely to share (no accidental prefix-cache hits): a stride through the vocabulary.
  const prompt = (length: number, salt: number): number[] => Array.from({ length }, (_, i) => (salt * 7919 + i * 104729 + 1) % V);

  const longest = Math.min(engine.maxBatchTokens, engine.maxLen - 2);
  const promptLengths: number[] = [];
  for (let L = 16; L <= longest; L *= 2) promptLengths.push(L);
  if (longest >= 1 && !promptLengths.includes(longest)) promptLengths.push(longest);
  promptLengths.forEach((L, i) => run([prompt(L, i + 1)], 1));

  const decodeBatches: number[] = [];
  if (engine.maxLen >= 5) {
    // One wave per decode bucket (engine.ts decodeBucket): its largest batch.
    for (let n = 1; n <= engine.maxRunning; n++) {
      const bucket = decodeBucket(n, engine.maxRunning);
      if (bucket === n || n === engine.maxRunning) decodeBatches.push(n);
    }
    for (const n of decodeBatches) run(Array.from({ length: n }, (_, j) => prompt(2, 1000 + n + j)), 3);
  }
  return { promptLengths, decodeBatches, steps, ms: performance.now() - started };
}
