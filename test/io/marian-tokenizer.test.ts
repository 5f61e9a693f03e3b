// Marian's tokenizer from an opus-mt directory's own files (source.spm, target.spm, vocab.json), as
// transformers' MarianTokenizer runs them: source pieces through the joint vocabulary with </s> appended,
// a piece the vocabulary lacks as <unk>, a leading language code and literal special tokens kept whole;
// decoding through source.spm with the shared vocabulary, target.spm with separate ones (transformers 5).
// (Parity with transformers itself: `npm run check:tokenizer`, which needs Python with transformers.)

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { hasMarianTokenizerFiles, loadMarianTokenizer } from '../../src/io/marian-tokenizer.js';
import { SentencePieceModel } from '../../src/io/sentencepiece.js';

const fixtures = new URL('../../../test/fixtures/sentencepiece/', import.meta.url).pathname;
const root = mkdtempSync(join(tmpdir(), 'fuseformer-marian-tokenizer-'));
after(() => rmSync(root, { recursive: true, force: true }));
const source = SentencePieceModel.fromFile(join(fixtures, 'unigram-nfkc.model'));
const target = SentencePieceModel.fromFile(join(fixtures, 'unigram-identity.model'));

/** opus-mt's layout: </s> 0, <unk> 1, the pieces of both models, language codes, <pad> last. */
function marianDir(name: string, extra: Record<string, unknown> = {}, vocabEdit?: (vocab: Record<string, number>) => void): string {
  const dir = join(root, name);
  mkdirSync(dir);
  copyFileSync(join(fixtures, 'unigram-nfkc.model'), join(dir, 'source.spm'));
  copyFileSync(join(fixtures, 'unigram-identity.model'), join(dir, 'target.spm'));
  const vocab: Record<string, number> = { '</s>': 0, '<unk>': 1 };
  for (const model of [source, target]) {
    for (let id = 0; id < model.size; id++) {
      const p = model.idToPiece(id)!;
      if (!(p in vocab) && !p.startsWith('<') && !model.isControl(id)) vocab[p] = Object.keys(vocab).length;
    }
  }
  vocab['>>de<<'] = Object.keys(vocab).length;
  vocab['日本語'] = Object.keys(vocab).length;
  vocab['<pad>'] = Object.keys(vocab).length;
  vocabEdit?.(vocab);
  writeFileSync(join(dir, 'vocab.json'), JSON.stringify(vocab));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ source_lang: 'en', target_lang: 'de', ...extra }));
  return dir;
}

const dir = marianDir('opus');

test('encode: source.spm pieces through vocab.json, </s> appended; unknown pieces <unk>, language codes and special tokens whole', () => {
  const tokenizer = loadMarianTokenizer(dir);
  assert.ok(hasMarianTokenizerFiles(dir));
  const ids = (text: string) => source.encodeAsPieces(text).map((p) => tokenizer.tokenToId(p) ?? 1);
  assert.deepEqual(tokenizer.encode('Call me Ishmael.'), [...ids('Call me Ishmael.'), 0]);
  assert.deepEqual(tokenizer.encode('Call me Ishmael.', { addSpecialTokens: false }), ids('Call me Ishmael.'));
  assert.equal(tokenizer.eosTokenId, 0);
  assert.equal(tokenizer.padTokenId, tokenizer.tokenToId('<pad>'));
  // "日本語" is one unknown piece for source.spm; the joint vocabulary holds its text, so that is its id.
  assert.ok(source.encodeAsPieces('日本語 ✈').includes('日本語'));
  const jp = tokenizer.encode('日本語 ✈', { addSpecialTokens: false });
  assert.ok(jp.includes(tokenizer.tokenToId('日本語')!), JSON.stringify(jp));
  assert.equal(jp.at(-1), 1, '✈: an unknown piece the vocabulary lacks is <unk>');
  const coded = tokenizer.encode('>>de<< Call me');
  assert.equal(coded[0], tokenizer.tokenToId('>>de<<'));
  assert.deepEqual(coded.slice(1), [...ids(' Call me'), 0]);
  assert.deepEqual(tokenizer.encode('Call</s>me', { addSpecialTokens: false }), [...ids('Call'), 0, ...ids('me')]);
  assert.deepEqual(tokenizer.encode(''), [0]);
});

test('decode: the pieces between special tokens through source.spm (shared vocabulary, as transformers 5), trimmed; special tokens skipped or kept', () => {
  const tokenizer = loadMarianTokenizer(dir);
  const pieces = target.encodeAsPieces('the whale and the ship');
  const ids = pieces.map((p) => tokenizer.tokenToId(p)!);
  assert.equal(tokenizer.decode([...ids, 0], { skipSpecialTokens: true }), source.decodePieces(pieces).trim());
  assert.equal(tokenizer.decode([...ids, 0]), `${source.decodePieces(pieces)}</s>`.trim());
  const pad = tokenizer.tokenToId('<pad>')!;
  assert.equal(tokenizer.decode([pad, ...ids, 0, pad], { skipSpecialTokens: true }), source.decodePieces(pieces).trim());
  // Each run of pieces after a special token kept in the text is decoded afresh (its first ▁ dropped), the
  // special token followed by one space.
  const whale = tokenizer.tokenToId('▁whale')!;
  assert.equal(tokenizer.decode([whale, 0, whale]), 'whale</s> whale');
  assert.equal(tokenizer.decode([999_999]), '<unk>', 'an id past the vocabulary decodes as <unk>');
  assert.equal(tokenizer.vocabSize, pad + 1);
});

test('separate_vocabs takes the target side from target_vocab.json; bad files are refused naming them', () => {
  const separate = marianDir('separate', { separate_vocabs: true });
  assert.throws(() => loadMarianTokenizer(separate), /target_vocab\.json: file not found/);
  writeFileSync(join(separate, 'target_vocab.json'), JSON.stringify({ '</s>': 0, '<unk>': 1, '▁whale': 2, '<pad>': 3 }));
  const tokenizer = loadMarianTokenizer(separate);
  assert.equal(tokenizer.decode([2, 0], { skipSpecialTokens: true }), 'whale');
  assert.throws(() => loadMarianTokenizer(marianDir('no-pad', {}, (v) => { delete v['<pad>']; })), /vocab\.json: has no "<pad>", the tokenizer's pad_token/);
  assert.throws(() => loadMarianTokenizer(marianDir('bad-id', {}, (v) => { v['▁x'] = 1.5; })), /vocab\.json: token "▁x" has id 1\.5; expected a non-negative integer/);
  assert.throws(() => loadMarianTokenizer(marianDir('bad-flag', { separate_vocabs: 'yes' })), /tokenizer_config\.json: field "separate_vocabs" is "yes"; expected true or false/);
  const broken = marianDir('bad-spm');
  writeFileSync(join(broken, 'source.spm'), 'not a model');
  assert.throws(() => loadMarianTokenizer(broken), /source\.spm: /);
});
