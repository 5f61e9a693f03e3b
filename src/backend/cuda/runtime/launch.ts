// Kernel launches: typed arguments packed into the `void **kernelParams` that cuLaunchKernel reads.
//
// Layout: cuLaunchKernel takes an array of pointers, entry i pointing at the value of parameter i;
// the driver copies sizeof(parameter i) bytes from there when the call is made (so the memory can be
// reused for the next launch at once, also during graph capture). Every KernelArg is at most 8 bytes,
// so argument i lives in an 8-byte slot at offset 8·i of one native buffer — aligned for every type —
// and the pointer array after the slots is written once, at construction. A launch then only stores
// the values: no allocation, a few DataView writes and one FFI call (~0.3 µs measured against a C stub).
//
// Programmatic dependent launch (Hopper; `programmaticLaunch` on): a kernel whose source declares
// gridDependencyWait — it runs griddepcontrol.wait (device-lib.ts GRID_DEPENDENCY_WAIT) before it reads
// anything an earlier kernel wrote — is launched through cuLaunchKernelEx with the programmatic stream
// serialization attribute. It may then start while the kernel before it finishes (once that one's
// blocks have all started and triggered, GRID_DEPENDENCY_TRIGGER, or exited): its blocks get resident
// and do what does not depend on the earlier kernel (prefetch weights) while the other drains. Stream
// capture turns the attribute into programmatic graph edges, so replayed decode steps keep the overlap.
// The CUlaunchConfig and its one attribute live in one native buffer written per launch:
//   CUlaunchConfig (56 B): grid x,y,z, block x,y,z, sharedMemBytes (u32 each, 0–27), hStream (u64 at 32),
//     attrs (pointer at 40), numAttrs (u32 at 48); CUlaunchAttribute (72 B) at 64: id (u32), 4 bytes of
//     pad, a 64-byte value union whose first int is programmaticStreamSerializationAllowed.

import koffi from 'koffi';
import { ArgumentError } from '../../../errors.js';
import { check, type StatusLibrary } from '../../../cuda/check.js';
import { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES } from '../../../cuda/driver.js';
import type { CompiledKernel, Dim3, KernelArg, LaunchConfig, TensorMap2d } from './kernel.js';

/** Bytes of one argument slot: the size and alignment of the largest KernelArg type. */
export const ARG_SLOT_BYTES = 8;
/** Arguments one launch may take (256 × 8 B = 2 KiB, under the 4 KiB parameter limit of older drivers). */
export const MAX_KERNEL_ARGS = 256;
/** Dynamic shared memory a kernel may use without opting in. */
export const DEFAULT_DYNAMIC_SHARED_LIMIT = 48 * 1024;

/** Tensor-map arguments (128 bytes each) one launch may take. */
export const MAX_TENSOR_MAP_ARGS = 4;
/** Bytes of a CUtensorMap; the driver wants it 64-byte aligned. */
export const TENSOR_MAP_BYTES = 128;

/** Writes the CUtensorMap of `map` (128 bytes) at native address `out` (cuTensorMapEncodeTiled). */
export type TensorMapEncoder = (map: TensorMap2d, out: bigint) => void;

/**
 * Packs arguments into native memory laid out as cuLaunchKernel expects. A tensor-map argument does
 * not fit a slot: it is encoded into one of MAX_TENSOR_MAP_ARGS 128-byte native slots, and its
 * pointer entry points there (until a launch puts a plain argument in that position again).
 */
export class KernelArgPacker {
  /** Address of the first value slot. */
  readonly valuesAddress: bigint;
  /** Address of the void*[capacity] array (entry i = valuesAddress + 8·i). */
  readonly pointerArrayAddress: bigint;
  private readonly view: DataView;
  private disposed = false;
  /** The 64-byte aligned tensor-map slots (allocated on first use) and the allocation behind them. */
  private mapSlots?: { allocation: bigint; first: bigint };
  /** Pointer entries that point at a tensor-map slot instead of their value slot. */
  private readonly redirected = new Set<number>();

  constructor(readonly capacity = MAX_KERNEL_ARGS, private readonly encodeTensorMap?: TensorMapEncoder) {
    const totalBytes = capacity * ARG_SLOT_BYTES * 2;
    this.valuesAddress = BigInt(koffi.alloc('uint64_t', capacity * 2));
    this.pointerArrayAddress = this.valuesAddress + BigInt(capacity * ARG_SLOT_BYTES);
    this.view = new DataView(koffi.view(this.valuesAddress, totalBytes));
    for (let i = 0; i < capacity; i++) this.pointAtSlot(i);
  }

