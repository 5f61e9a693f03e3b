// NCCL bindings (libnccl.so.2): communicator creation from a unique id, the collectives we use
// (all-reduce, all-gather, reduce-scatter, broadcast) and group calls. NCCL is the engine: we write no
// collectives of our own. Thin and typed; every call goes through checkNccl() (check.ts), which throws
// a CudaError naming the API and the ncclResult_t name (plus NCCL's own last-error text when it has one).
//
// Prototypes and enum values are those of nccl.h (NCCL 2.18–2.28; unchanged across 2.x for what we bind):
//   ncclResult_t  ncclGetUniqueId(ncclUniqueId *uniqueId);
//   ncclResult_t  ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
//   ncclResult_t  ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
//   ncclResult_t  ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t, ncclComm_t, cudaStream_t);
//   ncclResult_t  ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
//   ncclResult_t  ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t, int root, ncclComm_t, cudaStream_t);
//   ncclResult_t  ncclGroupStart(void); ncclGroupEnd(void);
//   ncclResult_t  ncclCommDestroy(ncclComm_t); ncclCommAbort(ncclComm_t);
//   const char   *ncclGetErrorString(ncclResult_t); const char *ncclGetLastError(ncclComm_t);
//   ncclResult_t  ncclGetVersion(int *version);
//
// FFI conventions as in driver.ts: device pointers, the communicator and the stream (a CUstream from
// the driver API is a cudaStream_t) cross as uint64_t / bigint. ncclUniqueId is `struct { char
// internal[128]; }` passed BY VALUE to ncclCommInitRank (on x86-64 and arm64 a 128-byte struct goes in
// memory), so it is declared as a koffi struct of 128 bytes; ncclGetUniqueId writes one through a pointer.

import koffi from 'koffi';
import type { LibraryHandle } from 'koffi';
import { ArgumentError } from '../errors.js';
import type { DType } from '../dtype.js';
import { check } from './check.js';
import type { StatusLibrary } from './check.js';
import { loadCudaLibrary } from './library.js';

/** Bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES). */
export const NCCL_UNIQUE_ID_BYTES = 128;

/** ncclResult_t. */
export const NCCL_RESULT_NAMES: Readonly<Record<number, string>> = {
  0: 'ncclSuccess',
  1: 'ncclUnhandledCudaError',
  2: 'ncclSystemError',
  3: 'ncclInternalError',
  4: 'ncclInvalidArgument',
  5: 'ncclInvalidUsage',
  6: 'ncclRemoteError',
  7: 'ncclInProgress',
};

const NCCL_ADVICE: Readonly<Record<number, string>> = {
  1: 'a CUDA call inside NCCL failed (is the right device current? is the stream valid?)',
  2: 'a system call failed: check the network interfaces (NCCL_SOCKET_IFNAME) and shared memory (/dev/shm size in containers)',
  4: 'an argument was invalid: a null or misaligned buffer, a count or root out of range',
  5: 'NCCL was used incorrectly: mismatched collectives across ranks, or a communicator used after destroy',
  6: 'another rank failed or the network between ranks broke',
};

/** ncclDataType_t. */
export const NcclDataType = { int8: 0, uint8: 1, int32: 2, uint32: 3, int64: 4, uint64: 5, float16: 6, float32: 7, float64: 8, bfloat16: 9 } as const;

/** ncclRedOp_t (the built-in ones). */
export const NcclRedOp = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 } as const;
export type NcclReduction = keyof typeof NcclRedOp;

/** The ncclDataType_t of one of our dtypes. */
export function ncclDataType(dtype: DType): number {
  switch (dtype) {
    case 'f32': return NcclDataType.float32;
    case 'f16': return NcclDataType.float16;
    case 'bf16': return NcclDataType.bfloat16;
    case 'i32': return NcclDataType.int32;
    case 'i8': return NcclDataType.int8;
    case 'u8': return NcclDataType.uint8;
    default: throw new ArgumentError(`NCCL: no ncclDataType_t for dtype '${String(dtype)}'`);
  }
}

export function ncclResultName(status: number): string {
  return NCCL_RESULT_NAMES[status] ?? `ncclUnknownResult_${status}`;
}

const NCCL: StatusLibrary = {
  nameOf: ncclResultName,
  adviceFor: (status) => NCCL_ADVICE[status] ?? '',
};

/** Throws CudaError(api, status, 'nccl...') unless status is ncclSuccess. */
export function checkNccl(api: string, status: number, detail = ''): void {
  check(NCCL, api, status, detail);
}

type Status = number;
type Handle = bigint;

