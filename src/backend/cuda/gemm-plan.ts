// Row-major GEMM on column-major cuBLASLt: argument checks, the operand mapping, and the algorithm
// cache key. Pure functions (no FFI), so the CPU test suite covers them.
//
// The mapping. A row-major [R, C] matrix in memory is, read column-major, the C × R matrix (its
// transpose) with leading dimension C. So our out [M, N] is cuBLAS's D = outᵀ (N × M, ld N), and
//     outᵀ = (op(a)·op(b))ᵀ = op(b)ᵀ·op(a)ᵀ
// which cuBLAS computes as D = op(A)·op(B) with
//     cuBLAS A := our b, op flag = transB        cuBLAS B := our a, op flag = transA
//     m = N,  n = M,  k = K.
// (Memory of b [K, N] read column-major is bᵀ, exactly op(b)ᵀ, so no flag flips: the flags only move.)
//
// Epilogues in cuBLAS terms: the bias vector runs along D's rows (length m = N), broadcast over its
// columns, which is our bias [N] added to every row of out. The GELU aux matrix has D's shape, so our
// preActivation [M, N] is read with ld N. DGELU_BGRAD's bias gradient is the sum over D's columns per
// row of D: length m = N, biasGrad[n] = Σ_m out[m, n]. For 'bgrad_a' our `a` is cuBLAS's B, so the
// epilogue is BGRADB: "length = columns of D (n = M), reduced over k", i.e.
//     biasGrad[j] = Σ_k op(B)[k, j] = Σ_k op(a)ᵀ[k, j] = Σ_k op(a)[j, k],
// which is our contract biasGrad[m] = Σ_k op(a)[m, k]. (BGRADA would sum our b instead.)
// Measured on an H200 with cuBLASLt 13.1: BGRADB has algorithms only when op(B) = T, i.e. our transA;
// the heuristic returns none for transA = false in every dtype, so checkGemm refuses that up front.

import type { BatchedGemmArgs, GemmArgs, GemmEpilogue } from '../backend.js';
import type { FloatDType } from '../../dtype.js';
import { OpCheck } from '../validate.js';
import { checkRowArgmax } from '../op-checks/index.js';
import type { Dim } from '../validate.js';
import { CublasLtEpilogue, CublasOperation, CudaDataType } from '../../cuda/cublaslt.js';
import { CudaTensor } from './runtime/tensor.js';
import { LayoutError } from '../../errors.js';
import type { Tensor } from '../../tensor.js';

/** The problem as cuBLASLt sees its shape-dependent parts: everything the algorithm choice depends on. */
export interface GemmProblem {
  readonly dtype: FloatDType;
  readonly M: number;
  readonly N: number;
  readonly K: number;
  readonly batch: number;
  readonly transA: boolean;
  readonly transB: boolean;
  readonly epilogue: GemmEpilogue;
  /** 'gelu_bias' writes the pre-GELU matrix only when a preActivation tensor is given. */
  readonly writesPreActivation: boolean;
}

/** A matrix as cuBLASLt describes it: column-major rows × cols, leading dimension and batch stride in elements. */
export interface ColumnMajorLayout {
  readonly rows: number;
  readonly cols: number;
  readonly ld: number;
  readonly batchStride: number;
}

export interface CublasGemmPlan {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly batch: number;
  /** cuBLAS A is our b; its op flag is our transB. */
  readonly opA: number;
  /** cuBLAS B is our a; its op flag is our transA. */
  readonly opB: number;
  readonly layoutA: ColumnMajorLayout;
  readonly layoutB: ColumnMajorLayout;
  /** C and D share this layout (our out). */
  readonly layoutD: ColumnMajorLayout;
  readonly dataType: number;
  readonly epilogue: number;
  /** Which of our tensors goes to CUBLASLT_MATMUL_DESC_BIAS_POINTER, and its length. */
  readonly biasOperand: 'bias' | 'biasGrad' | null;
  readonly biasLength: number;
  /** CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD when the epilogue reads or writes preActivation, else null. */
  readonly auxLd: number | null;
}

