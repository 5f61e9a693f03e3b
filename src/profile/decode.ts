// Profiling a decode step of the inference engine (src/infer/engine.ts): one new token for each of
// `batch` sequences whose KV cache already holds `context` positions.
//
// The engine replays each batch bucket's decode step as a CUDA graph, so it is built three times on one
// model (random weights; the time does not depend on them), all on a ProfilingBackend:
//   - the graph engine (the engine as `generate` runs it): its replayed step is the step time;
//   - on CUDA, a second graph engine whose step is captured with the ProfilingBackend timing captures:
//     a marker node around each op, so each replay times the ops as they run in the graph (the op list,
//     the cost inputs, and the marker times shown beside the others);
//   - on CUDA, for each op k, one more graph engine whose captured step leaves op k out: the op's time
//     is what the step loses without it (timing by removal, profiler.ts), as the marker nodes cost as
//     much as a decode kernel;
//   - an eager engine (graphs off): warm-up, and the step timed op by op on the CPU.
// Both prefill the same random prompts of `context` tokens, then decode greedily with no stop tokens,
// so every sequence advances each step. The cache grows by one position per step: the few steps the
// profile takes (DECODE_STEPS_ROOM at most) leave the context all but unchanged.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { decoderArchitecture } from '../infer/architecture.js';
import { DecodeEngine } from '../infer/engine.js';
import { randomDecoderModel } from '../infer/model.js';
import { quantizeDecoderModel } from '../infer/quantized.js';
import { resolveSampling } from '../infer/sampling.js';
import type { ModelConfig } from '../models/registry.js';
import type { Profile, ProfileOptions } from './profiler.js';
import { profile, ProfilingBackend } from './profiler.js';

/** Positions past the prompt the engines may decode while profiling (warm-up, capture, repeats). */
export const DECODE_STEPS_ROOM = 64;

export interface DecodeProfileOptions extends Omit<ProfileOptions, 'reference' | 'warmup' | 'dtype'> {
  /** Sequences decoded together. */
  readonly batch: number;
  /** Prompt tokens each sequence's cache holds when profiling starts. */
  readonly context: number;
  readonly dtype: FloatDType;
  /** Round-to-nearest quantized projections (INT4 W4A16 or INT8 W8A8, groups of 128), and the LM head too with lmHead. */
  readonly quantize?: ProfileQuantization;
}

export interface ProfileQuantization {
  readonly bits: 4 | 8;
  readonly lmHead: boolean;
}

/** Profiles one decode step of a GPT-2 or Llama model with random weights (see the header). */
export function profileDecodeStep(backend: Backend, config: ModelConfig, options: DecodeProfileOptions): Profile {
  const { batch, context, dtype } = options;
  const arch = decoderArchitecture(config);
  if (!Number.isInteger(batch) || batch < 1) throw new ArgumentError(`decode profile: batch must be a positive integer, got ${batch}`);
  const maxLen = context + DECODE_STEPS_ROOM;
  if (!Number.isInteger(context) || context < 1 || maxLen > arch.maxPositions) {
    throw new ArgumentError(`decode profile: the context (${context} tokens) + ${DECODE_STEPS_ROOM} decoded positions must fit the model's ${arch.maxPositions} positions`);
  }
  const tap = new ProfilingBackend(backend);
  // Graph engines: on CUDA as generate runs them; on the CPU only for timing by removal (its graphs replay too).
  const graphs = backend.name === 'cuda' || options.opTiming === 'removal';
  const model = randomDecoderModel(config, tap.backend, { dtype, seed: 1n });
  const engines: DecodeEngine[] = [];
  try {
    if (options.quantize) quantizeDecoderModel(model, { method: 'rtn', bits: options.quantize.bits, groupSize: 128, lmHead: options.quantize.lmHead });
    const replayed = new DecodeEngine(model, { maxBatch: batch, maxLen, graphs });
    engines.push(replayed);
    const eager = new DecodeEngine(model, { maxBatch: batch, maxLen, graphs: false });
    engines.push(eager);
    let s = 4242;
    const next = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0);
    const greedy = resolveSampling({ temperature: 0 });
    const requests = Array.from({ length: batch }, () => ({
      prompt: Array.from({ length: context }, () => next() % model.vocabSize), maxNewTokens: DECODE_STEPS_ROOM, sampling: greedy,
    }));
    replayed.start(requests, []);
    eager.start(requests, []);
    replayed.decode(2); // the first step runs eagerly (kernels compile), the second is captured and replayed
    // On the CPU the ops are timed eagerly, unless timing by removal is asked for (the CPU replays graphs too).
    if (backend.name !== 'cuda' && options.opTiming !== 'removal') {
      return profile(tap, () => eager.decode(1), { ...options, dtype, warmup: 1, reference: () => replayed.decode(1) });
    }
    // A third engine whose step graph is captured with a marker node around each op: its replays time the ops.
    const timed = new DecodeEngine(model, { maxBatch: batch, maxLen, graphs });
    engines.push(timed);
    timed.start(requests, []);
    timed.decode(1);
    tap.startTimingCaptures();
    try { timed.decode(1); } finally { tap.stopTimingCaptures(); }
    // A step variant for timing by removal: a fresh graph engine (prefilled like the others) whose
    // capture leaves out op `skip` (none when undefined); it may decode DECODE_STEPS_ROOM − 2 steps.
    const variant = (skip: number | undefined) => {
      const engine = new DecodeEngine(model, { maxBatch: batch, maxLen, graphs });
      try {
        engine.start(requests, []);
        engine.decode(1); // eager (the engine captures a bucket's second step)
        tap.skipInCaptures(skip);
        try { engine.decode(1); } finally { tap.skipInCaptures(undefined); }
      } catch (error) {
        engine.dispose();
        throw error;
      }
      return { run: () => engine.decode(1), dispose: () => engine.dispose() };
    };
    return profile(tap, () => eager.decode(1), {
      ...options, dtype, warmup: 1, reference: () => replayed.decode(1), replay: () => timed.decode(1), variant, variantRuns: DECODE_STEPS_ROOM - 2,
    });
  } finally {
    tap.releaseCaptured();
    for (const e of engines) e.dispose();
    model.free();
  }
}
