// Typed bindings of the CUDA driver API (libcuda), exactly the prototypes of CUDA 13's cuda.h.
//
// FFI conventions (koffi): every device pointer and opaque handle (CUcontext, CUstream, CUevent,
// CUmodule, CUfunction, CUgraph, CUgraphExec) is declared uint64_t, so it crosses as a bigint; an
// out-parameter is declared `void *` and receives a typed array, whose memory koffi passes directly.
// cuda.h maps several names to versioned symbols with macros (cuMemAlloc → cuMemAlloc_v2, ...): we
// bind the versioned symbol that the header's macro names, since that is what the driver exports for
// the current ABI.

import type { LibraryHandle } from 'koffi';
import { CudaError } from '../errors.js';
import { check, type StatusLibrary } from './check.js';
import { loadCudaLibrary } from './library.js';

export const CUDA_SUCCESS = 0;
export const CUDA_ERROR_OUT_OF_MEMORY = 2;
export const CUDA_ERROR_NOT_INITIALIZED = 3;
export const CUDA_ERROR_STUB_LIBRARY = 34;
export const CUDA_ERROR_INSUFFICIENT_DRIVER = 35;
export const CUDA_ERROR_NO_DEVICE = 100;
export const CUDA_ERROR_INVALID_IMAGE = 200;
export const CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
export const CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
export const CUDA_ERROR_NOT_READY = 600;
export const CUDA_ERROR_ILLEGAL_ADDRESS = 700;
export const CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;
export const CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803;
export const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900;
export const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901;

/** CUdevice_attribute values used by the runtime. */
export const DeviceAttribute = {
  MAX_THREADS_PER_BLOCK: 1,
  WARP_SIZE: 10,
  MULTIPROCESSOR_COUNT: 16,
  MEMORY_CLOCK_RATE_KHZ: 36,
  GLOBAL_MEMORY_BUS_WIDTH_BITS: 37,
  L2_CACHE_SIZE: 38,
  MAX_THREADS_PER_MULTIPROCESSOR: 39,
  COMPUTE_CAPABILITY_MAJOR: 75,
  COMPUTE_CAPABILITY_MINOR: 76,
  MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 81,
  MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 97,
} as const;
export type DeviceAttribute = (typeof DeviceAttribute)[keyof typeof DeviceAttribute];

/** CUfunction_attribute. */
export const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
/** A function's static __shared__ bytes. */
export const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
/** CUstream_flags: a stream that does not synchronize with the legacy NULL stream. */
export const CU_STREAM_NON_BLOCKING = 1;
/** CUevent_flags. */
export const CU_EVENT_DEFAULT = 0;
export const CU_EVENT_DISABLE_TIMING = 2;
/** cuEventRecordWithFlags: record as an event node of the graph being captured. */
export const CU_EVENT_RECORD_EXTERNAL = 1;

/** CUstreamCaptureMode. */
export const StreamCaptureMode = { global: 0, threadLocal: 1, relaxed: 2 } as const;
export type StreamCaptureMode = keyof typeof StreamCaptureMode;

/** CUstreamCaptureStatus. */
export const StreamCaptureStatus = { none: 0, active: 1, invalidated: 2 } as const;

const DRIVER_ADVICE: Readonly<Record<number, string>> = {
  [CUDA_ERROR_OUT_OF_MEMORY]: 'the GPU is out of memory',
  [CUDA_ERROR_STUB_LIBRARY]: 'the loaded libcuda is the CUDA toolkit\'s link stub, not the driver: remove the toolkit\'s stubs/ directory from LD_LIBRARY_PATH and FUSEFORMER_CUDA_PATH',
  [CUDA_ERROR_INSUFFICIENT_DRIVER]: 'the NVIDIA driver is older than this CUDA version requires: update the driver',
  [CUDA_ERROR_NO_DEVICE]: 'no CUDA GPU is visible to this process (check nvidia-smi and CUDA_VISIBLE_DEVICES)',
  [CUDA_ERROR_NO_BINARY_FOR_GPU]: 'the kernel image was compiled for a different GPU architecture',
  [CUDA_ERROR_UNSUPPORTED_PTX_VERSION]: 'the code was compiled by a newer CUDA than the driver supports: update the driver',
  [CUDA_ERROR_ILLEGAL_ADDRESS]: 'a kernel accessed invalid memory; the CUDA context is now unusable and the process must restart',
  [CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES]: 'the kernel needs more registers or shared memory than the block size allows',
  [CUDA_ERROR_SYSTEM_DRIVER_MISMATCH]: 'the libcuda user-space library does not match the loaded kernel driver',
  [CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED]: 'this operation is not allowed while a stream is captured into a CUDA graph (synchronization, host copies, allocation)',
  [CUDA_ERROR_STREAM_CAPTURE_INVALIDATED]: 'an operation that cannot be captured ran during CUDA graph capture, so the capture was abandoned',
};

