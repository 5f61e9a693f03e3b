// GEMMs on cuBLASLt: row-major gemm (with the fused epilogues of backend.ts) and strided-batched gemm
// for f32, f16 and bf16, always with f32 compute and f32 alpha/beta (CUBLAS_COMPUTE_32F: for f32
// inputs that means true fp32 FMAs, no TF32 rounding, so results match the CPU reference).
//
// gemm-plan.ts maps row-major arguments onto cuBLAS's column-major ones (our b becomes cuBLAS's A)
// and checks what cuBLASLt cannot do. This file owns the library objects: one cublasLt handle, and
// per distinct problem (dtype, shape, transposes, epilogue, batch, operand alignment) one cache
// entry holding the matmul descriptor, the three layouts and the chosen algorithm. A call on tensors
// seen before (the same objects, as in every training step) costs one WeakMap lookup, a descriptor
// update only if the bias/aux address changed, and the cublasLtMatmul FFI call; a call on new tensors
// adds the argument check, the plan and a cache lookup (~5-10 µs).
//
// Choosing the algorithm: the heuristic's first answer, until the problem is tuned: with autotuning on
// (FUSEFORMER_GEMM_AUTOTUNE=1) its first call, by default ('auto') the first call of a large problem of
// round sizes or, for any other, the third call of its tuning group (AUTOTUNE_AFTER_USES; problems that
// differ only in M within a power-of-two bucket: TuningGroup), times the heuristic's candidates with
// CUDA events on the caller's own operands and keeps the fastest; odd-sized members of a tuned group run
// its winner. Timing reruns the GEMM, so it happens
// only on a call with beta = 0 (then every rerun writes the same outputs); a problem first seen with
// beta ≠ 0 runs the heuristic's choice until a beta = 0 call tunes it. Calls inside a graph capture
// never tune (events cannot be waited on there): run a step once before capturing it.

import { envSwitch } from './env-switch.js';
import type { BatchedGemmArgs, GemmArgs } from '../backend.js';
import { ArgumentError } from '../../errors.js';
import {
  CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_SUCCESS, CublasComputeType, CudaDataType,
  MatmulDescAttribute, MatmulPreferenceAttribute, MatrixLayoutAttribute, checkCublas, cublasLt, cublasStatusName,
} from '../../cuda/cublaslt.js';
import type { CublasLt, HeuristicResult } from '../../cuda/cublaslt.js';
import type { CheckedGemm, ColumnMajorLayout, CublasGemmPlan, GemmProblem, OperandAlignment } from './gemm-plan.js';
import { checkBatchedGemm, checkGemm, gemmCacheKey, operandAddresses, operandAlignment, planGemm } from './gemm-plan.js';
import { byteSize } from '../../dtype.js';
import type { Tensor } from '../../tensor.js';
import { cudaEventTimer, median } from './gemm-timer.js';
import type { StreamTimer } from './gemm-timer.js';

export interface GemmRunnerOptions {
  /**
   * Time the candidates and keep the fastest: `true` on a problem's first use; 'auto' (the default)
   * for problems of at least AUTOTUNE_MIN_FLOPS, where the heuristic's first choice can be 15% off and
   * a one-time tuning cost is repaid within a few steps — on first use when M, N, K are round
   * (AUTOTUNE_ROUND_SIZE), else on the AUTOTUNE_AFTER_USES-th; small problems (decode GEMMs) and
   * odd shapes seen once or twice (a serving step's row count) keep the heuristic's choice.
   * FUSEFORMER_GEMM_AUTOTUNE=1 or 0 forces it on or off.
   */
  autotune?: boolean | 'auto';
  /** How many algorithms to ask the heuristic for (default 8). */
  candidates?: number;
  /** Timed runs per candidate when autotuning (default 10; the median ranks them). */
  autotuneRepeats?: number;
  /** Event timer for autotuning and the timing helpers (default: CUDA events, created on first use). */
  timer?: StreamTimer;
  /** The bindings (default: libcublasLt found by cuda/library.ts). */
  library?: CublasLt;
}

