// int4ClipGroups on the CPU (backend.ts has the contract): AWQ's clip search, group by group.

import { ArgumentError } from '../../errors.js';
import type { Int4ClipGroupsArgs } from '../backend.js';
import { checkInt4ClipGroups } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { int4GroupParams, int4QuantizeValue } from './quant-math.js';
import { floatsOf } from './tensor.js';

export function prepareInt4ClipGroups(args: Int4ClipGroupsArgs): CpuWork {
  const check = new CpuCheck('int4ClipGroups');
  const { weight, meanSquare, ratios, N, K, G } = checkInt4ClipGroups(check, args);
  return check.work(() => {
    const W = floatsOf(weight), ms = floatsOf(meanSquare), rs = floatsOf(ratios);
    for (const [i, r] of rs.entries()) {
      if (!(r > 0 && r <= 1)) throw new ArgumentError(`int4ClipGroups: ratios[${i}] = ${r} is outside (0, 1]`);
    }
    const group = new Float32Array(G), clamped = new Float32Array(G);
    for (let n = 0; n < N; n++) {
      for (let g0 = 0; g0 < K; g0 += G) {
        const base = n * K + g0;
        let lo = 0, hi = 0;
        for (let i = 0; i < G; i++) {
          const v = W[base + i]!;
          group[i] = v;
          if (v < lo) lo = v;
          if (v > hi) hi = v;
        }
        let best = -1, bestError = Infinity;
        for (const [j, r] of rs.entries()) {
          const a = Math.fround(lo * r), b = Math.fround(hi * r);
          for (let i = 0; i < G; i++) clamped[i] = Math.min(b, Math.max(a, group[i]!));
          const p = int4GroupParams(clamped, 0, G);
          let error = 0;
          for (let i = 0; i < G; i++) error += ms[g0 + i]! * (group[i]! - p.scale * (int4QuantizeValue(clamped[i]!, p) - p.zero)) ** 2;
          if (error < bestError) { bestError = error; best = j; }
        }
        const a = Math.fround(lo * rs[best]!), b = Math.fround(hi * rs[best]!);
        for (let i = 0; i < G; i++) W[base + i] = Math.min(b, Math.max(a, group[i]!));
      }
    }
  });
}
