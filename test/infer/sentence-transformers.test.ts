// sentence-transformers directories as the library itself writes them (6.x: module types
// sentence_transformers.….X, "pooling_mode", the length in tokenizer_config.json's model_max_length) with Dense
// layers, against SentenceTransformer.encode's vectors (test/fixtures/sentence-transformers/make.py); the same
// pipeline in the ≤ 5 layout; Dense modules' refusals.

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { Embedder } from '../../src/infer/embedder.js';
import { readSentenceTransformersConfig } from '../../src/infer/sentence-transformers.js';

const FIXTURE = join('test', 'fixtures', 'sentence-transformers');
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as { texts: string[]; max_seq_length: number; vectors: number[][] };
const root = mkdtempSync(join(tmpdir(), 'fuseformer-st-'));
after(() => rmSync(root, { recursive: true, force: true }));

function copy(name: string): string {
  const dir = join(root, name);
  cpSync(join(FIXTURE, 'dense'), dir, { recursive: true });
  return dir;
}

function assertVectors(dir: string, label: string): void {
  const embedder = Embedder.load(dir, new CpuBackend(), { dtype: 'f32' });
  try {
    assert.equal(embedder.dimensions, 16, label);
    assert.equal(embedder.truncateAt, expected.max_seq_length, label);
    const { vectors, truncated } = embedder.embed(expected.texts);
    assert.equal(truncated, 1, `${label}: the long text is cut to max_seq_length`);
    vectors.forEach((v, i) => {
      assert.equal(v.length, 16);
      v.forEach((x, h) => assert.ok(Math.abs(x - expected.vectors[i]![h]!) < 2e-6, `${label}: text ${i} element ${h}: ${x} vs ${expected.vectors[i]![h]}`));
    });
  } finally {
    embedder.free();
  }
}

test('a sentence-transformers 6 directory with two Dense layers (tanh; identity without bias) and Normalize: SentenceTransformer.encode\'s vectors', () => {
  const config = readSentenceTransformersConfig(join(FIXTURE, 'dense'))!;
  assert.deepEqual([config.pooling, config.normalize, config.maxSeqLength, config.dense.map((d) => [d.inFeatures, d.outFeatures, d.activation, d.bias !== undefined])],
    ['mean', true, 20, [[32, 24, 'tanh', true], [24, 16, 'identity', false]]]);
  assertVectors(join(FIXTURE, 'dense'), 'sentence-transformers 6');
});

test('the same pipeline in the sentence-transformers ≤ 5 layout (models.X types, pooling_mode_* flags, max_seq_length) gives the same vectors', () => {
  const dir = copy('legacy');
  const modules = JSON.parse(readFileSync(join(dir, 'modules.json'), 'utf8')) as { type: string }[];
  const legacy = ['Transformer', 'Pooling', 'Dense', 'Dense', 'Normalize'].map((kind) => `sentence_transformers.models.${kind}`);
  writeFileSync(join(dir, 'modules.json'), JSON.stringify(modules.map((m, i) => ({ ...m, type: legacy[i] }))));
  writeFileSync(join(dir, '1_Pooling', 'config.json'), JSON.stringify({ word_embedding_dimension: 32, pooling_mode_cls_token: false, pooling_mode_mean_tokens: true, pooling_mode_max_tokens: false }));
  writeFileSync(join(dir, 'sentence_bert_config.json'), JSON.stringify({ max_seq_length: 20, do_lower_case: false }));
  const tokenizerConfig = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...tokenizerConfig, model_max_length: 1e30 }));
  assertVectors(dir, 'sentence-transformers 5');
});

test('Dense modules that would give other vectors are refused by name', () => {
  const edit = (name: string, file: string, change: (config: Record<string, unknown>) => Record<string, unknown>) => {
    const dir = copy(name);
    writeFileSync(join(dir, file), JSON.stringify(change(JSON.parse(readFileSync(join(dir, file), 'utf8')) as Record<string, unknown>)));
    return dir;
  };
  assert.throws(() => readSentenceTransformersConfig(edit('relu', join('2_Dense', 'config.json'), (c) => ({ ...c, activation_function: 'torch.nn.modules.activation.ReLU' }))),
    /activation_function "torch.nn.modules.activation.ReLU" is not implemented/);
  assert.throws(() => readSentenceTransformersConfig(edit('width', join('3_Dense', 'config.json'), (c) => ({ ...c, in_features: 20 }))),
    /3_Dense\/config.json: in_features 20, but the module before it gives 24 values/);
  assert.throws(() => readSentenceTransformersConfig(edit('max', join('1_Pooling', 'config.json'), (c) => ({ ...c, pooling_mode: 'max' }))),
    /pooling_mode "max" is not implemented/);
  assert.throws(() => readSentenceTransformersConfig(edit('two', join('1_Pooling', 'config.json'), (c) => ({ ...c, pooling_mode: ['mean', 'cls'] }))),
    /fuseformer embed runs one mode, "mean", "cls" or "lasttoken" \(several modes are concatenated\)/);
});
