// One error hierarchy for the whole library. Messages name the bad value and what was expected,
// so a user can fix the call without reading our source.

export class FuseformerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A tensor has the wrong shape, or shapes of several tensors do not agree. */
export class ShapeError extends FuseformerError {}

/** A tensor has a dtype the op does not support, or dtypes of several tensors do not agree. */
export class DTypeError extends FuseformerError {}

/** A tensor lives on another backend, or is a non-contiguous view where a contiguous one is needed. */
export class LayoutError extends FuseformerError {}

/** A CUDA library (driver, NVRTC, cuBLASLt, NCCL) returned an error status. */
export class CudaError extends FuseformerError {
  constructor(readonly api: string, readonly code: number, readonly errorName: string, detail = '') {
    super(`${api} failed: ${errorName} (${code})${detail ? `: ${detail}` : ''}`);
  }
}

/** A CUDA shared library could not be found or loaded. */
export class LibraryNotFoundError extends FuseformerError {}

/** A generated kernel failed to compile; the message carries the numbered source and the log. */
export class KernelCompileError extends FuseformerError {}

/** An argument outside its valid range (a probability of 1.5, a negative size). */
export class ArgumentError extends FuseformerError {}

/** Memory for a tensor could not be had (too large for the backend, or none left). */
export class OutOfMemoryError extends FuseformerError {}