/** What a GemmRunner has done so far: problems met (cache entries made), problems tuned, and the host ms each took. */
export interface GemmRunnerStats {
  entries: number;
  entryMs: number;
  tunings: number;
  tuneMs: number;
  /** The problems tuned, in order: their cache key and the host ms the tuning took (the last TUNED_LOG_LENGTH). */
  tuned: { key: string; ms: number }[];
}

/** Tuned problems GemmRunnerStats.tuned keeps. */
const TUNED_LOG_LENGTH = 64;

/** One candidate algorithm's timing for a problem. */
export interface CandidateTiming {
  /** Rank in the heuristic's answer (0 = its first choice). */
  index: number;
  /** Median GPU milliseconds of one GEMM; Infinity if cuBLASLt refused to run it. */
  medianMs: number;
  workspaceSize: number;
  wavesCount: number;
  /** Whether the runner currently uses this algorithm for the problem. */
  chosen: boolean;
}

/** A cache entry as reported by cacheEntries(). */
export interface GemmCacheInfo {
  key: string;
  candidates: number;
  chosen: number;
  tuned: boolean;
}

interface CacheEntry {
  readonly key: string;
  readonly problem: GemmProblem;
  readonly plan: CublasGemmPlan;
  readonly alignment: OperandAlignment;
  readonly desc: bigint;
  readonly layoutA: bigint;
  readonly layoutB: bigint;
  readonly layoutD: bigint;
  candidates: readonly HeuristicResult[];
  chosen: number;
  /** cublasLtMatmul succeeded with the chosen algorithm at least once. */
  verified: boolean;
  tuned: boolean;
  /** Calls of this problem so far. */
  uses: number;
  /** The call of its tuning group that tunes it (1: the first; Infinity: never), fixed when the group is made (GemmRunner.tuneAtUse). */
  readonly tuneAtUse: number;
  /** The problems that share one tuning with it (TuningGroup). */
  readonly group: TuningGroup;
  /** Addresses last written into the descriptor (bias or bias gradient; aux). */
  boundBias: bigint;
  boundAux: bigint;
  /** A round problem running its bucket's winner: its own call that times its candidates after all. */
  ownTuneAtUse?: number;
}

/**
 * Problems that differ only in M within one power-of-two bucket (a serving step's row count: a new one
 * nearly every step) share one tuning: the first of them due to be tuned (a round one on its first call,
 * else on the group's AUTOTUNE_AFTER_USES-th) times the candidates, and every odd-sized member — made
 * before or after — runs the winner, cuBLASLt's algorithm descriptor being valid across M (a member where
 * it is not falls back to its own heuristic's list). An odd member of a bucket with no winner yet takes
 * the winner of a neighbouring bucket (M within a factor of 2) instead of tuning. A round member tunes
 * itself on first use when neither its bucket nor a neighbouring one has a winner yet; when one has, it
 * runs that winner at once and times its own candidates only at its ROUND_OWN_TUNE_USES-th call (a
 * training shape, called thousands of times, still gets its own best; a serving step's row count that
 * happens to be a multiple of 64 does not tune inside a live step — 12 such tunings had cost a 256-client
 * run 2.1 s, H200 2026-12-01; with graph-replayed mixed steps padded to multiples of 128 rows, 24 tunings
 * in buckets the warm-up had not reached cost 3.8 s, session 9). Only the bucket's one round member does:
 * where several are (an encoder's batches, B × a length padded to 8–32 tokens: every one round), 50 calls are
 * two passes of 28 layers, and each timing its own stalled a pass for seconds (bench:rerank's dense passes,
 * ~64 tunings, one rep 10.5 s against 0.41, H100 session 54). So a
 * serving warm-up of power-of-two row counts (serve/warmup.ts) leaves nothing to tune once requests
 * arrive: measured on the H200 (2026-12-01), tuning inside live steps had cost a 16-client run 9.3 of
 * its 13.7 s.
 */
interface TuningGroup {
  uses: number;
  /** Members whose M, N, K are all round (they may time their own candidates only while they are the one). */
  roundMembers: number;
  /** The tuned member's winner, once there is one. */
  winner?: HeuristicResult;
  /** log2 of its bucket, and the groups of the same problem at other buckets (by log2). */
  readonly log2: number;
  readonly family: Map<number, TuningGroup>;
}

