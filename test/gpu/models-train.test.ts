// BERT (masked LM) and the encoder-decoder model on the GPU against the CPU reference: loss and every
// parameter gradient, f32 and bf16, at awkward sizes (vocabulary 1001, source lengths 23 and 17 in a
// 23-wide batch), plus graph-replayed steps with dropout matching eager ones.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import type { BertConfig } from '../../src/models/bert.js';
import { BertModel } from '../../src/models/bert-model.js';
import type { LanguageModel } from '../../src/models/language-model.js';
import type { MarianConfig } from '../../src/models/marian.js';
import { MARIAN_PRESETS } from '../../src/models/marian.js';
import { TransformerMtModel } from '../../src/models/transformer-mt.js';
import type { HostBatch, StepRunnerOptions } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import { gradientErrorFloor, gradientRelError } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import './report-as-you-go.js';

const skip = gpuSkip();

const bert: BertConfig = {
  vocabSize: 1001, hidden: 96, layers: 2, heads: 3, ffn: 384, activation: 'gelu', maxPositions: 64,
  typeVocabSize: 2, layerNormEps: 1e-12, hiddenDropout: 0, attentionDropout: 0, padTokenId: 0,
};
const marian: MarianConfig = {
  ...MARIAN_PRESETS['marian-base']!, vocabSize: 1001, decoderVocabSize: 1001, hidden: 96, encoderLayers: 2, decoderLayers: 2,
  encoderHeads: 3, decoderHeads: 3, encoderFfn: 192, decoderFfn: 192, activation: 'gelu', maxPositions: 64,
  decoderStartTokenId: 1000, padTokenId: 1000, eosTokenId: 0, dropout: 0, attentionDropout: 0, activationDropout: 0,
};


interface Case {
  readonly name: string;
  readonly build: (backend: Backend, dtype: FloatDType) => LanguageModel;
  readonly batch: (rng: Rng) => HostBatch;
  readonly bounds: StepRunnerOptions;
}

const CASES: Case[] = [
  {
    name: 'BERT masked LM', build: (b, dtype) => new BertModel(b, bert, dtype), bounds: { maxBatch: 3, maxSeqLen: 29 },
    batch: (rng) => ({ batch: 3, seqLen: 29, tokens: rng.ints(87, 0, 1001), targets: Int32Array.from(rng.ints(87, 0, 1001), (t, i) => (i % 4 === 0 ? t : -100)) }),
  },
  {
    name: 'encoder-decoder', build: (b, dtype) => new TransformerMtModel(b, marian, dtype), bounds: { maxBatch: 2, maxSeqLen: 19, maxSourceLen: 23 },
    batch: (rng) => ({
      batch: 2, seqLen: 19, tokens: rng.ints(38, 0, 1000), targets: rng.ints(38, 0, 1000),
      source: { seqLen: 23, tokens: rng.ints(46, 0, 1000), lengths: Int32Array.from([23, 17]) },
    }),
  },
];

for (const c of CASES) {
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    test(`${c.name} step on the GPU matches the CPU reference (${dtype})`, { skip }, async () => {
      const gpu = await createGpuBackend(), cpu = new CpuBackend();
      const init = c.build(cpu, 'f32');
      init.params.initialize(BigInt(freshSeed()));
      const weights = init.params.download();
      const batch = c.batch(new Rng(freshSeed()));
      const run = (backend: Backend) => {
        const model = c.build(backend, dtype);
        model.params.upload(weights, 'test weights');
        const runner = new StepRunner(model, { ...c.bounds, optimizer: { maxGradNorm: Infinity } });
        runner.syncMasterFromParams();
        return { model, result: runner.trainStep(batch, 0) };
      };
      const g = run(gpu), k = run(cpu);
      const tol = dtype === 'f32' ? 1e-4 : 3e-2;
      assert.ok(Math.abs(g.result.loss - k.result.loss) / k.result.loss < tol / 3, `loss GPU ${g.result.loss} CPU ${k.result.loss}`);
      const reference = new Map(k.model.params.names.map((n) => [n, cpu.download(k.model.params.param(n).grad) as Float32Array]));
      const floor = gradientErrorFloor(reference.values());
      for (const [name, expected] of reference) {
        const e = gradientRelError(gpu.download(g.model.params.param(name).grad) as Float32Array, expected, floor);
        assert.ok(e < tol, `${dtype} gradient of ${name}: rel err ${e}`);
      }
    });
  }
}

test('BERT with dropout: graph-replayed steps draw fresh masks exactly as eager steps do', { skip }, async () => {
  const gpu = await createGpuBackend();
  const config: BertConfig = { ...bert, hiddenDropout: 0.1, attentionDropout: 0.1 };
  const rng = new Rng(freshSeed());
  // Distinct tokens: no two atomic adds of the embedding backward meet, so steps are deterministic.
  const order = Array.from({ length: 1001 }, (_, i) => i).sort(() => rng.next() - 0.5);
  const batch: HostBatch = { batch: 2, seqLen: 29, tokens: Int32Array.from(order.slice(0, 58)), targets: rng.ints(58, 0, 1001) };
  const losses = (graphs: boolean) => {
    const model = new BertModel(gpu, config, 'f32');
    model.params.initialize(5n);
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 29, graphs });
    const out = Array.from({ length: 4 }, () => runner.trainStep(batch, 0).loss);
    runner.dispose();
    model.params.free();
    return out;
  };
  const eager = losses(false), graphed = losses(true);
  assert.deepEqual(graphed, eager);
  assert.equal(new Set(eager).size, 4);
});
