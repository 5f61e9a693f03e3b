// Argument checks of gatherColumns (out[r, j] = x[r, index[j]]), shared by the backends.
//   x (rows, K);  index i32 (C);  out (rows, C), x's dtype.

import type { Tensor } from '../../tensor.js';
import type { GatherColumnsArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkGatherColumns<T extends Tensor>(check: OpCheck<T>, args: GatherColumnsArgs) {
  const x = check.tensor('x', args.x);
  const index = check.tensor('index', args.index);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  check.dtype('index', index, ['i32']);
  check.shape('x', x, ['rows', 'K']);
  check.shape('index', index, ['C']);
  check.shape('out', out, ['rows', 'C']);
  return { x, index, out, rows: check.size('rows'), K: check.size('K'), C: check.size('C') };
}
