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
