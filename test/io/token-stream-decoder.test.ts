import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GPT2_END_OF_TEXT_ID, gpt2TokenizerConfig, gpt2TokenizerJson } from '../../src/io/gpt2-tokenizer-json.js';
import { decodeIncrementally, TokenStreamDecoder } from '../../src/io/token-stream-decoder.js';
import { createTokenizer } from '../../src/io/tokenizer.js';

const gpt2 = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');

test('emits complete characters only when byte-level tokens split an emoji', () => {
  const crab = gpt2.encode('🦀');
  assert.equal(crab.length, 3, 'GPT-2 spells 🦀 with three byte-level tokens');
  const decoder = new TokenStreamDecoder(gpt2);
  assert.deepEqual(gpt2.encode('I love 🦀!').map((id) => decoder.push(id)), ['I', ' love', ' ', '', '🦀', '!']);
  assert.equal(decoder.flush(), '');
});

test('the pieces join to decode(all ids) and never hold a replacement character', () => {
  const text = 'Ahab 🐳 and 日本語, 👨‍👩‍👧 — naïve ✔️ end<|endoftext|>';
  const ids = gpt2.encode(text);
  const pieces = [...decodeIncrementally(gpt2, ids)];
  assert.equal(pieces.join(''), text);
  for (const piece of pieces) assert.ok(!piece.includes('\uFFFD'), `piece ${JSON.stringify(piece)} holds U+FFFD`);
  assert.ok(pieces.length > 10);
  assert.equal([...decodeIncrementally(gpt2, ids, { skipSpecialTokens: true })].join(''), text.replace('<|endoftext|>', ''));
});

test('flush returns an incomplete character as U+FFFD, then the decoder starts afresh', () => {
  const [first, second] = gpt2.encode('🦀');
  const decoder = new TokenStreamDecoder(gpt2);
  assert.equal(decoder.push(first!), '');
  assert.equal(decoder.push(second!), '');
  assert.equal(decoder.flush(), '\uFFFD');
  assert.equal(decoder.push(gpt2.encode('Hello')[0]!), 'Hello');
  assert.equal(decoder.push(GPT2_END_OF_TEXT_ID), '<|endoftext|>');
});

test('invalid UTF-8 from a model (a lead byte followed by ASCII) is passed on, not held forever', () => {
  const [leadByte] = gpt2.encode('🦀'); // "ð", the first byte of a 4-byte character
  const ids = [leadByte!, ...gpt2.encode('abc def')];
  const pieces = [...decodeIncrementally(gpt2, ids)];
  assert.equal(pieces.join(''), gpt2.decode(ids));
  assert.equal(pieces[0], '\uFFFDabc');
});

test('WordPiece continuation tokens ("##ing") join the word before them across pushes', () => {
  const vocab = ['[UNK]', 'the', 'play', '##ing', '##s', 'cat', '!'];
  const wordPiece = createTokenizer({
    pre_tokenizer: { type: 'BertPreTokenizer' },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: false },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
  });
  const ids = wordPiece.encode('the playings cat !');
  assert.deepEqual(ids, [1, 2, 3, 4, 5, 6]);
  const pieces = [...decodeIncrementally(wordPiece, ids)];
  assert.deepEqual(pieces, ['the', ' play', 'ing', 's', ' cat', ' !']);
  assert.equal(pieces.join(''), wordPiece.decode(ids));
});
