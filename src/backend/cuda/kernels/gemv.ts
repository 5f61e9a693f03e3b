// gemv: a GEMM of few rows, out[m, n] = ep(Σ_k a[m, k]·w[n, k] + bias[n]) for M ≤ 4 (decode steps:
// one row per sequence), with the weight stored [N, K] (transB; every inference matrix is [out, in]).
// Used instead of cuBLASLt for those shapes (CudaBackend option decodeGemv), for two reasons: a small
// matrix (GPT-2's 768 × 768, Llama's QKV and output projections: 1–12 MB) read by one short cuBLASLt
// kernel reaches a third to half of HBM bandwidth, the rest being the kernel's ramp; and this kernel
// can be launched programmatically (runtime/launch.ts): it starts during the previous kernel's tail. Its
// source issues the first weight loads before GRID_DEPENDENCY_WAIT (the weights never depend on that
// kernel); ptxas may still schedule the wait (SASS ACQBULK) above them — it does in GPT-2's batch-1 GEMVs,
// whose weight loads take the .nc path it moves freely (weight-stream.ts; docs/perf.md, "Session 30").
//
// A decode GEMV is a stream of the weights at HBM rate, so the mapping is chosen (planGemv) for bytes
// in flight: HBM needs ~20–40 KB outstanding per SM (bandwidth × latency ÷ SMs) to run at its rate.
// Blocks of 8 warps; the block's warps are CG column groups × KW K-splits. Warp (kw, cg) of block b
// owns R output columns n0 = (b·CG + cg)·R .. n0 + R − 1 (WR weight rows: R, or gated 2R: the gate
// rows and the up rows F + n) and the K chunks kw, kw + KW, …: a chunk is 32 lanes × one 16-byte
// vector (VEC elements) of each of its rows, so a warp reads 512 contiguous bytes of a row (whole
// sectors). A lane issues the loads of U chunks × WR rows (≤ 16 vectors, 64 registers) before using
// any, then multiplies them with the same slices of the M activation rows (read by every warp: L1
// hits after the first). f32 sums, reduced by shuffles and, across the KW warps, through shared memory.
// Bytes: the weights N·K·s once, a M·K·s (cached), out M·N·s; FLOPs 2·M·N·K (SIMT f32: see GEMV_MAX_ROWS).
// Precision: f32 products and sums of the stored values (as cuBLASLt with f32 compute).

import type { Activation, GemmEpilogue } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { CudaTensor } from '../runtime/tensor.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import type { CheckedGemm } from '../gemm-plan.js';
import type { CompiledKernel, KernelArg, KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { ACTIVATION_CODE } from './gated-activation.js';
import { yLoadCode } from './residual-norm.js';
import { constants, kernelIdentifier } from './row-kernels.js';
import { weightFamiliesFromEnv, weightLoadCode, type WeightLoadFamily } from './weight-stream.js';
import { envFlag } from '../env-switch.js';

/**
 * Rows of a the kernel takes at most. Each 16-byte weight load feeds VEC·M FMAs and the M activation
 * vectors VEC·M conversions: at M = 8 that is ~270·10⁹ operations a second per SM to keep up with HBM
 * (31 GB/s an SM), above the ~250·10⁹ an H200 SM issues, so from 5 rows cuBLASLt's tensor cores win.
 */
export const GEMV_MAX_ROWS = 4;
/** The epilogues the kernel has. */
export const GEMV_EPILOGUES: readonly GemmEpilogue[] = ['none', 'bias', 'relu_bias', 'gelu_bias'];

/** Warps of a block. */
export const WARPS = 8;
/** 16-byte vectors a lane may hold in flight (4 registers each). */
export const MAX_VECTORS = 16;
/** Outstanding bytes an SM needs for HBM to run at its rate, with margin (see the header). */
export const TARGET_BYTES_PER_SM = 48 * 1024;
/** Resident warps an SM holds at this kernel's register use (~100 registers a thread). */
export const RESIDENT_WARPS = 16;

export interface GemvSpec {
  readonly dtype: FloatDType;
  /** Rows of a (M), 1..GEMV_MAX_ROWS. */
  readonly rows: number;
  /** Input width, a multiple of VEC. */
  readonly k: number;
  readonly epilogue: GemmEpilogue;
  /**
   * gatedLinear: the weight is [2F, K] (gate rows, then up rows); a warp computes gate columns n and up
   * columns F + n together and writes out[m, n] = act(gate + bias[n])·(up + bias[F + n]) (bias optional).
   */
  readonly gate?: { readonly activation: Activation; readonly bias: boolean };
  /** Output columns a warp computes (R). */
  readonly columns: number;
  /** Warps splitting K (KW: 1, 2, 4 or 8); the block's other factor is CG = 8 / KW column groups. */
  readonly kWarps: number;
  /**
   * normLinear: the activations are norm(x + y + bias) of the residual stream x, formed by every block
   * in its prologue (see NORM_PROLOGUE_HEADER) instead of read from `a`.
   */
  readonly norm?: GemvNorm;
  /**
   * The block loops over column tiles (tiles blockIdx.x, blockIdx.x + gridDim.x, …; planGemv then launches
   * at most the resident blocks): the prologue runs once a block, and each tile's first weight loads are
   * issued before the previous tile's reduction and write (FUSEFORMER_GEMV_LOOP, the gated GEMV by default; see gemvPlanOptions).
   */
  readonly loop?: boolean;
  /**
   * GemmArgs.argmax (RowArgmax): each written value's packed (key, column) kept per row by its lane, reduced over
   * the warp by shuffles and over the block in shared memory, then one atomicMax a row a block — skipped where
   * the row's slot already holds as much (a read first: after the first blocks, most have nothing to add).
   * Kernel arguments `argmax` (u64 [M]) and `argmax_classes` after the others. Not with gate or loop.
   */
  readonly argmax?: boolean;
}

export interface GemvNorm {
  readonly kind: 'layer' | 'rms';
  /** x += y (+ bias) first; without it x is only read. */
  readonly residual: boolean;
  readonly bias: boolean;
  /** gamma and beta loaded at the kernel's start, before the weight loads (normPreloadOption; see normPrologueCode). */
  readonly preload?: boolean;
  /**
   * How the last block past the prologue is found and writes x and h (normWriteOption; see
   * normPrologueCode). Unset ('late'): thread 0 counts its block after the prologue and waits for the
   * count; the last block writes after its main loop, re-reading x, y and bias. 'deferred': the count is
   * read only after the main loop, so its latency hides behind it. 'early': the block counts at the first
   * reduction, reads the count at the prologue's end, and the last one writes x and h at once from its
   * registers and shared memory — where a thread keeps at most two vectors of the rows (M·NV ≤ 2: decode's
   * one row up to K 4096); past that, 'deferred'.
   */
  readonly write?: 'deferred' | 'early';
  /**
   * LayerNorm only: the mean and the mean of squares from one pass and one block reduction (var = E[v²] −
   * mean², in f32 over values rounded to T) instead of two passes and two reductions — two block barriers
   * fewer before the main loop (normOnePassOption).
   */
  readonly onePass?: boolean;
  /** y is f32 while x is 16-bit (a fused MLP's f32 accumulator): the prologue reads it as f32 (Y = float). */
  readonly yF32?: true;
}

/**
 * Whether a norm prologue loads gamma and beta at the kernel's start (GemvNorm.preload).
 * FUSEFORMER_NORM_GEMV_PRELOAD=1 / 0 forces it on / off (the write option, normWriteOption, is added either
 * way); by default the quantized GEMVs' prologues (INT4, W8A8) preload, and the bf16 GEMV's only for norms wider than NORM_PROLOGUE_AUTO_MAX_K.
 * Measured on the H200 (session 21, two rounds, batch 1, ms/token off → on): GPT-2 INT4 + head
 * 0.214 → 0.210, INT8 + head 0.206 → 0.204, Llama 1.2B bf16 0.832 → 0.826–0.827, but GPT-2 bf16
 * 0.223 → 0.228 (its K = 768 prologue is short, and loading gamma/beta first delays its weights).
 */
export function normPreloadOption(gemv: NormGemvFamily, k: number): { preload?: true; write?: 'deferred' | 'early' } {
  const forced = process.env['FUSEFORMER_NORM_GEMV_PRELOAD'];
  if (forced !== undefined && forced !== '' && forced !== '0' && forced !== '1') throw new Error(`FUSEFORMER_NORM_GEMV_PRELOAD must be 0 or 1, got '${forced}'`);
  const preload = forced === '1' || (forced !== '0' && (gemv !== 'bf16' || k > NORM_PROLOGUE_AUTO_MAX_K));
  return { ...(preload ? { preload: true as const } : {}), ...normWriteOption(gemv) };
}

/** The three GEMV families with a norm prologue: gemv.ts (bf16/f16/f32), gemv-int4-mma.ts (W4A16), gemv-int8.ts (W8A8). */
export type NormGemvFamily = 'bf16' | 'int4' | 'int8';

/**
 * The process's setting of GemvNorm.write (FUSEFORMER_NORM_WRITE=late|deferred|early forces one for every
 * family; unset, each family takes its default, NORM_WRITE_DEFAULT). Both take latency off every norm GEMV of
 * a batch-1 step (24 a GPT-2 token, 31 a Llama one): thread 0's wait for its block's count (a global
 * atomic's round trip, which the block's last reduction then waits on) and, 'early', the last block's
 * re-reading of x, y and bias after its main loop.
 */
export const normPrologueOptions: { write: 'late' | 'deferred' | 'early' | undefined; onePass: boolean } = { write: normWriteFromEnv(), onePass: normOnePassFromEnv() };

/**
 * FUSEFORMER_NORM_ONE_PASS (default 1; 0 restores two passes): the LayerNorm prologues of the three GEMV
 * families (GPT-2's QKV and fc at batch 1–4) in one pass (GemvNorm.onePass). Nsight Compute put GPT-2's
 * batch-1 norm GEMVs at 40% of their cycles waiting at block barriers (session 33); the two-pass prologue
 * has five before the main loop, the one-pass two (one reduction, its buffer not reused). Measured on the
 * H200 (session 34, two rounds, ms/token off → on): GPT-2 bf16 b1 0.192 → 0.186, b4 0.329 → 0.315; INT8 +
 * head b1 0.179 → 0.173, b4 0.336 → 0.312; INT4 + head b1 0.187 → 0.186, b4 0.238 → 0.232.
 */
export function normOnePassFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return envFlag('FUSEFORMER_NORM_ONE_PASS', env['FUSEFORMER_NORM_ONE_PASS'], true);
}

