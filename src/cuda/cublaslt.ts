// cuBLASLt bindings: the handle, matmul/layout/preference descriptors, the algorithm heuristic and
// cublasLtMatmul. Thin and typed; every call goes through checkCublas() (check.ts), which throws a
// CudaError naming the API and the CUBLAS_STATUS_* name.
//
// Enum values and prototypes are copied from the real headers: cublasLt.h, cublas_api.h and
// library_types.h of CUDA 12.6 (github zspace/system.cuda-12.6 include/), cross-checked against
// bindgen output of the CUDA 13.0 headers (github coreylowman/cudarc src/cublaslt/sys/mod.rs at
// 8995648, feature cuda-13000). Everything used here is identical in 12.x and 13.0: no prototype
// changed; 13.0 only appended enumerators (scale modes, CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR = 38,
// CUBLASLT_MATRIX_LAYOUT_BATCH_MODE = 8, emulated compute types), which we do not use.
//
// FFI conventions: handles, descriptors, device pointers and the stream travel as uint64_t (bigint on
// our side; koffi may hand small values back as numbers, so results are normalised with BigInt()).
// Host-side inputs (alpha/beta, attribute values, the algo struct) and outputs (created handles,
// heuristic results) are typed arrays passed as `void *`: koffi passes their memory by reference.

import type { LibraryHandle } from 'koffi';
import { check } from './check.js';
import type { StatusLibrary } from './check.js';
import { loadCudaLibrary } from './library.js';

// --- enums (values from the headers named above) -----------------------------------------------------

/** cublasStatus_t (cublas_api.h). */
export const CUBLAS_STATUS_NAMES: Readonly<Record<number, string>> = {
  0: 'CUBLAS_STATUS_SUCCESS',
  1: 'CUBLAS_STATUS_NOT_INITIALIZED',
  3: 'CUBLAS_STATUS_ALLOC_FAILED',
  7: 'CUBLAS_STATUS_INVALID_VALUE',
  8: 'CUBLAS_STATUS_ARCH_MISMATCH',
  11: 'CUBLAS_STATUS_MAPPING_ERROR',
  13: 'CUBLAS_STATUS_EXECUTION_FAILED',
  14: 'CUBLAS_STATUS_INTERNAL_ERROR',
  15: 'CUBLAS_STATUS_NOT_SUPPORTED',
  16: 'CUBLAS_STATUS_LICENSE_ERROR',
};
export const CUBLAS_STATUS_SUCCESS = 0;
export const CUBLAS_STATUS_INVALID_VALUE = 7;
export const CUBLAS_STATUS_NOT_SUPPORTED = 15;

/** cudaDataType_t (library_types.h), the subset we store. */
export const CudaDataType = { R_32F: 0, R_16F: 2, R_16BF: 14 } as const;

/** cublasComputeType_t (cublas_api.h). 32F is true fp32 FMA/accumulate; FAST_TF32 would round inputs to TF32. */
export const CublasComputeType = { COMPUTE_32F: 68, COMPUTE_32F_FAST_TF32: 77 } as const;

/** cublasOperation_t (cublas_api.h). */
export const CublasOperation = { N: 0, T: 1 } as const;

/** cublasLtMatmulDescAttributes_t; the C type each attribute expects is in the comment. */
export const MatmulDescAttribute = {
  COMPUTE_TYPE: 0, // int32
  SCALE_TYPE: 1, // int32 (cudaDataType)
  POINTER_MODE: 2, // int32
  TRANSA: 3, // int32 (cublasOperation_t)
  TRANSB: 4, // int32
  EPILOGUE: 7, // uint32 (cublasLtEpilogue_t)
  BIAS_POINTER: 8, // void *
  BIAS_BATCH_STRIDE: 10, // int64
  EPILOGUE_AUX_POINTER: 11, // void *
  EPILOGUE_AUX_LD: 12, // int64
  EPILOGUE_AUX_BATCH_STRIDE: 13, // int64
  EPILOGUE_AUX_DATA_TYPE: 22, // int32
  BIAS_DATA_TYPE: 26, // int32
} as const;

