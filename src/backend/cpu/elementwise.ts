// Fused elementwise ops: bias + dropout + residual, bias + activation + dropout, and the QKV bias
// add + head split, each with its backward. Dropout masks come from rng.ts (u8, 1 = kept; kept
// elements are scaled by 1/(1−p)), so they match the GPU's bit for bit. Results are computed in
// float64 into a temporary and then rounded into the output, so outputs may alias inputs.

import type {
  BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs, BiasDropoutResidualArgs,
  BiasDropoutResidualBackwardArgs, BiasQkvSplitArgs, BiasQkvSplitBackwardArgs,
} from '../backend.js';
import { dropoutMask } from '../rng.js';
import type { QkvLayout } from '../op-checks/index.js';
import {
  checkBiasActivationDropout, checkBiasActivationDropoutBackward, checkBiasDropoutResidual, checkBiasDropoutResidualBackward,
  checkBiasQkvSplit, checkBiasQkvSplitBackward,
} from '../op-checks/index.js';
import { activationFunction, activationGradient } from './activation.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { bytesOf, floatsOf, storeFloats, dropoutOffsetAtRun } from './tensor.js';

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
  const { p, seed } = args;

  const offsetAtRun = dropoutOffsetAtRun(args);
  return check.work(() => {
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offsetAtRun());
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
  const { p, seed } = args;
  const act = activationFunction(args.activation);

  const offsetAtRun = dropoutOffsetAtRun(args);
  return check.work(() => {
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offsetAtRun());
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

/** Calls visit(fusedIndex, splitIndex, part) for every element; part 0, 1, 2 = q, k, v. */
function forEachQkvElement({ batch, seqLen, heads, headDim, width }: QkvLayout, visit: (fused: number, split: number, part: number) => void): void {
  for (let b = 0; b < batch; b++) {
    for (let l = 0; l < seqLen; l++) {
      for (let part = 0; part < 3; part++) {
        for (let h = 0; h < heads; h++) {
          for (let j = 0; j < headDim; j++) {
            visit((b * seqLen + l) * width + part * heads * headDim + h * headDim + j, ((b * heads + h) * seqLen + l) * headDim + j, part);
          }
        }
      }
    }
  }
}

/** q, k, v = split(qkv + bias), q scaled by qScale. */
export function prepareBiasQkvSplit(args: BiasQkvSplitArgs): CpuWork {
  const check = new CpuCheck('biasQkvSplit');
  const { qkv, bias, q, k, v, qScale, layout } = checkBiasQkvSplit(check, args);

  return check.work(() => {
    const x = floatsOf(qkv), b = floatsOf(bias);
    const parts = [new Float64Array(q.numel), new Float64Array(k.numel), new Float64Array(v.numel)];
    forEachQkvElement(layout, (fused, split, part) => {
      parts[part]![split] = (x[fused]! + b[fused % layout.width]!) * (part === 0 ? qScale : 1);
    });
    storeFloats(q, parts[0]!);
    storeFloats(k, parts[1]!);
    storeFloats(v, parts[2]!);
  });
}

/** dQkv = merge(dq·qScale, dk, dv);  dBias = Σ_{B, L} dQkv. */
export function prepareBiasQkvSplitBackward(args: BiasQkvSplitBackwardArgs): CpuWork {
  const check = new CpuCheck('biasQkvSplitBackward');
  const { dq, dk, dv, dQkv, dBias, qScale, layout } = checkBiasQkvSplitBackward(check, args);

  return check.work(() => {
    const parts = [floatsOf(dq), floatsOf(dk), floatsOf(dv)];
    const result = new Float64Array(dQkv.numel);
    forEachQkvElement(layout, (fused, split, part) => {
      result[fused] = parts[part]![split]! * (part === 0 ? qScale : 1);
    });
    if (dBias) storeFloats(dBias, columnSums(result, layout.width));
    storeFloats(dQkv, result);
  });
}
