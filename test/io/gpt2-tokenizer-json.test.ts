import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { encode as referenceGpt2Encode } from 'gpt-3-encoder';
import { GPT2_END_OF_TEXT_ID, gpt2TokenizerConfig, gpt2TokenizerJson, writeGpt2Tokenizer } from '../../src/io/gpt2-tokenizer-json.js';
import { createTokenizer, loadTokenizer } from '../../src/io/tokenizer.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-gpt2-tokenizer-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const gpt2 = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');

// Moby-Dick, chapter 1 (public domain), with the punctuation, contractions, digits and runs of
// whitespace that GPT-2's pre-tokenizer regex treats specially.
const MOBY_DICK = [
  'Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, ' +
    'and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world.',
  "It is a way I have of driving off the spleen, and regulating the circulation. Whenever I find myself growing grim about " +
    "the mouth; whenever it is a damp, drizzly November in my soul; ... then, I account it high time to get to sea as soon as I can.",
  "There now is your insular city of the Manhattoes, belted round by wharves as Indian isles by coral reefs—commerce surrounds it " +
    "with her surf.\n\n    Right and left, the streets take you waterward.  Its extreme downtown is the battery, where that noble " +
    "mole is washed by waves, and cooled by breezes, which a few hours previous were out of sight of land. Look at the crowds of " +
    "water-gazers there. I'd say they're 1,000 strong; you've seen 'em in 1851, haven't you?\t(Chapter 1: Loomings.)  \n",
];

test('encodes known strings to the known GPT-2 ids', () => {
  assert.deepEqual(gpt2.encode('Hello world'), [15496, 995]);
  assert.deepEqual(gpt2.encode(' the'), [262]);
  assert.deepEqual(gpt2.encode('<|endoftext|>'), [GPT2_END_OF_TEXT_ID]);
  assert.deepEqual(gpt2.encode('a<|endoftext|>b'), [64, GPT2_END_OF_TEXT_ID, 65]);
  assert.equal(gpt2.vocabSize, 50257);
  assert.equal(gpt2.eosTokenId, GPT2_END_OF_TEXT_ID);
  assert.equal(gpt2.bosTokenId, GPT2_END_OF_TEXT_ID);
  assert.equal(gpt2.padTokenId, undefined);
  assert.equal(gpt2.tokenToId('Ġthe'), 262);
  assert.equal(gpt2.idToToken(15496), 'Hello');
});

test('matches the reference GPT-2 BPE (gpt-3-encoder) on Moby-Dick paragraphs', () => {
  for (const paragraph of MOBY_DICK) assert.deepEqual(gpt2.encode(paragraph), referenceGpt2Encode(paragraph));
  const book = MOBY_DICK.join('\n\n');
  assert.deepEqual(gpt2.encode(book), referenceGpt2Encode(book));
});

test('decode(encode(x)) === x for ASCII, unicode and emoji text', () => {
  const texts = [
    ...MOBY_DICK,
    'Héllo wörld, naïve café — déjà vu; Ελληνικά, русский, 日本語のテキスト, 한국어, עברית, العربية',
    'emoji: 🦀🐳 👨‍👩‍👧 🇫🇷 ✔️ and a lone \u{1F600}',
    '  leading, trailing and\tmixed\r\nwhitespace   ',
    'special <|endoftext|> token inside',
  ];
  for (const text of texts) assert.equal(gpt2.decode(gpt2.encode(text)), text);
  assert.equal(gpt2.decode([15496, GPT2_END_OF_TEXT_ID, 995], { skipSpecialTokens: true }), 'Hello world');
  assert.equal(gpt2.decode([]), '');
});

test('writeGpt2Tokenizer writes files that loadTokenizer reads back, and no temporary files', () => {
  writeGpt2Tokenizer(dir);
  assert.deepEqual(readdirSync(dir).sort(), ['tokenizer.json', 'tokenizer_config.json']);
  const loaded = loadTokenizer(dir);
  assert.equal(loaded.source, join(dir, 'tokenizer.json'));
  assert.equal(loaded.eosTokenId, GPT2_END_OF_TEXT_ID);
  assert.equal(loaded.vocabSize, 50257);
  assert.deepEqual(loaded.encode(MOBY_DICK[0]!), gpt2.encode(MOBY_DICK[0]!));
  writeGpt2Tokenizer(dir); // overwriting is as atomic as writing
  assert.ok(existsSync(join(dir, 'tokenizer.json')));
  assert.equal(readdirSync(dir).length, 2);
});
