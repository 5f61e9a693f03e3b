// GemmRunner against a recording fake of the cuBLASLt bindings: which descriptors it creates and
// when, what reaches cublasLtMatmul (operands swapped for the column-major identity), the per-problem
// cache, rebinding of bias/aux addresses, fallback when an algorithm refuses to run, clear errors
// when none can, and autotuning's choice. No GPU needed.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GemmRunner, ROUND_OWN_TUNE_USES } from '../../../src/backend/cuda/gemm.js';
import type { StreamTimer } from '../../../src/backend/cuda/gemm-timer.js';
import { CudaTensor } from '../../../src/backend/cuda/runtime/tensor.js';
import {
  CUBLAS_STATUS_SUCCESS, CublasComputeType, CublasLtEpilogue, CudaDataType, MatmulDescAttribute, MatmulPreferenceAttribute,
  MatrixLayoutAttribute,
} from '../../../src/cuda/cublaslt.js';
import type { AttributeKind, CublasLt, HeuristicResult } from '../../../src/cuda/cublaslt.js';
import { byteSize } from '../../../src/dtype.js';
import type { DType } from '../../../src/dtype.js';
import { ArgumentError, CudaError } from '../../../src/errors.js';

interface MatmulCall {
  desc: bigint; alpha: number; beta: number;
  a: bigint; aLayout: bigint; b: bigint; bLayout: bigint; c: bigint; d: bigint; cLayout: bigint; dLayout: bigint;
  algo: number; workspace: bigint; workspaceBytes: number; stream: bigint;
}

class FakeCublasLt implements CublasLt {
  readonly version = 130100;
  private next = 100n;
  readonly log: string[] = [];
  readonly attributes = new Map<bigint, Map<number, number | bigint>>();
  readonly layouts = new Map<bigint, { dataType: number; rows: number; cols: number; ld: number }>();
  readonly live = new Set<bigint>();
  readonly matmuls: MatmulCall[] = [];
  candidateCount = 3;
  /** Status cublasLtMatmul answers for an algorithm index. */
  statusFor: (algo: number) => number = () => CUBLAS_STATUS_SUCCESS;

  private make(kind: string): bigint {
    const h = this.next++;
    this.live.add(h);
    this.attributes.set(h, new Map());
    this.log.push(`${kind}Create`);
    return h;
  }
  private drop(h: bigint): void {
    assert.ok(this.live.delete(h), `destroying unknown handle ${h}`);
  }
  private set(h: bigint, attribute: number, _kind: AttributeKind, value: number | bigint): void {
    assert.ok(this.live.has(h));
    this.attributes.get(h)!.set(attribute, value);
    this.log.push(`set ${attribute}`);
  }
  create(): bigint { return this.make('handle'); }
  destroy(h: bigint): void { this.drop(h); }
  matmulDescCreate(computeType: number, scaleType: number): bigint {
    const h = this.make('desc');
    this.attributes.get(h)!.set(-1, computeType).set(-2, scaleType);
    return h;
  }
  matmulDescDestroy(h: bigint): void { this.drop(h); }
  matmulDescSetAttribute(h: bigint, attribute: number, kind: AttributeKind, value: number | bigint): void { this.set(h, attribute, kind, value); }
  matrixLayoutCreate(dataType: number, rows: number, cols: number, ld: number): bigint {
    const h = this.make('layout');
    this.layouts.set(h, { dataType, rows, cols, ld });
    return h;
  }
  matrixLayoutDestroy(h: bigint): void { this.drop(h); }
  matrixLayoutSetAttribute(h: bigint, attribute: number, kind: AttributeKind, value: number | bigint): void { this.set(h, attribute, kind, value); }
  preferenceCreate(): bigint { return this.make('preference'); }
  preferenceDestroy(h: bigint): void { this.drop(h); }
  preferenceSetAttribute(h: bigint, attribute: number, kind: AttributeKind, value: number | bigint): void { this.set(h, attribute, kind, value); }
  algoGetHeuristic(): HeuristicResult[] {
    this.log.push('heuristic');
    return Array.from({ length: this.candidateCount }, (_, i) => ({
      algo: Uint8Array.from({ length: 64 }, (_, j) => (j === 0 ? i : 0)),
      workspaceSize: 1024 * i,
      state: 0,
      wavesCount: 1,
    }));
  }
  matmul(
    _handle: bigint, desc: bigint, alpha: ArrayBufferView, a: bigint, aLayout: bigint, b: bigint, bLayout: bigint, beta: ArrayBufferView,
    c: bigint, cLayout: bigint, d: bigint, dLayout: bigint, algo: Uint8Array, workspace: bigint, workspaceBytes: number, stream: bigint,
  ): number {
    this.matmuls.push({
      desc, alpha: (alpha as Float32Array)[0]!, beta: (beta as Float32Array)[0]!, a, aLayout, b, bLayout, c, d, cLayout, dLayout,
      algo: algo[0]!, workspace, workspaceBytes, stream,
    });
    return this.statusFor(algo[0]!);
  }
  count(entry: string): number {
    return this.log.filter((l) => l === entry).length;
  }
}

