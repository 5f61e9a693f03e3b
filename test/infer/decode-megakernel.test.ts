// decodeLayers on the CPU (the chain of unfused ops the megakernel stands for) and the engine's batch-1
// path through it: tokens equal the layer-by-layer path's exactly, for GPT-2 (LayerNorm, biases, learned
// positions) and Llama (RMSNorm, RoPE, GQA, SwiGLU) in f32 and bf16; bad arguments name what is wrong.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { DecodeLayersArgs } from '../../src/backend/backend.js';
import { decodeLayersWorkspaceFloats, decodeLayersWorkspaceLayout } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { decodeLayersSource, decodeLayersUnsupported, megakernelTuning, planDecodeLayers, SLOT_BYTES, WARP_SLOT_BYTES } from '../../src/backend/cuda/kernels/decode-layers.js';
import { checkDecodeLayers } from '../../src/backend/op-checks/index.js';
import { OpCheck } from '../../src/backend/validate.js';
import type { FloatDType } from '../../src/dtype.js';
import { megakernelOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { decodeLayersCases } from '../../src/testing/decode-layers-cases.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-megakernel-'));
after(() => rmSync(root, { recursive: true, force: true }));

const MODELS = [
  { name: 'gpt2', family: 'gpt2' as const, config: { ...TINY_GPT2, hidden: 48, heads: 4, ffn: 96, layers: 3 } },
  { name: 'llama', family: 'llama' as const, config: { ...TINY_LLAMA, hidden: 64, heads: 8, kvHeads: 2, headDim: 8, ffn: 80, layers: 3 } },
];

for (const m of MODELS) {
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    test(`${m.name} ${dtype}: batch-1 decode through decodeLayers gives the layer-by-layer tokens exactly`, async () => {
      const backend = new CpuBackend();
      const dir = join(root, `${m.name}-${dtype}`);
      writeModelFolder(dir, m.family, m.config, 3);
      const model = loadDecoderModel(dir, backend, { dtype }).model;
      let calls = 0;
      const original = backend.decodeLayers.bind(backend);
      backend.decodeLayers = (args: DecodeLayersArgs) => { calls++; original(args); };
      try {
        const run = async (on: boolean) => {
          megakernelOptions.enabled = on;
          return generateBatch(model, [[5, 17, 99, 3]], { maxNewTokens: 12, stopTokenIds: [], temperature: 0, engineOptions: { graphs: true } });
        };
        const reference = await run(false);
        assert.equal(calls, 0);
        const ours = await run(true);
        assert.ok(calls > 0, 'decodeLayers ran');
        assert.deepEqual(ours, reference);
        // Sampled, seeded: the same draws, so the same tokens.
        const sampled = async (on: boolean) => {
          megakernelOptions.enabled = on;
          return generateBatch(model, [[9, 8, 7]], { maxNewTokens: 10, stopTokenIds: [], temperature: 0.9, topK: 20, seed: 5 });
        };
        assert.deepEqual(await sampled(true), await sampled(false));
      } finally {
        megakernelOptions.enabled = false;
        model.free();
      }
    });
  }
}

test('decodeLayers rejects bad arguments by name', () => {
  const b = new CpuBackend();
  const [c] = decodeLayersCases('f32');
  const inputs = c!.inputs(new Rng(1));
  const t = (name: string) => b.fromArray(inputs[name]!.values, inputs[name]!.shape, 'f32');
  const layer = (l: number) => ({
    norm1: { gamma: t(`l${l}.norm1.gamma`) }, norm2: { gamma: t(`l${l}.norm2.gamma`) }, qkv: t(`l${l}.qkv`), out: t(`l${l}.out`),
    up: t(`l${l}.up`), down: t(`l${l}.down`), kCache: t(`l${l}.kCache`), vCache: t(`l${l}.vCache`),
  });
  const H = 512, sizes = { hidden: H, heads: 8, kvHeads: 2, headDim: 64, ffn: 1376, maxLen: 700 };
  const args = (): DecodeLayersArgs => ({
    x: t('x'), h: b.empty([1, H], 'f32'), positions: b.fromArray([3], [1], 'i32'), layers: [layer(0), layer(1)], finalNorm: { gamma: t('final.gamma') },
    norm: 'rms', eps: 1e-5, heads: 8, kvHeads: 2, activation: 'silu', workspace: b.empty([decodeLayersWorkspaceFloats(sizes)], 'f32'),
  });
  b.decodeLayers(args());  // the valid call runs
  assert.throws(() => b.decodeLayers({ ...args(), layers: [layer(0), { ...layer(1), qkv: t('l1.out') }] }), /layers\[1\]\.qkv/);
  assert.throws(() => b.decodeLayers({ ...args(), workspace: b.empty([100], 'f32') }), /'workspace' holds 100 f32/);
  assert.throws(() => b.decodeLayers({ ...args(), finalNorm: { gamma: t('final.gamma'), beta: t('final.beta') } }), /finalNorm\.beta/);
  assert.throws(() => b.decodeLayers({ ...args(), heads: 6 }), /multiple of 'kvHeads'|layers\[0\]\.qkv/);
  assert.throws(() => b.decodeLayers({ ...args(), layers: [layer(0), { ...layer(1), outBias: t('l1.outBias') }] }), /same biases as layer 0/);
});

