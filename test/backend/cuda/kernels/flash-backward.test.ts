// The tensor-core FlashAttention backward without a GPU: which problems flashAttentionBackward sends
// to it (and which stay on the SIMT kernels), the three launches with their grids, shared memory,
// scratch and arguments, empty shapes, spec keys and the catalog. The GPU test
// (test/gpu/flash-backward.test.ts) checks the numbers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fa from '../../../../src/backend/cuda/kernels/attention.js';
import * as fb from '../../../../src/backend/cuda/kernels/flash-backward.js';
import type { FloatDType } from '../../../../src/dtype.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

function tensors(B: number, Hq: number, Hkv: number, Lq: number, Lk: number, d: number, dtype: FloatDType = 'bf16') {
  return {
    q: deviceTensor([B, Hq, Lq, d], dtype), k: deviceTensor([B, Hkv, Lk, d], dtype), v: deviceTensor([B, Hkv, Lk, d], dtype),
    out: deviceTensor([B, Hq, Lq, d], dtype), lse: deviceTensor([B, Hq, Lq], 'f32'), dOut: deviceTensor([B, Hq, Lq, d], dtype),
    dq: deviceTensor([B, Hq, Lq, d], dtype), dk: deviceTensor([B, Hkv, Lk, d], dtype), dv: deviceTensor([B, Hkv, Lk, d], dtype),
  };
}

test('bf16 d=128 causal padded GQA: preprocess, dK/dV per 64 keys, dQ per 256 queries, D and lse in scratch', () => {
  const host = new RecordingHost();
  const t = tensors(2, 8, 2, 1000, 777, 128);
  const keyLengths = deviceTensor([2], 'i32');
  fa.flashAttentionBackward(host, { ...t, causal: true, keyLengths, scale: 0.125 });
  assert.deepEqual(host.launches.map((l) => l.key), [
    'flash_attention_backward_preprocess.bf16.d128',
    'flash_attention_backward_dkdv.bf16.d128.q32.k64.mma.causal.padded',
    'flash_attention_backward_dq.bf16.d128.q256.k32.w8.mma.causal.padded',
  ]);
  const rows = 2 * 8 * 1000;
  assert.deepEqual(host.scratchRequests, [8 * rows]);
  const [pre, dkdv, dq] = host.launches as [typeof host.launches[0], typeof host.launches[0], typeof host.launches[0]];
  const delta = RecordingHost.SCRATCH, lseLog2 = RecordingHost.SCRATCH + BigInt(4 * rows);

  assert.equal(pre.config.grid, rows / 32);
  assert.equal(pre.config.block, 128);
  assert.deepEqual([0, 1, 2, 3, 4].map((i) => argValue(pre, i, 'ptr')), [t.out.ptr, t.dOut.ptr, t.lse.ptr, delta, lseLog2]);
  assert.equal(argValue(pre, 5, 'i64'), BigInt(rows));

  assert.deepEqual(dkdv.config.grid, [Math.ceil(777 / 64), 2, 2]);
  assert.equal(dkdv.config.block, 128);
  assert.equal(dkdv.config.sharedBytes, fb.flashBackwardSharedBytes('dkdv', 128));
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 7, 8].map((i) => argValue(dkdv, i, 'ptr')), [t.q.ptr, t.k.ptr, t.v.ptr, t.dOut.ptr, delta, lseLog2, t.dk.ptr, t.dv.ptr, keyLengths.ptr]);
  assert.deepEqual([9, 10, 11, 12].map((i) => argValue(dkdv, i, 'i32')), [1000, 777, 8, 4]);
  assert.equal(argValue(dkdv, 13, 'f32'), 0.125);
  assert.ok(Math.abs((argValue(dkdv, 14, 'f32') as number) - 0.125 * Math.LOG2E) < 1e-12);

  assert.deepEqual(dq.config.grid, [Math.ceil(1000 / 256), 8, 2]);
  assert.equal(dq.config.sharedBytes, fb.flashBackwardSharedBytes('dq', 128));
  assert.deepEqual([6, 7].map((i) => argValue(dq, i, 'ptr')), [t.dq.ptr, keyLengths.ptr]);
  assert.deepEqual([8, 9, 10, 11].map((i) => argValue(dq, i, 'i32')), [1000, 777, 8, 4]);

  assert.match(dkdv.source, /constexpr int D = 128;/);
  assert.match(dkdv.source, /constexpr int BQ = 32;/);
  assert.match(dkdv.source, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32/);
});