/** A timer whose "GPU time" is the summed cost of the algorithms each sample ran on the fake. */
function fakeTimer(lt: FakeCublasLt, costOf: (algo: number) => number): StreamTimer & { samples: number; capturing: boolean } {
  const timer = {
    samples: 0,
    capturing: false,
    canTime: () => !timer.capturing,
    sample(_stream: bigint, enqueue: () => void, repeats: number, warmup = 2) {
      for (let i = 0; i < warmup; i++) enqueue();
      const times: number[] = [];
      for (let i = 0; i < repeats; i++) {
        const before = lt.matmuls.length;
        enqueue();
        timer.samples++;
        times.push(lt.matmuls.slice(before).reduce((sum, m) => sum + costOf(m.algo), 0));
      }
      return times;
    },
    dispose() {},
  };
  return timer;
}

let nextAddress = 0x7f00_0000_0000n;
function dev(shape: number[], dtype: DType = 'f16', offsetBytes = 0): CudaTensor {
  const ptr = nextAddress + BigInt(offsetBytes);
  // 16 MiB apart, or more for a larger tensor: fake tensors never overlap.
  const bytes = shape.reduce((n, d) => n * d, 1) * byteSize(dtype) + offsetBytes;
  nextAddress += BigInt(Math.max(0x100_0000, Math.ceil(bytes / 0x100_0000) * 0x100_0000));
  return new CudaTensor(ptr, shape, dtype, null);
}

const STREAM = 0x5000n, WORKSPACE = 0x6000_0000n, WORKSPACE_BYTES = 32 * 2 ** 20;

function runner(lt: FakeCublasLt, options: { autotune?: boolean | 'auto'; timer?: StreamTimer } = {}): GemmRunner {
  return new GemmRunner(STREAM, WORKSPACE, WORKSPACE_BYTES, { library: lt, autotune: options.autotune ?? false, ...(options.timer ? { timer: options.timer } : {}) });
}