/** cublasLtMatrixLayoutAttribute_t. */
export const MatrixLayoutAttribute = {
  TYPE: 0, // uint32
  ORDER: 1, // int32
  ROWS: 2, // uint64
  COLS: 3, // uint64
  LD: 4, // int64
  BATCH_COUNT: 5, // int32
  STRIDED_BATCH_OFFSET: 6, // int64, in elements
} as const;

/** cublasLtMatmulPreferenceAttributes_t. */
export const MatmulPreferenceAttribute = {
  SEARCH_MODE: 0, // uint32
  MAX_WORKSPACE_BYTES: 1, // uint64
  MIN_ALIGNMENT_A_BYTES: 5, // uint32, default 256
  MIN_ALIGNMENT_B_BYTES: 6, // uint32, default 256
  MIN_ALIGNMENT_C_BYTES: 7, // uint32, default 256
  MIN_ALIGNMENT_D_BYTES: 8, // uint32, default 256
} as const;

/** cublasLtEpilogue_t (the header builds them from bit flags; these are the resulting values). */
export const CublasLtEpilogue = {
  DEFAULT: 1,
  RELU: 2,
  BIAS: 4,
  RELU_BIAS: 6,
  GELU: 32,
  GELU_BIAS: 36,
  GELU_AUX_BIAS: 164, // GELU | 128 (aux) | BIAS: also writes the pre-GELU value to the aux matrix
  DGELU: 192, // 64 | 128: multiplies by gelu'(aux)
  DGELU_BGRAD: 208, // DGELU | 16: and writes the bias gradient (sum over D's columns, per row of D)
  BGRADA: 256, // bias gradient from op(A): length = rows of D, reduced over k
  BGRADB: 512, // bias gradient from op(B): length = columns of D, reduced over k
} as const;

// --- cublasLtMatmulHeuristicResult_t -------------------------------------------------------------------
//
// typedef struct {
//   cublasLtMatmulAlgo_t algo;   // uint64_t data[8]  -> bytes  0..63
//   size_t workspaceSize;        //                   -> bytes 64..71
//   cublasStatus_t state;        // int               -> bytes 72..75
//   float wavesCount;            //                   -> bytes 76..79
//   int reserved[4];             //                   -> bytes 80..95
// } cublasLtMatmulHeuristicResult_t;   // sizeof = 96, alignof = 8

export const ALGO_BYTES = 64;
export const HEURISTIC_RESULT_BYTES = 96;

export interface HeuristicResult {
  /** The opaque cublasLtMatmulAlgo_t, copied out (64 bytes); passed back verbatim to cublasLtMatmul. */
  readonly algo: Uint8Array;
  readonly workspaceSize: number;
  /** A cublasStatus_t: the other fields are meaningful only when this is CUBLAS_STATUS_SUCCESS. */
  readonly state: number;
  /** Device utilisation estimate: 1.0 fills the GPU once. */
  readonly wavesCount: number;
}

