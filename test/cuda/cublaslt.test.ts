// The cuBLASLt binding's pure parts: status names and the error they produce, attribute value sizes,
// the epilogue values (the header composes them from bit flags), and decoding the heuristic's
// result records from raw bytes laid out as the C struct is.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ALGO_BYTES, CUBLAS_STATUS_NAMES, CublasLtEpilogue, HEURISTIC_RESULT_BYTES, attributeValue, checkCublas,
  cublasStatusName, decodeHeuristicResults,
} from '../../src/cuda/cublaslt.js';
import { CudaError } from '../../src/errors.js';

test('every cublasStatus_t has its header name', () => {
  assert.deepEqual(CUBLAS_STATUS_NAMES, {
    0: 'CUBLAS_STATUS_SUCCESS', 1: 'CUBLAS_STATUS_NOT_INITIALIZED', 3: 'CUBLAS_STATUS_ALLOC_FAILED',
    7: 'CUBLAS_STATUS_INVALID_VALUE', 8: 'CUBLAS_STATUS_ARCH_MISMATCH', 11: 'CUBLAS_STATUS_MAPPING_ERROR',
    13: 'CUBLAS_STATUS_EXECUTION_FAILED', 14: 'CUBLAS_STATUS_INTERNAL_ERROR', 15: 'CUBLAS_STATUS_NOT_SUPPORTED',
    16: 'CUBLAS_STATUS_LICENSE_ERROR',
  });
  assert.equal(cublasStatusName(99), 'CUBLAS_STATUS_UNKNOWN_99');
});

test('checkCublas passes success and throws a CudaError naming the API and the status', () => {
  checkCublas('cublasLtMatmul', 0);
  assert.throws(() => checkCublas('cublasLtMatmul', 15, 'f16 M=1'), (err: unknown) => {
    assert.ok(err instanceof CudaError);
    assert.equal(err.api, 'cublasLtMatmul');
    assert.equal(err.code, 15);
    assert.equal(err.errorName, 'CUBLAS_STATUS_NOT_SUPPORTED');
    assert.match(err.message, /cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED \(15\): f16 M=1/);
    return true;
  });
  assert.throws(() => checkCublas('cublasLtCreate', 3), /CUBLAS_STATUS_ALLOC_FAILED \(3\)/);
});

test('epilogue values are the header bit compositions', () => {
  const E = CublasLtEpilogue;
  assert.equal(E.RELU_BIAS, E.RELU | E.BIAS);
  assert.equal(E.GELU_BIAS, E.GELU | E.BIAS);
  assert.equal(E.GELU_AUX_BIAS, E.GELU | 128 | E.BIAS);
  assert.equal(E.DGELU, 64 | 128);
  assert.equal(E.DGELU_BGRAD, E.DGELU | 16);
  assert.deepEqual([E.DEFAULT, E.BGRADA, E.BGRADB], [1, 256, 512]);
});

test('attribute values have the byte size cuBLASLt checks against', () => {
  assert.equal(attributeValue('i32', -1).byteLength, 4);
  assert.equal(attributeValue('u32', 164).byteLength, 4);
  assert.equal(attributeValue('i64', 768).byteLength, 8);
  assert.equal(attributeValue('u64', 32 * 2 ** 20).byteLength, 8);
  const ptr = attributeValue('ptr', 0x7f00_1234_5600n);
  assert.equal(ptr.byteLength, 8);
  assert.equal(ptr[0], 0x7f00_1234_5600n);
  assert.equal(attributeValue('i32', 3)[0], 3);
});

test('heuristic results decode from the C layout (algo 64 B, size_t, int, float, int[4])', () => {
  assert.equal(ALGO_BYTES, 64);
  assert.equal(HEURISTIC_RESULT_BYTES, 96);
  const count = 3;
  const bytes = new Uint8Array(count * HEURISTIC_RESULT_BYTES + 40); // trailing slack is ignored
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < count; i++) {
    const base = i * HEURISTIC_RESULT_BYTES;
    for (let j = 0; j < 64; j++) bytes[base + j] = (i * 64 + j) & 0xff;
    view.setBigUint64(base + 64, BigInt(1024 * (i + 1)) + 2n ** 40n, true);
    view.setInt32(base + 72, i === 2 ? 15 : 0, true);
    view.setFloat32(base + 76, 0.5 + i, true);
    view.setInt32(base + 80, -1, true); // reserved, must not leak into the next record
  }
  const results = decodeHeuristicResults(bytes, count);
  assert.equal(results.length, 3);
  results.forEach((r, i) => {
    assert.equal(r.algo.length, 64);
    assert.equal(r.algo[0], (i * 64) & 0xff);
    assert.equal(r.algo[63], (i * 64 + 63) & 0xff);
    assert.equal(r.workspaceSize, 1024 * (i + 1) + 2 ** 40);
    assert.equal(r.state, i === 2 ? 15 : 0);
    assert.equal(r.wavesCount, 0.5 + i);
  });
  // The algo is a copy: changing the buffer afterwards does not change a decoded result.
  bytes[0] = 0xee;
  assert.equal(results[0]!.algo[0], 0);
});

test('heuristic decoding refuses counts beyond the buffer', () => {
  assert.throws(() => decodeHeuristicResults(new Uint8Array(95), 1), RangeError);
  assert.deepEqual(decodeHeuristicResults(new Uint8Array(0), 0), []);
});
