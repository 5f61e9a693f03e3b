// The decode-step kernels' launchers without a GPU: specs, grids and arguments recorded by a fake host,
// and the argument checks they share with the CPU backend.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as attention from '../../../../src/backend/cuda/kernels/decode-attention.js';
import * as embed from '../../../../src/backend/cuda/kernels/embed-tokens.js';
import * as gated from '../../../../src/backend/cuda/kernels/gated-activation.js';
import * as qkv from '../../../../src/backend/cuda/kernels/qkv-rope-append.js';
import * as norm from '../../../../src/backend/cuda/kernels/residual-norm.js';
import * as sampling from '../../../../src/backend/cuda/kernels/sample-tokens.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

const rejects = (fn: () => void, pattern: RegExp): void => {
  assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
};

test('decodeAttention: a block per (kv head, head block, sequence, split); split blocks combine through zeroed counters, one launch', () => {
  const host = new RecordingHost();
  const args = (B: number, Hq: number, Hkv: number, d: number, maxLen: number) => ({
    q: deviceTensor([B, Hq, d], 'bf16'), kCache: deviceTensor([B, Hkv, maxLen, d], 'bf16'), vCache: deviceTensor([B, Hkv, maxLen, d], 'bf16'),
    positions: deviceTensor([B], 'i32'), out: deviceTensor([B, Hq, d], 'bf16'),
  });
  attention.decodeAttention(host, args(2, 32, 8, 64, 160));
  assert.equal(host.launches.length, 1);
  // d 64 bf16: rows of 128 bytes take the pipelined variant (its staged tiles in dynamic shared memory), on tensor cores.
  assert.equal(host.launches[0]!.key, 'decode_attention.bf16.d64.g4.gh4.v8.pipelined.mma');
  assert.equal(host.launches[0]!.config.sharedBytes, attention.PIPELINED_STAGE_BYTES);
  assert.deepEqual(host.launches[0]!.config.grid, [8, 2, 1]);
  assert.ok(Math.abs((argValue(host.launches[0]!, 6, 'f32') as number) - Math.LOG2E / 8) < 1e-12);
  attention.decodeAttention(host, { ...args(1, 32, 8, 64, 2048), partials: deviceTensor([1, 32, 8, 66], 'f32') });
  assert.equal(host.launches.length, 2, 'no separate combine kernel');
  const split = host.launches[1]!;
  assert.equal(split.key, 'decode_attention.bf16.d64.g4.gh4.v8.split.pipelined.mma');
  assert.deepEqual(split.config.grid, [8, 1, 8]);
  // The fewest keys a split takes; each sequence's chunk is max(that, ⌈n / splits⌉), on the device.
  assert.equal(argValue(split, 9, 'i32'), attention.MIN_SPLIT_KEYS);
  assert.deepEqual([attention.splitChunk(2048, 8), attention.splitChunk(300, 8), attention.splitChunk(10, 8)], [256, 64, 64]);
  // One counter per (sequence, head block); the unsplit launch asked for none.
  assert.deepEqual(host.counterRequests, [8]);
  assert.equal(argValue(split, 12, 'ptr'), RecordingHost.COUNTERS);
  // Multi-query with a group of 32: blocks of 8 query heads; 256-byte rows on tensor cores in 16-key warp tiles (64 KiB).
  attention.decodeAttention(host, args(1, 32, 1, 128, 64));
  assert.equal(host.launches.at(-1)!.key, 'decode_attention.bf16.d128.g32.gh8.v8.pipelined.mma_t16s2b0');
  assert.deepEqual(host.launches.at(-1)!.config.grid, [4, 1, 1]);
  assert.equal(host.launches.at(-1)!.config.sharedBytes, 64 * 1024);
  assert.equal(attention.headsPerBlock(12), 6);
  rejects(() => attention.decodeAttention(host, { ...args(1, 4, 4, 512, 8), q: deviceTensor([1, 4, 512], 'bf16'), out: deviceTensor([1, 4, 512], 'bf16') }), /^decodeAttention: head size 512 is larger/);
  rejects(() => attention.decodeAttention(host, { ...args(1, 6, 4, 64, 8) }), /^decodeAttention: the query heads Hq = 6 must be a positive multiple/);
});

