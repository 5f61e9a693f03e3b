// Quantized Llama-family models on the CPU backend: Hugging Face GPTQ and AWQ directories (q/k/v and
// gate/up as separate modules; Phi-3's fused ones; Qwen2's float biases; act-order GPTQ) load and run
// stacked, without float copies of the quantized projections; `quantizeDecoder` (the inference engine's
// quantizer) writes directories that load back, matches the GPT-2 training-model quantizer where both
// apply (round-to-nearest), leaves the model as it was; AWQ and GPTQ beat round-to-nearest on a model
// whose norms make a few input channels large (what they are for), and SmoothQuant's folds keep the
// float function.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { encodeFloats } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { dropQuantization, loadQuantizedDecoderModel, quantizeDecoderModel } from '../../src/infer/quantized.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import type { TensorToWrite } from '../../src/io/safetensors.js';
import { writeSafetensors } from '../../src/io/safetensors.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { llamaConfigToJson } from '../../src/models/llama.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import { loadHfWeights } from '../../src/models/hf-weights.js';
import { calibrationWindows } from '../../src/quant/calibration.js';
import { loadQuantizedModel, quantizableModules, saveQuantizedModel } from '../../src/quant/checkpoint.js';
import { evaluateDecoderPerplexity, quantizeDecoder } from '../../src/quant/decoder-quantize.js';
import type { QuantizedModel } from '../../src/quant/model.js';
import type { QuantizeOptions } from '../../src/quant/quantize.js';
import { quantizeGpt2 } from '../../src/quant/quantize.js';
import { corpusSplit } from '../../src/quant/text.js';
import { dequantizeHostWeight } from '../../src/quant/weights.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_GPT2, TINY_LLAMA, randomWeights, writeModelFolder } from '../infer/hf-folder.js';
import type { HostWeights } from '../infer/hf-folder.js';
import { llamaReferenceLogits } from '../infer/reference-forward.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-decoder-quant-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();

// Input widths multiples of 32 (INT4 groups of 32).
const LLAMA: LlamaConfig = { ...TINY_LLAMA, ffn: 64 };
const PROMPT = [5, 17, 42, 99, 3, 250, 7, 64, 12, 200];

/** ‖a − b‖ / ‖b‖ over all positions. */
function relError(a: readonly ArrayLike<number>[], b: readonly ArrayLike<number>[]): number {
  let diff = 0, norm = 0;
  b.forEach((row, i) => {
    for (let j = 0; j < row.length; j++) { diff += (a[i]![j]! - row[j]!) ** 2; norm += row[j]! ** 2; }
  });
  return Math.sqrt(diff / norm);
}

/** The engine's logits for one prompt, a row per position. */
function engineLogits(model: DecoderModel, tokens: readonly number[]): Float32Array[] {
  const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 32 });
  try {
    const all = engine.promptLogits(tokens), V = model.vocabSize;
    return tokens.map((_, i) => all.slice(i * V, (i + 1) * V));
  } finally {
    engine.dispose();
  }
}

const words = (rng: Rng, n: number) => Int32Array.from({ length: n }, () => Math.floor(rng.next() * 2 ** 32) | 0);
const scalesOf = (rng: Rng, n: number) => encodeFloats(Array.from({ length: n }, () => (1 + Math.floor(rng.next() * 100)) / 4096), 'f16');
const bytes = (a: Int32Array) => new Uint8Array(a.buffer);

/**
 * A Hugging Face GPTQ or AWQ directory of a Llama config: random packed modules, the float tensors of a
 * random model; modules named in `float` keep a float weight instead (AWQ's modules_to_not_convert).
 */
