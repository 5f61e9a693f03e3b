// The prompt encoder's worker thread never turns an invalid token id into a real one: an encode that
// fails on the worker fails the caller, with the tokenizer's message.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createTokenizer, TokenizerError } from '../../src/io/tokenizer.js';
import { PromptEncoder } from '../../src/serve/prompt-encoder.js';

test('an id outside the vocabulary on the worker is an error, not token 0', async () => {
  // Loads (a ByteLevel pre-tokenizer never needs the unknown token when the vocabulary holds every byte),
  // but this vocabulary lacks "c" and its unknown token: encoding "c" has no valid id.
  const tokenizer = createTokenizer({
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    model: { type: 'BPE', unk_token: '<unk>', vocab: { '!': 0, a: 1, b: 2 }, merges: [] },
  }, {}, 'holey/tokenizer.json');
  const encoder = new PromptEncoder(tokenizer, 0); // every text goes to the worker
  try {
    assert.deepEqual(await encoder.encode('ab'), [1, 2]);
    await assert.rejects(encoder.encode('abc'), (e: unknown) => e instanceof TokenizerError &&
      e.message.startsWith('holey/tokenizer.json: encoding produced the token id undefined'));
    assert.deepEqual(await encoder.encode('ba'), [2, 1], 'the worker goes on after the error');
  } finally {
    await encoder.close();
  }
});
