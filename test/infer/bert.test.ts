// BERT encoder inference on the CPU backend against an independent float64 forward pass (bert-reference.ts)
// over tiny random checkpoints written as HF saves them: last_hidden_state, pooler_output, masked-LM logits
// and pooled sentence embeddings; padding leaves the other rows (and a row's real positions) unchanged; both
// attention paths agree; the checkpoint name variants load; bad files and bad batches are clear errors.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { ArgumentError, FuseformerError } from '../../src/errors.js';
import { BertEncoder, padSequences } from '../../src/infer/bert.js';
import type { BertConfig } from '../../src/models/bert.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_BERT, writeBertFolder } from './bert-folder.js';
import type { BertFolderOptions } from './bert-folder.js';
import { bertReference } from './bert-reference.js';
import { TINY_GPT2, writeModelFolder } from './hf-folder.js';

const backend = new CpuBackend();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-bert-'));
after(() => rmSync(root, { recursive: true, force: true }));
let folders = 0;
function folder(config: BertConfig, seed: number, options: BertFolderOptions = {}) {
  const dir = join(root, `m${folders++}`);
  return { dir, weights: writeBertFolder(dir, config, seed, options) };
}

/** The largest |a − b| over max(1, max |b|). */
function maxError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let diff = 0, scale = 1;
  for (let i = 0; i < b.length; i++) { diff = Math.max(diff, Math.abs(a[i]! - b[i]!)); scale = Math.max(scale, Math.abs(b[i]!)); }
  return diff / scale;
}
const rows = (flat: Float32Array, width: number, first: number, count: number) => flat.subarray(first * width, (first + count) * width);
const flatten = (vectors: readonly ArrayLike<number>[]) => Float64Array.from(vectors.flatMap((v) => Array.from(v)));

// Three sequences of 9, 5 and 1 tokens (right-padded to 9) with token types on the first.
const SEQUENCES = [[2, 17, 40, 98, 5, 63, 11, 3, 0], [2, 50, 51, 52, 3], [2]];
const TYPES = [[0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0]];
const BATCH = padSequences(SEQUENCES, 0);

test('encode: last_hidden_state and pooler_output equal the float64 reference at every real position', () => {
  const { dir, weights } = folder(TINY_BERT, 1);
  const { encoder, unused } = BertEncoder.load(dir, backend);
  assert.deepEqual(unused, []);
  assert.ok(encoder.hasPooler && encoder.hasMaskedLm);
  const out = encoder.encode(BATCH.inputIds, BATCH.attentionMask, TYPES);
  const { batch, length, hidden: H } = out;
  assert.deepEqual([batch, length, H], [3, 9, 32]);
  assert.equal(out.lastHiddenState.length, 3 * 9 * 32);
  SEQUENCES.forEach((ids, s) => {
    const ref = bertReference(TINY_BERT, weights, BATCH.inputIds[s]!, BATCH.attentionMask[s]!, TYPES[s]);
    // Every position, padded ones included: their queries see only the real keys, as in HF.
    const err = maxError(rows(out.lastHiddenState, H, s * 9, 9), flatten(ref.hidden));
    assert.ok(err < 2e-5, `sequence ${s} (${ids.length} tokens): hidden max error ${err}`);
    const pooledErr = maxError(rows(out.poolerOutput!, H, s, 1), ref.pooled!);
    assert.ok(pooledErr < 2e-5, `sequence ${s}: pooler max error ${pooledErr}`);
  });
  encoder.free();
});

test('padding does not change the other rows, nor a row’s real positions', () => {
  const { dir } = folder(TINY_BERT, 2);
  const { encoder } = BertEncoder.load(dir, backend);
  const H = encoder.hidden;
  const together = encoder.encode(BATCH.inputIds, BATCH.attentionMask);
  SEQUENCES.forEach((ids, s) => {
    const alone = encoder.encode([ids]);
    const err = maxError(rows(together.lastHiddenState, H, s * 9, ids.length), alone.lastHiddenState);
    assert.ok(err < 1e-6, `sequence ${s}: batched (padded) vs alone ${err}`);
    assert.ok(maxError(rows(together.poolerOutput!, H, s, 1), alone.poolerOutput!) < 1e-6);
  });
  // Another padded row added to the batch, and the pad token changed: the first two rows are unchanged.
  const wider = padSequences([...SEQUENCES.slice(0, 2), [2, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 3]], 7);
  const more = encoder.encode(wider.inputIds, wider.attentionMask);
  for (const s of [0, 1]) {
    const n = SEQUENCES[s]!.length;
    assert.ok(maxError(rows(more.lastHiddenState, H, s * 12, n), rows(together.lastHiddenState, H, s * 9, n)) < 1e-6, `row ${s} changed`);
  }
  encoder.free();
});

