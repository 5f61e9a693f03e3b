// Attention softmax over the last dimension of x (B, heads, Lq, Lk), forward and backward.
// Key j of query i in batch b is masked when j >= keyLengths[b] (padding) or, if causal, when
// j > i + (Lk − Lq) (queries are the last Lq positions of the Lk keys, as in decoding with a cache).
// A row with no unmasked key — or whose unmasked scores are all −∞ — becomes all zeros rather
// than NaN. Row maxima, exponentials and sums are float64; out is written once per row at the end,
// so out may alias x (and dX may alias dY).

import type { SoftmaxBackwardArgs, SoftmaxForwardArgs } from '../backend.js';
import { checkSoftmaxBackward, checkSoftmaxForward } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

/** out = softmax(scale·x + mask). */
export function prepareSoftmaxForward(args: SoftmaxForwardArgs): CpuWork {
  const check = new CpuCheck('softmaxForward');
  const { x, out, keyLengths, scale, causal, B, heads, Lq, Lk } = checkSoftmaxForward(check, args);

  return check.work(() => {
    const xv = floatsOf(x);
    const lengths = keyLengths ? int32sOf(keyLengths) : undefined;
    const result = new Float64Array(x.numel);
    const scores = new Float64Array(Lk);
    for (let b = 0; b < B; b++) {
      const validKeys = lengths ? lengths[b]! : Lk;
      for (let row = b * heads * Lq; row < (b + 1) * heads * Lq; row++) {
        const i = row % Lq;
        // Keys [0, end) are visible to this query.
        const end = Math.max(0, Math.min(Lk, validKeys, causal ? i + (Lk - Lq) + 1 : Lk));
        let max = -Infinity;
        for (let j = 0; j < end; j++) {
          scores[j] = scale * xv[row * Lk + j]!;
          max = Math.max(max, scores[j]!);
        }
        if (max === -Infinity) continue; // nothing visible: the row stays zero
        let sum = 0;
        for (let j = 0; j < end; j++) sum += (scores[j] = Math.exp(scores[j]! - max));
        for (let j = 0; j < end; j++) result[row * Lk + j] = scores[j]! / sum;
      }
    }
    storeFloats(out, result);
  });
}

/** dX = scale · y ⊙ (dY − Σ_j y_j·dY_j). */
export function prepareSoftmaxBackward(args: SoftmaxBackwardArgs): CpuWork {
  const check = new CpuCheck('softmaxBackward');
  const { y, dY, dX, scale, rows, Lk } = checkSoftmaxBackward(check, args);

  return check.work(() => {
    const yv = floatsOf(y), g = floatsOf(dY);
    const result = new Float64Array(y.numel);
    for (let row = 0; row < rows; row++) {
      let dot = 0;
      for (let j = 0; j < Lk; j++) dot += yv[row * Lk + j]! * g[row * Lk + j]!;
      for (let j = 0; j < Lk; j++) result[row * Lk + j] = scale * yv[row * Lk + j]! * (g[row * Lk + j]! - dot);
    }
    storeFloats(dX, result);
  });
}