export const CUDA_DATA_TYPE: Readonly<Record<FloatDType, number>> = {
  f32: CudaDataType.R_32F,
  f16: CudaDataType.R_16F,
  bf16: CudaDataType.R_16BF,
};

/** cuBLASLt takes rows, columns and batch counts as int32 in practice ("usually only values that fit int32"). */
const INT32_MAX = 2 ** 31 - 1;

/** Largest alignment cuBLASLt asks about (its CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_* default). */
export const MAX_ALIGNMENT_BYTES = 256;

// --- the plan ------------------------------------------------------------------------------------------

/** Column-major view of a contiguous row-major [rows, cols] matrix (batch-strided by rows·cols). */
function rowMajorAsColumnMajor(rows: number, cols: number): ColumnMajorLayout {
  return { rows: cols, cols: rows, ld: cols, batchStride: rows * cols };
}

export function cublasEpilogue(epilogue: GemmEpilogue, writesPreActivation: boolean): number {
  switch (epilogue) {
    case 'none': return CublasLtEpilogue.DEFAULT;
    case 'bias': return CublasLtEpilogue.BIAS;
    case 'relu_bias': return CublasLtEpilogue.RELU_BIAS;
    case 'gelu_bias': return writesPreActivation ? CublasLtEpilogue.GELU_AUX_BIAS : CublasLtEpilogue.GELU_BIAS;
    case 'dgelu': return CublasLtEpilogue.DGELU;
    case 'dgelu_bgrad': return CublasLtEpilogue.DGELU_BGRAD;
    case 'bgrad_a': return CublasLtEpilogue.BGRADB; // our a is cuBLAS's B (see the header comment)
  }
}

/** Whether the epilogue reads or writes the preActivation (GELU aux) matrix. */
export function usesPreActivation(epilogue: GemmEpilogue, writesPreActivation: boolean): boolean {
  return epilogue === 'dgelu' || epilogue === 'dgelu_bgrad' || (epilogue === 'gelu_bias' && writesPreActivation);
}

export function planGemm(p: GemmProblem): CublasGemmPlan {
  const { M, N, K } = p;
  // Stored shapes: a is [M, K] or [K, M] (transA); b is [K, N] or [N, K] (transB).
  const aStored = p.transA ? [K, M] : [M, K];
  const bStored = p.transB ? [N, K] : [K, N];
  const biasOperand = p.epilogue === 'bias' || p.epilogue === 'relu_bias' || p.epilogue === 'gelu_bias' ? 'bias'
    : p.epilogue === 'dgelu_bgrad' || p.epilogue === 'bgrad_a' ? 'biasGrad' : null;
  return {
    m: N,
    n: M,
    k: K,
    batch: p.batch,
    opA: p.transB ? CublasOperation.T : CublasOperation.N,
    opB: p.transA ? CublasOperation.T : CublasOperation.N,
    layoutA: rowMajorAsColumnMajor(bStored[0]!, bStored[1]!),
    layoutB: rowMajorAsColumnMajor(aStored[0]!, aStored[1]!),
    layoutD: rowMajorAsColumnMajor(M, N),
    dataType: CUDA_DATA_TYPE[p.dtype],
    epilogue: cublasEpilogue(p.epilogue, p.writesPreActivation),
    biasOperand,
    biasLength: biasOperand === null ? 0 : p.epilogue === 'bgrad_a' ? M : N,
    auxLd: usesPreActivation(p.epilogue, p.writesPreActivation) ? N : null,
  };
}

// --- alignment and the cache key --------------------------------------------------------------------------

/**
 * The largest power of two (≤ 256) dividing the address and every stride in bytes. cuBLASLt kernels
 * use vector loads as wide as the operand allows; the heuristic must be told the real alignment of
 * each operand (pointer, leading dimension, batch stride) or it may pick a kernel that cannot run.
 */
export function alignmentBytes(address: bigint, ...strideBytes: number[]): number {
  // Only the low bits matter; `|` keeps them (ToInt32 is exact modulo 2^32 for integer strides).
  let bits = Number(address & 0xffn) | MAX_ALIGNMENT_BYTES;
  for (const stride of strideBytes) bits |= stride;
  return bits & -bits;
}

