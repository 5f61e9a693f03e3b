// decodeAttention: one query per sequence against the keys 0..positions[b] of its cache, as the plain
// materialised computation in float64 (the oracle for the split-K GPU kernel). partials are GPU scratch;
// the CPU neither reads nor writes them. Paged (blockTable): key j of sequence b is row j mod blockSize of
// block blockTable[b, ⌊j / blockSize⌋] of the pool; a negative position is an idle row (out = 0). project: the
// output's projection added into an f32 accumulator afterwards (backend.ts AttentionProjection; an INT4 weight
// dequantized as int4Linear's).

import type { DecodeAttentionArgs } from '../backend.js';
import { checkDecodeAttention } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { dequantizeInt4, unpackInt4 } from './quant-math.js';
import { bytesOf, floatsOf, int32sOf, storeFloats } from './tensor.js';

export function prepareDecodeAttention(args: DecodeAttentionArgs): CpuWork {
  const check = new CpuCheck('decodeAttention');
  const { q, kCache, vCache, positions, out, scale, B, Hq, Hkv, d, maxLen, group, blockTable, paged, project } = checkDecodeAttention(check, args);

  return check.work(() => {
    const qv = floatsOf(q), kv = floatsOf(kCache), vv = floatsOf(vCache), pos = int32sOf(positions);
    const result = new Float64Array(B * Hq * d);
    const table = blockTable ? int32sOf(blockTable) : undefined;
    /** Element offset of key j of kv head g of sequence b (dense or through the block table). */
    const keyRow = (b: number, g: number, j: number): number => {
      if (!paged || !table) return ((b * Hkv + g) * maxLen + j) * d;
      const i = Math.floor(j / paged.blockSize), block = table[b * paged.maxBlocks + i]!;
      if (block < 0 || block >= paged.numBlocks) check.fail(`'blockTable'[${b}, ${i}] = ${block} is outside the pool's [0, ${paged.numBlocks}) blocks`);
      return ((block * Hkv + g) * paged.blockSize + (j % paged.blockSize)) * d;
    };
    const scores = new Float64Array(maxLen);
    for (let b = 0; b < B; b++) {
      const p = pos[b]!;
      if (paged && p < 0) continue; // an idle row: out = 0
      if (p < 0 || p >= maxLen) check.fail(`'positions'[${b}] = ${p} is outside the cache's [0, ${maxLen})`);
      const n = p + 1;
      for (let h = 0; h < Hq; h++) {
        const row = (b * Hq + h) * d, g = Math.floor(h / group);
        const rows = Array.from({ length: n }, (_, j) => keyRow(b, g, j));
        let max = -Infinity;
        for (let j = 0; j < n; j++) {
          let s = 0;
          for (let c = 0; c < d; c++) s += qv[row + c]! * kv[rows[j]! + c]!;
          scores[j] = scale * s;
          max = Math.max(max, scores[j]!);
        }
        let sum = 0;
        for (let j = 0; j < n; j++) sum += (scores[j] = Math.exp(scores[j]! - max));
        for (let j = 0; j < n; j++) {
          const w = scores[j]! / sum;
          for (let c = 0; c < d; c++) result[row + c]! += w * vv[rows[j]! + c]!;
        }
      }
    }
    storeFloats(out, result);
    if (project) {
      // out_proj += out (as stored) · weightᵀ, in f64; then the zeroed accumulator.
      const K = Hq * d, int4 = project.int4;
      const w = int4 ? dequantizeInt4(unpackInt4(int32sOf(int4.qweight), project.H, K), floatsOf(int4.scales), bytesOf(int4.zeros), project.H, K, int4.groupSize) : floatsOf(project.weight!);
      const attended = floatsOf(out), acc = Float32Array.from(floatsOf(project.out));
      for (let b = 0; b < B; b++) {
        for (let n = 0; n < project.H; n++) {
          let s = 0;
          for (let k = 0; k < K; k++) s += attended[b * K + k]! * w[n * K + k]!;
          acc[b * project.H + n] = acc[b * project.H + n]! + s;
        }
      }
      storeFloats(project.out, acc);
      if (project.zero) storeFloats(project.zero, new Float32Array(project.zero.numel));
    }
  });
}
