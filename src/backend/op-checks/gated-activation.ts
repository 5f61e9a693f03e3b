// Argument checks of gatedActivation (out = act(gate) ⊙ up), shared by the backends.
//   x (rows, 2F): the gate in columns [0, F), the up projection in [F, 2F);  out (rows, F).

import type { Tensor } from '../../tensor.js';
import type { GatedActivationArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { checkActivation } from './elementwise.js';

export function checkGatedActivation<T extends Tensor>(check: OpCheck<T>, args: GatedActivationArgs) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  checkActivation(check, args.activation);
  check.rows('out', out, 'rows', 'F');
  const F = check.size('F');
  check.rows('x', x, 'rows', 2 * F);
  return { x, out, activation: args.activation, rows: check.size('rows'), F };
}
