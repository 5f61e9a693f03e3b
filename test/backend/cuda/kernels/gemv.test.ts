// The decode GEMV's routing rule and launch shape, without a GPU: which checked GEMMs it takes (the
// rest stay on cuBLASLt), and a grid of one warp per two output columns.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CheckedGemm, GemmProblem } from '../../../../src/backend/cuda/gemm-plan.js';
import { gemvApplies, gemvSource, launchGemv } from '../../../../src/backend/cuda/kernels/gemv.js';
import type { CompiledKernel, KernelArg, KernelHost, LaunchConfig } from '../../../../src/backend/cuda/runtime/kernel.js';

function checked(problem: Partial<GemmProblem>, extra: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean } = {}): CheckedGemm {
  const p: GemmProblem = { dtype: 'bf16', M: 1, N: 2048, K: 2048, batch: 1, transA: false, transB: true, epilogue: 'none', writesPreActivation: false, ...problem };
  const t = (ptr: bigint) => ({ ptr }) as unknown as CheckedGemm['a'];
  return { problem: p, a: t(extra.aPtr ?? 0x1000n), b: t(0x2000n), out: t(0x3000n), ...(extra.bias ? { bias: t(0x4000n) } : {}), alpha: extra.alpha ?? 1, beta: extra.beta ?? 0 };
}

test('gemvApplies: few rows against [N, K] weights with a forward epilogue; everything else stays on cuBLASLt', () => {
  assert.ok(gemvApplies(checked({})));
  assert.ok(gemvApplies(checked({ M: 4, K: 8192, epilogue: 'gelu_bias' }, { bias: true })));
  assert.ok(gemvApplies(checked({ dtype: 'f32', M: 3, K: 100, epilogue: 'relu_bias' }, { bias: true })));
  for (const [why, g] of [
    ['5 rows', checked({ M: 5 })],
    ['an untransposed weight', checked({ transB: false })],
    ['a transposed a', checked({ transA: true })],
    ['a batch', checked({ batch: 2 })],
    ['K not a multiple of 8 (bf16)', checked({ K: 2044 })],
    ['a stored pre-activation', checked({ epilogue: 'gelu_bias', writesPreActivation: true }, { bias: true })],
    ['a backward epilogue', checked({ epilogue: 'dgelu' })],
    ['alpha', checked({}, { alpha: 0.5 })],
    ['beta', checked({}, { beta: 1 })],
    ['a misaligned a', checked({}, { aPtr: 0x1002n })],
  ] as const) assert.equal(gemvApplies(g), false, why);
});

test('launchGemv: a block of 4 warps per 8 output columns; the source bakes M and K in and waits for its prerequisites', () => {
  const launches: { key: string; config: LaunchConfig; args: readonly KernelArg[] }[] = [];
  const host: KernelHost = {
    kernel: (key, build) => {
      const src = build();
      assert.equal(src.gridDependencyWait, true);
      assert.match(src.source, /constexpr int M = 3;[\s\S]*constexpr int K = 768;/);
      assert.match(src.source, /GRID_DEPENDENCY_WAIT\(\);[\s\S]*GRID_DEPENDENCY_TRIGGER\(\);/);
      return { name: src.name, launch: (config, args) => launches.push({ key, config, args }) } satisfies CompiledKernel;
    },
    scratch: () => 0n, multiProcessorCount: 132, maxSharedBytesPerBlock: 227 * 1024,
  };
  launchGemv(host, checked({ M: 3, N: 2305, K: 768, epilogue: 'bias' }, { bias: true }));
  assert.equal(launches.length, 1);
  assert.equal(launches[0]!.key, 'gemv.bf16.m3.k768.bias');
  assert.deepEqual(launches[0]!.config, { grid: Math.ceil(2305 / 8), block: 128 });
  assert.deepEqual(launches[0]!.args.map((a) => a.value), [0x1000n, 0x2000n, 0x4000n, 0x3000n, 2305]);
  assert.match(gemvSource({ dtype: 'f32', rows: 1, k: 100, epilogue: 'none' }).source, /constexpr int STEPS = 0;/, 'K below one warp step: only the partial step');
});
