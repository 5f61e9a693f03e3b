// Multi-GPU over NCCL, run under the launcher (one process per GPU; world size from WORLD_SIZE):
//
//   node dist/src/cli/main.js launch --gpus N -- node dist/bench/multi-gpu.js --json bench/results/multi-gpu-N.json
//
// Checks and timings, rank 0 reporting:
//   1. collectives: all-reduce and all-gather bus bandwidth (bf16, 1/64/256 MiB; NCCL's busBw formula
//      2(w−1)/w · bytes / time for all-reduce, (w−1)/w · bytes / time for all-gather), CUDA-event timed
//   2. tensor parallel (vocab-parallel embedding, LM head and cross-entropy): TP GPT-2 logits (f32 and
//      bf16), loss, gradient norm and gathered gradients against the single-GPU model on rank 0's GPU
//      with the same weights; then 3 clipped AdamW steps (CUDA graphs with the collectives captured):
//      losses and gathered parameters
//   3. data parallel (f32): 3 AdamW steps, each rank on 1/w of the batch, against rank 0 training alone
//      on the whole batch: mean losses and parameters — with bucketed all-reduces on the second stream
//      (overlapped with the backward), and with ZeRO-1 inside StepRunner (sharded moments)
//   4. scaling, GPT-2 124M bf16, per-rank batch × 1024: one GPU alone (every rank at once, no
//      communication), data parallel (weak scaling: efficiency = t1 / t_dp), tensor parallel on the
//      per-rank batch (strong scaling: efficiency = t1 / (w · t_tp)), data parallel with ZeRO-1;
//      step = upload, forward, backward,
//      collectives, AdamW, loss read back; medians after warm-up
//   5. tensor-parallel decode, the Llama 1.2B config (presetConfig('llama-1.2B'), random weights): the
//      TP decode engine (each rank's heads, MLP columns and KV heads; two all-reduces per layer, captured
//      in the decode step's CUDA graph) against the single-GPU engine on rank 0 with the same weights:
//      prefill logits and 32 greedy decode steps of 4 ragged prompts, in f32 (the tokens must be equal;
//      where a sequence parts, one GPU's top-two logit gap there is reported: a near tie or a bug) and bf16 (near-tied logits of a random model flip under any change of summation order: the
//      common prefix of the tokens and the logit difference are reported); every rank's greedy and
//      seeded-sampling tokens gathered and compared. Then decode ms/token in bf16 at batch 1 and 32
//      (32-token prompts, CUDA events around 127 graph-replayed steps, median of 5, as bench/decode.ts),
//      TP and rank 0 alone on one GPU.
// World size 1 runs everything through NCCL too (a communicator of one rank).

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { CudaBackend } from '../src/backend/cuda/index.js';
import type { FloatDType } from '../src/dtype.js';
import { DataParallelModel } from '../src/dist/data-parallel.js';
import { decoderArchitecture } from '../src/infer/architecture.js';
import { DecodeEngine } from '../src/infer/engine.js';
import { randomDecoderModel } from '../src/infer/model.js';
import type { DecoderModel } from '../src/infer/model.js';
import { resolveSampling } from '../src/infer/sampling.js';
import type { SamplingOptions } from '../src/infer/sampling.js';
import { presetConfig } from '../src/models/registry.js';
import { initNcclProcessGroup, processGroupEnv } from '../src/dist/process-group.js';
import { TpGpt2Model } from '../src/dist/tp-gpt2.js';
import type { Gpt2Config } from '../src/models/gpt2.js';
import { GPT2_PRESETS } from '../src/models/gpt2.js';
import { Gpt2Model } from '../src/models/gpt2-model.js';
import type { LanguageModel } from '../src/models/language-model.js';
import { planStep, runStep } from '../src/nn/step-context.js';
import type { HostBatch } from '../src/train/step-runner.js';
import { StepRunner } from '../src/train/step-runner.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/multi-gpu.json' },
    steps: { type: 'string', default: '10' },
    batch: { type: 'string', default: '8' },
    'seq-len': { type: 'string', default: '1024' },
    'no-graphs': { type: 'boolean', default: false },
    skip: { type: 'string', default: '' },
    'decode-model': { type: 'string', default: 'llama-1.2B' },
  },
});
const STEPS = Number(cli.steps), B = Number(cli.batch), L = Number(cli['seq-len']);
const GRAPHS = !cli['no-graphs'];
const SKIP = new Set(cli.skip.split(',').filter((s) => s.length > 0));

