import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BufferRequest } from '../../src/nn/plan.js';
import { peakLiveBytes, planArena } from '../../src/nn/plan.js';
import { ArgumentError } from '../../src/errors.js';

/** Two buffers alive at a common step must not share a byte. */
function assertNoConflicts(requests: readonly BufferRequest[], alignment: number): void {
  const plan = planArena(requests, alignment);
  const placed = [...plan.placements.values()];
  for (let i = 0; i < placed.length; i++) {
    const a = placed[i]!;
    assert.equal(a.offset % alignment, 0, `'${a.name}' is not aligned`);
    assert.ok(a.offset + a.bytes <= plan.arenaBytes, `'${a.name}' ends past the arena`);
    for (let j = i + 1; j < placed.length; j++) {
      const b = placed[j]!;
      const aliveTogether = a.start <= b.end && b.start <= a.end;
      const memoryOverlaps = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes && a.bytes > 0 && b.bytes > 0;
      assert.ok(!(aliveTogether && memoryOverlaps), `'${a.name}' [${a.start},${a.end}] @${a.offset}+${a.bytes} collides with '${b.name}' [${b.start},${b.end}] @${b.offset}+${b.bytes}`);
    }
  }
}

test('buffers with disjoint lifetimes share memory; overlapping ones do not', () => {
  const plan = planArena([
    { name: 'a', bytes: 1000, start: 0, end: 1 },
    { name: 'b', bytes: 1000, start: 2, end: 3 },
    { name: 'c', bytes: 500, start: 1, end: 2 },
  ], 256);
  assert.equal(plan.placements.get('a')!.offset, plan.placements.get('b')!.offset);
  assert.notEqual(plan.placements.get('c')!.offset, plan.placements.get('a')!.offset);
  assert.equal(plan.unsharedBytes, 1024 + 1024 + 512);
  assert.equal(plan.peakLiveBytes, 1024 + 512);
  assert.equal(plan.arenaBytes, 1024 + 512);
});

test('a forward/backward chain (each activation read by the next op and by its own backward) needs the peak only', () => {
  // Layer i's activation is written at step i and read back at step 2L − 1 − i (the backward pass).
  const L = 12;
  const requests: BufferRequest[] = [];
  for (let i = 0; i < L; i++) requests.push({ name: `act${i}`, bytes: 4096, start: i, end: 2 * L - 1 - i });
  // Gradient buffers of the backward live for two steps each, and can take turns.
  for (let i = 0; i < L; i++) requests.push({ name: `grad${i}`, bytes: 4096, start: L + i, end: L + i + 1 });
  const plan = planArena(requests, 256);
  assert.equal(plan.arenaBytes, plan.peakLiveBytes);
  assert.ok(plan.arenaBytes < plan.unsharedBytes / 1.5, `arena ${plan.arenaBytes} vs unshared ${plan.unsharedBytes}`);
  assertNoConflicts(requests, 256);
});

test('random requests: never a conflict, never below the live peak, deterministic', () => {
  let seed = 99;
  const rand = (n: number) => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) % n;
  for (let trial = 0; trial < 200; trial++) {
    const requests: BufferRequest[] = Array.from({ length: 1 + rand(30) }, (_, i) => {
      const start = rand(20);
      return { name: `b${i}`, bytes: rand(5) === 0 ? 0 : 1 + rand(10_000), start, end: start + rand(8) };
    });
    const alignment = [1, 16, 256][trial % 3]!;
    assertNoConflicts(requests, alignment);
    const plan = planArena(requests, alignment);
    assert.ok(plan.arenaBytes >= plan.peakLiveBytes);
    assert.ok(plan.arenaBytes <= plan.unsharedBytes);
    assert.deepEqual([...planArena([...requests].reverse(), alignment).placements.values()].map((p) => p.offset).sort(), [...plan.placements.values()].map((p) => p.offset).sort());
  }
});

test('peakLiveBytes counts a buffer through its last step inclusive', () => {
  assert.equal(peakLiveBytes([{ name: 'x', bytes: 10, start: 0, end: 0 }, { name: 'y', bytes: 5, start: 0, end: 0 }]), 15);
  assert.equal(peakLiveBytes([{ name: 'x', bytes: 10, start: 0, end: 1 }, { name: 'y', bytes: 5, start: 2, end: 3 }]), 10);
});

test('bad requests are refused with the buffer named', () => {
  assert.throws(() => planArena([{ name: 'a', bytes: 1, start: 0, end: 0 }, { name: 'a', bytes: 1, start: 0, end: 0 }]), (e: Error) => e instanceof ArgumentError && /'a' is requested twice/.test(e.message));
  assert.throws(() => planArena([{ name: 'a', bytes: -1, start: 0, end: 0 }]), /'a' has invalid size -1/);
  assert.throws(() => planArena([{ name: 'a', bytes: 1, start: 3, end: 2 }]), /'a' has invalid lifetime \[3, 2\]/);
});
