// The inference engine with RTN-quantized projections (INT4 W4A16, INT8 W8A8) on the GPU against the
// CPU engine quantized the same way (the same bits: int4QuantizeWeights is exact on both backends, INT8
// is quantized on the host): prefill logits in f32 and bf16, and greedy tokens in f32 with the decode
// step captured in graphs and run eagerly; each also with the LM head quantized. Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { loadQuantizedDecoderModel, quantizeDecoderModel } from '../../src/infer/quantized.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { calibrationWindows } from '../../src/quant/calibration.js';
import { saveQuantizedModel } from '../../src/quant/checkpoint.js';
import { quantizeDecoder } from '../../src/quant/decoder-quantize.js';
import { corpusSplit } from '../../src/quant/text.js';
import { dequantizeHostWeight } from '../../src/quant/weights.js';
import { Rng } from '../../src/testing/random.js';
import type { CudaBackend } from '../../src/backend/cuda/index.js';
import { int4GatedOptions } from '../../src/infer/forward.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import { ENGINE_TEST_MODELS, ENGINE_TEST_PROMPTS, relError } from './engine-fixtures.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-infer-quant-'));
after(() => rmSync(root, { recursive: true, force: true }));

// Prefill of 17 rows takes int4Linear's tensor-core kernel in bf16; decode (1–3 rows) its GEMV.
const MODELS = ENGINE_TEST_MODELS, PROMPTS = ENGINE_TEST_PROMPTS;

/** The 17-token prompt's logits (a 17-row prefill) of a fresh engine on `model`. */
function prefillLogits(model: DecoderModel): Float32Array {
  const engine = new DecodeEngine(model, { maxBatch: 3, maxLen: 64 });
  const out = engine.promptLogits(PROMPTS[1]!);
  engine.dispose();
  return out;
}

/**
 * The CUDA engine against the CPU engine on the model in `dir`, quantized the same way: f32 and bf16
 * prefill logits, and in f32 the greedy tokens of a batch with and without graphs.
 */
async function compareQuantizedEngines(dir: string, bits: 4 | 8, lmHead: boolean, configure: (gpu: CudaBackend) => void = () => {}): Promise<void> {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  configure(gpu);
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const load = (b: Backend) => {
      const model = loadDecoderModel(dir, b, { dtype }).model;
      quantizeDecoderModel(model, { method: 'rtn', bits, groupSize: 32, lmHead });
      return model;
    };
    const onGpu = load(gpu), onCpu = load(cpu);
    try {
      // W8A8 in f32: an activation within an ulp of an INT8 rounding boundary may round the other way.
      // bf16: the GPU rounds each dequantized weight s·(q − z) (INT4) or per-token-quantized activation
      // (INT8) to bf16 for the tensor cores, one rounding more per product than the CPU reference
      // (exact dequantization in f64): measured 2.0–2.3e-2 on the Llama fixture, against 1–2e-2
      // unquantized. A wrong kernel is off by O(1).
      const tolerance = dtype === 'f32' ? (bits === 4 ? 1e-4 : 1e-3) : 3e-2;
      const prefill = relError(prefillLogits(onGpu), prefillLogits(onCpu));
      assert.ok(prefill <= tolerance, `${dtype} prefill logits rel err ${prefill}`);
      if (dtype === 'f32') {
        const run = (model: DecoderModel, graphs: boolean) =>
          generateBatch(model, PROMPTS, { maxNewTokens: 32, stopTokenIds: [], temperature: 0, engineOptions: { graphs }, syncEvery: 7 });
        const reference = await run(onCpu, false);
        for (const graphs of [true, false]) assert.deepEqual(await run(onGpu, graphs), reference, `graphs ${graphs}`);
      }
    } finally {
      onGpu.free();
      onCpu.free();
    }
  }
}

for (const m of MODELS) {
  for (const [bits, lmHead] of [[4, false], [8, false], [4, true], [8, true]] as const) {
    test(`${m.name} INT${bits}${lmHead ? ' + LM head' : ''}: CUDA quantized engine matches the CPU quantized engine`, { skip }, async () => {
      const dir = join(root, m.name);
      writeModelFolder(dir, m.family, m.config, 5);
      await compareQuantizedEngines(dir, bits, lmHead);
    });
  }
}

