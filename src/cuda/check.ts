// The one place where a CUDA library's status code becomes an error. Every CUDA library we bind
// (driver, NVRTC, cuBLASLt, NCCL) returns 0 for success and a library-specific code otherwise; each
// binding file passes its own `nameOf` (cuGetErrorName, nvrtcGetErrorString, ...) so the error
// names the API, the code and the library's name for it.

import { CudaError } from '../errors.js';

/** Turns a non-zero status into the library's symbolic name (e.g. 2 → CUDA_ERROR_OUT_OF_MEMORY). */
export type StatusNamer = (status: number) => string;

/** Extra advice for a status, or '' when there is none. */
export type StatusAdvisor = (status: number) => string;

export interface StatusLibrary {
  readonly nameOf: StatusNamer;
  readonly adviceFor?: StatusAdvisor;
}

/** Throws a CudaError naming `api` unless `status` is 0. */
export function check(library: StatusLibrary, api: string, status: number, detail = ''): void {
  if (status !== 0) throw statusError(library, api, status, detail);
}

/** The CudaError for a failed call; the namer failing (an unknown code) still yields an error. */
export function statusError(library: StatusLibrary, api: string, status: number, detail = ''): CudaError {
  let errorName: string;
  try {
    errorName = library.nameOf(status) || 'unknown status';
  } catch {
    errorName = 'unknown status';
  }
  let advice = '';
  try {
    advice = library.adviceFor?.(status) ?? '';
  } catch {
    advice = '';
  }
  return new CudaError(api, status, errorName, [detail, advice].filter((s) => s.length > 0).join('; '));
}
