// The decode GEMV's routing rule and launch shape, without a GPU: which checked GEMMs it takes (the
// rest stay on cuBLASLt), and the planner's choice of mapping (bytes in flight, balance over the SMs).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { GemvNorm } from '../../../../src/backend/cuda/kernels/gemv.js';
import type { CheckedGemm, GemmProblem } from '../../../../src/backend/cuda/gemm-plan.js';
import { gemvApplies, gemvGrid, gemvKey, GEMV_LOOP_DEFAULT, gemvLoopFromEnv, forcedGemvPlansFromEnv, GEMV_PLAN_DEFAULT, normOnePassFromEnv, normOnePassOption, prologueNorm, gemvSource, gemvSpace, gemvWeightFamily, launchGemv, launchNormGemv, gemvPlanOptions, normGemvApplies, normOneWaveFromEnv, normPreloadOption, normPrologueOptions, normWriteFromEnv, planGemv } from '../../../../src/backend/cuda/kernels/gemv.js';
import { argValue, checkedGemm, commonGemmRefusals, deviceTensor, RecordingHost } from './launch-helpers.js';
import type { CompiledKernel, KernelArg, KernelHost, LaunchConfig } from '../../../../src/backend/cuda/runtime/kernel.js';

const checked = (problem: Partial<GemmProblem>, extra: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean } = {}) => checkedGemm({}, problem, extra);

test('gemvApplies: few rows against [N, K] weights with a forward epilogue; everything else stays on cuBLASLt', () => {
  assert.ok(gemvApplies(checked({})));
  assert.ok(gemvApplies(checked({ M: 4, K: 8192, epilogue: 'gelu_bias' }, { bias: true })));
  assert.ok(gemvApplies(checked({ dtype: 'f32', M: 3, K: 100, epilogue: 'relu_bias' }, { bias: true })));
  for (const [why, g] of [
    ['5 rows', checked({ M: 5 })],
    ['an untransposed weight', checked({ transB: false })],
    ['a transposed a', checked({ transA: true })],
    ['K not a multiple of 8 (bf16)', checked({ K: 2044 })],
    ['alpha 0.5', checked({}, { alpha: 0.5 })],
    ['a 2-byte misaligned a', checked({}, { aPtr: 0x1002n })],
    ...commonGemmRefusals(checked),
  ] as const) assert.equal(gemvApplies(g), false, why);
});

test('launchGemv: blocks of 8 warps as planned; the source bakes M and K in, loads weights before waiting for its prerequisites', () => {
  const launches: { key: string; config: LaunchConfig; args: readonly KernelArg[] }[] = [];
  const host: KernelHost = {
    kernel: (key, build) => {
      const src = build();
      assert.equal(src.gridDependencyWait, true);
      assert.match(src.source, /constexpr int M = 3;[\s\S]*constexpr int K = 768;/);
      assert.match(src.source, /load_weight\(rows\[r\] \+ k\)[\s\S]*GRID_DEPENDENCY_WAIT\(\);[\s\S]*load_floats[\s\S]*GRID_DEPENDENCY_TRIGGER\(\);/);
      return { name: src.name, launch: (config, args) => launches.push({ key, config, args }) } satisfies CompiledKernel;
    },
    scratch: () => 0n, counters: () => 0n, multiProcessorCount: 132, maxSharedBytesPerBlock: 227 * 1024,
  };
  launchGemv(host, checked({ M: 3, N: 2305, K: 768, epilogue: 'bias' }, { bias: true }));
  const plan = planGemv('bf16', 3, 2305, 768, 'bias', undefined, 132);
  assert.equal(launches.length, 1);
  assert.equal(launches[0]!.key, `gemv.bf16.m3.k768.r${plan.spec.columns}.kw${plan.spec.kWarps}.bias`);
  assert.deepEqual(launches[0]!.config, { grid: Math.ceil(2305 / ((8 / plan.spec.kWarps) * plan.spec.columns)), block: 256 });
  assert.equal(plan.grid, launches[0]!.config.grid);
  assert.deepEqual(launches[0]!.args.map((a) => a.value), [0x1000n, 0x2000n, 0x4000n, 0x3000n, 2305]);
});

