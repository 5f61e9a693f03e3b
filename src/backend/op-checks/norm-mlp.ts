// Argument checks of normMlp (residualNorm, then out += act(norm.out·upᵀ + upBias)·downᵀ in f32), shared by the backends.
//   norm: residualNorm's (rows, H);  up (F, H), upBias (F), down (H, F) in x's dtype;  out f32 (rows, H);  zero f32.

import type { Tensor } from '../../tensor.js';
import type { NormMlpArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { checkActivation } from './elementwise.js';
import { checkResidualNorm } from './residual-norm.js';

export function checkNormMlp<T extends Tensor>(check: OpCheck<T>, args: NormMlpArgs) {
  const norm = checkResidualNorm(check, args.norm);
  const up = check.tensor('up', args.up), down = check.tensor('down', args.down);
  const upBias = check.optional('upBias', args.upBias);
  const out = check.typed('out', args.out, ['f32'], ['rows', 'H']);
  const zero = check.optional('zero', args.zero);
  if (zero) check.dtype('zero', zero, ['f32']);
  const activation = checkActivation(check, args.activation);
  check.sameDType(['x', 'up', 'down', ...(upBias ? ['upBias'] : [])], [norm.x, up, down, ...(upBias ? [upBias] : [])]);
  check.shape('up', up, ['F', 'H']);
  check.shape('down', down, ['H', 'F']);
  if (upBias) check.shape('upBias', upBias, ['F']);
  if (zero && (zero === out || zero === norm.y)) check.fail(`'zero' must be a tensor of its own: it is ${zero === out ? "'out'" : "'norm.y'"}`);
  if (norm.y === out) check.fail("'out' must not be 'norm.y' (out is added to after the norm has read y)");
  return { norm, up, upBias, down, out, zero, activation, rows: norm.rows, K: norm.H, F: check.size('F') };
}
