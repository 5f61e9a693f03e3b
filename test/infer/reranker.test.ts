// Cross-encoder reranking against sentence-transformers' CrossEncoder.predict on tiny random checkpoints
// (test/fixtures/cross-encoder/make.py): a BertForSequenceClassification (classifier over the pooler, token
// types 0 / 1) and an XLMRobertaForSequenceClassification (dense + tanh + out_proj over <s>), at full length and
// with pairs cut to 20 tokens (longest_first); the truncation rule itself; the refusals.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { Reranker } from '../../src/infer/reranker.js';
import { longestFirst } from '../../src/io/tokenizer.js';

const FIXTURE = join('test', 'fixtures', 'cross-encoder');
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as { query: string; documents: string[]; models: Record<string, Record<string, number[]>> };

for (const name of ['bert', 'xlm-roberta']) {
  test(`a ${name} cross-encoder scores as CrossEncoder.predict does, at full length and cut to 20 tokens`, () => {
    for (const length of ['62', '20']) {
      const reranker = Reranker.load(join(FIXTURE, name), new CpuBackend(), { dtype: 'f32', maxTokens: Number(length), batchSize: 3 });
      try {
        const { scores, truncated } = reranker.rerank(expected.query, expected.documents);
        if (length === '20') assert.ok(truncated >= 2, `${name}: pairs cut at 20 tokens: ${truncated}`);
        scores.forEach((s, i) => assert.ok(Math.abs(s - expected.models[name]![length]![i]!) < 1e-6, `${name} at ${length}: document ${i}: ${s} vs ${expected.models[name]![length]![i]}`));
      } finally {
        reranker.free();
      }
    }
  });
}

test('longest_first keeps what the Rust tokenizers library keeps', () => {
  assert.deepEqual(longestFirst(5, 3, 10), [5, 3]);   // fits
  assert.deepEqual(longestFirst(3, 12, 10), [3, 7]);  // only the longer cut
  assert.deepEqual(longestFirst(10, 8, 7), [4, 3]);   // both to half; the odd token to the longer (first)
  assert.deepEqual(longestFirst(8, 10, 7), [3, 4]);
  assert.deepEqual(longestFirst(9, 9, 7), [3, 4]);    // a tie: the odd token to the second
});

test('a model without a classification head is not a reranker', () => {
  assert.throws(() => Reranker.load(join('test', 'fixtures', 'roberta', 'roberta'), new CpuBackend()), /no sequence-classification head/);
});