const env = processGroupEnv();
const backend = CudaBackend.create(env.localRank);
const comm = await initNcclProcessGroup(backend, env);
const W = comm.worldSize, rank0 = comm.rank === 0;
const say = (line: string) => { if (rank0) process.stdout.write(`${line}\n`); };
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const results: Record<string, unknown> = { worldSize: W, device: backend.description, batchPerRank: B, seqLen: L };
say(`multi-gpu: world size ${W} on ${backend.description}`);

function batchOf(batch: number, seqLen: number, vocab: number, seed: number): HostBatch {
  let s = seed;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return s % vocab; };
  return { batch, seqLen, tokens: Int32Array.from({ length: batch * seqLen }, next), targets: Int32Array.from({ length: batch * seqLen }, next) };
}

function sliceBatch(b: HostBatch, rank: number, parts: number): HostBatch {
  const per = b.batch / parts, rows = per * b.seqLen;
  return { batch: per, seqLen: b.seqLen, tokens: b.tokens.slice(rank * rows, (rank + 1) * rows), targets: b.targets.slice(rank * rows, (rank + 1) * rows) };
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** The same float on every rank: the average over ranks of a host number. */
function averaged(x: number): number {
  const t = backend.fromArray([x], [1], 'f32');
  comm.allReduce(t, 'avg');
  const v = (backend.download(t) as Float32Array)[0]!;
  backend.free(t);
  return v;
}

function logitsOf(model: Gpt2Model | TpGpt2Model, batch: HostBatch): Float32Array {
  const tokens = backend.fromArray(batch.tokens, [batch.batch, batch.seqLen], 'i32');
  const logits = backend.empty([batch.batch * batch.seqLen, model.logitsWidth], model.dtype);
  const step = (ctx: Parameters<Gpt2Model['logitsStep']>[0]) => model.logitsStep(ctx, tokens, logits);
  const plan = planStep(backend, step, false);
  const arena = backend.createArena(plan.arena.arenaBytes);
  runStep(backend, plan, arena, { seed: 0n, baseOffset: 0n, training: false }, step);
  const out = backend.download(logits) as Float32Array;
  arena.free();
  backend.free(tokens);
  backend.free(logits);
  return out;
}

// --- 1. collectives ---------------------------------------------------------------------------------
if (!SKIP.has('collectives')) {
  const rows: Record<string, number>[] = [];
  for (const mib of [1, 64, 256]) {
    const n = (mib * 2 ** 20) / 2;
    const t = backend.empty([n], 'bf16');
    backend.fill(t, 1);
    const gathered = backend.empty([W * Math.floor(n / W)], 'bf16');
    const part = backend.view(t, 0, [Math.floor(n / W)]);
    const time = (fn: () => void) => {
      for (let i = 0; i < 3; i++) fn();
      const ms: number[] = [];
      for (let i = 0; i < 10; i++) {
        const a = backend.mark(); fn(); const b = backend.mark();
        ms.push(b.elapsedSince(a)); a.dispose(); b.dispose();
      }
      return median(ms);
    };
    const arMs = time(() => comm.allReduce(t));
    const agMs = time(() => comm.allGather(part, gathered));
    const bytes = n * 2;
    rows.push({ mib, allReduceMs: arMs, allReduceBusGBs: W > 1 ? (2 * (W - 1) / W) * bytes / arMs / 1e6 : 0, allGatherMs: agMs, allGatherBusGBs: W > 1 ? ((W - 1) / W) * bytes / agMs / 1e6 : 0 });
    backend.free(t);
    backend.free(gathered);
  }
  results['collectives'] = rows;
}

// --- 2. tensor parallel correctness -------------------------------------------------------------------
const checkConfig: Gpt2Config = {
  ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 1000, maxPositions: 128, hidden: 256, layers: 2, heads: 8, ffn: 1024,
  residualDropout: 0, embeddingDropout: 0, attentionDropout: 0,
};
if (!SKIP.has('tp')) {
  const batch = batchOf(2, 64, checkConfig.vocabSize, 11);
  const tp = new TpGpt2Model(backend, comm, checkConfig, 'f32');
  tp.initialize(5n);
  const tpLogits = logitsOf(tp, batch);
  // Clipping on (maxGradNorm 1): the TP runner's norm is the shards' Σg² all-reduced plus the replicated part.
  const tpRunner = new StepRunner(tp, { maxBatch: 2, maxSeqLen: 64, optimizer: { maxGradNorm: 1 }, graphs: false });
  const tpFirst = tpRunner.trainStep(batch, 0);
  const tpGrads = tp.fullGradients();
  const tpLosses: number[] = [];
  const tpSteps = new StepRunner(tp, { maxBatch: 2, maxSeqLen: 64, optimizer: { maxGradNorm: 1 }, graphs: GRAPHS });
  for (let i = 0; i < 3; i++) tpLosses.push(tpSteps.trainStep(batch, 1e-3).loss);
  const tpParams = tp.fullParameters();
  const tp16 = new TpGpt2Model(backend, comm, checkConfig, 'bf16');
  tp16.initialize(5n);
  const tpLogits16 = logitsOf(tp16, batch);
  if (rank0) {
    const single = new Gpt2Model(backend, checkConfig, 'f32');
    single.params.initialize(5n);
    const logits = logitsOf(single, batch);
    const runner = new StepRunner(single, { maxBatch: 2, maxSeqLen: 64, optimizer: { maxGradNorm: 1 }, graphs: false });
    const first = runner.trainStep(batch, 0);
    let gradRel = 0;
    for (const { name, shape } of single.params.fileShapes()) {
      const g = backend.download(backend.view(single.params.param(name).grad, 0, shape)) as Float32Array;
      const scale = g.reduce((m: number, x: number) => Math.max(m, Math.abs(x)), 1e-6);  // (a spread of 38 M values overflows the stack)
      gradRel = Math.max(gradRel, maxDiff(tpGrads.get(name)!.data, g) / scale);
    }
    const steps = new StepRunner(single, { maxBatch: 2, maxSeqLen: 64, optimizer: { maxGradNorm: 1 }, graphs: GRAPHS });
    const losses: number[] = [];
    for (let i = 0; i < 3; i++) losses.push(steps.trainStep(batch, 1e-3).loss);
    let paramDiff = 0;
    for (const [name, t] of single.params.download()) paramDiff = Math.max(paramDiff, maxDiff(tpParams.get(name)!.data, t.data));
    const single16 = new Gpt2Model(backend, checkConfig, 'bf16');
    single16.params.initialize(5n);
    const logits16 = logitsOf(single16, batch);
    results['tensorParallel'] = {
      logitsMaxAbsDiff: maxDiff(tpLogits, logits), logitsBf16MaxAbsDiff: maxDiff(tpLogits16, logits16),
      lossTp: tpFirst.loss, lossSingle: first.loss, gradNormTp: tpFirst.gradNorm, gradNormSingle: first.gradNorm, gradMaxRelDiff: gradRel,
      lossesTp: tpLosses, lossesSingle: losses, paramMaxAbsDiff: paramDiff,
    };
    for (const r of [runner, steps]) r.dispose();
    single.params.free();
    single16.params.free();
  }
  for (const r of [tpRunner, tpSteps]) r.dispose();
  tp.params.free();
  tp16.params.free();
}

/** The reference for data parallel and ZeRO-1: 3 AdamW steps of the seed-9 model on the whole global batch, one GPU. */
function singleGpuSteps(global: ReturnType<typeof batchOf>): { losses: number[]; params: Float32Array; optimizerStateBytes: number } {
  const single = new Gpt2Model(backend, checkConfig, 'f32');
  single.params.initialize(9n);
  const runner = new StepRunner(single, { maxBatch: 2 * W, maxSeqLen: 64, graphs: GRAPHS });
  const losses: number[] = [];
  for (let i = 0; i < 3; i++) losses.push(runner.trainStep(global, 1e-3).loss);
  const result = { losses, params: backend.download(single.params.values.flat) as Float32Array, optimizerStateBytes: runner.optimizerStateBytes };
  runner.dispose();
  single.params.free();
  return result;
}

// --- 3. data parallel correctness ---------------------------------------------------------------------
if (!SKIP.has('dp')) {
  const global = batchOf(2 * W, 64, checkConfig.vocabSize, 17);
  const dpModel = new Gpt2Model(backend, checkConfig, 'f32');
  dpModel.params.initialize(9n);
  const dp = new DataParallelModel(dpModel, comm, { bucketBytes: 1 << 20 });
  const dpRunner = new StepRunner(dp, { maxBatch: 2, maxSeqLen: 64, graphs: GRAPHS });
  const dpLosses: number[] = [];
  for (let i = 0; i < 3; i++) dpLosses.push(averaged(dpRunner.trainStep(sliceBatch(global, comm.rank, W), 1e-3).loss));
  if (rank0) {
    const single = singleGpuSteps(global);
    const ours = backend.download(dpModel.params.values.flat) as Float32Array;
    results['dataParallel'] = { lossesDp: dpLosses, lossesSingle: single.losses, paramMaxAbsDiff: maxDiff(ours, single.params), buckets: dp.buckets.length, reducedDuringBackward: dp.reducedDuringBackward };
  }
  dpRunner.dispose();
  dpModel.params.free();

  // ZeRO-1 inside StepRunner: reduce-scatter, AdamW on this rank's shard, all-gather, all in the step.
  const zeroModel = new Gpt2Model(backend, checkConfig, 'f32');
  zeroModel.params.initialize(9n);
  const zeroRunner = new StepRunner(zeroModel, { maxBatch: 2, maxSeqLen: 64, graphs: GRAPHS, zero: { comm } });
  const zeroLosses: number[] = [];
  for (let i = 0; i < 3; i++) zeroLosses.push(averaged(zeroRunner.trainStep(sliceBatch(global, comm.rank, W), 1e-3).loss));
  if (rank0) {
    const single = singleGpuSteps(global);
    const ours = backend.download(zeroModel.params.values.flat) as Float32Array;
    results['zero'] = { lossesZero: zeroLosses, lossesSingle: single.losses, paramMaxAbsDiff: maxDiff(ours, single.params), optimizerStateBytes: zeroRunner.optimizerStateBytes, unshardedStateBytes: single.optimizerStateBytes };
  }
  zeroRunner.dispose();
  zeroModel.params.free();
}

// --- 4. scaling -------------------------------------------------------------------------------------
const gpt2: Gpt2Config = { ...GPT2_PRESETS['gpt2-124M']!, residualDropout: 0, embeddingDropout: 0, attentionDropout: 0 };

function stepMs(model: LanguageModel, batch: HostBatch, dtype: FloatDType, zero = false): number {
  const runner = new StepRunner(model, { maxBatch: batch.batch, maxSeqLen: batch.seqLen, graphs: GRAPHS, ...(zero ? { zero: { comm } } : {}) });
  if (dtype !== 'f32') runner.syncMasterFromParams();
  for (let i = 0; i < 3; i++) runner.trainStep(batch, 1e-4);
  const times: number[] = [];
  for (let i = 0; i < STEPS; i++) {
    const t0 = performance.now();
    runner.trainStep(batch, 1e-4);
    times.push(performance.now() - t0);
  }
  runner.dispose();
  return median(times);
}

if (!SKIP.has('scaling')) {
  const local = batchOf(B, L, gpt2.vocabSize, 23 + comm.rank);
  const single = new Gpt2Model(backend, gpt2, 'bf16');
  single.params.initialize(1n);
  const t1 = averaged(stepMs(single, local, 'bf16'));
  single.params.free();
  const dpModel = new Gpt2Model(backend, gpt2, 'bf16');
  dpModel.params.initialize(1n);
  const tDp = averaged(stepMs(new DataParallelModel(dpModel, comm), local, 'bf16'));
  dpModel.params.free();
  const zeroModel = new Gpt2Model(backend, gpt2, 'bf16');
  zeroModel.params.initialize(1n);
  const tZero = averaged(stepMs(zeroModel, local, 'bf16', true));
  zeroModel.params.free();
  let tTp = NaN;
  if (gpt2.heads % W === 0 && !SKIP.has('tp-scaling')) {
    const tp = new TpGpt2Model(backend, comm, gpt2, 'bf16');
    tp.initialize(1n);
    tTp = averaged(stepMs(tp, batchOf(B, L, gpt2.vocabSize, 23), 'bf16'));
    tp.params.free();
  }
  const tokens = B * L;
  results['scaling'] = {
    singleMs: t1, dataParallelMs: tDp, dataParallelZeroMs: tZero, tensorParallelMs: tTp,
    singleTokensPerS: tokens / t1 * 1e3, dataParallelTokensPerS: W * tokens / tDp * 1e3, tensorParallelTokensPerS: tokens / tTp * 1e3,
    dataParallelEfficiency: t1 / tDp, dataParallelZeroEfficiency: t1 / tZero, tensorParallelEfficiency: t1 / (W * tTp),
  };
}

// --- 5. tensor-parallel decode ------------------------------------------------------------------------
const DECODE_CHECK_STEPS = 32, DECODE_PROMPT = 32, DECODE_NEW = 128, DECODE_REPS = 5;

function decodePrompts(lengths: readonly number[], vocab: number, seed: number): number[][] {
  let s = seed;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s; };
  return lengths.map((n) => Array.from({ length: n }, () => next() % vocab));
}

