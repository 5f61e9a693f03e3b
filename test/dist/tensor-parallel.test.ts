// Tensor-parallel GPT-2 on in-process CPU ranks against the single-rank model: world sizes 1, 2 and 4
// give the same loss, the same (gathered) gradients, the same logits and the same parameters after
// AdamW steps, within f32 tolerance (the partial sums add in a different order). Dropout on the
// replicated activations is on: every rank draws the single-GPU masks. A checkpoint gathered at one
// world size loads at another. The sharding helpers are exact inverses.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runInProcessRanks } from '../../src/dist/in-process.js';
import type { Communicator } from '../../src/dist/communicator.js';
import { rankDropoutRange } from '../../src/dist/tensor-parallel.js';
import { gatherTensor, gpt2TensorSplit, shardTensor, tpGpt2ParameterSpecs } from '../../src/dist/tp-gpt2.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import { planStep, runStep } from '../../src/nn/step-context.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import type { HostTensorList, TpTrainInput, TpTrainOutput } from './rank-fixtures.js';

const fixtures = new URL('./rank-fixtures.js', import.meta.url);

const config: Gpt2Config = {
  ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 37, maxPositions: 12, hidden: 16, layers: 2, heads: 4, ffn: 32,
  residualDropout: 0.1, embeddingDropout: 0.1, attentionDropout: 0,
};

function batchOf(batch: number, seqLen: number, seed: number): HostBatch {
  let s = seed;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return s % config.vocabSize; };
  return { batch, seqLen, tokens: Int32Array.from({ length: batch * seqLen }, next), targets: Int32Array.from({ length: batch * seqLen }, next) };
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** The single-rank reference: the same steps on Gpt2Model. */
function reference(input: TpTrainInput): TpTrainOutput {
  const backend = new CpuBackend();
  const model = new Gpt2Model(backend, input.config, 'f32');
  model.params.upload(new Map(input.params), 'reference');
  const runner = new StepRunner(model, { maxBatch: input.batch.batch, maxSeqLen: input.batch.seqLen, optimizer: { maxGradNorm: input.maxGradNorm ?? Infinity } });
  const first = runner.trainStep(input.batch, 0);
  const losses = [first.loss], gradNorms = [first.gradNorm];
  const grads: HostTensorList = model.params.fileShapes().map(({ name, shape }) => [name, { shape, data: backend.download(backend.view(model.params.param(name).grad, 0, shape)) as Float32Array }]);
  for (let i = 0; i < input.steps; i++) {
    const r = runner.trainStep(input.batch, input.lr);
    losses.push(r.loss);
    gradNorms.push(r.gradNorm);
  }
  const tokens = backend.fromArray(input.batch.tokens, [input.batch.batch, input.batch.seqLen], 'i32');
  const logits = backend.empty([input.batch.batch * input.batch.seqLen, model.logitsWidth], 'f32');
  const step = (ctx: Parameters<Gpt2Model['logitsStep']>[0]) => model.logitsStep(ctx, tokens, logits);
  const plan = planStep(backend, step, false);
  runStep(backend, plan, backend.createArena(plan.arena.arenaBytes), { seed: 0n, baseOffset: 0n, training: false }, step);
  return { losses, gradNorms, grads, params: [...model.params.download()], logits: Array.from(backend.download(logits)) };
}

function initialParams(seed: bigint): HostTensorList {
  const model = new Gpt2Model(new CpuBackend(), config, 'f32');
  model.params.initialize(seed);
  return [...model.params.download()];
}

test('shardTensor and gatherTensor are inverses; q, k, v keep their head columns together', () => {
  const shape = [2, 12];
  const data = Float32Array.from({ length: 24 }, (_, i) => i);
  const split = gpt2TensorSplit('transformer.h.0.attn.c_attn.weight');
  assert.deepEqual(split, { kind: 'columns', sections: 3 });
  const shards = [0, 1].map((r) => shardTensor(split, shape, data, r, 2));
  // Row 0 of rank 1: q columns 2-3, k columns 6-7, v columns 10-11.
  assert.deepEqual(Array.from(shards[1]!.subarray(0, 6)), [2, 3, 6, 7, 10, 11]);
  assert.deepEqual(gatherTensor(split, shape, shards), data);
  const rows = gpt2TensorSplit('transformer.h.1.mlp.c_proj.weight');
  assert.deepEqual(gatherTensor(rows, [4, 3], [0, 1].map((r) => shardTensor(rows, [4, 3], data.subarray(0, 12), r, 2))), data.subarray(0, 12));
  assert.deepEqual(gpt2TensorSplit('transformer.h.0.ln_1.weight'), { kind: 'replicated' });
  assert.throws(() => tpGpt2ParameterSpecs({ ...config, heads: 6, hidden: 18 }, 4), /6 heads cannot be split over 4 ranks/);
  assert.throws(() => shardTensor(split, [2, 12], data, 0, 8, 'qkv'), /qkv \[2, 12\] dimension 1 is not divisible into 24 equal parts/);
});

