// The inference engine on the CPU backend with tiny random GPT-2 and Llama folders: loading, prefill
// logits against an independent float64 forward, KV-cached decode logits against full recomputation,
// graph replay, batching with ragged prompts, and the prefill attention paths.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DECODE_GRAPH_STEPS_DEFAULT, DecodeEngine, decodeGraphStepsFromEnv } from '../../src/infer/engine.js';
import type { EngineOptions, SequenceRequest } from '../../src/infer/engine.js';
import { generate, generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { ropeFrequencies } from '../../src/infer/rope.js';
import { BERT_PRESETS, bertConfigToJson } from '../../src/models/bert.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';
import type { HostWeights } from './hf-folder.js';
import { gpt2ReferenceLogits, llamaReferenceLogits } from './reference-forward.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-infer-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();

interface Case {
  name: string;
  family: 'gpt2' | 'llama';
  config: Gpt2Config | LlamaConfig;
}
const CASES: Case[] = [
  { name: 'gpt2 tied', family: 'gpt2', config: TINY_GPT2 },
  { name: 'gpt2 untied', family: 'gpt2', config: { ...TINY_GPT2, tieWordEmbeddings: false, vocabSize: 300 } },
  { name: 'llama GQA untied', family: 'llama', config: TINY_LLAMA },
  { name: 'llama tied, biases, MHA', family: 'llama', config: { ...TINY_LLAMA, kvHeads: 4, tieWordEmbeddings: true, attentionBias: true, mlpBias: true } },
  { name: 'llama MQA, llama3 RoPE', family: 'llama', config: { ...TINY_LLAMA, kvHeads: 1, ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 16 } } },
  { name: 'llama yarn RoPE', family: 'llama', config: { ...TINY_LLAMA, ropeTheta: 500, ropeScaling: { type: 'yarn', factor: 4, betaFast: 32, betaSlow: 1 } } },
  // Qwen2: q, k and v biases, none on o; tied, as the small Qwen2.5 models.
  { name: 'qwen2 tied, q/k/v biases', family: 'llama', config: { ...TINY_LLAMA, variant: 'qwen2', qkvBias: true, tieWordEmbeddings: true, ropeTheta: 1e6 } },
  // Qwen3: an RMS norm over each query and key head before RoPE; head_dim (24) apart from hidden / heads (16), tied.
  { name: 'qwen3 tied, q/k norms', family: 'llama', config: { ...TINY_LLAMA, variant: 'qwen3', qkNorm: true, headDim: 24, tieWordEmbeddings: true, ropeTheta: 1e6 } },
  // Phi-3: q/k/v as one qkv_proj and gate/up as one gate_up_proj; multi-head, untied.
  { name: 'phi3 fused projections', family: 'llama', config: { ...TINY_LLAMA, variant: 'phi3', kvHeads: 4 } },
  // Mistral v0.1: a sliding window of 48 positions (the context is capped there).
  { name: 'mistral, sliding window', family: 'llama', config: { ...TINY_LLAMA, variant: 'mistral', slidingWindow: 48 } },
];

function folder(c: Case, seed = 7): { dir: string; weights: HostWeights } {
  const dir = join(root, `${c.name.replace(/\W+/g, '-')}-${seed}`);
  return { dir, weights: writeModelFolder(dir, c.family, c.config, seed) };
}

function reference(c: Case, weights: HostWeights, tokens: readonly number[]): Float64Array[] {
  if (c.family === 'gpt2') return gpt2ReferenceLogits(c.config as Gpt2Config, weights, tokens);
  const llama = c.config as LlamaConfig;
  // Scaled RoPE: the frequencies of rope.ts (tested against HF's formulas in rope.test.ts) fed to the reference.
  const rope = llama.ropeScaling ? ropeFrequencies(llama, 64) : undefined;
  return llamaReferenceLogits(llama, weights, tokens, rope?.invFreq, rope?.scale);
}

/** ‖a − b‖ / ‖b‖ over all rows. */
function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

const greedy = resolveSampling({ temperature: 0 });
const PROMPT = [72, 101, 108, 108, 111, 44, 32, 119];

