// The INT4 (W4A16) form of the streamed GEMM (kernels/gemm-stream.ts, spec.int4) without a GPU: which
// int4Linear calls take it (by default the gated MLP product at 5–32 rows; int4TmaOptions, or path 'tma'),
// its plans (4 or 8 consumer warps, one block an SM, K split into whole 256-k stages), the launch (the packed weights as a tensor map of
// 16-bit columns, the scales and zeros last) and what its source does.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as q4 from '../../../../src/backend/cuda/kernels/quant-int4.js';
import * as stream from '../../../../src/backend/cuda/kernels/gemm-stream.js';
import { argValue, deviceTensor, RecordingHost, tensorMapArg } from './launch-helpers.js';

function int4Args(M: number, K: number, N: number, G: number, dtype: 'bf16' | 'f16' | 'f32' = 'bf16') {
  return {
    x: deviceTensor([M, K], dtype), qweight: deviceTensor([N, K / 8], 'i32'), scales: deviceTensor([N, K / G], 'f16'),
    zeros: deviceTensor([N, K / G], 'u8'), groupSize: G, out: deviceTensor([M, N], dtype),
  };
}

/** The 8-warp shape the structure tests pin (the default is 4, 1: streamInt4Shape). */
const EIGHT = { warps: 8, featureTiles: 1 } as const;

const last = (host: RecordingHost, args: Parameters<typeof q4.int4Linear>[1], path: q4.Int4Path = 'auto') => {
  q4.int4Linear(host, args, path);
  return host.launches.at(-1)!;
};

test('planStreamInt4: 8 consumer warps of one 128-feature tile, K split into whole stages within one block an SM, a ring no deeper than a block\'s chunks', () => {
  for (const M of [1, 5, 8, 9, 17, 32]) {
    for (const [N, K, G] of [[3072, 2048, 128], [2048, 8192, 128], [8192, 2048, 128], [1000, 2048, 256], [2304, 768, 128], [128256, 2048, 128], [77, 512, 128]] as const) {
      for (const gate of [undefined, { activation: 'silu' as const, bias: false }]) {
        const { spec, grid } = stream.planStreamInt4('bf16', M, N, K, G, 'none', gate, 132, EIGHT);
        const [tiles, splits] = grid, chunks = K / 256;
        assert.deepEqual([spec.warps, spec.featureTiles, spec.chunkK, spec.int4], [8, 1, 256, { groupSize: G }]);
        assert.equal(spec.rowTiles, Math.ceil(M / 8));
        assert.ok(tiles * 128 >= N && (tiles - 1) * 128 < N, `${tiles} tiles cover N = ${N} once`);
        assert.ok(splits >= 1 && splits <= 8 && splits <= chunks, `${splits} splits of ${chunks} chunks`);
        assert.ok(splits === 1 || tiles * splits <= 132, 'a split grid keeps one block an SM');
        assert.ok(spec.stages >= 2 && (spec.stages === 2 || spec.stages <= Math.ceil(chunks / splits)), `${spec.stages} stages`);
        assert.ok(stream.streamSharedBytes(spec) <= 227 * 1024);
        const weightRows = gate ? 256 : 128;
        assert.equal(stream.streamTmaBytes(spec), (weightRows + 4 * 8 * spec.rowTiles) * 128, 'one 128-byte box a weight row, four x boxes');
        assert.equal(stream.streamStageBytes(spec), stream.streamTmaBytes(spec) + 16 * weightRows, 'and the scales tail: 16 bytes a weight row');
        assert.equal(stream.streamStageBytes(spec) % 1024, 0, 'stages stay 1024-byte aligned (the 128-byte swizzle)');
      }
    }
  }
  assert.deepEqual(stream.planStreamInt4('bf16', 32, 8192, 2048, 128, 'none', { activation: 'silu', bias: false }, 132, EIGHT).grid, [64, 2], "Llama 1.2B's gate/up: 64 tiles in 2 splits");
  assert.deepEqual(stream.planStreamInt4('bf16', 32, 2048, 8192, 128, 'none', undefined, 132, EIGHT).grid, [16, 8], 'its down: 16 tiles in 8 splits');
  // The default shape, 4 warps of one feature tile: 64-feature tiles.
  const gateUp = stream.planStreamInt4('bf16', 32, 8192, 2048, 128, 'none', { activation: 'silu', bias: false }, 132);
  assert.deepEqual([gateUp.spec.warps, gateUp.spec.featureTiles, ...gateUp.grid], [4, 1, 128, 1], "the default: Llama 1.2B's gate/up in 128 tiles, K whole");
  assert.throws(() => stream.planStreamInt4('bf16', 33, 2048, 2048, 128, 'none', undefined, 132), /33 rows: the INT4 form takes 1\.\.32/);
  // A forced shape (FUSEFORMER_INT4_TMA_SHAPE, for sweeps): BN = warps · 16 · feature tiles.
  const four = stream.planStreamInt4('bf16', 32, 3072, 2048, 128, 'none', undefined, 132, stream.streamInt4Shape('4,2'));
  assert.deepEqual([four.spec.warps, four.spec.featureTiles, four.grid[0]], [4, 2, 24]);
  assert.deepEqual(stream.streamInt4Shape(undefined), { warps: 4, featureTiles: 1 });
  assert.deepEqual(stream.streamInt4Shape(' 8,2 '), { warps: 8, featureTiles: 2 });
  assert.throws(() => stream.streamInt4Shape('16,1'), /FUSEFORMER_INT4_TMA_SHAPE must be warps,featureTiles .*got '16,1'/);
  assert.throws(() => stream.planStreamInt4('bf16', 8, 2048, 2112, 64, 'none', undefined, 132), /K = 2112 must be a multiple of 256 and the groups \(64\) multiples of 128/);
});

