// The fused attention launchers' optional features without a GPU: dropout and packed sequences reach
// the kernels (keys, the appended arguments, grids, scratch), the causal launch-order sections, the
// backward's tiles (custom tiles launched as given, bad tiles refused), and argument errors.
// test/gpu/flash-dropout.test.ts and test/gpu/flash-varlen.test.ts check the numbers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fa from '../../../../src/backend/cuda/kernels/attention.js';
import * as fb from '../../../../src/backend/cuda/kernels/flash-backward.js';
import * as ff from '../../../../src/backend/cuda/kernels/flash-forward.js';
import { OpCheck } from '../../../../src/backend/validate.js';
import type { FloatDType } from '../../../../src/dtype.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

function dense(B: number, Hq: number, Hkv: number, Lq: number, Lk: number, d: number, dtype: FloatDType = 'bf16') {
  return {
    q: deviceTensor([B, Hq, Lq, d], dtype), k: deviceTensor([B, Hkv, Lk, d], dtype), v: deviceTensor([B, Hkv, Lk, d], dtype),
    out: deviceTensor([B, Hq, Lq, d], dtype), lse: deviceTensor([B, Hq, Lq], 'f32'), dOut: deviceTensor([B, Hq, Lq, d], dtype),
    dq: deviceTensor([B, Hq, Lq, d], dtype), dk: deviceTensor([B, Hkv, Lk, d], dtype), dv: deviceTensor([B, Hkv, Lk, d], dtype),
  };
}

function packed(B: number, Hq: number, Hkv: number, totalQ: number, totalK: number, d: number, dtype: FloatDType = 'bf16') {
  return {
    q: deviceTensor([totalQ, Hq, d], dtype), k: deviceTensor([totalK, Hkv, d], dtype), v: deviceTensor([totalK, Hkv, d], dtype),
    out: deviceTensor([totalQ, Hq, d], dtype), lse: deviceTensor([Hq, totalQ], 'f32'), dOut: deviceTensor([totalQ, Hq, d], dtype),
    dq: deviceTensor([totalQ, Hq, d], dtype), dk: deviceTensor([totalK, Hkv, d], dtype), dv: deviceTensor([totalK, Hkv, d], dtype),
    cuSeqlensQ: deviceTensor([B + 1], 'i32'), cuSeqlensK: deviceTensor([B + 1], 'i32'),
  };
}

test('dropout reaches the tensor-core forward: key, seed, offset, offsetBase, threshold, 1/(1 − p) and the row stride Lk', () => {
  const host = new RecordingHost();
  const t = dense(2, 8, 2, 300, 301, 64);
  const offsetBase = deviceTensor([2], 'i32');
  fa.flashAttentionForward(host, { q: t.q, k: t.k, v: t.v, out: t.out, lse: t.lse, dropout: { p: 0.1, seed: 77n, offset: 1234n, offsetBase } });
  const l = host.launches[0]!;
  assert.match(l.key, /^flash_forward\.bf16\.d64\..*\.dropout$/);
  assert.match(l.source, /constexpr bool DROPOUT = true;/);
  assert.equal(argValue(l, 11, 'i32'), 1); // non-causal: head-major
  assert.deepEqual([12, 13].map((i) => argValue(l, i, 'ptr')), [0n, 0n]);
  assert.equal(argValue(l, 14, 'i32'), 0);
  assert.equal(argValue(l, 15, 'u64'), 77n);
  assert.equal(argValue(l, 16, 'u64'), 1234n);
  assert.equal(argValue(l, 17, 'ptr'), offsetBase.ptr);
  assert.equal(argValue(l, 18, 'u32'), Math.ceil(0.1 * 65536));
  assert.ok(Math.abs((argValue(l, 19, 'f32') as number) - 1 / 0.9) < 1e-12);
  assert.equal(argValue(l, 20, 'i64'), 301n);

  // p = 0 is dropout off: the plain kernel.
  fa.flashAttentionForward(host, { q: t.q, k: t.k, v: t.v, out: t.out, lse: t.lse, dropout: { p: 0, seed: 77n, offset: 0n } });
  assert.doesNotMatch(host.launches[1]!.key, /dropout/);
  assert.equal(argValue(host.launches[1]!, 18, 'u32'), 0);
});

