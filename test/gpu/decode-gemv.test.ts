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
import type { TestContext } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { headNormOptions } from '../../src/infer/forward.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import { accumulateGemmCases, checkGemmCase, decodeGemmCases, loopGemmCases, mmaGemmCases } from '../../src/testing/gemm-cases.js';
import { gatedLinearCases, MMA_GATED_LINEAR_SHAPES, normLinearCases } from '../../src/testing/infer-op-cases.js';
import { caseFailures, casesSelectedByEnv, testShardFromEnv } from '../../src/testing/conformance.js';
import { freshSeed } from '../../src/testing/random.js';
import { writeModelFolder } from '../infer/hf-folder.js';
import { prefillAndStepLogits } from '../infer/forward-forms.js';
import { ENGINE_TEST_MODELS, ENGINE_TEST_PROMPTS, relError } from './engine-fixtures.js';
import './report-as-you-go.js';

const skip = gpuSkip();
// casesSelectedByEnv (conformance.ts): the op cases FUSEFORMER_TEST_OPS names, split n ways by FUSEFORMER_TEST_SHARD=i/n;
// the model tests run in shard 0 only.
const shard = testShardFromEnv();
const sharded = <C extends { name: string }>(cases: C[]): C[] => casesSelectedByEnv(cases).cases;
const modelSkip = skip || (shard && shard.index > 0 ? `FUSEFORMER_TEST_SHARD=${shard.index}/${shard.count}: the model tests run in shard 0` : false);
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-gemv-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** A CUDA backend with the given switches on, the CPU reference, and a fresh seed (reported). */
async function backends(t: TestContext, on: { decodeGemv?: boolean; normGemv?: boolean; mmaGemv?: boolean; skinnyGemm?: boolean; streamGemm?: boolean }) {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  // The streamed GEMM (on by default) takes 5–32-row products before the mma GEMV and the skinny GEMM:
  // off unless it is the kernel under test.
  Object.assign(gpu, { streamGemm: false }, on);
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  return { gpu, cpu, seed };
}

test('decode GEMMs on the GEMV kernel match the CPU reference; the others still go to cuBLASLt', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true });
  for (const c of sharded(decodeGemmCases())) {
    await t.test(`${c.name} → ${c.gemv ? 'GEMV kernel' : 'cuBLASLt'}`, () => {
      const before = gpu.gemvLaunches;
      const result = checkGemmCase(c, gpu, cpu, seed);
      assert.ok(result.ok, result.details.join('\n'));
      assert.equal(gpu.gemvLaunches > before, c.gemv, c.gemv ? 'the GEMV kernel ran' : 'left to cuBLASLt');
    });
  }
});

test('batched-decode GEMMs on the mma GEMV (5–64 rows) match the CPU reference; the others go to cuBLASLt', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, mmaGemv: true });
  for (const c of sharded(mmaGemmCases())) {
    await t.test(`${c.name} → ${c.mma ? 'mma GEMV' : 'cuBLASLt'}`, () => {
      const before = gpu.mmaGemvLaunches;
      const result = checkGemmCase(c, gpu, cpu, seed);
      assert.ok(result.ok, result.details.join('\n'));
      assert.equal(gpu.mmaGemvLaunches > before, c.mma, c.mma ? 'the mma GEMV ran' : 'left to cuBLASLt');
    });
  }
});

test('gatedLinear on the gated mma GEMV (5–32 rows) and on its fallback (GEMM + gatedActivation) matches the CPU reference', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, mmaGemv: true });
  for (const dtype of ['f16', 'bf16'] as FloatDType[]) {
    for (const c of sharded(gatedLinearCases(dtype, MMA_GATED_LINEAR_SHAPES))) {
      await t.test(c.name, () => {
        const before = gpu.mmaGemvLaunches;
        const failed = caseFailures(c, gpu, cpu, seed);
        assert.deepEqual(failed, [], failed.join('\n'));
        const rows = Number(/rows=(\d+)/.exec(c.name)![1]), K = Number(/K=(\d+)/.exec(c.name)![1]);
        // ≤ 32 rows: the gated kernel; 33–64: the fallback's plain GEMM (cuBLASLt's place) is itself an mma GEMV.
        assert.equal(gpu.mmaGemvLaunches > before, rows <= 64 && K % 32 === 0, 'an mma GEMV ran where one applies');
      });
    }
  }
});

