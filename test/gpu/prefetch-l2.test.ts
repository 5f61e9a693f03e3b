// prefetchL2 on the GPU: a cache hint that changes nothing — a tensor reads back as it was after being
// prefetched (whole, in part, an unaligned view, odd row widths), and the decode engine with a layer's
// next weights prefetched during attention (16-bit, INT4, INT8) gives the same greedy tokens, eager and
// graph-replayed. Skips
// without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createGpuBackend, gpuSkip } from './device.js';
import { generateBatch } from '../../src/infer/generate.js';
import { l2PrefetchOptions } from '../../src/infer/forward.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-prefetch-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('prefetchL2 leaves every tensor as it was', { skip }, async () => {
  const gpu = await createGpuBackend(), rng = new Rng(3);
  for (const [rows, cols, dtype] of [[16384, 2048, 'bf16'], [3, 77, 'f16'], [1, 1000003, 'f32'], [50257, 768, 'bf16']] as const) {
    const values = rng.floats(rows * cols);
    const x = gpu.fromArray(values, rows === 1 ? [cols] : [rows, cols], dtype), before = gpu.download(x);
    for (const fraction of [1, 0.37, 1e-6]) gpu.prefetchL2({ x, fraction });
    gpu.prefetchL2({ x: gpu.view(x, 3, [Math.min(1000, rows * cols - 3)]) });  // off 16 bytes: not prefetched, no error
    gpu.synchronize();
    assert.deepEqual(gpu.download(x), before, `[${rows}, ${cols}] ${dtype}`);
    gpu.free(x);
  }
});

test('the decode engine with weights prefetched during attention gives the same greedy tokens', { skip }, async () => {
  const gpu = await createGpuBackend();
  for (const [family, config, bits] of [['gpt2', TINY_GPT2, 0], ['llama', TINY_LLAMA, 0], ['llama', { ...TINY_LLAMA, ffn: 64 }, 4], ['gpt2', TINY_GPT2, 8]] as const) {
    const dir = join(root, `${family}-${bits}`);
    writeModelFolder(dir, family, config, 7);
    const model = loadDecoderModel(dir, gpu, { dtype: 'bf16' }).model;
    if (bits) quantizeDecoderModel(model, { method: 'rtn', bits, groupSize: 32 });
    const prompts = [[5, 9, 2, 7, 1], [3, 3], [40, 41, 42]];
    try {
      for (const graphs of [false, true]) {
        const run = () => generateBatch(model, prompts, { maxNewTokens: 24, temperature: 0, stopTokenIds: [], engineOptions: { graphs } });
        const plain = await run();
        l2PrefetchOptions.bytes = 4 * 2 ** 20;
        const prefetched = await run();
        l2PrefetchOptions.bytes = 0;
        assert.deepEqual(prefetched, plain, `${family}${bits ? ` INT${bits}` : ''}, graphs ${graphs}`);
      }
    } finally {
      l2PrefetchOptions.bytes = 0;
      model.free();
    }
  }
});