test('the fused and the materialised attention paths agree', () => {
  const { dir } = folder(TINY_BERT, 3);
  const flash = BertEncoder.load(dir, backend, { attention: 'flash' }).encoder;
  const materialized = BertEncoder.load(dir, backend, { attention: 'materialized' }).encoder;
  const a = flash.encode(BATCH.inputIds, BATCH.attentionMask, TYPES), b = materialized.encode(BATCH.inputIds, BATCH.attentionMask, TYPES);
  assert.ok(maxError(a.lastHiddenState, b.lastHiddenState) < 1e-5);
  assert.ok(maxError(a.poolerOutput!, b.poolerOutput!) < 1e-5);
  flash.free();
  materialized.free();
});

test('masked-LM logits equal the reference (tied decoder, padded vocabulary rows dropped)', () => {
  const { dir, weights } = folder(TINY_BERT, 4);
  const { encoder } = BertEncoder.load(dir, backend);
  const logits = encoder.maskedLmLogits(BATCH.inputIds, BATCH.attentionMask, TYPES);
  const V = TINY_BERT.vocabSize;
  assert.equal(logits.length, 3 * 9 * V);
  SEQUENCES.forEach((_, s) => {
    const ref = bertReference(TINY_BERT, weights, BATCH.inputIds[s]!, BATCH.attentionMask[s]!, TYPES[s]);
    const err = maxError(rows(logits, V, s * 9, 9), flatten(ref.logits!));
    assert.ok(err < 5e-5, `sequence ${s}: logits max error ${err}`);
  });
  encoder.free();
});

test('an untied decoder, the bias under decoder.bias, a tanh-GELU config, sharded files: all read', () => {
  const config: BertConfig = { ...TINY_BERT, activation: 'gelu_tanh', heads: 2 };
  const { dir, weights } = folder(config, 5, { untiedDecoder: true, decoderBiasName: true, sharded: true, pooler: false });
  const { encoder, files } = BertEncoder.load(dir, backend);
  assert.equal(files.length, 2);
  assert.ok(!encoder.hasPooler && encoder.hasMaskedLm);
  const ids = [[2, 30, 31, 32, 3]];
  const ref = bertReference(config, weights, ids[0]!, [1, 1, 1, 1, 1]);
  assert.ok(maxError(encoder.maskedLmLogits(ids), flatten(ref.logits!)) < 5e-5);
  const out = encoder.encode(ids);
  assert.equal(out.poolerOutput, undefined);
  assert.ok(maxError(out.lastHiddenState, flatten(ref.hidden)) < 2e-5);
  encoder.free();
});

test('BertModel files (no "bert." prefix) and TensorFlow gamma/beta names give the same outputs', () => {
  const a = folder(TINY_BERT, 6, { maskedLm: false });
  const b = folder(TINY_BERT, 6, { maskedLm: false, stripPrefix: true, tensorflowNames: true });
  const ea = BertEncoder.load(a.dir, backend).encoder, eb = BertEncoder.load(b.dir, backend).encoder;
  assert.ok(!eb.hasMaskedLm && eb.hasPooler);
  const ra = ea.encode(BATCH.inputIds, BATCH.attentionMask), rb = eb.encode(BATCH.inputIds, BATCH.attentionMask);
  assert.deepEqual(rb.lastHiddenState, ra.lastHiddenState);
  assert.deepEqual(rb.poolerOutput, ra.poolerOutput);
  assert.throws(() => eb.maskedLmLogits(BATCH.inputIds), (e: unknown) => e instanceof ArgumentError && /no masked-LM head \(cls\.predictions\.\*\)/.test(e.message));
  ea.free();
  eb.free();
});

