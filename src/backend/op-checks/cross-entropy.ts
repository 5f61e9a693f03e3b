// Argument checks of cross-entropy with label smoothing, forward and backward, shared by the backends.
//   logits, dLogits (rows, V) float;  targets i32 (rows);  loss, lse f32 (rows);
//   classes C in [1, V] (default V): only the first C columns count, the rest are padding.
// Whether each target lies in [0, C) depends on the data, so that check is the backend's own.

import type { Tensor } from '../../tensor.js';
import type { CrossEntropyBackwardArgs, CrossEntropyForwardArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

/** ε in [0, 1); ignoreIndex, when given, an i32; at least one class; classes an integer in [1, V]. */
function checkLogitsAndTargets<T extends Tensor>(check: OpCheck<T>, logits: T, targets: T, args: { labelSmoothing?: number; ignoreIndex?: number; classes?: number }) {
  check.float('logits', logits);
  check.rows('logits', logits, 'rows', 'V');
  check.dtype('targets', targets, ['i32']);
  check.shape('targets', targets, ['rows']);
  const labelSmoothing = args.labelSmoothing ?? 0;
  check.probability('labelSmoothing', labelSmoothing);
  const ignoreIndex = args.ignoreIndex;
  if (ignoreIndex !== undefined) {
    check.integer('ignoreIndex', ignoreIndex, -(2 ** 31));
    if (ignoreIndex >= 2 ** 31) check.fail(`'ignoreIndex' must fit in 32 bits, got ${ignoreIndex}`);
  }
  const V = check.size('V');
  if (V < 1) check.fail("'logits' has no classes (V = 0)");
  const classes = args.classes ?? V;
  check.integer('classes', classes, 1);
  if (classes > V) check.fail(`'classes' must be at most the logits' last dimension (${V}), got ${classes}`);
  return { labelSmoothing, ignoreIndex, classes };
}

/** A per-row f32 output or saved value (rows). */
function checkPerRow<T extends Tensor>(check: OpCheck<T>, name: string, t: T): void {
  check.dtype(name, t, ['f32']);
  check.shape(name, t, ['rows']);
}

export function checkCrossEntropyForward<T extends Tensor>(check: OpCheck<T>, args: CrossEntropyForwardArgs) {
  const logits = check.tensor('logits', args.logits);
  const targets = check.tensor('targets', args.targets);
  const loss = check.tensor('loss', args.loss);
  const lse = check.tensor('lse', args.lse);
  const options = checkLogitsAndTargets(check, logits, targets, args);
  checkPerRow(check, 'loss', loss);
  checkPerRow(check, 'lse', lse);
  let gradient: { dLogits: T; gradScale: number } | undefined;
  if (args.dLogits !== undefined) {
    const dLogits = check.tensor('dLogits', args.dLogits);
    check.sameDType(['logits', 'dLogits'], [logits, dLogits]);
    check.rows('dLogits', dLogits, 'rows', 'V');
    if (args.gradScale === undefined) check.fail("'dLogits' needs 'gradScale' (the backward's gradient scale)");
    check.finite('gradScale', args.gradScale);
    gradient = { dLogits, gradScale: args.gradScale };
  } else if (args.gradScale !== undefined) {
    check.fail("'gradScale' was given without 'dLogits'");
  }
  return { logits, targets, loss, lse, ...options, gradient, rows: check.size('rows'), V: check.size('V') };
}

export function checkCrossEntropyBackward<T extends Tensor>(check: OpCheck<T>, args: CrossEntropyBackwardArgs) {
  const logits = check.tensor('logits', args.logits);
  const targets = check.tensor('targets', args.targets);
  const lse = check.tensor('lse', args.lse);
  const dLogits = check.tensor('dLogits', args.dLogits);
  const options = checkLogitsAndTargets(check, logits, targets, args);
  checkPerRow(check, 'lse', lse);
  check.sameDType(['logits', 'dLogits'], [logits, dLogits]);
  check.rows('dLogits', dLogits, 'rows', 'V');
  check.finite('gradScale', args.gradScale);
  return { logits, targets, lse, dLogits, gradScale: args.gradScale, ...options, rows: check.size('rows'), V: check.size('V') };
}
