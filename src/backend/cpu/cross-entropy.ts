// Cross-entropy with label smoothing over logits (rows, V), targets i32 (rows), forward and backward.
//   lse  = log Σ_j exp z_j                              (float64, max-shifted; saved as f32)
//   loss = (1−ε)·(lse − z_t) + ε·(lse − mean_j z_j)     — the smoothed target puts 1−ε on t and
//          ε/V on every class, and Σ_j (ε/V)(lse − z_j) = ε(lse − mean z)
//   dz   = gradScale·(softmax(z) − (1−ε)·onehot(t) − ε/V), softmax(z) = exp(z − lse) with the saved lse
// Rows whose target is ignoreIndex get loss 0, lse still computed, and zero gradient. Any other
// target outside [0, V) is an error here (the GPU writes NaN instead).

import type { CrossEntropyBackwardArgs, CrossEntropyForwardArgs } from '../backend.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

interface Smoothing { epsilon: number; ignoreIndex: number | undefined }

function checkTargets(check: CpuCheck, logits: CpuTensor, targets: CpuTensor, args: { labelSmoothing?: number; ignoreIndex?: number }): Smoothing {
  check.float('logits', logits);
  check.rows('logits', logits, 'rows', 'V');
  check.dtype('targets', targets, ['i32']);
  check.shape('targets', targets, ['rows']);
  const epsilon = args.labelSmoothing ?? 0;
  check.probability('labelSmoothing', epsilon);
  if (args.ignoreIndex !== undefined) check.integer('ignoreIndex', args.ignoreIndex, -(2 ** 31));
  if (check.size('V') < 1) check.fail("'logits' has no classes (V = 0)");
  return { epsilon, ignoreIndex: args.ignoreIndex };
}

/** The row's target, or undefined when the row is ignored; throws for a target outside [0, V). */
function rowTarget(check: CpuCheck, targets: Int32Array, row: number, V: number, ignoreIndex: number | undefined): number | undefined {
  const t = targets[row]!;
  if (t === ignoreIndex) return undefined;
  if (t < 0 || t >= V) {
    check.fail(`'targets'[${row}] = ${t} is outside [0, ${V})${ignoreIndex === undefined ? ' and no ignoreIndex is set' : ` and is not ignoreIndex (${ignoreIndex})`}`);
  }
  return t;
}

export function prepareCrossEntropyForward(args: CrossEntropyForwardArgs): CpuWork {
  const check = new CpuCheck('crossEntropyForward');
  const logits = check.tensor('logits', args.logits);
  const targets = check.tensor('targets', args.targets);
  const loss = check.tensor('loss', args.loss);
  const lse = check.tensor('lse', args.lse);
  const { epsilon, ignoreIndex } = checkTargets(check, logits, targets, args);
  for (const [name, t] of [['loss', loss], ['lse', lse]] as const) {
    check.dtype(name, t, ['f32']);
    check.shape(name, t, ['rows']);
  }
  const [rows, V] = [check.size('rows'), check.size('V')];

  return check.work(() => {
    const z = floatsOf(logits), tv = int32sOf(targets);
    const losses = new Float64Array(rows), lses = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const target = rowTarget(check, tv, r, V, ignoreIndex);
      const row = r * V;
      let max = -Infinity, sum = 0, sumExp = 0;
      for (let j = 0; j < V; j++) max = Math.max(max, z[row + j]!);
      for (let j = 0; j < V; j++) { sumExp += Math.exp(z[row + j]! - max); sum += z[row + j]!; }
      lses[r] = max + Math.log(sumExp);
      if (target !== undefined) losses[r] = (1 - epsilon) * (lses[r]! - z[row + target]!) + epsilon * (lses[r]! - sum / V);
    }
    storeFloats(lse, lses);
    storeFloats(loss, losses);
  });
}

export function prepareCrossEntropyBackward(args: CrossEntropyBackwardArgs): CpuWork {
  const check = new CpuCheck('crossEntropyBackward');
  const logits = check.tensor('logits', args.logits);
  const targets = check.tensor('targets', args.targets);
  const lse = check.tensor('lse', args.lse);
  const dLogits = check.tensor('dLogits', args.dLogits);
  const { epsilon, ignoreIndex } = checkTargets(check, logits, targets, args);
  check.dtype('lse', lse, ['f32']);
  check.shape('lse', lse, ['rows']);
  check.sameDType(['logits', 'dLogits'], [logits, dLogits]);
  check.rows('dLogits', dLogits, 'rows', 'V');
  check.finite('gradScale', args.gradScale);
  const gradScale = args.gradScale;
  const [rows, V] = [check.size('rows'), check.size('V')];

  return check.work(() => {
    const z = floatsOf(logits), tv = int32sOf(targets), saved = floatsOf(lse);
    const result = new Float64Array(rows * V); // dLogits may alias logits: write at the end
    for (let r = 0; r < rows; r++) {
      const target = rowTarget(check, tv, r, V, ignoreIndex);
      if (target === undefined) continue;
      const row = r * V;
      for (let j = 0; j < V; j++) {
        const onehot = j === target ? 1 - epsilon : 0;
        result[row + j] = gradScale * (Math.exp(z[row + j]! - saved[r]!) - onehot - epsilon / V);
      }
    }
    storeFloats(dLogits, result);
  });
}
