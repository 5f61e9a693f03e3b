// Argument checks of embedTokens (a row gather with optional position rows), shared by the backends.
//   tokens i32 (R);  tokenTable (V, H);  positions i32 (R) with positionTable (P, H), both or neither;  out (R, H)
// Whether each id lies inside its table depends on the data: that check is the backend's own.

import type { Tensor } from '../../tensor.js';
import type { EmbedTokensArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { present } from './present.js';

export function checkEmbedTokens<T extends Tensor>(check: OpCheck<T>, args: EmbedTokensArgs) {
  const tokens = check.tensor('tokens', args.tokens);
  const tokenTable = check.tensor('tokenTable', args.tokenTable);
  const positions = check.optional('positions', args.positions);
  const positionTable = check.optional('positionTable', args.positionTable);
  const out = check.tensor('out', args.out);
  if ((positions === undefined) !== (positionTable === undefined)) {
    check.fail(`'positions' and 'positionTable' go together: pass both or neither (got only '${positions ? 'positions' : 'positionTable'}')`);
  }
  check.dtype('tokens', tokens, ['i32']);
  check.shape('tokens', tokens, ['R']);
  check.float('tokenTable', tokenTable);
  check.sameDType(...present([['tokenTable', tokenTable], ['positionTable', positionTable], ['out', out]]));
  check.shape('tokenTable', tokenTable, ['V', 'H']);
  check.shape('out', out, ['R', 'H']);
  if (positions && positionTable) {
    check.dtype('positions', positions, ['i32']);
    check.shape('positions', positions, ['R']);
    check.shape('positionTable', positionTable, ['P', 'H']);
  }
  const scale = args.scale ?? 1;
  check.finite('scale', scale);
  return {
    tokens, tokenTable, positions, positionTable, out, scale,
    rows: check.size('R'), vocab: check.size('V'), hidden: check.size('H'), positionCount: positionTable ? check.size('P') : 0,
  };
}
