// Token (+ position) embedding with scale and dropout, forward and backward.
//   tokens i32 (B, L);  tokenTable (V, H);  positionTable (P, H), optional;  out, mask (B, L, H)
//   out[b, l] = dropout(scale·tokenTable[tokens[b, l]] + positionTable[positionOffset + l])
// The backward scatters into the tables with +=: every contribution to a table row is summed in
// float64 and added to the row's old value once, rounded once to the table's dtype. A token outside
// [0, V) is an error on the CPU (on the GPU it would read or write out of bounds). With vocabStart
// (a vocabulary split over ranks) the table holds ids [vocabStart, vocabStart + V): other ids add a zero
// token row forward and nothing backward.

import type { FloatDType } from '../../dtype.js';
import type { EmbeddingBackwardArgs, EmbeddingForwardArgs } from '../backend.js';
import { dropoutMask } from '../rng.js';
import { checkEmbeddingBackward, checkEmbeddingForward } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { bytesOf, floatsOf, int32sOf, rounder, storeFloats, dropoutOffsetAtRun } from './tensor.js';

/**
 * Every token as a row of the table: checked against [0, V) before anything is written, or, with a
 * split vocabulary (vocabStart given), shifted by vocabStart with ids outside the shard as −1 (no row).
 */
function checkedTokens(check: CpuCheck, tokens: CpuTensor, V: number, vocabStart: number | undefined): Int32Array {
  const values = int32sOf(tokens);
  if (vocabStart !== undefined) return values.map((t) => (t >= vocabStart && t < vocabStart + V ? t - vocabStart : -1));
  values.forEach((t, i) => { if (t < 0 || t >= V) check.fail(`'tokens'[${i}] = ${t} is outside [0, ${V})`); });
  return values;
}

export function prepareEmbeddingForward(args: EmbeddingForwardArgs): CpuWork {
  const check = new CpuCheck('embeddingForward');
  const {
    tokens, tokenTable, positionTable, out, mask, scale, positionOffset, vocabStart, batch: B, seqLen: L, vocab: V, hidden: H,
  } = checkEmbeddingForward(check, args);
  const { p, seed } = args;

  const offsetAtRun = dropoutOffsetAtRun(args);
  return check.work(() => {
    const ids = checkedTokens(check, tokens, V, vocabStart);
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offsetAtRun());
    const table = floatsOf(tokenTable);
    const positions = positionTable ? floatsOf(positionTable) : undefined;
    const result = new Float64Array(B * L * H);
    for (let b = 0; b < B; b++) {
      for (let l = 0; l < L; l++) {
        const id = ids[b * L + l]!, row = (b * L + l) * H, token = id * H, position = (positionOffset + l) * H;
        for (let h = 0; h < H; h++) {
          if (!keep[row + h]) continue;
          const value = (id >= 0 ? scale * table[token + h]! : 0) + (positions ? positions[position + h]! : 0);
          result[row + h] = value / (1 - p);
        }
      }
    }
    storeFloats(out, result);
  });
}

/** g = dOut⊙mask/(1−p);  dTokenTable[tokens[b, l]] += scale·g[b, l];  dPositionTable[offset + l] += Σ_b g[b, l]. */
export function prepareEmbeddingBackward(args: EmbeddingBackwardArgs): CpuWork {
  const check = new CpuCheck('embeddingBackward');
  const {
    tokens, dOut, mask, dTokenTable, dPositionTable, scale, positionOffset, vocabStart, batch: B, seqLen: L, vocab: V, hidden: H,
  } = checkEmbeddingBackward(check, args);
  const p = args.p;

  return check.work(() => {
    const ids = checkedTokens(check, tokens, V, vocabStart);
    const g = floatsOf(dOut), keep = bytesOf(mask);
    // Sums per touched table row (a Map, so a 50k-row vocabulary costs nothing for untouched rows).
    const tokenSums = new Map<number, Float64Array>();
    const positionSums = new Float64Array(L * H);
    for (let b = 0; b < B; b++) {
      for (let l = 0; l < L; l++) {
        const row = (b * L + l) * H, token = ids[b * L + l]!;
        let sums = token >= 0 ? tokenSums.get(token) : undefined;
        if (!sums && token >= 0) tokenSums.set(token, (sums = new Float64Array(H)));
        for (let h = 0; h < H; h++) {
          const grad = keep[row + h] ? g[row + h]! / (1 - p) : 0;
          if (sums) sums[h] += scale * grad;
          positionSums[l * H + h] += grad;
        }
      }
    }
    const table = floatsOf(dTokenTable);
    const round = rounder(dTokenTable.dtype as FloatDType);
    for (const [token, sums] of tokenSums) {
      for (let h = 0; h < H; h++) table[token * H + h] = round(table[token * H + h]! + sums[h]!);
    }
    if (dPositionTable) {
      const rows = floatsOf(dPositionTable).subarray(positionOffset * H, (positionOffset + L) * H);
      for (let i = 0; i < L * H; i++) rows[i] = round(rows[i]! + positionSums[i]!);
    }
  });
}
