// Flag release (runtime/flag-sync.ts, FUSEFORMER_FLAG_SYNC=1) on the GPU: decoding with captured steps —
// where the ported kernels wait on the step counter — gives the tokens of eager steps, whose kernels wait
// for the whole previous grid. GPT-2 124M- and Llama 1.2B-shaped layers (two of each) with random weights,
// bf16 and quantized (INT4, W8A8 with the head), batch 1 and 3. Skips without a GPU.

// Read once, when the runtime is created: set before anything creates it (this file runs in its own process).
process.env['FUSEFORMER_FLAG_SYNC'] = '1';

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { probeCuda } from '../../src/cuda/probe.js';
import { generateBatch } from '../../src/infer/generate.js';
import { randomDecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import { presetConfig } from '../../src/models/registry.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

test('flag release: captured decode steps give the eager steps\' tokens; the ported kernels waited on the counter', { skip, timeout: 20 * 60_000 }, async () => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const chain = gpu.runtime.flagChain;
  if (chain === null) {
    assert.equal(gpu.runtime.programmaticLaunch, false, 'FUSEFORMER_FLAG_SYNC=1 with programmatic launch must create the chain');
    return; // a GPU before Hopper: no programmatic launch, no flag release
  }
  for (const preset of ['gpt2-124M', 'llama-1.2B']) {
    const base = presetConfig(preset);
    const config = { ...base, config: { ...base.config, layers: 2 } } as typeof base;
    for (const bits of [undefined, 4, 8] as const) {
      const model = randomDecoderModel(config, gpu, { dtype: 'bf16', seed: 3n });
      if (bits) quantizeDecoderModel(model, { method: 'rtn', bits, groupSize: 128, lmHead: true });
      const vocab = model.arch.vocabSize;
      for (const batch of [1, 3]) {
        const prompts = Array.from({ length: batch }, (_, b) => Array.from({ length: 17 + 5 * b }, (_, i) => (b * 7919 + i * 104729 + 11) % vocab));
        const run = (graphs: boolean) => generateBatch(model, prompts, { maxNewTokens: 40, stopTokenIds: [], temperature: 0, engineOptions: { graphs }, syncEvery: 8 });
        const released = chain.launches.released;
        const captured = await run(true);
        const eager = await run(false);
        const what = `${preset} ${bits ? `INT${bits} + head` : 'bf16'} batch ${batch}`;
        assert.deepEqual(captured, eager, `${what}: tokens with flag release against eager steps`);
        assert.ok(chain.launches.released > released, `${what}: no launch waited on the counter (${JSON.stringify(chain.launches)})`);
      }
      model.free();
    }
  }
});
