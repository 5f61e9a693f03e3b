import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LLAMA_PRESETS, llamaConfigFromJson, llamaConfigToJson, llamaParameterCount, type LlamaConfig } from '../../src/models/llama.js';
import { assertConfigError } from './config-error.js';
import { llama32OneBJson } from './hf-configs.js';

const SOURCE = 'Llama-3.2-1B/config.json';
const read = (changes: Record<string, unknown>): LlamaConfig => llamaConfigFromJson({ ...llama32OneBJson(), ...changes }, SOURCE);
const roundTrip = (config: LlamaConfig): LlamaConfig =>
  llamaConfigFromJson(JSON.parse(JSON.stringify(llamaConfigToJson(config))) as Record<string, unknown>, 'round-trip/config.json');

test("Llama 3.2 1B's config.json reads as the llama-1.2B preset", () => {
  const config = llamaConfigFromJson(llama32OneBJson(), SOURCE);
  assert.deepEqual(config, LLAMA_PRESETS['llama-1.2B']);
  assert.deepEqual(config.ropeScaling, { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 });
});

test('defaults: kv heads = heads, head_dim = hidden / heads, untied, no scaling', () => {
  const json = llama32OneBJson();
  for (const field of ['num_key_value_heads', 'head_dim', 'tie_word_embeddings', 'rope_scaling', 'rope_theta']) delete json[field];
  const config = llamaConfigFromJson(json, SOURCE);
  assert.equal(config.kvHeads, 32);
  assert.equal(config.headDim, 64);
  assert.equal(config.tieWordEmbeddings, false);
  assert.equal(config.ropeScaling, null);
  assert.equal(config.ropeTheta, 10000);
  assert.equal(read({ head_dim: 128 }).headDim, 128); // heads · head_dim need not be hidden
});

test('eos_token_id may be a list (Llama 3 Instruct)', () => {
  const config = read({ eos_token_id: [128001, 128008, 128009] });
  assert.deepEqual(config.eosTokenIds, [128001, 128008, 128009]);
  assert.deepEqual(llamaConfigToJson(config)['eos_token_id'], [128001, 128008, 128009]);
  assert.equal(llamaConfigToJson(LLAMA_PRESETS['llama-1.2B']!)['eos_token_id'], 128001);
});

test('rope scaling: every type parses and round-trips; "type" is the older spelling of "rope_type"', () => {
  const cases: Record<string, unknown>[] = [
    { rope_type: 'linear', factor: 2 },
    { type: 'dynamic', factor: 4 },
    { rope_type: 'dynamic', factor: 4, original_max_position_embeddings: 4096 },
    { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32768 },
    { rope_type: 'yarn', factor: 4, beta_fast: 16, beta_slow: 2, attention_factor: 1.2 },
    { rope_type: 'default' },
  ];
  for (const rope_scaling of cases) {
    const config = read({ rope_scaling });
    assert.deepEqual(roundTrip(config), config, JSON.stringify(rope_scaling));
  }
  assert.deepEqual(read({ rope_scaling: { type: 'dynamic', factor: 4 } }).ropeScaling, { type: 'dynamic', factor: 4 });
  assert.deepEqual(read({ rope_scaling: cases[3] }).ropeScaling,
    { type: 'yarn', factor: 4, originalMaxPositions: 32768, betaFast: 32, betaSlow: 1 });
  assert.equal(read({ rope_scaling: { rope_type: 'default' } }).ropeScaling, null);
});

test('transformers 5 rope_parameters are read, and win over a missing or stale rope_theta', () => {
  const json = llama32OneBJson();
  const { rope_scaling: scaling } = json;
  delete json['rope_scaling'];
  delete json['rope_theta'];
  json['rope_parameters'] = { ...(scaling as object), rope_theta: 500000 };
  assert.deepEqual(llamaConfigFromJson(json, SOURCE), LLAMA_PRESETS['llama-1.2B']);
  const plain = read({ rope_scaling: null, rope_theta: 10000, rope_parameters: { rope_theta: 1e6 } });
  assert.equal(plain.ropeTheta, 1e6);
  assert.equal(plain.ropeScaling, null);
  assert.equal(read({ rope_scaling: null, rope_theta: 250000, rope_parameters: { rope_type: 'default' } }).ropeTheta, 250000);
});

test('presets round-trip through config.json text', () => {
  for (const [name, preset] of Object.entries(LLAMA_PRESETS)) assert.deepEqual(roundTrip(preset), preset, name);
});

test('parameter counts match HF LlamaForCausalLM', () => {
  assert.equal(llamaParameterCount(LLAMA_PRESETS['llama-1.2B']!), 1_235_814_400);
  assert.equal(llamaParameterCount(LLAMA_PRESETS['llama-8B']!), 8_030_261_248);
  const tiny = LLAMA_PRESETS['llama-tiny']!;
  const biases = { ...tiny, attentionBias: true, mlpBias: true };
  // q (4·32) + k, v (2·32 each) + o (128) per layer; gate, up (384 each) + down (128) per layer.
  assert.equal(llamaParameterCount(biases) - llamaParameterCount(tiny), 4 * ((128 + 64 + 64 + 128) + (384 + 384 + 128)));
});

