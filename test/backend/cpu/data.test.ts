import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError, ShapeError } from '../../../src/errors.js';
import { assertRejects } from './helpers.js';

const backend = new CpuBackend();

describe('copy with dtype conversion', () => {
  test('f32 → f16 rounds; f16 → f32 is exact', () => {
    const src = backend.fromArray([0.1, 1 / 3, 70000], [3], 'f32');
    const half = backend.empty([3], 'f16');
    backend.copy(src, half);
    assert.deepEqual(Array.from(backend.download(half)), [0.0999755859375, 0.333251953125, Infinity]);
    const back = backend.empty([3], 'f32');
    backend.copy(half, back);
    assert.deepEqual(Array.from(backend.download(back)), [0.0999755859375, 0.333251953125, Infinity]);
  });

  test('shapes may differ when the element counts agree', () => {
    const src = backend.fromArray([1, 2, 3, 4, 5, 6], [2, 3], 'bf16');
    const dst = backend.empty([3, 2], 'f32');
    backend.copy(src, dst);
    assert.deepEqual(Array.from(backend.download(dst)), [1, 2, 3, 4, 5, 6]);
    assertRejects(() => backend.copy(src, backend.empty([5], 'f32')), 'copy', 'dst', ShapeError);
  });

  test('integer → float rounds to the float dtype; float → integer truncates toward zero', () => {
    const ints = backend.fromArray([257, -3], [2], 'i32');
    const bf = backend.empty([2], 'bf16');
    backend.copy(ints, bf);
    assert.deepEqual(Array.from(backend.download(bf)), [256, -3]);
    const floats = backend.fromArray([2.7, -2.7, 0.5], [3], 'f32');
    const out = backend.empty([3], 'i8');
    backend.copy(floats, out);
    assert.deepEqual(Array.from(backend.download(out)), [2, -2, 0]);
  });

  test('a value that does not fit the integer dtype is an error', () => {
    const big = backend.fromArray([300], [1], 'i32');
    assertRejects(() => backend.copy(big, backend.empty([1], 'u8')), 'copy', 'src', ArgumentError);
    const nan = backend.fromArray([NaN], [1], 'f32');
    assertRejects(() => backend.copy(nan, backend.empty([1], 'i32')), 'copy', 'src', ArgumentError);
  });

  test('overlapping views copy as if through a temporary', () => {
    const base = backend.fromArray([1, 2, 3, 4, 5, 0], [6], 'f32');
    backend.copy(backend.view(base, 0, [5]), backend.view(base, 1, [5]));
    assert.deepEqual(Array.from(backend.download(base)), [1, 1, 2, 3, 4, 5]);
  });
});

describe('fill and upload', () => {
  test('fill rounds to the dtype and checks integer ranges', () => {
    const t = backend.empty([2], 'f16');
    backend.fill(t, 0.1);
    assert.deepEqual(Array.from(backend.download(t)), [0.0999755859375, 0.0999755859375]);
    const u = backend.empty([2], 'u8');
    backend.fill(u, 205);
    assert.deepEqual(Array.from(backend.download(u)), [205, 205]);
    assertRejects(() => backend.fill(u, 256), 'fill', 'value', ArgumentError);
    assertRejects(() => backend.fill(u, 1.5), 'fill', 'value', ArgumentError);
  });

  test('upload overwrites in place and rounds', () => {
    const t = backend.empty([2], 'bf16');
    backend.upload(t, new Float32Array([1 / 3, 2]));
    assert.deepEqual(Array.from(backend.download(t)), [0.333984375, 2]);
    assertRejects(() => backend.upload(t, [1, 2, 3]), 'upload', 'values', ShapeError);
  });

  test('download returns a copy, not a window into the storage', () => {
    const t = backend.fromArray([1, 2], [2], 'f32');
    const host = backend.download(t);
    host[0] = 42;
    assert.equal(backend.download(t)[0], 1);
  });
});
