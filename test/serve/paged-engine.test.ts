// The serving engine's paged KV cache on the CPU backend (tiny random Llama-GQA and GPT-2 folders): the
// device block tables list exactly the scheduler's blocks after every step; requests with a common prompt
// prefix read the same physical blocks (reference count 2) and still decode as they would alone; cancel and
// preemption hand blocks back at once; reference counts always equal the tables listing each block and
// nothing leaks; the pool is the only KV memory and kvMemoryFraction sizes it.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { generate } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { ServingEngineOptions } from '../../src/serve/engine.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-paged-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();

function load(family: 'gpt2' | 'llama'): DecoderModel {
  const dir = join(root, family);
  writeModelFolder(dir, family, family === 'gpt2' ? TINY_GPT2 : TINY_LLAMA, 23);
  return loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
}
const models = { gpt2: load('gpt2'), llama: load('llama') };

const system = [31, 4, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19];

function submit(engine: ServingEngine, prompt: number[], maxTokens: number, out: number[]): string {
  return engine.submit({ prompt, maxTokens, sampling: resolveSampling({}), stopTokenIds: [], onToken: (e) => out.push(e.token), onFinish: () => {} });
}

function alone(model: DecoderModel, prompt: number[], maxTokens: number): number[] {
  const engine = new ServingEngine(model, { maxRunning: 1, prefixCaching: false });
  const out: number[] = [];
  submit(engine, prompt, maxTokens, out);
  engine.runToCompletion();
  engine.dispose();
  return out;
}

/** Reference counts equal the running tables listing each block; the device tables hold the scheduler's. */
function checkInvariants(engine: ServingEngine): void {
  const listed = new Map<number, number>();
  for (const r of engine.scheduler.running) {
    for (const block of r.blockTable) listed.set(block, (listed.get(block) ?? 0) + 1);
    const row = engine.deviceBlockTable(engine.slotOf(r.id));
    assert.deepEqual(row.slice(0, r.blockTable.length), r.blockTable, `request ${r.id}: the device table lists its blocks`);
  }
  for (let b = 0; b < engine.pool.numBlocks; b++) assert.equal(engine.pool.refCount(b), listed.get(b) ?? 0, `block ${b}'s reference count`);
  assert.equal(engine.pool.usedBlocks, listed.size);
}

for (const family of ['llama', 'gpt2'] as const) {
  const model = models[family];

  test(`${family}: two requests with a common prefix read the same blocks and decode as they would alone`, () => {
    const a = [...system, 7, 8, 9], b = [...system, 200, 201];
    const expected = [alone(model, a, 12), alone(model, b, 10)];
    for (const blockSize of [4, 8]) {
      const engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 64, blockSize });
      const got: number[][] = [[], []];
      const ia = submit(engine, a, 12, got[0]!);
      engine.step(); // a's prompt: its full blocks are registered after the step
      checkInvariants(engine);
      const ib = submit(engine, b, 10, got[1]!);
      engine.step();
      checkInvariants(engine);
      const shared = Math.floor(system.length / blockSize);
      const ta = engine.blockTableOf(ia)!, tb = engine.blockTableOf(ib)!;
      assert.deepEqual(tb.slice(0, shared), ta.slice(0, shared), `blockSize ${blockSize}: b's table starts with a's prefix blocks`);
      for (const block of ta.slice(0, shared)) assert.equal(engine.pool.refCount(block), 2, `shared block ${block}`);
      assert.ok(!ta.slice(shared).some((x) => tb.slice(shared).includes(x)), 'blocks past the common prefix are not shared');
      assert.equal(engine.stats().prefixHits, shared);
      assert.deepEqual(engine.deviceBlockTable(engine.slotOf(ib)).slice(0, shared), ta.slice(0, shared), 'the device table points at the shared blocks');
      while (engine.hasWork) {
        engine.step();
        checkInvariants(engine);
      }
      assert.deepEqual(got, expected, `blockSize ${blockSize}`);
      assert.equal(engine.pool.usedBlocks, 0, 'no leaked blocks');
      engine.dispose();
    }
  });

  test(`${family}: cancel releases a request's own blocks at once and keeps the shared ones for the other`, () => {
    const engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 64, blockSize: 4 });
    const got: number[][] = [[], []];
    const ia = submit(engine, [...system, 1], 20, got[0]!);
    engine.step();
    const ib = submit(engine, [...system, 2, 3], 20, got[1]!);
    engine.step();
    engine.step();
    const ta = [...engine.blockTableOf(ia)!], tb = [...engine.blockTableOf(ib)!];
    const shared = ta.filter((x) => tb.includes(x));
    assert.equal(shared.length, system.length / 4);
    const before = engine.pool.usedBlocks;
    assert.ok(engine.cancel(ib));
    assert.equal(engine.pool.usedBlocks, before - (tb.length - shared.length), 'b\'s own blocks are free at once');
    for (const block of shared) assert.equal(engine.pool.refCount(block), 1, 'the shared blocks stay with a');
    for (const block of tb.filter((x) => !shared.includes(x))) assert.equal(engine.pool.refCount(block), 0);
    checkInvariants(engine);
    engine.runToCompletion();
    assert.deepEqual(got[0], alone(model, [...system, 1], 20));
    assert.equal(engine.pool.usedBlocks, 0);
    engine.dispose();
  });

  test(`${family}: preemption frees the newest request's blocks; tables stay consistent; outputs equal alone`, () => {
    const prompts = [[...system, 5], [...system.slice(0, 9), 6, 7], Array.from({ length: 15 }, (_, i) => 100 + i), [...system, 9, 9]];
    const maxTokens = [30, 28, 26, 24];
    const expected = prompts.map((p, i) => alone(model, p, maxTokens[i]!));
    const options: ServingEngineOptions = { maxRunning: 4, maxBatchTokens: 32, blockSize: 4, numBlocks: 30 };
    const engine = new ServingEngine(model, options);
    const got = prompts.map(() => [] as number[]);
    prompts.forEach((p, i) => submit(engine, p, maxTokens[i]!, got[i]!));
    let sawPreemption = false;
    while (engine.hasWork) {
      const before = engine.stats().preemptions, waiting = new Set(engine.scheduler.waiting);
      engine.step();
      if (engine.stats().preemptions > before) {
        sawPreemption = true;
        for (const r of engine.scheduler.waiting) {
          if (!waiting.has(r)) assert.equal(r.blockTable.length, 0, 'a preempted request holds no blocks');
        }
      }
      checkInvariants(engine);
    }
    assert.ok(sawPreemption, 'the pool of 30 blocks forced a preemption');
    assert.deepEqual(got, expected);
    assert.equal(engine.pool.usedBlocks, 0, 'no leaked blocks');
    engine.dispose();
  });
}

