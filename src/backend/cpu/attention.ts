// Fused attention (FlashAttention's op pair), written as the plain materialised computation: for each
// query row the scores against every visible key, their softmax, and the weighted sum of values — in
// float64, one row at a time. This is the oracle the tiled CUDA kernels are tested against.
//
// Shapes: q, out, dOut, dq (B, Hq, Lq, d); k, v, dk, dv (B, Hkv, Lk, d); lse f32 (B, Hq, Lq).
// Query head h reads kv head floor(h / (Hq/Hkv)). Key j is visible to query i of batch b when
// j < n_i = min(Lk, keyLengths[b], causal ? i + Lk − Lq + 1 : Lk); a row with n_i ≤ 0 gets out = 0,
// lse = −∞, and contributes nothing to the backward.

import type { FlashAttentionBackwardArgs, FlashAttentionForwardArgs } from '../backend.js';
import { checkFlashAttentionBackward, checkFlashAttentionForward } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

interface Geometry { Hq: number; Hkv: number; Lq: number; Lk: number; d: number; group: number; causal: boolean }

/** Keys [0, n) are visible to query i of a batch whose key length is `validKeys`. */
function visibleKeys(g: Geometry, i: number, validKeys: number): number {
  return Math.max(0, Math.min(g.Lk, validKeys, g.causal ? i + (g.Lk - g.Lq) + 1 : g.Lk));
}

/** out = softmax(scale·q·kᵀ + mask)·v, lse = ln Σ exp(scale·q·kᵀ) over visible keys. */
export function prepareFlashAttentionForward(args: FlashAttentionForwardArgs): CpuWork {
  const check = new CpuCheck('flashAttentionForward');
  const { q, k, v, out, lse, keyLengths, scale, B, ...g } = checkFlashAttentionForward(check, args);
  const { Hq, Hkv, Lq, Lk, d, group } = g;

  return check.work(() => {
    const qv = floatsOf(q), kv = floatsOf(k), vv = floatsOf(v);
    const lengths = keyLengths ? int32sOf(keyLengths) : undefined;
    const result = new Float64Array(out.numel);
    const lseResult = new Float64Array(lse.numel);
    const scores = new Float64Array(Lk);
    for (let b = 0; b < B; b++) {
      const validKeys = lengths ? lengths[b]! : Lk;
      for (let h = 0; h < Hq; h++) {
        const kvBase = (b * Hkv + Math.floor(h / group)) * Lk * d;
        for (let i = 0; i < Lq; i++) {
          const row = (b * Hq + h) * Lq + i;
          const n = visibleKeys(g, i, validKeys);
          let max = -Infinity;
          for (let j = 0; j < n; j++) {
            let s = 0;
            for (let c = 0; c < d; c++) s += qv[row * d + c]! * kv[kvBase + j * d + c]!;
            scores[j] = scale * s;
            max = Math.max(max, scores[j]!);
          }
          if (n === 0) { lseResult[row] = -Infinity; continue; } // out row stays 0
          let sum = 0;
          for (let j = 0; j < n; j++) sum += (scores[j] = Math.exp(scores[j]! - max));
          lseResult[row] = max + Math.log(sum);
          for (let j = 0; j < n; j++) {
            const p = scores[j]! / sum;
            for (let c = 0; c < d; c++) result[row * d + c]! += p * vv[kvBase + j * d + c]!;
          }
        }
      }
    }
    storeFloats(out, result);
    storeFloats(lse, lseResult);
  });
}

/** dq, dk, dv of flashAttentionForward, with P recomputed from q, k and lse. */
export function prepareFlashAttentionBackward(args: FlashAttentionBackwardArgs): CpuWork {
  const check = new CpuCheck('flashAttentionBackward');
  const { q, k, v, out, dOut, lse, dq, dk, dv, keyLengths, scale, B, ...g } = checkFlashAttentionBackward(check, args);
  const { Hq, Hkv, Lq, Lk, d, group } = g;

  return check.work(() => {
    const qv = floatsOf(q), kv = floatsOf(k), vv = floatsOf(v), ov = floatsOf(out), gv = floatsOf(dOut), lv = floatsOf(lse);
    const lengths = keyLengths ? int32sOf(keyLengths) : undefined;
    const dqResult = new Float64Array(dq.numel), dkResult = new Float64Array(dk.numel), dvResult = new Float64Array(dv.numel);
    const p = new Float64Array(Lk), dS = new Float64Array(Lk);
    for (let b = 0; b < B; b++) {
      const validKeys = lengths ? lengths[b]! : Lk;
      for (let h = 0; h < Hq; h++) {
        const kvBase = (b * Hkv + Math.floor(h / group)) * Lk * d;
        for (let i = 0; i < Lq; i++) {
          const row = (b * Hq + h) * Lq + i;
          const n = visibleKeys(g, i, validKeys);
          if (n === 0) continue;
          const rowLse = lv[row]!;
          let D = 0;
          for (let c = 0; c < d; c++) D += gv[row * d + c]! * ov[row * d + c]!;
          for (let j = 0; j < n; j++) {
            let s = 0, dP = 0;
            for (let c = 0; c < d; c++) {
              s += qv[row * d + c]! * kv[kvBase + j * d + c]!;
              dP += gv[row * d + c]! * vv[kvBase + j * d + c]!;
            }
            p[j] = Math.exp(scale * s - rowLse);
            dS[j] = p[j]! * (dP - D);
          }
          for (let j = 0; j < n; j++) {
            for (let c = 0; c < d; c++) {
              dqResult[row * d + c]! += scale * dS[j]! * kv[kvBase + j * d + c]!;
              dkResult[kvBase + j * d + c]! += scale * dS[j]! * qv[row * d + c]!;
              dvResult[kvBase + j * d + c]! += p[j]! * gv[row * d + c]!;
            }
          }
        }
      }
    }
    storeFloats(dq, dqResult);
    storeFloats(dk, dkResult);
    storeFloats(dv, dvResult);
  });
}
