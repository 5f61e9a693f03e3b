// residualNorm: x ← x + y + bias rounded to x's dtype, then out = LayerNorm or RMSNorm of the stored x,
// statistics in float64 (two-pass variance for LayerNorm, as layernorm.ts). y may be f32 beside a 16-bit
// x (every float tensor is held as f32 here, so it is read the same way; the sum is rounded once, to x's dtype).

import type { ResidualNormArgs } from '../backend.js';
import { checkResidualNorm } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, storeFloats } from './tensor.js';

export function prepareResidualNorm(args: ResidualNormArgs): CpuWork {
  const check = new CpuCheck('residualNorm');
  const { x, y, bias, gamma, beta, out, norm, eps, rows, H } = checkResidualNorm(check, args);

  return check.work(() => {
    if (y) {
      const xv = floatsOf(x), yv = floatsOf(y), b = bias ? floatsOf(bias) : undefined;
      const sum = new Float64Array(rows * H);
      for (let r = 0; r < rows; r++) for (let h = 0; h < H; h++) sum[r * H + h] = xv[r * H + h]! + yv[r * H + h]! + (b ? b[h]! : 0);
      storeFloats(x, sum);
    }
    const xv = floatsOf(x), g = floatsOf(gamma), be = beta ? floatsOf(beta) : undefined;
    const result = new Float64Array(rows * H);
    for (let r = 0; r < rows; r++) {
      const row = r * H;
      let mean = 0;
      if (norm === 'layer') {
        for (let h = 0; h < H; h++) mean += xv[row + h]!;
        mean /= H;
      }
      let squares = 0;
      for (let h = 0; h < H; h++) squares += (xv[row + h]! - mean) ** 2;
      const rstd = 1 / Math.sqrt(squares / H + eps);
      for (let h = 0; h < H; h++) result[row + h] = (xv[row + h]! - mean) * rstd * g[h]! + (be ? be[h]! : 0);
    }
    storeFloats(out, result);
  });
}
