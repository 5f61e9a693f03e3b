// The serving engine on the CPU backend with tiny random GPT-2 and Llama folders: requests decoded under
// continuous batching (chunked prefill, mixed batches, prefix sharing, preemption) give the same tokens as
// the same requests run one at a time, and as the existing decode engine (infer/generate.ts); cancellation
// frees blocks at once; no block leaks.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { generateBatch } from '../../src/infer/generate.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions, TokenEvent } from '../../src/serve/engine.js';
import { tinyServingModels } from './tiny-models.js';

const models = tinyServingModels(11);

const shared = [12, 40, 7, 99, 3, 18, 201, 5, 77, 64, 9, 33, 1, 2, 150, 8, 42];
const PROMPTS: number[][] = [
  shared.slice(0, 13),
  [...shared, 70, 71],
  [5, 6],
  [...shared.slice(0, 16), 250, 251, 252],
  [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123],
  shared.slice(0, 16),
];
const MAX_TOKENS = [20, 14, 30, 9, 17, 12];

interface Outcome { tokens: number[]; reason: FinishReason | undefined; events: TokenEvent[] }

function runAll(model: DecoderModel, options: ServingEngineOptions, prompts: number[][], sampling: SamplingOptions = {}, stopTokenIds: number[] = [], indices = prompts.map((_, i) => i)): { outcomes: Outcome[]; engine: ServingEngine } {
  const engine = new ServingEngine(model, options);
  const outcomes = prompts.map((prompt, k) => {
    const i = indices[k]!;
    const o: Outcome = { tokens: [], reason: undefined, events: [] };
    engine.submit({
      prompt, maxTokens: MAX_TOKENS[i % MAX_TOKENS.length]!, sampling: resolveSampling({ ...sampling, seed: 1000 + i }), stopTokenIds,
      onToken: (e) => { o.tokens.push(e.token); o.events.push(e); }, onFinish: (r) => { o.reason = r; },
    });
    return o;
  });
  engine.runToCompletion();
  return { outcomes, engine };
}

/** Each request alone in a fresh engine (the reference for batching); `indices` pick max tokens and seeds. */
function oneAtATime(model: DecoderModel, prompts: number[][], sampling: SamplingOptions = {}, indices = prompts.map((_, i) => i)): number[][] {
  return prompts.map((p, k) => {
    const { outcomes, engine } = runAll(model, { maxRunning: 1, maxBatchTokens: 64, prefixCaching: false }, [p], sampling, [], [indices[k]!]);
    engine.dispose();
    return outcomes[0]!.tokens;
  });
}

for (const family of ['gpt2', 'llama'] as const) {
  const model = models[family];

  test(`${family}: one request at a time equals the decode engine (greedy)`, async () => {
    const alone = PROMPTS.map((p, i) => runAlone(model, p, i));
    for (let i = 0; i < PROMPTS.length; i++) {
      const [reference] = await generateBatch(model, [PROMPTS[i]!], { maxNewTokens: MAX_TOKENS[i]!, temperature: 0, stopTokenIds: [] });
      assert.deepEqual(alone[i], reference, `prompt ${i}`);
    }
  });

  const settings: [string, ServingEngineOptions, (e: ServingEngine) => void][] = [
    ['chunked prefill + prefix sharing', { maxRunning: 4, maxBatchTokens: 8, blockSize: 4 }, (e) => assert.ok(e.stats().prefixHits > 0, 'the shared prompt prefix hit the cache')],
    ['no prefix caching', { maxRunning: 6, maxBatchTokens: 16, blockSize: 4, prefixCaching: false }, (e) => assert.equal(e.stats().prefixHits, 0)],
    ['preemption (a pool of 20 blocks)', { maxRunning: 6, maxBatchTokens: 32, blockSize: 4, numBlocks: 20 }, (e) => assert.ok(e.stats().preemptions > 0, 'requests were preempted')],
    ['preemption without prefix caching', { maxRunning: 6, maxBatchTokens: 12, blockSize: 4, numBlocks: 16, prefixCaching: false }, (e) => assert.ok(e.stats().preemptions > 0)],
  ];
  for (const [name, options, check] of settings) {
    test(`${family}: continuous batching equals one at a time, greedy and sampled (${name})`, () => {
      for (const sampling of [{ temperature: 0 }, { temperature: 0.9, topK: 40, topP: 0.95 }]) {
        const expected = oneAtATime(model, PROMPTS, sampling);
        const { outcomes, engine } = runAll(model, options, PROMPTS, sampling);
        outcomes.forEach((o, i) => {
          assert.deepEqual(o.tokens, expected[i], `request ${i} (temperature ${sampling.temperature})`);
          assert.equal(o.reason, 'length');
        });
        check(engine);
        assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
        assert.equal(engine.hasWork, false);
        engine.dispose();
      }
    });
  }
}