test('a GEMM reaches cublasLtMatmul with operands swapped, one descriptor set per problem', () => {
  const lt = new FakeCublasLt();
  const r = runner(lt);
  const a = dev([8, 4]), b = dev([4, 16]), out = dev([8, 16]);
  r.gemm({ a, b, out, alpha: 2 });
  assert.equal(lt.count('descCreate'), 1);
  assert.equal(lt.count('layoutCreate'), 3);
  assert.equal(lt.count('heuristic'), 1);
  const call = lt.matmuls[0]!;
  assert.deepEqual([call.a, call.b, call.c, call.d], [b.ptr, a.ptr, out.ptr, out.ptr]);
  assert.deepEqual([call.alpha, call.beta, call.algo], [2, 0, 0]);
  assert.deepEqual([call.workspace, call.workspaceBytes, call.stream], [WORKSPACE, WORKSPACE_BYTES, STREAM]);
  assert.deepEqual(lt.layouts.get(call.aLayout), { dataType: CudaDataType.R_16F, rows: 16, cols: 4, ld: 16 });
  assert.deepEqual(lt.layouts.get(call.bLayout), { dataType: CudaDataType.R_16F, rows: 4, cols: 8, ld: 4 });
  assert.deepEqual(lt.layouts.get(call.dLayout), { dataType: CudaDataType.R_16F, rows: 16, cols: 8, ld: 16 });
  assert.equal(call.cLayout, call.dLayout);
  const desc = lt.attributes.get(call.desc)!;
  assert.equal(desc.get(-1), CublasComputeType.COMPUTE_32F);
  assert.equal(desc.get(-2), CudaDataType.R_32F);
  assert.equal(desc.get(MatmulDescAttribute.EPILOGUE), CublasLtEpilogue.DEFAULT);

  // The same problem on other tensors (same alignment) reuses everything: one more matmul, nothing else.
  const before = lt.log.length;
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]), beta: 1 });
  assert.equal(lt.log.length, before);
  assert.equal(lt.matmuls.length, 2);
  assert.equal(lt.matmuls[1]!.beta, 1);
  assert.equal(r.cacheEntries().length, 1);
});

test('transposes, dtype and alignment each get their own cache entry', () => {
  const lt = new FakeCublasLt();
  const r = runner(lt);
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  r.gemm({ a: dev([4, 8]), b: dev([4, 16]), out: dev([8, 16]), transA: true });
  r.gemm({ a: dev([8, 4]), b: dev([16, 4]), out: dev([8, 16]), transB: true });
  r.gemm({ a: dev([8, 4], 'bf16'), b: dev([4, 16], 'bf16'), out: dev([8, 16], 'bf16') });
  r.gemm({ a: dev([8, 4], 'f16', 2), b: dev([4, 16]), out: dev([8, 16]) }); // a view 2 bytes into a block
  assert.equal(r.cacheEntries().length, 5);
  const transA = lt.matmuls[1]!;
  assert.equal(lt.attributes.get(transA.desc)!.get(MatmulDescAttribute.TRANSB), 1); // our transA is cuBLAS's op(B)
  assert.equal(lt.attributes.get(transA.desc)!.get(MatmulDescAttribute.TRANSA), 0);
  // The heuristic is told the real alignment of the misaligned view (our a = cuBLAS B).
  const pref = [...lt.live].find((h) => lt.attributes.get(h)!.has(MatmulPreferenceAttribute.MIN_ALIGNMENT_B_BYTES))!;
  assert.equal(lt.attributes.get(pref)!.get(MatmulPreferenceAttribute.MIN_ALIGNMENT_B_BYTES), 2);
  assert.equal(lt.attributes.get(pref)!.get(MatmulPreferenceAttribute.MIN_ALIGNMENT_A_BYTES), 32); // ld 16 × 2 bytes
  assert.equal(lt.attributes.get(pref)!.get(MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES), WORKSPACE_BYTES);
});

