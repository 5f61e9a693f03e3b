// Argument checks of feedTokens (a pipelined serving step's rows fed from the previous step's samples), shared by the backends.
//   sampled i32 (n);  from, tokens i32 (rows).

import type { Tensor } from '../../tensor.js';
import type { FeedTokensArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkFeedTokens<T extends Tensor>(check: OpCheck<T>, args: FeedTokensArgs) {
  const sampled = check.tensor('sampled', args.sampled);
  const from = check.tensor('from', args.from);
  const tokens = check.tensor('tokens', args.tokens);
  for (const [name, t] of [['sampled', sampled], ['from', from], ['tokens', tokens]] as const) check.dtype(name, t, ['i32']);
  check.shape('sampled', sampled, ['n']);
  check.shape('from', from, ['rows']);
  check.shape('tokens', tokens, ['rows']);
  const [n, rows] = ['n', 'rows'].map((d) => check.size(d)) as [number, number];
  return { sampled, from, tokens, n, rows };
}
