// The beam-search ops of the CPU reference against hand-computed values: beamTopK (log-softmax, running
// scores, padding columns, banned tokens with and without renormalisation, ties, −∞ and NaN), beamAdvance
// (EOS skipping, the 1e9 fill, greedy, the cache-row table, positions), beamSelfAttention and
// beamCrossAttention (cache writes, the table, masking by length), and argument errors.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { FuseformerError } from '../../../src/errors.js';

const cpu = new CpuBackend();
const f32 = Math.fround;

function topK(logits: number[][], beams: number, K: number, extra: { beamScores?: number[]; bannedTokens?: number[]; renormalize?: boolean; classes?: number } = {}) {
  const Vp = logits[0]!.length, rows = logits.length, batch = rows / beams;
  const tokens = cpu.empty([batch, K], 'i32'), sourceBeams = cpu.empty([batch, K], 'i32'), scores = cpu.empty([batch, K], 'f32');
  cpu.beamTopK({
    logits: cpu.fromArray(logits.flat(), [rows, Vp], 'f32'), beams, tokens, sourceBeams, scores,
    ...(extra.beamScores ? { beamScores: cpu.fromArray(extra.beamScores, [rows], 'f32') } : {}),
    ...(extra.bannedTokens ? { bannedTokens: extra.bannedTokens } : {}),
    ...(extra.renormalize !== undefined ? { renormalize: extra.renormalize } : {}),
    ...(extra.classes !== undefined ? { classes: extra.classes } : {}),
  });
  return { tokens: [...cpu.download(tokens)], beams: [...cpu.download(sourceBeams)], scores: [...cpu.download(scores)] };
}

const close = (actual: number[], expected: number[], what: string) =>
  expected.forEach((x, i) => assert.ok(actual[i] === x || Math.abs(actual[i]! - x) < 1e-6, `${what} ${i}: ${actual[i]} vs ${x}`));

test('beamTopK: log-softmax plus running score, best first, ties by flat index, padding columns ignored', () => {
  const ln = Math.log;
  const r = topK([[0, ln(2), 0, 1e9], [0, 0, 0, 1e9]], 2, 5, { beamScores: [0, -0.1], classes: 3 });
  assert.deepEqual(r.tokens, [1, 0, 1, 2, 0]);
  assert.deepEqual(r.beams, [0, 1, 1, 1, 0]);
  close(r.scores, [-ln(2), -ln(3) - 0.1, -ln(3) - 0.1, -ln(3) - 0.1, -ln(4)], 'score');
  assert.equal(r.scores[1], r.scores[3], 'equal logits give bit-equal scores');
});

test('beamTopK: banned tokens score −∞; renormalize leaves them out of the normaliser', () => {
  const ln = Math.log;
  const kept = topK([[0, 5, 0]], 1, 3, { bannedTokens: [1] });
  assert.deepEqual(kept.tokens, [0, 2, 1]);
  close(kept.scores, [-ln(2 + Math.exp(5)), -ln(2 + Math.exp(5)), -Infinity], 'kept');
  const renormalized = topK([[0, 5, 0]], 1, 3, { bannedTokens: [1], renormalize: true });
  close(renormalized.scores, [-ln(2), -ln(2), -Infinity], 'renormalized');
});

test('beamTopK: NaN counts as −∞, −∞ rows stay −∞ and order by index, items are independent', () => {
  const r = topK([[NaN, 1, -Infinity], [-Infinity, -Infinity, -Infinity], [2, 2, 2], [0, 0, 3]], 2, 4);
  // item 0: only token 1 of beam 0 is finite (log-prob 0); the rest −∞ in flat order
  assert.deepEqual(r.tokens.slice(0, 4), [1, 0, 2, 0]);
  assert.deepEqual(r.beams.slice(0, 4), [0, 0, 0, 1]);
  assert.deepEqual(r.scores.slice(0, 4), [0, -Infinity, -Infinity, -Infinity]);
  // item 1: beam 1's token 2 first, then the three equal scores of beam 0 by token
  assert.deepEqual(r.tokens.slice(4), [2, 0, 1, 2]);
  assert.deepEqual(r.beams.slice(4), [1, 0, 0, 0]);
});

