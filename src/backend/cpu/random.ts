// randomFill on the CPU: the Philox values of rng.ts computed in f64, rounded to the tensor's dtype.

import type { RandomFillArgs } from '../backend.js';
import { randomFillValues } from '../rng.js';
import { randomDistribution } from '../validate.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { storeFloats } from './tensor.js';

export function prepareRandomFill(args: RandomFillArgs): CpuWork {
  const check = new CpuCheck('randomFill');
  const out = check.tensor('out', args.out);
  check.float('out', out);
  check.dropout({ p: 0, seed: args.seed, offset: args.offset });
  const distribution = randomDistribution(check, args);
  const { seed, offset } = args;
  return check.work(() => storeFloats(out, randomFillValues(out.numel, seed, offset, distribution)));
}
