// The inference engine with quantized projections on the CPU backend: a tiny Llama and a tiny GPT-2,
// RTN INT4 (W4A16) and INT8 (W8A8), against an independent float64 forward and an f32 engine on the
// dequantized weights; and `fuseformer quantize` directories (GPT-2, Llama) through `fuseformer generate`.
//
// Tolerances. W4A16 computes x·dequant(W) in the activation dtype (f32 here), so its logits match the
// dequantized-weight forward to f32 rounding and its greedy tokens are the same. W8A8 also rounds each
// activation row to INT8 (per-token scale amax/127: a relative error up to ~0.4% per element), which the
// dequantized-weight reference does not: its logits agree within a few percent, and each greedy token it
// picks is checked to be within that error of the reference's best logit at the same position (a tiny
// random model has near-ties that the activation rounding may flip).

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runGenerate } from '../../src/cli/generate.js';
import { runQuantize } from '../../src/cli/quantize.js';
import { ArgumentError } from '../../src/errors.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { int4GatedOptions } from '../../src/infer/forward.js';
import { generate } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { decodeWeightBytes } from '../../src/infer/architecture.js';
import { dropQuantization, loadQuantizedDecoderModel, PROJECTION_ROLES, projectionWeightNames, quantizedDecodeWeightBytes, quantizeDecoderModel, quantizeLmHead } from '../../src/infer/quantized.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import type { DeviceQuantizedWeight } from '../../src/quant/device.js';
import { downloadInt4 } from '../../src/quant/device.js';
import { dequantizeHostWeight, transpose } from '../../src/quant/weights.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';
import type { HostWeights } from './hf-folder.js';
import { gpt2ReferenceLogits, llamaReferenceLogits } from './reference-forward.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-infer-quant-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();

// Input widths multiples of 32 (INT4 groups of 32); weights N(0, 0.2) so the tiny models' logits are not flat.
const LLAMA: LlamaConfig = { ...TINY_LLAMA, ffn: 64 };
const GPT2: Gpt2Config = TINY_GPT2;
const PROMPT = [5, 17, 42, 99, 3, 250, 7, 64];

interface Case { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig; bits: 4 | 8 }
const CASES: Case[] = [
  { name: 'llama int4', family: 'llama', config: LLAMA, bits: 4 },
  { name: 'llama int8', family: 'llama', config: LLAMA, bits: 8 },
  { name: 'gpt2 int4', family: 'gpt2', config: GPT2, bits: 4 },
  { name: 'gpt2 int8', family: 'gpt2', config: GPT2, bits: 8 },
];

/** A device weight as dense f32 [N, K]. */
function dequantized(b: Backend, w: DeviceQuantizedWeight): Float32Array {
  if (w.kind === 'int4') return Float32Array.from(dequantizeHostWeight(downloadInt4(b, w)));
  const q = b.download(w.qweight) as Int8Array, scales = b.download(w.scales) as Float32Array;
  return Float32Array.from(q, (v, i) => v * scales[Math.floor(i / w.inFeatures)]!);
}

/**
 * The quantized model's projections, dequantized, as HF tensors: `weights` with the projections replaced
 * (stacked q/k/v and gate/up split back into their parts; GPT-2's Conv1D stored [in, out]).
 */
function dequantizedWeights(model: DecoderModel, weights: HostWeights): HostWeights {
  const out: HostWeights = new Map([...weights].map(([n, t]) => [n, { shape: t.shape, data: Float32Array.from(t.data) }]));
  const specs = new Map(model.arch.weights.map((w) => [w.name, w]));
  model.arch.layerNames.forEach((names, l) => {
    const parts = projectionWeightNames(names);
    for (const role of PROJECTION_ROLES) {
      const w = model.quantization!.layers[l]![role]!, dense = dequantized(model.backend, w), K = w.inFeatures;
      let row = 0;
      for (const name of parts[role]) {
        const spec = specs.get(name)!, rows = spec.shape[0]!;
        const part = dense.slice(row * K, (row + rows) * K);
        row += rows;
        out.get(name)!.data.set(spec.transposed ? transpose(part, rows, K) : part);
      }
    }
  });
  return out;
}

