// Decoder models as sentence encoders (infer/decoder-encoder.ts through the Embedder): a Qwen3-Embedding-shaped
// sentence-transformers directory (Qwen3Model saved without the "model." prefix or an LM head, lasttoken pooling,
// Normalize, named prompts, a tokenizer appending <|endoftext|>, max_seq_length 16) against
// SentenceTransformer.encode's vectors with and without the "query" prompt (test/fixtures/qwen3-embedding/make.py);
// batches cut by the pass's token budget, left- and right-padded masks, the tokenizer's truncation, and the
// refusals (unknown prompts, prompts with token ids, masks with gaps, BERT-only options).

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecoderEncoder } from '../../src/infer/decoder-encoder.js';
import { Embedder, lengthSortedBatches } from '../../src/infer/embedder.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';

const FIXTURE = join('test', 'fixtures', 'qwen3-embedding', 'model');
interface Case { prompt_name: string | null; ids: number[][]; vectors: number[][] }
const expected = JSON.parse(readFileSync(join('test', 'fixtures', 'qwen3-embedding', 'expected.json'), 'utf8')) as { texts: string[]; max_seq_length: number; cases: Case[] };
const root = mkdtempSync(join(tmpdir(), 'fuseformer-decoder-embed-'));
after(() => rmSync(root, { recursive: true, force: true }));

function assertClose(actual: readonly Float32Array[], wanted: readonly number[][], label: string, tolerance = 2e-6): void {
  assert.equal(actual.length, wanted.length, label);
  actual.forEach((v, i) => {
    assert.equal(v.length, wanted[i]!.length, `${label}: vector ${i}'s width`);
    v.forEach((x, h) => assert.ok(Math.abs(x - wanted[i]![h]!) < tolerance, `${label}: vector ${i} element ${h}: ${x} vs ${wanted[i]![h]}`));
  });
}

test('a Qwen3-Embedding-shaped sentence-transformers directory: last-token pooling, unit vectors, the query prompt — SentenceTransformer.encode\'s vectors', () => {
  const embedder = Embedder.load(FIXTURE, new CpuBackend(), { dtype: 'f32' });
  try {
    assert.deepEqual([embedder.encoder.kind, embedder.pooling, embedder.normalize, embedder.truncateAt, embedder.dimensions], ['decoder', 'last', true, 16, 32]);
    assert.deepEqual(embedder.unused, []);
    for (const c of expected.cases) {
      const label = c.prompt_name ?? 'no prompt';
      const prompt = embedder.promptText(c.prompt_name ? { promptName: c.prompt_name } : {});
      // The tokens as transformers' tokenizer truncates them: the text's own cut, <|endoftext|> kept last.
      assert.deepEqual(expected.texts.map((t, i) => embedder.prepare(t, i, prompt).ids), c.ids, `${label}: token ids`);
      const { vectors, truncated, tokens } = embedder.embed(expected.texts, c.prompt_name ? { promptName: c.prompt_name } : {});
      assert.equal(tokens, c.ids.flat().length, label);
      assert.equal(truncated, c.prompt_name ? 4 : 1, `${label}: texts past max_seq_length`);
      assertClose(vectors, c.vectors, label);
    }
    // The prompt as text gives the same vectors as its name.
    const query = expected.cases.find((c) => c.prompt_name === 'query')!;
    assertClose(embedder.embed(expected.texts, { prompt: embedder.sentenceTransformers!.prompts['query']! }).vectors, query.vectors, 'prompt text');
  } finally {
    embedder.free();
  }
});

test('a decoder embedder\'s warm-up runs up to max_seq_length and leaves the shared-prefix statistics and every answer as they were', () => {
  const embedder = Embedder.load(FIXTURE, new CpuBackend(), { dtype: 'f32', batchSize: 3 });
  try {
    const query = expected.cases.find((c) => c.prompt_name === 'query')!;
    embedder.embed(expected.texts, { promptName: 'query' });
    const stats = { ...embedder.encoder.prefixStats! };
    assert.deepEqual(embedder.warmUp(), [16], 'max_seq_length 16');
    assert.deepEqual(embedder.encoder.prefixStats, stats);
    assertClose(embedder.embed(expected.texts, { promptName: 'query' }).vectors, query.vectors, 'after the warm-up');
  } finally {
    embedder.free();
  }
});

test('a decoder embedder\'s batches: one sequence a pass or all at once, under a small token budget, give the same vectors', () => {
  const plain = expected.cases.find((c) => c.prompt_name === null)!;
  for (const options of [{ batchSize: 1 }, { batchSize: 4 }, { batchSize: 4, maxPassTokens: 24 }]) {
    const embedder = Embedder.load(FIXTURE, new CpuBackend(), { dtype: 'f32', ...options });
    try {
      assertClose(embedder.embed(expected.texts).vectors, plain.vectors, JSON.stringify(options));
    } finally {
      embedder.free();
    }
  }
  // The budget: 24 tokens a pass takes one sequence of the longest bucket (16) at a time, three of 8.
  const lengths = [14, 16, 4, 2, 3].map((n) => Array.from({ length: n }, () => 5));
  const batches = [...lengthSortedBatches(lengths, 4, 0, 16, 24)];
  assert.deepEqual(batches.map((b) => [b.members, b.inputIds[0]!.length]), [[[1], 16], [[0], 16], [[2, 4, 3], 8]]);
});

