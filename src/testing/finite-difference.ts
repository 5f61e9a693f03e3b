// Finite-difference checks of a model's hand-written backward: for each named parameter, the element
// with the largest analytic gradient and one more are nudged by ±h and the central difference of the
// mean loss is compared with the analytic gradient (the gradient workspace times the step's
// gradScale, which turns it into the gradient of the mean loss).

import type { ParameterStore } from '../nn/parameters.js';
import type { HostBatch, StepRunner } from '../train/step-runner.js';

export interface FiniteDifferenceOptions {
  readonly runner: StepRunner;
  readonly params: ParameterStore;
  readonly batch: HostBatch;
  /** Parameters to probe (by name). */
  readonly probes: readonly string[];
  /** The analytic gradients' scale (StepResult.gradScale of the step that wrote them). */
  readonly gradScale: number;
  readonly h?: number;
  /** The second element probed, from the first's index and the tensor's size. */
  readonly secondIndex?: (big: number, length: number) => number;
}

export interface FiniteDifferenceFailure {
  readonly name: string;
  readonly index: number;
  readonly analytic: number;
  readonly numeric: number;
  readonly error: number;
}

/**
 * Returns every probe whose relative error |numeric − analytic| / max(1e-3, |numeric|, |analytic|)
 * exceeds `tolerance` (plus any probed tensor whose gradient is all zeros, with error Infinity).
 */
export function finiteDifferenceFailures(o: FiniteDifferenceOptions, tolerance = 2e-2): FiniteDifferenceFailure[] {
  const backend = o.params.backend, h = o.h ?? 3e-3;
  const second = o.secondIndex ?? ((big, length) => (big * 5 + 1) % length);
  const failures: FiniteDifferenceFailure[] = [];
  for (const name of o.probes) {
    const { value, grad } = o.params.param(name);
    const values = backend.download(value) as Float32Array, grads = backend.download(grad) as Float32Array;
    let big = 0;
    for (let i = 1; i < grads.length; i++) if (Math.abs(grads[i]!) > Math.abs(grads[big]!)) big = i;
    if (grads[big] === 0) { failures.push({ name, index: big, analytic: 0, numeric: NaN, error: Infinity }); continue; }
    for (const i of [big, second(big, grads.length)]) {
      const original = values[i]!;
      values[i] = original + h; backend.upload(value, values);
      const up = o.runner.evalLoss(o.batch).loss;
      values[i] = original - h; backend.upload(value, values);
      const down = o.runner.evalLoss(o.batch).loss;
      values[i] = original; backend.upload(value, values);
      const numeric = (up - down) / (2 * h), analytic = grads[i]! * o.gradScale;
      const error = Math.abs(numeric - analytic) / Math.max(1e-3, Math.abs(numeric), Math.abs(analytic));
      if (error > tolerance) failures.push({ name, index: i, analytic, numeric, error });
    }
  }
  return failures;
}

export function describeFailures(failures: readonly FiniteDifferenceFailure[]): string {
  return failures.map((f) => `${f.name}[${f.index}]: analytic ${f.analytic}, finite difference ${f.numeric} (rel err ${f.error.toFixed(4)})`).join('\n');
}
