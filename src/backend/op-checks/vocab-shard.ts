// Argument checks of the vocab-parallel cross-entropy ops (backend.ts: VocabShard*), shared by the backends.
//   logits, dLogits (rows, Vl) float: this rank's columns [vocabStart, vocabStart + Vl) of the full logits;
//   classes in [0, Vl] (default Vl): its real columns; rowMax, lse, loss f32 (rows); sums f32 (3, rows);
//   targets i32 (rows), global ids; totalClasses ≥ 1, the whole vocabulary.
// Whether each target lies in [0, totalClasses) depends on the data, so that check is the backend's own.

import type { Tensor } from '../../tensor.js';
import type { VocabShardCrossEntropyBackwardArgs, VocabShardLossArgs, VocabShardMaxArgs, VocabShardSumsArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

/** The shard's logits [rows, Vl] and its real columns `classes` in [0, Vl]. */
function checkShardLogits<T extends Tensor>(check: OpCheck<T>, logits: T, classes: number | undefined): number {
  check.float('logits', logits);
  check.rows('logits', logits, 'rows', 'Vl');
  const Vl = check.size('Vl');
  const c = classes ?? Vl;
  check.integer('classes', c, 0);
  if (c > Vl) check.fail(`'classes' must be at most the logits' last dimension (${Vl}), got ${c}`);
  return c;
}

function checkPerRow<T extends Tensor>(check: OpCheck<T>, name: string, t: T): void {
  check.dtype(name, t, ['f32']);
  check.shape(name, t, ['rows']);
}

function checkTargets<T extends Tensor>(check: OpCheck<T>, targets: T): void {
  check.dtype('targets', targets, ['i32']);
  check.shape('targets', targets, ['rows']);
}

/** ε in [0, 1); ignoreIndex an i32 when given; totalClasses ≥ 1. */
function checkLossOptions<T extends Tensor>(check: OpCheck<T>, args: { labelSmoothing?: number; ignoreIndex?: number; totalClasses: number }) {
  const labelSmoothing = args.labelSmoothing ?? 0;
  check.probability('labelSmoothing', labelSmoothing);
  const ignoreIndex = args.ignoreIndex;
  if (ignoreIndex !== undefined) {
    check.integer('ignoreIndex', ignoreIndex, -(2 ** 31));
    if (ignoreIndex >= 2 ** 31) check.fail(`'ignoreIndex' must fit in 32 bits, got ${ignoreIndex}`);
  }
  check.integer('totalClasses', args.totalClasses, 1);
  return { labelSmoothing, ignoreIndex, totalClasses: args.totalClasses };
}

export function checkVocabShardMax<T extends Tensor>(check: OpCheck<T>, args: VocabShardMaxArgs) {
  const logits = check.tensor('logits', args.logits);
  const rowMax = check.tensor('rowMax', args.rowMax);
  const classes = checkShardLogits(check, logits, args.classes);
  checkPerRow(check, 'rowMax', rowMax);
  return { logits, rowMax, classes, rows: check.size('rows'), Vl: check.size('Vl') };
}

export function checkVocabShardSums<T extends Tensor>(check: OpCheck<T>, args: VocabShardSumsArgs) {
  const logits = check.tensor('logits', args.logits);
  const targets = check.tensor('targets', args.targets);
  const rowMax = check.tensor('rowMax', args.rowMax);
  const sums = check.tensor('sums', args.sums);
  const classes = checkShardLogits(check, logits, args.classes);
  checkTargets(check, targets);
  checkPerRow(check, 'rowMax', rowMax);
  check.dtype('sums', sums, ['f32']);
  check.shape('sums', sums, [3, 'rows']);
  check.integer('vocabStart', args.vocabStart, 0);
  return { logits, targets, rowMax, sums, classes, vocabStart: args.vocabStart, rows: check.size('rows'), Vl: check.size('Vl') };
}

export function checkVocabShardLoss<T extends Tensor>(check: OpCheck<T>, args: VocabShardLossArgs) {
  const rowMax = check.tensor('rowMax', args.rowMax);
  const sums = check.tensor('sums', args.sums);
  const targets = check.tensor('targets', args.targets);
  const loss = check.tensor('loss', args.loss);
  const lse = check.tensor('lse', args.lse);
  checkPerRow(check, 'rowMax', rowMax);
  check.dtype('sums', sums, ['f32']);
  check.shape('sums', sums, [3, 'rows']);
  checkTargets(check, targets);
  checkPerRow(check, 'loss', loss);
  checkPerRow(check, 'lse', lse);
  return { rowMax, sums, targets, loss, lse, ...checkLossOptions(check, args), rows: check.size('rows') };
}

export function checkVocabShardCrossEntropyBackward<T extends Tensor>(check: OpCheck<T>, args: VocabShardCrossEntropyBackwardArgs) {
  const logits = check.tensor('logits', args.logits);
  const targets = check.tensor('targets', args.targets);
  const lse = check.tensor('lse', args.lse);
  const dLogits = check.tensor('dLogits', args.dLogits);
  const classes = checkShardLogits(check, logits, args.classes);
  checkTargets(check, targets);
  checkPerRow(check, 'lse', lse);
  check.sameDType(['logits', 'dLogits'], [logits, dLogits]);
  check.rows('dLogits', dLogits, 'rows', 'Vl');
  check.finite('gradScale', args.gradScale);
  check.integer('vocabStart', args.vocabStart, 0);
  return {
    logits, targets, lse, dLogits, classes, vocabStart: args.vocabStart, gradScale: args.gradScale,
    ...checkLossOptions(check, args), rows: check.size('rows'), Vl: check.size('Vl'),
  };
}
