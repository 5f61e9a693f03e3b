// sumSquares' argument checks, shared by the backends.

import type { Tensor } from '../../tensor.js';
import type { SumSquaresArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkSumSquares<T extends Tensor>(check: OpCheck<T>, args: SumSquaresArgs) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.dtype('out', out, ['f32']);
  check.shape('out', out, [1]);
  if (args.accumulate !== undefined && typeof args.accumulate !== 'boolean') check.fail(`'accumulate' must be a boolean, got ${String(args.accumulate)}`);
  return { x, out, accumulate: args.accumulate ?? false, n: x.numel };
}
