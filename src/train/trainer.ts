// The training loop behind `fuseformer train`: data → steps → progress, evaluation, checkpoints,
// loss curve, and a sample at the end. The device work of a step is StepRunner's; this file is the
// host-side loop around it, and everything it needs to resume exactly (model, optimizer state, data
// position, loss scale, dropout counter) goes into each checkpoint.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import type { Gpt2Config } from '../models/gpt2.js';
import { gpt2ConfigToJson } from '../models/gpt2.js';
import { Gpt2Model } from '../models/gpt2-model.js';
import { loadHfWeights } from '../models/hf-weights.js';
import type { TokenArray } from '../io/token-file.js';
import type { NamedHostTensor } from './checkpoint.js';
import { checkpointPath, latestCheckpoint, loadCheckpoint, pruneCheckpoints, saveCheckpoint } from './checkpoint.js';
import { CausalLMLoader, evaluationBatches, splitTokens } from './data.js';
import type { LossScaler } from './loss-scaler.js';
import { lossScalerFor, restoreLossScaler } from './loss-scaler.js';
import { writeLossPlot } from './plot.js';
import { ProgressBar } from './progress.js';
import { sampleTokens } from './sample.js';
import type { LrScheduleConfig } from './schedule.js';
import { createLrSchedule } from './schedule.js';
import type { OptimizerConfig } from './step-runner.js';
import { StepRunner } from './step-runner.js';

export interface TrainConfig {
  readonly model: Gpt2Config;
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
  readonly validationFraction: number;
  /** Every k-th block recomputed in backward (0 = off). */
  readonly checkpointActivations: number;
  readonly sample: { readonly prompt: string; readonly tokens: number; readonly temperature: number };
  /** Start from the weights of this Hugging Face model directory instead of a random init. */
  readonly initFrom?: string;
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
  const positive = (name: string, v: number) => { if (!Number.isInteger(v) || v < 1) throw new ArgumentError(`train: ${name} must be a positive integer, got ${v}`); };
  positive('batchSize', c.batchSize);
  positive('seqLen', c.seqLen);
  positive('steps', c.steps);
  if (c.seqLen > c.model.maxPositions) throw new ArgumentError(`train: seqLen ${c.seqLen} exceeds the model's n_positions ${c.model.maxPositions}`);
  if (!(c.validationFraction > 0 && c.validationFraction < 0.5)) throw new ArgumentError(`train: validationFraction must be in (0, 0.5), got ${c.validationFraction}`);
  const needed = (c.seqLen + 1) * 2;
  if (tokens < needed / c.validationFraction) throw new ArgumentError(`train: the corpus has ${tokens} tokens, too few for sequences of ${c.seqLen} with a ${c.validationFraction} validation split`);
}

