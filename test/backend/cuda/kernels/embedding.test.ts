// The embedding kernels without a GPU: sources compile, keys differ, launchers validate and pick the
// grid, vector width (hence atomic width) and batch chunking we expect.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as emb from '../../../../src/backend/cuda/kernels/embedding.js';
import { dropoutThreshold } from '../../../../src/backend/rng.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('catalog names are distinct and keys differ in every field', () => {
  const sources = emb.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  const base = { dtype: 'f16', hidden: 768, vec: 8, hasPositions: true, hasDropout: true } as const;
  const keys = [base, { ...base, dtype: 'f32' }, { ...base, hidden: 1024 }, { ...base, vec: 2 }, { ...base, hasPositions: false }, { ...base, hasDropout: false }]
    .map((s) => emb.embeddingForwardKey(s as emb.EmbeddingForwardSpec));
  const back = { ...base, tableDtype: 'f16' } as const;
  keys.push(emb.embeddingBackwardKey(back), emb.embeddingBackwardKey({ ...back, hasPositions: false }), emb.embeddingBackwardKey({ ...back, vec: 1 }),
    emb.embeddingBackwardKey({ ...back, tableDtype: 'f32' }));
  assert.equal(new Set(keys).size, keys.length);
});

test('the backward uses the widest atomics the vector allows', () => {
  const source = (dtype: 'f32' | 'f16' | 'bf16', vec: number): string => emb.embeddingBackwardSource({ dtype, tableDtype: dtype, hidden: 768, vec, hasPositions: true }).source;
  for (const [dtype, vec] of [['f32', 4], ['f16', 8], ['bf16', 8], ['f16', 2], ['bf16', 1]] as const) {
    assert.match(source(dtype, vec), new RegExp(`constexpr int VEC = ${vec};`));
  }
  assert.match(source('f16', 8), /red\.global\.add\.noftz\.v4\.f16x2/);
  assert.match(source('bf16', 8), /red\.global\.add\.noftz\.v4\.bf16x2/);
  assert.match(source('f32', 4), /red\.global\.add\.v4\.f32/);
});

test('embeddingForward: row tiles over B·L tokens with the dropout parameters of p', () => {
  const host = new RecordingHost();
  const [B, L, V, H] = [8, 512, 50257, 768];
  emb.embeddingForward(host, {
    tokens: deviceTensor([B, L], 'i32'), tokenTable: deviceTensor([V, H], 'bf16'), positionTable: deviceTensor([L + 2, H], 'bf16'), positionOffset: 2,
    scale: 2, out: deviceTensor([B, L, H], 'bf16'), mask: deviceTensor([B, L, H], 'u8'), p: 0.1, seed: 9n, offset: 3n,
  });
  const l = host.launches[0]!;
  assert.equal(l.key, 'embedding_forward.bf16.h768.v8.pos.drop');
  assert.deepEqual(l.config.grid, [(B * L) / 8, 3]);
  assert.equal(argValue(l, 5, 'u32'), L);
  assert.equal(argValue(l, 6, 'u32'), V);
  assert.equal(argValue(l, 7, 'i32'), 0); // vocab_start: no split vocabulary
  assert.equal(argValue(l, 8, 'u32'), 2);
  assert.equal(argValue(l, 9, 'f32'), 2);
  assert.equal(argValue(l, 10, 'u64'), 9n);
  assert.equal(argValue(l, 11, 'u64'), 3n);
  assert.equal(argValue(l, 12, 'ptr'), 0n); // no device-side offset base
  assert.equal(argValue(l, 13, 'u32'), dropoutThreshold(0.1));
  assert.equal(argValue(l, 15, 'u32'), B * L);
});

test('embeddingForward with a split vocabulary: the masked variant, ids shifted by vocabStart', () => {
  const host = new RecordingHost();
  emb.embeddingForward(host, { tokens: deviceTensor([2, 3], 'i32'), tokenTable: deviceTensor([16, 64], 'f32'), vocabStart: 32, out: deviceTensor([2, 3, 64], 'f32'), mask: deviceTensor([2, 3, 64], 'u8'), p: 0, seed: 0n, offset: 0n });
  const l = host.launches[0]!;
  assert.equal(l.key, 'embedding_forward.f32.h64.v4.masked');
  assert.equal(argValue(l, 7, 'i32'), 32);
  assert.match(l.source, /tokens\[row\] - vocab_start/);
  assert.match(l.source, /valid \? scale \* to_float\(e\.v\[k\]\) : 0\.f/);
  assert.doesNotMatch(l.source, /0x7fc00000/, 'no NaN rows for ids another rank owns');
});

