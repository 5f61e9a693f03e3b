// Argument checks of residualNorm (x ← x + y + bias, out = norm(x)), shared by the backends.
//   x, y, out (rows, H);  bias, gamma, beta (H);  LayerNorm needs beta, RMSNorm refuses it.
//   All in x's dtype, except y, which may also be f32 (a fused MLP's f32 accumulator beside 16-bit x).

import type { Tensor } from '../../tensor.js';
import type { ResidualNormArgs } from '../backend.js';
import { DTypeError } from '../../errors.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

export function checkResidualNorm<T extends Tensor>(check: OpCheck<T>, args: ResidualNormArgs) {
  const x = check.tensor('x', args.x);
  const y = check.optional('y', args.y);
  const bias = check.optional('bias', args.bias);
  const gamma = check.tensor('gamma', args.gamma);
  const beta = check.optional('beta', args.beta);
  const out = check.tensor('out', args.out);
  if (args.norm !== 'layer' && args.norm !== 'rms') check.fail(`'norm' must be 'layer' or 'rms', got '${String(args.norm)}'`);
  if (args.norm === 'layer' && !beta) check.fail("'beta' is required with norm 'layer'");
  if (args.norm === 'rms') check.absent('beta', beta, "with norm 'rms'");
  if (bias && !y) check.fail("'bias' is added with 'y': pass 'y' too, or neither");
  check.float('x', x);
  if (y && y.dtype !== x.dtype && y.dtype !== 'f32') {
    throw new DTypeError(`${check.op}: 'y' has dtype ${y.dtype} but expected x's dtype (${x.dtype})${x.dtype === 'f32' ? '' : ' or f32'}`);
  }
  check.sameDType(...present([['x', x], ['bias', bias], ['gamma', gamma], ['beta', beta], ['out', out]]));
  check.rows('x', x, 'rows', 'H');
  if (y) check.rows('y', y, 'rows', 'H');
  check.rows('out', out, 'rows', 'H');
  check.shape('gamma', gamma, ['H']);
  if (bias) check.shape('bias', bias, ['H']);
  if (beta) check.shape('beta', beta, ['H']);
  check.nonNegative('eps', args.eps);
  const H = check.size('H');
  if (H < 1) check.fail("'x' has an empty last dimension (H = 0)");
  return { x, y, bias, gamma, beta, out, norm: args.norm, eps: args.eps, rows: check.size('rows'), H };
}
