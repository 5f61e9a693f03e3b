// BERT encoder inference on the GPU against the CPU encoder over the same tiny random checkpoints:
// last_hidden_state, pooler_output, masked-LM logits and pooled embeddings, f32 and bf16, both attention
// paths (the fused flash op and the materialised scores), ragged right-padded batches with token types;
// the Embedder's pipelined batches against the CPU encoder input by input; sentence-transformers Dense layers;
// cross-encoders' scores.
// Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { BertEncoder, padSequences } from '../../src/infer/bert.js';
import { Embedder } from '../../src/infer/embedder.js';
import { Reranker } from '../../src/infer/reranker.js';
import type { BertAttentionPath } from '../../src/infer/bert.js';
import type { BertConfig } from '../../src/models/bert.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_BERT, writeBertFolder, writeBertTokenizer } from '../infer/bert-folder.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-bert-'));
after(() => rmSync(root, { recursive: true, force: true }));

// d = 64 (the tensor-core flash kernels) with erf GELU; d = 24 (SIMT flash) with tanh GELU, an untied decoder, no pooler.
const MODELS: { name: string; config: BertConfig; untied: boolean }[] = [
  { name: 'bert-d64', config: { ...TINY_BERT, vocabSize: 1003, hidden: 128, heads: 2, ffn: 512, layers: 3, maxPositions: 128 }, untied: false },
  { name: 'bert-d24', config: { ...TINY_BERT, vocabSize: 517, hidden: 96, heads: 4, ffn: 160, layers: 2, maxPositions: 96, activation: 'gelu_tanh', typeVocabSize: 3 }, untied: true },
];

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

for (const m of MODELS) {
  test(`${m.name}: CUDA encoder outputs match the CPU encoder (f32, bf16; flash and materialised attention)`, { skip }, async () => {
    const gpu = await createGpuBackend(), cpu = new CpuBackend();
    const dir = join(root, m.name);
    // Matrices of std 0.1: two bf16 computations of this model (CPU flash vs materialised) differ by ~7e-3.
    writeBertFolder(dir, m.config, 31, { untiedDecoder: m.untied, pooler: !m.untied, matrixStd: 0.1 });
    const rng = new Rng(5);
    const lengths = [1, 17, 64, 5, 64, 33];
    const batch = padSequences(lengths.map((n) => Array.from(rng.ints(n, 0, m.config.vocabSize))), 0);
    const types = batch.inputIds.map((row) => row.map((_, l) => (l * 7) % m.config.typeVocabSize));
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      const reference = BertEncoder.load(dir, cpu, { dtype }).encoder;
      const expected = reference.encode(batch.inputIds, batch.attentionMask, types);
      const expectedLogits = reference.maskedLmLogits(batch.inputIds, batch.attentionMask, types);
      const expectedMean = reference.embeddings(batch.inputIds, batch.attentionMask, { normalize: true });
      reference.free();
      const tolerance = dtype === 'f32' ? 1e-4 : 2e-2;
      for (const attention of ['flash', 'materialized', 'auto'] as BertAttentionPath[]) {
        const encoder = BertEncoder.load(dir, gpu as Backend, { dtype, attention }).encoder;
        const out = encoder.encode(batch.inputIds, batch.attentionMask, types);
        const label = `${dtype} ${attention}`;
        const hidden = relError(out.lastHiddenState, expected.lastHiddenState);
        assert.ok(hidden <= tolerance, `${label}: last_hidden_state rel err ${hidden}`);
        if (expected.poolerOutput) {
          const pooled = relError(out.poolerOutput!, expected.poolerOutput);
          assert.ok(pooled <= tolerance, `${label}: pooler_output rel err ${pooled}`);
        } else {
          assert.equal(out.poolerOutput, undefined);
        }
        const logits = relError(encoder.maskedLmLogits(batch.inputIds, batch.attentionMask, types), expectedLogits);
        assert.ok(logits <= tolerance, `${label}: MLM logits rel err ${logits}`);
        const mean = encoder.embeddings(batch.inputIds, batch.attentionMask, { normalize: true });
        const embedding = relError(Float32Array.from(mean.flatMap((v) => Array.from(v))), Float32Array.from(expectedMean.flatMap((v) => Array.from(v))));
        assert.ok(embedding <= tolerance, `${label}: mean embeddings rel err ${embedding}`);
        encoder.free();
      }
    }
  });
}

