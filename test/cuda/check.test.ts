import assert from 'node:assert/strict';
import { test } from 'node:test';
import { check, statusError, type StatusLibrary } from '../../src/cuda/check.js';
import { CudaError, FuseformerError } from '../../src/errors.js';

const names: Record<number, string> = { 2: 'CUDA_ERROR_OUT_OF_MEMORY', 700: 'CUDA_ERROR_ILLEGAL_ADDRESS' };
const library: StatusLibrary = {
  nameOf: (status) => {
    const name = names[status];
    if (name === undefined) throw new Error('unknown code');
    return name;
  },
  adviceFor: (status) => (status === 700 ? 'the context is unusable' : ''),
};

test('check() passes status 0 and turns anything else into a CudaError naming the API and status', () => {
  assert.doesNotThrow(() => check(library, 'cuMemAlloc_v2', 0));
  assert.throws(() => check(library, 'cuMemAlloc_v2', 2, '1024 bytes'), (err: unknown) => {
    assert.ok(err instanceof CudaError);
    assert.ok(err instanceof FuseformerError);
    assert.equal(err.name, 'CudaError');
    assert.equal(err.api, 'cuMemAlloc_v2');
    assert.equal(err.code, 2);
    assert.equal(err.errorName, 'CUDA_ERROR_OUT_OF_MEMORY');
    assert.equal(err.message, 'cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): 1024 bytes');
    return true;
  });
});

test('advice is appended to the detail', () => {
  const err = statusError(library, 'cuStreamSynchronize', 700, 'stream 0x1');
  assert.equal(err.message, 'cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): stream 0x1; the context is unusable');
  assert.equal(statusError(library, 'cuCtxSynchronize', 700).message, 'cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): the context is unusable');
});

test('a status the library cannot name still gives an error', () => {
  const err = statusError(library, 'nvrtcCompileProgram', 12345);
  assert.equal(err.message, 'nvrtcCompileProgram failed: unknown status (12345)');
  assert.equal(err.errorName, 'unknown status');
});
