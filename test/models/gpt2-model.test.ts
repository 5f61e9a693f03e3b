// GPT-2's hand-written backward against finite differences of its own loss, on the CPU backend in f32,
// and the planned step: buffers share memory, a traced step equals the planned one, training learns.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import { describeFailures, finiteDifferenceFailures } from '../../src/testing/finite-difference.js';
import { planStep, runStep } from '../../src/nn/step-context.js';

const tinyConfig: Gpt2Config = {
  ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 37, maxPositions: 12, hidden: 16, layers: 2, heads: 2, ffn: 24,
};

function randomBatch(batch: number, seqLen: number, vocab: number, seed: number): HostBatch {
  let s = seed;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return s % vocab; };
  const tokens = Int32Array.from({ length: batch * seqLen }, next);
  const targets = Int32Array.from({ length: batch * seqLen }, next);
  return { batch, seqLen, tokens, targets };
}

test('GPT-2 gradients match finite differences of the loss (CPU, f32)', () => {
  const backend = new CpuBackend();
  const model = new Gpt2Model(backend, tinyConfig, 'f32');
  model.params.initialize(7n);
  // A larger init spreads the logits so the loss is sensitive to every parameter.
  const batch = randomBatch(2, 5, tinyConfig.vocabSize, 3);
  const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 5, optimizer: { maxGradNorm: Infinity } });

  // Analytic gradients: a training step with lr = 0 leaves the parameters and fills the gradients
  // (of the mean loss times lossGradScale·rows = 1).
  const result = runner.trainStep(batch, 0);
  assert.ok(Number.isFinite(result.loss) && result.loss > 0);
  const probes = [
    'transformer.wte.weight', 'transformer.wpe.weight', 'transformer.h.0.ln_1.weight', 'transformer.h.0.ln_1.bias',
    'transformer.h.0.attn.c_attn.weight', 'transformer.h.0.attn.c_attn.bias', 'transformer.h.1.attn.c_proj.weight',
    'transformer.h.1.attn.c_proj.bias', 'transformer.h.1.ln_2.weight', 'transformer.h.1.mlp.c_fc.weight',
    'transformer.h.1.mlp.c_fc.bias', 'transformer.h.0.mlp.c_proj.weight', 'transformer.h.0.mlp.c_proj.bias',
    'transformer.ln_f.weight', 'transformer.ln_f.bias',
  ];
  const failures = finiteDifferenceFailures({ runner, params: model.params, batch, probes, gradScale: result.gradScale, secondIndex: (big, n) => (big * 7 + 3) % n });
  assert.deepEqual(failures, [], describeFailures(failures));
});

test('the planned step shares memory and replays identically', () => {
  const backend = new CpuBackend();
  const model = new Gpt2Model(backend, tinyConfig, 'f32');
  model.params.initialize(1n);
  const runner = new StepRunner(model, { maxBatch: 3, maxSeqLen: 8 });
  const plan = runner.largestPlan;
  assert.ok(plan.arena.arenaBytes < plan.arena.unsharedBytes * 0.8, `arena ${plan.arena.arenaBytes} vs unshared ${plan.arena.unsharedBytes}`);
  assert.ok(plan.arena.arenaBytes >= plan.arena.peakLiveBytes);

  // A run that deviates from its trace is refused.
  const other = planStep(backend, (ctx) => { ctx.buffer('a', [4], 'f32'); });
  const arena = backend.createArena(other.arena.arenaBytes);
  assert.throws(() => runStep(backend, other, arena, { seed: 0n, baseOffset: 0n, training: true }, (ctx) => { ctx.buffer('a', [5], 'f32'); }), /differs from its trace/);
});

