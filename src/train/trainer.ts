// The training loop behind `fuseformer train` (GPT-2 causal LM or BERT masked LM): data → steps → progress, evaluation, checkpoints,
// loss curve, and a sample at the end. The device work of a step is StepRunner's; this file is the
// host-side loop around it, and everything it needs to resume exactly (model, optimizer state, data
// position, loss scale, dropout counter) goes into each checkpoint.
//
// Parallel training (TrainConfig.parallel, `fuseformer train --tp N | --dp N` under the launcher): every
// rank runs this loop in lockstep. Tensor parallel (GPT-2): the model is TpGpt2Model; every rank sees
// the same batches. Data parallel: each rank takes its 1/w of every global batch (the loader draws the
// same windows on every rank) and the gradients are averaged — DataParallelModel's bucketed all-reduces,
// or ZeRO-1's reduce-scatter inside the runner (parallel.zero). The reported loss is the mean over the
// ranks. Rank 0 alone logs, evaluates into the curve, writes checkpoints (full tensors, loadable at any
// world size) and the plot. Under TP or ZeRO-1 the optimizer state is per rank and is not checkpointed:
// a resumed run restarts AdamW's moments (the model, data position and schedule resume exactly).

import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { checkOutputDirectory } from '../io/output-dir.js';
import type { Gpt2Config } from '../models/gpt2.js';
import { gpt2ConfigToJson } from '../models/gpt2.js';
import { Gpt2Model } from '../models/gpt2-model.js';
import type { BertConfig } from '../models/bert.js';
import { bertConfigToJson } from '../models/bert.js';
import { BertModel } from '../models/bert-model.js';
import type { LanguageModel } from '../models/language-model.js';
import type { Communicator } from '../dist/communicator.js';
import { DataParallelModel } from '../dist/data-parallel.js';
import { TpGpt2Model } from '../dist/tp-gpt2.js';
import { MaskedLMLoader, maskTokens } from './masked-lm.js';
import { loadHfWeights } from '../models/hf-weights.js';
import type { TokenArray } from '../io/token-file.js';
import type { NamedHostTensor } from './checkpoint.js';
import { checkpointPath, latestCheckpoint, listCheckpoints, loadCheckpoint, pruneCheckpoints, saveCheckpoint } from './checkpoint.js';
import type { CausalLMLoaderState } from './data.js';
import { CausalLMLoader, checkTokenRange, evaluationBatchCount, evaluationBatches, splitTokens } from './data.js';
import type { LossScaler } from './loss-scaler.js';
import { lossScalerFor, restoreLossScaler } from './loss-scaler.js';
import { writeLossPlot } from './plot.js';
import { ProgressBar } from './progress.js';
import { sampleTokens } from './sample.js';
import type { LrScheduleConfig } from './schedule.js';
import { createLrSchedule } from './schedule.js';
import type { OptimizerConfig } from './step-runner.js';
import { StepRunner } from './step-runner.js';

/** The model to train: a GPT-2-architecture causal LM, or BERT with the masked-LM objective. */
export type TrainModel = { readonly family: 'gpt2'; readonly config: Gpt2Config } | { readonly family: 'bert'; readonly config: BertConfig };

