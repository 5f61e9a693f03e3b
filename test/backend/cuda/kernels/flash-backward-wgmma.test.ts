// The wgmma FlashAttention backward without a GPU: on an sm_90 host attention.ts sends dense f16/bf16
// d 64/128 (dropout included) to the preprocess + wgmma dK/dV + wgmma dQ launches, with their grids,
// shared memory and arguments; packed sequences, other head dimensions and other GPUs keep the
// mma.sync kernels; empty shapes still write zeros; bad tiles are refused by name.
// test/gpu/flash-wgmma.test.ts checks the numbers on an H200.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fa from '../../../../src/backend/cuda/kernels/attention.js';
import * as wb from '../../../../src/backend/cuda/kernels/flash-backward-wgmma.js';
import * as wg from '../../../../src/backend/cuda/kernels/flash-forward-wgmma.js';
import { OpCheck } from '../../../../src/backend/validate.js';
import type { FloatDType } from '../../../../src/dtype.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

function tensors(B: number, Hq: number, Hkv: number, Lq: number, Lk: number, d: number, dtype: FloatDType = 'bf16') {
  const qs = [B, Hq, Lq, d], kvs = [B, Hkv, Lk, d];
  return {
    q: deviceTensor(qs, dtype), k: deviceTensor(kvs, dtype), v: deviceTensor(kvs, dtype), out: deviceTensor(qs, dtype), dOut: deviceTensor(qs, dtype),
    lse: deviceTensor([B, Hq, Lq], 'f32'), dq: deviceTensor(qs, dtype), dk: deviceTensor(kvs, dtype), dv: deviceTensor(kvs, dtype), keyLengths: deviceTensor([B], 'i32'),
  };
}

test('flashAttentionBackward on sm_90: preprocess, then the wgmma dK/dV and dQ kernels with their grids and arguments', () => {
  const host = new RecordingHost('sm_90');
  const t = tensors(2, 8, 2, 1000, 1000, 128);
  fa.flashAttentionBackward(host, { ...t, causal: true, dropout: { p: 0.1, seed: 7n, offset: 32n } });
  const tile = wb.defaultWgmmaBackwardTile(128);
  assert.deepEqual(host.launches.map((l) => l.key), [
    'flash_attention_backward_preprocess.bf16.d128',
    `flash_backward_wgmma_dkdv.bf16.d128.wg${tile.dkdv.warpgroups}.q${tile.dkdv.blockQ}.causal.padded.dropout`,
    `flash_backward_wgmma_dq.bf16.d128.wg${tile.dq.warpgroups}.k${tile.dq.blockK}.causal.padded.dropout`,
  ]);
  const [, dkdv, dq] = host.launches as [typeof host.launches[0], typeof host.launches[0], typeof host.launches[0]];
  assert.deepEqual(dkdv.config.grid, [Math.ceil(1000 / (64 * tile.dkdv.warpgroups)), 2, 2]);
  assert.equal(dkdv.config.block, 128 * tile.dkdv.warpgroups);
  assert.equal(dkdv.config.sharedBytes, wb.wgmmaBackwardSharedBytes('dkdv', 128, tile));
  assert.deepEqual(dq.config.grid, [Math.ceil(1000 / (64 * tile.dq.warpgroups)), 8, 2]);
  assert.equal(dq.config.sharedBytes, wb.wgmmaBackwardSharedBytes('dq', 128, tile));
  // q, k, v, dOut, D, lse·log2 e (the preprocess's scratch), then the outputs, then the shape and the draw.
  assert.deepEqual([0, 1, 2, 3].map((i) => argValue(dkdv, i, 'ptr')), [t.q.ptr, t.k.ptr, t.v.ptr, t.dOut.ptr]);
  assert.equal(argValue(dkdv, 4, 'ptr'), RecordingHost.SCRATCH);
  assert.equal(argValue(dkdv, 5, 'ptr'), RecordingHost.SCRATCH + BigInt(4 * 2 * 8 * 1000));
  assert.deepEqual([argValue(dkdv, 6, 'ptr'), argValue(dkdv, 7, 'ptr'), argValue(dkdv, 8, 'ptr')], [t.dk.ptr, t.dv.ptr, t.keyLengths.ptr]);
  assert.deepEqual([9, 10, 11, 12].map((i) => argValue(dkdv, i, 'i32')), [1000, 1000, 8, 4]);
  assert.equal(argValue(dq, 6, 'ptr'), t.dq.ptr);
  assert.ok(Math.abs((argValue(dq, 12, 'f32') as number) - 1 / Math.sqrt(128)) < 1e-7);
  assert.deepEqual([argValue(dq, 15, 'ptr'), argValue(dq, 16, 'ptr'), argValue(dq, 17, 'i32')], [0n, 0n, 0], 'no packed sequences');
  assert.deepEqual([argValue(dq, 18, 'u64'), argValue(dq, 19, 'u64')], [7n, 32n]);
  assert.equal(argValue(dq, 23, 'i64'), 1000n);
  for (const l of [dkdv, dq]) assert.match(l.source, /wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16/);
});

