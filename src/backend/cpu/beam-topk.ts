// beamTopK and beamAdvance, the reference: every candidate of an item is scored and the whole list is
// sorted (the plain full sort the CUDA kernel's hierarchical search is tested against), then the next
// beams are picked and the cache-row table is gathered (backend.ts states both contracts).
//
// Scores follow the contract's f32 order of operations, score = fround(fround(z − lse) + beamScore), with
// lse computed in f64 and rounded to f32 once, so the values are what an f32 implementation would produce
// from the same lse; the order is (score descending, flat index beam·C + token ascending).

import type { BeamAdvanceArgs, BeamTopKArgs } from '../backend.js';
import { checkBeamAdvance, checkBeamTopK } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf } from './tensor.js';

/** ln Σ exp over the included logits (NaN counts as −∞), in f64; −∞ when nothing is finite. */
export function logSumExp(row: ArrayLike<number>, count: number, include: (v: number) => boolean): number {
  let max = -Infinity;
  for (let v = 0; v < count; v++) {
    const z = row[v]!;
    if (include(v) && z > max) max = z;
  }
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let v = 0; v < count; v++) {
    const z = row[v]!;
    if (include(v) && z === z) sum += Math.exp(z - max);
  }
  return max + Math.log(sum);
}

/** The contract's candidate score of logit z (already −∞ when banned or NaN) in a row with lse (f32) and beam score bs. */
export function candidateScore(z: number, lse: number, bs: number): number {
  if (lse === -Infinity || !(z === z)) return -Infinity;
  const s = Math.fround(Math.fround(z - lse) + bs);
  return s === s ? s : -Infinity;
}

export function prepareBeamTopK(args: BeamTopKArgs): CpuWork {
  const check = new CpuCheck('beamTopK');
  const { logits, beamScores, tokens, sourceBeams, scores, beams, batch, classes: C, Vp, K, bannedTokens, renormalize } = checkBeamTopK(check, args);
  const banned = new Set(bannedTokens);

  return check.work(() => {
    const z = floatsOf(logits), bs = beamScores ? floatsOf(beamScores) : undefined;
    const outTokens = int32sOf(tokens), outBeams = int32sOf(sourceBeams), outScores = floatsOf(scores);
    const n = beams * C;
    const candidateScores = new Float32Array(n);
    const order = new Int32Array(n);
    for (let b = 0; b < batch; b++) {
      for (let j = 0; j < beams; j++) {
        const r = b * beams + j;
        const row = z.subarray(r * Vp, r * Vp + C);
        const lse = Math.fround(logSumExp(row, C, (v) => !(renormalize && banned.has(v))));
        for (let v = 0; v < C; v++) candidateScores[j * C + v] = candidateScore(banned.has(v) ? -Infinity : row[v]!, lse, bs ? bs[r]! : 0);
      }
      for (let i = 0; i < n; i++) order[i] = i;
      // Equal scores (−∞ included: −∞ − −∞ is NaN, which is falsy) fall through to the flat index.
      order.sort((x, y) => (candidateScores[y]! - candidateScores[x]!) || x - y);
      for (let k = 0; k < K; k++) {
        const flat = order[k]!;
        outTokens[b * K + k] = flat % C;
        outBeams[b * K + k] = Math.floor(flat / C);
        outScores[b * K + k] = candidateScores[flat]!;
      }
    }
  });
}

export function prepareBeamAdvance(args: BeamAdvanceArgs): CpuWork {
  const check = new CpuCheck('beamAdvance');
  const { tokens, sourceBeams, scores, nextTokens, beamScores, cacheRows, positions, beams, eosTokens, batch, K, rows, L } = checkBeamAdvance(check, args);
  const eos = new Set(eosTokens);

  return check.work(() => {
    const candTokens = int32sOf(tokens), candBeams = int32sOf(sourceBeams), candScores = floatsOf(scores);
    const outTokens = int32sOf(nextTokens), outScores = floatsOf(beamScores), table = int32sOf(cacheRows), pos = int32sOf(positions);
    for (let b = 0; b < batch; b++) {
      const t = pos[b * beams]!;
      for (let j = 1; j < beams; j++) {
        if (pos[b * beams + j] !== t) check.fail(`item ${b}: its rows are at different positions (${pos[b * beams]} and ${pos[b * beams + j]}); the rows of an item advance together`);
      }
      if (!(t >= 0 && t < L)) check.fail(`item ${b} is at position ${t}, outside the cache-row table [0, ${L})`);
      // Slots: non-EOS candidates in order, then (if short) the skipped ones, lowered by 1e9.
      const picked: { k: number; score: number }[] = [];
      for (let k = 0; k < K && picked.length < beams; k++) {
        if (!eos.has(candTokens[b * K + k]!)) picked.push({ k, score: candScores[b * K + k]! });
      }
      for (let k = 0; k < K && picked.length < beams; k++) {
        if (eos.has(candTokens[b * K + k]!)) picked.push({ k, score: Math.fround(candScores[b * K + k]! - 1e9) });
      }
      const parents = picked.map(({ k }) => {
        const beam = candBeams[b * K + k]!;
        if (!(beam >= 0 && beam < beams)) check.fail(`item ${b}, candidate ${k}: source beam ${beam} is outside [0, ${beams})`);
        return b * beams + beam;
      });
      const cur = (t % 2) * rows * L, next = ((t + 1) % 2) * rows * L;
      picked.forEach(({ k, score }, j) => {
        const r = b * beams + j, p = parents[j]!;
        outTokens[r] = candTokens[b * K + k]!;
        outScores[r] = score;
        for (let i = 0; i < t; i++) table[next + r * L + i] = table[cur + p * L + i]!;
        table[next + r * L + t] = p;
      });
      for (let j = 0; j < beams; j++) pos[b * beams + j] = t + 1;
    }
  });
}
