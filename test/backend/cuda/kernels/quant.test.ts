// The quantized-op launchers without a GPU: which kernel each shape gets (GEMV, tensor-core tiles,
// split-K with its finishing pass), the launch geometry, the int8 GEMM's column-major mapping, and the
// argument checks that only the GPU makes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { planInt8Gemm } from '../../../../src/backend/cuda/int8-gemm.js';
import * as q4 from '../../../../src/backend/cuda/kernels/quant-int4.js';
import * as q8 from '../../../../src/backend/cuda/kernels/quant-int8.js';
import { CublasOperation } from '../../../../src/cuda/cublaslt.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';
import { parseForcedGemvPlans } from '../../../../src/backend/cuda/kernels/gemv.js';

function int4Args(M: number, K: number, N: number, G: number, dtype: 'bf16' | 'f16' | 'f32' = 'bf16', xPtr?: bigint) {
  return {
    x: deviceTensor([M, K], dtype, xPtr), qweight: deviceTensor([N, K / 8], 'i32'), scales: deviceTensor([N, K / G], 'f16'),
    zeros: deviceTensor([N, K / G], 'u8'), groupSize: G, out: deviceTensor([M, N], dtype),
  };
}

test('decode shapes take the GEMV: K split over warps, columns per lane for two waves of blocks', () => {
  const host = new RecordingHost();
  q4.int4Linear(host, int4Args(1, 2048, 2048, 128), 'auto', false); // the tensor-core GEMV off (below)
  q4.int4Linear(host, int4Args(3, 8192, 2048, 64));
  q4.int4Linear(host, int4Args(8, 5120, 11008, 32, 'f16'));
  const [a, b, c] = host.launches;
  assert.equal(a!.key, 'int4_gemv.bf16.r1.k2048.g128.c1.kw2.cg4.none');
  assert.deepEqual(a!.config.grid, [2048 / 4, 1]);
  assert.equal(a!.config.block, 256);
  assert.equal(b!.key, 'int4_gemv.bf16.r4.k8192.g64.c4.kw8.cg1.none');
  assert.deepEqual(b!.config.grid, [2048 / 4, 1]);
  assert.equal(c!.key, 'int4_gemv.f16.r8.k5120.g32.c4.kw5.cg1.none');
  assert.equal(c!.config.block, 160);
  assert.equal(argValue(c!, 6, 'i32'), 8);
  assert.equal(argValue(c!, 7, 'i32'), 11008);
});

test('1–32 rows of 16-bit x in groups of a multiple of 128 take the tensor-core GEMV; others keep their kernels', () => {
  const first = (args: Parameters<typeof q4.int4Linear>[1]) => {
    const host = new RecordingHost();
    q4.int4Linear(host, args);
    return host.launches[0]!;
  };
  const g = first({ ...int4Args(32, 2048, 2 * 8192, 256), out: deviceTensor([32, 8192], 'bf16'), gated: true, activation: 'silu' });
  const [one, gated, above, g64, f32] = [first(int4Args(1, 2048, 3072, 128)), g, first(int4Args(33, 2048, 3072, 128)),
    first(int4Args(4, 2048, 3072, 64, 'f16')), first(int4Args(4, 2048, 3072, 128, 'f32'))].map((l) => l.key);
  assert.match(one!, /^int4_gemv_mma\.bf16\.nt1\.k2048\.g128\./);
  assert.match(gated!, /^int4_gemv_mma\.bf16\.nt4\.k2048\.g256\..*\.silu\.gated$/);
  assert.match(above!, /^int4_gemm\./);
  assert.match(g64!, /^int4_gemv\.f16\./);
  assert.match(f32!, /^int4_gemv\.f32\./);
  // The launch: x, qweight, scales, zeros, bias, out, M, width (F when gated).
  assert.equal(argValue(g, 6, 'i32'), 32);
  assert.equal(argValue(g, 7, 'i32'), 8192);
  assert.throws(() => q4.int4Linear(new RecordingHost(), int4Args(4, 2048, 3072, 64), 'mma'), /int4Linear: the mma GEMV takes 1–32 rows of f16\/bf16 x in groups of a multiple of 128/);
});

