// prefetchL2 (a cache hint) on the CPU reference: checked like any op, then nothing happens; and the
// decoder forward issues it for a layer's weights within l2PrefetchOptions' budget, in the
// order they are read, with the tokens unchanged.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend, PrefetchL2Args } from '../../../src/backend/backend.js';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { generateBatch } from '../../../src/infer/generate.js';
import { l2PrefetchOptions } from '../../../src/infer/forward.js';
import { loadDecoderModel } from '../../../src/infer/model.js';
import { quantizeDecoderModel } from '../../../src/infer/quantized.js';
import { TINY_LLAMA, writeModelFolder } from '../../infer/hf-folder.js';

const b = new CpuBackend();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-prefetch-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** The CPU backend with its prefetchL2 calls recorded. */
function recordingPrefetches(): { calls: PrefetchL2Args[]; counting: Backend } {
  const calls: PrefetchL2Args[] = [];
  const counting = new Proxy(b, {
    get(target, property) {
      const value = (target as unknown as Record<string | symbol, unknown>)[property];
      if (property === 'prefetchL2') return (args: PrefetchL2Args) => { calls.push(args); target.prefetchL2(args); };
      return typeof value === 'function' ? value.bind(target) : value;
    },
  }) as Backend;
  return { calls, counting };
}

test('prefetchL2 leaves its tensor as it was and rejects what it cannot read as rows', () => {
  const x = b.fromArray([1, 2, 3, 4, 5, 6], [2, 3], 'f32');
  b.prefetchL2({ x });
  b.prefetchL2({ x, fraction: 0.5 });
  b.prefetchL2({ x: b.view(x, 1, [4]) });
  assert.deepEqual(Array.from(b.download(x)), [1, 2, 3, 4, 5, 6]);
  assert.throws(() => b.prefetchL2({ x: b.empty([2, 2, 2], 'f32') }), /prefetchL2: 'x' must be 1-D or 2-D/);
  for (const fraction of [0, -0.5, 1.5, Number.NaN]) assert.throws(() => b.prefetchL2({ x, fraction }), /prefetchL2: 'fraction' must be in \(0, 1\]/);
});

test('the decoder forward prefetches the O-projection, MLP-up and down weights within the budget; tokens unchanged', async () => {
  const dir = join(root, 'llama');
  writeModelFolder(dir, 'llama', TINY_LLAMA, 3);
  const { calls, counting } = recordingPrefetches();
  const model = loadDecoderModel(dir, counting, { dtype: 'f32' }).model;
  const prompts = [[5, 9, 2, 7, 1], [3, 3]];
  try {
    const plain = await generateBatch(model, prompts, { maxNewTokens: 6, temperature: 0, stopTokenIds: [] });
    assert.equal(calls.length, 0, 'off by default');
    const layer = model.layers[0]!, outBytes = layer.out.numel * 4, upBytes = layer.up.numel * 4;
    l2PrefetchOptions.bytes = outBytes + upBytes / 2;  // the O-projection whole, half of each MLP-up row, no down
    const prefetched = await generateBatch(model, prompts, { maxNewTokens: 6, temperature: 0, stopTokenIds: [] });
    assert.deepEqual(prefetched, plain, 'a hint changes no token');
    const L = model.layers.length, decodeSteps = 5;  // the prefill's 7 rows are within PREFETCH_MAX_ROWS too
    assert.equal(calls.length % (2 * L), 0);
    assert.ok(calls.length >= 2 * L * decodeSteps, `${calls.length} prefetches`);
    assert.equal(calls[0]!.x, layer.out);
    assert.equal(calls[0]!.fraction, 1);
    assert.equal(calls[1]!.x, layer.up);
    assert.ok(Math.abs(calls[1]!.fraction! - 0.5) < 1e-12, `MLP-up fraction ${calls[1]!.fraction}`);
  } finally {
    l2PrefetchOptions.bytes = 0;
    model.free();
  }
});

test('a quantized layer prefetches its scales and zeros whole, then each row of its packed weights as the budget allows; tokens unchanged', async () => {
  const dir = join(root, 'llama-int4');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, ffn: 64 }, 4);  // INT4 groups of 32 need widths that 32 divides
  const { calls, counting } = recordingPrefetches();
  const model = loadDecoderModel(dir, counting, { dtype: 'f32' }).model;
  quantizeDecoderModel(model, { method: 'rtn', bits: 4, groupSize: 32 });
  try {
    const prompts = [[5, 9, 2], [8]];
    const plain = await generateBatch(model, prompts, { maxNewTokens: 4, temperature: 0, stopTokenIds: [] });
    const out = model.quantization!.layers[0]!.out!;
    assert.equal(out.kind, 'int4');
    const bytesOf = (t: { numel: number }, size: number) => t.numel * size;
    const small = out.kind === 'int4' ? bytesOf(out.scales, 2) + bytesOf(out.zeros, 1) : 0;
    l2PrefetchOptions.bytes = small + bytesOf(out.qweight, 4) / 4;  // a quarter of each packed row, nothing of the MLP
    const prefetched = await generateBatch(model, prompts, { maxNewTokens: 4, temperature: 0, stopTokenIds: [] });
    assert.deepEqual(prefetched, plain);
    assert.deepEqual(calls.slice(0, 3).map((c) => c.x), out.kind === 'int4' ? [out.scales, out.zeros, out.qweight] : []);
    assert.deepEqual(calls.slice(0, 2).map((c) => c.fraction), [1, 1]);
    assert.ok(Math.abs(calls[2]!.fraction! - 0.25) < 1e-12, `packed rows: fraction ${calls[2]!.fraction}`);
    assert.equal(calls.length % 3, 0, 'three prefetches a layer, then the budget is spent');
  } finally {
    l2PrefetchOptions.bytes = 0;
    model.free();
  }
});
