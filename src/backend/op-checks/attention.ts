// Argument checks of the fused attention op pair (flashAttentionForward/Backward), shared by the backends.
//   q, out, dOut, dq (B, Hq, Lq, d);  k, v, dk, dv (B, Hkv, Lk, d);  lse f32 (B, Hq, Lq);
//   keyLengths i32 (B), optional. Hq must be a multiple of Hkv (grouped-query attention).

import type { Tensor } from '../../tensor.js';
import type { FlashAttentionBackwardArgs, FlashAttentionForwardArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

const Q_SHAPE = ['B', 'Hq', 'Lq', 'd'] as const;
const KV_SHAPE = ['B', 'Hkv', 'Lk', 'd'] as const;
const LSE_SHAPE = ['B', 'Hq', 'Lq'] as const;

interface Common { scale?: number; causal?: boolean; keyLengths?: Tensor }

/** The sizes, the GQA group, and the options with defaults applied (scale = 1/sqrt(d)). */
function common<T extends Tensor>(check: OpCheck<T>, args: Common) {
  const [B, Hq, Hkv, Lq, Lk, d] = ['B', 'Hq', 'Hkv', 'Lq', 'Lk', 'd'].map((n) => check.size(n)) as [number, number, number, number, number, number];
  if (d < 1) check.fail(`the head dimension d must be at least 1, got ${d}`);
  if (Hkv < 1 || Hq % Hkv !== 0) check.fail(`the query heads Hq = ${Hq} must be a positive multiple of the kv heads Hkv = ${Hkv}`);
  const keyLengths = check.optional('keyLengths', args.keyLengths);
  if (keyLengths) {
    check.dtype('keyLengths', keyLengths, ['i32']);
    check.shape('keyLengths', keyLengths, ['B']);
  }
  const scale = args.scale ?? 1 / Math.sqrt(d);
  check.finite('scale', scale);
  const causal = args.causal ?? false;
  return { B, Hq, Hkv, Lq, Lk, d, group: Hkv > 0 ? Hq / Hkv : 0, keyLengths, scale, causal };
}

export function checkFlashAttentionForward<T extends Tensor>(check: OpCheck<T>, args: FlashAttentionForwardArgs) {
  const q = check.tensor('q', args.q);
  const k = check.tensor('k', args.k);
  const v = check.tensor('v', args.v);
  const out = check.tensor('out', args.out);
  const lse = check.tensor('lse', args.lse);
  check.float('q', q);
  check.sameDType(['q', 'k', 'v', 'out'], [q, k, v, out]);
  check.dtype('lse', lse, ['f32']);
  check.shape('q', q, Q_SHAPE);
  check.shape('k', k, KV_SHAPE);
  check.shape('v', v, KV_SHAPE);
  check.shape('out', out, Q_SHAPE);
  check.shape('lse', lse, LSE_SHAPE);
  return { q, k, v, out, lse, ...common(check, args) };
}

export function checkFlashAttentionBackward<T extends Tensor>(check: OpCheck<T>, args: FlashAttentionBackwardArgs) {
  const q = check.tensor('q', args.q);
  const k = check.tensor('k', args.k);
  const v = check.tensor('v', args.v);
  const out = check.tensor('out', args.out);
  const dOut = check.tensor('dOut', args.dOut);
  const lse = check.tensor('lse', args.lse);
  const dq = check.tensor('dq', args.dq);
  const dk = check.tensor('dk', args.dk);
  const dv = check.tensor('dv', args.dv);
  check.float('q', q);
  check.sameDType(['q', 'k', 'v', 'out', 'dOut', 'dq', 'dk', 'dv'], [q, k, v, out, dOut, dq, dk, dv]);
  check.dtype('lse', lse, ['f32']);
  check.shape('q', q, Q_SHAPE);
  check.shape('k', k, KV_SHAPE);
  check.shape('v', v, KV_SHAPE);
  check.shape('out', out, Q_SHAPE);
  check.shape('dOut', dOut, Q_SHAPE);
  check.shape('lse', lse, LSE_SHAPE);
  check.shape('dq', dq, Q_SHAPE);
  check.shape('dk', dk, KV_SHAPE);
  check.shape('dv', dv, KV_SHAPE);
  return { q, k, v, out, dOut, lse, dq, dk, dv, ...common(check, args) };
}
