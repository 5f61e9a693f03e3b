// bench/timeline-compare.ts: two decode timelines matched by model, precision and batch, kernel by kernel.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TimelineResult } from '../../bench/timeline-compare.js';
import { compareTimelines, formatComparison } from '../../bench/timeline-compare.js';

const kernel = (name: string, stepUs: number, perStep = 16) => ({ kernel: name, perStep, medianUs: stepUs / perStep, stepUs });

const apart: TimelineResult = {
  model: 'llama-1.2B', precision: 'int4-head', batch: 1, stepUs: [576, 575, 574],
  kernels: [kernel('int4_gemv_qkv', 53.8), kernel('residual_norm_res', 96.4, 32), kernel('int4_gemv_gated', 173.8)],
};
const fused: TimelineResult = {
  model: 'llama-1.2B', precision: 'int4-head', batch: 1, stepUs: [646, 647, 645],
  kernels: [kernel('int4_gemv_qkv_norm_rms_m1_res', 84.9), kernel('int4_gemv_gated_norm_rms_m1_res', 186.2)],
};

test('kernels are matched by name, with the strip pattern removed; those of one side only show a dash', () => {
  const [c] = compareTimelines([apart], [fused], /_norm_rms_m1_res$/);
  assert.equal(c!.label, 'llama-1.2B int4-head batch 1');
  assert.deepEqual([c!.stepA, c!.stepB], [575, 646]);
  assert.deepEqual(c!.kernels, [
    { kernel: 'int4_gemv_qkv', a: 53.8, b: 84.9 },
    { kernel: 'residual_norm_res', a: 96.4 },
    { kernel: 'int4_gemv_gated', a: 173.8, b: 186.2 },
  ]);
  const text = formatComparison(c!);
  assert.match(text, /^## llama-1\.2B int4-head batch 1: 575\.0 → 646\.0 µs a step \(\+71\.0\)/);
  assert.match(text, /\| residual_norm_res \| 96\.4 \| — \| -96\.4 \|/);
  assert.match(text, /\| int4_gemv_qkv \| 53\.8 \| 84\.9 \| \+31\.1 \|/);
});

test('without a strip pattern renamed kernels stay apart; results only one run holds are left out', () => {
  const other = { ...fused, precision: 'bf16' };
  const comparisons = compareTimelines([apart, other], [fused]);
  assert.equal(comparisons.length, 1);
  assert.deepEqual(comparisons[0]!.kernels.map((k) => k.kernel), ['int4_gemv_qkv', 'residual_norm_res', 'int4_gemv_gated', 'int4_gemv_qkv_norm_rms_m1_res', 'int4_gemv_gated_norm_rms_m1_res']);
  // Two keys that meet in one name once stripped are summed.
  const [merged] = compareTimelines([{ ...apart, kernels: [kernel('k_a', 1), kernel('k_b', 2)] }], [fused], /_[ab]$/);
  assert.deepEqual(merged!.kernels[0], { kernel: 'k', a: 3 });
});