test('prefill shapes take the tensor-core kernel; small grids split K and finish in a second pass', () => {
  const host = new RecordingHost();
  q4.int4Linear(host, { ...int4Args(256, 5120, 11008, 128), bias: deviceTensor([11008], 'bf16'), activation: 'gelu_tanh' });
  const [big] = host.launches;
  assert.equal(big!.key, 'int4_gemm.bf16.k5120.g128.m128.n128.bias.gelu_tanh');
  assert.deepEqual(big!.config.grid, [86, 2, 1]);
  assert.equal(big!.config.sharedBytes, 2 * (128 + 128) * 64 * 2);

  const split = new RecordingHost();
  q4.int4Linear(split, { ...int4Args(32, 2048, 2048, 128), bias: deviceTensor([2048], 'bf16'), activation: 'silu' }, 'auto', false);
  const [partials, finish] = split.launches;
  assert.equal(partials!.key, 'int4_gemm.bf16.k2048.g128.m32.n64.partials');
  assert.deepEqual(partials!.config.grid, [32, 1, 8]);
  assert.deepEqual(split.scratchRequests, [8 * 32 * 2048 * 4]);
  assert.equal(argValue(partials!, 6, 'ptr'), RecordingHost.SCRATCH);
  assert.equal(finish!.key, 'int4_split_finish.bf16.bias.silu');
  assert.equal(argValue(finish!, 5, 'i32'), 8);

  // f32 activations always take the GEMV, also for many rows (row chunks of 8 on grid y).
  const f32 = new RecordingHost();
  q4.int4Linear(f32, int4Args(20, 1024, 1000, 32, 'f32'));
  assert.match(f32.launches[0]!.key, /^int4_gemv\.f32\.r8\./);
  assert.equal((f32.launches[0]!.config.grid as readonly number[])[1], 3);
});

test('the tile planner shrinks tiles before splitting K, and splits only with 4+ steps per slice', () => {
  const plan = (M: number, N: number, K: number) => q4.planInt4Gemm('bf16', M, N, K, 128, false, 'none', 132);
  assert.deepEqual([plan(4096, 4096, 4096).spec.bm, plan(4096, 4096, 4096).spec.bn, plan(4096, 4096, 4096).slices], [128, 128, 1]);
  assert.deepEqual([plan(17, 11008, 4096).spec.bm, plan(17, 11008, 4096).spec.bn, plan(17, 11008, 4096).slices], [32, 64, 1]);
  assert.equal(plan(16, 256, 256).slices, 1);
  assert.equal(plan(16, 256, 1024).slices, 4);
});

test('the int8 GEMM is cuBLASLt TN: A = our weight [N, K] transposed, B = our activations, D = out', () => {
  const p = planInt8Gemm(17, 11008, 4096);
  assert.deepEqual([p.m, p.n, p.k, p.opA, p.opB], [11008, 17, 4096, CublasOperation.T, CublasOperation.N]);
  assert.deepEqual(p.layoutA, { rows: 4096, cols: 11008, ld: 4096, batchStride: 0 });
  assert.deepEqual(p.layoutB, { rows: 4096, cols: 17, ld: 4096, batchStride: 0 });
  assert.deepEqual(p.layoutD, { rows: 11008, cols: 17, ld: 11008, batchStride: 0 });
});

test('the W8A8 kernels: a block per row with 16-byte vectors (narrower when misaligned), 4 columns per thread', () => {
  const host = new RecordingHost();
  q8.int8QuantizeRows(host, { x: deviceTensor([17, 4096], 'bf16'), out: deviceTensor([17, 4096], 'i8'), scales: deviceTensor([17], 'f32') });
  q8.int8QuantizeRows(host, { x: deviceTensor([3, 771], 'f16'), out: deviceTensor([3, 771], 'i8'), scales: deviceTensor([3], 'f32') });
  q8.int8Dequantize(host, { acc: deviceTensor([70000, 2048], 'i32'), rowScales: deviceTensor([70000], 'f32'), colScales: deviceTensor([2048], 'f32'), out: deviceTensor([70000, 2048], 'bf16') });
  const [rows, narrow, dequant] = host.launches;
  assert.equal(rows!.key, 'int8_quantize_rows.bf16.k4096.v8');
  assert.equal(rows!.config.grid, 17);
  assert.equal(narrow!.key, 'int8_quantize_rows.f16.k771.v1');
  assert.equal(dequant!.key, 'int8_dequantize.bf16.none');
  assert.deepEqual(dequant!.config.grid, [2, 65535]);
});

