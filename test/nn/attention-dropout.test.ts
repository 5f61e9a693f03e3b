// Attention dropout on the fused path (nn/attention.ts → flashAttentionForward/Backward with its
// in-kernel dropout) against the LightSeq path (softmax, the dropout op on the materialised
// probabilities, P·v): the same Philox counters decide the same elements, so a GPT-2 training step
// gives the same loss and gradients on both, without an L×L buffer or mask on the fused one (CPU, f32).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';

const config: Gpt2Config = {
  ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 37, maxPositions: 12, hidden: 16, layers: 2, heads: 2, ffn: 24,
  residualDropout: 0, embeddingDropout: 0, attentionDropout: 0.3,
};

function batch(seed: number): HostBatch {
  let s = seed;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return s % config.vocabSize; };
  return { batch: 2, seqLen: 9, tokens: Int32Array.from({ length: 18 }, next), targets: Int32Array.from({ length: 18 }, next) };
}

test('GPT-2 with attention dropout: the fused path draws the LightSeq path\'s masks (same loss and gradients)', () => {
  const backend = new CpuBackend();
  const run = (fusedAttention: boolean) => {
    const model = new Gpt2Model(backend, config, 'f32', { fusedAttention });
    model.params.initialize(5n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 9, optimizer: { maxGradNorm: Infinity } });
    const losses = [runner.trainStep(batch(1), 0).loss, runner.trainStep(batch(1), 0).loss];
    return { losses, grads: Float32Array.from(backend.download(model.params.grads.flat)), plan: runner.largestPlan };
  };
  const lightseq = run(false), fused = run(true);
  // lr = 0: the two steps differ only by their masks, which must be fresh per step on both paths.
  assert.notEqual(lightseq.losses[0], lightseq.losses[1], 'each step draws a new mask');
  for (let i = 0; i < 2; i++) {
    assert.ok(Math.abs(fused.losses[i]! - lightseq.losses[i]!) < 1e-5 * lightseq.losses[i]!, `step ${i}: loss ${fused.losses[i]} vs ${lightseq.losses[i]}`);
  }
  let diff = 0, norm = 0;
  fused.grads.forEach((g, i) => { diff += (g - lightseq.grads[i]!) ** 2; norm += lightseq.grads[i]! ** 2; });
  assert.ok(Math.sqrt(diff / norm) < 1e-4, `gradient rel err ${Math.sqrt(diff / norm)}`);
  assert.ok(!fused.plan.buffers.some((b) => b.name === 'attn.probs' || b.name === 'attn.dropMask'), 'the fused path keeps no L×L buffer');
  assert.ok(lightseq.plan.buffers.some((b) => b.name === 'attn.dropMask'));
});
