// The wgmma FlashAttention forward without a GPU: which problems attention.ts routes to it (an sm_90
// host, dense f16/bf16 with d 64 or 128, no dropout; FUSEFORMER_WGMMA_ATTENTION=0 turns it off), the
// key, grid, block, shared memory and arguments its launcher passes, its refusals, and that its sources
// ask for sm_90a. test/gpu/flash-wgmma.test.ts checks the numbers on an H200.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fa from '../../../../src/backend/cuda/kernels/attention.js';
import * as wg from '../../../../src/backend/cuda/kernels/flash-forward-wgmma.js';
import { kernelArch } from '../../../../src/backend/cuda/runtime/jit.js';
import { OpCheck } from '../../../../src/backend/validate.js';
import type { FloatDType } from '../../../../src/dtype.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

function tensors(B: number, Hq: number, Hkv: number, Lq: number, Lk: number, d: number, dtype: FloatDType = 'bf16') {
  return {
    q: deviceTensor([B, Hq, Lq, d], dtype), k: deviceTensor([B, Hkv, Lk, d], dtype), v: deviceTensor([B, Hkv, Lk, d], dtype),
    out: deviceTensor([B, Hq, Lq, d], dtype), lse: deviceTensor([B, Hq, Lq], 'f32'), keyLengths: deviceTensor([B], 'i32'),
  };
}

test('routing: dense f16/bf16 d 64/128 on an sm_90 host takes the wgmma forward', () => {
  const hopper = new RecordingHost('sm_90');
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, {}), true);
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'f16', 128, {}), true);
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 96, {}), false);
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'f32', 64, {}), false);
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, { varlen: {} }), true, 'packed sequences by default');
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, { varlen: {}, paged: {} }), false);
  process.env['FUSEFORMER_WGMMA_VARLEN'] = '0';
  try {
    assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, { varlen: {} }), false, 'FUSEFORMER_WGMMA_VARLEN=0 keeps them on mma.sync');
    assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, {}), true);
  } finally {
    delete process.env['FUSEFORMER_WGMMA_VARLEN'];
  }
  assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, { paged: {} }), false);
  assert.equal(wg.wgmmaAttentionApplies(new RecordingHost('sm_80'), 'bf16', 64, {}), false);
  assert.equal(wg.wgmmaAttentionApplies(new RecordingHost('sm_100'), 'bf16', 64, {}), false);
  assert.equal(wg.wgmmaAttentionApplies(new RecordingHost(), 'bf16', 64, {}), false);
  process.env['FUSEFORMER_WGMMA_ATTENTION'] = '0';
  try {
    assert.equal(wg.wgmmaAttentionApplies(hopper, 'bf16', 64, {}), false);
  } finally {
    delete process.env['FUSEFORMER_WGMMA_ATTENTION'];
  }
});

test('flashAttentionForward on sm_90: the wgmma kernel with its grid, shared memory and arguments', () => {
  const host = new RecordingHost('sm_90');
  const t = tensors(2, 8, 2, 1000, 1000, 128);
  fa.flashAttentionForward(host, { ...t, causal: true });
  assert.equal(host.launches.length, 1);
  const l = host.launches[0]!;
  const tile = wg.defaultWgmmaForwardTile(128);
  assert.equal(l.key, `flash_forward_wgmma.bf16.d128.wg${tile.warpgroups}.k${tile.blockK}.causal.padded`);
  assert.deepEqual(l.config.grid, [Math.ceil(1000 / (64 * tile.warpgroups)), 8, 2]);
  assert.equal(l.config.block, 128 * tile.warpgroups);
  assert.equal(l.config.sharedBytes, wg.wgmmaForwardSharedBytes(128, tile));
  assert.equal(l.config.sharedBytes, (64 * tile.warpgroups + 4 * tile.blockK) * 128 * 2 + 1024);
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((i) => argValue(l, i, 'ptr')), [t.q.ptr, t.k.ptr, t.v.ptr, t.out.ptr, t.lse.ptr, t.keyLengths.ptr]);
  assert.deepEqual([6, 7, 8, 9].map((i) => argValue(l, i, 'i32')), [1000, 1000, 8, 4]);
  assert.ok(Math.abs((argValue(l, 10, 'f32') as number) - Math.LOG2E / Math.sqrt(128)) < 1e-12);
  assert.match(l.source, /wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16/);
  assert.match(l.source, /constexpr bool CAUSAL = true;/);

  // Dropout: the wgmma kernel with the draw's arguments after the shape's; other head dimensions stay on mma.sync.
  fa.flashAttentionForward(host, { ...t, dropout: { p: 0.1, seed: 3n, offset: 5n } });
  const dropped = host.launches[1]!;
  assert.equal(dropped.key, `flash_forward_wgmma.bf16.d128.wg${tile.warpgroups}.k${tile.blockK}.padded.dropout`);
  assert.deepEqual([argValue(dropped, 12, 'ptr'), argValue(dropped, 13, 'ptr'), argValue(dropped, 14, 'i32')], [0n, 0n, 0], 'no packed sequences');
  assert.deepEqual([argValue(dropped, 15, 'u64'), argValue(dropped, 16, 'u64')], [3n, 5n]);
  assert.ok(Math.abs((argValue(dropped, 19, 'f32') as number) - 1 / 0.9) < 1e-6);
  assert.equal(argValue(dropped, 20, 'i64'), 1000n);
  assert.match(dropped.source, /constexpr bool DROPOUT = true;/);
  const t96 = tensors(1, 2, 2, 64, 64, 96);
  fa.flashAttentionForward(host, { ...t96, keyLengths: undefined });
  assert.match(host.launches[2]!.key, /^flash_forward\.bf16\.d96\./);
});

