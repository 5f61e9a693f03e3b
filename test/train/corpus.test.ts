import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mobyDickChapters, mobyDickDocuments, mobyDickText } from '../../src/train/corpus.js';

test('Moby-Dick loads from the installed package, without network', () => {
  const chapters = mobyDickChapters();
  assert.equal(chapters.length, 139);
  const docs = mobyDickDocuments();
  assert.equal(docs.length, 138, 'everything but the table of contents');
  assert.ok(docs[0]!.startsWith('ETYMOLOGY.'));
  assert.ok(docs[2]!.startsWith('CHAPTER 1. Loomings.\n\nCall me Ishmael.'));
  assert.ok(docs.at(-1)!.startsWith('Epilogue'));
  const text = mobyDickText();
  assert.ok(text.length > 1_100_000 && text.length < 1_300_000, `length ${text.length}`);
  assert.ok(text.includes('CHAPTER 135. The Chase.—Third Day.'));
});