/** GemvNorm.onePass for a norm of `kind` (LayerNorm only; RMSNorm is one pass already). */
export function normOnePassOption(kind: GemvNorm['kind']): { onePass?: true } {
  return kind === 'layer' && normPrologueOptions.onePass ? { onePass: true } : {};
}

/** The norm prologue a GEMV of `gemv`'s family takes for a checked norm over K inputs, with the process's switches. */
export function prologueNorm(gemv: NormGemvFamily, n: Pick<CheckedNorm, 'norm' | 'x' | 'y' | 'bias'>, k: number): GemvNorm {
  const yF32 = n.y !== undefined && n.y.dtype === 'f32' && n.x.dtype !== 'f32';
  return {
    kind: n.norm, residual: n.y !== undefined, bias: n.bias !== undefined, ...normPreloadOption(gemv, k), ...normOnePassOption(n.norm),
    ...(yF32 ? { yF32: true as const } : {}),
  };
}

/** The part of a GEMV kernel's key that names its norm prologue's switches (the three families' keys). */
export function normSwitchesKey(n: GemvNorm): string {
  return `${n.residual ? '_res' : ''}${n.bias ? '_bias' : ''}${n.preload ? '_pre' : ''}${n.write ? `_w${n.write[0]}` : ''}${n.onePass ? '_1p' : ''}${n.yF32 ? '_yf32' : ''}`;
}

/**
 * Each family's default GemvNorm.write, measured on the H200 (session 30, two rounds each, batch-1 ms/token
 * late / deferred / early): INT4 + head GPT-2 0.2055 / 0.204 / 0.200, Llama 0.468 / 0.4665 / 0.466 → early;
 * INT8 + head GPT-2 0.196 / 0.192 / 0.194, Llama 0.517 all three → deferred; bf16 GPT-2 0.220 all three,
 * Llama 0.789 / 0.790 / 0.796 → late. Batch 32 (the streamed GEMMs; the norm GEMVs run at 1–4 rows) within
 * ±0.002 everywhere.
 */
export const NORM_WRITE_DEFAULT: Record<NormGemvFamily, 'late' | 'deferred' | 'early'> = { bf16: 'late', int4: 'early', int8: 'deferred' };

export function normWriteFromEnv(env: NodeJS.ProcessEnv = process.env): 'late' | 'deferred' | 'early' | undefined {
  const value = env['FUSEFORMER_NORM_WRITE'];
  if (value === undefined || value === '') return undefined;
  if (value === 'late' || value === 'deferred' || value === 'early') return value;
  throw new Error(`FUSEFORMER_NORM_WRITE must be late, deferred or early, got '${value}'`);
}

/** GemvNorm.write for a family: normPrologueOptions' setting where one is forced, else the family's default. */
export function normWriteOption(gemv: NormGemvFamily): { write?: 'deferred' | 'early' } {
  const w = normPrologueOptions.write ?? NORM_WRITE_DEFAULT[gemv];
  return w === 'late' ? {} : { write: w };
}

export function gemvKey(s: GemvSpec): string {
  const kind = s.gate ? `gated_${s.gate.activation}${s.gate.bias ? '_bias' : ''}` : s.epilogue;
  const norm = s.norm ? `.norm_${s.norm.kind}${normSwitchesKey(s.norm)}` : '';
  return `gemv.${s.dtype}.m${s.rows}.k${s.k}.r${s.columns}.kw${s.kWarps}.${kind}${norm}${s.loop ? '.loop' : ''}${s.argmax ? '.argmax' : ''}`;
}

// The norm prologue (normLinear). Each block forms the M activation rows itself: v = x + y + bias
// rounded to T (what the residual stream stores), the row statistics by block reductions — LayerNorm
// in two passes over v as held in shared memory, as residualNorm does — and h = norm(v)·gamma (+ beta)
// rounded to T into shared memory (M·K·s bytes), which the main loop reads instead of a. Its weight
// loads are issued before the prologue, so the prologue's reads (x, y: a few KB from L2) overlap them.
// The residual stream is updated in place by the last block to finish its prologue (a zeroed counter:
// every other block has read x by then), which also writes h [M, K]; it re-reads x, y and bias for that.

/** Shared memory the prologue may take for its M × K activations. */
export const NORM_PROLOGUE_MAX_BYTES = 40 * 1024;

/**
 * K (the norm's width) above which the bf16 GEMV's norm prologue preloads gamma and beta by default
 * (normPreloadOption).
 */
export const NORM_PROLOGUE_AUTO_MAX_K = 1024;

/**
 * K at most for which the quantized GEMVs' norm prologue is taken by default (CudaBackend.int8NormGemv
 * and int4NormGemv 'auto'): every block forms the norm after its wait. It beat a norm kernel of its own at
 * GPT-2's 768 (H200, sessions 9 and 20) but lost at Llama's 2048 while ptxas put those kernels' wait above
 * every weight load (session 26: INT4 + head b1 0.468 → 0.532); with 24–37 loads ahead of the wait since
 * session 30's build it wins there too (session 31, gpu-pending-s31/call2, two rounds: INT4 + head b1
 * 0.469 → 0.460, INT8 + head 0.525 → 0.512 ms/token). Wider norms are unmeasured.
 */
export const QUANT_NORM_PROLOGUE_AUTO_MAX_K = 2048;

/** Elements of a 16-byte vector. */
function vectorWidth(dtype: FloatDType): number {
  return 16 / byteSize(dtype);
}

/** The spec's derived sizes: chunks of K, chunks a warp takes, chunks loaded at once. */
function gemvShape(s: GemvSpec): { weightRows: number; chunks: number; perWarp: number; unroll: number; groups: number } {
  const weightRows = s.gate ? 2 * s.columns : s.columns;
  const chunks = Math.ceil(s.k / (32 * vectorWidth(s.dtype)));
  const perWarp = Math.ceil(chunks / s.kWarps);
  const unroll = Math.max(1, Math.min(perWarp, Math.floor(MAX_VECTORS / weightRows)));
  return { weightRows, chunks, perWarp, unroll, groups: Math.ceil(perWarp / unroll) };
}

export interface GemvPlan {
  readonly spec: GemvSpec;
  /** Blocks (of 8 warps). */
  readonly grid: number;
}

/**
 * The mapping of a decode GEMV of M rows onto the GPU (see the header): among R ∈ {1, 2, 4} columns a
 * warp (gated: 1 or 2) and KW ∈ {1, 2, 4, 8} K-splits, the one with the most bytes in flight per SM up
 * to the target (scaled by how evenly the blocks spread over the SMs), then the fewest load rounds,
 * the fewest K-splits (less reduction) and the widest R.
 */