test('embeddings: mean over the real tokens or the [CLS] row, optionally unit length', () => {
  const { dir, weights } = folder(TINY_BERT, 7);
  const { encoder } = BertEncoder.load(dir, backend);
  const refs = SEQUENCES.map((_, s) => bertReference(TINY_BERT, weights, BATCH.inputIds[s]!, BATCH.attentionMask[s]!));
  const mean = encoder.embeddings(BATCH.inputIds, BATCH.attentionMask);
  const cls = encoder.embeddings(BATCH.inputIds, BATCH.attentionMask, { pooling: 'cls' });
  const unit = encoder.embeddings(BATCH.inputIds, BATCH.attentionMask, { normalize: true });
  SEQUENCES.forEach((ids, s) => {
    const expected = new Float64Array(32);
    for (let l = 0; l < ids.length; l++) refs[s]!.hidden[l]!.forEach((x, h) => { expected[h]! += x / ids.length; });
    assert.ok(maxError(mean[s]!, expected) < 2e-5, `mean ${s}`);
    assert.ok(maxError(cls[s]!, refs[s]!.hidden[0]!) < 2e-5, `cls ${s}`);
    const norm = Math.hypot(...expected);
    assert.ok(Math.abs(Math.hypot(...unit[s]!) - 1) < 1e-6);
    assert.ok(maxError(unit[s]!, expected.map((x) => x / norm)) < 2e-5, `normalised ${s}`);
  });
  assert.throws(() => encoder.embeddings(BATCH.inputIds, undefined, { pooling: 'max' as 'mean' }), /pooling must be mean, cls, last, got 'max'/);
  encoder.free();
});

test('bf16 weights and activations stay within bf16 rounding of the float64 reference', () => {
  const { dir, weights } = folder(TINY_BERT, 8, { fileDType: 'BF16' });
  const { encoder } = BertEncoder.load(dir, backend, { dtype: 'bf16' });
  const out = encoder.encode(BATCH.inputIds, BATCH.attentionMask);
  const ref = bertReference(TINY_BERT, weights, BATCH.inputIds[0]!, BATCH.attentionMask[0]!);
  const err = maxError(rows(out.lastHiddenState, 32, 0, 9), flatten(ref.hidden));
  assert.ok(err < 6e-2, `bf16 hidden max error ${err}`);
  assert.ok(err > 1e-5, 'bf16 rounding should be visible');
  encoder.free();
});

test('a random batch: rows of every length agree with the reference', () => {
  const rng = new Rng(11);
  const config: BertConfig = { ...TINY_BERT, layers: 1, typeVocabSize: 3 };
  const { dir, weights } = folder(config, 9, { maskedLm: false });
  const { encoder } = BertEncoder.load(dir, backend);
  const lengths = [1, 2, 7, 16, 16, 3];
  const seqs = lengths.map((n) => Array.from(rng.ints(n, 0, config.vocabSize)));
  const padded = padSequences(seqs, 0);
  const types = padded.inputIds.map((r) => r.map((_, l) => l % 3));
  const out = encoder.encode(padded.inputIds, padded.attentionMask, types);
  seqs.forEach((ids, s) => {
    const ref = bertReference(config, weights, padded.inputIds[s]!, padded.attentionMask[s]!, types[s]);
    assert.ok(maxError(rows(out.lastHiddenState, 32, s * 16, ids.length), flatten(ref.hidden.slice(0, ids.length))) < 2e-5, `row ${s}`);
  });
  encoder.free();
});

