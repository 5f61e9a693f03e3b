// gatherColumns on the CPU reference: x's columns in the index's order (a permutation, and repeats to fewer
// columns), in every float dtype; an index outside x's columns and mismatched shapes or dtypes are
// rejected naming the argument.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';

const b = new CpuBackend();

test('gatherColumns reads x\'s columns in the index\'s order', () => {
  for (const dtype of ['f32', 'bf16', 'f16'] as const) {
    const x = b.fromArray([1, 2, 3, 4, 5, 6, 7, 8], [2, 4], dtype);
    const out = b.empty([2, 4], dtype);
    b.gatherColumns({ x, index: b.fromArray([2, 0, 3, 1], [4], 'i32'), out });
    assert.deepEqual(Array.from(b.download(out)), [3, 1, 4, 2, 7, 5, 8, 6], dtype);
    const fewer = b.empty([2, 3], dtype);
    b.gatherColumns({ x, index: b.fromArray([3, 3, 0], [3], 'i32'), out: fewer });
    assert.deepEqual(Array.from(b.download(fewer)), [4, 4, 1, 8, 8, 5], dtype);
  }
});

test('gatherColumns rejects an index outside x, mismatched shapes and dtypes', () => {
  const x = b.fromArray([1, 2, 3, 4, 5, 6], [2, 3], 'f32');
  assert.throws(() => b.gatherColumns({ x, index: b.fromArray([0, 3], [2], 'i32'), out: b.empty([2, 2], 'f32') }), /gatherColumns: index\[1\] = 3 is outside the 3 columns of x/);
  assert.throws(() => b.gatherColumns({ x, index: b.fromArray([0, 1], [2], 'i32'), out: b.empty([3, 2], 'f32') }), /gatherColumns.*out/);
  assert.throws(() => b.gatherColumns({ x, index: b.fromArray([0, 1], [2], 'f32'), out: b.empty([2, 2], 'f32') }), /gatherColumns.*index/);
  assert.throws(() => b.gatherColumns({ x, index: b.fromArray([0, 1], [2], 'i32'), out: b.empty([2, 2], 'bf16') }), /gatherColumns.*(out|dtype)/);
});
