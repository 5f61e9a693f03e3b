import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { philox4x32 } from '../../../src/backend/rng.js';
import { ArgumentError, DTypeError } from '../../../src/errors.js';
import { assertRejects } from './helpers.js';

const backend = new CpuBackend();

function moments(values: ArrayLike<number>): { mean: number; std: number; min: number; max: number } {
  let sum = 0, sum2 = 0, min = Infinity, max = -Infinity;
  for (let i = 0; i < values.length; i++) { const x = values[i]!; sum += x; sum2 += x * x; min = Math.min(min, x); max = Math.max(max, x); }
  const mean = sum / values.length;
  return { mean, std: Math.sqrt(sum2 / values.length - mean * mean), min, max };
}

test('normal fill has the requested mean and standard deviation', () => {
  const out = backend.empty([100_003], 'f32');
  backend.randomFill({ out, distribution: 'normal', mean: 3, std: 0.5, seed: 7n, offset: 11n });
  const m = moments(backend.download(out));
  assert.ok(Math.abs(m.mean - 3) < 0.01, `mean ${m.mean}`);
  assert.ok(Math.abs(m.std - 0.5) < 0.01, `std ${m.std}`);
  assert.ok(m.min < 1.5 && m.max > 4.5, `tails [${m.min}, ${m.max}] too short for 1e5 normal draws`);
});

test('uniform fill covers [low, high) evenly', () => {
  const out = backend.empty([100_000], 'f32');
  backend.randomFill({ out, distribution: 'uniform', low: -2, high: 6, seed: 1n, offset: 0n });
  const values = backend.download(out);
  const m = moments(values);
  assert.ok(m.min >= -2 && m.max < 6, `range [${m.min}, ${m.max}]`);
  assert.ok(Math.abs(m.mean - 2) < 0.05, `mean ${m.mean}`);
  const buckets = new Array<number>(8).fill(0);
  for (const x of values) buckets[Math.floor(x + 2)]!++;
  for (const count of buckets) assert.ok(Math.abs(count - 12_500) < 500, `bucket counts ${buckets.join(', ')}`);
});

test('uniform values are the Philox words of the documented counter', () => {
  const out = backend.empty([6], 'f32');
  backend.randomFill({ out, distribution: 'uniform', seed: 0x1234_5678_9abcn, offset: 5n });
  const words = [...philox4x32(5, 0, 0, 0, 0x56789abc, 0x1234), ...philox4x32(6, 0, 0, 0, 0x56789abc, 0x1234)];
  assert.deepEqual([...backend.download(out)], words.slice(0, 6).map((w) => Math.fround((w >>> 8) * 2 ** -24)));
});

test('the same seed and offset repeat; the next offset continues the stream four elements later', () => {
  const a = backend.empty([64], 'bf16'), b = backend.empty([64], 'bf16'), c = backend.empty([60], 'bf16');
  backend.randomFill({ out: a, distribution: 'normal', seed: 3n, offset: 9n });
  backend.randomFill({ out: b, distribution: 'normal', seed: 3n, offset: 9n });
  backend.randomFill({ out: c, distribution: 'normal', seed: 3n, offset: 10n });
  const va = backend.download(a);
  assert.deepEqual(backend.download(b), va);
  assert.deepEqual([...backend.download(c)], [...va.slice(4)]);
});

test('randomFill rejects bad arguments naming the op and argument', () => {
  assertRejects(() => backend.randomFill({ out: backend.empty([4], 'i32'), distribution: 'normal', seed: 1n, offset: 0n }), 'randomFill', 'out', DTypeError);
  assertRejects(() => backend.randomFill({ out: backend.empty([4], 'f32'), distribution: 'uniform', low: 1, high: 1, seed: 1n, offset: 0n }), 'randomFill', 'high', ArgumentError);
  assertRejects(() => backend.randomFill({ out: backend.empty([4], 'f32'), distribution: 'normal', std: -1, seed: 1n, offset: 0n }), 'randomFill', 'std', ArgumentError);
  assertRejects(() => backend.randomFill({ out: backend.empty([4], 'f32'), distribution: 'normal', seed: -1n, offset: 0n }), 'randomFill', 'seed', ArgumentError);
});
