// StepRunner's global gradient norm for a model whose gradient workspace holds tensor-parallel shards
// (LanguageModel.gradientSharding): Σg² over the shard ranges goes through the model's all-reduce, the
// replicated ranges are added once. One CPU rank stands in for the group: an identity all-reduce must
// give the plain norm, and an all-reduce that doubles (two ranks holding equal shards) must double
// only the sharded part.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { ArgumentError } from '../../src/errors.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import type { GradientSharding, LanguageModel } from '../../src/models/language-model.js';
import { splitNormRanges, StepRunner } from '../../src/train/step-runner.js';

const config = { ...GPT2_PRESETS['gpt2-tiny']!, layers: 1, hidden: 32, heads: 2, ffn: 64, maxPositions: 16, residualDropout: 0, embeddingDropout: 0, attentionDropout: 0 };
const batch = { batch: 1, seqLen: 8, tokens: Int32Array.from({ length: 8 }, (_, i) => i + 3), targets: Int32Array.from({ length: 8 }, (_, i) => i + 4) };

function gradNorm(sharding: ((model: Gpt2Model) => GradientSharding) | undefined): { norm: number; sumSharded: number; sumAll: number } {
  const backend = new CpuBackend();
  const model = new Gpt2Model(backend, config, 'f32');
  model.params.initialize(1n);
  const wrapped = sharding ? Object.assign(Object.create(model) as LanguageModel, { gradientSharding: sharding(model) }) : model;
  const runner = new StepRunner(wrapped, { maxBatch: 1, maxSeqLen: 8, optimizer: { maxGradNorm: 0.1 } });
  const r = runner.trainStep(batch, 0);
  const grads = backend.download(model.params.grads.flat) as Float32Array;
  const qkv = model.params.layout.entries.find((e) => e.name.endsWith('attn.c_attn.weight'))!;
  let sumSharded = 0, sumAll = 0;
  grads.forEach((g, i) => { sumAll += g * g; if (i >= qkv.offset && i < qkv.offset + qkv.numel) sumSharded += g * g; });
  return { norm: r.gradNorm / r.gradScale, sumSharded, sumAll };
}

test('a tensor-parallel model clips with Σ over its shards all-reduced and its replicated parts counted once', () => {
  const plain = gradNorm(undefined);
  const qkvRange = (model: Gpt2Model): [number, number] => {
    const e = model.params.layout.entries.find((x) => x.name.endsWith('attn.c_attn.weight'))!;
    return [e.offset, e.offset + e.numel];
  };
  const identity = gradNorm((model) => ({ shardedRanges: [qkvRange(model)], allReduceSum: () => {} }));
  assert.ok(Math.abs(identity.norm - plain.norm) <= 1e-6 * plain.norm, `identity all-reduce: ${identity.norm} vs ${plain.norm}`);
  const doubled = gradNorm((model) => ({
    shardedRanges: [qkvRange(model)],
    allReduceSum: (t) => { model.backend.upload(t, Float32Array.from(model.backend.download(t) as Float32Array, (x) => 2 * x)); },
  }));
  const want = Math.sqrt(doubled.sumAll + doubled.sumSharded);
  assert.ok(doubled.sumSharded > 0 && Math.abs(doubled.norm - want) <= 1e-5 * want, `doubled shards: ${doubled.norm} vs ${want}`);
});

test('shard ranges are merged, checked, and their complement is the replicated part', () => {
  assert.deepEqual(splitNormRanges([[10, 20], [0, 4], [4, 6], [20, 20]], 30), { sharded: [[0, 6], [10, 20]], replicated: [[6, 10], [20, 30]] });
  assert.deepEqual(splitNormRanges([], 5), { sharded: [], replicated: [[0, 5]] });
  assert.throws(() => splitNormRanges([[0, 8], [4, 9]], 10), (e: unknown) => e instanceof ArgumentError && /overlap/.test(e.message));
  assert.throws(() => splitNormRanges([[0, 11]], 10), /outside the workspace/);
});
