// HARS (the CUDA kernel's top-K search, mirrored on the host) against the CPU backend's full sort, on fresh
// random logits: plain normal rows, rows with many exact ties, rows with −∞ and NaN entries, banned tokens
// with and without renormalisation, padded rows, one beam and many, and each of the search's three paths
// (from the lists, after a rescan, the exact fallback).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { harsTopK } from '../../src/infer/beam-topk-hars.js';
import type { HarsOptions } from '../../src/infer/beam-topk-hars.js';
import { freshSeed, Rng } from '../../src/testing/random.js';

const cpu = new CpuBackend();
const seed = freshSeed();

/** The CPU backend's beamTopK (a full sort) on the same logits. */
function fullSort(logits: Float32Array, o: HarsOptions) {
  const Vp = o.rowStride ?? o.classes, rows = logits.length / Vp, batch = rows / o.beams, K = o.candidates;
  const tokens = cpu.empty([batch, K], 'i32'), sourceBeams = cpu.empty([batch, K], 'i32'), scores = cpu.empty([batch, K], 'f32');
  cpu.beamTopK({
    logits: cpu.fromArray(logits, [rows, Vp], 'f32'), beams: o.beams, classes: o.classes, tokens, sourceBeams, scores,
    ...(o.beamScores ? { beamScores: cpu.fromArray(o.beamScores, [rows], 'f32') } : {}),
    ...(o.bannedTokens ? { bannedTokens: o.bannedTokens } : {}), renormalize: o.renormalize ?? false,
  });
  return { tokens: cpu.download(tokens), beams: cpu.download(sourceBeams), scores: cpu.download(scores) };
}

/** HARS must give exactly the full sort's answer; returns the paths it took. */
function agree(logits: Float32Array, o: HarsOptions, what: string): string[] {
  const expected = fullSort(logits, o);
  const got = harsTopK(logits, o);
  const K = o.candidates;
  got.forEach((item, b) => {
    const slice = (a: ArrayLike<number>) => Array.from(a).slice(b * K, (b + 1) * K);
    assert.deepEqual(item.tokens, slice(expected.tokens), `${what} item ${b}: tokens (seed ${seed}, path ${item.path})`);
    assert.deepEqual(item.sourceBeams, slice(expected.beams), `${what} item ${b}: beams (seed ${seed})`);
    assert.deepEqual(item.scores, slice(expected.scores), `${what} item ${b}: scores (seed ${seed})`);
  });
  return got.map((r) => r.path);
}

test('HARS equals the full sort on random logits (beams 1–5, with beam scores, banned tokens, padding)', () => {
  const rng = new Rng(seed);
  for (const [beams, classes, Vp, K] of [[4, 1000, 1024, 8], [1, 777, 777, 1], [5, 300, 320, 10], [2, 33, 40, 6], [3, 5, 8, 15]] as const) {
    const batch = 3;
    const logits = rng.floats(batch * beams * Vp, 2);
    const beamScores = rng.floats(batch * beams, 3, -5);
    const paths = agree(logits, { beams, classes, rowStride: Vp, candidates: K, beamScores, bannedTokens: [0, classes - 1], renormalize: true }, `beams ${beams} C ${classes}`);
    agree(logits, { beams, classes, rowStride: Vp, candidates: K, bannedTokens: [1], renormalize: false }, `beams ${beams} C ${classes} no scores`);
    if (classes >= 300) assert.ok(paths.includes('lists'), 'normal rows are served from the lists');
  }
});

test('HARS equals the full sort with many exact ties and −∞ / NaN entries', () => {
  const rng = new Rng(seed + 1);
  const beams = 4, classes = 512, K = 8, batch = 4;
  // Values from a small set: many exact ties, also across beams and at the threshold.
  const tied = Float32Array.from(rng.ints(batch * beams * classes, 0, 6), (x) => x * 0.25);
  agree(tied, { beams, classes, candidates: K, beamScores: new Float32Array(batch * beams) }, 'ties');
  // −∞ and NaN sprinkled in; one row entirely −∞; one item with fewer than K finite candidates.
  const holes = rng.floats(batch * beams * classes, 1);
  for (let i = 0; i < holes.length; i++) { const u = rng.next(); if (u < 0.3) holes[i] = -Infinity; else if (u < 0.35) holes[i] = NaN; }
  holes.fill(-Infinity, 1 * classes, 2 * classes);
  holes.fill(-Infinity, beams * classes, 2 * beams * classes);
  holes[beams * classes + 7] = 0.5; holes[(beams + 2) * classes + 100] = -0.5;
  const paths = agree(holes, { beams, classes, candidates: K, beamScores: rng.floats(batch * beams, 1) }, '−∞ and NaN');
  assert.equal(paths[1], 'exact', 'an item with fewer than K finite scores needs the exact fallback');
});

test('each path of the search: lists, rescan (spilled groups), exact (too many survivors)', () => {
  const rng = new Rng(seed + 2);
  const beams = 2, classes = 256, K = 4;
  const base = { beams, classes, candidates: K, vec: 1, threadsPerRow: 32 };
  // One group (thread 0: tokens 0, 32, 64, ...) holds the 8 best: more than its 4 list slots. (With a second
  // beam of ordinary logits the threshold would come from that beam and these spills would stay below it.)
  const crowded = rng.floats(classes, 1);
  for (let i = 0; i < 8; i++) crowded[i * 32] = 10 + i;
  const [rescan] = agree(crowded, { ...base, beams: 1 }, 'crowded group');
  assert.equal(rescan, 'rescan');
  const twoBeams = rng.floats(beams * classes, 1);
  for (let i = 0; i < 8; i++) twoBeams[i * 32] = 10 + i;
  agree(twoBeams, base, 'crowded group beside an ordinary beam');
  const spread = rng.floats(beams * classes, 1);
  const [lists] = agree(spread, { ...base, local: 8 }, 'spread');
  assert.equal(lists, 'lists');
  // Every logit equal: every element survives; a small capacity forces the exact passes.
  const flat = new Float32Array(beams * classes).fill(1);
  const [exact] = agree(flat, { ...base, capacity: 64 }, 'all equal');
  assert.equal(exact, 'exact');
  const [fits] = agree(flat, { ...base, capacity: 1024 }, 'all equal, room for all');
  assert.equal(fits, 'rescan');
});
