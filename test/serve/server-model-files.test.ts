// What the model directory's own files mean to the server (found by an audit): generation_config.json's
// max_new_tokens is the default of a request without max_tokens (as `generate` takes it; vLLM does too),
// and a tokenizer.json that defines more ids than the model has rows refuses text using them as such —
// naming both files — instead of an engine error that blames the client's token.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-server-files-'));
let server: InferenceServer, engine: ServingEngine, base: string;

before(async () => {
  const dir = join(root, 'tiny-llama');
  // 256 embedding rows: the byte tokenizer's <|endoftext|> (id 256) is past them.
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, vocabSize: 256, bosTokenId: 0, eosTokenIds: [0], maxPositions: 96 }, 5,
    { generationConfig: { eos_token_id: 0, max_new_tokens: 3 } });
  const model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  engine = new ServingEngine(model, { maxRunning: 4, maxBatchTokens: 64, blockSize: 4 });
  server = new InferenceServer(engine, loadTokenizer(dir), { modelName: 'tiny' });
  base = `http://127.0.0.1:${(await server.listen(0)).port}`;
});

after(async () => {
  await server.close();
  engine.dispose();
  rmSync(root, { recursive: true, force: true });
});

const post = (body: unknown) => fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('without max_tokens a request gets generation_config.json\'s max_new_tokens; max_tokens overrides it', async () => {
  const byDefault = await (await post({ model: 'tiny', prompt: 'Call me Ishmael', temperature: 0, stop: [] })).json() as { usage: { completion_tokens: number }; choices: { finish_reason: string }[] };
  assert.equal(byDefault.usage.completion_tokens, 3);
  assert.equal(byDefault.choices[0]!.finish_reason, 'length');
  const longer = await (await post({ model: 'tiny', prompt: 'Call me Ishmael', temperature: 0, max_tokens: 6 })).json() as { usage: { completion_tokens: number } };
  assert.equal(longer.usage.completion_tokens, 6);
});

test('text that encodes past the model\'s embedding rows is a 400 naming tokenizer.json and vocab_size', async () => {
  const r = await post({ model: 'tiny', prompt: 'Call me<|endoftext|>', max_tokens: 2 });
  const e = await r.json() as { error: { message: string; param: string } };
  assert.equal(r.status, 400, JSON.stringify(e));
  assert.equal(e.error.param, 'prompt');
  assert.match(e.error.message, /encodes to token "<\|endoftext\|>" \(id 256\), which the model's tokenizer\.json defines but its vocabulary \(config\.json vocab_size 256\) lacks/);
  const ok = await post({ model: 'tiny', prompt: 'Call me', max_tokens: 2 });
  assert.equal(ok.status, 200);
});
