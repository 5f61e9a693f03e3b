// Argument checks of the fused elementwise ops (bias + dropout + residual, bias + activation +
// dropout, the QKV bias add + head split, and their backwards), shared by the backends.

import type { Tensor } from '../../tensor.js';
import type {
  Activation, BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs, BiasDropoutResidualArgs,
  BiasDropoutResidualBackwardArgs, BiasQkvSplitArgs, BiasQkvSplitBackwardArgs,
} from '../backend.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

export const ACTIVATIONS: readonly Activation[] = ['relu', 'gelu', 'gelu_tanh', 'silu'];

export function checkActivation<T extends Tensor>(check: OpCheck<T>, activation: string): Activation {
  if (!(ACTIVATIONS as readonly string[]).includes(activation)) check.fail(`'activation' must be one of ${ACTIVATIONS.join(', ')}, got '${activation}'`);
  return activation as Activation;
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

// --- QKV bias + head split -------------------------------------------------------------------------

/** The sizes of qkv [batch, seqLen, width] and of q, k, v [batch, heads, seqLen, headDim]; width = 3·heads·headDim. */
export interface QkvLayout {
  readonly batch: number;
  readonly seqLen: number;
  readonly heads: number;
  readonly headDim: number;
  readonly width: number;
}

/** Checks the fused tensor (B, L, 3·heads·d) and the three split ones (B, heads, L, d). */
function checkQkvShapes<T extends Tensor>(check: OpCheck<T>, fusedName: string, fused: T, heads: number, splitNames: readonly string[], split: readonly T[]): QkvLayout {
  check.integer('heads', heads, 1);
  check.shape(fusedName, fused, ['B', 'L', '3·heads·d']);
  const width = check.size('3·heads·d');
  if (width % (3 * heads) !== 0) check.fail(`'${fusedName}' has last dimension ${width}, which is not 3·heads·d for heads = ${heads}`);
  const headDim = width / (3 * heads);
  split.forEach((t, i) => check.shape(splitNames[i]!, t, ['B', heads, 'L', headDim]));
  return { batch: check.size('B'), seqLen: check.size('L'), heads, headDim, width };
}

export function checkBiasQkvSplit<T extends Tensor>(check: OpCheck<T>, args: BiasQkvSplitArgs) {
  const qkv = check.tensor('qkv', args.qkv);
  const bias = check.tensor('bias', args.bias);
  const q = check.tensor('q', args.q);
  const k = check.tensor('k', args.k);
  const v = check.tensor('v', args.v);
  check.float('qkv', qkv);
  check.sameDType(['qkv', 'bias', 'q', 'k', 'v'], [qkv, bias, q, k, v]);
  const layout = checkQkvShapes(check, 'qkv', qkv, args.heads, ['q', 'k', 'v'], [q, k, v]);
  check.shape('bias', bias, ['3·heads·d']);
  const qScale = args.qScale ?? 1;
  check.finite('qScale', qScale);
  return { qkv, bias, q, k, v, qScale, layout };
}

export function checkBiasQkvSplitBackward<T extends Tensor>(check: OpCheck<T>, args: BiasQkvSplitBackwardArgs) {
  const dq = check.tensor('dq', args.dq);
  const dk = check.tensor('dk', args.dk);
  const dv = check.tensor('dv', args.dv);
  const dQkv = check.tensor('dQkv', args.dQkv);
  const dBias = check.optional('dBias', args.dBias);
  check.float('dq', dq);
  check.sameDType(...present([['dq', dq], ['dk', dk], ['dv', dv], ['dQkv', dQkv], ['dBias', dBias]]));
  const layout = checkQkvShapes(check, 'dQkv', dQkv, args.heads, ['dq', 'dk', 'dv'], [dq, dk, dv]);
  if (dBias) check.shape('dBias', dBias, ['3·heads·d']);
  const qScale = args.qScale ?? 1;
  check.finite('qScale', qScale);
  return { dq, dk, dv, dQkv, dBias, qScale, layout };
}