test('embeddingForward without positions passes a null table and compiles the variant without them', () => {
  const host = new RecordingHost();
  emb.embeddingForward(host, { tokens: deviceTensor([2, 3], 'i32'), tokenTable: deviceTensor([10, 64], 'f32'), out: deviceTensor([2, 3, 64], 'f32'), mask: deviceTensor([2, 3, 64], 'u8'), p: 0, seed: 0n, offset: 0n });
  const l = host.launches[0]!;
  assert.equal(l.key, 'embedding_forward.f32.h64.v4');
  assert.equal(argValue(l, 2, 'ptr'), 0n);
  assert.doesNotMatch(l.source, /position_table \+/);
});

test('embeddingBackward: batch chunks only as needed to fill the GPU', () => {
  const run = (B: number, L: number, H: number, dtype: 'f32' | 'f16' | 'bf16' = 'f16', tablePtr?: bigint) => {
    const host = new RecordingHost();
    emb.embeddingBackward(host, {
      tokens: deviceTensor([B, L], 'i32'), dOut: deviceTensor([B, L, H], dtype), mask: deviceTensor([B, L, H], 'u8'), p: 0.1,
      dTokenTable: deviceTensor([100, H], dtype, tablePtr), dPositionTable: deviceTensor([L, H], dtype),
    });
    return host.launches[0]!;
  };
  // B=32, L=512, H=768 f16: 96 vectors → 3 chunks × 32; 8 positions per block → 64 position blocks;
  // 49,152 threads per batch chunk; 132 SMs × 4096 wanted → 11 chunks → 3 batches per chunk.
  const big = run(32, 512, 768);
  assert.equal(big.key, 'embedding_backward.f16.h768.v8.pos');
  assert.deepEqual(big.config.block, [32, 8]);
  assert.deepEqual(big.config.grid, [3, 64, 11]);
  assert.equal(argValue(big, 8, 'i32'), 0); // vocab_start
  assert.equal(argValue(big, 10, 'u32'), 3);
  assert.equal(argValue(big, 12, 'f32'), 1 / 0.9);
  // A small problem splits down to one batch per chunk.
  assert.deepEqual(run(4, 16, 64).config.grid, [1, 1, 4]); // 8 vectors × 32 positions per block
  // An unaligned table falls back to half2 atomics (vec 2) or scalar ones.
  assert.match(run(2, 4, 768, 'f16', 0x4000_0004n).key, /\.v2\./);
  assert.match(run(2, 4, 768, 'bf16', 0x4000_0002n).key, /\.v1\./);
});

test('launchers reject bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const rejects = (fn: () => void, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  };
  const fwd = { tokens: deviceTensor([2, 3], 'i32'), tokenTable: deviceTensor([10, 8], 'f16'), positionTable: deviceTensor([4, 8], 'f16'), out: deviceTensor([2, 3, 8], 'f16'), mask: deviceTensor([2, 3, 8], 'u8'), p: 0.1, seed: 1n, offset: 0n };
  rejects(() => emb.embeddingForward(host, { ...fwd, positionOffset: 2 }), /^embeddingForward: positions 2\.\.4 \(positionOffset \+ L\) are past the 4 rows of 'positionTable'/);
  rejects(() => emb.embeddingForward(host, { ...fwd, tokens: deviceTensor([2, 3], 'f32') }), /^embeddingForward: 'tokens' has dtype f32/);
  rejects(() => emb.embeddingForward(host, { ...fwd, positionTable: deviceTensor([4, 8], 'f32') }), /^embeddingForward: 'positionTable' has dtype f32/);
  rejects(() => emb.embeddingForward(host, { ...fwd, out: deviceTensor([2, 3, 9], 'f16') }), /^embeddingForward: 'out' has shape/);
  rejects(() => emb.embeddingForward(host, { ...fwd, scale: NaN }), /^embeddingForward: 'scale' must be a finite number/);
  rejects(() => emb.embeddingForward(host, { ...fwd, p: -0.1 }), /^embeddingForward: 'p' must be in/);
  rejects(() => emb.embeddingBackward(host, { tokens: fwd.tokens, dOut: fwd.out, mask: fwd.mask, p: 0.1, dTokenTable: deviceTensor([10, 8], 'f16'), positionOffset: -1 }), /^embeddingBackward: 'positionOffset' must be an integer >= 0/);
  rejects(() => emb.embeddingBackward(host, { tokens: fwd.tokens, dOut: fwd.out, mask: deviceTensor([2, 3, 8], 'i8'), p: 0.1, dTokenTable: deviceTensor([10, 8], 'f16') }), /^embeddingBackward: 'mask' has dtype i8/);
  assert.equal(host.launches.length, 0);
});
