// The fused AdamW kernel without a GPU: sources compile, keys differ, the launcher validates and
// passes the host-computed bias corrections and the vector width the addresses allow.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as adam from '../../../../src/backend/cuda/kernels/adam.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('keys differ in dtype, master and vector width', () => {
  const keys = [
    adam.adamWKey({ dtype: 'bf16', hasMaster: true, vec: 8 }), adam.adamWKey({ dtype: 'f16', hasMaster: true, vec: 8 }),
    adam.adamWKey({ dtype: 'bf16', hasMaster: false, vec: 8 }), adam.adamWKey({ dtype: 'bf16', hasMaster: true, vec: 4 }),
  ];
  assert.equal(new Set(keys).size, keys.length);
  assert.equal(new Set(adam.catalog().map((s) => s.name)).size, adam.catalog().length);
});

const flat = (n: number, dtype: 'f32' | 'f16' | 'bf16', ptr?: bigint) => deviceTensor([n], dtype, ptr);

test('adamW passes bias corrections computed on the host and 1 − β', () => {
  const host = new RecordingHost();
  const n = 1 << 20;
  adam.adamW(host, { params: flat(n, 'bf16'), grads: flat(n, 'bf16'), m: flat(n, 'f32'), v: flat(n, 'f32'), master: flat(n, 'f32'), lr: 3e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, step: 5, gradScale: 0.5 });
  const l = host.launches[0]!;
  assert.equal(l.key, 'adamw.bf16.v8.master');
  assert.equal(l.config.block, 256);
  assert.equal(l.config.grid, Math.min(Math.ceil(n / 8 / 256), 132 * 8));
  assert.equal(argValue(l, 5, 'u64'), BigInt(n));
  const f = (i: number) => argValue(l, i, 'f32');
  assert.deepEqual([f(6), f(7), f(8), f(9), f(10), f(11), f(12)], [3e-4, 0.9, 1 - 0.9, 0.95, 1 - 0.95, 1e-8, 0.1]);
  assert.equal(f(13), 1 - 0.9 ** 5);
  assert.equal(f(14), 1 - 0.95 ** 5);
  assert.equal(f(15), 0.5);
});

test('no-master mode passes a null master; misaligned state narrows the vector', () => {
  const host = new RecordingHost();
  adam.adamW(host, { params: flat(1001, 'f16'), grads: flat(1001, 'f16'), m: flat(1001, 'f32'), v: flat(1001, 'f32'), lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 1 });
  adam.adamW(host, { params: flat(1001, 'f16'), grads: flat(1001, 'f16'), m: flat(1001, 'f32', 0x6000_0008n), v: flat(1001, 'f32'), lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 1 });
  adam.adamW(host, { params: flat(1001, 'f16', 0x6100_0002n), grads: flat(1001, 'f16'), m: flat(1001, 'f32'), v: flat(1001, 'f32'), lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 1 });
  assert.deepEqual(host.launches.map((l) => l.key), ['adamw.f16.v8', 'adamw.f16.v2', 'adamw.f16.v1']);
  assert.equal(argValue(host.launches[0]!, 4, 'ptr'), 0n);
  assert.equal(argValue(host.launches[0]!, 15, 'f32'), 1);
});

test('adamW rejects bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const base = { params: flat(8, 'f16'), grads: flat(8, 'f16'), m: flat(8, 'f32'), v: flat(8, 'f32'), lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 1 };
  const rejects = (fn: () => void, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  };
  rejects(() => adam.adamW(host, { ...base, grads: flat(8, 'bf16') }), /^adamW: 'grads' has dtype bf16 but 'params' has f16/);
  rejects(() => adam.adamW(host, { ...base, m: flat(8, 'f16') }), /^adamW: 'm' has dtype f16 but expected f32/);
  rejects(() => adam.adamW(host, { ...base, v: flat(9, 'f32') }), /^adamW: 'v' has shape \[9\]/);
  rejects(() => adam.adamW(host, { ...base, master: deviceTensor([2, 4], 'f32') }), /^adamW: 'master' has shape \[2, 4\] but expected \[n\]/);
  rejects(() => adam.adamW(host, { ...base, step: 0 }), /^adamW: 'step' must be an integer >= 1/);
  rejects(() => adam.adamW(host, { ...base, beta2: 1 }), /^adamW: 'beta2' must be in \[0, 1\)/);
  rejects(() => adam.adamW(host, { ...base, lr: -1 }), /^adamW: 'lr' must be a finite number >= 0/);
  rejects(() => adam.adamW(host, { ...base, gradScale: Infinity }), /^adamW: 'gradScale' must be a finite number/);
  assert.equal(host.launches.length, 0);
});

