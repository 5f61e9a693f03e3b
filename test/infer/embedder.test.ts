// The Embedder (fuseformer embed and the embeddings server): inputs of any lengths in any order give the
// vectors each gets alone, although batches are length-sorted and padded to bucketed lengths; its input
// errors name the input.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { BertEncoder } from '../../src/infer/bert.js';
import { bucketedLength, Embedder, EmbedInputError, encoderWarmUpLengths } from '../../src/infer/embedder.js';
import { TINY_BERT, writeBertFolder, writeBertTokenizer } from './bert-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-embedder-'));
after(() => rmSync(root, { recursive: true, force: true }));
const dir = join(root, 'bert');
writeBertFolder(dir, TINY_BERT, 7, { maskedLm: false, stripPrefix: true });
writeBertTokenizer(dir);

test('bucketed lengths: multiples of 8 to 64, of 16 to 256, of 32 beyond', () => {
  assert.deepEqual([1, 8, 9, 64, 65, 80, 81, 256, 257, 300].map(bucketedLength), [8, 8, 16, 64, 80, 80, 96, 256, 288, 320]);
});

test('each input gets the vector it gets alone, whatever its batch, order and padding', async () => {
  const embedder = Embedder.load(dir, new CpuBackend(), { batchSize: 3, pooling: 'mean', normalize: true });
  const { encoder } = BertEncoder.load(dir, new CpuBackend());
  try {
    // Lengths 3..40 in a scrambled order: batches of 3 after sorting, each padded to its bucket.
    const inputs = Array.from({ length: 11 }, (_, i) => {
      const n = 3 + ((i * 17) % 38);
      return [2, ...Array.from({ length: n - 2 }, (_, j) => 5 + ((i + j) % 11)), 3];
    });
    const { vectors, tokens, truncated } = embedder.embed(inputs);
    // The server's form (yielding to the event loop while batches run) gives the same vectors in the same order.
    const served = await embedder.embedSequencesAsync(inputs);
    served.forEach((v, i) => assert.deepEqual(v, vectors[i], `input ${i}: embedSequencesAsync`));
    assert.equal(tokens, inputs.reduce((a, s) => a + s.length, 0));
    assert.equal(truncated, 0);
    inputs.forEach((ids, i) => {
      const [alone] = encoder.embeddings([ids], [ids.map(() => 1)], { pooling: 'mean', normalize: true });
      vectors[i]!.forEach((x, h) => assert.ok(Math.abs(x - alone![h]!) < 1e-6, `input ${i} (${ids.length} tokens) element ${h}`));
    });
  } finally {
    embedder.free();
    encoder.free();
  }
});

test('warm-up lengths: powers of two from 16 below the limit (at most 512), then the limit', () => {
  assert.deepEqual(encoderWarmUpLengths(62), [16, 32, 62]);
  assert.deepEqual(encoderWarmUpLengths(512), [16, 32, 64, 128, 256, 512]);
  assert.deepEqual(encoderWarmUpLengths(32768), [16, 32, 64, 128, 256, 512]);
  assert.deepEqual(encoderWarmUpLengths(16), [16]);
  assert.deepEqual(encoderWarmUpLengths(10), [10]);
});

test('warmUp runs a batch at each warm-up length and changes no later answer', () => {
  const embedder = Embedder.load(dir, new CpuBackend(), { batchSize: 2, pooling: 'mean', normalize: true });
  try {
    const inputs = [[2, 5, 6, 7, 3], [2, 9, 3], [2, ...Array.from({ length: 30 }, (_, j) => 5 + (j % 11)), 3]];
    const before = embedder.embed(inputs).vectors;
    assert.deepEqual(embedder.warmUp(), encoderWarmUpLengths(embedder.maxTokens));
    embedder.embed(inputs).vectors.forEach((v, i) => assert.deepEqual(v, before[i], `input ${i}`));
  } finally {
    embedder.free();
  }
});

test('input errors name the input; dimensions are checked', () => {
  const embedder = Embedder.load(dir, new CpuBackend());
  try {
    assert.throws(() => embedder.embed([[2, 3], []]), (e: unknown) => e instanceof EmbedInputError && e.index === 1 && /input 1 gives no tokens/.test(e.message));
    assert.throws(() => embedder.embed([[2, 3], [2, 1000, 3]]), (e: unknown) => e instanceof EmbedInputError && e.index === 1 && /input 1 holds token id 1000; the vocabulary has 99 ids/.test(e.message));
    assert.throws(() => embedder.embed(['hello '.repeat(39)]), /input 0 has 41 tokens; the model takes at most 40/);
    assert.throws(() => embedder.embed(['hello'], { dimensions: 33 }), /dimensions must be an integer in \[1, 32\]/);
    assert.equal(embedder.embed(['hello'], { dimensions: 5 }).vectors[0]!.length, 5);
  } finally {
    embedder.free();
  }
});
