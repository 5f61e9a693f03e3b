// tanhActivation: out = tanh(x + bias) in float64, rounded once (BERT's pooler).

import type { TanhActivationArgs } from '../backend.js';
import { checkTanhActivation } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, storeFloats } from './tensor.js';

export function prepareTanhActivation(args: TanhActivationArgs): CpuWork {
  const check = new CpuCheck('tanhActivation');
  const { x, bias, out, rows, H } = checkTanhActivation(check, args);

  return check.work(() => {
    const xv = floatsOf(x), b = bias ? floatsOf(bias) : undefined;
    const result = new Float64Array(rows * H);
    for (let r = 0; r < rows; r++) {
      for (let h = 0; h < H; h++) result[r * H + h] = Math.tanh(xv[r * H + h]! + (b ? b[h]! : 0));
    }
    storeFloats(out, result);
  });
}
