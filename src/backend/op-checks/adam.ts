// AdamW's argument checks, shared by the backends.

import type { Tensor } from '../../tensor.js';
import type { AdamWArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

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
  check.nonNegative('lr', args.lr);
  check.probability('beta1', args.beta1);
  check.probability('beta2', args.beta2);
  check.nonNegative('eps', args.eps);
  check.nonNegative('weightDecay', args.weightDecay);
  check.integer('step', args.step, 1);
  const gradScale = args.gradScale ?? 1;
  check.finite('gradScale', gradScale);
  return { params, grads, m, v, master, gradScale, n: check.size('n') };
}