/**
 * A 2-D tiled TMA descriptor (CUtensorMap, 128 bytes), encoded by the runtime at launch
 * (cuTensorMapEncodeTiled) and passed by value: the kernel declares `const __grid_constant__ TensorMap`
 * and hands its address to cp.async.bulk.tensor. Rows of `cols` 16-bit elements `rowStrideBytes`
 * apart; boxes of boxRows × boxCols (with the 128-byte swizzle, the default, boxCols·2 = 128 bytes and the
 * layout is mma-lib.ts's swizzled_offset<8> within each 1024-byte aligned group of 8 rows); reads outside the
 * tensor fill zeros.
 */
export interface TensorMap2d {
  readonly address: bigint;
  readonly dtype: 'bf16' | 'f16';
  readonly cols: number;
  readonly rows: number;
  readonly rowStrideBytes: number;
  readonly boxCols: number;
  readonly boxRows: number;
  /** Shared-memory layout of a box: the 128-byte swizzle (default; boxCols·2 must be 128) or none (rows as in memory). */
  readonly swizzle?: '128B' | 'none';
}

type Status = number;
type Handle = bigint;

/** The raw functions, typed to the prototypes below (koffi returns `any`). */
interface DriverFunctions {
  cuGetErrorName(error: number, pStr: [string | null]): Status;
  cuInit(flags: number): Status;
  cuDriverGetVersion(version: Int32Array): Status;
  cuDeviceGet(device: Int32Array, ordinal: number): Status;
  cuDeviceGetCount(count: Int32Array): Status;
  cuDeviceGetName(name: Uint8Array, len: number, dev: number): Status;
  cuDeviceGetAttribute(value: Int32Array, attrib: number, dev: number): Status;
  cuDeviceTotalMem_v2(bytes: BigUint64Array, dev: number): Status;
  cuDevicePrimaryCtxRetain(ctx: BigUint64Array, dev: number): Status;
  cuDevicePrimaryCtxRelease_v2(dev: number): Status;
  cuCtxSetCurrent(ctx: Handle): Status;
  cuCtxSynchronize(): Status;
  cuMemGetInfo_v2(free: BigUint64Array, total: BigUint64Array): Status;
  cuMemAlloc_v2(dptr: BigUint64Array, bytes: number): Status;
  cuMemFree_v2(dptr: Handle): Status;
  cuMemcpyHtoD_v2(dst: Handle, src: Uint8Array, bytes: number): Status;
  cuMemcpyDtoH_v2(dst: Uint8Array, src: Handle, bytes: number): Status;
  cuMemcpyHtoDAsync_v2(dst: Handle, src: Uint8Array | Handle, bytes: number, stream: Handle): Status;
  cuMemcpyDtoHAsync_v2(dst: Uint8Array | Handle, src: Handle, bytes: number, stream: Handle): Status;
  cuMemHostAlloc(pp: BigUint64Array, bytes: number, flags: number): Status;
  cuMemFreeHost(p: Handle): Status;
  cuMemcpyDtoDAsync_v2(dst: Handle, src: Handle, bytes: number, stream: Handle): Status;
  cuMemsetD8Async(dst: Handle, value: number, count: number, stream: Handle): Status;
  cuMemsetD32Async(dst: Handle, value: number, count: number, stream: Handle): Status;
  cuStreamCreate(stream: BigUint64Array, flags: number): Status;
  cuStreamDestroy_v2(stream: Handle): Status;
  cuStreamSynchronize(stream: Handle): Status;
  cuStreamIsCapturing(stream: Handle, status: Int32Array): Status;
  cuStreamWaitEvent(stream: Handle, event: Handle, flags: number): Status;
  cuEventCreate(event: BigUint64Array, flags: number): Status;
  cuEventRecord(event: Handle, stream: Handle): Status;
  cuEventRecordWithFlags(event: Handle, stream: Handle, flags: number): Status;
  cuEventSynchronize(event: Handle): Status;
  cuEventQuery(event: Handle): Status;
  cuEventElapsedTime(ms: Float32Array, start: Handle, end: Handle): Status;
  cuEventDestroy_v2(event: Handle): Status;
  cuModuleLoadData(module: BigUint64Array, image: Uint8Array): Status;
  cuModuleGetFunction(fn: BigUint64Array, module: Handle, name: string): Status;
  cuModuleUnload(module: Handle): Status;
  cuModuleGetGlobal_v2(dptr: BigUint64Array, bytes: BigUint64Array, module: Handle, name: string): Status;
  cuFuncSetAttribute(fn: Handle, attrib: number, value: number): Status;
  cuFuncGetAttribute(value: Int32Array, attrib: number, fn: Handle): Status;
  cuLaunchKernel(fn: Handle, gx: number, gy: number, gz: number, bx: number, by: number, bz: number,
    sharedBytes: number, stream: Handle, kernelParams: bigint, extra: bigint): Status;
  /** Absent from drivers before CUDA 12.0 (then no programmatic launches). */
  cuLaunchKernelEx?: (config: bigint, fn: Handle, kernelParams: bigint, extra: bigint) => Status;
  /** Absent from drivers before CUDA 12.0 (then no tensor-map kernels). */
  cuTensorMapEncodeTiled?: (tensorMap: bigint, dataType: number, rank: number, globalAddress: bigint, globalDim: BigUint64Array,
    globalStrides: BigUint64Array, boxDim: Uint32Array, elementStrides: Uint32Array, interleave: number, swizzle: number,
    l2Promotion: number, oobFill: number) => Status;
  cuStreamBeginCapture_v2(stream: Handle, mode: number): Status;
  cuStreamEndCapture(stream: Handle, graph: BigUint64Array): Status;
  cuGraphInstantiateWithFlags(exec: BigUint64Array, graph: Handle, flags: bigint): Status;
  cuGraphLaunch(exec: Handle, stream: Handle): Status;
  cuGraphExecDestroy(exec: Handle): Status;
  cuGraphDestroy(graph: Handle): Status;
}

