// beamSelfAttention and beamCrossAttention, the reference: one query row at a time, f64 dot products,
// softmax and weighted sums (backend.ts states the contracts). The new keys and values are rounded to the
// cache dtype when stored and read back from the cache, exactly as later steps will read them.

import type { BeamCrossAttentionArgs, BeamSelfAttentionArgs } from '../backend.js';
import { checkBeamCrossAttention, checkBeamSelfAttention } from '../op-checks/index.js';
import type { FloatDType } from '../../dtype.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, rounder, storeFloats } from './tensor.js';

/** Σ_i softmax_i(scores)·value(i) into out[0..d), f64; no keys gives zeros. */
function attend(scores: Float64Array, count: number, d: number, value: (i: number, c: number) => number, out: Float64Array, outOffset: number): void {
  let max = -Infinity;
  for (let i = 0; i < count; i++) max = Math.max(max, scores[i]!);
  if (count === 0 || max === -Infinity) return;
  let sum = 0;
  for (let i = 0; i < count; i++) sum += (scores[i] = Math.exp(scores[i]! - max));
  for (let c = 0; c < d; c++) {
    let acc = 0;
    for (let i = 0; i < count; i++) acc += scores[i]! * value(i, c);
    out[outOffset + c] = acc / sum;
  }
}

export function prepareBeamSelfAttention(args: BeamSelfAttentionArgs): CpuWork {
  const check = new CpuCheck('beamSelfAttention');
  const { qkv, bias, kCache, vCache, cacheRows, positions, out, heads, rows: R, H, d, L } = checkBeamSelfAttention(check, args);
  const round = rounder(qkv.dtype as FloatDType);

  return check.work(() => {
    const x = floatsOf(qkv), b = floatsOf(bias), kc = floatsOf(kCache), vc = floatsOf(vCache);
    const table = int32sOf(cacheRows), pos = int32sOf(positions);
    const result = new Float64Array(R * H);
    const scores = new Float64Array(L);
    const q = new Float64Array(d);
    const at = (row: number, h: number, i: number) => ((row * heads + h) * L + i) * d;
    for (let r = 0; r < R; r++) {
      const t = pos[r]!;
      if (!(t >= 0 && t < L)) check.fail(`'positions'[${r}] = ${t} is outside the cache [0, ${L})`);
      const history = (t % 2) * R * L + r * L;
      const rowOf = (i: number): number => {
        if (i === t) return r;
        const c = table[history + i]!;
        if (!(c >= 0 && c < R)) check.fail(`'cacheRows' maps position ${i} of row ${r} to row ${c}, outside [0, ${R})`);
        return c;
      };
      for (let h = 0; h < heads; h++) {
        for (let c = 0; c < d; c++) {
          const j = h * d + c;
          q[c] = (x[r * 3 * H + j]! + b[j]!) / Math.sqrt(d);
          kc[at(r, h, t) + c] = round(x[r * 3 * H + H + j]! + b[H + j]!);
          vc[at(r, h, t) + c] = round(x[r * 3 * H + 2 * H + j]! + b[2 * H + j]!);
        }
        for (let i = 0; i <= t; i++) {
          const k = at(rowOf(i), h, i);
          let dot = 0;
          for (let c = 0; c < d; c++) dot += q[c]! * kc[k + c]!;
          scores[i] = dot;
        }
        attend(scores, t + 1, d, (i, c) => vc[at(rowOf(i), h, i) + c]!, result, r * H + h * d);
      }
    }
    storeFloats(out, result);
  });
}

export function prepareBeamCrossAttention(args: BeamCrossAttentionArgs): CpuWork {
  const check = new CpuCheck('beamCrossAttention');
  const { q, kv, keyLengths, out, layer, layers, heads, beams, rows: R, H, d, Lk } = checkBeamCrossAttention(check, args);

  return check.work(() => {
    const qv = floatsOf(q), kvv = floatsOf(kv), lengths = int32sOf(keyLengths);
    const W = 2 * layers * H, kColumn = 2 * layer * H, vColumn = kColumn + H;
    const result = new Float64Array(R * H);
    const scores = new Float64Array(Lk);
    const scale = 1 / Math.sqrt(d);
    for (let r = 0; r < R; r++) {
      const b = Math.floor(r / beams), length = lengths[b]!;
      if (!(length >= 0 && length <= Lk)) check.fail(`'keyLengths'[${b}] = ${length} is outside [0, ${Lk}]`);
      const keyRow = (i: number) => (b * Lk + i) * W;
      for (let h = 0; h < heads; h++) {
        for (let i = 0; i < length; i++) {
          let dot = 0;
          for (let c = 0; c < d; c++) dot += qv[r * H + h * d + c]! * kvv[keyRow(i) + kColumn + h * d + c]!;
          scores[i] = dot * scale;
        }
        attend(scores, length, d, (i, c) => kvv[keyRow(i) + vColumn + h * d + c]!, result, r * H + h * d);
      }
    }
    storeFloats(out, result);
  });
}