function writeHfLlama(dir: string, method: 'gptq' | 'awq', config: LlamaConfig, G: number, float: readonly string[] = [], gIdx?: (prefix: string, K: number) => Int32Array): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const rng = new Rng(3);
  const weights = randomWeights('llama', config, 4);
  const modules = quantizableModules({ family: 'llama', config });
  const tensors: TensorToWrite[] = [];
  for (const [name, t] of weights) {
    const prefix = name.replace(/\.weight$/, '');
    if (modules.has(prefix) && !float.some((f) => prefix.endsWith(f))) continue;
    tensors.push({ name, dtype: 'F32', shape: t.shape, bytes: new Uint8Array(t.data.buffer.slice(0)) });
  }
  for (const [p, [K, N]] of modules) {
    if (float.some((f) => p.endsWith(f))) continue;
    if (method === 'gptq') {
      tensors.push(
        { name: `${p}.qweight`, dtype: 'I32', shape: [K / 8, N], bytes: bytes(words(rng, (K / 8) * N)) },
        { name: `${p}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: bytes(words(rng, (K / G) * (N / 8))) },
        { name: `${p}.scales`, dtype: 'F16', shape: [K / G, N], bytes: scalesOf(rng, (K / G) * N) },
        { name: `${p}.g_idx`, dtype: 'I32', shape: [K], bytes: bytes(gIdx ? gIdx(p, K) : Int32Array.from({ length: K }, (_, k) => Math.floor(k / G))) },
      );
    } else {
      tensors.push(
        { name: `${p}.qweight`, dtype: 'I32', shape: [K, N / 8], bytes: bytes(words(rng, K * (N / 8))) },
        { name: `${p}.qzeros`, dtype: 'I32', shape: [K / G, N / 8], bytes: bytes(words(rng, (K / G) * (N / 8))) },
        { name: `${p}.scales`, dtype: 'F16', shape: [K / G, N], bytes: scalesOf(rng, (K / G) * N) },
      );
    }
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors);
  const quantization = method === 'gptq'
    ? { quant_method: 'gptq', bits: 4, group_size: G, desc_act: gIdx !== undefined, sym: false, checkpoint_format: 'gptq_v2' }
    : { quant_method: 'awq', bits: 4, group_size: G, zero_point: true, version: 'gemm', ...(float.length ? { modules_to_not_convert: float } : {}) };
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...llamaConfigToJson(config), quantization_config: quantization }));
}

/** The float weights a quantized directory stands for: its floats plus every module dequantized ([out, in], Llama's file layout). */
function denseWeights(q: QuantizedModel): HostWeights {
  const weights: HostWeights = new Map([...q.floats].map(([n, t]) => [n, { shape: [...t.shape], data: t.data }]));
  for (const [prefix, w] of q.modules) weights.set(`${prefix}.weight`, { shape: [w.outFeatures, w.inFeatures], data: Float32Array.from(dequantizeHostWeight(w)) });
  return weights;
}

test('Hugging Face GPTQ and AWQ Llama directories load: q/k/v and gate/up run as one quantized product each; logits match the dequantized float forward', () => {
  const cases = [
    { name: 'gptq', method: 'gptq' as const, config: LLAMA, float: [] as string[] },
    { name: 'awq, grouped-query attention', method: 'awq' as const, config: LLAMA, float: [] as string[] },
    { name: 'awq, multi-head attention', method: 'awq' as const, config: { ...LLAMA, kvHeads: LLAMA.heads }, float: [] as string[] },
    // v_proj and down_proj left in floating point: the QKV product runs on its float GEMM, O and the MLP-in quantized.
    { name: 'awq with modules_to_not_convert', method: 'awq' as const, config: LLAMA, float: ['v_proj', 'down_proj'] },
    // Phi-3: its fused qkv_proj and gate_up_proj are the quantized modules.
    { name: 'gptq phi3', method: 'gptq' as const, config: { ...LLAMA, variant: 'phi3', kvHeads: LLAMA.heads } as LlamaConfig, float: [] as string[] },
    // Qwen2 (as Qwen publishes Qwen2.5 AWQ checkpoints): the q/k/v biases stay float beside the quantized weights.
    { name: 'awq qwen2', method: 'awq' as const, config: { ...LLAMA, variant: 'qwen2', qkvBias: true, tieWordEmbeddings: true } as LlamaConfig, float: [] as string[] },
    // Qwen3: q_norm / k_norm (float) after the quantized q/k/v product; head_dim 16 apart from hidden / heads (8).
    { name: 'gptq qwen3', method: 'gptq' as const, config: { ...LLAMA, variant: 'qwen3', qkNorm: true, headDim: 16, tieWordEmbeddings: true } as LlamaConfig, float: [] as string[] },
  ];
  for (const c of cases) {
    const dir = join(root, `hf-${c.name.replace(/\W+/g, '-')}`);
    writeHfLlama(dir, c.method, c.config, 32, c.float);
    const loaded = loadQuantizedModel(dir);
    assert.equal(loaded.layout, c.method, c.name);
    assert.equal(loaded.model.family, 'llama');
    assert.equal(loaded.quantized.modules.size, ((c.config.variant === 'phi3' ? 4 : 7) - c.float.length) * c.config.layers, c.name);
    const model = loadQuantizedDecoderModel(dir, backend, { dtype: 'f32' });
    try {
      const { heads, kvHeads, headDim, ffn, hidden } = c.config;
      for (const layer of model.quantization!.layers) {
        assert.equal(layer.out?.outFeatures, hidden, c.name);
        assert.equal(layer.up?.outFeatures, 2 * ffn, `${c.name}: gate and up stacked`);
        if (c.float.length) {
          assert.equal(layer.qkv, undefined, `${c.name}: q and k quantized, v not — QKV runs on floats`);
          assert.equal(layer.down, undefined, c.name);
        } else {
          assert.equal(layer.qkv?.outFeatures, (heads + 2 * kvHeads) * headDim, `${c.name}: q, k, v stacked`);
          assert.equal(layer.down?.inFeatures, ffn, c.name);
        }
      }
      const err = relError(engineLogits(model, PROMPT), llamaReferenceLogits(c.config, denseWeights(loaded.quantized), PROMPT));
      assert.ok(err < 1e-4, `${c.name}: logits rel err ${err}`);
    } finally {
      model.free();
    }
  }
});

/** g_idx of an act-order GPTQ layer: channels in a seeded random order, G at a time into groups 0, 1, … */
function actOrderGroups(seed: number, K: number, G: number): Int32Array {
  const order = new Rng(seed).permutation(K);
  const gIdx = new Int32Array(K);
  order.forEach((k, position) => { gIdx[k] = Math.floor(position / G); });
  return gIdx;
}

test('act-order GPTQ Llama directories load: inputs gathered into each weight\'s order; q/k/v (one input, one order) stacked; logits match the dequantized float forward', () => {
  // As AutoGPTQ orders them: by the input's Hessian, so q, k and v share an order, gate and up another.
  const shared = (p: string, K: number) => actOrderGroups(/self_attn\.[qkv]_proj/.test(p) ? 1 : /mlp\.(gate|up)_proj/.test(p) ? 2 : /o_proj/.test(p) ? 3 : 4, K, 32);
  const apart = (p: string, K: number) => actOrderGroups([...p].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) % 1_000_003, 0), K, 32);
  // Two groups of 32 or more in every projection's inputs: any order of a single group is the identity.
  const config: LlamaConfig = { ...LLAMA, hidden: 64, headDim: 16, ffn: 128 };
  for (const [name, gIdx] of [['shared orders', shared], ['each module its own order', apart]] as const) {
    const dir = join(root, `hf-act-order-${name.replace(/\W+/g, '-')}`);
    writeHfLlama(dir, 'gptq', config, 32, [], gIdx);
    const loaded = loadQuantizedModel(dir);
    const q = loaded.quantized.modules.get('model.layers.0.self_attn.q_proj')!;
    assert.ok(q.kind === 'int4' && q.inputOrder, `${name}: an input order`);
    const model = loadQuantizedDecoderModel(dir, backend, { dtype: 'f32' });
    try {
      for (const layer of model.quantization!.layers) {
        assert.ok(layer.out?.kind === 'int4' && layer.out.inputOrder && layer.down?.kind === 'int4' && layer.down.inputOrder, name);
        if (name === 'shared orders') assert.ok(layer.qkv?.kind === 'int4' && layer.qkv.inputOrder && layer.up?.kind === 'int4', `${name}: q/k/v and gate/up stacked`);
        else assert.ok(layer.qkv === undefined && layer.up === undefined, `${name}: parts in different orders run on their dequantized floats`);
      }
      const err = relError(engineLogits(model, PROMPT), llamaReferenceLogits(config, denseWeights(loaded.quantized), PROMPT));
      assert.ok(err < 1e-4, `${name}: logits rel err ${err}`);
    } finally {
      model.free();
    }
    // Our layout keeps the order.
    const ours = join(root, `ours-act-order-${name.replace(/\W+/g, '-')}`);
    saveQuantizedModel(ours, loaded.quantized, { config: loaded.model });
    const back = loadQuantizedModel(ours);
    for (const [prefix, w] of loaded.quantized.modules) assert.deepEqual(back.quantized.modules.get(prefix), w, `${name}: ${prefix}`);
  }
});

test('a Llama quantized by quantizeDecoder (INT4 and INT8, round-to-nearest) round-trips through our layout and runs as the in-memory quantization does', () => {
  const source = join(root, 'llama-source');
  writeModelFolder(source, 'llama', LLAMA, 8);
  for (const bits of [4, 8] as const) {
    const { model } = loadDecoderModel(source, backend, { dtype: 'f32' });
    const q = quantizeDecoder(model, { bits, method: 'rtn', groupSize: 32 });
    const names = [...q.modules.keys()];
    assert.equal(names.length, 7 * LLAMA.layers);
    assert.ok(names.includes('model.layers.1.self_attn.k_proj') && names.includes('model.layers.0.mlp.gate_proj'), names.join(', '));
    assert.equal(q.modules.get('model.layers.0.self_attn.k_proj')!.outFeatures, LLAMA.kvHeads * LLAMA.headDim);
    assert.ok(!q.floats.has('model.layers.0.self_attn.q_proj.weight') && q.floats.has('model.layers.0.input_layernorm.weight'));
    const dir = join(root, `llama-rtn${bits}`);
    saveQuantizedModel(dir, q, { config: { family: 'llama', config: LLAMA } });
    const loaded = loadQuantizedModel(dir);
    assert.deepEqual(loaded.model, { family: 'llama', config: LLAMA });
    assert.deepEqual(loaded.quantized.info, q.info);
    for (const [prefix, w] of q.modules) assert.deepEqual(loaded.quantized.modules.get(prefix), w, prefix);
    // The same quantized values as the engine's own RTN of the stacked matrices: the same logits.
    const fromDisk = loadQuantizedDecoderModel(dir, backend, { dtype: 'f32' });
    quantizeDecoderModel(model, { method: 'rtn', bits, groupSize: 32 });
    try {
      assert.deepEqual(engineLogits(fromDisk, PROMPT), engineLogits(model, PROMPT), `rtn${bits}`);
    } finally {
      fromDisk.free();
      model.free();
    }
  }
});

test('quantizeDecoder on GPT-2 gives the training-model quantizer\'s modules and float parameters (round-to-nearest)', () => {
  const dir = join(root, 'gpt2-source');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 9);
  const { model: decoder } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  const trainer = new Gpt2Model(backend, TINY_GPT2, 'f32');
  loadHfWeights(trainer.params, dir);
  try {
    for (const options of [{ bits: 4, method: 'rtn', groupSize: 32 }, { bits: 8, method: 'rtn' }] as QuantizeOptions[]) {
      const a = quantizeDecoder(decoder, options), b = quantizeGpt2(trainer, options);
      assert.deepEqual(a.info, b.info);
      assert.deepEqual([...a.modules.keys()].sort(), [...b.modules.keys()].sort());
      for (const [prefix, w] of b.modules) assert.deepEqual(a.modules.get(prefix), w, `${options.bits} bits: ${prefix}`);
      for (const [name, t] of b.floats) {
        const mine = a.floats.get(name);
        assert.ok(mine, `${name} is among the decoder quantizer's floats`);
        assert.deepEqual(mine.shape, t.shape, name);
        assert.deepEqual(Array.from(mine.data), Array.from(t.data), name);
      }
    }
  } finally {
    decoder.free();
    trainer.params.free();
  }
});

