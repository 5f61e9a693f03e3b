// Typed bindings of NVRTC (libnvrtc), the runtime CUDA C++ compiler, to its documented prototypes:
//   const char *nvrtcGetErrorString(nvrtcResult result);
//   nvrtcResult nvrtcVersion(int *major, int *minor);
//   nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
//                                  int numHeaders, const char * const *headers, const char * const *includeNames);
//   nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
//   nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options);
//   nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
//   nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
//   nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
//   nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
// nvrtcResult is a C enum (int); nvrtcProgram is an opaque pointer, carried as uint64_t.

import type { LibraryHandle } from 'koffi';
import { check, type StatusLibrary } from './check.js';
import { loadCudaLibrary, type LoadedLibrary } from './library.js';

export const NVRTC_SUCCESS = 0;
export const NVRTC_ERROR_COMPILATION = 6;

interface NvrtcFunctions {
  nvrtcGetErrorString(status: number): string | null;
  nvrtcVersion(major: Int32Array, minor: Int32Array): number;
  nvrtcCreateProgram(prog: BigUint64Array, src: string, name: string, numHeaders: number,
    headers: null, includeNames: null): number;
  nvrtcDestroyProgram(prog: BigUint64Array): number;
  nvrtcCompileProgram(prog: bigint, numOptions: number, options: readonly string[]): number;
  nvrtcGetProgramLogSize(prog: bigint, size: BigUint64Array): number;
  nvrtcGetProgramLog(prog: bigint, log: Uint8Array): number;
  nvrtcGetCUBINSize(prog: bigint, size: BigUint64Array): number;
  nvrtcGetCUBIN(prog: bigint, cubin: Uint8Array): number;
}

function bindNvrtc(lib: LibraryHandle): NvrtcFunctions {
  const f = (prototype: string) => lib.func(prototype);
  return {
    nvrtcGetErrorString: f('const char *nvrtcGetErrorString(int result)'),
    nvrtcVersion: f('int nvrtcVersion(void *major, void *minor)'),
    nvrtcCreateProgram: f('int nvrtcCreateProgram(void *prog, const char *src, const char *name, int numHeaders, const char **headers, const char **includeNames)'),
    nvrtcDestroyProgram: f('int nvrtcDestroyProgram(void *prog)'),
    nvrtcCompileProgram: f('int nvrtcCompileProgram(uint64_t prog, int numOptions, const char **options)'),
    nvrtcGetProgramLogSize: f('int nvrtcGetProgramLogSize(uint64_t prog, void *logSizeRet)'),
    nvrtcGetProgramLog: f('int nvrtcGetProgramLog(uint64_t prog, void *log)'),
    nvrtcGetCUBINSize: f('int nvrtcGetCUBINSize(uint64_t prog, void *cubinSizeRet)'),
    nvrtcGetCUBIN: f('int nvrtcGetCUBIN(uint64_t prog, void *cubin)'),
  };
}

export interface CompileOutput {
  /** False when the source has errors (NVRTC_ERROR_COMPILATION); the log says which. */
  ok: boolean;
  log: string;
  /** The device code, when ok. */
  cubin: Uint8Array | null;
}

/** NVRTC with every call checked. Obtain it with nvrtc(). */
export class Nvrtc implements StatusLibrary {
  private readonly size = new BigUint64Array(1);
  /** "13.0". */
  readonly version: string;

  constructor(private readonly fn: NvrtcFunctions, readonly library: LoadedLibrary) {
    const major = new Int32Array(1);
    const minor = new Int32Array(1);
    this.check('nvrtcVersion', this.fn.nvrtcVersion(major, minor));
    this.version = `${major[0]}.${minor[0]}`;
  }

  nameOf = (status: number): string => this.fn.nvrtcGetErrorString(status) ?? 'unknown status';

  private check(api: string, status: number, detail = ''): void {
    check(this, api, status, detail);
  }

  /**
   * Compiles one translation unit with `options` and returns the log and the CUBIN (which requires a
   * real architecture option such as --gpu-architecture=sm_90). Compile errors are a result, not an
   * exception; any other NVRTC failure throws a CudaError.
   */
  compile(source: string, name: string, options: readonly string[]): CompileOutput {
    const handle = new BigUint64Array(1);
    this.check('nvrtcCreateProgram', this.fn.nvrtcCreateProgram(handle, source, name, 0, null, null), name);
    const program = handle[0]!;
    try {
      const status = this.fn.nvrtcCompileProgram(program, options.length, options);
      const log = this.programLog(program);
      // Failures other than source errors (e.g. NVRTC_ERROR_BUILTIN_OPERATION_FAILURE when
      // libnvrtc-builtins is missing) explain themselves in the log.
      if (status !== NVRTC_SUCCESS && status !== NVRTC_ERROR_COMPILATION) this.check('nvrtcCompileProgram', status, log ? `${name}: ${log}` : name);
      if (status === NVRTC_ERROR_COMPILATION) return { ok: false, log, cubin: null };
      this.check('nvrtcGetCUBINSize', this.fn.nvrtcGetCUBINSize(program, this.size), name);
      const cubin = new Uint8Array(Number(this.size[0]!));
      this.check('nvrtcGetCUBIN', this.fn.nvrtcGetCUBIN(program, cubin), name);
      return { ok: true, log, cubin };
    } finally {
      this.fn.nvrtcDestroyProgram(handle);
    }
  }

  private programLog(program: bigint): string {
    this.check('nvrtcGetProgramLogSize', this.fn.nvrtcGetProgramLogSize(program, this.size));
    const bytes = new Uint8Array(Number(this.size[0]!));
    if (bytes.length === 0) return '';
    this.check('nvrtcGetProgramLog', this.fn.nvrtcGetProgramLog(program, bytes));
    const end = bytes.indexOf(0);
    return Buffer.from(bytes.subarray(0, end < 0 ? bytes.length : end)).toString('utf8').trimEnd();
  }
}

let nvrtcInstance: Nvrtc | null = null;

/** The process-wide NVRTC binding (libnvrtc loaded on first use). */
export function nvrtc(): Nvrtc {
  if (nvrtcInstance === null) {
    const library = loadCudaLibrary('nvrtc');
    nvrtcInstance = new Nvrtc(bindNvrtc(library.handle), library);
  }
  return nvrtcInstance;
}
