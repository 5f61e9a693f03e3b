// Decoder models as sentence encoders on the GPU (infer/decoder-encoder.ts): the Qwen3-Embedding-shaped
// fixture (test/fixtures/qwen3-embedding) against SentenceTransformer.encode's vectors, and a Llama-shaped
// random model with 64-wide heads (the tensor-core flash kernels) against the CPU encoder input by input —
// ragged batches under a small pass budget, each queued before the one ahead of it is read, f32 and bf16.
// Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecoderEncoder } from '../../src/infer/decoder-encoder.js';
import { Embedder } from '../../src/infer/embedder.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import { createGpuBackend, gpuSkip } from './device.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-decoder-embed-'));
after(() => rmSync(root, { recursive: true, force: true }));

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

test('the Qwen3-Embedding-shaped fixture on CUDA gives SentenceTransformer.encode\'s vectors (f32, bf16; with and without the query prompt)', { skip }, async () => {
  const gpu = await createGpuBackend();
  const fixture = join('test', 'fixtures', 'qwen3-embedding');
  const expected = JSON.parse(readFileSync(join(fixture, 'expected.json'), 'utf8')) as { texts: string[]; cases: { prompt_name: string | null; vectors: number[][] }[] };
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const embedder = Embedder.load(join(fixture, 'model'), gpu as Backend, { dtype, batchSize: 3 });
    try {
      for (const c of expected.cases) {
        const { vectors } = embedder.embed(expected.texts, c.prompt_name ? { promptName: c.prompt_name } : {});
        vectors.forEach((v, i) => {
          const error = relError(v, c.vectors[i]!);
          assert.ok(error <= (dtype === 'f32' ? 1e-4 : 3e-2), `${dtype} ${c.prompt_name ?? 'no prompt'} text ${i}: rel err ${error}`);
        });
      }
    } finally {
      embedder.free();
    }
  }
});

test('a Llama-shaped decoder (d 64, GQA) embeds ragged batches on CUDA as the CPU encoder does, input by input', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const config = { ...TINY_LLAMA, vocabSize: 1003, hidden: 256, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, layers: 3, maxPositions: 256 };
  const dir = join(root, 'llama');
  writeModelFolder(dir, 'llama', config, 23, { stripPrefix: true });
  // 45 inputs of 1..120 tokens in a scrambled order; a pass of at most 512 tokens: batches of 4 to 8.
  const rng = new Rng(5);
  const inputs = Array.from({ length: 45 }, (_, i) => Array.from(rng.ints(1 + ((i * 53) % 120), 0, config.vocabSize)));
  const reference = DecoderEncoder.load(dir, cpu, { dtype: 'f32' }).encoder;
  const expected = inputs.map((ids) => reference.embeddings([ids], undefined, { pooling: 'last', normalize: true })[0]!);
  const meanExpected = inputs.slice(0, 4).map((ids) => reference.embeddings([ids], undefined, { pooling: 'mean' })[0]!);
  reference.free();
  // bf16's own error on this random model (up to ~0.16 of some vectors): the CPU encoder in bf16 against f32.
  const cpuBf16 = DecoderEncoder.load(dir, cpu, { dtype: 'bf16' }).encoder;
  const bf16Error = inputs.map((ids, i) => relError(cpuBf16.embeddings([ids], undefined, { pooling: 'last', normalize: true })[0]!, expected[i]!));
  cpuBf16.free();
  const bound = (dtype: FloatDType, i: number) => (dtype === 'f32' ? 1e-4 : Math.max(3e-2, 2 * bf16Error[i]!));
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const embedder = Embedder.load(dir, gpu as Backend, { dtype, batchSize: 8, maxPassTokens: 512, normalize: true });
    try {
      assert.equal(embedder.pooling, 'last');
      const { vectors } = embedder.embed(inputs);
      vectors.forEach((v, i) => {
        const error = relError(v, expected[i]!);
        assert.ok(error <= bound(dtype, i), `${dtype} input ${i} (${inputs[i]!.length} tokens): rel err ${error} (the CPU's in bf16: ${bf16Error[i]})`);
      });
      const served = await embedder.embedSequencesAsync(inputs);
      served.forEach((v, i) => assert.ok(relError(v, vectors[i]!) <= 1e-6, `${dtype} input ${i}: embedSequencesAsync differs from embed`));
      const means = (embedder.encoder as DecoderEncoder).embeddings(inputs.slice(0, 4).map((ids) => [...ids, ...new Array<number>(120 - ids.length).fill(3)]),
        inputs.slice(0, 4).map((ids) => Array.from({ length: 120 }, (_, l) => (l < ids.length ? 1 : 0))), { pooling: 'mean' });
      means.forEach((v, i) => {
        const error = relError(v, meanExpected[i]!);
        assert.ok(error <= (dtype === 'f32' ? 1e-4 : 0.1), `${dtype} mean pooling input ${i}: rel err ${error}`);
      });
    } finally {
      embedder.free();
    }
  }
});