/**
 * A Llama whose norms make a few input channels 4–8× larger than the rest (as trained models' do): the
 * case AWQ's scales, GPTQ's compensation and SmoothQuant's migration are for. (Much larger ones saturate
 * this tiny random model's attention, where any rounding flips its patterns.) In a sweep of two seeds ×
 * outliers 4–8× or 8–16× × GQA / MHA, GPTQ and SmoothQuant beat round-to-nearest in all 8, AWQ in 7.
 */
function outlierLlama(dir: string, config: LlamaConfig): void {
  writeModelFolder(dir, 'llama', config, 21, {
    edit: (w) => {
      for (const [name, t] of w) {
        if (!/layernorm\.weight$/.test(name)) continue;
        for (const [i, k] of [3, 17, 26].entries()) t.data[k] = t.data[k]! * (4 + 2 * i);
      }
    },
  });
}

test('AWQ, GPTQ and SmoothQuant beat round-to-nearest on a Llama with outlier channels; SmoothQuant\'s folds keep the float function; the model is left as it was', { timeout: 5 * 60_000 }, () => {
  const tokenizer = createByteTokenizer();
  const { train, validation } = corpusSplit(tokenizer, 257);
  const calibration = { windows: calibrationWindows(train, 8, 32), batchSize: 4 };
  // Held-out text: calibration only says something about text like the calibration text.
  const text = Array.from(validation.subarray(0, 30));
  for (const config of [LLAMA, { ...LLAMA, kvHeads: LLAMA.heads }]) {
    const label = config.kvHeads < config.heads ? 'GQA' : 'MHA';
    const dir = join(root, `outliers-${label}`);
    outlierLlama(dir, config);
    const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
    const before = Float32Array.from(backend.download(model.workspace.flat) as Float32Array);
    const reference = engineLogits(model, text);
    /** The directory quantizeDecoder's result saves to, loaded: [its error, its error on the float path with the dequantized weights, its first norm's γ]. */
    const errorOf = (options: QuantizeOptions): [number, number, Float32Array] => {
      const q = quantizeDecoder(model, options);
      assert.deepEqual(backend.download(model.workspace.flat), before, `${label} ${options.method}: the model's weights are restored`);
      assert.equal(model.quantization, undefined);
      const out = join(root, `outliers-${label}-${options.method}-${options.bits}`);
      saveQuantizedModel(out, q, { config: { family: 'llama', config } });
      const quantized = loadQuantizedDecoderModel(out, backend, { dtype: 'f32', floatCopies: true });
      try {
        const error = relError(engineLogits(quantized, text), reference);
        dropQuantization(quantized);
        return [error, relError(engineLogits(quantized, text), reference), q.floats.get('model.layers.0.input_layernorm.weight')!.data];
      } finally {
        quantized.free();
      }
    };
    try {
      const [rtn4] = errorOf({ bits: 4, method: 'rtn', groupSize: 32 });
      const [awq] = errorOf({ bits: 4, method: 'awq', groupSize: 32, calibration, awq: { grid: 10, searchRows: 128 } });
      // Progress comes a projection at a time, each installed when it is counted (the next not yet quantized).
      const progress: string[] = [];
      const [gptq] = errorOf({
        bits: 4, method: 'gptq', groupSize: 32, calibration,
        onProgress: (done, total, label) => {
          const [layer] = label.split(' ');
          progress.push(`${done}/${total} ${label}: ${Object.keys(model.quantization!.layers[Number(layer)]!).join(',')}`);
        },
      });
      const roles = ['qkv', 'out', 'up', 'down'];
      assert.deepEqual(progress, Array.from({ length: 4 * config.layers }, (_, i) => {
        const l = Math.floor(i / 4);
        return `${i + 1}/${4 * config.layers} ${l} ${roles[i % 4]}: ${roles.slice(0, (i % 4) + 1).join(',')}`;
      }));
      const [rtn8, rtn8Float, gamma] = errorOf({ bits: 8, method: 'rtn' });
      const [smooth, smoothFloat, smoothedGamma] = errorOf({ bits: 8, method: 'smoothquant', smoothAlpha: 0.5, calibration });
      const report = `${label}: INT4 rtn ${rtn4.toFixed(4)}, awq ${awq.toFixed(4)}, gptq ${gptq.toFixed(4)}; INT8 rtn ${rtn8.toFixed(4)} ` +
        `(float path ${rtn8Float.toFixed(4)}), smoothquant ${smooth.toFixed(4)} (float path ${smoothFloat.toFixed(4)})`;
      assert.ok(awq < rtn4 && gptq < rtn4 && smooth < rtn8, report);
      // SmoothQuant moved the outliers into the weights (γ / s): the float path computes the same function
      // up to INT8 weight rounding (a few % of these random logits, as without smoothing); a fold on the
      // wrong side, or of the wrong inputs, would be off by the outliers themselves.
      assert.ok(smoothedGamma.some((g, k) => Math.abs(g / gamma[k]! - 1) > 0.1), `${label}: the norm carries the smoothing factors`);
      assert.ok(smoothFloat < 0.1 && rtn8Float < 0.1, report);
      assert.ok(rtn4 < 0.7 && rtn8 < 0.2, `the errors are of quantization, not of a broken model: ${report}`);
    } finally {
      model.free();
    }
  }
});