test('int4StreamEpilogue / streamInt4Applies: 16-bit x of 1–32 rows with tensor maps, K a multiple of 256, groups of a multiple of 128, an epilogue the kernel has', () => {
  assert.equal(stream.int4StreamEpilogue(false, 'none'), 'none');
  assert.equal(stream.int4StreamEpilogue(true, 'none'), 'bias');
  assert.equal(stream.int4StreamEpilogue(true, 'relu'), 'relu_bias');
  assert.equal(stream.int4StreamEpilogue(true, 'gelu_tanh'), 'gelu_bias');
  for (const [bias, act] of [[false, 'relu'], [true, 'gelu'], [true, 'silu'], [false, 'gelu_tanh']] as const) assert.equal(stream.int4StreamEpilogue(bias, act), null, `${act}${bias ? ' + bias' : ''}`);
  const hopper = { tensorMaps: true };
  assert.ok(stream.streamInt4Applies(hopper, 'bf16', 32, 2048, 128, false, false, 'none'));
  assert.ok(stream.streamInt4Applies(hopper, 'f16', 5, 768, 256, true, false, 'silu'));
  assert.ok(stream.streamInt4Applies(hopper, 'bf16', 1, 2048, 128, false, false, 'none'));
  for (const [why, ok] of [
    ['no tensor maps', stream.streamInt4Applies({ tensorMaps: false }, 'bf16', 32, 2048, 128, false, false, 'none')],
    ['f32', stream.streamInt4Applies(hopper, 'f32', 32, 2048, 128, false, false, 'none')],
    ['0 rows', stream.streamInt4Applies(hopper, 'bf16', 0, 2048, 128, false, false, 'none')],
    ['33 rows', stream.streamInt4Applies(hopper, 'bf16', 33, 2048, 128, false, false, 'none')],
    ['K 640', stream.streamInt4Applies(hopper, 'bf16', 32, 640, 128, false, false, 'none')],
    ['groups of 64', stream.streamInt4Applies(hopper, 'bf16', 32, 2048, 64, false, false, 'none')],
    ['groups of 384 at K 2048', stream.streamInt4Applies(hopper, 'bf16', 32, 2048, 384, false, false, 'none')],
    ['SiLU without a gate', stream.streamInt4Applies(hopper, 'bf16', 32, 2048, 128, false, true, 'silu')],
  ] as const) assert.equal(ok, false, why);
});

