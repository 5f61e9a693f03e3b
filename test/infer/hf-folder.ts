// Tiny Hugging Face model folders for the inference tests: config.json, random weights in safetensors
// (one file or two shards with an index), tokenizer.json (the byte-level tokenizer) and
// generation_config.json. Weights are drawn large enough (std 0.2) that greedy decoding is decisive.

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { encodeFloats, roundToDType } from '../../src/dtype.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { writeSafetensors } from '../../src/io/safetensors.js';
import type { SafetensorsDType } from '../../src/io/safetensors.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { gpt2ConfigToJson } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { llamaConfigToJson } from '../../src/models/llama.js';
import { Rng } from '../../src/testing/random.js';

export type HostWeights = Map<string, { shape: number[]; data: Float32Array }>;

export const TINY_GPT2: Gpt2Config = {
  vocabSize: 257, maxPositions: 64, hidden: 32, layers: 2, heads: 4, ffn: 64, layerNormEps: 1e-5, activation: 'gelu_tanh',
  residualDropout: 0, embeddingDropout: 0, attentionDropout: 0, tieWordEmbeddings: true,
};

export const TINY_LLAMA: LlamaConfig = {
  vocabSize: 257, hidden: 32, ffn: 48, layers: 2, heads: 4, kvHeads: 2, headDim: 8, maxPositions: 64, rmsNormEps: 1e-5,
  ropeTheta: 10000, ropeScaling: null, activation: 'silu', tieWordEmbeddings: false, attentionBias: false, mlpBias: false,
  bosTokenId: 256, eosTokenIds: [256],
};

function tensorShapes(family: 'gpt2' | 'llama', config: Gpt2Config | LlamaConfig): [string, number[], 'matrix' | 'gain' | 'bias'][] {
  const out: [string, number[], 'matrix' | 'gain' | 'bias'][] = [];
  if (family === 'gpt2') {
    const c = config as Gpt2Config, C = c.hidden, F = c.ffn;
    out.push(['transformer.wte.weight', [c.vocabSize, C], 'matrix'], ['transformer.wpe.weight', [c.maxPositions, C], 'matrix']);
    for (let i = 0; i < c.layers; i++) {
      const h = `transformer.h.${i}`;
      out.push(
        [`${h}.ln_1.weight`, [C], 'gain'], [`${h}.ln_1.bias`, [C], 'bias'],
        [`${h}.attn.c_attn.weight`, [C, 3 * C], 'matrix'], [`${h}.attn.c_attn.bias`, [3 * C], 'bias'],
        [`${h}.attn.c_proj.weight`, [C, C], 'matrix'], [`${h}.attn.c_proj.bias`, [C], 'bias'],
        [`${h}.ln_2.weight`, [C], 'gain'], [`${h}.ln_2.bias`, [C], 'bias'],
        [`${h}.mlp.c_fc.weight`, [C, F], 'matrix'], [`${h}.mlp.c_fc.bias`, [F], 'bias'],
        [`${h}.mlp.c_proj.weight`, [F, C], 'matrix'], [`${h}.mlp.c_proj.bias`, [C], 'bias'],
      );
    }
    out.push(['transformer.ln_f.weight', [C], 'gain'], ['transformer.ln_f.bias', [C], 'bias']);
    if (!c.tieWordEmbeddings) out.push(['lm_head.weight', [c.vocabSize, C], 'matrix']);
    return out;
  }
  const c = config as LlamaConfig, H = c.hidden, F = c.ffn, q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  out.push(['model.embed_tokens.weight', [c.vocabSize, H], 'matrix']);
  for (let i = 0; i < c.layers; i++) {
    const l = `model.layers.${i}`;
    if (c.variant === 'phi3') {
      // Phi-3: q/k/v and gate/up fused.
      out.push(
        [`${l}.input_layernorm.weight`, [H], 'gain'], [`${l}.self_attn.qkv_proj.weight`, [q + 2 * kv, H], 'matrix'],
        [`${l}.self_attn.o_proj.weight`, [H, q], 'matrix'], [`${l}.post_attention_layernorm.weight`, [H], 'gain'],
        [`${l}.mlp.gate_up_proj.weight`, [2 * F, H], 'matrix'], [`${l}.mlp.down_proj.weight`, [H, F], 'matrix'],
      );
      continue;
    }
    out.push(
      [`${l}.input_layernorm.weight`, [H], 'gain'],
      [`${l}.self_attn.q_proj.weight`, [q, H], 'matrix'], [`${l}.self_attn.k_proj.weight`, [kv, H], 'matrix'],
      [`${l}.self_attn.v_proj.weight`, [kv, H], 'matrix'], [`${l}.self_attn.o_proj.weight`, [H, q], 'matrix'],
      [`${l}.post_attention_layernorm.weight`, [H], 'gain'],
      [`${l}.mlp.gate_proj.weight`, [F, H], 'matrix'], [`${l}.mlp.up_proj.weight`, [F, H], 'matrix'], [`${l}.mlp.down_proj.weight`, [H, F], 'matrix'],
    );
    if (c.qkNorm) out.push([`${l}.self_attn.q_norm.weight`, [c.headDim], 'gain'], [`${l}.self_attn.k_norm.weight`, [c.headDim], 'gain']);
    if (c.attentionBias || c.qkvBias) out.push([`${l}.self_attn.q_proj.bias`, [q], 'bias'], [`${l}.self_attn.k_proj.bias`, [kv], 'bias'], [`${l}.self_attn.v_proj.bias`, [kv], 'bias']);
    if (c.attentionBias) out.push([`${l}.self_attn.o_proj.bias`, [H], 'bias']);
    if (c.mlpBias) out.push([`${l}.mlp.gate_proj.bias`, [F], 'bias'], [`${l}.mlp.up_proj.bias`, [F], 'bias'], [`${l}.mlp.down_proj.bias`, [H], 'bias']);
  }
  out.push(['model.norm.weight', [H], 'gain']);
  if (!c.tieWordEmbeddings) out.push(['lm_head.weight', [c.vocabSize, H], 'matrix']);
  return out;
}

