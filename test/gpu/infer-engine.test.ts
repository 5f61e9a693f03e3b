// The inference engine on the GPU against the CPU engine, with tiny random GPT-2 and Llama folders:
// prefill and KV-cached logits, greedy and seeded sampled tokens (captured graphs replayed), ragged
// batches, both prefill attention paths and split-K decode attention. Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import type { EngineOptions } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { writeModelFolder } from '../infer/hf-folder.js';
import { ENGINE_TEST_MODELS, ENGINE_TEST_PROMPTS, relError } from './engine-fixtures.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-infer-'));
after(() => rmSync(root, { recursive: true, force: true }));

// A Llama whose f32 head rows are 128 bytes (d 32), so its decode steps take the fused appendDecodeAttention
// with RoPE (GPT-2's d 32 takes it with the bias); the fixtures' Llama (d 16) takes the two ops.
const llama = ENGINE_TEST_MODELS.find((m) => m.family === 'llama')!;
// Qwen3: the per-head q/k norms — at d 32 inside the fused append for f32 (128-byte rows) and in qkvRopeAppend
// for bf16 (64-byte rows); head_dim 32 with 8 heads is 256 wide beside hidden 128. At d 128 (Qwen3's own) bf16
// rows are 256 bytes: the fused append on decode attention's tensor-core variant, head norms inside.
const MODELS = [
  ...ENGINE_TEST_MODELS, { ...llama, name: 'llama-d32', config: { ...llama.config, heads: 4, headDim: 32 } },
  { ...llama, name: 'qwen3', config: { ...llama.config, variant: 'qwen3' as const, qkNorm: true, heads: 8, kvHeads: 4, headDim: 32, tieWordEmbeddings: true } },
  { ...llama, name: 'qwen3-d128', config: { ...llama.config, variant: 'qwen3' as const, qkNorm: true, heads: 2, kvHeads: 1, headDim: 128, tieWordEmbeddings: true } },
], PROMPTS = ENGINE_TEST_PROMPTS;

for (const m of MODELS) {
  test(`${m.name}: CUDA prefill/decode logits and tokens match the CPU engine`, { skip }, async () => {
    const gpu = await createGpuBackend(), cpu = new CpuBackend();
    const dir = join(root, m.name);
    writeModelFolder(dir, m.family, m.config, 5);
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      const load = (b: Backend) => loadDecoderModel(dir, b, { dtype }).model;
      const onGpu = load(gpu), onCpu = load(cpu);
      const tolerance = dtype === 'f32' ? 1e-4 : 2e-2;
      const logitsOf = (model: typeof onGpu) => {
        const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 64 });
        const out = engine.promptLogits(PROMPTS[1]!);
        engine.dispose();
        return out;
      };
      const prefill = relError(logitsOf(onGpu), logitsOf(onCpu));
      assert.ok(prefill <= tolerance, `${dtype} prefill logits rel err ${prefill}`);
      // Decode steps teacher-forced to the same tokens on both (bf16 picks may part at near ties): each step's logits.
      const gpuEngine = new DecodeEngine(onGpu, { maxBatch: 1, maxLen: 64 }), cpuEngine = new DecodeEngine(onCpu, { maxBatch: 1, maxLen: 64 });
      const request = { prompt: PROMPTS[1]!, maxNewTokens: 12, sampling: resolveSampling({ temperature: 0 }) };
      gpuEngine.start([request], []);
      cpuEngine.start([request], []);
      for (let step = 0; step < 10; step++) {
        gpuEngine.collect();
        cpuEngine.collect();
        const expected = cpuEngine.logits()[0]!, error = relError(gpuEngine.logits()[0]!, expected);
        assert.ok(error <= tolerance, `${dtype} decode step ${step} logits rel err ${error}`);
        const token = expected.indexOf(Math.max(...expected));
        gpuEngine.force(0, token);
        cpuEngine.force(0, token);
        gpuEngine.decode(1);
        cpuEngine.decode(1);
      }
      gpuEngine.dispose();
      cpuEngine.dispose();
      if (dtype === 'f32') {
        const run = (model: typeof onGpu, options: Partial<EngineOptions>, sampling: object) =>
          generateBatch(model, PROMPTS, { maxNewTokens: 40, stopTokenIds: [], engineOptions: options, syncEvery: 7, ...sampling });
        const greedy = { temperature: 0 }, sampled = { temperature: 0.9, topK: 30, topP: 0.9, repetitionPenalty: 1.1, seed: 77 };
        const fusedBefore = gpu.fusedAppendLaunches;
        for (const sampling of [greedy, sampled]) {
          const reference = await run(onCpu, {}, sampling);
          for (const options of [{}, { prefillAttention: 'materialized' as const }, { attentionSplits: 3 }, { graphs: false }]) {
            assert.deepEqual(await run(onGpu, options, sampling), reference, `${JSON.stringify(sampling)} ${JSON.stringify(options)}`);
          }
        }
        const headDim = 'headDim' in m.config && m.config.headDim !== undefined ? m.config.headDim : m.config.hidden / m.config.heads;
        const fuses = headDim * 4 === 128;
        assert.equal(gpu.fusedAppendLaunches > fusedBefore, fuses, `decode steps with ${headDim}-wide f32 heads: fused appendDecodeAttention launches ${fusedBefore} → ${gpu.fusedAppendLaunches}`);
      }
      onGpu.free();
      onCpu.free();
    }
  });
}
