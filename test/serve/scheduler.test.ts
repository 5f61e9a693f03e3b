// The block pool (reference counts, free queue, prefix hashes) and the scheduler (chunked prefill under a
// token budget, mixed batches, preemption of the newest request, prefix-cache admission), as pure logic.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BlockPool, blockHashes } from '../../src/serve/block-pool.js';
import { SchedRequest, Scheduler } from '../../src/serve/scheduler.js';
import type { StepPlan } from '../../src/serve/scheduler.js';

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

test('block pool: allocate, release, reference counts and the LRU free queue', () => {
  const pool = new BlockPool(4, 2);
  const a = pool.allocate(3)!;
  assert.deepEqual(a, [0, 1, 2]);
  assert.equal(pool.freeBlocks, 1);
  assert.equal(pool.allocate(2), null, 'too few free blocks: nothing is taken');
  assert.equal(pool.freeBlocks, 1);
  pool.release([0, 1]);
  assert.equal(pool.freeBlocks, 3);
  // Released in reverse: block 1 is handed out before block 0 (after the never-used block 3).
  assert.deepEqual(pool.allocate(3), [3, 1, 0]);
  assert.throws(() => pool.release([3, 3]), /released more often/);
});

test('block pool: a hashed block stays findable after release until it is handed out again', () => {
  const pool = new BlockPool(3, 2);
  const [b0] = pool.allocate(1)!;
  const [h0, h1] = blockHashes([5, 6, 7, 8], 2);
  assert.ok(pool.register(b0!, h0!));
  pool.release([b0!]);
  assert.equal(pool.cachedBlocks, 1);
  assert.deepEqual(pool.takePrefix([h0!, h1!]), [b0], 'the chain stops at the first miss');
  assert.equal(pool.refCount(b0!), 1);
  assert.equal(pool.hits, 1);
  assert.equal(pool.queried, 2);
  pool.release([b0!]);
  pool.allocate(3); // takes every block, the cached one included: its hash goes
  assert.equal(pool.cachedBlocks, 0);
  assert.deepEqual(pool.takePrefix([h0!]), []);
});

test('block hashes chain: equal blocks after different prefixes hash differently', () => {
  const a = blockHashes([1, 2, 3, 4], 2), b = blockHashes([9, 9, 3, 4], 2), c = blockHashes([1, 2, 3, 4, 5], 2);
  assert.notEqual(a[1], b[1]);
  assert.deepEqual(c, a, 'a partial last block has no hash');
});

function items(plan: StepPlan): [string, number, number, boolean][] {
  return plan.items.map((it) => [it.request.id, it.start, it.count, it.samples]);
}

test('scheduler: chunked prefill under the token budget, then decodes mixed with a new prompt', () => {
  const pool = new BlockPool(16, 4);
  const s = new Scheduler(pool, { maxBatchTokens: 8, maxRunning: 4 });
  const a = s.add('a', range(10));
  let plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 0, 8, false]]);
  s.complete(plan.items);
  s.add('b', range(7, 100));
  plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 8, 2, true], ['b', 0, 6, false]], 'b gets what is left of the budget');
  s.complete(plan.items);
  a.tokens.push(42);
  plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 10, 1, true], ['b', 6, 1, true]], 'a decode and the end of a prompt in one batch');
});

test('scheduler: decode steps, block growth, and retiring frees blocks', () => {
  const pool = new BlockPool(8, 4);
  const s = new Scheduler(pool, { maxBatchTokens: 16, maxRunning: 4 });
  const a = s.add('a', range(3));
  let plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 0, 3, true]]);
  assert.equal(a.blockTable.length, 1);
  s.complete(plan.items);
  a.tokens.push(7);
  plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 3, 1, true]]);
  s.complete(plan.items);
  a.tokens.push(8);
  plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 4, 1, true]]);
  assert.equal(a.blockTable.length, 2, 'position 4 opens a second block');
  s.complete(plan.items);
  assert.equal(a.hashes.length, 1, 'the first block became full and was hashed');
  s.remove(a);
  assert.equal(pool.usedBlocks, 0);
  assert.equal(pool.cachedBlocks, 1, 'its full block stays cached');
  assert.equal(s.hasWork, false);
});

