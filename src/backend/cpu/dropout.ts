// dropout: out = x ⊙ mask / (1−p) with the Philox mask of rng.ts (bit-identical to the GPU's).

import type { DropoutOpArgs } from '../backend.js';
import { dropoutMask } from '../rng.js';
import { checkDropout } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { bytesOf, floatsOf, storeFloats, dropoutOffsetAtRun } from './tensor.js';

export function prepareDropout(args: DropoutOpArgs): CpuWork {
  const check = new CpuCheck('dropout');
  const { x, out, mask } = checkDropout(check, args);
  const { p, seed } = args;
  const offsetAtRun = dropoutOffsetAtRun(args);
  return check.work(() => {
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offsetAtRun());
    const values = floatsOf(x);
    const result = new Float64Array(values.length);
    for (let i = 0; i < values.length; i++) result[i] = keep[i] ? values[i]! / (1 - p) : 0;
    storeFloats(out, result);
  });
}