test('the mma.sync backward keeps packed sequences with FUSEFORMER_WGMMA_VARLEN=0, other head dimensions and other GPUs', () => {
  const d96 = new RecordingHost('sm_90');
  fa.flashAttentionBackward(d96, { ...tensors(1, 2, 2, 64, 64, 96), keyLengths: undefined });
  assert.match(d96.launches[1]!.key, /^flash_attention_backward_dkdv\.bf16\.d96\./);
  const ampere = new RecordingHost('sm_80');
  fa.flashAttentionBackward(ampere, { ...tensors(1, 2, 2, 64, 64, 64), keyLengths: undefined });
  assert.match(ampere.launches[1]!.key, /^flash_attention_backward_dkdv\.bf16\.d64\..*\.mma/);
  assert.equal(wg.wgmmaAttentionApplies(new RecordingHost('sm_90'), 'bf16', 64, { varlen: {} }), true, 'packed sequences by default');
  process.env['FUSEFORMER_WGMMA_VARLEN'] = '0';
  try {
    assert.equal(wg.wgmmaAttentionApplies(new RecordingHost('sm_90'), 'bf16', 64, { varlen: {} }), false);
  } finally {
    delete process.env['FUSEFORMER_WGMMA_VARLEN'];
  }
  assert.equal(wg.wgmmaAttentionApplies(new RecordingHost('sm_90'), 'f32', 64, {}), false);
  process.env['FUSEFORMER_WGMMA_ATTENTION'] = '0';
  try {
    assert.equal(wg.wgmmaAttentionApplies(new RecordingHost('sm_90'), 'bf16', 64, {}), false);
  } finally {
    delete process.env['FUSEFORMER_WGMMA_ATTENTION'];
  }
});

test('empty shapes on sm_90: no query rows still zeroes dk/dv; no keys still writes dq', () => {
  const host = new RecordingHost('sm_90');
  fa.flashAttentionBackward(host, tensors(1, 2, 2, 0, 16, 64));
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['flash_backward_wgmma_dkdv']);
  fa.flashAttentionBackward(host, tensors(1, 2, 2, 5, 0, 64));
  assert.deepEqual(host.launches.slice(1).map((l) => l.key.split('.')[0]), ['flash_attention_backward_preprocess', 'flash_backward_wgmma_dq']);
});

test('launchWgmmaBackward refuses bad tiles and problems it cannot run, naming them', () => {
  const t = tensors(1, 2, 2, 64, 64, 64);
  const p = { ...t, keyLengths: undefined, scale: 0.125, causal: false, B: 1, Hq: 2, Hkv: 2, Lq: 64, Lk: 64, d: 64, group: 1 };
  const scratch = { delta: 0x100n, lseLog2: 0x200n };
  const fails = (host: RecordingHost, pattern: RegExp, tile?: wb.WgmmaBackwardTile, problem = p) =>
    assert.throws(() => wb.launchWgmmaBackward(host, new OpCheck('flashAttentionBackward', 'cuda'), problem, scratch, tile),
      (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  const hopper = new RecordingHost('sm_90');
  fails(new RecordingHost('sm_80'), /on an sm_90 GPU; got bf16 d = 64 on sm_80/);
  fails(hopper, /got bf16 d = 96/, undefined, { ...p, d: 96 });
  fails(hopper, /dkdv tile warpgroups must be 1, 2 or 3, got 4/, { dkdv: { warpgroups: 4 as 1, blockQ: 64 }, dq: { warpgroups: 2, blockK: 64 } });
  fails(hopper, /dq blockK must be a multiple of 16 in \[16, 256\], got 40/, { dkdv: { warpgroups: 2, blockQ: 64 }, dq: { warpgroups: 2, blockK: 40 } });
  assert.equal(hopper.launches.length, 0);
  for (const d of [64, 128]) assert.deepEqual(wb.WGMMA_BACKWARD_SWEEP[d]![0], wb.defaultWgmmaBackwardTile(d), 'the sweep lists the default first');
});
