// Rank functions run by the in-process tests (runInProcessRanks imports this module in each worker).

import type { Communicator } from '../../src/dist/communicator.js';

/** Every collective once, on values that identify the rank; returns the host results. */
export function collectives(comm: Communicator, input: { n: number }): Record<string, number[]> {
  const b = comm.backend, r = comm.rank, w = comm.worldSize, n = input.n;
  const values = (f: (i: number) => number) => Array.from({ length: n }, (_, i) => f(i));
  const sum = b.fromArray(values((i) => r * 10 + i), [n], 'f32');
  comm.allReduce(sum);
  const avg = b.fromArray(values((i) => r + i * 0.5), [n], 'f32');
  comm.allReduce(avg, 'avg');
  const ints = b.fromArray(values((i) => r * 1000 + i), [n], 'i32');
  comm.allReduce(ints);
  const gathered = b.empty([w, n], 'f32');
  comm.allGather(b.fromArray(values((i) => r * 100 + i), [n], 'f32'), gathered);
  const scattered = b.empty([n], 'f32');
  comm.reduceScatter(b.fromArray(Array.from({ length: w * n }, (_, i) => (r + 1) * i), [w * n], 'f32'), scattered);
  const bcast = b.fromArray(values((i) => r === w - 1 ? 7 + i : -1), [n], 'bf16');
  comm.broadcast(bcast, w - 1);
  const host = (t: Parameters<typeof b.download>[0]) => Array.from(b.download(t));
  return { sum: host(sum), avg: host(avg), ints: host(ints), gathered: host(gathered), scattered: host(scattered), bcast: host(bcast) };
}

/** Rank 1 throws before its first collective; the others wait in an all-reduce. */
export function oneRankThrows(comm: Communicator): number {
  if (comm.rank === 1) throw new Error('rank one broke on purpose');
  const t = comm.backend.fromArray([1, 2], [2], 'f32');
  comm.allReduce(t);
  return 0;
}

/** A bad allGather output shape is refused on every rank before any exchange. */
export function badGather(comm: Communicator): string {
  try {
    comm.allGather(comm.backend.empty([3], 'f32'), comm.backend.empty([3], 'f32'));
    return 'accepted';
  } catch (err) {
    return (err as Error).message;
  }
}

// --- tensor-parallel GPT-2 -----------------------------------------------------------------------

import type { Gpt2Config } from '../../src/models/gpt2.js';
import { TpGpt2Model } from '../../src/dist/tp-gpt2.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';

export type HostTensorList = [string, { shape: readonly number[]; data: Float32Array }][];

export interface TpTrainInput {
  readonly config: Gpt2Config;
  readonly params: HostTensorList;
  readonly batch: HostBatch;
  /** Optimizer steps at lr after the first (gradient-only) step. */
  readonly steps: number;
  readonly lr: number;
  /** Global-norm clipping threshold (default Infinity: none). */
  readonly maxGradNorm?: number;
}

export interface TpTrainOutput {
  readonly losses: number[];
  /** Gradient norm reported by each step (before clipping). */
  readonly gradNorms: number[];
  readonly grads: HostTensorList;
  readonly params: HostTensorList;
  readonly logits: number[];
}

/** A TP GPT-2 rank: gradients of one step (lr 0), then `steps` AdamW steps; full tensors gathered. */
export function tpGpt2Train(comm: Communicator, input: TpTrainInput): TpTrainOutput | null {
  const model = new TpGpt2Model(comm.backend, comm, input.config, 'f32');
  model.loadFullParameters(new Map(input.params), 'test parameters');
  const runner = new StepRunner(model, { maxBatch: input.batch.batch, maxSeqLen: input.batch.seqLen, optimizer: { maxGradNorm: input.maxGradNorm ?? Infinity } });
  const first = runner.trainStep(input.batch, 0);
  const losses = [first.loss], gradNorms = [first.gradNorm];
  const grads = model.fullGradients();
  for (let i = 0; i < input.steps; i++) {
    const r = runner.trainStep(input.batch, input.lr);
    losses.push(r.loss);
    gradNorms.push(r.gradNorm);
  }
  const params = model.fullParameters();
  const logits = tpLogits(model, input.batch);
  return comm.rank === 0 ? { losses, gradNorms, grads: [...grads], params: [...params], logits } : null;
}

/** Logits of the model's logitsStep on the batch's tokens, run eagerly. */
export function tpLogits(model: TpGpt2Model, batch: HostBatch): number[] {
  const b = model.backend;
  const tokens = b.fromArray(batch.tokens, [batch.batch, batch.seqLen], 'i32');
  const logits = b.empty([batch.batch * batch.seqLen, model.logitsWidth], 'f32');
  const step = (ctx: Parameters<TpGpt2Model['logitsStep']>[0]) => model.logitsStep(ctx, tokens, logits);
  const plan = planStep(b, step, false);
  runStep(b, plan, b.createArena(plan.arena.arenaBytes), { seed: 0n, baseOffset: 0n, training: false }, step);
  return Array.from(b.download(logits));
}