export interface TrainConfig {
  readonly model: TrainModel;
  readonly dtype: FloatDType;
  readonly batchSize: number;
  readonly seqLen: number;
  readonly steps: number;
  readonly schedule: LrScheduleConfig;
  readonly optimizer?: Partial<OptimizerConfig>;
  readonly seed: number;
  /** Evaluate on the validation split every N steps (0 = only at the end). */
  readonly evalEvery: number;
  readonly evalBatches: number;
  /** Checkpoint every N steps (0 = only at the end); the last `keepCheckpoints` are kept. */
  readonly checkpointEvery: number;
  readonly keepCheckpoints: number;
  /** Directory for checkpoints, the loss curve and the log (created if missing). */
  readonly outDir: string;
  /** Continue from the latest checkpoint in outDir. */
  readonly resume: boolean;
  /**
   * A new run (not resume) in an outDir holding an earlier run's checkpoints deletes them first; without
   * it such an outDir is refused (the runs' checkpoints would mix, and pruning would keep the wrong ones).
   */
  readonly overwrite?: boolean;
  readonly validationFraction: number;
  /** Every k-th block recomputed in backward (0 = off). */
  readonly checkpointActivations: number;
  readonly sample: { readonly prompt: string; readonly tokens: number; readonly temperature: number };
  /** Start from the weights of this Hugging Face model directory instead of a random init. */
  readonly initFrom?: string;
  /**
   * Files written into every checkpoint beside config.json (name → content): the tokenizer the model
   * was trained with (tokenizer.json, tokenizer_config.json), so a checkpoint is a model directory that
   * `fuseformer generate` and the speculative bench read text with.
   */
  readonly files?: Readonly<Record<string, string>>;
  /** Train over the ranks of `comm`: tensor parallel (GPT-2 only) or data parallel (optionally ZeRO-1). */
  readonly parallel?: TrainParallel;
}

export interface TrainParallel {
  readonly comm: Communicator;
  /** 'tensor': the model split over the ranks; 'data': each rank on its slice of every batch. */
  readonly mode: 'tensor' | 'data';
  /** Data parallel only: shard AdamW's state over the ranks (ZeRO-1). */
  readonly zero?: boolean;
}

export interface TrainResult {
  readonly steps: number;
  readonly finalLoss: number;
  readonly evalLoss?: number;
  readonly tokensPerSecond: number;
  readonly sample: string;
  readonly plot: { svg: string; png?: string; pngError?: string };
  readonly checkpoint: string;
}

export interface TrainIo {
  readonly log: (line: string) => void;
  readonly progressStream?: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
}

function checkConfig(c: TrainConfig, tokens: number): void {
  const positive = (name: string, v: number) => { if (!Number.isSafeInteger(v) || v < 1) throw new ArgumentError(`train: ${name} must be a positive integer, got ${v}`); };
  const nonNegative = (name: string, v: number) => { if (!Number.isSafeInteger(v) || v < 0) throw new ArgumentError(`train: ${name} must be a non-negative integer, got ${v}`); };
  positive('batchSize', c.batchSize);
  positive('seqLen', c.seqLen);
  positive('steps', c.steps);
  positive('evalBatches', c.evalBatches);
  positive('keepCheckpoints', c.keepCheckpoints);
  nonNegative('evalEvery', c.evalEvery);
  nonNegative('checkpointEvery', c.checkpointEvery);
  nonNegative('checkpointActivations', c.checkpointActivations);
  nonNegative('seed', c.seed);
  nonNegative('sample.tokens', c.sample.tokens);
  if (!(c.sample.temperature >= 0 && Number.isFinite(c.sample.temperature))) throw new ArgumentError(`train: sample.temperature must be a finite number >= 0, got ${c.sample.temperature}`);
  if (!['f32', 'f16', 'bf16'].includes(c.dtype)) throw new ArgumentError(`train: dtype must be f32, f16 or bf16, got ${String(c.dtype)}`);
  if (c.seqLen > c.model.config.maxPositions) throw new ArgumentError(`train: seqLen ${c.seqLen} exceeds the model's n_positions ${c.model.config.maxPositions}`);
  if (!(c.validationFraction > 0 && c.validationFraction < 0.5)) throw new ArgumentError(`train: validationFraction must be in (0, 0.5), got ${c.validationFraction}`);
  const needed = (c.seqLen + 1) * 2;
  if (tokens < needed / c.validationFraction) throw new ArgumentError(`train: the corpus has ${tokens} tokens, too few for sequences of ${c.seqLen} with a ${c.validationFraction} validation split`);
}

