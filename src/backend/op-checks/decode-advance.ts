// Argument checks of decodeAdvance (a serving step's decode rows moved on to the next step), shared by the backends.
//   sampled i32 (n ≥ rows);  tokens, positions, cachePositions i32 (rows);  record i32 (steps, width ≥ rows);  step i32 (1).

import type { Tensor } from '../../tensor.js';
import type { DecodeAdvanceArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkDecodeAdvance<T extends Tensor>(check: OpCheck<T>, args: DecodeAdvanceArgs) {
  const sampled = check.tensor('sampled', args.sampled);
  const tokens = check.tensor('tokens', args.tokens);
  const positions = check.tensor('positions', args.positions);
  const cachePositions = check.tensor('cachePositions', args.cachePositions);
  const record = check.tensor('record', args.record);
  const step = check.tensor('step', args.step);
  for (const [name, t] of [['sampled', sampled], ['tokens', tokens], ['positions', positions], ['cachePositions', cachePositions], ['record', record], ['step', step]] as const) {
    check.dtype(name, t, ['i32']);
  }
  check.shape('sampled', sampled, ['n']);
  for (const [name, t] of [['tokens', tokens], ['positions', positions], ['cachePositions', cachePositions]] as const) check.shape(name, t, ['rows']);
  check.shape('record', record, ['steps', 'width']);
  check.shape('step', step, [1]);
  const [n, rows, steps, width] = ['n', 'rows', 'steps', 'width'].map((d) => check.size(d)) as [number, number, number, number];
  if (n < rows) check.fail(`'sampled' has ${n} rows, fewer than the ${rows} decode rows`);
  if (width < rows) check.fail(`'record' rows hold ${width} tokens, fewer than the ${rows} decode rows`);
  return { sampled, tokens, positions, cachePositions, record, step, rows, steps, width };
}
