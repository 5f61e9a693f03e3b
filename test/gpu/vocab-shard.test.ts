// The vocab-parallel ops on the GPU against the CPU reference: the split cross-entropy (vocabShardMax,
// vocabShardSums, vocabShardLoss around host all-reduces, and the in-place backward) in f32, bf16 and
// f16 with smoothing, ignored rows and a padding-only shard, at a GPT-2-sized shard (50304/2 columns)
// too; the masked embedding forward (ids outside the shard give zero rows) and backward (they add
// nothing). Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { makeCase, runShardedCrossEntropy, runShardedEmbedding } from '../backend/vocab-shard-cases.js';
import './report-as-you-go.js';

const skip = gpuSkip();

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const cases: [string, number, number, number, number, FloatDType, number][] = [
  // name, rows, V, shard width, world, dtype, smoothing
  ['small f32, 4 shards (one padding-only)', 9, 70, 24, 4, 'f32', 0],
  ['small bf16, 3 shards, smoothing', 13, 70, 24, 3, 'bf16', 0.1],
  ['small f16, 2 shards', 7, 100, 64, 2, 'f16', 0],
  ['GPT-2 vocabulary over 2 ranks, bf16', 64, 50257, 25152, 2, 'bf16', 0],
];

for (const [name, rows, vocab, width, w, dtype, smoothing] of cases) {
  test(`split cross-entropy on the GPU equals the CPU: ${name}`, { skip }, async () => {
    const gpu = await createGpuBackend();
    const cpu = new CpuBackend();
    const c = makeCase(rows, vocab, width, w, dtype, smoothing, 7 + rows);
    const want = runShardedCrossEntropy(cpu, c, 0.25);
    const got = runShardedCrossEntropy(gpu, c, 0.25);
    got.rowMax.forEach((m, r) => assert.ok(maxDiff(m, want.rowMax[r]!) === 0 || (m.every((x) => x === -Infinity) && want.rowMax[r]!.every((x) => x === -Infinity)), `rowMax of shard ${r}`));
    got.sums.forEach((s, r) => assert.ok(maxDiff(s, want.sums[r]!) <= 1e-4 * Math.max(1, ...Array.from(want.sums[r]!, Math.abs)), `sums of shard ${r} differ by ${maxDiff(s, want.sums[r]!)}`));
    assert.ok(maxDiff(got.loss, want.loss) < 1e-4, `loss differs by ${maxDiff(got.loss, want.loss)}`);
    assert.ok(maxDiff(got.lse, want.lse) < 1e-4, `lse differs by ${maxDiff(got.lse, want.lse)}`);
    const tol = dtype === 'f32' ? 1e-6 : dtype === 'bf16' ? 4e-3 : 5e-4;
    assert.ok(maxDiff(got.dLogits, want.dLogits) < tol, `dLogits differ by ${maxDiff(got.dLogits, want.dLogits)}`);
    assert.ok(got.paddingGradientsZero, 'padding columns get exact zeros');
  });
}

test('masked embedding on the GPU: shard lookups add up to the CPU lookup; the backward keeps to the shard', { skip }, async () => {
  const gpu = await createGpuBackend();
  const cpu = new CpuBackend();
  const vocab = 300, H = 64, shardRows = 80;
  const table = Float32Array.from({ length: vocab * H }, (_, i) => Math.sin(i * 0.37));
  const tokens = Int32Array.from({ length: 33 }, (_, i) => (i * 97) % vocab);
  for (const dtype of ['f32', 'bf16'] as const) {
    const want = runShardedEmbedding(cpu, table, vocab, H, shardRows, 4, tokens, dtype);
    const got = runShardedEmbedding(gpu, table, vocab, H, shardRows, 4, tokens, dtype);
    assert.equal(maxDiff(got, want), 0, `${dtype}: masked lookups`);
  }
  const [c, g] = [cpu, gpu].map((b) => {
    const dTable = b.fromArray(new Float32Array(shardRows * H), [shardRows, H], 'f32');
    const dOut = b.fromArray(Float32Array.from({ length: tokens.length * H }, (_, i) => i % 7), [1, tokens.length, H], 'f32');
    const mask = b.fromArray(new Uint8Array(tokens.length * H).fill(1), [1, tokens.length, H], 'u8');
    b.embeddingBackward({ tokens: b.fromArray(tokens, [1, tokens.length], 'i32'), dOut, mask, p: 0, dTokenTable: dTable, vocabStart: 160 });
    return b.download(dTable) as Float32Array;
  });
  assert.ok(maxDiff(c!, g!) < 1e-5, `masked embedding backward differs by ${maxDiff(c!, g!)}`);
  assert.ok(c!.some((x) => x !== 0), 'the shard receives gradients');
});