/** The largest logit minus the second largest: how near a greedy pick was to a tie. */
function topTwoGap(logits: Float32Array): number {
  let a = -Infinity, b = -Infinity;
  for (const x of logits) {
    if (x > a) { b = a; a = x; } else if (x > b) b = x;
  }
  return a - b;
}

/**
 * The first-step logits and the tokens of `steps` decode steps (graph replays after the first) for each
 * prompt; with `gaps`, the steps run one at a time and gaps[b][k] is the top-two gap of the logits that
 * token k of sequence b was picked from.
 */
function decodeTokens(model: DecoderModel, prompts: readonly number[][], steps: number, sampling: SamplingOptions, withGaps = false): { tokens: number[][]; first: Float32Array[]; gaps: number[][] } {
  const engine = new DecodeEngine(model, { maxBatch: prompts.length, maxLen: Math.max(...prompts.map((p) => p.length)) + steps + 2 });
  const resolved = resolveSampling(sampling);
  engine.start(prompts.map((prompt, i) => ({ prompt, maxNewTokens: steps + 1, sampling: { ...resolved, seed: resolved.seed + BigInt(i) } })), []);
  const first = engine.logits();
  const gaps = prompts.map((): number[] => []);
  const recordGaps = (logits: Float32Array[]) => logits.forEach((l, b) => gaps[b]!.push(topTwoGap(l)));
  if (withGaps) recordGaps(first);
  const tokens = prompts.map((): number[] => []);
  engine.collect().forEach((u, b) => tokens[b]!.push(...u.tokens));
  if (withGaps) {
    for (let i = 0; i < steps; i++) {
      engine.decode(1);
      recordGaps(engine.logits());
    }
  } else {
    engine.decode(steps);
  }
  engine.collect().forEach((u, b) => tokens[b]!.push(...u.tokens));
  engine.dispose();
  return { tokens, first, gaps };
}

