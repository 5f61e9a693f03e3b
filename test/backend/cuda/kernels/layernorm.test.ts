// The LayerNorm/RMSNorm kernel family without a GPU:
// spec keys tell specs apart, launchers reject bad arguments naming the op, and known shapes get
// the launch configuration we designed for (forward: a warp per row up to H = 1024, a block per row
// above; backward: ≤ 8 elements a thread, several rows a block, one wave of blocks).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ln from '../../../../src/backend/cuda/kernels/layernorm.js';
import { OpCheck } from '../../../../src/backend/validate.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('catalog kernels have distinct names, each defined in its source', () => {
  const sources = ln.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void KERNEL_BOUNDS ${s.name}\\(`));
});

test('spec keys differ in every field', () => {
  const base: ln.NormBackwardSpec = { norm: 'layer', dtype: 'f16', hidden: 768, vec: 8, threadsPerRow: 96, rowsPerBlock: 5, dResidual: false };
  const variants: ln.NormBackwardSpec[] = [
    base, { ...base, norm: 'rms' }, { ...base, dtype: 'bf16' }, { ...base, hidden: 1024 }, { ...base, vec: 4 },
    { ...base, threadsPerRow: 128, rowsPerBlock: 1 }, { ...base, rowsPerBlock: 8 }, { ...base, persistent: true },
    { ...base, persistent: true, stages: 3 }, { ...base, dResidual: true },
  ];
  assert.equal(new Set(variants.map(ln.normBackwardKey)).size, variants.length);
  // The forward key has neither stages nor dResidual.
  assert.equal(new Set(variants.filter((v) => !v.stages && !v.dResidual).map(ln.normForwardKey)).size, variants.length - 2);
  const sums = [false, true].flatMap((accumulate) => (['layer', 'rms'] as const).map((norm) => ln.normColumnSumsKey({ norm, dtype: 'f32', hidden: 768, accumulate })));
  assert.equal(new Set(sums).size, 4);
});

function forwardTensors(rows: number, H: number, dtype: 'f32' | 'f16' | 'bf16' = 'f16') {
  return {
    x: deviceTensor([rows, H], dtype), gamma: deviceTensor([H], dtype), beta: deviceTensor([H], dtype),
    out: deviceTensor([rows, H], dtype), mean: deviceTensor([rows], 'f32'), rstd: deviceTensor([rows], 'f32'), eps: 1e-5,
  };
}

test('layerNormForward H=768 bf16: persistent warps, 8 a block, one wave with the rows spread evenly', () => {
  const host = new RecordingHost();
  ln.layerNormForward(host, forwardTensors(8192, 768, 'bf16'));
  assert.equal(host.launches.length, 1);
  const l = host.launches[0]!;
  assert.equal(l.key, 'norm_forward.layer.bf16.h768.v8.t32.r8.pw');
  assert.deepEqual(l.config.block, [32, 8]);
  // 4 blocks × 8 warps × 132 SMs = 4224 warps: 2 rows each for 4096 warps, 512 blocks.
  assert.match(l.source, /#define KERNEL_BOUNDS __launch_bounds__\(256, 4\)/);
  assert.equal(l.config.grid, 512);
  assert.doesNotMatch(l.source.slice(l.source.indexOf('extern "C"')), /__syncthreads|__shared__/);
  assert.match(l.source, /constexpr int VECS_PER_THREAD = 3;/);
  assert.equal(argValue(l, 6, 'i32'), 8192);
  assert.equal(argValue(l, 7, 'f32'), 1e-5);
});

test('layerNormForward f32 H=768 keeps a warp per row slot, 4 rows per block, a block per row group', () => {
  const host = new RecordingHost();
  ln.layerNormForward(host, forwardTensors(8192, 768, 'f32'));
  const l = host.launches[0]!;
  assert.equal(l.key, 'norm_forward.layer.f32.h768.v4.t32.r4');
  assert.equal(l.config.grid, 8192 / 4);
});

test('persistent grid: never more than one wave, at least one block, every row covered', () => {
  const plan = new OpCheck('test', 'cuda');
  const fwd = ln.planNormForward(plan, 'layer', 'f16', 768, [0x1000n]);
  const bwd = ln.planNormBackward(plan, 'layer', 'f16', 768, false, [0x1000n]);
  for (const rows of [1, 7, 8, 9, 1000, 4224, 4225, 8192, 16384, 100_000]) {
    for (const [grid, wave, warpsPerBlock] of [[ln.forwardGridSize(fwd, rows, 132), 4 * 132, 8], [ln.backwardGridSize(bwd, rows, 132), 2 * 132, 8]] as const) {
      assert.ok(grid >= 1 && grid <= wave, `rows ${rows}: grid ${grid}`);
      const warps = grid * warpsPerBlock;
      const rowsPerWarp = Math.ceil(rows / warps);
      assert.ok(warps * rowsPerWarp >= rows);
    }
  }
});

test('layerNormForward H=5120: a block per row, 320 threads × 2 vectors', () => {
  const host = new RecordingHost();
  ln.layerNormForward(host, forwardTensors(10, 5120));
  const l = host.launches[0]!;
  assert.equal(l.key, 'norm_forward.layer.f16.h5120.v8.t320.r1');
  assert.deepEqual(l.config.block, [320, 1]);
  assert.equal(l.config.grid, 10);
  assert.match(l.source, /constexpr int VECS_PER_THREAD = 2;/);
});

test('an odd hidden size or an unaligned view narrows the vectors', () => {
  const host = new RecordingHost();
  ln.layerNormForward(host, forwardTensors(3, 771, 'f32'));
  assert.match(host.launches[0]!.key, /\.h771\.v1\.t32\./);
  const t = forwardTensors(4, 1024, 'f16');
  ln.rmsNormForward(host, { x: deviceTensor([4, 1024], 'f16', 0x2000_0004n), gamma: t.gamma, out: t.out, rstd: t.rstd, eps: 1e-6 });
  assert.equal(host.launches[1]!.key, 'norm_forward.rms.f16.h1024.v2.t32.r8.pw');
});

test('layerNormBackward H=768 f16: staged warps, 8 a block, two blocks an SM, one partial a block, then the column sums', () => {
  const host = new RecordingHost();
  const [rows, H] = [16384, 768];
  const f = forwardTensors(rows, H, 'f16');
  ln.layerNormBackward(host, {
    dOut: deviceTensor([rows, H], 'f16'), x: f.x, gamma: f.gamma, mean: f.mean, rstd: f.rstd,
    dX: deviceTensor([rows, H], 'f16'), dGamma: deviceTensor([H], 'f16'), dBeta: deviceTensor([H], 'f16'),
    dResidual: deviceTensor([rows, H], 'f16'), accumulate: true,
  });
  assert.equal(host.launches.length, 2);
  const [rowsLaunch, sums] = host.launches as [typeof host.launches[0], typeof host.launches[0]];
  // x, dOut and dResidual rows (3 × 1536 bytes + 16) in 2 slots a warp: 8 × 2 × 4624 + gamma's 1536 bytes.
  assert.equal(rowsLaunch.key, 'norm_backward.layer.f16.h768.v8.t32.r8.pw.s2.b2.dres');
  assert.deepEqual(rowsLaunch.config.block, [32, 8]);
  assert.equal(rowsLaunch.config.sharedBytes, 1536 + 8 * 2 * 4624);
  assert.ok(2 * rowsLaunch.config.sharedBytes! <= ln.STAGED_BACKWARD_SHARED_BUDGET);
  assert.match(rowsLaunch.source, /#define KERNEL_BOUNDS __launch_bounds__\(256, 2\)/);
  assert.match(rowsLaunch.source, /cp\.async\.cg\.shared\.global/);
  // Two 8-warp blocks an SM: 2112 warps at most, 8 rows each → 2048 warps, 256 blocks.
  const grid = rowsLaunch.config.grid as number;
  assert.equal(grid, 256);
  assert.equal(grid, ln.backwardGridSize(ln.planNormBackward(new OpCheck('test', 'cuda'), 'layer', 'f16', H, true, [0x1000n]), rows, 132));
  assert.deepEqual(host.scratchRequests, [grid * 2 * H * 4]);
  // Both kernels are launched programmatically and wait for the kernel before them; the row kernel
  // triggers the column sums as it starts its fold, the column sums trigger their successor at once.
  assert.equal(rowsLaunch.gridDependencyWait, true);
  assert.equal(sums.gridDependencyWait, true);
  assert.match(sums.source, /GRID_DEPENDENCY_WAIT\(\);/);
  assert.match(rowsLaunch.source, /GRID_DEPENDENCY_WAIT\(\);[^]*GRID_DEPENDENCY_TRIGGER\(\);/);
  assert.equal(argValue(rowsLaunch, 7, 'ptr'), RecordingHost.SCRATCH);
  assert.equal(argValue(rowsLaunch, 8, 'i32'), rows);
  assert.equal(sums.key, 'norm_column_sums.layer.f16.h768.acc');
  // One block per 32 columns of each sum (dGamma, dBeta): 48 blocks at H = 768.
  assert.deepEqual(sums.config.grid, [H / 32, 2]);
  assert.deepEqual(sums.config.block, [32, 32]);
  assert.equal(argValue(sums, 1, 'i32'), grid);
});

test('staged backward: stages from the shared-memory budget; narrow vectors, f32 or too little shared memory use the row kernels', () => {
  const plan = new OpCheck('test', 'cuda');
  const aligned = [0x1000n];
  // One 16-warp block an SM with up to 4 slots a warp (the shape before session 12's sweep): as many as fit.
  const wide = { warps: 16, blocksPerSm: 1, maxStages: 4 };
  const stagesOf = (dtype: 'f16' | 'bf16', hidden: number, dResidual: boolean, budget?: number, shape: ln.StagedBackwardShape | null = wide) => {
    const spec = ln.planNormBackward(plan, 'layer', dtype, hidden, dResidual, aligned, budget, shape);
    return spec.persistent ? spec.stages : null;
  };
  assert.equal(stagesOf('bf16', 768, false), 4);
  assert.equal(stagesOf('bf16', 1024, false), 3);
  assert.equal(stagesOf('bf16', 1024, true), 2);
  // A GPU that lets a block have 99 KB: two slots a warp at H = 768, none at H = 1024.
  assert.equal(stagesOf('f16', 768, false, 99 * 1024), 2);
  assert.equal(stagesOf('f16', 1024, false, 99 * 1024), null);
  // The default (two 8-warp blocks an SM, 2 slots): 2 everywhere up to H = 1024 with dResidual (100.6 KB of 110),
  // also with 99 KB a block; with 64 KB a block, H = 1024 without dResidual (67.8 KB) no longer fits.
  for (const [hidden, dResidual] of [[768, false], [768, true], [1024, false], [1024, true]] as const) assert.equal(stagesOf('bf16', hidden, dResidual, undefined, null), 2);
  assert.equal(stagesOf('f16', 1024, true, 99 * 1024, null), 2);
  assert.equal(stagesOf('f16', 768, false, 64 * 1024, null), 2);
  assert.equal(stagesOf('f16', 1024, false, 64 * 1024, null), null);
  // H = 2048 would need 8 vectors a lane; H = 100 has 8-byte vectors; f32 keeps the row kernels.
  assert.equal(stagesOf('bf16', 2048, false), null);
  assert.equal(stagesOf('bf16', 100, false), null);
  assert.equal(ln.planNormBackward(plan, 'layer', 'f32', 768, false, aligned).persistent, undefined);
  assert.equal(ln.planNormBackward(plan, 'layer', 'f16', 768, false, [0x1008n]).persistent, undefined);
  for (const hidden of [768, 1000, 1024]) {
    for (const dResidual of [false, true]) {
      const spec = ln.planNormBackward(plan, 'layer', 'bf16', hidden, dResidual, aligned);
      assert.ok(ln.stagedSharedBytes(spec) <= ln.STAGED_BACKWARD_SHARED_BUDGET, `H ${hidden}`);
    }
  }
});

test('staged backward shape knob: FUSEFORMER_NORM_BACKWARD parses "warps,blocksPerSm,maxStages", splits the SM between blocks, refuses bad values by name', () => {
  assert.equal(ln.stagedBackwardShapeFromEnv(undefined), null);
  assert.deepEqual(ln.stagedBackwardShapeFromEnv('8, 2, 4'), { warps: 8, blocksPerSm: 2, maxStages: 4 });
  for (const bad of ['8,2', '0,1,4', '33,1,4', '8,2,1', '16,8,4', 'x,1,4']) {
    assert.throws(() => ln.stagedBackwardShapeFromEnv(bad), /FUSEFORMER_NORM_BACKWARD must be .*got "/, bad);
  }
  const plan = new OpCheck('test', 'cuda');
  const spec = ln.planNormBackward(plan, 'layer', 'bf16', 768, false, [0x1000n], undefined, { warps: 8, blocksPerSm: 2, maxStages: 8 });
  // Two blocks share the 220 KiB budget: 110 KiB a block, (110 KiB − 1536) / (8 × 3088) = 4 slots a warp.
  assert.equal(spec.rowsPerBlock, 8);
  assert.equal(spec.stages, 4);
  assert.ok(ln.stagedSharedBytes(spec) <= ln.STAGED_BACKWARD_SHARED_BUDGET / 2);
  assert.equal(ln.backwardMinBlocksPerSm(spec), 2);
  // 264 resident blocks of 8 warps: 7.8 rows a warp, rounded to 8, so 2048 warps = 256 blocks.
  assert.equal(ln.backwardGridSize(spec, 16384, 132), 256);
  assert.match(ln.normBackwardKey(spec), /\.pw\.s4\.b2$/);
  assert.match(ln.normBackwardSource(spec).source, /#define KERNEL_BOUNDS __launch_bounds__\(256, 2\)/);
  // One block an SM keeps the key without a .b suffix; the default is two 8-warp blocks with 2 slots.
  const single = ln.planNormBackward(plan, 'layer', 'bf16', 768, false, [0x1000n], undefined, { warps: 16, blocksPerSm: 1, maxStages: 4 });
  assert.equal(ln.normBackwardKey(single), 'norm_backward.layer.bf16.h768.v8.t32.r16.pw.s4');
  const base = ln.planNormBackward(plan, 'layer', 'bf16', 768, false, [0x1000n], undefined, null);
  assert.equal(ln.normBackwardKey(base), 'norm_backward.layer.bf16.h768.v8.t32.r8.pw.s2.b2');
});

test('layerNormBackward f32 H=768 keeps 96 threads a row, 5 rows a block, one wave of 2 × 132 blocks', () => {
  const host = new RecordingHost();
  const f = forwardTensors(16384, 768, 'f32');
  ln.layerNormBackward(host, { dOut: f.out, x: f.x, gamma: f.gamma, mean: f.mean, rstd: f.rstd, dX: f.out, dGamma: f.gamma, dBeta: f.beta });
  const l = host.launches[0]!;
  assert.equal(l.key, 'norm_backward.layer.f32.h768.v4.t96.r5');
  assert.match(l.source, /#define KERNEL_BOUNDS __launch_bounds__\(480, 2\)/);
  assert.equal(l.config.grid, 2 * 132);
});

test('rmsNormBackward H=4096: a block per row (512 threads × 1 vector), fewer blocks than SMs when rows are few', () => {
  const host = new RecordingHost();
  const [rows, H] = [64, 4096];
  ln.rmsNormBackward(host, {
    dOut: deviceTensor([rows, H], 'bf16'), x: deviceTensor([rows, H], 'bf16'), gamma: deviceTensor([H], 'bf16'), rstd: deviceTensor([rows], 'f32'),
    dX: deviceTensor([rows, H], 'bf16'), dGamma: deviceTensor([H], 'bf16'),
  });
  const [rowsLaunch, sums] = host.launches as [typeof host.launches[0], typeof host.launches[0]];
  assert.equal(rowsLaunch.key, 'norm_backward.rms.bf16.h4096.v8.t512.r1');
  assert.deepEqual(rowsLaunch.config.block, [512, 1]);
  assert.equal(rowsLaunch.config.grid, 64);
  assert.deepEqual(host.scratchRequests, [64 * 1 * H * 4]);
  assert.equal(sums.key, 'norm_column_sums.rms.bf16.h4096');
});

test('zero rows: nothing to normalise; the backward still zeroes dGamma/dBeta unless accumulating', () => {
  const host = new RecordingHost();
  ln.layerNormForward(host, forwardTensors(0, 768));
  assert.equal(host.launches.length, 0);
  const f = forwardTensors(0, 768);
  const args = { dOut: f.out, x: f.x, gamma: f.gamma, mean: f.mean, rstd: f.rstd, dX: f.out, dGamma: deviceTensor([768], 'f16'), dBeta: deviceTensor([768], 'f16') };
  ln.layerNormBackward(host, args);
  assert.equal(host.launches.length, 1);
  assert.equal(host.launches[0]!.key, 'norm_column_sums.layer.f16.h768');
  assert.equal(argValue(host.launches[0]!, 1, 'i32'), 0);
  ln.layerNormBackward(host, { ...args, accumulate: true });
  assert.equal(host.launches.length, 1);
});

test('launchers reject bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const f = forwardTensors(8, 768);
  const bad: [string, () => void, RegExp][] = [
    ['gamma shape', () => ln.layerNormForward(host, { ...f, gamma: deviceTensor([767], 'f16') }), /^layerNormForward: 'gamma' has shape \[767\]/],
    ['dtype mix', () => ln.layerNormForward(host, { ...f, out: deviceTensor([8, 768], 'bf16') }), /^layerNormForward: 'out' has dtype bf16/],
    ['mean dtype', () => ln.layerNormForward(host, { ...f, mean: deviceTensor([8], 'f16') }), /^layerNormForward: 'mean' has dtype f16 but expected f32/],
    ['rstd rows', () => ln.rmsNormForward(host, { x: f.x, gamma: f.gamma, out: f.out, rstd: deviceTensor([9], 'f32'), eps: 1e-6 }), /^rmsNormForward: 'rstd' has shape \[9\]/],
    ['negative eps', () => ln.layerNormForward(host, { ...f, eps: -1 }), /^layerNormForward: 'eps' must be a finite number >= 0/],
    ['integer x', () => ln.layerNormForward(host, { ...f, x: deviceTensor([8, 768], 'i32') }), /^layerNormForward: 'x' has dtype i32/],
    ['huge H', () => ln.layerNormForward(host, forwardTensors(1, 70000)), /^layerNormForward: hidden size 70000 is larger than the largest supported/],
    ['empty H', () => ln.rmsNormForward(host, { x: deviceTensor([8, 0], 'f16'), gamma: deviceTensor([0], 'f16'), out: deviceTensor([8, 0], 'f16'), rstd: f.rstd, eps: 1e-6 }), /^rmsNormForward: 'x' has an empty last dimension \(H = 0\)/],
    ['missing dBeta', () => ln.layerNormBackward(host, { dOut: f.out, x: f.x, gamma: f.gamma, mean: f.mean, rstd: f.rstd, dX: f.out, dGamma: f.gamma, dBeta: undefined as never }), /^layerNormBackward: argument 'dBeta' is required/],
    ['dResidual shape', () => ln.rmsNormBackward(host, { dOut: f.out, x: f.x, gamma: f.gamma, rstd: f.rstd, dX: f.out, dGamma: f.gamma, dResidual: deviceTensor([8, 767], 'f16') }), /^rmsNormBackward: 'dResidual' has shape \[8, 767\]/],
    ['dX rows', () => ln.layerNormBackward(host, { dOut: f.out, x: f.x, gamma: f.gamma, mean: f.mean, rstd: f.rstd, dX: deviceTensor([9, 768], 'f16'), dGamma: f.gamma, dBeta: f.beta }), /^layerNormBackward: 'dX' has shape \[9, 768\]/],
  ];
  for (const [what, call, message] of bad) {
    assert.throws(call, (e: unknown) => e instanceof FuseformerError && message.test(e.message), what);
  }
  assert.equal(host.launches.length, 0);
});
