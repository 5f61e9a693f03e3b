// The streamed skinny GEMM's routing rule, plans and launches, without a GPU: which checked GEMMs it
// takes, that every plan covers N once, splits K into at most 8 ranges of whole stages (one cluster) and
// fits its ring in shared memory, what its source does (one producer warp of bulk copies, mbarrier
// phases, the split combine in distributed shared memory) and what a launch asks of its host.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CheckedGemm, GemmProblem } from '../../../../src/backend/cuda/gemm-plan.js';
import * as stream from '../../../../src/backend/cuda/kernels/gemm-stream.js';
import type { CheckedGatedLinear } from '../../../../src/backend/cuda/kernels/gemv.js';
import { argValue, checkedGemm, commonGemmRefusals, deviceTensor, RecordingHost, tensorMapArg } from './launch-helpers.js';

const checked = (problem: Partial<GemmProblem>, extra: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean } = {}) => checkedGemm({ M: 32, N: 3072 }, problem, extra);

test('streamGemmApplies: 16-bit, 5–32 rows against [N, K] weights, K a multiple of 64, a forward epilogue, aligned; the rest stays elsewhere', () => {
  assert.ok(stream.streamGemmApplies(checked({})));
  assert.ok(stream.streamGemmApplies(checked({ dtype: 'f16', M: 32, K: 192, epilogue: 'gelu_bias' })));
  assert.ok(stream.streamGemmApplies(checked({ M: 5, N: 77, K: 64 })));
  assert.ok(stream.streamGemmApplies(checked({}, { beta: 1 })), 'beta = 1: the accumulate epilogue');
  for (const [why, g] of [
    ['4 rows (the GEMV\'s)', checked({ M: 4 })],
    ['33 rows (cuBLASLt was faster at 64)', checked({ M: 33 })],
    ['f32', checked({ dtype: 'f32' })],
    ['K not a multiple of 64', checked({ K: 264 })],
    ['beta 0.5', checked({}, { beta: 0.5 })],
    ...commonGemmRefusals(checked).filter(([why]) => why !== 'beta'),
  ] as const) assert.equal(stream.streamGemmApplies(g), false, why);
});

test('planStreamGemm: even row tiles for M, blocks covering N once, whole stages in 1–8 splits of at least 2, a ring of 2–8 stages that fits', () => {
  for (const M of [5, 8, 16, 17, 32, 33, 48, 64]) {
    for (const [N, K] of [[3072, 2048], [2048, 8192], [8192, 2048], [77, 192], [128256, 2048], [768, 3072], [2048, 2048], [2304, 768]] as const) {
      for (const gate of [undefined, { activation: 'silu' as const, bias: true }]) {
        const { spec, grid } = stream.planStreamGemm('bf16', M, N, K, 'none', gate, 132);
        assert.equal(spec.rowTiles, 2 * Math.ceil(M / 16));
        assert.ok(8 * spec.rowTiles >= M && spec.rowTiles <= 8);
        const [tiles, splits] = grid, bn = stream.streamBlockFeatures(spec);
        assert.equal(spec.splits, splits, 'the cluster is the splits of a tile');
        assert.ok(tiles * bn >= N && (tiles - 1) * bn < N, `${tiles} blocks cover N = ${N} once`);
        assert.equal(K % spec.chunkK, 0, 'every stage is a whole chunk of K');
        const chunks = K / spec.chunkK;
        assert.ok(splits >= 1 && splits <= stream.STREAM_MAX_SPLITS, `${splits} splits: one portable cluster`);
        assert.ok(splits === 1 || Math.floor(chunks / splits) >= 2, `${splits} splits of ${chunks} chunks keep 2 a split`);
        assert.ok(splits === 1 || tiles * splits <= 132, 'a split grid is one wave of one block an SM');
        assert.ok(spec.stages >= 2 && spec.stages <= 8);
        assert.ok(stream.streamSharedBytes(spec) <= 227 * 1024, 'the ring fits in shared memory');
        assert.doesNotThrow(() => stream.streamGemmSource(spec));
      }
    }
  }
  // Llama 1.2B at batch 32 (session 22's sweeps): 64 features a block; QKV (48 tiles) and the gated
  // gate/up (128) unsplit with the deepest ring; out and down (32 tiles) in 4 splits with a ring two
  // blocks an SM can hold; the LM head (2004 tiles, many waves) unsplit with that ring too.
  const plan = (N: number, K: number, gate?: { activation: 'silu'; bias: boolean }) => stream.planStreamGemm('bf16', 32, N, K, 'none', gate, 132);
  const silu = { activation: 'silu' as const, bias: false };
  const shape = (p: stream.StreamGemmPlan) => [...p.grid, p.spec.warps, p.spec.chunkK, p.spec.stages];
  assert.deepEqual([plan(3072, 2048), plan(2048, 2048), plan(8192, 2048, silu), plan(2048, 8192), plan(128256, 2048)].map(shape),
    [[48, 1, 4, 128, 8], [32, 4, 4, 128, 4], [128, 1, 4, 128, 5], [32, 4, 4, 128, 4], [2004, 1, 4, 128, 4]]);
  assert.ok(2 * stream.streamSharedBytes(plan(2048, 8192).spec) <= 228 * 1024, 'a split plan leaves room for two blocks an SM');
  // GPT-2 at batch 32: QKV and fc unsplit; out 6 ways at 64 k (12 chunks), proj 8 ways; the LM head shallow.
  assert.deepEqual([plan(2304, 768), plan(768, 768), plan(3072, 768), plan(768, 3072), plan(50257, 768)].map(shape),
    [[36, 1, 4, 128, 8], [12, 6, 4, 64, 8], [48, 1, 4, 128, 8], [12, 8, 4, 128, 4], [786, 1, 4, 128, 4]]);
  assert.throws(() => stream.planStreamGemm('bf16', 32, 2048, 2000, 'none', undefined, 132), /K = 2000 is not a multiple of 64/);
  assert.throws(() => stream.streamGemmSource({ dtype: 'bf16', rowTiles: 3, warps: 8, featureTiles: 1, chunkK: 128, stages: 4, splits: 1, epilogue: 'none' }), /row tiles must be 2, 4, 6 or 8/);
  assert.throws(() => stream.streamGemmSource({ dtype: 'bf16', rowTiles: 4, warps: 8, featureTiles: 1, chunkK: 128, stages: 4, splits: 9, epilogue: 'none' }), /splits must be 1\.\.8/);
  assert.throws(() => stream.streamGemmSource({ dtype: 'bf16', rowTiles: 8, warps: 8, featureTiles: 2, chunkK: 128, stages: 8, splits: 1, epilogue: 'none' }), /bytes of shared memory exceed/);
});