/**
 * What a call passed, by identity. Tensors are immutable handles (shape, dtype, strides and address
 * never change), so a call with the same objects and scalars as an already checked one needs no
 * second check, plan or key: it goes straight to cublasLtMatmul.
 */
interface CallSignature {
  readonly a: Tensor;
  readonly b: Tensor;
  readonly bias: Tensor | undefined;
  readonly preActivation: Tensor | undefined;
  readonly biasGrad: Tensor | undefined;
  readonly transA: boolean;
  readonly transB: boolean;
  readonly epilogue: string;
  readonly alpha: number;
  readonly beta: number;
}

interface RecentCall {
  readonly batched: boolean;
  readonly signature: CallSignature;
  readonly call: CheckedGemm;
  readonly entry: CacheEntry;
}

/** BatchedGemmArgs is GemmArgs without the epilogue fields, so one signature covers both. */
function signatureOf(args: GemmArgs): CallSignature {
  return {
    a: args.a, b: args.b, bias: args.bias, preActivation: args.preActivation, biasGrad: args.biasGrad,
    transA: args.transA ?? false, transB: args.transB ?? false, epilogue: args.epilogue ?? 'none',
    alpha: args.alpha ?? 1, beta: args.beta ?? 0,
  };
}

function sameCall(s: CallSignature, args: GemmArgs): boolean {
  return s.a === args.a && s.b === args.b && s.bias === args.bias && s.preActivation === args.preActivation &&
    s.biasGrad === args.biasGrad && s.transA === (args.transA ?? false) && s.transB === (args.transB ?? false) &&
    s.epilogue === (args.epilogue ?? 'none') && s.alpha === (args.alpha ?? 1) && s.beta === (args.beta ?? 0);
}

/** A timing sample spans about this much GPU time: events resolve ~0.5 µs, and on an H200 shorter bursts let clock and power state flip the ranking of near-equal algorithms. */
const BURST_TARGET_MS = 1;
const MAX_BURST = 64;

/** Back-to-back runs per timing sample, from the time of one run. */
function burstLength(oneRunMs: number): number {
  return Math.max(1, Math.min(MAX_BURST, Math.round(BURST_TARGET_MS / Math.max(oneRunMs, 1e-6))));
}

function isRound(p: GemmProblem): boolean {
  return p.M % AUTOTUNE_ROUND_SIZE === 0 && p.N % AUTOTUNE_ROUND_SIZE === 0 && p.K % AUTOTUNE_ROUND_SIZE === 0;
}

/** The power of two at or above M: odd row counts of one bucket share a tuning (TuningGroup). */
export function tuningBucket(M: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(1, M)));
}

/** The group's winner, else that of the bucket below, else the bucket above. */
function nearestWinner(group: TuningGroup): HeuristicResult | undefined {
  return group.winner ?? group.family.get(group.log2 - 1)?.winner ?? group.family.get(group.log2 + 1)?.winner;
}

function sameAlgo(x: Uint8Array, y: Uint8Array): boolean {
  return x.length === y.length && x.every((byte, i) => byte === y[i]);
}

function checkRepeats(repeats: number): void {
  if (!Number.isInteger(repeats) || repeats < 1) throw new ArgumentError(`repeats must be a positive integer, got ${repeats}`);
}

const DEFAULT_CANDIDATES = 8;
/**
 * 2^33 FLOPs ≈ 11 µs at the H200's ~790 TFLOP/s: below this, tuning cannot pay for itself quickly.
 * Memory-bound problems below it gain nothing either: decode GEMMs of 32 rows (< 128 FLOP/B, ≥ 8 MiB of
 * operands) tuned on first use among 16 candidates left Llama 1.2B at batch 32 at 1.117 ms/token against
 * 1.114 untuned (H200, session 10, `bench/results/gpu-pending-s10/call2/decode-*.log`).
 */
export const AUTOTUNE_MIN_FLOPS = 2 ** 33;
/**
 * 'auto' tunes a large problem on its first call when M, N and K are all multiples of
 * AUTOTUNE_ROUND_SIZE (training's padded shapes: B·L tokens, hidden sizes, the padded vocabulary —
 * tuned in the first, eager step, before the step is captured), else on its AUTOTUNE_AFTER_USES-th
 * call: a serving engine's mixed steps (prompt chunks beside decode rows) have a new row count nearly
 * every step, and tuning each on first sight cost 8 candidates × 10 timed runs of every large GEMM of
 * such a step, each time; a shape that does recur is tuned once it has.
 */
