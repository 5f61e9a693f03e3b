// The row-major → column-major GEMM mapping, checked by simulating cuBLASLt's documented
// column-major semantics on the plan and comparing with our row-major contract; plus the epilogue
// mapping, alignments, cache keys and every argument check.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { GemmArgs, GemmEpilogue } from '../../../src/backend/backend.js';
import {
  alignmentBytes, checkBatchedGemm, checkGemm, gemmCacheKey, operandAddresses, operandAlignment, planGemm, rangesOverlap,
} from '../../../src/backend/cuda/gemm-plan.js';
import type { ColumnMajorLayout, CublasGemmPlan, GemmProblem, OperandAlignment } from '../../../src/backend/cuda/gemm-plan.js';
import { CudaTensor } from '../../../src/backend/cuda/runtime/tensor.js';
import { CublasLtEpilogue, CublasOperation, CudaDataType } from '../../../src/cuda/cublaslt.js';
import type { DType } from '../../../src/dtype.js';
import { ArgumentError, DTypeError, LayoutError, ShapeError } from '../../../src/errors.js';
import { Rng } from '../../../src/testing/random.js';
import { Tensor } from '../../../src/tensor.js';

function problem(overrides: Partial<GemmProblem> = {}): GemmProblem {
  return { dtype: 'f16', M: 2, N: 3, K: 4, batch: 1, transA: false, transB: false, epilogue: 'none', writesPreActivation: false, ...overrides };
}

// --- a column-major cuBLAS simulator -----------------------------------------------------------------

/** Element (r, c) of op(X) for a column-major matrix with this layout, in batch item `item`. */
function opElement(x: Float64Array, layout: ColumnMajorLayout, op: number, item: number, r: number, c: number): number {
  const [row, col] = op === CublasOperation.T ? [c, r] : [r, c];
  return x[item * layout.batchStride + row + col * layout.ld]!;
}

/** D = op(A)·op(B) (m × n per batch item, column-major with D's layout), as cuBLAS defines it. */
function cublasMatmul(plan: CublasGemmPlan, A: Float64Array, B: Float64Array): Float64Array {
  const D = new Float64Array(plan.batch * plan.layoutD.batchStride);
  for (let item = 0; item < plan.batch; item++) {
    for (let i = 0; i < plan.m; i++) {
      for (let j = 0; j < plan.n; j++) {
        let acc = 0;
        for (let l = 0; l < plan.k; l++) acc += opElement(A, plan.layoutA, plan.opA, item, i, l) * opElement(B, plan.layoutB, plan.opB, item, l, j);
        D[item * plan.layoutD.batchStride + i + j * plan.layoutD.ld] = acc;
      }
    }
  }
  return D;
}

/** Our row-major contract: out[b][m][n] = Σ_k op(a)[b][m][k] · op(b)[b][k][n]. */
function rowMajorGemm(p: GemmProblem, a: Float64Array, b: Float64Array): Float64Array {
  const { M, N, K } = p;
  const out = new Float64Array(p.batch * M * N);
  for (let item = 0; item < p.batch; item++) {
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        let acc = 0;
        for (let k = 0; k < K; k++) {
          const av = a[item * M * K + (p.transA ? k * M + m : m * K + k)]!;
          const bv = b[item * K * N + (p.transB ? n * K + k : k * N + n)]!;
          acc += av * bv;
        }
        out[item * M * N + m * N + n] = acc;
      }
    }
  }
  return out;
}

function randomValues(rng: Rng, n: number): Float64Array {
  return Float64Array.from({ length: n }, () => Math.round(rng.normal() * 8)); // small integers: exact sums
}

test('the column-major plan computes exactly our row-major product, for every transpose and batch', () => {
  const rng = new Rng(7);
  for (const transA of [false, true]) {
    for (const transB of [false, true]) {
      for (const [M, N, K, batch] of [[2, 3, 4, 1], [5, 1, 3, 1], [1, 7, 2, 1], [3, 4, 5, 3]] as const) {
        const p = problem({ M, N, K, batch, transA, transB });
        const plan = planGemm(p);
        const a = randomValues(rng, batch * M * K), b = randomValues(rng, batch * K * N);
        // Same memory, two readings: cuBLAS A is our b and cuBLAS B is our a; D's memory is out's.
        assert.deepEqual(cublasMatmul(plan, b, a), rowMajorGemm(p, a, b), `M=${M} N=${N} K=${K} batch=${batch} transA=${transA} transB=${transB}`);
      }
    }
  }
});

