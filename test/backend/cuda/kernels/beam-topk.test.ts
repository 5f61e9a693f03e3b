// The beam-search and decode-attention kernels without a GPU: launch shapes and arguments, spec keys and
// planning (threads per row, vector width from the row stride and alignment), the limits the launchers
// enforce, and nvcc compilation of the families' catalogs.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as attention from '../../../../src/backend/cuda/kernels/beam-attention.js';
import * as topk from '../../../../src/backend/cuda/kernels/beam-topk.js';
import { argValue, compileAll, deviceTensor, findNvcc, RecordingHost } from './launch-helpers.js';

const nvcc = findNvcc();

test('beamTopK: one block per item, beams·TR threads; keys carry every baked-in choice', () => {
  const host = new RecordingHost();
  const args = (Vp: number, ptr?: bigint) => ({
    logits: deviceTensor([3 * 4, Vp], 'bf16', ptr), beams: 4, classes: 58101, beamScores: deviceTensor([12], 'f32'),
    tokens: deviceTensor([3, 8], 'i32'), sourceBeams: deviceTensor([3, 8], 'i32'), scores: deviceTensor([3, 8], 'f32'), bannedTokens: [58100, 58100], renormalize: true,
  });
  topk.beamTopK(host, args(58112));
  const [launch] = host.launches;
  assert.equal(launch!.key, 'beam_topk.bf16.v58112.c58101.b4.k8.t256.x8.ban58100.renorm');
  assert.equal(launch!.config.grid, 3);
  assert.equal(launch!.config.block, 4 * 256);
  assert.equal(argValue(launch!, 1, 'ptr') !== 0n, true, 'beam scores passed');
  // An odd row stride (GPT-2's 50257) or a misaligned view falls back to scalar loads.
  topk.beamTopK(host, { ...args(50257), classes: 50257, bannedTokens: [] });
  topk.beamTopK(host, { ...args(58112, 0x4000_0002n) });
  assert.deepEqual(host.launches.slice(1).map((l) => l.key), [
    'beam_topk.bf16.v50257.b4.k8.t256.x1.renorm', 'beam_topk.bf16.v58112.c58101.b4.k8.t256.x1.ban58100.renorm',
  ]);
});

test('threads per row: as many warps as fit, but not more than the vocabulary keeps busy', () => {
  assert.equal(topk.beamTopKThreadsPerRow(1, 32000, 8), 1024);
  assert.equal(topk.beamTopKThreadsPerRow(4, 58101, 8), 256);
  assert.equal(topk.beamTopKThreadsPerRow(5, 50257, 1), 192);
  assert.equal(topk.beamTopKThreadsPerRow(4, 100, 4), 32);
  assert.equal(topk.beamTopKThreadsPerRow(32, 100, 8), 32);
});

test('beamAdvance and the attention steps: grids and dynamic shared memory', () => {
  const host = new RecordingHost();
  topk.beamAdvance(host, {
    tokens: deviceTensor([2, 8], 'i32'), sourceBeams: deviceTensor([2, 8], 'i32'), scores: deviceTensor([2, 8], 'f32'), beams: 4, eosTokens: [0],
    nextTokens: deviceTensor([8], 'i32'), beamScores: deviceTensor([8], 'f32'), cacheRows: deviceTensor([2, 8, 65], 'i32'), positions: deviceTensor([8], 'i32'),
  });
  attention.beamSelfAttention(host, {
    qkv: deviceTensor([8, 1536], 'bf16'), bias: deviceTensor([1536], 'bf16'), heads: 8, kCache: deviceTensor([8, 8, 65, 64], 'bf16'),
    vCache: deviceTensor([8, 8, 65, 64], 'bf16'), cacheRows: deviceTensor([2, 8, 65], 'i32'), positions: deviceTensor([8], 'i32'), out: deviceTensor([8, 512], 'bf16'),
  });
  attention.beamCrossAttention(host, {
    q: deviceTensor([8, 512], 'bf16'), kv: deviceTensor([2, 48, 6144], 'bf16'), layer: 5, heads: 8, beams: 4, keyLengths: deviceTensor([2], 'i32'), out: deviceTensor([8, 512], 'bf16'),
  });
  const [advance, self, cross] = host.launches;
  assert.equal(advance!.key, 'beam_advance.b4.k8.eos0');
  assert.equal(advance!.config.grid, 2);
  assert.equal(argValue(advance!, 7, 'i32'), 8);
  assert.equal(argValue(advance!, 8, 'i32'), 65);
  assert.deepEqual(self!.config.grid, [8, 8]);
  assert.equal(self!.config.sharedBytes, (64 + 2 * 65) * 4);
  assert.deepEqual(cross!.config.grid, [8, 8]);
  assert.equal(cross!.config.sharedBytes, (64 + 48) * 4);
  assert.equal(argValue(cross!, 6, 'i32'), 6144, 'row width 2·layers·H');
  assert.equal(argValue(cross!, 7, 'i32'), 2 * 5 * 512, 'layer 5’s K column');
});

test('the launchers refuse what the kernels cannot do, naming the op', () => {
  const host = new RecordingHost();
  const out = { tokens: deviceTensor([1, 66], 'i32'), sourceBeams: deviceTensor([1, 66], 'i32'), scores: deviceTensor([1, 66], 'f32') };
  assert.throws(() => topk.beamTopK(host, { logits: deviceTensor([33, 100], 'f32'), beams: 33, ...out }), /beamTopK: the CUDA kernel handles at most 32 beams/);
  assert.throws(() => attention.beamSelfAttention(host, {
    qkv: deviceTensor([2, 96], 'f32'), bias: deviceTensor([96], 'f32'), heads: 2, kCache: deviceTensor([2, 2, 40000, 16], 'f32'),
    vCache: deviceTensor([2, 2, 40000, 16], 'f32'), cacheRows: deviceTensor([2, 2, 40000], 'i32'), positions: deviceTensor([2], 'i32'), out: deviceTensor([2, 32], 'f32'),
  }), /beamSelfAttention: a cache of 40000 positions needs 320064 bytes of shared memory/);
});

test('every beam kernel in the catalogs compiles with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found', timeout: 20 * 60_000 }, async () => {
  const failures = await compileAll(nvcc!, [...topk.catalog(), ...attention.catalog()], 2);
  assert.deepEqual(failures, []);
});
