// prefetchL2's, decodeAdvance's and feedTokens' launches, without a GPU: what each asks of the kernel —
// rows, stride and the bytes a row (whole 16-byte units), nothing for a misaligned start or too few bytes,
// one flat range for rows whose width is not a multiple of 16 bytes; decodeAdvance's and feedTokens' one
// block and their sizes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeAdvance } from '../../../../src/backend/cuda/kernels/decode-advance.js';
import { feedTokens } from '../../../../src/backend/cuda/kernels/feed-tokens.js';
import { prefetchL2 } from '../../../../src/backend/cuda/kernels/prefetch-l2.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('prefetchL2: a thread a row, each row\'s leading whole 16-byte units; flat for odd row widths; nothing when misaligned or too small', () => {
  const host = new RecordingHost();
  const args = () => { const l = host.launches.at(-1)!; return [argValue(l, 1, 'i64'), argValue(l, 2, 'i64'), argValue(l, 3, 'u32'), l.config.grid]; };
  prefetchL2(host, { x: deviceTensor([16384, 2048], 'bf16', 0x10000n) });
  assert.deepEqual(args(), [16384n, 4096n, 4096, 128]);
  prefetchL2(host, { x: deviceTensor([2048, 2048], 'bf16', 0x10000n), fraction: 0.3 });
  assert.deepEqual(args(), [2048n, 4096n, 1216, 16], '0.3 of 4096 bytes rounded down to 16');
  prefetchL2(host, { x: deviceTensor([3, 77], 'f16', 0x10000n) });  // 154-byte rows: one flat range of 462 → 448 bytes
  assert.deepEqual(args(), [1n, 462n, 448, 1]);
  prefetchL2(host, { x: deviceTensor([1000003], 'f32', 0x10000n) });
  assert.deepEqual(args(), [1n, 4000012n, 4000000, 1]);
  prefetchL2(host, { x: deviceTensor([200000, 2048], 'bf16', 0x10000n) });
  assert.equal(host.launches.at(-1)!.config.grid, 132, 'at most 132 blocks, rows by a grid-stride loop');
  const before = host.launches.length;
  prefetchL2(host, { x: deviceTensor([64, 64], 'bf16', 0x10008n) });           // start off 16 bytes
  prefetchL2(host, { x: deviceTensor([64, 64], 'bf16', 0x10000n), fraction: 0.01 }); // 1.28 bytes a row
  assert.equal(host.launches.length, before, 'nothing launched');
  assert.throws(() => prefetchL2(host, { x: deviceTensor([2, 2, 2], 'f32', 0x10000n) }), /prefetchL2: 'x' must be 1-D or 2-D/);
});

test('decodeAdvance: one block over the rows, with the record\'s steps and width', () => {
  const host = new RecordingHost();
  const i32 = (shape: number[]) => deviceTensor(shape, 'i32', 0x20000n);
  decodeAdvance(host, { sampled: i32([70]), tokens: i32([64]), positions: i32([64]), cachePositions: i32([64]), record: i32([8, 256]), step: i32([1]) });
  const l = host.launches.at(-1)!;
  assert.equal(l.config.grid, 1);
  assert.deepEqual([argValue(l, 6, 'i32'), argValue(l, 7, 'i32'), argValue(l, 8, 'i32')], [64, 8, 256]);
  assert.throws(() => decodeAdvance(host, { sampled: i32([70]), tokens: i32([64]), positions: i32([64]), cachePositions: i32([64]), record: i32([8, 32]), step: i32([1]) }), /decodeAdvance: 'record' rows hold 32 tokens, fewer than the 64 decode rows/);
});

test('feedTokens: one block over the rows, with the sampled rows and the step\'s rows; nothing for no rows', () => {
  const host = new RecordingHost();
  const i32 = (shape: number[]) => deviceTensor(shape, 'i32', 0x20000n);
  feedTokens(host, { sampled: i32([512]), from: i32([2304]), tokens: i32([2304]) });
  const l = host.launches.at(-1)!;
  assert.deepEqual([l.config.grid, l.config.block], [1, 256]);
  assert.deepEqual([argValue(l, 3, 'i32'), argValue(l, 4, 'i32')], [512, 2304]);
  const before = host.launches.length;
  feedTokens(host, { sampled: i32([4]), from: i32([0]), tokens: i32([0]) });
  assert.equal(host.launches.length, before);
  assert.throws(() => feedTokens(host, { sampled: i32([4]), from: i32([8]), tokens: i32([9]) }), /feedTokens.*tokens/);
});
