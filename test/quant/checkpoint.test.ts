// Quantized checkpoints: our layout round-trips exactly (INT4 and INT8) and is written atomically;
// Hugging Face GPTQ and AWQ directories load; the applied model's quantized ops compute what the
// float path computes with the dequantized weights.

import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { encodeFloats } from '../../src/dtype.js';
import type { TensorToWrite } from '../../src/io/safetensors.js';
import { SafetensorsReader, writeSafetensors } from '../../src/io/safetensors.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS, gpt2ConfigToJson } from '../../src/models/gpt2.js';
import { Gpt2Model, gpt2ParameterSpecs } from '../../src/models/gpt2-model.js';
import { StepExecutor } from '../../src/quant/calibration.js';
import { loadQuantizedModel, saveQuantizedModel } from '../../src/quant/checkpoint.js';
import { applyQuantizedModel } from '../../src/quant/model.js';
import type { QuantizedModel } from '../../src/quant/model.js';
import { quantizeGpt2 } from '../../src/quant/quantize.js';
import { Rng } from '../../src/testing/random.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-quant-ckpt-'));
after(() => rmSync(root, { recursive: true, force: true }));

const CONFIG: Gpt2Config = { ...GPT2_PRESETS['gpt2-tiny']!, hidden: 64, heads: 2, layers: 2, ffn: 128, maxPositions: 32 };
const backend = new CpuBackend();

function randomModel(seed: number): Gpt2Model {
  const model = new Gpt2Model(backend, CONFIG, 'f32');
  model.params.initialize(BigInt(seed));
  // Non-trivial LayerNorms and biases, so smoothing and the bias handling are exercised.
  const rng = new Rng(seed);
  for (const name of model.params.names.filter((n) => /(ln_\d|bias)/.test(n))) {
    const t = model.params.param(name).value;
    backend.upload(t, rng.floats(t.numel, 0.1, name.endsWith('ln_1.weight') || name.endsWith('ln_2.weight') ? 1 : 0));
  }
  return model;
}

function assertSameModel(a: QuantizedModel, b: QuantizedModel): void {
  assert.deepEqual(b.info, a.info);
  assert.deepEqual([...b.modules.keys()].sort(), [...a.modules.keys()].sort());
  for (const [prefix, w] of a.modules) assert.deepEqual(b.modules.get(prefix), w, prefix);
  assert.deepEqual([...b.floats.keys()].sort(), [...a.floats.keys()].sort());
  for (const [name, t] of a.floats) assert.deepEqual(Array.from(b.floats.get(name)!.data), Array.from(t.data), name);
}

test('INT4 and INT8 models round-trip through our checkpoint layout, written atomically', () => {
  const model = randomModel(1);
  const windows = [new Int32Array(16).map((_, i) => (i * 37) % 257), new Int32Array(16).map((_, i) => (i * 11 + 5) % 257)];
  for (const [name, q] of [
    ['int4', quantizeGpt2(model, { bits: 4, method: 'rtn', groupSize: 32 })],
    ['int8', quantizeGpt2(model, { bits: 8, method: 'smoothquant', calibration: { windows, batchSize: 2 } })],
  ] as const) {
    const dir = join(root, name);
    saveQuantizedModel(dir, q, { config: { family: 'gpt2', config: CONFIG }, source: 'test' });
    saveQuantizedModel(dir, q, { config: { family: 'gpt2', config: CONFIG }, source: 'test' }); // replacing an existing directory
    assert.deepEqual(readdirSync(root).filter((f) => f.includes('.tmp-') || f.includes('.old-')), []);
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.equal((config['quantization_config'] as Record<string, unknown>)['quant_method'], 'fuseformer');
    const reader = SafetensorsReader.open(join(dir, 'model.safetensors'));
    assert.equal(reader.metadata['format'], 'fuseformer-quant');
    assert.equal(reader.info('transformer.h.1.mlp.c_proj.qweight').dtype, name === 'int4' ? 'I32' : 'I8');
    assert.equal(reader.has('transformer.h.1.mlp.c_proj.weight'), false);
    reader.close();
    const loaded = loadQuantizedModel(dir);
    assert.equal(loaded.layout, 'fuseformer');
    if (name === 'int4') {
      // A group size edited into config.json that the layers cannot take is named, not read into odd shapes.
      const edited = { ...config, quantization_config: { ...(config['quantization_config'] as object), group_size: 0 } };
      writeFileSync(join(dir, 'config.json'), JSON.stringify(edited));
      assert.throws(() => loadQuantizedModel(dir), /group_size is 0; INT4 groups must be a positive multiple of 32/);
      writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    }
    assert.deepEqual(loaded.model, { family: 'gpt2', config: CONFIG });
    assertSameModel(q, loaded.quantized);
  }
  model.params.free();
});

