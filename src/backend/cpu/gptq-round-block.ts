// gptqRoundBlock on the CPU (backend.ts has the contract): each output row's block copied into an f32
// row, rounded column by column with its error fed forward, written back. The Float32Array stores round
// every step to f32 as the GPU's operations do; `w − e·u` computed in f64 then rounded once matches the
// GPU's fused multiply-add except for a rare double rounding.

import { ArgumentError } from '../../errors.js';
import type { GptqRoundBlockArgs } from '../backend.js';
import { int4GroupParams, int4QuantizeValue } from './quant-math.js';
import { checkGptqRoundBlock } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { bytesOf, floatsOf } from './tensor.js';

export function prepareGptqRoundBlock(args: GptqRoundBlockArgs): CpuWork {
  const check = new CpuCheck('gptqRoundBlock');
  const { weights, u, q, scales, zeros, errors, width, N, G } = checkGptqRoundBlock(check, args);
  return check.work(() => {
    const wv = floatsOf(weights), uv = floatsOf(u), qv = bytesOf(q), sv = floatsOf(scales), zv = bytesOf(zeros), ev = floatsOf(errors);
    const groups = width / G;
    for (let i = 0; i < width; i++) {
      if (!(uv[i * width + i]! > 0)) throw new ArgumentError(`gptqRoundBlock: U[${i}][${i}] = ${uv[i * width + i]} must be positive`);
    }
    const row = new Float32Array(width);
    for (let n = 0; n < N; n++) {
      for (let i = 0; i < width; i++) row[i] = wv[i * N + n]!;
      let p = { scale: 1, zero: 0 };
      for (let i = 0; i < width; i++) {
        if (i % G === 0) {
          p = int4GroupParams(row, i, G);
          sv[n * groups + i / G] = p.scale;
          zv[n * groups + i / G] = p.zero;
        }
        const w = row[i]!, value = int4QuantizeValue(w, p);
        qv[n * width + i] = value;
        const e = Math.fround(Math.fround(w - p.scale * (value - p.zero)) / uv[i * width + i]!);
        ev[i * N + n] = e;
        const urow = i * width;
        for (let j = i + 1; j < width; j++) row[j] = row[j]! - e * uv[urow + j]!;
      }
      for (let i = 0; i < width; i++) wv[i * N + n] = row[i]!;
    }
  });
}
