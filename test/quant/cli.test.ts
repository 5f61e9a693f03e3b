// `fuseformer quantize` on the CPU: a small GPT-2 or Llama directory in, a quantized directory out that
// loads back; bad options are refused naming the option.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runQuantize } from '../../src/cli/quantize.js';
import { SafetensorsReader, writeSafetensors } from '../../src/io/safetensors.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS, gpt2ConfigToJson } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import { loadQuantizedDecoderModel } from '../../src/infer/quantized.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { loadQuantizedModel } from '../../src/quant/checkpoint.js';
import { writeTokenFile } from '../../src/io/token-file.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-quant-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));

const CONFIG: Gpt2Config = { ...GPT2_PRESETS['gpt2-tiny']!, hidden: 64, heads: 2, layers: 2, ffn: 128, maxPositions: 64 };

function modelDirectory(): string {
  const dir = join(root, 'model');
  mkdirSync(dir, { recursive: true });
  const model = new Gpt2Model(new CpuBackend(), CONFIG, 'f32');
  model.params.initialize(7n);
  writeSafetensors(join(dir, 'model.safetensors'), [...model.params.download()].map(([name, t]) => ({ name, dtype: 'F32' as const, shape: t.shape, bytes: new Uint8Array(t.data.buffer) })));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...gpt2ConfigToJson(CONFIG), architectures: ['GPT2LMHeadModel'] }));
  model.params.free();
  return dir;
}

test('quantize a GPT-2 directory to INT4 (GPTQ) and INT8 (SmoothQuant); the results load back', { timeout: 5 * 60_000 }, async () => {
  const model = modelDirectory();
  for (const [bits, method, out] of [['4', 'gptq', 'q4'], ['8', 'smoothquant', 'q8']] as const) {
    const code = await runQuantize(['--model', model, '--out', join(root, out), '--backend', 'cpu', '--bits', bits, '--method', method,
      '--group', '32', '--calibration-samples', '2', '--calibration-len', '16', '--eval', '--eval-batches', '1']);
    assert.equal(code, 0);
    const loaded = loadQuantizedModel(join(root, out));
    assert.equal(loaded.quantized.info.bits, Number(bits));
    assert.equal(loaded.quantized.info.method, method);
    assert.equal(loaded.quantized.modules.size, 4 * CONFIG.layers);
  }
});

test('quantize a Llama directory to INT4 (AWQ, GPTQ) and INT8 (SmoothQuant) with --eval; the results load back', { timeout: 5 * 60_000 }, async () => {
  const model = join(root, 'llama');
  const config = { ...TINY_LLAMA, ffn: 64 };
  writeModelFolder(model, 'llama', config, 3);
  for (const [bits, method] of [['4', 'awq'], ['4', 'gptq'], ['8', 'smoothquant']] as const) {
    const out = join(root, `llama-${method}`);
    const printed: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array) => { printed.push(String(chunk)); return true; }) as typeof process.stdout.write;
    let code: number;
    try {
      code = await runQuantize(['--model', model, '--out', out, '--backend', 'cpu', '--bits', bits, '--method', method,
        '--group', '32', '--calibration-samples', '4', '--calibration-len', '16', '--eval', '--eval-batches', '1']);
    } finally {
      process.stdout.write = write;
    }
    assert.equal(code, 0);
    const text = printed.join('');
    assert.match(text, new RegExp(`quantized ${7 * config.layers} linear layers in`), text);
    assert.match(text, /held-out perplexity \(64 tokens\): f32 \d+\.\d+, quantized \d+\.\d+ \([+-]\d+\.\d+%\)/, text);
    const loaded = loadQuantizedModel(out);
    assert.equal(loaded.model.family, 'llama');
    // The tokenizer, its config (chat template, special tokens) and the generation defaults come along.
    for (const file of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
      assert.equal(readFileSync(join(out, file), 'utf8'), readFileSync(join(model, file), 'utf8'), file);
    }
    assert.equal(loaded.quantized.info.method, method);
    assert.equal(loaded.quantized.modules.size, 7 * config.layers);
  }
  await assert.rejects(runQuantize(['--model', join(root, 'llama-awq'), '--out', join(root, 'x'), '--backend', 'cpu']), /'.*llama-awq' is already quantized/);
  // GPTQ with act-order: every module keeps its input order; the directory says desc_act and runs.
  const actOrder = join(root, 'llama-gptq-act-order');
  assert.equal(await runQuantize(['--model', model, '--out', actOrder, '--backend', 'cpu', '--method', 'gptq', '--act-order', '--group', '32',
    '--calibration-samples', '4', '--calibration-len', '16']), 0);
  const ordered = loadQuantizedModel(actOrder);
  assert.equal(ordered.quantized.info.actOrder, true);
  assert.ok([...ordered.quantized.modules.values()].every((w) => w.kind === 'int4' && w.inputOrder), 'every module has an input order');
  const engine = loadQuantizedDecoderModel(actOrder, new CpuBackend());
  try {
    assert.ok(engine.quantization!.layers.every((l) => l.qkv?.kind === 'int4' && l.qkv.inputOrder), 'q/k/v share their order (one input): stacked');
  } finally {
    engine.free();
  }
  await assert.rejects(runQuantize(['--model', model, '--out', join(root, 'x'), '--backend', 'cpu', '--method', 'awq', '--act-order']), /act-order is a GPTQ option, not one of awq/);
  await assert.rejects(runQuantize(['--model', model, '--out', join(root, 'x'), '--backend', 'cpu', '--group', '128']), /group size 128 does not divide the 32 inputs of the qkv projections/);
});