/** Random weights (values rounded to `fileDType`, so the file holds them exactly). */
export function randomWeights(family: 'gpt2' | 'llama', config: Gpt2Config | LlamaConfig, seed: number, fileDType: 'F32' | 'BF16' | 'F16' = 'F32'): HostWeights {
  const rng = new Rng(seed);
  const dtype = fileDType === 'F32' ? 'f32' : fileDType === 'BF16' ? 'bf16' : 'f16';
  const weights: HostWeights = new Map();
  for (const [name, shape, kind] of tensorShapes(family, config)) {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = kind === 'matrix' ? rng.floats(n, 0.2) : kind === 'gain' ? rng.floats(n, 0.1, 1) : rng.floats(n, 0.05);
    weights.set(name, { shape, data: data.map((x) => roundToDType(x, dtype)) });
  }
  return weights;
}

/**
 * A writeModelFolder edit for constrained-decoding tests: the head's rows of the whitespace bytes (tab, newline,
 * space: byte-tokenizer ids) zeroed, so their logits are 0 where the others' spread around 0. With random weights a
 * greedy model otherwise fills every gap of a JSON answer with as much whitespace as the grammar allows.
 */
export function quietWhitespace(family: 'gpt2' | 'llama'): (weights: HostWeights) => void {
  return (weights) => {
    const rows = weights.get(family === 'gpt2' ? 'transformer.wte.weight' : 'lm_head.weight')!, C = rows.shape[1]!;
    for (const b of [0x09, 0x0a, 0x20]) rows.data.fill(0, b * C, (b + 1) * C);
  };
}

/**
 * A tiny Llama folder for constrained-decoding tests: the byte tokenizer's EOS (256) as bos / eos, whitespace
 * quietened (quietWhitespace), `template` as its chat template; `maxPositions` leaves room for JSON answers.
 */
export function writeQuietLlamaFolder(dir: string, maxPositions: number, seed: number, template: string): void {
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions }, seed, { generationConfig: { eos_token_id: 256, bos_token_id: 256 }, edit: quietWhitespace('llama') });
  const configPath = join(dir, 'tokenizer_config.json');
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), chat_template: template }));
}

export interface FolderOptions {
  readonly fileDType?: 'F32' | 'BF16' | 'F16';
  /** Split the tensors over two files with a model.safetensors.index.json. */
  readonly sharded?: boolean;
  /** Drop the "transformer." / "model." prefix, as files saved from GPT2Model / LlamaModel do. */
  readonly stripPrefix?: boolean;
  readonly generationConfig?: Record<string, unknown>;
  /** Tensors to leave out or replace (for error tests). */
  readonly edit?: (weights: HostWeights) => void;
}

/** Writes a model folder into `dir` (created); returns the weights written. */
export function writeModelFolder(dir: string, family: 'gpt2' | 'llama', config: Gpt2Config | LlamaConfig, seed: number, options: FolderOptions = {}): HostWeights {
  mkdirSync(dir, { recursive: true });
  const fileDType: SafetensorsDType = options.fileDType ?? 'F32';
  const weights = randomWeights(family, config, seed, options.fileDType);
  options.edit?.(weights);
  const configJson = family === 'gpt2' ? gpt2ConfigToJson(config as Gpt2Config) : llamaConfigToJson(config as LlamaConfig);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(configJson));
  const prefix = family === 'gpt2' ? 'transformer.' : 'model.';
  const entries = [...weights].map(([name, t]) => ({
    name: options.stripPrefix && name.startsWith(prefix) ? name.slice(prefix.length) : name,
    dtype: fileDType, shape: t.shape,
    bytes: fileDType === 'F32' ? new Uint8Array(t.data.buffer.slice(0)) : encodeFloats(t.data, fileDType === 'BF16' ? 'bf16' : 'f16'),
  }));
  writeCheckpointFiles(dir, entries, options.sharded ?? false);
  const tokenizer = createByteTokenizer();
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tokenizer.tokenizerJson()));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(tokenizer.tokenizerConfig()));
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify(options.generationConfig ?? { eos_token_id: 256, bos_token_id: 256 }));
  return weights;
}

/** Writes the tensors as model.safetensors, or as two shards with HF's index file when `sharded`. */
export function writeCheckpointFiles(dir: string, entries: Parameters<typeof writeSafetensors>[1], sharded: boolean): void {
  if (!sharded) {
    writeSafetensors(join(dir, 'model.safetensors'), entries);
    return;
  }
  const half = Math.ceil(entries.length / 2), weightMap: Record<string, string> = {};
  [entries.slice(0, half), entries.slice(half)].forEach((shard, i) => {
    const file = `model-0000${i + 1}-of-00002.safetensors`;
    writeSafetensors(join(dir, file), shard);
    for (const e of shard) weightMap[e.name] = file;
  });
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
}
