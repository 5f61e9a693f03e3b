// Fused elementwise ops: bias + dropout + residual, bias + activation + dropout, and the QKV bias
// add + head split, each with its backward. Dropout masks come from rng.ts (u8, 1 = kept; kept
// elements are scaled by 1/(1−p)), so they match the GPU's bit for bit. Results are computed in
// float64 into a temporary and then rounded into the output, so outputs may alias inputs.

import type {
  BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs, BiasDropoutResidualArgs,
  BiasDropoutResidualBackwardArgs, BiasQkvSplitArgs, BiasQkvSplitBackwardArgs,
} from '../backend.js';
import { dropoutMask } from '../rng.js';
import {
  checkBiasActivationDropout, checkBiasActivationDropoutBackward, checkBiasDropoutResidual, checkBiasDropoutResidualBackward,
} from '../op-checks.js';
import { activationFunction, activationGradient } from './activation.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { bytesOf, floatsOf, storeFloats } from './tensor.js';

/** Σ over rows of a (rows, H) float64 matrix → (H). */
function columnSums(values: Float64Array, H: number): Float64Array {
  const sums = new Float64Array(H);
  for (let i = 0; i < values.length; i++) sums[i % H] += values[i]!;
  return sums;
}

// --- bias + dropout + residual -------------------------------------------------------------------

/** out = dropout(input + bias) + residual;  input, residual, out, mask (rows, H); bias (H). */
export function prepareBiasDropoutResidual(args: BiasDropoutResidualArgs): CpuWork {
  const check = new CpuCheck('biasDropoutResidual');
  const { input, bias, residual, out, mask, H } = checkBiasDropoutResidual(check, args);
  const { p, seed, offset } = args;

  return check.work(() => {
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offset);
    const x = floatsOf(input), b = floatsOf(bias), res = floatsOf(residual);
    const result = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) result[i] = (keep[i] ? (x[i]! + b[i % H]!) / (1 - p) : 0) + res[i]!;
    storeFloats(out, result);
  });
}

/** dInput = dOut ⊙ mask / (1−p);  dBias = Σ_rows dInput. */
export function prepareBiasDropoutResidualBackward(args: BiasDropoutResidualBackwardArgs): CpuWork {
  const check = new CpuCheck('biasDropoutResidualBackward');
  const { dOut, mask, dInput, dBias, H } = checkBiasDropoutResidualBackward(check, args);
  const p = args.p;

  return check.work(() => {
    const g = floatsOf(dOut), keep = bytesOf(mask);
    const result = new Float64Array(g.length);
    for (let i = 0; i < g.length; i++) result[i] = keep[i] ? g[i]! / (1 - p) : 0;
    if (dBias) storeFloats(dBias, columnSums(result, H));
    storeFloats(dInput, result);
  });
}

// --- bias + activation + dropout -----------------------------------------------------------------

/** out = dropout(act(input + bias));  input, out, mask (rows, H); bias (H). */
export function prepareBiasActivationDropout(args: BiasActivationDropoutArgs): CpuWork {
  const check = new CpuCheck('biasActivationDropout');
  const { input, bias, out, mask, H } = checkBiasActivationDropout(check, args);
  const { p, seed, offset } = args;
  const act = activationFunction(args.activation);

  return check.work(() => {
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offset);
    const x = floatsOf(input), b = floatsOf(bias);
    const result = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) result[i] = keep[i] ? act(x[i]! + b[i % H]!) / (1 - p) : 0;
    storeFloats(out, result);
  });
}

/** dInput = dOut ⊙ mask / (1−p) ⊙ act'(input + bias);  dBias = Σ_rows dInput. */
export function prepareBiasActivationDropoutBackward(args: BiasActivationDropoutBackwardArgs): CpuWork {
  const check = new CpuCheck('biasActivationDropoutBackward');
  const { dOut, input, bias, mask, dInput, dBias, H } = checkBiasActivationDropoutBackward(check, args);
  const p = args.p;
  const actGrad = activationGradient(args.activation);

  return check.work(() => {
    const g = floatsOf(dOut), x = floatsOf(input), b = floatsOf(bias), keep = bytesOf(mask);
    const result = new Float64Array(g.length);
    for (let i = 0; i < g.length; i++) result[i] = keep[i] ? (g[i]! / (1 - p)) * actGrad(x[i]! + b[i % H]!) : 0;
    if (dBias) storeFloats(dBias, columnSums(result, H));
    storeFloats(dInput, result);
  });
}

