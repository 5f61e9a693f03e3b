// `fuseformer train` on inputs an audit found mishandled: --data that is a directory or not UTF-8 text,
// counts of zero and numbers past 2^53, --resume with --overwrite; a short run's checkpoint carries the
// byte-level tokenizer's tokenizer.json, so `fuseformer generate` reads the demo's checkpoints.

import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runTrain } from '../../src/cli/train.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-train-inputs-'));
after(() => rmSync(root, { recursive: true, force: true }));
const cpu = ['--backend', 'cpu'];

test('bad --data, counts and flag pairs are refused by name', async () => {
  const directory = join(root, 'dir.txt');
  mkdirSync(directory);
  await assert.rejects(runTrain([...cpu, '--data', directory]), /--data: '.*dir\.txt' is not a file/);
  const binary = join(root, 'random.txt');
  writeFileSync(binary, Uint8Array.from({ length: 3000 }, (_, i) => (i * 151 + 7) % 256));
  await assert.rejects(runTrain([...cpu, '--data', binary]), /--data: '.*random\.txt' is not UTF-8 text/);
  await assert.rejects(runTrain([...cpu, '--eval-batches', '0']), /--eval-batches must be a positive integer, got '0'/);
  await assert.rejects(runTrain([...cpu, '--keep', '0']), /--keep must be a positive integer, got '0'/);
  await assert.rejects(runTrain([...cpu, '--seed', '1e30']), /--seed must be an integer below 2\^53, got '1e30'/);
  await assert.rejects(runTrain([...cpu, '--resume', '--overwrite']), /--resume continues the run in --out and --overwrite replaces it/);
});

test('a checkpoint trained with the byte-level tokenizer holds its tokenizer.json (same ids)', { timeout: 120_000 }, async () => {
  const data = join(root, 'text.txt');
  writeFileSync(data, 'Call me Ishmael. Some years ago, never mind how long precisely. '.repeat(60));
  const out = join(root, 'run');
  const { code } = await runTrain([...cpu, '--data', data, '--steps', '1', '--batch-size', '2', '--seq-len', '8', '--eval-batches', '1', '--sample-tokens', '2', '--out', out]);
  assert.equal(code, 0);
  const checkpoint = join(out, 'step-00000001');
  assert.ok(existsSync(join(checkpoint, 'tokenizer.json')), 'tokenizer.json in the checkpoint');
  const text = 'Call me Ishmael — naïve whale';
  assert.deepEqual(loadTokenizer(checkpoint).encode(text), createByteTokenizer().encode(text));
  assert.ok(readFileSync(join(checkpoint, 'tokenizer_config.json'), 'utf8').length > 2);
});

test('a tokenizer.json given by path travels into the checkpoint with the files read beside it', { timeout: 120_000 }, async () => {
  const tokDir = join(root, 'tokenizer');
  mkdirSync(tokDir);
  const bytes = createByteTokenizer();
  writeFileSync(join(tokDir, 'tokenizer.json'), JSON.stringify(bytes.tokenizerJson()));
  writeFileSync(join(tokDir, 'special_tokens_map.json'), JSON.stringify({ eos_token: '<|endoftext|>', bos_token: '<|endoftext|>' }));
  writeFileSync(join(tokDir, 'chat_template.jinja'), '{% for m in messages %}{{ m.content }}{% endfor %}');
  const data = join(root, 'text2.txt');
  writeFileSync(data, 'Call me Ishmael. Some years ago, never mind how long precisely. '.repeat(60));
  const out = join(root, 'run-tokenizer');
  const { code } = await runTrain([...cpu, '--data', data, '--tokenizer', join(tokDir, 'tokenizer.json'), '--steps', '1', '--batch-size', '2', '--seq-len', '8', '--eval-batches', '1', '--sample-tokens', '2', '--out', out]);
  assert.equal(code, 0);
  const checkpoint = join(out, 'step-00000001');
  for (const name of ['special_tokens_map.json', 'chat_template.jinja']) {
    assert.equal(readFileSync(join(checkpoint, name), 'utf8'), readFileSync(join(tokDir, name), 'utf8'), name);
  }
  const loaded = loadTokenizer(checkpoint);
  assert.equal(loaded.bosTokenId, loadTokenizer(tokDir).bosTokenId);
  assert.notEqual(loaded.bosTokenId, undefined, 'the BOS named only in special_tokens_map.json');
  assert.equal(loaded.chatTemplate, '{% for m in messages %}{{ m.content }}{% endfor %}');
});
