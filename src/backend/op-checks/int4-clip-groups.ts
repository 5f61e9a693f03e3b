// Argument checks of int4ClipGroups (AWQ's clip search), shared by the backends.
//   weight f32 (N, K);  meanSquare f32 (K);  ratios f32 (R);  groupSize a multiple of 32 up to 256 dividing K.

import type { Tensor } from '../../tensor.js';
import type { Int4ClipGroupsArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export const INT4_CLIP_MAX_GROUP = 256;

export function checkInt4ClipGroups<T extends Tensor>(check: OpCheck<T>, args: Int4ClipGroupsArgs) {
  const weight = check.typed('weight', args.weight, ['f32'], ['N', 'K']);
  const meanSquare = check.typed('meanSquare', args.meanSquare, ['f32'], ['K']);
  const ratios = check.typed('ratios', args.ratios, ['f32'], ['R']);
  const N = check.size('N'), K = check.size('K'), R = check.size('R'), G = args.groupSize;
  check.integer('groupSize', G, 32);
  if (G % 32 !== 0 || G > INT4_CLIP_MAX_GROUP || K % G !== 0) check.fail(`groupSize ${G} must be a multiple of 32 up to ${INT4_CLIP_MAX_GROUP} dividing K = ${K}`);
  if (R === 0) check.fail("'ratios' is empty");
  return { weight, meanSquare, ratios, N, K, R, G };
}
