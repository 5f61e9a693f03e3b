// Profiling a step of the serving engine (src/serve/engine.ts), the paged path serving really runs:
//   'decode'  `running` requests, each with `context` positions in the paged KV cache, one token each;
//   'mixed'   the same decode rows plus one new request's whole prompt of `chunk` tokens in the same
//             step (chunked prefill beside decoding: a continuous-batching step when a client arrives).
// On CUDA the step is timed as serving runs it, a replayed CUDA graph (engine.ts "Steps as graphs"), and
// its ops as they run inside that graph: a second graph engine captures the same step with a marker node
// around each op (profiler.ts graph mode, `replay`). An eager step launches ~200 ops from JS, and its op
// times, even with the GPU given a backlog, mostly measured the host: before session 9 this profile ran
// eagerly and found 175 of a mixed step's 199 launches waiting on the host. On the CPU, the eager engine's
// ops. The engines are built on a ProfilingBackend with random weights and the same prompts; the requests
// are prefilled first, then each profiled step advances every decode row by one position (a mixed step's
// new request samples its one token and finishes within the step, freeing its slot).

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { decoderArchitecture } from '../infer/architecture.js';
import { randomDecoderModel } from '../infer/model.js';
import { quantizeDecoderModel } from '../infer/quantized.js';
import { resolveSampling } from '../infer/sampling.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import type { ModelConfig } from '../models/registry.js';
import { ServingEngine } from '../serve/engine.js';
import type { ProfileQuantization } from './decode.js';
import type { Profile, ProfileOptions } from './profiler.js';
import { profile, ProfilingBackend } from './profiler.js';

/** Positions past the prompt a profiled decode row may advance (prefill of the later requests, warm-up, calibration, repeats). */
export const SERVE_STEPS_ROOM = 64;
/** The profiled engines' step budget at least: 128 prompts of 512 tokens prefill in 16 steps. */
const PREFILL_BUDGET = 4096;

export type ServeStepKind = 'decode' | 'mixed';

export interface ServeProfileOptions extends Omit<ProfileOptions, 'reference' | 'warmup' | 'dtype' | 'graph' | 'replay' | 'variant' | 'opTiming'> {
  readonly kind: ServeStepKind;
  /** Requests decoding in the step. */
  readonly running: number;
  /** Positions each of them holds in the KV cache when profiling starts. */
  readonly context: number;
  /** 'mixed': the new request's prompt, computed whole in the step. */
  readonly chunk?: number;
  readonly dtype: FloatDType;
  /** KV block size (default 16, the engine's). */
  readonly blockSize?: number;
  /** Round-to-nearest quantized projections (decode.ts). */
  readonly quantize?: ProfileQuantization;
  /** How every request picks its tokens (default greedy): a sampled step's sampleTokens walks the whole row. */
  readonly sampling?: ResolvedSampling;
}

/** Profiles one serving-engine step of a GPT-2 or Llama model with random weights (see the header). */
export function profileServingStep(backend: Backend, config: ModelConfig, options: ServeProfileOptions): Profile {
  const { kind, running, context, dtype } = options;
  const chunk = kind === 'mixed' ? options.chunk ?? 256 : 0;
  const arch = decoderArchitecture(config);
  if (!Number.isInteger(running) || running < 1) throw new ArgumentError(`serving profile: running must be a positive integer, got ${running}`);
  if (!Number.isInteger(chunk) || (kind === 'mixed' && chunk < 1)) throw new ArgumentError(`serving profile: chunk must be a positive integer, got ${chunk}`);
  const maxLen = Math.max(context + SERVE_STEPS_ROOM, chunk + 1);
  if (!Number.isInteger(context) || context < 1 || maxLen > arch.maxPositions) {
    throw new ArgumentError(`serving profile: the context (${context} tokens) + ${SERVE_STEPS_ROOM} decoded positions, and the chunk (${chunk}), must fit the model's ${arch.maxPositions} positions`);
  }
  const tap = new ProfilingBackend(backend);
  const model = randomDecoderModel(config, tap.backend, { dtype, seed: 1n });
  const engines: ServingEngine[] = [];
  try {
    if (options.quantize) quantizeDecoderModel(model, { method: 'rtn', bits: options.quantize.bits, groupSize: 128, lmHead: options.quantize.lmHead });
    const sampling = options.sampling ?? resolveSampling({ temperature: 0 });
    // An engine with the running requests prefilled, and its profiled step (every engine sees the same prompts).
    const build = (graphs: boolean) => {
      // One slot more for the mixed step's newcomer; a step budget that holds every decode row and the whole
      // chunk, and prefills in few steps (the requests that start first decode while the others prefill).
      const e = new ServingEngine(model, {
        maxRunning: running + 1, maxBatchTokens: Math.max(PREFILL_BUDGET, running + 1 + chunk), maxLen, blockSize: options.blockSize ?? 16,
        graphs, prefixCaching: false, pipeline: false, // one step per call, complete when it returns (what the profile times)
      });
      engines.push(e);
      let s = 4242, started = 0;
      const token = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) % model.vocabSize;
      const submit = (length: number, maxTokens: number, onFirst = () => {}) => {
        let first = true;
        e.submit({
          prompt: Array.from({ length }, token), maxTokens, sampling, stopTokenIds: [], onFinish: () => {},
          onToken: () => { if (first) { first = false; onFirst(); } },
        });
      };
      for (let i = 0; i < running; i++) submit(context, SERVE_STEPS_ROOM, () => { started++; });
      // Prefill: until every request has its first token (its prompt is through; the first ones to finish
      // decode meanwhile, so the tokens generated say nothing about the others).
      while (started < running) e.step();
      const step = kind === 'decode' ? () => { e.step(); } : () => { submit(chunk, 1); e.step(); };
      return { engine: e, step };
    };
    const eager = build(false);
    if (backend.name !== 'cuda') return profile(tap, eager.step, { ...options, dtype, warmup: 2 });
    // CUDA: the step as serving runs it, a replayed graph (its first run of the shape is eager, the second
    // captured); a second graph engine whose capture of the step has a marker node around each op times them.
    const replayed = build(true);
    replayed.step();
    replayed.step();
    const timed = build(true);
    timed.step();
    timed.engine.resetGraphs();
    tap.startTimingCaptures();
    try { timed.step(); } finally { tap.stopTimingCaptures(); }
    return profile(tap, eager.step, { ...options, dtype, warmup: 1, reference: replayed.step, replay: timed.step });
  } finally {
    tap.releaseCaptured();
    for (const e of engines) e.dispose();
    model.free();
  }
}
