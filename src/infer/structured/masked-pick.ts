// A constrained request's token, picked on the host within its mask (structured outputs): the disallowed
// logits set to −∞ before anything else, then the request's own sampling — greedy, or temperature, top-k
// and top-p over what is left (vLLM's order: the grammar's mask is a logits processor, applied first) —
// drawn with a Philox uniform of (seed, position), so a seed gives the same text however it is batched.

import { drawFrom, DrawKind, greedyToken, samplingDistribution, speculativeUniform } from '../speculative-accept.js';
import type { ResolvedSampling } from '../sampling.js';
import type { TokenMask } from './token-mask.js';
import { maskAllows } from './token-mask.js';

/** `logits`: the row's first V entries (the vocabulary); `history`: the request's tokens up to `position` (the repetition penalty's). */
export function maskedToken(logits: ArrayLike<number>, mask: TokenMask, sampling: ResolvedSampling, history: readonly number[], position: number): number {
  const V = logits.length, z = new Float32Array(V);
  let allowed = 0;
  for (let t = 0; t < V; t++) {
    if (maskAllows(mask, t)) {
      z[t] = logits[t]!;
      allowed++;
    } else {
      z[t] = -Infinity;
    }
  }
  if (allowed === 0) throw new Error('internal: a constrained request with no token allowed');
  if (sampling.temperature === 0) return greedyToken(z, sampling, history);
  return drawFrom(samplingDistribution(z, sampling, history), speculativeUniform(sampling.seed, position, DrawKind.Masked));
}
