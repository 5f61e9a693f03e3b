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
import { probeCuda } from '../../src/cuda/probe.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import type { EngineOptions } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-infer-'));
after(() => rmSync(root, { recursive: true, force: true }));

const MODELS: { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig }[] = [
  { name: 'gpt2', family: 'gpt2', config: { ...TINY_GPT2, hidden: 64, heads: 2, ffn: 256, maxPositions: 128 } },
  { name: 'llama', family: 'llama', config: { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 128 } },
];
const PROMPTS = [[72, 101, 108, 108, 111], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], [200]];

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

for (const m of MODELS) {
  test(`${m.name}: CUDA prefill/decode logits and tokens match the CPU engine`, { skip }, async () => {
    const { CudaBackend } = await import('../../src/backend/cuda/index.js');
    const gpu = CudaBackend.create(), cpu = new CpuBackend();
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
      if (dtype === 'f32') {
        const run = (model: typeof onGpu, options: Partial<EngineOptions>, sampling: object) =>
          generateBatch(model, PROMPTS, { maxNewTokens: 40, stopTokenIds: [], engineOptions: options, syncEvery: 7, ...sampling });
        const greedy = { temperature: 0 }, sampled = { temperature: 0.9, topK: 30, topP: 0.9, repetitionPenalty: 1.1, seed: 77 };
        for (const sampling of [greedy, sampled]) {
          const reference = await run(onCpu, {}, sampling);
          for (const options of [{}, { prefillAttention: 'materialized' as const }, { attentionSplits: 3 }, { graphs: false }]) {
            assert.deepEqual(await run(onGpu, options, sampling), reference, `${JSON.stringify(sampling)} ${JSON.stringify(options)}`);
          }
        }
      }
      onGpu.free();
      onCpu.free();
    }
  });
}