export const AUTOTUNE_AFTER_USES = 3;
export const AUTOTUNE_ROUND_SIZE = 64;
/** The call at which a round problem that adopted its bucket's winner times its own candidates (TuningGroup). */
export const ROUND_OWN_TUNE_USES = 50;

const DEFAULT_AUTOTUNE_REPEATS = 10;
const NO_ADDRESS = -1n;

export class GemmRunner {
  /**
   * Whether problems due to be tuned are timed now (default true). Off (a serving engine's live steps),
   * a problem still adopts a tuned winner it may take, and is otherwise tuned by a later call with it on.
   */
  tuning = true;
  private readonly lt: CublasLt;
  private readonly handle: bigint;
  private readonly preference: bigint;
  private readonly cache = new Map<string, CacheEntry>();
  /** Tuning groups by problem without M (its family), then by log2 of the row-count bucket. */
  private readonly groups = new Map<string, Map<number, TuningGroup>>();
  /** Per output tensor, its last checked call: a training step repeats the same tensors every step. */
  private readonly recent = new WeakMap<Tensor, RecentCall>();
  private readonly alpha = new Float32Array(1);
  private readonly beta = new Float32Array(1);
  private readonly autotune: boolean | 'auto';
  private readonly candidateCount: number;
  private readonly autotuneRepeats: number;
  private timer: StreamTimer | undefined;
  private readonly ownsTimer: boolean;
  private disposed = false;
  readonly stats: GemmRunnerStats = { entries: 0, entryMs: 0, tunings: 0, tuneMs: 0, tuned: [] };

  /**
   * @param stream          the CUstream every GEMM is queued on
   * @param workspace       device scratch for cuBLASLt (split-K partials etc.), used only in stream order
   * @param workspaceBytes  its size; 32 MiB lets cuBLASLt use every Hopper kernel it has
   */
  constructor(
    readonly stream: bigint,
    readonly workspace: bigint,
    readonly workspaceBytes: number,
    options: GemmRunnerOptions = {},
  ) {
    if (!Number.isSafeInteger(workspaceBytes) || workspaceBytes < 0) {
      throw new ArgumentError(`GemmRunner: workspaceBytes must be a non-negative integer, got ${workspaceBytes}`);
    }
    this.lt = options.library ?? cublasLt();
    this.autotune = options.autotune ?? envSwitch(process.env['FUSEFORMER_GEMM_AUTOTUNE']);
    this.candidateCount = options.candidates ?? DEFAULT_CANDIDATES;
    this.autotuneRepeats = options.autotuneRepeats ?? DEFAULT_AUTOTUNE_REPEATS;
    this.timer = options.timer;
    this.ownsTimer = options.timer === undefined;
    this.handle = this.lt.create();
    this.preference = this.lt.preferenceCreate();
    this.lt.preferenceSetAttribute(this.preference, MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, 'u64', workspaceBytes);
  }

  /** cublasLtGetVersion() of the loaded library. */
  get libraryVersion(): number {
    return this.lt.version;
  }

  gemm(args: GemmArgs): void {
    const recent = this.recentCall(args, false);
    if (recent !== undefined) this.launchRecent(recent);
    else this.run(checkGemm(args), args, false);
  }

  batchedGemm(args: BatchedGemmArgs): void {
    const recent = this.recentCall(args, true);
    if (recent !== undefined) this.launchRecent(recent);
    else this.run(checkBatchedGemm(args), args, true);
  }

  /**
   * Times every heuristic candidate for this call's problem on its operands: median GPU ms per GEMM
   * over `repeats` rounds. Reruns the GEMM with beta = 0, so out (and preActivation or biasGrad) are
   * overwritten. Does not change which algorithm the runner uses.
   */
  timeCandidates(args: GemmArgs, repeats = 20): CandidateTiming[] {
    this.assertLive();
    return this.timeAll(checkGemm(args), repeats);
  }