export interface NcclFunctions {
  ncclGetVersion(version: Int32Array): Status;
  ncclGetUniqueId(id: Uint8Array): Status;
  ncclCommInitRank(comm: BigUint64Array, nranks: number, id: { internal: Uint8Array }, rank: number): Status;
  ncclCommDestroy(comm: Handle): Status;
  ncclCommAbort(comm: Handle): Status;
  ncclCommCount(comm: Handle, count: Int32Array): Status;
  ncclCommUserRank(comm: Handle, rank: Int32Array): Status;
  ncclAllReduce(send: Handle, recv: Handle, count: number, dtype: number, op: number, comm: Handle, stream: Handle): Status;
  ncclAllGather(send: Handle, recv: Handle, sendCount: number, dtype: number, comm: Handle, stream: Handle): Status;
  ncclReduceScatter(send: Handle, recv: Handle, recvCount: number, dtype: number, op: number, comm: Handle, stream: Handle): Status;
  ncclBroadcast(send: Handle, recv: Handle, count: number, dtype: number, root: number, comm: Handle, stream: Handle): Status;
  ncclGroupStart(): Status;
  ncclGroupEnd(): Status;
  ncclGetErrorString(status: number): string | null;
  ncclGetLastError(comm: Handle): string | null;
}

/** The C prototypes as koffi parses them (uniqueId by value as the struct type registered below). */
export const NCCL_PROTOTYPES: Readonly<Record<keyof NcclFunctions, string>> = {
  ncclGetVersion: 'int ncclGetVersion(void *version)',
  ncclGetUniqueId: 'int ncclGetUniqueId(void *uniqueId)',
  ncclCommInitRank: 'int ncclCommInitRank(void *comm, int nranks, fuseformer_ncclUniqueId commId, int rank)',
  ncclCommDestroy: 'int ncclCommDestroy(uint64_t comm)',
  ncclCommAbort: 'int ncclCommAbort(uint64_t comm)',
  ncclCommCount: 'int ncclCommCount(uint64_t comm, void *count)',
  ncclCommUserRank: 'int ncclCommUserRank(uint64_t comm, void *rank)',
  ncclAllReduce: 'int ncclAllReduce(uint64_t sendbuff, uint64_t recvbuff, size_t count, int datatype, int op, uint64_t comm, uint64_t stream)',
  ncclAllGather: 'int ncclAllGather(uint64_t sendbuff, uint64_t recvbuff, size_t sendcount, int datatype, uint64_t comm, uint64_t stream)',
  ncclReduceScatter: 'int ncclReduceScatter(uint64_t sendbuff, uint64_t recvbuff, size_t recvcount, int datatype, int op, uint64_t comm, uint64_t stream)',
  ncclBroadcast: 'int ncclBroadcast(uint64_t sendbuff, uint64_t recvbuff, size_t count, int datatype, int root, uint64_t comm, uint64_t stream)',
  ncclGroupStart: 'int ncclGroupStart(void)',
  ncclGroupEnd: 'int ncclGroupEnd(void)',
  ncclGetErrorString: 'const char *ncclGetErrorString(int result)',
  ncclGetLastError: 'const char *ncclGetLastError(uint64_t comm)',
};

let uniqueIdType: ReturnType<typeof koffi.struct> | undefined;

/** Registers ncclUniqueId with koffi (named types are registered once per process). */
export function registerNcclTypes(): void {
  uniqueIdType ??= koffi.struct('fuseformer_ncclUniqueId', { internal: koffi.array('uint8_t', NCCL_UNIQUE_ID_BYTES, 'Typed') });
}

/** Binds every function of NCCL_PROTOTYPES in `lib`. */
export function bindNccl(lib: LibraryHandle): NcclFunctions {
  registerNcclTypes();
  const entries = Object.entries(NCCL_PROTOTYPES).map(([name, prototype]) => [name, lib.func(prototype)]);
  return Object.fromEntries(entries) as NcclFunctions;
}

let bound: NcclFunctions | undefined;

/** The bound library; throws LibraryNotFoundError naming every place searched when libnccl is absent. */
function nccl(): NcclFunctions {
  bound ??= bindNccl(loadCudaLibrary('nccl').handle);
  return bound;
}

/** True when libnccl loads in this process (for tests and `fuseformer info`). */
export function ncclAvailable(): boolean {
  try {
    nccl();
    return true;
  } catch {
    return false;
  }
}

/** NCCL's version as major·10000 + minor·100 + patch (e.g. 22805 for 2.28.5). */
export function ncclVersion(): number {
  const v = new Int32Array(1);
  checkNccl('ncclGetVersion', nccl().ncclGetVersion(v));
  return v[0]!;
}