function referenceLogits(c: Case, weights: HostWeights, tokens: readonly number[]): Float64Array[] {
  return c.family === 'gpt2' ? gpt2ReferenceLogits(c.config as Gpt2Config, weights, tokens) : llamaReferenceLogits(c.config as LlamaConfig, weights, tokens);
}

/** ‖a − b‖ / ‖b‖. */
function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

async function greedy(model: DecoderModel, tokens: number): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(model, PROMPT, { temperature: 0, maxNewTokens: tokens, stopTokenIds: [] })) out.push(t);
  return out;
}

for (const c of CASES) {
  test(`${c.name}: prefill logits match the dequantized-weight reference, greedy tokens the f32 engine's`, async () => {
    const dir = join(root, c.name.replace(/\W+/g, '-'));
    const weights = writeModelFolder(dir, c.family, c.config, 11);
    const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
    const { model: float } = loadDecoderModel(dir, backend, { dtype: 'f32' });
    try {
      quantizeDecoderModel(model, { method: 'rtn', bits: c.bits, groupSize: 32 });
      const reference = dequantizedWeights(model, weights);
      const V = model.vocabSize;
      const engine = new DecodeEngine(model, { maxBatch: 2, maxLen: 32 });
      const logits = engine.promptLogits(PROMPT);
      engine.dispose();
      const expected = referenceLogits(c, reference, PROMPT);
      const flat = new Float64Array(PROMPT.length * V);
      expected.forEach((row, i) => flat.set(row.subarray(0, V), i * V));
      const error = relError(logits, flat);
      // W8A8: ~2% measured here (inputs only 32–64 wide, so one outlier sets a row's INT8 scale).
      assert.ok(error < (c.bits === 4 ? 1e-4 : 5e-2), `relative logit error ${error}`);
      // The quantization is not a no-op: the original weights give other logits.
      assert.ok(relError(referenceLogits(c, weights, PROMPT).flatMap((r) => [...r.subarray(0, V)]), flat) > 1e-4);

      // The f32 engine on the dequantized weights (its float slots overwritten).
      for (const [name, t] of reference) if (model.arch.weights.some((w) => w.name === name)) float.loadWeight(name, t.data);
      const tokens = await greedy(model, 10), floatTokens = await greedy(float, 10);
      if (c.bits === 4) assert.deepEqual(tokens, floatTokens);
      else {
        const check = new DecodeEngine(float, { maxBatch: 1, maxLen: 32 });
        const all = check.promptLogits([...PROMPT, ...tokens]);
        check.dispose();
        tokens.forEach((t, i) => {
          const row = all.subarray((PROMPT.length - 1 + i) * V, (PROMPT.length + i) * V);
          const best = Math.max(...row), spread = best - Math.min(...row);
          assert.ok(best - row[t]! <= 0.05 * spread, `token ${i}: ${t} scores ${row[t]} against the best ${best}`);
        });
      }
    } finally {
      model.free();
      float.free();
    }
  });
}

test('llama int4 with the gated int4Linear (gate/up and SwiGLU in one op): the logits and greedy tokens of the two-op MLP', async () => {
  const dir = join(root, 'llama-int4-gated');
  writeModelFolder(dir, 'llama', LLAMA, 17);
  const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  const saved = int4GatedOptions.enabled;
  try {
    quantizeDecoderModel(model, { method: 'rtn', bits: 4, groupSize: 32 });
    const run = async (gated: boolean) => {
      int4GatedOptions.enabled = gated;
      const engine = new DecodeEngine(model, { maxBatch: 2, maxLen: 32 });
      const logits = engine.promptLogits(PROMPT);
      engine.dispose();
      return { logits, tokens: await greedy(model, 10) };
    };
    const twoOps = await run(false), fused = await run(true);
    // The fused op rounds act(g)·u once; the two ops store the [rows, 2F] product in f32 first.
    const difference = relError(fused.logits, twoOps.logits);
    assert.ok(difference < 1e-5, `relative logit difference ${difference}`);
    assert.ok(difference > 0, 'the gated op ran (it skips the f32 rounding of the product)');
    assert.deepEqual(fused.tokens, twoOps.tokens);
  } finally {
    int4GatedOptions.enabled = saved;
    model.free();
  }
});

