// embedTokens: out[r] = scale·tokenTable[tokens[r]] + positionTable[positions[r]] (the position term
// only with positions). Ids are read when the op runs (a replayed graph sees the current ones) and
// checked against their tables then: an id outside is an error naming the row.

import type { EmbedTokensArgs } from '../backend.js';
import { checkEmbedTokens } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

export function prepareEmbedTokens(args: EmbedTokensArgs): CpuWork {
  const check = new CpuCheck('embedTokens');
  const { tokens, tokenTable, positions, positionTable, out, scale, rows: R, vocab: V, hidden: H, positionCount: P } = checkEmbedTokens(check, args);

  return check.work(() => {
    const ids = int32sOf(tokens), table = floatsOf(tokenTable);
    const where = positions ? int32sOf(positions) : undefined, positionRows = positionTable ? floatsOf(positionTable) : undefined;
    const result = new Float64Array(R * H);
    for (let r = 0; r < R; r++) {
      const id = ids[r]!;
      if (id < 0 || id >= V) check.fail(`'tokens'[${r}] = ${id} is outside [0, ${V})`);
      const p = where ? where[r]! : 0;
      if (where && (p < 0 || p >= P)) check.fail(`'positions'[${r}] = ${p} is outside [0, ${P}) (the rows of 'positionTable')`);
      for (let h = 0; h < H; h++) {
        result[r * H + h] = scale * table[id * H + h]! + (positionRows ? positionRows[p * H + h]! : 0);
      }
    }
    storeFloats(out, result);
  });
}
