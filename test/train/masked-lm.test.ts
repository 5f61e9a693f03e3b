import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IGNORE_INDEX, MaskedLMLoader, maskTokens } from '../../src/train/masked-lm.js';

const V = 1000, MASK = 3;

test('about 15% selected; of those 80% [MASK], 10% random, 10% unchanged; targets -100 elsewhere', () => {
  const n = 200_000;
  const tokens = Int32Array.from({ length: n }, (_, i) => 10 + (i % 900));
  const { inputs, targets } = maskTokens(tokens, { maskTokenId: MASK, vocabSize: V }, 7, 0);
  let selected = 0, masked = 0, unchanged = 0, changed = 0;
  for (let i = 0; i < n; i++) {
    if (targets[i] === IGNORE_INDEX) { assert.equal(inputs[i], tokens[i]); continue; }
    assert.equal(targets[i], tokens[i]);
    selected++;
    if (inputs[i] === MASK) masked++;
    else if (inputs[i] === tokens[i]) unchanged++;
    else { changed++; assert.ok(inputs[i]! >= 0 && inputs[i]! < V); }
  }
  const near = (x: number, p: number, of: number): void => assert.ok(Math.abs(x / of - p) < 0.01, `${x}/${of} vs ${p}`);
  near(selected, 0.15, n);
  near(masked, 0.8, selected);
  near(changed, 0.1, selected); // a random draw equal to the original counts as unchanged: 1/V, negligible
  near(unchanged, 0.1, selected);
});

test('deterministic by (seed, batch); special tokens never selected; input untouched', () => {
  const tokens = Int32Array.from({ length: 4096 }, (_, i) => (i % 64 === 0 ? 1 : 10 + (i % 50)));
  const copy = tokens.slice();
  const options = { maskTokenId: MASK, vocabSize: V, specialTokenIds: [1] };
  const a = maskTokens(tokens, options, 5, 12);
  assert.deepEqual(tokens, copy);
  assert.deepEqual(maskTokens(tokens, options, 5, 12), a);
  assert.notDeepEqual(maskTokens(tokens, options, 5, 13).targets, a.targets);
  assert.notDeepEqual(maskTokens(tokens, options, 6, 12).targets, a.targets);
  for (let i = 0; i < tokens.length; i += 64) assert.equal(a.targets[i], IGNORE_INDEX);
  // Position i's outcome does not depend on the other positions' ids.
  const other = tokens.slice(); other[0] = 999;
  assert.deepEqual(maskTokens(other, options, 5, 12).targets.subarray(1), a.targets.subarray(1));
});

test('invalid masking options are errors', () => {
  const t = new Int32Array(4);
  assert.throws(() => maskTokens(t, { maskTokenId: V, vocabSize: V }, 0, 0), /maskTokenId 1000 is outside \[0, vocabSize = 1000\)/);
  assert.throws(() => maskTokens(t, { maskTokenId: 1, vocabSize: V, maskFraction: 0.95 }, 0, 0), /maskFraction \+ randomFraction = .* exceeds 1/);
  assert.throws(() => maskTokens(t, { maskTokenId: 1, vocabSize: V, ignoreIndex: 5 }, 0, 0), /ignoreIndex 5 must be an integer outside the vocabulary/);
  assert.throws(() => maskTokens(t, { maskTokenId: 1, vocabSize: V, selectProbability: 2 }, 0, 0), /selectProbability must be in \[0, 1\]/);
});

test('loader: [CLS] text [SEP] rows, masked, resumable', () => {
  const stream = Uint16Array.from({ length: 5000 }, (_, i) => 10 + (i % 500));
  const options = { batchSize: 4, seqLen: 32, seed: 9, maskTokenId: MASK, vocabSize: V, clsTokenId: 1, sepTokenId: 2 };
  const loader = new MaskedLMLoader(stream, options);
  const batch = loader.next();
  assert.equal(batch.inputs.length, 128);
  for (let b = 0; b < 4; b++) {
    assert.equal(batch.inputs[b * 32], 1); assert.equal(batch.inputs[b * 32 + 31], 2);
    assert.equal(batch.targets[b * 32], IGNORE_INDEX); assert.equal(batch.targets[b * 32 + 31], IGNORE_INDEX);
  }
  loader.next();
  const saved = JSON.parse(JSON.stringify(loader.state()));
  const expected = [loader.next(), loader.next()];
  const resumed = new MaskedLMLoader(stream, options);
  resumed.restore(saved);
  assert.deepEqual([resumed.next(), resumed.next()], expected);
  assert.throws(() => new MaskedLMLoader(stream, { ...options, sepTokenId: undefined }), /give both clsTokenId and sepTokenId/);
});
