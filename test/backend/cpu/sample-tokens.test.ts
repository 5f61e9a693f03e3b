// sampleTokens on the CPU reference: greedy picks and ties, the repetition penalty, top-k / top-p
// filtering, Gumbel-max draws whose frequencies follow the softmax, the state update and the stop rule.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { assertRejects } from './helpers.js';

const backend = new CpuBackend();

interface Rows {
  logits: number[][];
  params?: number[][];
  positions?: number[];
  history?: number[][];
  seeds?: number[];
  limits?: number[];
  finished?: number[];
  stopIds?: number[];
  maxLen?: number;
}

/** Runs one sampleTokens call on host rows; returns every state tensor afterwards. */
function sample(r: Rows) {
  const B = r.logits.length, V = r.logits[0]!.length, L = r.maxLen ?? 16;
  const i32 = (values: number[], shape: number[]) => backend.fromArray(values, shape, 'i32');
  const history = r.history ?? r.logits.map(() => [1]);
  const t = {
    logits: backend.fromArray(r.logits.flat(), [B, V], 'f32'),
    params: backend.fromArray((r.params ?? r.logits.map(() => [0, 0, 1, 1])).flat(), [B, 4], 'f32'),
    seeds: i32((r.seeds ?? r.logits.map((_, b) => b)).flatMap((s) => [s, 0]), [B, 2]),
    positions: i32(r.positions ?? r.logits.map(() => 0), [B]),
    history: i32(history.flatMap((h) => [...h, ...new Array(L - h.length).fill(0)]), [B, L]),
    tokens: i32(new Array(B).fill(-5), [B]),
    finished: i32(r.finished ?? new Array(B).fill(0), [B]),
    limits: i32(r.limits ?? new Array(B).fill(L), [B]),
    stopIds: i32(r.stopIds ?? [-1], [(r.stopIds ?? [-1]).length]),
  };
  backend.sampleTokens(t);
  const read = (x: typeof t.tokens) => Array.from(backend.download(x) as Int32Array);
  const hist = read(t.history);
  return {
    picked: r.logits.map((_, b) => hist[b * L + (r.positions?.[b] ?? 0) + 1]!),
    tokens: read(t.tokens), positions: read(t.positions), finished: read(t.finished),
  };
}

test('greedy: the argmax, the lowest index on ties; the state advances', () => {
  const out = sample({ logits: [[0.1, 3, -2, 3], [5, 1, 5, 0], [-1, -2, -0.5, -3]], positions: [0, 2, 5], history: [[1], [1, 2, 3], [0, 0, 0, 0, 0, 0]] });
  assert.deepEqual(out.picked, [1, 0, 2]);
  assert.deepEqual(out.tokens, [1, 0, 2]);
  assert.deepEqual(out.positions, [1, 3, 6]);
  assert.deepEqual(out.finished, [0, 0, 0]);
});

test('a stop id or the length limit finishes a sequence without advancing it; finished rows are untouched', () => {
  const out = sample({ logits: [[0, 9, 1], [0, 1, 9], [9, 0, 0]], positions: [3, 3, 3], stopIds: [-1, 1], limits: [16, 5, 16], finished: [0, 0, 1] });
  assert.deepEqual(out.picked, [1, 2, 0]); // row 2: history untouched (0)
  assert.deepEqual(out.finished, [1, 1, 1]);
  assert.deepEqual(out.tokens, [-5, -5, -5]);
  assert.deepEqual(out.positions, [3, 3, 3]);
});

test('the repetition penalty divides positive and multiplies negative logits of seen tokens, once each', () => {
  // Token 0 (logit 2, seen twice) becomes 2/1.5 = 1.33 < 1.5: token 1 wins. Token 2 (−1, seen) becomes −1.5.
  const out = sample({ logits: [[2, 1.5, -1, -1.2]], params: [[0, 0, 1, 1.5]], positions: [2], history: [[0, 0, 2]] });
  assert.deepEqual(out.picked, [1]);
  const negative = sample({ logits: [[-1, -1.2, -5, -6]], params: [[0, 0, 1, 1.5]], positions: [0], history: [[0]] });
  assert.deepEqual(negative.picked, [1]); // −1·1.5 = −1.5 < −1.2
});

test('top-k = 1 and a tiny top-p are greedy at any temperature and seed', () => {
  const logits = [0.3, 2.2, 2.1, -1, 0.9];
  for (let seed = 0; seed < 20; seed++) {
    const k = sample({ logits: [logits], params: [[2, 1, 1, 1]], seeds: [seed], positions: [seed % 10] });
    const p = sample({ logits: [logits], params: [[2, 0, 0.01, 1]], seeds: [seed], positions: [seed % 10] });
    assert.deepEqual([k.picked[0], p.picked[0]], [1, 1]);
  }
});

