// AdamW over one flat workspace (n), exactly as backend.ts documents:
//   g = grads·gradScale;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   θ = θ − lr·( m̂ / (√v̂ + eps) + weightDecay·θ ),  m̂ = m/(1−β1^step), v̂ = v/(1−β2^step)
// Weight decay is decoupled (it uses θ before the update). θ is `master` (f32) when given, and
// params receive θ rounded to their dtype; otherwise params are updated in place (no-master mode).
// The step is computed in float64; m, v and master are stored as f32, params in their dtype.

import type { AdamWArgs } from '../backend.js';
import { checkAdamW } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, storeFloats } from './tensor.js';

export function prepareAdamW(args: AdamWArgs): CpuWork {
  const check = new CpuCheck('adamW');
  const { params, grads, m, v, master, gradScale } = checkAdamW(check, args);
  const { lr, beta1, beta2, eps, weightDecay, step } = args;

  return check.work(() => {
    const theta = floatsOf(master ?? params), g = floatsOf(grads), mv = floatsOf(m), vv = floatsOf(v);
    const n = theta.length;
    const newTheta = new Float64Array(n), newM = new Float64Array(n), newV = new Float64Array(n);
    const mCorrection = 1 - beta1 ** step, vCorrection = 1 - beta2 ** step;
    for (let i = 0; i < n; i++) {
      const grad = g[i]! * gradScale;
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
