// `fuseformer quantize`: a GPT-2 or Llama-family model directory (a Hugging Face folder, or a `fuseformer
// train` checkpoint: model.safetensors + config.json) → a quantized directory (src/quant/checkpoint.ts),
// INT4 W4A16 (rtn | awq | gptq, group-wise) or INT8 W8A8 (smoothquant | rtn), calibrated on the training
// part of the embedded corpus or of a text the user names (--calibration); --eval reports held-out
// perplexity before and after. GPT-2 runs through the training model (quant/quantize.ts), Llama through
// the inference engine (quant/decoder-quantize.ts).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { Gpt2Model } from '../models/gpt2-model.js';
import { loadHfWeights } from '../models/hf-weights.js';
import { loadDecoderModel } from '../infer/model.js';
import { loadQuantizedDecoderModel } from '../infer/quantized.js';
import { readsAsQuantized } from './model-directory.js';
import type { Backend } from '../backend/backend.js';
import type { Gpt2Config } from '../models/gpt2.js';
import { loadModelConfig } from '../models/registry.js';
import type { ModelConfig } from '../models/registry.js';
import { evaluateDecoderPerplexity, quantizeDecoder } from '../quant/decoder-quantize.js';
import type { QuantizedModel } from '../quant/model.js';
import type { PerplexityResult } from '../quant/calibration.js';
import { calibrationWindows, evaluatePerplexity, StepExecutor } from '../quant/calibration.js';
import { checkQuantizedOutput, saveQuantizedModel } from '../quant/checkpoint.js';
import { applyQuantizedModel } from '../quant/model.js';
import type { QuantizeOptions, QuantMethod } from '../quant/quantize.js';
import { checkQuantizeOptions, quantizeGpt2 } from '../quant/quantize.js';
import type { TextSplit } from '../quant/text.js';
import { calibrationText, tokenizerForModel } from '../quant/text.js';
import { ProgressBar } from '../train/progress.js';
import { resolveModelDirectory } from '../io/hf-cache.js';

export const QUANTIZE_USAGE = `usage: fuseformer quantize --model DIR --out DIR [options]

  --model DIR             a GPT-2 or Llama-family model directory: config.json and model.safetensors or
                          pytorch_model.bin (or shards)
                          (a Hugging Face folder, or a checkpoint written by \`fuseformer train\`), or a
                          repository id (org/name[@rev]) in the local Hugging Face cache
  --out DIR               the quantized model (model.safetensors, config.json; the source's tokenizer, chat
                          template and generation_config.json copied)
  --bits 4|8              INT4 weight-only (W4A16) or INT8 weights and activations (W8A8) (default 4)
  --method M              4 bits: rtn | awq | gptq (default awq); 8 bits: smoothquant | rtn (default smoothquant)
  --group N               INT4 group size along the input features: a multiple of 32 dividing every layer's inputs
                          (default 128; 64 and 32 the usual others)
  --act-order             GPTQ: quantize the input channels in order of decreasing activation energy (desc_act;
                          the products then gather their inputs into that order, a small extra kernel each)
  --smooth-alpha X        SmoothQuant migration strength (default 0.5)
  --calibration moby-dick|FILE
                          calibration text: the embedded corpus (default), a text file, or a token file (.bin, llm.c
                          format) — what 'fuseformer train --data' takes; its last 5% is held out for --eval
  --calibration-samples N --calibration-len N
                          calibration windows from the text's first 95% (default 64 × 256 on CUDA, 16 × 64 on the CPU)
  --dtype f32|bf16|f16    activation dtype while calibrating and evaluating (default bf16 on CUDA, f32 on the CPU)
  --eval                  held-out perplexity of the float and the quantized model
  --eval-batches N        (default 8)
  --backend auto|cpu|cuda (default auto; env FUSEFORMER_BACKEND)
`;

function integer(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new ArgumentError(`--${name} must be a positive integer, got '${value}'`);
  return n;
}

