// The GPT-2 training step on the GPU against the same step on the CPU reference backend: the loss and
// every parameter gradient, in f32 and bf16, at an awkward size (vocabulary 1001, sequence 37); then
// graph-replayed steps against eager steps, and allocation-free steady state.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import { gradientErrorFloor, gradientRelError } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import './report-as-you-go.js';

const skip = gpuSkip();

const config: Gpt2Config = {
  vocabSize: 1001, maxPositions: 64, hidden: 96, layers: 2, heads: 3, ffn: 384, layerNormEps: 1e-5,
  activation: 'gelu_tanh', residualDropout: 0, embeddingDropout: 0, attentionDropout: 0, tieWordEmbeddings: true,
};

function batchOf(rng: Rng, batch: number, seqLen: number): HostBatch {
  return { batch, seqLen, tokens: rng.ints(batch * seqLen, 0, config.vocabSize), targets: rng.ints(batch * seqLen, 0, config.vocabSize) };
}


function setup(backend: Backend, dtype: FloatDType, weights: Map<string, { shape: readonly number[]; data: Float32Array }>) {
  const model = new Gpt2Model(backend, config, dtype);
  model.params.upload(weights, 'test weights');
  const runner = new StepRunner(model, { maxBatch: 3, maxSeqLen: 37, optimizer: { maxGradNorm: Infinity } });
  runner.syncMasterFromParams();
  return { model, runner };
}

for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
  test(`GPT-2 step on the GPU matches the CPU reference (${dtype})`, { skip }, async () => {
    const gpu = await createGpuBackend(), cpu = new CpuBackend();
    const init = new Gpt2Model(cpu, config, 'f32');
    init.params.initialize(BigInt(freshSeed()));
    const weights = init.params.download();
    const rng = new Rng(freshSeed());
    const batch = batchOf(rng, 3, 37);

    const onGpu = setup(gpu, dtype, weights), onCpu = setup(cpu, dtype, weights);
    const g = onGpu.runner.trainStep(batch, 0), c = onCpu.runner.trainStep(batch, 0);
    const tol = dtype === 'f32' ? 1e-4 : 3e-2;
    assert.ok(Math.abs(g.loss - c.loss) / c.loss < tol / 3, `loss GPU ${g.loss} CPU ${c.loss}`);
    const reference = new Map(onCpu.model.params.names.map((n) => [n, cpu.download(onCpu.model.params.param(n).grad) as Float32Array]));
    const floor = gradientErrorFloor(reference.values());
    for (const [name, expected] of reference) {
      const e = gradientRelError(gpu.download(onGpu.model.params.param(name).grad) as Float32Array, expected, floor);
      assert.ok(e < tol, `${dtype} gradient of ${name}: rel err ${e}`);
    }
  });
}

test('graph-replayed training steps equal eager ones and allocate nothing', { skip }, async () => {
  const gpu = await createGpuBackend();
  const init = new Gpt2Model(gpu, config, 'f32');
  init.params.initialize(3n);
  const weights = init.params.download();
  const rng = new Rng(freshSeed());
  // Distinct tokens within a batch: the embedding backward's atomic adds then never meet on a row, so
  // the whole step is deterministic and graph replay must reproduce eager steps bit for bit.
  const distinct = (): HostBatch => {
    const order = Array.from({ length: config.vocabSize }, (_, i) => i).sort(() => rng.next() - 0.5);
    return { batch: 2, seqLen: 37, tokens: Int32Array.from(order.slice(0, 74)), targets: rng.ints(74, 0, config.vocabSize) };
  };
  const batches = [distinct(), distinct(), distinct(), distinct()];
  const losses = (graphs: boolean) => {
    const model = new Gpt2Model(gpu, config, 'bf16');
    model.params.upload(weights, 'test weights');
    const runner = new StepRunner(model, { maxBatch: 2, maxSeqLen: 37, graphs });
    runner.syncMasterFromParams();
    const out = batches.map((b, i) => runner.trainStep(b, 1e-3 * (i + 1)).loss);
    const allocations = runner.lastStepAllocations;
    runner.dispose();
    model.params.free();
    return { out, allocations };
  };
  const eager = losses(false), graphed = losses(true);
  assert.deepEqual(graphed.out, eager.out);
  assert.equal(graphed.allocations, 0);
});
