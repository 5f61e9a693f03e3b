// Argument checks of the token (+ position) embedding, forward and backward, shared by the backends.
//   tokens i32 (B, L);  tokenTable, dTokenTable (V, H);  positionTable, dPositionTable (P, H), optional;
//   out, dOut (B, L, H) float;  mask u8 (B, L, H)
// The backward's gradient tables may be f32 when dOut is f16/bf16: they then accumulate in f32 (a
// frequent token collects thousands of adds per step; rounding each to 16 bits loses the sum).
// Whether each token lies in [0, V) depends on the data, so that check is the backend's own.

import type { Tensor } from '../../tensor.js';
import type { EmbeddingBackwardArgs, EmbeddingForwardArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { DTypeError } from '../../errors.js';
import { present } from './present.js';

/** An argument's name with its tensor: the forward's and backward's tensors differ in name only. */
type Named<T> = readonly [string, T];

/** Shapes and dtypes, scale, and that positionOffset + L fits in the position table. */
function checkEmbedding<T extends Tensor>(
  check: OpCheck<T>, tokens: T, mask: T, rows: Named<T>, table: Named<T>, positions: Named<T | undefined>,
  args: { scale?: number; positionOffset?: number; vocabStart?: number }, accumulatesInF32 = false,
) {
  if (args.vocabStart !== undefined) check.integer('vocabStart', args.vocabStart, 0);
  check.dtype('tokens', tokens, ['i32']);
  check.shape('tokens', tokens, ['B', 'L']);
  check.float(rows[0], rows[1]);
  if (accumulatesInF32) {
    const [names, tables] = present([table, positions]);
    tables.forEach((t, i) => {
      if (t.dtype !== 'f32' && t.dtype !== rows[1].dtype) {
        throw new DTypeError(`${check.op}: '${names[i]}' has dtype ${t.dtype}; a gradient table must be ${rows[1].dtype} (as '${rows[0]}') or f32`);
      }
    });
  } else {
    check.sameDType(...present([rows, table, positions]));
  }
  check.shape(table[0], table[1], ['V', 'H']);
  check.shape(rows[0], rows[1], ['B', 'L', 'H']);
  check.dtype('mask', mask, ['u8']);
  check.shape('mask', mask, ['B', 'L', 'H']);
  const scale = args.scale ?? 1;
  check.finite('scale', scale);
  const positionOffset = args.positionOffset ?? 0;
  check.integer('positionOffset', positionOffset);
  const seqLen = check.size('L');
  const [positionsName, positionTable] = positions;
  if (positionTable) {
    check.shape(positionsName, positionTable, ['P', 'H']);
    const P = check.size('P');
    if (positionOffset + seqLen > P) check.fail(`positions ${positionOffset}..${positionOffset + seqLen - 1} (positionOffset + L) are past the ${P} rows of '${positionsName}'`);
  }
  return { scale, positionOffset, vocabStart: args.vocabStart, batch: check.size('B'), seqLen, vocab: check.size('V'), hidden: check.size('H') };
}

export function checkEmbeddingForward<T extends Tensor>(check: OpCheck<T>, args: EmbeddingForwardArgs) {
  const tokens = check.tensor('tokens', args.tokens);
  const tokenTable = check.tensor('tokenTable', args.tokenTable);
  const positionTable = check.optional('positionTable', args.positionTable);
  const out = check.tensor('out', args.out);
  const mask = check.tensor('mask', args.mask);
  const sizes = checkEmbedding(check, tokens, mask, ['out', out], ['tokenTable', tokenTable], ['positionTable', positionTable], args);
  check.dropout(args);
  return { tokens, tokenTable, positionTable, out, mask, ...sizes };
}

export function checkEmbeddingBackward<T extends Tensor>(check: OpCheck<T>, args: EmbeddingBackwardArgs) {
  const tokens = check.tensor('tokens', args.tokens);
  const dOut = check.tensor('dOut', args.dOut);
  const mask = check.tensor('mask', args.mask);
  const dTokenTable = check.tensor('dTokenTable', args.dTokenTable);
  const dPositionTable = check.optional('dPositionTable', args.dPositionTable);
  const sizes = checkEmbedding(check, tokens, mask, ['dOut', dOut], ['dTokenTable', dTokenTable], ['dPositionTable', dPositionTable], args, true);
  check.probability('p', args.p);
  return { tokens, dOut, mask, dTokenTable, dPositionTable, ...sizes };
}