test('dropout reaches every backward kernel, tensor-core and SIMT', () => {
  const host = new RecordingHost();
  const t = dense(1, 4, 4, 100, 100, 128);
  fa.flashAttentionBackward(host, { ...t, causal: true, dropout: { p: 0.25, seed: 5n, offset: 9n } });
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['flash_attention_backward_preprocess', 'flash_attention_backward_dkdv', 'flash_attention_backward_dq']);
  assert.doesNotMatch(host.launches[0]!.key, /dropout/);
  for (const l of host.launches.slice(1)) {
    assert.match(l.key, /\.causal\.dropout$/);
    const n = l.args.length;
    assert.equal(argValue(l, n - 6, 'u64'), 5n);
    assert.equal(argValue(l, n - 3, 'u32'), 16384);
    assert.equal(argValue(l, n - 1, 'i64'), 100n);
  }
  const simt = new RecordingHost();
  fa.flashAttentionBackward(simt, { ...dense(1, 2, 2, 50, 50, 64, 'f32'), dropout: { p: 0.25, seed: 5n, offset: 9n } });
  assert.deepEqual(simt.launches.map((l) => l.key), ['flash_attention_backward_dkdv.f32.d64.q32.k32.simt.dropout', 'flash_attention_backward_dq.f32.d64.q32.k32.simt.dropout']);
});

test('packed sequences: grid over maxSeqlen per sequence, cuSeqlens and totalQ passed, lse rows [Hq, totalQ], dropout stride rounded to 8', () => {
  const host = new RecordingHost();
  const t = packed(3, 8, 2, 700, 650, 128);
  const layout = { cuSeqlensQ: t.cuSeqlensQ, cuSeqlensK: t.cuSeqlensK, maxSeqlenQ: 400, maxSeqlenK: 333 };
  fa.flashAttentionForward(host, { q: t.q, k: t.k, v: t.v, out: t.out, lse: t.lse, causal: true, ...layout, dropout: { p: 0.1, seed: 1n, offset: 2n } });
  const f = host.launches[0]!;
  const tile = ff.defaultFlashForwardTile(128);
  assert.match(f.key, /\.causal\.varlen\.dropout$/);
  assert.deepEqual(f.config.grid, [Math.ceil(400 / ff.blockRows(tile)), 8, 3]);
  assert.deepEqual([6, 7, 8, 9].map((i) => argValue(f, i, 'i32')), [400, 333, 8, 4]);
  assert.equal(argValue(f, 11, 'i32'), 1); // packed: no sections
  assert.deepEqual([12, 13].map((i) => argValue(f, i, 'ptr')), [t.cuSeqlensQ.ptr, t.cuSeqlensK.ptr]);
  assert.equal(argValue(f, 14, 'i32'), 700);
  assert.equal(argValue(f, 20, 'i64'), 336n);

  fa.flashAttentionBackward(host, { ...t, causal: true, ...layout });
  const [pre, dkdv, dq] = host.launches.slice(1);
  assert.deepEqual(host.scratchRequests, [8 * 8 * 700]);
  assert.equal(pre!.key, 'flash_attention_backward_preprocess.bf16.d128.varlen');
  assert.equal(argValue(pre!, 5, 'i64'), BigInt(8 * 700));
  assert.deepEqual([6, 7].map((i) => argValue(pre!, i, 'i32')), [700, 8]);
  assert.deepEqual(dkdv!.config.grid, [Math.ceil(333 / 64), 2, 3]);
  assert.deepEqual(dq!.config.grid, [Math.ceil(400 / fb.dqBlockRows(fb.defaultFlashBackwardTile(128).dq)), 8, 3]);
  for (const l of [dkdv!, dq!]) assert.match(l.key, /\.causal\.varlen$/);

  // f32 takes the SIMT kernels with the same layout arguments.
  const simt = new RecordingHost();
  const s = packed(2, 2, 1, 40, 40, 64, 'f32');
  fa.flashAttentionForward(simt, { q: s.q, k: s.k, v: s.v, out: s.out, lse: s.lse, cuSeqlensQ: s.cuSeqlensQ, cuSeqlensK: s.cuSeqlensK, maxSeqlenQ: 30, maxSeqlenK: 30 });
  assert.equal(simt.launches[0]!.key, 'flash_attention_forward.f32.d64.q32.k32.simt.varlen');
  assert.deepEqual(simt.launches[0]!.config.grid, [1, 2, 2]);
  assert.equal(argValue(simt.launches[0]!, 11, 'ptr'), s.cuSeqlensQ.ptr);
});