test('the Embedder on CUDA (batches queued one ahead of the read, sync and async) gives the CPU encoder\'s vectors, input by input', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const m = MODELS[0]!, dir = join(root, 'embedder');
  writeBertFolder(dir, m.config, 37, { maskedLm: false, matrixStd: 0.1 });
  writeBertTokenizer(dir);
  // 45 inputs of 1..120 tokens in a scrambled order: 6 batches of 8, padded to several bucketed lengths,
  // each queued before the one ahead of it is read; the last batch short.
  const rng = new Rng(11);
  const inputs = Array.from({ length: 45 }, (_, i) => Array.from(rng.ints(1 + ((i * 53) % 120), 5, m.config.vocabSize)));
  const reference = BertEncoder.load(dir, cpu, { dtype: 'f32' }).encoder;
  const expected = inputs.map((ids) => reference.embeddings([ids], [ids.map(() => 1)], { normalize: true })[0]!);
  reference.free();
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const embedder = Embedder.load(dir, gpu as Backend, { dtype, batchSize: 8, pooling: 'mean', normalize: true });
    try {
      const { vectors } = embedder.embed(inputs);
      vectors.forEach((v, i) => {
        const error = relError(v, expected[i]!);
        assert.ok(error <= (dtype === 'f32' ? 1e-4 : 2e-2), `${dtype} input ${i} (${inputs[i]!.length} tokens): rel err ${error}`);
      });
      // The server's form: each read waits for its copy's event while the event loop turns; same vectors.
      const served = await embedder.embedSequencesAsync(inputs);
      served.forEach((v, i) => assert.ok(relError(v, vectors[i]!) <= 1e-6, `${dtype} input ${i}: embedSequencesAsync differs from embed`));
    } finally {
      embedder.free();
    }
  }
});

test('a sentence-transformers directory with Dense layers (test/fixtures/sentence-transformers/dense) on CUDA gives the CPU\'s vectors', { skip }, async () => {
  const gpu = await createGpuBackend();
  const dir = join('test', 'fixtures', 'sentence-transformers', 'dense');
  const texts = ['Call me Ishmael.', 'Some years ago, never mind how long precisely, having little or no money in my purse,', 'whale', 'a', 'the sea'];
  const reference = Embedder.load(dir, new CpuBackend(), { dtype: 'f32' });
  const expected = reference.embed(texts).vectors;
  reference.free();
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    // Batches of 2: the last one a single row (the GEMV path of the Dense GEMMs).
    const embedder = Embedder.load(dir, gpu as Backend, { dtype, batchSize: 2 });
    try {
      const { vectors } = embedder.embed(texts);
      vectors.forEach((v, i) => {
        const error = relError(v, expected[i]!);
        assert.ok(error <= (dtype === 'f32' ? 1e-4 : 3e-2), `${dtype} text ${i}: rel err ${error}`);
      });
    } finally {
      embedder.free();
    }
  }
});

test('cross-encoders (test/fixtures/cross-encoder: BERT and XLM-R classification heads) on CUDA score as the CPU does', { skip }, async () => {
  const gpu = await createGpuBackend();
  const fixture = JSON.parse(readFileSync(join('test', 'fixtures', 'cross-encoder', 'expected.json'), 'utf8')) as { query: string; documents: string[] };
  const documents = [...fixture.documents, 'a', 'the sea'];
  for (const name of ['bert', 'xlm-roberta']) {
    const dir = join('test', 'fixtures', 'cross-encoder', name);
    const reference = Reranker.load(dir, new CpuBackend(), { dtype: 'f32', maxTokens: 20 });
    const expected = reference.rerank(fixture.query, documents).scores;
    reference.free();
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      // Batches of 4 and a two-row one; pairs cut to 20 tokens.
      const reranker = Reranker.load(dir, gpu as Backend, { dtype, maxTokens: 20, batchSize: 4 });
      try {
        reranker.rerank(fixture.query, documents).scores.forEach((s, i) => assert.ok(Math.abs(s - expected[i]!) < (dtype === 'f32' ? 1e-5 : 1e-2), `${name} ${dtype} document ${i}: ${s} vs ${expected[i]}`));
      } finally {
        reranker.free();
      }
    }
  }
});