  timeBatchedCandidates(args: BatchedGemmArgs, repeats = 20): CandidateTiming[] {
    this.assertLive();
    return this.timeAll(checkBatchedGemm(args), repeats);
  }

  /** Median GPU ms per gemm() call through this wrapper (argument checks and cache lookup included), timed in bursts. */
  timeGemm(args: GemmArgs, repeats = 20): number {
    return this.timeWrapper(() => this.gemm(args), repeats);
  }

  timeBatchedGemm(args: BatchedGemmArgs, repeats = 20): number {
    return this.timeWrapper(() => this.batchedGemm(args), repeats);
  }

  cacheEntries(): GemmCacheInfo[] {
    return [...this.cache.values()].map((e) => ({ key: e.key, candidates: e.candidates.length, chosen: e.chosen, tuned: e.tuned }));
  }

  /** Releases every descriptor and the cuBLASLt handle (call after the stream's work is done). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const entry of this.cache.values()) this.destroyEntry(entry);
    this.cache.clear();
    this.lt.preferenceDestroy(this.preference);
    this.lt.destroy(this.handle);
    if (this.ownsTimer) this.timer?.dispose();
  }

  private assertLive(): void {
    if (this.disposed) throw new ArgumentError('GemmRunner: used after dispose()');
  }

  // --- the hot path -------------------------------------------------------------------------------------

  /** The remembered call for this output tensor, if `args` repeats it exactly (same tensor objects and scalars). */
  private recentCall(args: GemmArgs, batched: boolean): RecentCall | undefined {
    this.assertLive();
    const recent = this.recent.get(args.out);
    return recent !== undefined && recent.batched === batched && sameCall(recent.signature, args) ? recent : undefined;
  }

  private run(call: CheckedGemm, args: GemmArgs, batched: boolean): void {
    const entry = this.entryFor(call);
    this.tuneIfDue(entry, call);
    this.launch(entry, call);
    this.recent.set(call.out, { batched, signature: signatureOf(args), call, entry });
  }

  private launchRecent(recent: RecentCall): void {
    if (!recent.entry.tuned || recent.entry.ownTuneAtUse !== undefined) this.tuneIfDue(recent.entry, recent.call);
    this.launch(recent.entry, recent.call);
  }

  private tuneIfDue(entry: CacheEntry, call: CheckedGemm): void {
    const group = entry.group;
    entry.uses++;
    group.uses++;
    if (entry.tuned) {
      // Not inside a graph capture (no timing there): a later eager call tunes it.
      if (this.tuning && entry.ownTuneAtUse !== undefined && entry.uses >= entry.ownTuneAtUse && call.beta === 0 && this.requireTimer().canTime(this.stream)) {
        delete entry.ownTuneAtUse;
        if (group.roundMembers > 1) return; // shapes that vary (TuningGroup): the winner it runs stays
        this.bindAddresses(entry, call);
        this.tune(entry, call);
      }
      return;
    }
    // A problem that would be tuned runs its group's winner, or a neighbouring bucket's; a round one
    // (training's) then times its own candidates later (see TuningGroup), and with no winner near it, now.
    const round = isRound(entry.problem);
    const winner = entry.tuneAtUse === Infinity ? undefined : nearestWinner(group);
    if (winner !== undefined) {
      this.adoptWinner(entry, winner);
      if (round) entry.ownTuneAtUse = ROUND_OWN_TUNE_USES;
    } else if (this.tuning && group.uses >= entry.tuneAtUse && call.beta === 0) {
      this.bindAddresses(entry, call);
      this.tune(entry, call);
      if (entry.tuned && group.winner === undefined) group.winner = entry.candidates[entry.chosen];
    }
  }

  /** Runs its group's tuned algorithm from now on: as its first candidate, so that fallBack still has the heuristic's list. */
  private adoptWinner(entry: CacheEntry, winner: HeuristicResult): void {
    const own = entry.candidates.findIndex((c) => sameAlgo(c.algo, winner.algo));
    if (own >= 0) entry.chosen = own;
    else {
      entry.candidates = [winner, ...entry.candidates];
      entry.chosen = 0;
      entry.verified = false;
    }
    entry.tuned = true;
  }