test('the megakernel takes the shapes its slots and reductions hold, and its workspace fits the one the backend sizes', () => {
  assert.equal(decodeLayersUnsupported({ hidden: 2048, ffn: 8192, heads: 32, headDim: 64 }), null);
  assert.match(decodeLayersUnsupported({ hidden: 2048, ffn: 30720, heads: 32, headDim: 64 }) ?? '', /ffn \(30720\) is wider/);
  assert.match(decodeLayersUnsupported({ hidden: 128, ffn: 512, heads: 2, headDim: 64 }) ?? '', /below 256/);
  assert.match(decodeLayersUnsupported({ hidden: 300, ffn: 1024, heads: 4, headDim: 75 }) ?? '', /multiple of 8/);
  for (const [hidden, heads, kvHeads, headDim, ffn, maxLen] of [[2048, 32, 8, 64, 8192, 160], [768, 12, 12, 64, 3072, 1024], [264, 2, 1, 128, 712, 1100]] as const) {
    const spec = {
      dtype: 'bf16' as const, hidden, heads, kvHeads, headDim, ffn, maxLen, norm: 'rms' as const, gated: true, activation: 'silu' as const,
      qkvBias: false, outBias: false, upBias: false, downBias: false, rope: true, eps: 1e-5, blocks: 132, slots: 3,
    };
    const sizes = { hidden, heads, kvHeads, headDim, ffn, maxLen }, layout = decodeLayersWorkspaceLayout(sizes);
    const regions = [layout.xa, layout.xb, layout.qkv, layout.attn, layout.y, layout.act, layout.part, layout.end];
    assert.ok(regions.every((at, i) => at % 16 === 0 && (i === 0 || at > regions[i - 1]!)), 'regions 16-byte aligned, in order');
    assert.ok(layout.end <= 4 * decodeLayersWorkspaceFloats(sizes));
    assert.match(decodeLayersSource(spec).source, /griddepcontrol|GRID_DEPENDENCY_WAIT/);
  }
});

test('the megakernel plans its ring: 48 KB slots shared by the block by default, 16 KB slots a warp takes whole when asked', () => {
  const b = new CpuBackend();
  const [c] = decodeLayersCases('bf16');
  const inputs = c!.inputs(new Rng(2));
  const t = (name: string) => b.fromArray(inputs[name]!.values, inputs[name]!.shape, 'bf16');
  const layers = [0, 1, 2].map((l) => ({
    norm1: { gamma: t(`l${l}.norm1.gamma`) }, norm2: { gamma: t(`l${l}.norm2.gamma`) }, qkv: t(`l${l}.qkv`), out: t(`l${l}.out`),
    up: t(`l${l}.up`), down: t(`l${l}.down`), kCache: t(`l${l}.kCache`), vCache: t(`l${l}.vCache`),
  }));
  const sizes = { hidden: 512, heads: 8, kvHeads: 2, headDim: 64, ffn: 1376, maxLen: 700 };
  const args: DecodeLayersArgs = {
    x: t('x'), h: b.empty([1, 512], 'bf16'), positions: b.fromArray([3], [1], 'i32'), layers, finalNorm: { gamma: t('final.gamma') },
    norm: 'rms', eps: 1e-5, heads: 8, kvHeads: 2, activation: 'silu', workspace: b.empty([decodeLayersWorkspaceFloats(sizes)], 'f32'),
  };
  const check = new OpCheck('decodeLayers', 'cpu');
  const plan = () => planDecodeLayers(check, checkDecodeLayers(check, args), args, 132, 232448);
  const saved = { ...megakernelTuning };
  try {
    const block = plan();
    assert.deepEqual([block.slotBytes, block.slots, block.warpChunks], [SLOT_BYTES, 4, undefined]);
    megakernelTuning.warpChunks = true;
    const warp = plan();
    assert.deepEqual([warp.slotBytes, warp.slots, warp.warpChunks], [WARP_SLOT_BYTES, 12, true]);
    assert.match(decodeLayersSource(warp).source, /WARP_CHUNKS = true/);
    megakernelTuning.releaseFlag = true;
    assert.match(decodeLayersSource(plan()).source, /RELEASE_FLAG = true/);
    assert.match(decodeLayersSource(block).source, /RELEASE_FLAG = false/);
    megakernelTuning.kvPrefetch = true;
    assert.match(decodeLayersSource(plan()).source, /KV_PREFETCH = true/);
    assert.match(decodeLayersSource(block).source, /KV_PREFETCH = false/);
    megakernelTuning.slotKiB = 4;  // smaller than a gated row pair (2 × 1376 × 2 bytes): rounded up to hold it
    assert.equal(plan().slotBytes, 6 * 1024);
  } finally {
    Object.assign(megakernelTuning, saved);
  }
});
