// The quantization quality check (issue #7): a GPT-2 trained on the embedded corpus (or a trained
// model directory), its held-out perplexity in floating point, and again with each quantized variant
// running through the real quantized ops inside the model's linear layers (Linear.quantized):
//   int8        W8A8, SmoothQuant α = 0.5                 target: ≤ +1% perplexity
//   int4-rtn    W4A16 round-to-nearest                    (reported; the uncalibrated reference)
//   int4-awq    W4A16 AWQ                                 target: ≤ +4%
//   int4-gptq   W4A16 GPTQ                                target: ≤ +4%
//   int4-gptq-act-order  W4A16 GPTQ with act-order (desc_act)   target: ≤ +4%
// For INT4 it also evaluates the float path with the same weights dequantized into the model's float
// parameters: the two must agree closely, which shows that the quantized kernels compute what the
// quantized weights mean (and not, say, the float weights they came from).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Gpt2Config } from '../models/gpt2.js';
import { Gpt2Model } from '../models/gpt2-model.js';
import { loadHfWeights } from '../models/hf-weights.js';
import { loadModelConfig, presetConfig, PRESET_NAMES } from '../models/registry.js';
import { trainLanguageModel } from '../train/trainer.js';
import type { TrainConfig } from '../train/trainer.js';
import type { PerplexityOptions, PerplexityResult } from './calibration.js';
import { calibrationWindows, evaluatePerplexity, StepExecutor } from './calibration.js';
import { applyQuantizedModel } from './model.js';
import type { QuantizeOptions } from './quantize.js';
import { quantizeGpt2 } from './quantize.js';
import { corpusSplit, tokenizerForModel } from './text.js';

export type QualityVariant = 'int8' | 'int4-rtn' | 'int4-awq' | 'int4-gptq' | 'int4-gptq-act-order';
export const QUALITY_VARIANTS: readonly QualityVariant[] = ['int8', 'int4-rtn', 'int4-awq', 'int4-gptq', 'int4-gptq-act-order'];

/** Allowed perplexity increase over the float model, as a fraction (undefined: reported only). */
export const QUALITY_TARGETS: Readonly<Record<QualityVariant, number | undefined>> = {
  'int8': 0.01, 'int4-rtn': undefined, 'int4-awq': 0.04, 'int4-gptq': 0.04, 'int4-gptq-act-order': 0.04,
};

export interface QualityOptions {
  readonly backend: Backend;
  /** A trained GPT-2 directory (config.json + model.safetensors), or a preset name (or a config) to train first. */
  readonly model: string | { readonly name: string; readonly config: Gpt2Config };
  readonly dtype: FloatDType;
  /** Training of a preset (ignored for a directory). */
  readonly train?: { readonly steps: number; readonly batchSize: number; readonly seqLen: number; readonly lr: number; readonly seed?: number };
  readonly eval: PerplexityOptions;
  readonly calibration: { readonly samples: number; readonly seqLen: number; readonly batchSize: number };
  readonly groupSize: number;
  readonly variants: readonly QualityVariant[];
  readonly awq?: QuantizeOptions['awq'];
  /** Where a trained model goes (default: a temporary directory, removed afterwards). */
  readonly workDir?: string;
  readonly log?: (line: string) => void;
  readonly progressStream?: NodeJS.WritableStream & { isTTY?: boolean };
}

export interface QualityRow {
  readonly variant: QualityVariant;
  readonly loss: number;
  readonly perplexity: number;
  /** (perplexity / float perplexity − 1). */
  readonly increase: number;
  readonly target?: number;
  readonly pass?: boolean;
  /** INT4: perplexity of the float path with the dequantized weights. */
  readonly dequantizedPerplexity?: number;
  readonly quantizeSeconds: number;
}

export interface QualityReport {
  readonly model: string;
  readonly config: Gpt2Config;
  readonly backend: string;
  readonly dtype: FloatDType;
  readonly evalTokens: number;
  readonly float: PerplexityResult;
  readonly rows: readonly QualityRow[];
}

function variantOptions(variant: QualityVariant, options: QualityOptions, windows: Int32Array[]): QuantizeOptions {
  const calibration = { windows, batchSize: options.calibration.batchSize };
  switch (variant) {
    case 'int8': return { bits: 8, method: 'smoothquant', smoothAlpha: 0.5, calibration };
    case 'int4-rtn': return { bits: 4, method: 'rtn', groupSize: options.groupSize };
    case 'int4-awq': return { bits: 4, method: 'awq', groupSize: options.groupSize, calibration, ...(options.awq ? { awq: options.awq } : {}) };
    case 'int4-gptq': return { bits: 4, method: 'gptq', groupSize: options.groupSize, calibration };
    case 'int4-gptq-act-order': return { bits: 4, method: 'gptq', groupSize: options.groupSize, calibration, gptq: { actOrder: true } };
  }
}