test('sampleTokens: blocks per sequence by vocabulary (two vectors a thread), 16-byte vectors when the pitch allows, threads by vocabulary', () => {
  const host = new RecordingHost();
  const args = (B: number, Vp: number, dtype: 'bf16' | 'f32', classes: number) => ({
    logits: deviceTensor([B, Vp], dtype), classes, params: deviceTensor([B, 4], 'f32'), seeds: deviceTensor([B, 2], 'i32'),
    positions: deviceTensor([B], 'i32'), history: deviceTensor([B, 64], 'i32'), tokens: deviceTensor([B], 'i32'), finished: deviceTensor([B], 'i32'),
    limits: deviceTensor([B], 'i32'), stopIds: deviceTensor([4], 'i32'),
  });
  sampling.sampleTokens(host, args(32, 50304, 'bf16', 50257));
  sampling.sampleTokens(host, args(2, 1003, 'f32', 1003));
  sampling.sampleTokens(host, args(3, 300, 'f32', 300));
  // 50257 classes in 6283 vectors of 8: 4 blocks of 1024 threads a row; 1003 in vectors of 1: 2 of 256; 300 in vectors of 4: 1.
  assert.deepEqual(host.launches.map((l) => l.key), ['sample_tokens.bf16.v50257.vec8.t1024.s4', 'sample_tokens.f32.v1003.vec1.t256.s2', 'sample_tokens.f32.v300.vec4.t256.s1']);
  assert.deepEqual(host.launches.map((l) => l.config.grid), [[4, 32], [2, 2], [1, 3]]);
  assert.equal(argValue(host.launches[0]!, 1, 'i32'), 50304);
  assert.equal(argValue(host.launches[0]!, 11, 'i32'), 4);
  // Split rows reduce through partials in scratch and a zeroed counter per row; an unsplit row needs neither.
  assert.deepEqual(host.counterRequests, [32, 2]);
  assert.deepEqual(host.scratchRequests, [32 * 4 * 8, 2 * 2 * 8]);
  // FUSEFORMER_SAMPLE_WAVE: at most one wave of blocks (one 1024-thread block an SM): Llama's 128k at 32 rows 8 → 4 splits.
  assert.equal(sampling.sampleTokensSplits(128256, 8, 1024), 8);
  assert.equal(sampling.sampleTokensSplits(128256, 8, 1024, { rows: 1, multiProcessorCount: 132 }), 8, 'one row keeps the vocabulary\'s splits');
  assert.equal(sampling.sampleTokensSplits(128256, 8, 1024, { rows: 32, multiProcessorCount: 132 }), 4);
  assert.equal(sampling.sampleTokensSplits(128256, 8, 1024, { rows: 200, multiProcessorCount: 132 }), 1);
  assert.equal(sampling.sampleTokensSplits(1003, 1, 256, { rows: 200, multiProcessorCount: 132 }), 2, '256-thread blocks: four an SM');
  const saved = sampling.sampleTokensWave.enabled;
  try {
    sampling.sampleTokensWave.enabled = true;
    sampling.sampleTokens(host, args(32, 128256, 'bf16', 128256));
    assert.deepEqual([host.launches.at(-1)!.key, host.launches.at(-1)!.config.grid], ['sample_tokens.bf16.v128256.vec8.t1024.s4', [4, 32]]);
  } finally {
    sampling.sampleTokensWave.enabled = saved;
  }
  rejects(() => sampling.sampleTokens(host, args(1, 300000, 'bf16', 300000)), /^sampleTokens: a vocabulary of 300000 classes is larger/);
  rejects(() => sampling.sampleTokens(host, args(1, 64, 'bf16', 65)), /^sampleTokens: 'classes' must be an integer in \[1, 64\]/);
});

test('sampleTokens on a Hopper: a large vocabulary\'s rows in thread-block clusters of 8 × 512 threads (4 for many rows of GPT-2\'s; no partials or counters), small ones as before; FUSEFORMER_SAMPLE_CLUSTER=0 turns it off', () => {
  const host = new RecordingHost('sm_90');
  const args = (B: number, Vp: number, dtype: 'bf16' | 'f32', classes: number, argmax = false) => ({
    logits: deviceTensor([B, Vp], dtype), classes, params: deviceTensor([B, 4], 'f32'), seeds: deviceTensor([B, 2], 'i32'),
    positions: deviceTensor([B], 'i32'), history: deviceTensor([B, 64], 'i32'), tokens: deviceTensor([B], 'i32'), finished: deviceTensor([B], 'i32'),
    limits: deviceTensor([B], 'i32'), stopIds: deviceTensor([4], 'i32'), ...(argmax ? { argmax: deviceTensor([B, 2], 'i32') } : {}),
  });
  sampling.sampleTokens(host, args(16, 50304, 'bf16', 50257));
  sampling.sampleTokens(host, args(1, 128256, 'bf16', 128256, true));
  sampling.sampleTokens(host, args(2, 1003, 'f32', 1003));
  assert.deepEqual(host.launches.map((l) => l.key), ['sample_tokens_cluster.bf16.v50257.vec8.t512.c8', 'sample_tokens_cluster.bf16.v128256.vec8.t512.c8.argmax', 'sample_tokens.f32.v1003.vec1.t256.s2']);
  assert.deepEqual(host.launches.map((l) => [l.config.grid, l.config.block]), [[[8, 16], 512], [[8, 1], 512], [[2, 2], 256]]);
  assert.match(host.launches[0]!.source, /__cluster_dims__\(SPLITS, 1, 1\)/);
  assert.match(host.launches[0]!.source, /constexpr int SPLITS = 8;/);
  assert.equal(host.launches[0]!.args.length, 12, 'the row\'s arguments, no partials or counters');
  assert.equal(host.launches[1]!.args.length, 13, 'and the packed picks');
  assert.deepEqual([host.scratchRequests, host.counterRequests], [[2 * 2 * 8], [2]], 'only the small vocabulary\'s split rows');
  // 32 rows of GPT-2's vocabulary: 8 blocks a row would pass the SMs with under 3 vectors a thread — clusters of 4.
  sampling.sampleTokens(host, args(32, 50304, 'bf16', 50257));
  assert.equal(host.launches.at(-1)!.key, 'sample_tokens_cluster.bf16.v50257.vec8.t512.c4');
  assert.deepEqual(host.launches.at(-1)!.config.grid, [4, 32]);
  assert.match(host.launches.at(-1)!.source, /constexpr int SPLITS = 4;/);
  assert.equal(sampling.sampleTokensClusterOption.enabled, true);
  try {
    sampling.sampleTokensClusterOption.enabled = false;
    sampling.sampleTokens(host, args(32, 50304, 'bf16', 50257));
    assert.equal(host.launches.at(-1)!.key, 'sample_tokens.bf16.v50257.vec8.t1024.s4');
  } finally {
    sampling.sampleTokensClusterOption.enabled = true;
  }
  // A host without clusters (pre-Hopper, the kernel emulator) never gets one.
  const plain = new RecordingHost();
  sampling.sampleTokens(plain, args(32, 50304, 'bf16', 50257));
  assert.equal(plain.launches[0]!.key, 'sample_tokens.bf16.v50257.vec8.t1024.s4');
});

