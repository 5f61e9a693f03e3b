// Argument checks of maskLogits (constrained decoding's allowed tokens), shared by the backends.
//   logits (n, Vp) float;  rows i32 (m);  masks i32 (m, ⌈classes / 32⌉);  1 ≤ classes ≤ Vp.

import type { Tensor } from '../../tensor.js';
import type { MaskLogitsArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkMaskLogits<T extends Tensor>(check: OpCheck<T>, args: MaskLogitsArgs) {
  const logits = check.tensor('logits', args.logits);
  const rows = check.tensor('rows', args.rows);
  const masks = check.tensor('masks', args.masks);
  check.float('logits', logits);
  check.dtype('rows', rows, ['i32']);
  check.dtype('masks', masks, ['i32']);
  check.shape('logits', logits, ['n', 'Vp']);
  check.shape('rows', rows, ['m']);
  const Vp = check.size('Vp'), classes = args.classes;
  if (!Number.isInteger(classes) || classes < 1 || classes > Vp) check.fail(`'classes' must be an integer in [1, ${Vp}] (the columns of 'logits'), got ${classes}`);
  const words = Math.ceil(classes / 32);
  check.shape('masks', masks, ['m', words]);
  return { logits, rows, masks, classes, words, n: check.size('n'), Vp, m: check.size('m') };
}