  private pointAtSlot(i: number): void {
    this.view.setBigUint64((this.capacity + i) * ARG_SLOT_BYTES, this.valuesAddress + BigInt(i * ARG_SLOT_BYTES), true);
  }

  /** Encodes `map` into tensor-map slot `j` and points entry `i` at it. */
  private packTensorMap(i: number, j: number, map: TensorMap2d, kernelName: string): void {
    if (!this.encodeTensorMap) throw new ArgumentError(`kernel '${kernelName}' argument ${i} is a tensor map, but this runtime cannot encode tensor maps (cuTensorMapEncodeTiled needs a CUDA 12 driver)`);
    if (j >= MAX_TENSOR_MAP_ARGS) throw new ArgumentError(`kernel '${kernelName}' was given more than ${MAX_TENSOR_MAP_ARGS} tensor maps`);
    if (!this.mapSlots) {
      const allocation = BigInt(koffi.alloc('uint8_t', MAX_TENSOR_MAP_ARGS * TENSOR_MAP_BYTES + 64));
      this.mapSlots = { allocation, first: (allocation + 63n) & ~63n };
    }
    const slot = this.mapSlots.first + BigInt(j * TENSOR_MAP_BYTES);
    this.encodeTensorMap(map, slot);
    this.view.setBigUint64((this.capacity + i) * ARG_SLOT_BYTES, slot, true);
    this.redirected.add(i);
  }

  /** Stores `args` in the slots and returns the address to pass as kernelParams. */
  pack(args: readonly KernelArg[], kernelName: string): bigint {
    if (args.length > this.capacity) {
      throw new ArgumentError(`kernel '${kernelName}' was given ${args.length} arguments: at most ${this.capacity} are supported`);
    }
    const view = this.view;
    let maps = 0;
    for (let i = 0; i < args.length; i++) {
      const a = args[i]!;
      const offset = i * ARG_SLOT_BYTES;
      if (a.type === 'tensorMap') {
        this.packTensorMap(i, maps++, a.value, kernelName);
        continue;
      }
      if (this.redirected.size > 0 && this.redirected.delete(i)) this.pointAtSlot(i);
      switch (a.type) {
        case 'ptr':
        case 'u64':
          if (typeof a.value !== 'bigint' || a.value < 0n || a.value >= 1n << 64n) throw badArg(kernelName, i, a, 'a bigint in [0, 2^64)');
          view.setBigUint64(offset, a.value, true);
          break;
        case 'i64':
          if (typeof a.value !== 'bigint' || a.value < -(1n << 63n) || a.value >= 1n << 63n) throw badArg(kernelName, i, a, 'a bigint in [-2^63, 2^63)');
          view.setBigInt64(offset, a.value, true);
          break;
        case 'i32':
          if (!Number.isInteger(a.value) || a.value < -0x80000000 || a.value > 0x7fffffff) throw badArg(kernelName, i, a, 'an integer in [-2^31, 2^31)');
          view.setInt32(offset, a.value, true);
          view.setInt32(offset + 4, 0, true);
          break;
        case 'u32':
          if (!Number.isInteger(a.value) || a.value < 0 || a.value > 0xffffffff) throw badArg(kernelName, i, a, 'an integer in [0, 2^32)');
          view.setUint32(offset, a.value, true);
          view.setInt32(offset + 4, 0, true);
          break;
        case 'f32':
          if (typeof a.value !== 'number') throw badArg(kernelName, i, a, 'a number');
          view.setFloat32(offset, a.value, true);
          view.setInt32(offset + 4, 0, true);
          break;
      }
    }
    return this.pointerArrayAddress;
  }

  /** A copy of the first `count` value slots (for tests and debugging). */
  slotBytes(count: number): Uint8Array {
    return new Uint8Array(this.view.buffer.slice(0, count * ARG_SLOT_BYTES));
  }

  /** The first `count` entries of the pointer array. */
  pointerEntries(count: number): bigint[] {
    const entries: bigint[] = [];
    for (let i = 0; i < count; i++) entries.push(this.view.getBigUint64((this.capacity + i) * ARG_SLOT_BYTES, true));
    return entries;
  }

