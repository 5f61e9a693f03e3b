// The LM head's greedy picks on CUDA (GemmArgs / Int8LinearArgs / Int4LinearArgs.argmax in the GEMVs, sampleTokens reading
// them): decoding with them equals decoding without. Runs emulated in npm test (gpu-suites.test.ts).

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createGpuBackend, gpuSkip } from './device.js';
import { headArgmaxOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import { writeModelFolder } from '../infer/hf-folder.js';
import { ENGINE_TEST_MODELS } from './engine-fixtures.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-head-argmax-'));
after(() => rmSync(root, { recursive: true, force: true }));

// The LM head's GEMV packing each row's greedy pick and sampleTokens reading it (headArgmaxOptions 'on'): the same
// tokens as the usual sampler walking the logits — greedy, sampled and penalised rows, eager and replayed, one and
// three sequences (the fused MLP off: its atomics would make bf16 runs differ from each other).
test('the LM head\'s greedy picks (headArgmaxOptions) give the usual tokens: GPT-2 and Llama, 16-bit, INT8 and INT4 heads, greedy / sampled / penalised, eager and replayed', { skip }, async () => {
  const gpu = await createGpuBackend();
  const savedMlp = gpu.fusedMlp;
  gpu.fusedMlp = false;
  // The INT4 tensor-core GEMV takes groups of 128: a Llama whose every projection's input is a multiple of 128.
  const llama128 = { name: 'llama ffn 256', family: 'llama' as const, config: { ...ENGINE_TEST_MODELS[1]!.config, ffn: 256 } };
  const cases = [
    ...ENGINE_TEST_MODELS.flatMap((m) => (['f32', 'bf16'] as const).map((dtype) => ({ m, dtype, bits: 0 }))),
    ...ENGINE_TEST_MODELS.map((m) => ({ m, dtype: 'bf16' as const, bits: 8 })),
    { m: llama128, dtype: 'bf16' as const, bits: 4 },
  ];
  for (const { m, dtype, bits } of cases) {
    const dir = join(root, `${m.name.replace(/\W+/g, '-')}-head-argmax`);
    writeModelFolder(dir, m.family, m.config, 12);
    {
      const model = loadDecoderModel(dir, gpu, { dtype }).model;
      // W8A8 with an INT8 head, W4A16 with an INT4 head: the picks come from the W8A8 GEMV, the INT4 tensor-core GEMV.
      if (bits) quantizeDecoderModel(model, { method: 'rtn', bits: bits as 4 | 8, groupSize: bits === 4 ? 128 : 32, lmHead: true });
      try {
        for (const prompts of [[[3, 40, 7]], [[3, 40, 7], [5, 9], [11, 12, 13, 14]]]) {
          for (const sampling of [{ temperature: 0 }, { temperature: 0.9, seed: 5 }, { temperature: 0, repetitionPenalty: 1.3 }]) {
            const decode = async (mode: 'on' | 'off', graphs: boolean) => {
              headArgmaxOptions.mode = mode;
              return generateBatch(model, prompts, { maxNewTokens: 9, stopTokenIds: [], engineOptions: { graphs }, ...sampling });
            };
            const what = `${m.name} ${dtype}${bits ? ` INT${bits}` : ''} ${prompts.length} prompts ${JSON.stringify(sampling)}`;
            const usual = await decode('off', true);
            assert.deepEqual(await decode('on', false), usual, `${what}: eager`);
            assert.deepEqual(await decode('on', true), usual, `${what}: replayed`);
          }
        }
      } finally {
        headArgmaxOptions.mode = 'auto';
        model.free();
      }
    }
  }
  gpu.fusedMlp = savedMlp;
});
