// The decode-step ops (src/testing/infer-op-cases.ts) on the CUDA backend against the CPU reference, on
// fresh random inputs with poisoned outputs; sampled tokens must match exactly; decode attention again
// with each of its variants forced (decodeAttentionOptions: the throughput and the pipelined
// kernels). Skips without a GPU. FUSEFORMER_TEST_OPS=a,b runs only the cases whose name contains
// one of the substrings (e.g. "speculativeSample"; the decode attention variants then run only if matched).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TestContext } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { caseFailures, casesSelectedByEnv } from '../../src/testing/conformance.js';
import type { OpCase } from '../../src/testing/op-cases.js';
import { inferOpCases } from '../../src/testing/infer-op-cases.js';
import { pagedOpCases } from '../../src/testing/paged-op-cases.js';
import { freshSeed } from '../../src/testing/random.js';
import { checkOpCasesOnGpu } from './op-case-suite.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;
const only = casesSelectedByEnv([]).words;
const selected = <C extends { name: string }>(cases: C[]): C[] => casesSelectedByEnv(cases).cases;

test('CUDA decode-step ops match the CPU reference', { skip }, async (t) => {
  const cases = selected(inferOpCases());
  if (only.length > 0) t.diagnostic(`FUSEFORMER_TEST_OPS: ${cases.length} cases`);
  assert.ok(cases.length > 0, `FUSEFORMER_TEST_OPS=${only.join(',')} matches no op case`);
  await checkOpCasesOnGpu(t, cases);
});

type DecodeOptions = typeof import('../../src/backend/cuda/kernels/decode-attention.js').decodeAttentionOptions;

/**
 * Every decode attention case (contiguous and paged) on the GPU against the CPU, `runs` times each, with
 * the launcher's options changed by `set` (restored afterwards). With `fused`, each run must also have
 * launched the fused appendDecodeAttention kernel exactly when fused(case) says so.
 */
async function decodeVariantCheck(t: TestContext, set: (options: DecodeOptions) => void, runs: number, cases = decodeCases(), fused?: (c: OpCase) => boolean): Promise<void> {
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  const { decodeAttentionOptions } = await import('../../src/backend/cuda/kernels/decode-attention.js');
  const gpu = CudaBackend.create();
  const cpu = new CpuBackend();
  const seed = freshSeed();
  t.diagnostic(`seed ${seed} (rerun with FUSEFORMER_TEST_SEED=${seed})`);
  const saved = { ...decodeAttentionOptions };
  set(decodeAttentionOptions);
  try {
    for (const c of cases) {
      await t.test(c.name, () => {
        for (let run = 0; run < runs; run++) {
          const before = gpu.fusedAppendLaunches;
          const failed = caseFailures(c, gpu, cpu, seed + run);
          assert.deepEqual(failed, [], failed.join('\n'));
          if (fused) assert.equal(gpu.fusedAppendLaunches > before, fused(c), `fused launches ${before} → ${gpu.fusedAppendLaunches}`);
        }
      });
    }
  } finally {
    Object.assign(decodeAttentionOptions, saved);
  }
}

function decodeCases() {
  return selected([...inferOpCases(), ...pagedOpCases()].filter((c) => /^(paged )?decodeAttention /.test(c.name)));
}

// The throughput variant (5 blocks an SM) and the pipelined one (cp.async-staged, double-buffered K/V
// tiles; 128-byte rows, the others keep the default kernel) forced on every case: the launcher picks them
// only for some grids or when asked.
test('decode attention, throughput variant forced, matches the CPU reference', { skip }, async (t) => {
  await decodeVariantCheck(t, (o) => { o.throughput = true; o.pipelined = false; }, 1);
});

test('decode attention, pipelined variant forced, matches the CPU reference, twice in a row', { skip }, async (t) => {
  await decodeVariantCheck(t, (o) => { o.pipelined = true; }, 2);
});