test('tokenProbabilities: one block per row with sampleTokens\' threads, the whole row a block (no splits, no scratch), waits for its inputs itself', () => {
  const host = new RecordingHost();
  const args = (R: number, Vp: number, dtype: 'bf16' | 'f32', classes: number) => ({
    logits: deviceTensor([R, Vp], dtype), classes, params: deviceTensor([R, 4], 'f32'), tokens: deviceTensor([R], 'i32'), out: deviceTensor([R], 'f32'),
  });
  sampling.tokenProbabilities(host, args(9, 50304, 'bf16', 50257));
  sampling.tokenProbabilities(host, args(2, 1003, 'f32', 1003));
  assert.deepEqual(host.launches.map((l) => l.key), ['token_probabilities.bf16.v50257.vec8.t1024', 'token_probabilities.f32.v1003.vec1.t256']);
  assert.deepEqual(host.launches.map((l) => [l.config.grid, l.config.block]), [[9, 1024], [2, 256]]);
  assert.equal(argValue(host.launches[0]!, 1, 'i32'), 50304);
  assert.deepEqual([host.scratchRequests, host.counterRequests], [[], []]);
  assert.ok(host.launches.every((l) => l.gridDependencyWait && /GRID_DEPENDENCY_WAIT\(\);/.test(l.source)));
  // The kept set is found by sampleTokens' own code: the same radix selects in both sources.
  const sampled = sampling.sampleTokensSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits: 4 }).source;
  assert.ok(sampled.includes('if (tid == 0) mass_target = max(1ull,') && host.launches[0]!.source.includes('if (tid == 0) mass_target = max(1ull,'));
  rejects(() => sampling.tokenProbabilities(host, { ...args(2, 64, 'bf16', 64), tokens: deviceTensor([3], 'i32') }), /^tokenProbabilities: 'tokens'/);
  rejects(() => sampling.tokenProbabilities(host, { ...args(2, 64, 'bf16', 64), out: deviceTensor([2], 'bf16') }), /^tokenProbabilities: 'out'/);
  rejects(() => sampling.tokenProbabilities(host, args(1, 300000, 'bf16', 300000)), /^tokenProbabilities: a vocabulary of 300000 classes is larger/);
});

test('speculativeSample: one block per row, the draft optional (a null pointer: the bonus), sampleTokens\' kept-set code for each row it reads', () => {
  const host = new RecordingHost();
  const args = (R: number, Vp: number, dtype: 'bf16' | 'f32', classes: number, draft: boolean) => ({
    target: deviceTensor([R, Vp], dtype), ...(draft ? { draft: deviceTensor([R, Vp], dtype) } : {}), classes, params: deviceTensor([R, 4], 'f32'),
    seeds: deviceTensor([R, 2], 'i32'), positions: deviceTensor([R], 'i32'), out: deviceTensor([R], 'i32'),
  });
  sampling.speculativeSample(host, args(1, 50304, 'bf16', 50257, true));
  sampling.speculativeSample(host, args(3, 1003, 'f32', 1003, false));
  assert.deepEqual(host.launches.map((l) => l.key), ['speculative_sample.bf16.v50257.vec8.t1024', 'speculative_sample.f32.v1003.vec1.t256']);
  assert.deepEqual(host.launches.map((l) => [l.config.grid, l.config.block]), [[1, 1024], [3, 256]]);
  assert.notEqual(argValue(host.launches[0]!, 1, 'ptr'), 0n);
  assert.equal(argValue(host.launches[1]!, 1, 'ptr'), 0n);
  assert.equal(argValue(host.launches[0]!, 2, 'i32'), 50304);
  assert.deepEqual([host.scratchRequests, host.counterRequests], [[], []]);
  assert.ok(host.launches.every((l) => l.gridDependencyWait && l.source.split('if (tid == 0) mass_target = max(1ull,').length === 3));
  rejects(() => sampling.speculativeSample(host, { ...args(2, 64, 'bf16', 64, false), draft: deviceTensor([2, 64], 'f16') }), /^speculativeSample: 'draft'/);
  rejects(() => sampling.speculativeSample(host, { ...args(2, 64, 'bf16', 64, true), positions: deviceTensor([2], 'f32') }), /^speculativeSample: 'positions'/);
  rejects(() => sampling.speculativeSample(host, args(1, 300000, 'bf16', 300000, true)), /^speculativeSample: a vocabulary of 300000 classes is larger/);
});