  /** Frees the native memory; the packer must not be used afterwards. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    koffi.free(this.valuesAddress);
    if (this.mapSlots) koffi.free(this.mapSlots.allocation);
  }
}

function badArg(kernelName: string, index: number, a: KernelArg, expected: string): ArgumentError {
  return new ArgumentError(`kernel '${kernelName}' argument ${index} (${a.type}) is ${String(a.value)}: expected ${expected}`);
}

/** The driver calls a launch needs (CudaDriver provides them). */
export interface LaunchApi extends StatusLibrary {
  launchKernel(fn: bigint, gx: number, gy: number, gz: number, bx: number, by: number, bz: number,
    sharedBytes: number, stream: bigint, kernelParams: bigint): number;
  funcSetAttribute(fn: bigint, attribute: number, value: number): void;
  /** cuFuncGetAttribute (absent: a function's static shared memory counts as 0). */
  funcGetAttribute?(fn: bigint, attribute: number): number;
  /** cuLaunchKernelEx, for programmatic launches (absent: they cannot be turned on). */
  launchKernelEx?(config: bigint, fn: bigint, kernelParams: bigint): number;
  readonly hasLaunchKernelEx?: boolean;
  /** cuTensorMapEncodeTiled for tensor-map arguments (absent: kernels that take them cannot launch). */
  encodeTensorMap2d?(map: TensorMap2d, out: bigint): void;
}

export interface LaunchTarget {
  readonly name: string;
  /** The CUfunction handle. */
  readonly function: bigint;
  /** The kernel waits for its prerequisite grids itself (GRID_DEPENDENCY_WAIT): it may be launched programmatically. */
  readonly gridDependencyWait?: boolean;
}

/** CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda.h). */
export const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
/** Bytes of the CUlaunchConfig + CUlaunchAttribute buffer (56 + 8 of padding + 72). */
const LAUNCH_CONFIG_BYTES = 136;
const ATTRIBUTE_OFFSET = 64;

/** Validates launch shapes, raises shared-memory limits when needed, and calls cuLaunchKernel. */
export class KernelLauncher {
  private readonly packer: KernelArgPacker;
  /** Dynamic shared memory each function may take so far: 48 KiB less its static arrays until raised. */
  private readonly sharedLimit = new Map<bigint, number>();
  private readonly dims = new Int32Array(6);
  private programmatic = false;
  /** The CUlaunchConfig buffer (see the header), made on first use. */
  private launchConfig?: { address: bigint; view: DataView };

  constructor(private readonly api: LaunchApi, private readonly maxSharedBytesPerBlockOptin: number) {
    this.packer = new KernelArgPacker(MAX_KERNEL_ARGS, api.encodeTensorMap2d ? (map, out) => api.encodeTensorMap2d!(map, out) : undefined);
  }

  /** Whether kernels that wait for their prerequisites themselves are launched programmatically. */
  get programmaticLaunch(): boolean { return this.programmatic; }

  /** Whether the driver has cuLaunchKernelEx (programmatic launch). */
  get canLaunchProgrammatically(): boolean { return this.api.hasLaunchKernelEx ?? this.api.launchKernelEx !== undefined; }

  set programmaticLaunch(on: boolean) {
    if (on && !this.canLaunchProgrammatically) {
      throw new ArgumentError('programmatic dependent launch needs cuLaunchKernelEx, which this CUDA driver does not export (CUDA 12.0 or newer)');
    }
    this.programmatic = on;
  }

  launch(kernel: LaunchTarget, config: LaunchConfig, args: readonly KernelArg[], stream: bigint): void {
    const dims = this.dims;
    readDim3(config.grid, dims, 0, 'grid', kernel.name);
    readDim3(config.block, dims, 3, 'block', kernel.name);
    checkLaunchShape(dims, kernel.name);
    const sharedBytes = config.sharedBytes ?? 0;
    if (sharedBytes > 0) this.allowSharedMemory(kernel, sharedBytes);
    const params = this.packer.pack(args, kernel.name);
    const programmatic = this.programmatic && kernel.gridDependencyWait === true;
    const status = programmatic
      ? this.api.launchKernelEx!(this.writeLaunchConfig(sharedBytes, stream), kernel.function, params)
      : this.api.launchKernel(kernel.function, dims[0]!, dims[1]!, dims[2]!, dims[3]!, dims[4]!, dims[5]!, sharedBytes, stream, params);
    if (status !== 0) {
      check(this.api, programmatic ? 'cuLaunchKernelEx' : 'cuLaunchKernel', status,
        `kernel '${kernel.name}', grid [${dims[0]}, ${dims[1]}, ${dims[2]}], block [${dims[3]}, ${dims[4]}, ${dims[5]}], ${sharedBytes} B shared, ${args.length} arguments${programmatic ? ', programmatic' : ''}`);
    }
  }

