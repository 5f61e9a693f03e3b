// Multi-step decoding in the serving engine (decodeSteps: decode-only steps run k at a time on the
// device, decodeAdvance feeding each step's tokens to the next) on the CPU backend: the same tokens and
// finish reasons as one step at a time — greedy and seeded sampling, eager and graph-replayed, with
// prefix sharing, preemption, stop tokens, a stop that cancels from the token callback, and requests
// that fill the whole context window — and every block back at the end.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import { MAX_DECODE_STEPS, ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions } from '../../src/serve/engine.js';
import { tinyServingModels } from './tiny-models.js';

const models = tinyServingModels(5);

const PROMPTS = [[12, 40, 7, 99, 3], [5, 6], [100, 101, 102, 103, 104, 105, 106, 107, 108], [12, 40, 7, 99, 3, 18, 201], [9, 33, 1]];
const MAX_TOKENS = [19, 11, 23, 7, 16];

interface Run { tokens: number[][]; reasons: (FinishReason | undefined)[]; engine: ServingEngine }

function run(model: DecoderModel, options: ServingEngineOptions, sampling: SamplingOptions, extra: { stopTokenIds?: number[]; cancelOn?: number; maxTokens?: number[]; prompts?: number[][] } = {}): Run {
  const engine = new ServingEngine(model, options);
  const prompts = extra.prompts ?? PROMPTS;
  const tokens = prompts.map(() => [] as number[]), reasons: (FinishReason | undefined)[] = prompts.map(() => undefined);
  prompts.forEach((prompt, i) => {
    const id = engine.submit({
      prompt, maxTokens: (extra.maxTokens ?? MAX_TOKENS)[i]!, sampling: resolveSampling({ ...sampling, seed: 77 + i }), stopTokenIds: extra.stopTokenIds ?? [],
      onToken: (e) => { tokens[i]!.push(e.token); if (e.token === extra.cancelOn) engine.cancel(id, 'stop'); },
      onFinish: (r) => { reasons[i] = r; },
    });
  });
  engine.runToCompletion();
  assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
  return { tokens, reasons, engine };
}

for (const family of ['gpt2', 'llama'] as const) {
  const model = models[family];
  test(`${family}: k decode steps at a time give one step's tokens (greedy and sampled; eager and graphs; prefix sharing, preemption)`, () => {
    const settings: ServingEngineOptions[] = [
      { maxRunning: 8, maxBatchTokens: 32, blockSize: 4 },
      { maxRunning: 8, maxBatchTokens: 32, blockSize: 4, graphs: true },
      { maxRunning: 3, maxBatchTokens: 8, blockSize: 4 },                 // requests wait: multi-step only once the queue is empty
      { maxRunning: 5, maxBatchTokens: 16, blockSize: 4, maxLen: 40, numBlocks: 14 }, // preemption; reservations that fail fall back to one step
    ];
    for (const sampling of [{ temperature: 0 }, { temperature: 0.9, topK: 20, topP: 0.9 }]) {
      for (const options of settings) {
        const one = run(model, options, sampling);
        for (const decodeSteps of [2, 5]) {
          const many = run(model, { ...options, decodeSteps }, sampling);
          assert.deepEqual(many.tokens, one.tokens, `decodeSteps ${decodeSteps}, ${JSON.stringify(options)}, T ${sampling.temperature}`);
          assert.deepEqual(many.reasons, one.reasons);
          const s = many.engine.stats();
          assert.ok(s.multiStepRuns > 0, `steps ran ${decodeSteps} at a time (${JSON.stringify(options)})`);
          assert.equal(s.generatedTokens, one.engine.stats().generatedTokens);
          assert.ok(s.steps === one.engine.stats().steps || options.numBlocks !== undefined, 'as many model steps');
          many.engine.dispose();
        }
        assert.equal(one.engine.stats().multiStepRuns, 0);
        one.engine.dispose();
      }
    }
  });
}

test('stop tokens and a cancel from the token callback inside a run of steps end requests as one step at a time does', () => {
  const model = models.llama, options = { maxRunning: 8, maxBatchTokens: 32, blockSize: 4 };
  const free = run(model, options, {});
  const stop = free.tokens[2]![6]!, cancelOn = free.tokens[0]![9]!;
  for (const extra of [{ stopTokenIds: [stop] }, { cancelOn }]) {
    const one = run(model, options, {}, extra), many = run(model, { ...options, decodeSteps: 4 }, {}, extra);
    assert.deepEqual(many.tokens, one.tokens, JSON.stringify(extra));
    assert.deepEqual(many.reasons, one.reasons);
    assert.ok(one.reasons.includes('stop'), 'a request stopped');
    assert.ok(many.engine.stats().multiStepRuns > 0);
    one.engine.dispose();
    many.engine.dispose();
  }
});

test('requests that fill the whole context window get their last token right (one step and k at a time)', () => {
  const model = models.gpt2, prompts = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8]];
  // maxLen 16: the first request's 8 prompt tokens + 8 new ones fill it; a roomy engine is the reference.
  const reference = run(model, { maxRunning: 2, maxBatchTokens: 16, blockSize: 4, maxLen: 64 }, {}, { prompts, maxTokens: [8, 12] });
  for (const decodeSteps of [1, 3]) {
    const full = run(model, { maxRunning: 2, maxBatchTokens: 16, blockSize: 4, maxLen: 16, decodeSteps }, {}, { prompts, maxTokens: [8, 12] });
    assert.deepEqual(full.tokens, reference.tokens, `decodeSteps ${decodeSteps}`);
    assert.deepEqual(full.reasons, ['length', 'length']);
    full.engine.dispose();
  }
  reference.engine.dispose();
});

test('decodeSteps must be an integer in [1, MAX_DECODE_STEPS]', () => {
  for (const decodeSteps of [0, 1.5, MAX_DECODE_STEPS + 1]) {
    assert.throws(() => new ServingEngine(models.gpt2, { decodeSteps }), /decodeSteps must be an integer in \[1, 16\]/);
  }
});