/** Trains a GPT-2-architecture model on `tokens` and returns what happened. */
export function trainGpt2(backend: Backend, tokens: TokenArray, tokenizer: Tokenizer, config: TrainConfig, io: TrainIo): TrainResult {
  checkConfig(config, tokens.length);
  if (tokenizer.vocabSize > config.model.vocabSize) {
    throw new ArgumentError(`train: the tokenizer has ${tokenizer.vocabSize} tokens but the model's vocab_size is ${config.model.vocabSize}`);
  }
  mkdirSync(config.outDir, { recursive: true });
  const { train, validation } = splitTokens(tokens, config.validationFraction);
  const model = new Gpt2Model(backend, config.model, config.dtype);
  model.checkpointEvery = config.checkpointActivations;
  if (config.initFrom) {
    const loaded = loadHfWeights(model.params, config.initFrom);
    io.log(`weights from ${loaded.files.join(', ')}${loaded.unused.length ? ` (unused: ${loaded.unused.slice(0, 4).join(', ')}${loaded.unused.length > 4 ? ', …' : ''})` : ''}`);
  } else {
    model.params.initialize(BigInt(config.seed));
  }
  const runner = new StepRunner(model, {
    maxBatch: config.batchSize, maxSeqLen: config.seqLen, seed: BigInt(config.seed),
    ...(config.optimizer ? { optimizer: config.optimizer } : {}),
  });
  const loader = new CausalLMLoader(train, { batchSize: config.batchSize, seqLen: config.seqLen, seed: config.seed });
  const schedule = createLrSchedule(config.schedule);
  let scaler: LossScaler = lossScalerFor(config.dtype);
  let step = 0;
  const trainCurve: { step: number; value: number }[] = [];
  const evalCurve: { step: number; value: number }[] = [];

  const modelTensors = (): NamedHostTensor[] => [...model.params.download()].map(([name, t]) => ({ name, dtype: 'f32', shape: t.shape, data: t.data }));
  const expectations = () => model.params.fileShapes().map((e) => ({ name: e.name, dtype: 'f32' as const, shape: e.shape }));

  if (config.resume) {
    const latest = latestCheckpoint(config.outDir);
    if (!latest) throw new ArgumentError(`train --resume: no checkpoint in ${config.outDir}`);
    const ckpt = loadCheckpoint(latest, { model: expectations(), optimizerNumel: model.params.layout.numel });
    model.params.upload(new Map(ckpt.model.map((t) => [t.name, { shape: t.shape, data: t.data as Float32Array }])), latest);
    if (ckpt.optimizer) runner.restoreOptimizerState(ckpt.optimizer, latest);
    else runner.syncMasterFromParams();
    const state = ckpt.trainer as { step: number; updates?: number; dropoutCounter?: string; data?: Parameters<CausalLMLoader['restore']>[0]; lossScaler?: Parameters<typeof restoreLossScaler>[0]; trainCurve?: typeof trainCurve; evalCurve?: typeof evalCurve };
    step = state.step;
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
    for (const b of evaluationBatches(validation, { batchSize: config.batchSize, seqLen: config.seqLen, maxBatches: config.evalBatches })) {
      const r = runner.evalLoss({ batch: b.batchSize, seqLen: b.seqLen, tokens: b.inputs, targets: b.targets });
      sum += r.loss * r.validTargets;
      count += r.validTargets;
    }
    return count > 0 ? sum / count : NaN;
  };

  const save = (): string => {
    const path = checkpointPath(config.outDir, step);
    saveCheckpoint(path, {
      model: modelTensors(),
      optimizer: runner.optimizerState(),
      trainer: {
        step, updates: runner.updates, dropoutCounter: runner.dropoutCounter.toString(), data: loader.state(),
        lossScaler: scaler.state(), trainCurve, evalCurve, config: { ...config, model: undefined },
      },
    }, { files: { 'config.json': JSON.stringify(gpt2ConfigToJson(config.model), null, 2) } });
    pruneCheckpoints(config.outDir, config.keepCheckpoints);
    return path;
  };

  const progress = new ProgressBar({ total: config.steps, label: 'train', ...(io.progressStream ? { stream: io.progressStream } : {}) });
  let tokensSeen = 0, lastLoss = NaN;
  const started = performance.now();
  for (; step < config.steps;) {
    const batch = loader.next();
    const lr = schedule.lrAt(runner.updates);
    const result = runner.trainStep({ batch: batch.batchSize, seqLen: batch.seqLen, tokens: batch.inputs, targets: batch.targets }, lr, scaler.scale);
    const { skipped } = scaler.update(result.skipped);
    if (scaler.consecutiveSkips >= 50) throw new ArgumentError(`train: 50 consecutive steps had non-finite gradients; the run diverged (last loss ${result.loss})`);
    step++;
    tokensSeen += batch.batchSize * batch.seqLen;
    lastLoss = result.loss;
    trainCurve.push({ step, value: result.loss });
    progress.update({
      step, loss: result.loss, tokens: tokensSeen,
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
  evalCurve.push({ step, value: evalLoss });
  const checkpoint = save();
  const plot = writeLossPlot(join(config.outDir, 'loss'), [
    { name: 'train', points: trainCurve },
    { name: 'validation', points: evalCurve },
  ], { title: `GPT-2 (${config.model.layers} layers, ${config.model.hidden} hidden) on ${backend.description}`, xLabel: 'step', yLabel: 'cross-entropy (nats/token)' });

  const prompt = tokenizer.encode(config.sample.prompt);
  const generated = sampleTokens(model, prompt.length > 0 ? prompt : [0], { maxNewTokens: config.sample.tokens, temperature: config.sample.temperature, seed: config.seed, window: config.seqLen });
  const sample = config.sample.prompt + tokenizer.decode(generated);
  runner.dispose();
  model.params.free();
  return { steps: step, finalLoss: lastLoss, evalLoss, tokensPerSecond: tokensSeen / Math.max(seconds, 1e-9), sample, plot, checkpoint };
}
