// The fused MLP kernel's planner and launcher without a GPU (kernels/gemv-mlp.ts): the features a block owns
// for GPT-2's and awkward shapes (and the probe that forces them), what mlpGemvApplies refuses, the grid, the
// key and the arguments in the signature's order as a fake host records them, the vector-atomic form's
// source; the catalog compiles with nvcc where nvcc exists.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Activation } from '../../../../src/backend/backend.js';
import type { CheckedNormMlp } from '../../../../src/backend/cuda/kernels/gemv-mlp.js';
import * as mlp from '../../../../src/backend/cuda/kernels/gemv-mlp.js';
import type { DType } from '../../../../src/dtype.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

/** A checked normMlp of GPT-2's layout on fake device tensors (y in `yDType`, default x's). */
function checked(rows: number, H: number, F: number, dtype: DType = 'bf16', options: { yDType?: DType; activation?: Activation; upBias?: boolean; outPtr?: bigint } = {}): CheckedNormMlp {
  const x = deviceTensor([rows, H], dtype), y = deviceTensor([rows, H], options.yDType ?? dtype);
  return {
    norm: { x, y, bias: deviceTensor([H], dtype), gamma: deviceTensor([H], dtype), beta: deviceTensor([H], dtype), out: deviceTensor([rows, H], dtype), norm: 'layer', eps: 1e-5, rows, H },
    up: deviceTensor([F, H], dtype), ...(options.upBias === false ? {} : { upBias: deviceTensor([F], dtype) }), down: deviceTensor([H, F], dtype),
    out: deviceTensor([rows, H], 'f32', options.outPtr), zero: deviceTensor([4, H], 'f32'), activation: options.activation ?? 'gelu_tanh', rows, K: H, F,
  };
}

test('mlpFeatures: the smallest block of at most two blocks an SM, within the registers; the probe forces one that fits', () => {
  assert.equal(mlp.mlpFeatures('bf16', 768, 3072, 132, undefined), 16, "GPT-2: 192 blocks, 12 vectors a thread");
  assert.deepEqual(mlp.mlpGemvShape({ dtype: 'bf16', k: 768, features: 16 }), { upVectors: 6, downVectors: 6, upPerWarp: 2, lanesPerRow: 2 });
  assert.equal(mlp.mlpFeatures('bf16', 1024, 4096, 132, undefined), 16);
  assert.equal(mlp.mlpFeatures('f32', 1024, 4096, 132, undefined), 8, 'f32 at 1024: only 8 features fit the registers (512 blocks)');
  assert.equal(mlp.mlpFeatures('bf16', 768, 3072, 132, 32), 32);
  assert.equal(mlp.mlpFeatures('bf16', 768, 3072, 132, 64), undefined, '64 features: 48 vectors a thread');
  assert.equal(mlp.mlpFeatures('bf16', 768, 3000, 132, undefined), 8, 'F = 3000: only 8 divides it');
  assert.equal(mlp.mlpFeatures('bf16', 768, 3004, 132, undefined), undefined, 'F = 3004: no block size divides it');
  assert.equal(mlp.mlpFeatures('bf16', 4096, 16384, 132, undefined), undefined, 'too wide for the registers');
  assert.equal(mlp.mlpFeaturesFromEnv({ FUSEFORMER_MLP_FEATURES: '32' }), 32);
  assert.equal(mlp.mlpFeaturesFromEnv({}), undefined);
  assert.throws(() => mlp.mlpFeaturesFromEnv({ FUSEFORMER_MLP_FEATURES: '12' }), /FUSEFORMER_MLP_FEATURES must be one of 8, 16, 32, 64, got '12'/);
});

test('mlpGemvApplies: 1–4 rows, aligned operands, a shape a block size fits', () => {
  assert.equal(mlp.mlpGemvApplies(checked(1, 768, 3072), 132), true);
  assert.equal(mlp.mlpGemvApplies(checked(4, 768, 3072, 'bf16', { yDType: 'f32' }), 132), true);
  assert.equal(mlp.mlpGemvApplies(checked(5, 768, 3072), 132), false, '5 rows');
  assert.equal(mlp.mlpGemvApplies(checked(1, 768, 3004), 132), false, 'no block size');
  assert.equal(mlp.mlpGemvApplies(checked(1, 768, 3072, 'bf16', { outPtr: 0x5000_0008n }), 132), false, 'out 8-byte aligned');
});

