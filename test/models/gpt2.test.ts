import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GPT2_PRESETS, gpt2ConfigFromJson, gpt2ConfigToJson, gpt2ParameterCount } from '../../src/models/gpt2.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { assertConfigError } from './config-error.js';
import { gpt2Json } from './hf-configs.js';

const SOURCE = 'gpt2/config.json';

/** A parsed config without the stop ids (the presets, random models for benchmarks, name none). */
function withoutStopIds(config: Gpt2Config): Gpt2Config {
  const { eosTokenIds: _, ...rest } = config;
  return rest;
}

test("HF gpt2's config.json reads as the gpt2-124M preset", () => {
  assert.deepEqual(withoutStopIds(gpt2ConfigFromJson(gpt2Json(), SOURCE)), GPT2_PRESETS['gpt2-124M']);
});

test('eos_token_id: read from config.json; absent, GPT2Config\'s 50256 where the vocabulary has it; null, none', () => {
  const json = gpt2Json();
  assert.deepEqual(gpt2ConfigFromJson({ ...json, eos_token_id: 7 }, SOURCE).eosTokenIds, [7]);
  assert.deepEqual(gpt2ConfigFromJson({ ...json, eos_token_id: [7, 9] }, SOURCE).eosTokenIds, [7, 9]);
  delete json['eos_token_id'];
  assert.deepEqual(gpt2ConfigFromJson(json, SOURCE).eosTokenIds, [50256]);
  assert.equal(gpt2ConfigFromJson({ ...json, vocab_size: 257 }, SOURCE).eosTokenIds, undefined);
  assert.equal(gpt2ConfigFromJson({ ...json, eos_token_id: null }, SOURCE).eosTokenIds, undefined);
  assertConfigError(() => gpt2ConfigFromJson({ ...json, vocab_size: 257, eos_token_id: 300 }, SOURCE), SOURCE, 'eos_token_id', /below vocab_size \(257\)/);
  const written = gpt2ConfigToJson({ ...GPT2_PRESETS['gpt2-tiny']!, eosTokenIds: [3] });
  assert.equal(written['eos_token_id'], 3);
  assert.equal(gpt2ConfigToJson(GPT2_PRESETS['gpt2-tiny']!)['eos_token_id'], undefined);
});

test('n_inner, activation and tied embeddings', () => {
  const config = gpt2ConfigFromJson({ ...gpt2Json(), n_inner: null, activation_function: 'gelu', tie_word_embeddings: false }, SOURCE);
  assert.equal(config.ffn, 4 * 768);
  assert.equal(config.activation, 'gelu');
  assert.equal(config.tieWordEmbeddings, false);
  assert.equal(gpt2ConfigFromJson({ ...gpt2Json(), n_inner: 1000 }, SOURCE).ffn, 1000);
});

test('presets round-trip through config.json text', () => {
  for (const [name, preset] of Object.entries(GPT2_PRESETS)) {
    const json = JSON.parse(JSON.stringify(gpt2ConfigToJson(preset))) as Record<string, unknown>;
    assert.equal(json['activation_function'], 'gelu_new');
    assert.deepEqual(withoutStopIds(gpt2ConfigFromJson(json, `${name}/config.json`)), preset, name);
  }
});

test('parameter counts match HF GPT2LMHeadModel', () => {
  const gpt2 = GPT2_PRESETS['gpt2-124M']!;
  assert.equal(gpt2ParameterCount(gpt2), 124_439_808);
  assert.equal(gpt2ParameterCount({ ...gpt2, tieWordEmbeddings: false }), 124_439_808 + 50257 * 768);
  assert.equal(gpt2ParameterCount(GPT2_PRESETS['gpt2-tiny']!), 859_008);
});

test('errors name the file and the field', () => {
  const without = gpt2Json();
  delete without['n_embd'];
  assertConfigError(() => gpt2ConfigFromJson(without, SOURCE), SOURCE, 'n_embd', /is missing; expected a positive integer/);
  assertConfigError(() => gpt2ConfigFromJson({ ...gpt2Json(), n_head: '12' }, SOURCE), SOURCE, 'n_head', /is "12"; expected a positive integer/);
  assert.equal(
    assertConfigError(() => gpt2ConfigFromJson({ ...gpt2Json(), n_head: 5 }, SOURCE), SOURCE, 'n_head'),
    'gpt2/config.json: field "n_head" is 5; expected a divisor of n_embd (768)',
  );
  assertConfigError(() => gpt2ConfigFromJson({ ...gpt2Json(), model_type: 'bert' }, SOURCE), SOURCE, 'model_type');
  assertConfigError(() => gpt2ConfigFromJson({ ...gpt2Json(), resid_pdrop: 1.5 }, SOURCE), SOURCE, 'resid_pdrop', /probability/);
  assertConfigError(() => gpt2ConfigFromJson({ ...gpt2Json(), scale_attn_by_inverse_layer_idx: true }, SOURCE), SOURCE, 'scale_attn_by_inverse_layer_idx');
  assertConfigError(() => gpt2ConfigFromJson({ ...gpt2Json(), activation_function: 'mish' }, SOURCE), SOURCE, 'activation_function');
});
