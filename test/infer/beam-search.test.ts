// The host half of beam search (HF's bookkeeping) on hand-made candidates: which EOS candidates finish (only
// those ranked among the top `beams`), length normalisation, the running beams, HF's stopping rules
// (the improvement heuristic, early_stopping true and "never"), forced last steps, and greedy search.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { StepCandidates } from '../../src/infer/beam-search.js';
import { BeamSearch, GreedySearch, candidatesPerItem } from '../../src/infer/beam-search.js';

const f32 = Math.fround;
/** One item's candidates as [token, beam, score] triples, best first. */
function step(...list: [number, number, number][]): StepCandidates {
  return { tokens: list.map((c) => c[0]), sourceBeams: list.map((c) => c[1]), scores: list.map((c) => f32(c[2])), perItem: list.length };
}

test('candidates per item follow HF (max(2, 1 + #eos)·beams)', () => {
  assert.equal(candidatesPerItem(4, 1), 8);
  assert.equal(candidatesPerItem(4, 0), 8);
  assert.equal(candidatesPerItem(3, 2), 9);
});

test('EOS in the top beams finishes with score / length; ranked lower it does not; the heuristic stops the search', () => {
  const s = new BeamSearch(1, { beams: 2, eosTokenIds: [9], maxLength: 10, lengthPenalty: 1, earlyStopping: false });
  assert.deepEqual([...s.initialScores()], [0, -1e9]);
  assert.ok(s.step(step([9, 0, -0.5], [1, 0, -1], [2, 0, -1.2], [3, 1, -1e9])));
  assert.deepEqual(s.running[0]!.map((b) => [b.tokens, b.score]), [[[1], f32(-1)], [[2], f32(-1.2)]]);
  assert.ok(s.step(step([4, 0, -1.5], [9, 1, -1.6], [5, 0, -2.0], [6, 1, -2.1])), 'one slot finished: go on');
  // An EOS ranked third (≥ beams) would score −2.3/3 > −0.8 but may not finish.
  assert.ok(s.step(step([7, 0, -1.55], [8, 1, -2.2], [9, 0, -2.3], [3, 1, -2.7])), 'best running −1.55/3 beats the worst finished −0.8');
  assert.deepEqual(s.running[0]!.map((b) => b.tokens), [[1, 4, 7], [1, 5, 8]]);
  // EOS first: −1.6/4 = −0.4 is the best; the best running −2.4/4 cannot beat −0.5 any more.
  assert.equal(s.step(step([9, 0, -1.6], [2, 1, -2.4], [3, 1, -2.5], [9, 1, -2.6])), false);
  assert.deepEqual(s.results(), [{ tokens: [1, 4, 7, 9], score: f32(f32(-1.6) / 4) }]);
});

test('early_stopping true stops once every slot is finished; "never" with a positive penalty keeps going', () => {
  const run = (earlyStopping: boolean | 'never') => {
    const s = new BeamSearch(1, { beams: 2, eosTokenIds: [9, 8], maxLength: 10, lengthPenalty: 1, earlyStopping });
    s.step(step([9, 0, -1], [8, 0, -2], [1, 0, -3], [2, 0, -4])); // both top candidates end: 2 slots done
    return s;
  };
  assert.equal(run(true).done, true);
  // false: the best running beam, −3 over 1 token, cannot beat the worst finished −2
  assert.equal(run(false).done, true);
  // "never" with penalty 1 measures the running beams at max_length − 1 = 9 tokens: −3/9 > −2
  assert.equal(run('never').done, false);
});

test('the last step at max_length finishes the top beams whatever their tokens', () => {
  const s = new BeamSearch(1, { beams: 2, eosTokenIds: [9], maxLength: 3, lengthPenalty: 2, earlyStopping: false });
  s.step(step([1, 0, -1], [2, 0, -2], [3, 0, -3], [4, 0, -4]));
  assert.equal(s.step(step([5, 1, -2.5], [6, 0, -2.6], [7, 0, -2.7], [8, 1, -2.8])), false);
  assert.deepEqual(s.results(), [{ tokens: [2, 5], score: f32(f32(-2.5) / 4) }]);
});

test('a forced last step: every beam ends with the forced token at its running score', () => {
  const s = new BeamSearch(2, { beams: 2, eosTokenIds: [9], maxLength: 3, lengthPenalty: 1, earlyStopping: false });
  const c = step([1, 0, -1], [2, 0, -2], [3, 0, -3], [4, 0, -4]);
  s.step({ tokens: [...c.tokens as number[], 5, 6, 7, 8], sourceBeams: [...c.sourceBeams as number[], 0, 0, 0, 0], scores: [...c.scores as number[], -0.25, -0.5, -3, -4], perItem: 4 });
  const forced = s.forcedCandidates([9], true);
  assert.deepEqual(Array.from(forced.tokens).slice(0, 2), [9, 9]);
  assert.deepEqual(Array.from(forced.sourceBeams), [0, 1, 0, 0, 0, 1, 0, 0]);
  assert.deepEqual(Array.from(forced.scores), [-1, -2, -Infinity, -Infinity, -0.25, -0.5, -Infinity, -Infinity]);
  assert.equal(s.step(forced), false);
  assert.deepEqual(s.results(), [{ tokens: [1, 9], score: -0.5 }, { tokens: [5, 9], score: -0.125 }]);
});

test('greedy: the best candidate is appended until EOS; scores add up', () => {
  const g = new GreedySearch(2, { eosTokenIds: [9], maxLength: 5 });
  g.step({ tokens: [3, 9], sourceBeams: [0, 0], scores: [-1, -0.5], perItem: 1 });
  g.step({ tokens: [4, 7], sourceBeams: [0, 0], scores: [-2, -9], perItem: 1 });
  assert.equal(g.done, false);
  g.step(g.forcedCandidates([9, 8]));
  assert.deepEqual(g.results(), [{ tokens: [3, 4, 8], score: -3 }, { tokens: [9], score: -0.5 }]);
});
