// Decoder rerankers on the GPU (infer/decoder-reranker.ts): the Qwen3-Reranker-shaped and Qwen3ForSequenceClassification
// fixtures (test/fixtures/qwen3-reranker) against CrossEncoder.predict's scores, and a Llama-shaped random causal LM with
// 64-wide heads (the tensor-core flash kernels), an untied head and a LogitScore module against the CPU reranker pair
// by pair — ragged pairs under a small pass budget, f32 and bf16. Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { FloatDType } from '../../src/dtype.js';
import { Reranker } from '../../src/infer/reranker.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import { createGpuBackend, gpuSkip } from './device.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-decoder-rerank-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** The CPU reranker's scores in `dtype`. */
function cpuScores(dir: string, dtype: FloatDType, query: string, documents: readonly string[], options: { promptName?: string } = {}, maxTokens?: number): number[] {
  const reranker = Reranker.load(dir, new CpuBackend(), { dtype, ...(maxTokens ? { maxTokens } : {}) });
  try {
    return reranker.rerank(query, documents, options).scores;
  } finally {
    reranker.free();
  }
}

test('the Qwen3-Reranker and Qwen3ForSequenceClassification fixtures on CUDA give CrossEncoder.predict\'s scores (f32, bf16; every prompt)', { skip }, async () => {
  const gpu = await createGpuBackend();
  const fixture = join('test', 'fixtures', 'qwen3-reranker');
  interface Case { prompt_name: string | null; scores: number[] }
  const expected = JSON.parse(readFileSync(join(fixture, 'expected.json'), 'utf8')) as { query: string; documents: string[]; causal: { cases: Case[] }; seq_cls: { cases: Case[] } };
  for (const [name, cases] of [['causal', expected.causal.cases], ['seq-cls', expected.seq_cls.cases]] as const) {
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      const reranker = Reranker.load(join(fixture, name), gpu as Backend, { dtype, batchSize: 3 });
      try {
        for (const c of cases) {
          const options = c.prompt_name ? { promptName: c.prompt_name } : {};
          // bf16's own error on this random model: the CPU reranker in bf16 against HF's f32 scores.
          const own = dtype === 'bf16' ? cpuScores(join(fixture, name), 'bf16', expected.query, expected.documents, options) : [];
          const { scores } = reranker.rerank(expected.query, expected.documents, options);
          scores.forEach((s, i) => {
            const bound = dtype === 'f32' ? 1e-4 : Math.max(2e-2, 2 * Math.abs(own[i]! - c.scores[i]!));
            assert.ok(Math.abs(s - c.scores[i]!) <= bound, `${name} ${dtype} ${c.prompt_name ?? 'no prompt'} document ${i}: ${s} vs ${c.scores[i]} (bound ${bound})`);
          });
        }
      } finally {
        reranker.free();
      }
    }
  }
});

test('a Llama-shaped causal reranker (d 64, GQA, untied head, LogitScore) scores ragged pairs on CUDA as the CPU does, pair by pair', { skip }, async () => {
  const gpu = await createGpuBackend();
  const config = { ...TINY_LLAMA, vocabSize: 259, hidden: 256, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, layers: 3, maxPositions: 512 };
  const dir = join(root, 'llama');
  writeModelFolder(dir, 'llama', config, 31);
  // A sentence-transformers CrossEncoder over it: the byte tokenizer's "y" against "n", a chat template with the pair's roles.
  writeFileSync(join(dir, 'modules.json'), JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.base.modules.transformer.Transformer' },
    { idx: 1, name: '1', path: '1_LogitScore', type: 'sentence_transformers.cross_encoder.modules.logit_score.LogitScore' },
  ]));
  mkdirSync(join(dir, '1_LogitScore'));
  writeFileSync(join(dir, '1_LogitScore', 'config.json'), JSON.stringify({ true_token_id: 'y'.charCodeAt(0), false_token_id: 'n'.charCodeAt(0) }));
  writeFileSync(join(dir, 'config_sentence_transformers.json'), JSON.stringify({ model_type: 'CrossEncoder', prompts: { web: 'Find passages that answer the query' } }));
  writeFileSync(join(dir, 'chat_template.jinja'), '{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<answer>');
  const rng = new Rng(9);
  const words = ['whale', 'krill', 'ship', 'sea', 'Ishmael', 'harpoon', 'the', 'a', 'of', 'north', 'ocean', 'blue'];
  const documents = Array.from({ length: 40 }, (_, i) => Array.from(rng.ints(1 + ((i * 37) % 70), 0, words.length), (w) => words[w]!).join(' '));
  const query = 'what do whales eat';
  const expected = cpuScores(dir, 'f32', query, documents, { promptName: 'web' }, 400);
  const ownBf16 = cpuScores(dir, 'bf16', query, documents, { promptName: 'web' }, 400);
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const reranker = Reranker.load(dir, gpu as Backend, { dtype, batchSize: 8, maxPassTokens: 1024, maxTokens: 400 });
    try {
      const { scores, truncated } = reranker.rerank(query, documents, { promptName: 'web' });
      assert.ok(truncated > 0, 'some pairs are cut to 400 tokens');
      scores.forEach((s, i) => {
        const bound = dtype === 'f32' ? 1e-4 : Math.max(5e-2, 3 * Math.abs(ownBf16[i]! - expected[i]!));
        assert.ok(Math.abs(s - expected[i]!) <= bound, `${dtype} document ${i} (${documents[i]!.length} characters): ${s} vs the CPU's ${expected[i]} (bound ${bound})`);
      });
    } finally {
      reranker.free();
    }
  }
});
