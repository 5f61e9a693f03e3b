import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { CausalLMLoader, checkTokenRange, evaluationBatchCount, evaluationBatches, splitTokens, tokenizeDocuments } from '../../src/train/data.js';

/** Token i = i, so a row's first input is its window's start position. */
const iota = (n: number): Uint16Array => Uint16Array.from({ length: n }, (_, i) => i);

test('rows are windows of L + 1 consecutive tokens; targets are inputs shifted by one', () => {
  const loader = new CausalLMLoader(iota(1000), { batchSize: 4, seqLen: 16, seed: 1 });
  const { inputs, targets, batchSize, seqLen } = loader.next();
  assert.equal(batchSize, 4); assert.equal(seqLen, 16);
  assert.equal(inputs.length, 64); assert.ok(inputs instanceof Int32Array && targets instanceof Int32Array);
  for (let b = 0; b < 4; b++) {
    const start = inputs[b * 16]!;
    for (let t = 0; t < 16; t++) {
      assert.equal(inputs[b * 16 + t], start + t);
      assert.equal(targets[b * 16 + t], start + t + 1);
    }
  }
});

test('an epoch visits every window once, at one offset; epochs differ in offset or order', () => {
  const L = 10, n = 1000;
  const loader = new CausalLMLoader(iota(n), { batchSize: 1, seqLen: L, seed: 5 });
  const epochs: number[][] = [];
  for (let e = 0; e < 3; e++) {
    const starts: number[] = [];
    const windows = loader.windowsPerEpoch;
    for (let i = 0; i < windows; i++) starts.push(loader.next().inputs[0]!);
    const offset = Math.min(...starts);
    assert.ok(offset >= 0 && offset < L);
    assert.equal(windows, Math.floor((n - 1 - offset) / L));
    assert.deepEqual([...starts].sort((a, b) => a - b), Array.from({ length: windows }, (_, i) => offset + i * L));
    epochs.push(starts);
  }
  assert.equal(loader.epoch, 2);
  assert.notDeepEqual(epochs[0], epochs[1]);
});

test('same seed, same batches; another seed, other batches; shuffle off walks in order', () => {
  const a = new CausalLMLoader(iota(5000), { batchSize: 3, seqLen: 8, seed: 11 });
  const b = new CausalLMLoader(iota(5000), { batchSize: 3, seqLen: 8, seed: 11 });
  const c = new CausalLMLoader(iota(5000), { batchSize: 3, seqLen: 8, seed: 12 });
  const x = a.next(), y = b.next(), z = c.next();
  assert.deepEqual(x, y);
  assert.notDeepEqual(x.inputs, z.inputs);
  const ordered = new CausalLMLoader(iota(41), { batchSize: 2, seqLen: 8, seed: 0, shuffle: false });
  assert.deepEqual([...ordered.next().inputs].filter((_, i) => i % 8 === 0), [0, 8]);
  assert.deepEqual([...ordered.next().inputs].filter((_, i) => i % 8 === 0), [16, 24]);
  assert.deepEqual([...ordered.next().inputs].filter((_, i) => i % 8 === 0), [32, 0], 'wraps into the next epoch');
});

test('resume from state() continues exactly, across epoch boundaries', () => {
  const options = { batchSize: 3, seqLen: 7, seed: 3 };
  const tokens = iota(100); // 14 windows: an epoch every ~5 batches
  const first = new CausalLMLoader(tokens, options);
  for (let i = 0; i < 7; i++) first.next();
  const saved = JSON.parse(JSON.stringify(first.state()));
  const expected = Array.from({ length: 12 }, () => first.next());
  const resumed = new CausalLMLoader(tokens, options);
  resumed.restore(saved);
  assert.deepEqual(Array.from({ length: 12 }, () => resumed.next()), expected);
  assert.deepEqual(resumed.state(), first.state());
  assert.throws(() => new CausalLMLoader(iota(101), options).restore(saved), /saved with tokens = 100 but this loader has tokens = 101/);
  assert.throws(() => new CausalLMLoader(tokens, { ...options, seqLen: 8 }).restore(saved), /seqLen/);
  assert.throws(() => resumed.restore({ ...saved, position: 999 }), /position 999 is past the \d+ windows of epoch/);
});