test('the quantized ops inside the model compute what the float path computes with the dequantized weights', () => {
  const model = randomModel(2);
  const executor = new StepExecutor(backend);
  const tokens = backend.fromArray(new Int32Array(2 * 16).map((_, i) => (i * 29) % 257), [2, 16], 'i32');
  const logits = backend.empty([32, model.logitsWidth], 'f32');
  const run = () => { executor.run((ctx) => model.logitsStep(ctx, tokens, logits)); return backend.download(logits) as Float32Array; };
  const floatLogits = run();
  for (const q of [quantizeGpt2(model, { bits: 4, method: 'rtn', groupSize: 64 }), quantizeGpt2(model, { bits: 4, method: 'rtn', groupSize: 32 })]) {
    const applied = applyQuantizedModel(model, q);
    const quantized = run();
    applied.detach();
    const dequantized = run(); // the float GEMMs on the dequantized weights left in the parameters
    let diff = 0, norm = 0, change = 0;
    for (let i = 0; i < quantized.length; i++) {
      diff += (quantized[i]! - dequantized[i]!) ** 2;
      norm += dequantized[i]! ** 2;
      change += (quantized[i]! - floatLogits[i]!) ** 2;
    }
    assert.ok(Math.sqrt(diff / norm) < 1e-5, `quantized vs dequantized: ${Math.sqrt(diff / norm)}`);
    assert.ok(Math.sqrt(change / norm) > 1e-4, 'quantization changed the logits (the quantized weights are really used)');
  }
  executor.dispose();
  model.params.free();
});

/** A Hugging Face-style quantized GPT-2 directory: float tensors without the "transformer." prefix, modules packed by `pack`. */
function writeHfDirectory(dir: string, quantization: Record<string, unknown>, pack: (prefix: string, K: number, N: number, rng: Rng) => TensorToWrite[]): void {
  const rng = new Rng(9);
  const tensors: TensorToWrite[] = [];
  const modules = new Set<string>();
  for (let i = 0; i < CONFIG.layers; i++) {
    for (const [m, K, N] of [['attn.c_attn', 64, 192], ['attn.c_proj', 64, 64], ['mlp.c_fc', 64, 128], ['mlp.c_proj', 128, 64]] as const) {
      const prefix = `h.${i}.${m}`;
      modules.add(`transformer.${prefix}.weight`);
      tensors.push(...pack(prefix, K, N, rng));
    }
  }
  for (const spec of gpt2ParameterSpecs(CONFIG)) {
    if (modules.has(spec.name)) continue;
    const shape = spec.fileShape ?? spec.shape;
    tensors.push({ name: spec.name.replace(/^transformer\./, ''), dtype: 'F16', shape, bytes: encodeFloats(rng.floats(shape.reduce((a, b) => a * b, 1), 0.02), 'f16') });
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'pt' });
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...gpt2ConfigToJson(CONFIG), quantization_config: quantization }));
}

const words = (rng: Rng, n: number) => Int32Array.from({ length: n }, () => Math.floor(rng.next() * 2 ** 32) | 0);
const scalesOf = (rng: Rng, n: number) => encodeFloats(Array.from({ length: n }, () => (1 + Math.floor(rng.next() * 100)) / 4096), 'f16');
const bytes = (a: Int32Array) => new Uint8Array(a.buffer);

test('Hugging Face GPTQ and AWQ directories load; their packed values land in our layout', () => {
  const G = 32;
  const gptqDir = join(root, 'gptq');
  freshDir(gptqDir);
  writeHfDirectory(gptqDir, { quant_method: 'gptq', bits: 4, group_size: G, desc_act: false, sym: true, checkpoint_format: 'gptq' }, (p, K, N, rng) => [
    { name: `${p}.qweight`, dtype: 'I32', shape: [K / 8, N], bytes: bytes(words(rng, (K / 8) * N)) },
    { name: `${p}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: bytes(new Int32Array((K / G) * (N / 8)).fill(0x77777777)) },
    { name: `${p}.scales`, dtype: 'F16', shape: [K / G, N], bytes: scalesOf(rng, (K / G) * N) },
    { name: `${p}.g_idx`, dtype: 'I32', shape: [K], bytes: bytes(Int32Array.from({ length: K }, (_, k) => Math.floor(k / G))) },
  ]);
  const gptq = loadQuantizedModel(gptqDir);
  assert.equal(gptq.layout, 'gptq');
  assert.equal(gptq.quantized.modules.size, 4 * CONFIG.layers);
  const w = gptq.quantized.modules.get('transformer.h.1.mlp.c_fc')!;
  assert.equal(w.kind, 'int4');
  if (w.kind === 'int4') assert.ok(w.zeros.every((z) => z === 8), 'v1 zeros are stored minus one: 7 → 8');
  assert.ok(gptq.quantized.floats.has('transformer.h.1.mlp.c_fc.bias'));
  assert.ok(gptq.quantized.floats.has('transformer.wte.weight'));

  const awqDir = join(root, 'awq');
  freshDir(awqDir);
  writeHfDirectory(awqDir, { quant_method: 'awq', bits: 4, group_size: G, zero_point: true, version: 'gemm' }, (p, K, N, rng) => [
    { name: `${p}.qweight`, dtype: 'I32', shape: [K, N / 8], bytes: bytes(words(rng, K * (N / 8))) },
    { name: `${p}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: bytes(words(rng, (K / G) * (N / 8))) },
    { name: `${p}.scales`, dtype: 'F16', shape: [K / G, N], bytes: scalesOf(rng, (K / G) * N) },
  ]);
  const awq = loadQuantizedModel(awqDir);
  assert.equal(awq.layout, 'awq');
  // The imported model runs: apply it and compute logits.
  const model = new Gpt2Model(backend, CONFIG, 'f32');
  const applied = applyQuantizedModel(model, awq.quantized);
  const executor = new StepExecutor(backend);
  const tokens = backend.fromArray(new Int32Array(8).fill(3), [1, 8], 'i32');
  const logits = backend.empty([8, model.logitsWidth], 'f32');
  executor.run((ctx) => model.logitsStep(ctx, tokens, logits));
  assert.ok((backend.download(logits) as Float32Array).every(Number.isFinite));
  applied.detach();
  executor.dispose();
  model.params.free();
});