export function planGemv(dtype: FloatDType, M: number, N: number, K: number, epilogue: GemmEpilogue, gate: GemvSpec['gate'], multiProcessorCount: number, norm?: GemvNorm): GemvPlan {
  let best: { plan: GemvPlan; score: number[] } | undefined, bestResident: typeof best;
  const residentBlocks = multiProcessorCount * Math.floor(RESIDENT_WARPS / WARPS);
  const space = gemvSpace(dtype, M, K, epilogue, gate, norm);
  const forced = gemvPlanOptions.forced.find((f) => gemvPlanSelects(f, M, N, K, gate !== undefined, norm !== undefined)
    // a default plan outside this product's space (another dtype's chunk, more rows) leaves it to the planner
    && (!GEMV_PLAN_DEFAULT.includes(f) || space.some((s) => s.columns === f.columns && s.kWarps === f.kWarps)));
  for (const spec of space) {
    if (forced && (spec.columns !== forced.columns || spec.kWarps !== forced.kWarps)) continue;
    const shape = gemvShape(spec), grid = gemvGrid(spec, N);
    const score = gemvPlanScore(grid, shape, spec.kWarps, spec.columns, RESIDENT_WARPS, multiProcessorCount);
    if (!best || betterScore(score, best.score)) best = { plan: { spec, grid }, score };
    if (grid <= residentBlocks && (!bestResident || betterScore(score, bestResident.score))) bestResident = { plan: { spec, grid }, score };
  }
  if (!best) throw new RangeError(`FUSEFORMER_GEMV_PLAN: r${forced!.columns}.kw${forced!.kWarps} is not a plan of the GEMV for ${M} rows of K ${K}${gate ? ' (gated)' : ''} (gemvSpace)`);
  // gemvPlanOptions.normOneWave: a norm prologue runs once a block, so a block past the resident ones runs
  // its prologue after an earlier block ends — at a small product, a second latency on the chain.
  const plan = (norm && gemvPlanOptions.normOneWave && bestResident && !forced ? bestResident : best).plan;
  // gemvPlanOptions.loop: the looping form — a grid past the resident blocks becomes that many blocks looping
  // over its tiles; a smaller one keeps its blocks, one tile each.
  if (gemvPlanOptions.loop.has(gemvWeightFamily(plan.spec))) {
    return { spec: { ...plan.spec, loop: true }, grid: Math.min(plan.grid, residentBlocks) };
  }
  return plan;
}

/**
 * Every spec planGemv chooses among for M rows of K: R ∈ {1, 2, 4} columns a warp (gated: 1 or 2) and KW ∈
 * {1, 2, 4, 8} K-splits, each K-split with a chunk to take and at most 16 sums a lane (bench/gemv-sweep.ts
 * --bf16 times them all).
 */
export function gemvSpace(dtype: FloatDType, M: number, K: number, epilogue: GemmEpilogue, gate: GemvSpec['gate'], norm?: GemvNorm): GemvSpec[] {
  const specs: GemvSpec[] = [];
  for (const kWarps of [1, 2, 4, 8]) {
    for (const columns of gate ? [1, 2] : [1, 2, 4]) {
      const spec: GemvSpec = { dtype, rows: M, k: K, epilogue, columns, kWarps, ...(gate ? { gate } : {}), ...(norm ? { norm } : {}) };
      const shape = gemvShape(spec);
      if (kWarps > shape.chunks && kWarps > 1) continue;
      if (shape.weightRows * M > 16) continue; // the sums a lane holds
      specs.push(spec);
    }
  }
  return specs;
}

/** Blocks of a spec for N output columns (gated: F). */
export function gemvGrid(spec: GemvSpec, N: number): number {
  return Math.ceil(N / ((WARPS / spec.kWarps) * spec.columns));
}

/**
 * FUSEFORMER_GEMV_LOOP: the GEMV families (weight-stream.ts's names: gemv, norm-gemv, wide-norm-gemv,
 * gated-gemv; 1 all, 0 none) that take the looping form (GemvSpec.loop): a grid past the resident blocks
 * (two an SM) becomes resident blocks looping over the column tiles, a smaller one keeps one tile a block.
 * Default the gated GEMV alone: Llama 1.2B's batch-1 gated product is 1024 blocks of 8 columns, four rounds
 * of blocks each running the norm prologue. Measured on the H200 (session 33, two rounds, bf16, ms/token
 * none → gated → gated + wide-norm → all): Llama b1 0.761 → 0.757 → 0.771 → 0.777, GPT-2 b1 0.192 → 0.192
 * → 0.192 → 0.200; batch 32 unchanged (its products go to the streamed GEMM). The family int8 gives the W8A8
 * GEMV (gemv-int8.ts) the same form for grids of two rounds or more (planInt8Gemv). Measured on the H200
 * (session 37, two rounds, ms/token without → with int8, every grid past one round looping): Llama INT8
 * b1 0.558 → 0.550, b4 0.994 → 0.884; INT8 + head b1 0.499 → 0.494, b4 0.942 → 0.813; GPT-2 INT8 b1
 * 0.182 → 0.187 (its QKV, 288 tiles on 264 resident blocks: now below the two-round threshold).
 */
export const GEMV_LOOP_DEFAULT: readonly WeightLoadFamily[] = ['gated-gemv', 'int8'];

/**
 * The plans forced when FUSEFORMER_GEMV_PLAN is unset (see forcedGemvPlansFromEnv): Llama 1.2B's down
 * product (K 8192, N 2048, no norm) at r4.kw4, 256 blocks against the planner's 512 of r1.kw2. Measured on
 * the H200 (session 34, two rounds, bf16, ms a step planner → r4.kw4): Llama b1 0.755 → 0.748, batch 4 1.078
 * → 0.990; GPT-2 unchanged. Where r4.kw4 is not in a product's space the planner decides.
 */
export const GEMV_PLAN_DEFAULT: readonly ForcedGemvPlan[] = [{ k: 8192, n: 2048, norm: false, gated: false, columns: 4, kWarps: 4 }];

/**
 * The planner's process settings (tests set them directly). normOneWave (on by default;
 * FUSEFORMER_NORM_GEMV_ONE_WAVE=0 turns it off): a norm GEMV takes the best plan whose grid fits the resident
 * blocks (two an SM) where one does — GPT-2's batch-1 QKV 288 → 144 blocks (288 leave 24 for a second
 * round), Llama's 384 → 192; its gated product (1024 blocks at most 16 columns a block) has none and keeps
 * its plan. Measured on the H200 (session 30, two rounds, bf16 batch 1, ms/token off → on): Llama 1.2B
 * 0.789 → 0.785, GPT-2 0.220 → 0.219; batch 32 unchanged.
 */
export const gemvPlanOptions: { normOneWave: boolean; loop: ReadonlySet<WeightLoadFamily>; forced: readonly ForcedGemvPlan[] } = {
  normOneWave: normOneWaveFromEnv(), loop: gemvLoopFromEnv(), forced: forcedGemvPlansFromEnv(),
};


/** A plan FUSEFORMER_GEMV_PLAN forces on the products it selects (K, and where given N, M, gated or not, norm or not). */
export interface ForcedGemvPlan {
  readonly k: number;
  readonly n?: number;
  readonly rows?: number;
  readonly gated?: boolean;
  readonly norm?: boolean;
  readonly columns: number;
  readonly kWarps: number;
}

/**
 * FUSEFORMER_GEMV_PLAN: the (R, KW) plan of chosen products instead of planGemv's pick, as a comma list of
 * SELECTOR=rR.kwW, the selector k<K> with any of .n<N> (output columns; gated: F), .m<M> (rows), .gated /
 * .plain, .norm / .nonorm; the first entry that selects a product applies. Unset: GEMV_PLAN_DEFAULT; empty
 * or 0: none (planGemv decides everywhere).
 * Probed in the decode step on the H200 (session 33, two rounds, Llama 1.2B bf16, ms a step at batch 1 /
 * 4; planned: 0.756 / 1.078): the down product (k8192) r4.kw4 0.749 / 0.989 and r2.kw2 0.746 / 1.003
 * (planned r1.kw2, 512 blocks, against 256); slower: the gated one at r1.kw8 0.855 / 1.446 or r1.kw2
 * 0.770 / 1.207, the output projection (k2048.n2048.plain) at r2.kw8 0.759 / 1.139, QKV (k2048.n3072.norm)
 * at r4.kw4 0.771 / 1.076. k8192.n2048.plain=r4.kw4 passed its GPU checks in session 34: GEMV_PLAN_DEFAULT.
 */
export function forcedGemvPlansFromEnv(env: NodeJS.ProcessEnv = process.env): readonly ForcedGemvPlan[] {
  const text = env['FUSEFORMER_GEMV_PLAN']?.trim();
  if (text === undefined) return GEMV_PLAN_DEFAULT;
  return parseForcedGemvPlans('FUSEFORMER_GEMV_PLAN', text);
}

/** A FUSEFORMER_GEMV_PLAN-style list (empty or 0: none); `name` labels its errors. */
export function parseForcedGemvPlans(name: string, text: string): readonly ForcedGemvPlan[] {
  if (text === '' || text === '0') return [];
  return text.split(',').map((entry) => {
    const m = /^k(\d+)((?:\.(?:n\d+|m\d+|gated|plain|norm|nonorm))*)=r(\d+)\.kw(\d+)$/.exec(entry.trim());
    if (!m) throw new Error(`${name}: '${entry.trim()}' is not SELECTOR=rR.kwW with SELECTOR k<K>[.n<N>][.m<M>][.gated|.plain][.norm|.nonorm]`);
    const parts = m[2]!.split('.').filter((x) => x);
    const count = (prefix: 'n' | 'm') => parts.map((x) => new RegExp(`^${prefix}(\\d+)$`).exec(x)?.[1]).find((v) => v !== undefined);
    const n = count('n'), rows = count('m');
    return {
      k: Number(m[1]), columns: Number(m[3]), kWarps: Number(m[4]),
      ...(n ? { n: Number(n) } : {}), ...(rows ? { rows: Number(rows) } : {}),
      ...(parts.includes('gated') ? { gated: true } : parts.includes('plain') ? { gated: false } : {}),
      ...(parts.includes('norm') ? { norm: true } : parts.includes('nonorm') ? { norm: false } : {}),
    };
  });
}