// The tensor-core variant (scores and P·V by mma.sync, a warp per key tile) forced on the pipelined
// variant's 16-bit rows, plain and with the append fused, twice in a row; f32 and other row sizes keep
// their kernels. The launches must have taken it for every 16-bit case with 128- or 256-byte rows.
test('decode attention, tensor-core variant forced, matches the CPU reference, twice in a row', { skip }, async (t) => {
  const { decodeAttentionLaunches } = await import('../../src/backend/cuda/kernels/decode-attention.js');
  const appendCases = selected([...inferOpCases(), ...pagedOpCases()].filter((c) => /^(paged )?appendDecodeAttention /.test(c.name)));
  const takes = [...decodeCases(), ...appendCases].filter((c) => c.dtype !== 'f32' && / d=(64|128) /.test(c.name)).length;
  assert.ok(only.length > 0 || takes > 0, 'cases with 16-bit 64- and 128-wide heads exercise the tensor-core variant');
  const before = decodeAttentionLaunches.mma;
  await t.test('decodeAttention', (tf) => decodeVariantCheck(tf, (o) => { o.pipelined = true; o.mma = true; }, 2));
  await t.test('appendDecodeAttention fused', (tf) => decodeVariantCheck(tf, (o) => { o.pipelined = true; o.mma = true; o.append = true; }, 2, appendCases));
  assert.ok(decodeAttentionLaunches.mma - before >= 2 * takes, `tensor-core launches ${decodeAttentionLaunches.mma - before} for ${takes} cases run twice`);
});

// The tensor-core variant's other shapes (FUSEFORMER_DECODE_MMA_SHAPE, for sweeps): 16-key tiles in three
// stages at 4 blocks an SM, 32-key tiles in three stages; plain and fused append, once each.
test('decode attention, tensor-core variant in its other shapes, matches the CPU reference', { skip }, async (t) => {
  const appendCases = selected([...inferOpCases(), ...pagedOpCases()].filter((c) => /^(paged )?appendDecodeAttention /.test(c.name)));
  for (const shape of [{ tile: 16, stages: 3, blocksPerSm: 4 }, { tile: 32, stages: 3, blocksPerSm: 0 }] as const) {
    const label = `tile ${shape.tile}, ${shape.stages} stages`;
    await t.test(`${label}: decodeAttention`, (tf) => decodeVariantCheck(tf, (o) => { o.pipelined = true; o.mma = true; o.mmaShape = shape; }, 1));
    await t.test(`${label}: appendDecodeAttention fused`, (tf) => decodeVariantCheck(tf, (o) => { o.pipelined = true; o.mma = true; o.mmaShape = shape; o.append = true; }, 1, appendCases));
  }
});

// appendDecodeAttention: one kernel where the pipelined variant takes the rows (d·sizeof(T) = 128 bytes; 256
// at 16 bit, on tensor cores), head norms or not, the two ops otherwise; with the fusion off
// (FUSEFORMER_DECODE_APPEND=0's switch) always the two ops.
// Both ways against the CPU, twice in a row (the caches are updated in place: a stale key would show).
test('appendDecodeAttention is one kernel for 128-byte head rows (256-byte at 16 bit) and two ops otherwise, both matching the CPU reference', { skip }, async (t) => {
  const cases = selected([...inferOpCases(), ...pagedOpCases()].filter((c) => /^(paged )?appendDecodeAttention /.test(c.name)));
  const rowBytes = (c: OpCase) => Number(/ d=(\d+)/.exec(c.name)![1]) * (c.dtype === 'f32' ? 4 : 2);
  await t.test('fused', (tf) => decodeVariantCheck(tf, (o) => { o.append = true; }, 2, cases, (c) => rowBytes(c) === 128 || (rowBytes(c) === 256 && c.dtype !== 'f32')));
  await t.test('two ops', (tf) => decodeVariantCheck(tf, (o) => { o.append = false; }, 2, cases, () => false));
});