for (const c of CASES) {
  test(`${c.name}: prefill logits match an independent float64 forward`, () => {
    const { dir, weights } = folder(c);
    const { model, unused } = loadDecoderModel(dir, backend);
    assert.deepEqual(unused, []);
    const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 16 });
    const ours = engine.promptLogits(PROMPT);
    const theirs = reference(c, weights, PROMPT).flatMap((row) => [...row]);
    assert.ok(relError(ours, theirs) < 1e-5, `rel err ${relError(ours, theirs)}`);
    engine.dispose();
    model.free();
  });

  test(`${c.name}: KV-cached decode logits equal full recomputation at every step`, () => {
    const { dir } = folder(c);
    const { model } = loadDecoderModel(dir, backend);
    const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 20 });
    const forced = [3, 250, 17, 99, 120, 5, 64];
    const request: SequenceRequest = { prompt: PROMPT, maxNewTokens: 12, sampling: greedy };
    engine.start([request], []);
    const cached: Float32Array[] = [engine.logits()[0]!];
    for (const token of forced) {
      engine.collect();
      engine.force(0, token);
      engine.decode(1);
      cached.push(engine.logits()[0]!);
    }
    const sequence = [...PROMPT, ...forced];
    const full = engine.promptLogits(sequence);
    const V = model.vocabSize;
    cached.forEach((row, i) => {
      const position = PROMPT.length - 1 + i;
      const expected = full.subarray(position * V, (position + 1) * V);
      assert.ok(relError(row, expected) < 1e-5, `step ${i}: rel err ${relError(row, expected)}`);
    });
    engine.dispose();
    model.free();
  });
}

test('a sliding window caps the context: an engine past it is refused naming the bound', () => {
  const c = CASES.find((x) => x.name.startsWith('mistral'))!;
  const { dir } = folder(c);
  const { model } = loadDecoderModel(dir, backend);
  try {
    assert.equal(model.arch.maxPositions, 48);
    assert.throws(() => new DecodeEngine(model, { maxBatch: 1, maxLen: 64 }), /maxLen must be an integer in \[2, 48\]/);
    new DecodeEngine(model, { maxBatch: 1, maxLen: 48 }).dispose();
  } finally {
    model.free();
  }
});

test('graph replay on the CPU gives the tokens of eager steps, with ragged prompts and a partial bucket', async () => {
  const c = CASES[2]!;
  const { dir } = folder(c);
  const { model } = loadDecoderModel(dir, backend);
  const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11]];
  const run = async (graphs: boolean, extra: Partial<EngineOptions> = {}) =>
    generateBatch(model, prompts, { maxNewTokens: 9, temperature: 0, stopTokenIds: [], engineOptions: { graphs, ...extra }, syncEvery: 4 });
  const eager = await run(false);
  const replayed = await run(true);
  assert.deepEqual(replayed, eager);
  assert.ok(eager.every((t) => t.length === 9));
  // Prefill in single-sequence groups, and the materialised-scores prefill, give the same tokens.
  assert.deepEqual(await run(true, { maxPrefillTokens: 11 }), eager);
  assert.deepEqual(await run(false, { prefillAttention: 'materialized' }), eager);
  // Each row alone gives its batch row's tokens.
  for (let b = 0; b < prompts.length; b++) {
    const alone: number[] = [];
    for await (const t of generate(model, prompts[b]!, { maxNewTokens: 9, temperature: 0, stopTokenIds: [] })) alone.push(t);
    assert.deepEqual(alone, eager[b]);
  }
  model.free();
});

test('graphs of several decode steps give the tokens of one-step graphs (greedy and seeded sampling); bad counts are refused', async () => {
  const c = CASES[0]!;
  const { dir } = folder(c);
  const { model } = loadDecoderModel(dir, backend);
  const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11]];
  const captured: number[] = [];
  const capture = backend.captureGraph.bind(backend);
  backend.captureGraph = (fn) => {
    const before = spy.runs;
    const graph = capture(fn);
    captured.push(spy.runs - before);
    return graph;
  };
  // Counts the decode step's runs by its last op: one sampleTokens a step.
  const spy = { runs: 0 };
  const sample = backend.sampleTokens.bind(backend);
  backend.sampleTokens = (args) => { spy.runs++; sample(args); };
  try {
    for (const temperature of [0, 0.8]) {
      const run = (graphSteps: number) => generateBatch(model, prompts, { maxNewTokens: 11, temperature, seed: 5, stopTokenIds: [], engineOptions: { graphs: true, graphSteps }, syncEvery: 7 });
      const one = await run(1);
      assert.deepEqual(captured.splice(0), [1], 'one-step graphs only');
      for (const k of [3, 4]) {
        assert.deepEqual(await run(k), one, `${k} steps a graph, temperature ${temperature}`);
        // decode(7) then decode(3): the first runs the one-step graph (captured at the bucket's second step) and the k-step one.
        assert.deepEqual(captured.splice(0), [1, k], `${k} steps a graph: the k-step graph captured once`);
      }
    }
  } finally {
    delete (backend as Partial<CpuBackend>).captureGraph;
    delete (backend as Partial<CpuBackend>).sampleTokens;
  }
  assert.throws(() => new DecodeEngine(model, { maxBatch: 1, maxLen: 16, graphSteps: 0 }), /graphSteps must be an integer in \[1, 64\], got 0/);
  assert.throws(() => decodeGraphStepsFromEnv('2.5'), /FUSEFORMER_DECODE_GRAPH_STEPS must be an integer in \[1, 64\], got '2.5'/);
  assert.equal(decodeGraphStepsFromEnv(''), DECODE_GRAPH_STEPS_DEFAULT);
  assert.equal(decodeGraphStepsFromEnv('8'), 8);
  model.free();
});