export function gemvPlanSelects(f: ForcedGemvPlan, M: number, N: number, K: number, gated: boolean, norm: boolean): boolean {
  return f.k === K && (f.n === undefined || f.n === N) && (f.rows === undefined || f.rows === M) && (f.gated === undefined || f.gated === gated) && (f.norm === undefined || f.norm === norm);
}

/** FUSEFORMER_GEMV_LOOP (see GEMV_LOOP_DEFAULT). */
export function gemvLoopFromEnv(env: NodeJS.ProcessEnv = process.env): ReadonlySet<WeightLoadFamily> {
  return weightFamiliesFromEnv('FUSEFORMER_GEMV_LOOP', env, GEMV_LOOP_DEFAULT);
}

export function normOneWaveFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return envFlag('FUSEFORMER_NORM_GEMV_ONE_WAVE', env['FUSEFORMER_NORM_GEMV_ONE_WAVE'], true);
}

/**
 * A GEMV plan's score (planGemv, gemv-int8.ts's planInt8Gemv), compared by betterScore: the weight bytes
 * in flight per SM (resident warps × 32 lanes × U × WR 16-byte vectors) up to the target, weighted by how
 * evenly the grid spreads — the busiest SM sets the time: blocks per SM on average over the most any SM
 * gets — then the fewest load rounds, the fewest K-splits (less reduction) and the widest R.
 */
export function gemvPlanScore(grid: number, shape: { unroll: number; weightRows: number; groups: number }, kWarps: number, columns: number, residentWarps: number, multiProcessorCount: number): number[] {
  const warpsPerSm = Math.min(residentWarps, (grid * WARPS) / multiProcessorCount);
  const inFlight = warpsPerSm * 32 * shape.unroll * shape.weightRows * 16;
  const balance = grid / multiProcessorCount / Math.ceil(grid / multiProcessorCount);
  return [Math.round((Math.min(inFlight, TARGET_BYTES_PER_SM) * balance) / 1024), -shape.groups, -kWarps, columns];
}

/** Whether score a beats b (lexicographic, larger first). */
export function betterScore(a: number[], b: number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! > b[i]!;
  return false;
}

/**
 * The device functions both GEMV kernels (this one and gemv-mma.ts) share: the epilogue of column n (or
 * a gated product's activation) and the streamed weight load (T defined before).
 */
export function gemvOutputCode(epilogue: GemmEpilogue, gate: { readonly activation: Activation } | undefined, family: WeightLoadFamily): string {
  return String.raw`${gate ? `__device__ __forceinline__ float activate(float g) { return ${ACTIVATION_CODE[gate.activation]}; }`
    : `__device__ __forceinline__ float epilogue(float x, const T* __restrict__ bias, int n) { return ${EPILOGUE_CODE[epilogue]}; }`}

// A streamed weight vector: read once, so kept out of L1 (the activations stay there) and evict-first in L2.
${weightLoadCode('load_weight', 'T', family)}`;
}

const EPILOGUE_CODE: Record<string, string> = {
  none: 'x',
  bias: 'x + to_float(bias[n])',
  relu_bias: 'fmaxf(x + to_float(bias[n]), 0.f)',
  gelu_bias: 'gelu_tanh(x + to_float(bias[n]))',
};

/** A normLinear's norm as the prologues of the quantized GEMVs read it: the residual stream x, y, its bias, gamma, beta, h (0n when absent). */
export interface NormPrologue {
  readonly norm: GemvNorm;
  readonly x: bigint;
  readonly y: bigint;
  readonly bias: bigint;
  readonly gamma: bigint;
  readonly beta: bigint;
  readonly h: bigint;
  readonly eps: number;
}

/** The prologue's kernel arguments, after the product's: rx, y, rbias, gamma, beta, h, eps and a zeroed counter. */
export function normPrologueArgs(host: KernelHost, p: NormPrologue): KernelArg[] {
  return [arg.ptr(p.x), arg.ptr(p.y), arg.ptr(p.bias), arg.ptr(p.gamma), arg.ptr(p.beta), arg.ptr(p.h), arg.f32(p.eps), arg.ptr(host.counters(1))];
}

/**
 * The prologue's device functions (constants M, K, VEC, THREADS, NWARPS and T defined before), and Y, y's
 * element type (T, or float with yF32), which the kernel's y argument takes: `const Y* __restrict__ y`.
 */
