// The W8A8 integer GEMM on cuBLASLt: out i32 [M, N] = a i8 [M, K] · bᵀ, b i8 [N, K].
//
// Mapping (as gemm-plan.ts: row-major [R, C] read column-major is its transpose, ld C):
//   cuBLAS D (N × M, ld N) = our out;  cuBLAS A = our b, stored [N, K] → column-major K × N, op T;
//   cuBLAS B = our a, stored [M, K] → column-major K × M, op N.
// That is the "TN" form cuBLASLt's IMMA kernels require with the regular (column-major) ordering:
// CUDA_R_8I inputs, CUBLAS_COMPUTE_32I with CUDA_R_32I scale type (alpha = 1, beta = 0 as i32), an
// i32 output, leading dimensions and m = N, k = K multiples of 4, pointers at least 4-byte aligned
// (16 for the fast kernels; the alignment is passed to the heuristic). Holding the weight as
// [out, in] is what makes the layout TN without a transposed copy.
//
// Per distinct problem (M, N, K, operand alignments) one cache entry holds the descriptor, the three
// layouts and the heuristic's candidates; a candidate that fails on first use falls back to the next.

import type { Int8GemmArgs } from '../backend.js';
import { ArgumentError } from '../../errors.js';
import {
  CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_SUCCESS, CublasOperation, MatmulDescAttribute,
  MatmulPreferenceAttribute, checkCublas, cublasLt, cublasStatusName,
} from '../../cuda/cublaslt.js';
import type { CublasLt, HeuristicResult } from '../../cuda/cublaslt.js';
import { checkInt8Gemm } from '../op-checks/quant.js';
import { OpCheck } from '../validate.js';
import { alignmentBytes } from './gemm-plan.js';
import type { ColumnMajorLayout } from './gemm-plan.js';
import { CudaTensor } from './runtime/tensor.js';

/** cudaDataType_t (library_types.h): CUDA_R_8I = 3, CUDA_R_32I = 10. */
export const CUDA_R_8I = 3;
export const CUDA_R_32I = 10;
/** cublasComputeType_t (cublas_api.h): CUBLAS_COMPUTE_32I = 72. */
export const CUBLAS_COMPUTE_32I = 72;

export interface Int8GemmPlan {
  /** cuBLAS m, n, k. */
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly opA: number;
  readonly opB: number;
  /** cuBLAS A = our b (i8), B = our a (i8), D = our out (i32). */
  readonly layoutA: ColumnMajorLayout;
  readonly layoutB: ColumnMajorLayout;
  readonly layoutD: ColumnMajorLayout;
}

/** The column-major problem for row-major out [M, N] = a [M, K] · b [N, K]ᵀ (pure; see the file comment). */
export function planInt8Gemm(M: number, N: number, K: number): Int8GemmPlan {
  return {
    m: N, n: M, k: K,
    opA: CublasOperation.T, opB: CublasOperation.N,
    layoutA: { rows: K, cols: N, ld: K, batchStride: 0 },
    layoutB: { rows: K, cols: M, ld: K, batchStride: 0 },
    layoutD: { rows: N, cols: M, ld: N, batchStride: 0 },
  };
}

interface Entry {
  readonly key: string;
  readonly desc: bigint;
  readonly layouts: readonly [bigint, bigint, bigint];
  readonly candidates: readonly HeuristicResult[];
  chosen: number;
  verified: boolean;
}

const DEFAULT_CANDIDATES = 8;

export class Int8GemmRunner {
  private readonly lt: CublasLt;
  private readonly handle: bigint;
  private readonly preference: bigint;
  private readonly cache = new Map<string, Entry>();
  private readonly alpha = Int32Array.of(1);
  private readonly beta = Int32Array.of(0);
  private disposed = false;

  constructor(readonly stream: bigint, readonly workspace: bigint, readonly workspaceBytes: number, library?: CublasLt) {
    this.lt = library ?? cublasLt();
    this.handle = this.lt.create();
    this.preference = this.lt.preferenceCreate();
    this.lt.preferenceSetAttribute(this.preference, MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, 'u64', workspaceBytes);
  }