test('quantize a Qwen3 directory (GPTQ): q_norm / k_norm come along unchanged; the result loads and decodes', { timeout: 5 * 60_000 }, async () => {
  const model = join(root, 'qwen3');
  const config: LlamaConfig = { ...TINY_LLAMA, ffn: 64, variant: 'qwen3', qkNorm: true, headDim: 16, tieWordEmbeddings: true };
  const weights = writeModelFolder(model, 'llama', config, 5);
  const out = join(root, 'qwen3-gptq');
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = (() => true) as typeof process.stdout.write;
  let code: number;
  try {
    code = await runQuantize(['--model', model, '--out', out, '--backend', 'cpu', '--bits', '4', '--method', 'gptq', '--group', '32',
      '--calibration-samples', '4', '--calibration-len', '16']);
  } finally {
    process.stdout.write = write;
  }
  assert.equal(code, 0);
  const loaded = loadQuantizedModel(out);
  assert.equal(loaded.quantized.modules.size, 7 * config.layers);
  const reader = SafetensorsReader.open(join(out, 'model.safetensors'));
  try {
    for (let l = 0; l < config.layers; l++) {
      for (const which of ['q_norm', 'k_norm']) {
        const name = `model.layers.${l}.self_attn.${which}.weight`;
        assert.deepEqual([...reader.readFloats(name)], [...weights.get(name)!.data], name);
      }
    }
  } finally {
    reader.close();
  }
  const engine = loadQuantizedDecoderModel(out, new CpuBackend());
  try {
    assert.ok(engine.layers.every((layer) => layer.headNorm !== undefined), 'every layer holds its head norms');
    const decoder = new DecodeEngine(engine, { maxBatch: 1, maxLen: 16 });
    const logits = decoder.promptLogits([5, 17, 42, 99]);
    assert.equal(logits.length, 4 * engine.vocabSize);
    assert.ok(logits.every(Number.isFinite), 'finite logits');
    decoder.dispose();
  } finally {
    engine.free();
  }
});

