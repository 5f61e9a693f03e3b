// The sumSquares kernels without a GPU: the two launches, the fixed grid and its scratch, the
// empty case, and validation.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ss from '../../../../src/backend/cuda/kernels/sum-squares.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('keys differ; catalog names are unique', () => {
  const keys = [ss.sumSquaresKey({ dtype: 'f16', vec: 8 }), ss.sumSquaresKey({ dtype: 'bf16', vec: 8 }), ss.sumSquaresKey({ dtype: 'f16', vec: 1 }),
    ss.sumSquaresFinishKey({ accumulate: false }), ss.sumSquaresFinishKey({ accumulate: true })];
  assert.equal(new Set(keys).size, keys.length);
  assert.equal(new Set(ss.catalog().map((s) => s.name)).size, ss.catalog().length);
});

test('a partial pass over a grid fixed by n and the SM count, then one finishing block over its partials', () => {
  const host = new RecordingHost();
  const n = 4e8;
  const out = deviceTensor([1], 'f32');
  ss.sumSquares(host, { x: deviceTensor([n], 'bf16'), out });
  const [partial, finish] = host.launches;
  assert.equal(partial!.key, 'sum_squares.bf16.v8');
  assert.equal(partial!.config.grid, 132 * 8);
  assert.equal(argValue(partial!, 1, 'u64'), BigInt(n));
  assert.equal(argValue(partial!, 2, 'ptr'), RecordingHost.SCRATCH);
  assert.deepEqual(host.scratchRequests, [132 * 8 * 4]);
  assert.equal(finish!.key, 'sum_squares_finish');
  assert.equal(finish!.config.grid, 1);
  assert.equal(argValue(finish!, 0, 'ptr'), RecordingHost.SCRATCH);
  assert.equal(argValue(finish!, 1, 'u32'), 132 * 8);
  assert.equal(argValue(finish!, 2, 'ptr'), out.ptr);
});

test('small and misaligned inputs; accumulate; an empty x only runs the finish (0 partials)', () => {
  const host = new RecordingHost();
  ss.sumSquares(host, { x: deviceTensor([7], 'f32'), out: deviceTensor([1], 'f32') });
  ss.sumSquares(host, { x: deviceTensor([4099], 'f16', 0x4000_0002n), out: deviceTensor([1], 'f32'), accumulate: true });
  assert.deepEqual(host.launches.map((l) => `${l.key} ${String(l.config.grid)}`), [
    'sum_squares.f32.v4 1', 'sum_squares_finish 1', 'sum_squares.f16.v1 17', 'sum_squares_finish.accumulate 1',
  ]);
  const empty = new RecordingHost();
  ss.sumSquares(empty, { x: deviceTensor([0], 'f16'), out: deviceTensor([1], 'f32') });
  assert.deepEqual(empty.launches.map((l) => l.key), ['sum_squares_finish']);
  assert.equal(argValue(empty.launches[0]!, 1, 'u32'), 0);
});

test('bad arguments are rejected naming the op', () => {
  const host = new RecordingHost();
  const rejects = (fn: () => void, pattern: RegExp): void => {
    assert.throws(fn, (e: unknown) => e instanceof FuseformerError && pattern.test(e.message));
  };
  rejects(() => ss.sumSquares(host, { x: deviceTensor([8], 'i32'), out: deviceTensor([1], 'f32') }), /^sumSquares: 'x' has dtype i32 but expected a float dtype/);
  rejects(() => ss.sumSquares(host, { x: deviceTensor([8], 'f16'), out: deviceTensor([1], 'f16') }), /^sumSquares: 'out' has dtype f16 but expected f32/);
  rejects(() => ss.sumSquares(host, { x: deviceTensor([8], 'f16'), out: deviceTensor([2], 'f32') }), /^sumSquares: 'out' has shape \[2\]/);
  assert.equal(host.launches.length, 0);
});
