// Hugging Face checkpoints into a model's parameter workspace (and what we write is what HF reads).
//
// A model directory holds model.safetensors, or shards listed by model.safetensors.index.json. Names
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
import { decodeFloats } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { formatShape } from '../tensor.js';
import type { TensorInfo } from '../io/safetensors.js';
import { SafetensorsReader } from '../io/safetensors.js';
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

/** The safetensors files of an HF model directory: the shards its index lists, or model.safetensors. */
export function shardFiles(dir: string): string[] {
  const index = join(dir, 'model.safetensors.index.json');
  if (existsSync(index)) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(index, 'utf8'));
    } catch (error) {
      throw new ArgumentError(`${index}: not valid JSON (${(error as Error).message})`);
    }
    const map = (parsed as { weight_map?: Record<string, string> }).weight_map;
    if (!map || typeof map !== 'object') throw new ArgumentError(`${index}: no "weight_map" object`);
    return [...new Set(Object.values(map))].map((f) => join(dir, f));
  }
  const single = join(dir, 'model.safetensors');
  if (!existsSync(single)) throw new ArgumentError(`${dir}: no model.safetensors or model.safetensors.index.json (PyTorch .bin checkpoints are not read; convert them to safetensors)`);
  return [single];
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
    const reader = SafetensorsReader.open(file);
    try {
      for (const info of reader.tensors as readonly TensorInfo[]) {
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
        const bytes = reader.read(info.name).bytes;
        const data = info.dtype === 'F32' ? new Float32Array(bytes.slice().buffer) : decodeFloats(bytes, info.dtype === 'F16' ? 'f16' : 'bf16');
        found.set(name, { shape, data });
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