test('epilogue descriptors: aux ld, and bias/aux addresses rebound only when they change', () => {
  const lt = new FakeCublasLt();
  const r = runner(lt);
  const args = () => ({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]), epilogue: 'gelu_bias' as const, bias: dev([16]), preActivation: dev([8, 16]) });
  const first = args();
  r.gemm(first);
  const desc = lt.attributes.get(lt.matmuls[0]!.desc)!;
  assert.equal(desc.get(MatmulDescAttribute.EPILOGUE), CublasLtEpilogue.GELU_AUX_BIAS);
  assert.equal(desc.get(MatmulDescAttribute.EPILOGUE_AUX_LD), 16);
  assert.equal(desc.get(MatmulDescAttribute.BIAS_POINTER), first.bias.ptr);
  assert.equal(desc.get(MatmulDescAttribute.EPILOGUE_AUX_POINTER), first.preActivation.ptr);
  const sets = () => lt.count(`set ${MatmulDescAttribute.BIAS_POINTER}`) + lt.count(`set ${MatmulDescAttribute.EPILOGUE_AUX_POINTER}`);
  const afterFirst = sets();
  r.gemm({ ...args(), bias: first.bias, preActivation: first.preActivation });
  assert.equal(sets(), afterFirst);
  const second = args();
  r.gemm(second);
  assert.equal(sets(), afterFirst + 2);
  assert.equal(desc.get(MatmulDescAttribute.BIAS_POINTER), second.bias.ptr);

  const bg = dev([8]);
  r.gemm({ a: dev([4, 8]), b: dev([4, 16]), out: dev([8, 16]), transA: true, epilogue: 'bgrad_a', biasGrad: bg });
  const bgDesc = lt.attributes.get(lt.matmuls.at(-1)!.desc)!;
  assert.equal(bgDesc.get(MatmulDescAttribute.EPILOGUE), CublasLtEpilogue.BGRADB);
  assert.equal(bgDesc.get(MatmulDescAttribute.BIAS_POINTER), bg.ptr);
  assert.equal(bgDesc.has(MatmulDescAttribute.EPILOGUE_AUX_LD), false);
});

test('batched GEMMs set batch count and strides on every layout', () => {
  const lt = new FakeCublasLt();
  const r = runner(lt);
  r.batchedGemm({ a: dev([3, 5, 7]), b: dev([3, 9, 7]), out: dev([3, 5, 9]), transB: true });
  const call = lt.matmuls[0]!;
  const stride = (h: bigint) => lt.attributes.get(h)!.get(MatrixLayoutAttribute.STRIDED_BATCH_OFFSET);
  for (const h of [call.aLayout, call.bLayout, call.dLayout]) assert.equal(lt.attributes.get(h)!.get(MatrixLayoutAttribute.BATCH_COUNT), 3);
  assert.deepEqual([stride(call.aLayout), stride(call.bLayout), stride(call.dLayout)], [63, 35, 45]);
  assert.deepEqual(lt.layouts.get(call.aLayout), { dataType: CudaDataType.R_16F, rows: 7, cols: 9, ld: 7 });
});

test('an algorithm that refuses to run on first use gives way to the next candidate', () => {
  const lt = new FakeCublasLt();
  lt.statusFor = (algo) => (algo === 0 ? 15 : CUBLAS_STATUS_SUCCESS);
  const r = runner(lt);
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  assert.deepEqual(lt.matmuls.map((m) => m.algo), [0, 1]);
  assert.equal(r.cacheEntries()[0]!.chosen, 1);
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  assert.deepEqual(lt.matmuls.map((m) => m.algo), [0, 1, 1]);
});

test('no runnable algorithm is an ArgumentError; a later failure is a CudaError', () => {
  const none = new FakeCublasLt();
  none.candidateCount = 0;
  assert.throws(() => runner(none).gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) }), (e: unknown) =>
    e instanceof ArgumentError && /gemm: cuBLASLt 130100 has no algorithm for f16 M=8 N=16 K=4/.test(e.message));
  assert.equal(none.live.size, 2, 'the failed entry released its descriptors (handle and preference remain)');

  const refusing = new FakeCublasLt();
  refusing.statusFor = () => 15;
  assert.throws(() => runner(refusing).gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) }), (e: unknown) =>
    e instanceof ArgumentError && /every candidate algorithm answered CUBLAS_STATUS_NOT_SUPPORTED/.test(e.message));

  const failing = new FakeCublasLt();
  const r = runner(failing);
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  failing.statusFor = () => 13;
  assert.throws(() => r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) }), (e: unknown) =>
    e instanceof CudaError && e.errorName === 'CUBLAS_STATUS_EXECUTION_FAILED');
});

