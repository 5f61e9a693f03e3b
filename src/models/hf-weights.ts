// Hugging Face checkpoints into a model's parameter workspace (and what we write is what HF reads).
//
// A model directory holds model.safetensors, or shards listed by model.safetensors.index.json (or the
// PyTorch equivalents, pytorch_model.bin and pytorch_model.bin.index.json: see shardFiles). Names
// are matched to the parameter table after normalising the spellings found in published checkpoints:
//   - GPT-2 files saved from GPT2Model (openai-community/gpt2) lack the "transformer." prefix;
//   - BERT files converted from TensorFlow name LayerNorm parameters gamma/beta;
//   - tied or derived tensors (lm_head.weight, cls.predictions.decoder.*) and buffers (attn.bias,
//     position_ids) are not parameters here; heads we do not build (BERT's pooler and NSP head) are
//     listed as unused rather than refused.
// F32, F16 and BF16 tensors are accepted; a missing parameter or a wrong shape is an error naming the
// tensor and the file.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ArgumentError } from '../errors.js';
import { formatShape } from '../tensor.js';
import { openWeightFile } from '../io/weight-file.js';
import type { WeightFile } from '../io/weight-file.js';
import type { ParameterStore } from '../nn/parameters.js';

/** Tensors that published checkpoints carry but that are not parameters of our models. */
const NOT_PARAMETERS = [
  /(^|\.)attn\.(masked_)?bias$/, /position_ids$/, /^lm_head\.weight$/, /^cls\.predictions\.decoder\.(weight|bias)$/,
];

export interface LoadedWeights {
  /** Files read. */
  readonly files: readonly string[];
  /** Tensors in the files that no parameter uses (e.g. BERT's pooler), for the caller to report. */
  readonly unused: readonly string[];
}

/**
 * The weight files of an HF model directory, in transformers' order of preference: the shards
 * model.safetensors.index.json lists, model.safetensors, the shards pytorch_model.bin.index.json lists,
 * pytorch_model.bin (read by torch-checkpoint.ts; nothing in it is run).
 */
export function shardFiles(dir: string): string[] {
  for (const [index, single] of [['model.safetensors.index.json', 'model.safetensors'], ['pytorch_model.bin.index.json', 'pytorch_model.bin']] as const) {
    if (existsSync(join(dir, index))) return indexedShards(dir, join(dir, index));
    if (existsSync(join(dir, single))) return [join(dir, single)];
  }
  throw new ArgumentError(`${dir}: no weights (model.safetensors, model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json)`);
}

/**
 * `read` on the first weight file of `dir` holding one of `names` (the name it holds given too), the file closed
 * after; undefined where no file holds any. For a head or layer read on its own, beside a model's loader.
 */
export function withTensor<T>(dir: string, names: readonly string[], read: (file: WeightFile, name: string) => T): T | undefined {
  for (const path of shardFiles(dir)) {
    const file = openWeightFile(path);
    try {
      const name = names.find((n) => file.has(n));
      if (name !== undefined) return read(file, name);
    } finally {
      file.close();
    }
  }
  return undefined;
}

/** Whether `dir` holds HF weights shardFiles finds. */
export function hasWeights(dir: string): boolean {
  return ['model.safetensors.index.json', 'model.safetensors', 'pytorch_model.bin.index.json', 'pytorch_model.bin'].some((f) => existsSync(join(dir, f)));
}

/** The distinct files an index's weight_map names, each a file in `dir`. */
function indexedShards(dir: string, index: string): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(index, 'utf8'));
  } catch (error) {
    throw new ArgumentError(`${index}: not valid JSON (${(error as Error).message})`);
  }
  const map = typeof parsed === 'object' && parsed !== null ? (parsed as { weight_map?: unknown }).weight_map : undefined;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) throw new ArgumentError(`${index}: no "weight_map" object`);
  const files = [...new Set(Object.values(map as Record<string, unknown>))];
  const bad = files.find((f) => typeof f !== 'string' || f === '' || f.includes('/') || f.includes('\\') || f === '.' || f === '..');
  if (bad !== undefined) throw new ArgumentError(`${index}: "weight_map" names the file ${JSON.stringify(bad)}; a shard is a file name in ${dir}`);
  if (files.length === 0) throw new ArgumentError(`${index}: "weight_map" is empty`);
  return (files as string[]).map((f) => join(dir, f));
}

/**
 * A config's layer count against the layers the checkpoint's tensor names hold (`layerIndex` captures the
 * index, e.g. /(?:^|\.)layers\.(\d+)\./), read from the files' headers alone — before a model is built for
 * the config: one that says 100,000,000 layers, or one fewer than the files hold, would otherwise stall,
 * fail to allocate, or silently run part of the model. `field` names the config.json field in the error.
 */
export function checkLayerCount(dir: string, files: readonly string[], layerIndex: RegExp, field: string, configured: number): void {
  let layers = 0, example = '';
  for (const file of files) {
    const reader = openWeightFile(file);
    try {
      for (const { name } of reader.tensors) {
        const index = layerIndex.exec(name);
        if (index && Number(index[1]) + 1 > layers) { layers = Number(index[1]) + 1; example = `${file}: '${name}'`; }
      }
    } finally {
      reader.close();
    }
  }
  if (layers !== configured) {
    throw new ArgumentError(`${dir}/config.json: ${field} is ${configured}, but the checkpoint holds ${layers} layer${layers === 1 ? '' : 's'}${example ? ` (its last: ${example})` : ''}`);
  }
}

/** The parameter name a checkpoint tensor name stands for, if any. */
function canonicalName(name: string, known: ReadonlySet<string>): string | undefined {
  const candidates = [name, `transformer.${name}`, name.replace(/\.gamma$/, '.weight').replace(/\.beta$/, '.bias')];
  return candidates.find((c) => known.has(c));
}

/** Loads every parameter of `store` from the HF checkpoint in `dir`. */
export function loadHfWeights(store: ParameterStore, dir: string): LoadedWeights {
  const files = shardFiles(dir);
  const expected = new Map(store.fileShapes().map((e) => [e.name, e.shape]));
  const known = new Set(expected.keys());
  const found = new Map<string, { shape: readonly number[]; data: Float32Array }>();
  const unused: string[] = [];
  for (const file of files) {
    const reader = openWeightFile(file);
    try {
      for (const info of reader.tensors) {
        const name = canonicalName(info.name, known);
        if (!name) {
          if (!NOT_PARAMETERS.some((re) => re.test(info.name))) unused.push(info.name);
          continue;
        }
        const shape = expected.get(name)!;
        if (formatShape(info.shape) !== formatShape(shape)) {
          throw new ArgumentError(`${file}: tensor '${info.name}' has shape ${formatShape(info.shape)}, the model expects ${formatShape(shape)} for '${name}'`);
        }
        if (info.dtype !== 'F32' && info.dtype !== 'F16' && info.dtype !== 'BF16') {
          throw new ArgumentError(`${file}: tensor '${info.name}' is ${info.dtype}; only F32, F16 and BF16 weights are read`);
        }
        found.set(name, { shape, data: reader.readFloats(info.name) });
      }
    } finally {
      reader.close();
    }
  }
  const missing = [...known].filter((n) => !found.has(n));
  if (missing.length > 0) {
    throw new ArgumentError(`${dir}: the checkpoint lacks ${missing.length} parameter(s) the model needs: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}`);
  }
  store.upload(found, dir);
  return { files, unused };
}
