// Argument checks of scaleColumns (out[r, c] = x[r, c] · scale[c], or / scale[c]), shared by the backends.
//   x (rows, C) float;  scale f32 (C);  out (rows, C), x's dtype.

import type { Tensor } from '../../tensor.js';
import type { ScaleColumnsArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkScaleColumns<T extends Tensor>(check: OpCheck<T>, args: ScaleColumnsArgs) {
  const x = check.tensor('x', args.x);
  const scale = check.typed('scale', args.scale, ['f32'], ['C']);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  check.shape('x', x, ['rows', 'C']);
  check.shape('out', out, ['rows', 'C']);
  return { x, scale, out, rows: check.size('rows'), C: check.size('C'), divide: args.divide === true };
}