test('packed-sequence arguments come all together, without keyLengths, with packed shapes', () => {
  const host = new RecordingHost();
  const t = packed(2, 4, 4, 50, 50, 64);
  const base = { q: t.q, k: t.k, v: t.v, out: t.out, lse: t.lse };
  const layout = { cuSeqlensQ: t.cuSeqlensQ, cuSeqlensK: t.cuSeqlensK, maxSeqlenQ: 30, maxSeqlenK: 30 };
  const bad: [string, () => void, RegExp][] = [
    ['partial', () => fa.flashAttentionForward(host, { ...base, cuSeqlensQ: t.cuSeqlensQ }), /packed sequences need all of cuSeqlensQ, cuSeqlensK, maxSeqlenQ and maxSeqlenK/],
    ['keyLengths', () => fa.flashAttentionForward(host, { ...base, ...layout, keyLengths: deviceTensor([2], 'i32') }), /'keyLengths' is not used with packed sequences/],
    ['lse', () => fa.flashAttentionForward(host, { ...base, ...layout, lse: deviceTensor([50, 4], 'f32') }), /'lse' has shape \[50, 4\]/],
    ['cu count', () => fa.flashAttentionForward(host, { ...base, ...layout, cuSeqlensK: deviceTensor([4], 'i32') }), /'cuSeqlensK' has shape \[4\]/],
    ['max', () => fa.flashAttentionForward(host, { ...base, ...layout, maxSeqlenK: -1 }), /'maxSeqlenK' must be an integer >= 0/],
    ['dense shape', () => fa.flashAttentionForward(host, { ...base, ...layout, q: deviceTensor([1, 50, 4, 64], 'bf16') }), /'q' has shape \[1, 50, 4, 64\]/],
    ['dropout p', () => { const x = dense(1, 2, 2, 8, 8, 64); fa.flashAttentionForward(host, { q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, dropout: { p: 1, seed: 0n, offset: 0n } }); }, /'p' must be in \[0, 1\)/],
  ];
  for (const [what, call, message] of bad) {
    assert.throws(call, (e: unknown) => e instanceof FuseformerError && /^flashAttentionForward: /.test(e.message) && message.test(e.message), what);
  }
  assert.equal(host.launches.length, 0);
});

test('causal dense launches run in L2-sized sections of heads, longest tiles first; non-causal stays head-major', () => {
  assert.equal(ff.flashSectionHeads(false, false, 512, 1024, 64, 1), 1);
  assert.equal(ff.flashSectionHeads(true, true, 512, 1024, 64, 1), 1);
  // 2·1024·64·2 bytes of K and V per head: 64 heads in 16 MiB; GQA 4:1 shares them (256).
  assert.equal(ff.flashSectionHeads(true, false, 512, 1024, 64, 1), 64);
  assert.equal(ff.flashSectionHeads(true, false, 512, 1024, 64, 4), 256);
  assert.equal(ff.flashSectionHeads(true, false, 16, 16384, 128, 1), 2);
  assert.equal(ff.flashSectionHeads(true, false, 8, 128, 64, 1), 8);
  const host = new RecordingHost();
  const t = dense(16, 32, 32, 1024, 1024, 64);
  fa.flashAttentionForward(host, { q: t.q, k: t.k, v: t.v, out: t.out, lse: t.lse, causal: true });
  assert.equal(argValue(host.launches[0]!, 11, 'i32'), 64);
  assert.match(host.launches[0]!.source, /decode|section/);
});

