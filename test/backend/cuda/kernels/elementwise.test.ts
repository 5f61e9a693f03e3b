// The elementwise kernel family without a GPU: spec keys
// tell specs apart, and the launchers validate their arguments and pass the grid, vector width and
// dropout parameters we expect for known shapes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Activation } from '../../../../src/backend/backend.js';
import { dropoutThreshold } from '../../../../src/backend/rng.js';
import * as fc from '../../../../src/backend/cuda/kernels/fill-copy.js';
import * as ew from '../../../../src/backend/cuda/kernels/elementwise.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('catalog kernels have distinct names, each defined in its source', () => {
  const sources = ew.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void __launch_bounds__\\([^)]*\\) ${s.name}\\(`));
});

test('spec keys differ in every field', () => {
  const base = { dtype: 'f16', hidden: 768, vec: 8, hasDropout: true } as const;
  const keys = [base, { ...base, dtype: 'bf16' }, { ...base, hidden: 1024 }, { ...base, vec: 4 }, { ...base, hasDropout: false }]
    .map((s) => ew.biasDropoutResidualKey(s as ew.BiasDropoutResidualSpec));
  assert.equal(new Set(keys).size, keys.length);
  const acts = (['relu', 'gelu', 'gelu_tanh', 'silu'] as Activation[]).flatMap((activation) => [
    ew.biasActivationDropoutKey({ dtype: 'f16', hidden: 768, vec: 8, activation, hasDropout: true }),
    ew.biasActivationDropoutBackwardKey({ dtype: 'f16', hidden: 768, vec: 8, activation, hasDBias: true }),
    ew.biasActivationDropoutBackwardKey({ dtype: 'f16', hidden: 768, vec: 8, activation, hasDBias: false }),
  ]);
  assert.equal(new Set(acts).size, acts.length);
  const qkv = [
    ew.biasQkvSplitKey({ dtype: 'f16', heads: 12, headDim: 64, vec: 8 }), ew.biasQkvSplitKey({ dtype: 'f16', heads: 16, headDim: 48, vec: 8 }),
    ew.biasQkvSplitBackwardKey({ dtype: 'f16', heads: 12, headDim: 64, vec: 8, hasDBias: true }),
    ew.biasQkvSplitBackwardKey({ dtype: 'f16', heads: 12, headDim: 64, vec: 8, hasDBias: false }),
  ];
  assert.equal(new Set(qkv).size, qkv.length);
  assert.notEqual(ew.columnSumFinalizeKey({ dtype: 'f32', accumulate: true }), ew.columnSumFinalizeKey({ dtype: 'f32', accumulate: false }));
  assert.notEqual(fc.copyKey({ from: 'f32', to: 'f16', vec: 4 }), fc.copyKey({ from: 'f16', to: 'f32', vec: 4 }));
});

test('biasDropoutResidual: row-tile grid, 16-byte vectors, threshold and keep scale from p', () => {
  const host = new RecordingHost();
  const [rows, H] = [16384, 768];
  const t = () => deviceTensor([rows, H], 'bf16');
  ew.biasDropoutResidual(host, { input: t(), bias: deviceTensor([H], 'bf16'), residual: t(), out: t(), mask: deviceTensor([rows, H], 'u8'), p: 0.1, seed: 5n, offset: 7n });
  assert.equal(host.launches.length, 1);
  const l = host.launches[0]!;
  assert.equal(l.key, 'bias_dropout_residual.bf16.h768.v8.drop');
  // 96 vectors per row → 3 column chunks of 32; 8 row lanes, one row per thread → 8 rows per block.
  assert.deepEqual(l.config.block, [32, 8]);
  assert.deepEqual(l.config.grid, [rows / 8, 3]);
  assert.equal(argValue(l, 5, 'u64'), 5n);
  assert.equal(argValue(l, 6, 'u64'), 7n);
  assert.equal(argValue(l, 7, 'ptr'), 0n); // no device-side offset base
  assert.equal(argValue(l, 8, 'u32'), dropoutThreshold(0.1));
  assert.equal(argValue(l, 8, 'u32'), 6554); // ⌈0.1 · 2^16⌉ on 16-bit uniforms
  assert.equal(argValue(l, 9, 'f32'), 1 / 0.9);
  assert.equal(argValue(l, 10, 'u32'), rows);
  assert.equal(argValue(l, 11, 'u32'), 8);
});

test('biasDropoutResidual: p = 0 compiles the no-dropout variant', () => {
  const host = new RecordingHost();
  const t = () => deviceTensor([4, 64], 'f32');
  ew.biasDropoutResidual(host, { input: t(), bias: deviceTensor([64], 'f32'), residual: t(), out: t(), mask: deviceTensor([4, 64], 'u8'), p: 0, seed: 0n, offset: 0n });
  const l = host.launches[0]!;
  assert.equal(l.key, 'bias_dropout_residual.f32.h64.v4');
  assert.equal(argValue(l, 8, 'u32'), 0);
  // 16 vectors per row: 16 column lanes × 16 row lanes, one row per thread.
  assert.deepEqual(l.config.block, [16, 16]);
  assert.equal(argValue(l, 11, 'u32'), 16);
  assert.doesNotMatch(l.source, /dropout_keep_vec<VEC>\(seed/);
  assert.match(l.source, /store_mask_all_kept<VEC>/);
});

test('vector width falls back for odd hidden sizes and misaligned views', () => {
  const run = (H: number, inputPtr?: bigint, maskPtr?: bigint): string => {
    const host = new RecordingHost();
    ew.biasDropoutResidual(host, {
      input: deviceTensor([3, H], 'f16', inputPtr), bias: deviceTensor([H], 'f16'), residual: deviceTensor([3, H], 'f16'),
      out: deviceTensor([3, H], 'f16'), mask: deviceTensor([3, H], 'u8', maskPtr), p: 0.5, seed: 1n, offset: 0n,
    });
    return host.launches[0]!.key;
  };
  assert.match(run(1024), /\.v8\./);
  assert.match(run(770), /\.v2\./);
  assert.match(run(769), /\.v1\./);
  assert.match(run(1024, 0x5000_0002n), /\.v1\./); // an f16 view one element in
  assert.match(run(1024, 0x5000_0008n), /\.v4\./); // 8-byte aligned: 4 halves
  assert.match(run(1024, undefined, 0x5000_0004n), /\.v4\./); // mask 4-byte aligned
  assert.equal(ew.pickVectorWidth(4, [{ ptr: 0x100n, elementBytes: 4 }], 12), 4);
  assert.equal(ew.pickVectorWidth(8, [{ ptr: 0x106n, elementBytes: 2 }, { ptr: 0x100n, elementBytes: 4 }]), 1);
});

test('biasDropoutResidualBackward with dBias: one wave of reducing tiles, then the finalize kernel', () => {
  const host = new RecordingHost();
  const [rows, H] = [16384, 1024];
  ew.biasDropoutResidualBackward(host, { dOut: deviceTensor([rows, H], 'f16'), mask: deviceTensor([rows, H], 'u8'), p: 0.25, dInput: deviceTensor([rows, H], 'f16'), dBias: deviceTensor([H], 'f16') });
  assert.equal(host.launches.length, 2);
  const [main, finalize] = host.launches as [typeof host.launches[0], typeof host.launches[0]];
  assert.equal(main.key, 'bias_dropout_residual_backward.f16.h1024.v8.dbias');
  // 128 vectors → 4 chunks of 32; 512-thread blocks, 3 resident per SM (1536 threads, 40
  // registers: two rows' loads in flight a thread) → 396 blocks → 99 tiles.
  assert.deepEqual(main.config.block, [32, 16]);
  assert.deepEqual(main.config.grid, [99, 4]);
  assert.match(main.source, /constexpr int MIN_BLOCKS_PER_SM = 3;/);
  assert.match(main.source, /for \(u32 row0 = begin \+ threadIdx\.y; row0 < end; row0 \+= 2 \* TY\)/);
  assert.equal(argValue(main, 3, 'f32'), 1 / 0.75);
  assert.equal(argValue(main, 5, 'u32'), Math.ceil(rows / 99));
  assert.equal(argValue(main, 6, 'ptr'), RecordingHost.SCRATCH);
  assert.deepEqual(host.scratchRequests, [99 * H * 4]);
  assert.equal(finalize.key, 'column_sum_finalize.f16');
  assert.equal(finalize.config.grid, H / 32);
  assert.equal(argValue(finalize, 1, 'u32'), 99);
  assert.equal(argValue(finalize, 2, 'u32'), H);
});

test('backwards without dBias launch one non-reducing kernel', () => {
  const host = new RecordingHost();
  ew.biasActivationDropoutBackward(host, {
    dOut: deviceTensor([64, 3072], 'bf16'), input: deviceTensor([64, 3072], 'bf16'), bias: deviceTensor([3072], 'bf16'),
    mask: deviceTensor([64, 3072], 'u8'), p: 0.1, activation: 'gelu_tanh', dInput: deviceTensor([64, 3072], 'bf16'),
  });
  assert.equal(host.launches.length, 1);
  assert.equal(host.launches[0]!.key, 'bias_activation_dropout_backward.gelu_tanh.bf16.h3072.v8');
  assert.match(host.launches[0]!.source, /gelu_tanh_grad\(/);
  assert.deepEqual(host.scratchRequests, []);
});

test('biasQkvSplit: head layout baked in, L and qScale passed', () => {
  const host = new RecordingHost();
  const [B, L, heads, d] = [2, 17, 12, 64];
  const split = () => deviceTensor([B, heads, L, d], 'bf16');
  ew.biasQkvSplit(host, { qkv: deviceTensor([B, L, 3 * heads * d], 'bf16'), bias: deviceTensor([3 * heads * d], 'bf16'), heads, q: split(), k: split(), v: split(), qScale: 0.125 });
  const l = host.launches[0]!;
  assert.equal(l.key, 'bias_qkv_split.bf16.n12.d64.v8');
  assert.match(l.source, /constexpr int HEADS = 12;/);
  assert.match(l.source, /constexpr int HEAD_DIM = 64;/);
  assert.deepEqual(l.config.grid, [Math.ceil((B * L) / 8), 9]);
  assert.equal(argValue(l, 5, 'u32'), L);
  assert.equal(argValue(l, 6, 'f32'), 0.125);
  assert.equal(argValue(l, 7, 'u32'), B * L);
});

test('biasQkvSplitBackward with dBias reduces over B·L rows', () => {
  const host = new RecordingHost();
  const [B, L, heads, d] = [1, 5, 4, 80];
  const split = () => deviceTensor([B, heads, L, d], 'f32');
  ew.biasQkvSplitBackward(host, { dq: split(), dk: split(), dv: split(), heads, dQkv: deviceTensor([B, L, 3 * heads * d], 'f32'), dBias: deviceTensor([3 * heads * d], 'f32') });
  assert.deepEqual(host.launches.map((l) => l.key), ['bias_qkv_split_backward.f32.n4.d80.v4.dbias', 'column_sum_finalize.f32']);
});

test('columnSum: input and output dtypes may differ; accumulate selects the finalize variant', () => {
  const host = new RecordingHost();
  ew.columnSum(host, { input: deviceTensor([10, 3, 7], 'bf16'), out: deviceTensor([7], 'f32'), accumulate: true });
  assert.deepEqual(host.launches.map((l) => l.key), ['column_sum.bf16.h7.v1', 'column_sum_finalize.f32.acc']);
  assert.equal(argValue(host.launches[0]!, 1, 'u32'), 30);
});

test('launchers reject bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const t = (shape: number[], dtype: 'f16' | 'f32' | 'u8' | 'i32' = 'f16') => deviceTensor(shape, dtype);
  const rejects = (fn: () => void, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  };
  const bdr = { input: t([4, 8]), bias: t([8]), residual: t([4, 8]), out: t([4, 8]), mask: t([4, 8], 'u8'), p: 0.1, seed: 1n, offset: 0n };
  rejects(() => ew.biasDropoutResidual(host, { ...bdr, residual: t([4, 9]) }), /^biasDropoutResidual: 'residual'/);
  rejects(() => ew.biasDropoutResidual(host, { ...bdr, p: 1 }), /^biasDropoutResidual: 'p' must be in \[0, 1\)/);
  rejects(() => ew.biasDropoutResidual(host, { ...bdr, mask: t([4, 8], 'f16') }), /^biasDropoutResidual: 'mask' has dtype f16/);
  rejects(() => ew.biasDropoutResidual(host, { ...bdr, seed: -1n }), /^biasDropoutResidual: 'seed' must be a bigint/);
  rejects(() => ew.biasDropoutResidual(host, { ...bdr, out: t([4, 8], 'f32') }), /^biasDropoutResidual: 'out' has dtype f32/);
  rejects(() => ew.biasDropoutResidualBackward(host, { dOut: t([4, 8]), mask: t([4, 8], 'u8'), p: 0.1, dInput: t([4, 8]), dBias: t([9]) }), /^biasDropoutResidualBackward: 'dBias'/);
  rejects(() => ew.biasActivationDropout(host, { input: t([4, 8]), bias: t([8]), out: t([4, 8]), mask: t([4, 8], 'u8'), p: 0, seed: 0n, offset: 0n, activation: 'swish' as Activation }), /^biasActivationDropout: 'activation' must be one of/);
  rejects(() => ew.biasQkvSplit(host, { qkv: t([2, 3, 90]), bias: t([90]), heads: 4, q: t([2, 4, 3, 10]), k: t([2, 4, 3, 10]), v: t([2, 4, 3, 10]) }), /^biasQkvSplit: 'qkv' has last dimension 90, which is not 3·heads·d for heads = 4/);
  rejects(() => ew.biasQkvSplit(host, { qkv: t([2, 3, 90]), bias: t([90]), heads: 3, q: t([2, 3, 3, 10]), k: t([2, 3, 3, 10]), v: t([2, 3, 4, 10]) }), /^biasQkvSplit: 'v' has shape/);
  rejects(() => ew.biasQkvSplitBackward(host, { dq: t([2, 3, 3, 10]), dk: t([2, 3, 3, 10]), dv: t([2, 3, 3, 10]), heads: 3, dQkv: t([2, 3, 90]), qScale: Infinity }), /^biasQkvSplitBackward: 'qScale' must be a finite number/);
  rejects(() => ew.columnSum(host, { input: t([4, 8], 'i32'), out: t([8]) }), /^columnSum: 'input' has dtype i32/);
  rejects(() => fc.fill(host, t([4], 'u8'), 256), /^fill: 'value' = 256 does not fit in u8/);
  rejects(() => fc.fill(host, t([4], 'i32'), 1.5), /^fill: 'value' = 1.5 is not an integer/);
  rejects(() => fc.copy(host, t([4]), t([5])), /^copy: 'src' \[4\] has 4 elements but 'dst' \[5\] has 5/);
  const cpuLike = { ...t([4, 8]), backend: 'cpu' } as unknown as ReturnType<typeof t>;
  rejects(() => ew.biasDropoutResidual(host, { ...bdr, input: cpuLike }), /^biasDropoutResidual: 'input' is a cpu tensor/);
  assert.equal(host.launches.length, 0);
});

test('empty tensors launch nothing (and a dBias over zero rows is written as zeros)', () => {
  const host = new RecordingHost();
  fc.fill(host, deviceTensor([0], 'f32'), 1);
  fc.copy(host, deviceTensor([0, 3], 'f32'), deviceTensor([0], 'f16'));
  ew.biasDropoutResidualBackward(host, { dOut: deviceTensor([0, 8], 'f32'), mask: deviceTensor([0, 8], 'u8'), p: 0, dInput: deviceTensor([0, 8], 'f32'), dBias: deviceTensor([8], 'f32') });
  assert.deepEqual(host.launches.map((l) => l.key), ['column_sum_finalize.f32']);
  assert.equal(argValue(host.launches[0]!, 1, 'u32'), 0);
});

test('biasActivationDropout with rows in flight: TY·rows rows a block, the loads before the body, keyed .rN[s], two staged rows the erf default', () => {
  const run = (rowsEnv: string | undefined, activation: Activation = 'gelu') => {
    const saved = process.env['FUSEFORMER_ACTIVATION_ROWS'];
    if (rowsEnv === undefined) delete process.env['FUSEFORMER_ACTIVATION_ROWS']; else process.env['FUSEFORMER_ACTIVATION_ROWS'] = rowsEnv;
    try {
      const host = new RecordingHost();
      const [rows, H] = [1001, 3072];
      ew.biasActivationDropout(host, { input: deviceTensor([rows, H], 'bf16'), bias: deviceTensor([H], 'bf16'), out: deviceTensor([rows, H], 'bf16'), mask: deviceTensor([rows, H], 'u8'), activation, p: 0.1, seed: 1n, offset: 0n });
      return host.launches[0]!;
    } finally {
      if (saved === undefined) delete process.env['FUSEFORMER_ACTIVATION_ROWS']; else process.env['FUSEFORMER_ACTIVATION_ROWS'] = saved;
    }
  };
  // The default: two rows, the second staged, for the erf GELU at 16 bits; one row otherwise.
  assert.equal(run(undefined).key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r2s.pairs');
  assert.equal(run(undefined, 'gelu_tanh').key, 'bias_activation_dropout.gelu_tanh.bf16.h3072.v8.drop.pairs');
  const one = run('1');
  assert.equal(one.key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.pairs');
  assert.deepEqual(one.config.grid, [Math.ceil(1001 / 8), 12]);
  const two = run('2');
  assert.equal(two.key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r2.pairs');
  // 384 vectors a row → 12 column chunks of 32 lanes; 8 row lanes × 2 rows = 16 rows a block.
  assert.deepEqual(two.config.grid, [Math.ceil(1001 / 16), 12]);
  assert.equal(argValue(two, 9, 'u32'), 1001);
  assert.equal(argValue(two, 10, 'u32'), 16);
  assert.equal(run('4').key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r4.pairs');
  assert.equal(run('2s').key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r2s.pairs');
  assert.throws(() => run('3'), /FUSEFORMER_ACTIVATION_ROWS must be 1, 2 or 4 \(2s or 4s: staged through shared memory\), got '3'/);
  // Staged: row 0 in registers, the next rows copied into the thread's own shared-memory slots, read after its wait.
  const staged = ew.biasActivationDropoutSource({ dtype: 'bf16', hidden: 3072, vec: 8, activation: 'gelu', hasDropout: true, rowsInFlight: 2, staged: true }).source;
  assert.match(staged, /copy_async_16\(&staged_rows\[u - 1\]\[threadIdx\.y\]\[threadIdx\.x\], input \+ i\)/);
  assert.match(staged, /u == 0 \? x0 : \(copy_async_wait_all\(\), staged_rows\[u - 1\]/);
  assert.match(staged, /MIN_BLOCKS_PER_SM = 8\b/);
  const src = ew.biasActivationDropoutSource({ dtype: 'bf16', hidden: 3072, vec: 8, activation: 'gelu', hasDropout: true, rowsInFlight: 2 }).source;
  // Both rows' loads come before the first row's body; a row past the end reloads the last row.
  assert.ok(src.indexOf('xs[u] = load_vec') < src.indexOf('const Vec<T, VEC> x = xs[u]'));
  assert.match(src, /min\(row0 \+ u \* TY, rows - 1\)/);
  assert.match(src, /__launch_bounds__\(TX \* TY, MIN_BLOCKS_PER_SM\)/);
  assert.match(src, /#define MIN_BLOCKS_PER_SM 6\b|MIN_BLOCKS_PER_SM = 6\b/);
});

test('the bf16 activation forward reads x and bias a 32-bit pair at a time (keyed .pairs) unless FUSEFORMER_BF16_PAIRS=0; f16 is unchanged', () => {
  const run = (value: string | undefined, dtype: 'bf16' | 'f16') => {
    const saved = process.env['FUSEFORMER_BF16_PAIRS'];
    if (value === undefined) delete process.env['FUSEFORMER_BF16_PAIRS']; else process.env['FUSEFORMER_BF16_PAIRS'] = value;
    try {
      const host = new RecordingHost();
      const [rows, H] = [64, 3072];
      ew.biasActivationDropout(host, { input: deviceTensor([rows, H], dtype), bias: deviceTensor([H], dtype), out: deviceTensor([rows, H], dtype), mask: deviceTensor([rows, H], 'u8'), activation: 'gelu', p: 0.1, seed: 1n, offset: 0n });
      return host.launches[0]!;
    } finally {
      if (saved === undefined) delete process.env['FUSEFORMER_BF16_PAIRS']; else process.env['FUSEFORMER_BF16_PAIRS'] = saved;
    }
  };
  assert.equal(run('0', 'bf16').key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r2s');
  assert.equal(run(undefined, 'bf16').key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r2s.pairs');
  const pairs = run('1', 'bf16');
  assert.equal(pairs.key, 'bias_activation_dropout.gelu.bf16.h3072.v8.drop.r2s.pairs');
  assert.match(pairs.source, /__uint_as_float\(k & 1 \? w & 0xffff0000u : w << 16\)/);
  assert.match(pairs.source, /gelu_erf_fast\(float_at\(x, k\) \+ float_at\(bias_v, k\)\)/);
  assert.equal(run('1', 'f16').key, 'bias_activation_dropout.gelu.f16.h3072.v8.drop.r2s');
  assert.throws(() => run('2', 'bf16'), /FUSEFORMER_BF16_PAIRS must be 0 or 1, got '2'/);
});