test('the plan swaps operands and moves (never flips) the transpose flags', () => {
  const nn = planGemm(problem());
  assert.deepEqual([nn.m, nn.n, nn.k], [3, 2, 4]);
  assert.deepEqual([nn.opA, nn.opB], [CublasOperation.N, CublasOperation.N]);
  assert.deepEqual(nn.layoutA, { rows: 3, cols: 4, ld: 3, batchStride: 12 }); // our b [K=4, N=3]
  assert.deepEqual(nn.layoutB, { rows: 4, cols: 2, ld: 4, batchStride: 8 }); // our a [M=2, K=4]
  assert.deepEqual(nn.layoutD, { rows: 3, cols: 2, ld: 3, batchStride: 6 }); // out [M=2, N=3]
  const tn = planGemm(problem({ transA: true }));
  assert.deepEqual([tn.opA, tn.opB], [CublasOperation.N, CublasOperation.T]);
  assert.deepEqual(tn.layoutB, { rows: 2, cols: 4, ld: 2, batchStride: 8 }); // our a stored [K=4, M=2]
  const nt = planGemm(problem({ transB: true }));
  assert.deepEqual([nt.opA, nt.opB], [CublasOperation.T, CublasOperation.N]);
  assert.deepEqual(nt.layoutA, { rows: 4, cols: 3, ld: 4, batchStride: 12 }); // our b stored [N=3, K=4]
  assert.equal(planGemm(problem({ dtype: 'bf16' })).dataType, CudaDataType.R_16BF);
  assert.equal(planGemm(problem({ dtype: 'f32' })).dataType, CudaDataType.R_32F);
});

test('epilogues map to cuBLASLt with the bias along D rows (our N) and the aux ld N', () => {
  const cases: [GemmEpilogue, boolean, number, 'bias' | 'biasGrad' | null, number, number | null][] = [
    ['none', false, CublasLtEpilogue.DEFAULT, null, 0, null],
    ['bias', false, CublasLtEpilogue.BIAS, 'bias', 3, null],
    ['relu_bias', false, CublasLtEpilogue.RELU_BIAS, 'bias', 3, null],
    ['gelu_bias', false, CublasLtEpilogue.GELU_BIAS, 'bias', 3, null],
    ['gelu_bias', true, CublasLtEpilogue.GELU_AUX_BIAS, 'bias', 3, 3],
    ['dgelu', false, CublasLtEpilogue.DGELU, null, 0, 3],
    ['dgelu_bgrad', false, CublasLtEpilogue.DGELU_BGRAD, 'biasGrad', 3, 3],
    ['bgrad_a', false, CublasLtEpilogue.BGRADB, 'biasGrad', 2, null],
  ];
  for (const [epilogue, writesPreActivation, code, biasOperand, biasLength, auxLd] of cases) {
    const plan = planGemm(problem({ epilogue, writesPreActivation }));
    assert.deepEqual([plan.epilogue, plan.biasOperand, plan.biasLength, plan.auxLd], [code, biasOperand, biasLength, auxLd], epilogue);
  }
});

test('the bias-gradient epilogues sum what our contract says', () => {
  // BGRADB (cuBLAS doc: length = columns of D, reduced over k) on the plan equals Σ_k op(a)[m, k];
  // DGELU_BGRAD's vector runs along D's rows (length m) and sums over D's columns: Σ_m out[m, n].
  const rng = new Rng(11);
  for (const transA of [false, true]) {
    const p = problem({ M: 3, N: 5, K: 4, transA, epilogue: 'bgrad_a' });
    const plan = planGemm(p);
    const a = randomValues(rng, p.M * p.K);
    const bgradB = Array.from({ length: plan.n }, (_, j) => {
      let s = 0;
      for (let l = 0; l < plan.k; l++) s += opElement(a, plan.layoutB, plan.opB, 0, l, j);
      return s;
    });
    const ours = Array.from({ length: p.M }, (_, m) => {
      let s = 0;
      for (let k = 0; k < p.K; k++) s += a[transA ? k * p.M + m : m * p.K + k]!;
      return s;
    });
    assert.equal(plan.biasLength, plan.n);
    assert.deepEqual(bgradB, ours);
  }
  const p = problem({ M: 3, N: 5, K: 2, epilogue: 'dgelu_bgrad' });
  const plan = planGemm(p);
  const a = randomValues(rng, p.M * p.K), b = randomValues(rng, p.K * p.N);
  const D = cublasMatmul(plan, b, a);
  const rowSumsOfD = Array.from({ length: plan.m }, (_, i) => {
    let s = 0;
    for (let j = 0; j < plan.n; j++) s += D[i + j * plan.layoutD.ld]!;
    return s;
  });
  const out = rowMajorGemm(p, a, b);
  const columnSumsOfOut = Array.from({ length: p.N }, (_, n) => {
    let s = 0;
    for (let m = 0; m < p.M; m++) s += out[m * p.N + n]!;
    return s;
  });
  assert.equal(plan.biasLength, plan.m);
  assert.deepEqual(rowSumsOfD, columnSumsOfOut);
});