export function normPrologueCode(norm: GemvNorm): string {
  return String.raw`${yLoadCode(norm.yF32 === true)}
constexpr bool LAYER = ${norm.kind === 'layer'}, RESIDUAL = ${norm.residual}, RBIAS = ${norm.bias}, PRELOAD = ${norm.preload === true};
// LayerNorm in one pass: Σv and Σv² by one block reduction (GemvNorm.onePass).
constexpr bool ONE_PASS = LAYER && ${norm.onePass === true};
// Vectors of a row a thread takes (the columns k = (i·THREADS + thread)·VEC, i < NV).
constexpr int NV = (K + THREADS * VEC - 1) / (THREADS * VEC);
// The last block past the prologue (GemvNorm.write): DEFERRED — thread 0 counts its block after the prologue
// and reads the count only after the main loop (the atomic's round trip hides behind it; LATE reads it at
// once); both then write x and h after the main loop (normPrologueFinishCode), re-reading x, y and bias.
// EARLY — the count is taken at the first block reduction (every thread has read x by then) and read at the
// prologue's end, and the last block writes x and h at once from the v it keeps in registers (M·NV vectors,
// at most 2) and its shared rows.
constexpr bool EARLY = ${norm.write === 'early'} && M * NV <= 2, DEFERRED = !EARLY && ${norm.write !== undefined};
// Vector j and its first column k of each vector of a row this thread takes.
#define FOR_THREAD_VECTORS(j, k) _Pragma("unroll") for (int j = 0; j < NV; j++) if (const int k = (j * THREADS + threadIdx.x) * VEC; k < K)

// PRELOAD: the thread's vectors of gamma and beta, loaded at the kernel's start — before its weight loads
// and its grid-dependency wait (weights: never written by the kernel before) — so the prologue's last
// pass does not wait for them behind the weights in flight.
struct NormWeights { Vec<T, VEC> g[PRELOAD ? NV : 1], b[PRELOAD ? NV : 1]; };
__device__ __forceinline__ void load_norm_weights(NormWeights& w, const T* __restrict__ gamma, const T* __restrict__ beta) {
  if constexpr (PRELOAD) {
    FOR_THREAD_VECTORS(i, k) {
      w.g[i] = load_vec<T, VEC>(gamma + k);
      if (LAYER) w.b[i] = load_vec<T, VEC>(beta + k);
    }
  }
}

// v = x + y + bias of row m at columns k..k + VEC − 1, rounded to T (as residualNorm stores it).
__device__ __forceinline__ void residual_vec(const T* x, const Y* __restrict__ y, const T* __restrict__ rbias, int m, int k, float (&v)[VEC]) {
  load_floats<T, VEC>(x + (size_t)m * K + k, v, VEC);
  if (RESIDUAL) {
    float w[VEC];
    load_y(y + (size_t)m * K + k, w);
    #pragma unroll
    for (int i = 0; i < VEC; i++) v[i] += w[i];
    if (RBIAS) {
      load_floats<T, VEC>(rbias + k, w, VEC);
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[i] += w[i];
    }
    #pragma unroll
    for (int i = 0; i < VEC; i++) v[i] = to_float(from_float<T>(v[i]));
  }
}

// Σ over the block of each of the N values; every thread gets the sums. "shared": NWARPS·N floats.
// REUSED: shared held an earlier call's sums, which every thread must have read before they are overwritten.
template <int N, bool REUSED = true>
__device__ __forceinline__ void block_sums(float (&value)[N], float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  #pragma unroll
  for (int m = 0; m < N; m++) value[m] = warp_sum(value[m]);
  if (REUSED) __syncthreads();
  if (lane == 0) {
    #pragma unroll
    for (int m = 0; m < N; m++) shared[warp * N + m] = value[m];
  }
  __syncthreads();
  #pragma unroll
  for (int m = 0; m < N; m++) {
    float total = 0.f;
    #pragma unroll
    for (int w = 0; w < NWARPS; w++) total += shared[w * N + m];
    value[m] = total;
  }
}

// The rows' columns k..k + VEC − 1 of act, normalised in place with gamma g and beta b.
__device__ __forceinline__ void normalize_columns(int k, const float (&g)[VEC], const float (&b)[VEC], const float (&mean)[M], const float (&rstd)[M], T* act) {
  #pragma unroll
  for (int m = 0; m < M; m++) {
    float v[VEC];
    load_floats<T, VEC>(act + (size_t)m * K + k, v, VEC);
    #pragma unroll
    for (int i = 0; i < VEC; i++) v[i] = (v[i] - mean[m]) * rstd[m] * g[i] + (LAYER ? b[i] : 0.f);
    store_floats<T, VEC>(act + (size_t)m * K + k, v, VEC);
  }
}

// act = norm(x + y + bias)·gamma (+ beta), rounded to T, for the M rows (see the header).
// (EARLY: also the counter — the last block, which this returns in *last, resets it — and x, h written by that block.)
__device__ void normalize_rows(T* x, const Y* __restrict__ y, const T* __restrict__ rbias, const T* __restrict__ gamma,
                               const T* __restrict__ beta, float eps, T* act, const NormWeights& pre,
                               T* __restrict__ h, unsigned int* __restrict__ counter, bool* last) {
  __shared__ float red[NWARPS * M * (ONE_PASS ? 2 : 1)];
  // sum: Σv (LayerNorm) or Σv² (RMSNorm); ONE_PASS also squares: Σv².
  float sum[M], squares[M], mean[M], rstd[M];
  Vec<T, VEC> kept[EARLY ? M : 1][EARLY ? NV : 1];
  #pragma unroll
  for (int m = 0; m < M; m++) sum[m] = squares[m] = 0.f;
  FOR_THREAD_VECTORS(j, k) {
    #pragma unroll
    for (int m = 0; m < M; m++) {
      float v[VEC];
      residual_vec(x, y, rbias, m, k, v);
      store_floats<T, VEC>(act + (size_t)m * K + k, v, VEC);
      if constexpr (EARLY) {
        #pragma unroll
        for (int i = 0; i < VEC; i++) kept[m][j].v[i] = from_float<T>(v[i]);
      }
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        sum[m] += LAYER ? v[i] : v[i] * v[i];
        if (ONE_PASS) squares[m] += v[i] * v[i];
      }
    }
  }
  if constexpr (ONE_PASS) {
    // One reduction of both: var = E[v²] − mean² (clamped at 0: rounding), kept as Σ(v − mean)² for rstd below.
    float both[2 * M];
    #pragma unroll
    for (int m = 0; m < M; m++) { both[m] = sum[m]; both[M + m] = squares[m]; }
    block_sums<2 * M, false>(both, red);  // red's first use: no barrier before its writes
    #pragma unroll
    for (int m = 0; m < M; m++) {
      mean[m] = both[m] * (1.f / K);
      sum[m] = fmaxf(both[M + m] * (1.f / K) - mean[m] * mean[m], 0.f) * K;
    }
  } else {
    block_sums(sum, red);
  }
  // EARLY: every thread of this block has read x (the reduction's barrier): count the block now, read the count at the end.
  unsigned int ticket = 0u;
  if (EARLY && threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
  if (LAYER && !ONE_PASS) {
    // Two passes, as residualNorm: the squares of v − mean. Each thread reads back what it stored.
    #pragma unroll
    for (int m = 0; m < M; m++) { mean[m] = sum[m] * (1.f / K); sum[m] = 0.f; }
    for (int k = threadIdx.x * VEC; k < K; k += THREADS * VEC) {
      #pragma unroll
      for (int m = 0; m < M; m++) {
        float v[VEC];
        load_floats<T, VEC>(act + (size_t)m * K + k, v, VEC);
        #pragma unroll
        for (int i = 0; i < VEC; i++) { const float d = v[i] - mean[m]; sum[m] += d * d; }
      }
    }
    block_sums(sum, red);
  } else if (!LAYER) {
    // RMSNorm: the first pass summed v².
    #pragma unroll
    for (int m = 0; m < M; m++) mean[m] = 0.f;
  }
  #pragma unroll
  for (int m = 0; m < M; m++) rstd[m] = rsqrtf(sum[m] * (1.f / K) + eps);
  if constexpr (PRELOAD) {
    FOR_THREAD_VECTORS(j, k) {
      float g[VEC], b[VEC];
      #pragma unroll
      for (int i = 0; i < VEC; i++) { g[i] = to_float(pre.g[j].v[i]); b[i] = LAYER ? to_float(pre.b[j].v[i]) : 0.f; }
      normalize_columns(k, g, b, mean, rstd, act);
    }
  } else {
    for (int k = threadIdx.x * VEC; k < K; k += THREADS * VEC) {
      float g[VEC], b[VEC];
      load_floats<T, VEC>(gamma + k, g, VEC);
      if (LAYER) load_floats<T, VEC>(beta + k, b, VEC);
      normalize_columns(k, g, b, mean, rstd, act);
    }
  }
  if (EARLY && threadIdx.x == 0) {
    *last = ticket == gridDim.x - 1;
    if (*last) *counter = 0u;  // every block has counted
  }
  __syncthreads();  // the main loop reads every thread's columns
  if constexpr (EARLY) {
    if (*last) {
      // x ← v and h ← the normed rows, this thread's columns (its own stores above): every block has read x.
      FOR_THREAD_VECTORS(j, k) {
        #pragma unroll
        for (int m = 0; m < M; m++) {
          if (RESIDUAL) store_vec<T, VEC>(x + (size_t)m * K + k, kept[m][j]);
          store_vec<T, VEC>(h + (size_t)m * K + k, load_vec<T, VEC>(act + (size_t)m * K + k));
        }
      }
    }
  }
}

// The last block: x ← x + y + bias in place (RESIDUAL) and h ← act.
__device__ void write_rows(T* x, const Y* __restrict__ y, const T* __restrict__ rbias, T* __restrict__ h, const T* act) {
  for (int k = threadIdx.x * VEC; k < K; k += THREADS * VEC) {
    #pragma unroll
    for (int m = 0; m < M; m++) {
      if (RESIDUAL) {
        float v[VEC];
        residual_vec(x, y, rbias, m, k, v);
        store_floats<T, VEC>(x + (size_t)m * K + k, v, VEC);
      }
      store_vec<T, VEC>(h + (size_t)m * K + k, load_vec<T, VEC>(act + (size_t)m * K + k));
    }
  }
}
`;
}

/**
 * The norm prologue's end, after the main loop (normPrologueCode's kernels): the last block past its
 * prologue — every block has read the residual stream by then — updates it in place and writes h.
 */
export function normPrologueFinishCode(residual: string): string {
  return String.raw`  // The last block past its prologue (every block has read ${residual} by then) updates ${residual} and writes h
  // (EARLY: done in the prologue; DEFERRED: the count read now).
  if constexpr (!EARLY) {
    if (DEFERRED && threadIdx.x == 0) last_block = norm_ticket == gridDim.x - 1;
    __syncthreads();
    if (last_block) {
      write_rows(${residual}, y, rbias, h, act_s);
      if (threadIdx.x == 0) *counter = 0u;
    }
  }
`;
}

/** The norm prologue's state in a GEMV kernel: the last-block flag and thread 0's count (DEFERRED). */
export const NORM_PROLOGUE_STATE = String.raw`__shared__ bool last_block;
  [[maybe_unused]] unsigned int norm_ticket = 0u;`;

/** The norm prologue's call in a GEMV kernel (after its wait): the rows normed into act_s, the block counted. */
export function normPrologueCallCode(residual: string): string {
  return String.raw`normalize_rows(${residual}, y, rbias, gamma, beta, eps, act_s, pre, h, counter, &last_block);
      if (DEFERRED && threadIdx.x == 0) norm_ticket = atomicAdd(counter, 1u);  // read after the main loop
      else if (!EARLY && threadIdx.x == 0) last_block = atomicAdd(counter, 1u) == gridDim.x - 1;`;
}

/** The weight-load family of a GEMV (weight-stream.ts: whether its weights come by coherent loads). */
export function gemvWeightFamily(spec: GemvSpec): WeightLoadFamily {
  if (spec.gate) return 'gated-gemv';
  if (spec.norm) return spec.k <= NORM_PROLOGUE_AUTO_MAX_K ? 'norm-gemv' : 'wide-norm-gemv';
  return 'gemv';
}

/** Each non-empty line of `text` with `pad` in front (generated code nested one level deeper). */
export function indentBy(text: string, pad: string): string {
  return text.split('\n').map((line) => (line === '' ? line : pad + line)).join('\n');
}

/**
 * What both forms of the kernel (gemvSource, gemvLoopSource) share: the preamble (device library, constants,
 * the norm prologue's and the epilogue's device code), the argument list, the shared-memory and prologue
 * declarations, the products of one group of chunks (`fma`, indented by `pad`) and the output write.
 */
function gemvParts(spec: GemvSpec) {
  const vec = vectorWidth(spec.dtype), gate = spec.gate, norm = spec.norm;
  const { weightRows, chunks, perWarp, unroll, groups } = gemvShape(spec);
  const name = kernelIdentifier(gemvKey(spec));
  const preamble = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ M: spec.rows, K: spec.k, VEC: vec, R: spec.columns, WR: weightRows, KW: spec.kWarps, CG: WARPS / spec.kWarps, CHUNK: 32 * vec, CHUNKS: chunks, PER_WARP: perWarp, U: unroll, GROUPS: groups, THREADS: WARPS * 32, NWARPS: WARPS })}
${norm ? normPrologueCode(norm) : ''}

${gemvOutputCode(spec.epilogue, gate, gemvWeightFamily(spec))}${spec.argmax ? `
${ARGMAX_PACK_CODE}` : ''}`;
  const argsComment = `// a [M, K], w [N, K] (gated: [2N, K]), bias [N] (gated: [2N]) or null, out [M, N].${norm ? `