// The gated INT4 MLP (int4GatedOptions, FUSEFORMER_INT4_GATED=1): gate/up and SwiGLU as one int4Linear —
// the gated GEMV at decode's rows, the tensor-core kernel + gatedActivation at prefill's 17.
for (const m of MODELS.filter((x) => x.family === 'llama')) {
  test(`${m.name} INT4, gated MLP op: CUDA quantized engine matches the CPU quantized engine`, { skip }, async () => {
    const dir = join(root, `${m.name}-gated`);
    writeModelFolder(dir, m.family, m.config, 6);
    const saved = int4GatedOptions.enabled;
    int4GatedOptions.enabled = true;
    try {
      await compareQuantizedEngines(dir, 4, false);
    } finally {
      int4GatedOptions.enabled = saved;
    }
  });
}

// The W8A8 GEMV with the residual norm in its prologue (CudaBackend.int8NormGemv, FUSEFORMER_INT8_NORM=1):
// each layer's QKV and gate/up (GPT-2: fc) normLinear one kernel at decode's rows; prefill's 17 rows
// take residualNorm + the three-op int8Linear.
for (const m of MODELS) {
  test(`${m.name} INT8 + LM head, norm in the W8A8 GEMV: CUDA quantized engine matches the CPU quantized engine`, { skip }, async () => {
    const dir = join(root, `${m.name}-int8-norm`);
    writeModelFolder(dir, m.family, m.config, 7);
    let used: CudaBackend | undefined;
    await compareQuantizedEngines(dir, 8, true, (gpu) => { gpu.int8NormGemv = true; used = gpu; });
    // Every projection is INT8, so each fused normLinear is the W8A8 GEMV with the norm prologue.
    assert.ok(used!.normGemvLaunches > 0, 'the fused kernel ran');
  });
}

// The INT4 form of the streamed GEMM (5–32 rows of 16-bit x, K a multiple of 256, groups of 128; routed
// here for every product from 5 rows, whatever the default's shape rule): a Llama whose every projection
// qualifies, quantized in groups of 128 — the
// 17-row prefill on it against the CPU engine, and twelve sequences decoding together (12-row steps,
// graphs replayed) and one sequence (1-row steps, FUSEFORMER_INT4_TMA_MIN_ROWS=1) against the same with
// the kernel off (the mma GEMV).
test('llama INT4 in groups of 128 on the INT4 streamed GEMM: prefill logits match the CPU engine; a 12-sequence batch decodes as with the mma GEMV', { skip }, async () => {
  const { streamInt4Stats } = await import('../../src/backend/cuda/kernels/gemm-stream.js');
  const { int4TmaOptions } = await import('../../src/backend/cuda/kernels/quant-int4.js');
  const dir = join(root, 'llama-int4-tma');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, hidden: 256, heads: 8, kvHeads: 2, headDim: 32, ffn: 512, maxPositions: 128 }, 7);
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const load = (b: Backend) => {
    const model = loadDecoderModel(dir, b, { dtype: 'bf16' }).model;
    quantizeDecoderModel(model, { method: 'rtn', bits: 4, groupSize: 128, lmHead: false });
    return model;
  };
  const onGpu = load(gpu), onCpu = load(cpu);
  const saved = { ...int4TmaOptions };
  const setTma = (on: boolean) => { Object.assign(int4TmaOptions, { enabled: on, minRows: 5, gatedOnly: false }); };
  try {
    setTma(true);
    const before = streamInt4Stats.launches;
    const prefill = relError(prefillLogits(onGpu), prefillLogits(onCpu));
    assert.ok(streamInt4Stats.launches > before, 'the 17-row prefill ran on the INT4 streamed GEMM');
    assert.ok(prefill <= 3e-2, `bf16 prefill logits rel err ${prefill}`);
    const prompts = Array.from({ length: 12 }, (_, i) => [3 + i, 40 + 2 * i, 7]);
    const decode = () => generateBatch(onGpu, prompts, { maxNewTokens: 8, stopTokenIds: [], temperature: 0, engineOptions: { graphs: true } });
    const started = streamInt4Stats.launches;
    const ours = await decode();
    assert.ok(streamInt4Stats.launches > started, 'the 12-row decode steps ran on it');
    setTma(false);
    const reference = await decode();
    // Both paths multiply the exact (q − z) by the stored x in f32; only their summation order differs, so
    // greedy tokens of a random model may part after a near tie: most must agree, and every length is full.
    assert.deepEqual(ours.map((t) => t.length), prompts.map(() => 8));
    const same = ours.flat().filter((tok, i) => tok === reference.flat()[i]).length;
    assert.ok(same >= 0.9 * ours.flat().length, `${same} of ${ours.flat().length} tokens as with the mma GEMV`);
    // One sequence (1-row steps) routed to it from minRows 1, against the mma GEMV again.
    const single = () => generateBatch(onGpu, prompts.slice(0, 1), { maxNewTokens: 8, stopTokenIds: [], temperature: 0, engineOptions: { graphs: true } });
    const singleReference = await single();
    setTma(true);
    int4TmaOptions.minRows = 1;
    const oneRow = streamInt4Stats.launches;
    const singleOurs = await single();
    assert.ok(streamInt4Stats.launches > oneRow, 'the 1-row decode steps ran on it');
    assert.equal(singleOurs[0]!.length, 8);
    const sameSingle = singleOurs[0]!.filter((tok, i) => tok === singleReference[0]![i]).length;
    assert.ok(sameSingle >= 7, `${sameSingle} of 8 single-sequence tokens as with the mma GEMV`);
  } finally {
    Object.assign(int4TmaOptions, saved);
    onGpu.free();
    onCpu.free();
  }
});