test('backward tiles: a custom tile is launched with its grid, block and shared memory; bad tiles are errors', () => {
  const host = new RecordingHost();
  const t = dense(2, 4, 4, 1000, 1000, 64);
  const check = new OpCheck('flashAttentionBackward', 'cuda');
  const tile: fb.FlashBackwardTile = { dkdv: { warps: 8, keysPerWarp: 16, blockQ: 64, minBlocks: 1 }, dq: { warps: 4, rowsPerWarp: 32, blockK: 32, minBlocks: 2 } };
  const problem = { ...t, keyLengths: undefined, scale: 0.125, causal: false, B: 2, Hq: 4, Hkv: 4, Lq: 1000, Lk: 1000, d: 64, group: 1 };
  fb.flashAttentionBackwardTensorCore(host, check, problem, tile);
  const [, dkdv, dq] = host.launches;
  assert.equal(dkdv!.key, 'flash_attention_backward_dkdv.bf16.d64.q64.k128.w8.mma');
  assert.deepEqual(dkdv!.config.grid, [8, 4, 2]);
  assert.equal(dkdv!.config.block, 256);
  assert.equal(dkdv!.config.sharedBytes, (2 * 128 + 4 * 64) * 144 + 16 * 64);
  assert.match(dkdv!.source, /constexpr int MT = 1;/);
  assert.equal(dq!.key, 'flash_attention_backward_dq.bf16.d64.q128.k32.b2.mma');
  assert.deepEqual(dq!.config.grid, [8, 4, 2]);
  assert.equal(dq!.config.block, 128);
  assert.equal(dq!.config.sharedBytes, (2 * 128 + 4 * 32) * 144);
  assert.match(dq!.source, /constexpr int MT = 2;/);
  assert.match(dq!.source, /__launch_bounds__\(128, 2\)/);

  const wrong = (t2: fb.FlashBackwardTile, message: RegExp) =>
    assert.throws(() => fb.flashAttentionBackwardTensorCore(host, check, problem, t2), (e: unknown) => e instanceof FuseformerError && message.test(e.message));
  wrong({ ...tile, dkdv: { ...tile.dkdv, keysPerWarp: 24 as 16 } }, /keysPerWarp must be 16 or 32/);
  wrong({ ...tile, dq: { ...tile.dq, blockK: 40 } }, /blockK must be a multiple of 16/);
  wrong({ ...tile, dkdv: { ...tile.dkdv, warps: 3 } }, /warps must be 1, 2, 4 or 8/);
  assert.equal(fb.flashBackwardTileProblem(fb.defaultFlashBackwardTile(128)), null);
  // Distinct keys for every tile field.
  const spec: fb.FlashBackwardSpec = { dtype: 'bf16', headDim: 64, causal: false, padding: false, tile };
  const variants = [spec, { ...spec, tile: { ...tile, dkdv: { ...tile.dkdv, minBlocks: 2 } } }, { ...spec, tile: { ...tile, dkdv: { ...tile.dkdv, keysPerWarp: 32 as const } } },
    { ...spec, tile: { ...tile, dkdv: { ...tile.dkdv, blockQ: 32 } } }, { ...spec, dropout: true }, { ...spec, varlen: true }];
  assert.equal(new Set(variants.map((s) => fb.flashBackwardKey('dkdv', s))).size, variants.length);
});