import { planStep, runStep } from '../../src/nn/step-context.js';

/** Loads full parameters at this world size and returns rank 0's evaluation loss. */
export function tpGpt2Eval(comm: Communicator, input: TpTrainInput): number {
  const model = new TpGpt2Model(comm.backend, comm, input.config, 'f32');
  model.loadFullParameters(new Map(input.params), 'checkpoint');
  const runner = new StepRunner(model, { maxBatch: input.batch.batch, maxSeqLen: input.batch.seqLen });
  return runner.evalLoss(input.batch).loss;
}

// --- data parallel -------------------------------------------------------------------------------

import { Gpt2Model } from '../../src/models/gpt2-model.js';
import { DataParallelModel, ZeroAdamW } from '../../src/dist/data-parallel.js';

export interface DpTrainInput extends TpTrainInput {
  /** ZeRO-1: none, inside StepRunner (options.zero), or ZeroAdamW driven beside the runner. */
  readonly zero: false | 'runner' | 'beside';
  readonly bucketBytes: number;
  readonly maxGradNorm: number;
}

export interface DpTrainOutput {
  readonly losses: number[];
  /** Global gradient norms the runner reported (ZeRO-1 inside the runner only). */
  readonly norms?: number[];
  readonly params: HostTensorList;
  readonly buckets: number;
  readonly reducedDuringBackward: number;
  readonly optimizerStateBytes: number;
}

/** A data-parallel GPT-2 rank: trains on its slice of the batch's sequences. */
export function dpGpt2Train(comm: Communicator, input: DpTrainInput): DpTrainOutput {
  const { batch: B, seqLen: L } = input.batch;
  const per = B / comm.worldSize, rows = per * L;
  const slice: HostBatch = {
    batch: per, seqLen: L,
    tokens: input.batch.tokens.slice(comm.rank * rows, (comm.rank + 1) * rows),
    targets: input.batch.targets.slice(comm.rank * rows, (comm.rank + 1) * rows),
  };
  const model = new Gpt2Model(comm.backend, input.config, 'f32');
  model.params.upload(new Map(input.params), 'test parameters');
  const losses: number[] = [];
  if (input.zero === 'beside') {
    // ZeroAdamW driven outside the step (host scalars): the step runs with lr 0 for the gradients.
    const runner = new StepRunner(model, { maxBatch: per, maxSeqLen: L });
    const zero = new ZeroAdamW(model.params, comm, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, maxGradNorm: input.maxGradNorm });
    for (let i = 0; i < input.steps; i++) {
      const r = runner.trainStep(slice, 0);
      losses.push(r.loss);
      zero.step(input.lr, r.gradScale);
    }
    return { losses, params: [...model.params.download()], buckets: 0, reducedDuringBackward: 0, optimizerStateBytes: zero.stateBytes };
  }
  if (input.zero === 'runner') {
    // ZeRO-1 inside the step: the runner holds no full-size moments.
    const runner = new StepRunner(model, { maxBatch: per, maxSeqLen: L, optimizer: { maxGradNorm: input.maxGradNorm }, zero: { comm } });
    const norms: number[] = [];
    for (let i = 0; i < input.steps; i++) {
      const r = runner.trainStep(slice, input.lr);
      losses.push(r.loss);
      norms.push(r.gradNorm);
    }
    return { losses, norms, params: [...model.params.download()], buckets: 0, reducedDuringBackward: 0, optimizerStateBytes: runner.optimizerStateBytes };
  }
  const dp = new DataParallelModel(model, comm, { bucketBytes: input.bucketBytes });
  const runner = new StepRunner(dp, { maxBatch: per, maxSeqLen: L, optimizer: { maxGradNorm: input.maxGradNorm } });
  for (let i = 0; i < input.steps; i++) losses.push(runner.trainStep(slice, input.lr).loss);
  return { losses, params: [...model.params.download()], buckets: dp.buckets.length, reducedDuringBackward: dp.reducedDuringBackward, optimizerStateBytes: runner.optimizerStateBytes };
}

/** StepRunner's refusal of ZeRO-1 over a DataParallelModel, as text. */
export function zeroOverDataParallel(comm: Communicator): string {
  const config: Gpt2Config = { ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 37, maxPositions: 8, hidden: 16, layers: 1, heads: 2, ffn: 32 };
  const model = new DataParallelModel(new Gpt2Model(comm.backend, config, 'f32'), comm);
  try {
    new StepRunner(model, { maxBatch: 1, maxSeqLen: 4, zero: { comm } });
    return 'accepted';
  } catch (err) {
    return (err as Error).message;
  }
}

import { GPT2_PRESETS } from '../../src/models/gpt2.js';