test('qkvRopeAppend: a block of d/2 threads per (row, head); copies per kv head or per query head', () => {
  const host = new RecordingHost();
  const base = (L: number, heads: number) => ({
    qkv: deviceTensor([2 * L, (32 + 16) * 64], 'bf16'), positions: deviceTensor([2 * L], 'i32'), q: deviceTensor([2, 32, L, 64], 'bf16'),
    kCache: deviceTensor([2, 8, 100, 64], 'bf16'), vCache: deviceTensor([2, 8, 100, 64], 'bf16'), rope: { invFreq: deviceTensor([32], 'f32') },
    ...(heads ? { kOut: deviceTensor([2, heads, L, 64], 'bf16'), vOut: deviceTensor([2, heads, L, 64], 'bf16') } : {}),
  });
  qkv.qkvRopeAppend(host, base(1, 0));
  qkv.qkvRopeAppend(host, base(9, 32));
  assert.deepEqual(host.launches.map((l) => l.key), ['qkv_rope_append.bf16.d64.hq32.hkv8.rope', 'qkv_rope_append.bf16.d64.hq32.hkv8.rope.copy_repeat']);
  assert.deepEqual(host.launches[1]!.config.grid, [18, 48]);
  assert.equal(host.launches[1]!.config.block, 32);
  assert.equal(argValue(host.launches[1]!, 10, 'i32'), 9);
  rejects(() => qkv.qkvRopeAppend(host, { ...base(1, 0), kOut: deviceTensor([2, 3, 1, 64], 'bf16'), vOut: deviceTensor([2, 3, 1, 64], 'bf16') }), /^qkvRopeAppend: 'kOut' has 3 heads/);
  rejects(() => qkv.qkvRopeAppend(host, { ...base(1, 0), rope: { invFreq: deviceTensor([32], 'bf16') } }), /^qkvRopeAppend: 'rope\.invFreq' has dtype bf16/);
  // Qwen3's head norm: its own kernel key, the gammas and eps passed last; a wrong gamma size or eps is named.
  const headNorm = { q: deviceTensor([64], 'bf16'), k: deviceTensor([64], 'bf16'), eps: 1e-6 };
  qkv.qkvRopeAppend(host, { ...base(1, 0), headNorm });
  assert.equal(host.launches.at(-1)!.key, 'qkv_rope_append.bf16.d64.hq32.hkv8.rope.qknorm');
  assert.notEqual(argValue(host.launches.at(-1)!, 15, 'ptr'), 0n);
  assert.equal(argValue(host.launches[0]!, 15, 'ptr'), 0n, 'no gammas without the head norm');
  rejects(() => qkv.qkvRopeAppend(host, { ...base(1, 0), headNorm: { ...headNorm, k: deviceTensor([32], 'bf16') } }), /^qkvRopeAppend: 'headNorm\.k' has shape \[32\]/);
  rejects(() => qkv.qkvRopeAppend(host, { ...base(1, 0), headNorm: { ...headNorm, q: deviceTensor([64], 'f32') } }), /^qkvRopeAppend: .*headNorm\.q/);
  rejects(() => qkv.qkvRopeAppend(host, { ...base(1, 0), headNorm: { ...headNorm, eps: 0 } }), /^qkvRopeAppend: 'headNorm\.eps' must be a positive number, got 0/);
});

test('residualNorm: a warp per row up to H = 1024 at 16 bit, a block per row beyond; embedTokens and gatedActivation launch shapes', () => {
  const host = new RecordingHost();
  const rn = (rows: number, H: number, kind: 'layer' | 'rms') => norm.residualNorm(host, {
    x: deviceTensor([rows, H], 'bf16'), y: deviceTensor([rows, H], 'bf16'), norm: kind, gamma: deviceTensor([H], 'bf16'),
    ...(kind === 'layer' ? { beta: deviceTensor([H], 'bf16') } : {}), out: deviceTensor([rows, H], 'bf16'), eps: 1e-5,
  });
  rn(5, 768, 'layer');
  rn(3, 2048, 'rms');
  assert.deepEqual(host.launches.map((l) => [l.key, l.config.block, l.config.grid]), [
    ['residual_norm.layer.bf16.h768.v8.t32.r4.res', [32, 4], 2],
    ['residual_norm.rms.bf16.h2048.v8.t128.r1.res', [128, 1], 3],
  ]);
  embed.embedTokens(host, { tokens: deviceTensor([4], 'i32'), tokenTable: deviceTensor([100, 768], 'bf16'), positions: deviceTensor([4], 'i32'), positionTable: deviceTensor([64, 768], 'bf16'), out: deviceTensor([4, 768], 'bf16') });
  assert.equal(host.launches.at(-1)!.key, 'embed_tokens.bf16.h768.v8.pos');
  assert.equal(host.launches.at(-1)!.config.grid, 4);
  gated.gatedActivation(host, { x: deviceTensor([3, 16384], 'bf16'), out: deviceTensor([3, 8192], 'bf16'), activation: 'silu' });
  assert.equal(host.launches.at(-1)!.key, 'gated_activation.silu.bf16.f8192.v8');
  assert.equal(argValue(host.launches.at(-1)!, 2, 'u64'), BigInt(3 * 8192 / 8));
});

