// qkvRopeAppend: the QKV projection's output (+ bias) split into query heads, rotated (RoPE) query and key
// heads, and the keys and values written into the cache at each row's position (backend.ts has the contract).
// Sums and rotations in float64; every stored value is rounded once to the tensors' dtype. θ is the f32
// product fround(position · invFreq[i]), as the GPU and HF compute it. headNorm (Qwen3's q_norm / k_norm):
// each query and key head scaled by 1/sqrt(mean(x²) + eps) and gamma after the bias, before RoPE.
// Paged (blockTable): the key and value of row r go to block blockTable[b, ⌊p / blockSize⌋] of the pool,
// at offset p mod blockSize (row tableRows[b] of the table when given); a negative position is an idle row
// (nothing written to the pool).

import type { QkvRopeAppendArgs } from '../backend.js';
import { checkQkvRopeAppend } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, rounder } from './tensor.js';
import type { FloatDType } from '../../dtype.js';

export function prepareQkvRopeAppend(args: QkvRopeAppendArgs): CpuWork {
  const check = new CpuCheck('qkvRopeAppend');
  const { qkv, bias, headNorm, positions, q, kCache, vCache, kOut, vOut, invFreq, ropeScale, B, L, Hq, Hkv, d, maxLen, kOutHeads, blockTable, tableRows, paged } = checkQkvRopeAppend(check, args);
  const half = d / 2, width = (Hq + 2 * Hkv) * d, group = Hq / Hkv;
  const round = rounder(q.dtype as FloatDType);

  return check.work(() => {
    const x = floatsOf(qkv), b = bias ? floatsOf(bias) : undefined, pos = int32sOf(positions);
    const freqs = invFreq ? floatsOf(invFreq) : undefined;
    const qGamma = headNorm ? floatsOf(headNorm.q) : undefined, kGamma = headNorm ? floatsOf(headNorm.k) : undefined;
    const qv = floatsOf(q), kc = floatsOf(kCache), vc = floatsOf(vCache);
    const ko = kOut ? floatsOf(kOut) : undefined, vo = vOut ? floatsOf(vOut) : undefined;
    const table = blockTable ? int32sOf(blockTable) : undefined, rowOf = tableRows ? int32sOf(tableRows) : undefined;
    const tableRowCount = blockTable?.shape[0] ?? 0;
    /** Element offset of position p of kv head g of sequence seq in the cache (dense or paged). */
    const cacheRow = (seq: number, g: number, p: number): number => {
      if (!paged || !table) return ((seq * Hkv + g) * maxLen + p) * d;
      const row = rowOf ? rowOf[seq]! : seq;
      if (row < 0 || row >= tableRowCount) check.fail(`'tableRows'[${seq}] = ${row} is outside the block table's [0, ${tableRowCount}) rows`);
      const entry = row * paged.maxBlocks + Math.floor(p / paged.blockSize), block = table[entry]!;
      if (block < 0 || block >= paged.numBlocks) check.fail(`'blockTable'[${row}, ${Math.floor(p / paged.blockSize)}] = ${block} is outside the pool's [0, ${paged.numBlocks}) blocks`);
      return ((block * Hkv + g) * paged.blockSize + (p % paged.blockSize)) * d;
    };
    const head = new Float64Array(d);
    const cos = new Float64Array(half), sin = new Float64Array(half);
    for (let r = 0; r < B * L; r++) {
      const seq = Math.floor(r / L), l = r % L, p = pos[r]!;
      const idle = paged !== undefined && p < 0;
      if (!idle && (p < 0 || p >= maxLen)) check.fail(`'positions'[${r}] = ${p} is outside the cache's [0, ${maxLen})`);
      if (freqs) {
        for (let i = 0; i < half; i++) {
          const theta = Math.fround(p * freqs[i]!);
          cos[i] = ropeScale * Math.cos(theta);
          sin[i] = ropeScale * Math.sin(theta);
        }
      }
      // Head hh of the row: 0..Hq−1 queries, Hq..Hq+Hkv−1 keys, then values.
      for (let hh = 0; hh < Hq + 2 * Hkv; hh++) {
        const base = r * width + hh * d;
        for (let c = 0; c < d; c++) head[c] = x[base + c]! + (b ? b[hh * d + c]! : 0);
        const isValue = hh >= Hq + Hkv;
        if (headNorm && !isValue) {
          const gamma = hh < Hq ? qGamma! : kGamma!;
          let squares = 0;
          for (let c = 0; c < d; c++) squares += head[c]! * head[c]!;
          const rstd = 1 / Math.sqrt(squares / d + headNorm.eps);
          for (let c = 0; c < d; c++) head[c] = head[c]! * rstd * gamma[c]!;
        }
        if (freqs && !isValue) {
          for (let i = 0; i < half; i++) {
            const a = head[i]!, z = head[i + half]!;
            head[i] = a * cos[i]! - z * sin[i]!;
            head[i + half] = z * cos[i]! + a * sin[i]!;
          }
        }
        if (hh < Hq) {
          const at = ((seq * Hq + hh) * L + l) * d;
          for (let c = 0; c < d; c++) qv[at + c] = round(head[c]!);
          continue;
        }
        const kvHead = isValue ? hh - Hq - Hkv : hh - Hq;
        const cache = isValue ? vc : kc;
        if (idle) continue;
        const at = cacheRow(seq, kvHead, p);
        for (let c = 0; c < d; c++) cache[at + c] = round(head[c]!);
        const copy = isValue ? vo : ko;
        if (copy) {
          // Hk = Hq repeats kv head g for query heads g·group .. g·group + group − 1.
          const copies = kOutHeads === Hkv ? [kvHead] : Array.from({ length: group }, (_, i) => kvHead * group + i);
          for (const h of copies) {
            const out = ((seq * kOutHeads + h) * L + l) * d;
            for (let c = 0; c < d; c++) copy[out + c] = round(head[c]!);
          }
        }
      }
    }
  });
}