export async function runQuantize(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, out: { type: 'string' }, bits: { type: 'string', default: '4' }, method: { type: 'string' },
      group: { type: 'string' }, 'smooth-alpha': { type: 'string' }, calibration: { type: 'string', default: 'moby-dick' }, 'calibration-samples': { type: 'string' }, 'calibration-len': { type: 'string' },
      dtype: { type: 'string' }, eval: { type: 'boolean', default: false }, 'act-order': { type: 'boolean', default: false }, 'eval-batches': { type: 'string' }, backend: { type: 'string' },
    },
  });
  if (!values.model) throw new ArgumentError('quantize: --model DIR is required (a GPT-2 or Llama-family model directory)');
  if (!values.out) throw new ArgumentError('quantize: --out DIR is required');
  values.model = resolveModelDirectory(values.model);
  if (!existsSync(join(values.model, 'config.json'))) throw new ArgumentError(`--model: '${values.model}' has no config.json`);
  if (readsAsQuantized(values.model)) throw new ArgumentError(`--model: '${values.model}' is already quantized (its config.json has a quantization_config); quantize the 16-bit model it came from`);
  // Checked before any work: the output is written beside --out and swapped in whole.
  checkQuantizedOutput(values.out, values.model);
  const bits = Number(values.bits);
  if (bits !== 4 && bits !== 8) throw new ArgumentError(`--bits must be 4 or 8, got '${values.bits}'`);
  const method = (values.method ?? (bits === 4 ? 'awq' : 'smoothquant')) as QuantMethod;
  const smoothAlpha = values['smooth-alpha'] === undefined ? 0.5 : values['smooth-alpha'].trim() === '' ? NaN : Number(values['smooth-alpha']);
  if (!(smoothAlpha >= 0 && smoothAlpha <= 1)) throw new ArgumentError(`--smooth-alpha must be in [0, 1], got '${values['smooth-alpha']}'`);

  const modelConfig = loadModelConfig(values.model);
  if (modelConfig.family !== 'gpt2' && modelConfig.family !== 'llama') throw new ArgumentError(`quantize: ${values.model} is a ${modelConfig.family} model; fuseformer quantize handles GPT-2 and Llama-family decoders`);
  const config = modelConfig.config;
  const { backend, reason } = await selectBackend(values.backend as BackendChoice | undefined);
  const onGpu = backend.name === 'cuda';
  const dtype = (values.dtype ?? (onGpu ? 'bf16' : 'f32')) as FloatDType;
  if (!['f32', 'bf16', 'f16'].includes(dtype)) throw new ArgumentError(`--dtype must be f32, bf16 or f16, got '${dtype}'`);
  const samples = integer('calibration-samples', values['calibration-samples'], onGpu ? 64 : 16);
  const seqLen = Math.min(config.maxPositions, integer('calibration-len', values['calibration-len'], onGpu ? 256 : 64));

  const tokenizer = tokenizerForModel(values.model, config.vocabSize);
  const text = values.calibration!;
  const { train, validation } = calibrationText(text, tokenizer, config.vocabSize);
  if (train.length < seqLen) throw new ArgumentError(`--calibration: ${text} gives ${train.length} tokens for calibration (its first 95%); a window needs ${seqLen} (--calibration-len)`);
  const distinctWindows = train.length - seqLen + 1;
  if (method !== 'rtn' && samples > distinctWindows) throw new ArgumentError(`--calibration-samples ${samples}: ${text} gives ${train.length} tokens for calibration (its first 95%), room for ${distinctWindows} distinct windows of ${seqLen} (--calibration-len); ask for fewer or give a longer text`);
  if (values.eval && validation.length < seqLen + 1) throw new ArgumentError(`--calibration: ${text}'s held-out 5% is ${validation.length} tokens, too few for --eval with windows of ${seqLen} (--calibration-len)`);
  const options = {
    bits: bits as 4 | 8, method, groupSize: integer('group', values.group, 128), smoothAlpha,
    // Round-to-nearest reads no activations: no windows to build.
    ...(method === 'rtn' ? {} : { calibration: { windows: calibrationWindows(train, samples, seqLen), batchSize: onGpu ? 16 : 4 } }),
    ...(values['act-order'] ? { gptq: { actOrder: true } } : {}),
  };
  checkQuantizeOptions(options);
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const family = modelConfig.family === 'gpt2' ? 'GPT-2' : 'Llama';
  log(`fuseformer quantize: ${values.model} (${family}, ${config.layers} layers, ${config.hidden} hidden) → ${bits === 4 ? `INT4 W4A16 ${method}${values['act-order'] ? ' (act-order)' : ''}, group ${options.groupSize}` : `INT8 W8A8 ${method}${method === 'smoothquant' ? `, α ${smoothAlpha}` : ''}`} on ${backend.description} — ${reason}`);
  if (method !== 'rtn') log(`calibration: ${samples} × ${seqLen} tokens of ${text === 'moby-dick' ? 'the embedded corpus' : text} (${tokenizer.source})`);
  const run: QuantizeRun = {
    dir: values.model, out: values.out, backend, dtype, options, validation,
    evalOptions: values.eval ? { batchSize: onGpu ? 8 : 4, seqLen, maxBatches: integer('eval-batches', values['eval-batches'], 8) } : undefined,
    progress: new ProgressBar({ total: 4 * config.layers, label: 'quantize', stream: process.stderr, everySteps: 4 }),
  };
  const started = performance.now();
  const { quantized, before, after } = modelConfig.family === 'gpt2' ? quantizeGpt2Directory(run, config as Gpt2Config) : quantizeLlamaDirectory(run, modelConfig);
  const seconds = (performance.now() - started) / 1000;
  const floatBytes = [...quantized.modules.values()].reduce((sum, w) => sum + 2 * w.inFeatures * w.outFeatures, 0);
  const quantBytes = [...quantized.modules.values()].reduce((sum, w) => sum + (w.kind === 'int4'
    ? w.qweight.byteLength + 2 * w.scales.length + w.zeros.length : w.qweight.byteLength + 4 * w.scales.length), 0);
  process.stdout.write(`quantized ${quantized.modules.size} linear layers in ${seconds.toFixed(1)} s: ` +
    `${(floatBytes / 2 ** 20).toFixed(1)} MiB of 16-bit weights → ${(quantBytes / 2 ** 20).toFixed(1)} MiB; written to ${values.out}\n`);
  if (before && after) {
    process.stdout.write(`held-out perplexity (${after.tokens} tokens): ${dtype} ${before.perplexity.toFixed(4)}, quantized ${after.perplexity.toFixed(4)} ` +
      `(${after.perplexity >= before.perplexity ? '+' : ''}${(100 * (after.perplexity / before.perplexity - 1)).toFixed(2)}%)\n`);
  }
  return 0;
}