test('decodeAttention: 128-byte rows take the pipelined variant unless it is switched off; then paged grids above THROUGHPUT_MIN_GRID blocks take the throughput variant', () => {
  const host = new RecordingHost();
  const paged = (B: number, d: number, dtype: 'bf16' | 'f32', page: number) => ({
    q: deviceTensor([B, 32, d], dtype), kCache: deviceTensor([B * 8, 8, page, d], dtype), vCache: deviceTensor([B * 8, 8, page, d], dtype),
    positions: deviceTensor([B], 'i32'), out: deviceTensor([B, 32, d], dtype), blockTable: deviceTensor([B, 8], 'i32'),
  });
  const launch = (a: ReturnType<typeof paged>) => { attention.decodeAttention(host, a); return host.launches.at(-1)!; };
  // d 64 bf16 rows are 128 bytes: pipelined at any grid (8 head groups × 64 sequences = 512 blocks, past one
  // wave at 3 an SM: the wide-grid shape; or 256).
  assert.equal(launch(paged(64, 64, 'bf16', 16)).key, 'decode_attention.bf16.d64.g4.gh4.v8.paged16.pipelined.mma_t16s2b4');
  assert.equal(launch(paged(32, 64, 'bf16', 16)).key, 'decode_attention.bf16.d64.g4.gh4.v8.paged16.pipelined.mma');
  // f32 d 16 rows are 64 bytes: the throughput variant above 396 blocks, the latency variant below.
  assert.equal(launch(paged(64, 16, 'f32', 8)).key, 'decode_attention.f32.d16.g4.gh4.v4.paged8.throughput');
  const small = launch(paged(32, 16, 'f32', 8));
  assert.equal(small.key, 'decode_attention.f32.d16.g4.gh4.v4.paged8');
  assert.equal(small.config.sharedBytes, undefined);
  // Switched off (FUSEFORMER_DECODE_PIPELINED=0), the big grid falls back to the throughput variant.
  const saved = attention.decodeAttentionOptions.pipelined;
  try {
    attention.decodeAttentionOptions.pipelined = false;
    assert.equal(launch(paged(64, 64, 'bf16', 16)).key, 'decode_attention.bf16.d64.g4.gh4.v8.paged16.throughput');
    assert.equal(attention.takesPipelined(64, 2), false);
  } finally {
    attention.decodeAttentionOptions.pipelined = saved;
  }
  // 256-byte rows: at 16 bit on tensor cores (the pipelined CUDA-core variant stages 128-byte rows only), not at f32.
  assert.deepEqual([attention.takesPipelined(64, 2), attention.takesPipelined(32, 4), attention.takesPipelined(128, 2), attention.takesPipelined(64, 4)], [true, true, true, false]);
  const mma = attention.decodeAttentionOptions.mma;
  try {
    attention.decodeAttentionOptions.mma = false;
    assert.equal(attention.takesPipelined(128, 2), false);
  } finally {
    attention.decodeAttentionOptions.mma = mma;
  }
});

