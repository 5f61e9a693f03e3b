// gatedActivation: out[r, c] = act(x[r, c])·x[r, F + c] in float64, rounded once (SwiGLU with silu).

import type { GatedActivationArgs } from '../backend.js';
import { checkGatedActivation } from '../op-checks/index.js';
import { activationFunction } from './activation.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, storeFloats } from './tensor.js';

export function prepareGatedActivation(args: GatedActivationArgs): CpuWork {
  const check = new CpuCheck('gatedActivation');
  const { x, out, activation, rows, F } = checkGatedActivation(check, args);
  const act = activationFunction(activation);

  return check.work(() => {
    const xv = floatsOf(x);
    const result = new Float64Array(rows * F);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < F; c++) result[r * F + c] = act(xv[r * 2 * F + c]!) * xv[r * 2 * F + F + c]!;
    }
    storeFloats(out, result);
  });
}