for (const c of CASES) {
  test(`${c.name} with the LM head quantized too: logits match the reference with a dequantized head; the embedding stays float`, () => {
    const dir = join(root, `${c.name.replace(/\W+/g, '-')}-head`);
    const weights = writeModelFolder(dir, c.family, c.config, 13);
    const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
    try {
      const floatBytes = quantizedDecodeWeightBytes(model, decodeWeightBytes(model.arch, 4), 4);
      quantizeDecoderModel(model, { method: 'rtn', bits: c.bits, groupSize: 32, lmHead: true });
      const head = model.quantization!.lmHead!;
      assert.equal(head.kind, c.bits === 4 ? 'int4' : 'int8');
      assert.deepEqual([head.outFeatures, head.inFeatures], model.lmHead.shape);
      // The reference: dequantized projections, and an untied head holding the dequantized head's rows
      // (a tied model's embedding lookups still read the float table).
      const reference = dequantizedWeights(model, weights);
      const V = model.vocabSize, H = head.inFeatures;
      reference.set('lm_head.weight', { shape: [V, H], data: dequantized(backend, head).slice(0, V * H) });
      const untied = { ...c.config, tieWordEmbeddings: false };
      const expected = c.family === 'gpt2' ? gpt2ReferenceLogits(untied as Gpt2Config, reference, PROMPT) : llamaReferenceLogits(untied as LlamaConfig, reference, PROMPT);
      const engine = new DecodeEngine(model, { maxBatch: 2, maxLen: 32 });
      const logits = engine.promptLogits(PROMPT);
      engine.dispose();
      const flat = new Float64Array(PROMPT.length * V);
      expected.forEach((row, i) => flat.set(row.subarray(0, V), i * V));
      const error = relError(logits, flat);
      assert.ok(error < (c.bits === 4 ? 1e-4 : 5e-2), `relative logit error ${error}`);
      // A step reads fewer bytes: the head's vocabSize × hidden floats became INT4 / INT8 ones.
      const headBytes = c.bits === 4 ? V * H / 2 + (V * H / 32) * 3 : V * H + V * 4;
      const withoutHead = quantizedDecodeWeightBytes({ ...model, quantization: { ...model.quantization!, lmHead: undefined } } as DecoderModel, decodeWeightBytes(model.arch, 4), 4);
      assert.equal(quantizedDecodeWeightBytes(model, decodeWeightBytes(model.arch, 4), 4), withoutHead - V * H * 4 + headBytes);
      assert.ok(withoutHead < floatBytes);
    } finally {
      model.free();
    }
  });
}

