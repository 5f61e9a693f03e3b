// Checks of the RMS norm split across two products (backend.ts RowNormSquares, RowNormScale): the
// producer's gamma, scaled output and partial sums of squares; the consumer's sums and eps.

import type { RowNormScale, RowNormSquares } from '../backend.js';
import { rowSquareSlots } from '../backend.js';
import type { Tensor } from '../../tensor.js';
import type { OpCheck } from '../validate.js';

/** rowSquares of a product writing out [M, N]: gamma [N] and scaled [M, N] of out's dtype, squares f32 [M, ⌈N/16⌉]. */
export function checkRowSquares<T extends Tensor>(check: OpCheck<T>, r: RowNormSquares, out: Tensor, M: number, N: number) {
  const gamma = check.tensor('rowSquares.gamma', r.gamma), scaled = check.tensor('rowSquares.scaled', r.scaled);
  const squares = check.tensor('rowSquares.squares', r.squares);
  check.shape('rowSquares.gamma', gamma, [N]);
  check.shape('rowSquares.scaled', scaled, [M, N]);
  check.shape('rowSquares.squares', squares, [M, rowSquareSlots(N)]);
  check.sameDType(['out', 'rowSquares.gamma', 'rowSquares.scaled'], [out, gamma, scaled]);
  check.dtype('rowSquares.squares', squares, ['f32']);
  return { gamma, scaled, squares };
}

/** rowScale of a product of M rows and input width K: squares f32 [M, ⌈K/16⌉], eps finite and ≥ 0. */
export function checkRowScale<T extends Tensor>(check: OpCheck<T>, s: RowNormScale, M: number, K: number) {
  const squares = check.tensor('rowScale.squares', s.squares);
  check.shape('rowScale.squares', squares, [M, rowSquareSlots(K)]);
  check.dtype('rowScale.squares', squares, ['f32']);
  check.finite('rowScale.eps', s.eps);
  check.nonNegative('rowScale.eps', s.eps);
  return { squares, eps: s.eps };
}