test('int4Linear: path \'tma\' or the routing options (by default the gated product at 5–32 rows) take the INT4 streamed GEMM where it applies; a forced call it cannot take is refused with the reason', () => {
  const hopper = new RecordingHost('sm_90');
  // The default routing (session 32's measurements): the gated product from 17 rows, projections of ≥ 3072
  // features and K ≤ 2048 from 9 rows; narrower or longer projections keep the mma GEMV.
  const gatedArgs = (M: number) => ({ ...int4Args(M, 2048, 2 * 8192, 128), out: deviceTensor([M, 8192], 'bf16'), gated: true, activation: 'silu' as const });
  assert.match(last(hopper, int4Args(32, 2048, 3072, 128)).key, /^gemm_stream\.bf16\.nt4\.w4\.ft1\..*\.none\.int4_g128$/, 'a wide projection at 32 rows takes it');
  assert.match(last(hopper, int4Args(9, 2048, 3072, 128)).key, /^gemm_stream\./, 'from 9 rows');
  assert.match(last(hopper, int4Args(8, 2048, 3072, 128)).key, /^int4_gemv_mma\./, 'not at 8 rows');
  assert.match(last(hopper, int4Args(32, 2048, 2048, 128)).key, /^int4_gemv_mma\./, 'a narrow projection keeps the mma GEMV');
  assert.match(last(hopper, int4Args(32, 8192, 3072, 128)).key, /^int4_gemv_mma\./, 'a long K keeps the mma GEMV');
  assert.match(last(hopper, gatedArgs(32)).key, /^gemm_stream\.bf16\.nt4\.w4\.ft1\..*\.gated_silu\.int4_g128$/, 'the gated product at 32 rows takes it');
  assert.match(last(hopper, gatedArgs(17)).key, /^gemm_stream\./, 'from 17 rows');
  assert.match(last(hopper, gatedArgs(16)).key, /^int4_gemv_mma\./, 'not at 16 rows');
  assert.match(last(hopper, int4Args(32, 2048, 3072, 128), 'tma').key, /^gemm_stream\.bf16\.nt4\.w4\.ft1\.kc256\..*\.none\.int4_g128$/);
  assert.deepEqual(q4.int4TmaOptionsFromEnv({}), { enabled: true, minRows: 'auto', gatedOnly: 'auto' });
  assert.deepEqual(q4.int4TmaOptionsFromEnv({ FUSEFORMER_INT4_TMA: '0', FUSEFORMER_INT4_TMA_GATED_ONLY: '0' }), { enabled: false, minRows: 'auto', gatedOnly: false });
  assert.deepEqual(q4.int4TmaOptionsFromEnv({ FUSEFORMER_INT4_TMA: '1', FUSEFORMER_INT4_TMA_MIN_ROWS: '1', FUSEFORMER_INT4_TMA_GATED_ONLY: '1' }), { enabled: true, minRows: 1, gatedOnly: true });
  assert.throws(() => q4.int4TmaOptionsFromEnv({ FUSEFORMER_INT4_TMA: 'on' }), /FUSEFORMER_INT4_TMA must be 0 or 1, got 'on'/);
  assert.throws(() => q4.int4TmaOptionsFromEnv({ FUSEFORMER_INT4_TMA_GATED_ONLY: 'yes' }), /FUSEFORMER_INT4_TMA_GATED_ONLY must be 0 or 1, got 'yes'/);
  for (const rows of ['0', '33', '2.5', 'four']) {
    assert.throws(() => q4.int4TmaOptionsFromEnv({ FUSEFORMER_INT4_TMA_MIN_ROWS: rows }), new RegExp(`FUSEFORMER_INT4_TMA_MIN_ROWS must be an integer from 1 to 32, got '${rows.replace('.', '\\.')}'`));
  }
  assert.deepEqual([q4.INT4_TMA_DEFAULT_MIN_ROWS, q4.INT4_TMA_MAX_ROWS], [stream.STREAM_MIN_ROWS, stream.STREAM_ROUTED_MAX_ROWS], 'the routing\'s rows are the 16-bit form\'s');
  const on = { enabled: true, minRows: 5, gatedOnly: false } as const;
  assert.equal(q4.int4TmaRoutes(5, false, 2048, 2048, on), true);
  assert.equal(q4.int4TmaRoutes(4, true, 2048, 2048, on), false, 'below minRows');
  assert.equal(q4.int4TmaRoutes(1, false, 2048, 2048, { ...on, minRows: 1 }), true);
  assert.equal(q4.int4TmaRoutes(32, false, 3072, 2048, { ...on, gatedOnly: true }), false, 'gated only');
  assert.equal(q4.int4TmaRoutes(32, true, 2048, 2048, { ...on, gatedOnly: true }), true);
  assert.equal(q4.int4TmaRoutes(32, true, 2048, 2048, { ...on, enabled: false }), false, 'off');
  const auto = { enabled: true, minRows: 'auto', gatedOnly: 'auto' } as const;
  assert.equal(q4.int4TmaRoutes(9, false, 50257, 768, auto), true, 'GPT-2\'s LM head');
  assert.equal(q4.int4TmaRoutes(9, false, 2304, 768, auto), false, 'GPT-2\'s QKV: under 3072 features');
  assert.equal(q4.int4TmaRoutes(8, true, 16384, 2048, { ...auto, minRows: 8 }), true, 'a set floor holds for the gated product');
  const saved = { ...q4.int4TmaOptions };
  Object.assign(q4.int4TmaOptions, { enabled: true, minRows: 5, gatedOnly: false });
  try {
    assert.match(last(hopper, int4Args(17, 8192, 2048, 128)).key, /^gemm_stream\.bf16\.nt3\..*\.k4\.none\.int4_g128$/);
    const gated = last(hopper, { ...int4Args(32, 2048, 2 * 8192, 128), out: deviceTensor([32, 8192], 'bf16'), gated: true, activation: 'silu', bias: deviceTensor([16384], 'bf16') });
    assert.match(gated.key, /^gemm_stream\.bf16\.nt4\.w4\.ft1\.kc256\.s\d\.gated_silu_bias\.int4_g128$/);
    assert.match(last(hopper, { ...int4Args(8, 768, 2304, 128, 'f16'), bias: deviceTensor([2304], 'f16'), activation: 'gelu_tanh' }).key, /\.gelu_bias\.int4_g128$/);
    assert.match(last(hopper, int4Args(4, 2048, 3072, 128)).key, /^int4_gemv_mma\./, '4 rows: the GEMV\'s');
    assert.match(last(hopper, { ...int4Args(32, 2048, 3072, 128), activation: 'silu' }).key, /^int4_gemv_mma\./, 'SiLU without a gate');
    assert.match(last(new RecordingHost(), int4Args(32, 2048, 3072, 128)).key, /^int4_gemv_mma\./, 'no tensor maps');
    q4.int4TmaOptions.minRows = 1;
    assert.match(last(hopper, int4Args(1, 2048, 3072, 128)).key, /^gemm_stream\.bf16\.nt1\.w4\.ft1\.kc256\..*\.none\.int4_g128$/, 'one row from minRows 1');
    q4.int4TmaOptions.gatedOnly = true;
    assert.match(last(hopper, int4Args(32, 2048, 3072, 128)).key, /^int4_gemv_mma\./, 'gated only: not the projections');
    assert.match(last(hopper, { ...int4Args(32, 2048, 2 * 8192, 128), out: deviceTensor([32, 8192], 'bf16'), gated: true, activation: 'silu' }).key, /^gemm_stream\..*\.gated_silu\.int4_g128$/, 'gated only: the gated product');
  } finally {
    Object.assign(q4.int4TmaOptions, saved);
  }
  assert.throws(() => q4.int4Linear(hopper, int4Args(32, 2048, 3072, 64), 'tma'), /the INT4 streamed GEMM takes 1–32 rows .*got 32 rows of bf16, K 2048, groups of 64, no bias and activation none/);
});