  /** Fills the CUlaunchConfig for the dims just read, with the programmatic-serialization attribute; returns its address. */
  private writeLaunchConfig(sharedBytes: number, stream: bigint): bigint {
    if (!this.launchConfig) {
      const address = BigInt(koffi.alloc('uint8_t', LAUNCH_CONFIG_BYTES));
      const view = new DataView(koffi.view(address, LAUNCH_CONFIG_BYTES));
      for (let i = 0; i < LAUNCH_CONFIG_BYTES; i++) view.setUint8(i, 0);
      view.setBigUint64(40, address + BigInt(ATTRIBUTE_OFFSET), true);
      view.setUint32(48, 1, true);
      view.setUint32(ATTRIBUTE_OFFSET, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, true);
      view.setInt32(ATTRIBUTE_OFFSET + 8, 1, true);
      this.launchConfig = { address, view };
    }
    const { address, view } = this.launchConfig;
    for (let i = 0; i < 6; i++) view.setUint32(4 * i, this.dims[i]!, true);
    view.setUint32(24, sharedBytes, true);
    view.setBigUint64(32, stream, true);
    return address;
  }

  /** The launch config buffer's bytes (for tests). */
  launchConfigBytes(): Uint8Array | undefined {
    return this.launchConfig ? new Uint8Array(this.launchConfig.view.buffer.slice(0, LAUNCH_CONFIG_BYTES)) : undefined;
  }

  /**
   * The 48 KiB a block gets without opting in counts its static __shared__ arrays too: a kernel with
   * 48 KiB of dynamic memory and any static array fails to launch (CUDA_ERROR_INVALID_VALUE) unless raised.
   */
  private allowSharedMemory(kernel: LaunchTarget, sharedBytes: number): void {
    let limit = this.sharedLimit.get(kernel.function);
    if (limit === undefined) {
      limit = DEFAULT_DYNAMIC_SHARED_LIMIT - (this.api.funcGetAttribute?.(kernel.function, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) ?? 0);
      this.sharedLimit.set(kernel.function, limit);
    }
    if (limit >= sharedBytes) return;
    if (sharedBytes > this.maxSharedBytesPerBlockOptin) {
      throw new ArgumentError(`kernel '${kernel.name}' asks for ${sharedBytes} bytes of dynamic shared memory: this GPU allows at most ${this.maxSharedBytesPerBlockOptin} per block`);
    }
    this.api.funcSetAttribute(kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sharedBytes);
    this.sharedLimit.set(kernel.function, sharedBytes);
  }
}

/** Reads a Dim3 into out[at..at+2], defaulting missing components to 1. */
export function readDim3(d: Dim3, out: Int32Array, at: number, what: string, kernelName: string): void {
  let x: number, y: number, z: number;
  if (typeof d === 'number') {
    x = d; y = 1; z = 1;
  } else {
    x = d[0]; y = d[1] ?? 1; z = d[2] ?? 1;
  }
  if (!(isPositiveInt(x) && isPositiveInt(y) && isPositiveInt(z))) {
    throw new ArgumentError(`kernel '${kernelName}' ${what} ${JSON.stringify(d)}: every dimension must be a positive integer`);
  }
  out[at] = x; out[at + 1] = y; out[at + 2] = z;
}

function isPositiveInt(v: number): boolean {
  return Number.isInteger(v) && v >= 1 && v <= 0x7fffffff;
}

/** CUDA's limits: grid x < 2^31, grid y/z ≤ 65535; block x/y ≤ 1024, z ≤ 64, x·y·z ≤ 1024. */
function checkLaunchShape(dims: Int32Array, kernelName: string): void {
  if (dims[1]! > 65535 || dims[2]! > 65535) {
    throw new ArgumentError(`kernel '${kernelName}' grid [${dims.subarray(0, 3).join(', ')}]: the y and z dimensions may be at most 65535`);
  }
  const bx = dims[3]!, by = dims[4]!, bz = dims[5]!;
  if (bx > 1024 || by > 1024 || bz > 64 || bx * by * bz > 1024) {
    throw new ArgumentError(`kernel '${kernelName}' block [${bx}, ${by}, ${bz}]: at most 1024 threads per block (x, y ≤ 1024, z ≤ 64)`);
  }
}

/** A compiled kernel bound to a launcher; launch() goes to whatever stream is current then. */
export class LaunchableKernel implements CompiledKernel {
  constructor(
    private readonly target: LaunchTarget,
    private readonly launcher: KernelLauncher,
    private readonly currentStream: () => bigint,
  ) {}

  get name(): string { return this.target.name; }

  launch(config: LaunchConfig, args: readonly KernelArg[]): void {
    this.launcher.launch(this.target, config, args, this.currentStream());
  }
}