/** Frequencies of 4000 draws (one row each, seeds 0..3999) against the expected probabilities. */
function checkDistribution(logits: number[], params: number[], expected: number[]): void {
  const n = 4000;
  const out = sample({ logits: Array.from({ length: n }, () => logits), params: Array.from({ length: n }, () => params), seeds: Array.from({ length: n }, (_, i) => i * 7919) });
  const counts = new Array(logits.length).fill(0);
  for (const t of out.picked) counts[t]++;
  expected.forEach((p, j) => {
    const sigma = Math.sqrt(n * p * (1 - p));
    assert.ok(Math.abs(counts[j] - n * p) <= 4 * sigma + 1e-9, `token ${j}: ${counts[j]} draws, expected ${(n * p).toFixed(0)} ± ${(4 * sigma).toFixed(0)}`);
  });
}

function softmax(z: number[]): number[] {
  const m = Math.max(...z), e = z.map((v) => Math.exp(v - m)), s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

test('draws follow softmax(z / T), restricted and renormalised by top-k and top-p', () => {
  const logits = [1, 0.5, 0, -1];
  checkDistribution(logits, [1, 0, 1, 1], softmax(logits));
  checkDistribution(logits, [0.5, 0, 1, 1], softmax(logits.map((z) => z / 0.5)));
  const top2 = softmax([1, 0.5]);
  checkDistribution(logits, [1, 2, 1, 1], [...top2, 0, 0]);
  // softmax = (0.47, 0.29, 0.17, 0.06): the top-1 mass 0.47 < 0.6 ≤ the top-2 mass 0.76.
  checkDistribution(logits, [1, 0, 0.6, 1], [...top2, 0, 0]);
  checkDistribution(logits, [1, 0, 0.8, 1], [...softmax([1, 0.5, 0]), 0]);
});

test('a draw depends on the seed and the position, not on the row', () => {
  const logits = Array.from({ length: 50 }, (_, j) => Math.sin(j));
  const params = [1.5, 0, 1, 1];
  const a = sample({ logits: [logits, logits], params: [params, params], seeds: [3, 3], positions: [4, 4] });
  assert.equal(a.picked[0], a.picked[1]);
  const draws = new Set<number>();
  for (let p = 0; p < 12; p++) draws.add(sample({ logits: [logits], params: [params], seeds: [3], positions: [p] }).picked[0]!);
  assert.ok(draws.size > 3, `12 positions drew only ${draws.size} distinct tokens`);
});

test('bad settings and positions are rejected naming the row', () => {
  assertRejects(() => sample({ logits: [[1, 2]], params: [[1, 0, 0, 1]] }), 'sampleTokens', 'params');
  assertRejects(() => sample({ logits: [[1, 2]], params: [[-1, 0, 1, 1]] }), 'sampleTokens', 'params');
  assertRejects(() => sample({ logits: [[1, 2]], params: [[1, 1.5, 1, 1]] }), 'sampleTokens', 'params');
  assertRejects(() => sample({ logits: [[1, 2]], positions: [15] }), 'sampleTokens', 'positions');
  assertRejects(() => sample({ logits: [[1, 2]], params: [[0, 0, 1, 2]], history: [[7]] }), 'sampleTokens', 'history');
});

// ---- tokenProbabilities -------------------------------------------------------------------------------

/** tokenProbabilities on host rows (params per row: temperature, top-k, top-p, penalty). */
function probabilities(logits: number[][], params: number[][], tokens: number[], classes?: number): number[] {
  const R = logits.length, Vp = logits[0]!.length;
  const out = backend.empty([R], 'f32');
  backend.fill(out, NaN);
  backend.tokenProbabilities({
    logits: backend.fromArray(logits.flat(), [R, Vp], 'f32'), ...(classes !== undefined ? { classes } : {}),
    params: backend.fromArray(params.flat(), [R, 4], 'f32'), tokens: backend.fromArray(tokens, [R], 'i32'), out,
  });
  return Array.from(backend.download(out) as Float32Array);
}

test('tokenProbabilities equals the host acceptance\'s distribution (samplingDistribution) for every token, mode by mode', async () => {
  const { samplingDistribution } = await import('../../../src/infer/speculative-accept.js');
  let seed = 7;
  const random = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return seed / 2 ** 32; };
  const V = 61, row = Array.from({ length: V }, () => Math.fround(4 * random() - 2));
  row[13] = row[40]!;  // a tie: both kept or both dropped together
  for (const [temperature, topK, topP] of [[1, 0, 1], [0.7, 5, 1], [1.3, 0, 0.8], [0.9, 8, 0.7], [1, 1, 1], [2, 60, 0.999]] as const) {
    const expected = samplingDistribution(row, { temperature, topK, topP, repetitionPenalty: 1, seed: 0n }, []);
    const got = probabilities(Array.from({ length: V }, () => row), Array.from({ length: V }, () => [temperature, topK, topP, 1]), Array.from({ length: V }, (_, t) => t));
    const mode = `T ${temperature} top-k ${topK} top-p ${topP}`;
    for (let t = 0; t < V; t++) assert.ok(Math.abs(got[t]! - expected[t]!) <= 1e-6 * Math.max(1, expected[t]!), `${mode}, token ${t}: ${got[t]} vs ${expected[t]}`);
    assert.ok(Math.abs(got.reduce((a, b) => a + b, 0) - 1) < 1e-5, `${mode}: sums to 1`);
    if (topK > 0 && topK < V && topP === 1) assert.ok(got.filter((p) => p > 0).length >= topK, `${mode}: at least k kept`);
  }
});

