// Argument checks of the attention softmax, forward and backward, shared by the backends.
//   x, out, y, dY, dX (B, heads, Lq, Lk);  keyLengths i32 (B), optional

import type { Tensor } from '../../tensor.js';
import type { SoftmaxBackwardArgs, SoftmaxForwardArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

const SHAPE = ['B', 'heads', 'Lq', 'Lk'] as const;

/** The sizes of (B, heads, Lq, Lk) and the number of rows of Lk scores, B·heads·Lq. */
function sizes<T extends Tensor>(check: OpCheck<T>) {
  const [B, heads, Lq, Lk] = [check.size('B'), check.size('heads'), check.size('Lq'), check.size('Lk')];
  return { B, heads, Lq, Lk, rows: B * heads * Lq };
}

export function checkSoftmaxForward<T extends Tensor>(check: OpCheck<T>, args: SoftmaxForwardArgs) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  const keyLengths = check.optional('keyLengths', args.keyLengths);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  check.shape('x', x, SHAPE);
  check.shape('out', out, SHAPE);
  if (keyLengths) {
    check.dtype('keyLengths', keyLengths, ['i32']);
    check.shape('keyLengths', keyLengths, ['B']);
  }
  const scale = args.scale ?? 1;
  check.finite('scale', scale);
  const causal = args.causal ?? false;
  return { x, out, keyLengths, scale, causal, ...sizes(check) };
}

export function checkSoftmaxBackward<T extends Tensor>(check: OpCheck<T>, args: SoftmaxBackwardArgs) {
  const y = check.tensor('y', args.y);
  const dY = check.tensor('dY', args.dY);
  const dX = check.tensor('dX', args.dX);
  check.float('y', y);
  check.sameDType(['y', 'dY', 'dX'], [y, dY, dX]);
  check.shape('y', y, SHAPE);
  check.shape('dY', dY, SHAPE);
  check.shape('dX', dX, SHAPE);
  const scale = args.scale ?? 1;
  check.finite('scale', scale);
  return { y, dY, dX, scale, ...sizes(check) };
}
