// Shared helpers for the CPU backend tests: seeded random data, closeness checks, central finite
// differences, and an assertion that a call is rejected with a message naming the op and argument.

import assert from 'node:assert/strict';

/**
 * Uniform values in [lo, hi) from a seeded generator (mulberry32), so failures reproduce. They are
 * rounded to float32, so an f32 tensor holds exactly these values.
 */
export function randomValues(seed: number, n: number, lo = -1, hi = 1): number[] {
  let state = seed >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    let t = (state = (state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out.push(Math.fround(lo + (hi - lo) * (((t ^ (t >>> 14)) >>> 0) / 4294967296)));
  }
  return out;
}

/** Each |actual − expected| <= tolerance·max(1, |expected|); the message names the first miss. */
export function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number, label = 'values'): void {
  assert.equal(actual.length, expected.length, `${label}: length ${actual.length} vs expected ${expected.length}`);
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!, e = expected[i]!;
    if (!(Math.abs(a - e) <= tolerance * Math.max(1, Math.abs(e)))) {
      assert.fail(`${label}[${i}] = ${a} but expected ${e} (tolerance ${tolerance})`);
    }
  }
}

/** Σ weights ⊙ values in float64: a scalar "loss" whose gradient with respect to values is weights. */
export function weightedSum(values: ArrayLike<number>, weights: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < values.length; i++) s += values[i]! * weights[i]!;
  return s;
}

/**
 * Central differences of `loss` with respect to each of `point`'s entries. The perturbed points are
 * rounded to float32 (the tensors are f32), and the true step between them is the denominator.
 */
export function numericGradient(loss: (point: number[]) => number, point: readonly number[], step = 1e-2): number[] {
  return point.map((x, i) => {
    const up = Math.fround(x + step), down = Math.fround(x - step);
    const at = (value: number): number => loss(point.map((p, j) => (j === i ? value : p)));
    return (at(up) - at(down)) / (up - down);
  });
}

/** The call throws an error of `type` whose message starts with `op:` and names `'argument'`. */
export function assertRejects(call: () => unknown, op: string, argument: string, type?: new (...args: never[]) => Error): void {
  assert.throws(call, (error: unknown) => {
    assert.ok(error instanceof Error, `expected an Error, got ${String(error)}`);
    if (type) assert.ok(error instanceof type, `expected ${type.name}, got ${error.name}: ${error.message}`);
    assert.ok(error.message.startsWith(`${op}:`), `message does not name the op '${op}': ${error.message}`);
    assert.ok(error.message.includes(`'${argument}'`), `message does not name the argument '${argument}': ${error.message}`);
    return true;
  });
}
