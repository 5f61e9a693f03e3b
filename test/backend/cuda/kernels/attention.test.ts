// The fused attention kernels without a GPU: spec keys, the grid and shared memory each launcher
// picks, the arguments it passes (GQA group, scale·log2 e), what launches for empty shapes, and
// argument errors naming the op.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fa from '../../../../src/backend/cuda/kernels/attention.js';
import type { FloatDType } from '../../../../src/dtype.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('catalog kernels have distinct names, each defined in its source, covering every kernel and mask', () => {
  const sources = fa.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void KERNEL_BOUNDS ${s.name}\\(`));
  const names = sources.map((s) => s.name).join(' ');
  for (const fragment of ['forward_bf16_d64', 'forward_f16_d128', 'backward_dkdv_bf16_d80', 'backward_dq_f16_d96', 'forward_f32', '_causal_padded', '_simt_causal ', '_simt_padded', 'backward_dq_f32']) {
    assert.ok(names.includes(fragment.trim()), `no catalog kernel with '${fragment}'`);
  }
});

test('spec keys differ in every field and per kernel', () => {
  const base: fa.AttentionSpec = { dtype: 'bf16', headDim: 64, causal: false, padding: false, path: 'simt' };
  const variants: fa.AttentionSpec[] = [base, { ...base, dtype: 'f16' }, { ...base, headDim: 128 }, { ...base, causal: true }, { ...base, padding: true }];
  assert.equal(new Set(variants.map((s) => fa.attentionKey('forward', s))).size, variants.length);
  const kernels = new Set((['forward', 'backward_dkdv', 'backward_dq'] as const).map((k) => fa.attentionKey(k, base)));
  assert.equal(kernels.size, 3);
  assert.equal(fa.attentionKey('forward', { ...base, causal: true, padding: true }), 'flash_attention_forward.bf16.d64.q32.k32.simt.causal.padded');
});

test('shared memory fits sm_90 for every head dimension up to the limit', () => {
  for (const kernel of ['forward', 'backward_dkdv', 'backward_dq'] as const) {
    assert.ok(fa.attentionSharedBytes(kernel, fa.MAX_HEAD_DIM) <= 227 * 1024, kernel);
  }
  assert.equal(fa.attentionSharedBytes('forward', 128), 4 * (96 * 129 + 32 * 33));
});

function tensors(B: number, Hq: number, Hkv: number, Lq: number, Lk: number, d: number, dtype: FloatDType = 'bf16') {
  return {
    q: deviceTensor([B, Hq, Lq, d], dtype), k: deviceTensor([B, Hkv, Lk, d], dtype), v: deviceTensor([B, Hkv, Lk, d], dtype),
    out: deviceTensor([B, Hq, Lq, d], dtype), lse: deviceTensor([B, Hq, Lq], 'f32'), dOut: deviceTensor([B, Hq, Lq, d], dtype),
    dq: deviceTensor([B, Hq, Lq, d], dtype), dk: deviceTensor([B, Hkv, Lk, d], dtype), dv: deviceTensor([B, Hkv, Lk, d], dtype),
    keyLengths: deviceTensor([B], 'i32'),
  };
}

test('forward (SIMT path, f32): a block per (query tile, head, batch); GQA group and scale·log2(e) passed', () => {
  const host = new RecordingHost();
  const t = tensors(2, 8, 2, 1000, 1000, 128, 'f32');
  fa.flashAttentionForward(host, { q: t.q, k: t.k, v: t.v, out: t.out, lse: t.lse, causal: true, keyLengths: t.keyLengths });
  assert.equal(host.launches.length, 1);
  const l = host.launches[0]!;
  assert.equal(l.key, 'flash_attention_forward.f32.d128.q32.k32.simt.causal.padded');
  assert.deepEqual(l.config.grid, [32, 8, 2]);
  assert.equal(l.config.block, 128);
  assert.equal(l.config.sharedBytes, fa.attentionSharedBytes('forward', 128));
  assert.equal(argValue(l, 0, 'ptr'), t.q.ptr);
  assert.equal(argValue(l, 4, 'ptr'), t.lse.ptr);
  assert.equal(argValue(l, 5, 'ptr'), t.keyLengths.ptr);
  assert.deepEqual([6, 7, 8, 9].map((i) => argValue(l, i, 'i32')), [1000, 1000, 8, 4]);
  assert.ok(Math.abs((argValue(l, 10, 'f32') as number) - Math.LOG2E / Math.sqrt(128)) < 1e-12);
  assert.match(l.source, /constexpr int D = 128;/);
});

test('backward (SIMT path, f32): dK/dV per kv tile, then dQ per query tile', () => {
  const host = new RecordingHost();
  const t = tensors(3, 4, 4, 77, 129, 80, 'f32');
  fa.flashAttentionBackward(host, { ...t, keyLengths: undefined, scale: 0.5 });
  assert.deepEqual(host.launches.map((l) => l.key), ['flash_attention_backward_dkdv.f32.d80.q32.k32.simt', 'flash_attention_backward_dq.f32.d80.q32.k32.simt']);
  const [dkdv, dq] = host.launches as [typeof host.launches[0], typeof host.launches[0]];
  assert.deepEqual(dkdv.config.grid, [5, 4, 3]);
  assert.deepEqual(dq.config.grid, [3, 4, 3]);
  assert.equal(argValue(dkdv, 6, 'ptr'), t.dk.ptr);
  assert.equal(argValue(dkdv, 7, 'ptr'), t.dv.ptr);
  assert.equal(argValue(dkdv, 8, 'ptr'), 0n);
  assert.equal(argValue(dq, 6, 'ptr'), t.dq.ptr);
  assert.equal(argValue(dq, 12, 'f32'), 0.5);
  assert.equal(argValue(dkdv, 13, 'f32'), 0.5);
  assert.equal(argValue(dkdv, 12, 'i32'), 1); // group = Hq / Hkv
});

test('empty shapes: no query rows still zeroes dk/dv; no keys still writes dq', () => {
  const host = new RecordingHost();
  const noQueries = tensors(1, 2, 2, 0, 16, 64);
  fa.flashAttentionForward(host, noQueries);
  fa.flashAttentionBackward(host, noQueries);
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['flash_attention_backward_dkdv']);
  const noKeys = tensors(1, 2, 2, 5, 0, 64);
  fa.flashAttentionBackward(host, noKeys);
  assert.equal(host.launches.at(-1)!.key.split('.')[0], 'flash_attention_backward_dq');
});

test('launchers reject bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const t = tensors(2, 4, 2, 8, 8, 64);
  const bad: [string, () => void, RegExp][] = [
    ['heads', () => fa.flashAttentionForward(host, { ...t, k: deviceTensor([2, 3, 8, 64], 'bf16'), v: deviceTensor([2, 3, 8, 64], 'bf16') }), /^flashAttentionForward: the query heads Hq = 4/],
    ['dtype', () => fa.flashAttentionForward(host, { ...t, out: deviceTensor([2, 4, 8, 64], 'f16') }), /^flashAttentionForward: 'out' has dtype f16/],
    ['head dim', () => { const u = tensors(1, 1, 1, 4, 4, 320); fa.flashAttentionForward(host, u); }, /^flashAttentionForward: head dimension d = 320/],
    ['backward lse', () => fa.flashAttentionBackward(host, { ...t, lse: deviceTensor([2, 4, 7], 'f32') }), /^flashAttentionBackward: 'lse' has shape \[2, 4, 7\]/],
  ];
  for (const [what, call, message] of bad) {
    assert.throws(call, (e: unknown) => e instanceof FuseformerError && message.test(e.message), what);
  }
  assert.equal(host.launches.length, 0);
});
