// A Llama-family directory with tokenizer.model and no tokenizer.json, against what transformers 5's AutoTokenizer
// makes of it (test/fixtures/llama-spm/expected.json, from test/fixtures/sentencepiece/bpe-bytes.model under four
// tokenizer_config.json variants: the defaults, legacy, bos + eos, a <pad> past the vocabulary): ids with and
// without special tokens, decodings keeping and skipping them; generate_merges' order; the refusals; and
// `fuseformer generate` on a tiny Llama whose directory has only tokenizer.model.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { generateMerges } from '../../src/io/llama-sentencepiece.js';
import { loadTokenizer, TokenizerError } from '../../src/io/tokenizer.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const FIXTURES = join('test', 'fixtures');
const expected = JSON.parse(readFileSync(join(FIXTURES, 'llama-spm', 'expected.json'), 'utf8')) as {
  texts: string[];
  configs: Record<string, { config: Record<string, unknown>; rows: { ids: number[]; plain: number[]; text: string; bare: string }[] }>;
};
const root = mkdtempSync(join(tmpdir(), 'fuseformer-llama-spm-'));
after(() => rmSync(root, { recursive: true, force: true }));

function directory(name: string, model: string, config: Record<string, unknown> | undefined): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(FIXTURES, 'sentencepiece', model), join(dir, 'tokenizer.model'));
  if (config) writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  return dir;
}

for (const [name, { config, rows }] of Object.entries(expected.configs)) {
  test(`tokenizer.model without tokenizer.json (${name}): transformers' ids and decodings`, () => {
    const tokenizer = loadTokenizer(directory(name, 'bpe-bytes.model', config));
    expected.texts.forEach((text, i) => {
      const row = rows[i]!;
      assert.deepEqual(tokenizer.encode(text), row.ids, `text ${i} ids`);
      assert.deepEqual(tokenizer.encode(text, { addSpecialTokens: false }), row.plain, `text ${i} plain ids`);
      if (row.ids.length === 0) return;
      assert.equal(tokenizer.decode(row.ids), row.text, `text ${i} decoded`);
      assert.equal(tokenizer.decode(row.ids, { skipSpecialTokens: true }), row.bare, `text ${i} decoded without special tokens`);
    });
    assert.equal(tokenizer.bosTokenId, 1);
    assert.equal(tokenizer.eosTokenId, 2);
    if (name === 'llama-spm-pad') assert.equal(tokenizer.padTokenId, 600);
  });
}

test('generate_merges: every split into two pieces, by merged id, then left and right lengths in code points', () => {
  const pieces = ['a', 'b', 'c', 'ab', 'bc', 'abc', '🐳', 'a🐳'];
  assert.deepEqual(generateMerges(pieces), [['a', 'b'], ['b', 'c'], ['a', 'bc'], ['ab', 'c'], ['a', '🐳']]);
});

test('tokenizer.model is read for Llama tokenizers only, and only a BPE model', () => {
  assert.throws(() => loadTokenizer(directory('t5', 'bpe-bytes.model', { tokenizer_class: 'T5Tokenizer' })),
    (e: unknown) => e instanceof TokenizerError && /has no tokenizer.json, and its tokenizer.model is read for LlamaTokenizer \/ LlamaTokenizerFast only .*"T5Tokenizer"/.test(e.message));
  assert.throws(() => loadTokenizer(directory('unigram', 'unigram-nfkc.model', { tokenizer_class: 'LlamaTokenizer' })),
    (e: unknown) => e instanceof TokenizerError && /a SentencePiece unigram model; a Llama tokenizer reads BPE models/.test(e.message));
  assert.throws(() => loadTokenizer(directory('flags', 'bpe-bytes.model', { legacy: 'yes' })),
    (e: unknown) => e instanceof TokenizerError && /field "legacy" is "yes"; expected true or false/.test(e.message));
});

test('fuseformer generate reads a Llama directory whose tokenizer is tokenizer.model alone', () => {
  const dir = directory('llama-model', 'bpe-bytes.model', { tokenizer_class: 'LlamaTokenizer', add_bos_token: true });
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, vocabSize: 640, bosTokenId: 1, eosTokenIds: [2] }, 5);
  const out = execFileSync(process.execPath, ['dist/src/cli/main.js', 'generate', '--model', dir, '--prompt', 'Call me', '--backend', 'cpu', '--max-tokens', '6'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  // The prompt, then what six greedy tokens decode to (random weights: any text, but some).
  assert.ok(out.startsWith('Call me') && out.trim().length > 'Call me'.length, JSON.stringify(out));
});
