// AdamW over one flat workspace (n), exactly as backend.ts documents:
//   g = grads·gradScale·clipScale;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   θ = θ − lr·( m̂ / (√v̂ + eps) + weightDecay·θ ),  m̂ = m/c1, v̂ = v/c2,  c1 = 1−β1^step, c2 = 1−β2^step
// Weight decay is decoupled (it uses θ before the update). θ is `master` (f32) when given, and
// params receive θ rounded to their dtype; otherwise params are updated in place (no-master mode).
// lr, gradScale, c1 and c2 are the host numbers, or — with `scalars` — the f32 values in that tensor
// when the work runs (so a replayed graph sees new uploads). With `clip`, norm = √S·gradScale in f32
// (S = clip.sumSquares, also read when the work runs); a non-finite norm skips the whole update,
// otherwise clipScale = min(1, maxNorm / (norm + 1e-6)).
// The step is computed in float64; m, v and master are stored as f32, params in their dtype.

import type { AdamWArgs } from '../backend.js';
import { checkAdamW } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, storeFloats } from './tensor.js';

export function prepareAdamW(args: AdamWArgs): CpuWork {
  const check = new CpuCheck('adamW');
  const { params, grads, m, v, master, scalars, clip } = checkAdamW(check, args);
  const { beta1, beta2, eps, weightDecay } = args;

  return check.work(() => {
    let lr: number, gradScale: number, mCorrection: number, vCorrection: number;
    if (scalars.kind === 'device') {
      [lr, gradScale, mCorrection, vCorrection] = Array.from(floatsOf(scalars.scalars)) as [number, number, number, number];
    } else {
      ({ lr, gradScale } = scalars);
      mCorrection = 1 - beta1 ** scalars.step;
      vCorrection = 1 - beta2 ** scalars.step;
    }
    let clipScale = 1;
    if (clip) {
      // In f32, as the GPU computes it, so both backends skip the same steps (a norm past 3.4e38 is Inf).
      const norm = Math.fround(Math.fround(Math.sqrt(floatsOf(clip.sumSquares)[0]!)) * Math.fround(gradScale));
      if (!Number.isFinite(norm)) return; // the loss scaler's overflow skip
      clipScale = Math.min(1, clip.maxNorm / (norm + 1e-6));
    }
    const theta = floatsOf(master ?? params), g = floatsOf(grads), mv = floatsOf(m), vv = floatsOf(v);
    const n = theta.length;
    const newTheta = new Float64Array(n), newM = new Float64Array(n), newV = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const grad = g[i]! * gradScale * clipScale;
      newM[i] = beta1 * mv[i]! + (1 - beta1) * grad;
      newV[i] = beta2 * vv[i]! + (1 - beta2) * grad * grad;
      const update = newM[i]! / mCorrection / (Math.sqrt(newV[i]! / vCorrection) + eps);
      newTheta[i] = theta[i]! - lr * (update + weightDecay * theta[i]!);
    }
    storeFloats(m, newM);
    storeFloats(v, newV);
    if (master) storeFloats(master, newTheta);
    storeFloats(params, newTheta);
  });
}
