// The tensor handle shared by all backends: shape, dtype and element strides over storage that
// the backend owns (a Float32Array on the CPU, device memory on CUDA). Ops take and return these
// handles; only the backend that made a tensor can read its storage.

import type { DType } from './dtype.js';
import { ShapeError } from './errors.js';

export type BackendName = 'cpu' | 'cuda';

/** Host-side values of a tensor: Float32Array for f32/f16/bf16, the matching typed array otherwise. */
export type HostArray = Float32Array | Int32Array | Int8Array | Uint8Array;

export abstract class Tensor {
  readonly numel: number;
  readonly strides: readonly number[];

  constructor(
    readonly backend: BackendName,
    readonly shape: readonly number[],
    readonly dtype: DType,
    strides?: readonly number[],
  ) {
    checkShape(shape);
    this.numel = shape.reduce((a, b) => a * b, 1);
    this.strides = strides ?? contiguousStrides(shape);
  }

  get rank(): number { return this.shape.length; }

  get isContiguous(): boolean {
    let expected = 1;
    for (let i = this.shape.length - 1; i >= 0; i--) {
      if (this.shape[i] !== 1 && this.strides[i] !== expected) return false;
      expected *= this.shape[i]!;
    }
    return true;
  }

  toString(): string {
    return `Tensor(${this.backend}, [${this.shape.join(', ')}], ${this.dtype}${this.isContiguous ? '' : ', non-contiguous'})`;
  }
}

export function contiguousStrides(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) { strides[i] = s; s *= shape[i]!; }
  return strides;
}

export function shapeNumel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

/** Throws unless every dimension of `shape` is a non-negative integer (before anything is allocated for it). */
export function checkShape(shape: readonly number[]): void {
  if (!Array.isArray(shape)) throw new ShapeError(`invalid tensor shape ${String(shape)}: expected an array of dimensions`);
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new ShapeError(`invalid tensor shape [${shape.join(', ')}]: dimensions must be non-negative integers`);
  }
}
