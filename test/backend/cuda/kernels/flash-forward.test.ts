// The tensor-core FlashAttention forward without a GPU: which inputs take it (and which stay on the
// SIMT kernel), the spec key, grid, block, shared memory and arguments its launcher passes, the
// per-d tiles' shared memory, and the catalog. test/gpu/flash-attention.test.ts checks the numbers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fa from '../../../../src/backend/cuda/kernels/attention.js';
import * as ff from '../../../../src/backend/cuda/kernels/flash-forward.js';
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

test('path: f16/bf16 with d % 16 = 0 up to 256, scale > 0 and aligned tensors take the tensor cores', () => {
  const aligned = [0x1000n, 0x2010n];
  assert.equal(fa.flashAttentionPath('bf16', 128, 0.1, aligned), 'mma');
  assert.equal(fa.flashAttentionPath('f16', 80, 0.1, aligned), 'mma');
  assert.equal(fa.flashAttentionPath('bf16', 256, 0.1, aligned), 'mma');
  assert.equal(fa.flashAttentionPath('f32', 128, 0.1, aligned), 'simt');
  assert.equal(fa.flashAttentionPath('bf16', 72, 0.1, aligned), 'simt');
  assert.equal(fa.flashAttentionPath('bf16', 33, 0.1, aligned), 'simt');
  assert.equal(fa.flashAttentionPath('bf16', 272, 0.1, aligned), 'simt');
  assert.equal(fa.flashAttentionPath('bf16', 64, -0.1, aligned), 'simt');
  assert.equal(fa.flashAttentionPath('bf16', 64, 0, aligned), 'simt');
  assert.equal(fa.flashAttentionPath('bf16', 64, 0.1, [0x1000n, 0x2008n]), 'simt');
});

test('flashAttentionForward: bf16 goes to the tensor-core kernel with its grid, shared memory and arguments', () => {
  const host = new RecordingHost();
  const t = tensors(2, 8, 2, 1000, 1000, 128);
  fa.flashAttentionForward(host, { ...t, causal: true });
  assert.equal(host.launches.length, 1);
  const l = host.launches[0]!;
  const tile = ff.defaultFlashForwardTile(128);
  assert.equal(l.key, `flash_forward.bf16.d128.q${ff.blockRows(tile)}.k${tile.blockK}.w${tile.warps}.b${tile.minBlocks}${tile.qInRegisters ? '.qreg' : ''}${tile.oneBarrier ? '.bar1' : ''}.causal.padded`);
  assert.deepEqual(l.config.grid, [Math.ceil(1000 / ff.blockRows(tile)), 8, 2]);
  assert.equal(l.config.block, 32 * tile.warps);
  assert.equal(l.config.sharedBytes, ff.flashForwardSharedBytes(128, tile));
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((i) => argValue(l, i, 'ptr')), [t.q.ptr, t.k.ptr, t.v.ptr, t.out.ptr, t.lse.ptr, t.keyLengths.ptr]);
  assert.deepEqual([6, 7, 8, 9].map((i) => argValue(l, i, 'i32')), [1000, 1000, 8, 4]);
  assert.ok(Math.abs((argValue(l, 10, 'f32') as number) - Math.LOG2E / Math.sqrt(128)) < 1e-12);
  assert.match(l.source, /constexpr int D = 128;/);
  assert.match(l.source, /constexpr bool CAUSAL = true;/);
  assert.match(l.source, /typedef __nv_bfloat16 T;/);
  assert.match(l.source, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32/);
});

test('flashAttentionForward: no keyLengths passes a null pointer; f16, f32, misaligned and negative scale pick their paths', () => {
  const host = new RecordingHost();
  const t = tensors(1, 4, 4, 77, 300, 80, 'f16');
  fa.flashAttentionForward(host, { ...t, keyLengths: undefined });
  assert.match(host.launches[0]!.key, /^flash_forward\.f16\.d80\./);
  assert.equal(argValue(host.launches[0]!, 5, 'ptr'), 0n);
  assert.match(host.launches[0]!.source, /constexpr bool PADDING = false;/);

  const f32 = tensors(1, 4, 4, 77, 300, 64, 'f32');
  fa.flashAttentionForward(host, f32);
  assert.match(host.launches[1]!.key, /^flash_attention_forward\.f32\.d64\..*simt/);

  const misaligned = tensors(1, 4, 4, 77, 300, 64);
  misaligned.k = deviceTensor([1, 4, 300, 64], 'bf16', 0x5000_0008n);
  fa.flashAttentionForward(host, misaligned);
  assert.match(host.launches[2]!.key, /^flash_attention_forward\.bf16\.d64\..*simt/);

  fa.flashAttentionForward(host, { ...tensors(1, 4, 4, 77, 300, 64), scale: -0.125 });
  assert.match(host.launches[3]!.key, /^flash_attention_forward\.bf16\.d64\..*simt/);
});

test('no query rows: nothing launches', () => {
  const host = new RecordingHost();
  fa.flashAttentionForward(host, tensors(1, 2, 2, 0, 16, 64));
  assert.equal(host.launches.length, 0);
});