test('alignment is the largest power of two up to 256 dividing the address and the strides', () => {
  assert.equal(alignmentBytes(0x7f0000001000n), 256);
  assert.equal(alignmentBytes(0x7f0000001002n), 2);
  assert.equal(alignmentBytes(0x7f0000001010n), 16);
  assert.equal(alignmentBytes(0x1000n, 6), 2);
  assert.equal(alignmentBytes(0x1000n, 0, 768 * 2), 256);
  assert.equal(alignmentBytes(0x1000n, 2 ** 33 + 8), 8);
  assert.equal(alignmentBytes(0x1000n, 127 * 2), 2);
});

test('operand alignments come out in cuBLAS naming (A is our b) and include ld and batch stride', () => {
  const plan = planGemm(problem({ M: 64, N: 64, K: 64 }));
  const aligned = operandAlignment(plan, { a: 0x10000n, b: 0x20000n, out: 0x30000n }, 2);
  assert.deepEqual(aligned, { a: 128, b: 128, d: 128, bias: 256, aux: 256 }); // ld 64 × 2 bytes = 128
  const bOff = operandAlignment(plan, { a: 0x10000n, b: 0x20004n, out: 0x30000n, bias: 0x40008n }, 2);
  assert.deepEqual([bOff.a, bOff.b, bOff.bias], [4, 128, 8]);
  const odd = planGemm(problem({ M: 5, N: 33, K: 7, batch: 3, epilogue: 'none' }));
  const oddAlign = operandAlignment(odd, { a: 0x10000n, b: 0x20000n, out: 0x30000n }, 2);
  assert.deepEqual([oddAlign.a, oddAlign.b, oddAlign.d], [2, 2, 2]);
});

test('cache keys separate everything the algorithm depends on', () => {
  const align: OperandAlignment = { a: 256, b: 256, d: 256, bias: 256, aux: 256 };
  const base = gemmCacheKey(problem(), align);
  assert.equal(gemmCacheKey(problem(), { ...align }), base);
  const variants = [
    gemmCacheKey(problem({ dtype: 'bf16' }), align),
    gemmCacheKey(problem({ M: 3 }), align),
    gemmCacheKey(problem({ N: 4 }), align),
    gemmCacheKey(problem({ K: 5 }), align),
    gemmCacheKey(problem({ transA: true }), align),
    gemmCacheKey(problem({ transB: true }), align),
    gemmCacheKey(problem({ batch: 2 }), align),
    gemmCacheKey(problem({ epilogue: 'bias' }), align),
    gemmCacheKey(problem({ epilogue: 'gelu_bias' }), align),
    gemmCacheKey(problem({ epilogue: 'gelu_bias', writesPreActivation: true }), align),
    gemmCacheKey(problem(), { ...align, a: 16 }),
    gemmCacheKey(problem(), { ...align, b: 16 }),
    gemmCacheKey(problem(), { ...align, d: 16 }),
    gemmCacheKey(problem(), { ...align, bias: 16 }),
    gemmCacheKey(problem(), { ...align, aux: 16 }),
  ];
  assert.equal(new Set([base, ...variants]).size, variants.length + 1);
});

// --- argument checks -------------------------------------------------------------------------------------

let nextAddress = 0x7f00_0000_0000n;
function dev(shape: number[], dtype: DType = 'f16', strides?: number[]): CudaTensor {
  const ptr = nextAddress;
  nextAddress += 0x100_0000n; // far apart: no accidental overlap
  return new CudaTensor(ptr, shape, dtype, null, strides);
}

function gemmArgs(M: number, N: number, K: number, extra: Partial<GemmArgs> = {}, dtype: DType = 'f16'): GemmArgs {
  return { a: dev([M, K], dtype), b: dev([K, N], dtype), out: dev([M, N], dtype), ...extra };
}

