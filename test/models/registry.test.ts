import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { BERT_PRESETS } from '../../src/models/bert.js';
import { ConfigError } from '../../src/models/config-fields.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import {
  loadModelConfig, modelConfigFromJson, parameterCount, PRESET_NAMES, presetConfig, SUPPORTED_ARCHITECTURES, toHfJson,
} from '../../src/models/registry.js';
import { assertConfigError } from './config-error.js';
import { bertBaseUncasedJson, gpt2Json, llama32OneBJson, opusMtEnDeJson } from './hf-configs.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-model-configs-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function writeModelDir(name: string, json: unknown): string {
  const modelDir = join(dir, name);
  mkdirSync(modelDir);
  writeFileSync(join(modelDir, 'config.json'), JSON.stringify(json, null, 2));
  return modelDir;
}

test('loadModelConfig reads a model directory or its config.json and picks the family from model_type', () => {
  const cases = [['gpt2', gpt2Json()], ['bert', bertBaseUncasedJson()], ['llama', llama32OneBJson()], ['marian', opusMtEnDeJson()]] as const;
  for (const [family, json] of cases) {
    const modelDir = writeModelDir(family, json);
    assert.equal(loadModelConfig(modelDir).family, family);
    assert.deepEqual(loadModelConfig(join(modelDir, 'config.json')), loadModelConfig(modelDir));
  }
  // config.json's eos_token_id is read; the presets (random models for benchmarks) name no stop ids.
  assert.deepEqual(loadModelConfig(join(dir, 'gpt2')), { family: 'gpt2', config: { ...GPT2_PRESETS['gpt2-124M'], eosTokenIds: [50256] } });
});

test('without model_type, the family comes from architectures', () => {
  const bert = bertBaseUncasedJson();
  delete bert['model_type'];
  bert['architectures'] = ['BertModel'];
  assert.deepEqual(modelConfigFromJson(bert, 'bert/config.json'), { family: 'bert', config: BERT_PRESETS['bert-base'] });
  const llama = llama32OneBJson();
  delete llama['model_type'];
  assert.equal(modelConfigFromJson(llama, 'llama/config.json').family, 'llama');
});

test('Mistral and Qwen2 configs are the Llama family, by model_type or architectures', () => {
  for (const [type, architecture] of [['mistral', 'MistralForCausalLM'], ['qwen2', 'Qwen2ForCausalLM']] as const) {
    const json = { ...llama32OneBJson(), model_type: type, architectures: [architecture] };
    const model = modelConfigFromJson(json, `${type}/config.json`);
    assert.equal(model.family, 'llama');
    assert.equal(model.family === 'llama' && model.config.variant, type);
    delete (json as Record<string, unknown>)['model_type'];
    assert.equal(modelConfigFromJson(json, `${type}/config.json`).family, 'llama', `${type} by architectures`);
  }
});

test('unknown model types and architectures are errors listing the supported ones', () => {
  const source = 't5-small/config.json';
  assertConfigError(() => modelConfigFromJson({ model_type: 't5', architectures: ['T5ForConditionalGeneration'] }, source), source, 'model_type',
    /is "t5"; expected one of "gpt2", "bert", "llama", "marian", "mistral", "qwen2"/);
  const message = assertConfigError(() => modelConfigFromJson({ architectures: ['T5ForConditionalGeneration'] }, source), source, 'architectures');
  assert.match(message, /is \["T5ForConditionalGeneration"\]; expected a list naming one of GPT2LMHeadModel, /);
  for (const architecture of Object.keys(SUPPORTED_ARCHITECTURES)) assert.ok(message.includes(architecture), architecture);
  assertConfigError(() => modelConfigFromJson({ vocab_size: 10 }, source), source, 'architectures', /"model_type" and "architectures" are both missing/);
});

test('file problems name the file', () => {
  assert.throws(() => loadModelConfig(join(dir, 'nowhere')), { name: 'ConfigError', message: `${join(dir, 'nowhere')}: file not found` });
  const broken = join(dir, 'broken');
  mkdirSync(broken);
  writeFileSync(join(broken, 'config.json'), '{"model_type": "gpt2",}');
  assert.throws(() => loadModelConfig(broken), { name: 'ConfigError', message: new RegExp(`^${join(broken, 'config.json')}: not valid JSON`) });
  const gpt2 = gpt2Json();
  delete gpt2['n_layer'];
  const incomplete = writeModelDir('incomplete', gpt2);
  assertConfigError(() => loadModelConfig(incomplete), join(incomplete, 'config.json'), 'n_layer');
});

test('every preset round-trips through toHfJson and config.json text, and has a parameter count', () => {
  assert.deepEqual(PRESET_NAMES, ['gpt2-124M', 'gpt2-tiny', 'bert-base', 'bert-tiny', 'llama-1.2B', 'qwen3-0.6B', 'llama-8B', 'llama-tiny', 'marian-base']);
  for (const name of PRESET_NAMES) {
    const preset = presetConfig(name);
    const json = JSON.parse(JSON.stringify(toHfJson(preset))) as Record<string, unknown>;
    const parsed = modelConfigFromJson(json, `${name}/config.json`);
    // A GPT-2 config without eos_token_id reads as GPT2Config's default (50256 where the vocabulary has it).
    const expected = preset.family === 'gpt2' && preset.config.vocabSize > 50256 ? { ...preset, config: { ...preset.config, eosTokenIds: [50256] } } : preset;
    assert.deepEqual(parsed, expected, name);
    assert.ok(Number.isSafeInteger(parameterCount(preset)) && parameterCount(preset) > 0, name);
  }
  assert.equal(parameterCount(presetConfig('gpt2-124M')), 124_439_808);
  assert.equal(parameterCount(presetConfig('bert-base')), 109_482_240);
  assert.equal(parameterCount(presetConfig('llama-1.2B')), 1_235_814_400);
  assert.equal(parameterCount(presetConfig('qwen3-0.6B')), 596_049_920);
  assert.equal(parameterCount(presetConfig('marian-base')), 73_886_208);
});

test('presetConfig returns a copy, and an unknown name lists the presets', () => {
  const eosTokenIdsOf = (name: string): readonly number[] => {
    const preset = presetConfig(name);
    assert.ok(preset.family === 'llama');
    return preset.config.eosTokenIds;
  };
  (eosTokenIdsOf('llama-1.2B') as number[]).push(1);
  assert.deepEqual(eosTokenIdsOf('llama-1.2B'), [128001]);
  assert.throws(() => presetConfig('gpt3'), (error: unknown) =>
    error instanceof ConfigError && error.message === `unknown model preset "gpt3"; expected one of ${PRESET_NAMES.join(', ')}`);
});