/** ‖a − b‖ / ‖b‖ over every row. */
function relativeError(a: readonly Float32Array[], b: readonly Float32Array[]): number {
  let diff = 0, norm = 0;
  b.forEach((row, i) => row.forEach((x, j) => { diff += (a[i]![j]! - x) ** 2; norm += x ** 2; }));
  return Math.sqrt(diff / norm);
}

/** Whether every rank holds the same tokens (all-gathered; the answer is the same on every rank). */
function ranksAgree(tokens: number[][]): boolean {
  const flat = Int32Array.from(tokens.flat());
  const mine = backend.fromArray(flat, [flat.length], 'i32'), all = backend.empty([W * flat.length], 'i32');
  comm.allGather(mine, all);
  const gathered = backend.download(all) as Int32Array;
  backend.free(mine);
  backend.free(all);
  for (let r = 1; r < W; r++) for (let i = 0; i < flat.length; i++) if (gathered[r * flat.length + i] !== gathered[i]) return false;
  return true;
}

/** Where sequence b of `a` first differs from `b` (its length when it does not). */
function firstDifference(a: number[], b: number[]): number {
  let k = 0;
  while (k < a.length && a[k] === b[k]) k++;
  return k;
}

/** Median decode ms/token of a batch: CUDA events around DECODE_NEW − 1 steps after prefill (graph replays). */
function decodeMsPerToken(model: DecoderModel, batch: number): number {
  const engine = new DecodeEngine(model, { maxBatch: batch, maxLen: DECODE_PROMPT + DECODE_NEW });
  const greedy = resolveSampling({ temperature: 0 });
  const requests = decodePrompts(Array.from({ length: batch }, () => DECODE_PROMPT), model.vocabSize, 7).map((prompt) => ({ prompt, maxNewTokens: DECODE_NEW, sampling: greedy }));
  engine.start(requests, []);
  engine.decode(3);
  engine.collect();
  const ms: number[] = [];
  for (let r = 0; r < DECODE_REPS; r++) {
    engine.start(requests, []);
    const a = backend.mark();
    engine.decode(DECODE_NEW - 1);
    const b = backend.mark();
    ms.push(b.elapsedSince(a) / (DECODE_NEW - 1));
    a.dispose(); b.dispose();
    const lengths = engine.collect().map((u) => u.tokens.length);
    if (lengths.some((n) => n !== DECODE_NEW)) throw new Error(`a generation made ${lengths.join(', ')} tokens, expected ${DECODE_NEW} each`);
  }
  engine.dispose();
  return median(ms);
}

