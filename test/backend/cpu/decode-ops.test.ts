// The decode-step ops on the CPU reference against plain formulas and the existing ops:
// embedTokens, qkvRopeAppend, decodeAttention (against flashAttentionForward on the cache prefix),
// residualNorm (against layerNormForward / rmsNormForward) and gatedActivation.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { assertClose, assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();
const f32 = (values: readonly number[], shape: number[]) => backend.fromArray(values, shape, 'f32');
const i32 = (values: readonly number[], shape: number[]) => backend.fromArray(values, shape, 'i32');
const read = (t: ReturnType<typeof f32>) => Array.from(backend.download(t));

/** Head hh of row r of a QKV matrix [rows, W] plus its bias, rotated pair-wise (i, i + d/2) at `rope.position` when given. */
function qkvHead(qkv: number[], bias: number[], W: number, d: number, r: number, hh: number, rope?: { position: number; invFreq: number[]; scale: number }): number[] {
  const x = Array.from({ length: d }, (_, c) => qkv[r * W + hh * d + c]! + bias[hh * d + c]!);
  if (!rope) return x;
  const y = [...x];
  for (let i = 0; i < d / 2; i++) {
    const theta = Math.fround(rope.position * Math.fround(rope.invFreq[i]!)), c = rope.scale * Math.cos(theta), s = rope.scale * Math.sin(theta);
    y[i] = x[i]! * c - x[i + d / 2]! * s;
    y[i + d / 2] = x[i + d / 2]! * c + x[i]! * s;
  }
  return y;
}

test('embedTokens gathers rows, scales them and adds the position rows', () => {
  const table = randomValues(1, 5 * 3), positions = randomValues(2, 4 * 3);
  const out = backend.empty([2, 3], 'f32');
  backend.embedTokens({ tokens: i32([4, 1], [2]), tokenTable: f32(table, [5, 3]), positions: i32([3, 0], [2]), positionTable: f32(positions, [4, 3]), scale: 2, out });
  const expected = [0, 1, 2].map((h) => 2 * table[12 + h]! + positions[9 + h]!).concat([0, 1, 2].map((h) => 2 * table[3 + h]! + positions[h]!));
  assertClose(read(out), expected, 1e-6);
  assertRejects(() => backend.embedTokens({ tokens: i32([5, 0], [2]), tokenTable: f32(table, [5, 3]), out }), 'embedTokens', 'tokens');
  assertRejects(() => backend.embedTokens({ tokens: i32([1, 0], [2]), tokenTable: f32(table, [5, 3]), positions: i32([0, 0], [2]), out }), 'embedTokens', 'positions');
});

test('qkvRopeAppend adds the bias, rotates q and k pairs (i, i + d/2), writes q, the cache rows and the copies', () => {
  const [B, L, Hq, Hkv, d, maxLen] = [2, 3, 4, 2, 4, 8];
  const W = (Hq + 2 * Hkv) * d;
  const qkv = randomValues(3, B * L * W), bias = randomValues(4, W), invFreq = [0.5, 0.01];
  const positions = [0, 1, 2, 5, 6, 7];
  const q = backend.empty([B, Hq, L, d], 'f32'), kCache = backend.empty([B, Hkv, maxLen, d], 'f32'), vCache = backend.empty([B, Hkv, maxLen, d], 'f32');
  const kOut = backend.empty([B, Hq, L, d], 'f32'), vOut = backend.empty([B, Hq, L, d], 'f32');
  for (const t of [kCache, vCache]) backend.fill(t, 7);
  backend.qkvRopeAppend({ qkv: f32(qkv, [B * L, W]), bias: f32(bias, [W]), positions: i32(positions, [B * L]), rope: { invFreq: f32(invFreq, [2]), scale: 1.5 }, q, kCache, vCache, kOut, vOut });
  const headOf = (r: number, hh: number, rope: boolean) => qkvHead(qkv, bias, W, d, r, hh, rope ? { position: positions[r]!, invFreq, scale: 1.5 } : undefined);
  const qv = read(q), kc = read(kCache), vc = read(vCache), ko = read(kOut), vo = read(vOut);
  for (let r = 0; r < B * L; r++) {
    const b = Math.floor(r / L), l = r % L, p = positions[r]!;
    for (let h = 0; h < Hq; h++) assertClose(qv.slice(((b * Hq + h) * L + l) * d, ((b * Hq + h) * L + l + 1) * d), headOf(r, h, true), 1e-6, `q row ${r} head ${h}`);
    for (let g = 0; g < Hkv; g++) {
      const at = ((b * Hkv + g) * maxLen + p) * d;
      assertClose(kc.slice(at, at + d), headOf(r, Hq + g, true), 1e-6, `k row ${r} head ${g}`);
      assertClose(vc.slice(at, at + d), headOf(r, Hq + Hkv + g, false), 1e-6, `v row ${r} head ${g}`);
      for (const h of [2 * g, 2 * g + 1]) {
        const o = ((b * Hq + h) * L + l) * d;
        assertClose(ko.slice(o, o + d), headOf(r, Hq + g, true), 1e-6, `kOut row ${r} head ${h}`);
        assertClose(vo.slice(o, o + d), headOf(r, Hq + Hkv + g, false), 1e-6, `vOut row ${r} head ${h}`);
      }
    }
  }
  // Positions nobody wrote keep their old values.
  assert.equal(kc[((0 * Hkv + 0) * maxLen + 4) * d], 7);
  assertRejects(() => backend.qkvRopeAppend({ qkv: f32(qkv, [B * L, W]), positions: i32([0, 1, 2, 3, 4, 8], [6]), q, kCache, vCache }), 'qkvRopeAppend', 'positions');
});