/** Decodes `count` cublasLtMatmulHeuristicResult_t records from raw bytes (little-endian, x86-64/arm64 ABI). */
export function decodeHeuristicResults(bytes: Uint8Array, count: number): HeuristicResult[] {
  if (count < 0 || count * HEURISTIC_RESULT_BYTES > bytes.byteLength) {
    throw new RangeError(`cannot decode ${count} heuristic results from ${bytes.byteLength} bytes (${HEURISTIC_RESULT_BYTES} each)`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const results: HeuristicResult[] = [];
  for (let i = 0; i < count; i++) {
    const base = i * HEURISTIC_RESULT_BYTES;
    results.push({
      algo: bytes.slice(base, base + ALGO_BYTES),
      workspaceSize: Number(view.getBigUint64(base + 64, true)),
      state: view.getInt32(base + 72, true),
      wavesCount: view.getFloat32(base + 76, true),
    });
  }
  return results;
}

// --- status check ------------------------------------------------------------------------------------

export function cublasStatusName(status: number): string {
  return CUBLAS_STATUS_NAMES[status] ?? `CUBLAS_STATUS_UNKNOWN_${status}`;
}

const CUBLAS: StatusLibrary = {
  nameOf: cublasStatusName,
  adviceFor: (status) => status === CUBLAS_STATUS_INVALID_VALUE || status === CUBLAS_STATUS_NOT_SUPPORTED
    ? 'cuBLASLt rejected this configuration of types, layouts, epilogue or alignment'
    : '',
};

/** Throws CudaError(api, status, 'CUBLAS_STATUS_...') unless status is CUBLAS_STATUS_SUCCESS. */
export function checkCublas(api: string, status: number, detail = ''): void {
  check(CUBLAS, api, status, detail);
}

// --- attribute values ----------------------------------------------------------------------------------

/** The C type of an attribute value: cuBLASLt checks sizeInBytes against it. */
export type AttributeKind = 'i32' | 'u32' | 'i64' | 'u64' | 'ptr';

/** The bytes of one attribute value, in a fresh typed array (safe to keep across calls). */
export function attributeValue(kind: AttributeKind, value: number | bigint): Int32Array | Uint32Array | BigInt64Array | BigUint64Array {
  switch (kind) {
    case 'i32': return Int32Array.of(Number(value));
    case 'u32': return Uint32Array.of(Number(value));
    case 'i64': return BigInt64Array.of(BigInt(value));
    case 'u64': case 'ptr': return BigUint64Array.of(BigInt(value));
  }
}

// --- the library ---------------------------------------------------------------------------------------

type Handle = bigint;
type NativeFunction = ReturnType<LibraryHandle['func']>;
type HostBytes = ArrayBufferView;

export interface CublasLt {
  /** cublasLtGetVersion(): e.g. 130100 for 13.1.0 (major·10000 + minor·100 + patch). */
  readonly version: number;
  create(): Handle;
  destroy(handle: Handle): void;
  matmulDescCreate(computeType: number, scaleType: number): Handle;
  matmulDescDestroy(desc: Handle): void;
  matmulDescSetAttribute(desc: Handle, attribute: number, kind: AttributeKind, value: number | bigint): void;
  /** Column-major layout of rows × cols with leading dimension ld (elements). */
  matrixLayoutCreate(dataType: number, rows: number, cols: number, ld: number): Handle;
  matrixLayoutDestroy(layout: Handle): void;
  matrixLayoutSetAttribute(layout: Handle, attribute: number, kind: AttributeKind, value: number | bigint): void;
  preferenceCreate(): Handle;
  preferenceDestroy(preference: Handle): void;
  preferenceSetAttribute(preference: Handle, attribute: number, kind: AttributeKind, value: number | bigint): void;
  /**
   * Up to `requested` algorithms for the problem, best estimate first. An empty array when cuBLASLt
   * has none for this configuration (it answers NOT_SUPPORTED or returns zero results).
   */
  algoGetHeuristic(handle: Handle, desc: Handle, a: Handle, b: Handle, c: Handle, d: Handle, preference: Handle, requested: number): HeuristicResult[];
  /** D = epilogue(alpha·op(A)·op(B) + beta·C); returns the raw status so hot paths check it themselves. */
  matmul(
    handle: Handle, desc: Handle, alpha: HostBytes,
    a: bigint, aLayout: Handle, b: bigint, bLayout: Handle, beta: HostBytes,
    c: bigint, cLayout: Handle, d: bigint, dLayout: Handle,
    algo: Uint8Array, workspace: bigint, workspaceBytes: number, stream: bigint,
  ): number;
}

let cached: CublasLt | undefined;

/** The cuBLASLt bindings, loaded on first use (throws LibraryNotFoundError when libcublasLt is missing). */
export function cublasLt(): CublasLt {
  cached ??= bindCublasLt(loadCudaLibrary('cublasLt').handle);
  return cached;
}

/** Declares every function we use on an opened libcublasLt. */
export function bindCublasLt(lib: LibraryHandle): CublasLt {
  const fn = (prototype: string) => lib.func(prototype);
  const ltCreate = fn('int cublasLtCreate(void *handleOut)');
  const ltDestroy = fn('int cublasLtDestroy(uint64_t handle)');
  const getVersion = fn('size_t cublasLtGetVersion()');
  const descCreate = fn('int cublasLtMatmulDescCreate(void *descOut, int computeType, int scaleType)');
  const descDestroy = fn('int cublasLtMatmulDescDestroy(uint64_t desc)');
  const descSet = fn('int cublasLtMatmulDescSetAttribute(uint64_t desc, int attr, const void *buf, size_t sizeInBytes)');
  const layoutCreate = fn('int cublasLtMatrixLayoutCreate(void *layoutOut, int type, uint64_t rows, uint64_t cols, int64_t ld)');
  const layoutDestroy = fn('int cublasLtMatrixLayoutDestroy(uint64_t layout)');
  const layoutSet = fn('int cublasLtMatrixLayoutSetAttribute(uint64_t layout, int attr, const void *buf, size_t sizeInBytes)');
  const prefCreate = fn('int cublasLtMatmulPreferenceCreate(void *prefOut)');
  const prefDestroy = fn('int cublasLtMatmulPreferenceDestroy(uint64_t pref)');
  const prefSet = fn('int cublasLtMatmulPreferenceSetAttribute(uint64_t pref, int attr, const void *buf, size_t sizeInBytes)');
  const heuristic = fn(
    'int cublasLtMatmulAlgoGetHeuristic(uint64_t handle, uint64_t desc, uint64_t aLayout, uint64_t bLayout, ' +
    'uint64_t cLayout, uint64_t dLayout, uint64_t pref, int requestedAlgoCount, void *results, void *returnAlgoCount)',
  );
  const matmul = fn(
    'int cublasLtMatmul(uint64_t handle, uint64_t desc, const void *alpha, uint64_t A, uint64_t aLayout, ' +
    'uint64_t B, uint64_t bLayout, const void *beta, uint64_t C, uint64_t cLayout, uint64_t D, uint64_t dLayout, ' +
    'const void *algo, uint64_t workspace, size_t workspaceSizeInBytes, uint64_t stream)',
  );

  const created = (api: string, call: (out: BigUint64Array) => number): Handle => {
    const out = new BigUint64Array(1);
    checkCublas(api, call(out));
    return BigInt(out[0]!);
  };
  const setter = (api: string, set: NativeFunction) => (target: Handle, attribute: number, kind: AttributeKind, value: number | bigint) => {
    const bytes = attributeValue(kind, value);
    checkCublas(api, set(target, attribute, bytes, bytes.byteLength), `attribute ${attribute} = ${value}`);
  };

  return {
    version: Number(getVersion()),
    create: () => created('cublasLtCreate', (out) => ltCreate(out)),
    destroy: (handle) => checkCublas('cublasLtDestroy', ltDestroy(handle)),
    matmulDescCreate: (computeType, scaleType) => created('cublasLtMatmulDescCreate', (out) => descCreate(out, computeType, scaleType)),
    matmulDescDestroy: (desc) => checkCublas('cublasLtMatmulDescDestroy', descDestroy(desc)),
    matmulDescSetAttribute: setter('cublasLtMatmulDescSetAttribute', descSet),
    matrixLayoutCreate: (dataType, rows, cols, ld) =>
      created('cublasLtMatrixLayoutCreate', (out) => layoutCreate(out, dataType, rows, cols, ld)),
    matrixLayoutDestroy: (layout) => checkCublas('cublasLtMatrixLayoutDestroy', layoutDestroy(layout)),
    matrixLayoutSetAttribute: setter('cublasLtMatrixLayoutSetAttribute', layoutSet),
    preferenceCreate: () => created('cublasLtMatmulPreferenceCreate', (out) => prefCreate(out)),
    preferenceDestroy: (preference) => checkCublas('cublasLtMatmulPreferenceDestroy', prefDestroy(preference)),
    preferenceSetAttribute: setter('cublasLtMatmulPreferenceSetAttribute', prefSet),
    algoGetHeuristic: (handle, desc, a, b, c, d, preference, requested) => {
      const results = new Uint8Array(requested * HEURISTIC_RESULT_BYTES);
      const returned = new Int32Array(1);
      const status = heuristic(handle, desc, a, b, c, d, preference, requested, results, returned) as number;
      if (status === CUBLAS_STATUS_NOT_SUPPORTED) return [];
      checkCublas('cublasLtMatmulAlgoGetHeuristic', status);
      return decodeHeuristicResults(results, returned[0]!).filter((r) => r.state === CUBLAS_STATUS_SUCCESS);
    },
    matmul: (handle, desc, alpha, a, aLayout, b, bLayout, beta, c, cLayout, d, dLayout, algo, workspace, workspaceBytes, stream) =>
      matmul(handle, desc, alpha, a, aLayout, b, bLayout, beta, c, cLayout, d, dLayout, algo, workspace, workspaceBytes, stream) as number,
  };
}