// Norm prologue: a is unused; x [M, K] the residual stream (updated in place), y [M, K] (Y), rbias [K],
// gamma, beta [K], h [M, K] the normed rows, counter a zeroed u32 (left zero).` : ''}`;
  const signature = String.raw`extern "C" __global__ void __launch_bounds__(${WARPS * 32}) ${name}(
    const T* __restrict__ a, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out, int N${norm ? `,
    T* x, const Y* __restrict__ y, const T* __restrict__ rbias, const T* __restrict__ gamma, const T* __restrict__ beta,
    T* __restrict__ h, float eps, unsigned int* __restrict__ counter` : ''}${spec.argmax ? `,
    unsigned long long* __restrict__ argmax, int argmax_classes` : ''}) {
  __shared__ float partial[KW > 1 ? (KW - 1) * CG * WR * M : 1];${spec.argmax ? `
  __shared__ unsigned long long argmax_s[NWARPS][M];` : ''}${norm ? `
  __shared__ __align__(16) T act_s[M * K];
  ${NORM_PROLOGUE_STATE}
  NormWeights pre;
  load_norm_weights(pre, gamma, beta);` : ''}
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kw = warp % KW, cg = warp / KW;`;
  // Weight rows of the warp: its R columns (gated: the R gate rows, then the R up rows F + n).
  const rowPointers = (pad: string) => gate
    ? `rows[r] = w + (size_t)n * K;\n${pad}rows[R + r] = w + (size_t)(N + n) * K;`
    : 'rows[r] = w + (size_t)n * K;';
  const write = (pad: string) => gate
    ? `const float g = sum[r][m]${gate.bias ? ' + to_float(bias[n])' : ''}, u = sum[R + r][m]${gate.bias ? ' + to_float(bias[N + n])' : ''};\n${pad}out[(size_t)m * N + n] = from_float<T>(activate(g) * u);`
    : spec.argmax
      ? argmaxWriteCode('epilogue(sum[r][m], bias, n)', 'best[m]', pad)
      : 'out[(size_t)m * N + n] = from_float<T>(epilogue(sum[r][m], bias, n));';
  // A lane's f32 sums, zeroed.
  const zeroSums = (pad: string) => indentBy(['float sum[WR][M];', '#pragma unroll', 'for (int r = 0; r < WR; r++)', '  #pragma unroll', '  for (int m = 0; m < M; m++) sum[r][m] = 0.f;'].join('\n'), pad);
  // Group g's products: chunk j = g·U + u of the warp (k from its chunk and lane) times the M rows.
  const fma = (pad: string) => indentBy(String.raw`#pragma unroll
for (int u = 0; u < U; u++) {
  const int j = g * U + u, k = (kw + j * KW) * CHUNK + lane * VEC;
  if (j < PER_WARP && k < K) {
    #pragma unroll
    for (int m = 0; m < M; m++) {
      float av[VEC];
      load_floats<T, VEC>(${norm ? 'act_s' : 'a'} + (size_t)m * K + k, av, VEC);
      #pragma unroll
      for (int r = 0; r < WR; r++) {
        const T* e = reinterpret_cast<const T*>(&wv[u][r]);
        #pragma unroll
        for (int i = 0; i < VEC; i++) sum[r][m] = fmaf(to_float(e[i]), av[i], sum[r][m]);
      }
    }
  }
}`, pad);
  return { name, norm, preamble, argsComment, signature, rowPointers, write, zeroSums, fma };
}

export function gemvSource(spec: GemvSpec): KernelSource {
  if (spec.argmax && (spec.loop || spec.gate)) throw new RangeError('gemvSource: argmax is for the one-tile-a-block form of an ungated product (an LM head)');
  if (spec.loop) return gemvLoopSource(spec);
  const { name, norm, preamble, argsComment, signature, rowPointers, write, zeroSums, fma } = gemvParts(spec);
  const source = String.raw`${preamble}

${argsComment}
// Grid ceil(N / (CG·R)), block ${WARPS * 32}.
${signature}
  const int n0 = (blockIdx.x * CG + cg) * R;
  const T* rows[WR];
  #pragma unroll
  for (int r = 0; r < R; r++) {
    const int n = min(n0 + r, N - 1); // columns past N compute a copy of the last and are not written
    ${rowPointers('    ')}
  }
${zeroSums('  ')}

  #pragma unroll
  for (int g = 0; g < GROUPS; g++) {
    // Issue the group's U × WR weight loads, then use them.
    uint4 wv[U][WR];
    #pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = g * U + u, k = (kw + j * KW) * CHUNK + lane * VEC;
      #pragma unroll
      for (int r = 0; r < WR; r++) wv[u][r] = j < PER_WARP && k < K ? load_weight(rows[r] + k) : make_uint4(0u, 0u, 0u, 0u);
    }
    // The wait for the kernel that writes a (programmatic launch), after the first loads in the source
    // (ptxas may schedule it above them: see the header).
    if (g == 0) {
      GRID_DEPENDENCY_WAIT();${norm ? `
      ${normPrologueCallCode('x')}` : ''}
    }
${fma('    ')}
  }
  GRID_DEPENDENCY_TRIGGER();
${norm ? normPrologueFinishCode('x') : ''}
${spec.argmax ? `  unsigned long long best[M];
  #pragma unroll
  for (int m = 0; m < M; m++) best[m] = 0ull;
${gemvReduceWriteCode('sum', 'warp_sum', write('          '), true)}
${ARGMAX_COMBINE_CODE}` : gemvReduceWriteCode('sum', 'warp_sum', write('        '))}
}
`;
  return { name, source, gridDependencyWait: true };
}

/**
 * GemvSpec.loop's kernel: gemvSource's, with the block looping over column tiles (tile = blockIdx.x, then
 * + gridDim.x while below TILES = ⌈N / (CG·R)⌉). The norm prologue and the grid-dependency wait run once,
 * before the first tile; each next tile's first group of weight loads is issued into the registers the
 * finished tile's products have freed, before that tile's reduction and write, so a warp's stream of
 * weights pauses only for the shuffles. The dependents are let launch after the block's last tile's
 * products (gemvSource's trigger point).
 */
function gemvLoopSource(spec: GemvSpec): KernelSource {
  const { name, norm, preamble, argsComment, signature, rowPointers, write, zeroSums, fma } = gemvParts(spec);
  const source = String.raw`${preamble}

// Warp (kw, cg)'s weight rows of tile t: its R columns n0 = (t·CG + cg)·R … (gated: and the up rows F + n);
// columns past N read a copy of the last and are not written.
__device__ __forceinline__ void tile_rows(const T* (&rows)[WR], const T* w, int N, int t, int cg) {
  #pragma unroll
  for (int r = 0; r < R; r++) {
    const int n = min((t * CG + cg) * R + r, N - 1);
    ${rowPointers('    ')}
  }
}
// Group g's U × WR weight vectors of the warp's chunks kw, kw + KW, … (zeros past K).
__device__ __forceinline__ void load_group(uint4 (&wv)[U][WR], const T* (&rows)[WR], int g, int kw, int lane) {
  #pragma unroll
  for (int u = 0; u < U; u++) {
    const int j = g * U + u, k = (kw + j * KW) * CHUNK + lane * VEC;
    #pragma unroll
    for (int r = 0; r < WR; r++) wv[u][r] = j < PER_WARP && k < K ? load_weight(rows[r] + k) : make_uint4(0u, 0u, 0u, 0u);
  }
}

${argsComment}
// Grid at most ceil(N / (CG·R)) (the resident blocks), block ${WARPS * 32}.
${signature}
  const int tiles = (N + CG * R - 1) / (CG * R);
  int tile = blockIdx.x;
  const T* rows[WR];
  tile_rows(rows, w, N, tile, cg);
  uint4 wv[U][WR];
  load_group(wv, rows, 0, kw, lane);
  // The wait for the kernel that writes a (programmatic launch), after the first loads in the source.
  GRID_DEPENDENCY_WAIT();${norm ? `
  ${normPrologueCallCode('x')}` : ''}
  while (true) {
    const int n0 = (tile * CG + cg) * R;
${zeroSums('    ')}
    #pragma unroll
    for (int g = 0; g < GROUPS; g++) {
      if (g > 0) load_group(wv, rows, g, kw, lane);
${fma('      ')}
    }
    // The next tile's first loads go out now, into the registers this tile's products have freed.
    const int next = tile + gridDim.x;
    if (next < tiles) {
      tile_rows(rows, w, N, next, cg);
      load_group(wv, rows, 0, kw, lane);
    } else {
      GRID_DEPENDENCY_TRIGGER();
    }
${indentBy(gemvReduceWriteCode('sum', 'warp_sum', write('          '), true), '  ')}
    if (next >= tiles) break;
    tile = next;
  }
${norm ? normPrologueFinishCode('x') : ''}}
`;
  return { name, source, gridDependencyWait: true };
}

/** RowArgmax's packed word of a stored value v at column n (0 for NaN: never picked); backend.ts has the layout. */
export const ARGMAX_PACK_CODE = String.raw`__device__ __forceinline__ unsigned long long argmax_pack(float v, int n) {
  if (v != v) return 0ull;
  const unsigned u = __float_as_uint(v == 0.f ? 0.f : v), key = (u >> 31) ? ~u : (u | 0x80000000u);
  return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - (unsigned)n);
}`;

