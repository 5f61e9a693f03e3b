// LayerNorm and RMSNorm over the last dimension, forward and backward.
//   x, out, dOut, dX, dResidual (rows, H);  gamma, beta, dGamma, dBeta (H);  mean, rstd f32 (rows)
// Statistics are computed in float64 (two-pass variance, biased: divided by H) and saved as f32;
// the backward reads the saved f32 statistics, as the GPU's does. With `accumulate`, dGamma and
// dBeta are added to (their old value + this call's sum, rounded once); otherwise overwritten.

import type { LayerNormBackwardArgs, LayerNormForwardArgs, RmsNormBackwardArgs, RmsNormForwardArgs } from '../backend.js';
import { checkLayerNormBackward, checkLayerNormForward, checkRmsNormBackward, checkRmsNormForward } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { floatsOf, storeFloats } from './tensor.js';

/** Adds `sums` to the tensor's current values when accumulating, then stores. */
function storeParameterGradient(t: CpuTensor, sums: Float64Array, accumulate: boolean): void {
  if (accumulate) {
    const old = floatsOf(t);
    for (let i = 0; i < sums.length; i++) sums[i] += old[i]!;
  }
  storeFloats(t, sums);
}

// --- LayerNorm ---------------------------------------------------------------------------------------

/** out = (x − mean)·rstd·gamma + beta, rstd = 1/√(var + eps). */
export function prepareLayerNormForward(args: LayerNormForwardArgs): CpuWork {
  const check = new CpuCheck('layerNormForward');
  const { x, gamma, beta, out, mean, rstd, eps, rows, H } = checkLayerNormForward(check, args);

  return check.work(() => {
    const xv = floatsOf(x), g = floatsOf(gamma), b = floatsOf(beta);
    const result = new Float64Array(rows * H), means = new Float64Array(rows), rstds = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const row = r * H;
      let sum = 0;
      for (let h = 0; h < H; h++) sum += xv[row + h]!;
      const mu = sum / H;
      let squares = 0;
      for (let h = 0; h < H; h++) squares += (xv[row + h]! - mu) ** 2;
      const s = 1 / Math.sqrt(squares / H + eps);
      for (let h = 0; h < H; h++) result[row + h] = (xv[row + h]! - mu) * s * g[h]! + b[h]!;
      means[r] = mu;
      rstds[r] = s;
    }
    storeFloats(mean, means);
    storeFloats(rstd, rstds);
    storeFloats(out, result);
  });
}

/** dX = rstd·(g − mean(g) − x̂·mean(g⊙x̂)) + dResidual, g = dOut⊙gamma;  dGamma = Σ dOut⊙x̂;  dBeta = Σ dOut. */
export function prepareLayerNormBackward(args: LayerNormBackwardArgs): CpuWork {
  const check = new CpuCheck('layerNormBackward');
  const { dOut, x, gamma, mean, rstd, dX, dGamma, dBeta, dResidual, accumulate, rows, H } = checkLayerNormBackward(check, args);

  return check.work(() => {
    const dy = floatsOf(dOut), xv = floatsOf(x), g = floatsOf(gamma), mu = floatsOf(mean), s = floatsOf(rstd);
    const dr = dResidual ? floatsOf(dResidual) : undefined;
    const result = new Float64Array(rows * H), gammaSums = new Float64Array(H), betaSums = new Float64Array(H);
    const xHat = new Float64Array(H), gHat = new Float64Array(H);
    for (let r = 0; r < rows; r++) {
      const row = r * H;
      let meanG = 0, meanGX = 0;
      for (let h = 0; h < H; h++) {
        xHat[h] = (xv[row + h]! - mu[r]!) * s[r]!;
        gHat[h] = dy[row + h]! * g[h]!;
        meanG += gHat[h]!;
        meanGX += gHat[h]! * xHat[h]!;
        gammaSums[h] += dy[row + h]! * xHat[h]!;
        betaSums[h] += dy[row + h]!;
      }
      meanG /= H;
      meanGX /= H;
      for (let h = 0; h < H; h++) {
        result[row + h] = s[r]! * (gHat[h]! - meanG - xHat[h]! * meanGX) + (dr ? dr[row + h]! : 0);
      }
    }
    storeParameterGradient(dGamma, gammaSums, accumulate);
    storeParameterGradient(dBeta, betaSums, accumulate);
    storeFloats(dX, result);
  });
}

// --- RMSNorm -----------------------------------------------------------------------------------------

/** out = x·rstd·gamma, rstd = 1/√(mean(x²) + eps). */
export function prepareRmsNormForward(args: RmsNormForwardArgs): CpuWork {
  const check = new CpuCheck('rmsNormForward');
  const { x, gamma, out, rstd, eps, rows, H } = checkRmsNormForward(check, args);

  return check.work(() => {
    const xv = floatsOf(x), g = floatsOf(gamma);
    const result = new Float64Array(rows * H), rstds = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const row = r * H;
      let squares = 0;
      for (let h = 0; h < H; h++) squares += xv[row + h]! ** 2;
      const s = 1 / Math.sqrt(squares / H + eps);
      for (let h = 0; h < H; h++) result[row + h] = xv[row + h]! * s * g[h]!;
      rstds[r] = s;
    }
    storeFloats(rstd, rstds);
    storeFloats(out, result);
  });
}

/** dX = rstd·(g − x̂·mean(g⊙x̂)) + dResidual, g = dOut⊙gamma, x̂ = x·rstd;  dGamma = Σ dOut⊙x̂. */
export function prepareRmsNormBackward(args: RmsNormBackwardArgs): CpuWork {
  const check = new CpuCheck('rmsNormBackward');
  const { dOut, x, gamma, rstd, dX, dGamma, dResidual, accumulate, rows, H } = checkRmsNormBackward(check, args);

  return check.work(() => {
    const dy = floatsOf(dOut), xv = floatsOf(x), g = floatsOf(gamma), s = floatsOf(rstd);
    const dr = dResidual ? floatsOf(dResidual) : undefined;
    const result = new Float64Array(rows * H), gammaSums = new Float64Array(H);
    const xHat = new Float64Array(H), gHat = new Float64Array(H);
    for (let r = 0; r < rows; r++) {
      const row = r * H;
      let meanGX = 0;
      for (let h = 0; h < H; h++) {
        xHat[h] = xv[row + h]! * s[r]!;
        gHat[h] = dy[row + h]! * g[h]!;
        meanGX += gHat[h]! * xHat[h]!;
        gammaSums[h] += dy[row + h]! * xHat[h]!;
      }
      meanGX /= H;
      for (let h = 0; h < H; h++) result[row + h] = s[r]! * (gHat[h]! - xHat[h]! * meanGX) + (dr ? dr[row + h]! : 0);
    }
    storeParameterGradient(dGamma, gammaSums, accumulate);
    storeFloats(dX, result);
  });
}
