import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend, CpuTensor } from '../../../src/backend/cpu/index.js';
import { ArgumentError, LayoutError, ShapeError } from '../../../src/errors.js';
import { Tensor } from '../../../src/tensor.js';
import { assertRejects } from './helpers.js';

const backend = new CpuBackend();

describe('CpuTensor storage and rounding', () => {
  test('f32 values round-trip through fromArray and download', () => {
    const t = backend.fromArray([1.5, -2.25, 3e-3, 1e30], [2, 2], 'f32');
    assert.deepEqual(Array.from(backend.download(t)), [1.5, -2.25, Math.fround(3e-3), Math.fround(1e30)]);
    assert.ok(backend.download(t) instanceof Float32Array);
  });

  test('f16 tensors hold f16 values: 1/3, overflow to infinity, underflow to zero', () => {
    const t = backend.fromArray([1 / 3, 65520, 1e-8, 2049, -0.1], [5], 'f16');
    // Hand-computed: 1/3 = 1365/4096 at f16's 2^-12 spacing; 65520 is the tie above 65504 and rounds
    // to even (infinity); 1e-8 is below half the smallest subnormal (2^-24); 2049 ties down to 2048.
    assert.deepEqual(Array.from(backend.download(t)), [0.333251953125, Infinity, 0, 2048, -0.0999755859375]);
  });

  test('bf16 tensors hold bf16 values', () => {
    const t = backend.fromArray([1 / 3, 257, 1e38], [3], 'bf16');
    // 1/3 = 171/512 at bf16's 2^-9 spacing; 257 ties to even (256); 1e38 keeps 8 significant bits.
    const out = backend.download(t);
    assert.deepEqual(Array.from(out.subarray(0, 2)), [0.333984375, 256]);
    assert.ok(Math.abs(out[2]! - 1e38) / 1e38 < 2 ** -8 && out[2] !== Math.fround(1e38));
  });

  test('integer dtypes use integer storage and reject non-integers and out-of-range values', () => {
    assert.ok(backend.download(backend.fromArray([1, -2, 3], [3], 'i32')) instanceof Int32Array);
    assert.deepEqual(Array.from(backend.download(backend.fromArray([-128, 127], [2], 'i8'))), [-128, 127]);
    assert.deepEqual(Array.from(backend.download(backend.fromArray([0, 255], [2], 'u8'))), [0, 255]);
    assertRejects(() => backend.fromArray([1.5], [1], 'i32'), 'fromArray', 'values', ArgumentError);
    assertRejects(() => backend.fromArray([256], [1], 'u8'), 'fromArray', 'values', ArgumentError);
    assertRejects(() => backend.fromArray([-129], [1], 'i8'), 'fromArray', 'values', ArgumentError);
  });

  test('fromArray rejects a value count that does not match the shape', () => {
    assertRejects(() => backend.fromArray([1, 2, 3], [2, 2], 'f32'), 'fromArray', 'values', ShapeError);
  });

  test('empty tensors are zero-filled with the requested shape and dtype', () => {
    const t = backend.empty([2, 3], 'bf16');
    assert.deepEqual(t.shape, [2, 3]);
    assert.equal(t.dtype, 'bf16');
    assert.deepEqual(Array.from(backend.download(t)), [0, 0, 0, 0, 0, 0]);
  });

  test('the constructor rejects storage of the wrong type and strides past the end', () => {
    assert.throws(() => new CpuTensor([2], 'f32', new Int32Array(2)), LayoutError);
    assert.throws(() => new CpuTensor([2, 3], 'f32', new Float32Array(6), { strides: [1, 3] }), ShapeError);
    assert.throws(() => new CpuTensor([2], 'u8', new Uint8Array(3), { offset: 2 }), ShapeError);
  });
});

describe('views', () => {
  test('a view shares storage with its base in both directions', () => {
    const base = backend.fromArray([0, 1, 2, 3, 4, 5, 6, 7], [8], 'f32');
    const v = backend.view(base, 2, [2, 2]);
    assert.deepEqual(Array.from(backend.download(v)), [2, 3, 4, 5]);
    backend.fill(v, 9);
    assert.deepEqual(Array.from(backend.download(base)), [0, 1, 9, 9, 9, 9, 6, 7]);
    backend.upload(base, [10, 11, 12, 13, 14, 15, 16, 17]);
    assert.deepEqual(Array.from(backend.download(v)), [12, 13, 14, 15]);
  });

  test('views of views compose their offsets', () => {
    const base = backend.fromArray([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [10], 'i32');
    const inner = backend.view(backend.view(base, 3, [6]), 2, [3]);
    assert.deepEqual(Array.from(backend.download(inner)), [5, 6, 7]);
  });

  test('a view may not reach past its base', () => {
    const base = backend.empty([2, 3], 'f16');
    assertRejects(() => backend.view(base, 4, [3]), 'view', 't', ShapeError);
    assertRejects(() => backend.view(base, -1, [1]), 'view', 'offset', ArgumentError);
  });

  test('ops reject a non-contiguous tensor, naming the op and the argument', () => {
    const storage = new Float32Array(6);
    const transposed = new CpuTensor([3, 2], 'f32', storage, { strides: [1, 3] });
    assert.equal(transposed.isContiguous, false);
    assertRejects(() => backend.download(transposed), 'download', 't', LayoutError);
    assertRejects(() => backend.view(transposed, 0, [2]), 'view', 't', LayoutError);
  });

  test('ops reject a tensor of another backend', () => {
    class ForeignTensor extends Tensor {}
    const foreign = new ForeignTensor('cuda', [2], 'f32');
    assertRejects(() => backend.fill(foreign, 1), 'fill', 't', LayoutError);
    assert.throws(() => backend.free(foreign), LayoutError);
  });
});
