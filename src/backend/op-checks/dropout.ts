// dropout's argument checks, shared by the backends.

import type { Tensor } from '../../tensor.js';
import type { DropoutOpArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkDropout<T extends Tensor>(check: OpCheck<T>, args: DropoutOpArgs) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  const mask = check.tensor('mask', args.mask);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  check.dtype('mask', mask, ['u8']);
  check.rows('x', x, 'rows', 'last');
  check.rows('out', out, 'rows', 'last');
  check.rows('mask', mask, 'rows', 'last');
  check.dropout(args);
  return { x, out, mask };
}