test('a valid call yields its problem and tensors', () => {
  const bias = dev([16]);
  const pre = dev([8, 16]);
  const call = checkGemm(gemmArgs(8, 16, 4, { epilogue: 'gelu_bias', bias, preActivation: pre, alpha: 0.5 }));
  assert.deepEqual(call.problem, { dtype: 'f16', M: 8, N: 16, K: 4, batch: 1, transA: false, transB: false, epilogue: 'gelu_bias', writesPreActivation: true });
  assert.equal(call.alpha, 0.5);
  assert.equal(call.beta, 0);
  assert.equal(call.bias, bias);
  assert.deepEqual(operandAddresses(call), { a: call.a.ptr, b: call.b.ptr, out: call.out.ptr, bias: bias.ptr, aux: pre.ptr });
  const t = checkGemm({ a: dev([4, 8]), b: dev([16, 4]), out: dev([8, 16]), transA: true, transB: true });
  assert.deepEqual([t.problem.M, t.problem.N, t.problem.K, t.problem.transA, t.problem.transB], [8, 16, 4, true, true]);
  const bg = checkGemm({ a: dev([4, 8]), b: dev([4, 16]), out: dev([8, 16]), transA: true, epilogue: 'bgrad_a', biasGrad: dev([8]) });
  assert.equal(bg.biasGrad?.shape[0], 8);
});

test('shape disagreements are ShapeErrors naming the tensors', () => {
  assert.throws(() => checkGemm({ a: dev([8, 4]), b: dev([5, 16]), out: dev([8, 16]) }), (e: unknown) =>
    e instanceof ShapeError && /'b'.*K = 5.*'a' has K = 4/.test(e.message));
  assert.throws(() => checkGemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 15]) }), ShapeError);
  assert.throws(() => checkGemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]), transA: true }), ShapeError);
  assert.throws(() => checkGemm({ a: dev([2, 8, 4]), b: dev([4, 16]), out: dev([8, 16]) }), ShapeError);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { epilogue: 'bias', bias: dev([8]) })), /'bias' has shape \[8\]/);
  assert.throws(() => checkGemm({ a: dev([4, 8]), b: dev([4, 16]), out: dev([8, 16]), transA: true, epilogue: 'bgrad_a', biasGrad: dev([16]) }), ShapeError); // [M], not [N]
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { epilogue: 'dgelu_bgrad', preActivation: dev([8, 16]), biasGrad: dev([8]) })), ShapeError);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { epilogue: 'dgelu', preActivation: dev([16, 8]) })), ShapeError);
});

test('dtype problems are DTypeErrors', () => {
  assert.throws(() => checkGemm({ a: dev([8, 4], 'f16'), b: dev([4, 16], 'bf16'), out: dev([8, 16], 'f16') }), DTypeError);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, {}, 'i32')), DTypeError);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { epilogue: 'bias', bias: dev([16], 'f32') })), (e: unknown) =>
    e instanceof DTypeError && /'bias' has dtype f32/.test(e.message));
});

test('tensors from another backend or non-contiguous views are LayoutErrors', () => {
  const args = gemmArgs(8, 16, 4);
  const cpuLike = Object.assign(Object.create(Object.getPrototypeOf(args.a)), args.a, { backend: 'cpu' }) as CudaTensor;
  assert.throws(() => checkGemm({ ...args, a: cpuLike }), LayoutError);
  assert.throws(() => checkGemm({ ...args, a: dev([8, 4], 'f16', [1, 8]) }), (e: unknown) => e instanceof LayoutError && /non-contiguous/.test(e.message));
  class ForeignTensor extends Tensor {}
  assert.throws(() => checkGemm({ ...args, b: new ForeignTensor('cuda', [4, 16], 'f16') }), (e: unknown) =>
    e instanceof LayoutError && /'b' says it is a cuda tensor but was not made by the CUDA backend/.test(e.message));
  const freed = new CudaTensor(0x1000n, [8, 16], 'f16', { ptr: 0x1000n, bytes: 256, freed: true });
  assert.throws(() => checkGemm({ ...args, out: freed }), /'out' was freed/);
});

test('epilogue operands: required, and refused where unused', () => {
  const cases: [Partial<GemmArgs>, RegExp][] = [
    [{ epilogue: 'bias' }, /epilogue 'bias' needs 'bias'/],
    [{ epilogue: 'relu_bias' }, /needs 'bias'/],
    [{ epilogue: 'gelu_bias' }, /needs 'bias'/],
    [{ epilogue: 'dgelu' }, /needs 'preActivation'/],
    [{ epilogue: 'dgelu_bgrad', preActivation: dev([8, 16]) }, /needs 'biasGrad'/],
    [{ epilogue: 'bgrad_a' }, /needs 'biasGrad'/],
    [{ bias: dev([16]) }, /'bias' was given but epilogue 'none' does not use it/],
    [{ epilogue: 'bias', bias: dev([16]), preActivation: dev([8, 16]) }, /'preActivation' was given/],
    [{ epilogue: 'dgelu_bgrad', preActivation: dev([8, 16]), biasGrad: dev([16]), bias: dev([16]) }, /'bias' was given/],
    [{ epilogue: 'relu' as GemmEpilogue }, /unknown epilogue 'relu'/],
  ];
  for (const [extra, message] of cases) {
    assert.throws(() => checkGemm(gemmArgs(8, 16, 4, extra)), (e: unknown) => e instanceof ArgumentError && message.test(e.message), String(message));
  }
});

