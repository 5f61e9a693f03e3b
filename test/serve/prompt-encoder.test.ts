// The server's prompt encoder: long texts go to a worker thread holding the same tokenizer (same ids, and
// the event loop keeps running meanwhile); short texts and tokenizers built in code encode in place.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { PromptEncoder } from '../../src/serve/prompt-encoder.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-prompt-encoder-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('long texts encode on the worker to the same ids, without blocking the event loop', async () => {
  const dir = join(root, 'llama');
  writeModelFolder(dir, 'llama', TINY_LLAMA, 1);
  const tokenizer = loadTokenizer(dir);
  assert.ok(tokenizer.definition, 'a tokenizer.json tokenizer carries its definition');
  const encoder = new PromptEncoder(tokenizer, 1000);
  try {
    const text = 'Call me Ishmael. Some years ago — never mind how long precisely — ';
    const long = text.repeat(60);
    assert.deepEqual(await encoder.encode(long), tokenizer.encode(long));
    assert.deepEqual(await encoder.encode(long, false), tokenizer.encode(long, { addSpecialTokens: false }));
    assert.deepEqual(await encoder.encode(text), tokenizer.encode(text), 'short: in place');
    // Several at once come back each to its caller.
    const texts = [long, `${long}x`, `y${long}`];
    assert.deepEqual(await Promise.all(texts.map((t) => encoder.encode(t))), texts.map((t) => tokenizer.encode(t)));
    // While a very long text is encoded, timers keep firing on this thread.
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    const started = performance.now();
    const ids = await encoder.encode(text.repeat(3000));
    const ms = performance.now() - started;
    clearInterval(timer);
    assert.ok(ids.length > 100_000);
    assert.ok(ticks >= Math.min(5, ms / 20), `${ticks} timer ticks in ${ms.toFixed(0)} ms of encoding`);
  } finally {
    await encoder.close();
  }
});

test('a tokenizer built in code (no definition) encodes in place at any length', async () => {
  const tokenizer = createByteTokenizer();
  assert.equal(tokenizer.definition, undefined);
  const encoder = new PromptEncoder(tokenizer, 10);
  const text = 'naïve whale '.repeat(100);
  assert.deepEqual(await encoder.encode(text), tokenizer.encode(text));
  await encoder.close();
});