test('quantizeDecoderModel refuses group sizes that do not divide the widths, and a second quantization', () => {
  const dir = join(root, 'refuse');
  writeModelFolder(dir, 'llama', TINY_LLAMA, 3);  // ffn 48: groups of 32 do not divide the down projection's inputs
  const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  try {
    assert.throws(() => quantizeDecoderModel(model, { method: 'rtn', bits: 4, groupSize: 32 }), (e: unknown) => e instanceof ArgumentError && /group size 32 must be a multiple of 32 dividing every projection's input width \(32, 48\)/.test(e.message));
    quantizeDecoderModel(model, { method: 'rtn', bits: 8 });
    assert.throws(() => quantizeDecoderModel(model, { method: 'rtn', bits: 8 }), /already quantized/);
    dropQuantization(model);
    assert.equal(model.quantization, undefined);
  } finally {
    model.free();
  }
});

/** Runs `fuseformer generate` with stdout captured. */
/** What the last captured() run wrote to stderr (the command's first line names the precision). */
let lastStderr = '';

async function captured(argv: string[]): Promise<string> {
  const write = process.stdout.write.bind(process.stdout), writeErr = process.stderr.write.bind(process.stderr);
  let out = '';
  lastStderr = '';
  // The command writes strings; the test runner's own reports (bytes) still go out while the command awaits.
  process.stdout.write = ((chunk: string | Uint8Array) => (typeof chunk === 'string' ? ((out += chunk), true) : write(chunk))) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => { lastStderr += String(chunk); return true; }) as typeof process.stderr.write;
  try {
    assert.equal(await runGenerate(argv), 0);
    return out;
  } finally {
    process.stdout.write = write;
    process.stderr.write = writeErr;
  }
}