/** Alignment in bytes of each cuBLAS operand, in cuBLAS's naming (A is our b, B is our a, D is out). */
export interface OperandAlignment {
  readonly a: number;
  readonly b: number;
  readonly d: number;
  /** Of the bias or bias-gradient vector (MAX_ALIGNMENT_BYTES when the epilogue has none). */
  readonly bias: number;
  /** Of the preActivation matrix (MAX_ALIGNMENT_BYTES when unused). */
  readonly aux: number;
}

export interface OperandAddresses {
  /** Our a, b, out. */
  readonly a: bigint;
  readonly b: bigint;
  readonly out: bigint;
  readonly bias?: bigint;
  readonly aux?: bigint;
}

export function operandAlignment(plan: CublasGemmPlan, addresses: OperandAddresses, elementBytes: number): OperandAlignment {
  const of = (address: bigint, layout: ColumnMajorLayout) =>
    alignmentBytes(address, layout.ld * elementBytes, plan.batch > 1 ? layout.batchStride * elementBytes : 0);
  return {
    a: of(addresses.b, plan.layoutA),
    b: of(addresses.a, plan.layoutB),
    d: of(addresses.out, plan.layoutD),
    bias: addresses.bias === undefined ? MAX_ALIGNMENT_BYTES : alignmentBytes(addresses.bias),
    aux: addresses.aux === undefined ? MAX_ALIGNMENT_BYTES : alignmentBytes(addresses.aux, (plan.auxLd ?? 0) * elementBytes),
  };
}

/** The algorithm cache key: the problem plus operand alignments (the heuristic's answer depends on both). */
export function gemmCacheKey(p: GemmProblem, align: OperandAlignment): string {
  return `${p.dtype} ${p.M}x${p.N}x${p.K} ${p.transA ? 'T' : 'N'}${p.transB ? 'T' : 'N'} ${p.epilogue}` +
    `${p.writesPreActivation ? '+pre' : ''} batch${p.batch} align${align.a},${align.b},${align.d},${align.bias},${align.aux}`;
}

// --- argument checks ------------------------------------------------------------------------------------

export interface CheckedGemm {
  readonly problem: GemmProblem;
  readonly a: CudaTensor;
  readonly b: CudaTensor;
  readonly out: CudaTensor;
  /** bias (forward epilogues) or biasGrad (bias-gradient epilogues), by plan.biasOperand. */
  readonly bias?: CudaTensor;
  readonly biasGrad?: CudaTensor;
  readonly preActivation?: CudaTensor;
  readonly alpha: number;
  readonly beta: number;
  /** GemmArgs.argmax (the GEMV forms it; other paths refuse it). */
  readonly argmax?: { readonly out: CudaTensor; readonly classes: number };
}

const FLOAT_TYPES = ['f32', 'f16', 'bf16'] as const;

/** A contiguous tensor made by the CUDA backend whose memory has not been freed. */
function cudaTensor(check: OpCheck, name: string, t: Tensor | undefined): CudaTensor {
  const checked = check.tensor(name, t);
  if (!(checked instanceof CudaTensor)) {
    throw new LayoutError(`${check.op}: '${name}' says it is a cuda tensor but was not made by the CUDA backend`);
  }
  if (checked.block?.freed) check.fail(`'${name}' was freed`);
  return checked;
}

function checkDims(check: OpCheck, M: number, N: number, K: number, batch: number): void {
  for (const [name, value] of [['M', M], ['N', N], ['K', K], ['batch', batch]] as const) {
    if (value < 1) check.fail(`${name} is ${value}: empty matrices are not supported (M = ${M}, N = ${N}, K = ${K}, batch = ${batch})`);
    if (value > INT32_MAX) check.fail(`${name} = ${value} is larger than cuBLASLt supports (2^31 - 1)`);
  }
}

