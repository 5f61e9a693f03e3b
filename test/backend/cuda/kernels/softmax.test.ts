// The softmax kernel family without a GPU: spec keys
// tell specs apart, launchers reject bad arguments naming the op, and the launch shape follows the
// row length as designed (one element per lane up to 32, a warp per row up to 1024, a block per row
// up to 16384, the looping block beyond).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as sm from '../../../../src/backend/cuda/kernels/softmax.js';
import type { FloatDType } from '../../../../src/dtype.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('catalog kernels have distinct names, each defined in its source, covering both paths and all masks', () => {
  const sources = sm.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void KERNEL_BOUNDS ${s.name}\\(`));
  const names = sources.map((s) => s.name);
  for (const fragment of ['_loop', '_registers', '_causal_padded', '_causal', '_padded', 'softmax_backward_']) {
    assert.ok(names.some((n) => n.includes(fragment)), `no catalog kernel with '${fragment}'`);
  }
});

test('spec keys differ in every field', () => {
  const base: sm.SoftmaxForwardSpec = { dtype: 'f16', rowLength: 256, vec: 8, threadsPerRow: 32, rowsPerBlock: 4, path: 'registers', causal: false, padding: false };
  const variants: sm.SoftmaxForwardSpec[] = [
    base, { ...base, dtype: 'f32' }, { ...base, rowLength: 512 }, { ...base, vec: 4 }, { ...base, threadsPerRow: 64 },
    { ...base, rowsPerBlock: 8 }, { ...base, path: 'loop' }, { ...base, causal: true }, { ...base, padding: true },
  ];
  assert.equal(new Set(variants.map(sm.softmaxForwardKey)).size, variants.length);
  assert.notEqual(sm.softmaxBackwardKey(base), sm.softmaxForwardKey(base));
});

function forward(B: number, heads: number, Lq: number, Lk: number, dtype: FloatDType = 'f16', options: { causal?: boolean; padded?: boolean } = {}) {
  const host = new RecordingHost();
  const x = deviceTensor([B, heads, Lq, Lk], dtype);
  sm.softmaxForward(host, { x, out: x, scale: 0.125, causal: options.causal ?? false, ...(options.padded ? { keyLengths: deviceTensor([B], 'i32') } : {}) });
  assert.equal(host.launches.length, 1);
  return host.launches[0]!;
}

test('Lk = 20: one warp per row, one element per lane', () => {
  const l = forward(2, 3, 20, 20, 'f16', { causal: true, padded: true });
  assert.equal(l.key, 'softmax_forward.f16.l20.v1.t32.r4.registers.causal.padded');
  assert.deepEqual(l.config.block, [32, 4]);
  assert.equal(l.config.grid, Math.ceil((2 * 3 * 20) / 4));
  assert.match(l.source, /constexpr int VECS_PER_THREAD = 1;/);
});

test('Lk = 256 and 1024: a warp per row with the row in registers, 16-byte vectors', () => {
  const bert = forward(32, 12, 256, 256, 'f16');
  assert.equal(bert.key, 'softmax_forward.f16.l256.v8.t32.r4.registers');
  assert.match(bert.source, /constexpr int VECS_PER_THREAD = 1;/);
  const gpt2 = forward(16, 12, 1024, 1024, 'bf16', { causal: true });
  assert.equal(gpt2.key, 'softmax_forward.bf16.l1024.v8.t32.r4.registers.causal');
  assert.match(gpt2.source, /constexpr int VECS_PER_THREAD = 4;/);
  assert.equal(gpt2.config.grid, (16 * 12 * 1024) / 4);
  // rows, q_len, rows per batch, scale·log2(e)
  assert.equal(argValue(gpt2, 3, 'i32'), 16 * 12 * 1024);
  assert.equal(argValue(gpt2, 4, 'i32'), 1024);
  assert.equal(argValue(gpt2, 5, 'i32'), 12 * 1024);
  assert.ok(Math.abs((argValue(gpt2, 6, 'f32') as number) - 0.125 * Math.LOG2E) < 1e-12);
});

test('short rows use narrower vectors so all 32 lanes get work', () => {
  assert.equal(forward(1, 1, 4, 64, 'f16').key, 'softmax_forward.f16.l64.v2.t32.r4.registers');
  assert.equal(forward(1, 1, 4, 77, 'f32').key, 'softmax_forward.f32.l77.v1.t32.r4.registers');
});

test('Lk = 4096: a block per row in registers; Lk = 32768: the looping block path', () => {
  const mid = forward(1, 2, 4, 4096, 'f16', { padded: true });
  assert.equal(mid.key, 'softmax_forward.f16.l4096.v8.t256.r1.registers.padded');
  assert.deepEqual(mid.config.block, [256, 1]);
  assert.equal(mid.config.grid, 8);
  const long = forward(1, 1, 3, 32768, 'f16');
  assert.equal(long.key, 'softmax_forward.f16.l32768.v8.t512.r1.loop');
  assert.deepEqual(long.config.block, [512, 1]);
  assert.equal(long.config.grid, 3);
});

test('softmaxBackward uses the same layout; dX may alias dY', () => {
  const host = new RecordingHost();
  const y = deviceTensor([16, 12, 1024, 1024], 'f16'), dY = deviceTensor([16, 12, 1024, 1024], 'f16');
  sm.softmaxBackward(host, { y, dY, dX: dY, scale: 0.125 });
  const l = host.launches[0]!;
  assert.equal(l.key, 'softmax_backward.f16.l1024.v8.t32.r4.registers');
  assert.equal(argValue(l, 1, 'ptr'), argValue(l, 2, 'ptr'));
  assert.equal(argValue(l, 4, 'f32'), 0.125);
});

test('empty tensors launch nothing', () => {
  const host = new RecordingHost();
  const x = deviceTensor([0, 12, 16, 16], 'f16');
  sm.softmaxForward(host, { x, out: x });
  sm.softmaxBackward(host, { y: x, dY: x, dX: x });
  assert.equal(host.launches.length, 0);
});

test('launchers reject bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const x = deviceTensor([2, 3, 4, 5], 'f16');
  const bad: [string, () => void, RegExp][] = [
    ['rank', () => sm.softmaxForward(host, { x: deviceTensor([6, 4, 5], 'f16'), out: x }), /^softmaxForward: 'x' has shape \[6, 4, 5\]/],
    ['out shape', () => sm.softmaxForward(host, { x, out: deviceTensor([2, 3, 4, 6], 'f16') }), /^softmaxForward: 'out' has shape \[2, 3, 4, 6\]/],
    ['dtype mix', () => sm.softmaxForward(host, { x, out: deviceTensor([2, 3, 4, 5], 'f32') }), /^softmaxForward: 'out' has dtype f32/],
    ['keyLengths dtype', () => sm.softmaxForward(host, { x, out: x, keyLengths: deviceTensor([2], 'f32') }), /^softmaxForward: 'keyLengths' has dtype f32 but expected i32/],
    ['keyLengths batch', () => sm.softmaxForward(host, { x, out: x, keyLengths: deviceTensor([3], 'i32') }), /^softmaxForward: 'keyLengths' has shape \[3\]/],
    ['scale', () => sm.softmaxForward(host, { x, out: x, scale: Number.NaN }), /^softmaxForward: 'scale' must be a finite number/],
    ['backward shapes', () => sm.softmaxBackward(host, { y: x, dY: deviceTensor([2, 3, 4, 4], 'f16'), dX: x }), /^softmaxBackward: 'dY' has shape \[2, 3, 4, 4\]/],
    ['backward dtype', () => sm.softmaxBackward(host, { y: x, dY: x, dX: deviceTensor([2, 3, 4, 5], 'bf16') }), /^softmaxBackward: 'dX' has dtype bf16/],
  ];
  for (const [what, call, message] of bad) {
    assert.throws(call, (e: unknown) => e instanceof FuseformerError && message.test(e.message), what);
  }
  assert.equal(host.launches.length, 0);
});
