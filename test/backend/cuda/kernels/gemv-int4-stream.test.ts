// The streaming INT4 GEMV (kernels/gemv-int4-stream.ts) without a GPU: which int4Linear calls take it,
// its plan (column pieces, ring stages within shared memory, one block per SM), the launch arguments,
// and the stage layout the producer and the consumers must agree on.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as q4 from '../../../../src/backend/cuda/kernels/quant-int4.js';
import * as st from '../../../../src/backend/cuda/kernels/gemv-int4-stream.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

function int4Args(M: number, K: number, N: number, G: number, dtype: 'bf16' | 'f16' | 'f32' = 'bf16') {
  return {
    x: deviceTensor([M, K], dtype), qweight: deviceTensor([N, K / 8], 'i32'), scales: deviceTensor([N, K / G], 'f16'),
    zeros: deviceTensor([N, K / G], 'u8'), groupSize: G, out: deviceTensor([M, N], dtype),
  };
}

const first = (host: RecordingHost, args: Parameters<typeof q4.int4Linear>[1]) => {
  q4.int4Linear(host, args);
  return host.launches.at(-1)!;
};

test('with FUSEFORMER_INT4_STREAM=1, int4Linear takes the streaming GEMV for 1–8 rows on sm_90, the tensor-core GEMV otherwise', () => {
  const hopper = new RecordingHost('sm_90');
  assert.match(first(hopper, int4Args(1, 2048, 3072, 128)).key, /^int4_gemv_mma\./, 'opt-in: off by default');
  q4.int4Linear(hopper, int4Args(1, 2048, 3072, 128), 'stream');
  assert.match(hopper.launches.at(-1)!.key, /^int4_gemv_stream\./, 'a forced path needs no switch');
  process.env['FUSEFORMER_INT4_STREAM'] = '1';
  try {
    routing(hopper);
  } finally {
    delete process.env['FUSEFORMER_INT4_STREAM'];
  }
});

function routing(hopper: RecordingHost): void {
  assert.match(first(hopper, int4Args(1, 2048, 3072, 128)).key, /^int4_gemv_stream\.bf16\.k2048\.g128\.cw8\.ts1\.none$/);
  assert.match(first(hopper, int4Args(4, 8192, 2048, 128, 'f16')).key, /^int4_gemv_stream\.f16\.k8192\.g128\.cw8\.ts1\.none$/);
  assert.match(first(hopper, int4Args(8, 8192, 2048, 128)).key, /^int4_gemv_mma\./, '8 rows of x at K 8192 leave no room for two stages');
  assert.match(first(hopper, int4Args(9, 2048, 2048, 128)).key, /^int4_gemv_mma\./, 'more than 8 rows (a narrow product: the streamed GEMM does not take it)');
  assert.match(first(hopper, int4Args(1, 2048, 3000 + 4, 128)).key, /^int4_gemv_mma\./, 'N not whole tiles of 16');
  assert.match(first(hopper, { ...int4Args(1, 2048, 2 * 8192, 128), out: deviceTensor([1, 8192], 'bf16'), gated: true, activation: 'silu' }).key, /^int4_gemv_mma\..*\.gated$/);
  assert.match(first(hopper, int4Args(1, 2048, 3072, 64)).key, /^int4_gemv\./, 'groups of 64 keep the SIMT GEMV');
  assert.match(first(hopper, int4Args(1, 2048, 3072, 128, 'f32')).key, /^int4_gemv\.f32\./);
  assert.match(first(new RecordingHost('sm_80'), int4Args(1, 2048, 3072, 128)).key, /^int4_gemv_mma\./, 'no bulk copies before sm_90');
  assert.match(first(new RecordingHost(), int4Args(1, 2048, 3072, 128)).key, /^int4_gemv_mma\./);
  // Scales or zeros off 16-byte alignment (an offset view) cannot be copied in one piece.
  const offset = { ...int4Args(1, 2048, 3072, 128), zeros: deviceTensor([3072, 16], 'u8', 0x5000_0008n) };
  assert.match(first(hopper, offset).key, /^int4_gemv_mma\./);
  assert.throws(() => q4.int4Linear(hopper, offset, 'stream'), /^FuseformerError|int4Linear: the streaming GEMV takes 1–8 rows .*16-byte aligned scales and zeros/);
}

