// The default size of the serving engine's KV pool: maxRunning full-length requests, capped at 90% of
// the free memory (a long-context model would otherwise ask for more than the device has), never below
// one full-length request — and a clear error when even that does not fit. The free memory is faked
// through the backend's runtime, as the CUDA backend reports it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { randomDecoderModel } from '../../src/infer/model.js';
import { presetConfig } from '../../src/models/registry.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { kvBlockBytes } from '../../src/serve/paged-forward.js';

const backend = new CpuBackend();
let freeBytes = 1 << 30;
Object.assign(backend, { runtime: { device: { memoryInfo: () => ({ freeBytes }) } } });
const model = randomDecoderModel(presetConfig('gpt2-tiny'), backend, { dtype: 'f32', seed: 9n, std: 0.2 });
const blockBytes = kvBlockBytes(model, 8);

test('the default KV pool: maxRunning full-length requests, capped at 90% of the free memory, at least one request', () => {
  const options = { maxRunning: 8, maxLen: 64, blockSize: 8 }; // 8 blocks a request
  freeBytes = 1 << 30;
  let engine = new ServingEngine(model, options);
  assert.equal(engine.pool.numBlocks, 64, 'room for all: 8 requests × 8 blocks');
  engine.dispose();
  freeBytes = Math.ceil((20 * blockBytes) / 0.9);
  engine = new ServingEngine(model, options);
  assert.equal(engine.pool.numBlocks, 20, 'capped by the free memory');
  engine.dispose();
  freeBytes = 5 * blockBytes;
  assert.throws(() => new ServingEngine(model, options), /one request of maxLen positions needs 8 KV blocks .* GiB are free: give a smaller maxLen/);
  // Explicit sizes are taken as given.
  engine = new ServingEngine(model, { ...options, numBlocks: 9 });
  assert.equal(engine.pool.numBlocks, 9);
  engine.dispose();
});