test('tokenProbabilities: greedy rows give 1 for the argmax (lowest index on ties) and 0 elsewhere; classes cut the padding', () => {
  assert.deepEqual(probabilities([[1, 3, 3, 0], [1, 3, 3, 0], [1, 3, 3, 0]], [[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]], [1, 2, 0]), [1, 0, 0]);
  // Column 3 (padding, the row's largest) is outside classes = 3: token 1 is the argmax of the vocabulary.
  assert.deepEqual(probabilities([[1, 3, 2, 9]], [[0, 0, 1, 1]], [1], 3), [1]);
  const [p] = probabilities([[0, Math.log(3), 9]], [[1, 0, 1, 1]], [1], 2);
  assert.ok(Math.abs(p! - 0.75) < 1e-6, `softmax over the 2 classes: ${p}`);
});

test('tokenProbabilities refuses a repetition penalty, a token outside the vocabulary and bad settings, naming the row', () => {
  assertRejects(() => probabilities([[1, 2]], [[1, 0, 1, 1.2]], [0]), 'tokenProbabilities', 'params');
  assertRejects(() => probabilities([[1, 2]], [[1, 0, 1, 1]], [2]), 'tokenProbabilities', 'tokens');
  assertRejects(() => probabilities([[1, 2]], [[1, 0, 0, 1]], [0]), 'tokenProbabilities', 'params');
  assertRejects(() => probabilities([[1, 2]], [[1, 0, 1, 1]], [0], 3), 'tokenProbabilities', 'classes');
});

// ---- speculativeSample --------------------------------------------------------------------------------

/** speculativeSample on host rows, one draw per position in `positions` (each row the same logits). */
function speculativeDraws(target: number[], draft: number[] | undefined, params: number[], positions: number[], seed = [11, 3], classes?: number): number[] {
  const R = positions.length, Vp = target.length;
  const rows = (row: number[]) => backend.fromArray(positions.flatMap(() => row), [R, Vp], 'f32');
  const out = backend.fromArray(new Array(R).fill(-7), [R], 'i32');
  backend.speculativeSample({
    target: rows(target), ...(draft ? { draft: rows(draft) } : {}), ...(classes !== undefined ? { classes } : {}),
    params: backend.fromArray(positions.flatMap(() => params), [R, 4], 'f32'), seeds: backend.fromArray(positions.flatMap(() => seed), [R, 2], 'i32'),
    positions: backend.fromArray(positions, [R], 'i32'), out,
  });
  return Array.from(backend.download(out) as Int32Array);
}

/** Pearson's χ² of observed counts against expected probabilities (cells with p = 0 must stay empty). */
function chiSquare(draws: number[], expected: ArrayLike<number>): number {
  const counts = new Array<number>(expected.length).fill(0);
  for (const t of draws) counts[t]!++;
  let chi = 0;
  for (let v = 0; v < expected.length; v++) {
    const e = expected[v]! * draws.length;
    if (e === 0) assert.equal(counts[v], 0, `token ${v} has probability 0 but was drawn ${counts[v]} times`);
    else chi += (counts[v]! - e) ** 2 / e;
  }
  return chi;
}

