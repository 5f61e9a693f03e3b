// normMlp on the CPU (backend.ts has the contract): after residualNorm (issued separately), the hidden row
// a = act(h·upᵀ + upBias) in f64, rounded to the dtype as the unfused fc stores it, then out += a·downᵀ in f64,
// stored as f32 (CUDA sums the same products in f32, in an order its atomics choose).

import type { NormMlpArgs } from '../backend.js';
import type { FloatDType } from '../../dtype.js';
import { checkNormMlp } from '../op-checks/index.js';
import { activationFunction } from './activation.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, rounder, storeFloats } from './tensor.js';

export function prepareNormMlp(args: NormMlpArgs): CpuWork {
  const check = new CpuCheck('normMlp');
  const { norm, up, upBias, down, out, zero, activation, rows, K, F } = checkNormMlp(check, args);
  const act = activationFunction(activation), round = rounder(norm.x.dtype as FloatDType);
  return check.work(() => {
    const h = floatsOf(norm.out), wu = floatsOf(up), wd = floatsOf(down), bias = upBias ? floatsOf(upBias) : undefined;
    const result = Float32Array.from(floatsOf(out)), hidden = new Float64Array(F);
    for (let r = 0; r < rows; r++) {
      for (let f = 0; f < F; f++) {
        let s = bias ? bias[f]! : 0;
        for (let k = 0; k < K; k++) s += h[r * K + k]! * wu[f * K + k]!;
        hidden[f] = round(act(s));
      }
      for (let n = 0; n < K; n++) {
        let s = 0;
        for (let f = 0; f < F; f++) s += hidden[f]! * wd[n * F + f]!;
        result[r * K + n] = result[r * K + n]! + s;
      }
    }
    storeFloats(out, result);
    if (zero) storeFloats(zero, new Float32Array(zero.numel));
  });
}