function runAlone(model: DecoderModel, prompt: number[], i: number): number[] {
  const engine = new ServingEngine(model, { maxRunning: 1, maxBatchTokens: 5, blockSize: 4 });
  const out: number[] = [];
  engine.submit({ prompt, maxTokens: MAX_TOKENS[i]!, sampling: resolveSampling({}), stopTokenIds: [], onToken: (e) => out.push(e.token), onFinish: () => {} });
  engine.runToCompletion();
  engine.dispose();
  return out;
}

test('stop tokens end a request with reason stop; the stop token is reported', () => {
  const model = models.llama;
  const free = oneAtATime(model, [PROMPTS[2]!], {}, [2])[0]!;
  const stop = free[5]!;
  const first = free.indexOf(stop);
  const { outcomes, engine } = runAll(model, { maxRunning: 2 }, [PROMPTS[2]!], {}, [stop], [2]);
  assert.deepEqual(outcomes[0]!.tokens, free.slice(0, first + 1));
  assert.equal(outcomes[0]!.reason, 'stop');
  engine.dispose();
});

test('cancel frees a running request\'s blocks at once; the others finish unchanged', () => {
  const model = models.gpt2;
  const engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 64, blockSize: 4, prefixCaching: false });
  const got: number[][] = [[], []];
  const reasons: (FinishReason | undefined)[] = [undefined, undefined];
  const ids = [0, 1].map((i) => engine.submit({
    prompt: PROMPTS[i + 2]!, maxTokens: 20, sampling: resolveSampling({}), stopTokenIds: [],
    onToken: (e) => got[i]!.push(e.token), onFinish: (r) => { reasons[i] = r; },
  }));
  engine.step();
  engine.step();
  const before = engine.pool.usedBlocks;
  assert.ok(engine.cancel(ids[0]!));
  assert.equal(reasons[0], 'cancelled');
  assert.ok(engine.pool.usedBlocks < before, 'its blocks went back to the pool');
  assert.equal(engine.cancel(ids[0]!), false, 'a second cancel does nothing');
  engine.runToCompletion();
  assert.equal(got[0]!.length, 2);
  const alone = new ServingEngine(model, { maxRunning: 1 }), expected: number[] = [];
  alone.submit({ prompt: PROMPTS[3]!, maxTokens: 20, sampling: resolveSampling({}), stopTokenIds: [], onToken: (x) => expected.push(x.token), onFinish: () => {} });
  alone.runToCompletion();
  alone.dispose();
  assert.deepEqual(got[1], expected);
  assert.equal(reasons[1], 'length');
  assert.equal(engine.pool.usedBlocks, 0);
  engine.dispose();
});

test('logprobs: the sampled token\'s log-probability and the top 5, sorted, from a normalised distribution', () => {
  const model = models.llama;
  const engine = new ServingEngine(model, { maxRunning: 2 });
  const events: TokenEvent[] = [];
  engine.submit({ prompt: PROMPTS[0]!, maxTokens: 4, logprobs: 5, sampling: resolveSampling({}), stopTokenIds: [], onToken: (e) => events.push(e), onFinish: () => {} });
  engine.runToCompletion();
  assert.equal(events.length, 4);
  for (const e of events) {
    assert.equal(e.top!.length, 5);
    assert.equal(e.top![0]!.token, e.token, 'greedy picks the most likely token');
    assert.ok(Math.abs(e.top![0]!.logprob - e.logprob!) < 1e-9);
    for (let i = 1; i < 5; i++) assert.ok(e.top![i]!.logprob <= e.top![i - 1]!.logprob);
    const mass = e.top!.reduce((s, t) => s + Math.exp(t.logprob), 0);
    assert.ok(mass > 0 && mass <= 1 + 1e-9);
  }
  assert.throws(() => engine.submit({ prompt: [1], maxTokens: 1, logprobs: 6, sampling: resolveSampling({}), stopTokenIds: [], onToken: () => {}, onFinish: () => {} }), /logprobs must be an integer in \[0, 5\]/);
  assert.throws(() => engine.submit({ prompt: new Array(64).fill(1), maxTokens: 1, sampling: resolveSampling({}), stopTokenIds: [], onToken: () => {}, onFinish: () => {} }), /at most 63/);
  engine.dispose();
});