test('speculativeSample draws the residual max(0, p − q) on a rejection and p for the bonus (χ² over 3000 positions), the same token for the same seed and position', async () => {
  const { samplingDistribution } = await import('../../../src/infer/speculative-accept.js');
  const target = [1.2, 0.3, -0.5, 2.0, 0.9, -1.1, 0.0], draft = [0.4, 1.5, -0.2, 1.1, 0.9, 0.3, -2.0];
  const positions = Array.from({ length: 3000 }, (_, i) => 17 + i);
  // df ≤ 6; 22.5 is the 0.999 quantile at df 6, so a correct rule fails it once in a thousand seeds.
  for (const [temperature, topK, topP] of [[1, 0, 1], [0.8, 4, 1], [1.1, 0, 0.85]] as const) {
    const sampling = { temperature, topK, topP, repetitionPenalty: 1, seed: 0n };
    const p = samplingDistribution(target, sampling, []), q = samplingDistribution(draft, sampling, []);
    const residual = Array.from(p, (pv, v) => Math.max(0, pv - q[v]!)), mass = residual.reduce((a, b) => a + b, 0);
    const mode = `T ${temperature} top-k ${topK} top-p ${topP}`;
    const params = [temperature, topK, topP, 1];
    const residualDraws = speculativeDraws(target, draft, params, positions);
    assert.ok(chiSquare(residualDraws, residual.map((r) => r / mass)) < 22.5, `${mode}: residual draws follow max(0, p − q)`);
    const bonusDraws = speculativeDraws(target, undefined, params, positions);
    assert.ok(chiSquare(bonusDraws, p) < 22.5, `${mode}: bonus draws follow p`);
    assert.deepEqual(speculativeDraws(target, draft, params, positions.slice(0, 50)), residualDraws.slice(0, 50), `${mode}: a draw depends on seed and position alone`);
    assert.notDeepEqual(speculativeDraws(target, draft, params, positions.slice(0, 50), [12, 3]), residualDraws.slice(0, 50), `${mode}: another seed, other draws`);
  }
});

test('speculativeSample: a draft equal to the target leaves no residual, so the draw is from p; greedy rows give the target\'s argmax; classes cut the padding', async () => {
  const { samplingDistribution } = await import('../../../src/infer/speculative-accept.js');
  const target = [0.5, 1.5, -1, 0.2];
  const positions = Array.from({ length: 2000 }, (_, i) => i);
  const p = samplingDistribution(target, { temperature: 1, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n }, []);
  assert.ok(chiSquare(speculativeDraws(target, target, [1, 0, 1, 1], positions), p) < 16.3, 'p = q: draws follow p (df 3, 0.999 quantile 16.3)');
  assert.deepEqual(speculativeDraws([1, 3, 3, 0], [9, 0, 0, 0], [0, 0, 1, 1], [4, 5]), [1, 1], 'greedy: the target\'s argmax, lowest index on ties');
  // Column 3 (padding, the largest logit) is outside classes = 3: never drawn.
  assert.ok(speculativeDraws([0, 0.5, 0.2, 40], [0.3, 0, 0, 0], [1, 0, 1, 1], positions.slice(0, 300), [5, 5], 3).every((t) => t >= 0 && t < 3));
});

test('speculativeSample refuses a repetition penalty, a draft of another dtype or shape and bad settings, naming the argument', () => {
  const f32 = (values: number[], shape: number[]) => backend.fromArray(values, shape, 'f32');
  const i32 = (values: number[], shape: number[]) => backend.fromArray(values, shape, 'i32');
  const args = { target: f32([1, 2, 3, 4], [2, 2]), params: f32([1, 0, 1, 1, 1, 0, 1, 1], [2, 4]), seeds: i32([1, 2, 3, 4], [2, 2]), positions: i32([0, 1], [2]), out: i32([0, 0], [2]) };
  assertRejects(() => backend.speculativeSample({ ...args, params: f32([1, 0, 1, 1.2, 1, 0, 1, 1], [2, 4]) }), 'speculativeSample', 'params');
  assertRejects(() => backend.speculativeSample({ ...args, draft: backend.fromArray([1, 2, 3, 4], [2, 2], 'bf16') }), 'speculativeSample', 'draft');
  assertRejects(() => backend.speculativeSample({ ...args, draft: f32([1, 2, 3], [1, 3]) }), 'speculativeSample', 'draft');
  assertRejects(() => backend.speculativeSample({ ...args, out: f32([0, 0], [2]) }), 'speculativeSample', 'out');
  assertRejects(() => backend.speculativeSample({ ...args, seeds: i32([1, 2], [2, 1]) }), 'speculativeSample', 'seeds');
  assertRejects(() => backend.speculativeSample({ ...args, classes: 3 }), 'speculativeSample', 'classes');
});