export function runQuantQuality(options: QualityOptions): QualityReport {
  const { backend, dtype } = options;
  const log = options.log ?? (() => {});
  const name = typeof options.model === 'string' ? options.model : options.model.name;
  const isPreset = typeof options.model !== 'string' || PRESET_NAMES.includes(options.model);
  const modelConfig = typeof options.model !== 'string' ? { family: 'gpt2' as const, config: options.model.config }
    : isPreset ? presetConfig(options.model) : loadModelConfig(options.model);
  if (modelConfig.family !== 'gpt2') throw new ArgumentError(`quant quality: ${name} is a ${modelConfig.family} model; GPT-2 models are supported`);
  const config = modelConfig.config;
  const tokenizer = tokenizerForModel(isPreset ? undefined : name, config.vocabSize);
  const { all, train, validation } = corpusSplit(tokenizer, config.vocabSize);

  let dir = name;
  let temporary: string | undefined;
  if (isPreset) {
    const t = options.train;
    if (!t) throw new ArgumentError(`quant quality: preset ${name} must be trained first; give train options`);
    temporary = options.workDir ? undefined : mkdtempSync(join(tmpdir(), 'fuseformer-quant-'));
    const outDir = options.workDir ?? temporary!;
    const trainConfig: TrainConfig = {
      model: { family: 'gpt2', config }, dtype, batchSize: t.batchSize, seqLen: t.seqLen, steps: t.steps,
      schedule: { kind: 'cosine', lr: t.lr, minLr: t.lr / 10, warmupSteps: Math.max(1, Math.floor(t.steps / 20)), totalSteps: t.steps },
      seed: t.seed ?? 1337, evalEvery: 0, evalBatches: 2, checkpointEvery: 0, keepCheckpoints: 1, outDir, resume: false, overwrite: true, // a scratch directory
      validationFraction: 0.05, checkpointActivations: 0, sample: { prompt: 'CHAPTER 1.', tokens: 1, temperature: 1 },
    };
    // The trainer splits the same token stream the same way: its validation part is our held-out text.
    const result = trainLanguageModel(backend, all, tokenizer, trainConfig, { log, ...(options.progressStream ? { progressStream: options.progressStream } : {}) });
    log(`trained ${name} for ${result.steps} steps: validation loss ${result.evalLoss?.toFixed(4)}`);
    dir = result.checkpoint;
  }

  const model = new Gpt2Model(backend, config, dtype);
  const executor = new StepExecutor(backend);
  try {
    loadHfWeights(model.params, dir);
    const original = model.params.download();
    const evaluate = () => evaluatePerplexity(model, executor, validation, options.eval);
    const float = evaluate();
    log(`float (${dtype}): perplexity ${float.perplexity.toFixed(4)} on ${float.tokens} held-out tokens`);
    const windows = calibrationWindows(train, options.calibration.samples, options.calibration.seqLen);
    const rows: QualityRow[] = [];
    for (const variant of options.variants) {
      const started = performance.now();
      const quantized = quantizeGpt2(model, variantOptions(variant, options, windows));
      const quantizeSeconds = (performance.now() - started) / 1000;
      const applied = applyQuantizedModel(model, quantized);
      let result: PerplexityResult;
      let dequantizedPerplexity: number | undefined;
      try {
        result = evaluate();
      } finally {
        applied.detach();
      }
      if (variant !== 'int8') dequantizedPerplexity = evaluate().perplexity;
      model.params.upload(original, 'the float model');
      const increase = result.perplexity / float.perplexity - 1;
      const target = QUALITY_TARGETS[variant];
      rows.push({
        variant, loss: result.loss, perplexity: result.perplexity, increase, quantizeSeconds,
        ...(target !== undefined ? { target, pass: increase <= target } : {}),
        ...(dequantizedPerplexity !== undefined ? { dequantizedPerplexity } : {}),
      });
      log(`${variant}: perplexity ${result.perplexity.toFixed(4)} (${increase >= 0 ? '+' : ''}${(100 * increase).toFixed(2)}%)` +
        `${dequantizedPerplexity !== undefined ? `, dequantized float path ${dequantizedPerplexity.toFixed(4)}` : ''}, quantized in ${quantizeSeconds.toFixed(1)} s`);
    }
    return { model: name, config, backend: backend.description, dtype, evalTokens: float.tokens, float, rows };
  } finally {
    executor.dispose();
    model.params.free();
    if (temporary) rmSync(temporary, { recursive: true, force: true });
  }
}

/** The report as a markdown table. */
export function qualityTable(report: QualityReport): string {
  const pct = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(2)}%`;
  const lines = [
    `| variant | perplexity | vs ${report.dtype} | target | pass | dequantized float path | quantize s |`,
    '|---|---|---|---|---|---|---|',
    `| ${report.dtype} | ${report.float.perplexity.toFixed(4)} | | | | | |`,
    ...report.rows.map((r) => `| ${r.variant} | ${r.perplexity.toFixed(4)} | ${pct(r.increase)} | ${r.target !== undefined ? `≤ +${(100 * r.target).toFixed(0)}%` : ''} | ` +
      `${r.pass === undefined ? '' : r.pass ? 'yes' : 'NO'} | ${r.dequantizedPerplexity?.toFixed(4) ?? ''} | ${r.quantizeSeconds.toFixed(1)} |`),
  ];
  return lines.join('\n');
}