function advance(c: { tokens: number[]; beams: number[]; scores: number[] }, beams: number, eos: number[], table: number[], positions: number[], L: number) {
  const rows = positions.length, K = c.tokens.length / (rows / beams), batch = rows / beams;
  const nextTokens = cpu.empty([rows], 'i32'), beamScores = cpu.empty([rows], 'f32');
  const cacheRows = cpu.fromArray(table, [2, rows, L], 'i32'), pos = cpu.fromArray(positions, [rows], 'i32');
  cpu.beamAdvance({
    tokens: cpu.fromArray(c.tokens, [batch, K], 'i32'), sourceBeams: cpu.fromArray(c.beams, [batch, K], 'i32'), scores: cpu.fromArray(c.scores, [batch, K], 'f32'),
    beams, eosTokens: eos, nextTokens, beamScores, cacheRows, positions: pos,
  });
  return { tokens: [...cpu.download(nextTokens)], scores: [...cpu.download(beamScores)], table: [...cpu.download(cacheRows)], positions: [...cpu.download(pos)] };
}

test('beamAdvance: first non-EOS candidates go on, the table follows their parents, positions advance', () => {
  const L = 4;
  // rows 0, 1 at t = 2: half 0 holds their histories
  const table = [0, 1, 9, 9, 1, 0, 9, 9, /* half 1 */ 7, 7, 7, 7, 7, 7, 7, 7];
  const r = advance({ tokens: [5, 7, 8, 9], beams: [1, 0, 1, 0], scores: [-1, -2, -3, -4] }, 2, [5], table, [2, 2], L);
  assert.deepEqual(r.tokens, [7, 8]);
  assert.deepEqual(r.scores, [-2, -3]);
  assert.deepEqual(r.table.slice(8), [0, 1, 0, 7, 1, 0, 1, 7]); // row 0 ← parent 0, row 1 ← parent 1, then the parent itself
  assert.deepEqual(r.table.slice(0, 8), table.slice(0, 8), 'the current half is untouched');
  assert.deepEqual(r.positions, [3, 3]);
});

test('beamAdvance: too few non-EOS candidates are filled with EOS ones lowered by 1e9; greedy takes the first', () => {
  const r = advance({ tokens: [5, 7, 8, 9], beams: [1, 0, 1, 0], scores: [-1, -2, -3, -4] }, 2, [7, 8, 9], new Array(16).fill(0), [0, 0], 4);
  assert.deepEqual(r.tokens, [5, 7]);
  assert.deepEqual(r.scores, [-1, f32(-2 - 1e9)]);
  assert.deepEqual(r.table.slice(8, 9), [1], 'row 0 continues beam 1 (row 1) at position 0');
  const greedy = advance({ tokens: [4, 3], beams: [0, 0], scores: [-0.5, -0.7] }, 1, [], [0, 0, 0, 0], [1], 2);
  assert.deepEqual(greedy.tokens, [4]);
  assert.deepEqual(greedy.positions, [2]);
});

test('beamAdvance refuses rows of one item at different positions, and a position outside the table', () => {
  const c = { tokens: [1, 2, 3, 4], beams: [0, 0, 1, 1], scores: [0, 0, 0, 0] };
  assert.throws(() => advance(c, 2, [], new Array(16).fill(0), [1, 2], 4), (e: Error) => e instanceof FuseformerError && /different positions/.test(e.message));
  assert.throws(() => advance(c, 2, [], new Array(16).fill(0), [4, 4], 4), /outside the cache-row table/);
});

test('beamSelfAttention: appends this step’s keys and values, attends through the table', () => {
  // 2 rows at t = 1, 1 head of d = 2, a cache of 3 positions; each row's position 0 lives in the other row.
  const H = 2, L = 3, d = 2;
  const kCache = cpu.fromArray([3, 0, 0, 0, 0, 0, /* row 1 */ 1, 1, 0, 0, 0, 0], [2, 1, L, d], 'f32');
  const vCache = cpu.fromArray([5, 6, 0, 0, 0, 0, /* row 1 */ 7, 8, 0, 0, 0, 0], [2, 1, L, d], 'f32');
  const cacheRows = cpu.fromArray([9, 9, 9, 9, 9, 9, /* half 1 (t = 1): */ 1, 9, 9, 0, 9, 9], [2, 2, L], 'i32');
  const out = cpu.empty([2, H], 'f32');
  cpu.beamSelfAttention({
    qkv: cpu.fromArray([/* q, k, v of row 0 */ 1, 0, 0, 0, 0, 0, /* row 1 */ 0, 1, 2, 0, 0, 1], [2, 3 * H], 'f32'),
    bias: cpu.fromArray([0, 0, 0, 0.5, 0, 0], [3 * H], 'f32'), heads: 1, kCache, vCache, cacheRows, positions: cpu.fromArray([1, 1], [2], 'i32'), out,
  });
  const k = [...cpu.download(kCache)], v = [...cpu.download(vCache)];
  assert.deepEqual(k, [3, 0, 0, 0.5, 0, 0, 1, 1, 2, 0.5, 0, 0], 'each row wrote its key (with the bias) at position 1');
  assert.deepEqual(v, [5, 6, 0, 0, 0, 0, 7, 8, 0, 1, 0, 0]);
  const attend = (q: number[], keys: number[][], values: number[][]) => {
    const s = keys.map((key) => (q[0]! * key[0]! + q[1]! * key[1]!) / Math.SQRT2);
    const e = s.map((x) => Math.exp(x)), z = e[0]! + e[1]!;
    return [0, 1].map((c) => (e[0]! * values[0]![c]! + e[1]! * values[1]![c]!) / z);
  };
  const expected = [...attend([1, 0], [[1, 1], [0, 0.5]], [[7, 8], [0, 0]]), ...attend([0, 1], [[3, 0], [2, 0.5]], [[5, 6], [0, 1]])];
  close([...cpu.download(out)], expected, 'output');
});