/** The Llama the quantizer tests below use: every projection width a multiple of the 32-wide groups, two or more of them. */
const QUANTIZE_LLAMA = { ...TINY_LLAMA, hidden: 128, heads: 4, kvHeads: 2, headDim: 32, ffn: 256 };

// `fuseformer quantize`'s Llama path on the GPU (quant/decoder-quantize.ts): calibration through the CUDA
// engine's prefill capture, GPTQ's factorization and updates as cuBLASLt f32 GEMMs (gptq-device.ts), AWQ's
// search on the device ops, SmoothQuant's maxima — against the same on the CPU backend, then the saved
// directory (q/k/v and gate/up as separate modules) loaded on both and run.
test('llama quantized by quantizeDecoder on CUDA (GPTQ, AWQ, SmoothQuant) matches the CPU quantizer; its directory runs as on the CPU', { skip }, async () => {
  const config = QUANTIZE_LLAMA;
  const dir = join(root, 'llama-quantize');
  writeModelFolder(dir, 'llama', config, 12);
  const { train } = corpusSplit(createByteTokenizer(), 257);
  const calibration = { windows: calibrationWindows(train, 8, 32), batchSize: 4 };
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  for (const options of [
    { bits: 4, method: 'gptq', groupSize: 32, calibration },
    { bits: 4, method: 'awq', groupSize: 32, calibration, awq: { grid: 10, searchRows: 128 } },
    { bits: 8, method: 'smoothquant', calibration },
  ] as const) {
    const quantizeOn = (b: Backend) => {
      const model = loadDecoderModel(dir, b, { dtype: 'f32' }).model;
      try { return quantizeDecoder(model, options); } finally { model.free(); }
    };
    const onGpu = quantizeOn(gpu), onCpu = quantizeOn(cpu);
    let same = 0, total = 0;
    for (const [prefix, w] of onCpu.modules) {
      const a = dequantizeHostWeight(w), b = dequantizeHostWeight(onGpu.modules.get(prefix)!);
      for (let i = 0; i < a.length; i++) if (Math.abs(a[i]! - b[i]!) <= 1e-6 * Math.max(1, Math.abs(a[i]!))) same++;
      total += a.length;
    }
    // f32 GEMMs in another order: a rounding near a half step may go the other way, and an AWQ grid point
    // or a GPTQ error fed forward with it; a wrong kernel or fold would disagree nearly everywhere.
    assert.ok(same >= 0.95 * total, `${options.method}: ${same} of ${total} weights as the CPU quantizer's`);
    const out = join(root, `llama-quantize-${options.method}`);
    saveQuantizedModel(out, onGpu, { config: { family: 'llama', config } });
    const run = (b: Backend, dtype: FloatDType) => {
      const model = loadQuantizedDecoderModel(out, b, { dtype });
      try { return prefillLogits(model); } finally { model.free(); }
    };
    // f32 on both: W4A16 computes what the CPU does to rounding; W8A8 may round an activation near an
    // INT8 boundary the other way (the tolerances of the engine comparisons above).
    const err = relError(run(gpu, 'f32'), run(cpu, 'f32'));
    assert.ok(err <= (options.bits === 4 ? 1e-4 : 1e-3), `${options.method}: f32 prefill logits of the loaded directory, rel err ${err} against the CPU`);
    // bf16 against the f32 CPU (H200, session 36: 3.4e-2 for the GPTQ directory, 6.3e-2 for SmoothQuant's
    // W8A8, whose per-token activation scales are formed from bf16 rows): a wrong kernel is off by O(1).
    const bf16 = relError(run(gpu, 'bf16'), run(cpu, 'f32'));
    assert.ok(bf16 <= (options.bits === 4 ? 6e-2 : 1e-1), `${options.method}: bf16 prefill logits rel err ${bf16} against the CPU`);
  }
});

