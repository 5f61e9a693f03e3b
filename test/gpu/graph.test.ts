// A sequence of fused ops captured once into a CUDA graph and replayed on new inputs gives what the
// CPU reference computes for those inputs (the CPU backend's captureGraph records ops the same way).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import { compareArrays, describe, TOLERANCE } from '../../src/testing/compare.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import type { Tensor } from '../../src/tensor.js';
import './report-as-you-go.js';

const skip = gpuSkip();

const ROWS = 300, H = 1024;

/** x → LayerNorm → + bias, dropout, + residual(x) → output; returns the tensors and the captured graph. */
function buildStep(b: Backend): { x: Tensor; gamma: Tensor; beta: Tensor; bias: Tensor; out: Tensor; mask: Tensor; replay: () => void } {
  const x = b.empty([ROWS, H], 'bf16'), gamma = b.empty([H], 'bf16'), beta = b.empty([H], 'bf16'), bias = b.empty([H], 'bf16');
  const normed = b.empty([ROWS, H], 'bf16'), mean = b.empty([ROWS], 'f32'), rstd = b.empty([ROWS], 'f32');
  const out = b.empty([ROWS, H], 'bf16'), mask = b.empty([ROWS, H], 'u8');
  const graph = b.captureGraph(() => {
    b.layerNormForward({ x, gamma, beta, out: normed, mean, rstd, eps: 1e-5 });
    b.biasDropoutResidual({ input: normed, bias, residual: x, out, mask, p: 0.1, seed: 99n, offset: 4n });
  });
  return { x, gamma, beta, bias, out, mask, replay: () => graph.replay() };
}

test('a captured CUDA graph replays on new inputs like the CPU reference', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const onGpu = buildStep(gpu), onCpu = buildStep(cpu);
  const rng = new Rng(freshSeed());
  for (let round = 0; round < 3; round++) {
    const inputs = { x: rng.floats(ROWS * H, 2), gamma: rng.floats(H, 0.3, 1), beta: rng.floats(H), bias: rng.floats(H) };
    for (const step of [onGpu, onCpu]) {
      const b = step === onGpu ? gpu : cpu;
      b.upload(step.x, inputs.x); b.upload(step.gamma, inputs.gamma); b.upload(step.beta, inputs.beta); b.upload(step.bias, inputs.bias);
      b.fill(step.out, NaN);
      step.replay();
    }
    gpu.synchronize();
    const got = gpu.download(onGpu.out), expected = cpu.download(onCpu.out);
    const cmp = compareArrays(got, expected);
    assert.equal(cmp.unwritten, 0, `round ${round}: ${describe(cmp, got, expected)}`);
    assert.ok(cmp.relativeError <= TOLERANCE.bf16, `round ${round}: ${describe(cmp, got, expected)}`);
    assert.deepEqual(gpu.download(onGpu.mask), cpu.download(onCpu.mask), `round ${round}: dropout masks differ`);
  }
});

test('bad input to a CUDA op names the op and the problem', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const x = gpu.empty([4, 8], 'f32'), gamma = gpu.empty([8], 'f32'), beta = gpu.empty([8], 'f32');
  const mean = gpu.empty([4], 'f32'), rstd = gpu.empty([4], 'f32');
  const ln = (over: Partial<Parameters<Backend['layerNormForward']>[0]>) => () => gpu.layerNormForward({ x, gamma, beta, out: x, mean, rstd, eps: 1e-5, ...over });
  assert.throws(ln({ gamma: gpu.empty([7], 'f32') }), /layerNormForward: 'gamma' has shape \[7\]/);
  assert.throws(ln({ beta: gpu.empty([8], 'f16') }), /layerNormForward: .*dtype/);
  assert.throws(ln({ gamma: cpu.empty([8], 'f32') }), /layerNormForward: 'gamma' is a cpu tensor/);
  assert.throws(() => gpu.download(cpu.empty([2], 'f32')), /download: expected a cuda tensor/);
  const { CudaTensor } = await import('../../src/backend/cuda/runtime/tensor.js');
  const transposed = new CudaTensor(x.ptr, [4, 8], 'f32', null, [1, 4]);
  assert.throws(ln({ x: transposed }), /layerNormForward: 'x' is a non-contiguous view/);
});