// --- QKV bias + head split -------------------------------------------------------------------------
// qkv (B, L, 3·heads·d): along the last dimension the Q block, then K, then V, each (heads, d).
// Element (b, l, part·heads·d + h·d + j) becomes element (b, h, l, j) of q, k or v.

interface QkvLayout { B: number; L: number; heads: number; d: number }

/** Checks qkv-like (B, L, 3·heads·d) and the three (B, heads, L, d) tensors; returns the layout. */
function checkQkvShapes(check: CpuCheck, fusedName: string, fused: CpuTensor, heads: number, splitNames: readonly string[], split: readonly CpuTensor[]): QkvLayout {
  check.integer('heads', heads, 1);
  check.shape(fusedName, fused, ['B', 'L', '3·heads·d']);
  const width = check.size('3·heads·d');
  if (width % (3 * heads) !== 0) check.fail(`'${fusedName}' has last dimension ${width}, which is not 3·heads·d for heads = ${heads}`);
  const d = width / (3 * heads);
  split.forEach((t, i) => check.shape(splitNames[i]!, t, ['B', heads, 'L', d]));
  return { B: check.size('B'), L: check.size('L'), heads, d };
}

/** Calls visit(fusedIndex, splitIndex, part) for every element; part 0, 1, 2 = q, k, v. */
function forEachQkvElement({ B, L, heads, d }: QkvLayout, visit: (fused: number, split: number, part: number) => void): void {
  const width = 3 * heads * d;
  for (let b = 0; b < B; b++) {
    for (let l = 0; l < L; l++) {
      for (let part = 0; part < 3; part++) {
        for (let h = 0; h < heads; h++) {
          for (let j = 0; j < d; j++) {
            visit((b * L + l) * width + part * heads * d + h * d + j, ((b * heads + h) * L + l) * d + j, part);
          }
        }
      }
    }
  }
}

/** q, k, v = split(qkv + bias), q scaled by qScale. */
export function prepareBiasQkvSplit(args: BiasQkvSplitArgs): CpuWork {
  const check = new CpuCheck('biasQkvSplit');
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

  return check.work(() => {
    const x = floatsOf(qkv), b = floatsOf(bias);
    const width = 3 * layout.heads * layout.d;
    const parts = [new Float64Array(q.numel), new Float64Array(k.numel), new Float64Array(v.numel)];
    forEachQkvElement(layout, (fused, split, part) => {
      parts[part]![split] = (x[fused]! + b[fused % width]!) * (part === 0 ? qScale : 1);
    });
    storeFloats(q, parts[0]!);
    storeFloats(k, parts[1]!);
    storeFloats(v, parts[2]!);
  });
}

/** dQkv = merge(dq·qScale, dk, dv);  dBias = Σ_{B, L} dQkv. */
export function prepareBiasQkvSplitBackward(args: BiasQkvSplitBackwardArgs): CpuWork {
  const check = new CpuCheck('biasQkvSplitBackward');
  const dq = check.tensor('dq', args.dq);
  const dk = check.tensor('dk', args.dk);
  const dv = check.tensor('dv', args.dv);
  const dQkv = check.tensor('dQkv', args.dQkv);
  const dBias = check.optional('dBias', args.dBias);
  check.float('dq', dq);
  check.sameDType(['dq', 'dk', 'dv', 'dQkv', ...(dBias ? ['dBias'] : [])], [dq, dk, dv, dQkv, ...(dBias ? [dBias] : [])]);
  const layout = checkQkvShapes(check, 'dQkv', dQkv, args.heads, ['dq', 'dk', 'dv'], [dq, dk, dv]);
  if (dBias) check.shape('dBias', dBias, ['3·heads·d']);
  const qScale = args.qScale ?? 1;
  check.finite('qScale', qScale);

  return check.work(() => {
    const parts = [floatsOf(dq), floatsOf(dk), floatsOf(dv)];
    const result = new Float64Array(dQkv.numel);
    forEachQkvElement(layout, (fused, split, part) => {
      result[fused] = parts[part]![split]! * (part === 0 ? qScale : 1);
    });
    if (dBias) storeFloats(dBias, columnSums(result, 3 * layout.heads * layout.d));
    storeFloats(dQkv, result);
  });
}