test('autotuning times every candidate once per problem and keeps the fastest', () => {
  const lt = new FakeCublasLt();
  lt.candidateCount = 4;
  const timer = fakeTimer(lt, (algo) => [0.03, 0.02, 0.005, 0.01][algo]!);
  const r = runner(lt, { autotune: true, timer });
  // beta ≠ 0 first: timing would accumulate into out, so the heuristic's choice runs untuned.
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]), beta: 1 });
  assert.equal(r.cacheEntries()[0]!.tuned, false);
  assert.equal(lt.matmuls.at(-1)!.algo, 0);
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  assert.deepEqual(r.cacheEntries()[0], { key: r.cacheEntries()[0]!.key, candidates: 4, chosen: 2, tuned: true });
  assert.equal(lt.matmuls.at(-1)!.algo, 2);
  assert.equal(lt.matmuls.at(-1)!.beta, 0);
  const samples = timer.samples;
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  assert.equal(timer.samples, samples, 'tuned once');

  const timings = r.timeCandidates({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]), beta: 1 }, 5);
  assert.deepEqual(timings.map((t) => [t.index, t.chosen]), [[0, false], [1, false], [2, true], [3, false]]);
  timings.forEach((t, i) => assert.ok(Math.abs(t.medianMs - [0.03, 0.02, 0.005, 0.01][i]!) < 1e-12, `per-GEMM time of candidate ${i}: ${t.medianMs}`));
  assert.ok(lt.matmuls.slice(-4).every((m) => m.beta === 0), 'timing runs with beta = 0');
  // Samples are bursts (1 ms / 0.03 ms ≈ 33 runs), each after an untimed burst of the same
  // candidate, and candidates take turns: the last round ran 0, 1, 2, 3 in order.
  assert.deepEqual(lt.matmuls.slice(-264).map((m) => m.algo), [0, 1, 2, 3].flatMap((algo) => Array<number>(66).fill(algo)));
  assert.ok(Math.abs(r.timeGemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) }, 3) - 0.005) < 1e-12, 'the wrapper runs the tuned algorithm');
});

/** An 'auto' runner over three candidates (the second fastest), and its cache entry of an M × 2048 × 2048 problem. */
function autoTuningRunner() {
  const lt = new FakeCublasLt();
  lt.candidateCount = 3;
  const timer = fakeTimer(lt, (algo) => [0.03, 0.01, 0.02][algo]!);
  const r = runner(lt, { autotune: 'auto', timer });
  const entry = (M: number) => r.cacheEntries().find((e) => e.key.includes(` ${M}x2048x2048 `))!;
  return { lt, timer, r, entry };
}

