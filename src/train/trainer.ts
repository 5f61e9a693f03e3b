// The training loop behind `fuseformer train` (GPT-2 causal LM or BERT masked LM): data → steps → progress, evaluation, checkpoints,
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
import type { BertConfig } from '../models/bert.js';
import { bertConfigToJson } from '../models/bert.js';
import { BertModel } from '../models/bert-model.js';
import type { LanguageModel } from '../models/language-model.js';
import { MaskedLMLoader, maskTokens } from './masked-lm.js';
import { loadHfWeights } from '../models/hf-weights.js';
import type { TokenArray } from '../io/token-file.js';
import type { NamedHostTensor } from './checkpoint.js';
import { checkpointPath, latestCheckpoint, loadCheckpoint, pruneCheckpoints, saveCheckpoint } from './checkpoint.js';
import type { CausalLMLoaderState } from './data.js';
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

/** Trains a GPT-2 (causal LM) or BERT (masked LM) model on `tokens` and returns what happened. */
export function trainLanguageModel(backend: Backend, tokens: TokenArray, tokenizer: Tokenizer, config: TrainConfig, io: TrainIo): TrainResult {
  checkConfig(config, tokens.length);
  const modelConfig = config.model.config;
  if (tokenizer.vocabSize > modelConfig.vocabSize) {
    throw new ArgumentError(`train: the tokenizer has ${tokenizer.vocabSize} tokens but the model's vocab_size is ${modelConfig.vocabSize}`);
  }
  mkdirSync(config.outDir, { recursive: true });
  const { train, validation } = splitTokens(tokens, config.validationFraction);
  const masked = config.model.family === 'bert' ? { ...maskedLmTokens(tokenizer), vocabSize: modelConfig.vocabSize } : undefined;
  const model: LanguageModel & { logitsStep?: Gpt2Model['logitsStep'] } = config.model.family === 'gpt2'
    ? new Gpt2Model(backend, config.model.config, config.dtype)
    : new BertModel(backend, config.model.config, config.dtype);
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
  const windows = { batchSize: config.batchSize, seqLen: config.seqLen, seed: config.seed };
  const loader: BatchSource = masked ? new MaskedLMLoader(train, { ...windows, ...masked }) : new CausalLMLoader(train, windows);
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
    const state = ckpt.trainer as { step: number; updates?: number; dropoutCounter?: string; data?: CausalLMLoaderState; lossScaler?: Parameters<typeof restoreLossScaler>[0]; trainCurve?: typeof trainCurve; evalCurve?: typeof evalCurve };
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
    let index = 0;
    for (const b of evaluationBatches(validation, { batchSize: config.batchSize, seqLen: config.seqLen, maxBatches: config.evalBatches })) {
      // Masked LM: the same masks every evaluation (seeded by the batch index), over the window's tokens.
      const { inputs, targets } = masked ? maskTokens(b.inputs, masked, config.seed, index++) : b;
      const r = runner.evalLoss({ batch: b.batchSize, seqLen: b.seqLen, tokens: inputs, targets });
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
    }, { files: { 'config.json': JSON.stringify(config.model.family === 'gpt2' ? gpt2ConfigToJson(config.model.config) : bertConfigToJson(config.model.config), null, 2) } });
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
  ], { title: `${config.model.family === 'gpt2' ? 'GPT-2' : 'BERT (masked LM)'} (${modelConfig.layers} layers, ${modelConfig.hidden} hidden) on ${backend.description}`, xLabel: 'step', yLabel: 'cross-entropy (nats/token)' });

  // A causal LM shows what it learned by continuing the prompt; BERT's evaluation loss says it.
  let sample = '';
  if (model.logitsStep) {
    const prompt = tokenizer.encode(config.sample.prompt);
    const generated = sampleTokens({ ...model, logitsStep: model.logitsStep.bind(model), backend, dtype: model.dtype, vocabSize: model.vocabSize, logitsWidth: model.logitsWidth, maxSeqLen: model.maxSeqLen },
      prompt.length > 0 ? prompt : [0], { maxNewTokens: config.sample.tokens, temperature: config.sample.temperature, seed: config.seed, window: config.seqLen });
    sample = config.sample.prompt + tokenizer.decode(generated);
  }
  runner.dispose();
  model.params.free();
  return { steps: step, finalLoss: lastLoss, evalLoss, tokensPerSecond: tokensSeen / Math.max(seconds, 1e-9), sample, plot, checkpoint };
}