function operandPatterns(transA: boolean, transB: boolean, batched: boolean): { a: Dim[]; b: Dim[]; out: Dim[] } {
  const lead: Dim[] = batched ? ['batch'] : [];
  return {
    a: [...lead, ...(transA ? ['K', 'M'] : ['M', 'K'])],
    b: [...lead, ...(transB ? ['N', 'K'] : ['K', 'N'])],
    out: [...lead, 'M', 'N'],
  };
}

function checkScalars(check: OpCheck, alpha: number, beta: number): void {
  check.finite('alpha', alpha);
  check.finite('beta', beta);
}

/** Which optional tensors each epilogue requires ('need'), accepts ('may') or rejects (absent). */
const EPILOGUE_OPERANDS: Readonly<Record<GemmEpilogue, Partial<Record<'bias' | 'preActivation' | 'biasGrad', 'need' | 'may'>>>> = {
  none: {},
  bias: { bias: 'need' },
  relu_bias: { bias: 'need' },
  gelu_bias: { bias: 'need', preActivation: 'may' },
  dgelu: { preActivation: 'need' },
  dgelu_bgrad: { preActivation: 'need', biasGrad: 'need' },
  bgrad_a: { biasGrad: 'need' },
};

const EPILOGUES = Object.keys(EPILOGUE_OPERANDS) as GemmEpilogue[];

export function checkGemm(args: GemmArgs): CheckedGemm {
  const check = new OpCheck('gemm', 'cuda');
  const epilogue = args.epilogue ?? 'none';
  if (!EPILOGUES.includes(epilogue)) check.fail(`unknown epilogue '${String(epilogue)}': expected one of ${EPILOGUES.join(', ')}`);
  const transA = args.transA ?? false, transB = args.transB ?? false;
  const a = cudaTensor(check, 'a', args.a), b = cudaTensor(check, 'b', args.b), out = cudaTensor(check, 'out', args.out);
  const patterns = operandPatterns(transA, transB, false);
  check.shape('a', a, patterns.a);
  check.shape('b', b, patterns.b);
  check.shape('out', out, patterns.out);
  const M = check.size('M'), N = check.size('N'), K = check.size('K');
  checkDims(check, M, N, K, 1);

  const names = ['a', 'b', 'out'];
  const tensors: CudaTensor[] = [a, b, out];
  const optional = { bias: args.bias, preActivation: args.preActivation, biasGrad: args.biasGrad };
  const shapes = { bias: ['N'], preActivation: ['M', 'N'], biasGrad: [epilogue === 'bgrad_a' ? 'M' : 'N'] } as const;
  const rules = EPILOGUE_OPERANDS[epilogue];
  for (const name of ['bias', 'preActivation', 'biasGrad'] as const) {
    const t = optional[name];
    const rule = rules[name];
    if (t === undefined) {
      if (rule === 'need') check.fail(`epilogue '${epilogue}' needs '${name}'`);
      continue;
    }
    if (rule === undefined) check.fail(`'${name}' was given but epilogue '${epilogue}' does not use it`);
    tensors.push(cudaTensor(check, name, t));
    check.shape(name, t, shapes[name]);
    names.push(name);
  }
  check.dtype('a', a, FLOAT_TYPES);
  check.sameDType(names, tensors);

  const alpha = args.alpha ?? 1, beta = args.beta ?? 0;
  checkScalars(check, alpha, beta);
  if (beta !== 0 && epilogue !== 'none') {
    check.fail(`beta = ${beta} is only supported with epilogue 'none' (got '${epilogue}'): the fused epilogues overwrite out`);
  }
  if (epilogue === 'bgrad_a' && !transA) {
    check.fail(`epilogue 'bgrad_a' needs transA = true: cuBLASLt has bias-gradient kernels (BGRADB) only for a transposed ` +
      `reduced operand, which is the weight-gradient layout dW = dYᵀ·X (a = dY [rows, out] with transA). ` +
      `For an untransposed a, run the GEMM with epilogue 'none' and reduce a separately`);
  }
  const writesPreActivation = epilogue === 'gelu_bias' && optional.preActivation !== undefined;
  if (usesPreActivation(epilogue, writesPreActivation) && N % 8 !== 0) {
    check.fail(`epilogue '${epilogue}' with a preActivation matrix needs N (the row length of out) to be a multiple of 8, got N = ${N}: ` +
      `cuBLASLt requires the GELU auxiliary matrix's leading dimension to be divisible by 8. Pad N, or run the GEMM and the activation separately`);
  }

  const argmax = args.argmax ? checkRowArgmax(check, args.argmax, M, N) : undefined;
  if (argmax) {
    const argmaxOut = cudaTensor(check, 'argmax.out', args.argmax!.out);
    names.push('argmax.out');
    tensors.push(argmaxOut);
  }
  const written = new Set(['out', 'biasGrad', 'argmax.out', ...(writesPreActivation ? ['preActivation'] : [])]);
  checkNoOverlap(check, names, tensors, written);

  return {
    problem: { dtype: a.dtype as FloatDType, M, N, K, batch: 1, transA, transB, epilogue, writesPreActivation },
    a,
    b,
    out,
    ...(optional.bias ? { bias: optional.bias as CudaTensor } : {}),
    ...(optional.biasGrad ? { biasGrad: optional.biasGrad as CudaTensor } : {}),
    ...(optional.preActivation ? { preActivation: optional.preActivation as CudaTensor } : {}),
    ...(argmax ? { argmax: { out: argmax.out as CudaTensor, classes: argmax.classes } } : {}),
    alpha,
    beta,
  };
}

