// permute0213: x [A, B, C, D] → out [A, C, B, D], out[a, c, b, d] = x[a, b, c, d]. Values are copied
// as stored (already rounded to the dtype), so the result is bit-exact on every backend.

import type { Permute0213Args } from '../backend.js';
import { checkPermute0213 } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { elementsOf } from './tensor.js';

export function preparePermute0213(args: Permute0213Args): CpuWork {
  const check = new CpuCheck('permute0213');
  const { x, out, A, B, C, D } = checkPermute0213(check, args);
  return check.work(() => {
    const src = elementsOf(x).slice(); // a defined result even if out overlaps x
    const dst = elementsOf(out);
    for (let a = 0; a < A; a++) {
      for (let b = 0; b < B; b++) {
        for (let c = 0; c < C; c++) {
          const from = ((a * B + b) * C + c) * D, to = ((a * C + c) * B + b) * D;
          dst.set(src.subarray(from, from + D), to);
        }
      }
    }
  });
}
