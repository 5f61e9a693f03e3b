// gatherColumns: out[r, j] = x[r, index[j]] (backend.ts has the contract); an index outside [0, K) is an error.

import { ArgumentError } from '../../errors.js';
import type { GatherColumnsArgs } from '../backend.js';
import { checkGatherColumns } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

export function prepareGatherColumns(args: GatherColumnsArgs): CpuWork {
  const check = new CpuCheck('gatherColumns');
  const { x, index, out, rows, K, C } = checkGatherColumns(check, args);
  return check.work(() => {
    const xv = floatsOf(x), idx = int32sOf(index);
    for (let j = 0; j < C; j++) {
      if (!(idx[j]! >= 0 && idx[j]! < K)) throw new ArgumentError(`gatherColumns: index[${j}] = ${idx[j]} is outside the ${K} columns of x`);
    }
    const result = new Float32Array(rows * C);
    for (let r = 0; r < rows; r++) for (let j = 0; j < C; j++) result[r * C + j] = xv[r * K + idx[j]!]!;
    storeFloats(out, result);
  });
}