test('greedy tokens are the argmax of the full-recompute logits (GPT-2, 12 tokens)', async () => {
  const c = CASES[0]!;
  const { dir, weights } = folder(c, 11);
  const { model } = loadDecoderModel(dir, backend);
  const tokens: number[] = [];
  for await (const t of generate(model, PROMPT, { maxNewTokens: 12, temperature: 0, stopTokenIds: [] })) tokens.push(t);
  assert.equal(tokens.length, 12);
  const logits = reference(c, weights, [...PROMPT, ...tokens.slice(0, -1)]);
  tokens.forEach((t, i) => {
    const row = logits[PROMPT.length - 1 + i]!;
    const best = row.indexOf(Math.max(...row));
    assert.equal(t, best, `token ${i}`);
  });
  model.free();
});

test('stop tokens end a sequence after the stop token; maxNewTokens and maxLen cap it', async () => {
  const c = CASES[0]!;
  const { dir } = folder(c);
  const { model } = loadDecoderModel(dir, backend);
  const all: number[] = [];
  for await (const t of generate(model, PROMPT, { maxNewTokens: 10, temperature: 0, stopTokenIds: [] })) all.push(t);
  const stopAt = all.findIndex((t, i) => i >= 2 && all.indexOf(t) === i);
  const stopped: number[] = [];
  for await (const t of generate(model, PROMPT, { maxNewTokens: 10, temperature: 0, stopTokenIds: [all[stopAt]!] })) stopped.push(t);
  assert.deepEqual(stopped, all.slice(0, stopAt + 1));
  const engine = new DecodeEngine(model, { maxBatch: 2, maxLen: 12 });
  const capped = await generateBatch(model, [PROMPT, [1, 2]], { maxNewTokens: 100, temperature: 0, stopTokenIds: [], engine });
  assert.deepEqual(capped.map((t) => t.length), [12 - PROMPT.length, 10]);
  engine.dispose();
  model.free();
});

test('sampling is reproducible from the seed; row b of a batch uses seed + b', async () => {
  const c = CASES[2]!;
  const { dir } = folder(c);
  const { model } = loadDecoderModel(dir, backend);
  const options = { maxNewTokens: 10, temperature: 1.3, topK: 40, topP: 0.95, repetitionPenalty: 1.2, stopTokenIds: [] };
  const one = async (seed: number) => { const out: number[] = []; for await (const t of generate(model, PROMPT, { ...options, seed })) out.push(t); return out; };
  const a = await one(5), again = await one(5), other = await one(6);
  assert.deepEqual(again, a);
  assert.notDeepEqual(other, a);
  const batch = await generateBatch(model, [PROMPT, PROMPT], { ...options, seed: 5 });
  assert.deepEqual(batch[0], a);
  assert.deepEqual(batch[1], other);
  model.free();
});

test('loading: bf16 and f16 files, shards, missing prefixes; errors name the tensor', () => {
  const c = CASES[2]!;
  const base = join(root, 'loading');
  for (const [name, options] of [['bf16', { fileDType: 'BF16' as const }], ['f16', { fileDType: 'F16' as const }], ['sharded', { sharded: true }], ['prefixless', { stripPrefix: true }]] as const) {
    const dir = join(base, name);
    const weights = writeModelFolder(dir, c.family, c.config, 3, options);
    const { model, files } = loadDecoderModel(dir, backend);
    assert.equal(files.length, name === 'sharded' ? 2 : 1);
    const ours = new DecodeEngine(model, { maxBatch: 1, maxLen: 12 }).promptLogits(PROMPT.slice(0, 4));
    const theirs = reference(c, weights, PROMPT.slice(0, 4)).flatMap((r) => [...r]);
    assert.ok(relError(ours, theirs) < 1e-5, `${name}: rel err ${relError(ours, theirs)}`);
    model.free();
  }
  const missing = join(base, 'missing');
  writeModelFolder(missing, c.family, c.config, 3, { edit: (w) => w.delete('model.layers.1.self_attn.k_proj.weight') });
  assert.throws(() => loadDecoderModel(missing, backend), /lacks 1 weight\(s\).*'model\.layers\.1\.self_attn\.k_proj\.weight' \[16, 32\]/);
  const shape = join(base, 'shape');
  writeModelFolder(shape, c.family, c.config, 3, { edit: (w) => w.set('model.layers.0.mlp.up_proj.weight', { shape: [47, 32], data: new Float32Array(47 * 32) }) });
  assert.throws(() => loadDecoderModel(shape, backend), /tensor 'model\.layers\.0\.mlp\.up_proj\.weight' has shape \[47, 32\].*implies \[48, 32\]/);
  const extra = join(base, 'extra');
  writeModelFolder(extra, c.family, c.config, 3, { edit: (w) => w.set('model.vision_tower.weight', { shape: [2], data: new Float32Array(2) }) });
  assert.deepEqual(loadDecoderModel(extra, backend).unused, ['model.vision_tower.weight']);
});

