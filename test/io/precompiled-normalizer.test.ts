// The Precompiled normalizer as the Rust tokenizers library applies it (grapheme clusters, the shortest rule
// matching a cluster's start), against its own outputs over unigram-nfkc.model's nmt_nfkc character map
// (test/fixtures/sentencepiece/precompiled.py): ligatures, full- and half-width forms, circled numbers, a
// zero-width-joined emoji kept whole (the tokenizers library's NFKC approximation turns each joiner into a
// space), control and format characters; and the approximation replaced inside a tokenizer.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { precompiledNormalize } from '../../src/io/precompiled-normalizer.js';
import { SentencePieceModel } from '../../src/io/sentencepiece.js';
import { createTokenizer } from '../../src/io/tokenizer.js';

const DIR = join('test', 'fixtures', 'sentencepiece');
const expected = JSON.parse(readFileSync(join(DIR, 'precompiled.json'), 'utf8')) as { texts: string[]; normalized: string[] };
const model = SentencePieceModel.fromFile(join(DIR, 'unigram-nfkc.model'));

test('Precompiled normalization equals the Rust library\'s on every text', () => {
  expected.texts.forEach((text, i) => assert.equal(precompiledNormalize(model.characterMap, text), expected.normalized[i], JSON.stringify(text)));
});

test('a tokenizer.json with a Precompiled normalizer normalizes exactly (a joined emoji stays one unknown run)', () => {
  // The raw character map, as transformers writes it into tokenizer.json (base64).
  const charsmap = Buffer.from(model.characterMapBytes!).toString('base64');
  const vocab: [string, number][] = [['<unk>', 0], ['▁', -1], ['a', -2], ['1', -2], ['⁄', -3], ['2', -2]];
  const tokenizer = createTokenizer({
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Precompiled', precompiled_charsmap: charsmap }] },
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    model: { type: 'Unigram', unk_id: 0, vocab },
  });
  // ½ → 1⁄2 by the map; the ZWJ family → one unknown run (fused), not four split by spaces.
  assert.deepEqual(tokenizer.encode('a½'), [1, 2, 3, 4, 5]);
  assert.deepEqual(tokenizer.encode('a👨\u200d👩\u200d👧'), [1, 2, 0]);
});