  /** Which call of problem `p`'s tuning group tunes it (see GemmRunnerOptions.autotune). */
  private tuneAtUse(p: GemmProblem): number {
    if (this.autotune !== 'auto') return this.autotune ? 1 : Infinity;
    if (2 * p.batch * p.M * p.N * p.K < AUTOTUNE_MIN_FLOPS) return Infinity;
    return isRound(p) ? 1 : AUTOTUNE_AFTER_USES;
  }

  /** The tuning group of a new problem (made on first sight). */
  private groupFor(p: GemmProblem, alignment: OperandAlignment): TuningGroup {
    const key = gemmCacheKey({ ...p, M: 0 }, alignment), log2 = Math.log2(tuningBucket(p.M));
    let family = this.groups.get(key);
    if (family === undefined) this.groups.set(key, (family = new Map()));
    let group = family.get(log2);
    if (group === undefined) family.set(log2, (group = { uses: 0, roundMembers: 0, log2, family }));
    if (isRound(p)) group.roundMembers++;
    return group;
  }

  private launch(entry: CacheEntry, call: CheckedGemm): void {
    this.bindAddresses(entry, call);
    const status = this.matmul(entry, call, entry.chosen, call.beta);
    if (status === CUBLAS_STATUS_SUCCESS) {
      entry.verified = true;
      return;
    }
    if (entry.verified) checkCublas('cublasLtMatmul', status, this.describe(entry));
    this.fallBack(entry, call, status);
  }

  private matmul(entry: CacheEntry, call: CheckedGemm, candidate: number, beta: number): number {
    this.alpha[0] = call.alpha;
    this.beta[0] = beta;
    const out = call.out.ptr;
    // cuBLAS A is our b and cuBLAS B is our a (gemm-plan.ts); C and D are both out.
    return this.lt.matmul(
      this.handle, entry.desc, this.alpha,
      call.b.ptr, entry.layoutA, call.a.ptr, entry.layoutB, this.beta,
      out, entry.layoutD, out, entry.layoutD,
      entry.candidates[candidate]!.algo, this.workspace, this.workspaceBytes, this.stream,
    );
  }

  /** The chosen algorithm failed on its first run: take the next candidate that runs, or explain. */
  private fallBack(entry: CacheEntry, call: CheckedGemm, firstStatus: number): void {
    for (let i = 0; i < entry.candidates.length; i++) {
      if (i === entry.chosen) continue;
      if (this.matmul(entry, call, i, call.beta) === CUBLAS_STATUS_SUCCESS) {
        entry.chosen = i;
        entry.verified = true;
        return;
      }
    }
    if (firstStatus === CUBLAS_STATUS_NOT_SUPPORTED || firstStatus === CUBLAS_STATUS_INVALID_VALUE) {
      throw new ArgumentError(`${this.opName(entry)}: cuBLASLt ${this.lt.version} cannot run ${this.describe(entry)}: ` +
        `every candidate algorithm answered ${cublasStatusName(firstStatus)}`);
    }
    checkCublas('cublasLtMatmul', firstStatus, this.describe(entry));
  }

  private entryFor(call: CheckedGemm): CacheEntry {
    const plan = planGemm(call.problem);
    const alignment = operandAlignment(plan, operandAddresses(call), byteSize(call.problem.dtype));
    const key = gemmCacheKey(call.problem, alignment);
    let entry = this.cache.get(key);
    if (entry === undefined) {
      const started = performance.now();
      entry = this.createEntry(key, call, plan, alignment);
      this.cache.set(key, entry);
      this.stats.entries++;
      this.stats.entryMs += performance.now() - started;
    }
    return entry;
  }

  private bindAddresses(entry: CacheEntry, call: CheckedGemm): void {
    const { plan } = entry;
    if (plan.biasOperand !== null) {
      const address = (plan.biasOperand === 'bias' ? call.bias : call.biasGrad)!.ptr;
      if (address !== entry.boundBias) {
        this.lt.matmulDescSetAttribute(entry.desc, MatmulDescAttribute.BIAS_POINTER, 'ptr', address);
        entry.boundBias = address;
      }
    }
    if (plan.auxLd !== null) {
      const address = call.preActivation!.ptr;
      if (address !== entry.boundAux) {
        this.lt.matmulDescSetAttribute(entry.desc, MatmulDescAttribute.EPILOGUE_AUX_POINTER, 'ptr', address);
        entry.boundAux = address;
      }
    }
  }