test('launchMlpGemv: F / FB blocks of 256 threads, the key, and the arguments in the signature\'s order', () => {
  const host = new RecordingHost();
  const c = checked(1, 768, 3072, 'bf16', { yDType: 'f32' });
  mlp.launchMlpGemv(host, c);
  const [launch] = host.launches;
  assert.equal(launch!.key, 'gemv_mlp.bf16.m1.k768.f3072.fb16.gelu_tanh.bias.early._res_bias_1p_yf32');
  assert.deepEqual([launch!.config.grid, launch!.config.block], [192, 256]);
  assert.equal(launch!.gridDependencyWait, true);
  const ptr = (i: number) => argValue(launch!, i, 'ptr');
  const address = (t: unknown) => (t as { ptr: bigint }).ptr;
  assert.deepEqual([ptr(0), ptr(1), ptr(2), ptr(3), ptr(4)], [c.up, c.upBias, c.down, c.out, c.zero].map(address));
  assert.equal(argValue(launch!, 5, 'i32'), 4 * 768, 'zero_count: every element of the zeroed accumulator');
  const n = c.norm;
  assert.deepEqual([ptr(6), ptr(7), ptr(8), ptr(9), ptr(10), ptr(11)], [n.x, n.y, n.bias, n.gamma, n.beta, n.out].map(address));
  assert.equal(argValue(launch!, 12, 'f32'), 1e-5);
  assert.equal(ptr(13), RecordingHost.COUNTERS);
  assert.equal(launch!.args.length, 14);
  assert.match(launch!.source, /typedef float Y;/);
  assert.match(launch!.source, /const Y\* __restrict__ y/);
  assert.match(launch!.source, /constexpr bool RED_V4 = false;/);
  // Without an up bias, and with a 16-bit y: no bias pointer, T as Y.
  mlp.launchMlpGemv(host, checked(2, 768, 3072, 'f16', { upBias: false, activation: 'relu' }));
  assert.equal(host.launches[1]!.key, 'gemv_mlp.f16.m2.k768.f3072.fb16.relu.early._res_bias_1p');
  assert.equal(argValue(host.launches[1]!, 1, 'ptr'), 0n);
});

/** The launch of GPT-2's one-row MLP with an mlpOptions switch on or off (restored after). */
function launchWith(option: 'vectorRed' | 'earlyTrigger', on = true): { key: string; source: string } {
  const host = new RecordingHost(), saved = mlp.mlpOptions[option];
  mlp.mlpOptions[option] = on;
  try {
    mlp.launchMlpGemv(host, checked(1, 768, 3072));
  } finally {
    mlp.mlpOptions[option] = saved;
  }
  return host.launches[0]!;
}

test('the vector atomics (FUSEFORMER_MLP_RED_V4): in the key and source where four rows fit a warp', () => {
  const launch = launchWith('vectorRed');
  assert.match(launch.key, /\.red4\./);
  assert.match(launch.source, /constexpr bool RED_V4 = true;/);
  assert.equal(mlp.vectorRedFits('bf16', 64, 768), true, 'FB 64 at 16 bit: 8 lanes a row, 4 rows a warp');
  assert.equal(mlp.vectorRedFits('f32', 64, 768), false, 'FB 64 at f32: 16 lanes a row, 2 rows a warp');
  assert.equal(mlp.vectorRedFits('bf16', 16, 770), false, 'K not a multiple of 4');
});

test('the early trigger (FUSEFORMER_MLP_EARLY_TRIGGER, default on): in the key and source, the trigger after the wait', () => {
  const launch = launchWith('earlyTrigger');
  assert.match(launch.key, /\.early\./);
  assert.match(launch.source, /constexpr bool EARLY_TRIGGER = true;/);
  const late = launchWith('earlyTrigger', false);
  assert.doesNotMatch(late.key, /\.early/);
  assert.match(late.source, /constexpr bool EARLY_TRIGGER = false;/);
  if (process.env['FUSEFORMER_MLP_EARLY_TRIGGER'] === undefined) assert.equal(mlp.mlpOptions.earlyTrigger, true, 'the default');
});

test('FUSEFORMER_FUSED_MLP: unset fuses from two rows, 1 from one row, 0 never; other values are refused by name', () => {
  assert.deepEqual(mlp.fusedMlpFromEnv(undefined), { on: true, minRows: mlp.FUSED_MLP_MIN_ROWS_DEFAULT });
  assert.equal(mlp.FUSED_MLP_MIN_ROWS_DEFAULT, 2);
  assert.deepEqual(mlp.fusedMlpFromEnv('1'), { on: true, minRows: 1 });
  assert.equal(mlp.fusedMlpFromEnv('0').on, false);
  assert.throws(() => mlp.fusedMlpFromEnv('yes'), /FUSEFORMER_FUSED_MLP must be 0 or 1, got 'yes'/);
});

const nvcc = findNvcc();
test('the fused MLP kernels compile with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 5 * 60_000 }, async () => {
  assert.deepEqual(await compileAll(nvcc!, mlp.catalog()), []);
});