test('decodeAttention equals flash attention of the last query over the cache prefix (GQA, ragged positions)', () => {
  const [B, Hq, Hkv, d, maxLen] = [3, 6, 2, 5, 9];
  const q = randomValues(5, B * Hq * d, -2, 2), k = randomValues(6, B * Hkv * maxLen * d, -2, 2), v = randomValues(7, B * Hkv * maxLen * d);
  const positions = [0, 4, 8];
  const out = backend.empty([B, Hq, d], 'f32');
  backend.decodeAttention({ q: f32(q, [B, Hq, d]), kCache: f32(k, [B, Hkv, maxLen, d]), vCache: f32(v, [B, Hkv, maxLen, d]), positions: i32(positions, [B]), out, partials: backend.empty([B, Hq, 3, d + 2], 'f32') });
  const got = read(out);
  for (let b = 0; b < B; b++) {
    const n = positions[b]! + 1;
    const slice = (x: number[]) => Array.from({ length: Hkv }, (_, g) => x.slice(((b * Hkv + g) * maxLen) * d, ((b * Hkv + g) * maxLen + n) * d)).flat();
    const ref = backend.empty([1, Hq, 1, d], 'f32'), lse = backend.empty([1, Hq, 1], 'f32');
    backend.flashAttentionForward({ q: f32(q.slice(b * Hq * d, (b + 1) * Hq * d), [1, Hq, 1, d]), k: f32(slice(k), [1, Hkv, n, d]), v: f32(slice(v), [1, Hkv, n, d]), out: ref, lse });
    assertClose(got.slice(b * Hq * d, (b + 1) * Hq * d), read(ref), 1e-6, `sequence ${b}`);
  }
  assertRejects(() => backend.decodeAttention({ q: f32(q, [B, Hq, d]), kCache: f32(k, [B, Hkv, maxLen, d]), vCache: f32(v, [B, Hkv, maxLen, d]), positions: i32([0, 9, 1], [B]), out }), 'decodeAttention', 'positions');
  assertRejects(() => backend.decodeAttention({ q: f32(q, [B, Hq, d]), kCache: f32(k, [B, Hkv, maxLen, d]), vCache: f32(v, [B, Hkv, maxLen, d]), positions: i32(positions, [B]), out, partials: backend.empty([B, Hq, 3, d], 'f32') }), 'decodeAttention', 'partials');
});

test('decodeAttention\'s project adds out·Wᵀ into the f32 accumulator, clears zero, and names bad operands', () => {
  const [B, Hq, Hkv, d, maxLen, H] = [2, 4, 2, 3, 6, 5];
  const q = randomValues(21, B * Hq * d, -2, 2), k = randomValues(22, B * Hkv * maxLen * d, -2, 2), v = randomValues(23, B * Hkv * maxLen * d);
  const w = randomValues(24, H * Hq * d), before = randomValues(25, B * H), positions = i32([2, 5], [B]);
  const args = (extra: object) => ({ q: f32(q, [B, Hq, d]), kCache: f32(k, [B, Hkv, maxLen, d]), vCache: f32(v, [B, Hkv, maxLen, d]), positions, out: backend.empty([B, Hq, d], 'f32'), ...extra });
  const plain = args({});
  backend.decodeAttention(plain);
  const attended = read(plain.out);
  const acc = f32(before, [B, H]), zero = f32(randomValues(26, 7), [7]);
  const projected = args({ project: { weight: f32(w, [H, Hq * d]), out: acc, zero } });
  backend.decodeAttention(projected);
  assert.deepEqual(read(projected.out), attended, 'out as without');
  const expected = before.map((x, i) => {
    const b = Math.floor(i / H), n = i % H;
    let s = x;
    for (let j = 0; j < Hq * d; j++) s += attended[b * Hq * d + j]! * w[n * Hq * d + j]!;
    return s;
  });
  assertClose(read(acc), expected, 1e-6, 'project.out');
  assert.deepEqual(read(zero), new Array(7).fill(0));
  const project = (p: object) => args({ project: { weight: f32(w, [H, Hq * d]), out: f32(before, [B, H]), ...p } });
  assertRejects(() => backend.decodeAttention(project({ weight: f32(w.slice(0, H * Hq), [H, Hq]) })), 'decodeAttention', 'project.weight');
  assertRejects(() => backend.decodeAttention(project({ out: backend.empty([B, H], 'bf16') })), 'decodeAttention', 'project.out');
  assertRejects(() => backend.decodeAttention(project({ out: backend.empty([B + 1, H], 'f32') })), 'decodeAttention', 'project.out');
  const sharedOut = f32(before, [B, H]);
  assertRejects(() => backend.decodeAttention(args({ project: { weight: f32(w, [H, Hq * d]), out: sharedOut, zero: sharedOut } })), 'decodeAttention', 'project.zero');
});

