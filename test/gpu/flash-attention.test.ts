// The tensor-core FlashAttention forward (flash-forward.ts) against the CPU reference: f16 and bf16,
// every head dimension it is tuned for, causal or not, Lq ≠ Lk, lengths that are not a multiple of
// any tile (1, 17, 200, 257, 1000), padding with a batch whose queries see no key at all, causal
// with Lq > Lk (leading queries see nothing), grouped-query attention (Hq/Hkv = 4 and 8), a
// non-default scale and peaked scores. Fresh random inputs, outputs poisoned with NaN first.
// Skips cleanly without a CUDA GPU.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { flashAttentionPath } from '../../src/backend/cuda/kernels/attention.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { checkCase } from '../../src/testing/conformance.js';
import type { OpCase } from '../../src/testing/op-cases.js';
import { CaseContext } from '../../src/testing/op-cases.js';
import { freshSeed } from '../../src/testing/random.js';
import type { Tensor } from '../../src/tensor.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

interface Shape {
  B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; causal: boolean;
  /** keyLengths: batch 0 gets 0 visible keys, the others random lengths in [1, Lk]. */
  padded: boolean;
  scale?: number;
  /** Standard deviation of q (1 by default): 3 makes the softmax peaked, stressing the rescaling. */
  qStd?: number;
}

const SHAPES: Shape[] = [
  { B: 2, Hq: 4, Hkv: 4, Lq: 200, Lk: 200, d: 64, causal: false, padded: false },
  { B: 2, Hq: 8, Hkv: 2, Lq: 1000, Lk: 1000, d: 64, causal: true, padded: false },
  { B: 3, Hq: 8, Hkv: 1, Lq: 17, Lk: 200, d: 64, causal: false, padded: true },
  { B: 2, Hq: 4, Hkv: 2, Lq: 257, Lk: 257, d: 64, causal: true, padded: true, qStd: 3 },
  { B: 2, Hq: 2, Hkv: 2, Lq: 1, Lk: 1000, d: 80, causal: true, padded: true },
  { B: 2, Hq: 4, Hkv: 2, Lq: 200, Lk: 17, d: 80, causal: true, padded: false },
  { B: 3, Hq: 4, Hkv: 4, Lq: 257, Lk: 300, d: 96, causal: false, padded: true, scale: 0.3 },
  { B: 2, Hq: 8, Hkv: 2, Lq: 200, Lk: 200, d: 96, causal: true, padded: false },
  { B: 2, Hq: 4, Hkv: 4, Lq: 129, Lk: 129, d: 128, causal: true, padded: true },
  { B: 3, Hq: 8, Hkv: 2, Lq: 200, Lk: 1000, d: 128, causal: false, padded: false },
  { B: 2, Hq: 8, Hkv: 1, Lq: 1000, Lk: 1000, d: 128, causal: true, padded: true, qStd: 3 },
  { B: 2, Hq: 8, Hkv: 8, Lq: 128, Lk: 128, d: 128, causal: false, padded: false },
  { B: 2, Hq: 4, Hkv: 2, Lq: 200, Lk: 200, d: 256, causal: true, padded: false },
  { B: 2, Hq: 2, Hkv: 1, Lq: 17, Lk: 333, d: 256, causal: false, padded: true },
  { B: 1, Hq: 4, Hkv: 4, Lq: 1000, Lk: 1000, d: 256, causal: false, padded: false },
];

function caseName(dtype: string, s: Shape): string {
  return `flashAttentionForward ${dtype} q[${s.B},${s.Hq},${s.Lq},${s.d}] kv[${s.B},${s.Hkv},${s.Lk},${s.d}]` +
    `${s.causal ? ' causal' : ''}${s.padded ? ' padded' : ''}${s.scale !== undefined ? ` scale=${s.scale}` : ''}${s.qStd ? ` qStd=${s.qStd}` : ''}`;
}

/**
 * Forward only (out and lse). lse is −∞ exactly for queries that see no key: those entries are
 * compared bit-exactly as the flag output 'lseMasked' and set to 0 in 'lse' for the norm comparison.
 */
