// `fuseformer generate --tp N`: the flag is checked against the launcher's environment and the other
// options before any backend starts (the NCCL run itself needs GPUs: test/gpu/tp-decode.test.ts).

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runGenerate } from '../../src/cli/generate.js';
import { runInProcessRanks } from '../../src/dist/in-process.js';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-generate-tp-'));
after(() => rmSync(root, { recursive: true, force: true }));
const launched = (world: number, rank = 0) => ({ RANK: String(rank), WORLD_SIZE: String(world), LOCAL_RANK: String(rank), MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29601' });

test('fuseformer generate --tp refuses a WORLD_SIZE mismatch, the CPU backend, --draft and a bad value', async () => {
  const dir = join(root, 'gpt2');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const args = ['--model', dir, '--prompt', 'hi', '--max-tokens', '2'];
  const saved = { ...process.env };
  try {
    for (const k of ['RANK', 'WORLD_SIZE', 'LOCAL_RANK']) delete process.env[k];
    await assert.rejects(runGenerate([...args, '--tp', '2']), /--tp 2 needs 2 processes, but WORLD_SIZE is 1: run it as `fuseformer launch --gpus 2 -- fuseformer generate --tp 2/);
    await assert.rejects(runGenerate([...args, '--tp', '0']), /--tp must be a positive integer, got '0'/);
    await assert.rejects(runGenerate([...args, '--tp', '2', '--draft', dir]), /--tp 2 with --draft: speculative decoding runs on one GPU/);
    Object.assign(process.env, launched(2));
    await assert.rejects(runGenerate([...args, '--tp', '2', '--backend', 'cpu']), /--tp runs one process per GPU over NCCL: it needs the CUDA backend, not --backend cpu/);
  } finally {
    for (const k of ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  }
});

test('every rank samples with rank 0\'s seed (all 64 bits)', async () => {
  const seeds = [String(2n ** 63n + 0x89abcdefn), '7', String(2n ** 48n - 1n)];
  const got = await runInProcessRanks<string[], string>(3, new URL('../dist/tp-decode-fixtures.js', import.meta.url), 'seedOfRankZero', seeds);
  assert.deepEqual(got, [seeds[0], seeds[0], seeds[0]]);
});