// C prototypes as koffi parses them: handles and device pointers as uint64_t, out-params as void *.
function bindDriver(lib: LibraryHandle): DriverFunctions {
  const f = (prototype: string) => lib.func(prototype);
  return {
    cuGetErrorName: f('int cuGetErrorName(int error, _Out_ const char **pStr)'),
    cuInit: f('int cuInit(unsigned int Flags)'),
    cuDriverGetVersion: f('int cuDriverGetVersion(void *driverVersion)'),
    cuDeviceGet: f('int cuDeviceGet(void *device, int ordinal)'),
    cuDeviceGetCount: f('int cuDeviceGetCount(void *count)'),
    cuDeviceGetName: f('int cuDeviceGetName(void *name, int len, int dev)'),
    cuDeviceGetAttribute: f('int cuDeviceGetAttribute(void *pi, int attrib, int dev)'),
    cuDeviceTotalMem_v2: f('int cuDeviceTotalMem_v2(void *bytes, int dev)'),
    cuDevicePrimaryCtxRetain: f('int cuDevicePrimaryCtxRetain(void *pctx, int dev)'),
    cuDevicePrimaryCtxRelease_v2: f('int cuDevicePrimaryCtxRelease_v2(int dev)'),
    cuCtxSetCurrent: f('int cuCtxSetCurrent(uint64_t ctx)'),
    cuCtxSynchronize: f('int cuCtxSynchronize(void)'),
    cuMemGetInfo_v2: f('int cuMemGetInfo_v2(void *free, void *total)'),
    cuMemAlloc_v2: f('int cuMemAlloc_v2(void *dptr, size_t bytesize)'),
    cuMemFree_v2: f('int cuMemFree_v2(uint64_t dptr)'),
    cuMemcpyHtoD_v2: f('int cuMemcpyHtoD_v2(uint64_t dstDevice, const void *srcHost, size_t ByteCount)'),
    cuMemcpyDtoH_v2: f('int cuMemcpyDtoH_v2(void *dstHost, uint64_t srcDevice, size_t ByteCount)'),
    cuMemcpyHtoDAsync_v2: f('int cuMemcpyHtoDAsync_v2(uint64_t dstDevice, const void *srcHost, size_t ByteCount, uint64_t hStream)'),
    cuMemcpyDtoHAsync_v2: f('int cuMemcpyDtoHAsync_v2(void *dstHost, uint64_t srcDevice, size_t ByteCount, uint64_t hStream)'),
    cuMemHostAlloc: f('int cuMemHostAlloc(void *pp, size_t bytesize, unsigned int Flags)'),
    cuMemFreeHost: f('int cuMemFreeHost(uint64_t p)'),
    cuMemcpyDtoDAsync_v2: f('int cuMemcpyDtoDAsync_v2(uint64_t dstDevice, uint64_t srcDevice, size_t ByteCount, uint64_t hStream)'),
    cuMemsetD8Async: f('int cuMemsetD8Async(uint64_t dstDevice, uint8_t uc, size_t N, uint64_t hStream)'),
    cuMemsetD32Async: f('int cuMemsetD32Async(uint64_t dstDevice, uint32_t ui, size_t N, uint64_t hStream)'),
    cuStreamCreate: f('int cuStreamCreate(void *phStream, unsigned int Flags)'),
    cuStreamDestroy_v2: f('int cuStreamDestroy_v2(uint64_t hStream)'),
    cuStreamSynchronize: f('int cuStreamSynchronize(uint64_t hStream)'),
    cuStreamIsCapturing: f('int cuStreamIsCapturing(uint64_t hStream, void *captureStatus)'),
    cuStreamWaitEvent: f('int cuStreamWaitEvent(uint64_t hStream, uint64_t hEvent, unsigned int Flags)'),
    cuEventCreate: f('int cuEventCreate(void *phEvent, unsigned int Flags)'),
    cuEventRecord: f('int cuEventRecord(uint64_t hEvent, uint64_t hStream)'),
    cuEventRecordWithFlags: f('int cuEventRecordWithFlags(uint64_t hEvent, uint64_t hStream, unsigned int flags)'),
    cuEventSynchronize: f('int cuEventSynchronize(uint64_t hEvent)'),
    cuEventQuery: f('int cuEventQuery(uint64_t hEvent)'),
    // cuda.h 13 maps cuEventElapsedTime to cuEventElapsedTime_v2 (same arguments); drivers before
    // CUDA 12.8 export only the unversioned symbol.
    cuEventElapsedTime: firstExported(lib, [
      'int cuEventElapsedTime_v2(void *pMilliseconds, uint64_t hStart, uint64_t hEnd)',
      'int cuEventElapsedTime(void *pMilliseconds, uint64_t hStart, uint64_t hEnd)',
    ]),
    cuEventDestroy_v2: f('int cuEventDestroy_v2(uint64_t hEvent)'),
    cuModuleLoadData: f('int cuModuleLoadData(void *module, const void *image)'),
    cuModuleGetFunction: f('int cuModuleGetFunction(void *hfunc, uint64_t hmod, const char *name)'),
    cuModuleUnload: f('int cuModuleUnload(uint64_t hmod)'),
    cuModuleGetGlobal_v2: f('int cuModuleGetGlobal_v2(void *dptr, void *bytes, uint64_t hmod, const char *name)'),
    cuFuncSetAttribute: f('int cuFuncSetAttribute(uint64_t hfunc, int attrib, int value)'),
    cuFuncGetAttribute: f('int cuFuncGetAttribute(void *pi, int attrib, uint64_t hfunc)'),
    cuLaunchKernel: f('int cuLaunchKernel(uint64_t f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, ' +
      'unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, ' +
      'uint64_t hStream, uint64_t kernelParams, uint64_t extra)'),
    ...optionalExport(lib, 'cuLaunchKernelEx', 'int cuLaunchKernelEx(uint64_t config, uint64_t f, uint64_t kernelParams, uint64_t extra)'),
    ...optionalExport(lib, 'cuTensorMapEncodeTiled', 'int cuTensorMapEncodeTiled(uint64_t tensorMap, int tensorDataType, uint32_t tensorRank, ' +
      'uint64_t globalAddress, const void *globalDim, const void *globalStrides, const void *boxDim, const void *elementStrides, ' +
      'int interleave, int swizzle, int l2Promotion, int oobFill)'),
    cuStreamBeginCapture_v2: f('int cuStreamBeginCapture_v2(uint64_t hStream, int mode)'),
    cuStreamEndCapture: f('int cuStreamEndCapture(uint64_t hStream, void *phGraph)'),
    cuGraphInstantiateWithFlags: f('int cuGraphInstantiateWithFlags(void *phGraphExec, uint64_t hGraph, uint64_t flags)'),
    cuGraphLaunch: f('int cuGraphLaunch(uint64_t hGraphExec, uint64_t hStream)'),
    cuGraphExecDestroy: f('int cuGraphExecDestroy(uint64_t hGraphExec)'),
    cuGraphDestroy: f('int cuGraphDestroy(uint64_t hGraph)'),
  };
}

