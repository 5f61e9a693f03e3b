// Pipelined steps in the serving engine (pipeline: the host launches step i + 1 before it reads step
// i's tokens; feedTokens gives step i + 1 the tokens step i sampled) on the CPU backend: the same tokens
// and finish reasons as the engine without them — greedy and seeded sampling, eager and graph-replayed,
// chunked prompts, prefix sharing, preemption, stop tokens, a cancel from the token callback, requests
// filling the whole context window, log-probabilities (their logits read behind the step too), steps
// that must run on their own (a repetition penalty) among pipelined ones — every block back at the end,
// tokens arriving one step late.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions, TokenEvent } from '../../src/serve/engine.js';
import { tinyServingModels } from './tiny-models.js';

const models = tinyServingModels(5);

const PROMPTS = [[12, 40, 7, 99, 3], [5, 6], [100, 101, 102, 103, 104, 105, 106, 107, 108], [12, 40, 7, 99, 3, 18, 201], [9, 33, 1], [12, 40, 7, 99, 3, 18, 201, 4, 4]];
const MAX_TOKENS = [19, 11, 23, 7, 16, 9];

interface Extra { stopTokenIds?: number[]; cancelOn?: number; maxTokens?: number[]; prompts?: number[][]; logprobs?: number[]; penalty?: number[] }
interface Run { events: TokenEvent[][]; reasons: (FinishReason | undefined)[]; engine: ServingEngine }

function run(model: DecoderModel, options: ServingEngineOptions, sampling: SamplingOptions, extra: Extra = {}): Run {
  const engine = new ServingEngine(model, options);
  const prompts = extra.prompts ?? PROMPTS;
  const events = prompts.map(() => [] as TokenEvent[]), reasons: (FinishReason | undefined)[] = prompts.map(() => undefined);
  prompts.forEach((prompt, i) => {
    const id = engine.submit({
      prompt, maxTokens: (extra.maxTokens ?? MAX_TOKENS)[i]!, stopTokenIds: extra.stopTokenIds ?? [], logprobs: extra.logprobs?.[i] ?? 0,
      sampling: resolveSampling({ ...sampling, seed: 77 + i, repetitionPenalty: extra.penalty?.[i] ?? 1 }),
      onToken: (e) => { events[i]!.push(e); if (e.token === extra.cancelOn) engine.cancel(id, 'stop'); },
      onFinish: (r) => { reasons[i] = r; },
    });
  });
  engine.runToCompletion();
  assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
  assert.equal(engine.hasWork, false);
  return { events, reasons, engine };
}

function assertSame(pipelined: Run, plain: Run, what: string): void {
  assert.deepEqual(pipelined.events, plain.events, what);
  assert.deepEqual(pipelined.reasons, plain.reasons, what);
  assert.equal(pipelined.engine.stats().generatedTokens, plain.engine.stats().generatedTokens, what);
  pipelined.engine.dispose();
  plain.engine.dispose();
}

for (const family of ['gpt2', 'llama'] as const) {
  const model = models[family];
  test(`${family}: pipelined steps give the engine's tokens (greedy and sampled; eager and graphs; chunked prompts, prefix sharing, preemption)`, () => {
    const settings: ServingEngineOptions[] = [
      { maxRunning: 8, maxBatchTokens: 32, blockSize: 4 },
      { maxRunning: 8, maxBatchTokens: 32, blockSize: 4, graphs: true },
      { maxRunning: 3, maxBatchTokens: 6, blockSize: 4, graphs: true },                 // prompts in chunks, requests waiting for slots
      { maxRunning: 5, maxBatchTokens: 16, blockSize: 4, maxLen: 40, numBlocks: 14 }, // preemption
    ];
    for (const sampling of [{ temperature: 0 }, { temperature: 0.9, topK: 20, topP: 0.9 }]) {
      for (const options of settings) {
        const pipelined = run(model, { ...options, pipeline: true }, sampling);
        assert.equal(pipelined.engine.pipelined, true);
        const plain = run(model, { ...options, pipeline: false }, sampling);
        if (options.numBlocks !== undefined) assert.ok(pipelined.engine.stats().preemptions > 0, 'the small pool preempts');
        if (options.graphs) assert.ok(pipelined.engine.stats().graphSteps > 0, 'steps were replayed');
        assertSame(pipelined, plain, `${JSON.stringify(options)}, T ${sampling.temperature}`);
      }
    }
  });
}

test('pipelined: stop tokens, a cancel from the token callback and a full context window end requests as without', () => {
  const model = models.llama, options = { maxRunning: 8, maxBatchTokens: 32, blockSize: 4 };
  const free = run(model, options, {});
  const stop = free.events[2]![6]!.token, cancelOn = free.events[0]![9]!.token;
  free.engine.dispose();
  for (const extra of [{ stopTokenIds: [stop] }, { cancelOn }]) {
    const pipelined = run(model, { ...options, pipeline: true }, {}, extra), plain = run(model, options, {}, extra);
    assert.ok(plain.reasons.includes('stop'), 'a request stopped');
    assertSame(pipelined, plain, JSON.stringify(extra));
  }
  // maxLen 16: the first request's 8 prompt tokens + 8 new ones fill it.
  const prompts = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8]], full = { maxRunning: 2, maxBatchTokens: 16, blockSize: 4, maxLen: 16 };
  const pipelined = run(models.gpt2, { ...full, pipeline: true }, {}, { prompts, maxTokens: [8, 12] });
  const plain = run(models.gpt2, full, {}, { prompts, maxTokens: [8, 12] });
  assert.deepEqual(pipelined.reasons, ['length', 'length']);
  assertSame(pipelined, plain, 'full context');
});

