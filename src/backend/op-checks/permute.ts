// permute0213's argument checks, shared by the backends.

import type { Tensor } from '../../tensor.js';
import type { Permute0213Args } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkPermute0213<T extends Tensor>(check: OpCheck<T>, args: Permute0213Args) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  check.dtype('x', x, ['f32', 'f16', 'bf16', 'i32']);
  check.sameDType(['x', 'out'], [x, out]);
  check.shape('x', x, ['A', 'B', 'C', 'D']);
  check.shape('out', out, ['A', 'C', 'B', 'D']);
  return { x, out, A: check.size('A'), B: check.size('B'), C: check.size('C'), D: check.size('D') };
}