/** The largest value of x over the ranks. */
function slowestRank(x: number): number {
  const t = backend.fromArray([x], [1], 'f32');
  comm.allReduce(t, 'max');
  const v = (backend.download(t) as Float32Array)[0]!;
  backend.free(t);
  return v;
}

if (!SKIP.has('tp-decode')) {
  const config = presetConfig(cli['decode-model']!);
  const section: Record<string, unknown> = { model: cli['decode-model'], checkSequences: 4, checkSteps: DECODE_CHECK_STEPS };
  const prompts = decodePrompts([32, 17, 25, 9], decoderArchitecture(config).vocabSize, 31);
  for (const dtype of ['f32', 'bf16'] as const) {
    const tp = randomDecoderModel(config, backend, { dtype, seed: 1n, tensorParallel: comm });
    const greedy = decodeTokens(tp, prompts, DECODE_CHECK_STEPS, { temperature: 0 });
    const sampled = decodeTokens(tp, prompts, DECODE_CHECK_STEPS, { temperature: 0.8, topK: 50, seed: 99n });
    tp.free();
    section[`${dtype}RanksAgreeGreedy`] = ranksAgree(greedy.tokens);
    section[`${dtype}RanksAgreeSampled`] = ranksAgree(sampled.tokens);
    if (rank0) {
      const single = randomDecoderModel(config, backend, { dtype, seed: 1n });
      const want = decodeTokens(single, prompts, DECODE_CHECK_STEPS, { temperature: 0 }, true);
      single.free();
      const differences = greedy.tokens.map((seq, b) => firstDifference(seq, want.tokens[b]!));
      section[`${dtype}TokensMatching`] = differences.reduce((n, k) => n + k, 0);
      section[`${dtype}TokensTotal`] = want.tokens.flat().length;
      // The single-GPU model's top-two logit gap where each differing sequence first differs: a near tie
      // that another summation order may break the other way, or a real difference.
      section[`${dtype}GapsAtFirstDifference`] = differences.flatMap((k, b) => (k < want.tokens[b]!.length ? [want.gaps[b]![k]!] : []));
      section[`${dtype}FirstLogitsMaxAbsDiff`] = Math.max(...greedy.first.map((l, i) => maxDiff(l, want.first[i]!)));
      section[`${dtype}FirstLogitsRelError`] = relativeError(greedy.first, want.first);
    }
  }
  const tp = randomDecoderModel(config, backend, { dtype: 'bf16', seed: 1n, tensorParallel: comm });
  const tpMs = [1, 32].map((batch) => decodeMsPerToken(tp, batch));
  tp.free();
  const slowest = tpMs.map(slowestRank);
  if (rank0) {
    const single = randomDecoderModel(config, backend, { dtype: 'bf16', seed: 1n });
    const singleMs = [1, 32].map((batch) => decodeMsPerToken(single, batch));
    single.free();
    [1, 32].forEach((batch, i) => {
      Object.assign(section, {
        [`b${batch}MsPerToken`]: tpMs[i], [`b${batch}MsPerTokenSlowestRank`]: slowest[i], [`b${batch}SingleGpuMsPerToken`]: singleMs[i],
        [`b${batch}Speedup`]: singleMs[i]! / slowest[i]!, [`b${batch}TokensPerS`]: (batch * 1000) / slowest[i]!,
      });
    });
    results['tensorParallelDecode'] = section;
  }
}

if (rank0) {
  mkdirSync(dirname(cli.json), { recursive: true });
  writeFileSync(cli.json, `${JSON.stringify(results, null, 2)}\n`);
  const f = (x: unknown, digits = 3) => (typeof x === 'number' ? (Math.abs(x) >= 1e4 ? x.toExponential(2) : x.toFixed(digits)) : String(x));
  const lines = [`| world ${W} | value |`, '|---|---|'];
  for (const [section, value] of Object.entries(results)) {
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      for (const row of value as Record<string, number>[]) lines.push(`| all-reduce ${row['mib']} MiB | ${f(row['allReduceMs'])} ms, bus ${f(row['allReduceBusGBs'], 1)} GB/s; all-gather bus ${f(row['allGatherBusGBs'], 1)} GB/s |`);
      continue;
    }
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) lines.push(`| ${section}.${k} | ${Array.isArray(v) ? v.map((x) => f(x, 5)).join(', ') : f(v, 6)} |`);
  }
  say(lines.join('\n'));
}
comm.destroy();