// Clipping is active (the reference's gradient norm is above maxGradNorm at every step), so the TP
// runner's global norm — shards' Σg² all-reduced, replicated parts counted once — must be exact.
const input: TpTrainInput = { config, params: initialParams(3n), batch: batchOf(2, 6, 5), steps: 2, lr: 1e-2, maxGradNorm: 0.5 };
const expected = reference(input);

// The vocabulary (37, padded to 64) splits into 16 rows a rank at world size 4: rank 2 holds ids 32–36
// and 11 padding rows, rank 3 only padding — the vocab-parallel embedding, head and loss cover both.
for (const w of [1, 2, 4]) {
  test(`tensor parallel GPT-2 (vocab-parallel embedding and loss) at world size ${w} equals the single-rank model (loss, gradients, logits, clipped AdamW steps)`, async () => {
    const [out] = await runInProcessRanks<TpTrainInput, TpTrainOutput | null>(w, fixtures, 'tpGpt2Train', input);
    assert.ok(out);
    expected.gradNorms.forEach((norm, i) => {
      assert.ok(norm > input.maxGradNorm!, `the reference clips at step ${i} (norm ${norm})`);
      assert.ok(Math.abs(out.gradNorms[i]! - norm) <= 1e-5 * norm, `gradient norm ${i}: ${out.gradNorms[i]} vs ${norm}`);
    });
    for (let i = 0; i < expected.losses.length; i++) {
      assert.ok(Math.abs(out.losses[i]! - expected.losses[i]!) < 1e-5, `loss ${i}: ${out.losses[i]} vs ${expected.losses[i]}`);
    }
    assert.ok(expected.losses[2]! < expected.losses[0]!, 'the steps learn');
    const grads = new Map(out.grads), params = new Map(out.params);
    for (const [name, g] of expected.grads) {
      const scale = Math.max(1e-3, ...Array.from(g.data, Math.abs));
      assert.deepEqual(grads.get(name)!.shape, g.shape, name);
      assert.ok(maxDiff(grads.get(name)!.data, g.data) <= 1e-4 * scale, `gradient ${name}: max diff ${maxDiff(grads.get(name)!.data, g.data)} (scale ${scale})`);
    }
    for (const [name, p] of expected.params) assert.ok(maxDiff(params.get(name)!.data, p.data) < 1e-4, `parameter ${name} after AdamW`);
    assert.ok(maxDiff(out.logits, expected.logits) < 1e-4, `logits: max diff ${maxDiff(out.logits, expected.logits)}`);
  });
}

test('a checkpoint gathered at world size 2 loads at world size 4 and 1 with the same loss', async () => {
  const trained = (await runInProcessRanks<TpTrainInput, TpTrainOutput | null>(2, fixtures, 'tpGpt2Train', input))[0]!;
  const evalInput: TpTrainInput = { ...input, params: trained.params, batch: batchOf(2, 6, 9) };
  const [at4] = await runInProcessRanks<TpTrainInput, number>(4, fixtures, 'tpGpt2Eval', evalInput);
  const [at1] = await runInProcessRanks<TpTrainInput, number>(1, fixtures, 'tpGpt2Eval', evalInput);
  const single = new Gpt2Model(new CpuBackend(), config, 'f32');
  single.params.upload(new Map(trained.params), 'checkpoint');
  const loss = new StepRunner(single, { maxBatch: 2, maxSeqLen: 6 }).evalLoss(evalInput.batch).loss;
  assert.ok(Math.abs(at4! - loss) < 1e-5 && Math.abs(at1! - loss) < 1e-5, `losses ${at4}, ${at1} vs ${loss}`);
});

test('with attention dropout, world size 1 still equals the single-rank model', async () => {
  const withDropout: TpTrainInput = { ...input, config: { ...config, attentionDropout: 0.2 }, steps: 1 };
  const want = reference(withDropout);
  const [out] = await runInProcessRanks<TpTrainInput, TpTrainOutput | null>(1, fixtures, 'tpGpt2Train', withDropout);
  assert.ok(Math.abs(want.losses[0]! - expected.losses[0]!) > 1e-4, 'attention dropout changes the loss');
  for (let i = 0; i < want.losses.length; i++) assert.ok(Math.abs(out!.losses[i]! - want.losses[i]!) < 1e-5, `loss ${i}: ${out!.losses[i]} vs ${want.losses[i]}`);
});

test('rankDropoutRange gives each rank its own counters and moves the cursor past all of them', () => {
  const backend = new CpuBackend();
  const seen: bigint[][] = [];
  for (const rank of [0, 1, 2]) {
    const comm = { rank, worldSize: 3 } as Communicator;
    planStep(backend, (ctx) => {
      const start = ctx.dropoutCursor;
      const inside = rankDropoutRange(ctx, comm, 0.1, 10, () => ctx.dropout(0.1, 10).offset);
      const next = ctx.dropout(0.1, 4).offset;
      seen.push([inside - start, next - start]);
    });
  }
  assert.deepEqual(seen, [[0n, 9n], [3n, 9n], [6n, 9n]]);
});
