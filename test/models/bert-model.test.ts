// BERT's masked-LM backward against finite differences of its loss (CPU, f32), and training on a batch.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { BertConfig } from '../../src/models/bert.js';
import { BERT_PRESETS } from '../../src/models/bert.js';
import { BertModel } from '../../src/models/bert-model.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import { describeFailures, finiteDifferenceFailures } from '../../src/testing/finite-difference.js';

const tiny: BertConfig = {
  ...BERT_PRESETS['bert-tiny']!, vocabSize: 41, hidden: 16, layers: 2, heads: 2, ffn: 24, maxPositions: 12,
  hiddenDropout: 0, attentionDropout: 0, layerNormEps: 1e-12,
};

function maskedBatch(batch: number, seqLen: number, seed: number): HostBatch {
  let s = seed;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s; };
  const tokens = Int32Array.from({ length: batch * seqLen }, () => next() % tiny.vocabSize);
  // Every third position carries a target; the rest are ignored (-100), as in masked-LM batches.
  const targets = Int32Array.from({ length: batch * seqLen }, (_, i) => (i % 3 === 0 ? next() % tiny.vocabSize : -100));
  return { batch, seqLen, tokens, targets };
}

test('BERT masked-LM gradients match finite differences (CPU, f32)', () => {
  const backend = new CpuBackend();
  const model = new BertModel(backend, tiny, 'f32');
  model.params.initialize(3n);
  const batch = maskedBatch(2, 7, 1);
  const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 7, optimizer: { maxGradNorm: Infinity } });
  const step = runner.trainStep(batch, 0);
  assert.equal(step.validTargets, 5);
  const probes = [
    'bert.embeddings.word_embeddings.weight', 'bert.embeddings.position_embeddings.weight', 'bert.embeddings.token_type_embeddings.weight',
    'bert.embeddings.LayerNorm.weight', 'bert.encoder.layer.0.attention.self.query.weight', 'bert.encoder.layer.0.attention.self.key.bias',
    'bert.encoder.layer.0.attention.self.value.weight', 'bert.encoder.layer.1.attention.output.dense.weight', 'bert.encoder.layer.1.attention.output.LayerNorm.bias',
    'bert.encoder.layer.0.intermediate.dense.weight', 'bert.encoder.layer.1.output.dense.bias', 'bert.encoder.layer.1.output.LayerNorm.weight',
    'cls.predictions.transform.dense.weight', 'cls.predictions.transform.LayerNorm.weight', 'cls.predictions.bias',
  ];
  const failures = finiteDifferenceFailures({ runner, params: model.params, batch, probes, gradScale: step.gradScale });
  assert.deepEqual(failures, [], describeFailures(failures));
});

test('BERT learns a masked-LM batch', () => {
  const backend = new CpuBackend();
  const model = new BertModel(backend, tiny, 'f32');
  model.params.initialize(4n);
  const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 9, optimizer: { weightDecay: 0 } });
  const batch = maskedBatch(2, 9, 2);
  const first = runner.trainStep(batch, 3e-2);
  let last = first;
  for (let i = 0; i < 30; i++) last = runner.trainStep(batch, 3e-2);
  assert.ok(last.loss < first.loss * 0.5, `loss ${first.loss} → ${last.loss}`);
});

test('BERT masks padded keys: tokens beyond a sequence\'s length change nothing', () => {
  const lossAndGrads = (padToken: number) => {
    const backend = new CpuBackend();
    const model = new BertModel(backend, tiny, 'f32');
    model.params.initialize(6n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 7, optimizer: { maxGradNorm: Infinity } });
    const batch = maskedBatch(2, 7, 3);
    const lengths = Int32Array.from([7, 4]);
    const tokens = batch.tokens.map((t, i) => (i >= 7 + 4 ? padToken : t));
    const targets = batch.targets.map((t, i) => (i >= 7 + 4 ? -100 : t));
    const loss = runner.trainStep({ ...batch, tokens, targets, lengths }, 0).loss;
    return { loss, grads: backend.download(model.params.grads.flat) as Float32Array, runner };
  };
  const a = lossAndGrads(5), b = lossAndGrads(17);
  assert.equal(a.loss, b.loss);
  // Padded positions are masked as keys and their own losses are ignored: they contribute no gradient.
  let differing = 0;
  a.grads.forEach((g, i) => { if (g !== b.grads[i]) differing++; });
  assert.equal(differing, 0);
  assert.throws(() => a.runner.trainStep({ ...maskedBatch(2, 7, 3), lengths: Int32Array.from([7, 0]) }, 0), /length 0 of sequence 1 must be in \[1, 7\]/);
});

test('BERT\'s sparse MLM head (target rows only) gives the dense head\'s loss and gradients', () => {
  const run = (sparseLoss: boolean) => {
    const backend = new CpuBackend();
    const model = new BertModel(backend, tiny, 'f32', { sparseLoss });
    model.params.initialize(8n);
    const runner = new StepRunner(model, { maxBatch: 3, maxSeqLen: 11, optimizer: { maxGradNorm: Infinity } });
    const step = runner.trainStep(maskedBatch(3, 11, 4), 0);
    return { loss: step.loss, grads: backend.download(model.params.grads.flat) as Float32Array };
  };
  const sparse = run(true), dense = run(false);
  assert.ok(Math.abs(sparse.loss - dense.loss) <= 1e-6 * Math.abs(dense.loss), `loss ${sparse.loss} vs ${dense.loss}`);
  let worst = 0, scale = 0;
  dense.grads.forEach((g, i) => { worst = Math.max(worst, Math.abs(g - sparse.grads[i]!)); scale = Math.max(scale, Math.abs(g)); });
  assert.ok(scale > 0 && worst <= 1e-5 * scale, `gradients differ by ${worst} (largest ${scale})`);
});