test('qwen3 (per-head q/k norms): requests sharing a prefix through the paged cache decode the tokens of the plain engine', async () => {
  const dir = join(root, 'qwen3');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, variant: 'qwen3', qkNorm: true, headDim: 16, tieWordEmbeddings: true, ropeTheta: 1e6 }, 29);
  const model = loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
  try {
    const prompts = [[...system, 7, 8, 9], [...system, 200, 201]];
    const expected: number[][] = [];
    for (const prompt of prompts) {
      const tokens: number[] = [];
      for await (const t of generate(model, prompt, { maxNewTokens: 10, temperature: 0, stopTokenIds: [] })) tokens.push(t);
      expected.push(tokens);
    }
    const engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 16, blockSize: 4 });
    const got: number[][] = [[], []];
    submit(engine, prompts[0]!, 10, got[0]!);
    engine.step();
    submit(engine, prompts[1]!, 10, got[1]!);
    engine.runToCompletion();
    assert.ok(engine.stats().prefixHits > 0, 'the second request reads the first one\'s prefix blocks');
    assert.deepEqual(got, expected);
    engine.dispose();
  } finally {
    model.free();
  }
});

test('the pool is the only KV memory; kvMemoryFraction sizes it; bad sizes are refused', () => {
  const model = models.llama, a = model.arch;
  const engine = new ServingEngine(model, { maxRunning: 3, blockSize: 16, numBlocks: 11 });
  assert.equal(engine.kvPoolBytes, 11 * a.layers * 2 * a.kvHeads * 16 * a.headDim * 4);
  assert.equal(engine.stats().kvPoolBytes, engine.kvPoolBytes);
  assert.equal(engine.maxBlocksPerSeq, Math.ceil(engine.maxLen / 16));
  engine.dispose();
  const byFraction = new ServingEngine(model, { maxRunning: 2, blockSize: 16, kvMemoryFraction: 1e-4 });
  assert.ok(byFraction.pool.numBlocks >= byFraction.maxBlocksPerSeq, `kvMemoryFraction 1e-4 gave ${byFraction.pool.numBlocks} blocks`);
  byFraction.dispose();
  assert.throws(() => new ServingEngine(model, { numBlocks: 8, kvMemoryFraction: 0.5 }), /give numBlocks or kvMemoryFraction, not both/);
  assert.throws(() => new ServingEngine(model, { kvMemoryFraction: 1.5 }), /kvMemoryFraction must be in \(0, 1\]/);
  assert.throws(() => new ServingEngine(model, { kvMemoryFraction: 1e-15 }), /numBlocks must be an integer >= 4 .* from kvMemoryFraction/);
  assert.throws(() => new ServingEngine(model, { blockSize: 0 }), /blockSize must be a positive integer/);
});