/** The ids BERT's masked-LM batches need, from the tokenizer's special tokens. */
function maskedLmTokens(tokenizer: Tokenizer): { maskTokenId: number; clsTokenId: number; sepTokenId: number; specialTokenIds: number[] } {
  const id = (token: string) => {
    const value = tokenizer.tokenToId(token);
    if (value === undefined) throw new ArgumentError(`train: BERT's masked LM needs the token ${token}, which ${tokenizer.source} does not have`);
    return value;
  };
  const pad = tokenizer.tokenToId('[PAD]');
  return { maskTokenId: id('[MASK]'), clsTokenId: id('[CLS]'), sepTokenId: id('[SEP]'), specialTokenIds: pad === undefined ? [] : [pad] };
}

/** A batch source of either objective, with exact-resume state. */
interface BatchSource {
  next(): { inputs: Int32Array; targets: Int32Array; batchSize: number; seqLen: number };
  state(): CausalLMLoaderState;
  restore(state: CausalLMLoaderState, source: string): void;
}

/** Makes outDir ready for this run: a directory, holding no other run's checkpoints unless resuming (see overwrite). */
function prepareOutDirectory(config: TrainConfig): void {
  checkOutputDirectory(config.outDir, 'train --out');
  const earlier = config.resume ? [] : listCheckpoints(config.outDir);
  if (earlier.length > 0 && !config.overwrite) {
    throw new ArgumentError(`train --out: ${config.outDir} holds checkpoints of an earlier run (${earlier.map((c) => basename(c.path)).join(', ')}): --resume continues it, --overwrite starts over and deletes them, or choose another --out`);
  }
  for (const { path } of earlier) rmSync(path, { recursive: true, force: true });
  mkdirSync(config.outDir, { recursive: true });
}