// Act-order GPTQ weights (an input order: the product gathers x's columns first, gatherColumns): a Llama
// directory in our layout whose INT4 modules read their inputs permuted (q/k/v one order, gate/up another),
// on CUDA in bf16 (prefill: the tensor-core kernel; decode: the GEMV, graphs replayed) against the CPU.
test('llama act-order INT4 (inputs gathered into each weight\'s order): CUDA engine matches the CPU engine', { skip }, async () => {
  const config = QUANTIZE_LLAMA;
  const dir = join(root, 'llama-act-order-source'), out = join(root, 'llama-act-order');
  writeModelFolder(dir, 'llama', config, 14);
  const cpu = new CpuBackend();
  const source = loadDecoderModel(dir, cpu, { dtype: 'f32' }).model;
  const q = quantizeDecoder(source, { bits: 4, method: 'rtn', groupSize: 32 });
  source.free();
  const orders = new Map<string, Int32Array>();
  const orderFor = (key: string, K: number) => {
    if (!orders.has(key)) {
      orders.set(key, new Rng(orders.size + 1).permutation(K));
    }
    return orders.get(key)!;
  };
  for (const [prefix, w] of q.modules) {
    if (w.kind !== 'int4') continue;
    const layer = prefix.split('.')[2], shared = /[qkv]_proj$/.test(prefix) ? 'qkv' : /(gate|up)_proj$/.test(prefix) ? 'up' : prefix;
    q.modules.set(prefix, { ...w, inputOrder: orderFor(`${layer}.${shared}`, w.inFeatures) });
  }
  saveQuantizedModel(out, q, { config: { family: 'llama', config } });
  const gpu = await createGpuBackend();
  const onGpu = loadQuantizedDecoderModel(out, gpu, { dtype: 'bf16' }), onCpu = loadQuantizedDecoderModel(out, cpu, { dtype: 'f32' });
  try {
    assert.ok(onGpu.quantization!.layers.every((l) => l.qkv?.kind === 'int4' && l.qkv.inputOrder && l.up?.kind === 'int4' && l.up.inputOrder), 'q/k/v and gate/up stacked with their orders');
    const err = relError(prefillLogits(onGpu), prefillLogits(onCpu));
    assert.ok(err <= 3e-2, `bf16 prefill logits rel err ${err}`);
    // Greedy tokens in f32 (W4A16 in f32 equals the CPU to rounding), decode steps replayed and eager.
    const f32 = loadQuantizedDecoderModel(out, gpu, { dtype: 'f32' });
    try {
      const run = (model: DecoderModel, graphs: boolean) => generateBatch(model, PROMPTS, { maxNewTokens: 16, stopTokenIds: [], temperature: 0, engineOptions: { graphs } });
      const reference = await run(onCpu, false);
      for (const graphs of [true, false]) assert.deepEqual(await run(f32, graphs), reference, `graphs ${graphs}`);
    } finally {
      f32.free();
    }
  } finally {
    onGpu.free();
    onCpu.free();
  }
});
