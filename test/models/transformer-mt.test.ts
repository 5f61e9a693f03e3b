// The encoder-decoder translation model (Marian conventions) on the CPU backend in f32: its hand-written
// backward against finite differences of its loss (with source padding), source padding that cannot
// change the loss, gradient checkpointing, and a tiny training run.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { MarianConfig } from '../../src/models/marian.js';
import { MARIAN_PRESETS } from '../../src/models/marian.js';
import { TransformerMtModel, sinusoidalPositions } from '../../src/models/transformer-mt.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import { describeFailures, finiteDifferenceFailures } from '../../src/testing/finite-difference.js';

const tiny: MarianConfig = {
  ...MARIAN_PRESETS['marian-base']!, vocabSize: 29, decoderVocabSize: 29, hidden: 16, encoderLayers: 2, decoderLayers: 2,
  encoderHeads: 2, decoderHeads: 2, encoderFfn: 24, decoderFfn: 24, activation: 'gelu', maxPositions: 12,
  decoderStartTokenId: 28, padTokenId: 28, eosTokenId: 0, dropout: 0, attentionDropout: 0, activationDropout: 0,
};

/** Two pairs: source lengths [6, 4] in a 6-wide batch, targets 5 wide with the second one's tail ignored. */
function mtBatch(seed: number, sourcePad = 28): HostBatch {
  let s = seed;
  const next = (n: number) => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return (s >>> 8) % n; };
  const B = 2, Ls = 6, Lt = 5, lengths = Int32Array.from([6, 4]);
  const sourceTokens = Int32Array.from({ length: B * Ls }, (_, i) => (i % Ls < lengths[Math.floor(i / Ls)]! ? next(27) + 1 : sourcePad));
  const tokens = Int32Array.from({ length: B * Lt }, () => next(28));
  const targets = Int32Array.from({ length: B * Lt }, (_, i) => (i >= Lt + 3 ? -100 : next(28)));
  return { batch: B, seqLen: Lt, tokens, targets, source: { seqLen: Ls, tokens: sourceTokens, lengths } };
}

/**
 * HF's init with matrices and embeddings 10× larger (std 0.2): attention scores then spread over several
 * units, so the loss is sensitive to the query and key projections (at std 0.02 the softmax is nearly
 * uniform and their gradients are too small for a finite-difference check to see errors).
 */
function newModel(config: MarianConfig, seed: bigint): { backend: CpuBackend; model: TransformerMtModel } {
  const backend = new CpuBackend();
  const model = new TransformerMtModel(backend, config, 'f32');
  model.params.initialize(seed);
  for (const name of model.params.names) {
    if (model.params.spec(name).init.kind !== 'normal') continue;
    const { value } = model.params.param(name);
    backend.upload(value, (backend.download(value) as Float32Array).map((v) => 10 * v));
  }
  return { backend, model };
}

test('Marian parameter names, the packed cross-attention K/V and the sinusoidal table', () => {
  const { model } = newModel(tiny, 1n);
  const names = model.params.names;
  for (const n of ['model.shared.weight', 'model.encoder.layers.1.self_attn.q_proj.weight', 'model.decoder.layers.0.encoder_attn.k_proj.weight',
    'model.decoder.layers.1.encoder_attn.v_proj.bias', 'model.decoder.layers.1.encoder_attn_layer_norm.weight', 'final_logits_bias']) {
    assert.ok(names.includes(n), n);
  }
  assert.ok(!names.some((n) => n.includes('embed_positions')), 'the sinusoidal tables are not parameters');
  assert.deepEqual(model.params.fileShapes().find((e) => e.name === 'final_logits_bias')!.shape, [1, 29]);
  assert.deepEqual(model.params.fileShapes().find((e) => e.name === 'model.shared.weight')!.shape, [29, 16]);
  assert.deepEqual(model.encoderKv.kv.weight.value.shape, [2 * 2 * 16, 16]);
  const table = sinusoidalPositions(3, 6);
  assert.ok(Math.abs(table[6 + 0]! - Math.sin(1)) < 1e-7 && Math.abs(table[6 + 3]! - Math.cos(1)) < 1e-7);
  assert.ok(Math.abs(table[12 + 1]! - Math.sin(2 / 10000 ** (2 / 6))) < 1e-7 && table[3] === 1);
  // Marian's own FFN activation (swish = SiLU) builds and trains.
  const swish = new TransformerMtModel(new CpuBackend(), { ...tiny, activation: 'silu' }, 'f32');
  swish.params.initialize(2n);
  const step = new StepRunner(swish, { maxBatch: 2, maxSeqLen: 5, maxSourceLen: 6 }).trainStep(mtBatch(4), 1e-3);
  assert.ok(Number.isFinite(step.loss) && step.loss > 0);
});