test('a `fuseformer quantize` directory (GPT-2 INT4 and INT8, Llama INT4) runs through `fuseformer generate`', { timeout: 5 * 60_000 }, async () => {
  const dir = join(root, 'gpt2-source');
  writeModelFolder(dir, 'gpt2', GPT2, 5);
  const prompt = 'hello';
  for (const bits of ['4', '8'] as const) {
    const out = join(root, `gpt2-q${bits}`);
    assert.equal(await runQuantize(['--model', dir, '--out', out, '--backend', 'cpu', '--bits', bits, '--method', 'rtn', '--group', '32']), 0);
    const text = await captured(['--model', out, '--prompt', prompt, '--max-tokens', '8', '--temperature', '0', '--backend', 'cpu']);
    // The same tokens from the engine API on the loaded directory.
    const model = loadQuantizedDecoderModel(out, backend, { floatCopies: true });
    try {
      assert.equal(model.quantization!.info.bits, Number(bits));
      assert.equal(model.quantization!.layers.length, GPT2.layers);
      const tokenizer = loadTokenizer(out);
      const ids: number[] = [];
      for await (const t of generate(model, tokenizer.encode(prompt), { temperature: 0, maxNewTokens: 8 })) ids.push(t);
      assert.equal(text, `${prompt}${tokenizer.decode(ids)}\n`);
      if (bits === '4') {
        // W4A16 equals the f32 engine on the dequantized weights the directory's float slots now hold.
        dropQuantization(model);
        const floatIds: number[] = [];
        for await (const t of generate(model, tokenizer.encode(prompt), { temperature: 0, maxNewTokens: 8 })) floatIds.push(t);
        assert.deepEqual(ids, floatIds);
      }
    } finally {
      model.free();
    }
  }
  await assert.rejects(captured(['--model', join(root, 'gpt2-q4'), '--prompt', 'x', '--quantize', 'rtn8', '--backend', 'cpu']), /--quantize rtn8: .* is already quantized/);
  await assert.rejects(captured(['--model', dir, '--prompt', 'x', '--quantize', 'int3', '--backend', 'cpu']), /--quantize must be rtn4 or rtn8, got 'int3'/);
  // --quantize on a 16-bit directory: the engine runs the RTN-quantized projections (groups of 128 do not divide 32).
  await assert.rejects(captured(['--model', dir, '--prompt', 'x', '--quantize', 'rtn4', '--backend', 'cpu']), /group size 128 must be a multiple of 32 dividing/);
  // A Llama quantized by `fuseformer quantize` (q/k/v and gate/up saved as separate modules) generates
  // what the engine API gives on the loaded directory.
  const llama = join(root, 'llama-source');
  writeModelFolder(llama, 'llama', LLAMA, 2);
  const llamaOut = join(root, 'llama-q4');
  assert.equal(await runQuantize(['--model', llama, '--out', llamaOut, '--backend', 'cpu', '--bits', '4', '--method', 'rtn', '--group', '32']), 0);
  const llamaText = await captured(['--model', llamaOut, '--prompt', prompt, '--max-tokens', '8', '--temperature', '0', '--backend', 'cpu']);
  const llamaModel = loadQuantizedDecoderModel(llamaOut, backend);
  try {
    assert.equal(llamaModel.arch.family, 'llama');
    assert.deepEqual(PROJECTION_ROLES.filter((r) => llamaModel.quantization!.layers.every((q) => q[r]?.kind === 'int4')), PROJECTION_ROLES);
    const tokenizer = loadTokenizer(llamaOut), ids: number[] = [];
    for await (const t of generate(llamaModel, tokenizer.encode(prompt), { temperature: 0, maxNewTokens: 8 })) ids.push(t);
    assert.equal(llamaText, `${prompt}${tokenizer.decode(ids)}\n`);
  } finally {
    llamaModel.free();
  }
  const config = JSON.parse(readFileSync(join(llama, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(llama, 'config.json'), JSON.stringify({ ...config, quantization_config: { quant_method: 'gptq', bits: 4 } }));
  await assert.rejects(captured(['--model', llama, '--prompt', 'x', '--backend', 'cpu']), /quantization_config\.group_size must be an integer, and it is missing/);
  const rtn8 = await captured(['--model', dir, '--prompt', prompt, '--max-tokens', '4', '--temperature', '0', '--quantize', 'rtn8', '--backend', 'cpu']);
  assert.ok(rtn8.startsWith(prompt));
  // --quantize-lm-head: the head too; the same tokens as the engine API with lmHead on.
  const withHead = await captured(['--model', dir, '--prompt', prompt, '--max-tokens', '6', '--temperature', '0', '--quantize', 'rtn8', '--quantize-lm-head', '--backend', 'cpu']);
  const { model: m8 } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  try {
    quantizeDecoderModel(m8, { method: 'rtn', bits: 8, lmHead: true });
    const tokenizer = loadTokenizer(dir), ids: number[] = [];
    for await (const t of generate(m8, tokenizer.encode(prompt), { temperature: 0, maxNewTokens: 6 })) ids.push(t);
    assert.equal(withHead, `${prompt}${tokenizer.decode(ids)}\n`);
  } finally {
    m8.free();
  }
  await assert.rejects(captured(['--model', dir, '--prompt', 'x', '--quantize-lm-head', '--backend', 'cpu']), /--quantize-lm-head needs --quantize rtn4\|rtn8, or a quantized --model directory/);
  // On a quantized directory, --quantize-lm-head alone quantizes the head at the projections' bits: the
  // tokens of the engine API with quantizeLmHead on the loaded directory.
  const headText = await captured(['--model', llamaOut, '--prompt', prompt, '--max-tokens', '6', '--temperature', '0', '--quantize-lm-head', '--backend', 'cpu']);
  assert.match(lastStderr, /INT4 W4A16 \(rtn, group 32\) projections and LM head/);
  const withQuantizedHead = loadQuantizedDecoderModel(llamaOut, backend);
  try {
    quantizeLmHead(withQuantizedHead);
    const head = withQuantizedHead.quantization!.lmHead!;
    assert.equal(head.kind, 'int4');
    assert.equal(head.kind === 'int4' && head.groupSize, 32, "the projections' group size");
    assert.throws(() => quantizeLmHead(withQuantizedHead), /the LM head is already quantized/);
    const tokenizer = loadTokenizer(llamaOut), ids: number[] = [];
    for await (const t of generate(withQuantizedHead, tokenizer.encode(prompt), { temperature: 0, maxNewTokens: 6 })) ids.push(t);
    assert.equal(headText, `${prompt}${tokenizer.decode(ids)}\n`);
  } finally {
    withQuantizedHead.free();
  }
});