test('planGemv: enough bytes in flight and an even spread over the SMs for the decode shapes', () => {
  // Llama 1.2B's QKV (3072 × 2048) and output projection (2048 × 2048): blocks spread evenly over 132
  // SMs (QKV at two columns a warp would be 192 blocks: 2 on some SMs, 1 on most).
  for (const [N, K] of [[3072, 2048], [2048, 2048]] as const) {
    const { grid } = planGemv('bf16', 1, N, K, 'none', undefined, 132);
    assert.ok(grid / 132 / Math.ceil(grid / 132) >= 0.9, `N ${N} K ${K}: ${grid} blocks`);
  }
  assert.equal(planGemv('bf16', 1, 3072, 2048, 'none', undefined, 132).spec.columns, 1);
  // The down projection (K 8192): a warp's chunks fit its 16 vectors only with K split in two. (The
  // planner's pick; GEMV_PLAN_DEFAULT forces r4.kw4 on it, measured faster in the step.)
  const saved = gemvPlanOptions.forced;
  gemvPlanOptions.forced = [];
  const down = planGemv('bf16', 1, 2048, 8192, 'none', undefined, 132).spec;
  gemvPlanOptions.forced = saved;
  assert.deepEqual([down.columns, down.kWarps], [1, 2]);
  // Gated: a column is two weight rows (gate and up); its 1024 tiles looped over by the 264 resident blocks
  // (GEMV_LOOP_DEFAULT).
  const gated = planGemv('bf16', 1, 8192, 2048, 'none', { activation: 'silu', bias: false }, 132);
  assert.deepEqual([gated.spec.columns, gated.spec.kWarps, gated.spec.loop, gated.grid], [1, 1, true, 264]);
  // Four rows: at most 16 sums a lane, so at most 4 weight rows a warp.
  for (const N of [77, 2048, 50304]) {
    const p = planGemv('f32', 4, N, 132, 'none', { activation: 'relu', bias: true }, 132).spec;
    assert.ok(2 * p.columns * 4 <= 16, `N ${N}: ${JSON.stringify(p)}`);
  }
  // K below one chunk (f32, K 100: 25 vectors): no K split.
  assert.equal(planGemv('f32', 1, 512, 100, 'none', undefined, 132).spec.kWarps, 1);
  assert.match(gemvSource(planGemv('f32', 1, 512, 100, 'none', undefined, 132).spec).source, /constexpr int CHUNKS = 1;/);
});