test('errors name the file and the field', () => {
  assertConfigError(() => read({ num_key_value_heads: 5 }), SOURCE, 'num_key_value_heads', /is 5; expected a divisor of num_attention_heads \(32\)/);
  assertConfigError(() => read({ num_attention_heads: 24, head_dim: null }), SOURCE, 'num_attention_heads', /a divisor of hidden_size \(2048\)/);
  assertConfigError(() => read({ head_dim: 63 }), SOURCE, 'head_dim', /an even number/);
  assertConfigError(() => read({ rope_scaling: { rope_type: 'longrope', factor: 4 } }), SOURCE, 'rope_scaling.rope_type',
    /is "longrope"; expected one of "default", "linear", "dynamic", "llama3", "yarn"/);
  assertConfigError(() => read({ rope_scaling: { type: 'su', factor: 4 } }), SOURCE, 'rope_scaling.type', /is "su"/);
  assertConfigError(() => read({ rope_scaling: { factor: 4 } }), SOURCE, 'rope_scaling.rope_type', /is missing/);
  assertConfigError(() => read({ rope_scaling: { rope_type: 'llama3', factor: 8, high_freq_factor: 4, original_max_position_embeddings: 8192 } }),
    SOURCE, 'rope_scaling.low_freq_factor', /is missing/);
  assertConfigError(() => read({ rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 4, high_freq_factor: 4, original_max_position_embeddings: 8192 } }),
    SOURCE, 'rope_scaling.high_freq_factor', /above low_freq_factor \(4\)/);
  assertConfigError(() => read({ rope_scaling: { rope_type: 'linear', factor: 0.5 } }), SOURCE, 'rope_scaling.factor', />= 1/);
  assertConfigError(() => read({ rope_scaling: { rope_type: 'yarn', factor: 4, beta_fast: 1, beta_slow: 2 } }), SOURCE, 'rope_scaling.beta_fast');
  assertConfigError(() => read({ rope_scaling: 'llama3' }), SOURCE, 'rope_scaling', /expected a JSON object or null/);
  assertConfigError(() => read({ rope_parameters: { rope_type: 'mrope' } }), SOURCE, 'rope_parameters.rope_type');
  assertConfigError(() => read({ eos_token_id: [128001, 200000] }), SOURCE, 'eos_token_id', /below vocab_size \(128256\)/);
  assertConfigError(() => read({ rms_norm_eps: 0 }), SOURCE, 'rms_norm_eps', /a positive number/);
  assertConfigError(() => read({ model_type: 'gemma' }), SOURCE, 'model_type', /is "gemma"; expected one of "llama", "mistral", "qwen2", "qwen3"/);
});

test('Mistral and Qwen2 configs read as Llama variants: sliding windows, Qwen2\'s q/k/v biases; both round-trip', () => {
  // Mistral-7B-v0.1's config.json (its fields; the values of the published file).
  const mistral = {
    architectures: ['MistralForCausalLM'], model_type: 'mistral', vocab_size: 32000, hidden_size: 4096, intermediate_size: 14336,
    num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, max_position_embeddings: 32768, rms_norm_eps: 1e-5,
    rope_theta: 10000.0, sliding_window: 4096, hidden_act: 'silu', tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 2,
  };
  const m = llamaConfigFromJson(mistral, 'Mistral-7B-v0.1/config.json');
  assert.equal(m.variant, 'mistral');
  assert.equal(m.slidingWindow, 4096);
  assert.equal(m.maxPositions, 32768);
  assert.equal(m.headDim, 128);
  assert.equal(m.attentionBias, false);
  assert.deepEqual(roundTrip(m), m);
  assert.equal(llamaConfigToJson(m)['model_type'], 'mistral');
  assert.deepEqual(llamaConfigToJson(m)['architectures'], ['MistralForCausalLM']);
  // v0.2 and later: no window.
  assert.equal(llamaConfigFromJson({ ...mistral, sliding_window: null }, 'v0.3').slidingWindow, undefined);
  // Qwen2.5-0.5B's config.json: tied, q/k/v biases (no field says so), a window that is not used.
  const qwen = {
    architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', vocab_size: 151936, hidden_size: 896, intermediate_size: 4864,
    num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, max_position_embeddings: 32768, rms_norm_eps: 1e-6,
    rope_theta: 1000000.0, sliding_window: 32768, use_sliding_window: false, max_window_layers: 21, hidden_act: 'silu',
    tie_word_embeddings: true, bos_token_id: 151643, eos_token_id: 151643,
  };
  const q = llamaConfigFromJson(qwen, 'Qwen2.5-0.5B/config.json');
  assert.equal(q.variant, 'qwen2');
  assert.equal(q.qkvBias, true);
  assert.equal(q.attentionBias, false);
  assert.equal(q.slidingWindow, undefined);
  assert.equal(q.headDim, 64);
  assert.deepEqual(roundTrip(q), q);
  // Qwen2.5-0.5B has 494,032,768 parameters (HF's num_parameters()).
  assert.equal(llamaParameterCount(q), 494_032_768);
  assert.equal(llamaConfigFromJson({ ...qwen, use_sliding_window: true, sliding_window: 4096 }, 'q').slidingWindow, 4096);
});