test('held-out perplexity through the engine equals the exp of the mean cross-entropy of the reference forward', () => {
  const dir = join(root, 'ppl');
  const weights = writeModelFolder(dir, 'llama', LLAMA, 13);
  const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  try {
    const tokens = Uint16Array.from({ length: 2 * 2 * 16 + 1 }, (_, i) => (i * 37 + 11) % 257);
    const result = evaluateDecoderPerplexity(model, tokens, { batchSize: 2, seqLen: 16 });
    let sum = 0, count = 0;
    for (let w = 0; w < 4; w++) {
      const inputs = Array.from(tokens.subarray(w * 16, w * 16 + 16));
      llamaReferenceLogits(LLAMA, weights, inputs).forEach((row, i) => {
        const max = Math.max(...row);
        const lse = max + Math.log(row.reduce((s, v) => s + Math.exp(v - max), 0));
        sum += lse - row[tokens[w * 16 + i + 1]!]!;
        count++;
      });
    }
    assert.equal(result.tokens, count);
    assert.ok(Math.abs(result.loss - sum / count) < 1e-4, `loss ${result.loss} against ${sum / count}`);
    assert.ok(Math.abs(result.perplexity - Math.exp(result.loss)) < 1e-9);
  } finally {
    model.free();
  }
});

test('forwardWindows refuses windows of different lengths and tokens outside the vocabulary', () => {
  const dir = join(root, 'windows');
  writeModelFolder(dir, 'llama', LLAMA, 14);
  const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  const engine = new DecodeEngine(model, { maxBatch: 2, maxLen: 8, maxPrefillTokens: 16 });
  try {
    assert.throws(() => engine.forwardWindows([[1, 2, 3], [1, 2]]), /window 1 has 2 tokens, window 0 3/);
    assert.throws(() => engine.forwardWindows([[1, 300]]), /token 300 at position 1 of window 0 is outside the vocabulary \[0, 257\)/);
    assert.throws(() => engine.forwardWindows([[1], [2], [3]]), /1 to maxBatch = 2 windows, got 3/);
    assert.throws(() => engine.forwardWindows([Array(9).fill(1)]), /forwardWindows of 1 × 9 tokens/);
  } finally {
    engine.dispose();
    model.free();
  }
});

