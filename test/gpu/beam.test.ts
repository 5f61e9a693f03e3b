// Beam search and encoder-decoder decoding on the GPU against the CPU reference, on fresh random inputs with
// poisoned outputs: beamTopK (HARS) against the full sort — Marian's padded vocabulary with the pad banned,
// GPT-2's odd one, greedy, 32 beams, exact ties, −∞ and NaN; beamAdvance bit for bit; the two attention
// steps; and a tiny Marian model translated on both backends (f32: the same tokens; bf16: it runs).
// Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { loadSeq2Seq, translate } from '../../src/infer/seq2seq.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import { randomSources, writeTinyMarian } from '../infer/marian-fixture.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const seed = freshSeed();

interface TopKCase {
  name: string; dtype: FloatDType; batch: number; beams: number; classes: number; Vp: number; K: number;
  banned?: number[]; renormalize?: boolean; scores?: boolean; fill?: (rng: Rng, n: number) => Float32Array;
}

function runTopK(backend: Backend, c: TopKCase, logits: Float32Array, beamScores: Float32Array) {
  const rows = c.batch * c.beams;
  const poison = (shape: number[], dtype: 'i32' | 'f32') => { const t = backend.empty(shape, dtype); backend.fill(t, dtype === 'f32' ? NaN : -7); return t; };
  const tokens = poison([c.batch, c.K], 'i32'), sourceBeams = poison([c.batch, c.K], 'i32'), scores = poison([c.batch, c.K], 'f32');
  backend.beamTopK({
    logits: backend.fromArray(logits, [rows, c.Vp], c.dtype), beams: c.beams, classes: c.classes, tokens, sourceBeams, scores,
    ...(c.scores !== false ? { beamScores: backend.fromArray(beamScores, [rows], 'f32') } : {}),
    ...(c.banned ? { bannedTokens: c.banned } : {}), renormalize: c.renormalize ?? false,
  });
  return { tokens: backend.download(tokens) as Int32Array, beams: backend.download(sourceBeams) as Int32Array, scores: backend.download(scores) as Float32Array };
}

/**
 * Scores agree within `tol` rank by rank; a different (beam, token) at a rank is accepted only as a near-tie:
 * the GPU's pick must be one of the CPU's candidates with a score within tol, or sit at the list's boundary.
 */
function candidateFailures(gpu: ReturnType<typeof runTopK>, cpu: ReturnType<typeof runTopK>, batch: number, K: number, tol: number): string[] {
  const failures: string[] = [];
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < K; i++) {
      const at = b * K + i, g = gpu.scores[at]!, c = cpu.scores[at]!;
      const close = (x: number, y: number) => x === y || Math.abs(x - y) <= tol * Math.max(1, Math.abs(y));
      if (!close(g, c)) { failures.push(`item ${b} rank ${i}: score ${g} vs ${c}`); continue; }
      if (gpu.tokens[at] === cpu.tokens[at] && gpu.beams[at] === cpu.beams[at]) continue;
      const found = Array.from({ length: K }, (_, j) => b * K + j).find((j) => cpu.tokens[j] === gpu.tokens[at] && cpu.beams[j] === gpu.beams[at]);
      if (found !== undefined ? !close(cpu.scores[found]!, g) : !close(cpu.scores[b * K + K - 1]!, g)) {
        failures.push(`item ${b} rank ${i}: (beam ${gpu.beams[at]}, token ${gpu.tokens[at]}) vs (${cpu.beams[at]}, ${cpu.tokens[at]}), not a near-tie`);
      }
    }
  }
  return failures;
}

const TOPK_CASES: TopKCase[] = (['f32', 'bf16'] as FloatDType[]).flatMap((dtype) => [
  { name: `Marian 4 beams, pad banned, renormalized ${dtype}`, dtype, batch: 5, beams: 4, classes: 58101, Vp: 58112, K: 8, banned: [58100], renormalize: true },
  { name: `GPT-2 vocabulary, 5 beams ${dtype}`, dtype, batch: 3, beams: 5, classes: 50257, Vp: 50257, K: 10 },
  { name: `greedy 32k ${dtype}`, dtype, batch: 7, beams: 1, classes: 32000, Vp: 32000, K: 1, scores: false },
  { name: `32 beams, small vocabulary ${dtype}`, dtype, batch: 2, beams: 32, classes: 100, Vp: 128, K: 64, banned: [0, 3] },
  { name: `exact ties ${dtype}`, dtype, batch: 4, beams: 4, classes: 4096, Vp: 4096, K: 8, scores: false, fill: (rng, n) => Float32Array.from(rng.ints(n, 0, 4), (x) => x) },
  {
    name: `−∞ and NaN ${dtype}`, dtype, batch: 3, beams: 4, classes: 2000, Vp: 2048, K: 8,
    fill: (rng, n) => { const x = rng.floats(n, 1); for (let i = 0; i < n; i++) { const u = rng.next(); if (u < 0.5) x[i] = -Infinity; else if (u < 0.52) x[i] = NaN; } x.fill(-Infinity, 0, 2 * 2048); return x; },
  },
]);

test('CUDA beamTopK (HARS) matches the CPU full sort', { skip }, async (t) => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  const rng = new Rng(seed);
  for (const c of TOPK_CASES) {
    await t.test(c.name, () => {
      const n = c.batch * c.beams * c.Vp;
      const logits = c.fill ? c.fill(rng, n) : rng.floats(n, 3);
      const beamScores = rng.floats(c.batch * c.beams, 2, -4);
      const ours = runTopK(gpu, c, logits, beamScores), reference = runTopK(cpu, c, logits, beamScores);
      assert.deepEqual(candidateFailures(ours, reference, c.batch, c.K, 2e-6), []);
    });
  }
});

