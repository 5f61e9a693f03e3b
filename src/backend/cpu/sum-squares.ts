// sumSquares: out[0] = Σ x² over every element (f64 accumulation; the f32 store rounds once), or
// out[0] += Σ x² with `accumulate`. NaN and ±Inf propagate through the sum (x² ≥ 0, so Inf never
// meets −Inf): a NaN anywhere gives NaN, otherwise an Inf gives +Inf.

import type { SumSquaresArgs } from '../backend.js';
import { checkSumSquares } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf } from './tensor.js';

export function prepareSumSquares(args: SumSquaresArgs): CpuWork {
  const check = new CpuCheck('sumSquares');
  const { x, out, accumulate } = checkSumSquares(check, args);
  return check.work(() => {
    const values = floatsOf(x), result = floatsOf(out);
    let sum = 0;
    for (let i = 0; i < values.length; i++) sum += values[i]! * values[i]!;
    result[0] = accumulate ? result[0]! + sum : sum;
  });
}