test('--calibration takes a text file or a token file (as train --data does): its text calibrates, its last 5% is held out; bad files are named', { timeout: 5 * 60_000 }, async () => {
  const model = modelDirectory();
  const text = join(root, 'calibration.txt');
  writeFileSync(text, Array.from({ length: 300 }, (_, i) => `Line ${i}: the quick brown fox ${i % 7} jumps over ${i * 13 % 101} lazy dogs.`).join('\n'));
  const tokens = join(root, 'calibration.bin');
  writeTokenFile(tokens, Array.from({ length: 4000 }, (_, i) => (i * 31 + 7) % 256));
  const qweights = (dir: string) => [...loadQuantizedModel(dir).quantized.modules.values()].map((w) => Array.from(w.qweight));
  const run = (out: string, extra: string[]) => runQuantize(['--model', model, '--out', join(root, out), '--backend', 'cpu', '--method', 'gptq', '--group', '32',
    '--calibration-samples', '2', '--calibration-len', '16', '--eval', '--eval-batches', '1', ...extra]);
  assert.equal(await run('from-corpus', []), 0);
  assert.equal(await run('from-text', ['--calibration', text]), 0);
  assert.equal(await run('from-tokens', ['--calibration', tokens]), 0);
  // GPTQ's weights follow its calibration inputs: three texts, three results.
  const [corpus, fromText, fromTokens] = ['from-corpus', 'from-text', 'from-tokens'].map((d) => qweights(join(root, d)));
  assert.notDeepEqual(fromText, corpus);
  assert.notDeepEqual(fromTokens, fromText);
  await assert.rejects(run('x', ['--calibration', join(root, 'missing.txt')]), /--calibration: no such file '.*missing\.txt'/);
  const short = join(root, 'short.txt');
  writeFileSync(short, 'too short');
  await assert.rejects(run('x', ['--calibration', short]), /--calibration: .*short\.txt gives \d+ tokens for calibration \(its first 95%\); a window needs 16/);
  const outside = join(root, 'outside.bin');
  writeTokenFile(outside, Array.from({ length: 100 }, () => 5000));
  await assert.rejects(run('x', ['--calibration', outside]), /5000/);
});

test('bad options are refused naming the option', async () => {
  const model = modelDirectory();
  await assert.rejects(runQuantize(['--model', model, '--out', join(root, 'x'), '--backend', 'cpu', '--bits', '3']), /--bits must be 4 or 8, got '3'/);
  await assert.rejects(runQuantize(['--model', model, '--out', join(root, 'x'), '--backend', 'cpu', '--bits', '8', '--method', 'awq']), /--method awq is not a 8-bit method/);
  await assert.rejects(runQuantize(['--model', model, '--out', join(root, 'x'), '--backend', 'cpu', '--group', '48']), /group size must be a multiple of 32, got 48/);
  await assert.rejects(runQuantize(['--model', join(root, 'nowhere'), '--out', join(root, 'x'), '--backend', 'cpu']), /--model: '.*nowhere' does not exist/);
  await assert.rejects(runQuantize(['--out', join(root, 'x')]), /--model DIR is required/);
});

test('--out is checked before any work: never the model or a folder holding it, never a folder of other files', async () => {
  const model = modelDirectory();
  const run = (out: string, ...more: string[]) => runQuantize(['--model', model, '--out', out, '--backend', 'cpu', '--method', 'rtn', ...more]);
  await assert.rejects(run(model), /--out: '.*model' is the --model directory .*writing it would delete that model/);
  await assert.rejects(run(root), /--out: '.*' contains the --model directory/);
  const kept = join(root, 'kept');
  mkdirSync(kept, { recursive: true });
  writeFileSync(join(kept, 'notes.txt'), 'precious');
  await assert.rejects(run(kept), /--out: '.*kept' exists and is not empty, and is not a directory fuseformer quantize wrote/);
  assert.equal(readFileSync(join(kept, 'notes.txt'), 'utf8'), 'precious');
  writeFileSync(join(root, 'a-file'), 'x');
  await assert.rejects(run(join(root, 'a-file')), /--out: '.*a-file' exists and is not a directory/);
  await assert.rejects(run(join(root, 'a-file', 'sub')), /cannot be created: '.*a-file' is a file/);
  await assert.rejects(run(join(root, 'q'), '--smooth-alpha', ''), /--smooth-alpha must be in \[0, 1\]/);
  // An earlier quantize output is replaced; rtn builds no calibration windows (a huge count costs nothing).
  const out = join(root, 'q-rtn');
  await runQuantize(['--model', model, '--out', out, '--backend', 'cpu', '--method', 'rtn', '--group', '32', '--calibration-samples', '1000000000']);
  await runQuantize(['--model', model, '--out', out, '--backend', 'cpu', '--method', 'rtn', '--bits', '8']);
  assert.equal((JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as { quantization_config: { bits: number } }).quantization_config.bits, 8);
  // More calibration windows than the text has room for are refused, naming the count.
  const small = join(root, 'small.txt');
  writeFileSync(small, 'Call me Ishmael. '.repeat(12));
  await assert.rejects(runQuantize(['--model', model, '--out', join(root, 'q-awq'), '--backend', 'cpu', '--method', 'awq', '--calibration', small, '--calibration-len', '32', '--calibration-samples', '1000']),
    /--calibration-samples 1000: .* room for \d+ distinct windows of 32/);
});