test('a config.json that does not describe the checkpoint is named before any memory is allocated', () => {
  const c = CASES[2]!;
  const base = join(root, 'mismatch');
  const withConfig = (name: string, edit: (config: Record<string, unknown>) => void, options: Parameters<typeof writeModelFolder>[4] = {}): string => {
    const dir = join(base, name);
    writeModelFolder(dir, c.family, c.config, 3, options);
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    edit(config);
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    return dir;
  };
  const fewer = withConfig('fewer-layers', (cfg) => { cfg['num_hidden_layers'] = (cfg['num_hidden_layers'] as number) - 1; });
  assert.throws(() => loadDecoderModel(fewer, backend), /num_hidden_layers is 1, but the checkpoint holds 2 layers \(its last: .*'model\.layers\.1\./);
  const started = performance.now();
  const many = withConfig('many-layers', (cfg) => { cfg['num_hidden_layers'] = 100_000_000; });
  assert.throws(() => loadDecoderModel(many, backend), /num_hidden_layers is 100000000, but the checkpoint holds 2 layers/);
  const wide = withConfig('wide', (cfg) => { cfg['intermediate_size'] = 1_000_000_000; });
  assert.throws(() => loadDecoderModel(wide, backend), /has shape \[48, 32\].*implies \[1000000000, 32\]/);
  assert.ok(performance.now() - started < 5000, 'refused from the headers, without building the model');
  const nan = withConfig('nan', () => {}, { edit: (w) => { w.get('model.layers.0.mlp.up_proj.weight')!.data[5] = Number.NaN; } });
  assert.throws(() => loadDecoderModel(nan, backend), /tensor 'model\.layers\.0\.mlp\.up_proj\.weight' holds NaN at element 5; a checkpoint's weights must be finite/);
  const tied = join(base, 'tied-with-head');
  writeModelFolder(tied, 'llama', { ...TINY_LLAMA, tieWordEmbeddings: true }, 3, { edit: (w) => w.set('lm_head.weight', { shape: [TINY_LLAMA.vocabSize, TINY_LLAMA.hidden], data: new Float32Array(TINY_LLAMA.vocabSize * TINY_LLAMA.hidden) }) });
  const loaded = loadDecoderModel(tied, backend);
  assert.deepEqual(loaded.unused, ['lm_head.weight'], 'tie_word_embeddings: a separate head in the file is reported unused, not dropped silently');
  loaded.model.free();
  const eos = withConfig('eos', () => {});
  writeFileSync(join(eos, 'generation_config.json'), JSON.stringify({ eos_token_id: [2, 999] }));
  assert.throws(() => loadDecoderModel(eos, backend), /generation_config\.json: eos_token_id 999 is outside the model's vocabulary of 257 tokens/);
  const index = withConfig('bad-index', () => {});
  for (const [content, pattern] of [['null', /no "weight_map" object/], ['{"weight_map": {"a": 5}}', /names the file 5/], ['{"weight_map": {"a": "."}}', /names the file "\."/]] as const) {
    writeFileSync(join(index, 'model.safetensors.index.json'), content);
    assert.throws(() => loadDecoderModel(index, backend), pattern);
  }
});

test('unknown architectures and encoder models are refused by name', () => {
  const dir = join(root, 'bert');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 1);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(bertConfigToJson(BERT_PRESETS['bert-tiny']!)));
  assert.throws(() => loadDecoderModel(dir, backend), /runs decoder-only GPT-2 and Llama models; this is a bert model/);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ model_type: 'gemma' }));
  assert.throws(() => loadDecoderModel(dir, backend), /field "model_type" is "gemma"/);
});