/**
 * A GEMV's write of out[m, n] = `value` (an f32 expression) with RowArgmax: the value as stored, packed into the
 * lane's `best` slot (an lvalue) when n is below the vocabulary. Continuation lines start with `pad`.
 */
export function argmaxWriteCode(value: string, best: string, pad: string): string {
  return `const T stored = from_float<T>(${value});\n${pad}out[(size_t)m * N + n] = stored;\n${pad}if (n < argmax_classes) ${best} = max(${best}, argmax_pack(to_float(stored), n));`;
}

/**
 * GemvSpec.argmax's end: the lanes' best[M] reduced over the warp, then over the block's warps in shared
 * memory; thread m adds the row's block maximum by atomicMax unless the slot already holds as much.
 */
export const ARGMAX_COMBINE_CODE = String.raw`  #pragma unroll
  for (int m = 0; m < M; m++) {
    unsigned long long v = best[m];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, (unsigned long long)__shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) argmax_s[warp][m] = v;
  }
  __syncthreads();
  if (threadIdx.x < M) {
    unsigned long long v = 0ull;
    #pragma unroll
    for (int w = 0; w < NWARPS; w++) v = max(v, argmax_s[w][threadIdx.x]);
    if (v > *reinterpret_cast<volatile unsigned long long*>(argmax + threadIdx.x)) atomicMax(argmax + threadIdx.x, v);
  }`;

/**
 * The end of a GEMV kernel (this one, gemv-int8.ts): a lane's sums `acc` [WR][M] reduced over the warp
 * by `warpSum`, then over the KW K-splitting warps through shared `partial` in a fixed order
 * (deterministic; warps kw > 0 return), and lane r·M + m writes out[m, n0 + r] with `write`
 * (constants WR, M, R, KW, CG and locals lane, kw, cg, n0, N in scope).
 */
export function gemvReduceWriteCode(acc: string, warpSum: string, write: string, guarded = false): string {
  // guarded (the looping form, whose warps all go on to the next tile): the kw > 0 warps skip the sums and the
  // write instead of returning, and a second barrier frees `partial` for the next tile.
  const addPartials = String.raw`#pragma unroll
for (int p = 1; p < KW; p++)
  #pragma unroll
  for (int r = 0; r < WR; r++)
    #pragma unroll
    for (int m = 0; m < M; m++) ${acc}[r][m] += partial[(((p - 1) * CG + cg) * WR + r) * M + m];`;
  const writeOut = String.raw`#pragma unroll
for (int r = 0; r < R; r++) {
  #pragma unroll
  for (int m = 0; m < M; m++) {
    const int n = n0 + r;
    if (lane == r * M + m && n < N) {
      @WRITE@
    }
  }
}`;
  const pad = (text: string, spaces: number) => indentBy(text, ' '.repeat(spaces));
  return String.raw`  #pragma unroll
  for (int r = 0; r < WR; r++)
    #pragma unroll
    for (int m = 0; m < M; m++) ${acc}[r][m] = ${warpSum}(${acc}[r][m]);
  if (KW > 1) {
    if (kw > 0 && lane == 0) {
      #pragma unroll
      for (int r = 0; r < WR; r++)
        #pragma unroll
        for (int m = 0; m < M; m++) partial[(((kw - 1) * CG + cg) * WR + r) * M + m] = ${acc}[r][m];
    }
    __syncthreads();
${guarded ? `    if (kw == 0) {
${pad(addPartials, 6)}
    }
    __syncthreads();  // partial is free for the next tile` : `    if (kw != 0) return;
${pad(addPartials, 4)}`}
  }
${guarded ? `  // Lane r·M + m of the kw = 0 warps writes out[m, n0 + r].
  if (kw == 0) {
${pad(writeOut, 4)}
  }` : `  // Lane r·M + m writes out[m, n0 + r].
${pad(writeOut, 2)}`}`.replace('@WRITE@', () => write);
}

/**
 * Whether the kernel takes this checked GEMM: transB only, M ≤ GEMV_MAX_ROWS, K a multiple of the
 * vector width, 16-byte aligned operands, alpha 1 and beta 0, a forward epilogue without preActivation.
 */
export function gemvApplies(g: CheckedGemm): boolean {
  const p = g.problem, vec = vectorWidth(p.dtype), align = (t: { ptr: bigint }) => t.ptr % 16n === 0n;
  return p.batch === 1 && !p.transA && p.transB && p.M <= GEMV_MAX_ROWS && p.K % vec === 0 && GEMV_EPILOGUES.includes(p.epilogue)
    && !p.writesPreActivation && g.alpha === 1 && g.beta === 0 && align(g.a) && align(g.b);
}

/** Launches of the looping form (GemvSpec.loop) in this process (tests check that a case took it). */
export const gemvLoopStats = { launches: 0 };

/** The compiled kernel of a planned spec, about to be launched (a looping one counted in gemvLoopStats). */
function plannedKernel(host: KernelHost, spec: GemvSpec): CompiledKernel {
  if (spec.loop) gemvLoopStats.launches++;
  return host.kernel(gemvKey(spec), () => gemvSource(spec));
}

/** Launches the kernel for a GEMM gemvApplies() accepted. */
export function launchGemv(host: KernelHost, g: CheckedGemm): void {
  const p = g.problem;
  const planned = planGemv(p.dtype, p.M, p.N, p.K, p.epilogue, undefined, host.multiProcessorCount);
  // With argmax, the plan's one-tile-a-block form (its reduction ends the kernel).
  const { loop: _loop, ...plain } = planned.spec;
  const { spec, grid } = g.argmax ? { spec: { ...plain, argmax: true }, grid: gemvGrid(plain, p.N) } : planned;
  plannedKernel(host, spec).launch({ grid, block: WARPS * 32 }, [
    arg.ptr(g.a.ptr), arg.ptr(g.b.ptr), arg.ptr(g.bias?.ptr ?? 0n), arg.ptr(g.out.ptr), arg.i32(p.N),
    ...(g.argmax ? [arg.ptr(g.argmax.out.ptr), arg.i32(g.argmax.classes)] : []),
  ]);
}

/** Whether the gated kernel takes this checked gatedLinear: M ≤ GEMV_MAX_ROWS, K a multiple of the vector width, aligned operands. */
export function gatedGemvApplies(g: CheckedGatedLinear): boolean {
  const vec = vectorWidth(g.x.dtype as FloatDType), align = (t: Tensor) => (t as CudaTensor).ptr % 16n === 0n;
  return g.rows <= GEMV_MAX_ROWS && g.K % vec === 0 && align(g.x) && align(g.weight);
}

/** Launches the gated kernel for a gatedLinear gatedGemvApplies() accepted (the scratch `up` is not written). */
export function launchGatedGemv(host: KernelHost, g: CheckedGatedLinear): void {
  const gate = { activation: g.activation, bias: g.bias !== undefined };
  const { spec, grid } = planGemv(g.x.dtype as FloatDType, g.rows, g.F, g.K, 'none', gate, host.multiProcessorCount);
  const ptr = (t: Tensor | undefined) => arg.ptr(t ? (t as CudaTensor).ptr : 0n);
  plannedKernel(host, spec).launch({ grid, block: WARPS * 32 }, [ptr(g.x), ptr(g.weight), ptr(g.bias), ptr(g.out), arg.i32(g.F)]);
}

/** What checkResidualNorm returns, as the norm prologue reads it. */
export interface CheckedNorm {
  readonly x: Tensor;
  readonly y?: Tensor | undefined;
  readonly bias?: Tensor | undefined;
  readonly gamma: Tensor;
  readonly beta?: Tensor | undefined;
  readonly out: Tensor;
  readonly norm: 'layer' | 'rms';
  readonly eps: number;
  readonly rows: number;
  readonly H: number;
}

/** The product a normLinear launch fuses: a checked GEMM or gatedLinear whose input is the norm's output. */
export type NormGemvLinear = { readonly kind: 'gemm'; readonly checked: CheckedGemm } | { readonly kind: 'gated'; readonly checked: CheckedGatedLinear };

/**
 * Whether the norm prologue can take this norm: rows ≤ GEMV_MAX_ROWS, H a multiple of the vector
 * width, the M × H activations within NORM_PROLOGUE_MAX_BYTES, every row operand 16-byte aligned
 * (the product must pass gemvApplies / gatedGemvApplies too).
 */
export function normGemvApplies(n: CheckedNorm): boolean {
  const dtype = n.x.dtype as FloatDType, vec = vectorWidth(dtype);
  const aligned = [n.x, n.y, n.bias, n.gamma, n.beta, n.out].every((t) => t === undefined || (t as CudaTensor).ptr % 16n === 0n);
  return n.rows >= 1 && n.rows <= GEMV_MAX_ROWS && n.H % vec === 0 && n.rows * n.H * byteSize(dtype) <= NORM_PROLOGUE_MAX_BYTES && aligned;
}

/** A tensor's device address, 0n when absent. */
function devicePointer(t: Tensor | undefined): bigint {
  return t ? (t as CudaTensor).ptr : 0n;
}

