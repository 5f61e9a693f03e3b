// A Qwen3ForCausalLM directory saved by transformers itself (test/fixtures/qwen3/make.py: transformers 5's
// config.json with rope_parameters and layer_types, tied embeddings, head_dim 16 beside hidden 32 / 4 heads) loads
// with nothing left over, and its logits and greedy continuations are HF's (fp32, CPU backend).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generate } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';

const FIXTURE = join('test', 'fixtures', 'qwen3');
interface Outputs { vocab: number; cases: { prompt: number[]; logits: number[]; greedy: number[] }[] }
const outputs = JSON.parse(readFileSync(join(FIXTURE, 'outputs.json'), 'utf8')) as Outputs;

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

test('a Qwen3 directory saved by transformers gives its logits at every position and its greedy tokens', async () => {
  const { model, unused } = loadDecoderModel(join(FIXTURE, 'model'), new CpuBackend(), { dtype: 'f32' });
  try {
    assert.deepEqual(unused, []);
    assert.equal(model.arch.headDim, 16);
    assert.ok(model.layers.every((layer) => layer.headNorm !== undefined), 'every layer holds q_norm and k_norm');
    for (const c of outputs.cases) {
      const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 64 });
      const ours = engine.promptLogits(c.prompt);
      engine.dispose();
      assert.equal(ours.length, c.logits.length);
      const err = relError(ours, c.logits);
      assert.ok(err < 1e-5, `prompt of ${c.prompt.length}: logits rel err ${err}`);
      const tokens: number[] = [];
      for await (const t of generate(model, c.prompt, { maxNewTokens: c.greedy.length, temperature: 0, stopTokenIds: [] })) tokens.push(t);
      assert.deepEqual(tokens, c.greedy, `prompt of ${c.prompt.length}: greedy tokens`);
    }
  } finally {
    model.free();
  }
});