test('appendDecodeAttention writes the rotated key and the value at each position and attends over the prefix including them', () => {
  const [B, Hq, Hkv, d, maxLen] = [3, 4, 2, 4, 7];
  const W = (Hq + 2 * Hkv) * d;
  const qkv = randomValues(8, B * W, -2, 2), bias = randomValues(9, W), invFreq = [0.7, 0.02];
  const k0 = randomValues(10, B * Hkv * maxLen * d, -2, 2), v0 = randomValues(11, B * Hkv * maxLen * d);
  const positions = [0, 3, 6];
  const kCache = f32(k0, [B, Hkv, maxLen, d]), vCache = f32(v0, [B, Hkv, maxLen, d]);
  const out = backend.empty([B, Hq, d], 'f32'), q = backend.empty([B, Hq, d], 'f32');
  const rope = { invFreq: f32(invFreq, [2]), scale: 1.25 };
  backend.appendDecodeAttention({ qkv: f32(qkv, [B, W]), bias: f32(bias, [W]), rope, positions: i32(positions, [B]), q, kCache, vCache, out, partials: backend.empty([B, Hq, 2, d + 2], 'f32') });
  const head = (b: number, hh: number, rotate: boolean) => qkvHead(qkv, bias, W, d, b, hh, rotate ? { position: positions[b]!, invFreq, scale: 1.25 } : undefined);
  const kc = read(kCache), vc = read(vCache), got = read(out);
  for (let b = 0; b < B; b++) {
    const p = positions[b]!, n = p + 1;
    const keys: number[] = [], values: number[] = [];
    for (let g = 0; g < Hkv; g++) {
      const at = ((b * Hkv + g) * maxLen + p) * d;
      assertClose(kc.slice(at, at + d), head(b, Hq + g, true), 1e-6, `key of sequence ${b} head ${g}`);
      assertClose(vc.slice(at, at + d), head(b, Hq + Hkv + g, false), 1e-6, `value of sequence ${b} head ${g}`);
      // The reference's keys: the old cache before p, this step's key at p.
      const base = (b * Hkv + g) * maxLen * d;
      keys.push(...k0.slice(base, base + p * d), ...head(b, Hq + g, true));
      values.push(...v0.slice(base, base + p * d), ...head(b, Hq + Hkv + g, false));
    }
    const queries = Array.from({ length: Hq }, (_, h) => head(b, h, true)).flat();
    const ref = backend.empty([1, Hq, 1, d], 'f32'), lse = backend.empty([1, Hq, 1], 'f32');
    backend.flashAttentionForward({ q: f32(queries, [1, Hq, 1, d]), k: f32(keys, [1, Hkv, n, d]), v: f32(values, [1, Hkv, n, d]), out: ref, lse });
    assertClose(got.slice(b * Hq * d, (b + 1) * Hq * d), read(ref), 1e-5, `sequence ${b}`);
  }
  // Positions this step did not write keep the old cache.
  assert.equal(kc[(1 * Hkv * maxLen + 5) * d], k0[(1 * Hkv * maxLen + 5) * d]);
  assertRejects(() => backend.appendDecodeAttention({ qkv: f32(qkv, [B, W]), positions: i32(positions, [B]), q: backend.empty([B, Hq, 1, d], 'f32'), kCache, vCache, out }), 'appendDecodeAttention', 'q');
  assertRejects(() => backend.appendDecodeAttention({ qkv: f32(qkv, [B, W]), positions: i32([0, 7, 1], [B]), q, kCache, vCache, out }), 'qkvRopeAppend', 'positions');
});