/** { name: function } when the library exports the symbol, else {}. */
function optionalExport(lib: LibraryHandle, name: string, prototype: string): Record<string, ReturnType<LibraryHandle['func']>> {
  try {
    return { [name]: lib.func(prototype) };
  } catch {
    return {};
  }
}

/** Binds the first prototype whose symbol the library exports. */
function firstExported(lib: LibraryHandle, prototypes: readonly string[]): ReturnType<LibraryHandle['func']> {
  let lastError: unknown = null;
  for (const prototype of prototypes) {
    try {
      return lib.func(prototype);
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError;
}

export interface MemoryInfo {
  freeBytes: number;
  totalBytes: number;
}

/** The CUDA driver API with every call checked. Obtain it with cudaDriver(). */
export class CudaDriver implements StatusLibrary {
  private readonly int32 = new Int32Array(1);
  private readonly handle = new BigUint64Array(1);
  private readonly handle2 = new BigUint64Array(1);
  private readonly float32 = new Float32Array(1);
  private initialized = false;

  constructor(private readonly fn: DriverFunctions, readonly libraryPath: string) {}

  nameOf = (status: number): string => {
    const out: [string | null] = [null];
    return this.fn.cuGetErrorName(status, out) === CUDA_SUCCESS && out[0] ? out[0] : 'unknown status';
  };

  adviceFor = (status: number): string => DRIVER_ADVICE[status] ?? '';

  private check(api: string, status: Status, detail = ''): void {
    check(this, api, status, detail);
  }

  /** cuInit(0), once per process. */
  init(): void {
    if (this.initialized) return;
    this.check('cuInit', this.fn.cuInit(0));
    this.initialized = true;
  }

  /** The driver's CUDA version as major·1000 + minor·10 (13000 for CUDA 13.0). */
  driverVersion(): number {
    this.check('cuDriverGetVersion', this.fn.cuDriverGetVersion(this.int32));
    return this.int32[0]!;
  }

  deviceCount(): number {
    this.check('cuDeviceGetCount', this.fn.cuDeviceGetCount(this.int32));
    return this.int32[0]!;
  }

  deviceGet(ordinal: number): number {
    this.check('cuDeviceGet', this.fn.cuDeviceGet(this.int32, ordinal), `ordinal ${ordinal}`);
    return this.int32[0]!;
  }

  deviceName(device: number): string {
    const buffer = new Uint8Array(256);
    this.check('cuDeviceGetName', this.fn.cuDeviceGetName(buffer, buffer.length, device));
    const end = buffer.indexOf(0);
    return Buffer.from(buffer.subarray(0, end < 0 ? buffer.length : end)).toString('utf8');
  }

  deviceAttribute(device: number, attribute: DeviceAttribute): number {
    this.check('cuDeviceGetAttribute', this.fn.cuDeviceGetAttribute(this.int32, attribute, device), `attribute ${attribute}`);
    return this.int32[0]!;
  }

  deviceTotalMemory(device: number): number {
    this.check('cuDeviceTotalMem_v2', this.fn.cuDeviceTotalMem_v2(this.handle, device));
    return Number(this.handle[0]!);
  }

  primaryContextRetain(device: number): bigint {
    this.check('cuDevicePrimaryCtxRetain', this.fn.cuDevicePrimaryCtxRetain(this.handle, device));
    return this.handle[0]!;
  }

  primaryContextRelease(device: number): void {
    this.check('cuDevicePrimaryCtxRelease_v2', this.fn.cuDevicePrimaryCtxRelease_v2(device));
  }

  contextSetCurrent(context: bigint): void {
    this.check('cuCtxSetCurrent', this.fn.cuCtxSetCurrent(context));
  }

  contextSynchronize(): void {
    this.check('cuCtxSynchronize', this.fn.cuCtxSynchronize());
  }

  memoryInfo(): MemoryInfo {
    this.check('cuMemGetInfo_v2', this.fn.cuMemGetInfo_v2(this.handle, this.handle2));
    return { freeBytes: Number(this.handle[0]!), totalBytes: Number(this.handle2[0]!) };
  }

  /** cuMemAlloc_v2; returns null when the device is out of memory, throws on any other error. */
  memAlloc(bytes: number): bigint | null {
    const status = this.fn.cuMemAlloc_v2(this.handle, bytes);
    if (status === CUDA_ERROR_OUT_OF_MEMORY) return null;
    this.check('cuMemAlloc_v2', status, `${bytes} bytes`);
    return this.handle[0]!;
  }

  memFree(ptr: bigint): void {
    this.check('cuMemFree_v2', this.fn.cuMemFree_v2(ptr));
  }

  /** Synchronous copy through the legacy NULL stream (not ordered with non-blocking streams). */
  memcpyHostToDevice(dst: bigint, src: Uint8Array): void {
    this.check('cuMemcpyHtoD_v2', this.fn.cuMemcpyHtoD_v2(dst, src, src.byteLength));
  }

  /** Synchronous copy through the legacy NULL stream (not ordered with non-blocking streams). */
  memcpyDeviceToHost(dst: Uint8Array, src: bigint): void {
    this.check('cuMemcpyDtoH_v2', this.fn.cuMemcpyDtoH_v2(dst, src, dst.byteLength));
  }

  /** Ordered on `stream`; `src` must stay untouched until the stream is synchronized. */
  memcpyHostToDeviceAsync(dst: bigint, src: Uint8Array, stream: bigint): void {
    this.check('cuMemcpyHtoDAsync_v2', this.fn.cuMemcpyHtoDAsync_v2(dst, src, src.byteLength, stream));
  }

  /** Ordered on `stream`; `dst` is complete only after the stream is synchronized. */
  memcpyDeviceToHostAsync(dst: Uint8Array, src: bigint, stream: bigint): void {
    this.check('cuMemcpyDtoHAsync_v2', this.fn.cuMemcpyDtoHAsync_v2(dst, src, dst.byteLength, stream));
  }

  /**
   * Ordered on `stream` into page-locked host memory at `dst` (memHostAlloc): the call returns at once
   * and the copy is done when the stream reaches it (into pageable memory the driver waits for it).
   */
  memcpyDeviceToPinnedAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.check('cuMemcpyDtoHAsync_v2', this.fn.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream));
  }

  /** Ordered on `stream` from page-locked host memory at `src` (memHostAlloc): returns at once; `src` must stay until the stream has reached the copy. */
  memcpyPinnedToDeviceAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.check('cuMemcpyHtoDAsync_v2', this.fn.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream));
  }

  /** cuMemHostAlloc: `bytes` of page-locked host memory; returns its address. */
  memHostAlloc(bytes: number): bigint {
    this.check('cuMemHostAlloc', this.fn.cuMemHostAlloc(this.handle, bytes, 0), `${bytes} bytes`);
    return this.handle[0]!;
  }

  memFreeHost(ptr: bigint): void {
    this.check('cuMemFreeHost', this.fn.cuMemFreeHost(ptr));
  }

  memcpyDeviceToDeviceAsync(dst: bigint, src: bigint, bytes: number, stream: bigint): void {
    this.check('cuMemcpyDtoDAsync_v2', this.fn.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream));
  }

  memsetD8Async(dst: bigint, value: number, count: number, stream: bigint): void {
    this.check('cuMemsetD8Async', this.fn.cuMemsetD8Async(dst, value, count, stream));
  }

  memsetD32Async(dst: bigint, value: number, count: number, stream: bigint): void {
    this.check('cuMemsetD32Async', this.fn.cuMemsetD32Async(dst, value >>> 0, count, stream));
  }

  streamCreate(flags: number): bigint {
    this.check('cuStreamCreate', this.fn.cuStreamCreate(this.handle, flags));
    return this.handle[0]!;
  }

  streamDestroy(stream: bigint): void {
    this.check('cuStreamDestroy_v2', this.fn.cuStreamDestroy_v2(stream));
  }

  streamSynchronize(stream: bigint): void {
    this.check('cuStreamSynchronize', this.fn.cuStreamSynchronize(stream));
  }

  /** A StreamCaptureStatus value. */
  streamCaptureStatus(stream: bigint): number {
    this.check('cuStreamIsCapturing', this.fn.cuStreamIsCapturing(stream, this.int32));
    return this.int32[0]!;
  }

  /**
   * Work issued on `stream` after this call waits for the event's most recent record (on any stream of
   * the context) to complete; the host does not wait. Inside a graph capture this is how a second stream
   * forks from, and joins back into, the capturing stream.
   */
  streamWaitEvent(stream: bigint, event: bigint): void {
    this.check('cuStreamWaitEvent', this.fn.cuStreamWaitEvent(stream, event, 0));
  }

  eventCreate(flags: number): bigint {
    this.check('cuEventCreate', this.fn.cuEventCreate(this.handle, flags));
    return this.handle[0]!;
  }

  eventRecord(event: bigint, stream: bigint): void {
    this.check('cuEventRecord', this.fn.cuEventRecord(event, stream));
  }

  /**
   * Records the event as a node of the graph being captured on `stream` (CU_EVENT_RECORD_EXTERNAL): each
   * replay of the graph records it again, so it can be timed. A plain record inside a capture only
   * orders streams and cannot be timed.
   */
  eventRecordExternal(event: bigint, stream: bigint): void {
    this.check('cuEventRecordWithFlags', this.fn.cuEventRecordWithFlags(event, stream, CU_EVENT_RECORD_EXTERNAL));
  }

  /** cuEventQuery: whether the work before the event's last record has finished (CUDA_ERROR_NOT_READY: not yet). */
  eventQuery(event: bigint): boolean {
    const status = this.fn.cuEventQuery(event);
    if (status === CUDA_ERROR_NOT_READY) return false;
    this.check('cuEventQuery', status);
    return true;
  }

  eventSynchronize(event: bigint): void {
    this.check('cuEventSynchronize', this.fn.cuEventSynchronize(event));
  }

  eventElapsedMs(start: bigint, end: bigint): number {
    this.check('cuEventElapsedTime', this.fn.cuEventElapsedTime(this.float32, start, end));
    return this.float32[0]!;
  }

  eventDestroy(event: bigint): void {
    this.check('cuEventDestroy_v2', this.fn.cuEventDestroy_v2(event));
  }

  moduleLoadData(image: Uint8Array): bigint {
    this.check('cuModuleLoadData', this.fn.cuModuleLoadData(this.handle, image), `${image.byteLength}-byte image`);
    return this.handle[0]!;
  }

  moduleGetFunction(module: bigint, name: string): bigint {
    this.check('cuModuleGetFunction', this.fn.cuModuleGetFunction(this.handle, module, name), `kernel '${name}'`);
    return this.handle[0]!;
  }

  /** The device address and size of a module's __device__ variable `name`. */
  moduleGetGlobal(module: bigint, name: string): { ptr: bigint; bytes: number } {
    this.check('cuModuleGetGlobal_v2', this.fn.cuModuleGetGlobal_v2(this.handle, this.handle2, module, name), `variable '${name}'`);
    return { ptr: this.handle[0]!, bytes: Number(this.handle2[0]!) };
  }

  moduleUnload(module: bigint): void {
    this.check('cuModuleUnload', this.fn.cuModuleUnload(module));
  }

  funcSetAttribute(fn: bigint, attribute: number, value: number): void {
    this.check('cuFuncSetAttribute', this.fn.cuFuncSetAttribute(fn, attribute, value), `attribute ${attribute} = ${value}`);
  }

  funcGetAttribute(fn: bigint, attribute: number): number {
    this.check('cuFuncGetAttribute', this.fn.cuFuncGetAttribute(this.int32, attribute, fn), `attribute ${attribute}`);
    return this.int32[0]!;
  }

  /** `kernelParams` is the address of a void*[] (see launch.ts); `extra` is always NULL. */
  launchKernel(fn: bigint, gx: number, gy: number, gz: number, bx: number, by: number, bz: number,
    sharedBytes: number, stream: bigint, kernelParams: bigint): number {
    return this.fn.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, sharedBytes, stream, kernelParams, 0n);
  }

  /**
   * Encodes a 2-D tiled tensor map (kernel.ts TensorMap2d) into the 128 bytes at native address `out`:
   * CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 / FLOAT16, no interleave, the 128-byte swizzle (or none), L2
   * promotion of 256 bytes, zero fill out of bounds.
   */
  encodeTensorMap2d(map: TensorMap2d, out: bigint): void {
    if (!this.fn.cuTensorMapEncodeTiled) throw new Error('this CUDA driver does not export cuTensorMapEncodeTiled (CUDA 12.0 or newer): tensor-map kernels cannot run');
    const dataType = map.dtype === 'bf16' ? 9 : 6;
    this.check('cuTensorMapEncodeTiled', this.fn.cuTensorMapEncodeTiled(out, dataType, 2, map.address,
      BigUint64Array.of(BigInt(map.cols), BigInt(map.rows)), BigUint64Array.of(BigInt(map.rowStrideBytes)),
      Uint32Array.of(map.boxCols, map.boxRows), Uint32Array.of(1, 1), 0, map.swizzle === 'none' ? 0 : 3, 3, 0),
    `${map.rows} × ${map.cols} ${map.dtype} at 0x${map.address.toString(16)}, row stride ${map.rowStrideBytes} B, box ${map.boxRows} × ${map.boxCols}`);
  }

  /** Whether cuLaunchKernelEx is there (programmatic dependent launches need it). */
  get hasLaunchKernelEx(): boolean { return this.fn.cuLaunchKernelEx !== undefined; }

  /** Whether cuTensorMapEncodeTiled is there (CUDA 12.0 or newer: tensor-map kernel arguments). */
  get hasTensorMapEncode(): boolean { return this.fn.cuTensorMapEncodeTiled !== undefined; }

  /** cuLaunchKernelEx with a CUlaunchConfig at `config` (launch.ts lays it out); `extra` is always NULL. */
  launchKernelEx(config: bigint, fn: bigint, kernelParams: bigint): number {
    if (!this.fn.cuLaunchKernelEx) throw new Error('internal: cuLaunchKernelEx is not exported by this driver');
    return this.fn.cuLaunchKernelEx(config, fn, kernelParams, 0n);
  }

  streamBeginCapture(stream: bigint, mode: StreamCaptureMode): void {
    this.check('cuStreamBeginCapture_v2', this.fn.cuStreamBeginCapture_v2(stream, StreamCaptureMode[mode]));
  }

  /** Ends capture; returns the graph, or throws (e.g. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
  streamEndCapture(stream: bigint): bigint {
    this.handle[0] = 0n;
    this.check('cuStreamEndCapture', this.fn.cuStreamEndCapture(stream, this.handle));
    return this.handle[0]!;
  }

  /** Ends capture without throwing, returning the graph handle if one was produced (0n otherwise). */
  streamEndCaptureQuietly(stream: bigint): bigint {
    this.handle[0] = 0n;
    this.fn.cuStreamEndCapture(stream, this.handle);
    return this.handle[0]!;
  }

  graphInstantiate(graph: bigint): bigint {
    this.check('cuGraphInstantiateWithFlags', this.fn.cuGraphInstantiateWithFlags(this.handle, graph, 0n));
    return this.handle[0]!;
  }

  graphLaunch(exec: bigint, stream: bigint): void {
    this.check('cuGraphLaunch', this.fn.cuGraphLaunch(exec, stream));
  }

  graphExecDestroy(exec: bigint): void {
    this.check('cuGraphExecDestroy', this.fn.cuGraphExecDestroy(exec));
  }

  graphDestroy(graph: bigint): void {
    this.check('cuGraphDestroy', this.fn.cuGraphDestroy(graph));
  }
}

let driverInstance: CudaDriver | null = null;

/** The process-wide driver binding (libcuda loaded and cuInit called on first use). */
export function cudaDriver(): CudaDriver {
  if (driverInstance === null) {
    const library = loadCudaLibrary('cuda');
    const driver = new CudaDriver(bindDriver(library.handle), library.path);
    driver.init();
    driverInstance = driver;
  }
  return driverInstance;
}

/** True if `err` is a CudaError carrying the given driver status. */
export function isCudaStatus(err: unknown, status: number): boolean {
  return err instanceof CudaError && err.code === status;
}
