// The mma GEMV's routing rule and plans, without a GPU: which checked GEMMs it takes, and that every
// plan keeps a lane's accumulators and in-flight vectors within budget and covers every output column.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CheckedGemm, GemmProblem } from '../../../../src/backend/cuda/gemm-plan.js';
import { mmaGemvApplies, mmaGemvGrid, mmaGemvKey, mmaGemvSource, mmaGemvSpace, planMmaGemv } from '../../../../src/backend/cuda/kernels/gemv-mma.js';
import { checkedGemm, commonGemmRefusals } from './launch-helpers.js';

const checked = (problem: Partial<GemmProblem>, extra: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean } = {}) => checkedGemm({ M: 16 }, problem, extra);

test('mmaGemvApplies: 16-bit, up to 64 rows against [N, K] weights, K a multiple of 32, a forward epilogue; the rest stays on cuBLASLt', () => {
  assert.ok(mmaGemvApplies(checked({})));
  assert.ok(mmaGemvApplies(checked({ dtype: 'f16', M: 64, K: 96, epilogue: 'gelu_bias' })));
  assert.ok(mmaGemvApplies(checked({ M: 5, N: 77 })));
  for (const [why, g] of [
    ['65 rows', checked({ M: 65 })],
    ['f32', checked({ dtype: 'f32' })],
    ['K not a multiple of 32', checked({ K: 2056 })],
    ...commonGemmRefusals(checked),
  ] as const) assert.equal(mmaGemvApplies(g), false, why);
});

test('planMmaGemv: lanes within their accumulator and vector budgets, the grid covering N, gated products at most 32 rows', () => {
  for (const M of [5, 8, 9, 16, 31, 32, 33, 64]) {
    for (const [N, K] of [[3072, 2048], [2048, 8192], [16384, 2048], [77, 96], [128256, 2048]] as const) {
      for (const gate of [undefined, { activation: 'silu' as const, bias: true }]) {
        if (gate && M > 32) {
          assert.throws(() => planMmaGemv('bf16', M, N, K, 'none', gate, 132), /exceed the kernel's accumulators/);
          continue;
        }
        const { spec, grid } = planMmaGemv('bf16', M, N, K, 'none', gate, 132);
        const WT = gate ? 2 * spec.featureTiles : spec.featureTiles;
        assert.equal(spec.rowTiles, Math.ceil(M / 8));
        assert.ok(WT * spec.rowTiles * 4 <= 32, `accumulators of ${JSON.stringify(spec)}`);
        assert.ok(spec.unroll * WT * 2 <= 16, `vectors in flight of ${JSON.stringify(spec)}`);
        assert.ok([1, 2, 4, 8].includes(spec.kWarps));
        const columnsPerBlock = (8 / spec.kWarps) * 16 * spec.featureTiles;
        assert.ok(grid * columnsPerBlock >= N && (grid - 1) * columnsPerBlock < N, `grid ${grid} covers N = ${N} exactly`);
        assert.doesNotThrow(() => mmaGemvSource(spec));
      }
    }
  }
  assert.throws(() => mmaGemvSource({ dtype: 'bf16', rowTiles: 1, k: 100, epilogue: 'none', featureTiles: 1, kWarps: 1, unroll: 1 }), /K must be a multiple of 32/);
});

test('mmaGemvSpace: distinct plans within the budgets, the planner\'s pick among them, two-block plans bounded at 128 registers', () => {
  for (const [M, N, K, gate] of [[32, 3072, 2048, undefined], [32, 2048, 8192, undefined], [32, 8192, 2048, { activation: 'silu' as const, bias: false }], [12, 768, 768, undefined]] as const) {
    const space = mmaGemvSpace('bf16', M, K, 'none', gate);
    const keys = space.map(mmaGemvKey);
    assert.equal(new Set(keys).size, keys.length, 'distinct');
    assert.ok(keys.includes(mmaGemvKey(planMmaGemv('bf16', M, N, K, 'none', gate, 132).spec)), 'the planned spec is in the space');
    for (const spec of space) {
      const WT = gate ? 2 * spec.featureTiles : spec.featureTiles;
      assert.ok(WT * spec.rowTiles * 4 <= 32 && spec.unroll * WT * 2 <= 16);
      const columnsPerBlock = (8 / spec.kWarps) * 16 * spec.featureTiles, grid = mmaGemvGrid(spec, N);
      assert.ok(grid * columnsPerBlock >= N && (grid - 1) * columnsPerBlock < N);
      assert.match(mmaGemvSource(spec).source, spec.blocksPerSm ? /__launch_bounds__\(256, 2\)/ : /__launch_bounds__\(256\) /);
    }
    assert.ok(space.some((s) => s.blocksPerSm === 2) && space.some((s) => !s.blocksPerSm));
  }
});