test('CUDA beamAdvance matches the CPU bit for bit; the attention steps match within rounding', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const rng = new Rng(seed + 1);
  // beamAdvance: 3 items of 4 beams, 8 candidates, EOS 5 and 6, position 7 of a 12-slot table.
  const batch = 3, beams = 4, K = 8, R = batch * beams, L = 12, t = 7;
  const cand = { tokens: rng.ints(batch * K, 0, 10), sourceBeams: rng.ints(batch * K, 0, beams), scores: rng.floats(batch * K, 1) };
  const table = rng.ints(2 * R * L, 0, R);
  const advance = (b: Backend) => {
    const cacheRows = b.fromArray(table, [2, R, L], 'i32'), positions = b.fromArray(new Int32Array(R).fill(t), [R], 'i32');
    const nextTokens = b.empty([R], 'i32'), beamScores = b.empty([R], 'f32');
    b.fill(nextTokens, -1); b.fill(beamScores, NaN);
    b.beamAdvance({
      tokens: b.fromArray(cand.tokens, [batch, K], 'i32'), sourceBeams: b.fromArray(cand.sourceBeams, [batch, K], 'i32'), scores: b.fromArray(cand.scores, [batch, K], 'f32'),
      beams, eosTokens: [5, 6], nextTokens, beamScores, cacheRows, positions,
    });
    return [nextTokens, beamScores, cacheRows, positions].map((x) => Array.from(b.download(x)));
  };
  assert.deepEqual(advance(gpu), advance(cpu));

  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const heads = 8, d = 64, H = heads * d, tol = dtype === 'f32' ? 1e-5 : 2e-2;
    const positions = new Int32Array(R).fill(t);
    const rowsTable = rng.ints(2 * R * L, 0, R);
    const inputs = { qkv: rng.floats(R * 3 * H, 1), bias: rng.floats(3 * H, 0.1), k: rng.floats(R * heads * L * d, 1), v: rng.floats(R * heads * L * d, 1) };
    const self = (b: Backend) => {
      const kCache = b.fromArray(inputs.k, [R, heads, L, d], dtype), vCache = b.fromArray(inputs.v, [R, heads, L, d], dtype), out = b.empty([R, H], dtype);
      b.fill(out, NaN);
      b.beamSelfAttention({
        qkv: b.fromArray(inputs.qkv, [R, 3 * H], dtype), bias: b.fromArray(inputs.bias, [3 * H], dtype), heads, kCache, vCache,
        cacheRows: b.fromArray(rowsTable, [2, R, L], 'i32'), positions: b.fromArray(positions, [R], 'i32'), out,
      });
      return [out, kCache, vCache].map((x) => b.download(x) as Float32Array);
    };
    const [ours, reference] = [self(gpu), self(cpu)];
    ours.forEach((x, i) => assert.ok(relError(x, reference[i]!) <= tol, `${dtype} beamSelfAttention output ${i}: rel error ${relError(x, reference[i]!)}`));

    const Lk = 37, layers = 3;
    const kv = rng.floats(batch * Lk * 2 * layers * H, 1), q = rng.floats(R * H, 1), lengths = Int32Array.from([37, 1, 20]);
    const cross = (b: Backend) => {
      const out = b.empty([R, H], dtype);
      b.fill(out, NaN);
      b.beamCrossAttention({ q: b.fromArray(q, [R, H], dtype), kv: b.fromArray(kv, [batch, Lk, 2 * layers * H], dtype), layer: 2, heads, beams, keyLengths: b.fromArray(lengths, [batch], 'i32'), out });
      return b.download(out) as Float32Array;
    };
    const e = relError(cross(gpu), cross(cpu));
    assert.ok(e <= tol, `${dtype} beamCrossAttention: rel error ${e}`);
  }
});

function relError(a: Float32Array, b: Float32Array): number {
  let num = 0, den = 0;
  for (let i = 0; i < a.length; i++) { num += (a[i]! - b[i]!) ** 2; den += b[i]! ** 2; }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

test('a tiny Marian model translates to the same tokens on the GPU as on the CPU (f32), and runs in bf16', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const dir = writeTinyMarian({ eosBias: 0.7, seed: seed % 1000 });
  const sources = randomSources(new Rng(seed), 6, 1, 15);
  const onCpu = loadSeq2Seq(dir, cpu), onGpu = loadSeq2Seq(dir, gpu), onGpuBf16 = loadSeq2Seq(dir, gpu, { dtype: 'bf16' });
  for (const numBeams of [1, 4]) {
    const expected = translate(onCpu, sources, { numBeams, maxNewTokens: 12 });
    const got = translate(onGpu, sources, { numBeams, maxNewTokens: 12 });
    assert.deepEqual(got.map((r) => r.tokens), expected.map((r) => r.tokens), `beams ${numBeams} (seed ${seed})`);
    got.forEach((r, i) => assert.ok(Math.abs(r.score - expected[i]!.score) < 1e-4, `beams ${numBeams} score ${i}: ${r.score} vs ${expected[i]!.score}`));
    // A second call replays the captured graphs of the same session.
    assert.deepEqual(translate(onGpu, sources, { numBeams, maxNewTokens: 12 }), got);
    const half = translate(onGpuBf16, sources, { numBeams, maxNewTokens: 12 });
    assert.equal(half.length, sources.length);
    assert.ok(half.every((r) => r.tokens.length >= 1 && r.tokens.length <= 12));
  }
});
