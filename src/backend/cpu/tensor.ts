// A tensor in host memory. Float dtypes (f32, f16, bf16) are stored in a Float32Array with every
// stored value rounded to its dtype, so an f16 tensor on the CPU holds exactly the values the GPU's
// f16 tensor would hold; integer dtypes use the matching typed array. A view shares its base's
// storage (and allocation record) and starts `offset` elements into it.

import type { DType, FloatDType } from '../../dtype.js';
import { byteSize, isFloat, roundToDType } from '../../dtype.js';
import { LayoutError, OutOfMemoryError, ShapeError } from '../../errors.js';
import type { HostArray } from '../../tensor.js';
import { Tensor, formatShape, shapeNumel } from '../../tensor.js';

/** The bookkeeping record of one allocation; shared by a base tensor and all of its views. */
export interface CpuAllocation {
  readonly bytes: number;
  freed: boolean;
}

export interface CpuTensorOptions {
  /** Element offset of element 0 into `storage` (default 0). */
  offset?: number;
  /** Element strides (default: contiguous row-major). */
  strides?: readonly number[];
  /** The allocation this tensor belongs to (default: a fresh record of its own). */
  allocation?: CpuAllocation;
  /** True for a view: it shares another tensor's allocation and freeing it frees nothing. */
  isView?: boolean;
}

export class CpuTensor extends Tensor {
  readonly offset: number;
  readonly allocation: CpuAllocation;
  readonly isView: boolean;

  constructor(shape: readonly number[], dtype: DType, readonly storage: HostArray, options: CpuTensorOptions = {}) {
    super('cpu', shape, dtype, options.strides);
    const expected = newStorage(dtype, 0);
    if (storage.constructor !== expected.constructor) {
      throw new LayoutError(`CpuTensor: a ${dtype} tensor needs a ${expected.constructor.name} for storage, got ${storage.constructor.name}`);
    }
    this.offset = options.offset ?? 0;
    if (!Number.isInteger(this.offset) || this.offset < 0) throw new ShapeError(`CpuTensor: offset must be a non-negative integer, got ${this.offset}`);
    if (this.strides.length !== shape.length) {
      throw new ShapeError(`CpuTensor: strides [${this.strides.join(', ')}] do not match shape ${formatShape(shape)}`);
    }
    if (this.numel > 0) {
      const last = this.strides.reduce((end, stride, i) => end + stride * (shape[i]! - 1), this.offset);
      if (last >= storage.length || this.strides.some((s) => s < 0)) {
        throw new ShapeError(`CpuTensor: shape ${formatShape(shape)} with strides [${this.strides.join(', ')}] at offset ${this.offset} reaches past the storage of ${storage.length} elements`);
      }
    }
    this.allocation = options.allocation ?? { bytes: this.numel * byteSize(dtype), freed: false };
    this.isView = options.isView ?? false;
  }
}

/** Zero-filled storage of `numel` elements for `dtype`. */
export function newStorage(dtype: DType, numel: number): HostArray {
  // A typed array holds at most 2^32 elements on 64-bit V8 (and memory may end sooner): say so by size.
  if (!Number.isSafeInteger(numel) || numel < 0 || numel > 2 ** 32) {
    throw new OutOfMemoryError(`the CPU backend cannot allocate ${numel.toLocaleString('en-US')} ${dtype} elements in one tensor (at most 2^32)`);
  }
  switch (dtype) {
    case 'f32': case 'f16': case 'bf16': return new Float32Array(numel);
    case 'i32': return new Int32Array(numel);
    case 'i8': return new Int8Array(numel);
    case 'u8': return new Uint8Array(numel);
  }
}

// --- element access for ops (contiguous tensors only; ops validate contiguity first) -------------

/**
 * A dropout op's counter offset: `offset` (a scalar, frozen when the op is issued or captured) plus the
 * u64 in `offsetBase` (i32 [2]) as it is when the op runs. Call at issue time; call the result at run time.
 */
export function dropoutOffsetAtRun(args: { offset: bigint; offsetBase?: unknown }): () => bigint {
  const { offset, offsetBase } = args;
  if (!offsetBase) return () => offset;
  return () => {
    const words = int32sOf(offsetBase as CpuTensor);
    return offset + ((BigInt(words[1]! >>> 0) << 32n) | BigInt(words[0]! >>> 0));
  };
}

/** The tensor's elements as a live subarray of its storage. */
export function floatsOf(t: CpuTensor): Float32Array {
  if (!isFloat(t.dtype) || !(t.storage instanceof Float32Array)) throw new LayoutError(`internal: ${t} is not a float tensor`);
  return t.storage.subarray(t.offset, t.offset + t.numel);
}

export function int32sOf(t: CpuTensor): Int32Array {
  if (!(t.storage instanceof Int32Array)) throw new LayoutError(`internal: ${t} is not an i32 tensor`);
  return t.storage.subarray(t.offset, t.offset + t.numel);
}

export function bytesOf(t: CpuTensor): Uint8Array {
  if (!(t.storage instanceof Uint8Array)) throw new LayoutError(`internal: ${t} is not a u8 tensor`);
  return t.storage.subarray(t.offset, t.offset + t.numel);
}

/** Any element type, as a live subarray (for copies). */
export function elementsOf(t: CpuTensor): HostArray {
  return t.storage.subarray(t.offset, t.offset + t.numel);
}

/** Writes `values` (length numel) into a float tensor, each rounded to the tensor's dtype. */
export function storeFloats(t: CpuTensor, values: ArrayLike<number>): void {
  const dst = floatsOf(t);
  if (t.dtype === 'f32') {
    for (let i = 0; i < dst.length; i++) dst[i] = values[i]!; // the Float32Array store rounds
    return;
  }
  const round = rounder(t.dtype as FloatDType);
  for (let i = 0; i < dst.length; i++) dst[i] = round(values[i]!);
}

/** Rounds a value to `dtype`; for f32 the Float32Array store itself rounds, so this is the identity. */
export function rounder(dtype: FloatDType): (x: number) => number {
  return dtype === 'f32' ? (x) => x : (x) => roundToDType(x, dtype);
}

export function storageBytes(shape: readonly number[], dtype: DType): number {
  return shapeNumel(shape) * byteSize(dtype);
}
