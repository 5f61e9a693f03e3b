// Per-op argument checks shared by the backends: each takes the backend's OpCheck (which decides
// what a valid tensor is on that backend) and returns the op's tensors and sizes, so the CPU and CUDA
// implementations reject exactly the same calls with the same messages and hold no copies of them.

import type { Tensor } from '../tensor.js';
import type {
  Activation, AdamWArgs, BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs, BiasDropoutResidualArgs,
  BiasDropoutResidualBackwardArgs,
} from './backend.js';
import type { OpCheck } from './validate.js';

export const ACTIVATIONS: readonly Activation[] = ['relu', 'gelu', 'gelu_tanh'];

export function checkActivation<T extends Tensor>(check: OpCheck<T>, activation: string): Activation {
  if (!(ACTIVATIONS as readonly string[]).includes(activation)) check.fail(`'activation' must be one of ${ACTIVATIONS.join(', ')}, got '${activation}'`);
  return activation as Activation;
}

/** Optional tensors join the dtype check only when given. */
function present<T>(pairs: readonly (readonly [string, T | undefined])[]): [string[], T[]] {
  const given = pairs.filter((p): p is readonly [string, T] => p[1] !== undefined);
  return [given.map((p) => p[0]), given.map((p) => p[1])];
}

export function checkBiasDropoutResidual<T extends Tensor>(check: OpCheck<T>, args: BiasDropoutResidualArgs) {
  const input = check.tensor('input', args.input);
  const bias = check.tensor('bias', args.bias);
  const residual = check.tensor('residual', args.residual);
  const out = check.tensor('out', args.out);
  const mask = check.tensor('mask', args.mask);
  check.float('input', input);
  check.sameDType(['input', 'bias', 'residual', 'out'], [input, bias, residual, out]);
  check.dtype('mask', mask, ['u8']);
  check.rows('input', input, 'rows', 'H');
  check.shape('bias', bias, ['H']);
  check.rows('residual', residual, 'rows', 'H');
  check.rows('out', out, 'rows', 'H');
  check.rows('mask', mask, 'rows', 'H');
  check.dropout(args);
  return { input, bias, residual, out, mask, rows: check.size('rows'), H: check.size('H') };
}

export function checkBiasDropoutResidualBackward<T extends Tensor>(check: OpCheck<T>, args: BiasDropoutResidualBackwardArgs) {
  const dOut = check.tensor('dOut', args.dOut);
  const mask = check.tensor('mask', args.mask);
  const dInput = check.tensor('dInput', args.dInput);
  const dBias = check.optional('dBias', args.dBias);
  check.float('dOut', dOut);
  check.sameDType(...present([['dOut', dOut], ['dInput', dInput], ['dBias', dBias]]));
  check.dtype('mask', mask, ['u8']);
  check.rows('dOut', dOut, 'rows', 'H');
  check.rows('mask', mask, 'rows', 'H');
  check.rows('dInput', dInput, 'rows', 'H');
  if (dBias) check.shape('dBias', dBias, ['H']);
  check.probability('p', args.p);
  return { dOut, mask, dInput, dBias, rows: check.size('rows'), H: check.size('H') };
}

export function checkBiasActivationDropout<T extends Tensor>(check: OpCheck<T>, args: BiasActivationDropoutArgs) {
  const input = check.tensor('input', args.input);
  const bias = check.tensor('bias', args.bias);
  const out = check.tensor('out', args.out);
  const mask = check.tensor('mask', args.mask);
  check.float('input', input);
  check.sameDType(['input', 'bias', 'out'], [input, bias, out]);
  check.dtype('mask', mask, ['u8']);
  check.rows('input', input, 'rows', 'H');
  check.shape('bias', bias, ['H']);
  check.rows('out', out, 'rows', 'H');
  check.rows('mask', mask, 'rows', 'H');
  const activation = checkActivation(check, args.activation);
  check.dropout(args);
  return { input, bias, out, mask, activation, rows: check.size('rows'), H: check.size('H') };
}

export function checkBiasActivationDropoutBackward<T extends Tensor>(check: OpCheck<T>, args: BiasActivationDropoutBackwardArgs) {
  const dOut = check.tensor('dOut', args.dOut);
  const input = check.tensor('input', args.input);
  const bias = check.tensor('bias', args.bias);
  const mask = check.tensor('mask', args.mask);
  const dInput = check.tensor('dInput', args.dInput);
  const dBias = check.optional('dBias', args.dBias);
  check.float('dOut', dOut);
  check.sameDType(...present([['dOut', dOut], ['input', input], ['bias', bias], ['dInput', dInput], ['dBias', dBias]]));
  check.dtype('mask', mask, ['u8']);
  check.rows('dOut', dOut, 'rows', 'H');
  check.rows('input', input, 'rows', 'H');
  check.shape('bias', bias, ['H']);
  check.rows('mask', mask, 'rows', 'H');
  check.rows('dInput', dInput, 'rows', 'H');
  if (dBias) check.shape('dBias', dBias, ['H']);
  const activation = checkActivation(check, args.activation);
  check.probability('p', args.p);
  return { dOut, input, bias, mask, dInput, dBias, activation, rows: check.size('rows'), H: check.size('H') };
}

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
