// The vocab-parallel ops on the CPU: the split cross-entropy (max, sums, loss around host all-reduces,
// and the backward) over w shards equals crossEntropyForward/Backward on the whole logits, with label
// smoothing, ignored rows, and shards holding padding only; the masked embedding lookups of all shards
// add up to the plain lookup, and the masked backward scatters only the shard's own ids.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { makeCase, runShardedCrossEntropy, runShardedEmbedding } from '../vocab-shard-cases.js';

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

for (const [w, smoothing] of [[1, 0], [3, 0.1], [4, 0]] as const) {
  test(`split cross-entropy over ${w} shard(s) (smoothing ${smoothing}) equals the whole-vocabulary cross-entropy`, () => {
    const b = new CpuBackend();
    // V = 70 over shards of 24 columns: at w = 4 the last shard holds padding only.
    const c = makeCase(9, 70, w === 1 ? 72 : 24, w, 'f32', smoothing, 11);
    const got = runShardedCrossEntropy(b, c, 0.5);
    const logits = b.fromArray(c.logits, [c.rows, c.vocab], 'f32'), targets = b.fromArray(c.targets, [c.rows], 'i32');
    const loss = b.empty([c.rows], 'f32'), lse = b.empty([c.rows], 'f32');
    b.crossEntropyForward({ logits, targets, loss, lse, labelSmoothing: smoothing, ignoreIndex: -100 });
    b.crossEntropyBackward({ logits, targets, lse, dLogits: logits, gradScale: 0.5, labelSmoothing: smoothing, ignoreIndex: -100 });
    assert.ok(maxDiff(got.loss, b.download(loss)) < 1e-5, `loss differs by ${maxDiff(got.loss, b.download(loss))}`);
    assert.ok(maxDiff(got.lse, b.download(lse)) < 1e-5, 'lse');
    assert.ok(maxDiff(got.dLogits, b.download(logits)) < 1e-6, `dLogits differ by ${maxDiff(got.dLogits, b.download(logits))}`);
    assert.ok(got.paddingGradientsZero, 'padding columns get zero gradients');
    assert.equal(got.loss[3], 0, 'an ignored row has loss 0');
    if (w === 4) assert.equal(got.rowMax[3]![0], -Infinity, 'a shard without classes has max −∞');
  });
}

test('the split loss refuses a target outside the vocabulary; shard arguments are checked', () => {
  const b = new CpuBackend();
  const sums = b.fromArray([1, 1, 0, 0, 0, 0], [3, 2], 'f32');
  const args = { rowMax: b.fromArray([0, 0], [2], 'f32'), sums, loss: b.empty([2], 'f32'), lse: b.empty([2], 'f32'), totalClasses: 10 };
  assert.throws(() => b.vocabShardLoss({ ...args, targets: b.fromArray([1, 10], [2], 'i32') }), /'targets'\[1\] = 10 is outside \[0, 10\)/);
  const logits = b.empty([2, 8], 'f32');
  assert.throws(() => b.vocabShardMax({ logits, classes: 9, rowMax: b.empty([2], 'f32') }), /'classes' must be at most the logits' last dimension \(8\), got 9/);
  assert.throws(() => b.vocabShardSums({ logits, targets: b.fromArray([1, 2], [2], 'i32'), vocabStart: 0, rowMax: b.empty([2], 'f32'), sums: b.empty([2, 2], 'f32') }), /'sums' has shape \[2, 2\] but expected \[3, rows\]/);
});

test('masked embedding lookups over the shards add up to the plain lookup; the backward keeps to the shard', () => {
  const b = new CpuBackend();
  const vocab = 37, H = 8, shardRows = 16;
  const table = Float32Array.from({ length: vocab * H }, (_, i) => Math.sin(i));
  const tokens = Int32Array.from([0, 36, 15, 16, 31, 32, 5]);
  const sum = runShardedEmbedding(b, table, vocab, H, shardRows, 4, tokens, 'f32');
  const out = b.empty([1, tokens.length, H], 'f32');
  b.embeddingForward({ tokens: b.fromArray(tokens, [1, tokens.length], 'i32'), tokenTable: b.fromArray(table, [vocab, H], 'f32'), out, mask: b.empty([1, tokens.length, H], 'u8'), p: 0, seed: 0n, offset: 0n });
  assert.ok(maxDiff(sum, b.download(out)) === 0, 'exact: every id is owned by one shard');

  const dTable = b.fromArray(new Float32Array(shardRows * H), [shardRows, H], 'f32');
  const dOut = b.fromArray(Float32Array.from({ length: tokens.length * H }, () => 1), [1, tokens.length, H], 'f32');
  const mask = b.fromArray(new Uint8Array(tokens.length * H).fill(1), [1, tokens.length, H], 'u8');
  b.embeddingBackward({ tokens: b.fromArray(tokens, [1, tokens.length], 'i32'), dOut, mask, p: 0, dTokenTable: dTable, vocabStart: 16 });
  const rows = b.download(dTable) as Float32Array;
  // Shard 1 owns ids 16..31: tokens 16 and 31 land in its rows 0 and 15, nothing else.
  const touched = [...new Set(Array.from({ length: shardRows }, (_, r) => r).filter((r) => rows[r * H] !== 0))];
  assert.deepEqual(touched, [0, 15]);
});
