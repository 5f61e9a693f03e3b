// `fuseformer serve --tp N`: the flag is checked against the launcher's environment, the backend and the
// model before any backend starts (the NCCL run itself needs GPUs: test/gpu/tp-serve.test.ts; the
// replicated engine is tested on in-process CPU ranks in test/dist/tp-serve.test.ts).

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runServe, SERVE_USAGE } from '../../src/cli/serve.js';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-serve-tp-'));
after(() => rmSync(root, { recursive: true, force: true }));
const VARS = ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'];
const launched = (world: number, rank = 0) => ({ RANK: String(rank), WORLD_SIZE: String(world), LOCAL_RANK: String(rank), MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29602' });

async function withEnv(env: Record<string, string>, fn: () => Promise<void>): Promise<void> {
  const saved = { ...process.env };
  try {
    for (const k of VARS) delete process.env[k];
    Object.assign(process.env, env);
    await fn();
  } finally {
    for (const k of VARS) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  }
}

test('fuseformer serve --tp refuses a WORLD_SIZE mismatch, the CPU backend, a quantized model and a bad value', async () => {
  const dir = join(root, 'gpt2');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const args = ['--model', dir, '--port', '0'];
  await withEnv({}, async () => {
    await assert.rejects(runServe([...args, '--tp', '2']), /--tp 2 needs 2 processes, but WORLD_SIZE is 1: run it as `fuseformer launch --gpus 2 -- fuseformer serve --tp 2 \.\.\.`/);
    await assert.rejects(runServe([...args, '--tp', '0']), /--tp must be an integer >= 1, got '0'/);
    await assert.rejects(runServe([...args, '--tp', 'two']), /--tp must be an integer >= 1, got 'two'/);
  });
  await withEnv(launched(4), async () => {
    await assert.rejects(runServe([...args, '--tp', '2']), /--tp 2 needs 2 processes, but WORLD_SIZE is 4/);
  });
  await withEnv(launched(2), async () => {
    await assert.rejects(runServe([...args, '--tp', '2', '--backend', 'cpu']), /--tp runs one process per GPU over NCCL: it needs the CUDA backend, not --backend cpu/);
  });
  const quantized = join(root, 'gpt2-int4');
  writeModelFolder(quantized, 'gpt2', TINY_GPT2, 3);
  const configPath = join(quantized, 'config.json');
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), quantization_config: { quant_method: 'rtn', bits: 4, group_size: 128 } }));
  await withEnv(launched(2), async () => {
    await assert.rejects(runServe(['--model', quantized, '--tp', '2']), /--tp 2: quantized models run on one GPU; drop --tp/);
  });
});

test('fuseformer serve --help documents --tp and how to launch it', () => {
  assert.match(SERVE_USAGE, /--tp N/);
  assert.match(SERVE_USAGE, /fuseformer launch --gpus N --grace-ms 35000 -- fuseformer serve --tp N/);
});