test('training a tiny GPT-2 on one batch drives its loss down; bad batches are refused', () => {
  const backend = new CpuBackend();
  const model = new Gpt2Model(backend, tinyConfig, 'f32');
  model.params.initialize(5n);
  const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 6, optimizer: { weightDecay: 0 } });
  const batch = randomBatch(2, 6, tinyConfig.vocabSize, 11);
  const first = runner.trainStep(batch, 3e-2);
  let last = first;
  for (let i = 0; i < 30; i++) last = runner.trainStep(batch, 3e-2);
  assert.ok(last.loss < first.loss * 0.5, `loss ${first.loss} → ${last.loss}`);
  assert.equal(runner.updates, 31);
  assert.equal(runner.lastStepAllocations, 0);

  assert.throws(() => runner.trainStep({ ...batch, tokens: batch.tokens.map(() => 99) }, 1e-3), /token 99 at position 0 is outside the vocabulary/);
  assert.throws(() => runner.trainStep(randomBatch(3, 6, 37, 1), 1e-3), /exceeds the runner's bounds/);
});

test('gradient checkpointing recomputes the same gradients (with dropout) in a smaller arena', () => {
  const withDropout: Gpt2Config = { ...tinyConfig, residualDropout: 0.2, embeddingDropout: 0.1 };
  const batch = randomBatch(2, 8, withDropout.vocabSize, 5);
  const gradsWith = (checkpointEvery: number) => {
    const backend = new CpuBackend();
    const model = new Gpt2Model(backend, withDropout, 'f32');
    model.checkpointEvery = checkpointEvery;
    model.params.initialize(9n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 8, optimizer: { maxGradNorm: Infinity } });
    const loss = runner.trainStep(batch, 0).loss;
    return { loss, grads: backend.download(model.params.grads.flat) as Float32Array, arena: runner.arenaBytes };
  };
  const plain = gradsWith(0), everyBlock = gradsWith(1);
  assert.equal(everyBlock.loss, plain.loss);
  assert.deepEqual(everyBlock.grads, plain.grads);
  assert.ok(everyBlock.arena < plain.arena, `arena ${everyBlock.arena} (checkpointed) vs ${plain.arena}`);
});

test('steps replayed from a captured graph draw fresh dropout masks, exactly as eager steps do', () => {
  const withDropout: Gpt2Config = { ...tinyConfig, residualDropout: 0.2, embeddingDropout: 0.1, attentionDropout: 0.1 };
  const batch = randomBatch(2, 6, withDropout.vocabSize, 8);
  const losses = (graphs: boolean) => {
    const backend = new CpuBackend();
    const model = new Gpt2Model(backend, withDropout, 'f32');
    model.params.initialize(2n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 6, graphs });
    // lr = 0: the weights stay put, so any change in the loss comes from the masks.
    return Array.from({ length: 4 }, () => runner.trainStep(batch, 0).loss);
  };
  const eager = losses(false), graphed = losses(true);
  assert.deepEqual(graphed, eager);
  assert.equal(new Set(eager).size, 4, `every step draws new masks: ${eager.join(', ')}`);
});

test('the fused attention path gives the LightSeq path\'s loss and gradients (GPT-2, causal)', () => {
  const backend = new CpuBackend();
  const run = (fusedAttention: boolean) => {
    const model = new Gpt2Model(backend, tinyConfig, 'f32', { fusedAttention });
    model.params.initialize(21n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 7, optimizer: { maxGradNorm: Infinity } });
    const loss = runner.trainStep(randomBatch(2, 7, tinyConfig.vocabSize, 4), 0).loss;
    const plan = runner.largestPlan;
    return { loss, grads: backend.download(model.params.grads.flat) as Float32Array, plan };
  };
  const lightseq = run(false), fused = run(true);
  assert.ok(Math.abs(fused.loss - lightseq.loss) < 1e-5 * lightseq.loss, `loss ${fused.loss} vs ${lightseq.loss}`);
  let diff = 0, norm = 0;
  fused.grads.forEach((g, i) => { diff += (g - lightseq.grads[i]!) ** 2; norm += lightseq.grads[i]! ** 2; });
  assert.ok(Math.sqrt(diff / norm) < 1e-4, `gradient rel err ${Math.sqrt(diff / norm)}`);
  // No L×L buffer on the fused path.
  assert.ok(!fused.plan.buffers.some((b) => b.name === 'attn.probs'));
  assert.ok(lightseq.plan.buffers.some((b) => b.name === 'attn.probs'));
});