test('an act-order GPTQ GPT-2 runs in the training model: its quantized products gather their inputs, and match the float path on the dequantized weights', () => {
  const G = 32, dir = join(root, 'gptq-act-order');
  freshDir(dir);
  writeHfDirectory(dir, { quant_method: 'gptq', bits: 4, group_size: G, desc_act: true, sym: false, checkpoint_format: 'gptq_v2' }, (p, K, N, rng) => {
    const order = rng.permutation(K);
    const gIdx = new Int32Array(K);
    order.forEach((k, position) => { gIdx[k] = Math.floor(position / G); });
    return [
      { name: `${p}.qweight`, dtype: 'I32', shape: [K / 8, N], bytes: bytes(words(rng, (K / 8) * N)) },
      { name: `${p}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: bytes(words(rng, (K / G) * (N / 8))) },
      { name: `${p}.scales`, dtype: 'F16', shape: [K / G, N], bytes: scalesOf(rng, (K / G) * N) },
      { name: `${p}.g_idx`, dtype: 'I32', shape: [K], bytes: bytes(gIdx) },
    ];
  });
  const { quantized } = loadQuantizedModel(dir);
  assert.ok([...quantized.modules.values()].every((w) => w.kind === 'int4' && w.inputOrder));
  const model = new Gpt2Model(backend, CONFIG, 'f32');
  const executor = new StepExecutor(backend);
  const tokens = backend.fromArray(Int32Array.from({ length: 8 }, (_, i) => 3 + 11 * i), [1, 8], 'i32');
  const logits = backend.empty([8, model.logitsWidth], 'f32');
  const run = () => { executor.run((ctx) => model.logitsStep(ctx, tokens, logits)); return Float32Array.from(backend.download(logits) as Float32Array); };
  try {
    const applied = applyQuantizedModel(model, quantized);
    const ours = run();
    applied.detach();  // the float slots keep the dequantized weights
    const float = run();
    let diff = 0, norm = 0;
    for (let i = 0; i < float.length; i++) { diff += (ours[i]! - float[i]!) ** 2; norm += float[i]! ** 2; }
    assert.ok(Math.sqrt(diff / norm) < 1e-5, `rel err ${Math.sqrt(diff / norm)}`);
  } finally {
    executor.dispose();
    model.params.free();
  }
});

test('unsupported quantized directories are refused with the reason', () => {
  const dir = join(root, 'bad');
  freshDir(dir);
  writeHfDirectory(dir, { quant_method: 'gptq', bits: 8, group_size: 32 }, () => []);
  assert.throws(() => loadQuantizedModel(dir), /only 4-bit GPTQ checkpoints are read, this one has 8 bits/);
  writeHfDirectory(dir, { quant_method: 'awq', bits: 4, group_size: 32, version: 'gemv' }, () => []);
  assert.throws(() => loadQuantizedModel(dir), /AWQ version 'gemv' is not read/);
  writeHfDirectory(dir, { quant_method: 'bitsandbytes' }, () => []);
  assert.throws(() => loadQuantizedModel(dir), /quant_method 'bitsandbytes' is not supported/);
  writeHfDirectory(dir, { quant_method: 'gptq', bits: 4, group_size: 48 }, () => []);
  assert.throws(() => loadQuantizedModel(dir), /quantization_config\.group_size is 48; INT4 groups must be a positive multiple of 32/);
  writeHfDirectory(dir, { quant_method: 'gptq', group_size: 32 }, () => []);
  assert.throws(() => loadQuantizedModel(dir), /quantization_config\.bits must be an integer, and it is missing/);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(gpt2ConfigToJson(CONFIG)));
  assert.throws(() => loadQuantizedModel(dir), /no quantization_config/);
  assert.ok(existsSync(join(dir, 'model.safetensors')));
});

function freshDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
}
