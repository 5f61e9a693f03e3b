import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import type { DType, FloatDType } from '../../../src/dtype.js';
import { roundToDType } from '../../../src/dtype.js';
import { DTypeError, ShapeError } from '../../../src/errors.js';
import { assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();

/** out[a, c, b, d] = x[a, b, c, d], index by index. */
function reference(x: ArrayLike<number>, [A, B, C, D]: readonly number[]): number[] {
  const out = new Array<number>(x.length);
  for (let a = 0; a < A!; a++) for (let b = 0; b < B!; b++) for (let c = 0; c < C!; c++) for (let d = 0; d < D!; d++) {
    out[((a * C! + c) * B! + b) * D! + d] = x[((a * B! + b) * C! + c) * D! + d]!;
  }
  return out;
}

test('a small case written out by hand', () => {
  // x [1, 2, 3, 1] = [[0, 1, 2], [3, 4, 5]] → out [1, 3, 2, 1] = [[0, 3], [1, 4], [2, 5]]
  const out = backend.empty([1, 3, 2, 1], 'i32');
  backend.permute0213({ x: backend.fromArray([0, 1, 2, 3, 4, 5], [1, 2, 3, 1], 'i32'), out });
  assert.deepEqual(Array.from(backend.download(out)), [0, 3, 1, 4, 2, 5]);
});

test('matches the index definition for every 2- and 4-byte dtype and awkward shapes, and is its own inverse with B and C swapped', () => {
  const shapes = [[2, 3, 5, 4], [1, 7, 2, 3], [3, 1, 4, 8], [2, 4, 1, 5], [1, 1, 1, 1]];
  for (const dtype of ['f32', 'f16', 'bf16', 'i32'] as DType[]) {
    for (const shape of shapes) {
      const numel = shape.reduce((a, b) => a * b, 1);
      const values = dtype === 'i32' ? randomValues(7, numel, -1000, 1000).map(Math.round) : randomValues(7, numel).map((v) => (dtype === 'f32' ? v : roundToDType(v, dtype as FloatDType)));
      const [A, B, C, D] = shape as [number, number, number, number];
      const x = backend.fromArray(values, shape, dtype);
      const out = backend.empty([A, C, B, D], dtype);
      backend.permute0213({ x, out });
      assert.deepEqual(Array.from(backend.download(out)), reference(values, shape), `${dtype} [${shape}]`);
      const back = backend.empty(shape, dtype);
      backend.permute0213({ x: out, out: back });
      assert.deepEqual(Array.from(backend.download(back)), Array.from(values), `${dtype} [${shape}] round trip`);
    }
  }
});

test('validation names the op and the argument', () => {
  const x = backend.empty([2, 3, 4, 5], 'f16');
  assertRejects(() => backend.permute0213({ x, out: backend.empty([2, 3, 4, 5], 'f16') }), 'permute0213', 'out', ShapeError);
  assertRejects(() => backend.permute0213({ x, out: backend.empty([2, 4, 3, 5], 'bf16') }), 'permute0213', 'out', DTypeError);
  assertRejects(() => backend.permute0213({ x: backend.empty([2, 3, 4, 5], 'u8'), out: backend.empty([2, 4, 3, 5], 'u8') }), 'permute0213', 'x', DTypeError);
  assertRejects(() => backend.permute0213({ x: backend.empty([6, 4, 5], 'f16'), out: backend.empty([2, 4, 3, 5], 'f16') }), 'permute0213', 'x', ShapeError);
});
