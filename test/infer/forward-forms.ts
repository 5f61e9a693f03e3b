// Shared by the tests that compare two forms of the decode forward on the CPU (fused-mlp, head-norm,
// head-argmax): the tiny Llama, its prompt, and the logits of a prefill and four forced decode steps.

import { join } from 'node:path';
import type { Backend } from '../../src/backend/backend.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { DecoderForward } from '../../src/infer/forward.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';

export const PROMPT = [72, 101, 108, 108, 111, 44, 32, 119];
export const LLAMA: LlamaConfig = { ...TINY_LLAMA, layers: 3 };

export function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

/** The prompt's prefill logits and the logits of four decode steps with forced tokens, in a fresh engine. */
export function prefillAndStepLogits(model: DecoderModel): { prefill: Float32Array; steps: Float32Array[] } {
  const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 24 });
  try {
    const prefill = engine.promptLogits(PROMPT);
    engine.start([{ prompt: PROMPT, maxNewTokens: 8, sampling: resolveSampling({ temperature: 0 }) }], []);
    const steps: Float32Array[] = [engine.logits()[0]!];
    for (const token of [3, 250, 17, 99]) {
      engine.collect();
      engine.force(0, token);
      engine.decode(1);
      steps.push(engine.logits()[0]!);
    }
    return { prefill, steps };
  } finally {
    engine.dispose();
  }
}

/**
 * For the forms' qualification tests: forwards (32 rows, 16 positions) of a plain tiny Llama, one with an
 * O-projection bias and a GPT-2, written under `root` and loaded on `backend`; free() frees the models.
 */
export function qualificationForwards(root: string, backend: Backend) {
  const load = (name: string, family: 'gpt2' | 'llama', config: object) => {
    const dir = join(root, name);
    writeModelFolder(dir, family, config as LlamaConfig, 1);
    return loadDecoderModel(dir, backend).model;
  };
  const models = [load('plain', 'llama', LLAMA), load('biased', 'llama', { ...LLAMA, attentionBias: true }), load('gpt2', 'gpt2', TINY_GPT2)];
  const [llama, biased, gpt2] = models.map((m) => new DecoderForward(m, 32, 16));
  return { llama: llama!, biased: biased!, gpt2: gpt2!, free: () => models.forEach((m) => m.free()) };
}