test('Transformer MT gradients match finite differences, with source padding (CPU, f32)', () => {
  const { model } = newModel(tiny, 3n);
  const batch = mtBatch(1);
  const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 5, maxSourceLen: 6, optimizer: { maxGradNorm: Infinity } });
  const step = runner.trainStep(batch, 0);
  assert.equal(step.validTargets, 8);
  const probes = [
    'model.shared.weight', 'final_logits_bias',
    'model.encoder.layers.0.self_attn.q_proj.weight', 'model.encoder.layers.0.self_attn.k_proj.bias', 'model.encoder.layers.1.self_attn.v_proj.weight',
    'model.encoder.layers.1.self_attn.out_proj.weight', 'model.encoder.layers.0.self_attn_layer_norm.weight', 'model.encoder.layers.1.fc1.weight',
    'model.encoder.layers.0.fc2.bias', 'model.encoder.layers.1.final_layer_norm.bias',
    'model.decoder.layers.0.self_attn.q_proj.weight', 'model.decoder.layers.1.self_attn.v_proj.bias', 'model.decoder.layers.0.self_attn.out_proj.bias',
    'model.decoder.layers.1.self_attn_layer_norm.bias',
    'model.decoder.layers.0.encoder_attn.q_proj.weight', 'model.decoder.layers.1.encoder_attn.q_proj.bias',
    'model.decoder.layers.0.encoder_attn.k_proj.weight', 'model.decoder.layers.1.encoder_attn.k_proj.bias',
    'model.decoder.layers.0.encoder_attn.v_proj.bias', 'model.decoder.layers.1.encoder_attn.v_proj.weight',
    'model.decoder.layers.0.encoder_attn.out_proj.weight', 'model.decoder.layers.1.encoder_attn_layer_norm.weight',
    'model.decoder.layers.0.fc1.bias', 'model.decoder.layers.1.fc2.weight', 'model.decoder.layers.0.final_layer_norm.weight',
  ];
  const failures = finiteDifferenceFailures({ runner, params: model.params, batch, probes, gradScale: step.gradScale });
  assert.deepEqual(failures, [], describeFailures(failures));
});

test('source tokens beyond a sequence\'s length change neither the loss nor the gradients', () => {
  const run = (pad: number) => {
    const { backend, model } = newModel(tiny, 5n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 5, maxSourceLen: 6, optimizer: { maxGradNorm: Infinity } });
    const loss = runner.trainStep(mtBatch(2, pad), 0).loss;
    return { loss, grads: backend.download(model.params.grads.flat) as Float32Array };
  };
  const a = run(28), b = run(7);
  assert.equal(a.loss, b.loss);
  assert.deepEqual(a.grads, b.grads);
});

test('gradient checkpointing recomputes the same gradients (with dropout)', () => {
  const withDropout: MarianConfig = { ...tiny, dropout: 0.2, attentionDropout: 0.1, activationDropout: 0.1 };
  const grads = (checkpointEvery: number) => {
    const { backend, model } = newModel(withDropout, 9n);
    model.checkpointEvery = checkpointEvery;
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 5, maxSourceLen: 6, optimizer: { maxGradNorm: Infinity } });
    const loss = runner.trainStep(mtBatch(3), 0).loss;
    return { loss, grads: backend.download(model.params.grads.flat) as Float32Array };
  };
  const plain = grads(0), checkpointed = grads(1);
  assert.equal(checkpointed.loss, plain.loss);
  assert.deepEqual(checkpointed.grads, plain.grads);
});

test('a tiny translation model learns a batch; batches without a source side are refused', () => {
  const { model } = newModel(tiny, 4n);
  const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 5, maxSourceLen: 6, optimizer: { weightDecay: 0 } });
  const batch = mtBatch(6);
  const first = runner.trainStep(batch, 3e-2);
  let last = first;
  for (let i = 0; i < 30; i++) last = runner.trainStep(batch, 3e-2);
  assert.ok(last.loss < first.loss * 0.5, `loss ${first.loss} → ${last.loss}`);
  assert.equal(runner.lastStepAllocations, 0);
  const { source: _, ...noSource } = batch;
  assert.throws(() => runner.trainStep(noSource, 1e-3), /needs the batch's source side/);
  assert.throws(() => runner.trainStep({ ...batch, source: { ...batch.source!, lengths: Int32Array.from([7, 1]) } }, 1e-3), /source length 7 of sequence 0/);
  assert.throws(() => new StepRunner(model, { maxBatch: 2, maxSeqLen: 5 }), /needs maxSourceLen/);
});