test('pipelined: log-probabilities come with their tokens; steps with a repetition penalty run on their own among pipelined ones; same events', () => {
  const model = models.gpt2, options = { maxRunning: 4, maxBatchTokens: 16, blockSize: 4, graphs: true };
  for (const extra of [{ logprobs: [0, 3, 0, 5, 0, 1] }, { logprobs: [0, 3, 0, 0, 0, 0], penalty: [1, 1, 1, 1.3, 1, 1] }]) {
    for (const sampling of [{ temperature: 0 }, { temperature: 0.8 }]) {
      const pipelined = run(model, { ...options, pipeline: true }, sampling, extra), plain = run(model, options, sampling, extra);
      assert.ok(plain.events[1]!.every((e) => e.top?.length === 3), 'log-probabilities reported');
      assertSame(pipelined, plain, `${JSON.stringify(extra)}, T ${sampling.temperature}`);
    }
  }
  // Log-probabilities alone keep the steps pipelined: the first step's token arrives with the second.
  const engine = new ServingEngine(model, { ...options, pipeline: true });
  const got: TokenEvent[] = [];
  engine.submit({ prompt: PROMPTS[0]!, maxTokens: 4, sampling: resolveSampling({}), stopTokenIds: [], logprobs: 2, onToken: (e) => got.push(e), onFinish: () => {} });
  engine.step();
  assert.equal(got.length, 0);
  engine.step();
  assert.equal(got.length, 1);
  assert.equal(got[0]!.top?.length, 2);
  engine.runToCompletion();
  engine.dispose();
});

test('pipelined: a step\'s tokens arrive with the next step; a cancel between steps frees the blocks at once', () => {
  const engine = new ServingEngine(models.gpt2, { maxRunning: 4, maxBatchTokens: 64, blockSize: 4, prefixCaching: false, pipeline: true });
  const got: number[][] = [[], []];
  const ids = [0, 1].map((i) => engine.submit({
    prompt: PROMPTS[i + 2]!, maxTokens: 6, sampling: resolveSampling({}), stopTokenIds: [],
    onToken: (e) => got[i]!.push(e.token), onFinish: () => {},
  }));
  engine.step();
  assert.deepEqual(got.map((g) => g.length), [0, 0], 'the first step is still in flight');
  engine.step();
  assert.deepEqual(got.map((g) => g.length), [1, 1], 'its tokens come with the second step');
  const before = engine.pool.usedBlocks;
  assert.ok(engine.cancel(ids[0]!));
  assert.ok(engine.pool.usedBlocks < before, 'the cancelled request\'s blocks are free at once');
  engine.runToCompletion();
  assert.equal(got[0]!.length, 1, 'nothing reaches a cancelled request, not even its step in flight');
  assert.equal(got[1]!.length, 6);
  assert.equal(engine.pool.usedBlocks, 0);
  // The last step() only finishes the step in flight: six tokens took six steps launched, seven calls.
  assert.equal(engine.stats().steps, 6);
  engine.dispose();
});

test('pipelined steps refuse a draft model and decodeSteps > 1, naming them; the environment turns them on only where they apply', () => {
  assert.throws(() => new ServingEngine(models.gpt2, { pipeline: true, decodeSteps: 4 }), /pipelined steps do not go together with decodeSteps 4/);
  assert.throws(() => new ServingEngine(models.gpt2, { pipeline: true, speculative: { draft: models.gpt2 } }), /pipelined steps do not go together with a draft model/);
  const saved = process.env['FUSEFORMER_SERVE_PIPELINE'];
  process.env['FUSEFORMER_SERVE_PIPELINE'] = '1';
  try {
    const on = new ServingEngine(models.gpt2, {}), off = new ServingEngine(models.gpt2, { decodeSteps: 4 });
    assert.deepEqual([on.pipelined, off.pipelined], [true, false]);
    on.dispose();
    off.dispose();
    // =0 turns the default off (on CUDA it is on); the option still wins.
    process.env['FUSEFORMER_SERVE_PIPELINE'] = '0';
    const envOff = new ServingEngine(models.gpt2, {}), asked = new ServingEngine(models.gpt2, { pipeline: true });
    assert.deepEqual([envOff.pipelined, asked.pipelined], [false, true]);
    envOff.dispose();
    asked.dispose();
  } finally {
    if (saved === undefined) delete process.env['FUSEFORMER_SERVE_PIPELINE'];
    else process.env['FUSEFORMER_SERVE_PIPELINE'] = saved;
  }
  // On the CPU backend the default is off (on CUDA, on).
  const plain = new ServingEngine(models.gpt2, {});
  assert.equal(plain.pipelined, saved === '1');
  plain.dispose();
});
