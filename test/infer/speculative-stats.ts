// Helpers of the speculative decoding tests (CPU and GPU): Pearson's chi-square with pooled small bins,
// its 0.999 quantile, and the weight edit that makes a draft close to (but not equal to) the target.

import type { DecoderModel } from '../../src/infer/model.js';
import type { ResolvedSampling } from '../../src/infer/sampling.js';
import type { FolderOptions } from './hf-folder.js';

/** Pearson's chi-square of counts against probabilities, bins with expected count < 5 pooled into one; [χ², df]. */
export function chiSquare(counts: readonly number[], probs: ArrayLike<number>, n: number): [number, number] {
  let stat = 0, bins = 0, pooledObserved = 0, pooledExpected = 0;
  for (let j = 0; j < probs.length; j++) {
    const expected = n * probs[j]!;
    if (expected < 5) { pooledObserved += counts[j] ?? 0; pooledExpected += expected; continue; }
    stat += ((counts[j] ?? 0) - expected) ** 2 / expected;
    bins++;
  }
  // A pooled bin with (almost) no expected mass is counted as such: any draw there is a large term.
  if (pooledObserved > 0 || pooledExpected >= 1) { stat += (pooledObserved - pooledExpected) ** 2 / Math.max(pooledExpected, 1e-3); bins++; }
  return [stat, bins - 1];
}

/** The chi-square quantile at 1 − 0.001 (Wilson–Hilferty): the acceptance bound of the tests. */
export function chiSquareBound(df: number): number {
  const z = 3.090232;
  return df * (1 - 2 / (9 * df) + z * Math.sqrt(2 / (9 * df))) ** 3;
}

/** A folder edit making a draft near the target: the final norm's gain scaled, the first MLP matrix perturbed. */
export function nearDraftEdit(family: 'gpt2' | 'llama', gain: number): NonNullable<FolderOptions['edit']> {
  return (w) => {
    const norm = w.get(family === 'gpt2' ? 'transformer.ln_f.weight' : 'model.norm.weight')!;
    norm.data = norm.data.map((x) => x * gain);
    const fc = w.get(family === 'gpt2' ? 'transformer.h.0.mlp.c_fc.weight' : 'model.layers.0.mlp.up_proj.weight')!;
    fc.data = fc.data.map((x, i) => x * (1 + 0.3 * Math.sin(i)));
  };
}

/**
 * The law of the second token sampled after `prompt`: Σ_t1 p(t1 | prompt) · p(t2 | prompt, t1), each p the
 * sampler's distribution (samplingDistribution) of the model's logits, computed by a fresh decode engine.
 */
export async function secondTokenLaw(model: DecoderModel, prompt: readonly number[], sampling: ResolvedSampling): Promise<Float64Array> {
  const { DecodeEngine } = await import('../../src/infer/engine.js');
  const { samplingDistribution } = await import('../../src/infer/speculative-accept.js');
  const V = model.vocabSize, engine = new DecodeEngine(model, { maxBatch: 1, maxLen: prompt.length + 2 });
  try {
    const lastRow = (tokens: number[]) => { const all = engine.promptLogits(tokens); return all.subarray(all.length - V); };
    const p1 = samplingDistribution(lastRow([...prompt]), sampling, []), law = new Float64Array(V);
    p1.forEach((w, t1) => { if (w > 0) samplingDistribution(lastRow([...prompt, t1]), sampling, []).forEach((w2, t2) => { law[t2] += w * w2; }); });
    return law;
  } finally {
    engine.dispose();
  }
}
