// maskLogits on the CPU (backend.ts has the contract): the listed rows' classes whose mask bit is 0 set to −∞.

import type { MaskLogitsArgs } from '../backend.js';
import { checkMaskLogits } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

export function prepareMaskLogits(args: MaskLogitsArgs): CpuWork {
  const check = new CpuCheck('maskLogits');
  const { logits, rows, masks, classes, words, n, Vp, m } = checkMaskLogits(check, args);
  return check.work(() => {
    const z = Float32Array.from(floatsOf(logits)), r = int32sOf(rows), bits = int32sOf(masks);
    for (let i = 0; i < m; i++) {
      const row = r[i]!;
      if (row < 0 || row >= n) throw new Error(`maskLogits: rows[${i}] is ${row}, outside [0, ${n})`);
      for (let j = 0; j < classes; j++) if (((bits[i * words + (j >>> 5)]! >>> (j & 31)) & 1) === 0) z[row * Vp + j] = -Infinity;
    }
    storeFloats(logits, z);
  });
}