test('beta only with epilogue none, scalars finite', () => {
  assert.equal(checkGemm(gemmArgs(8, 16, 4, { beta: 1 })).beta, 1);
  assert.equal(checkGemm(gemmArgs(8, 16, 4, { epilogue: 'bias', bias: dev([16]), beta: 0 })).beta, 0);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { epilogue: 'bias', bias: dev([16]), beta: 1 })), /beta = 1 is only supported with epilogue 'none'/);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { alpha: NaN })), /'alpha' must be a finite number/);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { beta: Infinity })), /'beta' must be a finite number/);
});

test('cuBLASLt limits: aux ld multiple of 8, no empty matrices, no overlapping outputs', () => {
  for (const extra of [
    { epilogue: 'dgelu', preActivation: dev([8, 12]) },
    { epilogue: 'dgelu_bgrad', preActivation: dev([8, 12]), biasGrad: dev([12]) },
    { epilogue: 'gelu_bias', bias: dev([12]), preActivation: dev([8, 12]) },
  ] as Partial<GemmArgs>[]) {
    assert.throws(() => checkGemm(gemmArgs(8, 12, 4, extra)), (e: unknown) =>
      e instanceof ArgumentError && /multiple of 8, got N = 12/.test(e.message), extra.epilogue);
  }
  checkGemm(gemmArgs(8, 12, 4, { epilogue: 'gelu_bias', bias: dev([12]) })); // no aux matrix: any N
  assert.throws(() => checkGemm(gemmArgs(8, 16, 4, { epilogue: 'bgrad_a', biasGrad: dev([8]) })), (e: unknown) =>
    e instanceof ArgumentError && /epilogue 'bgrad_a' needs transA = true/.test(e.message));
  assert.throws(() => checkGemm(gemmArgs(0, 16, 4)), /M is 0: empty matrices are not supported/);
  assert.throws(() => checkGemm(gemmArgs(8, 16, 0)), /K is 0/);

  const a = dev([8, 8]);
  assert.throws(() => checkGemm({ a, b: dev([8, 8]), out: a }), /'a' and 'out' overlap/);
  const shared = dev([64]);
  const view = (offset: number, shape: number[]) => new CudaTensor(shared.ptr + BigInt(offset * 2), shape, 'f16', null);
  assert.throws(() => checkGemm({ a: dev([4, 2]), b: dev([4, 4]), out: view(0, [2, 4]), transA: true, epilogue: 'bgrad_a', biasGrad: view(6, [2]) }), /'out' and 'biasGrad' overlap/);
  // Inputs may share memory with each other: only outputs must stand alone.
  checkGemm({ a: view(0, [2, 4]), b: view(0, [4, 2]), out: dev([2, 2]) });
});

test('batched checks: a shared batch dimension, no epilogues', () => {
  const call = checkBatchedGemm({ a: dev([3, 5, 7]), b: dev([3, 9, 7]), out: dev([3, 5, 9]), transB: true, beta: 0.5 });
  assert.deepEqual([call.problem.batch, call.problem.M, call.problem.N, call.problem.K, call.problem.epilogue], [3, 5, 9, 7, 'none']);
  assert.equal(call.beta, 0.5);
  assert.throws(() => checkBatchedGemm({ a: dev([3, 5, 7]), b: dev([2, 7, 9]), out: dev([3, 5, 9]) }), (e: unknown) =>
    e instanceof ShapeError && /batch/.test(e.message));
  assert.throws(() => checkBatchedGemm({ a: dev([5, 7]), b: dev([7, 9]), out: dev([5, 9]) }), ShapeError);
  assert.throws(() => checkBatchedGemm({ a: dev([0, 5, 7]), b: dev([0, 7, 9]), out: dev([0, 5, 9]) }), /batch is 0/);
  const shared = dev([3, 5, 9]);
  assert.throws(() => checkBatchedGemm({ a: shared, b: dev([3, 9, 9]), out: shared }), /overlap/);
});

test('overlap of byte ranges', () => {
  assert.equal(rangesOverlap(100n, 10, 110n, 10), false);
  assert.equal(rangesOverlap(100n, 11, 110n, 10), true);
  assert.equal(rangesOverlap(110n, 10, 100n, 11), true);
  assert.equal(rangesOverlap(100n, 0, 100n, 10), false);
});
