// bench/serve-speed.ts end to end on the CPU (gpt2-tiny, small lengths, no PyTorch): the JSON has every
// field, tokens counted equal the drawn output lengths in both modes, the ratio is continuous ÷ static,
// and the prefix-sharing run shares blocks. Speed itself is not asserted (CPU). Plus the workload helpers.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { drawWorkload, percentile, stepFloorMs } from '../../bench/serve-speed.js';
import type { RunMetrics } from '../../bench/serve-speed.js';

const scratch = mkdtempSync(join(tmpdir(), 'fuseformer-serve-speed-'));
after(() => rmSync(scratch, { recursive: true, force: true }));
const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'serve-speed.js');

test('workload: seeded lognormal lengths inside their ranges, the prefix in front; nearest-rank percentiles', () => {
  const prompt = { median: 20, sigma: 1, min: 4, max: 60 }, output = { median: 8, sigma: 0.8, min: 2, max: 30 };
  const a = drawWorkload(200, prompt, output, 257, 5), b = drawWorkload(200, prompt, output, 257, 5);
  assert.deepEqual(a, b, 'the same seed draws the same workload');
  for (const r of a) {
    assert.ok(r.prompt.length >= 4 && r.prompt.length <= 60 && r.outputTokens >= 2 && r.outputTokens <= 30);
    assert.ok(r.prompt.every((t) => Number.isInteger(t) && t >= 0 && t < 257));
  }
  const lengths = a.map((r) => r.prompt.length);
  assert.ok(percentile(lengths, 0.5) >= 14 && percentile(lengths, 0.5) <= 28, `median prompt ${percentile(lengths, 0.5)} near 20`);
  assert.ok(new Set(lengths).size > 10, 'lengths vary');
  const shared = drawWorkload(3, prompt, output, 257, 6, [1, 2, 3]);
  for (const r of shared) assert.deepEqual(r.prompt.slice(0, 3), [1, 2, 3]);
  assert.equal(percentile([5, 1, 4, 2, 3], 0.5), 3);
  assert.equal(percentile([5, 1, 4, 2, 3], 0.99), 5);
  assert.ok(Number.isNaN(percentile([], 0.5)));
});

test('bench:serve-speed runs end to end on the CPU and writes a sane JSON', () => {
  const json = join(scratch, 'serve-speed.json');
  const run = spawnSync(process.execPath, [
    script, '--preset', 'gpt2-tiny', '--backend', 'cpu', '--no-torch', '--concurrency', '2,4', '--requests', '8',
    '--prompt-median', '12', '--prompt-range', '4,40', '--output-median', '6', '--output-range', '2,16',
    '--prefix-length', '32', '--prefix-concurrency', '4', '--prefix-requests', '6', '--suffix-range', '2,6',
    '--max-batch-tokens', '64', '--block-size', '8', '--json', json,
  ], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /\| concurrency \| continuous tok\/s \| static tok\/s \| ratio \| ratio at equal % of floor \|/);
  assert.match(run.stdout, /HF generate column: left out \(--no-torch\)/);
  assert.match(run.stdout, /\| prefix caching \| TTFT p50\/p99 ms \| peak KV blocks/);
  const result = JSON.parse(readFileSync(json, 'utf8')) as {
    copyBandwidth: number; weightBytes: number; kvBytesPerPosition: number; torch: { note: string };
    runs: { concurrency: number; requests: number; continuous: RunMetrics; static: RunMetrics; ratio: number; floorRatio: number; hf?: unknown }[];
    prefix: { on: RunMetrics; off: RunMetrics; ttftP50Ratio: number; kvMemoryRatio: number };
    targets: { staticRatioAt256: { note?: string }; rooflineDecodePercent: { byConcurrency: Record<string, number>; met: boolean } };
  };
  assert.ok(result.copyBandwidth > 0 && result.weightBytes > 0 && result.kvBytesPerPosition > 0);
  assert.deepEqual(result.runs.map((r) => r.concurrency), [2, 4]);
  for (const r of result.runs) {
    assert.equal(r.hf, undefined, 'no HF column with --no-torch');
    for (const m of [r.continuous, r.static]) {
      assert.equal(m.requests, 8);
      assert.equal(m.outputTokens, m.drawnOutputTokens, 'no stop tokens: every request makes exactly its drawn length');
      assert.ok(m.drawnOutputTokens >= 8 * 2 && m.drawnOutputTokens <= 8 * 16);
      assert.ok(m.tokensPerSecond > 0 && m.wallSeconds > 0);
      assert.ok(m.ttftMs.p50 > 0 && m.ttftMs.p99 >= m.ttftMs.p50);
      assert.ok(m.itlMs.p50 > 0 && m.itlMs.p99 >= m.itlMs.p50);
      assert.ok(m.steps >= m.decodeSteps && m.decodeSteps > 0);
      assert.ok(m.meanBatch >= 1 && m.meanBatch <= r.concurrency && m.meanDecodeBatch >= 1 && m.meanDecodeBatch <= r.concurrency);
      assert.ok(m.roofline.decodePercent > 0 && m.roofline.allPercent > 0);
      assert.ok(Math.abs(m.roofline.decodePercent - (100 * m.roofline.decodeFloorMs) / m.roofline.decodeMeasuredMs) < 1e-9);
      assert.equal(m.preemptions, 0, 'the default pool holds every request');
      assert.ok(m.peakBlocksUsed > 0);
    }
    assert.equal(r.continuous.drawnOutputTokens, r.static.drawnOutputTokens, 'both modes run the same requests');
    assert.ok(Math.abs(r.ratio - r.continuous.tokensPerSecond / r.static.tokensPerSecond) < 1e-9);
    assert.ok(r.static.steps >= r.continuous.steps, 'idle slots cost static batching steps');
    assert.ok(Math.abs(r.floorRatio - r.static.roofline.floorMs / r.continuous.roofline.floorMs) < 1e-9);
    assert.ok(r.floorRatio >= 1, 'static batching\'s extra steps read the weights again: its floors add up to more');
  }
  const { on, off } = result.prefix;
  assert.equal(on.outputTokens, on.drawnOutputTokens);
  assert.ok(on.prefixHitRate > 0 && off.prefixHitRate === 0);
  assert.ok(on.peakBlocksUsed < off.peakBlocksUsed, 'shared system-prompt blocks are held once');
  assert.ok(Math.abs(result.prefix.kvMemoryRatio - off.peakKvBytes / on.peakKvBytes) < 1e-9);
  assert.match(result.targets.staticRatioAt256.note!, /256 not run/);
  assert.deepEqual(Object.keys(result.targets.rooflineDecodePercent.byConcurrency), ['2', '4']);
  assert.match(result.torch.note, /--no-torch/);
});

