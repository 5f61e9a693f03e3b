// Comparing a backend's output with the reference: relative error of the norm, and "every element
// written" (outputs are poisoned with NaN before the run, so an unwritten element stays NaN).

import type { FloatDType } from '../dtype.js';
import type { HostArray } from '../tensor.js';

/** Relative-norm tolerances by storage dtype (f32 math inside; f16/bf16 rounding of outputs). */
export const TOLERANCE: Record<FloatDType, number> = { f32: 2e-5, f16: 3e-3, bf16: 2e-2 };

export interface Comparison {
  relativeError: number;
  maxAbsError: number;
  worstIndex: number;
  unwritten: number;
}

export function compareArrays(actual: HostArray, expected: HostArray): Comparison {
  if (actual.length !== expected.length) throw new Error(`length ${actual.length} != expected ${expected.length}`);
  let diff2 = 0, ref2 = 0, maxAbs = 0, worst = -1, unwritten = 0;
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!, e = expected[i]!;
    if (Number.isNaN(a) && !Number.isNaN(e)) { unwritten++; continue; }
    if (Number.isNaN(e) && Number.isNaN(a)) continue;
    const d = a - e;
    diff2 += d * d; ref2 += e * e;
    if (Math.abs(d) > maxAbs) { maxAbs = Math.abs(d); worst = i; }
  }
  const relativeError = ref2 === 0 ? Math.sqrt(diff2) : Math.sqrt(diff2 / ref2);
  return { relativeError, maxAbsError: maxAbs, worstIndex: worst, unwritten };
}

export function describe(c: Comparison, actual: HostArray, expected: HostArray): string {
  const i = c.worstIndex;
  return `rel err ${c.relativeError.toExponential(2)}, max abs ${c.maxAbsError.toExponential(2)}` +
    (i >= 0 ? ` at [${i}] (got ${actual[i]}, expected ${expected[i]})` : '') +
    (c.unwritten ? `, ${c.unwritten} elements never written` : '');
}

/**
 * Relative error of one parameter's gradient among a model's: ‖ours − reference‖ / max(‖reference‖,
 * floor), with floor = 1e-3 · (the largest reference gradient norm of the model). The floor matters
 * for gradients that are zero in exact arithmetic — an attention key bias shifts every score of a
 * query equally, which the softmax ignores — where both sides hold rounding noise and a plain
 * relative error would compare noise with noise.
 */
export function gradientRelError(ours: ArrayLike<number>, reference: ArrayLike<number>, floor: number): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < reference.length; i++) { diff += (ours[i]! - reference[i]!) ** 2; norm += reference[i]! ** 2; }
  return Math.sqrt(diff) / Math.max(Math.sqrt(norm), floor, 1e-30);
}

/** 1e-3 × the largest L2 norm among a model's reference gradients (the floor for gradientRelError). */
export function gradientErrorFloor(references: Iterable<ArrayLike<number>>): number {
  let largest = 0;
  for (const g of references) {
    let norm = 0;
    for (let i = 0; i < g.length; i++) norm += g[i]! ** 2;
    largest = Math.max(largest, Math.sqrt(norm));
  }
  return 1e-3 * largest;
}
