import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bytesToUnicode, createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { createTokenizer } from '../../src/io/tokenizer.js';

const text = 'Call me Ishmael—naïve 🐳\n\n  tabs\tand <|endoftext|> specials<|endoftext|>';

test('ids are the UTF-8 bytes; special tokens in the text become their ids', () => {
  const tok = createByteTokenizer();
  assert.equal(tok.vocabSize, 257);
  assert.equal(tok.eosTokenId, 256);
  assert.equal(tok.bosTokenId, 256);
  assert.deepEqual(tok.encode('hé'), [104, 0xc3, 0xa9]);
  assert.deepEqual(tok.encode('a<|endoftext|>b'), [97, 256, 98]);
  assert.equal(tok.decode(tok.encode(text)), text);
  assert.equal(tok.decode([97, 256, 98], { skipSpecialTokens: true }), 'ab');
  assert.equal(tok.decode([0xc3]), '\ufffd', 'a cut character decodes to U+FFFD');
  assert.throws(() => tok.decode([257]), /token id 257 is outside the vocabulary/);
  assert.equal(tok.idToToken(32), bytesToUnicode()[32]);
  assert.equal(tok.tokenToId(bytesToUnicode()[200]!), 200);
  assert.equal(tok.tokenToId('<|endoftext|>'), 256);
});

test('BERT-style specials: roles must name special tokens', () => {
  const tok = createByteTokenizer({ specialTokens: ['[PAD]', '[CLS]', '[SEP]', '[MASK]'], padToken: '[PAD]' });
  assert.equal(tok.vocabSize, 260);
  assert.equal(tok.padTokenId, 256);
  assert.equal(tok.eosTokenId, undefined);
  assert.equal(tok.tokenToId('[MASK]'), 259);
  assert.throws(() => createByteTokenizer({ specialTokens: ['[PAD]'], eosToken: '</s>' }), /eosToken "<\/s>" is not one of the special tokens/);
  assert.throws(() => createByteTokenizer({ specialTokens: ['x', 'x'] }), /repeated/);
});

test('its tokenizer.json gives identical ids and text through the Hugging Face library', () => {
  const tok = createByteTokenizer();
  const hf = createTokenizer(tok.tokenizerJson(), tok.tokenizerConfig(), 'byte tokenizer.json');
  assert.equal(hf.vocabSize, tok.vocabSize);
  assert.equal(hf.eosTokenId, tok.eosTokenId);
  const all = Array.from({ length: 256 }, (_, b) => String.fromCharCode(b)).join('');
  for (const s of [text, all, '']) {
    assert.deepEqual(hf.encode(s, { addSpecialTokens: false }), tok.encode(s));
    assert.deepEqual(hf.encode(s), tok.encode(s), 'no post-processor adds tokens');
  }
  const ids = tok.encode(text);
  assert.equal(hf.decode(ids), tok.decode(ids));
});
