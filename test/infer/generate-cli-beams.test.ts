// `fuseformer generate --beams N`: a Marian directory is translated with beam search (the same text as
// translateText), and a decoder-only directory refuses beam search by name; a prompt past the context is
// refused before anything is printed. `--input FILE`: a file translated line by line in batches, in order,
// blank lines kept; its misuses refused by name.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runGenerate } from '../../src/cli/generate.js';
import { ArgumentError } from '../../src/errors.js';
import { loadSeq2Seq, translateText } from '../../src/infer/seq2seq.js';
import { TINY_GPT2, writeModelFolder } from './hf-folder.js';
import { useMarianTokenizerFiles, writeTinyMarian } from './marian-fixture.js';

const dirs: string[] = [];
after(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

/** Runs the command with stdout captured. */
async function captured(argv: string[]): Promise<{ code: number; out: string }> {
  const write = process.stdout.write.bind(process.stdout), writeErr = process.stderr.write.bind(process.stderr);
  let out = '';
  process.stdout.write = ((chunk: string | Uint8Array) => { out += String(chunk); return true; }) as typeof process.stdout.write;
  process.stderr.write = (() => true) as typeof process.stderr.write;
  try {
    return { code: await runGenerate(argv), out };
  } finally {
    process.stdout.write = write;
    process.stderr.write = writeErr;
  }
}

test('generate --beams translates a Marian directory with beam search', async () => {
  const dir = writeTinyMarian();
  dirs.push(dir);
  const prompt = 'h e l l o w o r l d';
  const { code, out } = await captured(['--model', dir, '--prompt', prompt, '--beams', '2', '--backend', 'cpu', '--max-tokens', '8']);
  assert.equal(code, 0);
  const translator = loadSeq2Seq(dir, new CpuBackend());
  const [expected] = translateText(translator, [prompt], { numBeams: 2, maxNewTokens: 8 });
  translator.model.dispose();
  assert.equal(out, `${expected}\n`);
});

test('generate translates an opus-mt style directory (source.spm, target.spm, vocab.json; no tokenizer.json)', async () => {
  const dir = writeTinyMarian();
  dirs.push(dir);
  useMarianTokenizerFiles(dir);
  const { code, out } = await captured(['--model', dir, '--prompt', 'h e l l o', '--beams', '2', '--backend', 'cpu', '--max-tokens', '8']);
  assert.equal(code, 0);
  const translator = loadSeq2Seq(dir, new CpuBackend());
  const [expected] = translateText(translator, ['h e l l o'], { numBeams: 2, maxNewTokens: 8 });
  translator.model.dispose();
  assert.equal(out, `${expected}\n`);
  rmSync(join(dir, 'vocab.json'));
  await assert.rejects(captured(['--model', dir, '--prompt', 'h', '--backend', 'cpu']), /has no tokenizer\.json \(nor Marian's source\.spm, target\.spm and vocab\.json\)/);
});

test('generate --beams on a decoder-only model is refused with the reason', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-gpt2-'));
  dirs.push(dir);
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  await assert.rejects(captured(['--model', dir, '--prompt', 'hi', '--beams', '3', '--backend', 'cpu']),
    (e: unknown) => e instanceof ArgumentError && /--beams 3: beam search is implemented for encoder-decoder \(Marian\) models/.test(e.message));
});

test('generate refuses a prompt longer than the context before it prints anything', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-gpt2-'));
  dirs.push(dir);
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const long = 'x'.repeat(TINY_GPT2.maxPositions + 5);  // byte-level tokenizer: a token a character
  let printed = '';
  const write = process.stdout.write.bind(process.stdout), writeErr = process.stderr.write.bind(process.stderr);
  process.stdout.write = ((chunk: string | Uint8Array) => { printed += String(chunk); return true; }) as typeof process.stdout.write;
  process.stderr.write = (() => true) as typeof process.stderr.write;
  try {
    await assert.rejects(runGenerate(['--model', dir, '--prompt', long, '--backend', 'cpu']), /the prompt has 69 tokens; the model takes at most 64 positions/);
  } finally {
    process.stdout.write = write;
    process.stderr.write = writeErr;
  }
  assert.equal(printed, '', 'nothing on stdout');
});

test('generate --input translates a file line by line, in order, batch by batch; blank lines stay blank', async () => {
  const dir = writeTinyMarian();
  dirs.push(dir);
  const lines = ['h e l l o', '', 'w o r l d', 'a b c', '   ', 'z y x w v', 'q'];
  const file = join(dir, 'sources.txt');
  writeFileSync(file, `${lines.join('\n')}\n`);
  const translator = loadSeq2Seq(dir, new CpuBackend());
  const expected = lines.map((line) => (line.trim() === '' ? '' : translateText(translator, [line], { numBeams: 2, maxNewTokens: 8 })[0]!));
  translator.model.dispose();
  assert.ok(new Set(expected.filter(Boolean)).size > 1, 'the sources translate to different texts');
  for (const batch of ['1', '2', '32']) {
    const { code, out } = await captured(['--model', dir, '--input', file, '--beams', '2', '--backend', 'cpu', '--max-tokens', '8', '--batch-size', batch]);
    assert.equal(code, 0);
    assert.equal(out, expected.map((x) => `${x}\n`).join(''), `--batch-size ${batch}`);
  }
});

test('generate --input: misuses are refused by name before anything is printed', async () => {
  const marian = writeTinyMarian();
  const gpt2 = mkdtempSync(join(tmpdir(), 'fuseformer-gpt2-'));
  dirs.push(marian, gpt2);
  writeModelFolder(gpt2, 'gpt2', TINY_GPT2, 3);
  const file = join(marian, 'sources.txt');
  writeFileSync(file, 'a b\n');
  const refused = async (argv: string[], pattern: RegExp) => {
    let printed = '';
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array) => { printed += String(chunk); return true; }) as typeof process.stdout.write;
    try {
      await assert.rejects(runGenerate([...argv, '--backend', 'cpu']), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message));
    } finally {
      process.stdout.write = write;
    }
    assert.equal(printed, '', `${argv.join(' ')}: nothing on stdout`);
  };
  await refused(['--model', gpt2, '--input', file], /--input: translating a file line by line is for Marian \(encoder-decoder\) models; '.*' is decoder-only/);
  await refused(['--model', marian, '--input', file, '--prompt', 'a'], /--prompt and --input: give one/);
  await refused(['--model', marian, '--prompt', 'a', '--batch-size', '4'], /--batch-size goes with --input FILE/);
  await refused(['--model', marian, '--input', file, '--batch-size', '0'], /--batch-size must be a positive integer, got '0'/);
  await refused(['--model', marian, '--input', join(marian, 'missing.txt')], /--input: cannot read '.*missing\.txt'/);
  await refused(['--model', marian], /--prompt TEXT is required \(or --input FILE, for a Marian model\)/);
  // Line 2 is past max_position_embeddings (40 in the fixture): refused by its number, nothing translated.
  const long = join(marian, 'long.txt');
  writeFileSync(long, `a b\n${'a '.repeat(45)}\nc\n`);
  await refused(['--model', marian, '--input', long], /--input .*long\.txt line 2: 46 tokens; the model takes sources of at most 40/);
});