test('packed sequences: cuSeqlens and total rows after the shape, the dropout stride rounded to 8', () => {
  const host = new RecordingHost('sm_90');
  const [totalQ, H, d] = [380, 4, 64];
  const t = { q: deviceTensor([totalQ, H, d], 'bf16'), k: deviceTensor([totalQ, 2, d], 'bf16'), v: deviceTensor([totalQ, 2, d], 'bf16'), out: deviceTensor([totalQ, H, d], 'bf16'), lse: deviceTensor([H, totalQ], 'f32') };
  const cu = deviceTensor([4], 'i32');
  fa.flashAttentionForward(host, { ...t, cuSeqlensQ: cu, cuSeqlensK: cu, maxSeqlenQ: 301, maxSeqlenK: 301, causal: true, dropout: { p: 0.1, seed: 1n, offset: 2n } });
  const l = host.launches[0]!;
  const tile = wg.defaultWgmmaForwardTile(d);
  assert.equal(l.key, `flash_forward_wgmma.bf16.d64.wg${tile.warpgroups}.k${tile.blockK}.causal.varlen.dropout`);
  assert.deepEqual(l.config.grid, [Math.ceil(301 / (64 * tile.warpgroups)), H, 3]);
  assert.equal(argValue(l, 11, 'i32'), 1, 'head-major: one head a section');
  assert.deepEqual([argValue(l, 12, 'ptr'), argValue(l, 13, 'ptr'), argValue(l, 14, 'i32')], [cu.ptr, cu.ptr, totalQ]);
  assert.equal(argValue(l, 20, 'i64'), 304n);
  assert.match(l.source, /constexpr bool VARLEN = true;/);
});

test('launchWgmmaForward refuses what the kernel cannot run, naming the problem', () => {
  const t = tensors(1, 2, 2, 64, 64, 64);
  const sizes = { B: 1, Hq: 2, Lq: 64, Lk: 64, d: 64, group: 1, scale: 0.125, causal: false };
  const fails = (host: RecordingHost, pattern: RegExp, s = sizes, tile?: wg.WgmmaForwardTile, x = t) =>
    assert.throws(() => wg.launchWgmmaForward(host, new OpCheck('flashAttentionForward', 'cuda'), { ...x, keyLengths: undefined }, s, tile),
      (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  const hopper = new RecordingHost('sm_90');
  fails(new RecordingHost('sm_80'), /needs an sm_90 GPU \(Hopper\), this one is sm_80/);
  fails(hopper, /d = 64 or 128, got bf16 d = 80/, { ...sizes, d: 80 });
  fails(hopper, /scale > 0/, { ...sizes, scale: -1 });
  fails(hopper, /warpgroups must be 1, 2 or 3, got 4/, sizes, { warpgroups: 4 as 1, blockK: 64 });
  fails(hopper, /blockK must be a multiple of 16 in \[16, 256\], got 72/, sizes, { warpgroups: 2, blockK: 72 });
  fails(hopper, /16-byte aligned tensors; 'k'/, sizes, undefined, { ...t, k: deviceTensor([1, 2, 64, 64], 'bf16', 0x2008n) });
  assert.equal(hopper.launches.length, 0);
});

test('the wgmma sources compile for sm_90a; every swept tile has a catalog source', () => {
  const sources = wg.catalog();
  for (const s of sources) assert.equal(kernelArch('sm_90', s), 'sm_90a');
  for (const d of wg.WGMMA_HEAD_DIMS) {
    for (const tile of wg.WGMMA_FORWARD_SWEEP[d]!) {
      assert.ok(sources.some((s) => s.name.includes(`d${d}_wg${tile.warpgroups}_k${tile.blockK}`)), `d${d} ${JSON.stringify(tile)} missing`);
    }
    assert.deepEqual(wg.WGMMA_FORWARD_SWEEP[d]![0], wg.defaultWgmmaForwardTile(d), 'the sweep lists the default first');
  }
  assert.throws(() => wg.wgmmaForwardSource({ dtype: 'bf16', headDim: 96, causal: false, padding: false, tile: { warpgroups: 2, blockK: 64 } }), /head dimension must be one of 64, 128/);
});
