import assert from 'node:assert/strict';
import { test } from 'node:test';
import { heldOutPrompt, mobyDickChapters, mobyDickDocuments, mobyDickText } from '../../src/train/corpus.js';

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

test("heldOutPrompt: tokens from the book's last 4%, inside the 5% validation split `fuseformer train` holds out", () => {
  const text = mobyDickText();
  const bytes = (s: string) => [...Buffer.from(s, 'utf8')];
  const ids = heldOutPrompt(bytes, 32);
  assert.equal(ids.length, 32);
  // Byte tokens: the text 64 bytes into the tail, which starts at 96% of the characters.
  const tail = Buffer.from(text.slice(Math.floor(text.length * 0.96)), 'utf8');
  assert.deepEqual(ids, [...tail.subarray(64, 96)]);
  assert.ok(Buffer.from(text, 'utf8').length - tail.length > 0.95 * Buffer.from(text, 'utf8').length, 'inside the last 5% of the stream');
  assert.throws(() => heldOutPrompt(() => [1, 2, 3], 32), /held-out text has 3 tokens/);
});
