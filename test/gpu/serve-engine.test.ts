// The serving engine (src/serve/engine.ts) on the GPU, f32, tiny random GPT-2 and Llama-GQA folders:
// requests under continuous batching (chunked prefill, prefix sharing, preemption) give the same tokens
// as each request alone through the CUDA decode engine (infer/generate.ts) and as the serving engine on
// the CPU; with a draft model (speculative serving), with decode steps run several at a time and with
// pipelined steps (and seeded sampling pipelined and not), the same tokens; sampled speculative rounds on
// the device emit tokens that follow the target's law (χ²) and read no row of logits back; no KV block
// leaks. Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { ServingEngineOptions, TokenEvent } from '../../src/serve/engine.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-serve-'));
after(() => rmSync(root, { recursive: true, force: true }));

const MODELS: { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig }[] = [
  { name: 'gpt2', family: 'gpt2', config: { ...TINY_GPT2, hidden: 64, heads: 2, ffn: 256, maxPositions: 128 } },
  { name: 'llama', family: 'llama', config: { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 128 } },
];
const shared = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 250);
const PROMPTS = [shared.slice(0, 35), [...shared, 3, 4], [9], shared.slice(0, 20), Array.from({ length: 50 }, (_, i) => 100 + i), [...shared.slice(0, 33), 200, 201, 202]];
const MAX_TOKENS = [30, 25, 60, 40, 20, 33];

const SEEDED: SamplingOptions = { temperature: 0.9, topK: 40, topP: 0.95 };

function serve(model: DecoderModel, options: ServingEngineOptions, sampling: SamplingOptions = { temperature: 0 }): { tokens: number[][]; preemptions: number; hits: number; drafted: number; accepted: number } {
  const engine = new ServingEngine(model, options);
  const tokens = PROMPTS.map(() => [] as number[]);
  PROMPTS.forEach((prompt, i) => engine.submit({
    prompt, maxTokens: MAX_TOKENS[i]!, sampling: resolveSampling({ ...sampling, seed: 31 + i }), stopTokenIds: [], onToken: (e) => tokens[i]!.push(e.token), onFinish: () => {},
  }));
  engine.runToCompletion();
  const s = engine.stats();
  assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
  engine.dispose();
  return { tokens, preemptions: s.preemptions, hits: s.prefixHits, drafted: s.draftedTokens, accepted: s.acceptedTokens };
}

for (const m of MODELS) {
  test(`${m.name}: the serving engine on CUDA equals one-at-a-time decoding and the CPU`, { skip }, async () => {
    const gpu = await createGpuBackend(), cpu = new CpuBackend();
    const dir = join(root, m.name);
    writeModelFolder(dir, m.family, m.config, 5);
    const load = (b: Backend) => loadDecoderModel(dir, b, { dtype: 'f32' }).model;
    const onGpu = load(gpu), onCpu = load(cpu);
    const alone: number[][] = [];
    for (const [i, p] of PROMPTS.entries()) alone.push((await generateBatch(onGpu, [p], { maxNewTokens: MAX_TOKENS[i]!, temperature: 0, stopTokenIds: [] }))[0]!);
    const batched = serve(onGpu, { maxRunning: 6, maxBatchTokens: 24, blockSize: 8 });
    assert.deepEqual(batched.tokens, alone, 'continuous batching + chunked prefill + prefix sharing');
    assert.ok(batched.hits > 0);
    const preempted = serve(onGpu, { maxRunning: 6, maxBatchTokens: 64, blockSize: 8, numBlocks: 20 });
    assert.deepEqual(preempted.tokens, alone, 'with preemption');
    assert.ok(preempted.preemptions > 0);
    assert.deepEqual(serve(onCpu, { maxRunning: 6, maxBatchTokens: 24, blockSize: 8 }).tokens, alone, 'the CPU serving engine');
    // Decode-only steps replayed as CUDA graphs, with preemption.
    assert.deepEqual(serve(onGpu, { maxRunning: 6, maxBatchTokens: 64, blockSize: 8, numBlocks: 20, graphs: true }).tokens, alone, 'decode steps as graphs');
    // Multi-step decoding: decode-only steps k at a time (decodeAdvance between them), eager and as graphs.
    for (const graphs of [false, true]) {
      assert.deepEqual(serve(onGpu, { maxRunning: 6, maxBatchTokens: 64, blockSize: 8, graphs, decodeSteps: 5 }).tokens, alone, `decode steps 5 at a time (graphs ${graphs})`);
    }
    // Pipelined steps: the next step launched before the tokens are read (feedTokens, downloadLater), eager and as graphs, with preemption.
    for (const graphs of [false, true]) {
      assert.deepEqual(serve(onGpu, { maxRunning: 6, maxBatchTokens: 24, blockSize: 8, graphs, pipeline: true }).tokens, alone, `pipelined steps (graphs ${graphs})`);
      assert.deepEqual(serve(onGpu, { maxRunning: 6, maxBatchTokens: 64, blockSize: 8, numBlocks: 20, graphs, pipeline: true }).tokens, alone, `pipelined steps with preemption (graphs ${graphs})`);
    }
    // Log-probabilities, pipelined: the logits rows downloaded behind the step (downloadLater) give the same
    // tokens and log-probabilities (within f32 noise: requests retire a step later, so steps batch differently).
    const withLogprobs = (pipeline: boolean) => {
      const engine = new ServingEngine(onGpu, { maxRunning: 6, maxBatchTokens: 24, blockSize: 8, graphs: true, pipeline, prefixCaching: false });
      const events = PROMPTS.map(() => [] as TokenEvent[]);
      PROMPTS.forEach((prompt, i) => engine.submit({
        prompt, maxTokens: 12, sampling: resolveSampling({ ...SEEDED, seed: 5 + i }), stopTokenIds: [], logprobs: i % 2 === 0 ? 3 : 0, onToken: (e) => events[i]!.push(e), onFinish: () => {},
      }));
      engine.runToCompletion();
      engine.dispose();
      return events;
    };
    const [pipelinedEvents, plainEvents] = [withLogprobs(true), withLogprobs(false)];
    assert.deepEqual(pipelinedEvents.map((es) => es.map((e) => e.token)), plainEvents.map((es) => es.map((e) => e.token)), 'tokens with log-probabilities, pipelined and not');
    pipelinedEvents.forEach((es, i) => es.forEach((e, j) => {
      const p = plainEvents[i]![j]!;
      assert.equal(e.top?.length, p.top?.length);
      if (e.logprob === undefined) return;
      assert.ok(Math.abs(e.logprob - p.logprob!) < 1e-4, `request ${i} token ${j}: logprob ${e.logprob} against ${p.logprob}`);
      e.top!.forEach((t, k) => assert.ok(t.token === p.top![k]!.token && Math.abs(t.logprob - p.top![k]!.logprob) < 1e-4, `request ${i} token ${j} top ${k}`));
    }));
    // Seeded sampling (no prefix sharing: the blocks a request shares would differ by when they were hashed).
    const seeded = { maxRunning: 6, maxBatchTokens: 24, blockSize: 8, graphs: true, prefixCaching: false };
    assert.deepEqual(serve(onGpu, { ...seeded, pipeline: true }, SEEDED).tokens, serve(onGpu, seeded, SEEDED).tokens, 'seeded sampling, pipelined and not');
    // Speculative serving: the model as its own draft checks the alignment of draft and target rows (its
    // tokens are accepted but where the decode and the flash path round a near-tie differently).
    const speculative = serve(onGpu, { maxRunning: 6, maxBatchTokens: 24, blockSize: 8, speculative: { draft: onGpu } });
    assert.deepEqual(speculative.tokens, alone, 'speculative serving (the model as its own draft)');
    assert.ok(speculative.drafted > 0 && speculative.accepted >= 0.95 * speculative.drafted, `${speculative.accepted} of ${speculative.drafted} accepted`);
    const draftDir = join(root, `${m.name}-draft`);
    writeModelFolder(draftDir, m.family, { ...m.config, layers: 1 }, 6);
    const draft = loadDecoderModel(draftDir, gpu, { dtype: 'f32' }).model;
    assert.deepEqual(serve(onGpu, { maxRunning: 6, maxBatchTokens: 64, blockSize: 8, numBlocks: 20, speculative: { draft } }).tokens, alone, 'speculative serving with another draft and preemption');
    draft.free();
    onGpu.free();
    onCpu.free();
  });
}

