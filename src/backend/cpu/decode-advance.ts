// decodeAdvance: a serving step's decode rows moved on to the next step (backend.ts has the contract).

import type { DecodeAdvanceArgs } from '../backend.js';
import { checkDecodeAdvance } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { int32sOf } from './tensor.js';

export function prepareDecodeAdvance(args: DecodeAdvanceArgs): CpuWork {
  const check = new CpuCheck('decodeAdvance');
  const { sampled, tokens, positions, cachePositions, record, step, rows, steps, width } = checkDecodeAdvance(check, args);
  return check.work(() => {
    const s = int32sOf(sampled), t = int32sOf(tokens), p = int32sOf(positions), c = int32sOf(cachePositions);
    const out = int32sOf(record), counter = int32sOf(step), idx = counter[0]!;
    for (let r = 0; r < rows; r++) {
      if (idx >= 0 && idx < steps) out[idx * width + r] = s[r]!;
      if (c[r]! >= 0) {
        t[r] = s[r]!;
        p[r]! += 1;
        c[r]! += 1;
      }
    }
    counter[0] = idx + 1;
  });
}