test('a quantized directory loads without float copies of its quantized projections: fewer bytes, the same logits; no float path to drop back to', () => {
  const dir = join(root, 'hf-not-held');
  // v_proj left in floating point: the QKV projection keeps its float weights (all three parts), the rest do not.
  writeHfLlama(dir, 'awq', LLAMA, 32, ['v_proj']);
  const lean = loadQuantizedDecoderModel(dir, backend, { dtype: 'f32' });
  const full = loadQuantizedDecoderModel(dir, backend, { dtype: 'f32', floatCopies: true });
  try {
    const { hidden: H, ffn: F, heads, headDim: d, layers } = LLAMA;
    // Not held: each layer's o_proj [H, Hq·d], gate/up [2F, H] and down [H, F].
    assert.equal(full.workspace.flat.numel - lean.workspace.flat.numel, layers * (H * heads * d + 2 * F * H + H * F));
    assert.equal(lean.notHeld.size, 4 * layers);
    assert.ok(!lean.notHeld.has('model.layers.0.self_attn.q_proj.weight'), 'q/k/v (v in floating point) stay held');
    assert.deepEqual(engineLogits(lean, PROMPT), engineLogits(full, PROMPT));
    assert.throws(() => dropQuantization(lean), /loaded without float copies, so it has no float path/);
    assert.throws(() => lean.loadWeight('model.layers.0.mlp.down_proj.weight', new Float32Array(H * F)), /'model.layers.0.mlp.down_proj.weight' is not held/);
    // An op handed a weight that is not held refuses it by name.
    assert.throws(() => backend.gemm({ a: backend.empty([1, F], 'f32'), b: lean.layers[0]!.down, out: backend.empty([1, H], 'f32'), transB: true }), /'b' .*was not made by the CPU backend/);
  } finally {
    lean.free();
    full.free();
  }
});
