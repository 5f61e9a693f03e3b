// sumSquares at the size of a large model's gradient workspace (4e8 elements, past 2^31 bytes): the
// same bits on every run (a fixed reduction tree, no atomics), and the value Σ x² ≈ n for standard
// normal x. Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createGpuBackend, gpuSkip } from './device.js';
import './report-as-you-go.js';

const skip = gpuSkip();

test('sumSquares over 4e8 bf16 elements is deterministic and ≈ n for N(0, 1) values', { skip }, async () => {
  const gpu = await createGpuBackend();
  const n = 4e8;
  const x = gpu.empty([n], 'bf16');
  const first = gpu.empty([1], 'f32'), second = gpu.empty([1], 'f32');
  try {
    gpu.randomFill({ out: x, distribution: 'normal', mean: 0, std: 1, seed: 2024n, offset: 0n });
    gpu.sumSquares({ x, out: first });
    gpu.sumSquares({ x, out: second });
    const [a, b] = [gpu.download(first)[0]!, gpu.download(second)[0]!];
    assert.ok(Object.is(a, b), `two runs differ: ${a} vs ${b}`);
    // E[Σ x²] = n (bf16 rounding of x adds ~1e-5 relative); the sampling spread is sqrt(2n) ≈ 3e4, 1e-4 of n.
    assert.ok(Math.abs(a / n - 1) < 1e-3, `Σ x² = ${a}, expected ≈ ${n}`);
  } finally {
    for (const t of [x, first, second]) gpu.free(t);
  }
});
