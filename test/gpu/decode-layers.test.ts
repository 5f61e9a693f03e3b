// The decode megakernel (decodeLayers, kernels/decode-layers.ts) on the GPU: the op against the CPU's chain
// of unfused ops at GPT-2-, Llama- and MQA-shaped stacks (x, h, the caches and their new rows; twice, so
// the barrier counters must be back at zero after a launch), then whole engines with it on against off:
// batch-1 greedy tokens, graphs replayed.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, emulated, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { megakernelOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { checkCase } from '../../src/testing/conformance.js';
import { decodeLayersCases } from '../../src/testing/decode-layers-cases.js';
import { freshSeed } from '../../src/testing/random.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

// Every test here runs the megakernel, which the emulator cannot: its producer warp's TMA bulk copies and
// mbarriers are not modelled, and its grid barriers wait for all blocks at once while emulated blocks run in turn.
const skip = gpuSkip() || (emulated && 'the megakernel needs mbarriers, TMA bulk copies and co-resident blocks (grid barriers), which the emulator does not model');
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-megakernel-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('decodeLayers on CUDA (the megakernel) matches the CPU chain of unfused ops: x, h, the caches and their new rows', { skip }, async (t) => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend(), seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const dtype of ['bf16', 'f16'] as FloatDType[]) {
    for (const c of decodeLayersCases(dtype)) {
      await t.test(c.name, () => {
        for (let run = 0; run < 2; run++) {
          const result = checkCase(c, gpu, cpu, seed + run);
          const failed = result.checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
          assert.deepEqual(failed, [], failed.join('\n'));
          t.diagnostic(`run ${run}: ${result.checks.filter((x) => ['x', 'h'].includes(x.output)).map((x) => `${x.output} ${x.detail}`).join('; ')}`);
        }
      });
    }
  }
});

const MODELS = [
  { name: 'gpt2', family: 'gpt2' as const, config: { ...TINY_GPT2, hidden: 384, heads: 6, ffn: 1536, layers: 3, maxPositions: 128 } },
  { name: 'llama', family: 'llama' as const, config: { ...TINY_LLAMA, hidden: 512, heads: 8, kvHeads: 2, headDim: 64, ffn: 1376, layers: 3, maxPositions: 128 } },
];

for (const m of MODELS) {
  test(`${m.name}: batch-1 decode with the megakernel gives the layer-by-layer engine's greedy tokens (f16 all 24, bf16 the first 8; graphs)`, { skip }, async () => {
    const gpu = await createGpuBackend();
    const dir = join(root, m.name);
    writeModelFolder(dir, m.family, m.config, 11);
    for (const dtype of ['f16', 'bf16'] as FloatDType[]) {
      const model = loadDecoderModel(dir, gpu, { dtype }).model;
      try {
        const prompts = [[5, 17, 99, 3, 250, 42, 7]];
        const run = async (on: boolean) => {
          megakernelOptions.enabled = on;
          const before = gpu.decodeLayersLaunches;
          const tokens = await generateBatch(model, prompts, { maxNewTokens: 24, stopTokenIds: [], temperature: 0, engineOptions: { graphs: true } });
          assert.equal(gpu.decodeLayersLaunches > before, on, on ? 'the megakernel ran' : 'the layer-by-layer path ran');
          return tokens[0]!;
        };
        const reference = await run(false), ours = await run(true);
        const agree = reference.findIndex((token, i) => ours[i] !== token);
        const same = agree < 0 ? reference.length : agree;
        if (dtype === 'f16') assert.deepEqual(ours, reference, 'f16 greedy tokens');
        else assert.ok(same >= 8, `bf16: the first ${same} of 24 tokens agree (${ours.join(',')} against ${reference.join(',')})`);
      } finally {
        megakernelOptions.enabled = false;
        model.free();
      }
    }
  });
}