export function checkBatchedGemm(args: BatchedGemmArgs): CheckedGemm {
  const check = new OpCheck('batchedGemm', 'cuda');
  const transA = args.transA ?? false, transB = args.transB ?? false;
  const a = cudaTensor(check, 'a', args.a), b = cudaTensor(check, 'b', args.b), out = cudaTensor(check, 'out', args.out);
  const patterns = operandPatterns(transA, transB, true);
  check.shape('a', a, patterns.a);
  check.shape('b', b, patterns.b);
  check.shape('out', out, patterns.out);
  const M = check.size('M'), N = check.size('N'), K = check.size('K'), batch = check.size('batch');
  checkDims(check, M, N, K, batch);
  check.dtype('a', a, FLOAT_TYPES);
  check.sameDType(['a', 'b', 'out'], [a, b, out]);
  const alpha = args.alpha ?? 1, beta = args.beta ?? 0;
  checkScalars(check, alpha, beta);
  checkNoOverlap(check, ['a', 'b', 'out'], [a, b, out], new Set(['out']));
  return {
    problem: { dtype: a.dtype as FloatDType, M, N, K, batch, transA, transB, epilogue: 'none', writesPreActivation: false },
    a,
    b,
    out,
    alpha,
    beta,
  };
}

/** cuBLASLt gives no result for outputs that overlap another operand (it reads and writes tiles in any order). */
function checkNoOverlap(check: OpCheck, names: readonly string[], tensors: readonly CudaTensor[], written: ReadonlySet<string>): void {
  for (let i = 0; i < tensors.length; i++) {
    for (let j = i + 1; j < tensors.length; j++) {
      if (!written.has(names[i]!) && !written.has(names[j]!)) continue;
      const x = tensors[i]!, y = tensors[j]!;
      if (rangesOverlap(x.ptr, x.bytes, y.ptr, y.bytes)) {
        check.fail(`'${names[i]}' and '${names[j]}' overlap in memory; the output of a GEMM must not alias another operand`);
      }
    }
  }
}

/** The operand addresses of a checked call (bias slot holds biasGrad for the gradient epilogues). */
export function operandAddresses(call: CheckedGemm): OperandAddresses {
  const biasTensor = call.bias ?? call.biasGrad;
  return {
    a: call.a.ptr,
    b: call.b.ptr,
    out: call.out.ptr,
    ...(biasTensor ? { bias: biasTensor.ptr } : {}),
    ...(call.preActivation ? { aux: call.preActivation.ptr } : {}),
  };
}

/** Whether two byte ranges [start, start + bytes) overlap. */
export function rangesOverlap(startA: bigint, bytesA: number, startB: bigint, bytesB: number): boolean {
  return startA < startB + BigInt(bytesB) && startB < startA + BigInt(bytesA);
}
