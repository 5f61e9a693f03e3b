// feedTokens: a pipelined serving step's rows fed from the previous step's samples (backend.ts has the contract).

import { ArgumentError } from '../../errors.js';
import type { FeedTokensArgs } from '../backend.js';
import { checkFeedTokens } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { int32sOf } from './tensor.js';

export function prepareFeedTokens(args: FeedTokensArgs): CpuWork {
  const check = new CpuCheck('feedTokens');
  const { sampled, from, tokens, n, rows } = checkFeedTokens(check, args);
  return check.work(() => {
    const s = int32sOf(sampled), f = int32sOf(from), t = int32sOf(tokens);
    for (let r = 0; r < rows; r++) {
      const i = f[r]!;
      if (i < 0) continue;
      if (i >= n) throw new ArgumentError(`feedTokens: 'from'[${r}] = ${i} is past the ${n} sampled rows`);
      t[r] = s[i]!;
    }
  });
}