function forwardCase(dtype: 'bf16' | 'f16', s: Shape): OpCase {
  const { B, Hq, Hkv, Lq, Lk, d } = s;
  return {
    name: caseName(dtype, s), dtype, exact: ['lseMasked'],
    inputs: (rng) => {
      const lengths = rng.ints(B, 1, Lk + 1);
      lengths[0] = 0;
      return {
        q: { values: rng.floats(B * Hq * Lq * d, s.qStd ?? 1), shape: [B, Hq, Lq, d], dtype },
        k: { values: rng.floats(B * Hkv * Lk * d), shape: [B, Hkv, Lk, d], dtype },
        v: { values: rng.floats(B * Hkv * Lk * d), shape: [B, Hkv, Lk, d], dtype },
        keyLengths: { values: lengths, shape: [B], dtype: 'i32' },
      };
    },
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const out = c.out('out', [B, Hq, Lq, d], dtype), lse = c.out('lse', [B, Hq, Lq], 'f32');
      b.flashAttentionForward({
        q: c.in('q'), k: c.in('k'), v: c.in('v'), out, lse, causal: s.causal,
        ...(s.padded ? { keyLengths: c.in('keyLengths') } : {}), ...(s.scale !== undefined ? { scale: s.scale } : {}),
      });
      const results = c.results();
      const lseValues = Float32Array.from(results.lse!);
      results.lseMasked = Uint8Array.from(lseValues, (x) => (x === -Infinity ? 1 : 0));
      results.lse = lseValues.map((x) => (x === -Infinity ? 0 : x));
      return results;
    },
  };
}

test('every shape here takes the tensor-core path (f16/bf16, d % 16 = 0, aligned)', () => {
  for (const s of SHAPES) assert.equal(flashAttentionPath('bf16', s.d, s.scale ?? 1 / Math.sqrt(s.d), [0n, 256n]), 'mma', caseName('bf16', s));
});

test('tensor-core flash attention forward matches the CPU reference', { skip }, async (t) => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const shape of SHAPES) {
      const c = forwardCase(dtype, shape);
      await t.test(c.name, () => {
        const result = checkCase(c, gpu, cpu, seed);
        const failed = result.checks.filter((x) => !x.ok).map((x) => `${x.output}: ${x.detail}`);
        assert.deepEqual(failed, [], failed.join('\n'));
      });
    }
  }
});

test('tensor-core forward is deterministic and leaves no row unwritten when every query sees nothing', { skip }, async () => {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const gpu = CudaBackend.create();
  const [B, H, L, d] = [2, 4, 300, 128];
  const q = gpu.empty([B, H, L, d], 'bf16'), k = gpu.empty([B, H, L, d], 'bf16'), v = gpu.empty([B, H, L, d], 'bf16');
  for (const [i, x] of [q, k, v].entries()) gpu.randomFill({ out: x, distribution: 'normal', std: 1, seed: 7n + BigInt(i), offset: 0n });
  const runOnce = (keyLengths?: Tensor) => {
    const out = gpu.empty([B, H, L, d], 'bf16'), lse = gpu.empty([B, H, L], 'f32');
    gpu.fill(out, NaN);
    gpu.fill(lse, NaN);
    gpu.flashAttentionForward({ q, k, v, out, lse, causal: true, ...(keyLengths ? { keyLengths } : {}) });
    gpu.synchronize();
    return { out: gpu.download(out), lse: gpu.download(lse) };
  };
  const first = runOnce(), second = runOnce();
  assert.deepEqual(second.out, first.out, 'out differs between two identical runs');
  assert.deepEqual(second.lse, first.lse, 'lse differs between two identical runs');

  const none = runOnce(gpu.fromArray(new Int32Array([0, 0]), [B], 'i32'));
  assert.ok(none.out.every((x) => x === 0), 'queries that see no key must get out = 0');
  assert.ok(none.lse.every((x) => x === -Infinity), 'queries that see no key must get lse = -inf');
});