test('streamGemmSource: one producer lane of tensor-map copies on full/empty mbarriers; a split kernel is one cluster combining in shared memory', () => {
  const split = stream.planStreamGemm('bf16', 32, 2048, 8192, 'none', undefined, 132).spec;
  const src = stream.streamGemmSource(split).source;
  const body = src.slice(src.indexOf('extern "C"'));
  assert.match(src, /__cluster_dims__\(1, 4, 1\)/);
  assert.match(body, /const __grid_constant__ TensorMap wmap, const __grid_constant__ TensorMap xmap/);
  assert.match(body, /if \(warp == CW\) \{[^]*if \(lane == 0\) \{/);
  assert.match(body, /tma_load_2d_weight\(group, &wmap, c \* KC \+ 64 \* kb, n0, &full\[stage\]\)/);
  assert.match(body, /mbar_wait\(&empty\[s\], \(\(i \/ STAGES\) - 1\) & 1\)/);
  assert.match(body, /mbar_wait\(&full\[s\], \(i \/ STAGES\) & 1\)/);
  // The ldmatrix addresses follow the 128-byte swizzle the TMA wrote.
  assert.match(body, /swizzled_offset<8>\(row, 2 \* \(ks % 4\) \+ half\)/);
  // The weights of the first stages go out before the grid-dependency wait, x after it.
  assert.ok(body.indexOf('copy_weights(i, c_begin + i)') < body.indexOf('GRID_DEPENDENCY_WAIT_ONE()'));
  assert.ok(body.indexOf('GRID_DEPENDENCY_WAIT_ONE()') < body.indexOf('copy_x(i, c_begin + i)'));
  assert.match(body, /cluster_load\(&sums\[/);
  const consumers = body.slice(body.indexOf('} else {'), body.indexOf('GRID_DEPENDENCY_TRIGGER()'));
  assert.match(consumers, /mma_16816/);
  assert.doesNotMatch(consumers, /__syncthreads|bar\.sync/, 'no block barrier in the consumers\' loop');
  assert.doesNotMatch(body, /atomicAdd|partials/, 'no global partials');
  // Gated: the gate box at row n0 and the up box at row N + n0.
  const gated = stream.streamGemmSource(stream.planStreamGemm('bf16', 32, 8192, 2048, 'none', { activation: 'silu', bias: false }, 132).spec).source;
  assert.match(gated, /if \(GATED\) tma_load_2d_weight\(group \+ BN \* 128, &wmap, c \* KC \+ 64 \* kb, N \+ n0, &full\[stage\]\)/);
  const whole = stream.streamGemmSource(stream.planStreamGemm('bf16', 32, 128256, 2048, 'none', undefined, 132).spec).source;
  assert.doesNotMatch(whole, /__cluster_dims__|cluster_sync\(\);|cluster_load\(&sums/);
  assert.match(whole, /FOR_EACH_FRAGMENT\(FT\) \{/);
  assert.doesNotMatch(body, /bulk_copy\(/, 'no 1-D row copies (one after another: session 22)');
});

test('launchStreamGemm / launchStreamGated: CW + 1 warps, the ring in dynamic shared memory, no scratch, no counters', () => {
  const host = new RecordingHost();
  const t = (ptr: bigint) => ({ ptr }) as unknown as CheckedGemm['a'];
  stream.launchStreamGemm(host, { ...checked({ M: 32, N: 2048, K: 8192 }), bias: t(0x4000n) });
  const split = host.launches.at(-1)!;
  assert.equal(split.key, 'gemm_stream.bf16.nt4.w4.ft1.kc128.s4.k4.none');
  assert.deepEqual(split.config.grid, [32, 4]);
  assert.equal(split.config.block, 5 * 32);
  assert.equal(split.config.sharedBytes, stream.streamSharedBytes(stream.planStreamGemm('bf16', 32, 2048, 8192, 'none', undefined, 132).spec));
  // The weights [N, K] in boxes of 64 rows (BN) × 64 k; x [M, K] in boxes of 32 rows (XROWS).
  const w = tensorMapArg(split, 0), x = tensorMapArg(split, 1);
  assert.deepEqual({ ...w, address: 0n }, { address: 0n, dtype: 'bf16', cols: 8192, rows: 2048, rowStrideBytes: 16384, boxCols: 64, boxRows: 64 });
  assert.deepEqual([x.rows, x.cols, x.boxRows], [32, 8192, 32]);
  assert.equal(argValue(split, 2, 'ptr'), 0x4000n);
  assert.equal(argValue(split, 4, 'i32'), 32);
  assert.equal(argValue(split, 5, 'i32'), 2048);
  assert.equal(argValue(split, 6, 'i32'), 8192);
  const gated: CheckedGatedLinear = {
    x: deviceTensor([32, 2048], 'bf16'), weight: deviceTensor([16384, 2048], 'bf16'), bias: undefined,
    up: deviceTensor([32, 16384], 'bf16'), out: deviceTensor([32, 8192], 'bf16'), activation: 'silu', rows: 32, K: 2048, F: 8192,
  } as unknown as CheckedGatedLinear;
  assert.ok(stream.streamGatedApplies(gated));
  stream.launchStreamGated(host, gated);
  const g = host.launches.at(-1)!;
  assert.equal(g.key, 'gemm_stream.bf16.nt4.w4.ft1.kc128.s5.gated_silu');
  assert.deepEqual(g.config.grid, [128, 1]);
  assert.deepEqual([tensorMapArg(g, 0).rows, tensorMapArg(g, 0).boxRows], [16384, 64], 'the gated weight [2F, K], boxes of BN rows');
  assert.equal(argValue(g, 5, 'i32'), 8192);
  assert.equal(host.scratchRequests?.length ?? 0, 0);
});

test('accumulate (beta = 1) adds into out in its own kernel; a gated product does not accumulate; the default kernel triggers the next one after its main loop', () => {
  const plain = stream.planStreamGemm('bf16', 32, 2048, 2048, 'none', undefined, 132);
  assert.equal(plain.spec.splits, 4, 'the plain plan splits K (a small grid)');
  const accumulating = stream.planStreamGemm('bf16', 32, 2048, 2048, 'none', undefined, 132, { accumulate: true });
  assert.match(stream.streamGemmKey(accumulating.spec), /\.acc$/);
  assert.match(stream.streamGemmSource(accumulating.spec).source, /epilogue\(vg, bias, n\) \+ to_float\(out\[/);
  assert.doesNotMatch(stream.streamGemmSource(plain.spec).source, /to_float\(out\[/);
  assert.throws(() => stream.streamGemmSource({ ...plain.spec, splits: 1, accumulate: true, gate: { activation: 'silu', bias: false } }), /does not accumulate/);
  const source = stream.streamGemmSource(plain.spec).source;
  assert.equal(source.split('GRID_DEPENDENCY_TRIGGER();').length - 1, 1, 'one trigger');
  assert.ok(source.indexOf('GRID_DEPENDENCY_TRIGGER();') > source.indexOf('float acc['), 'after the main loop');
});