test('bench:serve-speed --pipeline: pipelined engines make every drawn token; the settings say so', () => {
  const json = join(scratch, 'serve-speed-pipelined.json');
  const run = spawnSync(process.execPath, [
    script, '--preset', 'gpt2-tiny', '--backend', 'cpu', '--no-torch', '--no-prefix', '--concurrency', '3', '--requests', '8',
    '--prompt-median', '12', '--prompt-range', '4,40', '--output-median', '6', '--output-range', '2,16',
    '--max-batch-tokens', '24', '--block-size', '8', '--pipeline', '--json', json,
  ], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(run.status, 0, run.stderr);
  const result = JSON.parse(readFileSync(json, 'utf8')) as { settings: { pipelined: boolean }; runs: { continuous: RunMetrics; static: RunMetrics }[] };
  assert.equal(result.settings.pipelined, true);
  for (const m of [result.runs[0]!.continuous, result.runs[0]!.static]) {
    assert.equal(m.outputTokens, m.drawnOutputTokens);
    assert.ok(m.decodeSteps > 0 && m.roofline.decodeMeasuredMs > 0 && m.roofline.measuredMs <= 1000 * m.wallSeconds);
  }
});

test("a step's floor is its bytes at copy bandwidth or its GEMM FLOPs at the GEMM rate, whichever is longer", () => {
  const cost = { weightBytes: 2e9, lmHeadBytes: 5e8, kvBytesPerPosition: 32768, bandwidth: 4e12, layerFlopsPerRow: 3e9, lmHeadFlopsPerRow: 5e8, gemmRate: 6e14 };
  // A decode step of 100 rows at 500 positions: 2e9 + 100·501·32768 B ≈ 3.64 GB → 0.91 ms; 100·3.5e9 FLOP → 0.58 ms.
  const decode = { items: Array.from({ length: 100 }, () => ({ start: 500, count: 1, samples: true })) };
  assert.ok(Math.abs(stepFloorMs(decode as never, cost) - ((2e9 + 100 * 501 * 32768) / 4e12) * 1000) < 1e-12);
  // A 2048-token prompt chunk that does not sample: 1.5e9 B → 0.375 ms; 2048·3e9 FLOP → 10.24 ms.
  const prompt = { items: [{ start: 0, count: 2048, samples: false }] };
  assert.ok(Math.abs(stepFloorMs(prompt as never, cost) - ((2048 * 3e9) / 6e14) * 1000) < 1e-12);
  // No GEMM rate (the CPU backend): bytes only.
  assert.ok(Math.abs(stepFloorMs(prompt as never, { ...cost, gemmRate: Infinity }) - ((1.5e9 + 2048 * 32768) / 4e12) * 1000) < 1e-12);
});