  gemm(args: Int8GemmArgs): void {
    if (this.disposed) throw new ArgumentError('int8Gemm: used after dispose()');
    const c = new OpCheck('int8Gemm', 'cuda');
    const { a, b, out, M, N, K } = checkInt8Gemm(c, args);
    if (K % 4 !== 0 || N % 4 !== 0) c.fail(`cuBLASLt's int8 kernels need K and N to be multiples of 4, got K = ${K}, N = ${N}`);
    if (M === 0 || N === 0) return;
    const pointer = (name: string, t: unknown): bigint => {
      if (!(t instanceof CudaTensor)) return c.fail(`'${name}' is not a CudaTensor (it has no device address)`);
      return t.ptr;
    };
    const pa = pointer('a', a), pb = pointer('b', b), po = pointer('out', out);
    const plan = planInt8Gemm(M, N, K);
    // cuBLAS A is our b, B is our a, D is out; alignment counts the address and the leading dimension.
    const align = { a: alignmentBytes(pb, K), b: alignmentBytes(pa, K), d: alignmentBytes(po, N * 4) };
    if (align.a < 4 || align.b < 4 || align.d < 4) c.fail(`'a', 'b' and 'out' must be at least 4-byte aligned (cuBLASLt IMMA)`);
    const key = `${M}x${N}x${K} align${align.a},${align.b},${align.d}`;
    let entry = this.cache.get(key);
    if (!entry) {
      entry = this.createEntry(key, plan, align);
      this.cache.set(key, entry);
    }
    const status = this.matmul(entry, entry.chosen, pa, pb, po);
    if (status === CUBLAS_STATUS_SUCCESS) { entry.verified = true; return; }
    if (entry.verified) checkCublas('cublasLtMatmul', status, `int8Gemm ${key}`);
    for (let i = 0; i < entry.candidates.length; i++) {
      if (i !== entry.chosen && this.matmul(entry, i, pa, pb, po) === CUBLAS_STATUS_SUCCESS) {
        entry.chosen = i;
        entry.verified = true;
        return;
      }
    }
    if (status === CUBLAS_STATUS_NOT_SUPPORTED || status === CUBLAS_STATUS_INVALID_VALUE) {
      throw new ArgumentError(`int8Gemm: cuBLASLt ${this.lt.version} cannot run M=${M} N=${N} K=${K}: every candidate answered ${cublasStatusName(status)}`);
    }
    checkCublas('cublasLtMatmul', status, `int8Gemm ${key}`);
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const e of this.cache.values()) {
      for (const layout of e.layouts) this.lt.matrixLayoutDestroy(layout);
      this.lt.matmulDescDestroy(e.desc);
    }
    this.cache.clear();
    this.lt.preferenceDestroy(this.preference);
    this.lt.destroy(this.handle);
  }

  private matmul(entry: Entry, candidate: number, a: bigint, b: bigint, out: bigint): number {
    const [layoutA, layoutB, layoutD] = entry.layouts;
    return this.lt.matmul(this.handle, entry.desc, this.alpha, b, layoutA, a, layoutB, this.beta, out, layoutD, out, layoutD,
      entry.candidates[candidate]!.algo, this.workspace, this.workspaceBytes, this.stream);
  }

  private createEntry(key: string, plan: Int8GemmPlan, align: { a: number; b: number; d: number }): Entry {
    const lt = this.lt;
    const desc = lt.matmulDescCreate(CUBLAS_COMPUTE_32I, CUDA_R_32I);
    const layouts: bigint[] = [];
    try {
      lt.matmulDescSetAttribute(desc, MatmulDescAttribute.TRANSA, 'i32', plan.opA);
      lt.matmulDescSetAttribute(desc, MatmulDescAttribute.TRANSB, 'i32', plan.opB);
      layouts.push(lt.matrixLayoutCreate(CUDA_R_8I, plan.layoutA.rows, plan.layoutA.cols, plan.layoutA.ld));
      layouts.push(lt.matrixLayoutCreate(CUDA_R_8I, plan.layoutB.rows, plan.layoutB.cols, plan.layoutB.ld));
      layouts.push(lt.matrixLayoutCreate(CUDA_R_32I, plan.layoutD.rows, plan.layoutD.cols, plan.layoutD.ld));
      const pref = this.preference;
      lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_A_BYTES, 'u32', align.a);
      lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_B_BYTES, 'u32', align.b);
      lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_C_BYTES, 'u32', align.d);
      lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_D_BYTES, 'u32', align.d);
      const candidates = lt.algoGetHeuristic(this.handle, desc, layouts[0]!, layouts[1]!, layouts[2]!, layouts[2]!, pref, DEFAULT_CANDIDATES)
        .filter((r) => r.workspaceSize <= this.workspaceBytes);
      if (candidates.length === 0) {
        throw new ArgumentError(`int8Gemm: cuBLASLt ${lt.version} has no int8 algorithm for ${key} (TN, i8 inputs, i32 output)`);
      }
      return { key, desc, layouts: [layouts[0]!, layouts[1]!, layouts[2]!], candidates, chosen: 0, verified: false };
    } catch (error) {
      for (const layout of layouts) lt.matrixLayoutDestroy(layout);
      lt.matmulDescDestroy(desc);
      throw error;
    }
  }
}
