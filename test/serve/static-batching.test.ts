// Static batching (scheduler.ts, batching: 'static'), the baseline of bench/serve-speed.ts: waves of up to
// maxRunning requests, the next admitted only once the whole previous wave has finished; a preempted
// member stays in its wave. On the CPU engine, greedy outputs equal continuous batching's.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { randomDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { presetConfig } from '../../src/models/registry.js';
import { BlockPool } from '../../src/serve/block-pool.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { Batching } from '../../src/serve/engine.js';
import { Scheduler } from '../../src/serve/scheduler.js';
import type { SchedRequest, StepPlan } from '../../src/serve/scheduler.js';

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const ids = (plan: StepPlan) => plan.admitted.map((a) => a.request.id);

/** Marks a request finished by its "engine": the scheduler forgets it and frees its blocks. */
function finish(s: Scheduler, r: SchedRequest): void { s.remove(r); }

test('scheduler, static: the next wave is admitted only when nothing runs; continuous admits at once', () => {
  for (const batching of ['static', 'continuous'] as const) {
    const s = new Scheduler(new BlockPool(32, 4), { maxBatchTokens: 64, maxRunning: 2, batching });
    const [a, b, c] = [s.add('a', range(5)), s.add('b', range(6)), s.add('c', range(7))];
    let plan = s.schedule();
    assert.deepEqual(ids(plan), ['a', 'b'], `${batching}: the first wave fills maxRunning`);
    s.complete(plan.items);
    a.tokens.push(1); b.tokens.push(1);
    finish(s, a);
    plan = s.schedule();
    if (batching === 'static') {
      assert.deepEqual(ids(plan), [], 'static: a finished but b still runs, so c waits');
      assert.deepEqual(plan.items.map((it) => it.request.id), ['b']);
      s.complete(plan.items);
      s.add('d', range(3));
      finish(s, b);
      plan = s.schedule();
      assert.deepEqual(ids(plan), ['c', 'd'], 'static: the wave is done; the next one takes the queue head');
    } else {
      assert.deepEqual(ids(plan), ['c'], 'continuous: c takes a\'s slot in the very next step');
    }
    s.complete(plan.items);
    void c;
  }
});

test('scheduler, static: a wave is admitted over several steps when the token budget is short, and later arrivals wait', () => {
  const s = new Scheduler(new BlockPool(64, 4), { maxBatchTokens: 8, maxRunning: 3, batching: 'static' });
  s.add('a', range(6)); s.add('b', range(6)); s.add('c', range(6));
  let plan = s.schedule();
  assert.deepEqual(ids(plan), ['a', 'b'], 'a whole, b gets the 2 positions left');
  s.complete(plan.items);
  s.add('late', range(2));
  plan = s.schedule();
  assert.deepEqual(ids(plan), ['c'], 'c is a member of the wave that formed at the start; late is not');
  s.complete(plan.items);
  finish(s, s.running[0]!);
  plan = s.schedule();
  assert.deepEqual(ids(plan), [], 'a slot is free, but the wave still runs: late waits');
  s.complete(plan.items);
  for (const r of [...s.running]) finish(s, r);
  assert.deepEqual(ids(s.schedule()), ['late']);
});

test('scheduler, static: a preempted member is readmitted within its wave, before later arrivals', () => {
  const s = new Scheduler(new BlockPool(4, 2), { maxBatchTokens: 8, maxRunning: 2, prefixCaching: false, batching: 'static' });
  const a = s.add('a', range(3)), b = s.add('b', range(3));
  let plan = s.schedule();
  assert.deepEqual(ids(plan), ['a', 'b']);
  s.complete(plan.items); // 2 blocks each: the pool is full
  a.tokens.push(1); b.tokens.push(1);
  plan = s.schedule(); // position 3 of each fits in its second block
  s.complete(plan.items);
  a.tokens.push(1); b.tokens.push(1);
  plan = s.schedule(); // a needs a third block: b (the newest) is preempted
  assert.deepEqual(plan.preempted.map((r) => r.id), ['b']);
  s.complete(plan.items);
  s.add('d', range(2));
  a.tokens.push(1);
  plan = s.schedule();
  assert.deepEqual(ids(plan), [], 'b needs 3 blocks, 1 is free: nothing admitted, and d is not a member');
  s.complete(plan.items);
  finish(s, a);
  plan = s.schedule();
  assert.deepEqual(ids(plan), ['b'], 'nothing runs, but the wave is not done: b comes back, d still waits');
  s.complete(plan.items);
  finish(s, b);
  plan = s.schedule();
  assert.deepEqual(ids(plan), ['d']);
});

test('scheduler: an unknown batching mode is an error', () => {
  assert.throws(() => new Scheduler(new BlockPool(4, 2), { maxBatchTokens: 8, maxRunning: 2, batching: 'waves' as Batching }), /batching must be 'continuous' or 'static', got 'waves'/);
});

const backend = new CpuBackend();
const model = randomDecoderModel(presetConfig('gpt2-tiny'), backend, { dtype: 'f32', seed: 3n, std: 0.2 });
const PROMPTS = [range(9, 5), range(4, 200), range(13, 40), range(6, 150), range(11, 77), range(3, 240), range(8, 12)];
const MAX_TOKENS = [7, 15, 4, 11, 9, 5, 12];

interface Trace { tokens: number[]; firstStep: number; finishStep: number }

function run(batching: Batching): { traces: Trace[]; engine: ServingEngine } {
  const engine = new ServingEngine(model, { maxLen: 64, maxRunning: 3, maxBatchTokens: 64, blockSize: 4, batching });
  const traces = PROMPTS.map((prompt, i) => {
    const t: Trace = { tokens: [], firstStep: -1, finishStep: -1 };
    engine.submit({
      prompt, maxTokens: MAX_TOKENS[i]!, sampling: resolveSampling({ temperature: 0 }), stopTokenIds: [],
      onToken: (e) => { if (t.tokens.push(e.token) === 1) t.firstStep = engine.stats().steps; },
      onFinish: () => { t.finishStep = engine.stats().steps; },
    });
    return t;
  });
  engine.runToCompletion();
  return { traces, engine };
}

test('engine, static: greedy outputs equal continuous batching\'s; waves of 3 start only when the previous one is done', () => {
  const continuous = run('continuous'), wave = run('static');
  wave.traces.forEach((t, i) => assert.deepEqual(t.tokens, continuous.traces[i]!.tokens, `request ${i}`));
  // Every prompt fits the budget, so a request's first token comes in the step that admits it.
  const waves = [[0, 1, 2], [3, 4, 5], [6]];
  for (const w of waves) for (const i of w) assert.equal(wave.traces[i]!.firstStep, wave.traces[w[0]!]!.firstStep, `request ${i} starts with its wave`);
  for (let k = 1; k < waves.length; k++) {
    const previousEnd = Math.max(...waves[k - 1]!.map((i) => wave.traces[i]!.finishStep));
    assert.equal(wave.traces[waves[k]![0]!]!.firstStep, previousEnd + 1, `wave ${k} starts the step after wave ${k - 1} finished`);
  }
  // Continuous: request 3 takes the first free slot, before the first wave would have finished.
  const firstFinish = Math.min(...[0, 1, 2].map((i) => continuous.traces[i]!.finishStep));
  assert.equal(continuous.traces[3]!.firstStep, firstFinish + 1);
  assert.ok(wave.engine.stats().steps > continuous.engine.stats().steps, 'idle slots cost steps');
  for (const { engine } of [continuous, wave]) {
    assert.equal(engine.pool.usedBlocks, 0);
    engine.dispose();
  }
});