test('beamCrossAttention: beams share their source; keys past the length do not count; length 0 gives zeros', () => {
  // batch 2, beams 2, H = 2 (1 head), 2 layers packed: row width 2·2·2 = 8; layer 1's K at column 4, V at 6.
  const Lk = 3, W = 8;
  const kv = new Array(2 * Lk * W).fill(0).map((_, i) => (i % 7) - 3);
  const run = (lengths: number[]) => {
    const out = cpu.empty([4, 2], 'f32');
    cpu.beamCrossAttention({
      q: cpu.fromArray([1, 0, 0, 1, 1, 1, 0.5, 0], [4, 2], 'f32'), kv: cpu.fromArray(kv, [2, Lk, W], 'f32'), layer: 1, heads: 1, beams: 2,
      keyLengths: cpu.fromArray(lengths, [2], 'i32'), out,
    });
    return [...cpu.download(out)];
  };
  const o = run([2, 0]);
  const manual = (q: number[], b: number, n: number) => {
    const key = (i: number) => kv.slice((b * Lk + i) * W + 4, (b * Lk + i) * W + 6), value = (i: number) => kv.slice((b * Lk + i) * W + 6, (b * Lk + i) * W + 8);
    const s = Array.from({ length: n }, (_, i) => (q[0]! * key(i)[0]! + q[1]! * key(i)[1]!) / Math.SQRT2);
    const m = Math.max(...s), e = s.map((x) => Math.exp(x - m)), z = e.reduce((a, x) => a + x, 0);
    return [0, 1].map((c) => e.reduce((a, x, i) => a + (x / z) * value(i)[c]!, 0));
  };
  [manual([1, 0], 0, 2), manual([0, 1], 0, 2)].flat().forEach((x, i) => assert.ok(Math.abs(o[i]! - x) < 1e-6, `row ${i >> 1}`));
  assert.deepEqual(o.slice(4), [0, 0, 0, 0], 'a source of length 0 gives zeros');
  assert.throws(() => run([4, 0]), /keyLengths'\[0\] = 4 is outside \[0, 3\]/);
});

test('argument errors name the op and the problem', () => {
  const logits = cpu.empty([6, 10], 'f32');
  const out = (K: number) => ({ tokens: cpu.empty([2, K], 'i32'), sourceBeams: cpu.empty([2, K], 'i32'), scores: cpu.empty([2, K], 'f32') });
  assert.throws(() => cpu.beamTopK({ logits, beams: 4, ...out(2) }), /beamTopK: 'logits' has 6 rows, which is not a multiple of beams \(4\)/);
  assert.throws(() => cpu.beamTopK({ logits, beams: 3, ...out(31) }), /K \(31\) must be in \[1, beams·classes = 30\]/);
  assert.throws(() => cpu.beamTopK({ logits, beams: 3, bannedTokens: [10], ...out(2) }), /'bannedTokens' holds 10; expected token ids in \[0, 10\)/);
  assert.throws(() => cpu.beamTopK({ logits, beams: 3, classes: 11, ...out(2) }), /'classes' must be at most/);
  assert.throws(() => cpu.beamCrossAttention({ q: cpu.empty([4, 4], 'f32'), kv: cpu.empty([2, 3, 12], 'f32'), layer: 0, heads: 2, beams: 2, keyLengths: cpu.empty([2], 'i32'), out: cpu.empty([4, 4], 'f32') }),
    /'kv' rows hold 12 values, not a multiple of 2·H = 8/);
});
