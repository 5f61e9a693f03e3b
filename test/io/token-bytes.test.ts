// Tokens' bytes (what constrained decoding matches a grammar against) against the tokenizer's own decode: for
// random sequences of ids, the bytes joined and read as UTF-8 are the decoded text — GPT-2's byte-level BPE,
// a Llama tokenizer.model with byte fallback (its leading space aside, which decode strips), and the byte
// tokenizer; special tokens have none; decoders it cannot read are named.

import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { gpt2TokenizerConfig, gpt2TokenizerJson } from '../../src/io/gpt2-tokenizer-json.js';
import { tokenByteTable } from '../../src/io/token-bytes.js';
import { createTokenizer, loadTokenizer, TokenizerError } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-token-bytes-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function checkAgainstDecode(tokenizer: Tokenizer, table: readonly (Uint8Array | null)[], stripLeadingSpace: boolean): void {
  let seed = 12345;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
  const ids = table.flatMap((b, id) => (b ? [id] : []));
  for (let trial = 0; trial < 300; trial++) {
    const sequence = Array.from({ length: 1 + (next() % 12) }, () => ids[next() % ids.length]!);
    const bytes = Buffer.concat(sequence.map((id) => table[id]!));
    let expected = bytes.toString('utf8');
    if (stripLeadingSpace && expected.startsWith(' ')) expected = expected.slice(1);
    assert.equal(tokenizer.decode(sequence, { cleanUpTokenizationSpaces: false }), expected, `ids ${sequence.join(' ')}`);
  }
}

test('GPT-2 (byte-level BPE): the bytes of random token sequences decode to the tokenizer\'s text', () => {
  const gpt2 = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');
  const table = tokenByteTable(gpt2, gpt2.vocabSize);
  assert.equal(table.filter((b) => b === null).length, 1, 'only <|endoftext|> has no bytes');
  assert.deepEqual([...table[gpt2.tokenToId('Ġ{')!]!], [...Buffer.from(' {')]);
  // A token that is part of a character: byte 0xe2 alone.
  assert.deepEqual([...table[gpt2.tokenToId('â')!]!], [0xe2]);
  checkAgainstDecode(gpt2, table, false);
});

test('a Llama tokenizer.model (SentencePiece BPE with byte fallback): ▁ is a space, <0xHH> the byte HH', () => {
  copyFileSync(join('test', 'fixtures', 'sentencepiece', 'bpe-bytes.model'), join(dir, 'tokenizer.model'));
  const llama = loadTokenizer(dir);
  const table = tokenByteTable(llama, llama.vocabSize);
  for (const special of [0, 1, 2]) assert.equal(table[special], null, `special token ${special}`);
  const byteToken = llama.tokenToId('<0x0A>');
  assert.ok(byteToken !== undefined);
  assert.deepEqual([...table[byteToken]!], [0x0a]);
  checkAgainstDecode(llama, table, true);
});

test('the byte tokenizer: token b is byte b; ids past the tokenizer\'s vocabulary have none; unreadable decoders are named', () => {
  const bytes = createByteTokenizer({ specialTokens: ['<|endoftext|>', '<pad>'] });
  const table = tokenByteTable(bytes, 300);
  for (let b = 0; b < 256; b++) assert.deepEqual([...table[b]!], [b]);
  assert.ok(table.slice(256).every((b) => b === null));
  const json = gpt2TokenizerJson();
  const wordPiece = createTokenizer({ ...json, decoder: { type: 'WordPiece', prefix: '##', cleanup: true } }, gpt2TokenizerConfig(), 'wordpiece-decoder');
  assert.throws(() => tokenByteTable(wordPiece, 100), (e: unknown) => e instanceof TokenizerError && /decoder 'WordPiece' is not supported for structured outputs/.test(e.message));
});