/** Trains a GPT-2 (causal LM) or BERT (masked LM) model on `tokens` and returns what happened. */
export function trainLanguageModel(backend: Backend, tokens: TokenArray, tokenizer: Tokenizer, config: TrainConfig, io: TrainIo): TrainResult {
  checkConfig(config, tokens.length);
  const modelConfig = config.model.config;
  checkTokenRange(tokens, modelConfig.vocabSize, 'train: the tokens');
  if (tokenizer.vocabSize > modelConfig.vocabSize) {
    throw new ArgumentError(`train: the tokenizer has ${tokenizer.vocabSize} tokens but the model's vocab_size is ${modelConfig.vocabSize}`);
  }
  const parallel = config.parallel;
  const comm = parallel?.comm;
  const world = comm?.worldSize ?? 1, rank = comm?.rank ?? 0, lead = rank === 0;
  if (comm && comm.backend !== backend) throw new ArgumentError('train: the communicator works on a different backend than the one given');
  if (parallel?.mode === 'tensor' && config.model.family !== 'gpt2') throw new ArgumentError(`train: tensor parallelism is implemented for GPT-2 models; this one is ${config.model.family}`);
  if (parallel?.zero && parallel.mode !== 'data') throw new ArgumentError('train: ZeRO-1 shards the optimizer over data-parallel ranks; use it with data parallelism');
  const dataParallel = parallel?.mode === 'data';
  if (dataParallel && config.batchSize % world !== 0) throw new ArgumentError(`train: the batch size ${config.batchSize} must be divisible by the ${world} data-parallel ranks`);
  /** Sequences of each batch this rank trains on. */
  const rankBatch = dataParallel ? config.batchSize / world : config.batchSize;
  if (!lead) io = { log: () => {} };
  if (lead) prepareOutDirectory(config);
  const { train, validation } = splitTokens(tokens, config.validationFraction);
  if (evaluationBatchCount(validation.length, config.batchSize, config.seqLen) === 0) {
    throw new ArgumentError(`train: the validation split (the last ${config.validationFraction * 100}% of the data, ${validation.length} tokens) does not fill one evaluation batch of ${config.batchSize} × ${config.seqLen} (+1) tokens: give more text, or a smaller --batch-size or --seq-len`);
  }
  const masked = config.model.family === 'bert' ? { ...maskedLmTokens(tokenizer), vocabSize: modelConfig.vocabSize } : undefined;
  const tensorParallel = parallel?.mode === 'tensor' && config.model.family === 'gpt2' ? new TpGpt2Model(backend, comm!, config.model.config, config.dtype) : undefined;
  const model: LanguageModel & { logitsStep?: Gpt2Model['logitsStep'] } = tensorParallel ?? (config.model.family === 'gpt2'
    ? new Gpt2Model(backend, config.model.config, config.dtype)
    : new BertModel(backend, config.model.config, config.dtype));
  model.checkpointEvery = config.checkpointActivations;
  if (config.initFrom) {
    // Tensor parallel: the full weights are read on every rank, then each keeps its shards.
    const target = tensorParallel ? new Gpt2Model(backend, config.model.config as Gpt2Config, 'f32') : model;
    const loaded = loadHfWeights(target.params, config.initFrom);
    if (tensorParallel) { tensorParallel.loadFullParameters(target.params.download(), config.initFrom); target.params.free(); }
    io.log(`weights from ${loaded.files.join(', ')}${loaded.unused.length ? ` (unused: ${loaded.unused.slice(0, 4).join(', ')}${loaded.unused.length > 4 ? ', …' : ''})` : ''}`);
  } else if (tensorParallel) {
    tensorParallel.initialize(BigInt(config.seed));
  } else {
    model.params.initialize(BigInt(config.seed));
  }
  const trained: LanguageModel = dataParallel && !parallel.zero ? new DataParallelModel(model, comm!) : model;
  const runner = new StepRunner(trained, {
    maxBatch: rankBatch, maxSeqLen: config.seqLen, seed: BigInt(config.seed),
    ...(config.optimizer ? { optimizer: config.optimizer } : {}),
    ...(dataParallel && parallel.zero ? { zero: { comm: comm! } } : {}),
  });
  /** Optimizer state is checkpointed only when it is the same on every rank (none of TP's or ZeRO's shards). */
  const optimizerCheckpointed = parallel?.mode !== 'tensor' && !parallel?.zero;
  const meanOverRanks = (x: number): number => {
    if (!comm || world === 1) return x;
    const t = backend.fromArray([x], [1], 'f32');
    comm.allReduce(t, 'avg');
    const mean = (backend.download(t) as Float32Array)[0]!;
    backend.free(t);
    return mean;
  };
  const sumOverRanks = (xs: number[]): number[] => {
    if (!comm || world === 1) return xs;
    const t = backend.fromArray(xs, [xs.length], 'f32');
    comm.allReduce(t, 'sum');
    const out = Array.from(backend.download(t));
    backend.free(t);
    return out;
  };
  /** This rank's rows of a global batch (data parallel), or the batch itself. */
  const rankSlice = (b: { inputs: Int32Array; targets: Int32Array; batchSize: number; seqLen: number }) => {
    if (!dataParallel) return { batch: b.batchSize, seqLen: b.seqLen, tokens: b.inputs, targets: b.targets };
    const per = b.batchSize / world, rows = per * b.seqLen;
    return { batch: per, seqLen: b.seqLen, tokens: b.inputs.slice(rank * rows, (rank + 1) * rows), targets: b.targets.slice(rank * rows, (rank + 1) * rows) };
  };
  const windows = { batchSize: config.batchSize, seqLen: config.seqLen, seed: config.seed };
  const loader: BatchSource = masked ? new MaskedLMLoader(train, { ...windows, ...masked }) : new CausalLMLoader(train, windows);
  const schedule = createLrSchedule(config.schedule);
  let scaler: LossScaler = lossScalerFor(config.dtype);
  let step = 0;
  const trainCurve: { step: number; value: number }[] = [];
  const evalCurve: { step: number; value: number }[] = [];

  // Checkpoints hold full tensors: a tensor-parallel model gathers its shards (a collective: every rank calls it).
  const fullTensors = () => (tensorParallel ? tensorParallel.fullParameters() : model.params.download());
  const modelTensors = (): NamedHostTensor[] => [...fullTensors()].map(([name, t]) => ({ name, dtype: 'f32', shape: t.shape, data: t.data }));
  const expectations = () => (tensorParallel ? [...fullTensors()].map(([name, t]) => ({ name, shape: t.shape })) : model.params.fileShapes())
    .map((e) => ({ name: e.name, dtype: 'f32' as const, shape: e.shape }));

  if (config.resume) {
    const latest = latestCheckpoint(config.outDir);
    if (!latest) throw new ArgumentError(`train --resume: no checkpoint in ${config.outDir}`);
    // A checkpoint of a tensor-parallel or ZeRO-1 run holds no optimizer state (its moments were per rank).
    const withOptimizer = optimizerCheckpointed && existsSync(join(latest, 'optimizer.safetensors'));
    const ckpt = loadCheckpoint(latest, { model: expectations(), ...(withOptimizer ? { optimizerNumel: model.params.layout.numel } : {}) });
    const full = new Map(ckpt.model.map((t) => [t.name, { shape: t.shape, data: t.data as Float32Array }]));
    if (tensorParallel) tensorParallel.loadFullParameters(full, latest);
    else model.params.upload(full, latest);
    if (ckpt.optimizer) runner.restoreOptimizerState(ckpt.optimizer, latest);
    else { runner.syncMasterFromParams(); io.log(`${latest} holds no optimizer state: AdamW's moments start from zero`); }
    const state = ckpt.trainer as { step: number; updates?: number; dropoutCounter?: string; data?: CausalLMLoaderState; lossScaler?: Parameters<typeof restoreLossScaler>[0]; trainCurve?: typeof trainCurve; evalCurve?: typeof evalCurve };
    step = state.step;
    if (step >= config.steps) throw new ArgumentError(`train --resume: ${latest} is at step ${step}, which --steps ${config.steps} does not go past; ask for more steps to continue it`);
    runner.updates = state.updates ?? step;
    if (state.dropoutCounter) runner.dropoutCounter = BigInt(state.dropoutCounter);
    if (state.data) loader.restore(state.data, latest);
    if (state.lossScaler) scaler = restoreLossScaler(state.lossScaler, latest);
    trainCurve.push(...(state.trainCurve ?? []));
    evalCurve.push(...(state.evalCurve ?? []));
    io.log(`resumed from ${latest} at step ${step}`);
  }

  const evaluate = (): number => {
    let sum = 0, count = 0;
    let index = 0;
    for (const b of evaluationBatches(validation, { batchSize: config.batchSize, seqLen: config.seqLen, maxBatches: config.evalBatches })) {
      // Masked LM: the same masks every evaluation (seeded by the batch index), over the window's tokens.
      const { inputs, targets } = masked ? maskTokens(b.inputs, masked, config.seed, index++) : b;
      if (!dataParallel || b.batchSize % world === 0) {
        // Data parallel: each rank evaluates its slice of the batch.
        const r = runner.evalLoss(dataParallel ? rankSlice({ ...b, inputs, targets }) : { batch: b.batchSize, seqLen: b.seqLen, tokens: inputs, targets });
        sum += r.loss * r.validTargets;
        count += r.validTargets;
        continue;
      }
      // A short last batch that does not split over the ranks: every rank evaluates all of it, in
      // pieces of its own batch size, and counts 1/w of it.
      for (let first = 0; first < b.batchSize; first += rankBatch) {
        const n = Math.min(rankBatch, b.batchSize - first), rows = [first * b.seqLen, (first + n) * b.seqLen] as const;
        const r = runner.evalLoss({ batch: n, seqLen: b.seqLen, tokens: inputs.slice(...rows), targets: targets.slice(...rows) });
        sum += (r.loss * r.validTargets) / world;
        count += r.validTargets / world;
      }
    }
    if (dataParallel) [sum, count] = sumOverRanks([sum, count]);
    return count > 0 ? sum / count : NaN;
  };

  const save = (): string => {
    const path = checkpointPath(config.outDir, step);
    const tensors = modelTensors();
    if (!lead) return path;
    saveCheckpoint(path, {
      model: tensors,
      ...(optimizerCheckpointed ? { optimizer: runner.optimizerState() } : {}),
      trainer: {
        step, updates: runner.updates, dropoutCounter: runner.dropoutCounter.toString(), data: loader.state(),
        lossScaler: scaler.state(), trainCurve, evalCurve, config: { ...config, model: undefined, files: undefined },
      },
    }, { files: { ...config.files, 'config.json': JSON.stringify(config.model.family === 'gpt2' ? gpt2ConfigToJson(config.model.config) : bertConfigToJson(config.model.config), null, 2) } });
    pruneCheckpoints(config.outDir, config.keepCheckpoints);
    return path;
  };

  const silent = { write: () => true };
  const progress = new ProgressBar({ total: config.steps, label: 'train', ...(!lead ? { stream: silent, tty: false } : io.progressStream ? { stream: io.progressStream } : {}) });
  let tokensSeen = 0, lastLoss = NaN;
  const started = performance.now();
  for (; step < config.steps;) {
    const batch = loader.next();
    const lr = schedule.lrAt(runner.updates);
    const result = runner.trainStep(rankSlice(batch), lr, scaler.scale);
    const { skipped } = scaler.update(result.skipped);
    const loss = dataParallel ? meanOverRanks(result.loss) : result.loss;
    if (scaler.consecutiveSkips >= 50) throw new ArgumentError(`train: 50 consecutive steps had non-finite gradients; the run diverged (last loss ${loss})`);
    step++;
    tokensSeen += batch.batchSize * batch.seqLen;
    lastLoss = loss;
    trainCurve.push({ step, value: loss });
    progress.update({
      step, loss, tokens: tokensSeen,
      extra: { lr: lr.toExponential(1), ...(config.dtype === 'f16' ? { scale: String(scaler.scale) } : {}), ...(skipped ? { skipped: 'yes' } : {}) },
    });
    if (config.evalEvery > 0 && step % config.evalEvery === 0 && step < config.steps) {
      const loss = evaluate();
      evalCurve.push({ step, value: loss });
      progress.log(`step ${step}: validation loss ${loss.toFixed(4)}`);
    }
    if (config.checkpointEvery > 0 && step % config.checkpointEvery === 0 && step < config.steps) save();
  }
  progress.finish();
  const seconds = (performance.now() - started) / 1000;
  const evalLoss = evaluate();
  if (!Number.isFinite(evalLoss)) {
    throw new ArgumentError(`train: the run diverged — the validation loss is ${evalLoss} after step ${step} (last training loss ${lastLoss}); no checkpoint of this step was written. Try a lower --lr or a longer --warmup`);
  }
  evalCurve.push({ step, value: evalLoss });
  const checkpoint = save();
  const plot = !lead ? { svg: '' } : writeLossPlot(join(config.outDir, 'loss'), [
    { name: 'train', points: trainCurve },
    { name: 'validation', points: evalCurve },
  ], { title: `${config.model.family === 'gpt2' ? 'GPT-2' : 'BERT (masked LM)'} (${modelConfig.layers} layers, ${modelConfig.hidden} hidden) on ${backend.description}`, xLabel: 'step', yLabel: 'cross-entropy (nats/token)' });

  // A causal LM shows what it learned by continuing the prompt; BERT's evaluation loss says it.
  let sample = '';
  // Tensor parallel: every rank takes part (the logits are gathered); data parallel: rank 0 alone.
  if (model.logitsStep && (lead || tensorParallel)) {
    const prompt = tokenizer.encode(config.sample.prompt);
    const generated = sampleTokens({ ...model, logitsStep: model.logitsStep.bind(model), backend, dtype: model.dtype, vocabSize: model.vocabSize, logitsWidth: model.logitsWidth, maxSeqLen: model.maxSeqLen },
      prompt.length > 0 ? prompt : [0], { maxNewTokens: config.sample.tokens, temperature: config.sample.temperature, seed: config.seed, window: config.seqLen });
    sample = config.sample.prompt + tokenizer.decode(generated);
  }
  runner.dispose();
  model.params.free();
  return { steps: step, finalLoss: lastLoss, evalLoss, tokensPerSecond: tokensSeen / Math.max(seconds, 1e-9), sample, plot, checkpoint };
}
