// Sampling from a model during training (the sample printed at the end of `fuseformer train`).
//
// No KV cache here (the inference engine has one): every new token re-runs the model over a fixed
// window of `window` positions. Because attention is causal, the logits at position t depend only on
// tokens 0..t, so the window can be padded after t and one planned step (one shape) serves every
// length. Older tokens slide out once the window is full.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { planStep, runStep } from '../nn/step-context.js';
import type { StepContext } from '../nn/step-context.js';

export interface LogitsModel {
  readonly backend: Backend;
  readonly dtype: FloatDType;
  readonly vocabSize: number;
  /** Columns of the logits logitsStep writes (the padded vocabulary). */
  readonly logitsWidth: number;
  readonly maxSeqLen: number;
  logitsStep(ctx: StepContext, tokens: Tensor, logits: Tensor): void;
}

export interface SampleOptions {
  /** Tokens to generate. */
  readonly maxNewTokens: number;
  /** 0 = greedy; otherwise softmax(logits / temperature). */
  readonly temperature?: number;
  /** Sample among the k most likely tokens only (0 = all). */
  readonly topK?: number;
  readonly seed?: number;
  /** Positions the model sees (default: the model's maximum). */
  readonly window?: number;
  /** Stop at this token (not included in the result). */
  readonly stopTokenId?: number;
}

/** mulberry32: a small seeded generator for the sampling draws. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    let t = (state = (state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Picks a token from one row of logits. */
export function pickToken(logits: Float32Array, temperature: number, topK: number, random: () => number): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  if (temperature <= 0) return best;
  let candidates = Array.from(logits.keys());
  if (topK > 0 && topK < logits.length) candidates = candidates.sort((a, b) => logits[b]! - logits[a]!).slice(0, topK);
  const weights = candidates.map((i) => Math.exp((logits[i]! - logits[best]!) / temperature));
  const total = weights.reduce((a, b) => a + b, 0);
  let r = random() * total;
  for (let j = 0; j < candidates.length; j++) {
    r -= weights[j]!;
    if (r <= 0) return candidates[j]!;
  }
  return candidates[candidates.length - 1]!;
}

/** Continues `prompt` (token ids, at least one) and returns only the new tokens. */
export function sampleTokens(model: LogitsModel, prompt: readonly number[], options: SampleOptions): number[] {
  if (prompt.length === 0) throw new ArgumentError('sample: the prompt needs at least one token');
  const window = options.window ?? model.maxSeqLen;
  if (!Number.isInteger(window) || window < 1 || window > model.maxSeqLen) throw new ArgumentError(`sample: window must be in [1, ${model.maxSeqLen}], got ${window}`);
  const b = model.backend, V = model.vocabSize, W = model.logitsWidth;
  for (const t of prompt) if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`sample: prompt token ${t} is outside the vocabulary [0, ${V})`);
  const tokens = b.empty([1, window], 'i32');
  const logits = b.empty([window, W], 'f32');
  const step = (ctx: StepContext) => {
    // A 16-bit model computes logits in its dtype; they are widened to f32 for the host.
    if (model.dtype === 'f32') { model.logitsStep(ctx, tokens, logits); return; }
    const narrow = ctx.buffer('sample.logits', [window, W], model.dtype);
    model.logitsStep(ctx, tokens, narrow);
    ctx.ops.copy(narrow, logits);
  };
  const plan = planStep(b, step, false);
  const arena = b.createArena(plan.arena.arenaBytes);
  const random = seededRandom(options.seed ?? 1);
  const context = [...prompt];
  const generated: number[] = [];
  try {
    for (let i = 0; i < options.maxNewTokens; i++) {
      const visible = context.slice(-window);
      const padded = new Int32Array(window);
      padded.set(visible);
      b.upload(tokens, padded);
      runStep(b, plan, arena, { seed: 0n, baseOffset: 0n, training: false }, step);
      const row = b.download(b.view(logits, (visible.length - 1) * W, [V])) as Float32Array;
      const next = pickToken(row, options.temperature ?? 0.8, options.topK ?? 40, random);
      if (next === options.stopTokenId) break;
      generated.push(next);
      context.push(next);
    }
  } finally {
    arena.free();
    b.free(tokens);
    b.free(logits);
  }
  return generated;
}