test('busy slots stay compact (0..running − 1) as requests finish, so decode steps shrink to the rows in use; tokens unchanged', () => {
  const model = models.llama;
  const options = { maxRunning: 6, maxBatchTokens: 32, blockSize: 4, graphs: true };
  const engine = new ServingEngine(model, options);
  const expected = oneAtATime(model, PROMPTS);
  const tokens = PROMPTS.map(() => [] as number[]);
  const ids = PROMPTS.map((prompt, i) => engine.submit({
    prompt, maxTokens: MAX_TOKENS[i % MAX_TOKENS.length]!, sampling: resolveSampling({ seed: 1000 + i }), stopTokenIds: [],
    onToken: (e) => { tokens[i]!.push(e.token); }, onFinish: () => {},
  }));
  let sawShrink = false;
  while (engine.hasWork) {
    engine.step();
    const slots = ids.map((id) => engine.slotOf(id)).filter((s) => s >= 0).sort((a, b) => a - b);
    assert.deepEqual(slots, slots.map((_, i) => i), `busy slots ${slots.join(', ')}`);
    if (slots.length > 0 && slots.length < Math.min(PROMPTS.length, options.maxRunning)) sawShrink = true;
  }
  assert.ok(sawShrink, 'some requests finished while others ran');
  const stats = engine.stats();
  assert.ok(stats.graphSteps > 0 && stats.graphRowsUsed <= stats.graphRowsComputed, `graph rows ${stats.graphRowsUsed} of ${stats.graphRowsComputed}`);
  assert.ok(stats.graphRowsComputed < stats.graphSteps * options.maxRunning, 'the buckets shrank with the requests running');
  tokens.forEach((t, i) => assert.deepEqual(t, expected[i], `request ${i}`));
  engine.dispose();
});

for (const family of ['gpt2', 'llama'] as const) {
  test(`${family}: a repetition penalty (the history the sampler reads) gives the decode engine's tokens, batched, chunked and graph-replayed`, async () => {
    const model = models[family];
    for (const sampling of [{ temperature: 0, repetitionPenalty: 1.8 }, { temperature: 0.9, topK: 40, repetitionPenalty: 1.3 }]) {
      const expected: number[][] = [];
      for (let i = 0; i < PROMPTS.length; i++) {
        const [tokens] = await generateBatch(model, [PROMPTS[i]!], { ...sampling, seed: 1000 + i, maxNewTokens: MAX_TOKENS[i]!, stopTokenIds: [] });
        expected.push(tokens!);
      }
      for (const options of [{ maxRunning: 4, maxBatchTokens: 8, blockSize: 4 }, { maxRunning: 6, maxBatchTokens: 32, blockSize: 4, graphs: true }]) {
        const { outcomes, engine } = runAll(model, options, PROMPTS, sampling);
        outcomes.forEach((o, i) => assert.deepEqual(o.tokens, expected[i], `request ${i} (${JSON.stringify(sampling)}, ${JSON.stringify(options)})`));
        engine.dispose();
      }
    }
  });
}

for (const family of ['gpt2', 'llama'] as const) {
  test(`${family}: decode-only steps replayed as graphs give the eager engine's tokens and logprobs`, () => {
    const model = models[family];
    for (const sampling of [{ temperature: 0 }, { temperature: 0.9, topK: 40, topP: 0.95 }]) {
      for (const options of [{ maxRunning: 4, maxBatchTokens: 8, blockSize: 4 }, { maxRunning: 6, maxBatchTokens: 32, blockSize: 4, numBlocks: 20 }]) {
        const eager = runAll(model, options, PROMPTS, sampling);
        const graphs = runAll(model, { ...options, graphs: true }, PROMPTS, sampling);
        graphs.outcomes.forEach((o, i) => assert.deepEqual(o.tokens, eager.outcomes[i]!.tokens, `request ${i} (temperature ${sampling.temperature})`));
        const s = graphs.engine.stats();
        assert.ok(s.graphSteps > 0, 'decode-only steps were replayed');
        assert.ok(s.graphSteps < s.steps, 'steps with prompt chunks ran eagerly');
        assert.equal(eager.engine.stats().graphSteps, 0);
        assert.equal(graphs.engine.pool.usedBlocks, 0);
        eager.engine.dispose();
        graphs.engine.dispose();
      }
    }
  });
}

test('graph-replayed decode steps report the same logprobs; graphs with a draft model are refused', () => {
  const model = models.llama;
  const run = (graphs: boolean) => {
    const engine = new ServingEngine(model, { maxRunning: 2, graphs });
    const events: TokenEvent[] = [];
    engine.submit({ prompt: PROMPTS[0]!, maxTokens: 6, logprobs: 3, sampling: resolveSampling({}), stopTokenIds: [], onToken: (e) => events.push(e), onFinish: () => {} });
    engine.runToCompletion();
    const replayed = engine.stats().graphSteps;
    engine.dispose();
    return { events, replayed };
  };
  const eager = run(false), graphs = run(true);
  assert.ok(graphs.replayed >= 3);
  graphs.events.forEach((e, i) => {
    assert.equal(e.token, eager.events[i]!.token);
    assert.ok(Math.abs(e.logprob! - eager.events[i]!.logprob!) < 1e-9);
    assert.deepEqual(e.top, eager.events[i]!.top);
  });
  assert.throws(() => new ServingEngine(model, { graphs: true, speculative: { draft: model } }), /graphs and speculative decoding do not go together/);
});
