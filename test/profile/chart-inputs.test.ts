// Charts drawn from result files read back from disk, which may hold anything: a roofline with a ridge of
// 0 (its axis loop never ended), rows missing the fields a plot reads, serve-speed runs with non-numbers —
// each refused naming the file and the field, never a hang, a stack trace or a chart of NaN.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runBench } from '../../src/cli/bench.js';
import { serveCharts, writeRooflineCharts } from '../../src/profile/bench-charts.js';
import type { KernelRow } from '../../src/profile/profiler.js';
import { rooflineSvg } from '../../src/profile/roofline-plot.js';
import type { Roofs } from '../../src/profile/roofs.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-chart-inputs-'));
after(() => rmSync(root, { recursive: true, force: true }));

const ROOFS: Roofs = { copyGBps: 4000, gemmTflops: 700, gemmDtype: 'bf16', gemmShape: [8192, 8192, 8192], ridge: 175 };
const ROW = { name: 'gemm', op: 'gemm', gemm: true, calls: 1, totalMs: 1, medianMs: 1, share: 0.5, flops: 1e12, bytes: 1e9, intensity: 1000, tflops: 500 } as KernelRow;

test('a roofline refuses roofs and rows it cannot draw, by field', () => {
  assert.ok(rooflineSvg([ROW], ROOFS).includes('<svg'));
  assert.throws(() => rooflineSvg([ROW], { ...ROOFS, ridge: 0 }), /roofs\.ridge must be a positive number, got 0/);
  assert.throws(() => rooflineSvg([ROW], { ...ROOFS, ridge: undefined as unknown as number }), /roofs\.ridge must be a positive number, got nothing/);
  assert.throws(() => rooflineSvg([ROW], { ...ROOFS, gemmDtype: undefined as unknown as 'bf16' }), /roofs\.gemmDtype/);
  assert.throws(() => rooflineSvg([null as unknown as KernelRow], ROOFS), /kernels\[0\] is null/);
  const { intensity: _intensity, ...noIntensity } = ROW;
  assert.throws(() => rooflineSvg([noIntensity as KernelRow], ROOFS), /kernels\[0\] \(gemm\): 'intensity' is missing/);
});

test('writeRooflineCharts names the profile file; serveCharts checks every run', () => {
  const results = join(root, 'results');
  mkdirSync(join(results, 'profile'), { recursive: true });
  writeFileSync(join(results, 'profile', 'x.profile.json'), JSON.stringify({ kernels: [], roofs: { copyGBps: 4000, gemmTflops: 700, ridge: 0, gemmDtype: 'bf16' } }));
  assert.throws(() => writeRooflineCharts(results, join(results, 'charts')), /x\.profile\.json: roofline: roofs\.ridge must be a positive number, got 0/);
  assert.equal(serveCharts({ runs: [{ concurrency: 16, continuous: { tokensPerSecond: 1000 }, static: { tokensPerSecond: 600 } }] }).length, 1);
  assert.throws(() => serveCharts({ runs: [{ concurrency: 2, continuous: { tokensPerSecond: 'fast' } }] }), /runs\[0\]\.continuous\.tokensPerSecond' should be a finite number, got "fast"/);
  assert.throws(() => serveCharts({ runs: [{ continuous: { tokensPerSecond: 5 } }] }), /runs\[0\]\.concurrency' should be a positive integer/);
  assert.throws(() => serveCharts({ runs: [7] }), /runs\[0\] should be an object, got 7/);
  assert.throws(() => serveCharts({ runs: [] }), /expected a non-empty 'runs' array/);
});

test('bench --charts-only --results names a directory that is not there', () => {
  assert.throws(() => runBench(['--charts-only', '--results', join(root, 'nowhere')], () => {}), /--results: '.*nowhere' is not a directory/);
});
