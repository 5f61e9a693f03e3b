// The inference engine with RTN-quantized projections (INT4 W4A16, INT8 W8A8) on the GPU against the
// CPU engine quantized the same way (the same bits: int4QuantizeWeights is exact on both backends, INT8
// is quantized on the host): prefill logits in f32 and bf16, and greedy tokens in f32 with the decode
// step captured in graphs and run eagerly. Skips without a GPU.

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
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-infer-quant-'));
after(() => rmSync(root, { recursive: true, force: true }));

const MODELS: { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig }[] = [
  { name: 'gpt2', family: 'gpt2', config: { ...TINY_GPT2, hidden: 64, heads: 2, ffn: 256, maxPositions: 128 } },
  { name: 'llama', family: 'llama', config: { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 128 } },
];
// Prefill of 17 rows takes int4Linear's tensor-core kernel in bf16; decode (1–3 rows) its GEMV.
const PROMPTS = [[72, 101, 108, 108, 111], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], [200]];

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

for (const m of MODELS) {
  for (const bits of [4, 8] as const) {
    test(`${m.name} INT${bits}: CUDA quantized engine matches the CPU quantized engine`, { skip }, async () => {
      const { CudaBackend } = await import('../../src/backend/cuda/index.js');
      const gpu = CudaBackend.create(), cpu = new CpuBackend();
      const dir = join(root, m.name);
      writeModelFolder(dir, m.family, m.config, 5);
      for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
        const load = (b: Backend) => {
          const model = loadDecoderModel(dir, b, { dtype }).model;
          quantizeDecoderModel(model, { method: 'rtn', bits, groupSize: 32 });
          return model;
        };
        const onGpu = load(gpu), onCpu = load(cpu);
        try {
          const logitsOf = (model: DecoderModel) => {
            const engine = new DecodeEngine(model, { maxBatch: 3, maxLen: 64 });
            const out = engine.promptLogits(PROMPTS[1]!);
            engine.dispose();
            return out;
          };
          // W8A8 in f32: an activation within an ulp of an INT8 rounding boundary may round the other way.
          const tolerance = dtype === 'f32' ? (bits === 4 ? 1e-4 : 1e-3) : 2e-2;
          const prefill = relError(logitsOf(onGpu), logitsOf(onCpu));
          assert.ok(prefill <= tolerance, `${dtype} prefill logits rel err ${prefill}`);
          if (dtype === 'f32') {
            const run = (model: DecoderModel, graphs: boolean) =>
              generateBatch(model, PROMPTS, { maxNewTokens: 32, stopTokenIds: [], temperature: 0, engineOptions: { graphs }, syncEvery: 7 });
            const reference = await run(onCpu, false);
            for (const graphs of [true, false]) assert.deepEqual(await run(onGpu, graphs), reference, `graphs ${graphs}`);
          }
        } finally {
          onGpu.free();
          onCpu.free();
        }
      }
    });
  }
}