test('batched-decode GEMMs on the skinny GEMM (5–64 rows) match the CPU reference; the others go to cuBLASLt', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, skinnyGemm: true });
  for (const c of sharded(mmaGemmCases())) {
    // The mma GEMV's cases: the skinny GEMM takes what it takes, and also K = 264 (a multiple of 8, not of 32).
    const skinnyTakes = c.mma || (c.dtype !== 'f32' && c.K === 264);
    await t.test(`${c.name} → ${skinnyTakes ? 'skinny GEMM' : 'cuBLASLt'}`, () => {
      for (let run = 0; run < 2; run++) {  // twice: the split-K counters must be back at zero after each launch
        const before = gpu.skinnyGemmLaunches;
        const result = checkGemmCase(c, gpu, cpu, seed + run);
        assert.ok(result.ok, result.details.join('\n'));
        assert.equal(gpu.skinnyGemmLaunches > before, skinnyTakes, skinnyTakes ? 'the skinny GEMM ran' : 'left to cuBLASLt');
      }
    });
  }
});

test('gatedLinear on the gated skinny GEMM (5–64 rows) matches the CPU reference', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, skinnyGemm: true });
  for (const dtype of ['f16', 'bf16'] as FloatDType[]) {
    for (const c of sharded(gatedLinearCases(dtype, [...MMA_GATED_LINEAR_SHAPES, [64, 2048, 1024, 'silu', false], [48, 264, 100, 'gelu_tanh', true]]))) {
      await t.test(c.name, () => {
        const before = gpu.skinnyGemmLaunches;
        const failed = caseFailures(c, gpu, cpu, seed);
        assert.deepEqual(failed, [], failed.join('\n'));
        const K = Number(/K=(\d+)/.exec(c.name)![1]);
        assert.equal(gpu.skinnyGemmLaunches > before, K % 8 === 0, 'the skinny GEMM ran where it applies');
      });
    }
  }
});

test('batched-decode GEMMs on the streamed skinny GEMM (5–32 rows, K a multiple of 64) match the CPU reference; the others go to cuBLASLt', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, streamGemm: true });
  for (const c of sharded(mmaGemmCases())) {
    const streamTakes = c.mma && c.K % 64 === 0 && c.M <= 32;
    await t.test(`${c.name} → ${streamTakes ? 'streamed GEMM' : 'cuBLASLt'}`, () => {
      for (let run = 0; run < 2; run++) {  // twice: the mbarrier ring starts afresh every launch
        const before = gpu.streamGemmLaunches;
        const result = checkGemmCase(c, gpu, cpu, seed + run);
        assert.ok(result.ok, result.details.join('\n'));
        assert.equal(gpu.streamGemmLaunches > before, streamTakes, streamTakes ? 'the streamed GEMM ran' : 'left to cuBLASLt');
      }
    });
  }
});

test('gatedLinear on the gated streamed skinny GEMM (5–32 rows) matches the CPU reference', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, streamGemm: true });
  for (const dtype of ['f16', 'bf16'] as FloatDType[]) {
    for (const c of sharded(gatedLinearCases(dtype, [...MMA_GATED_LINEAR_SHAPES, [24, 2048, 1024, 'silu', false], [48, 320, 100, 'gelu_tanh', true]]))) {
      await t.test(c.name, () => {
        const before = gpu.streamGemmLaunches;
        const failed = caseFailures(c, gpu, cpu, seed);
        assert.deepEqual(failed, [], failed.join('\n'));
        const rows = Number(/rows=(\d+)/.exec(c.name)![1]), K = Number(/K=(\d+)/.exec(c.name)![1]);
        assert.equal(gpu.streamGemmLaunches > before, K % 64 === 0 && rows <= 32, 'the streamed GEMM ran where it applies');
      });
    }
  }
});