test('f16 takes the tensor-core path with f16 mma; d = 64 uses 128 keys and 32-query tiles in dK/dV, 128 queries in dQ', () => {
  const host = new RecordingHost();
  fa.flashAttentionBackward(host, tensors(1, 4, 4, 100, 100, 64, 'f16'));
  assert.deepEqual(host.launches.map((l) => l.key), [
    'flash_attention_backward_preprocess.f16.d64',
    'flash_attention_backward_dkdv.f16.d64.q32.k128.mma',
    'flash_attention_backward_dq.f16.d64.q128.k32.mma',
  ]);
  assert.match(host.launches[1]!.source, /constexpr int BQ = 32;/);
  assert.match(host.launches[2]!.source, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32/);
});

test('f32, head dimensions that are not a multiple of 16 or exceed 128, and misaligned views stay on SIMT', () => {
  const simt = (args: Parameters<typeof fa.flashAttentionBackward>[1]): string[] => {
    const host = new RecordingHost();
    fa.flashAttentionBackward(host, args);
    assert.deepEqual(host.scratchRequests, []);
    return host.launches.map((l) => l.key.split('.').at(-1)!);
  };
  assert.deepEqual(simt(tensors(1, 2, 2, 50, 50, 64, 'f32')), ['simt', 'simt']);
  assert.deepEqual(simt(tensors(1, 2, 2, 50, 50, 72)), ['simt', 'simt']);
  assert.deepEqual(simt(tensors(1, 2, 2, 50, 50, 256, 'f16')), ['simt', 'simt']);
  const t = tensors(1, 2, 2, 50, 50, 64);
  assert.deepEqual(simt({ ...t, dk: deviceTensor([1, 2, 50, 64], 'bf16', 0x5000_0008n) }), ['simt', 'simt']);
});

test('empty shapes: no query rows still zeroes dk/dv; no keys still writes dq', () => {
  const host = new RecordingHost();
  fa.flashAttentionBackward(host, tensors(1, 2, 2, 0, 16, 64));
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['flash_attention_backward_dkdv']);
  host.launches.length = 0;
  fa.flashAttentionBackward(host, tensors(1, 2, 2, 5, 0, 64));
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['flash_attention_backward_preprocess', 'flash_attention_backward_dq']);
});

test('supported head dimensions fit sm_90 shared memory; keys differ in every spec field', () => {
  for (let d = 16; d <= fb.MAX_HEAD_DIM; d += 16) {
    assert.ok(fb.flashBackwardSupports('bf16', d));
    for (const kernel of ['dkdv', 'dq'] as const) assert.ok(fb.flashBackwardSharedBytes(kernel, d) <= 227 * 1024, `${kernel} d=${d}`);
  }
  // 4 warps × 16 rows in both kernels (the first default): dQ keeps 64 Q/dO rows + 2 × 2 K/V tiles of
  // 64 keys, dK/dV 64 keys of K, V + 2 × 2 Q/dO tiles of 64 rows, 272- and 144-byte padded rows.
  const narrow = { dkdv: { warps: 4, keysPerWarp: 16, blockQ: 64, minBlocks: 1 }, dq: { warps: 4, rowsPerWarp: 16, blockK: 64, minBlocks: 1 } } as const;
  assert.equal(fb.flashBackwardSharedBytes('dq', 128, narrow), 384 * 272);
  assert.equal(fb.flashBackwardSharedBytes('dkdv', 64, narrow), (128 + 256) * 144 + 16 * 64);
  assert.ok(!fb.flashBackwardSupports('f32', 64) && !fb.flashBackwardSupports('bf16', 8) && !fb.flashBackwardSupports('bf16', 144));
  const base: fb.FlashBackwardSpec = { dtype: 'bf16', headDim: 64, causal: false, padding: false };
  const variants: fb.FlashBackwardSpec[] = [base, { ...base, dtype: 'f16' }, { ...base, headDim: 96 }, { ...base, causal: true }, { ...base, padding: true }];
  for (const kernel of ['dkdv', 'dq'] as const) assert.equal(new Set(variants.map((s) => fb.flashBackwardKey(kernel, s))).size, variants.length);
});

test('catalog: every dtype × head dimension × mask, distinct names each defined in its source', () => {
  const sources = fb.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void KERNEL_BOUNDS ${s.name}\\(`));
  const names = sources.map((s) => s.name);
  for (const dtype of ['bf16', 'f16']) {
    for (const d of fb.CATALOG_HEAD_DIMS) {
      assert.ok(names.includes(`flash_attention_backward_preprocess_${dtype}_d${d}`));
      for (const kernel of ['dkdv', 'dq']) {
        const ours = names.filter((n) => n.startsWith(`flash_attention_backward_${kernel}_${dtype}_d${d}_`));
        assert.equal(ours.length, 2, `${kernel} ${dtype} d${d}`);
        assert.equal(ours.filter((n) => n.includes('_causal')).length, 1);
      }
    }
  }
  assert.ok(names.some((n) => n.endsWith('_causal_padded')) && names.some((n) => n.endsWith('_mma_padded')) && names.some((n) => n.endsWith('_mma')));
});