/** A fresh unique id (rank 0 makes it and sends its bytes to every other rank). */
export function ncclGetUniqueId(): Uint8Array {
  const id = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
  checkNccl('ncclGetUniqueId', nccl().ncclGetUniqueId(id));
  return id;
}

/** Checks that `id` has the size of an ncclUniqueId. */
export function validateUniqueId(id: Uint8Array): void {
  if (id.byteLength !== NCCL_UNIQUE_ID_BYTES) throw new ArgumentError(`NCCL unique id must be ${NCCL_UNIQUE_ID_BYTES} bytes, got ${id.byteLength}`);
}

/** A communicator of one rank; its collectives are queued on the given stream. */
export class NcclComm {
  private destroyed = false;

  private constructor(readonly handle: Handle, readonly rank: number, readonly worldSize: number) {}

  /**
   * ncclCommInitRank: every rank calls it with the same id and world size (it blocks until all have
   * joined). The CUDA context of the rank's device must be current on the calling thread.
   */
  static initRank(id: Uint8Array, worldSize: number, rank: number): NcclComm {
    validateUniqueId(id);
    if (!Number.isInteger(worldSize) || worldSize < 1) throw new ArgumentError(`NCCL: world size must be a positive integer, got ${worldSize}`);
    if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) throw new ArgumentError(`NCCL: rank ${rank} is outside [0, ${worldSize})`);
    const out = new BigUint64Array(1);
    checkNccl('ncclCommInitRank', nccl().ncclCommInitRank(out, worldSize, { internal: id }, rank), `rank ${rank} of ${worldSize}`);
    return new NcclComm(BigInt(out[0]!), rank, worldSize);
  }

  private call(api: string, status: number, detail: string): void {
    if (status === 0) return;
    let last = '';
    try {
      last = nccl().ncclGetLastError(this.handle) ?? '';
    } catch {
      last = '';
    }
    checkNccl(api, status, [detail, last].filter((s) => s.length > 0).join('; '));
  }

  private live(api: string): Handle {
    if (this.destroyed) throw new ArgumentError(`${api}: the NCCL communicator of rank ${this.rank} was destroyed`);
    return this.handle;
  }

  /** recv[i] = op over ranks of send[i], `count` elements (send may equal recv: in place). */
  allReduce(send: bigint, recv: bigint, count: number, dtype: DType, op: NcclReduction, stream: bigint): void {
    this.call('ncclAllReduce', nccl().ncclAllReduce(send, recv, count, ncclDataType(dtype), NcclRedOp[op], this.live('ncclAllReduce'), stream), `${count} ${dtype}`);
  }

  /** recv [worldSize·sendCount] = concatenation of every rank's send [sendCount], in rank order. */
  allGather(send: bigint, recv: bigint, sendCount: number, dtype: DType, stream: bigint): void {
    this.call('ncclAllGather', nccl().ncclAllGather(send, recv, sendCount, ncclDataType(dtype), this.live('ncclAllGather'), stream), `${sendCount} ${dtype} per rank`);
  }

  /** recv [recvCount] = op over ranks of send[rank·recvCount ..+recvCount]. */
  reduceScatter(send: bigint, recv: bigint, recvCount: number, dtype: DType, op: NcclReduction, stream: bigint): void {
    this.call('ncclReduceScatter', nccl().ncclReduceScatter(send, recv, recvCount, ncclDataType(dtype), NcclRedOp[op], this.live('ncclReduceScatter'), stream), `${recvCount} ${dtype} per rank`);
  }

  /** recv on every rank = send of `root`. */
  broadcast(send: bigint, recv: bigint, count: number, dtype: DType, root: number, stream: bigint): void {
    this.call('ncclBroadcast', nccl().ncclBroadcast(send, recv, count, ncclDataType(dtype), root, this.live('ncclBroadcast'), stream), `${count} ${dtype} from rank ${root}`);
  }

  /** Frees the communicator (after its queued work completes). */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    checkNccl('ncclCommDestroy', nccl().ncclCommDestroy(this.handle));
  }

  /** Aborts in-flight operations and frees the communicator (when a peer has died). */
  abort(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    checkNccl('ncclCommAbort', nccl().ncclCommAbort(this.handle));
  }
}

/**
 * Runs `fn` between ncclGroupStart and ncclGroupEnd: the collectives it issues are fused into one
 * launch (and several communicators driven by one thread cannot deadlock). ncclGroupEnd runs even
 * when `fn` throws, so the group nesting stays balanced.
 */
export function ncclGroup<R>(fn: () => R): R {
  checkNccl('ncclGroupStart', nccl().ncclGroupStart());
  let result: R;
  try {
    result = fn();
  } finally {
    checkNccl('ncclGroupEnd', nccl().ncclGroupEnd());
  }
  return result;
}
