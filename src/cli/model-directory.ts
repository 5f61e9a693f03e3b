// What a model directory's config.json says about how it can run, read before loading anything (so a
// command can refuse an option that does not fit the model with a clear message). A config.json that does
// not parse reads as "no": the loaders report it with their own message.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import type { Communicator } from '../dist/communicator.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError, FuseformerError } from '../errors.js';
import { loadDecoderModel } from '../infer/model.js';
import type { DecoderModel } from '../infer/model.js';
import { isCrossEncoderModules } from '../infer/sentence-transformers.js';
import { isQuantizedDirectory, loadQuantizedDecoderModel, quantizeDecoderModel, quantizeLmHead } from '../infer/quantized.js';

/** A directory whose config.json has a quantization_config (`fuseformer quantize`, GPTQ, AWQ). */
export function readsAsQuantized(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    return typeof config === 'object' && config !== null && isQuantizedDirectory(config);
  } catch {
    return false; // the loaders report a malformed config.json with their own message
  }
}

/** A Marian-style encoder-decoder checkpoint (config.json's model_type or architectures). */
export function isEncoderDecoder(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { model_type?: unknown; architectures?: unknown };
    return config.model_type === 'marian' || (Array.isArray(config.architectures) && config.architectures.includes('MarianMTModel'));
  } catch {
    return false; // loadDecoderModel reports a malformed config.json with its own message
  }
}

/**
 * A reranker, which `fuseformer serve` runs as a rerank server: a …ForSequenceClassification model (BERT, RoBERTa,
 * XLM-RoBERTa cross-encoders; Qwen3 / Qwen2 / Llama / Mistral decoders) or a sentence-transformers CrossEncoder
 * (modules.json; a causal LM scored by a LogitScore module: Qwen3-Reranker).
 */
export function isCrossEncoderDirectory(dir: string): boolean {
  if (isCrossEncoderModules(dir)) return true;
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { architectures?: unknown };
    return Array.isArray(config.architectures) && config.architectures.some((a) => typeof a === 'string' && /^(Bert|Roberta|XLMRoberta|Llama|Mistral|Qwen2|Qwen3)ForSequenceClassification$/.test(a));
  } catch {
    return false; // the loaders report a malformed config.json with their own message
  }
}

/** A directory `fuseformer serve` runs as an embeddings server: sentence-transformers (modules.json) or a BERT-family config (bert, roberta, xlm-roberta, mpnet, distilbert). */
export function isEmbeddingDirectory(dir: string): boolean {
  if (existsSync(join(dir, 'modules.json'))) return true;
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { model_type?: unknown; architectures?: unknown };
    const encoders = ['bert', 'roberta', 'xlm-roberta', 'mpnet', 'distilbert'];
    if (typeof config.model_type === 'string') return encoders.includes(config.model_type);
    return Array.isArray(config.architectures) && config.architectures.some((a) => typeof a === 'string' && /^(Bert|Roberta|XLMRoberta|MPNet|DistilBert)/.test(a));
  } catch {
    return false; // the loaders report a malformed config.json with their own message
  }
}

/** `--quantize`: round-to-nearest INT4 (W4A16, groups of 128) or INT8 (W8A8) on loading a 16-bit model. */
export type QuantizeOnLoad = 'rtn4' | 'rtn8';

/** Checks --quantize and --quantize-lm-head against the directory and --tp; returns the quantization asked for. */
export function quantizeOption(dir: string, quantize: string | undefined, lmHead: boolean, tp: number): QuantizeOnLoad | undefined {
  if (quantize !== undefined && quantize !== 'rtn4' && quantize !== 'rtn8') throw new ArgumentError(`--quantize must be rtn4 or rtn8, got '${quantize}'`);
  const quantizedDir = readsAsQuantized(dir);
  if (lmHead && quantize === undefined && !quantizedDir) throw new ArgumentError('--quantize-lm-head needs --quantize rtn4|rtn8, or a quantized --model directory');
  if (quantizedDir && quantize !== undefined) throw new ArgumentError(`--quantize ${quantize}: '${dir}' is already quantized (its config.json has a quantization_config)`);
  if ((quantizedDir || quantize !== undefined) && tp > 1) throw new ArgumentError(`--tp ${tp}: quantized models run on one GPU; drop --tp${quantize !== undefined ? ' or --quantize' : ''}`);
  return quantize;
}

export interface DecoderDirectoryOptions {
  readonly dtype?: FloatDType;
  readonly tensorParallel?: Communicator;
  readonly quantize?: QuantizeOnLoad;
  readonly quantizeLmHead?: boolean;
}

/**
 * A decoder-only model from a directory: a quantized one (`fuseformer quantize`, GPTQ, AWQ) through its
 * loader, else the 16-bit loader, then round-to-nearest when asked — the projections (and head) of a
 * 16-bit model, or a quantized directory's head (the model is freed if that fails).
 */
/** The draft model of speculative decoding (`--draft DIR`): a load error names the flag, not just the model. */
export function loadDraftDirectory(dir: string, backend: Backend, options: Pick<DecoderDirectoryOptions, 'dtype'> = {}): DecoderModel {
  try {
    return loadDecoderDirectory(dir, backend, options).model;
  } catch (error) {
    if (error instanceof FuseformerError) throw new ArgumentError(`--draft '${dir}': ${error.message}`);
    throw error;
  }
}

export function loadDecoderDirectory(dir: string, backend: Backend, options: DecoderDirectoryOptions = {}): { model: DecoderModel; unused: readonly string[] } {
  const dtype = options.dtype ? { dtype: options.dtype } : {};
  const { model, unused } = readsAsQuantized(dir) ? { model: loadQuantizedDecoderModel(dir, backend, dtype), unused: [] }
    : loadDecoderModel(dir, backend, { ...dtype, ...(options.tensorParallel ? { tensorParallel: options.tensorParallel } : {}) });
  try {
    if (options.quantize !== undefined) quantizeDecoderModel(model, { method: 'rtn', bits: options.quantize === 'rtn4' ? 4 : 8, lmHead: options.quantizeLmHead ?? false });
    // A quantized directory's head: round-to-nearest at the projections' bits (and group size).
    else if (options.quantizeLmHead && model.quantization) quantizeLmHead(model);
  } catch (error) {
    model.free();
    throw error;
  }
  return { model, unused };
}

/** How a model's weights are held, for a command's first line: "INT4 W4A16 (rtn, group 128) projections, bf16 otherwise". */
export function precisionOf(model: DecoderModel): string {
  const q = model.quantization?.info;
  if (!q) return model.dtype;
  const head = model.quantization!.lmHead ? ' and LM head' : '';
  return `${q.bits === 4 ? `INT4 W4A16 (${q.method}${q.actOrder ? ' act-order' : ''}, group ${q.groupSize})` : `INT8 W8A8 (${q.method})`} projections${head}, ${model.dtype} otherwise`;
}

/** The note for a tokenizer.json with more tokens than the model's embedding rows (text using them is refused). */
export function tokenizerVocabularyNote(tokenizerTokens: number, modelTokens: number): string {
  return `note: tokenizer.json defines ids up to ${tokenizerTokens - 1} but the model has ${modelTokens} (config.json vocab_size); `
    + `text that encodes to ids ${modelTokens}–${tokenizerTokens - 1} is refused`;
}
