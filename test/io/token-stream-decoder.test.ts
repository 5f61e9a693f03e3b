import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GPT2_END_OF_TEXT_ID, gpt2TokenizerConfig, gpt2TokenizerJson } from '../../src/io/gpt2-tokenizer-json.js';
import { decodeIncrementally, TokenStreamDecoder, TokenTexts } from '../../src/io/token-stream-decoder.js';
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

// Llama 2's decoder: ▁ → space, byte fallback, then Strip one leading space of the whole text.
const pieces = ['▁', 'h', 'e', 'l', 'o', 'w', 'r', 'd', '▁hello', '▁world', '<0xC3>', '<0xA9>'];
const sentencePiece = createTokenizer({
  normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
  decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
  model: { type: 'BPE', byte_fallback: true, vocab: Object.fromEntries(pieces.map((t, i) => [t, i])), merges: [] },
});
const id = (piece: string) => pieces.indexOf(piece);

test('with the prompt as context, the first generated word keeps the space a SentencePiece decoder strips at the start', () => {
  const prompt = [id('▁hello')];
  assert.equal(sentencePiece.decode(prompt), 'hello');
  const generated = [id('▁world'), id('<0xC3>'), id('<0xA9>'), id('▁world')];
  const withContext = new TokenStreamDecoder(sentencePiece, { context: prompt });
  const shown = generated.map((t) => withContext.push(t)).join('') + withContext.flush();
  assert.equal(shown, ' worldé world');
  assert.equal(sentencePiece.decode(prompt) + shown, sentencePiece.decode([...prompt, ...generated]));
  // Without context the first word loses its space (the old behaviour, right for a text that starts here).
  assert.equal([...decodeIncrementally(sentencePiece, generated)].join(''), 'worldé world');
});

test('context: only the prompt\'s last tokens are decoded again; a prompt ending inside a character starts without context', () => {
  const long = gpt2.encode('Call me Ishmael. Some years ago, never mind how long precisely');
  const decoder = new TokenStreamDecoder(gpt2, { context: long });
  assert.equal(decoder.push(gpt2.encode(' having')[0]!), ' having');
  const [lead] = gpt2.encode('🦀');
  const split = new TokenStreamDecoder(gpt2, { context: [...gpt2.encode('crab'), lead!] });
  const rest = gpt2.encode('🦀').slice(1);
  assert.equal(rest.map((t) => split.push(t)).join('') + split.flush(), gpt2.decode(rest));
});

test('TokenTexts: a token\'s text for logprobs keeps its SentencePiece space and its WordPiece join; alternatives share the position', () => {
  assert.equal(sentencePiece.decode([id('▁world')]), 'world', 'decoded alone, the space is stripped');
  const texts = new TokenTexts(sentencePiece, [id('▁hello')]);
  assert.equal(texts.textOf(id('▁world')), ' world');
  assert.equal(texts.textOf(id('▁hello')), ' hello', 'an alternative at the same position');
  texts.advance(id('▁world'));
  // é as two byte-fallback tokens: the first shows U+FFFD, the one completing it the character.
  assert.equal(texts.textOf(id('<0xC3>')), '\uFFFD');
  texts.advance(id('<0xC3>'));
  assert.equal(texts.textOf(id('<0xA9>')), 'é');
  texts.advance(id('<0xA9>'));
  assert.equal(texts.textOf(id('▁world')), ' world');
  // Without a prompt the first token is decoded as the start of a text.
  assert.equal(new TokenTexts(sentencePiece).textOf(id('▁world')), 'world');

  const vocab = ['[UNK]', 'the', 'play', '##ing'];
  const wordPiece = createTokenizer({
    pre_tokenizer: { type: 'BertPreTokenizer' },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: false },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
  });
  const words = new TokenTexts(wordPiece, [1]);
  assert.equal(words.textOf(2), ' play');
  words.advance(2);
  assert.equal(words.textOf(3), 'ing');

  // Special tokens are shown; a long run keeps only the last few tokens as context and stays exact.
  const gptTexts = new TokenTexts(gpt2, gpt2.encode('Call me Ishmael.'));
  const ids = gpt2.encode(' Some years ago, never mind how long precisely<|endoftext|>');
  const shown = ids.map((t) => { const text = gptTexts.textOf(t); gptTexts.advance(t); return text; });
  assert.equal(shown.join(''), ' Some years ago, never mind how long precisely<|endoftext|>');
  assert.equal(shown.at(-1), '<|endoftext|>');
});
