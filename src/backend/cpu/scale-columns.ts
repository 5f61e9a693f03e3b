// scaleColumns on the CPU (backend.ts has the contract): each column times (or over) its scale in f32.

import type { ScaleColumnsArgs } from '../backend.js';
import { checkScaleColumns } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, storeFloats } from './tensor.js';

export function prepareScaleColumns(args: ScaleColumnsArgs): CpuWork {
  const check = new CpuCheck('scaleColumns');
  const { x, scale, out, rows, C, divide } = checkScaleColumns(check, args);
  return check.work(() => {
    const xv = floatsOf(x), sv = floatsOf(scale), result = new Float32Array(rows * C);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < C; c++) result[r * C + c] = divide ? xv[r * C + c]! / sv[c]! : xv[r * C + c]! * sv[c]!;  // the store rounds to f32
    }
    storeFloats(out, result);
  });
}
