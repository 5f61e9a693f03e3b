// Cross-entropy with label smoothing over logits (rows, V), targets i32 (rows), forward and backward.
// Only the first C = classes columns (default V) count; columns [C, V) are padding (llm.c's padded
// vocabulary) that the loss never sees.
//   lse  = log Σ_{j<C} exp z_j                          (float64, max-shifted; saved as f32)
//   loss = (1−ε)·(lse − z_t) + ε·(lse − mean_{j<C} z_j) — the smoothed target puts 1−ε on t and
//          ε/C on every class, and Σ_{j<C} (ε/C)(lse − z_j) = ε(lse − mean z)
//   dz_j = gradScale·(softmax(z)_j − (1−ε)·onehot(t)_j − ε/C) for j < C, with softmax(z) = exp(z − lse)
//          from the saved lse; dz_j = 0 for padded columns j ≥ C
// Rows whose target is ignoreIndex get loss 0, lse still computed, and zero gradient. Any other
// target outside [0, C) is an error here (the GPU writes NaN instead).

import type { CrossEntropyBackwardArgs, CrossEntropyForwardArgs } from '../backend.js';
import { checkCrossEntropyBackward, checkCrossEntropyForward } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

/** The row's target, or undefined when the row is ignored; throws for a target outside [0, C). */
function rowTarget(check: CpuCheck, targets: Int32Array, row: number, C: number, ignoreIndex: number | undefined): number | undefined {
  const t = targets[row]!;
  if (t === ignoreIndex) return undefined;
  if (t < 0 || t >= C) {
    check.fail(`'targets'[${row}] = ${t} is outside [0, ${C})${ignoreIndex === undefined ? ' and no ignoreIndex is set' : ` and is not ignoreIndex (${ignoreIndex})`}`);
  }
  return t;
}

export function prepareCrossEntropyForward(args: CrossEntropyForwardArgs): CpuWork {
  const check = new CpuCheck('crossEntropyForward');
  const { logits, targets, loss, lse, labelSmoothing: epsilon, ignoreIndex, rows, V, classes: C, gradient } = checkCrossEntropyForward(check, args);

  return check.work(() => {
    const z = floatsOf(logits), tv = int32sOf(targets);
    const losses = new Float64Array(rows), lses = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const target = rowTarget(check, tv, r, C, ignoreIndex);
      const row = r * V;
      let max = -Infinity, sum = 0, sumExp = 0;
      for (let j = 0; j < C; j++) max = Math.max(max, z[row + j]!);
      for (let j = 0; j < C; j++) { sumExp += Math.exp(z[row + j]! - max); sum += z[row + j]!; }
      lses[r] = max + Math.log(sumExp);
      if (target !== undefined) losses[r] = (1 - epsilon) * (lses[r]! - z[row + target]!) + epsilon * (lses[r]! - sum / C);
    }
    storeFloats(lse, lses);
    storeFloats(loss, losses);
    // Fused: the backward's gradient from the lse as stored (f32), exactly as crossEntropyBackward reads it.
    if (gradient) storeFloats(gradient.dLogits, gradientRows(check, z, tv, Float32Array.from(lses), gradient.gradScale, epsilon, ignoreIndex, rows, V, C));
  });
}

export function prepareCrossEntropyBackward(args: CrossEntropyBackwardArgs): CpuWork {
  const check = new CpuCheck('crossEntropyBackward');
  const { logits, targets, lse, dLogits, gradScale, labelSmoothing: epsilon, ignoreIndex, rows, V, classes: C } = checkCrossEntropyBackward(check, args);

  return check.work(() => {
    // dLogits may alias logits: the gradient is computed in full before it is stored.
    storeFloats(dLogits, gradientRows(check, floatsOf(logits), int32sOf(targets), floatsOf(lse), gradScale, epsilon, ignoreIndex, rows, V, C));
  });
}

/** dz for every row from the saved lse; zeros where nothing is written (ignored rows, padded columns). */
function gradientRows(
  check: CpuCheck, z: ArrayLike<number>, tv: Int32Array, saved: ArrayLike<number>, gradScale: number, epsilon: number,
  ignoreIndex: number | undefined, rows: number, V: number, C: number,
): Float64Array {
  const result = new Float64Array(rows * V);
  for (let r = 0; r < rows; r++) {
    const target = rowTarget(check, tv, r, C, ignoreIndex);
    if (target === undefined) continue;
    const row = r * V;
    for (let j = 0; j < C; j++) {
      const onehot = j === target ? 1 - epsilon : 0;
      result[row + j] = gradScale * (Math.exp(z[row + j]! - saved[r]!) - onehot - epsilon / C);
    }
  }
  return result;
}