test('spec keys differ in every field, including the tile', () => {
  const tile = ff.defaultFlashForwardTile(64);
  const base: ff.FlashForwardSpec = { dtype: 'bf16', headDim: 64, causal: false, padding: false, tile };
  const variants: ff.FlashForwardSpec[] = [
    base, { ...base, dtype: 'f16' }, { ...base, headDim: 128 }, { ...base, causal: true }, { ...base, padding: true },
    { ...base, tile: { ...tile, warps: tile.warps === 4 ? 8 : 4 } }, { ...base, tile: { ...tile, blockK: 128 } },
    { ...base, tile: { ...tile, rowsPerWarp: tile.rowsPerWarp === 16 ? 32 : 16 } },
    { ...base, tile: { ...tile, qInRegisters: !tile.qInRegisters } }, { ...base, tile: { ...tile, minBlocks: tile.minBlocks + 1 } },
  ];
  assert.equal(new Set(variants.map(ff.flashForwardKey)).size, variants.length);
});

test('every default tile fits sm_90 shared memory; the shared layout is (BQ + 4·BK) swizzled rows', () => {
  for (let d = 16; d <= ff.MAX_FLASH_HEAD_DIM; d += 16) {
    const tile = ff.defaultFlashForwardTile(d);
    assert.ok(ff.flashForwardSharedBytes(d, tile) <= 227 * 1024, `d = ${d}`);
  }
  // d = 80 rows are padded to 12 chunks (192 bytes), the 64-byte swizzle's unit.
  assert.equal(ff.flashForwardSharedBytes(80, { warps: 8, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 1 }), (128 + 256) * 192);
  assert.equal(ff.flashForwardSharedBytes(128, { warps: 4, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 1 }), (64 + 256) * 256);
  assert.equal(ff.flashForwardSharedBytes(64, { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: false, minBlocks: 2 }), (128 + 256) * 128);
});

test('a custom tile is launched as given; bad tiles and unsupported inputs are clear errors', () => {
  const host = new RecordingHost();
  const t = tensors(2, 4, 4, 130, 130, 64);
  const check = new OpCheck('flashAttentionForward', 'cuda');
  const sizes = { B: 2, Hq: 4, Lq: 130, Lk: 130, d: 64, group: 1, scale: 0.125, causal: false };
  const tile: ff.FlashForwardTile = { warps: 4, rowsPerWarp: 16, blockK: 128, qInRegisters: false, minBlocks: 2 };
  ff.launchFlashForward(host, check, t, sizes, tile);
  const l = host.launches[0]!;
  assert.equal(l.key, 'flash_forward.bf16.d64.q64.k128.w4.b2.padded');
  assert.deepEqual(l.config.grid, [3, 4, 2]);
  assert.match(l.source, /constexpr int MT = 1;/);
  ff.launchFlashForward(host, check, t, sizes, { ...tile, rowsPerWarp: 32 });
  assert.deepEqual(host.launches[1]!.config.grid, [2, 4, 2]);
  assert.match(host.launches[1]!.source, /constexpr int MT = 2;/);
  assert.equal(l.config.block, 128);
  assert.match(l.source, /__launch_bounds__\(128, 2\)/);

  assert.throws(() => ff.launchFlashForward(host, check, t, sizes, { ...tile, blockK: 40 }), (e: unknown) => e instanceof FuseformerError && /blockK must be a multiple of 16/.test(e.message));
  assert.throws(() => ff.launchFlashForward(host, check, t, sizes, { ...tile, warps: 3 }), (e: unknown) => e instanceof FuseformerError && /warps must be 2, 4 or 8/.test(e.message));
  assert.throws(() => ff.launchFlashForward(host, check, t, { ...sizes, scale: -1 }), (e: unknown) => e instanceof FuseformerError && /scale > 0/.test(e.message));
  const misaligned = { ...t, v: deviceTensor([2, 4, 130, 64], 'bf16', 0x6000_0008n) };
  assert.throws(() => ff.launchFlashForward(host, check, misaligned, sizes), (e: unknown) => e instanceof FuseformerError && /16-byte aligned tensors; 'v' is at 0x60000008/.test(e.message));
  const f32 = tensors(1, 1, 1, 4, 4, 64, 'f32');
  assert.throws(() => ff.launchFlashForward(host, check, f32, { ...sizes, B: 1, Hq: 1, Lq: 4, Lk: 4 }), /takes f16\/bf16/);
});

test('catalog: every head dimension × dtype × causal, distinct names, each defined in its source', () => {
  const sources = ff.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void KERNEL_BOUNDS ${s.name}\\(`));
  for (const dtype of ['bf16', 'f16']) {
    for (const d of ff.FLASH_CATALOG_HEAD_DIMS) {
      for (const causal of [false, true]) {
        assert.ok(sources.some((s) => s.name.startsWith(`flash_forward_${dtype}_d${d}_`) && s.name.includes('_causal') === causal), `${dtype} d${d} causal=${causal}`);
      }
    }
  }
  assert.ok(sources.some((s) => s.name.includes('_padded')) && sources.some((s) => !s.name.includes('_padded')));
});
