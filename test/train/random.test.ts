import assert from 'node:assert/strict';
import { test } from 'node:test';
import { philox4x32 } from '../../src/backend/rng.js';
import { CounterRng, permutation } from '../../src/train/random.js';

test('draws are Philox words of (seed, stream, domain) in counter order', () => {
  const seed = 2 ** 40 + 7;
  const rng = new CounterRng(seed, 3, 1);
  const expected = [...philox4x32(0, 0, 3, 1, 7, 256), ...philox4x32(1, 0, 3, 1, 7, 256)];
  assert.deepEqual(Array.from({ length: 8 }, () => rng.nextU32()), expected);
});

test('restoring the state continues the same sequence, mid-block too', () => {
  const a = new CounterRng(42, 0, 0);
  for (let i = 0; i < 5; i++) a.nextU32();
  const b = CounterRng.restore(JSON.parse(JSON.stringify(a.state())));
  assert.deepEqual(Array.from({ length: 10 }, () => b.nextU32()), Array.from({ length: 10 }, () => a.nextU32()));
});

test('nextInt stays in range and is roughly uniform; streams and domains differ', () => {
  const rng = new CounterRng(1);
  const counts = new Array(6).fill(0);
  for (let i = 0; i < 60000; i++) counts[rng.nextInt(6)]++;
  for (const c of counts) assert.ok(Math.abs(c - 10000) < 500, `count ${c}`);
  assert.notEqual(new CounterRng(1, 0, 0).nextU32(), new CounterRng(1, 1, 0).nextU32());
  assert.notEqual(new CounterRng(1, 0, 0).nextU32(), new CounterRng(1, 0, 1).nextU32());
  assert.throws(() => new CounterRng(-1), /seed must be an integer in \[0, 2\^53\)/);
  assert.throws(() => rng.nextInt(0), /nextInt bound/);
});

test('permutation is a permutation, deterministic by seed', () => {
  const p = permutation(1000, new CounterRng(9, 2));
  assert.deepEqual([...p].sort((a, b) => a - b), Array.from({ length: 1000 }, (_, i) => i));
  assert.deepEqual(p, permutation(1000, new CounterRng(9, 2)));
  assert.notDeepEqual(p, permutation(1000, new CounterRng(9, 3)));
});
