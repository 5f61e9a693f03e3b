// The skinny GEMM's routing rule, plans and launches, without a GPU: which checked GEMMs it takes, that
// every plan covers N and splits K into at most 8 ranges of whole chunks (one cluster), and what a
// launch asks of its host (dynamic shared memory for its stages or its split combine, nothing else).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CheckedGemm, GemmProblem } from '../../../../src/backend/cuda/gemm-plan.js';
import * as skinny from '../../../../src/backend/cuda/kernels/gemm-skinny.js';
import type { CheckedGatedLinear } from '../../../../src/backend/cuda/kernels/gemv.js';
import { argValue, checkedGemm, commonGemmRefusals, deviceTensor, RecordingHost } from './launch-helpers.js';

const checked = (problem: Partial<GemmProblem>, extra: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean } = {}) => checkedGemm({ M: 32, N: 3072 }, problem, extra);

test('skinnyGemmApplies: 16-bit, 5–64 rows against [N, K] weights, K a multiple of 8, a forward epilogue, aligned; the rest stays elsewhere', () => {
  assert.ok(skinny.skinnyGemmApplies(checked({})));
  assert.ok(skinny.skinnyGemmApplies(checked({ dtype: 'f16', M: 64, K: 96, epilogue: 'gelu_bias' })));
  assert.ok(skinny.skinnyGemmApplies(checked({ M: 5, N: 77, K: 264 })));
  for (const [why, g] of [
    ['4 rows (the GEMV\'s)', checked({ M: 4 })],
    ['65 rows', checked({ M: 65 })],
    ['f32', checked({ dtype: 'f32' })],
    ['K not a multiple of 8', checked({ K: 2052 })],
    ...commonGemmRefusals(checked),
  ] as const) assert.equal(skinny.skinnyGemmApplies(g), false, why);
});

test('planSkinnyGemm: even row tiles for M, blocks covering N once, K split into 1–8 ranges of at least 4 chunks for a grid of about two blocks an SM', () => {
  for (const M of [5, 8, 16, 17, 32, 33, 48, 64]) {
    for (const [N, K] of [[3072, 2048], [2048, 8192], [8192, 2048], [77, 96], [128256, 2048], [768, 3072], [2048, 2048]] as const) {
      for (const gate of [undefined, { activation: 'silu' as const, bias: true }]) {
        const { spec, grid, blockFeatures } = skinny.planSkinnyGemm('bf16', M, N, K, 'none', gate, 132);
        assert.equal(spec.rowTiles, 2 * Math.ceil(M / 16));
        assert.ok(8 * spec.rowTiles >= M && spec.rowTiles <= 8);
        assert.equal(blockFeatures, 64 * spec.featureTiles);
        const [tiles, splits] = grid;
        assert.equal(spec.splits, splits, 'the cluster is the splits of a tile');
        assert.ok(tiles * blockFeatures >= N && (tiles - 1) * blockFeatures < N, `${tiles} blocks cover N = ${N} once`);
        const chunks = Math.ceil(K / skinny.SKINNY_CHUNK_K);
        assert.ok(splits >= 1 && splits <= skinny.SKINNY_MAX_SPLITS, `${splits} splits: one portable cluster`);
        assert.ok(splits === 1 || Math.floor(chunks / splits) >= 4, `${splits} splits of ${chunks} chunks keep 4 a split`);
        assert.ok(splits === 1 || tiles * (splits - 1) < 2 * 132, 'no more splits than the grid target needs');
        const perSm = tiles * splits <= 132 ? 1 : 2;
        assert.equal(spec.stages, perSm === 1 ? 6 : 4);
        assert.ok(perSm * skinny.skinnySharedBytes(spec) <= 227 * 1024, `${perSm} blocks an SM fit`);
        assert.doesNotThrow(() => skinny.skinnyGemmSource(spec));
      }
    }
  }
  // Llama 1.2B at batch 32: QKV 24 tiles × 8 splits; down and 2048² in tiles of 64 (32 × 8: 16 tiles of
  // 128 × 8 splits would leave SMs idle); the gated gate/up 128 × 3; the LM head unsplit.
  const plan = (N: number, K: number, gate?: { activation: 'silu'; bias: boolean }) => skinny.planSkinnyGemm('bf16', 32, N, K, 'none', gate, 132);
  assert.deepEqual([plan(3072, 2048), plan(2048, 8192), plan(2048, 2048), plan(8192, 2048, { activation: 'silu', bias: false }), plan(128256, 2048)].map((p) => p.grid), [[24, 8], [32, 8], [32, 8], [128, 3], [1002, 1]]);
  assert.deepEqual([plan(2048, 8192).spec.featureTiles, plan(2048, 2048).spec.featureTiles, plan(3072, 2048).spec.stages], [1, 1, 4]);
  // One block an SM or fewer (GPT-2's 768 outputs at K 768: 12 tiles × 3 splits): six stages.
  assert.deepEqual([plan(768, 768).grid, plan(768, 768).spec.stages], [[12, 3], 6]);
  assert.throws(() => skinny.skinnyGemmSource({ dtype: 'bf16', rowTiles: 3, featureTiles: 2, stages: 4, splits: 1, epilogue: 'none' }), /row tiles must be 2, 4, 6 or 8/);
  assert.throws(() => skinny.skinnyGemmSource({ dtype: 'bf16', rowTiles: 4, featureTiles: 2, stages: 4, splits: 9, epilogue: 'none' }), /splits must be 1\.\.8/);
});

