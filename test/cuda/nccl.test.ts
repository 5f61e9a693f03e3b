// The NCCL binding's pure parts (status names, the error a failed call produces, dtype mapping,
// every prototype parsed by koffi against the registered ncclUniqueId struct) and the missing-library
// path. Where libnccl loads (the GPU machine) it also checks the version and that a unique id is made.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import koffi from 'koffi';
import { findLibrary } from '../../src/cuda/library.js';
import {
  NCCL_PROTOTYPES, NCCL_RESULT_NAMES, NCCL_UNIQUE_ID_BYTES, NcclComm, NcclDataType, checkNccl, ncclAvailable, ncclDataType,
  ncclGetUniqueId, ncclResultName, ncclVersion, registerNcclTypes, validateUniqueId,
} from '../../src/cuda/nccl.js';
import { ArgumentError, CudaError, LibraryNotFoundError } from '../../src/errors.js';

test('every ncclResult_t has its header name', () => {
  assert.deepEqual(NCCL_RESULT_NAMES, {
    0: 'ncclSuccess', 1: 'ncclUnhandledCudaError', 2: 'ncclSystemError', 3: 'ncclInternalError',
    4: 'ncclInvalidArgument', 5: 'ncclInvalidUsage', 6: 'ncclRemoteError', 7: 'ncclInProgress',
  });
  assert.equal(ncclResultName(42), 'ncclUnknownResult_42');
});

test('checkNccl passes success and throws a CudaError naming the API, the result and advice', () => {
  checkNccl('ncclAllReduce', 0);
  assert.throws(() => checkNccl('ncclAllReduce', 5, '1024 f32'), (err: unknown) => {
    assert.ok(err instanceof CudaError);
    assert.equal(err.api, 'ncclAllReduce');
    assert.equal(err.code, 5);
    assert.equal(err.errorName, 'ncclInvalidUsage');
    assert.match(err.message, /ncclAllReduce failed: ncclInvalidUsage \(5\): 1024 f32; NCCL was used incorrectly/);
    return true;
  });
  assert.throws(() => checkNccl('ncclCommInitRank', 2), /ncclSystemError \(2\).*NCCL_SOCKET_IFNAME/);
});

test('dtypes map to ncclDataType_t', () => {
  assert.equal(ncclDataType('f32'), NcclDataType.float32);
  assert.equal(ncclDataType('f16'), 6);
  assert.equal(ncclDataType('bf16'), 9);
  assert.equal(ncclDataType('i32'), 2);
  assert.equal(ncclDataType('u8'), 1);
  assert.throws(() => ncclDataType('f64' as never), ArgumentError);
});

test('every prototype parses, with ncclUniqueId a 128-byte struct passed by value', () => {
  registerNcclTypes();
  registerNcclTypes(); // idempotent: koffi would refuse a second registration of the name
  assert.equal(koffi.sizeof('fuseformer_ncclUniqueId'), NCCL_UNIQUE_ID_BYTES);
  for (const [name, prototype] of Object.entries(NCCL_PROTOTYPES)) {
    assert.doesNotThrow(() => koffi.proto(prototype.replace(/^(\S+ \*?)(\w+)\(/, `$1fuseformer_test_${name}(`)), `prototype of ${name}`);
  }
});

test('a missing libnccl is a LibraryNotFoundError naming NCCL and what to install', () => {
  const nothing = { exists: () => false, list: () => [], load: (p: string) => { throw new Error(`cannot open ${p}`); } };
  assert.throws(() => findLibrary('nccl', { env: {}, loader: nothing, arch: 'x64' }), (err: unknown) => {
    assert.ok(err instanceof LibraryNotFoundError);
    assert.match(err.message, /NCCL, the NVIDIA collective communication library/);
    assert.match(err.message, /libnccl\.so\.2 through the dynamic loader/);
    assert.match(err.message, /Install NCCL 2/);
    return true;
  });
});

test('bad communicator arguments are refused before NCCL is called', () => {
  assert.throws(() => validateUniqueId(new Uint8Array(64)), /unique id must be 128 bytes, got 64/);
  assert.throws(() => NcclComm.initRank(new Uint8Array(128), 0, 0), /world size must be a positive integer, got 0/);
  assert.throws(() => NcclComm.initRank(new Uint8Array(128), 2, 2), /rank 2 is outside \[0, 2\)/);
});

test('with libnccl present: the version is 2.x and unique ids are 128 fresh bytes', { skip: !ncclAvailable() && 'libnccl.so.2 not found' }, () => {
  const v = ncclVersion();
  assert.ok(v >= 20000 && v < 30000, `NCCL version code ${v}`);
  const a = ncclGetUniqueId(), b = ncclGetUniqueId();
  assert.equal(a.byteLength, NCCL_UNIQUE_ID_BYTES);
  assert.notDeepEqual(a, b);
});
