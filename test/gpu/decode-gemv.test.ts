// The decode GEMV (kernels/gemv.ts, CudaBackend.decodeGemv) and programmatic dependent launch
// (runtime.programmaticLaunch) on the GPU:
//   - decode-step GEMMs with decodeGemv on against the CPU reference (src/testing/gemm-cases.ts
//     decodeGemmCases: fresh random inputs, poisoned outputs), each through the path it must take (the
//     kernel, or cuBLASLt for what the kernel leaves alone);
//   - the decode engine with both on, its step replayed as a CUDA graph and run eagerly, against the
//     same engine with both off: the same greedy tokens (f32) and close logits (bf16).
// Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { checkGemmCase, decodeGemmCases } from '../../src/testing/gemm-cases.js';
import { gatedLinearCases, normLinearCases } from '../../src/testing/infer-op-cases.js';
import { checkCase } from '../../src/testing/conformance.js';
import { freshSeed } from '../../src/testing/random.js';
import { writeModelFolder } from '../infer/hf-folder.js';
import { ENGINE_TEST_MODELS, ENGINE_TEST_PROMPTS, relError } from './engine-fixtures.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-gemv-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('decode GEMMs on the GEMV kernel match the CPU reference; the others still go to cuBLASLt', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  gpu.decodeGemv = true;
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const c of decodeGemmCases()) {
    await t.test(`${c.name} → ${c.gemv ? 'GEMV kernel' : 'cuBLASLt'}`, () => {
      const before = gpu.gemvLaunches;
      const result = checkGemmCase(c, gpu, cpu, seed);
      assert.ok(result.ok, result.details.join('\n'));
      assert.equal(gpu.gemvLaunches > before, c.gemv, c.gemv ? 'the GEMV kernel ran' : 'left to cuBLASLt');
    });
  }
});

test('gatedLinear on the gated GEMV (1–4 rows) and on its cuBLASLt fallback matches the CPU reference', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  gpu.decodeGemv = true;
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const dtype of ['f32', 'f16', 'bf16'] as FloatDType[]) {
    for (const c of gatedLinearCases(dtype)) {
      await t.test(c.name, () => {
        const before = gpu.gemvLaunches;
        const failed = checkCase(c, gpu, cpu, seed).checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
        assert.deepEqual(failed, [], failed.join('\n'));
        const rows = Number(/rows=(\d+)/.exec(c.name)![1]), K = Number(/K=(\d+)/.exec(c.name)![1]);
        assert.equal(gpu.gemvLaunches > before, rows <= 4 && K % (dtype === 'f32' ? 4 : 8) === 0, 'the gated GEMV ran where it applies');
      });
    }
  }
});

test('normLinear on the GEMV with the norm in its prologue (1–4 rows) and on its fallback matches the CPU reference: x, h and the product', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create(), cpu = new CpuBackend();
  gpu.decodeGemv = true;
  gpu.normGemv = true;
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const dtype of ['f32', 'f16', 'bf16'] as FloatDType[]) {
    for (const c of normLinearCases(dtype)) {
      await t.test(c.name, () => {
        const before = gpu.normGemvLaunches;
        // Twice: the counter the last block resets must be zero again for the second launch.
        for (let run = 0; run < 2; run++) {
          const failed = checkCase(c, gpu, cpu, seed + run).checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
          assert.deepEqual(failed, [], failed.join('\n'));
        }
        const rows = Number(/rows=(\d+)/.exec(c.name)![1]), H = Number(/H=(\d+)/.exec(c.name)![1]);
        const fits = rows <= 4 && rows * H * (dtype === 'f32' ? 4 : 2) <= 40 * 1024;
        assert.equal(gpu.normGemvLaunches - before, fits ? 2 : 0, 'the fused kernel ran where it applies');
      });
    }
  }
});

for (const m of ENGINE_TEST_MODELS) {
  test(`${m.name}: the decode engine with the GEMV kernel and programmatic launches equals it without`, { skip }, async () => {
    const { CudaBackend } = await import('../../src/backend/cuda/index.js');
    const gpu = CudaBackend.create();
    const dir = join(root, m.name);
    writeModelFolder(dir, m.family, m.config, 5);
    const setMode = (on: boolean) => {
      gpu.decodeGemv = on;
      gpu.normGemv = on;
      gpu.runtime.programmaticLaunch = on;
    };
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      const model = loadDecoderModel(dir, gpu, { dtype }).model;
      try {
        const logitsOf = (on: boolean) => {
          setMode(on);
          const engine = new DecodeEngine(model, { maxBatch: 3, maxLen: 64 });
          // Decode-sized rows: the last prompt token of each sequence goes through the GEMV kernel.
          const out = engine.promptLogits([7]);
          engine.dispose();
          return out;
        };
        const reference = logitsOf(false), launchesBefore = gpu.gemvLaunches, ours = logitsOf(true);
        assert.ok(gpu.gemvLaunches > launchesBefore, 'the one-row prompt ran on the GEMV kernel');
        const error = relError(ours, reference);
        assert.ok(error <= (dtype === 'f32' ? 1e-5 : 1e-2), `${dtype} logits rel err ${error}`);
        if (dtype === 'f32') {
          const run = (on: boolean, graphs: boolean) => {
            setMode(on);
            return generateBatch(model, ENGINE_TEST_PROMPTS, { maxNewTokens: 32, stopTokenIds: [], temperature: 0, engineOptions: { graphs }, syncEvery: 7 });
          };
          const expected = await run(false, true);
          for (const graphs of [true, false]) assert.deepEqual(await run(true, graphs), expected, `graphs ${graphs}`);
        }
      } finally {
        setMode(false);
        model.free();
      }
    }
  });
}