  // --- cache entries ------------------------------------------------------------------------------------

  private createEntry(key: string, call: CheckedGemm, plan: CublasGemmPlan, alignment: OperandAlignment): CacheEntry {
    const lt = this.lt;
    const desc = lt.matmulDescCreate(CublasComputeType.COMPUTE_32F, CudaDataType.R_32F);
    const layouts: bigint[] = [];
    try {
      lt.matmulDescSetAttribute(desc, MatmulDescAttribute.TRANSA, 'i32', plan.opA);
      lt.matmulDescSetAttribute(desc, MatmulDescAttribute.TRANSB, 'i32', plan.opB);
      lt.matmulDescSetAttribute(desc, MatmulDescAttribute.EPILOGUE, 'u32', plan.epilogue);
      if (plan.auxLd !== null) lt.matmulDescSetAttribute(desc, MatmulDescAttribute.EPILOGUE_AUX_LD, 'i64', plan.auxLd);
      for (const layout of [plan.layoutA, plan.layoutB, plan.layoutD]) layouts.push(this.createLayout(plan, layout));
      const entry: CacheEntry = {
        key, problem: call.problem, plan, alignment, desc,
        layoutA: layouts[0]!, layoutB: layouts[1]!, layoutD: layouts[2]!,
        candidates: [], chosen: 0, verified: false, tuned: false, uses: 0, tuneAtUse: this.tuneAtUse(call.problem),
        group: this.groupFor(call.problem, alignment), boundBias: NO_ADDRESS, boundAux: NO_ADDRESS,
      };
      // The heuristic reads the bias and aux addresses to judge their alignment, so bind them first.
      this.bindAddresses(entry, call);
      const candidates = this.askHeuristic(entry);
      if (candidates.length === 0) {
        throw new ArgumentError(`${this.opName(entry)}: cuBLASLt ${lt.version} has no algorithm for ${this.describe(entry)}. ` +
          'This combination of dtype, epilogue and operand alignment is not supported; views at offsets that are ' +
          'a multiple of 16 bytes, or a separate activation kernel, avoid it');
      }
      return { ...entry, candidates };
    } catch (err) {
      for (const layout of layouts) lt.matrixLayoutDestroy(layout);
      lt.matmulDescDestroy(desc);
      throw err;
    }
  }

  private createLayout(plan: CublasGemmPlan, layout: ColumnMajorLayout): bigint {
    const handle = this.lt.matrixLayoutCreate(plan.dataType, layout.rows, layout.cols, layout.ld);
    if (plan.batch > 1) {
      this.lt.matrixLayoutSetAttribute(handle, MatrixLayoutAttribute.BATCH_COUNT, 'i32', plan.batch);
      this.lt.matrixLayoutSetAttribute(handle, MatrixLayoutAttribute.STRIDED_BATCH_OFFSET, 'i64', layout.batchStride);
    }
    return handle;
  }

