// The model families we implement, and the one place that picks a family for a config.json or a preset
// name. A config names its family by model_type (the HF config class) or, in files without one, by
// architectures (the HF model classes it was saved from).

import { statSync } from 'node:fs';
import { join } from 'node:path';
import { BERT_PRESETS, bertConfigFromJson, bertConfigToJson, bertParameterCount, type BertConfig } from './bert.js';
import { ConfigError, ConfigFields, describeValue, readConfigFile, type JsonObject } from './config-fields.js';
import { GPT2_PRESETS, gpt2ConfigFromJson, gpt2ConfigToJson, gpt2ParameterCount, type Gpt2Config } from './gpt2.js';
import { LLAMA_PRESETS, llamaConfigFromJson, llamaConfigToJson, llamaParameterCount, type LlamaConfig } from './llama.js';
import { MARIAN_PRESETS, marianConfigFromJson, marianConfigToJson, marianParameterCount, type MarianConfig } from './marian.js';

export type ModelConfig =
  | { readonly family: 'gpt2'; readonly config: Gpt2Config }
  | { readonly family: 'bert'; readonly config: BertConfig }
  | { readonly family: 'llama'; readonly config: LlamaConfig }
  | { readonly family: 'marian'; readonly config: MarianConfig };

export type ModelFamily = ModelConfig['family'];

export const MODEL_FAMILIES: readonly ModelFamily[] = ['gpt2', 'bert', 'llama', 'marian'];

/** HF model classes whose weights our families load. */
export const SUPPORTED_ARCHITECTURES: Readonly<Record<string, ModelFamily>> = {
  GPT2LMHeadModel: 'gpt2',
  GPT2Model: 'gpt2',
  BertForMaskedLM: 'bert',
  BertModel: 'bert',
  RobertaForMaskedLM: 'bert',
  RobertaModel: 'bert',
  XLMRobertaForMaskedLM: 'bert',
  XLMRobertaModel: 'bert',
  MPNetForMaskedLM: 'bert',
  MPNetModel: 'bert',
  DistilBertForMaskedLM: 'bert',
  DistilBertModel: 'bert',
  LlamaForCausalLM: 'llama',
  LlamaModel: 'llama',
  MistralForCausalLM: 'llama',
  Qwen2ForCausalLM: 'llama',
  Qwen3ForCausalLM: 'llama',
  Phi3ForCausalLM: 'llama',
  MarianMTModel: 'marian',
};

/** Reads `dirOrFile` (a model directory holding config.json, or the file itself). */
export function loadModelConfig(dirOrFile: string): ModelConfig {
  const path = isDirectory(dirOrFile) ? join(dirOrFile, 'config.json') : dirOrFile;
  return modelConfigFromJson(readConfigFile(path), path);
}

export function modelConfigFromJson(json: JsonObject, source: string): ModelConfig {
  const family = familyOf(new ConfigFields(json, source));
  switch (family) {
    case 'gpt2': return { family, config: gpt2ConfigFromJson(json, source) };
    case 'bert': return { family, config: bertConfigFromJson(json, source) };
    case 'llama': return { family, config: llamaConfigFromJson(json, source) };
    case 'marian': return { family, config: marianConfigFromJson(json, source) };
  }
}

function familyOf(fields: ConfigFields): ModelFamily {
  if (fields.has('model_type')) {
    // Mistral, Qwen2, Qwen3 and Phi-3 read as Llama variants (models/llama.ts), RoBERTa, XLM-RoBERTa, MPNet and DistilBERT as BERT (models/bert.ts).
    const type = fields.oneOf('model_type', [...MODEL_FAMILIES, 'mistral', 'qwen2', 'qwen3', 'phi3', 'roberta', 'xlm-roberta', 'mpnet', 'distilbert'] as const);
    if (type === 'roberta' || type === 'xlm-roberta' || type === 'mpnet' || type === 'distilbert') return 'bert';
    return type === 'mistral' || type === 'qwen2' || type === 'qwen3' || type === 'phi3' ? 'llama' : type;
  }
  const architectures = fields.value('architectures');
  const expected = `a list naming one of ${Object.keys(SUPPORTED_ARCHITECTURES).join(', ')}`;
  if (!Array.isArray(architectures)) {
    throw new ConfigError(
      `${fields.source}: fields "model_type" and "architectures" are both missing; expected model_type one of ` +
        `${MODEL_FAMILIES.map((f) => JSON.stringify(f)).join(', ')}, or architectures ${expected}`,
    );
  }
  for (const architecture of architectures) {
    if (typeof architecture === 'string' && Object.hasOwn(SUPPORTED_ARCHITECTURES, architecture)) return SUPPORTED_ARCHITECTURES[architecture];
  }
  return fields.fail('architectures', expected);
}

/** The config.json fields for `model` (what HF's config class for its family reads). */
export function toHfJson(model: ModelConfig): JsonObject {
  switch (model.family) {
    case 'gpt2': return gpt2ConfigToJson(model.config);
    case 'bert': return bertConfigToJson(model.config);
    case 'llama': return llamaConfigToJson(model.config);
    case 'marian': return marianConfigToJson(model.config);
  }
}

const PRESETS: ReadonlyMap<string, ModelConfig> = new Map<string, ModelConfig>([
  ...Object.entries(GPT2_PRESETS).map(([name, config]) => [name, { family: 'gpt2', config }] as const),
  ...Object.entries(BERT_PRESETS).map(([name, config]) => [name, { family: 'bert', config }] as const),
  ...Object.entries(LLAMA_PRESETS).map(([name, config]) => [name, { family: 'llama', config }] as const),
  ...Object.entries(MARIAN_PRESETS).map(([name, config]) => [name, { family: 'marian', config }] as const),
]);

export const PRESET_NAMES: readonly string[] = [...PRESETS.keys()];

/** A fresh copy of the named preset (callers may not change the shared one through it). */
export function presetConfig(name: string): ModelConfig {
  const preset = PRESETS.get(name);
  if (preset === undefined) throw new ConfigError(`unknown model preset ${describeValue(name)}; expected one of ${PRESET_NAMES.join(', ')}`);
  return structuredClone(preset);
}

/**
 * Exact parameter count of the family's standard HF model (what MFU and weight-bandwidth floors need):
 * GPT2LMHeadModel, BertModel with its pooler (no MLM head: bertParameterCount(config, 'masked-lm') counts
 * BertForMaskedLM), LlamaForCausalLM, MarianMTModel (trainable parameters). LM heads count only when untied.
 */
export function parameterCount(model: ModelConfig): number {
  switch (model.family) {
    case 'gpt2': return gpt2ParameterCount(model.config);
    case 'bert': return bertParameterCount(model.config);
    case 'llama': return llamaParameterCount(model.config);
    case 'marian': return marianParameterCount(model.config);
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false; // a missing path is reported by readConfigFile, with its name
  }
}
