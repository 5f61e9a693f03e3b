// Cross-entropy over a vocabulary split across ranks (backend.ts: VocabShard*), the reference in f64:
//   vocabShardMax    rowMax = max_{j<classes} z_j                     (−∞ for a shard without classes)
//   vocabShardSums   Σ_{j<classes} exp(z_j − M), z_(t − vocabStart) if this shard owns t else 0, Σ z_j
//   vocabShardLoss   lse = M + ln S;  loss = (1−ε)·(lse − z_t) + ε·(lse − Σz / C)   (after the all-reduces)
//   backward         dz_j = gradScale·(exp(z_j − lse) − (1−ε)·[vocabStart + j = t] − ε/C), j < classes
// The same formulas as cross-entropy.ts with the row's max, Σexp, target logit and Σz added over ranks.

import type { VocabShardCrossEntropyBackwardArgs, VocabShardLossArgs, VocabShardMaxArgs, VocabShardSumsArgs } from '../backend.js';
import { checkVocabShardCrossEntropyBackward, checkVocabShardLoss, checkVocabShardMax, checkVocabShardSums } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

/** The row's target, or undefined when ignored; throws for a target outside [0, C). */
function rowTarget(check: CpuCheck, targets: Int32Array, row: number, C: number, ignoreIndex: number | undefined): number | undefined {
  const t = targets[row]!;
  if (t === ignoreIndex) return undefined;
  if (t < 0 || t >= C) check.fail(`'targets'[${row}] = ${t} is outside [0, ${C})${ignoreIndex === undefined ? ' and no ignoreIndex is set' : ` and is not ignoreIndex (${ignoreIndex})`}`);
  return t;
}

export function prepareVocabShardMax(args: VocabShardMaxArgs): CpuWork {
  const check = new CpuCheck('vocabShardMax');
  const { logits, rowMax, classes, rows, Vl } = checkVocabShardMax(check, args);
  return check.work(() => {
    const z = floatsOf(logits), out = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      let m = -Infinity;
      for (let j = 0; j < classes; j++) m = Math.max(m, z[r * Vl + j]!);
      out[r] = m;
    }
    storeFloats(rowMax, out);
  });
}

export function prepareVocabShardSums(args: VocabShardSumsArgs): CpuWork {
  const check = new CpuCheck('vocabShardSums');
  const { logits, targets, rowMax, sums, classes, vocabStart, rows, Vl } = checkVocabShardSums(check, args);
  return check.work(() => {
    const z = floatsOf(logits), t = int32sOf(targets), m = floatsOf(rowMax), out = new Float64Array(3 * rows);
    for (let r = 0; r < rows; r++) {
      let sumExp = 0, sum = 0;
      for (let j = 0; j < classes; j++) { sumExp += Math.exp(z[r * Vl + j]! - m[r]!); sum += z[r * Vl + j]!; }
      const local = t[r]! - vocabStart;
      out[r] = sumExp;
      out[rows + r] = local >= 0 && local < classes ? z[r * Vl + local]! : 0;
      out[2 * rows + r] = sum;
    }
    storeFloats(sums, out);
  });
}

export function prepareVocabShardLoss(args: VocabShardLossArgs): CpuWork {
  const check = new CpuCheck('vocabShardLoss');
  const { rowMax, sums, targets, loss, lse, labelSmoothing: epsilon, ignoreIndex, totalClasses: C, rows } = checkVocabShardLoss(check, args);
  return check.work(() => {
    const m = floatsOf(rowMax), s = floatsOf(sums), t = int32sOf(targets);
    const losses = new Float64Array(rows), lses = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const target = rowTarget(check, t, r, C, ignoreIndex);
      lses[r] = m[r]! + Math.log(s[r]!);
      if (target !== undefined) losses[r] = (1 - epsilon) * (lses[r]! - s[rows + r]!) + epsilon * (lses[r]! - s[2 * rows + r]! / C);
    }
    storeFloats(lse, lses);
    storeFloats(loss, losses);
  });
}

export function prepareVocabShardCrossEntropyBackward(args: VocabShardCrossEntropyBackwardArgs): CpuWork {
  const check = new CpuCheck('vocabShardCrossEntropyBackward');
  const {
    logits, targets, lse, dLogits, classes, vocabStart, gradScale, labelSmoothing: epsilon, ignoreIndex, totalClasses: C, rows, Vl,
  } = checkVocabShardCrossEntropyBackward(check, args);
  return check.work(() => {
    const z = floatsOf(logits), t = int32sOf(targets), saved = floatsOf(lse);
    const result = new Float64Array(rows * Vl);  // zeros for ignored rows and padded columns
    for (let r = 0; r < rows; r++) {
      const target = rowTarget(check, t, r, C, ignoreIndex);
      if (target === undefined) continue;
      for (let j = 0; j < classes; j++) {
        const onehot = vocabStart + j === target ? 1 - epsilon : 0;
        result[r * Vl + j] = gradScale * (Math.exp(z[r * Vl + j]! - saved[r]!) - onehot - epsilon / C);
      }
    }
    storeFloats(dLogits, result);
  });
}