/** Launches the GEMV with the norm prologue (the product's input `a` / `x` is the norm's output, written too). */
export function launchNormGemv(host: KernelHost, n: CheckedNorm, linear: NormGemvLinear): void {
  const dtype = n.x.dtype as FloatDType;
  const norm = prologueNorm('bf16', n, n.H);
  const ptr = (t: Tensor | undefined) => arg.ptr(devicePointer(t));
  const prologueArgs = normPrologueArgs(host, {
    norm, x: devicePointer(n.x), y: devicePointer(n.y), bias: devicePointer(n.bias), gamma: devicePointer(n.gamma), beta: devicePointer(n.beta),
    h: devicePointer(n.out), eps: n.eps,
  });
  if (linear.kind === 'gemm') {
    const g = linear.checked, p = g.problem;
    const { spec, grid } = planGemv(p.dtype, p.M, p.N, p.K, p.epilogue, undefined, host.multiProcessorCount, norm);
    plannedKernel(host, spec).launch({ grid, block: WARPS * 32 }, [
      arg.ptr(0n), arg.ptr(g.b.ptr), arg.ptr(g.bias?.ptr ?? 0n), arg.ptr(g.out.ptr), arg.i32(p.N), ...prologueArgs,
    ]);
  } else {
    const g = linear.checked, gate = { activation: g.activation, bias: g.bias !== undefined };
    const { spec, grid } = planGemv(dtype, g.rows, g.F, g.K, 'none', gate, host.multiProcessorCount, norm);
    plannedKernel(host, spec).launch({ grid, block: WARPS * 32 }, [
      arg.ptr(0n), ptr(g.weight), ptr(g.bias), ptr(g.out), arg.i32(g.F), ...prologueArgs,
    ]);
  }
}

/** What checkGatedLinear returns, as the gated launch reads it. */
export interface CheckedGatedLinear {
  readonly x: Tensor;
  readonly weight: Tensor;
  readonly bias?: Tensor | undefined;
  readonly out: Tensor;
  readonly activation: Activation;
  readonly rows: number;
  readonly F: number;
  readonly K: number;
}

/** Representative plans for the nvcc compile check (132 SMs): decode shapes of GPT-2 and Llama, partial K chunks, f32. */
export function catalog(): KernelSource[] {
  const plans: [FloatDType, number, number, number, GemmEpilogue, GemvSpec['gate']][] = [
    ['bf16', 1, 3072, 2048, 'none', undefined],
    ['bf16', 1, 2048, 8192, 'none', undefined],
    ['bf16', 4, 128256, 2048, 'none', undefined],
    ['f16', 3, 2304, 768, 'gelu_bias', undefined],
    ['bf16', 1, 768, 3072, 'bias', undefined],
    ['f32', 2, 131, 100, 'relu_bias', undefined],
    ['bf16', 1, 8192, 2048, 'none', { activation: 'silu', bias: false }],
    ['f16', 4, 4096, 4096, 'none', { activation: 'gelu_tanh', bias: true }],
    ['f32', 3, 77, 132, 'none', { activation: 'relu', bias: true }],
  ];
  const normed: [FloatDType, number, number, number, GemmEpilogue, GemvSpec['gate'], GemvNorm][] = [
    ['bf16', 1, 3072, 2048, 'none', undefined, { kind: 'rms', residual: true, bias: false }],
    ['bf16', 4, 8192, 2048, 'none', { activation: 'silu', bias: false }, { kind: 'rms', residual: true, bias: false }],
    ['f16', 1, 2304, 768, 'bias', undefined, { kind: 'layer', residual: false, bias: false }],
    ['bf16', 3, 3072, 768, 'gelu_bias', undefined, { kind: 'layer', residual: true, bias: true }],
    ['f32', 2, 77, 132, 'none', { activation: 'relu', bias: true }, { kind: 'layer', residual: true, bias: true }],
    // gamma and beta loaded at the kernel's start (FUSEFORMER_NORM_GEMV_PRELOAD=1): Llama's gated gate/up, GPT-2's fc.
    ['bf16', 1, 8192, 2048, 'none', { activation: 'silu', bias: false }, { kind: 'rms', residual: true, bias: false, preload: true }],
    ['bf16', 3, 3072, 768, 'gelu_bias', undefined, { kind: 'layer', residual: true, bias: true, preload: true }],
    // The last block found and writing x and h sooner (FUSEFORMER_NORM_WRITE): early — GPT-2's QKV and fc, Llama's
    // gated gate/up, two rows at K 2048 (M·NV = 2), four rows (past it: deferred); deferred — Llama's QKV.
    ['bf16', 1, 2304, 768, 'none', undefined, { kind: 'layer', residual: true, bias: true, write: 'early' }],
    ['bf16', 1, 3072, 768, 'gelu_bias', undefined, { kind: 'layer', residual: true, bias: true, write: 'early' }],
    ['bf16', 1, 8192, 2048, 'none', { activation: 'silu', bias: false }, { kind: 'rms', residual: true, bias: false, preload: true, write: 'early' }],
    ['f16', 2, 3072, 2048, 'none', undefined, { kind: 'rms', residual: true, bias: false, write: 'early' }],
    ['bf16', 4, 3072, 2048, 'none', undefined, { kind: 'rms', residual: true, bias: false, write: 'early' }],
    ['bf16', 1, 3072, 2048, 'none', undefined, { kind: 'rms', residual: true, bias: false, preload: true, write: 'deferred' }],
    // LayerNorm in one pass (FUSEFORMER_NORM_ONE_PASS): GPT-2's QKV at one row, its fc at three (f16).
    ['bf16', 1, 2304, 768, 'none', undefined, { kind: 'layer', residual: true, bias: true, onePass: true }],
    ['f16', 3, 3072, 768, 'gelu_bias', undefined, { kind: 'layer', residual: true, bias: true, onePass: true }],
    // An f32 y (a fused MLP's accumulator) beside 16-bit x: GPT-2's QKV at one row (x and h written early, from
    // registers) and four (late: write_rows reads y again), Llama's at four (deferred), f16.
    ['bf16', 1, 2304, 768, 'bias', undefined, { kind: 'layer', residual: true, bias: true, onePass: true, write: 'early', yF32: true }],
    ['bf16', 4, 2304, 768, 'bias', undefined, { kind: 'layer', residual: true, bias: true, onePass: true, yF32: true }],
    ['bf16', 4, 3072, 2048, 'none', undefined, { kind: 'rms', residual: true, bias: false, preload: true, write: 'deferred', yF32: true }],
    ['f16', 2, 2304, 768, 'none', undefined, { kind: 'layer', residual: true, bias: true, yF32: true }],
  ];
  // The looping form (GemvSpec.loop; the gated GEMVs above take it as planned): Llama's gated gate/up with its
  // norm at two rows (one K-split), its LM head (plain), a K-split plan at 4 rows, GPT-2's fc with its
  // LayerNorm, f32 with a partial chunk.
  const looped: [FloatDType, number, number, number, GemmEpilogue, GemvSpec['gate'], GemvNorm | undefined, number][] = [
    ['bf16', 2, 8192, 2048, 'none', { activation: 'silu', bias: false }, { kind: 'rms', residual: true, bias: false, preload: true }, 1],
    ['bf16', 1, 128256, 2048, 'none', undefined, undefined, 1],
    ['bf16', 4, 128256, 2048, 'none', undefined, undefined, 2],
    ['bf16', 1, 3072, 768, 'gelu_bias', undefined, { kind: 'layer', residual: true, bias: true }, 2],
    ['f32', 3, 777, 132, 'relu_bias', undefined, undefined, 1],
  ];
  const { loop: _looped, ...oneTileGated } = planGemv('bf16', 1, 8192, 2048, 'none', { activation: 'silu', bias: false }, 132, { kind: 'rms', residual: true, bias: false, preload: true }).spec;
  return [
    ...plans.map(([dtype, M, N, K, epilogue, gate]) => gemvSource(planGemv(dtype, M, N, K, epilogue, gate, 132).spec)),
    ...normed.map(([dtype, M, N, K, epilogue, gate, norm]) => gemvSource(planGemv(dtype, M, N, K, epilogue, gate, 132, norm).spec)),
    ...looped.map(([dtype, M, , K, epilogue, gate, norm, kWarps]) => gemvSource({ dtype, rows: M, k: K, epilogue, columns: 1, kWarps, ...(gate ? { gate } : {}), ...(norm ? { norm } : {}), loop: true })),
    gemvSource(oneTileGated), // the gated GEMV's one-tile-a-block form (FUSEFORMER_GEMV_LOOP=0)
    // The LM head packing its greedy pick (GemvSpec.argmax): GPT-2's at one row, Llama's at four (K-split), f32 at three.
    ...([['bf16', 1, 50304, 768], ['bf16', 4, 128256, 2048], ['f32', 3, 777, 132]] as const).map(([dtype, M, N, K]) => {
      const { loop: _loop, ...spec } = planGemv(dtype, M, N, K, 'none', undefined, 132).spec;
      return gemvSource({ ...spec, argmax: true });
    }),
  ];
}
