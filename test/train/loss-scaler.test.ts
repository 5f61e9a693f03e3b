import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createDynamicLossScaler, createNoLossScaler, lossScalerFor, restoreLossScaler } from '../../src/train/loss-scaler.js';

test('dynamic: starts at 2^16, halves and skips on overflow, doubles after the growth interval', () => {
  const s = createDynamicLossScaler({ growthInterval: 3 });
  assert.equal(s.scale, 65536);
  assert.equal(s.inverseScale, 1 / 65536);
  assert.deepEqual(s.update(true), { skipped: true });
  assert.equal(s.scale, 32768);
  assert.deepEqual(s.update(false), { skipped: false });
  assert.deepEqual(s.update(false), { skipped: false });
  assert.equal(s.scale, 32768);
  s.update(false);
  assert.equal(s.scale, 65536, 'grows after 3 good steps in a row');
  s.update(false); s.update(false); s.update(true); s.update(false); s.update(false);
  assert.equal(s.scale, 32768, 'an overflow resets the count of good steps');
  assert.equal(s.totalSkips, 2);
  assert.equal(s.consecutiveSkips, 0);
});

test('dynamic: default growth interval is 2000; bounds are respected', () => {
  const s = createDynamicLossScaler();
  for (let i = 0; i < 1999; i++) s.update(false);
  assert.equal(s.scale, 65536);
  s.update(false);
  assert.equal(s.scale, 131072);
  const low = createDynamicLossScaler({ initialScale: 4, minScale: 2 });
  low.update(true); low.update(true); low.update(true);
  assert.equal(low.scale, 2);
  assert.equal(low.consecutiveSkips, 3);
  const high = createDynamicLossScaler({ initialScale: 8, maxScale: 8, growthInterval: 1 });
  high.update(false);
  assert.equal(high.scale, 8);
});

test('none: scale 1, a non-finite step is still skipped but the scale never moves', () => {
  const s = createNoLossScaler();
  assert.equal(s.scale, 1);
  assert.deepEqual(s.update(true), { skipped: true });
  assert.deepEqual(s.update(false), { skipped: false });
  assert.equal(s.scale, 1);
  assert.equal(lossScalerFor('bf16').scale, 1);
  assert.equal(lossScalerFor('f32').scale, 1);
  assert.equal(lossScalerFor('f16').scale, 65536);
});

test('state round-trips through JSON and resumes exactly', () => {
  const a = createDynamicLossScaler({ growthInterval: 4 });
  a.update(true); a.update(false); a.update(false);
  const b = restoreLossScaler(JSON.parse(JSON.stringify(a.state())));
  for (const overflow of [false, false, true, false]) assert.deepEqual(b.update(overflow), a.update(overflow));
  assert.deepEqual(b.state(), a.state());
  assert.deepEqual(restoreLossScaler(createNoLossScaler().state()).state(), createNoLossScaler().state());
});

test('invalid options and states are errors naming the field', () => {
  assert.throws(() => createDynamicLossScaler({ backoffFactor: 2 }), /backoffFactor must be < 1/);
  assert.throws(() => createDynamicLossScaler({ growthFactor: 1 }), /growthFactor must be > 1/);
  assert.throws(() => createDynamicLossScaler({ growthInterval: 1.5 }), /growthInterval must be an integer/);
  assert.throws(() => createDynamicLossScaler({ initialScale: 2 ** 30 }), /initialScale 1073741824 is outside/);
  assert.throws(() => createDynamicLossScaler({ minScale: -1 }), /minScale must be a finite number > 0/);
  const state = createDynamicLossScaler().state();
  assert.throws(() => restoreLossScaler({ ...state, scale: Infinity }, 'ckpt'), /ckpt: scale null is not valid/);
  assert.throws(() => restoreLossScaler({ ...state, goodSteps: -1 }), /goodSteps must be an integer >= 0/);
  assert.throws(() => restoreLossScaler({ ...state, config: { kind: 'static' } as never }), /kind must be 'none' or 'dynamic'/);
  assert.throws(() => createNoLossScaler().update(1 as never), /takes a boolean/);
});