test('launchStreamInt4: the packed weights as [rows, K/4] 16-bit columns in boxes of 64 × 128 rows, x as the 16-bit form\'s, then bias, out, M, N, K, scales, zeros', () => {
  const host = new RecordingHost('sm_90');
  const a = { x: 0x1000n, qweight: 0x2000n, scales: 0x3000n, zeros: 0x4000n, bias: 0n, out: 0x5000n, M: 32, N: 8192, K: 2048 };
  const plan = stream.planStreamInt4('bf16', 32, 8192, 2048, 128, 'none', { activation: 'silu', bias: false }, 132, EIGHT);
  stream.launchStreamInt4(host, plan, a);
  const l = host.launches.at(-1)!;
  assert.deepEqual(l.config.grid, [64, 2]);
  assert.equal(l.config.block, 9 * 32);
  assert.equal(l.config.sharedBytes, stream.streamSharedBytes(plan.spec));
  assert.deepEqual(tensorMapArg(l, 0), { address: 0x2000n, dtype: 'bf16', cols: 512, rows: 16384, rowStrideBytes: 1024, boxCols: 64, boxRows: 128 });
  assert.deepEqual([tensorMapArg(l, 1).rows, tensorMapArg(l, 1).cols, tensorMapArg(l, 1).boxRows], [32, 2048, 32]);
  assert.deepEqual([argValue(l, 3, 'ptr'), argValue(l, 4, 'i32'), argValue(l, 5, 'i32'), argValue(l, 6, 'i32'), argValue(l, 7, 'ptr'), argValue(l, 8, 'ptr')], [0x5000n, 32, 8192, 2048, 0x3000n, 0x4000n]);
  assert.throws(() => stream.launchStreamInt4(host, stream.planStreamGemm('bf16', 32, 2048, 2048, 'none', undefined, 132), a), /is not an INT4 plan/);
  assert.throws(() => stream.launchStreamPlan(host, plan, { x: 0n, w: 0n, bias: 0n, out: 0n, M: 32, N: 8192, K: 2048 }), /is an INT4 plan \(launchStreamInt4\)/);
});

