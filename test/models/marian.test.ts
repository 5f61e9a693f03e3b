import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MARIAN_PRESETS, marianConfigFromJson, marianConfigToJson, marianParameterCount } from '../../src/models/marian.js';
import { assertConfigError } from './config-error.js';
import { opusMtEnDeJson } from './hf-configs.js';

const SOURCE = 'opus-mt-en-de/config.json';

test("opus-mt-en-de's config.json reads as the marian-base preset", () => {
  const config = marianConfigFromJson(opusMtEnDeJson(), SOURCE);
  assert.deepEqual(config, MARIAN_PRESETS['marian-base']);
  assert.equal(config.activation, 'silu');
});

test('decoder_vocab_size defaults to vocab_size', () => {
  const json = opusMtEnDeJson();
  delete json['decoder_vocab_size'];
  assert.equal(marianConfigFromJson(json, SOURCE).decoderVocabSize, 58101);
});

test('presets round-trip through config.json text', () => {
  for (const [name, preset] of Object.entries(MARIAN_PRESETS)) {
    const json = JSON.parse(JSON.stringify(marianConfigToJson(preset))) as Record<string, unknown>;
    assert.deepEqual(marianConfigFromJson(json, `${name}/config.json`), preset, name);
  }
});

test('parameter counts: shared, separate and untied embeddings', () => {
  const base = MARIAN_PRESETS['marian-base']!;
  assert.equal(marianParameterCount(base), 73_886_208);
  const separate = { ...base, shareEncoderDecoderEmbeddings: false, decoderVocabSize: 32000 };
  assert.equal(marianParameterCount(separate), 73_886_208 + 32000 * 512);
  assert.equal(marianParameterCount({ ...separate, tieWordEmbeddings: false }), 73_886_208 + 2 * 32000 * 512);
});

test('errors name the file and the field', () => {
  assertConfigError(() => marianConfigFromJson({ ...opusMtEnDeJson(), normalize_before: true }, SOURCE), SOURCE, 'normalize_before',
    /post-LayerNorm/);
  assertConfigError(() => marianConfigFromJson({ ...opusMtEnDeJson(), decoder_vocab_size: 32000 }, SOURCE), SOURCE, 'decoder_vocab_size',
    /when share_encoder_decoder_embeddings is true/);
  assertConfigError(() => marianConfigFromJson({ ...opusMtEnDeJson(), decoder_attention_heads: 6 }, SOURCE), SOURCE,
    'decoder_attention_heads', /a divisor of d_model \(512\)/);
  assertConfigError(() => marianConfigFromJson({ ...opusMtEnDeJson(), encoder_ffn_dim: null }, SOURCE), SOURCE, 'encoder_ffn_dim', /is null/);
  assertConfigError(() => marianConfigFromJson({ ...opusMtEnDeJson(), pad_token_id: 58101 }, SOURCE), SOURCE, 'pad_token_id');
});