test('GPU-only limits are refused naming the op', () => {
  const host = new RecordingHost();
  const rejects = (fn: () => void, pattern: RegExp) => assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  rejects(() => q4.int4Linear(host, int4Args(1, 256, 64, 32, 'bf16', 0x4000_0008n)), /^int4Linear: 'x' and 'qweight' must be 16-byte aligned/);
  rejects(() => q4.int4Linear(host, int4Args(1, 256, 64, 32, 'f32', 0x4000_0010n)), /^int4Linear: f32 'x' must be 32-byte aligned/);
  rejects(() => q8.int8Dequantize(host, { acc: deviceTensor([2, 6], 'i32'), rowScales: deviceTensor([2], 'f32'), colScales: deviceTensor([6], 'f32'), out: deviceTensor([2, 6], 'bf16') }), /^int8Dequantize: N = 6 must be a multiple of 4/);
  assert.equal(host.launches.length, 0);
});

test('catalog kernels have unique names', () => {
  const names = [...q4.catalog(), ...q8.catalog()].map((k) => k.name);
  assert.equal(new Set(names).size, names.length);
});

test('the W8A8 GEMV: 1–4 rows, K a multiple of 16 within its shared memory, aligned x and weights; launched with the output width', async () => {
  const { int8GemvApplies, int8GemvKey, launchInt8Gemv, planInt8Gemv } = await import('../../../../src/backend/cuda/kernels/gemv-int8.js');
  const base = { dtype: 'bf16' as const, M: 1, N: 2 * 8192, K: 2048, gated: true, activation: 'silu' as const, x: 256n, qweight: 512n, scales: 1024n, bias: 0n, out: 2048n };
  assert.ok(int8GemvApplies(base));
  assert.ok(!int8GemvApplies({ ...base, M: 5 }), 'five rows go to the three ops');
  assert.ok(!int8GemvApplies({ ...base, K: 1000 }), 'K not a multiple of 16');
  assert.ok(!int8GemvApplies({ ...base, M: 4, K: 16384 }), 'M·K over the shared-memory budget');
  assert.ok(!int8GemvApplies({ ...base, x: 258n }), 'x not 16-byte aligned');
  const host = new RecordingHost();
  launchInt8Gemv(host, base);
  const [l] = host.launches;
  const plan = planInt8Gemv('bf16', 1, 8192, 2048, false, 'silu', true, 132);
  assert.equal(l!.key, int8GemvKey(plan.spec));
  assert.match(l!.key, new RegExp(`^int8_gemv\\.bf16\\.m1\\.k2048\\.r${plan.spec.columns}\\.kw${plan.spec.kWarps}\\.silu\\.gated`));
  assert.equal(l!.config.grid, plan.grid);
  assert.equal(argValue(l!, 5, 'i32'), 8192);
  // Every plan covers the output: CG = 8 / KW warps of R columns a block, one tile a block or (a looping
  // plan) at most one block a tile.
  for (const [M, N, K] of [[1, 3072, 2048], [4, 128256, 2048], [3, 131, 112], [2, 2048, 8192]] as const) {
    const p = planInt8Gemv('f16', M, N, K, true, 'none', false, 132);
    const tiles = Math.ceil(N / ((8 / p.spec.kWarps) * p.spec.columns));
    assert.ok(p.spec.loop ? p.grid <= tiles : p.grid === tiles, `${M}×${N}×${K}: grid ${p.grid} covers N's ${tiles} tiles`);
  }
});

