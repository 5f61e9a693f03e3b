// Argument checks of prefetchL2 (a cache hint), shared by the backends.
//   x any dtype, rank 1 or 2 (rows, cols);  fraction in (0, 1] (default 1).

import { byteSize } from '../../dtype.js';
import type { Tensor } from '../../tensor.js';
import type { PrefetchL2Args } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkPrefetchL2<T extends Tensor>(check: OpCheck<T>, args: PrefetchL2Args) {
  const x = check.tensor('x', args.x);
  if (x.shape.length !== 1 && x.shape.length !== 2) check.fail(`'x' must be 1-D or 2-D (rows, cols), got shape [${x.shape.join(', ')}]`);
  const fraction = args.fraction ?? 1;
  if (!(fraction > 0 && fraction <= 1)) check.fail(`'fraction' must be in (0, 1], got ${fraction}`);
  const rows = x.shape.length === 2 ? x.shape[0]! : 1, rowBytes = (x.shape.at(-1)! * byteSize(x.dtype));
  return { x, fraction, rows, rowBytes };
}