test('bad checkpoints are errors naming the tensor, the shape or the file', () => {
  const rejects = (options: BertFolderOptions, pattern: RegExp, config: BertConfig = TINY_BERT) => {
    const { dir } = folder(config, 10, options);
    assert.throws(() => BertEncoder.load(dir, backend), (e: unknown) => e instanceof FuseformerError && pattern.test(e.message), String(pattern));
  };
  rejects({ edit: (t) => t.delete('bert.encoder.layer.1.attention.self.key.weight') }, /lacks 1 weight\(s\) the BERT encoder \(with its pooler and MLM head\) needs: 'bert\.encoder\.layer\.1\.attention\.self\.key\.weight' \[32, 32\]/);
  rejects({ edit: (t) => t.delete('bert.pooler.dense.bias') }, /needs: 'bert\.pooler\.dense\.bias' \[32\]/);
  rejects({ edit: (t) => t.set('bert.encoder.layer.0.intermediate.dense.weight', { shape: [32, 48], data: new Float32Array(32 * 48) }) },
    /tensor 'bert\.encoder\.layer\.0\.intermediate\.dense\.weight' has shape \[32, 48\]; the BERT config \(.*config\.json\) implies \[48, 32\]/);
  rejects({ stripPrefix: true, edit: (t) => t.set('embeddings.word_embeddings.weight', { shape: [100, 32], data: new Float32Array(3200) }) },
    /tensor 'embeddings\.word_embeddings\.weight' has shape \[100, 32\]; .* implies \[99, 32\]/);
  // The same tensor under both spellings (with and without the prefix) is a duplicate.
  rejects({ edit: (t) => t.set('embeddings.LayerNorm.weight', t.get('bert.embeddings.LayerNorm.weight')!) }, /'bert\.embeddings\.LayerNorm\.weight' also appears in .*model\.safetensors \(as 'embeddings\.LayerNorm\.weight'\)|'embeddings\.LayerNorm\.weight' also appears/);
  // A GPT-2 directory and a causal BERT are refused by name.
  const gpt2 = join(root, 'gpt2');
  writeModelFolder(gpt2, 'gpt2', TINY_GPT2, 1);
  assert.throws(() => BertEncoder.load(gpt2, backend), (e: unknown) => e instanceof ArgumentError && /a gpt2 model; BERT encoding reads BertModel/.test(e.message));
  rejects({ config: { is_decoder: true } }, /field "is_decoder" is true; expected false \(causal BERT decoders are not supported/);
  const { dir } = folder(TINY_BERT, 10);
  rmSync(join(dir, 'model.safetensors'));
  assert.throws(() => BertEncoder.load(dir, backend), /no weights \(model\.safetensors, model\.safetensors\.index\.json, pytorch_model\.bin or pytorch_model\.bin\.index\.json\)/);
  writeFileSync(join(dir, 'model.safetensors'), 'not a safetensors file');
  assert.throws(() => BertEncoder.load(dir, backend), (e: unknown) => e instanceof FuseformerError && e.message.includes('model.safetensors'));
});

test('unknown tensors are reported, buffers and HF aliases of tied tensors are not', () => {
  const { dir } = folder(TINY_BERT, 12, {
    edit: (t) => {
      t.set('cls.seq_relationship.weight', { shape: [2, 32], data: new Float32Array(64) });
      t.set('bert.embeddings.position_ids', { shape: [1, 40], data: new Float32Array(40) });
      t.set('cls.predictions.decoder.weight', t.get('bert.embeddings.word_embeddings.weight')!);
      t.set('cls.predictions.decoder.bias', t.get('cls.predictions.bias')!);
    },
  });
  const { encoder, unused } = BertEncoder.load(dir, backend);
  assert.deepEqual(unused, ['cls.seq_relationship.weight']);
  encoder.free();
});

test('bad batches are errors naming the row, the position and the rule', () => {
  const { dir } = folder(TINY_BERT, 13);
  const { encoder } = BertEncoder.load(dir, backend);
  const rejects = (fn: () => unknown, pattern: RegExp) => assert.throws(fn, (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  rejects(() => encoder.encode([]), /input_ids must be a non-empty list/);
  rejects(() => encoder.encode([[2, 3], [2]]), /input_ids\[1\] has 1 entries; every row needs 2/);
  rejects(() => encoder.encode([[2, 99]]), /input_ids\[0\]\[1\] is 99; expected a token id in \[0, 99\)/);
  rejects(() => encoder.encode([[2, 3, 4]], [[1, 0, 1]]), /attention_mask\[0\] has a 1 at position 2 after a 0 at 1; padding must follow the tokens/);
  rejects(() => encoder.encode([[2, 3]], [[0, 0]]), /attention_mask\[0\] is all zeros/);
  rejects(() => encoder.encode([[2, 3]], [[1, 2]]), /attention_mask\[0\]\[1\] is 2; expected 0 or 1/);
  rejects(() => encoder.encode([[2, 3]], undefined, [[0, 2]]), /token_type_ids\[0\]\[1\] is 2; expected a token type in \[0, 2\)/);
  rejects(() => encoder.encode([[2, 3]], [[1, 1], [1, 1]]), /attention_mask has 2 rows; input_ids has 1/);
  rejects(() => encoder.encode([Array.from({ length: 41 }, () => 5)]), /sequences of 41 tokens; the model takes at most 40 \(max_position_embeddings 40\)/);
  encoder.free();
  rejects(() => encoder.encode([[2]]), /used after free/);
});