test('Qwen3 configs read as a Llama variant with per-head q/k norms; head_dim defaults to 128; round-trips', () => {
  // Qwen3-0.6B's config.json (its fields and values): head_dim 128 beside hidden_size / heads = 64.
  const qwen3 = {
    architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', attention_bias: false, attention_dropout: 0.0, bos_token_id: 151643,
    eos_token_id: 151645, head_dim: 128, hidden_act: 'silu', hidden_size: 1024, initializer_range: 0.02, intermediate_size: 3072,
    max_position_embeddings: 40960, max_window_layers: 28, num_attention_heads: 16, num_hidden_layers: 28, num_key_value_heads: 8,
    rms_norm_eps: 1e-6, rope_scaling: null, rope_theta: 1000000, sliding_window: null, tie_word_embeddings: true, torch_dtype: 'bfloat16',
    use_cache: true, use_sliding_window: false, vocab_size: 151936,
  };
  const q = llamaConfigFromJson(qwen3, 'Qwen3-0.6B/config.json');
  assert.equal(q.variant, 'qwen3');
  assert.equal(q.qkNorm, true);
  assert.equal(q.qkvBias, undefined);
  assert.equal(q.attentionBias, false);
  assert.equal(q.headDim, 128);
  assert.equal(q.slidingWindow, undefined);
  assert.deepEqual(q.eosTokenIds, [151645]);
  assert.deepEqual(roundTrip(q), q);
  // HF's Qwen3ForCausalLM(config).num_parameters() for this config (transformers 5.18, meta device).
  assert.equal(llamaParameterCount(q), 596_049_920);
  // Qwen3Config's default head_dim is 128 whatever hidden_size / num_attention_heads is.
  const { head_dim: _, ...noHeadDim } = qwen3;
  assert.equal(llamaConfigFromJson({ ...noHeadDim, hidden_size: 100, num_attention_heads: 3, num_key_value_heads: 1 }, 'q').headDim, 128);
  assert.equal(llamaConfigFromJson({ ...qwen3, attention_bias: true }, 'q').attentionBias, true);
  assert.equal(llamaConfigFromJson({ ...qwen3, use_sliding_window: true, sliding_window: 4096 }, 'q').slidingWindow, 4096);
});

test('Phi-3 configs read as a Llama variant with fused projections; LongRoPE and partial rotary factors are refused by name', () => {
  // Phi-3-mini-4k-instruct's config.json (its fields and values).
  const phi3 = {
    architectures: ['Phi3ForCausalLM'], model_type: 'phi3', vocab_size: 32064, hidden_size: 3072, intermediate_size: 8192,
    num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 32, max_position_embeddings: 4096,
    original_max_position_embeddings: 4096, rope_theta: 10000.0, rope_scaling: null, sliding_window: 2047, rms_norm_eps: 1e-5,
    hidden_act: 'silu', tie_word_embeddings: false, bos_token_id: 1, eos_token_id: 32000, pad_token_id: 32000,
    attention_dropout: 0.0, embd_pdrop: 0.0, resid_pdrop: 0.0,
  };
  const c = llamaConfigFromJson(phi3, 'Phi-3-mini-4k-instruct/config.json');
  assert.equal(c.variant, 'phi3');
  assert.equal(c.slidingWindow, 2047);
  assert.equal(c.attentionBias, false);
  assert.equal(c.mlpBias, false);
  assert.deepEqual(roundTrip(c), c);
  assert.deepEqual(llamaConfigToJson(c)['architectures'], ['Phi3ForCausalLM']);
  // 3,821,079,552 parameters (HF's num_parameters()).
  assert.equal(llamaParameterCount(c), 3_821_079_552);
  assertConfigError(() => llamaConfigFromJson({ ...phi3, rope_scaling: { type: 'longrope', long_factor: [1], short_factor: [1] } }, 'Phi-3-mini-128k/config.json'),
    'Phi-3-mini-128k/config.json', 'rope_scaling.type', /is "longrope"/);
  assertConfigError(() => llamaConfigFromJson({ ...phi3, partial_rotary_factor: 0.75 }, 'Phi-4-mini/config.json'), 'Phi-4-mini/config.json', 'partial_rotary_factor', /a partial rotary factor is not supported/);
});
