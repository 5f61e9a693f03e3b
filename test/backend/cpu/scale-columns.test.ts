// scaleColumns on the CPU reference: columns times or over their scale, rounded to the dtype, in place
// too; mismatched shapes and dtypes are named.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { roundToDType } from '../../../src/dtype.js';

const b = new CpuBackend();

test('scaleColumns multiplies or divides each column by its scale, rounded to the dtype; in place too', () => {
  const values = [1, 2, 3, -4, 5.5, 6], scale = [2, 0.5, 3];
  for (const dtype of ['f32', 'bf16', 'f16'] as const) {
    const x = b.fromArray(values, [2, 3], dtype), s = b.fromArray(scale, [3], 'f32'), out = b.empty([2, 3], dtype);
    const xs = Array.from(b.download(x));
    b.scaleColumns({ x, scale: s, out });
    assert.deepEqual(Array.from(b.download(out)), xs.map((v, i) => roundToDType(Math.fround(v * scale[i % 3]!), dtype)), dtype);
    b.scaleColumns({ x, scale: s, out: x, divide: true });
    assert.deepEqual(Array.from(b.download(x)), xs.map((v, i) => roundToDType(Math.fround(v / scale[i % 3]!), dtype)), `${dtype} in place`);
  }
});

test('scaleColumns names mismatched shapes and dtypes', () => {
  const x = b.fromArray([1, 2, 3, 4], [2, 2], 'f32');
  assert.throws(() => b.scaleColumns({ x, scale: b.fromArray([1, 2, 3], [3], 'f32'), out: b.empty([2, 2], 'f32') }), /scaleColumns.*'scale'/);
  assert.throws(() => b.scaleColumns({ x, scale: b.fromArray([1, 2], [2], 'bf16'), out: b.empty([2, 2], 'f32') }), /scaleColumns.*'scale'/);
  assert.throws(() => b.scaleColumns({ x, scale: b.fromArray([1, 2], [2], 'f32'), out: b.empty([2, 2], 'bf16') }), /scaleColumns.*'out'/);
  assert.throws(() => b.scaleColumns({ x, scale: b.fromArray([1, 2], [2], 'f32'), out: b.empty([4, 1], 'f32') }), /scaleColumns.*'out'/);
});
