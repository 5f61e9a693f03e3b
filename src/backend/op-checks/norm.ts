// Argument checks of LayerNorm and RMSNorm, forward and backward, shared by the backends.
//   x, out, dOut, dX, dResidual (rows, H);  gamma, beta, dGamma, dBeta (H);  mean, rstd f32 (rows)
// RMSNorm is LayerNorm without beta/dBeta and mean; H must be at least 1.

import type { Tensor } from '../../tensor.js';
import type { LayerNormBackwardArgs, LayerNormForwardArgs, RmsNormBackwardArgs, RmsNormForwardArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

/** A norm forward's checked tensors and sizes (beta and mean only for LayerNorm). */
export interface CheckedNormForward<T extends Tensor> {
  x: T; gamma: T; beta?: T; out: T; mean?: T; rstd: T;
  eps: number; rows: number; H: number;
}

/** A norm backward's checked tensors and sizes (dBeta and mean only for LayerNorm; dResidual optional). */
export interface CheckedNormBackward<T extends Tensor> {
  dOut: T; x: T; gamma: T; mean?: T; rstd: T; dX: T; dGamma: T; dBeta?: T; dResidual?: T;
  accumulate: boolean; rows: number; H: number;
}

/** A saved per-row statistic: f32 (rows). */
function checkStatistic<T extends Tensor>(check: OpCheck<T>, name: string, t: T): void {
  check.dtype(name, t, ['f32']);
  check.shape(name, t, ['rows']);
}

function checkNormForward<T extends Tensor>(check: OpCheck<T>, t: Omit<CheckedNormForward<T>, 'rows' | 'H'>): CheckedNormForward<T> {
  check.float('x', t.x);
  check.sameDType(...present([['x', t.x], ['gamma', t.gamma], ['beta', t.beta], ['out', t.out]]));
  check.rows('x', t.x, 'rows', 'H');
  check.shape('gamma', t.gamma, ['H']);
  if (t.beta) check.shape('beta', t.beta, ['H']);
  check.rows('out', t.out, 'rows', 'H');
  if (t.mean) checkStatistic(check, 'mean', t.mean);
  checkStatistic(check, 'rstd', t.rstd);
  check.nonNegative('eps', t.eps);
  const H = check.size('H');
  if (H < 1) check.fail("'x' has an empty last dimension (H = 0)");
  return { ...t, rows: check.size('rows'), H };
}

function checkNormBackward<T extends Tensor>(check: OpCheck<T>, t: Omit<CheckedNormBackward<T>, 'rows' | 'H'>): CheckedNormBackward<T> {
  check.float('dOut', t.dOut);
  check.sameDType(...present([
    ['dOut', t.dOut], ['x', t.x], ['gamma', t.gamma], ['dX', t.dX], ['dGamma', t.dGamma], ['dBeta', t.dBeta], ['dResidual', t.dResidual],
  ]));
  check.rows('dOut', t.dOut, 'rows', 'H');
  check.rows('x', t.x, 'rows', 'H');
  check.shape('gamma', t.gamma, ['H']);
  check.rows('dX', t.dX, 'rows', 'H');
  check.shape('dGamma', t.dGamma, ['H']);
  if (t.dBeta) check.shape('dBeta', t.dBeta, ['H']);
  if (t.dResidual) check.rows('dResidual', t.dResidual, 'rows', 'H');
  const H = check.size('H');
  if (H < 1) check.fail("'dOut' has an empty last dimension (H = 0)");
  if (t.mean) checkStatistic(check, 'mean', t.mean);
  checkStatistic(check, 'rstd', t.rstd);
  return { ...t, rows: check.size('rows'), H };
}

export function checkLayerNormForward<T extends Tensor>(check: OpCheck<T>, args: LayerNormForwardArgs) {
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const beta = check.tensor('beta', args.beta);
  const out = check.tensor('out', args.out);
  const mean = check.tensor('mean', args.mean);
  const rstd = check.tensor('rstd', args.rstd);
  return { ...checkNormForward(check, { x, gamma, beta, out, mean, rstd, eps: args.eps }), beta, mean };
}

export function checkRmsNormForward<T extends Tensor>(check: OpCheck<T>, args: RmsNormForwardArgs): CheckedNormForward<T> {
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const out = check.tensor('out', args.out);
  const rstd = check.tensor('rstd', args.rstd);
  return checkNormForward(check, { x, gamma, out, rstd, eps: args.eps });
}

export function checkLayerNormBackward<T extends Tensor>(check: OpCheck<T>, args: LayerNormBackwardArgs) {
  const dOut = check.tensor('dOut', args.dOut);
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const dX = check.tensor('dX', args.dX);
  const dGamma = check.tensor('dGamma', args.dGamma);
  const dBeta = check.tensor('dBeta', args.dBeta);
  const mean = check.tensor('mean', args.mean);
  const rstd = check.tensor('rstd', args.rstd);
  const dResidual = check.optional('dResidual', args.dResidual);
  const accumulate = args.accumulate ?? false;
  return { ...checkNormBackward(check, { dOut, x, gamma, mean, rstd, dX, dGamma, dBeta, dResidual, accumulate }), dBeta, mean };
}

export function checkRmsNormBackward<T extends Tensor>(check: OpCheck<T>, args: RmsNormBackwardArgs): CheckedNormBackward<T> {
  const dOut = check.tensor('dOut', args.dOut);
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const dX = check.tensor('dX', args.dX);
  const dGamma = check.tensor('dGamma', args.dGamma);
  const rstd = check.tensor('rstd', args.rstd);
  const dResidual = check.optional('dResidual', args.dResidual);
  const accumulate = args.accumulate ?? false;
  return checkNormBackward(check, { dOut, x, gamma, rstd, dX, dGamma, dResidual, accumulate });
}