test("'auto' tunes a large problem of round sizes on first use (at its 50th when its or a neighbouring bucket has a winner), any other when its row-count bucket is used a third time; odd row counts of a tuned or neighbouring bucket run its winner", () => {
  const { lt, timer, r, entry } = autoTuningRunner();
  // 2·M·N·K ≥ AUTOTUNE_MIN_FLOPS (2³³) from M = 1024 at N = K = 2048. M = 2000 is not a multiple of 64.
  const w = dev([2048, 2048]);
  const a = dev([2000, 2048]), out = dev([2000, 2048]);
  r.gemm({ a, b: w, out });
  r.gemm({ a, b: w, out }); // the repeated-call fast path
  assert.deepEqual([timer.samples, entry(2000).tuned], [0, false], 'two uses: the heuristic choice');
  r.gemm({ a: dev([2000, 2048]), b: w, out: dev([2000, 2048]) });
  assert.deepEqual([entry(2000).tuned, entry(2000).chosen, lt.matmuls.at(-1)!.algo], [true, 1, 1], 'tuned on the third');
  let samples = timer.samples;
  // A serving step's row counts, each large, odd and seen once: those of the tuned bucket (1025..2048) run its winner untimed.
  for (const M of [1100, 1210, 1300, 1430]) {
    r.gemm({ a: dev([M, 2048]), b: w, out: dev([M, 2048]) });
    assert.deepEqual([lt.matmuls.at(-1)!.algo, entry(M).tuned], [1, true], `M = ${M} runs the bucket's winner`);
  }
  assert.equal(timer.samples, samples, 'no tuning of odd shapes of a tuned bucket');
  // An untuned bucket next to the tuned one (2049..4096): its odd sizes take the neighbour's winner, untimed.
  r.gemm({ a: dev([3000, 2048]), b: w, out: dev([3000, 2048]) });
  assert.deepEqual([timer.samples, lt.matmuls.at(-1)!.algo, entry(3000).tuned], [samples, 1, true], 'a neighbouring bucket\'s winner');
  // Two buckets away (4097..8192): no winner near enough; its third use tunes it.
  for (const M of [5000, 6000]) r.gemm({ a: dev([M, 2048]), b: w, out: dev([M, 2048]) });
  assert.deepEqual([timer.samples, lt.matmuls.at(-1)!.algo, entry(5000).tuned], [samples, 0, false], 'too far from any winner: the heuristic');
  r.gemm({ a: dev([7000, 2048]), b: w, out: dev([7000, 2048]) });
  assert.ok(timer.samples > samples && entry(7000).tuned, 'the bucket tuned on its third use');
  samples = timer.samples;
  r.gemm({ a: dev([5000, 2048]), b: w, out: dev([5000, 2048]) });
  assert.deepEqual([timer.samples, lt.matmuls.at(-1)!.algo, entry(5000).tuned], [samples, 1, true], 'a member made before the tuning adopts the winner on its next call');
  // A round shape (a multiple of 64) in a bucket with a winner — a serving step's 1984 rows, or a training
  // step's 16 × 124 tokens — runs the winner at once, and times its own candidates at its 50th call.
  const roundA = dev([1984, 2048]), roundOut = dev([1984, 2048]);
  r.gemm({ a: roundA, b: w, out: roundOut });
  assert.deepEqual([timer.samples, lt.matmuls.at(-1)!.algo, entry(1984).tuned], [samples, 1, true], 'a round shape adopts its bucket\'s winner');
  for (let i = 2; i < ROUND_OWN_TUNE_USES; i++) r.gemm({ a: roundA, b: w, out: roundOut }); // the repeated-call fast path
  assert.equal(timer.samples, samples, 'untimed before its 50th call');
  r.gemm({ a: roundA, b: w, out: roundOut });
  assert.ok(timer.samples > samples, 'its own tuning at the 50th call');
  samples = timer.samples;
  for (let i = 0; i < 5; i++) r.gemm({ a: roundA, b: w, out: roundOut });
  assert.equal(timer.samples, samples, 'once');
  // A second round shape of the bucket (an encoder's batches: 32 × 60 tokens beside 32 × 62): shapes that
  // vary — it runs the winner and never times its own.
  const secondA = dev([1920, 2048]), secondOut = dev([1920, 2048]);
  for (let i = 0; i < 2 * ROUND_OWN_TUNE_USES; i++) r.gemm({ a: secondA, b: w, out: secondOut });
  assert.deepEqual([timer.samples, lt.matmuls.at(-1)!.algo], [samples, 1], 'a second round member keeps the winner, untimed');
  // A round shape next to a tuned bucket (a graph-replayed serving step padded to 2304 rows; 2049..4096
  // has no winner of its own): the neighbour's winner, untimed.
  r.gemm({ a: dev([2304, 2048]), b: w, out: dev([2304, 2048]) });
  assert.deepEqual([timer.samples, lt.matmuls.at(-1)!.algo, entry(2304).tuned], [samples, 1, true], 'a round shape adopts a neighbouring bucket\'s winner');
  // A round shape with no winner near it (a training step's 64 × 1024 tokens): tuned on its first use.
  r.gemm({ a: dev([65536, 2048]), b: w, out: dev([65536, 2048]) });
  assert.ok(timer.samples > samples, 'a round shape of an untuned bucket is tuned at once');
  samples = timer.samples;
  // Small problems (decode rows) are never tuned, however often they run.
  const x = dev([4, 2048]), y = dev([4, 2048]);
  for (let i = 0; i < 5; i++) r.gemm({ a: x, b: w, out: y });
  assert.equal(timer.samples, samples);
  assert.equal(r.cacheEntries().find((e) => e.key.includes(' 4x2048x2048 '))!.tuned, false);
  assert.deepEqual([r.stats.tunings, r.stats.entries], [4, 14]);
});