test('a shared prefix on CUDA (paged suffix pass, cached prefix): the dense pass\'s vectors, f32 against the CPU, bf16 against the dense CUDA pass', { skip }, async () => {
  const gpu = await createGpuBackend(), cpu = new CpuBackend();
  const config = { ...TINY_LLAMA, vocabSize: 1003, hidden: 256, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, layers: 3, maxPositions: 512 };
  const dir = join(root, 'llama-prefix');
  writeModelFolder(dir, 'llama', config, 29, { stripPrefix: true });
  const rng = new Rng(8);
  const ints = (n: number) => Array.from(rng.ints(n, 0, config.vocabSize));
  // Three calls: 70 shared tokens (64 shared: four blocks) before 1..200 others; the same prefix again (cached);
  // 150 other shared tokens (a new prefix: 144).
  const head = ints(70), other = ints(150);
  const calls = [[1, 37, 200, 16, 5, 99, 64, 63].map((n) => [...head, ...ints(n)]), [3, 120].map((n) => [...head, ...ints(n)]), [7, 1, 180].map((n) => [...other, ...ints(n)])];
  const options = { pooling: 'last', normalize: true } as const;
  const padded = (rows: number[][]) => {
    const L = Math.max(...rows.map((r) => r.length));
    return { ids: rows.map((r) => [...r, ...new Array<number>(L - r.length).fill(2)]), mask: rows.map((r) => Array.from({ length: L }, (_, l) => (l < r.length ? 1 : 0))) };
  };
  const reference = DecoderEncoder.load(dir, cpu, { dtype: 'f32', maxSharedPrefix: 0 }).encoder;
  const expected = calls.map((rows) => { const p = padded(rows); return reference.embeddings(p.ids, p.mask, options); });
  reference.free();
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const shared = DecoderEncoder.load(dir, gpu as Backend, { dtype }).encoder, dense = DecoderEncoder.load(dir, gpu as Backend, { dtype, maxSharedPrefix: 0 }).encoder;
    try {
      calls.forEach((rows, c) => {
        const p = padded(rows), ours = shared.embeddings(p.ids, p.mask, options), plain = dense.embeddings(p.ids, p.mask, options);
        ours.forEach((v, i) => {
          const error = relError(v, dtype === 'f32' ? expected[c]![i]! : plain[i]!);
          assert.ok(error <= (dtype === 'f32' ? 1e-4 : 3e-2), `${dtype} call ${c} sequence ${i} (${rows[i]!.length} tokens): rel err ${error} against the ${dtype === 'f32' ? 'CPU' : 'dense CUDA pass'}`);
        });
      });
      assert.deepEqual(shared.prefixStats, { passes: 3, computed: 2, cached: 1, savedTokens: 7 * 64 + 2 * 64 + 2 * 144 });
    } finally {
      shared.free();
      dense.free();
    }
  }
});
