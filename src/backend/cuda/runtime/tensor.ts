// A tensor in device memory: a device address plus the shared Tensor metadata. A tensor made by the
// allocator owns its block (`block`); a view shares its base's block and owns nothing.

import type { DType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { Tensor } from '../../../tensor.js';

/** A block of device memory handed out by the caching allocator. */
export interface DeviceBlock {
  readonly ptr: bigint;
  readonly bytes: number;
  freed: boolean;
}

export class CudaTensor extends Tensor {
  constructor(
    /** Device address of element 0. */
    readonly ptr: bigint,
    shape: readonly number[],
    dtype: DType,
    /** The allocation this tensor owns, or null for a view. */
    readonly block: DeviceBlock | null,
    strides?: readonly number[],
  ) {
    super('cuda', shape, dtype, strides);
  }

  get bytes(): number {
    return this.numel * byteSize(this.dtype);
  }
}