test('skinnyGemmSource: a split kernel is one cluster of its splits and combines in shared memory; an unsplit one has no cluster', () => {
  const split = skinny.planSkinnyGemm('bf16', 32, 3072, 2048, 'none', undefined, 132).spec;
  const src = skinny.skinnyGemmSource(split).source;
  assert.match(src, /__cluster_dims__\(1, 8, 1\)/);
  assert.match(src, /cluster_load\(&sums\[/);
  // The kernel's own code (the shared device library before it has atomics of its own, e.g. the timeline's).
  assert.doesNotMatch(src.slice(src.indexOf('extern "C"')), /atomicAdd|partials/, 'no global partials');
  assert.doesNotMatch(src, /FOR_EACH_FRAGMENT\(FT\) \{/, 'no split writes its own sums to out');
  const whole = skinny.skinnyGemmSource(skinny.planSkinnyGemm('bf16', 32, 128256, 2048, 'none', undefined, 132).spec).source;
  assert.doesNotMatch(whole, /__cluster_dims__|cluster_sync\(\);|cluster_load\(&sums/);
  assert.match(whole, /FOR_EACH_FRAGMENT\(FT\) \{/);
});

test('launchSkinnyGemm: stages (or the split combine\'s sums) in dynamic shared memory, no scratch, no counters', () => {
  const host = new RecordingHost();
  const t = (ptr: bigint) => ({ ptr }) as unknown as CheckedGemm['a'];
  skinny.launchSkinnyGemm(host, { ...checked({ M: 32, N: 3072, K: 2048 }), bias: t(0x4000n) });
  const split = host.launches.at(-1)!;
  assert.equal(split.key, 'gemm_skinny.bf16.nt4.ft2.s4.k8.none');
  assert.deepEqual(split.config.grid, [24, 8]);
  assert.equal(split.config.block, 128);
  assert.equal(split.config.sharedBytes, 4 * (128 + 32) * 128);
  assert.deepEqual([argValue(split, 4, 'i32'), argValue(split, 5, 'i32'), argValue(split, 6, 'i32')], [32, 3072, 2048]);
  assert.equal(split.args.length, 7);
  // The LM head at 32 rows fills the GPU unsplit.
  skinny.launchSkinnyGemm(host, checked({ M: 32, N: 128256, K: 2048 }));
  const whole = host.launches.at(-1)!;
  assert.equal(whole.key, 'gemm_skinny.bf16.nt4.ft2.s4.none');
  assert.deepEqual(whole.config.grid, [1002, 1]);
  // 64 rows, a few chunks: the combine's sums (64 rows × 132 floats) outgrow the stages of a small block? No: stages win.
  const big = skinny.planSkinnyGemm('bf16', 64, 3072, 2048, 'none', undefined, 132).spec;
  assert.equal(skinny.skinnySharedBytes(big), Math.max(big.stages * skinny.skinnyStageBytes(big), 64 * 132 * 4));
  assert.deepEqual([host.scratchRequests, host.counterRequests], [[], []]);
  // Gated: gate and up rows in one block (one feature tile of each); the kernel writes F outputs.
  const gated: CheckedGatedLinear = {
    x: deviceTensor([32, 2048], 'bf16'), weight: deviceTensor([16384, 2048], 'bf16'), out: deviceTensor([32, 8192], 'bf16'),
    activation: 'silu', rows: 32, F: 8192, K: 2048,
  };
  assert.ok(skinny.skinnyGatedApplies(gated));
  skinny.launchSkinnyGated(host, gated);
  const g = host.launches.at(-1)!;
  assert.equal(g.key, 'gemm_skinny.bf16.nt4.ft1.s4.k3.gated_silu');
  assert.deepEqual(g.config.grid, [128, 3]);
  assert.equal(argValue(g, 5, 'i32'), 8192);
  assert.equal(skinny.skinnyGatedApplies({ ...gated, rows: 4 }), false, 'four rows are the gated GEMV\'s');
});

test('skinnyGemmSpace: every plan fits the shared memory, covers N with its grid and launches 32·warps threads; 8-warp plans say so in their key', () => {
  const sk = skinny;
  for (const gate of [undefined, { activation: 'silu' as const, bias: false }]) {
    const space = sk.skinnyGemmSpace('bf16', 32, 8192, 2048, 'none', gate);
    assert.ok(space.length >= 24, `${space.length} plans`);
    assert.equal(new Set(space.map((p) => sk.skinnyGemmKey(p.spec))).size, space.length, 'distinct keys');
    for (const p of space) {
      assert.ok(sk.skinnySharedBytes(p.spec) <= 227 * 1024);
      assert.ok(p.grid[0] * p.blockFeatures >= 8192 && (p.grid[0] - 1) * p.blockFeatures < 8192);
      assert.equal(p.blockFeatures, sk.warpsOf(p.spec) * 16 * p.spec.featureTiles);
      assert.equal(sk.skinnyGemmKey(p.spec).includes('.w8'), sk.warpsOf(p.spec) === 8);
    }
    assert.ok(space.some((p) => sk.warpsOf(p.spec) === 8) && space.some((p) => p.spec.splits === 8));
  }
  assert.throws(() => sk.skinnyGemmSource({ dtype: 'bf16', rowTiles: 4, featureTiles: 1, stages: 4, splits: 1, epilogue: 'none', warps: 6 as 4 }), /warps must be 4 or 8/);
});
