// Loading Hugging Face checkpoints: the spellings published files use, dtypes, shards, and the errors.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { encodeFloats } from '../../src/dtype.js';
import type { TensorToWrite } from '../../src/io/safetensors.js';
import { writeSafetensors } from '../../src/io/safetensors.js';
import { BERT_PRESETS } from '../../src/models/bert.js';
import { BertModel } from '../../src/models/bert-model.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import { loadHfWeights } from '../../src/models/hf-weights.js';

const gpt2: Gpt2Config = { ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 50, maxPositions: 16, hidden: 8, layers: 1, heads: 2, ffn: 16 };

function tensors(model: { params: { download(): Map<string, { shape: readonly number[]; data: Float32Array }> } }, rename: (n: string) => string, dtype: 'F32' | 'BF16' = 'F32'): TensorToWrite[] {
  return [...model.params.download()].map(([name, t]) => ({
    name: rename(name), dtype, shape: t.shape,
    bytes: dtype === 'F32' ? new Uint8Array(t.data.slice().buffer) : encodeFloats(t.data, 'bf16'),
  }));
}

test('GPT-2 weights load with or without the transformer. prefix, in f32 or bf16, from shards', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-hf-'));
  try {
    const backend = new CpuBackend();
    const source = new Gpt2Model(backend, gpt2, 'f32');
    source.params.initialize(3n);
    const expected = source.params.download();

    // openai-community/gpt2 style: no prefix, plus the causal-mask buffers; bf16.
    const plain = tensors(source, (n) => n.replace(/^transformer\./, ''), 'BF16');
    plain.push({ name: 'h.0.attn.bias', dtype: 'F32', shape: [1], bytes: new Uint8Array(4) });
    writeSafetensors(join(dir, 'model.safetensors'), plain);
    const target = new Gpt2Model(backend, gpt2, 'f32');
    const loaded = loadHfWeights(target.params, dir);
    assert.deepEqual(loaded.unused, []);
    const got = target.params.download().get('transformer.h.0.mlp.c_fc.weight')!.data;
    const want = expected.get('transformer.h.0.mlp.c_fc.weight')!.data;
    got.forEach((v, i) => assert.ok(Math.abs(v - want[i]!) <= Math.abs(want[i]!) / 128 + 1e-30));
    // The padded vocabulary rows stay zero.
    const wte = backend.download(target.params.param('transformer.wte.weight').value) as Float32Array;
    assert.ok(wte.subarray(50 * 8).every((v) => v === 0));

    // Sharded, prefixed, f32: bit-exact.
    rmSync(join(dir, 'model.safetensors'));
    const all = tensors(source, (n) => n);
    writeSafetensors(join(dir, 'a.safetensors'), all.slice(0, 5));
    writeSafetensors(join(dir, 'b.safetensors'), all.slice(5));
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ weight_map: Object.fromEntries(all.map((t, i) => [t.name, i < 5 ? 'a.safetensors' : 'b.safetensors'])) }));
    loadHfWeights(target.params, dir);
    assert.deepEqual(target.params.download().get('transformer.wpe.weight')!.data, expected.get('transformer.wpe.weight')!.data);

    // Errors name the tensor and the file.
    writeSafetensors(join(dir, 'b.safetensors'), all.slice(6));
    assert.throws(() => loadHfWeights(target.params, dir), /lacks 1 parameter\(s\) the model needs/);
    const bad = all[5]!;
    writeSafetensors(join(dir, 'b.safetensors'), [{ ...bad, shape: [bad.bytes.length / 4, 1] }, ...all.slice(6)]);
    assert.throws(() => loadHfWeights(target.params, dir), new RegExp(`b\\.safetensors: tensor '${bad.name.replace(/\./g, '\\.')}' has shape \\[${bad.bytes.length / 4}, 1\\], the model expects`));
    rmSync(join(dir, 'model.safetensors.index.json'));
    assert.throws(() => loadHfWeights(target.params, dir), /no weights \(model\.safetensors, model\.safetensors\.index\.json, pytorch_model\.bin or pytorch_model\.bin\.index\.json\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('BERT weights load from TensorFlow-converted names (gamma/beta) and report the unused pooler', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-hf-'));
  try {
    const backend = new CpuBackend();
    const config = { ...BERT_PRESETS['bert-tiny']!, vocabSize: 40, hidden: 8, layers: 1, heads: 2, ffn: 16, maxPositions: 16 };
    const source = new BertModel(backend, config, 'f32');
    source.params.initialize(4n);
    const files = tensors(source, (n) => n.replace(/LayerNorm\.weight$/, 'LayerNorm.gamma').replace(/LayerNorm\.bias$/, 'LayerNorm.beta'));
    files.push({ name: 'bert.pooler.dense.bias', dtype: 'F32', shape: [8], bytes: new Uint8Array(32) });
    files.push({ name: 'cls.predictions.decoder.weight', dtype: 'F32', shape: [1], bytes: new Uint8Array(4) });
    writeSafetensors(join(dir, 'model.safetensors'), files);
    const target = new BertModel(backend, config, 'f32');
    const loaded = loadHfWeights(target.params, dir);
    assert.deepEqual(loaded.unused, ['bert.pooler.dense.bias']);
    assert.deepEqual(target.params.download().get('bert.embeddings.LayerNorm.weight')!.data, source.params.download().get('bert.embeddings.LayerNorm.weight')!.data);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