test('no tuning inside a graph capture: the problem is tuned by the next eager call', () => {
  const lt = new FakeCublasLt();
  const timer = fakeTimer(lt, (algo) => [0.03, 0.01, 0.02][algo]!);
  const r = runner(lt, { autotune: true, timer });
  timer.capturing = true;
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  assert.deepEqual([timer.samples, lt.matmuls.length, r.cacheEntries()[0]!.tuned], [0, 1, false]);
  timer.capturing = false;
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  assert.deepEqual([r.cacheEntries()[0]!.tuned, r.cacheEntries()[0]!.chosen, lt.matmuls.at(-1)!.algo], [true, 1, 1]);
});

test('timing ranks a refused candidate last instead of failing', () => {
  const lt = new FakeCublasLt();
  lt.statusFor = (algo) => (algo === 1 ? 15 : CUBLAS_STATUS_SUCCESS);
  const r = runner(lt, { timer: fakeTimer(lt, () => 1) });
  const timings = r.timeCandidates({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) }, 3);
  assert.deepEqual(timings.map((t) => t.medianMs), [1, Infinity, 1]);
});

test('argument errors surface before any library call; dispose releases everything', () => {
  const lt = new FakeCublasLt();
  const r = runner(lt);
  assert.throws(() => r.gemm({ a: dev([8, 4]), b: dev([5, 16]), out: dev([8, 16]) }), /'b' has shape \[5, 16\]/);
  assert.equal(lt.count('descCreate'), 0);
  r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) });
  r.batchedGemm({ a: dev([2, 8, 4]), b: dev([2, 4, 16]), out: dev([2, 8, 16]) });
  r.dispose();
  assert.equal(lt.live.size, 0);
  assert.throws(() => r.gemm({ a: dev([8, 4]), b: dev([4, 16]), out: dev([8, 16]) }), /used after dispose/);
});

test('per-call host overhead stays in the low microseconds', (t) => {
  const lt = new FakeCublasLt();
  const r = runner(lt);
  const args = { a: dev([512, 768]), b: dev([768, 768]), out: dev([512, 768]), epilogue: 'bias' as const, bias: dev([768]) };
  for (let i = 0; i < 2000; i++) r.gemm(args);
  lt.matmuls.length = 0;
  const calls = 20000;
  const start = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) r.gemm(args);
  const perCallUs = Number(process.hrtime.bigint() - start) / 1000 / calls;
  lt.matmuls.length = 0;
  t.diagnostic(`${perCallUs.toFixed(2)} µs per gemm() call excluding the FFI call itself`);
  assert.ok(perCallUs < 50, `${perCallUs} µs per call`);
});

test('with tuning off nothing is timed, a tuned winner is still adopted, and the problem tunes on a later call with tuning on', () => {
  const { lt, timer, r, entry } = autoTuningRunner();
  const w = dev([2048, 2048]);
  r.tuning = false;
  r.gemm({ a: dev([2048, 2048]), b: w, out: dev([2048, 2048]) });
  assert.deepEqual([timer.samples, entry(2048).tuned, lt.matmuls.at(-1)!.algo], [0, false, 0], 'a round problem with no winner: the heuristic, untimed');
  r.tuning = true;
  r.gemm({ a: dev([2048, 2048]), b: w, out: dev([2048, 2048]) });
  assert.ok(timer.samples > 0 && entry(2048).tuned, 'tuned once tuning is back on');
  const samples = timer.samples;
  r.tuning = false;
  r.gemm({ a: dev([1984, 2048]), b: w, out: dev([1984, 2048]) });
  assert.deepEqual([timer.samples, entry(1984).tuned, lt.matmuls.at(-1)!.algo], [samples, true, 1], "the bucket's winner, adopted with tuning off");
});
