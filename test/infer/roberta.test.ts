// RoBERTa, XLM-RoBERTa, MPNet and DistilBERT read as BERT encoders (positions from the padding id + 1,
// "roberta." / "mpnet." / "distilbert." names, lm_head.* / vocab_*, MPNet's relative position bias), against
// transformers' own outputs for tiny random checkpoints (test/fixtures/roberta/make.py): last_hidden_state, MLM
// logits and pooler_output for a right-padded batch, MPNet's position buckets, and sentence embeddings of texts
// through the checkpoint's byte-level BPE tokenizer.json (RobertaProcessing's <s> … </s>).

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { BertEncoder, positionIds, relativePositionBucket } from '../../src/infer/bert.js';
import { Embedder } from '../../src/infer/embedder.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { BertModel } from '../../src/models/bert-model.js';
import { loadModelConfig } from '../../src/models/registry.js';

const FIXTURES = join(process.cwd(), 'test', 'fixtures', 'roberta');
const outputs = JSON.parse(readFileSync(join(FIXTURES, 'outputs.json'), 'utf8')) as {
  roberta: { ids: number[][]; mask: number[][]; last_hidden_state: number[]; logits: number[]; texts: string[]; text_ids: number[][]; embeddings: number[][] };
  'xlm-roberta': { ids: number[][]; mask: number[][]; last_hidden_state: number[]; pooler_output: number[] };
  mpnet: { ids: number[][]; mask: number[][]; last_hidden_state: number[]; logits: number[]; buckets: number[] };
  distilbert: { ids: number[][]; mask: number[][]; last_hidden_state: number[]; logits: number[] };
};
const scratch = mkdtempSync(join(tmpdir(), 'fuseformer-roberta-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function maxRelError(actual: ArrayLike<number>, expected: readonly number[]): number {
  assert.equal(actual.length, expected.length);
  let worst = 0, scale = 0;
  for (const x of expected) scale = Math.max(scale, Math.abs(x));
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!) / scale);
  return worst;
}

test('RoBERTa position ids as HF counts them: padding at pad_token_id, the i-th other token at pad_token_id + i', () => {
  const config = loadModelConfig(join(FIXTURES, 'roberta'));
  assert.equal(config.family, 'bert');
  if (config.family !== 'bert') return;
  assert.equal(config.config.modelType, 'roberta');
  const ids = Int32Array.from([0, 7, 9, 2, 1, 1, /* a pad id inside a row keeps pad_token_id, as HF's does */ 0, 1, 8, 2, 1, 1]);
  assert.deepEqual([...positionIds({ batch: 2, length: 6, ids }, config.config)], [2, 3, 4, 5, 1, 1, 2, 1, 3, 4, 1, 1]);
  assert.deepEqual([...positionIds({ batch: 1, length: 3, ids: Int32Array.from([5, 1, 5]) }, { ...config.config, modelType: undefined })], [0, 1, 2]);
});

test('a RobertaForMaskedLM checkpoint: last_hidden_state and MLM logits equal transformers\'', () => {
  const { encoder, unused } = BertEncoder.load(join(FIXTURES, 'roberta'), new CpuBackend(), { dtype: 'f32' });
  try {
    const o = outputs.roberta;
    assert.deepEqual(unused, []);
    assert.ok(encoder.hasMaskedLm && !encoder.hasPooler);
    assert.equal(encoder.maxTokens, 64);
    const hidden = encoder.encode(o.ids, o.mask).lastHiddenState;
    assert.ok(maxRelError(hidden, o.last_hidden_state) < 1e-5, `last_hidden_state: ${maxRelError(hidden, o.last_hidden_state)}`);
    const logits = encoder.maskedLmLogits(o.ids, o.mask);
    assert.ok(maxRelError(logits, o.logits) < 1e-5, `logits: ${maxRelError(logits, o.logits)}`);
    assert.throws(() => encoder.encode([Array.from({ length: 65 }, () => 5)]), /sequences of 65 tokens; the model takes at most 64 \(max_position_embeddings 66, positions counted from 2\)/);
  } finally {
    encoder.free();
  }
});

test('an XLMRobertaModel checkpoint (bf16 weights, unprefixed names, a pooler): last_hidden_state and pooler_output equal transformers\'', () => {
  const { encoder } = BertEncoder.load(join(FIXTURES, 'xlm-roberta'), new CpuBackend(), { dtype: 'f32' });
  try {
    const o = outputs['xlm-roberta'];
    const out = encoder.encode(o.ids, o.mask);
    assert.ok(maxRelError(out.lastHiddenState, o.last_hidden_state) < 1e-5, `last_hidden_state: ${maxRelError(out.lastHiddenState, o.last_hidden_state)}`);
    assert.ok(maxRelError(out.poolerOutput!, o.pooler_output) < 1e-5, `pooler_output: ${maxRelError(out.poolerOutput!, o.pooler_output)}`);
  } finally {
    encoder.free();
  }
});

