// Token (+ position) embedding with scale and dropout, forward and backward.
//   tokens i32 (B, L);  tokenTable (V, H);  positionTable (P, H), optional;  out, mask (B, L, H)
//   out[b, l] = dropout(scale·tokenTable[tokens[b, l]] + positionTable[positionOffset + l])
// The backward scatters into the tables with +=: every contribution to a table row is summed in
// float64 and added to the row's old value once, rounded once to the table's dtype. A token outside
// [0, V) is an error on the CPU (on the GPU it would read or write out of bounds).

import type { FloatDType } from '../../dtype.js';
import type { EmbeddingBackwardArgs, EmbeddingForwardArgs } from '../backend.js';
import { dropoutMask } from '../rng.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { bytesOf, floatsOf, int32sOf, rounder, storeFloats } from './tensor.js';

interface Positions { scale: number; positionOffset: number }

interface EmbeddingTensors {
  tokens: CpuTensor;
  mask: CpuTensor;
  /** out (forward) or dOut (backward), (B, L, H). */
  rows: { name: string; tensor: CpuTensor };
  /** tokenTable or dTokenTable, (V, H). */
  tokenTable: { name: string; tensor: CpuTensor };
  /** positionTable or dPositionTable, (P, H). */
  positionTable: { name: string; tensor: CpuTensor | undefined };
}

/** Checks the tensors' shapes and dtypes, scale, and that positionOffset + L fits the position table. */
function checkEmbedding(check: CpuCheck, t: EmbeddingTensors, args: { scale?: number; positionOffset?: number }): Positions {
  check.dtype('tokens', t.tokens, ['i32']);
  check.shape('tokens', t.tokens, ['B', 'L']);
  const floats = [t.rows, t.tokenTable, ...(t.positionTable.tensor ? [t.positionTable as { name: string; tensor: CpuTensor }] : [])];
  check.float(t.rows.name, t.rows.tensor);
  check.sameDType(floats.map((f) => f.name), floats.map((f) => f.tensor));
  check.shape(t.tokenTable.name, t.tokenTable.tensor, ['V', 'H']);
  check.shape(t.rows.name, t.rows.tensor, ['B', 'L', 'H']);
  check.dtype('mask', t.mask, ['u8']);
  check.shape('mask', t.mask, ['B', 'L', 'H']);
  const scale = args.scale ?? 1;
  check.finite('scale', scale);
  const positionOffset = args.positionOffset ?? 0;
  check.integer('positionOffset', positionOffset);
  if (t.positionTable.tensor) {
    const name = t.positionTable.name;
    check.shape(name, t.positionTable.tensor, ['P', 'H']);
    const [L, P] = [check.size('L'), check.size('P')];
    if (positionOffset + L > P) check.fail(`positions ${positionOffset}..${positionOffset + L - 1} (positionOffset + L) are past the ${P} rows of '${name}'`);
  }
  return { scale, positionOffset };
}

/** Every token, checked against [0, V) before anything is written. */
function checkedTokens(check: CpuCheck, tokens: CpuTensor, V: number): Int32Array {
  const values = int32sOf(tokens);
  values.forEach((t, i) => { if (t < 0 || t >= V) check.fail(`'tokens'[${i}] = ${t} is outside [0, ${V})`); });
  return values;
}

export function prepareEmbeddingForward(args: EmbeddingForwardArgs): CpuWork {
  const check = new CpuCheck('embeddingForward');
  const tokens = check.tensor('tokens', args.tokens);
  const tokenTable = check.tensor('tokenTable', args.tokenTable);
  const positionTable = check.optional('positionTable', args.positionTable);
  const out = check.tensor('out', args.out);
  const mask = check.tensor('mask', args.mask);
  const { scale, positionOffset } = checkEmbedding(check, {
    tokens, mask, rows: { name: 'out', tensor: out },
    tokenTable: { name: 'tokenTable', tensor: tokenTable }, positionTable: { name: 'positionTable', tensor: positionTable },
  }, args);
  check.dropout(args);
  const { p, seed, offset } = args;
  const [B, L, V, H] = [check.size('B'), check.size('L'), check.size('V'), check.size('H')];

  return check.work(() => {
    const ids = checkedTokens(check, tokens, V);
    const keep = bytesOf(mask);
    dropoutMask(keep, p, seed, offset);
    const table = floatsOf(tokenTable);
    const positions = positionTable ? floatsOf(positionTable) : undefined;
    const result = new Float64Array(B * L * H);
    for (let b = 0; b < B; b++) {
      for (let l = 0; l < L; l++) {
        const row = (b * L + l) * H, token = ids[b * L + l]! * H, position = (positionOffset + l) * H;
        for (let h = 0; h < H; h++) {
          if (!keep[row + h]) continue;
          const value = scale * table[token + h]! + (positions ? positions[position + h]! : 0);
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
  const tokens = check.tensor('tokens', args.tokens);
  const dOut = check.tensor('dOut', args.dOut);
  const mask = check.tensor('mask', args.mask);
  const dTokenTable = check.tensor('dTokenTable', args.dTokenTable);
  const dPositionTable = check.optional('dPositionTable', args.dPositionTable);
  const { scale, positionOffset } = checkEmbedding(check, {
    tokens, mask, rows: { name: 'dOut', tensor: dOut },
    tokenTable: { name: 'dTokenTable', tensor: dTokenTable }, positionTable: { name: 'dPositionTable', tensor: dPositionTable },
  }, args);
  check.probability('p', args.p);
  const p = args.p;
  const [B, L, V, H] = [check.size('B'), check.size('L'), check.size('V'), check.size('H')];

  return check.work(() => {
    const ids = checkedTokens(check, tokens, V);
    const g = floatsOf(dOut), keep = bytesOf(mask);
    // Sums per touched table row (a Map, so a 50k-row vocabulary costs nothing for untouched rows).
    const tokenSums = new Map<number, Float64Array>();
    const positionSums = new Float64Array(L * H);
    for (let b = 0; b < B; b++) {
      for (let l = 0; l < L; l++) {
        const row = (b * L + l) * H, token = ids[b * L + l]!;
        let sums = tokenSums.get(token);
        if (!sums) tokenSums.set(token, (sums = new Float64Array(H)));
        for (let h = 0; h < H; h++) {
          const grad = keep[row + h] ? g[row + h]! / (1 - p) : 0;
          sums[h] += scale * grad;
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
