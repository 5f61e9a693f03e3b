import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLrSchedule } from '../../src/train/schedule.js';

const close = (a: number, b: number): void => assert.ok(Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(b)), `${a} != ${b}`);

test('constant: warmup ramps linearly from lr/warmup to lr, then stays', () => {
  const s = createLrSchedule({ kind: 'constant', lr: 1e-3, warmupSteps: 4 });
  assert.deepEqual([0, 1, 2, 3, 4, 100].map((t) => s.lrAt(t)), [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]);
  assert.equal(createLrSchedule({ kind: 'constant', lr: 0.1 }).lrAt(0), 0.1);
});

test('cosine: peak after warmup, half way at the midpoint, minLr at totalSteps and after', () => {
  const s = createLrSchedule({ kind: 'cosine', lr: 1, minLr: 0.1, warmupSteps: 10, totalSteps: 110 });
  close(s.lrAt(9), 1);
  close(s.lrAt(10), 1);
  close(s.lrAt(60), 0.55);
  close(s.lrAt(35), 0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI / 4)));
  close(s.lrAt(110), 0.1);
  close(s.lrAt(500), 0.1);
  for (let t = 11; t <= 110; t++) assert.ok(s.lrAt(t) <= s.lrAt(t - 1), `not decreasing at ${t}`);
});

test('linear: straight line from lr to minLr', () => {
  const s = createLrSchedule({ kind: 'linear', lr: 2, warmupSteps: 0, totalSteps: 100 });
  close(s.lrAt(0), 2);
  close(s.lrAt(25), 1.5);
  close(s.lrAt(100), 0);
  close(s.lrAt(1000), 0);
});

test('warmup equal to totalSteps: the decay is instant', () => {
  const s = createLrSchedule({ kind: 'cosine', lr: 1, minLr: 0.5, warmupSteps: 4, totalSteps: 4 });
  close(s.lrAt(3), 1);
  close(s.lrAt(4), 0.5);
});

test('bad configs and steps are errors naming the field', () => {
  const bad: [object, RegExp][] = [
    [{ kind: 'exp', lr: 1 }, /kind "exp" is not one of constant, cosine, linear/],
    [{ kind: 'constant', lr: 0 }, /lr must be a finite number > 0, got 0/],
    [{ kind: 'constant', lr: NaN }, /lr must be/],
    [{ kind: 'cosine', lr: 1 }, /'cosine' decay needs totalSteps/],
    [{ kind: 'linear', lr: 1, totalSteps: 10, warmupSteps: 11 }, /warmupSteps \(11\) must not exceed totalSteps \(10\)/],
    [{ kind: 'cosine', lr: 1, totalSteps: 10, minLr: 2 }, /minLr must be a number in \[0, lr = 1\], got 2/],
    [{ kind: 'cosine', lr: 1, totalSteps: 10.5 }, /totalSteps must be an integer >= 1/],
    [{ kind: 'constant', lr: 1, warmupSteps: -1 }, /warmupSteps must be an integer >= 0, got -1/],
  ];
  for (const [config, message] of bad) assert.throws(() => createLrSchedule(config as never), message);
  const s = createLrSchedule({ kind: 'constant', lr: 1 });
  assert.throws(() => s.lrAt(-1), /step must be an integer >= 0, got -1/);
  assert.throws(() => s.lrAt(1.5), /step must be an integer/);
});
