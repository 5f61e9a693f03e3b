// Argument checks of decodeAttention (one query token per sequence over its KV cache), shared by the backends.
//   q, out (B, Hq, d);  kCache, vCache (B, Hkv, maxLen, d);  positions i32 (B);  partials f32 (B, Hq, S, d + 2), optional;
//   project: weight (H, Hq·d) in out's dtype or INT4 (qweight i32 (H, Hq·d/8), scales f16, zeros u8 (H, Hq·d/G)), out f32 (B, H), zero f32, optional
// Paged (blockTable i32 (B, maxBlocks)): kCache, vCache (numBlocks, Hkv, blockSize, d), maxLen = maxBlocks·blockSize.
// Whether each position lies in [0, maxLen) (and each used table entry in [0, numBlocks)) depends on the
// data: that check is the backend's own.

import type { Tensor } from '../../tensor.js';
import { isInt4Projection, type AttentionProjection, type DecodeAttentionArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { checkKvCacheLayout } from './kv-cache-layout.js';
import { checkInt4Weight } from './quant.js';

export function checkDecodeAttention<T extends Tensor>(check: OpCheck<T>, args: DecodeAttentionArgs) {
  const q = check.tensor('q', args.q);
  const kCache = check.tensor('kCache', args.kCache);
  const vCache = check.tensor('vCache', args.vCache);
  const positions = check.tensor('positions', args.positions);
  const out = check.tensor('out', args.out);
  const partials = check.optional('partials', args.partials);
  check.float('q', q);
  check.sameDType(['q', 'kCache', 'vCache', 'out'], [q, kCache, vCache, out]);
  const blockTable = check.optional('blockTable', args.blockTable);
  check.shape('q', q, ['B', 'Hq', 'd']);
  const paged = checkKvCacheLayout(check, blockTable, kCache, vCache);
  check.shape('out', out, ['B', 'Hq', 'd']);
  check.dtype('positions', positions, ['i32']);
  check.shape('positions', positions, ['B']);
  const [B, Hq, Hkv, d] = ['B', 'Hq', 'Hkv', 'd'].map((n) => check.size(n)) as [number, number, number, number];
  const maxLen = paged ? paged.maxBlocks * paged.blockSize : check.size('maxLen');
  if (d < 1) check.fail(`the head size d must be at least 1, got ${d}`);
  if (maxLen < 1) check.fail('the cache holds no positions (maxLen = 0)');
  if (Hkv < 1 || Hq % Hkv !== 0) check.fail(`the query heads Hq = ${Hq} must be a positive multiple of the kv heads Hkv = ${Hkv}`);
  let splits = 1;
  if (partials) {
    check.dtype('partials', partials, ['f32']);
    splits = partials.shape[2] ?? 0;
    check.shape('partials', partials, [B, Hq, splits, d + 2]);
    if (splits < 1 || splits > maxLen) check.fail(`'partials' asks for ${splits} splits of the cache; expected 1 to maxLen = ${maxLen}`);
  }
  const scale = args.scale ?? 1 / Math.sqrt(d);
  check.finite('scale', scale);
  const freshKeys = args.freshKeys ?? 0;
  if (!Number.isInteger(freshKeys) || freshKeys < 0) check.fail(`freshKeys must be a non-negative integer, got ${freshKeys}`);
  const project = args.project ? checkAttentionProjection(check, args.project, out, B, Hq * d) : undefined;
  return { q, kCache, vCache, positions, out, partials, scale, B, Hq, Hkv, d, maxLen, group: Hq / Hkv, splits, blockTable, paged, freshKeys, project };
}

/**
 * decodeAttention's project: weight [H, Hq·d] in out's dtype (or its INT4 form: `int4`, in int4Linear's layout),
 * out f32 [B, H], zero f32 of its own.
 */
function checkAttentionProjection<T extends Tensor>(check: OpCheck<T>, p: AttentionProjection, attended: T, B: number, width: number) {
  const out = check.tensor('project.out', p.out), zero = check.optional('project.zero', p.zero);
  let weight: T | undefined, int4: ReturnType<typeof checkInt4Weight<T>> | undefined;
  if (p.weight !== null && typeof p.weight === 'object' && isInt4Projection(p.weight)) {
    int4 = checkInt4Weight(check, p.weight, width, 'project.weight.', 'projectH');
  } else {
    weight = check.tensor('project.weight', p.weight as Tensor);
    check.sameDType(['out', 'project.weight'], [attended, weight]);
    check.shape('project.weight', weight, ['projectH', width]);
  }
  check.dtype('project.out', out, ['f32']);
  check.shape('project.out', out, [B, 'projectH']);
  if (zero) {
    check.dtype('project.zero', zero, ['f32']);
    if (zero === out) check.fail("'project.zero' must be a tensor of its own: it is 'project.out'");
  }
  return { weight, int4, out, zero, H: check.size('projectH') };
}