test('GEMMs adding into out (beta = 1) on the streamed GEMM at 5–32 rows match the CPU reference', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, streamGemm: true });
  for (const c of sharded(accumulateGemmCases())) {
    await t.test(`${c.name} → ${c.stream ? 'streamed GEMM' : 'cuBLASLt'}`, () => {
      for (let run = 0; run < 2; run++) {
        const before = gpu.streamGemmLaunches;
        const result = checkGemmCase(c, gpu, cpu, seed + run);
        assert.ok(result.ok, result.details.join('\n'));
        assert.equal(gpu.streamGemmLaunches > before, c.stream, c.stream ? 'the streamed GEMM ran' : 'left to cuBLASLt');
      }
    });
  }
});

test('gatedLinear on the gated GEMV (1–4 rows) and on its cuBLASLt fallback matches the CPU reference', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true });
  for (const dtype of ['f32', 'f16', 'bf16'] as FloatDType[]) {
    for (const c of sharded(gatedLinearCases(dtype))) {
      await t.test(c.name, () => {
        const before = gpu.gemvLaunches;
        const failed = caseFailures(c, gpu, cpu, seed);
        assert.deepEqual(failed, [], failed.join('\n'));
        const rows = Number(/rows=(\d+)/.exec(c.name)![1]), K = Number(/K=(\d+)/.exec(c.name)![1]);
        assert.equal(gpu.gemvLaunches > before, rows <= 4 && K % (dtype === 'f32' ? 4 : 8) === 0, 'the gated GEMV ran where it applies');
      });
    }
  }
});

test('normLinear on the GEMV with the norm in its prologue (1–4 rows) and on its fallback matches the CPU reference: x, h and the product', { skip }, async (t) => {
  const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, normGemv: true });
  for (const dtype of ['f32', 'f16', 'bf16'] as FloatDType[]) {
    for (const c of sharded(normLinearCases(dtype))) {
      await t.test(c.name, () => {
        const before = gpu.normGemvLaunches;
        // Twice: the counter the last block resets must be zero again for the second launch.
        for (let run = 0; run < 2; run++) {
          const failed = caseFailures(c, gpu, cpu, seed + run);
          assert.deepEqual(failed, [], failed.join('\n'));
        }
        const rows = Number(/rows=(\d+)/.exec(c.name)![1]), H = Number(/H=(\d+)/.exec(c.name)![1]);
        const fits = rows <= 4 && rows * H * (dtype === 'f32' ? 4 : 2) <= 40 * 1024;
        assert.equal(gpu.normGemvLaunches - before, fits ? 2 : 0, 'the fused kernel ran where it applies');
      });
    }
  }
});

