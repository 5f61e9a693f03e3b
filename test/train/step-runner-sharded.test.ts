// StepRunner refuses gradient clipping for a model whose gradients are tensor-parallel shards.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { ArgumentError } from '../../src/errors.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import type { LanguageModel } from '../../src/models/language-model.js';
import { StepRunner } from '../../src/train/step-runner.js';

test('a model with sharded gradients must train without global-norm clipping', () => {
  const config = { ...GPT2_PRESETS['gpt2-tiny']!, layers: 1, hidden: 32, heads: 2, ffn: 64, maxPositions: 16 };
  const model = new Gpt2Model(new CpuBackend(), config, 'f32');
  const sharded = Object.assign(Object.create(model) as LanguageModel, { gradientsSharded: true });
  model.params.initialize(1n);
  const batch = { batch: 1, seqLen: 8, tokens: Int32Array.from({ length: 8 }, (_, i) => i + 3), targets: Int32Array.from({ length: 8 }, (_, i) => i + 4) };
  const clipping = new StepRunner(sharded, { maxBatch: 1, maxSeqLen: 8 });
  assert.throws(() => clipping.trainStep(batch, 1e-3),
    (e: unknown) => e instanceof ArgumentError && /sharded across tensor-parallel ranks.*maxGradNorm: Infinity/.test(e.message));
  assert.ok(Number.isFinite(clipping.evalLoss(batch).loss), 'evaluation needs no clipping');
  clipping.dispose();
  const unclipped = new StepRunner(sharded, { maxBatch: 1, maxSeqLen: 8, optimizer: { maxGradNorm: Infinity } });
  assert.ok(Number.isFinite(unclipped.trainStep(batch, 1e-3).loss));
  unclipped.dispose();
});