test('RoBERTa sentence embeddings from text: the tokenizer\'s ids and sentence-transformers\' vectors', () => {
  const o = outputs.roberta;
  const tokenizer = loadTokenizer(join(FIXTURES, 'roberta'));
  assert.deepEqual(o.texts.map((t) => tokenizer.encode(t)), o.text_ids);
  const embedder = Embedder.load(join(FIXTURES, 'roberta'), new CpuBackend(), { dtype: 'f32', batchSize: 3, pooling: 'mean', normalize: true });
  try {
    const { vectors } = embedder.embed(o.texts);
    vectors.forEach((v, i) => assert.ok(maxRelError(v, o.embeddings[i]!) < 1e-5, `text ${i}: ${maxRelError(v, o.embeddings[i]!)}`));
  } finally {
    embedder.free();
  }
});

test('RoBERTa configs: positions that leave no room for a token are refused; training refuses the family', () => {
  const dir = join(scratch, 'short');
  cpSync(join(FIXTURES, 'roberta'), dir, { recursive: true });
  const json = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...json, max_position_embeddings: 2 }));
  assert.throws(() => loadModelConfig(dir), /max_position_embeddings" is 2; expected more than 2: a roberta model.s positions start there/);
  const config = loadModelConfig(join(FIXTURES, 'roberta'));
  if (config.family !== 'bert') throw new Error('expected the bert family');
  assert.throws(() => new BertModel(new CpuBackend(), config.config, 'f32'), /BERT training builds model_type "bert" only; this config is "roberta"/);
});

test('MPNet relative position buckets equal HF\'s for offsets −300 … 300 (float32 rounding at powers of two)', () => {
  const got = Array.from({ length: 601 }, (_, i) => relativePositionBucket(i - 300, 32));
  assert.deepEqual(got, outputs.mpnet.buckets);
});

test('an MPNetForMaskedLM checkpoint: last_hidden_state and MLM logits equal transformers\' (a 150-token row past max_distance)', () => {
  const { encoder, unused } = BertEncoder.load(join(FIXTURES, 'mpnet'), new CpuBackend(), { dtype: 'f32' });
  try {
    const o = outputs.mpnet;
    assert.deepEqual(unused, []);
    assert.equal(encoder.maxTokens, 158);
    const hidden = encoder.encode(o.ids, o.mask).lastHiddenState;
    assert.ok(maxRelError(hidden, o.last_hidden_state) < 1e-5, `last_hidden_state: ${maxRelError(hidden, o.last_hidden_state)}`);
    const logits = encoder.maskedLmLogits(o.ids, o.mask);
    assert.ok(maxRelError(logits, o.logits) < 1e-5, `logits: ${maxRelError(logits, o.logits)}`);
    assert.throws(() => encoder.encode([[0, 5, 2]], undefined, [[0, 1, 0]]), /token_type_ids\[0\]\[1\] is 1; expected a token type in \[0, 1\)/);
  } finally {
    encoder.free();
  }
  assert.throws(() => BertEncoder.load(join(FIXTURES, 'mpnet'), new CpuBackend(), { attention: 'flash' }), /attention 'flash' cannot add MPNet's relative position bias/);
});

test('a DistilBertForMaskedLM checkpoint: last_hidden_state and MLM logits equal transformers\'', () => {
  const { encoder, unused } = BertEncoder.load(join(FIXTURES, 'distilbert'), new CpuBackend(), { dtype: 'f32' });
  try {
    const o = outputs.distilbert;
    assert.deepEqual(unused, []);
    assert.ok(encoder.hasMaskedLm && !encoder.hasPooler);
    assert.equal(encoder.maxTokens, 40);
    const hidden = encoder.encode(o.ids, o.mask).lastHiddenState;
    assert.ok(maxRelError(hidden, o.last_hidden_state) < 1e-5, `last_hidden_state: ${maxRelError(hidden, o.last_hidden_state)}`);
    const logits = encoder.maskedLmLogits(o.ids, o.mask);
    assert.ok(maxRelError(logits, o.logits) < 1e-5, `logits: ${maxRelError(logits, o.logits)}`);
  } finally {
    encoder.free();
  }
});