test('residualNorm adds y and the bias into x (rounded to its dtype) and normalises the stored x', () => {
  const [rows, H] = [3, 7];
  const x = randomValues(8, rows * H, -2, 2), y = randomValues(9, rows * H), bias = randomValues(10, H), gamma = randomValues(11, H, 0.5, 1.5), beta = randomValues(12, H);
  for (const dtype of ['f32', 'bf16'] as const) {
    const xt = backend.fromArray(x, [rows, H], dtype), out = backend.empty([rows, H], dtype);
    backend.residualNorm({ x: xt, y: backend.fromArray(y, [rows, H], dtype), bias: backend.fromArray(bias, [H], dtype), norm: 'layer', gamma: backend.fromArray(gamma, [H], dtype), beta: backend.fromArray(beta, [H], dtype), out, eps: 1e-5 });
    const sum = backend.empty([rows, H], dtype), expected = backend.empty([rows, H], dtype);
    const xr = backend.fromArray(x, [rows, H], dtype), yr = backend.fromArray(y, [rows, H], dtype);
    backend.biasDropoutResidual({ input: yr, bias: backend.fromArray(bias, [H], dtype), residual: xr, out: sum, mask: backend.empty([rows, H], 'u8'), p: 0, seed: 0n, offset: 0n });
    backend.layerNormForward({ x: sum, gamma: backend.fromArray(gamma, [H], dtype), beta: backend.fromArray(beta, [H], dtype), out: expected, mean: backend.empty([rows], 'f32'), rstd: backend.empty([rows], 'f32'), eps: 1e-5 });
    assertClose(read(xt), read(sum), 0, `${dtype} x`);
    assertClose(read(out), read(expected), dtype === 'f32' ? 1e-6 : 0, `${dtype} out`);
  }
  const xt = f32(x, [rows, H]), out = backend.empty([rows, H], 'f32'), rms = backend.empty([rows, H], 'f32');
  backend.residualNorm({ x: xt, norm: 'rms', gamma: f32(gamma, [H]), out, eps: 1e-6 });
  backend.rmsNormForward({ x: f32(x, [rows, H]), gamma: f32(gamma, [H]), out: rms, rstd: backend.empty([rows], 'f32'), eps: 1e-6 });
  assertClose(read(out), read(rms), 1e-6, 'rms');
  assertClose(read(xt), x, 0, 'x unchanged without y');
  assertRejects(() => backend.residualNorm({ x: xt, norm: 'layer', gamma: f32(gamma, [H]), out, eps: 1e-5 }), 'residualNorm', 'beta');
  assertRejects(() => backend.residualNorm({ x: xt, bias: f32(bias, [H]), norm: 'rms', gamma: f32(gamma, [H]), out, eps: 1e-5 }), 'residualNorm', 'bias');
});

test('gatedActivation multiplies act(gate) by up, column for column', () => {
  const x = randomValues(13, 2 * 6, -3, 3), out = backend.empty([2, 3], 'f32');
  backend.gatedActivation({ x: f32(x, [2, 6]), out, activation: 'silu' });
  const silu = (z: number) => z / (1 + Math.exp(-z));
  assertClose(read(out), [0, 1, 2, 6, 7, 8].map((i) => silu(x[i]!) * x[i + 3]!), 1e-6);
  assertRejects(() => backend.gatedActivation({ x: f32(x, [2, 6]), out: backend.empty([2, 4], 'f32'), activation: 'silu' }), 'gatedActivation', 'x');
});

test('gatedLinear is the stacked GEMM (+ bias) and then act(gate)·up', () => {
  const rows = 2, K = 5, F = 3;
  const x = randomValues(21, rows * K, -1, 1), w = randomValues(22, 2 * F * K, -1, 1), bias = randomValues(23, 2 * F, -1, 1);
  const out = backend.empty([rows, F], 'f32');
  backend.gatedLinear({ x: f32(x, [rows, K]), weight: f32(w, [2 * F, K]), bias: f32(bias, [2 * F]), up: backend.empty([rows, 2 * F], 'f32'), out, activation: 'silu' });
  const silu = (z: number) => z / (1 + Math.exp(-z));
  const dot = (r: number, n: number) => bias[n]! + Array.from({ length: K }, (_, k) => x[r * K + k]! * w[n * K + k]!).reduce((a, b) => a + b, 0);
  const expected = Array.from({ length: rows * F }, (_, i) => { const r = Math.floor(i / F), c = i % F; return silu(dot(r, c)) * dot(r, F + c); });
  assertClose(read(out), expected, 1e-6);
  assertRejects(() => backend.gatedLinear({ x: f32(x, [rows, K]), weight: f32(w, [2 * F, K]), up: backend.empty([rows, 2 * F], 'f32'), out: backend.empty([rows, F + 1], 'f32'), activation: 'silu' }), 'gatedLinear', 'weight');
  assertRejects(() => backend.gatedLinear({ x: f32(x, [rows, K]), weight: f32(w, [2 * F, K]), up: backend.empty([rows, F], 'f32'), out, activation: 'silu' }), 'gatedLinear', 'up');
});