test('sampled speculative serving on CUDA: the token a round emits follows the target (χ² over 1200 seeds); no row of logits is read back', { skip }, async () => {
  const { chiSquare, chiSquareBound, secondTokenLaw } = await import('../infer/speculative-stats.js');
  const gpu = await createGpuBackend();
  const m = MODELS[0]!, dir = join(root, 'sampled-target'), draftDir = join(root, 'sampled-draft');
  writeModelFolder(dir, m.family, m.config, 5);
  writeModelFolder(draftDir, m.family, { ...m.config, layers: 1 }, 6);
  const target = loadDecoderModel(dir, gpu, { dtype: 'f32' }).model, draft = loadDecoderModel(draftDir, gpu, { dtype: 'f32' }).model;
  const V = target.vocabSize, prompt = PROMPTS[0]!, sampling = resolveSampling({ temperature: 1, topK: 8 });
  // The second token's law (the first comes from the prefill's sampling, the second from a round with K = 1).
  const expected = await secondTokenLaw(target, prompt, sampling);
  const original = gpu.download.bind(gpu);
  let largest = 0;
  gpu.download = (t) => { largest = Math.max(largest, t.numel); return original(t); };
  const N = 1200, seconds: number[] = [];
  const engine = new ServingEngine(target, { maxRunning: 16, maxBatchTokens: 64, blockSize: 8, speculative: { draft, deviceSampling: true } });
  try {
    for (let i = 0; i < N; i++) {
      const got: number[] = [];
      engine.submit({ prompt, maxTokens: 3, sampling: { ...sampling, seed: BigInt(7919 * i + 1) }, stopTokenIds: [], onToken: (e) => got.push(e.token), onFinish: () => { seconds.push(got[1]!); } });
    }
    engine.runToCompletion();
    const s = engine.stats();
    assert.ok(s.speculativeRounds >= N && s.acceptedTokens < s.draftedTokens, `${s.speculativeRounds} rounds, ${s.acceptedTokens} of ${s.draftedTokens} accepted`);
    assert.equal(engine.pool.usedBlocks, 0);
  } finally {
    gpu.download = original;
    engine.dispose();
  }
  const counts = new Array<number>(V).fill(0);
  for (const t of seconds) counts[t]!++;
  const [stat, df] = chiSquare(counts, expected, N);
  console.log(`# CUDA serving, sampled rounds on the device: chi2 = ${stat.toFixed(2)} (df ${df}, bound ${chiSquareBound(df).toFixed(2)})`);
  assert.ok(stat < chiSquareBound(df), `chi2 ${stat} >= ${chiSquareBound(df)}`);
  assert.ok(largest < V, `the largest read is ${largest} values: no row of V = ${V} logits`);
  draft.free();
  target.free();
});