test('device scalars and the clip: their own kernels, pointers and maxNorm appended to the arguments', () => {
  const host = new RecordingHost();
  const n = 4096;
  const common = { params: flat(n, 'bf16'), grads: flat(n, 'bf16'), m: flat(n, 'f32'), v: flat(n, 'f32'), master: flat(n, 'f32'), beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };
  const scalars = flat(4, 'f32'), sumSquares = flat(1, 'f32');
  adam.adamW(host, { ...common, lr: 1e-3, step: 2, gradScale: 0.5 });
  adam.adamW(host, { ...common, scalars });
  adam.adamW(host, { ...common, scalars, clip: { sumSquares, maxNorm: 1 } });
  adam.adamW(host, { ...common, lr: 1e-3, step: 2, clip: { sumSquares, maxNorm: Infinity } });
  assert.deepEqual(host.launches.map((l) => l.key), ['adamw.bf16.v8.master', 'adamw.bf16.v8.master.scalars', 'adamw.bf16.v8.master.scalars.clip', 'adamw.bf16.v8.master.clip']);
  const [plain, device, both, clipOnly] = host.launches;
  assert.deepEqual([argValue(plain!, 16, 'ptr'), argValue(plain!, 17, 'ptr'), argValue(plain!, 18, 'f32')], [0n, 0n, Infinity]);
  assert.deepEqual([argValue(device!, 16, 'ptr'), argValue(device!, 17, 'ptr')], [scalars.ptr, 0n]);
  assert.deepEqual([argValue(both!, 16, 'ptr'), argValue(both!, 17, 'ptr'), argValue(both!, 18, 'f32')], [scalars.ptr, sumSquares.ptr, 1]);
  assert.deepEqual([argValue(clipOnly!, 16, 'ptr'), argValue(clipOnly!, 17, 'ptr'), argValue(clipOnly!, 18, 'f32')], [0n, sumSquares.ptr, Infinity]);
  assert.equal(argValue(clipOnly!, 13, 'f32'), 1 - 0.9 ** 2);
  assert.match(both!.source, /constexpr bool HAS_SCALARS = true;/);
  assert.match(both!.source, /constexpr bool HAS_CLIP = true;/);
  assert.match(plain!.source, /constexpr bool HAS_CLIP = false;/);
});

test('device scalars refuse host numbers beside them; scalars and clip tensors are checked', () => {
  const host = new RecordingHost();
  const common = { params: flat(8, 'f16'), grads: flat(8, 'f16'), m: flat(8, 'f32'), v: flat(8, 'f32'), beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 };
  const rejects = (fn: () => void, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  };
  const withLr = { ...common, scalars: flat(4, 'f32'), lr: 1e-3 } as unknown as Parameters<typeof adam.adamW>[1];
  rejects(() => adam.adamW(host, withLr), /^adamW: 'lr' is not used when 'scalars' is given/);
  rejects(() => adam.adamW(host, { ...common, scalars: flat(4, 'f16') }), /^adamW: 'scalars' has dtype f16 but expected f32/);
  rejects(() => adam.adamW(host, { ...common, scalars: flat(5, 'f32') }), /^adamW: 'scalars' has shape \[5\] but expected \[4\]/);
  rejects(() => adam.adamW(host, { ...common, lr: 1e-3, step: 1, clip: { sumSquares: flat(1, 'f16'), maxNorm: 1 } }), /^adamW: 'clip.sumSquares' has dtype f16/);
  rejects(() => adam.adamW(host, { ...common, lr: 1e-3, step: 1, clip: { sumSquares: flat(1, 'f32'), maxNorm: -1 } }), /^adamW: 'clip.maxNorm' must be a positive number or Infinity, got -1/);
  assert.equal(host.launches.length, 0);
});
