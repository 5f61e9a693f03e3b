// SentencePiece model files read and run by our own code, against the sentencepiece library's output on
// the same files: three models trained by sentencepiece 0.1.97 (test/fixtures/sentencepiece/make.sh) —
// unigram with the nmt_nfkc character map (Marian's kind), unigram without a map with user-defined and
// control symbols and whitespace kept, BPE with byte fallback — and the library's pieces, ids and
// decodings of ~100 texts (edge cases, held-out sentences, random strings). Then malformed files.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { SentencePieceError, SentencePieceModel } from '../../src/io/sentencepiece.js';
import { bytesField, field, modelOf, piece, text, varint } from './sentencepiece-writer.js';

const fixtures = new URL('../../../test/fixtures/sentencepiece/', import.meta.url);
interface Expected { texts: string[]; piecesToDecode: string[][]; models: Record<string, { pieces: string[][]; ids: number[][]; decoded: string[]; decodedCases: string[] }> }
const expected = JSON.parse(readFileSync(new URL('expected.json', fixtures), 'utf8')) as Expected;

for (const [name, want] of Object.entries(expected.models)) {
  test(`${name}: pieces, ids and decoding equal the sentencepiece library's on ${expected.texts.length} texts`, () => {
    const model = SentencePieceModel.fromFile(new URL(`${name}.model`, fixtures).pathname);
    expected.texts.forEach((text, i) => {
      const pieces = model.encodeAsPieces(text);
      assert.deepEqual(pieces, want.pieces[i], `pieces of ${JSON.stringify(text)}`);
      assert.deepEqual(pieces.map((p) => model.pieceToId(p)), want.ids[i], `ids of ${JSON.stringify(text)}`);
      assert.equal(model.decodePieces(pieces), want.decoded[i], `decoding of ${JSON.stringify(text)}`);
    });
    expected.piecesToDecode.forEach((pieces, i) => assert.equal(model.decodePieces(pieces), want.decodedCases[i], JSON.stringify(pieces)));
  });
}

test('the fixtures exercise what they are for: the character map, unknown runs, user-defined pieces, byte pieces', () => {
  const nfkc = SentencePieceModel.fromFile(new URL('unigram-nfkc.model', fixtures).pathname);
  assert.equal(nfkc.normalize('  ﬁ\u3000２  x '), '▁fi▁2▁x', 'NFKC folding, whitespace collapsed, dummy prefix');
  assert.ok(nfkc.encodeAsPieces('日本語').some((p) => p.includes('日本')), 'a run of unknown characters is one piece');
  const identity = SentencePieceModel.fromFile(new URL('unigram-identity.model', fixtures).pathname);
  assert.ok(identity.encodeAsPieces('a <sep> b').includes('<sep>'));
  const bytes = SentencePieceModel.fromFile(new URL('bpe-bytes.model', fixtures).pathname);
  assert.deepEqual(bytes.encodeAsPieces('日').slice(-3), ['<0xE6>', '<0x97>', '<0xA5>']);
  assert.equal(bytes.decodePieces(bytes.encodeAsPieces(' 日本 whale')), '日本 whale');
});

test('a model built by hand: Viterbi picks the best-scoring path; the unknown piece is min score − 10', () => {
  const model = SentencePieceModel.parse(modelOf(piece('<unk>', 0, 2), piece('▁ab', -1, 1), piece('▁a', -0.4, 1), piece('b', -0.5, 1), piece('c', -3, 1)), 'hand.model');
  assert.deepEqual(model.encodeAsPieces('ab'), ['▁a', 'b'], '-0.9 beats -1');
  assert.deepEqual(model.encodeAsPieces('abxy c'), ['▁a', 'b', 'xy▁', 'c'], 'x, y and the lone ▁ unknown: one merged piece');
  assert.equal(model.decodePieces(['▁a', 'b', '<unk>', '▁', 'c']), 'ab ⁇ ▁c', 'a piece the model lacks is its own text, ▁ and all');
});

test('malformed model files are refused naming the file and the problem', () => {
  const refused = (bytes: Uint8Array, pattern: RegExp) => assert.throws(() => SentencePieceModel.parse(bytes, 'bad.model'), (e: unknown) => {
    assert.ok(e instanceof SentencePieceError, String(e));
    assert.match((e as Error).message, pattern);
    return true;
  });
  const good = modelOf(piece('<unk>', 0, 2), piece('▁a', -1, 1));
  refused(good.subarray(0, good.length - 3), /bad\.model: not a valid SentencePiece model/);
  refused(Uint8Array.from(text('{"model": "this is tokenizer.json"}')), /bad\.model: /);
  refused(new Uint8Array(0), /bad\.model: no pieces/);
  refused(modelOf(piece('▁a', -1, 1)), /bad\.model: no piece of type UNKNOWN/);
  refused(modelOf(piece('<unk>', 0, 2), piece('▁a', -1, 1), piece('▁a', -2, 1)), /piece "▁a" appears twice \(ids 1 and 2\)/);
  refused(modelOf(piece('<unk>', 0, 2), piece('▁a', -1, 9)), /piece 1 \("▁a"\) has type 9/);
  refused(modelOf(piece('<unk>', 0, 2), bytesField(2, field(3, 0, varint(3)))), /trainer_spec\.model_type is 3 \(WORD\); only UNIGRAM and BPE/);
  refused(modelOf(piece('<unk>', 0, 2), bytesField(3, bytesField(2, [9, 0, 0, 0]))), /precompiled_charsmap: its trie of 9 bytes does not fit/);
  assert.throws(() => SentencePieceModel.fromFile('/nonexistent/source.spm'), /\/nonexistent\/source\.spm: cannot be read/);
});