  private askHeuristic(entry: CacheEntry): HeuristicResult[] {
    const { alignment } = entry;
    const pref = this.preference;
    this.lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_A_BYTES, 'u32', alignment.a);
    this.lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_B_BYTES, 'u32', alignment.b);
    this.lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_C_BYTES, 'u32', alignment.d);
    this.lt.preferenceSetAttribute(pref, MatmulPreferenceAttribute.MIN_ALIGNMENT_D_BYTES, 'u32', alignment.d);
    return this.lt.algoGetHeuristic(this.handle, entry.desc, entry.layoutA, entry.layoutB, entry.layoutD, entry.layoutD, pref, this.candidateCount)
      .filter((c) => c.workspaceSize <= this.workspaceBytes);
  }

  private destroyEntry(entry: CacheEntry): void {
    this.lt.matrixLayoutDestroy(entry.layoutA);
    this.lt.matrixLayoutDestroy(entry.layoutB);
    this.lt.matrixLayoutDestroy(entry.layoutD);
    this.lt.matmulDescDestroy(entry.desc);
  }

  // --- timing -------------------------------------------------------------------------------------------

  private requireTimer(): StreamTimer {
    this.timer ??= cudaEventTimer();
    return this.timer;
  }

  /**
   * Median GPU ms per GEMM of every candidate. Samples are bursts of back-to-back runs (long enough
   * to hide event resolution), each preceded by an untimed burst of the same candidate: measured on
   * an H200, an algorithm timed right after a different one can look 5% faster than it runs on
   * repeat (cache and power state), which is how it will run. Candidates take turns round by round,
   * so a drift in clocks or temperature shifts them all alike instead of favouring the first.
   */
  private timeAll(call: CheckedGemm, repeats: number): CandidateTiming[] {
    checkRepeats(repeats);
    const entry = this.entryFor(call);
    this.bindAddresses(entry, call);
    const timer = this.requireTimer();
    const run = (index: number) => this.matmul(entry, call, index, 0);
    // Two untimed runs each: the first launch of a kernel may load its module. A candidate cuBLASLt
    // refuses to run ranks last instead of failing the whole measurement.
    const runnable = entry.candidates.map((_, index) => run(index) === CUBLAS_STATUS_SUCCESS && run(index) === CUBLAS_STATUS_SUCCESS);
    const first = runnable.indexOf(true);
    const samples: number[][] = entry.candidates.map(() => []);
    if (first >= 0) {
      const burst = burstLength(timer.sample(this.stream, () => { run(first); }, 1, 0)[0]!);
      for (let round = 0; round < repeats; round++) {
        runnable.forEach((ok, index) => {
          if (ok) samples[index]!.push(timer.sample(this.stream, () => { for (let i = 0; i < burst; i++) run(index); }, 1, 1)[0]! / burst);
        });
      }
    }
    return entry.candidates.map((candidate, index) => ({
      index,
      medianMs: runnable[index] ? median(samples[index]!) : Infinity,
      workspaceSize: candidate.workspaceSize,
      wavesCount: candidate.wavesCount,
      chosen: index === entry.chosen,
    }));
  }

  /** Median GPU ms per call of `enqueue` (one full wrapper call), timed exactly as timeAll times a candidate. */
  private timeWrapper(enqueue: () => void, repeats: number): number {
    checkRepeats(repeats);
    const timer = this.requireTimer();
    enqueue();
    const burst = burstLength(timer.sample(this.stream, enqueue, 1, 1)[0]!);
    const runBurst = () => { for (let i = 0; i < burst; i++) enqueue(); };
    const samples: number[] = [];
    for (let round = 0; round < repeats; round++) samples.push(timer.sample(this.stream, runBurst, 1, 1)[0]! / burst);
    return median(samples);
  }

  private tune(entry: CacheEntry, call: CheckedGemm): void {
    if (!this.requireTimer().canTime(this.stream)) return; // inside a graph capture: tune on a later call
    const started = performance.now();
    const timings = this.timeAll(call, this.autotuneRepeats);
    const ms = performance.now() - started;
    this.stats.tunings++;
    this.stats.tuneMs += ms;
    this.stats.tuned.push({ key: entry.key, ms });
    if (this.stats.tuned.length > TUNED_LOG_LENGTH) this.stats.tuned.shift();
    const best = timings.reduce((x, y) => (y.medianMs < x.medianMs ? y : x));
    if (Number.isFinite(best.medianMs)) {
      entry.chosen = best.index;
      entry.verified = true;
    }
    entry.tuned = true;
  }

  // --- messages -----------------------------------------------------------------------------------------

  private opName(entry: CacheEntry): string {
    return entry.problem.batch > 1 ? 'batchedGemm' : 'gemm';
  }

  private describe(entry: CacheEntry): string {
    const p = entry.problem, al = entry.alignment;
    return `${p.dtype} M=${p.M} N=${p.N} K=${p.K}${p.batch > 1 ? ` batch=${p.batch}` : ''} ` +
      `transA=${p.transA} transB=${p.transB} epilogue '${p.epilogue}'` +
      ` (operand alignment in bytes: a ${al.b}, b ${al.a}, out ${al.d}` +
      `${entry.plan.biasOperand ? `, ${entry.plan.biasOperand} ${al.bias}` : ''}${entry.plan.auxLd !== null ? `, preActivation ${al.aux}` : ''})`;
  }
}