test('scheduler: the newest running request is preempted when blocks run out, and recomputed later', () => {
  const pool = new BlockPool(4, 2);
  const s = new Scheduler(pool, { maxBatchTokens: 32, maxRunning: 4, prefixCaching: false });
  const a = s.add('a', range(3)), b = s.add('b', range(3, 50));
  let plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 0, 3, true], ['b', 0, 3, true]]);
  s.complete(plan.items);
  a.tokens.push(1); b.tokens.push(2);
  plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 3, 1, true], ['b', 3, 1, true]]);
  s.complete(plan.items);
  a.tokens.push(1); b.tokens.push(2);
  // Both need a third block; only a gets one: b (the newest) is preempted and waits.
  plan = s.schedule();
  assert.deepEqual(items(plan), [['a', 4, 1, true]]);
  assert.deepEqual(plan.preempted.map((r) => r.id), ['b']);
  assert.equal(b.numComputed, 0);
  assert.equal(b.blockTable.length, 0);
  assert.equal(b.state, 'waiting');
  assert.deepEqual(s.waiting.map((r) => r.id), ['b']);
  assert.equal(plan.admitted.length, 0, 'nothing is admitted in a step that preempted');
  s.complete(plan.items);
  s.remove(a);
  plan = s.schedule();
  assert.deepEqual(items(plan), [['b', 0, 5, true]], 'b is recomputed: prompt and generated tokens');
  assert.equal(b.preemptions, 1);
});

test('scheduler: a request sharing a prompt prefix reuses the cached full blocks', () => {
  const pool = new BlockPool(16, 4);
  const s = new Scheduler(pool, { maxBatchTokens: 64, maxRunning: 4 });
  const prompt = range(10);
  const a = s.add('a', [...prompt]);
  let plan = s.schedule();
  s.complete(plan.items);
  const b = s.add('b', [...prompt.slice(0, 9), 99]);
  plan = s.schedule();
  const admitted = plan.admitted.find((x) => x.request === b)!;
  assert.equal(admitted.cachedPositions, 8, 'two full blocks (8 positions) shared');
  assert.deepEqual(b.blockTable.slice(0, 2), a.blockTable.slice(0, 2));
  assert.equal(pool.refCount(a.blockTable[0]!), 2);
  assert.deepEqual(items(plan).find((x) => x[0] === 'b'), ['b', 8, 2, true]);
  // The same prompt exactly: the last full block is not taken when it holds the last token.
  const c = s.add('c', range(8));
  plan = s.schedule();
  assert.equal(plan.admitted.find((x) => x.request === c)!.cachedPositions, 4);
  for (const r of [a, b, c] as SchedRequest[]) s.remove(r);
  assert.equal(pool.usedBlocks, 0);
});

test('scheduler: admission stops at maxRunning and the queue keeps arrival order', () => {
  const pool = new BlockPool(16, 4);
  const s = new Scheduler(pool, { maxBatchTokens: 64, maxRunning: 2 });
  for (const id of ['a', 'b', 'c']) s.add(id, range(2));
  const plan = s.schedule();
  assert.deepEqual(plan.items.map((it) => it.request.id), ['a', 'b']);
  assert.deepEqual(s.waiting.map((r) => r.id), ['c']);
});

test('block hashes extend a chain: blocks [first, count) chained to the hash of block first − 1 equal the whole chain\'s tail', () => {
  const tokens = Array.from({ length: 70 }, (_, i) => (i * 37) % 101), bs = 8;
  const whole = blockHashes(tokens, bs);
  assert.equal(whole.length, 8);
  assert.deepEqual(blockHashes(tokens, bs, 8, 5, whole[4]!), whole.slice(5));
  assert.deepEqual(blockHashes(tokens, bs, 3, 0, ''), whole.slice(0, 3));
  assert.notDeepEqual(blockHashes(tokens, bs, 8, 5, 'another parent'), whole.slice(5), 'the parent is part of each hash');
});

test("a waiting request's lookup hashes are computed once while its tokens stay, and again when they grow", () => {
  const r = new SchedRequest('r', Array.from({ length: 33 }, (_, i) => i), 0);
  const first = r.promptHashes(8);
  assert.equal(first.length, 4, 'full blocks short of the last position: ⌊32 / 8⌋');
  assert.equal(r.promptHashes(8), first, 'the same array: not recomputed');
  r.tokens.push(33, 34, 35, 36, 37, 38, 39, 40);
  const grown = r.promptHashes(8);
  assert.equal(grown.length, 5);
  assert.deepEqual(grown, blockHashes(r.tokens, 8, 5));
  assert.deepEqual(r.promptHashes(4), blockHashes(r.tokens, 4, 10), 'another block size');
});
