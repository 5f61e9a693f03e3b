// Argument checks of gatedLinear (up = x·weightᵀ + bias; out = act(gate) ⊙ up), shared by the backends.
//   x (rows, K); weight (2F, K): gate rows, then up rows; bias (2F) optional; up (rows, 2F) scratch; out (rows, F).

import type { Tensor } from '../../tensor.js';
import type { GatedLinearArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { checkActivation } from './elementwise.js';

export function checkGatedLinear<T extends Tensor>(check: OpCheck<T>, args: GatedLinearArgs) {
  const x = check.tensor('x', args.x), weight = check.tensor('weight', args.weight);
  const up = check.tensor('up', args.up), out = check.tensor('out', args.out);
  const bias = args.bias === undefined ? undefined : check.tensor('bias', args.bias);
  check.float('x', x);
  check.sameDType(['x', 'weight', 'up', 'out', ...(bias ? ['bias'] : [])], [x, weight, up, out, ...(bias ? [bias] : [])]);
  checkActivation(check, args.activation);
  check.rows('x', x, 'rows', 'K');
  check.rows('out', out, 'rows', 'F');
  const F = check.size('F'), K = check.size('K');
  check.shape('weight', weight, [2 * F, K]);
  check.rows('up', up, 'rows', 2 * F);
  if (bias) check.shape('bias', bias, [2 * F]);
  return { x, weight, bias, up, out, activation: args.activation, rows: check.size('rows'), F, K };
}
