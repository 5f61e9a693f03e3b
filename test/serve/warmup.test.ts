// The serving warm-up (src/serve/warmup.ts) on the CPU backend: it runs one prompt of each power-of-two
// length up to the step budget and decode waves of each power-of-two batch up to maxRunning, leaves the
// engine idle with no block in use beyond the prefix cache's, and later requests give the same tokens as
// on an engine that was never warmed up.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { randomDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { presetConfig } from '../../src/models/registry.js';
import { decodeBucket, ServingEngine } from '../../src/serve/engine.js';
import { warmUp } from '../../src/serve/warmup.js';

const backend = new CpuBackend();
const model = randomDecoderModel(presetConfig('gpt2-tiny'), backend, { dtype: 'f32', seed: 5n, std: 0.2 });
const options = { maxRunning: 5, maxBatchTokens: 48, maxLen: 64, blockSize: 8, prefixCaching: false };

function generate(engine: ServingEngine, prompts: number[][]): number[][] {
  const out = prompts.map(() => [] as number[]);
  prompts.forEach((prompt, i) => engine.submit({
    prompt, maxTokens: 6, sampling: resolveSampling({ temperature: 0 }), stopTokenIds: [],
    onToken: (e) => { out[i]!.push(e.token); }, onFinish: () => {},
  }));
  engine.runToCompletion();
  return out;
}

test('warm-up runs each power-of-two prompt length and decode batch, then serves exactly as a cold engine', () => {
  const warm = new ServingEngine(model, options), cold = new ServingEngine(model, options);
  try {
    const report = warmUp(warm);
    assert.deepEqual(report.promptLengths, [16, 32, 48]);
    assert.deepEqual(report.decodeBatches, [1, 2, 4, 5]);
    const stats = warm.stats();
    assert.deepEqual([stats.running, stats.waiting, stats.blocksUsed, warm.hasWork], [0, 0, 0, false]);
    // 3 prompt steps (one sampled token each), then per wave a prompt step and 2 decode steps.
    assert.equal(report.steps, 3 + 4 * 3);
    assert.equal(stats.steps, report.steps);
    const prompts = [[3, 9, 27, 81], [5, 25, 125, 100, 7, 1, 2], [11]];
    assert.deepEqual(generate(warm, prompts), generate(cold, prompts));
  } finally {
    warm.dispose();
    cold.dispose();
  }
});

test('warm-up refuses an engine that already has requests', () => {
  const engine = new ServingEngine(model, options);
  try {
    engine.submit({ prompt: [1, 2], maxTokens: 2, sampling: resolveSampling({ temperature: 0 }), stopTokenIds: [], onToken: () => {}, onFinish: () => {} });
    assert.throws(() => warmUp(engine), /serving warm-up: the engine already has requests/);
  } finally {
    engine.dispose();
  }
});

test('decode buckets: powers of two up to 32, then multiples of 32, capped at maxRunning; warm-up runs one wave per bucket', () => {
  assert.deepEqual([1, 2, 3, 5, 17, 32, 33, 64, 65, 130, 256].map((n) => decodeBucket(n, 256)), [1, 2, 4, 8, 32, 32, 64, 64, 96, 160, 256]);
  assert.equal(decodeBucket(20, 16), 16);
  assert.equal(decodeBucket(70, 100), 96);
  assert.equal(decodeBucket(99, 100), 100);
  const engine = new ServingEngine(model, { maxRunning: 100, maxBatchTokens: 16, maxLen: 24, blockSize: 8, prefixCaching: false });
  try {
    assert.deepEqual(warmUp(engine).decodeBatches, [1, 2, 4, 8, 16, 32, 64, 96, 100]);
  } finally {
    engine.dispose();
  }
});

test('GEMM autotuning: on in the warm-up\'s steps, off in live steps, the backend\'s own setting restored after each step', () => {
  // A backend that tunes: it records the setting each step runs with.
  const tuning = backend as CpuBackend & { setGemmTuning?: (enabled: boolean) => boolean };
  let setting = true;
  const seen: boolean[] = [];
  tuning.setGemmTuning = (enabled) => { const previous = setting; setting = enabled; seen.push(enabled); return previous; };
  const engine = new ServingEngine(model, options);
  try {
    assert.equal(engine.gemmTuning, false);
    warmUp(engine);
    assert.ok(seen.length > 0 && seen.filter((_, i) => i % 2 === 0).every((x) => x), 'every warm-up step ran with tuning on');
    assert.equal(engine.gemmTuning, false, 'back off after the warm-up');
    seen.length = 0;
    generate(engine, [[4, 8, 15, 16, 23, 42]]);
    assert.ok(seen.length > 0 && seen.filter((_, i) => i % 2 === 0).every((x) => !x), 'live steps ran with tuning off');
    assert.equal(setting, true, "the backend's setting is restored after each step");
  } finally {
    delete tuning.setGemmTuning;
    engine.dispose();
  }
});
