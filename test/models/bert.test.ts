import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BERT_PRESETS, bertConfigFromJson, bertConfigToJson, bertParameterCount } from '../../src/models/bert.js';
import { assertConfigError } from './config-error.js';
import { bertBaseUncasedJson } from './hf-configs.js';

const SOURCE = 'bert-base-uncased/config.json';

test("bert-base-uncased's config.json reads as the bert-base preset", () => {
  const config = bertConfigFromJson(bertBaseUncasedJson(), SOURCE);
  assert.deepEqual(config, BERT_PRESETS['bert-base']);
  assert.equal(config.activation, 'gelu'); // erf, not the tanh approximation
});

test('presets round-trip through config.json text', () => {
  for (const [name, preset] of Object.entries(BERT_PRESETS)) {
    const json = JSON.parse(JSON.stringify(bertConfigToJson(preset))) as Record<string, unknown>;
    assert.deepEqual(bertConfigFromJson(json, `${name}/config.json`), preset, name);
  }
});

test('parameter counts match HF BertModel (with pooler) and BertForMaskedLM', () => {
  const base = BERT_PRESETS['bert-base']!;
  assert.equal(bertParameterCount(base), 109_482_240);
  assert.equal(bertParameterCount(base, 'pooler'), 109_482_240);
  assert.equal(bertParameterCount(base, 'masked-lm'), 109_514_298);
  assert.equal(bertParameterCount(BERT_PRESETS['bert-tiny']!), 4_385_920);
});

test('errors name the file and the field', () => {
  const without = bertBaseUncasedJson();
  delete without['intermediate_size'];
  assertConfigError(() => bertConfigFromJson(without, SOURCE), SOURCE, 'intermediate_size', /is missing/);
  assertConfigError(() => bertConfigFromJson({ ...bertBaseUncasedJson(), num_attention_heads: 7 }, SOURCE), SOURCE, 'num_attention_heads',
    /is 7; expected a divisor of hidden_size \(768\)/);
  assertConfigError(() => bertConfigFromJson({ ...bertBaseUncasedJson(), hidden_size: 768.5 }, SOURCE), SOURCE, 'hidden_size');
  assertConfigError(() => bertConfigFromJson({ ...bertBaseUncasedJson(), position_embedding_type: 'relative_key' }, SOURCE), SOURCE,
    'position_embedding_type', /expected one of "absolute"/);
  assertConfigError(() => bertConfigFromJson({ ...bertBaseUncasedJson(), pad_token_id: 30522 }, SOURCE), SOURCE, 'pad_token_id',
    /below vocab_size \(30522\)/);
});