test('DecoderEncoder: left- and right-padded masks give the vectors of unpadded sequences; a mask with a gap, all zeros or a bad id is refused by name', () => {
  const { encoder } = DecoderEncoder.load(FIXTURE, new CpuBackend(), { dtype: 'f32' });
  try {
    const ids = expected.cases[0]!.ids;
    const alone = ids.map((row) => encoder.embeddings([row], undefined, { pooling: 'last', normalize: true })[0]!);
    const L = Math.max(...ids.map((r) => r.length));
    const right = ids.map((r) => [...r, ...new Array<number>(L - r.length).fill(7)]), rightMask = ids.map((r) => r.map(() => 1).concat(new Array<number>(L - r.length).fill(0)));
    const left = ids.map((r) => [...new Array<number>(L - r.length).fill(7), ...r]), leftMask = rightMask.map((m) => [...m].reverse());
    for (const [label, batch, mask] of [['right', right, rightMask], ['left', left, leftMask]] as const) {
      const vectors = encoder.embeddings(batch, mask, { pooling: 'last', normalize: true });
      assertClose(vectors, alone.map((v) => Array.from(v)), `${label}-padded`, 1e-5);
    }
    // Mean and first-token pooling read the same rows as the last token's (here: the sequence of one token).
    const one = [[ids[3]![0]!]];
    const [last, mean, first] = (['last', 'mean', 'cls'] as const).map((pooling) => encoder.embeddings(one, undefined, { pooling })[0]!);
    assertClose([mean!, first!], [Array.from(last!), Array.from(last!)], 'one token', 1e-6);
    assert.throws(() => encoder.embeddings([[1, 2, 3]], [[1, 0, 1]]), /attention_mask\[0\] has a gap/);
    assert.throws(() => encoder.embeddings([[1, 2]], [[0, 0]]), /attention_mask\[0\] is all zeros/);
    assert.throws(() => encoder.embeddings([[1, 300]]), /input_ids\[0\]\[1\] is 300, outside the vocabulary \[0, 300\)/);
    assert.throws(() => encoder.embeddings([[1, 2], [3]]), /input_ids\[1\] has 1 tokens, input_ids\[0\] 2/);
    assert.throws(() => encoder.embeddings([[1]], undefined, { pooling: 'max' as never }), /pooling must be mean, cls, last, got 'max'/);
  } finally {
    encoder.free();
  }
  const small = DecoderEncoder.load(FIXTURE, new CpuBackend(), { dtype: 'f32', maxPassTokens: 8 }).encoder;
  try {
    assert.equal(small.maxTokens, 8);
    assert.throws(() => small.embeddings([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), /a batch of 3 × 3 tokens is more than one pass takes \(maxPassTokens = 8\)/);
  } finally {
    small.free();
  }
});

test('a decoder embedder refuses an unknown prompt name (listing the model\'s), a prompt with token-id inputs, and BERT\'s attention paths', () => {
  const embedder = Embedder.load(FIXTURE, new CpuBackend(), { dtype: 'f32' });
  try {
    assert.throws(() => embedder.embed(['whale'], { promptName: 'passage' }), /no prompt named 'passage'; the model's prompts are 'document', 'query'/);
    assert.throws(() => embedder.embed(['whale', [1, 2]], { promptName: 'query' }), /input 1 is token ids; a prompt applies to texts only/);
    assert.throws(() => embedder.promptText({ prompt: 'a', promptName: 'query' }), /a prompt or a prompt name, not both/);
    // The empty "document" prompt changes nothing, token ids included.
    assert.equal(embedder.embed(['whale', [1, 2]], { promptName: 'document' }).vectors.length, 2);
  } finally {
    embedder.free();
  }
  assert.throws(() => Embedder.load(FIXTURE, new CpuBackend(), { attention: 'materialized' }), /attention 'materialized' applies to BERT encoders/);
});

test('a decoder checkpoint without an LM head (Qwen3Model): the generation loader names lm_head.weight; the embedding loader holds none', () => {
  assert.throws(() => loadDecoderModel(FIXTURE, new CpuBackend()), /lacks 1 weight\(s\) the llama model needs: 'lm_head.weight'/);
  const tokenizer = loadTokenizer(FIXTURE);
  assert.equal(tokenizer.encode('whale').at(-1), tokenizer.eosTokenId, 'the post-processor appends <|endoftext|>');
  const backend = new CpuBackend();
  const { model, unused } = loadDecoderModel(FIXTURE, backend, { withoutHead: true });
  try {
    assert.deepEqual(unused, []);
    assert.throws(() => backend.download(model.lmHead), /./);
  } finally {
    model.free();
  }
  // An embedding directory's modules must start with the Transformer.
  const broken = join(root, 'broken');
  cpSync(FIXTURE, broken, { recursive: true });
  writeFileSync(join(broken, 'modules.json'), '[]');
  assert.throws(() => Embedder.load(broken, new CpuBackend()), /expected a Transformer module then a Pooling module/);
});
