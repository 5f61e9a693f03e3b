// A Marian checkpoint (HF MarianMTModel's model.safetensors, or shards listed by model.safetensors.index.json)
// into the translation model's parameter workspace.
//
// HF writes one tensor for each group of tied weights and chooses the name by version: the shared token
// table appears as model.shared.weight, model.encoder.embed_tokens.weight, model.decoder.embed_tokens.weight
// or lm_head.weight. Any of them fills the table; when two are present they must be equal. The fixed
// sinusoidal tables (embed_positions) are recomputed, not read. final_logits_bias, a buffer some exports
// leave out, is zero when absent (its initial value in HF). F32, F16 and BF16 tensors are read.

import { ArgumentError } from '../errors.js';
import { openWeightFile } from '../io/weight-file.js';
import { shardFiles } from '../models/hf-weights.js';
import type { ParameterStore } from '../nn/parameters.js';
import { formatShape } from '../tensor.js';

/** Checkpoint names that may carry each token table, in order of preference. */
const TABLE_ALIASES: Readonly<Record<string, readonly string[]>> = {
  'model.shared.weight': ['model.shared.weight', 'model.encoder.embed_tokens.weight', 'model.decoder.embed_tokens.weight', 'lm_head.weight'],
  'model.encoder.embed_tokens.weight': ['model.encoder.embed_tokens.weight'],
  'model.decoder.embed_tokens.weight': ['model.decoder.embed_tokens.weight', 'lm_head.weight'],
  'lm_head.weight': ['lm_head.weight'],
};
const RECOMPUTED = /embed_positions\.weight$/;


export interface LoadedCheckpoint {
  readonly files: readonly string[];
  /** Checkpoint tensors that fill no parameter (other than the recomputed position tables). */
  readonly unused: readonly string[];
}

export function loadMarianWeights(store: ParameterStore, dir: string): LoadedCheckpoint {
  const files = shardFiles(dir);
  const wanted = new Map(store.fileShapes().map((e) => [e.name, e.shape]));
  const read = new Map<string, { file: string; shape: readonly number[]; data: Float32Array }>();
  for (const file of files) {
    const reader = openWeightFile(file);
    try {
      for (const info of reader.tensors) {
        if (info.dtype !== 'F32' && info.dtype !== 'F16' && info.dtype !== 'BF16') {
          throw new ArgumentError(`${file}: tensor '${info.name}' is ${info.dtype}; only F32, F16 and BF16 weights are read`);
        }
        read.set(info.name, { file, shape: info.shape, data: reader.readFloats(info.name) });
      }
    } finally {
      reader.close();
    }
  }

  const values = new Map<string, { shape: readonly number[]; data: Float32Array }>();
  const used = new Set<string>();
  const missing: string[] = [];
  for (const [name, shape] of wanted) {
    // An alias that is itself a parameter (an untied lm_head) never stands in for another one.
    const candidates = (TABLE_ALIASES[name] ?? [name]).filter((alias) => read.has(alias) && (alias === name || !wanted.has(alias)));
    if (candidates.length === 0) {
      if (name === 'final_logits_bias') { values.set(name, { shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) }); continue; }
      missing.push(name);
      continue;
    }
    const first = read.get(candidates[0]!)!;
    for (const alias of candidates) {
      const t = read.get(alias)!;
      if (formatShape(t.shape) !== formatShape(shape)) {
        throw new ArgumentError(`${t.file}: tensor '${alias}' has shape ${formatShape(t.shape)}, the model expects ${formatShape(shape)} for '${name}'`);
      }
      if (alias !== candidates[0] && !t.data.every((x, i) => x === first.data[i])) {
        throw new ArgumentError(`${t.file}: '${alias}' and '${candidates[0]}' both hold '${name}' but differ (the model ties them)`);
      }
      used.add(alias);
    }
    values.set(name, { shape, data: first.data });
  }
  if (missing.length > 0) {
    throw new ArgumentError(`${dir}: the checkpoint lacks ${missing.length} parameter(s) the model needs: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}`);
  }
  store.upload(values, dir);
  return { files, unused: [...read.keys()].filter((n) => !used.has(n) && !RECOMPUTED.test(n)) };
}