test('the looping W8A8 GEMV (FUSEFORMER_GEMV_LOOP family int8): grids of two rounds or more loop over their tiles; the wait, prologue and quantization once a block; on by default', async () => {
  const i8 = await import('../../../../src/backend/cuda/kernels/gemv-int8.js');
  const { gemvPlanOptions, GEMV_LOOP_DEFAULT } = await import('../../../../src/backend/cuda/kernels/gemv.js');
  assert.ok(GEMV_LOOP_DEFAULT.includes('int8'), 'on by default (session 37: Llama INT8 b4 0.994 -> 0.884 ms/token)');
  const rms = { kind: 'rms', residual: true, bias: false } as const;
  const saved = gemvPlanOptions.loop;
  try {
    gemvPlanOptions.loop = new Set(['int8']);
    const gated = i8.planInt8Gemv('bf16', 1, 8192, 2048, false, 'silu', true, 132, rms);
    assert.deepEqual([gated.spec.loop, gated.grid], [true, 264], "Llama's gated product: 1024 tiles on 264 blocks");
    assert.match(i8.int8GemvKey(gated.spec), /\.loop$/);
    assert.equal(i8.planInt8Gemv('bf16', 1, 3072, 2048, false, 'none', false, 132, rms).spec.loop, undefined, 'QKV (192 blocks) keeps one tile a block');
    const layer = { kind: 'layer', residual: true, bias: true } as const;
    const gpt2Qkv = i8.planInt8Gemv('bf16', 1, 2304, 768, true, 'none', false, 132, layer);
    assert.deepEqual([gpt2Qkv.spec.loop, gpt2Qkv.grid], [undefined, 288], "GPT-2's QKV (288 tiles, under two rounds of 264) keeps one tile a block");
    const head = i8.planInt8Gemv('bf16', 1, 50257, 768, false, 'none', false, 132, layer);
    assert.deepEqual([head.spec.loop, head.grid], [true, 264], "GPT-2's LM head (six rounds) loops");
    const src = i8.int8GemvSource(gated.spec).source;
    const body = src.slice(src.indexOf('extern "C"'));
    assert.equal(body.match(/GRID_DEPENDENCY_WAIT\(\)/g)?.length, 1, 'one wait');
    assert.equal(body.match(/quantize_rows\(/g)?.length, 1, 'x quantized once');
    assert.match(body, /load_weight[\s\S]*GRID_DEPENDENCY_WAIT\(\);\s*normalize_rows[\s\S]*while \(true\) \{/, 'the first loads, the wait and the prologue before the loop');
    assert.match(body, /if \(next < tiles\) \{[\s\S]*load_weight[\s\S]*\} else \{\s*GRID_DEPENDENCY_TRIGGER\(\);\s*\}[\s\S]*warp_sum_int/, "the next tile's loads before this one's reduction; the dependents let go after the last tile");
    assert.doesNotMatch(body, /return;/, 'no early exit inside the loop');
    assert.match(body, /__syncthreads\(\);  \/\/ partial is free for the next tile/);
    const host = new RecordingHost(), before = i8.int8GemvLoopStats.launches;
    i8.launchInt8Gemv(host, { dtype: 'bf16', M: 1, N: 2 * 8192, K: 2048, gated: true, activation: 'silu', x: 256n, qweight: 512n, scales: 1024n, bias: 0n, out: 2048n });
    assert.equal(host.launches[0]!.config.grid, 264);
    assert.equal(i8.int8GemvLoopStats.launches, before + 1, 'counted');
    assert.throws(() => i8.int8GemvGrid(gated.spec, 8192), /a looping spec needs the SM count/);
    gemvPlanOptions.loop = new Set();
    const one = i8.planInt8Gemv('bf16', 1, 8192, 2048, false, 'silu', true, 132, rms);
    assert.deepEqual([one.spec.loop, one.grid], [undefined, 1024]);
  } finally {
    gemvPlanOptions.loop = saved;
  }
});

test('the quantized GEMV planners pick the plans measured fastest at Llama 1.2B\'s decode shapes (session 17 sweeps)', async () => {
  const i4 = await import('../../../../src/backend/cuda/kernels/gemv-int4-mma.js');
  const i8 = await import('../../../../src/backend/cuda/kernels/gemv-int8.js');
  const int4 = (M: number, width: number, K: number, gated = false) =>
    i4.int4MmaGemvKey(i4.planInt4MmaGemv('bf16', M, width, K, 128, false, gated ? 'silu' : 'none', gated, 132).spec);
  // Batch 1: two tiles a warp where two blocks an SM remain; 16-warp blocks for the long-K down product.
  assert.equal(int4(1, 8192, 2048, true), 'int4_gemv_mma.bf16.nt1.k2048.g128.ft2.kw4.u4.silu.gated');
  assert.equal(int4(1, 128256, 2048), 'int4_gemv_mma.bf16.nt1.k2048.g128.ft2.kw1.u4.none');
  assert.equal(int4(1, 2048, 8192), 'int4_gemv_mma.bf16.nt1.k8192.g128.ft1.kw16.u4.w16.none');
  assert.equal(int4(1, 3072, 2048), 'int4_gemv_mma.bf16.nt1.k2048.g128.ft1.kw4.u4.none');
  // 32 rows: one chunk in flight a lane, 16 warps for the down product.
  assert.equal(int4(32, 2048, 2048), 'int4_gemv_mma.bf16.nt4.k2048.g128.ft1.kw8.u1.none');
  assert.equal(int4(32, 2048, 8192), 'int4_gemv_mma.bf16.nt4.k8192.g128.ft1.kw16.u1.w16.none');
  const plan16 = i4.planInt4MmaGemv('bf16', 1, 2048, 8192, 128, false, 'none', false, 132);
  assert.equal(plan16.grid * (i4.int4MmaWarps(plan16.spec) / plan16.spec.kWarps) * 16, 2048, 'one 16-row tile a block, 128 blocks');
  // W8A8: the narrowest R on ties; FUSEFORMER_INT8_NARROW=0's rule the widest.
  const int8 = () => i8.int8GemvKey(i8.planInt8Gemv('bf16', 1, 3072, 2048, false, 'none', false, 132).spec);
  const before = i8.int8GemvOptions.narrow;
  try {
    i8.int8GemvOptions.narrow = true;
    assert.equal(int8(), 'int8_gemv.bf16.m1.k2048.r2.kw1.none');
    i8.int8GemvOptions.narrow = false;
    assert.equal(int8(), 'int8_gemv.bf16.m1.k2048.r4.kw1.none');
  } finally {
    i8.int8GemvOptions.narrow = before;
  }
  // FUSEFORMER_INT8_PLAN (a probe): the (R, KW) of the products an entry selects; a plan outside the space is an error naming it.
  const forcedBefore = i8.int8GemvOptions.forced, rms = { kind: 'rms', residual: true, bias: false } as const;
  try {
    i8.int8GemvOptions.forced = parseForcedGemvPlans('FUSEFORMER_INT8_PLAN', 'k2048.m4.gated=r2.kw1,k8192=r2.kw1');
    const gated = (M: number) => i8.planInt8Gemv('bf16', M, 8192, 2048, false, 'silu', true, 132, rms);
    assert.deepEqual([gated(4).spec.columns, gated(4).spec.kWarps, gated(4).grid], [2, 1, 512], 'gated at 4 rows: forced');
    i8.int8GemvOptions.forced = [];
    const planned = gated(1);
    i8.int8GemvOptions.forced = parseForcedGemvPlans('FUSEFORMER_INT8_PLAN', 'k2048.m4.gated=r2.kw1,k8192=r2.kw1');
    assert.deepEqual(gated(1), planned, 'gated at 1 row: no entry selects it');
    assert.equal(i8.planInt8Gemv('bf16', 1, 2048, 8192, false, 'none', false, 132).grid, 128, 'down: r2.kw1, 128 blocks');
    i8.int8GemvOptions.forced = parseForcedGemvPlans('FUSEFORMER_INT8_PLAN', 'k2048.gated=r1.kw8');
    assert.throws(() => gated(1), /FUSEFORMER_INT8_PLAN: r1.kw8 is not a plan of the W8A8 GEMV for 1 rows of K 2048 \(gated\)/);
    assert.throws(() => parseForcedGemvPlans('FUSEFORMER_INT8_PLAN', 'gate=r2'), /FUSEFORMER_INT8_PLAN: 'gate=r2' is not SELECTOR=rR.kwW/);
  } finally {
    i8.int8GemvOptions.forced = forcedBefore;
  }
});

test('the decode GEMVs\' plan spaces (bench/gemv-sweep.ts) hold each planner\'s pick, and every plan covers the output', async () => {
  const i4 = await import('../../../../src/backend/cuda/kernels/gemv-int4-mma.js');
  const i8 = await import('../../../../src/backend/cuda/kernels/gemv-int8.js');
  for (const [M, width, K, gated] of [[1, 3072, 2048, false], [1, 8192, 2048, true], [1, 2048, 8192, false], [1, 128256, 2048, false], [32, 3072, 2048, false], [20, 1000, 1024, true]] as const) {
    const act = gated ? 'silu' as const : 'none' as const;
    const space4 = i4.int4MmaGemvSpace('bf16', M, K, 128, false, act, gated).map(i4.int4MmaGemvKey);
    const plan4 = i4.planInt4MmaGemv('bf16', M, width, K, 128, false, act, gated, 132);
    assert.ok(space4.includes(i4.int4MmaGemvKey(plan4.spec)), `int4 ${M}×${width}×${K}: the planner's pick is in the space`);
    for (const spec of i4.int4MmaGemvSpace('bf16', M, K, 128, false, act, gated)) {
      assert.ok(i4.int4MmaGemvGrid(spec, width) * (i4.int4MmaWarps(spec) / spec.kWarps) * spec.tiles * (gated ? 8 : 16) >= width);
    }
    if (M > i8.INT8_GEMV_MAX_ROWS) continue;
    const plan8 = i8.planInt8Gemv('bf16', M, width, K, false, act, gated, 132);
    const oneTile = { ...plan8.spec, loop: undefined }; // the space holds the one-tile forms; a looping pick is one of them, looped
    assert.ok(i8.int8GemvSpace('bf16', M, K, false, act, gated).map(i8.int8GemvKey).includes(i8.int8GemvKey(oneTile)), `int8 ${M}×${width}×${K}: the planner's pick is in the space`);
  }
});

// normLinear of an int4Linear on CUDA (kernels/quant-int4.ts int4NormLinear): which calls take the GEMV
// with the norm in its prologue, and what it is launched with. The numbers are checked on the GPU
// (test/gpu/quant.test.ts); here, the rules: 'auto' only for norms of ≤ 2048 values (measured faster at
// GPT-2's 768 and Llama's 2048; wider unmeasured), true at any width, false never; 1–4 rows of 16-bit x, groups of 128.
test('the INT4 GEMV takes a normLinear\'s norm into its prologue by the mode\'s width rule, for 1–4 rows of 16-bit x in groups of 128', async () => {
  const { checkResidualNorm } = await import('../../../../src/backend/op-checks/index.js');
  const { OpCheck } = await import('../../../../src/backend/validate.js');
  const attempt = (M: number, H: number, N: number, G: number, mode: boolean | 'auto', dtype: 'bf16' | 'f16' | 'f32' = 'bf16') => {
    const host = new RecordingHost(), c = new OpCheck('normLinear', 'cuda');
    const norm = checkResidualNorm(c, {
      x: deviceTensor([M, H], dtype), y: deviceTensor([M, H], dtype), norm: 'rms', gamma: deviceTensor([H], dtype), out: deviceTensor([M, H], dtype), eps: 1e-5,
    });
    const args = { ...int4Args(M, H, N, G, dtype), x: norm.out };
    const launched = q4.int4NormLinear(host, c, norm, args, mode);
    assert.equal(host.launches.length, launched ? 1 : 0);
    return host.launches[0];
  };
  const gpt2 = attempt(1, 768, 2304, 128, 'auto');
  assert.match(gpt2!.key, /^int4_gemv_mma\.bf16\.nt1\.k768\.g128\..*\.norm_rms_m1_res_pre_we$/, 'INT4\'s default write: early');
  // x (unused: the rows come from the prologue), qweight, scales, zeros, bias, out, M, N, then rx, y, rbias, gamma, beta, h, eps, counter.
  assert.equal(argValue(gpt2!, 0, 'ptr'), 0n);
  assert.equal(argValue(gpt2!, 6, 'i32'), 1);
  assert.equal(argValue(gpt2!, 7, 'i32'), 2304);
  assert.equal(gpt2!.args.length, 16);
  assert.match(attempt(1, 2048, 3072, 128, 'auto')!.key, /\.k2048\..*\.norm_rms_m1_res_pre_we$/, "'auto' takes Llama's 2048-wide norms");
  assert.equal(attempt(1, 4096, 4096, 128, 'auto'), undefined, "'auto' leaves a 4096-wide norm (unmeasured) to residualNorm");
  assert.match(attempt(1, 4096, 4096, 128, true)!.key, /\.norm_rms_m1_res_pre_we$/, 'true takes it at any width that fits');
  assert.match(attempt(4, 2048, 3072, 128, true)!.key, /\.norm_rms_m4_res_pre_we$/);
  assert.equal(attempt(1, 768, 2304, 128, false), undefined);
  assert.equal(attempt(5, 768, 2304, 128, true), undefined, 'five rows');
  assert.equal(attempt(2, 768, 2304, 64, true), undefined, 'groups of 64: the SIMT GEMV');
  assert.equal(attempt(2, 768, 2304, 128, true, 'f32'), undefined, 'f32 x');
});