test('the INT4 source: one weight box a stage, four x boxes after the weight rows, the scales and zeros in a tail the producer warp writes, exact (q − z) pairs into mma.sync', () => {
  const plan = stream.planStreamInt4('bf16', 17, 2048, 8192, 128, 'bias', undefined, 132, EIGHT);
  const { source } = stream.streamGemmSource(plan.spec);
  assert.equal(source.split('tma_load_2d_weight(dst, &wmap').length - 1, 1, 'one weight box a stage (not gated)');
  assert.match(source, /tma_load_2d\(dst \+ \(WROWS \+ kb \* XROWS\) \* 128, &xmap/);
  assert.match(source, /mbar_init_count\(&full\[s\], 33\)/, 'the full barrier: lane 0\'s expect_tx and the 32 lanes\' tails');
  assert.match(source, /tail_zeros\[e\] = minus_zero_pair\(zeros\[gi\]\);\s+\}\s+mbar_arrive\(&full\[stage\]\);/, 'each lane arrives once its part of the tail is written');
  const start = source.indexOf('const auto copy_scales'), producer = source.slice(start, source.indexOf('} else {', start));
  assert.ok(start > 0 && producer.length > 0);
  assert.ok(producer.indexOf('copy_scales(i, c_begin + i)') < producer.indexOf('GRID_DEPENDENCY_WAIT_ONE()'), 'the first stages\' scales before the grid-dependency wait');
  assert.ok(producer.indexOf('mbar_wait(&empty[s]') < producer.indexOf('__syncwarp();  // every consumer is done with stage s'), 'a refilled tail only after the stage is free');
  assert.match(source, /sc\[ti\]\[h\] = tail_scales\[h2 \* WROWS \+ tile_row\(ti\) \+ g \+ 8 \* h\]/);
  assert.match(source, /weight_fragment\(af, w0, w1, p, mz\[ti\]\[0\], mz\[ti\]\[1\]\)/);
  assert.match(source, /acc\[i\]\[j\]\[q\] = fmaf\(sc\[i\]\[q >> 1\], cf\[i\]\[j\]\[q\], acc\[i\]\[j\]\[q\]\)/);
  assert.match(source, /__cluster_dims__\(1, 8, 1\)/, 'the down product splits K 8 ways in a cluster');
  for (const [why, spec] of [
    ['chunkK 128', { ...plan.spec, chunkK: 128 as const }],
    ['groups of 64', { ...plan.spec, int4: { groupSize: 64 } }],
    ['5 row tiles', { ...plan.spec, rowTiles: 5 }],
    ['accumulate', { ...plan.spec, accumulate: true }],
  ] as const) assert.throws(() => stream.streamGemmSource(spec), RangeError, why);
});