// The looping form (GemvSpec.loop, FUSEFORMER_GEMV_LOOP; the gated GEMV by default): every family on, so each grid past
// the resident blocks (two an SM) loops over its tiles — the GPT-2 LM head's GEMM, Llama's gated product with
// its norm, a LayerNorm into a 50257-wide product, a 4-row product — against the CPU reference; each
// norm case twice (the prologue's counter back at zero), and each case asserted to have looped.
test('the looping GEMV (grids past the resident blocks loop over their tiles) matches the CPU reference: GEMMs, gated, norm prologue', { skip }, async (t) => {
  const { gemvLoopStats, gemvPlanOptions } = await import('../../src/backend/cuda/kernels/gemv.js');
  const { WEIGHT_LOAD_FAMILIES } = await import('../../src/backend/cuda/kernels/weight-stream.js');
  const saved = gemvPlanOptions.loop;
  gemvPlanOptions.loop = new Set(WEIGHT_LOAD_FAMILIES);
  try {
    const { gpu, cpu, seed } = await backends(t, { decodeGemv: true, normGemv: true });
    const looped = async (name: string, run: () => void) => {
      await t.test(name, () => {
        const before = gemvLoopStats.launches;
        run();
        assert.ok(gemvLoopStats.launches > before, 'the looping form ran');
      });
    };
    for (const dtype of ['bf16', 'f16', 'f32'] as FloatDType[]) {
      for (const c of sharded(loopGemmCases().filter((x) => x.dtype === dtype))) {
        await looped(`${c.name} (looped)`, () => {
          const result = checkGemmCase(c, gpu, cpu, seed);
          assert.ok(result.ok, result.details.join('\n'));
        });
      }
      for (const c of sharded(gatedLinearCases(dtype, [[1, 2048, 8192, 'silu', false], [3, 768, 12000, 'gelu_tanh', true]]))) {
        await looped(`${c.name} (looped)`, () => {
          const failed = caseFailures(c, gpu, cpu, seed);
          assert.deepEqual(failed, [], failed.join('\n'));
        });
      }
      const norms = [[1, 2048, 'rms', true, false, { F: 8192, activation: 'silu' }], [2, 768, 'layer', true, true, { N: 50257, epilogue: 'none' }]] as const;
      for (const c of sharded(normLinearCases(dtype, norms))) {
        await looped(`${c.name} (looped)`, () => {
          for (let run = 0; run < 2; run++) {
            const failed = caseFailures(c, gpu, cpu, seed + run);
            assert.deepEqual(failed, [], failed.join('\n'));
          }
        });
      }
    }
  } finally {
    gemvPlanOptions.loop = saved;
  }
});