test('decodeAttention: with the tensor-core variant on, 16-bit 128- and 256-byte rows take it (same grid; staged memory by row size); f32 rows and other sizes keep their kernels', () => {
  const host = new RecordingHost();
  const paged = (B: number, d: number, dtype: 'bf16' | 'f16' | 'f32', page: number) => ({
    q: deviceTensor([B, 32, d], dtype), kCache: deviceTensor([B * 8, 8, page, d], dtype), vCache: deviceTensor([B * 8, 8, page, d], dtype),
    positions: deviceTensor([B], 'i32'), out: deviceTensor([B, 32, d], dtype), blockTable: deviceTensor([B, 8], 'i32'),
  });
  const launch = (a: ReturnType<typeof paged>) => { attention.decodeAttention(host, a); return host.launches.at(-1)!; };
  const saved = attention.decodeAttentionOptions.mma;
  try {
    attention.decodeAttentionOptions.mma = true;
    const before = attention.decodeAttentionLaunches.mma;
    const bf16 = launch(paged(32, 64, 'bf16', 16));
    assert.equal(bf16.key, 'decode_attention.bf16.d64.g4.gh4.v8.paged16.pipelined.mma');
    assert.deepEqual(bf16.config.grid, [8, 32, 1]);
    assert.equal(bf16.config.sharedBytes, attention.PIPELINED_STAGE_BYTES);
    assert.equal(launch(paged(8, 64, 'f16', 16)).key, 'decode_attention.f16.d64.g4.gh4.v8.paged16.pipelined.mma');
    assert.equal(launch(paged(8, 32, 'f32', 16)).key, 'decode_attention.f32.d32.g4.gh4.v4.paged16.pipelined');
    const wide = launch(paged(64, 128, 'bf16', 16));
    assert.equal(wide.key, 'decode_attention.bf16.d128.g4.gh4.v8.paged16.pipelined.mma_t16s2b0', 'one shape for 256-byte rows, past one wave too');
    assert.equal(wide.config.sharedBytes, attention.mmaSharedBytes(attention.WIDE_ROW_MMA_SHAPE, 256));
    assert.equal(launch(paged(8, 96, 'bf16', 16)).key, 'decode_attention.bf16.d96.g4.gh4.v8.paged16', '192-byte rows keep the latency variant');
    assert.equal(launch(paged(8, 64, 'f32', 16)).key, 'decode_attention.f32.d64.g4.gh4.v4.paged16', 'f32 256-byte rows too');
    assert.equal(attention.decodeAttentionLaunches.mma - before, 3);
    attention.decodeAttentionOptions.mma = false;
    assert.equal(launch(paged(8, 128, 'bf16', 16)).key, 'decode_attention.bf16.d128.g4.gh4.v8.paged16', 'without tensor cores, 256-byte rows are not staged');
    attention.decodeAttentionOptions.mma = false;
    assert.equal(launch(paged(64, 64, 'bf16', 16)).key, 'decode_attention.bf16.d64.g4.gh4.v8.paged16.pipelined');
  } finally {
    attention.decodeAttentionOptions.mma = saved;
  }
  assert.throws(() => attention.decodeAttentionSource({ dtype: 'f32', headDim: 32, group: 1, headsPerBlock: 1, vec: 4, split: false, pipelined: true, mma: true }), /tensor-core variant takes the pipelined variant's 16-bit rows/);
});

test('decodeAttention: the tensor-core variant\'s shape (FUSEFORMER_DECODE_MMA_SHAPE) sets its tiles, stages, launch bounds and staged memory; bad shapes are refused by name', () => {
  assert.deepEqual(attention.parseMmaShape(undefined), attention.DEFAULT_MMA_SHAPE);
  assert.deepEqual(attention.parseMmaShape('16,3,4'), { tile: 16, stages: 3, blocksPerSm: 4 });
  assert.deepEqual(attention.parseMmaShape('32, 3'), { tile: 32, stages: 3, blocksPerSm: 0 });
  for (const bad of ['24,2', '32,4', '16,2,9', '16,2,1,1', 'x']) assert.throws(() => attention.parseMmaShape(bad), /FUSEFORMER_DECODE_MMA_SHAPE must be 'tile,stages\[,blocksPerSm\]'/);
  assert.equal(attention.mmaSharedBytes(attention.DEFAULT_MMA_SHAPE), attention.PIPELINED_STAGE_BYTES);
  assert.equal(attention.mmaSharedBytes({ tile: 16, stages: 3, blocksPerSm: 4 }), 48 * 1024);
  const host = new RecordingHost();
  const args = { q: deviceTensor([4, 32, 64], 'bf16'), kCache: deviceTensor([4, 8, 160, 64], 'bf16'), vCache: deviceTensor([4, 8, 160, 64], 'bf16'), positions: deviceTensor([4], 'i32'), out: deviceTensor([4, 32, 64], 'bf16') };
  const saved = attention.decodeAttentionOptions.mmaShape;
  try {
    attention.decodeAttentionOptions.mmaShape = { tile: 16, stages: 3, blocksPerSm: 4 };
    attention.decodeAttention(host, args);
    const launch = host.launches.at(-1)!;
    assert.equal(launch.key, 'decode_attention.bf16.d64.g4.gh4.v8.pipelined.mma_t16s3b4');
    assert.equal(launch.config.sharedBytes, 48 * 1024);
    const source = attention.decodeAttentionSource({ dtype: 'bf16', headDim: 64, group: 4, headsPerBlock: 4, vec: 8, split: false, pipelined: true, mma: true, mmaShape: { tile: 16, stages: 3, blocksPerSm: 4 } }).source;
    assert.match(source, /__launch_bounds__\(THREADS, 4\)/);
    assert.match(source, /constexpr int WT = 16;/);
    assert.match(source, /cp_async_wait<WST - 1>\(\)/);
  } finally {
    attention.decodeAttentionOptions.mmaShape = saved;
  }
  attention.decodeAttention(host, args);
  assert.equal(host.launches.at(-1)!.key, 'decode_attention.bf16.d64.g4.gh4.v8.pipelined.mma', 'the default shape keeps the measured key');
});

test('decodeAttention: grids past one wave at 3 blocks an SM take the wide-grid shape (4 blocks an SM), unless a shape is forced', () => {
  assert.equal(attention.mmaShapeFor(396, 132, attention.DEFAULT_MMA_SHAPE), attention.DEFAULT_MMA_SHAPE, 'one full wave');
  assert.equal(attention.mmaShapeFor(397, 132, attention.DEFAULT_MMA_SHAPE), attention.WIDE_GRID_MMA_SHAPE);
  const forced = attention.parseMmaShape('32,2');
  assert.equal(attention.mmaShapeFor(808, 132, forced), forced, 'FUSEFORMER_DECODE_MMA_SHAPE holds for every grid');
  // A serving-sized step: 64 sequences × 8 head groups = 512 blocks on the 132-SM recording host.
  const host = new RecordingHost();
  const B = 64;
  attention.decodeAttention(host, {
    q: deviceTensor([B, 32, 64], 'bf16'), kCache: deviceTensor([B, 8, 160, 64], 'bf16'), vCache: deviceTensor([B, 8, 160, 64], 'bf16'),
    positions: deviceTensor([B], 'i32'), out: deviceTensor([B, 32, 64], 'bf16'),
  });
  const launch = host.launches.at(-1)!;
  assert.equal(launch.key, 'decode_attention.bf16.d64.g4.gh4.v8.pipelined.mma_t16s2b4');
  assert.equal(launch.config.sharedBytes, attention.mmaSharedBytes(attention.WIDE_GRID_MMA_SHAPE));
});

test('decodeAttention\'s project: the O weight, accumulator, zero and its size after the other arguments; refused where a row\'s vectors do not divide a warp', () => {
  const host = new RecordingHost();
  const args = (B: number, Hq: number, Hkv: number, d: number, maxLen: number, H: number, dtype: 'bf16' | 'f32' = 'bf16') => ({
    q: deviceTensor([B, Hq, d], dtype), kCache: deviceTensor([B, Hkv, maxLen, d], dtype), vCache: deviceTensor([B, Hkv, maxLen, d], dtype),
    positions: deviceTensor([B], 'i32'), out: deviceTensor([B, Hq, d], dtype),
    project: { weight: deviceTensor([H, Hq * d], dtype), out: deviceTensor([B, H], 'f32'), zero: deviceTensor([4, H], 'f32') },
  });
  const gpt2 = args(1, 12, 12, 64, 160, 768);
  attention.decodeAttention(host, gpt2);
  const launch = host.launches[0]!;
  // Unsplit: the 768 output rows in 16 chunks of 48, grid.z (12 heads × 16 = 192 blocks, within two an SM of 132).
  assert.equal(launch.key, 'decode_attention.bf16.d64.g1.gh1.v8.pipelined.mma.proj768c16');
  assert.deepEqual(launch.config.grid, [12, 1, 16]);
  assert.match(launch.source, /constexpr int PCHUNKS = 16;/);
  assert.match(launch.source, /if \(PCHUNKS == 1 \|\| blockIdx.z == 0\) out\[row \* D \+ c\] = value;/, 'chunk 0 alone writes out');
  assert.deepEqual([1, 12, 40, 140].map((blocks) => attention.projectionChunks(blocks, 768, 132, false)), [16, 16, 4, 1]);
  assert.equal(attention.projectionChunks(12, 768, 132, true), 1, 'split launches project in the combining block');
  assert.equal(attention.projectionChunks(12, 100, 132, false), 4, 'chunks divide H');
  const address = (t: unknown) => (t as { ptr: bigint }).ptr;
  assert.deepEqual([18, 19, 20].map((i) => argValue(launch, i, 'ptr')), [gpt2.project.weight, gpt2.project.out, gpt2.project.zero].map(address));
  assert.equal(argValue(launch, 21, 'i32'), 4 * 768);
  assert.equal(launch.args.length, 27);
  assert.deepEqual([25, 26].map((i) => argValue(launch, i, 'ptr')), [0n, 0n], 'no INT4 scales or zeros');
  assert.match(launch.source, /constexpr int LPR = 8;/);
  assert.match(launch.source, /constexpr bool PINT4 = false;/);
  // An INT4 O weight (int4Linear's layout, groups of 128): its packed words where the weight goes, scales and zeros
  // last; a lane takes 32 columns (16 bytes of nibbles), so GPT-2's 64-column head is 2 lanes a row.
  const packed = { qweight: deviceTensor([768, 96], 'i32'), scales: deviceTensor([768, 6], 'f16'), zeros: deviceTensor([768, 6], 'u8'), groupSize: 128 };
  attention.decodeAttention(host, { ...gpt2, project: { ...gpt2.project, weight: packed } });
  const q4 = host.launches.at(-1)!;
  assert.equal(q4.key, 'decode_attention.bf16.d64.g1.gh1.v8.pipelined.mma.proj768q4g128c16');
  assert.deepEqual([18, 25, 26].map((i) => argValue(q4, i, 'ptr')), [packed.qweight, packed.scales, packed.zeros].map(address));
  assert.match(q4.source, /constexpr int LPR = 2;/);
  assert.match(q4.source, /constexpr bool PINT4 = true;/);
  assert.match(q4.source, /constexpr int PG = 128;/);
  host.launches.pop();
  rejects(() => attention.decodeAttention(host, { ...gpt2, project: { ...gpt2.project, weight: { ...packed, groupSize: 48 } } }), /'groupSize' must be a positive multiple of 32, got 48/);
  rejects(() => attention.decodeAttention(host, { ...gpt2, project: { ...gpt2.project, weight: { ...packed, scales: deviceTensor([768, 6], 'bf16') } } }), /'project.weight.scales' has dtype bf16/);
  rejects(() => attention.decodeAttention(host, { ...gpt2, project: { ...gpt2.project, weight: { ...packed, qweight: deviceTensor([700, 96], 'i32') } } }), /project.weight.qweight/);
  // Heads of 16 columns: not a whole 32-column vector of nibbles.
  rejects(() => attention.decodeAttention(host, { ...args(1, 48, 48, 16, 64, 768), project: { weight: packed, out: deviceTensor([1, 768], 'f32') } }), /in 16-byte vectors of 32 INT4 columns/);
  assert.equal(host.launches.length, 1);
  // Without project: the same kernel as before, its four extra arguments null.
  const { project: _p, ...plain } = gpt2;
  attention.decodeAttention(host, plain);
  assert.equal(host.launches[1]!.key, 'decode_attention.bf16.d64.g1.gh1.v8.pipelined.mma');
  assert.deepEqual([18, 19, 20].map((i) => argValue(host.launches[1]!, i, 'ptr')), [0n, 0n, 0n]);
  // Split: the last block of each head's splits combines them and projects.
  attention.decodeAttention(host, { ...args(1, 12, 12, 64, 2048, 768), partials: deviceTensor([1, 12, 4, 66], 'f32') });
  assert.equal(host.launches[2]!.key, 'decode_attention.bf16.d64.g1.gh1.v8.split.pipelined.mma.proj768');
  // d 80 at bf16: a head's row is 10 vectors, which do not divide a warp.
  rejects(() => attention.decodeAttention(host, args(1, 4, 4, 80, 64, 320)), /decodeAttention: 'project' takes a block's 1 heads × 80 columns/);
  assert.equal(host.launches.length, 3);
  // FUSEFORMER_FUSED_O_CHUNKS=1 (or 0): the one-chunk form; the env value's checks; a higher cap for Llama's 8 kv heads.
  attention.decodeAttentionOptions.projectChunks = 1;
  try {
    attention.decodeAttention(host, gpt2);
  } finally {
    attention.decodeAttentionOptions.projectChunks = attention.DEFAULT_PROJECTION_CHUNKS;
  }
  assert.deepEqual(['0', '1', '32', undefined].map((v) => attention.projectChunksFromEnv(v)), [1, 1, 32, 16]);
  assert.throws(() => attention.projectChunksFromEnv('12'), /FUSEFORMER_FUSED_O_CHUNKS must be a power of two from 1 to 64 \(0: 1\), got '12'/);
  attention.decodeAttentionOptions.projectChunks = 32;
  try {
    assert.equal(attention.projectionChunks(8, 2048, 132, false), 32, 'Llama 1B at batch 1: 8 kv heads × 32 = 256 blocks');
    assert.equal(attention.projectionChunks(12, 768, 132, false), 16, 'GPT-2: 12 × 32 would pass two blocks an SM');
  } finally {
    attention.decodeAttentionOptions.projectChunks = attention.DEFAULT_PROJECTION_CHUNKS;
  }
  assert.equal(host.launches[3]!.key, 'decode_attention.bf16.d64.g1.gh1.v8.pipelined.mma.proj768');
  assert.deepEqual(host.launches[3]!.config.grid, [12, 1, 1]);
  assert.equal(attention.projectionFits('bf16', 64, 4), true, "Llama 1B's four heads a block: 32 vectors, a warp a row");
  assert.equal(attention.projectionFits('f32', 64, 4), false, '64 vectors');
});

test('appendDecodeAttention fused at 256-byte rows with head norms: the gammas and eps after the projection arguments, keyed _qknorm; f32 rows of 256 bytes take the two ops', () => {
  const host = new RecordingHost();
  const parts = (d: number, dtype: 'bf16' | 'f32') => ({
    append: {
      qkv: deviceTensor([2, 32 * d], dtype), positions: deviceTensor([2], 'i32'), q: deviceTensor([2, 16, 1, d], dtype),
      kCache: deviceTensor([2, 8, 64, d], dtype), vCache: deviceTensor([2, 8, 64, d], dtype), rope: { invFreq: deviceTensor([d / 2], 'f32'), scale: 1 },
      headNorm: { q: deviceTensor([d], dtype), k: deviceTensor([d], dtype), eps: 1e-6 },
    },
    attention: {
      q: deviceTensor([2, 16, d], dtype), kCache: deviceTensor([2, 8, 64, d], dtype), vCache: deviceTensor([2, 8, 64, d], dtype),
      positions: deviceTensor([2], 'i32'), out: deviceTensor([2, 16, d], dtype),
    },
  });
  const qwen3 = parts(128, 'bf16');
  assert.equal(attention.fusedAppendDecodeAttention(host, qwen3), true);
  const launch = host.launches.at(-1)!;
  assert.equal(launch.key, 'decode_attention.bf16.d128.g2.gh2.v8.pipelined.append_rope_qknorm.mma_t16s2b0');
  const address = (t: unknown) => (t as { ptr: bigint }).ptr;
  assert.deepEqual([22, 23].map((i) => argValue(launch, i, 'ptr')), [address(qwen3.append.headNorm.q), address(qwen3.append.headNorm.k)]);
  assert.ok(Math.abs((argValue(launch, 24, 'f32') as number) - 1e-6) < 1e-12);
  assert.match(launch.source, /constexpr bool HEAD_NORM = true;/);
  assert.equal(attention.fusedAppendDecodeAttention(host, parts(64, 'f32')), false, 'f32 d 64: 256-byte rows, not staged');
  assert.equal(host.launches.length, 1);
});