interface QuantizeRun {
  readonly dir: string;
  readonly out: string;
  readonly backend: Backend;
  readonly dtype: FloatDType;
  readonly options: QuantizeOptions;
  readonly validation: TextSplit['validation'];
  readonly evalOptions: { batchSize: number; seqLen: number; maxBatches: number } | undefined;
  readonly progress: ProgressBar;
}

interface QuantizeOutcome {
  readonly quantized: QuantizedModel;
  readonly before?: PerplexityResult;
  readonly after?: PerplexityResult;
}

function saveNextToSource(run: QuantizeRun, quantized: QuantizedModel, config: ModelConfig): void {
  // The float parameters in the dtype the model ran and was calibrated in (a bf16 model's file at half the size).
  saveQuantizedModel(run.out, quantized, { config, source: run.dir, copyFrom: run.dir, floatDType: run.dtype });
}

function onProgress(run: QuantizeRun): (done: number, total: number, what: string) => void {
  return (done, _total, what) => run.progress.update({ step: done, extra: { layer: what } });
}

/** GPT-2 through the training model; --eval with the quantized weights applied to it. */
function quantizeGpt2Directory(run: QuantizeRun, config: Gpt2Config): QuantizeOutcome {
  const model = new Gpt2Model(run.backend, config, run.dtype);
  const executor = new StepExecutor(run.backend);
  try {
    loadHfWeights(model.params, run.dir);
    const before = run.evalOptions ? evaluatePerplexity(model, executor, run.validation, run.evalOptions) : undefined;
    const quantized = quantizeGpt2(model, { ...run.options, onProgress: onProgress(run) });
    run.progress.finish();
    saveNextToSource(run, quantized, { family: 'gpt2', config });
    if (!before) return { quantized };
    const applied = applyQuantizedModel(model, quantized);
    const after = evaluatePerplexity(model, executor, run.validation, run.evalOptions!);
    applied.detach();
    return { quantized, before, after };
  } finally {
    executor.dispose();
    model.params.free();
  }
}

/** A Llama-family model through the inference engine; --eval runs the directory just written. */
function quantizeLlamaDirectory(run: QuantizeRun, config: ModelConfig): QuantizeOutcome {
  const { model } = loadDecoderModel(run.dir, run.backend, { dtype: run.dtype });
  let quantized: QuantizedModel, before: PerplexityResult | undefined;
  try {
    before = run.evalOptions ? evaluateDecoderPerplexity(model, run.validation, run.evalOptions) : undefined;
    quantized = quantizeDecoder(model, { ...run.options, onProgress: onProgress(run) });
    run.progress.finish();
  } finally {
    model.free();
  }
  saveNextToSource(run, quantized, config);
  if (!before) return { quantized };
  const loaded = loadQuantizedDecoderModel(run.out, run.backend, { dtype: run.dtype });
  try {
    return { quantized, before, after: evaluateDecoderPerplexity(loaded, run.validation, run.evalOptions!) };
  } finally {
    loaded.free();
  }
}