test('launchNormGemv: the norm prologue in the key, the residual stream, norm weights, h, eps and a zeroed counter after the GEMV arguments', () => {
  const host = new RecordingHost();
  const t = (shape: number[]) => deviceTensor(shape, 'bf16');
  const norm = { x: t([2, 2048]), y: t([2, 2048]), gamma: t([2048]), out: t([2, 2048]), norm: 'rms' as const, eps: 1e-5, rows: 2, H: 2048 };
  assert.ok(normGemvApplies(norm));
  assert.equal(normGemvApplies({ ...norm, rows: 5 }), false, 'more rows than the GEMV takes');
  assert.equal(normGemvApplies({ ...norm, H: 8192, rows: 4 }), false, '4 × 8192 bf16 activations pass the shared-memory budget');
  const withPreload = <R>(value: string | undefined, f: () => R): R => {
    const saved = process.env['FUSEFORMER_NORM_GEMV_PRELOAD'];
    if (value === undefined) delete process.env['FUSEFORMER_NORM_GEMV_PRELOAD']; else process.env['FUSEFORMER_NORM_GEMV_PRELOAD'] = value;
    try { return f(); } finally { if (saved === undefined) delete process.env['FUSEFORMER_NORM_GEMV_PRELOAD']; else process.env['FUSEFORMER_NORM_GEMV_PRELOAD'] = saved; }
  };
  withPreload('0', () => launchNormGemv(host, norm, { kind: 'gemm', checked: checked({ M: 2, N: 3072, K: 2048 }) }));
  const launch = host.launches[0]!;
  assert.match(launch.key, /^gemv\.bf16\.m2\.k2048\..*\.none\.norm_rms_res$/);
  assert.equal(launch.args.length, 13);
  assert.equal(argValue(launch, 0, 'ptr'), 0n, 'a is not read: the activations are formed in shared memory');
  assert.deepEqual([argValue(launch, 5, 'ptr'), argValue(launch, 6, 'ptr'), argValue(launch, 10, 'ptr')], [norm.x.ptr, norm.y.ptr, norm.out.ptr]);
  assert.equal(argValue(launch, 12, 'ptr'), RecordingHost.COUNTERS);
  assert.deepEqual(host.counterRequests, [1]);
  assert.match(launch.source, /normalize_rows\(x, y, rbias, gamma, beta, eps, act_s, pre, h, counter, &last_block\);[\s\S]*else if \(!EARLY && threadIdx\.x == 0\) last_block = atomicAdd\(counter, 1u\)[\s\S]*if constexpr \(!EARLY\)[\s\S]*write_rows/);
  assert.match(launch.source, /PRELOAD = false/);
  // The default at K 2048 (wider than NORM_PROLOGUE_AUTO_MAX_K): gamma and beta loaded at the
  // kernel's start, before the first weight load.
  withPreload(undefined, () => launchNormGemv(host, norm, { kind: 'gemm', checked: checked({ M: 2, N: 3072, K: 2048 }) }));
  const preloaded = host.launches[1]!;
  assert.match(preloaded.key, /\.norm_rms_res_pre$/);
  assert.match(preloaded.source, /PRELOAD = true/);
  assert.match(preloaded.source, /load_norm_weights\(pre, gamma, beta\);[\s\S]*load_weight\(/);
  // At K 768 the bf16 prologue does not preload by default; FUSEFORMER_NORM_GEMV_PRELOAD=1 forces it.
  const narrow = { ...norm, x: t([1, 768]), y: t([1, 768]), gamma: t([768]), out: t([1, 768]), rows: 1, H: 768 };
  withPreload(undefined, () => launchNormGemv(host, narrow, { kind: 'gemm', checked: checked({ M: 1, N: 2304, K: 768 }) }));
  assert.match(host.launches[2]!.key, /\.norm_rms_res$/);
  withPreload('1', () => launchNormGemv(host, narrow, { kind: 'gemm', checked: checked({ M: 1, N: 2304, K: 768 }) }));
  assert.match(host.launches[3]!.key, /\.norm_rms_res_pre$/);
  assert.throws(() => withPreload('yes', () => launchNormGemv(host, narrow, { kind: 'gemm', checked: checked({ M: 1, N: 2304, K: 768 }) })), /FUSEFORMER_NORM_GEMV_PRELOAD must be 0 or 1, got 'yes'/);
});

test('FUSEFORMER_NORM_WRITE: late (bf16\'s default) waits for the block\'s count at once, deferred after the main loop, early counts at the first reduction and writes x and h before the main loop', () => {
  const host = new RecordingHost();
  const t = (shape: number[]) => deviceTensor(shape, 'bf16');
  const norm = { x: t([1, 768]), y: t([1, 768]), bias: t([768]), gamma: t([768]), beta: t([768]), out: t([1, 768]), norm: 'layer' as const, eps: 1e-5, rows: 1, H: 768 };
  const launchWith = (write: 'late' | 'deferred' | 'early' | undefined) => {
    const saved = normPrologueOptions.write;
    try {
      normPrologueOptions.write = write;
      launchNormGemv(host, norm, { kind: 'gemm', checked: checked({ M: 1, N: 2304, K: 768 }) });
    } finally {
      normPrologueOptions.write = saved;
    }
    return host.launches.at(-1)!;
  };
  const late = launchWith('late'), deferred = launchWith('deferred'), early = launchWith('early');
  assert.equal(launchWith(undefined).key, late.key, 'unforced, the bf16 GEMV takes its default: late');
  assert.match(late.key, /\.norm_layer_res_bias_1p$/);
  assert.match(late.source, /constexpr bool EARLY = false && M \* NV <= 2, DEFERRED = !EARLY && false;/);
  assert.match(deferred.key, /\.norm_layer_res_bias_wd_1p$/);
  assert.match(deferred.source, /DEFERRED = !EARLY && true;/);
  assert.match(deferred.source, /if \(DEFERRED && threadIdx\.x == 0\) norm_ticket = atomicAdd\(counter, 1u\);[\s\S]*if \(DEFERRED && threadIdx\.x == 0\) last_block = norm_ticket == gridDim\.x - 1;\n\s+__syncthreads\(\);\n\s+if \(last_block\)/);
  assert.match(early.key, /\.norm_layer_res_bias_we_1p$/);
  const source = early.source;
  assert.match(source, /constexpr bool EARLY = true && M \* NV <= 2/);
  // The count right after the first block reduction (x read by every thread), read at the prologue's end; the writes before the main loop.
  assert.match(source, /block_sums\(sum, red\);\n\s+\}\n[^\n]*\n\s+unsigned int ticket = 0u;\n\s+if \(EARLY && threadIdx\.x == 0\) ticket = atomicAdd\(counter, 1u\);/);
  assert.match(source, /\*last = ticket == gridDim\.x - 1;\n\s+if \(\*last\) \*counter = 0u;/);
  assert.match(source, /if \(\*last\) \{[\s\S]*store_vec<T, VEC>\(x \+ \(size_t\)m \* K \+ k, kept\[m\]\[j\]\);[\s\S]*store_vec<T, VEC>\(h \+ \(size_t\)m \* K \+ k, load_vec<T, VEC>\(act/);
  assert.match(source, /normalize_rows\([^)]*&last_block\);[\s\S]*load_floats<T, VEC>\(act_s \+/, 'the writes come before the main loop\'s reads of act_s');
  assert.equal(early.args.length, 13, 'the same arguments');
  assert.equal(normWriteFromEnv({}), undefined, 'unset: each family\'s default');
  assert.equal(normWriteFromEnv({ FUSEFORMER_NORM_WRITE: 'early' }), 'early');
  assert.throws(() => normWriteFromEnv({ FUSEFORMER_NORM_WRITE: '1' }), /FUSEFORMER_NORM_WRITE must be late, deferred or early, got '1'/);
});

test('normPreloadOption: each family\'s default write (INT4 early, W8A8 deferred, bf16 late) unless FUSEFORMER_NORM_WRITE forces one; the preload setting keeps the write option', () => {
  const saved = normPrologueOptions.write, savedPreload = process.env['FUSEFORMER_NORM_GEMV_PRELOAD'];
  try {
    normPrologueOptions.write = undefined;
    delete process.env['FUSEFORMER_NORM_GEMV_PRELOAD'];
    assert.deepEqual(normPreloadOption('int4', 2048), { preload: true, write: 'early' });
    assert.deepEqual(normPreloadOption('int8', 768), { preload: true, write: 'deferred' });
    assert.deepEqual(normPreloadOption('bf16', 768), {});
    assert.deepEqual(normPreloadOption('bf16', 2048), { preload: true });
    normPrologueOptions.write = 'late';
    assert.deepEqual(normPreloadOption('int4', 2048), { preload: true });
    normPrologueOptions.write = 'early';
    assert.deepEqual(normPreloadOption('bf16', 768), { write: 'early' });
    normPrologueOptions.write = undefined;
    process.env['FUSEFORMER_NORM_GEMV_PRELOAD'] = '0';
    assert.deepEqual(normPreloadOption('int4', 2048), { write: 'early' }, 'preload off keeps the write');
    process.env['FUSEFORMER_NORM_GEMV_PRELOAD'] = '1';
    assert.deepEqual(normPreloadOption('int8', 768), { preload: true, write: 'deferred' });
    process.env['FUSEFORMER_NORM_GEMV_PRELOAD'] = 'on';
    assert.throws(() => normPreloadOption('bf16', 768), /FUSEFORMER_NORM_GEMV_PRELOAD must be 0 or 1, got 'on'/);
  } finally {
    normPrologueOptions.write = saved;
    if (savedPreload === undefined) delete process.env['FUSEFORMER_NORM_GEMV_PRELOAD'];
    else process.env['FUSEFORMER_NORM_GEMV_PRELOAD'] = savedPreload;
  }
});

test('gemvPlanOptions.normOneWave (the default; FUSEFORMER_NORM_GEMV_ONE_WAVE=0 turns it off): a norm GEMV\'s grid within the resident blocks where a plan fits; others and plain GEMVs keep their plan', () => {
  const layer = { kind: 'layer' as const, residual: true, bias: true }, rms = { kind: 'rms' as const, residual: true, bias: false };
  const saved = gemvPlanOptions.normOneWave, savedLoop = gemvPlanOptions.loop;
  try {
    gemvPlanOptions.loop = new Set(); // the one-tile-a-block form: its grid is the plan's
    gemvPlanOptions.normOneWave = false;
    assert.equal(planGemv('bf16', 1, 2304, 768, 'none', undefined, 132, layer).grid, 288, 'off: 24 blocks past the 264 resident');
    gemvPlanOptions.normOneWave = true;
    for (const [N, K, norm] of [[2304, 768, layer], [3072, 2048, rms], [3072, 768, layer]] as const) {
      const plan = planGemv('bf16', 1, N, K, 'none', undefined, 132, norm);
      assert.ok(plan.grid <= 264, `N ${N}: ${plan.grid} blocks`);
      assert.equal(plan.grid * (8 / plan.spec.kWarps) * plan.spec.columns >= N, true, 'the blocks cover N');
    }
    assert.equal(planGemv('bf16', 1, 8192, 2048, 'none', { activation: 'silu', bias: false }, 132, rms).grid, 1024, 'no gated plan fits one wave: the best overall');
    assert.equal(planGemv('bf16', 1, 2304, 768, 'none', undefined, 132).grid, planGemv('bf16', 1, 2304, 768, 'none', undefined, 132).grid, 'a plain GEMV is unchanged');
    gemvPlanOptions.normOneWave = false;
    const plain = planGemv('bf16', 1, 2304, 768, 'none', undefined, 132);
    gemvPlanOptions.normOneWave = true;
    assert.deepEqual(planGemv('bf16', 1, 2304, 768, 'none', undefined, 132), plain);
    assert.equal(normOneWaveFromEnv({}), true);
    assert.equal(normOneWaveFromEnv({ FUSEFORMER_NORM_GEMV_ONE_WAVE: '0' }), false);
    assert.throws(() => normOneWaveFromEnv({ FUSEFORMER_NORM_GEMV_ONE_WAVE: 'no' }), /FUSEFORMER_NORM_GEMV_ONE_WAVE must be 0 or 1, got 'no'/);
  } finally {
    gemvPlanOptions.normOneWave = saved;
    gemvPlanOptions.loop = savedLoop;
  }
});

test('the GEMVs\' weight-load families: plain, norm at K ≤ 1024, wide norm, gated; by default the plain and narrow-norm GEMVs load their weights coherently, the others by the read-only path', () => {
  const layer = { kind: 'layer', residual: true, bias: true } as const, rms = { kind: 'rms', residual: true, bias: false } as const;
  const gated = { activation: 'silu', bias: false } as const;
  const spec = (N: number, K: number, gate?: typeof gated, norm?: typeof layer | typeof rms) => planGemv('bf16', 1, N, K, 'none', gate, 132, norm).spec;
  const cases: [ReturnType<typeof spec>, string, boolean][] = [
    [spec(768, 3072), 'gemv', true], [spec(2304, 768, undefined, layer), 'norm-gemv', true],
    [spec(3072, 2048, undefined, rms), 'wide-norm-gemv', false], [spec(8192, 2048, gated, rms), 'gated-gemv', false], [spec(8192, 2048, gated), 'gated-gemv', false],
  ];
  for (const [s, family, coherent] of cases) {
    assert.equal(gemvWeightFamily(s), family);
    const source = gemvSource(s).source;
    assert.match(source, coherent ? /"ld\.global\.L1::no_allocate\.v4\.u32/ : /"ld\.global\.nc\.L1::no_allocate\.v4\.u32/, `${family}: ${coherent ? 'coherent' : 'read-only'} weight loads`);
  }
});

test('gemvSpace: the plans planGemv picks among (R 1/2/4, gated 1/2; KW 1–8 with a chunk each; ≤ 16 sums a lane), its pick among them with gemvGrid\'s blocks', () => {
  const gate = { activation: 'silu', bias: false } as const;
  const plain = gemvSpace('bf16', 1, 2048, 'none', undefined), gated = gemvSpace('bf16', 1, 2048, 'none', gate);
  assert.equal(plain.length, 12, '3 widths × 4 K-splits at K 2048 (8 chunks)');
  assert.deepEqual([...new Set(gated.map((s) => s.columns))], [1, 2]);
  assert.deepEqual(gemvSpace('bf16', 1, 256, 'none', undefined).map((s) => s.kWarps), [1, 1, 1], 'one chunk: no K-split');
  assert.ok(gemvSpace('bf16', 8, 2048, 'none', gate).every((s) => 2 * s.columns * 8 <= 16), '8 rows: at most 16 sums a lane');
  for (const [space, N, g] of [[plain, 3072, undefined], [gated, 8192, gate]] as const) {
    const plan = planGemv('bf16', 1, N, 2048, 'none', g, 132), { loop, ...spec } = plan.spec;
    assert.ok(space.some((s) => gemvKey(s) === gemvKey(spec)), 'the pick is in the space');
    assert.equal(plan.grid, loop ? Math.min(264, gemvGrid(spec, N)) : gemvGrid(spec, N), loop ? 'looped: at most the resident blocks' : 'one tile a block');
  }
  assert.equal(planGemv('bf16', 1, 8192, 2048, 'none', gate, 132).spec.loop, true, 'the gated GEMV loops by default');
});

test('FUSEFORMER_GEMV_LOOP: a family on takes the looping form — grids past the resident blocks as that many blocks looping over the tiles, smaller ones one tile a block (one wait, one trigger, the next tile loaded before the reduction)', () => {
  assert.deepEqual([...gemvLoopFromEnv({})], [...GEMV_LOOP_DEFAULT]);
  assert.deepEqual([...GEMV_LOOP_DEFAULT], ['gated-gemv', 'int8'], 'the gated GEMV (session 33) and the W8A8 GEMV (session 37) loop by default');
  assert.deepEqual([...gemvLoopFromEnv({ FUSEFORMER_GEMV_LOOP: '0' })], []);
  assert.deepEqual([...gemvLoopFromEnv({ FUSEFORMER_GEMV_LOOP: 'gated-gemv,gemv' })], ['gated-gemv', 'gemv']);
  assert.throws(() => gemvLoopFromEnv({ FUSEFORMER_GEMV_LOOP: 'on' }), /FUSEFORMER_GEMV_LOOP must be 0, 1 or a comma list of gemv, .*'on' is none of them/);
  const gate = { activation: 'silu', bias: false } as const, rms = { kind: 'rms', residual: true, bias: false } as const;
  const saved = gemvPlanOptions.loop;
  try {
    gemvPlanOptions.loop = new Set();
    const plain = planGemv('bf16', 1, 8192, 2048, 'none', gate, 132, rms);
    assert.ok(plain.grid > 264 && plain.spec.loop === undefined, `Llama's gated product: ${plain.grid} blocks, no loop with the form off`);
    gemvPlanOptions.loop = new Set(['wide-norm-gemv']);
    assert.equal(planGemv('bf16', 1, 8192, 2048, 'none', gate, 132, rms).spec.loop, undefined, 'another family');
    gemvPlanOptions.loop = new Set(['gated-gemv']);
    const looped = planGemv('bf16', 1, 8192, 2048, 'none', gate, 132, rms);
    assert.deepEqual(looped, { spec: { ...plain.spec, loop: true }, grid: 264 }, 'the same plan, at the resident blocks');
    assert.match(gemvKey(looped.spec), /\.loop$/);
    gemvPlanOptions.loop = new Set(['norm-gemv', 'gemv']);
    const layer = { kind: 'layer', residual: true, bias: true } as const;
    const qkv = planGemv('bf16', 1, 2304, 768, 'none', undefined, 132, layer);
    gemvPlanOptions.loop = new Set();
    const base = planGemv('bf16', 1, 2304, 768, 'none', undefined, 132, layer);
    assert.ok(base.grid <= 264);
    assert.deepEqual(qkv, { spec: { ...base.spec, loop: true }, grid: base.grid }, 'GPT-2\'s QKV fits the resident blocks: its plan and grid, one tile a block');
    gemvPlanOptions.loop = new Set(['norm-gemv', 'gemv']);
    const head = planGemv('bf16', 1, 50257, 768, 'none', undefined, 132);
    assert.equal(head.spec.loop, true);
    assert.equal(head.grid, 264);
    const source = gemvSource(head.spec).source, body = source.slice(source.indexOf('extern "C"'));
    assert.equal(body.match(/GRID_DEPENDENCY_WAIT\(\);/g)?.length, 1, 'one wait');
    assert.equal(body.match(/GRID_DEPENDENCY_TRIGGER\(\);/g)?.length, 1, 'one trigger');
    assert.match(body, /while \(true\) \{[\s\S]*if \(next < tiles\) \{\s*tile_rows\(rows, w, N, next, cg\);\s*load_group\(wv, rows, 0, kw, lane\);[\s\S]*warp_sum/, 'the next tile\'s loads before the reduction');
    assert.doesNotMatch(body, /return;/, 'no early exit inside the loop');
  } finally {
    gemvPlanOptions.loop = saved;
  }
});

test('FUSEFORMER_GEMV_PLAN: the plan of the products an entry selects (K, N, rows, gated, norm); the first match applies; a plan outside the space or a bad entry is an error naming it', () => {
  assert.deepEqual(forcedGemvPlansFromEnv({}), GEMV_PLAN_DEFAULT);
  assert.deepEqual(forcedGemvPlansFromEnv({ FUSEFORMER_GEMV_PLAN: '0' }), []);
  assert.deepEqual(forcedGemvPlansFromEnv({ FUSEFORMER_GEMV_PLAN: 'k8192=r4.kw4, k2048.n8192.m1.gated.norm=r1.kw8' }), [
    { k: 8192, columns: 4, kWarps: 4 },
    { k: 2048, n: 8192, rows: 1, gated: true, norm: true, columns: 1, kWarps: 8 },
  ]);
  assert.throws(() => forcedGemvPlansFromEnv({ FUSEFORMER_GEMV_PLAN: 'down=r4.kw4' }), /FUSEFORMER_GEMV_PLAN: 'down=r4.kw4' is not SELECTOR=rR.kwW/);
  const gate = { activation: 'silu', bias: false } as const, rms = { kind: 'rms', residual: true, bias: false } as const;
  const saved = gemvPlanOptions.forced;
  try {
    gemvPlanOptions.forced = forcedGemvPlansFromEnv({ FUSEFORMER_GEMV_PLAN: 'k8192.m1=r4.kw4,k2048.gated=r1.kw8,k8192=r2.kw2' });
    const down = planGemv('bf16', 1, 2048, 8192, 'none', undefined, 132).spec;
    assert.deepEqual([down.columns, down.kWarps], [4, 4], 'the first entry');
    const down2 = planGemv('bf16', 2, 2048, 8192, 'none', undefined, 132).spec;
    assert.deepEqual([down2.columns, down2.kWarps], [2, 2], 'rows 2: the third');
    const gated = planGemv('bf16', 1, 8192, 2048, 'none', gate, 132, rms);
    assert.deepEqual([gated.spec.columns, gated.spec.kWarps, gated.spec.loop, gated.grid], [1, 8, true, 264], 'forced, then looped');
    const qkv = planGemv('bf16', 1, 3072, 2048, 'none', undefined, 132, rms);
    gemvPlanOptions.forced = [];
    assert.deepEqual(qkv, planGemv('bf16', 1, 3072, 2048, 'none', undefined, 132, rms), 'a product no entry selects: planGemv\'s pick');
    gemvPlanOptions.forced = GEMV_PLAN_DEFAULT;
    for (const m of [1, 2, 4]) {
      const d = planGemv('bf16', m, 2048, 8192, 'none', undefined, 132).spec;
      assert.deepEqual([d.columns, d.kWarps], [4, 4], `the default: Llama's down product at ${m} rows takes r4.kw4`);
    }
    const five = planGemv('bf16', 5, 2048, 8192, 'none', undefined, 132);
    gemvPlanOptions.forced = [];
    assert.deepEqual(five, planGemv('bf16', 5, 2048, 8192, 'none', undefined, 132), 'a default plan outside the space (r4 at 5 rows: 20 sums a lane): the planner decides, no error');
    gemvPlanOptions.forced = GEMV_PLAN_DEFAULT;
    assert.notDeepEqual([planGemv('bf16', 1, 3072, 8192, 'none', undefined, 132).spec.columns], [4], 'another N: not the default\'s');
    gemvPlanOptions.forced = forcedGemvPlansFromEnv({ FUSEFORMER_GEMV_PLAN: 'k2048.gated=r4.kw1' });
    assert.throws(() => planGemv('bf16', 1, 8192, 2048, 'none', gate, 132), /FUSEFORMER_GEMV_PLAN: r4.kw1 is not a plan of the GEMV for 1 rows of K 2048 \(gated\)/);
  } finally {
    gemvPlanOptions.forced = saved;
  }
});

test('FUSEFORMER_NORM_ONE_PASS: LayerNorm prologues (all three GEMV families) in one pass — Σv and Σv² by one block reduction, "_1p" in the key; RMSNorm and the default unchanged', () => {
  assert.equal(normOnePassFromEnv({}), true, 'on by default');
  assert.equal(normOnePassFromEnv({ FUSEFORMER_NORM_ONE_PASS: '0' }), false);
  assert.throws(() => normOnePassFromEnv({ FUSEFORMER_NORM_ONE_PASS: 'yes' }), /FUSEFORMER_NORM_ONE_PASS must be 0 or 1, got 'yes'/);
  const saved = normPrologueOptions.onePass;
  try {
    normPrologueOptions.onePass = false;
    assert.deepEqual(normOnePassOption('layer'), {});
    normPrologueOptions.onePass = true;
    assert.deepEqual(normOnePassOption('layer'), { onePass: true });
    assert.deepEqual(normOnePassOption('rms'), {}, 'RMSNorm sums v² in its one pass already');
    assert.deepEqual(prologueNorm('int4', { norm: 'layer', x: deviceTensor([1, 768], 'bf16'), y: undefined, bias: undefined }, 768), { kind: 'layer', residual: false, bias: false, preload: true, write: 'early', onePass: true }, 'the prologue the INT4 GEMV takes: its family\'s switches and one pass');
  } finally {
    normPrologueOptions.onePass = saved;
  }
  const layer = { kind: 'layer', residual: true, bias: true } as const;
  const plan = (norm: GemvNorm) => planGemv('bf16', 1, 2304, 768, 'none', undefined, 132, norm);
  const two = plan(layer), one = plan({ ...layer, onePass: true });
  assert.equal(gemvKey(one.spec), `${gemvKey(two.spec)}_1p`);
  assert.equal(one.grid, two.grid, 'the same plan');
  const body = (src: string) => src.slice(src.indexOf('__device__ void normalize_rows'));
  const oneSource = gemvSource(one.spec).source, twoSource = gemvSource(two.spec).source;
  assert.match(oneSource, /constexpr bool ONE_PASS = LAYER && true;/);
  assert.match(twoSource, /constexpr bool ONE_PASS = LAYER && false;/);
  assert.match(body(oneSource), /if \(ONE_PASS\) squares\[m\] \+= v\[i\] \* v\[i\];[\s\S]*block_sums<2 \* M, false>\(both, red\);[\s\S]*fmaxf\(both\[M \+ m\] \* \(1\.f \/ K\) - mean\[m\] \* mean\[m\], 0\.f\)/, 'E[v²] − mean² from one reduction');
  assert.match(body(twoSource), /if \(LAYER && !ONE_PASS\) \{\s*\/\/ Two passes/, 'the two-pass path kept for the default');
});