for (const m of ENGINE_TEST_MODELS) {
  test(`${m.name}: the decode engine with the GEMV kernel and programmatic launches equals it without`, { skip: modelSkip }, async () => {
    const gpu = await createGpuBackend();
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

for (const m of ENGINE_TEST_MODELS) {
  for (const [kernel, on, launches] of [['mma GEMV', 'mmaGemv', 'mmaGemvLaunches'], ['skinny GEMM', 'skinnyGemm', 'skinnyGemmLaunches'], ['streamed GEMM', 'streamGemm', 'streamGemmLaunches']] as const) {
    test(`${m.name}: prefill and batched decode rows on the ${kernel} give cuBLASLt's logits (bf16)`, { skip: modelSkip }, async () => {
      const gpu = await createGpuBackend();
      // The streamed GEMM (on by default) takes 5–32-row products before the other two kernels.
      if (on !== 'streamGemm') gpu.streamGemm = false;
      const dir = join(root, `${m.name}-${on}`);
      writeModelFolder(dir, m.family, m.config, 8);
      const model = loadDecoderModel(dir, gpu, { dtype: 'bf16' }).model;
      try {
        // A 20-token prompt: every GEMM of the prefill has 20 rows (the LM head only the last row's).
        const prompt = Array.from({ length: 20 }, (_, i) => (i * 37 + 11) % 200);
        const logitsOf = (use: boolean) => {
          gpu[on] = use;
          const engine = new DecodeEngine(model, { maxBatch: 3, maxLen: 64 });
          const out = engine.promptLogits(prompt);
          engine.dispose();
          return out;
        };
        const reference = logitsOf(false), before = gpu[launches], ours = logitsOf(true);
        assert.ok(gpu[launches] > before, `the prefill ran on the ${kernel}`);
        const error = relError(ours, reference);
        assert.ok(error <= 1e-2, `bf16 logits rel err ${error}`);
        // Twelve sequences decoding together, graphs replayed: 12-row decode steps on the kernel.
        const prompts = Array.from({ length: 12 }, (_, i) => [3 + i, 40 + 2 * i, 7]);
        const started = gpu[launches];
        gpu[on] = true;
        const tokens = await generateBatch(model, prompts, { maxNewTokens: 8, stopTokenIds: [], temperature: 0, engineOptions: { graphs: true } });
        assert.ok(gpu[launches] > started, `the decode steps ran on the ${kernel}`);
        assert.deepEqual(tokens.map((t) => t.length), prompts.map(() => 8));
      } finally {
        gpu[on] = false;
        model.free();
      }
    });
  }
}

for (const projected of [false, true]) {
test(`gpt2: the fused MLP (one normMlp kernel a layer, 1–4 rows)${projected ? ' with the O projection in the attention kernel' : ''} gives the usual form's logits and greedy tokens`, { skip: modelSkip }, async () => {
  const gpu = await createGpuBackend();
  const saved = { on: gpu.fusedMlp, minRows: gpu.fusedMlpMinRows, projection: gpu.fusedAttentionProjection };
  gpu.fusedAttentionProjection = projected;
  gpu.fusedMlpMinRows = 1;
  const m = ENGINE_TEST_MODELS.find((x) => x.family === 'gpt2')!;
  const dir = join(root, `gpt2-fused-mlp-${projected}`);
  writeModelFolder(dir, m.family, m.config, 10);
  try {
    for (const dtype of ['f32', 'bf16'] as const) {
      const model = loadDecoderModel(dir, gpu, { dtype }).model;
      try {
        // A one-token prompt: its prefill is a one-row forward, so it takes the fused MLP where the switch is on.
        const logitsOf = (on: boolean, of = model) => {
          gpu.fusedMlp = on;
          const engine = new DecodeEngine(of, { maxBatch: 3, maxLen: 64 });
          const out = engine.promptLogits([7]);
          engine.dispose();
          return out;
        };
        const cpuModel = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
        const exact = logitsOf(false, cpuModel);
        cpuModel.free();
        const usual = logitsOf(false), before = gpu.mlpGemvLaunches, ours = logitsOf(true);
        assert.ok(gpu.mlpGemvLaunches > before, 'the one-row prefill ran the fused MLP');
        const usualError = relError(usual, exact), ourError = relError(ours, exact);
        assert.ok(ourError <= (dtype === 'f32' ? 1e-5 : 1.25 * usualError + 2e-3), `${dtype} logits rel err against f32: ${ourError} (the usual form ${usualError})`);
        // Three sequences (3-row steps, then fewer as they finish), graphs replayed and eager.
        const prompts = [[3, 40, 7], [5, 9], [11, 12, 13, 14]];
        const decode = (on: boolean, graphs: boolean) => {
          gpu.fusedMlp = on;
          return generateBatch(model, prompts, { maxNewTokens: 9, stopTokenIds: [], temperature: 0, engineOptions: { graphs } });
        };
        const { decodeAttentionLaunches } = await import('../../src/backend/cuda/kernels/decode-attention.js');
        const started = gpu.mlpGemvLaunches, projections = decodeAttentionLaunches.projected, replayed = await decode(true, true);
        assert.ok(gpu.mlpGemvLaunches > started, 'the decode steps ran the fused MLP');
        assert.equal(decodeAttentionLaunches.projected > projections, projected, 'the attention kernel projected exactly when asked');
        // The atomics' f32 order varies from run to run: tokens are compared where that cannot flip a bf16 rounding.
        if (dtype === 'f32') {
          assert.deepEqual(replayed, await decode(false, true), 'f32: the usual form\'s tokens');
          assert.deepEqual(await decode(true, false), replayed, 'f32: eager = replayed');
          // The default rows (fused from FUSED_MLP_MIN_ROWS_DEFAULT): steps of both forms follow each other as sequences finish.
          gpu.fusedMlpMinRows = saved.minRows;
          assert.deepEqual(await decode(true, true), replayed, 'f32: fused from the default rows, usual below');
          gpu.fusedMlpMinRows = 1;
        } else {
          assert.deepEqual(replayed.map((t) => t.length), prompts.map(() => 9));
        }
      } finally {
        gpu.fusedMlp = false;
        model.free();
      }
    }
  } finally {
    Object.assign(gpu, { fusedMlp: saved.on, fusedMlpMinRows: saved.minRows, fusedAttentionProjection: saved.projection });
  }
});
}

// An INT4 Llama (d-64 heads: 32-column nibble vectors) with the attention projected by its INT4 O weight, against
// its usual form (the INT4 O GEMV): decode logits and greedy tokens, batched and replayed from graphs.
test('llama INT4: the O projection in the attention kernel with the INT4 O weight gives the usual form\'s decode logits and greedy tokens', { skip: modelSkip }, async () => {
  const gpu = await createGpuBackend();
  const saved = gpu.fusedAttentionProjection;
  const dir = join(root, 'llama-int4-projected');
  writeModelFolder(dir, 'llama', { ...ENGINE_TEST_MODELS.find((x) => x.family === 'llama')!.config, hidden: 256, heads: 4, kvHeads: 2, headDim: 64, ffn: 384, layers: 3 } as never, 12);
  const { decodeAttentionLaunches } = await import('../../src/backend/cuda/kernels/decode-attention.js');
  try {
    for (const dtype of ['f32', 'bf16'] as const) {
      const model = loadDecoderModel(dir, gpu, { dtype }).model;
      quantizeDecoderModel(model, { method: 'rtn', bits: 4, groupSize: 64 });
      try {
        const run = (projected: boolean) => {
          gpu.fusedAttentionProjection = projected;
          const before = decodeAttentionLaunches.projected, logits = prefillAndStepLogits(model);
          assert.equal(decodeAttentionLaunches.projected > before, projected, 'the attention kernel projected exactly when asked');
          return logits;
        };
        const usual = run(false), ours = run(true);
        ours.steps.forEach((row, i) => {
          const error = relError(row, usual.steps[i]!);
          // bf16: the O product reaches the norm in f32 instead of rounded to bf16.
          assert.ok(error < (dtype === 'f32' ? 1e-5 : 3e-2), `${dtype} step ${i}: rel err ${error}`);
        });
        const prompts = [[3, 40, 7], [5, 9], [11, 12, 13, 14]];
        const decode = (projected: boolean) => {
          gpu.fusedAttentionProjection = projected;
          return generateBatch(model, prompts, { maxNewTokens: 9, stopTokenIds: [], temperature: 0, engineOptions: { graphs: true } });
        };
        const tokens = await decode(true);
        if (dtype === 'f32') assert.deepEqual(tokens, await decode(false));
        else assert.deepEqual(tokens.map((t) => t.length), prompts.map(() => 9));
      } finally {
        model.free();
      }
    }
  } finally {
    gpu.fusedAttentionProjection = saved;
  }
});

test('the final norm in the LM head\'s GEMV (headNormOptions) gives the usual decode logits and greedy tokens: GPT-2 and Llama', { skip: modelSkip }, async () => {
  const gpu = await createGpuBackend();
  for (const m of ENGINE_TEST_MODELS) {
    const dir = join(root, `${m.name}-head-norm`);
    writeModelFolder(dir, m.family, m.config, 11);
    for (const dtype of ['f32', 'bf16'] as const) {
      const model = loadDecoderModel(dir, gpu, { dtype }).model;
      try {
        const prompts = [[3, 40, 7], [5, 9]];
        const decode = async (on: boolean, graphs: boolean) => {
          headNormOptions.enabled = on;
          const before = gpu.normGemvLaunches;
          const tokens = await generateBatch(model, prompts, { maxNewTokens: 9, stopTokenIds: [], temperature: 0, engineOptions: { graphs } });
          return { tokens, normGemvs: gpu.normGemvLaunches - before };
        };
        const usual = await decode(false, false), ours = await decode(true, false);
        assert.ok(ours.normGemvs > usual.normGemvs, `${m.name} ${dtype}: the head's norm GEMV ran (${ours.normGemvs} against ${usual.normGemvs} norm GEMVs)`);
        if (dtype === 'f32') assert.deepEqual(ours.tokens, usual.tokens, `${m.name} f32: the usual tokens`);
        assert.deepEqual((await decode(true, true)).tokens, ours.tokens, `${m.name} ${dtype}: replayed = eager`);
      } finally {
        headNormOptions.enabled = false;
        model.free();
      }
    }
  }
});

