// AdamW's argument checks, shared by the backends.

import type { Tensor } from '../../tensor.js';
import type { AdamWArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

/** Where the step's lr, gradScale and bias corrections come from, checked. */
export type AdamWScalarSource<T extends Tensor> =
  | { readonly kind: 'host'; readonly lr: number; readonly gradScale: number; readonly step: number }
  | { readonly kind: 'device'; readonly scalars: T };

export function checkAdamW<T extends Tensor>(check: OpCheck<T>, args: AdamWArgs) {
  const params = check.tensor('params', args.params);
  const grads = check.tensor('grads', args.grads);
  const m = check.tensor('m', args.m);
  const v = check.tensor('v', args.v);
  const master = check.optional('master', args.master);
  check.float('params', params);
  check.sameDType(['params', 'grads'], [params, grads]);
  const [stateNames, state] = present([['m', m], ['v', v], ['master', master]]);
  state.forEach((t, i) => check.dtype(stateNames[i]!, t, ['f32']));
  [params, grads, ...state].forEach((t, i) => check.shape(['params', 'grads', ...stateNames][i]!, t, ['n']));
  check.probability('beta1', args.beta1);
  check.probability('beta2', args.beta2);
  check.nonNegative('eps', args.eps);
  check.nonNegative('weightDecay', args.weightDecay);
  const scalars = checkScalarSource(check, args);
  const clip = args.clip === undefined ? undefined : checkClip(check, args.clip);
  return { params, grads, m, v, master, scalars, clip, n: check.size('n') };
}

function checkScalarSource<T extends Tensor>(check: OpCheck<T>, args: AdamWArgs): AdamWScalarSource<T> {
  if (args.scalars !== undefined) {
    const reason = "when 'scalars' is given (the op reads lr, gradScale and the bias corrections from it when it runs)";
    check.absent('lr', args.lr, reason);
    check.absent('step', args.step, reason);
    check.absent('gradScale', args.gradScale, reason);
    const scalars = check.tensor('scalars', args.scalars);
    check.dtype('scalars', scalars, ['f32']);
    check.shape('scalars', scalars, [4]);
    return { kind: 'device', scalars };
  }
  check.nonNegative('lr', args.lr);
  check.integer('step', args.step, 1);
  const gradScale = args.gradScale ?? 1;
  check.finite('gradScale', gradScale);
  return { kind: 'host', lr: args.lr, gradScale, step: args.step };
}

function checkClip<T extends Tensor>(check: OpCheck<T>, clip: NonNullable<AdamWArgs['clip']>) {
  const sumSquares = check.tensor('clip.sumSquares', clip.sumSquares);
  check.dtype('clip.sumSquares', sumSquares, ['f32']);
  check.shape('clip.sumSquares', sumSquares, [1]);
  if (!(clip.maxNorm > 0)) check.fail(`'clip.maxNorm' must be a positive number or Infinity, got ${clip.maxNorm}`);
  return { sumSquares, maxNorm: clip.maxNorm };
}
