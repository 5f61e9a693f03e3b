// LayerNorm and RMSNorm over the last dimension, forward and backward.
//   x, out, dOut, dX, dResidual (rows, H);  gamma, beta, dGamma, dBeta (H);  mean, rstd f32 (rows)
// Statistics are computed in float64 (two-pass variance, biased: divided by H) and saved as f32;
// the backward reads the saved f32 statistics, as the GPU's does. With `accumulate`, dGamma and
// dBeta are added to (their old value + this call's sum, rounded once); otherwise overwritten.

import type { LayerNormBackwardArgs, LayerNormForwardArgs, RmsNormBackwardArgs, RmsNormForwardArgs } from '../backend.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { floatsOf, storeFloats } from './tensor.js';

function checkStatistic(check: CpuCheck, name: string, t: CpuTensor): void {
  check.dtype(name, t, ['f32']);
  check.shape(name, t, ['rows']);
}

/** The float tensors of a norm backward (dBeta only for LayerNorm; dResidual optional). */
interface NormBackwardTensors {
  dOut: CpuTensor; x: CpuTensor; gamma: CpuTensor; dX: CpuTensor; dGamma: CpuTensor; dBeta?: CpuTensor; dResidual?: CpuTensor;
}

function checkBackward(check: CpuCheck, t: NormBackwardTensors): void {
  const given = Object.entries(t).filter((entry): entry is [string, CpuTensor] => entry[1] !== undefined);
  check.float('dOut', t.dOut);
  check.sameDType(given.map(([name]) => name), given.map(([, tensor]) => tensor));
  check.rows('dOut', t.dOut, 'rows', 'H');
  check.rows('x', t.x, 'rows', 'H');
  check.shape('gamma', t.gamma, ['H']);
  check.rows('dX', t.dX, 'rows', 'H');
  check.shape('dGamma', t.dGamma, ['H']);
  if (t.dBeta) check.shape('dBeta', t.dBeta, ['H']);
  if (t.dResidual) check.rows('dResidual', t.dResidual, 'rows', 'H');
  if (check.size('H') < 1) check.fail("'dOut' has an empty last dimension (H = 0)");
}

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
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const beta = check.tensor('beta', args.beta);
  const out = check.tensor('out', args.out);
  const mean = check.tensor('mean', args.mean);
  const rstd = check.tensor('rstd', args.rstd);
  check.float('x', x);
  check.sameDType(['x', 'gamma', 'beta', 'out'], [x, gamma, beta, out]);
  check.rows('x', x, 'rows', 'H');
  check.shape('gamma', gamma, ['H']);
  check.shape('beta', beta, ['H']);
  check.rows('out', out, 'rows', 'H');
  checkStatistic(check, 'mean', mean);
  checkStatistic(check, 'rstd', rstd);
  check.nonNegative('eps', args.eps);
  const [rows, H] = [check.size('rows'), check.size('H')];
  if (H < 1) check.fail("'x' has an empty last dimension (H = 0)");
  const eps = args.eps;

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
  const dOut = check.tensor('dOut', args.dOut);
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const dX = check.tensor('dX', args.dX);
  const dGamma = check.tensor('dGamma', args.dGamma);
  const dBeta = check.tensor('dBeta', args.dBeta);
  const mean = check.tensor('mean', args.mean);
  const rstd = check.tensor('rstd', args.rstd);
  const dResidual = check.optional('dResidual', args.dResidual);
  checkBackward(check, { dOut, x, gamma, dX, dGamma, dBeta, dResidual });
  checkStatistic(check, 'mean', mean);
  checkStatistic(check, 'rstd', rstd);
  const [rows, H] = [check.size('rows'), check.size('H')];
  const accumulate = args.accumulate ?? false;

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
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const out = check.tensor('out', args.out);
  const rstd = check.tensor('rstd', args.rstd);
  check.float('x', x);
  check.sameDType(['x', 'gamma', 'out'], [x, gamma, out]);
  check.rows('x', x, 'rows', 'H');
  check.shape('gamma', gamma, ['H']);
  check.rows('out', out, 'rows', 'H');
  checkStatistic(check, 'rstd', rstd);
  check.nonNegative('eps', args.eps);
  const [rows, H] = [check.size('rows'), check.size('H')];
  if (H < 1) check.fail("'x' has an empty last dimension (H = 0)");
  const eps = args.eps;

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
  const dOut = check.tensor('dOut', args.dOut);
  const x = check.tensor('x', args.x);
  const gamma = check.tensor('gamma', args.gamma);
  const dX = check.tensor('dX', args.dX);
  const dGamma = check.tensor('dGamma', args.dGamma);
  const rstd = check.tensor('rstd', args.rstd);
  const dResidual = check.optional('dResidual', args.dResidual);
  checkBackward(check, { dOut, x, gamma, dX, dGamma, dResidual });
  checkStatistic(check, 'rstd', rstd);
  const [rows, H] = [check.size('rows'), check.size('H')];
  const accumulate = args.accumulate ?? false;

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
