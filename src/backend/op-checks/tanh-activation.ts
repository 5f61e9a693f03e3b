// Argument checks of tanhActivation (out = tanh(x + bias)), shared by the backends.
//   x, out (rows, H);  bias (H), optional.

import type { Tensor } from '../../tensor.js';
import type { TanhActivationArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

export function checkTanhActivation<T extends Tensor>(check: OpCheck<T>, args: TanhActivationArgs) {
  const x = check.tensor('x', args.x);
  const bias = check.optional('bias', args.bias);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.sameDType(...present([['x', x], ['bias', bias], ['out', out]]));
  check.rows('x', x, 'rows', 'H');
  check.rows('out', out, 'rows', 'H');
  if (bias) check.shape('bias', bias, ['H']);
  return { x, bias, out, rows: check.size('rows'), H: check.size('H') };
}
