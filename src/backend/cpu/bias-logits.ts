// biasLogits on the CPU (backend.ts has the contract): each listed row's tokens get their biases added, in f32.

import type { BiasLogitsArgs } from '../backend.js';
import { checkBiasLogits } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf, storeFloats } from './tensor.js';

export function prepareBiasLogits(args: BiasLogitsArgs): CpuWork {
  const check = new CpuCheck('biasLogits');
  const { logits, rows, tokens, biases, n, Vp, m, k } = checkBiasLogits(check, args);
  return check.work(() => {
    const z = Float32Array.from(floatsOf(logits)), r = int32sOf(rows), t = int32sOf(tokens), v = floatsOf(biases);
    for (let i = 0; i < m; i++) {
      const row = r[i]!;
      if (row < 0 || row >= n) throw new Error(`biasLogits: rows[${i}] is ${row}, outside [0, ${n})`);
      const listed = new Set<number>();
      for (let j = 0; j < k; j++) {
        const token = t[i * k + j]!;
        if (token < 0) continue;
        if (token >= Vp) throw new Error(`biasLogits: tokens[${i}, ${j}] is ${token}, outside the ${Vp} columns of logits`);
        // A GPU adds a row's entries at once: a token listed twice would race there.
        if (listed.has(token)) throw new Error(`biasLogits: tokens[${i}, ${j}] is ${token}, listed twice in row ${i} (a row's tokens are distinct)`);
        listed.add(token);
        z[row * Vp + token] = Math.fround(z[row * Vp + token]! + v[i * k + j]!);
      }
    }
    storeFloats(logits, z);
  });
}