test('data parallel ranks split the global batch without overlap', () => {
  const tokens = iota(4000);
  const global = new CausalLMLoader(tokens, { batchSize: 4, seqLen: 8, seed: 2 });
  const ranks = [0, 1].map((rank) => new CausalLMLoader(tokens, { batchSize: 2, seqLen: 8, seed: 2, rank, worldSize: 2 }));
  for (let step = 0; step < 3; step++) {
    const g = global.next();
    const parts = ranks.map((r) => r.next());
    assert.deepEqual([...parts[0]!.inputs, ...parts[1]!.inputs], [...g.inputs]);
  }
  assert.throws(() => new CausalLMLoader(tokens, { batchSize: 2, seqLen: 8, seed: 2, rank: 2, worldSize: 2 }), /rank must be an integer in \[0, worldSize = 2\)/);
});

test('too little data and bad options are clear errors', () => {
  assert.throws(() => new CausalLMLoader(iota(16), { batchSize: 1, seqLen: 16, seed: 0 }), /16 tokens cannot fill one window of seqLen \+ 1 = 17 tokens/);
  assert.throws(() => new CausalLMLoader(iota(100), { batchSize: 0, seqLen: 16, seed: 0 }), /batchSize must be an integer >= 1/);
  assert.throws(() => new CausalLMLoader(iota(100), { batchSize: 1, seqLen: 16, seed: 1.5 }), /seed must be an integer/);
  // The smallest stream that fits one window still works, every epoch.
  const tiny = new CausalLMLoader(iota(17), { batchSize: 3, seqLen: 16, seed: 0 });
  assert.deepEqual([...tiny.next().inputs].filter((_, i) => i % 16 === 0), [0, 0, 0]);
});

test('split: the validation part is the end of the stream; eval batches are fixed and in order', () => {
  const tokens = iota(1000);
  const { train, validation } = splitTokens(tokens, 0.1);
  assert.equal(train.length, 900); assert.equal(validation.length, 100);
  assert.equal(validation[0], 900);
  assert.throws(() => splitTokens(tokens, 1), /validationFraction must be in \[0, 1\)/);
  assert.equal(evaluationBatchCount(100, 2, 16), 3); // 6 windows of 16 (+1) in 100 tokens
  const batches = [...evaluationBatches(validation, { batchSize: 2, seqLen: 16 })];
  assert.equal(batches.length, 3);
  assert.deepEqual([...batches[1]!.inputs].filter((_, i) => i % 16 === 0), [900 + 32, 900 + 48]);
  assert.equal(batches[2]!.targets.at(-1), 900 + 96);
  assert.deepEqual([...evaluationBatches(validation, { batchSize: 2, seqLen: 16 })], batches);
  assert.equal([...evaluationBatches(validation, { batchSize: 2, seqLen: 16, maxBatches: 1 })].length, 1);
  assert.throws(() => [...evaluationBatches(validation, { batchSize: 8, seqLen: 16 })], /100 tokens do not fill one batch of 8 × 16/);
});

test('tokenizeDocuments: a separator before each document; range check', () => {
  const tok = createByteTokenizer();
  const tokens = tokenizeDocuments(['ab', 'c'], tok, { separatorId: tok.eosTokenId! });
  assert.ok(tokens instanceof Uint16Array);
  assert.deepEqual([...tokens], [256, 97, 98, 256, 99]);
  assert.deepEqual([...tokenizeDocuments(['ab', 'c'], tok)], [97, 98, 99]);
  assert.throws(() => tokenizeDocuments(['a'], tok, { separatorId: 300 }), /separatorId 300 is outside the vocabulary/);
  checkTokenRange(tokens, 257, 'x');
  assert.throws(() => checkTokenRange(tokens, 256, 'corpus.bin'), /corpus.bin: token 0 is id 256, outside the vocabulary of 256/);
});
