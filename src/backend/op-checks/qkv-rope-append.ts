// Argument checks of qkvRopeAppend (QKV bias + RoPE + KV-cache append), shared by the backends.
//   qkv (R, (Hq + 2·Hkv)·d);  bias ((Hq + 2·Hkv)·d), optional;  positions i32 (R);  rope.invFreq f32 (d/2)
//   headNorm.q, headNorm.k (d) in qkv's dtype, headNorm.eps > 0, optional
//   q (B, Hq, L, d) with R = B·L;  kCache, vCache (B, Hkv, maxLen, d);  kOut, vOut (B, Hk, L, d), Hk ∈ {Hkv, Hq}
// Paged (blockTable i32 (B, maxBlocks)): kCache, vCache (numBlocks, Hkv, blockSize, d), R = B·L, maxLen =
//   maxBlocks·blockSize; no kOut/vOut. tableRows i32 (B), optional: sequence b's row of the table (which
//   then has any number of rows).
// Whether each position lies in [0, maxLen) (and each used table entry in [0, numBlocks)) depends on the
// data: that check is the backend's own.

import type { Tensor } from '../../tensor.js';
import type { QkvRopeAppendArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { checkKvCacheLayout } from './kv-cache-layout.js';
import { present } from './present.js';

export function checkQkvRopeAppend<T extends Tensor>(check: OpCheck<T>, args: QkvRopeAppendArgs) {
  const qkv = check.tensor('qkv', args.qkv);
  const bias = check.optional('bias', args.bias);
  const positions = check.tensor('positions', args.positions);
  const q = check.tensor('q', args.q);
  const kCache = check.tensor('kCache', args.kCache);
  const vCache = check.tensor('vCache', args.vCache);
  const kOut = check.optional('kOut', args.kOut);
  const vOut = check.optional('vOut', args.vOut);
  const invFreq = args.rope ? check.tensor('rope.invFreq', args.rope.invFreq) : undefined;
  const qNorm = args.headNorm ? check.tensor('headNorm.q', args.headNorm.q) : undefined;
  const kNorm = args.headNorm ? check.tensor('headNorm.k', args.headNorm.k) : undefined;
  if ((kOut === undefined) !== (vOut === undefined)) check.fail("'kOut' and 'vOut' go together: pass both or neither");
  check.float('qkv', qkv);
  check.sameDType(...present([['qkv', qkv], ['bias', bias], ['headNorm.q', qNorm], ['headNorm.k', kNorm], ['q', q], ['kCache', kCache], ['vCache', vCache], ['kOut', kOut], ['vOut', vOut]]));
  const blockTable = check.optional('blockTable', args.blockTable);
  const tableRows = check.optional('tableRows', args.tableRows);
  check.shape('q', q, ['B', 'Hq', 'L', 'd']);
  if (blockTable) check.absent('kOut', kOut, 'with a block table (paged caches)');
  const paged = checkKvCacheLayout(check, blockTable, kCache, vCache, tableRows);
  const [B, Hq, L, d, Hkv] = ['B', 'Hq', 'L', 'd', 'Hkv'].map((n) => check.size(n)) as [number, number, number, number, number];
  const maxLen = paged ? paged.maxBlocks * paged.blockSize : check.size('maxLen');
  if (Hkv < 1 || Hq % Hkv !== 0) check.fail(`the query heads Hq = ${Hq} must be a positive multiple of the kv heads Hkv = ${Hkv}`);
  if (d < 2 || d % 2 !== 0) check.fail(`the head size d = ${d} must be even (RoPE rotates pairs (i, i + d/2))`);
  const width = (Hq + 2 * Hkv) * d;
  check.shape('qkv', qkv, [B * L, width]);
  if (bias) check.shape('bias', bias, [width]);
  check.dtype('positions', positions, ['i32']);
  check.shape('positions', positions, [B * L]);
  let kOutHeads = 0;
  if (kOut && vOut) {
    kOutHeads = kOut.shape[1] ?? 0;
    if (kOutHeads !== Hkv && kOutHeads !== Hq) check.fail(`'kOut' has ${kOutHeads} heads: expected Hkv = ${Hkv}, or Hq = ${Hq} to repeat each kv head for its query heads`);
    check.shape('kOut', kOut, [B, kOutHeads, L, d]);
    check.shape('vOut', vOut, [B, kOutHeads, L, d]);
  }
  let headNorm: { q: T; k: T; eps: number } | undefined;
  if (qNorm && kNorm) {
    check.shape('headNorm.q', qNorm, [d]);
    check.shape('headNorm.k', kNorm, [d]);
    const eps = args.headNorm!.eps;
    check.positive('headNorm.eps', eps);
    headNorm = { q: qNorm, k: kNorm, eps };
  }
  let ropeScale = 1;
  if (invFreq) {
    check.dtype('rope.invFreq', invFreq, ['f32']);
    check.shape('rope.invFreq', invFreq, [d / 2]);
    ropeScale = args.rope!.scale ?? 1;
    check.finite('rope.scale', ropeScale);
  }
  return { qkv, bias, headNorm, positions, q, kCache, vCache, kOut, vOut, invFreq, ropeScale, B, L, Hq, Hkv, d, maxLen, kOutHeads, blockTable, tableRows, paged };
}
