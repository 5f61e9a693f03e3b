// Model directories whose weights are pytorch_model.bin (test/fixtures/torch/, written by transformers
// and torch.save through make.py): the models load and give Hugging Face's logits.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { loadSeq2Seq, translate } from '../../src/infer/seq2seq.js';
import { TorchCheckpointReader } from '../../src/io/torch-checkpoint.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import { loadHfWeights, shardFiles } from '../../src/models/hf-weights.js';
import { loadModelConfig } from '../../src/models/registry.js';

const FIXTURES = 'test/fixtures/torch';
const reference = JSON.parse(readFileSync(join(FIXTURES, 'logits.json'), 'utf8')) as {
  prompt: number[]; gpt2: number[]; llama: number[]; marian: { sources: number[][]; beams1: number[][]; beams4: number[][] };
};
const scratch = mkdtempSync(join(tmpdir(), 'fuseformer-torch-weights-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

for (const family of ['gpt2', 'llama'] as const) {
  test(`${family} from pytorch_model.bin${family === 'llama' ? ' shards (one ZIP, one legacy; bf16)' : ' (tied head)'}: HF's logits`, () => {
    const dir = join(FIXTURES, family);
    const { model, unused } = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' });
    try {
      assert.deepEqual(unused, []);
      const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 16 });
      const logits = engine.promptLogits(reference.prompt);
      engine.dispose();
      assert.equal(logits.length, reference[family].length);
      const error = relError(logits, reference[family]);
      assert.ok(error <= 1e-5, `rel err ${error}`);
    } finally {
      model.free();
    }
  });
}

test('MarianMTModel from pytorch_model.bin (opus-mt\'s layout): HF generate\'s greedy and 4-beam outputs', () => {
  const translator = loadSeq2Seq(join(FIXTURES, 'marian'), new CpuBackend(), { dtype: 'f32' });
  try {
    // The state dict's tied and derived copies (shared embeddings, sinusoidal tables) fill nothing new.
    assert.deepEqual(translator.unusedTensors, []);
    for (const beams of [1, 4] as const) {
      const outputs = translate(translator, reference.marian.sources, { numBeams: beams, maxNewTokens: 12 }).map((t) => t.tokens);
      assert.deepEqual(outputs, reference.marian[`beams${beams}`], `${beams} beam(s)`);
    }
  } finally {
    translator.model.dispose();
  }
});

test('a training model takes its weights from pytorch_model.bin (fine-tuning a .bin checkpoint)', () => {
  const dir = join(FIXTURES, 'gpt2');
  const config = loadModelConfig(dir);
  assert.equal(config.family, 'gpt2');
  const backend = new CpuBackend();
  const model = new Gpt2Model(backend, config.config as Gpt2Config, 'f32');
  const loaded = loadHfWeights(model.params, dir);
  assert.deepEqual(loaded.files, [join(dir, 'pytorch_model.bin')]);
  const reader = TorchCheckpointReader.open(join(dir, 'pytorch_model.bin'));
  try {
    for (const name of ['transformer.h.1.attn.c_attn.weight', 'transformer.ln_f.bias', 'transformer.wpe.weight']) {
      assert.deepEqual(model.params.download().get(name)!.data, reader.readFloats(name), name);
    }
  } finally {
    reader.close();
  }
});

test('shardFiles: safetensors before PyTorch files, indexes before single files, and an error listing all four', () => {
  const dir = join(scratch, 'dir');
  const make = (...files: string[]) => {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    for (const f of files) writeFileSync(join(dir, f), '');
  };
  make('pytorch_model.bin', 'model.safetensors');
  assert.deepEqual(shardFiles(dir), [join(dir, 'model.safetensors')]);
  make('pytorch_model.bin');
  assert.deepEqual(shardFiles(dir), [join(dir, 'pytorch_model.bin')]);
  assert.deepEqual(shardFiles(join(FIXTURES, 'llama')), ['pytorch_model-00001-of-00002.bin', 'pytorch_model-00002-of-00002.bin'].map((f) => join(FIXTURES, 'llama', f)));
  make('config.json');
  assert.throws(() => shardFiles(dir), /no weights \(model\.safetensors, model\.safetensors\.index\.json, pytorch_model\.bin or pytorch_model\.bin\.index\.json\)/);
});