test('the launch: one block per SM at most, a producer warp beside the consumers, x … out, M, N, stages', (t) => {
  const host = new RecordingHost('sm_90');
  process.env['FUSEFORMER_INT4_STREAM'] = '1';
  t.after(() => { delete process.env['FUSEFORMER_INT4_STREAM']; });
  const gateUp = first(host, { ...int4Args(1, 2048, 16384, 128), bias: deviceTensor([16384], 'bf16'), activation: 'gelu_tanh' });
  assert.equal(gateUp.key, 'int4_gemv_stream.bf16.k2048.g128.cw8.ts2.bias.gelu_tanh', '512 stages of 2 tiles: two or more a block');
  assert.deepEqual(gateUp.config.grid, 132);
  assert.equal(gateUp.config.block, 9 * 32);
  assert.equal(gateUp.gridDependencyWait, true);
  assert.equal(argValue(gateUp, 6, 'i32'), 1);
  assert.equal(argValue(gateUp, 7, 'i32'), 16384);
  const slots = argValue(gateUp, 8, 'i32');
  assert.equal(slots, 4, 'a block\'s 512/132 → 4 stages all in flight at once');
  assert.ok(gateUp.config.sharedBytes! <= host.maxSharedBytesPerBlock);
  assert.ok(gateUp.config.sharedBytes! >= slots * st.int4StreamStageBytes(2048, 128, 2) + 2048 * 2);

  const down = first(host, int4Args(1, 8192, 2048, 128));
  assert.equal(down.key, 'int4_gemv_stream.bf16.k8192.g128.cw8.ts1.none');
  assert.deepEqual(down.config.grid, 128, 'one tile a block: 128 tiles');
  assert.equal(argValue(down, 8, 'i32'), 2, 'at least two stages even with one tile');

  const head = first(host, int4Args(1, 2048, 128256, 128));
  assert.equal(head.key, 'int4_gemv_stream.bf16.k2048.g128.cw8.ts4.none');
  const headSlots = argValue(head, 8, 'i32');
  assert.equal(headSlots, 3, 'the LM head streams through 3 stages of 64 KB');
  assert.ok(head.config.sharedBytes! <= host.maxSharedBytesPerBlock);
  // N a multiple of 16 but not of 32: stages of one tile.
  assert.match(first(host, int4Args(1, 2048, 16 * 1001, 128)).key, /\.ts1\./);
});

test('the plan: stages of 1–4 tiles that fit twice beside x and still give every SM two', () => {
  const plan = (M: number, N: number, K: number, G: number) => st.planInt4StreamGemv('bf16', M, N, K, G, false, 'none', 132, 227 * 1024);
  assert.equal(plan(1, 3072, 2048, 128).spec.tilesPerStage, 1);
  assert.equal(plan(1, 128256, 2048, 128).spec.tilesPerStage, 4);
  assert.equal(plan(1, 128256, 8192, 128).spec.tilesPerStage, 1, 'two stages of 4 tiles at K 8192 do not fit');
  for (const [M, N, K, G] of [[1, 16384, 2048, 128], [4, 2048, 8192, 128], [8, 128256, 2048, 256], [3, 2304, 768, 128]] as const) {
    const p = plan(M, N, K, G);
    assert.ok(p.slots >= 2 && p.sharedBytes <= 227 * 1024, `M=${M} N=${N} K=${K}: ${p.slots} stages in ${p.sharedBytes} B`);
    assert.equal(p.grid, Math.min(N / (16 * p.spec.tilesPerStage), 132));
  }
  // Two stages of 16 rows of all of K must fit beside x: K 11008 does, 14336 not.
  const hopper = { arch: 'sm_90', maxSharedBytesPerBlock: 227 * 1024 };
  assert.equal(st.int4StreamGemvApplies(hopper, 'bf16', 1, 4096, 11008, 128, false), true);
  assert.equal(st.int4StreamGemvApplies(hopper, 'bf16', 1, 4096, 14336, 128, false), false);
  assert.equal(st.int4StreamGemvApplies({ ...hopper, arch: 'sm_100' }, 'bf16', 1, 4096, 2048, 128, false), true);
});

test('a stage is three bulk copies (weights, scales, zeros) of whole rows, 128-byte aligned in the ring', () => {
  for (const K of [768, 1024, 2048, 8192]) {
    for (const G of [128, 256].filter((g) => K % g === 0)) {
      for (const ts of [1, 2, 4]) {
        const stage = st.int4StreamStageBytes(K, G, ts);
        assert.equal(stage % 128, 0);
        assert.ok(stage >= 16 * ts * (K / 2 + (K / G) * 3) && stage < 16 * ts * (K / 2 + (K / G) * 3) + 128);
      }
    }
  }
  const src = st.int4StreamGemvSource({ dtype: 'bf16', K: 2048, groupSize: 128, consumerWarps: 16, tilesPerStage: 2, bias: false, activation: 'none' }).source;
  assert.match(src, /constexpr int WEIGHT_BYTES = 32768;/);
  assert.match(src, /constexpr int SCALE_BYTES = 1024;/);
  assert.match(src, /constexpr int ZERO_BYTES = 512;/);
  assert.equal(src.match(/bulk_copy\(stage/g)?.length, 3);
  assert.match(src, /__launch_bounds__\(\(CW \+ 1\) \* 32, 1\)/);
  assert.throws(() => st.int4StreamGemvSource({ dtype: 'bf16', K: 384, groupSize: 256, consumerWarps: 8, tilesPerStage: 1, bias: false, activation: 'none' }), /G dividing K/);
});
