// An f32 y beside 16-bit x (the f32 accumulator a fused MLP leaves) on CUDA, without a GPU: the residual
// norm's and the GEMV norm prologue's keys and sources (y read as float through load_y, in loads of at most
// 16 bytes), the vector width kept aligned for y, and the generated kernels compiled with nvcc for sm_90.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { launchNormGemv, normGemvApplies, normPrologueOptions, normSwitchesKey, prologueNorm } from '../../../../src/backend/cuda/kernels/gemv.js';
import { planResidualNorm, residualNorm, residualNormKey } from '../../../../src/backend/cuda/kernels/residual-norm.js';
import { OpCheck } from '../../../../src/backend/validate.js';
import type { DType } from '../../../../src/dtype.js';
import { checkedGemm, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

const nvcc = findNvcc();

/** A residual norm's arguments: x, gamma, beta, out in `dtype`, y in `yDType` (at `yPtr` when given), bias with LayerNorm. */
function normArgs(rows: number, H: number, norm: 'layer' | 'rms', dtype: DType, yDType: DType, yPtr?: bigint) {
  return {
    x: deviceTensor([rows, H], dtype), y: deviceTensor([rows, H], yDType, yPtr), gamma: deviceTensor([H], dtype), out: deviceTensor([rows, H], dtype),
    norm, eps: 1e-5, ...(norm === 'layer' ? { bias: deviceTensor([H], dtype), beta: deviceTensor([H], dtype) } : {}),
  };
}

test('residualNorm with an f32 y beside bf16 x: ".yf32" in the key, Y = float loaded in 16-byte pieces; same-dtype keys unchanged', () => {
  const host = new RecordingHost();
  residualNorm(host, normArgs(3, 768, 'layer', 'bf16', 'f32'));
  residualNorm(host, normArgs(1, 2048, 'rms', 'bf16', 'f32'));
  residualNorm(host, normArgs(3, 768, 'layer', 'bf16', 'bf16'));
  residualNorm(host, normArgs(3, 768, 'layer', 'f32', 'f32'));
  assert.deepEqual(host.launches.map((l) => l.key), [
    'residual_norm.layer.bf16.h768.v8.t32.r4.res.bias.yf32',
    'residual_norm.rms.bf16.h2048.v8.t128.r1.res.yf32',
    'residual_norm.layer.bf16.h768.v8.t32.r4.res.bias',
    'residual_norm.layer.f32.h768.v4.t32.r4.res.bias',
  ]);
  const [f32Y, , sameDType, f32X] = host.launches;
  assert.match(f32Y!.source, /typedef float Y;/);
  assert.match(f32Y!.source, /const Y\* __restrict__ y/);
  assert.match(f32Y!.source, /load_y\(y \+ \(size_t\)row \* H \+ col, w\);/);
  // A 16-bit x's vector of 8 is 32 bytes of f32 y: load_y splits it into loads of 16 / sizeof(Y) elements.
  assert.match(f32Y!.source, /constexpr int P = N \* sizeof\(Y\) > 16 \? 16 \/ sizeof\(Y\) : N;/);
  assert.match(sameDType!.source, /typedef T Y;/);
  assert.match(f32X!.source, /typedef T Y;/, 'f32 x: y is f32 as x is, no special case');
});

test('residualNorm with an f32 y: the vector width keeps y\'s loads aligned (pieces of min(vec, 4) floats)', () => {
  const c = new OpCheck('test', 'cuda');
  // y 16-byte aligned: the 16-bit width (8) stands, read as two 16-byte pieces.
  assert.equal(planResidualNorm(c, 'layer', 'bf16', 768, true, true, [0n], 0x1000_0010n).vec, 8);
  // y 8-byte aligned only: pieces of 2 floats (8 bytes), so vectors of 2, though x alone would allow 8.
  assert.equal(planResidualNorm(c, 'layer', 'bf16', 768, true, true, [0n], 0x1000_0008n).vec, 2);
  assert.equal(planResidualNorm(c, 'layer', 'bf16', 768, true, true, [0n]).vec, 8, 'no f32 y: unchanged');
  const host = new RecordingHost();
  residualNorm(host, normArgs(2, 768, 'rms', 'bf16', 'f32', 0x2000_0008n));
  assert.equal(host.launches[0]!.key, residualNormKey({ ...planResidualNorm(c, 'rms', 'bf16', 768, true, false, [0n], 8n) }));
  assert.match(host.launches[0]!.key, /\.v2\.t32\.r4\.res\.yf32$/);
});

test('the GEMV norm prologue with an f32 y beside 16-bit x: prologueNorm sets yF32, "_yf32" in the key only then, y a const Y*', () => {
  const t = (shape: number[], dtype: DType = 'bf16') => deviceTensor(shape, dtype);
  const norm = { x: t([1, 768]), y: t([1, 768], 'f32'), bias: t([768]), gamma: t([768]), beta: t([768]), out: t([1, 768]), norm: 'layer' as const, eps: 1e-5, rows: 1, H: 768 };
  assert.equal(prologueNorm('bf16', norm, 768).yF32, true);
  assert.equal(prologueNorm('int8', norm, 768).yF32, true);
  assert.equal(prologueNorm('bf16', { ...norm, y: t([1, 768]) }, 768).yF32, undefined, 'y in x\'s dtype');
  assert.equal(prologueNorm('bf16', { ...norm, x: t([1, 768], 'f32'), y: t([1, 768], 'f32') }, 768).yF32, undefined, 'f32 x');
  assert.equal(normSwitchesKey({ kind: 'rms', residual: true, bias: false }), '_res', 'keys without yF32 unchanged');
  assert.equal(normSwitchesKey({ kind: 'rms', residual: true, bias: false, yF32: true }), '_res_yf32');
  assert.ok(normGemvApplies(norm), 'an f32 y takes the fused kernel (16-byte aligned)');
  const host = new RecordingHost();
  launchNormGemv(host, norm, { kind: 'gemm', checked: checkedGemm({ M: 1, N: 2304, K: 768, epilogue: 'bias' }, {}, { bias: true }) });
  launchNormGemv(host, { ...norm, rows: 4, x: t([4, 768]), y: t([4, 768], 'f32'), out: t([4, 768]) }, { kind: 'gemm', checked: checkedGemm({ M: 4, N: 2304, K: 768, epilogue: 'bias' }, {}, { bias: true }) });
  for (const launch of host.launches) {
    assert.match(launch.key, /\.norm_layer_res_bias.*_yf32$/);
    assert.match(launch.source, /typedef float Y;/);
    assert.match(launch.source, /T\* x, const Y\* __restrict__ y, const T\* __restrict__ rbias/);
    assert.match(launch.source, /load_y\(y \+ \(size_t\)m \* K \+ k, w\);/);
  }
});

test('the kernels an f32 y takes compile with nvcc for sm_90: residual norms (warp and block per row, 2-wide vectors) and bf16 GEMVs with the norm prologue (late and early writes)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 10 * 60_000 }, async () => {
  const host = new RecordingHost();
  residualNorm(host, normArgs(3, 768, 'layer', 'bf16', 'f32'));
  residualNorm(host, normArgs(1, 2048, 'rms', 'bf16', 'f32'));
  residualNorm(host, normArgs(2, 1024, 'rms', 'f16', 'f32', 0x2000_0008n));
  const t = (shape: number[], dtype: DType = 'bf16') => deviceTensor(shape, dtype);
  const layer = { x: t([1, 768]), y: t([1, 768], 'f32'), bias: t([768]), gamma: t([768]), beta: t([768]), out: t([1, 768]), norm: 'layer' as const, eps: 1e-5, rows: 1, H: 768 };
  launchNormGemv(host, layer, { kind: 'gemm', checked: checkedGemm({ M: 1, N: 2304, K: 768, epilogue: 'bias' }, {}, { bias: true }) });
  // Two rows at K 2048 (M·NV = 2): FUSEFORMER_NORM_WRITE=early keeps v in registers and writes x and h from the prologue.
  const rms = { x: t([2, 2048]), y: t([2, 2048], 'f32'), gamma: t([2048]), out: t([2, 2048]), norm: 'rms' as const, eps: 1e-5, rows: 2, H: 2048 };
  const saved = normPrologueOptions.write;
  try {
    normPrologueOptions.write = 'early';
    launchNormGemv(host, rms, { kind: 'gemm', checked: checkedGemm({ M: 2, N: 3072, K: 2048 }) });
  } finally {
    normPrologueOptions.write = saved;
  }
  assert.deepEqual(host.launches.map((l) => /yf32$/.test(l.key)), [true, true, true, true, true]);
  assert.match(host.launches[4]!.key, /_we_yf32$/);
  const sources = host.launches.map((l) => ({ name: l.name, source: l.source, gridDependencyWait: l.gridDependencyWait }));
  const failures = await compileAll(nvcc!, sources, 4);
  assert.deepEqual(failures, [], failures.join('\n\n'));
});
