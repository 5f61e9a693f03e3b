import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { roundToDType } from '../../../src/dtype.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import { assertClose, assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();

test('sums the squares of every element of any shape, in each float dtype', () => {
  const values = randomValues(3, 2 * 3 * 7, -3, 3);
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    const stored = values.map((v) => (dtype === 'f32' ? v : roundToDType(v, dtype)));
    const out = backend.fromArray([NaN], [1], 'f32');
    backend.sumSquares({ x: backend.fromArray(values, [2, 3, 7], dtype), out });
    assertClose(backend.download(out), [stored.reduce((s, v) => s + v * v, 0)], 1e-7, dtype);
  }
});

test('accumulate adds to out; an empty x gives 0 (or leaves out as it is)', () => {
  const out = backend.fromArray([10], [1], 'f32');
  backend.sumSquares({ x: backend.fromArray([1, 2, 3], [3], 'f32'), out, accumulate: true });
  assert.deepEqual(Array.from(backend.download(out)), [24]);
  backend.sumSquares({ x: backend.empty([0], 'f16'), out, accumulate: true });
  assert.deepEqual(Array.from(backend.download(out)), [24]);
  backend.sumSquares({ x: backend.empty([0], 'f16'), out });
  assert.deepEqual(Array.from(backend.download(out)), [0]);
});

test('Inf gives +Inf (also -Inf and a sum past the f32 range), NaN gives NaN', () => {
  const out = backend.empty([1], 'f32');
  for (const [values, expected] of [[[1, Infinity, 2], Infinity], [[-Infinity, 0], Infinity], [[1, NaN, Infinity], NaN], [[3e38, 3e38], Infinity]] as const) {
    backend.sumSquares({ x: backend.fromArray(values, [values.length], 'f32'), out });
    assert.ok(Object.is(backend.download(out)[0], expected), `[${values}] → ${backend.download(out)[0]}, expected ${expected}`);
  }
  // An f16 tensor whose largest values square far past the f16 range still sums in float.
  backend.sumSquares({ x: backend.fromArray([60000, 60000], [2], 'f16'), out });
  assertClose(backend.download(out), [2 * 60000 ** 2], 1e-7);
});

test('validation names the op and the argument', () => {
  const x = backend.empty([4], 'f16');
  assertRejects(() => backend.sumSquares({ x, out: backend.empty([1], 'f16') }), 'sumSquares', 'out', DTypeError);
  assertRejects(() => backend.sumSquares({ x, out: backend.empty([2], 'f32') }), 'sumSquares', 'out', ShapeError);
  assertRejects(() => backend.sumSquares({ x: backend.empty([4], 'i32'), out: backend.empty([1], 'f32') }), 'sumSquares', 'x', DTypeError);
  assertRejects(() => backend.sumSquares({ x, out: backend.empty([1], 'f32'), accumulate: 1 as unknown as boolean }), 'sumSquares', 'accumulate', ArgumentError);
});
