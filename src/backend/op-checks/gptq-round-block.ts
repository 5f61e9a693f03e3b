// Argument checks of gptqRoundBlock (GPTQ's rounding of one block of input columns), shared by the backends.
//   weights f32 (width, N);  u f32 (width, width);  q u8 (N, width);  scales f32 (N, groups);
//   zeros u8 (N, groups);  errors f32 (width, N);  groupSize · groups = width.

import type { Tensor } from '../../tensor.js';
import type { GptqRoundBlockArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkGptqRoundBlock<T extends Tensor>(check: OpCheck<T>, args: GptqRoundBlockArgs) {
  const weights = check.typed('weights', args.weights, ['f32'], ['width', 'N']);
  const u = check.typed('u', args.u, ['f32'], ['width', 'width']);
  const q = check.typed('q', args.q, ['u8'], ['N', 'width']);
  const scales = check.typed('scales', args.scales, ['f32'], ['N', 'groups']);
  const zeros = check.typed('zeros', args.zeros, ['u8'], ['N', 'groups']);
  const errors = check.typed('errors', args.errors, ['f32'], ['width', 'N']);
  const width = check.size('width'), N = check.size('N'), groups = check.size('groups'), G = args.groupSize;
  check.integer('groupSize', G, 1);
  if (G * groups !== width) check.fail(`groupSize ${G} times the ${groups} groups of scales is not the block's ${width} columns`);
  return { weights, u, q, scales, zeros, errors, width, N, G };
}
