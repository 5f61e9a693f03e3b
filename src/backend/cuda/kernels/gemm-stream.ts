// Streamed skinny GEMM: out[M, N] = ep(x[M, K]·w[N, K]ᵀ + bias) for 5 ≤ M ≤ 64 rows (the backend routes
// 5–32), the weights streamed once by the TMA unit — a decode step of a batch of sequences (the decode
// engine at batch 32, the serving engine's decode buckets). Gated: act(x·w_gᵀ + b_g) ⊙ (x·w_uᵀ + b_u)
// with the gate rows n and the up rows N + n of one [2N, K] weight (gatedLinear).
//
// Block: CW consumer warps + 1 producer warp; BN = CW·16·FT output features (gated: BN gate rows, then
// BN up rows), all M rows (NT = ⌈M / 8⌉ rounded up to even row tiles of 8), one split of K. A ring of
// STAGES stages, each with a "full" mbarrier (the copies count their bytes off it) and an "empty" one
// (each consumer warp arrives when done with the stage): the consumers never meet at a block barrier.
// Stage copies: KC / 64 groups of [WROWS weight rows][XROWS x rows] of 128 bytes (64 k), each a 2-D
// tensor-map box (cp.async.bulk.tensor, one instruction; the maps are kernel arguments the runtime
// encodes at launch) in the 128-byte swizzle — chunk c of row r at c ^ (r mod 8) within 1024-byte
// aligned groups, which is swizzled_offset<8> — so ldmatrix reads 8 rows from 8 bank groups. Boxes past
// N, M or K read zeros (their outputs are never stored; K's zeros add nothing). Session 22's first form
// copied each row segment with a 1-D cp.async.bulk instead: those copies complete one after another,
// ~60–100 ns each whatever their size, so it streamed at 8–22% of copy where the boxes reach 90%
// (docs/perf.md "Session 22"; bench/results/gpu-pending-s22/call2, call3).
// Fragments: mma.sync m16n8k16 with the weights as A (16 features × 16 k, ldmatrix.x4) and x as B (16 k
// × 8 rows, ldmatrix.x4 giving two row tiles), so C is [feature][row]: lane (g, t) holds features
// base + g (+ 8) of rows 8j + 2t (+ 1).
// Split-K (grid.y = S ≤ 8): the S blocks of a feature tile are one thread-block cluster; each writes its
// f32 sums into its own shared memory (the drained stages), the cluster synchronises, and block r adds
// up elements r·THREADS.. of the tile from all S blocks (distributed shared memory, in split order:
// deterministic), applies the epilogue and writes out (gemm-skinny.ts skinnyOutputCode).
// PDL: the producer issues the weight copies of the first stages before GRID_DEPENDENCY_WAIT (weights
// never depend on the previous kernel), the x copies after it; consumers only read x through the
// stages, so only the producer waits.
// Bytes: N·K·s of weights once, M·K·s of x per feature tile (L2 hits after the first).
// Precision: f32 products and sums of the stored 16-bit values (as cuBLASLt with f32 compute).
// Accumulate (GEMM's beta = 1): out += the product (+ bias).
// Removed in session 58, opt-in and measured slower (docs/perf.md "Sessions 24–25", "Session 28"; the last
// commit with them is 97e55d8): the RMS norm formed in the kernel (FUSEFORMER_STREAM_NORM), the norm split
// across two products (rowSquares / rowScale, FUSEFORMER_ROW_NORM), fewer stages copied before the wait
// (FUSEFORMER_STREAM_PREWAIT) and the trigger at the kernel's start (FUSEFORMER_STREAM_EARLY_TRIGGER).
// INT4 (spec.int4; int4Linear's W4A16 layout, quant-int4.ts: qweight u32 [N, K/8], f16 scales and u8
// zeros per group of G k): the packed rows are a tensor map of 16-bit columns [rows, K/4], so a stage is
// one 128-byte box of each weight row (256 k) and four x boxes of 64 k after the weight rows. The math is
// gemv-int4-mma.ts's: lane (g, t) takes k 32t .. 32t + 31 of each 128-k half-stage — 16 bytes of weight
// rows g and g + 8 of a tile, the same k of x rows 8j + g — the nibbles e, e + 4 of each word as an exact
// (q − z) 16-bit pair (LOP3 + FMA), the x pairs matched by PRMT (the order of k inside a half is the same
// permutation on both sides), mma.sync into the half's sums, which the group's scale adds to the
// accumulators in f32. Each stage's scales and zeros (f32, and the −(magic + z) pairs) are written into
// its tail by the producer warp's 32 lanes as it refills the stage, so they arrive with the stage (a first
// build had the consumers read them from global memory before each stage's wait: one HBM round trip a
// stage on every consumer's path). 4 consumer warps of one feature tile (FUSEFORMER_INT4_TMA_SHAPE forces
// 8 warps or 2 tiles a warp), any 1–4 row tiles. Measured on the H200 (session 26): bound by its consumers'
// dequantizing, it beats the mma GEMV only on the gated MLP product at 5–32 rows, where int4Linear takes
// it by default (quant-int4.ts int4TmaOptions): Llama 1.2B INT4 at batch 32 1.172 → 1.061 ms/token.

import type { Activation, GemmEpilogue } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import type { EpilogueActivation } from './quant-int4.js';
import type { CheckedGemm } from '../gemm-plan.js';
import type { KernelHost, KernelSource, TensorMap2d } from '../runtime/kernel.js';
import type { CudaTensor } from '../runtime/tensor.js';
import type { Tensor } from '../../../tensor.js';
import { arg } from '../runtime/kernel.js';
import { BULK_COPY_LIB, TENSOR_MAP_LIB } from './bulk-copy-lib.js';
import { CLUSTER_LIB, DEVICE_LIB, typedefLine } from './device-lib.js';
import { envFlag } from '../env-switch.js';
import { GEMV_EPILOGUES, gemvOutputCode } from './gemv.js';
import { int4MmaDequantCode } from './gemv-int4-mma.js';
import type { Int4MmaGemvLaunch } from './gemv-int4-mma.js';
import type { CheckedGatedLinear } from './gemv.js';
import { MMA_LIB } from './mma-lib.js';
import { skinnyGatedOperands, skinnyGemmOperands, skinnyOutputCode, skinnyTakesGated, skinnyTakesGemm } from './gemm-skinny.js';
import type { SkinnyLaunch } from './gemm-skinny.js';
import { constants, kernelIdentifier } from './row-kernels.js';
import { tmaWeightLoadCode } from './weight-stream.js';

/** Rows the kernel takes: fewer are gemv.ts's, more are cuBLASLt's. */
export const STREAM_MIN_ROWS = 5;
export const STREAM_MAX_ROWS = 64;
/** K must be a multiple of the smallest stage depth (64 k = 128 bytes a row segment). */
export const STREAM_K_MULTIPLE = 64;
export const STREAM_EPILOGUES: readonly GemmEpilogue[] = GEMV_EPILOGUES;
/** Splits of K at most: the blocks of a cluster (the largest portable cluster). */
export const STREAM_MAX_SPLITS = 8;
/** Dynamic shared memory the planner fills with stages (of sm_90's 227 KiB a block). */
const STAGE_BUDGET_BYTES = 200 * 1024;
/** The same for a split plan: two blocks an SM, so a cluster's blocks are not held to one an SM. */
const SPLIT_STAGE_BUDGET_BYTES = 100 * 1024;
const MAX_SHARED_BYTES = 227 * 1024;
/** Bytes before the stages: the 2·STAGES mbarriers (8 bytes each), padded to keep the stages 128-byte aligned. */
const BARRIER_BYTES = 128;
const MAX_STAGES = 8;
/** Extra floats a row of the combine's shared sums carries, so the fragments' stores miss no bank twice. */
const COMBINE_PAD = 4;

export interface StreamGemmSpec {
  readonly dtype: 'bf16' | 'f16';
  /** Row tiles of 8 (even, ≤ 8): the kernel takes M ≤ 8·NT (M is an argument). */
  readonly rowTiles: number;
  /** Consumer warps (CW); a block has CW + 1 warps. */
  readonly warps: 4 | 8;
  /** Feature tiles of 16 a consumer warp computes (gated: of the gate, and as many of the up rows). */
  readonly featureTiles: 1 | 2;
  /** k of one stage (KC): 64 or 128; K must be a multiple (INT4: 256, one 128-byte box of a packed row). */
  readonly chunkK: 64 | 128 | 256;
  /** Stages of the ring (2..8). */
  readonly stages: number;
  /** Splits of K, the blocks of a cluster (1 = unsplit, no cluster; ≤ STREAM_MAX_SPLITS). */
  readonly splits: number;
  readonly epilogue: GemmEpilogue;
  readonly gate?: { readonly activation: Activation; readonly bias: boolean };
  /** out += the product (beta = 1); not with gate. */
  readonly accumulate?: boolean;
  /**
   * W4A16 (int4Linear's layout, see "INT4" in the header): the weights are packed nibbles with f16 scales
   * and u8 zeros per group of `groupSize` k (a multiple of 128 dividing K); chunkK 256.
   */
  readonly int4?: { readonly groupSize: number };
}

export function streamGemmKey(s: StreamGemmSpec): string {
  const tail = s.gate ? `gated_${s.gate.activation}${s.gate.bias ? '_bias' : ''}` : s.epilogue;
  return `gemm_stream.${s.dtype}.nt${s.rowTiles}.w${s.warps}.ft${s.featureTiles}.kc${s.chunkK}.s${s.stages}${s.splits > 1 ? `.k${s.splits}` : ''}.${tail}`
    + `${s.accumulate ? '.acc' : ''}${s.int4 ? `.int4_g${s.int4.groupSize}` : ''}`;
}

export interface StreamGemmPlan {
  readonly spec: StreamGemmSpec;
  /** [feature tiles, K splits]. */
  readonly grid: readonly [number, number];
}

/** Output features a block computes (BN). */
export function streamBlockFeatures(spec: Pick<StreamGemmSpec, 'warps' | 'featureTiles'>): number {
  return spec.warps * 16 * spec.featureTiles;
}

/** Weight rows of a block's stage: BN, gated 2·BN. */
function weightRows(spec: Pick<StreamGemmSpec, 'warps' | 'featureTiles' | 'gate'>): number {
  return (spec.gate ? 2 : 1) * streamBlockFeatures(spec);
}

/** Bytes of a stage the tensor-map copies write: the chunk's weight rows and x rows (INT4: one 128-byte box of each packed weight row, then the x boxes). */
export function streamTmaBytes(spec: Pick<StreamGemmSpec, 'warps' | 'featureTiles' | 'gate' | 'rowTiles' | 'chunkK' | 'int4'>): number {
  if (spec.int4) return (weightRows(spec) + (spec.chunkK / 64) * 8 * spec.rowTiles) * 128;
  return (weightRows(spec) + 8 * spec.rowTiles) * spec.chunkK * 2;
}

/**
 * Bytes of one stage: the copies', and for INT4 a tail the producer warp fills with each weight row's f32
 * scale and −(magic + zero) pair of the chunk's two 128-k halves (16 bytes a row: the stages stay 1024-byte aligned).
 */
export function streamStageBytes(spec: Pick<StreamGemmSpec, 'warps' | 'featureTiles' | 'gate' | 'rowTiles' | 'chunkK' | 'int4'>): number {
  return streamTmaBytes(spec) + (spec.int4 ? 16 * weightRows(spec) : 0);
}

/** Slack for aligning the ring to 1024 bytes (the 128-byte swizzle's period) at run time. */
const RING_ALIGN_BYTES = 1024;

/** Dynamic shared memory of a block: the barriers, then its stages (which the split combine reuses for the block's sums). */
export function streamSharedBytes(spec: StreamGemmSpec): number {
  const combine = spec.splits > 1 ? 8 * spec.rowTiles * (weightRows(spec) + COMBINE_PAD) * 4 : 0;
  return BARRIER_BYTES + RING_ALIGN_BYTES + Math.max(spec.stages * streamStageBytes(spec), combine);
}

/** The deepest ring of at most MAX_STAGES stages within the budget (at least 2), or null if two do not fit. */
function stagesFor(spec: Omit<StreamGemmSpec, 'stages' | 'splits' | 'epilogue'>, budget = STAGE_BUDGET_BYTES): number | null {
  const n = Math.min(MAX_STAGES, Math.floor(budget / streamStageBytes(spec)));
  return n >= 2 ? n : null;
}

/**
 * The plan for M rows, N outputs (gated: N = F), K inputs (a multiple of 64), from session 22's sweeps
 * (bench/results/gpu-pending-s22/call4/, call6/: every plan at Llama 1.2B's and GPT-2's products, 32
 * rows). 4 consumer warps of one feature tile (BN = 64). K is split only when the feature tiles alone
 * would leave three quarters of the SMs idle: into the most of 8, 6, 4 or 2 ranges that keep the grid
 * one block an SM and each range 2 stages, at 128 k a stage, or at 64 where that allows more splits
 * (GPT-2's out, K 768: 6 splits at 64 k 3.05 µs, 2 at 128 k 3.73; Llama's out and down 4 splits;
 * Llama's QKV and GPT-2's QKV and fc unsplit: 6.6, 3.5 and 3.5 µs, split 7.1–11.1, 4.6). An unsplit
 * one-wave grid takes the deepest ring within STAGE_BUDGET_BYTES (Llama QKV 8 stages 6.6 µs, 4 stages
 * 7.1); a split grid or one of several waves keeps to SPLIT_STAGE_BUDGET_BYTES, so two blocks fit an
 * SM — the clusters place freely (Llama out at 4 splits: 8 stages 8.7 µs, 4 stages 5.5) and one block's
 * tail overlaps the next one's start (GPT-2's LM head, 786 tiles: 4 stages 24.1 µs, 8 stages 31.1).
 */
export function planStreamGemm(
  dtype: 'bf16' | 'f16', M: number, N: number, K: number, epilogue: GemmEpilogue, gate: StreamGemmSpec['gate'], multiProcessorCount: number,
  extra: Pick<StreamGemmSpec, 'accumulate'> = {},
): StreamGemmPlan {
  if (M < 1 || M > STREAM_MAX_ROWS) throw new RangeError(`planStreamGemm: ${M} rows: the kernel takes 1..${STREAM_MAX_ROWS}`);
  if (K % STREAM_K_MULTIPLE !== 0) throw new RangeError(`planStreamGemm: K = ${K} is not a multiple of ${STREAM_K_MULTIPLE}`);
  const rowTiles = 2 * Math.ceil(M / 16);
  const base = { dtype, rowTiles, warps: 4 as const, featureTiles: 1 as const, ...(gate ? { gate } : {}), ...extra };
  const tiles = Math.ceil(N / streamBlockFeatures(base));
  // The most splits of K a stage depth allows (1 when the tiles fill a quarter of the SMs or more).
  const splitsAt = (chunkK: number): number => {
    if (4 * tiles >= multiProcessorCount || K % chunkK !== 0) return 1;
    return [8, 6, 4, 2].find((s) => tiles * s <= multiProcessorCount && K / chunkK / s >= 2) ?? 1;
  };
  const chunkK: 64 | 128 = K % 128 === 0 && splitsAt(128) >= splitsAt(64) ? 128 : 64;
  const splits = splitsAt(chunkK);
  const shallow = splits > 1 || tiles > multiProcessorCount;
  const stages = stagesFor({ ...base, chunkK }, shallow ? SPLIT_STAGE_BUDGET_BYTES : STAGE_BUDGET_BYTES);
  if (stages === null) throw new RangeError(`planStreamGemm: no stage of ${M} rows fits in shared memory`);
  return { spec: { ...base, chunkK, stages, splits, epilogue }, grid: [tiles, splits] };
}

/** k of an INT4 stage: one 128-byte box (64 16-bit pairs of nibbles) of each packed weight row. */
export const STREAM_INT4_CHUNK_K = 256;
/** INT4 groups are multiples of this (a consumer's half-stage of 128 k lies in one group). */
export const STREAM_INT4_GROUP_MULTIPLE = 128;

/**
 * The INT4 form's producer warp: lane 0 waits on the ring's barriers and issues the tensor-map copies as
 * the 16-bit form's producer does (the weights of the first stages before the grid-dependency wait); all
 * 32 lanes write each stage's tail — every weight row's f32 scale and −(magic + z) pair of the chunk's two
 * 128-k halves, read from global memory as the stage is refilled, so their latency hides behind the ring
 * as the weights' does — and arrive on its full barrier (33 arrivals: lane 0's expect_tx, then the lanes').
 */
const INT4_PRODUCER_CODE = String.raw`    const auto copy_scales = [&](int stage, int c) {
      float* tail_scales = reinterpret_cast<float*>(ring + stage * STAGE_BYTES + TMA_BYTES);
      u32* tail_zeros = reinterpret_cast<u32*>(tail_scales + 2 * WROWS);
      for (int e = lane; e < 2 * WROWS; e += 32) {
        const int h2 = e / WROWS, row = e % WROWS, up = GATED && row >= BN;
        const int n = min(n0 + (up ? row - BN : row), N - 1);  // rows past N: the last one's (never written out)
        const size_t gi = (size_t)(up ? N + n : n) * (K / G) + (c * KC + 128 * h2) / G;
        tail_scales[e] = __half2float(scales[gi]);
        tail_zeros[e] = minus_zero_pair(zeros[gi]);
      }
      mbar_arrive(&full[stage]);  // this lane's part of the tail is written
    };
    const int first = min(count, STAGES);
    if (lane == 0)
      for (int i = 0; i < first; i++) {
        mbar_expect(&full[i], TMA_BYTES);
        copy_weights(i, c_begin + i);
      }
    for (int i = 0; i < first; i++) copy_scales(i, c_begin + i);  // scales and zeros never depend on the previous kernel
    if (lane == 0) {
      GRID_DEPENDENCY_WAIT_ONE();  // x is the previous kernel's output (the timeline's stamp: this lane's)
      for (int i = 0; i < first; i++) copy_x(i, c_begin + i);
    }
    for (int i = STAGES; i < count; i++) {
      const int s = i % STAGES;
      if (lane == 0) {
        mbar_wait(&empty[s], ((i / STAGES) - 1) & 1);
        mbar_expect(&full[s], TMA_BYTES);
        copy_weights(s, c_begin + i);
        copy_x(s, c_begin + i);
      }
      __syncwarp();  // every consumer is done with stage s: its tail may be rewritten
      copy_scales(s, c_begin + i);
    }`;

/**
 * The consumers' loop of the INT4 form (see "INT4" in the header): per stage, once it is full, per 128-k
 * half the scales and −(magic + z) pairs of weight rows g and g + 8 of each tile from the stage's tail,
 * the lane's 16 bytes of those rows and, per packed word w, the matching x pairs of each
 * row tile, the nibble pairs made exact (q − z) 16-bit pairs and multiplied on the tensor cores into
 * the half's sums, which its group's scale adds to the accumulators in f32.
 */
function int4ConsumerCode(): string {
  return String.raw`
    #pragma unroll 1
    for (int it = 0; it < count; it++) {
      const int s = it % STAGES;
      mbar_wait(&full[s], (it / STAGES) & 1);
      const u32 stage = smem_u32(ring + s * STAGE_BYTES);
      // The stage's tail (the producer warp's): [half][weight row] f32 scales, then the −(magic + z) pairs.
      const float* tail_scales = reinterpret_cast<const float*>(ring + s * STAGE_BYTES + TMA_BYTES);
      const u32* tail_zeros = reinterpret_cast<const u32*>(tail_scales + 2 * WROWS);
      #pragma unroll
      for (int h2 = 0; h2 < 2; h2++) {
        float sc[WT][2];
        u32 mz[WT][2];
        #pragma unroll
        for (int ti = 0; ti < WT; ti++)
          #pragma unroll
          for (int h = 0; h < 2; h++) {
            sc[ti][h] = tail_scales[h2 * WROWS + tile_row(ti) + g + 8 * h];
            mz[ti][h] = tail_zeros[h2 * WROWS + tile_row(ti) + g + 8 * h];
          }
        // The lane's 32 k of this half, 128·h2 + 32t ..: 16-byte chunk 4·h2 + t of weight rows g and g + 8.
        uint4 wv[WT][2];
        #pragma unroll
        for (int ti = 0; ti < WT; ti++)
          #pragma unroll
          for (int h = 0; h < 2; h++) wv[ti][h] = lds_u4(stage + swizzled_offset<8>(tile_row(ti) + g + 8 * h, 4 * h2 + t));
        float cf[WT][NT][4];
        FOR_EACH_FRAGMENT(WT) cf[i][j][q] = 0.f;
        // The same k of x: box 2·h2 + t / 2 (64 k each), its 16-byte chunk 4·(t mod 2) + w.
        const u32 xbox = stage + (WROWS + (2 * h2 + (t >> 1)) * XROWS) * 128;
        #pragma unroll
        for (int w = 0; w < 4; w++) {
          // x pairs (x[8w + e], x[8w + e + 4]) of rows 8j + g, e = 0..3, as nibble_pair orders the weights.
          u32 bp[NT][4];
          #pragma unroll
          for (int j = 0; j < NT; j++) x_pairs(bp[j], lds_u4(xbox + swizzled_offset<8>(8 * j + g, 4 * (t & 1) + w)));
          #pragma unroll
          for (int ti = 0; ti < WT; ti++) {
            const u32 w0 = word_of(wv[ti][0], w), w1 = word_of(wv[ti][1], w);
            #pragma unroll
            for (int p = 0; p < 2; p++) {
              u32 af[4];
              weight_fragment(af, w0, w1, p, mz[ti][0], mz[ti][1]);
              #pragma unroll
              for (int j = 0; j < NT; j++) mma_16816<T>(cf[ti][j], af, bp[j][2 * p], bp[j][2 * p + 1]);
            }
          }
        }
        // The half lies in one group: its scale, per weight row (q 0, 1: row g; 2, 3: row g + 8).
        FOR_EACH_FRAGMENT(WT) acc[i][j][q] = fmaf(sc[i][q >> 1], cf[i][j][q], acc[i][j][q]);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);  // this warp is done with the stage
    }`;
}

/**
 * The INT4 plan for M rows, N outputs (gated: N = F), K inputs: `shape`'s consumer warps and feature tiles
 * (by default 4 warps of one tile, BN = 64: session 26's sweep of 8,1 / 4,1 / 4,2; the 8-warp gated form at
 * 32 rows takes 168 registers a thread: one block an SM) — and K split into the most of 8, 6, 4 or 2
 * ranges of whole stages that keep the grid one block an SM; the deepest ring within
 * SPLIT_STAGE_BUDGET_BYTES where the grid has more blocks than SMs (two blocks an SM) if two stages fit
 * there, else within STAGE_BUDGET_BYTES, and no deeper than a block's chunks.
 */
export function planStreamInt4(
  dtype: 'bf16' | 'f16', M: number, N: number, K: number, groupSize: number, epilogue: GemmEpilogue, gate: StreamGemmSpec['gate'], multiProcessorCount: number,
  shape: StreamInt4Shape = streamGemmOptions.int4Shape,
): StreamGemmPlan {
  if (M < 1 || M > STREAM_ROUTED_MAX_ROWS) throw new RangeError(`planStreamInt4: ${M} rows: the INT4 form takes 1..${STREAM_ROUTED_MAX_ROWS}`);
  if (K % STREAM_INT4_CHUNK_K !== 0 || groupSize % STREAM_INT4_GROUP_MULTIPLE !== 0 || K % groupSize !== 0) {
    throw new RangeError(`planStreamInt4: K = ${K} must be a multiple of ${STREAM_INT4_CHUNK_K} and the groups (${groupSize}) multiples of ${STREAM_INT4_GROUP_MULTIPLE} dividing K`);
  }
  const base = { dtype, rowTiles: Math.ceil(M / 8), warps: shape.warps, featureTiles: shape.featureTiles, chunkK: STREAM_INT4_CHUNK_K as 256, int4: { groupSize }, ...(gate ? { gate } : {}) };
  const tiles = Math.ceil(N / streamBlockFeatures(base)), chunks = K / STREAM_INT4_CHUNK_K;
  const splits = [8, 6, 4, 2].find((s) => tiles * s <= multiProcessorCount && chunks >= s) ?? 1;
  // Two blocks an SM where the grid passes one wave and two rings of two stages fit; else one.
  const deepest = (tiles * splits > multiProcessorCount ? stagesFor(base, SPLIT_STAGE_BUDGET_BYTES) : null) ?? stagesFor(base, STAGE_BUDGET_BYTES);
  if (deepest === null) throw new RangeError(`planStreamInt4: no two stages of ${M} rows fit in shared memory`);
  // No deeper than a split's chunks (a smaller ring leaves room for a second block on the SM).
  const stages = Math.max(2, Math.min(deepest, Math.ceil(chunks / splits)));
  return { spec: { ...base, stages, splits, epilogue }, grid: [tiles, splits] };
}

/** The INT4 form's block shape: consumer warps and feature tiles a warp (4, 1 unless forced). */
export interface StreamInt4Shape {
  readonly warps: 4 | 8;
  readonly featureTiles: 1 | 2;
}

/**
 * The INT4 block shape: FUSEFORMER_INT4_TMA_SHAPE=warps,featureTiles (4 or 8, 1 or 2) forces one for a
 * sweep (bench/gpu-pending.sh int4-tma); otherwise 4 consumer warps of one feature tile (session 26, Llama
 * INT4 batch 32 with the gated product on it: 1.060 ms/token against 1.083 at 8, 1).
 */
export function streamInt4Shape(raw: string | undefined = process.env['FUSEFORMER_INT4_TMA_SHAPE']): StreamInt4Shape {
  if (raw === undefined || raw === '') return { warps: 4, featureTiles: 1 };
  const m = /^(4|8),(1|2)$/.exec(raw.trim());
  if (!m) throw new Error(`FUSEFORMER_INT4_TMA_SHAPE must be warps,featureTiles with warps 4 or 8 and featureTiles 1 or 2 (e.g. 8,1), got '${raw}'`);
  return { warps: Number(m[1]) as 4 | 8, featureTiles: Number(m[2]) as 1 | 2 };
}

/** int4Linear's bias and activation as the streamed GEMM's epilogue (not gated), or null where it has none for them. */
export function int4StreamEpilogue(bias: boolean, activation: EpilogueActivation): GemmEpilogue | null {
  if (activation === 'none') return bias ? 'bias' : 'none';
  if (!bias) return null;
  return activation === 'relu' ? 'relu_bias' : activation === 'gelu_tanh' ? 'gelu_bias' : null;
}

/**
 * Whether the INT4 form can take this int4Linear: 16-bit x of 1–32 rows on a host with tensor-map copies,
 * K a multiple of 256, groups a multiple of 128 dividing K, and (not gated) an epilogue it has. Which rows
 * it is routed is int4Linear's rule (quant-int4.ts int4TmaRoutes).
 */
export function streamInt4Applies(host: Pick<KernelHost, 'tensorMaps'>, dtype: FloatDType, M: number, K: number, groupSize: number, gated: boolean, bias: boolean, activation: EpilogueActivation): boolean {
  return host.tensorMaps === true && (dtype === 'bf16' || dtype === 'f16') && M >= 1 && M <= STREAM_ROUTED_MAX_ROWS
    && K % STREAM_INT4_CHUNK_K === 0 && groupSize % STREAM_INT4_GROUP_MULTIPLE === 0 && K % groupSize === 0
    && (gated ? activation !== 'none' : int4StreamEpilogue(bias, activation) !== null);
}

/** An INT4 launch's operands (the mma GEMV's): device addresses (bias 0n when absent), M rows, N outputs (gated: F), K. */
export type StreamInt4Launch = Pick<Int4MmaGemvLaunch, 'x' | 'qweight' | 'scales' | 'zeros' | 'bias' | 'out' | 'M' | 'N' | 'K'>;

/** INT4 launches in this process (tests check that a model's products took the kernel). */
export const streamInt4Stats = { launches: 0 };

/** Launches an INT4 plan: qweight [(gated: 2)N, K/8] read through a tensor map of 16-bit columns [rows, K/4]. */
export function launchStreamInt4(host: KernelHost, plan: StreamGemmPlan, a: StreamInt4Launch): void {
  const spec = plan.spec;
  if (!spec.int4) throw new RangeError(`launchStreamInt4: ${streamGemmKey(spec)} is not an INT4 plan`);
  streamInt4Stats.launches++;
  const weights: TensorMap2d = { address: a.qweight, dtype: spec.dtype, cols: a.K / 4, rows: (spec.gate ? 2 : 1) * a.N, rowStrideBytes: a.K / 2, boxCols: 64, boxRows: streamBlockFeatures(spec) };
  host.kernel(streamGemmKey(spec), () => streamGemmSource(spec)).launch(
    { grid: [...plan.grid], block: (spec.warps + 1) * 32, sharedBytes: streamSharedBytes(spec) },
    [arg.tensorMap(weights), arg.tensorMap(streamTensorMap(spec, a.x, a.M, a.K, 8 * spec.rowTiles)), arg.ptr(a.bias), arg.ptr(a.out),
      arg.i32(a.M), arg.i32(a.N), arg.i32(a.K), arg.ptr(a.scales), arg.ptr(a.zeros)],
  );
}

export function streamGemmSource(spec: StreamGemmSpec): KernelSource {
  const name = kernelIdentifier(streamGemmKey(spec));
  const gate = spec.gate, FT = spec.featureTiles, WT = gate ? 2 * FT : FT, NT = spec.rowTiles, CW = spec.warps, S = spec.splits;
  const INT4 = spec.int4 !== undefined;
  // INT4 reads x by plain shared loads, a row tile at a time (any 1–4); the 16-bit form by ldmatrix, two at a time.
  if (INT4 ? NT < 1 || NT > 4 : NT < 2 || NT > 8 || NT % 2 !== 0) throw new RangeError(`streamGemmSource: row tiles must be ${INT4 ? '1..4 (INT4)' : '2, 4, 6 or 8'}, got ${NT}`);
  if (CW !== 4 && CW !== 8) throw new RangeError(`streamGemmSource: consumer warps must be 4 or 8, got ${CW}`);
  if (FT !== 1 && FT !== 2) throw new RangeError(`streamGemmSource: feature tiles must be 1 or 2, got ${FT}`);
  if (INT4 ? spec.chunkK !== STREAM_INT4_CHUNK_K : spec.chunkK !== 64 && spec.chunkK !== 128) throw new RangeError(`streamGemmSource: chunkK must be ${INT4 ? STREAM_INT4_CHUNK_K : '64 or 128'}, got ${spec.chunkK}`);
  if (spec.int4 && (spec.int4.groupSize % STREAM_INT4_GROUP_MULTIPLE !== 0 || spec.int4.groupSize <= 0)) throw new RangeError(`streamGemmSource: INT4 groups must be a positive multiple of ${STREAM_INT4_GROUP_MULTIPLE}, got ${spec.int4.groupSize}`);
  if (INT4 && spec.accumulate) throw new RangeError('streamGemmSource: the INT4 form has no accumulate epilogue');
  if (!Number.isInteger(spec.stages) || spec.stages < 2 || spec.stages > MAX_STAGES) throw new RangeError(`streamGemmSource: stages must be 2..${MAX_STAGES}, got ${spec.stages}`);
  if (!Number.isInteger(S) || S < 1 || S > STREAM_MAX_SPLITS) throw new RangeError(`streamGemmSource: splits must be 1..${STREAM_MAX_SPLITS}, got ${S}`);
  if (streamSharedBytes(spec) > MAX_SHARED_BYTES) throw new RangeError(`streamGemmSource: ${streamSharedBytes(spec)} bytes of shared memory exceed ${MAX_SHARED_BYTES}`);
  if (spec.accumulate && gate) throw new RangeError('streamGemmSource: a gated product does not accumulate');
  const BN = streamBlockFeatures(spec), WROWS = weightRows(spec);
  if (BN > 256) throw new RangeError(`streamGemmSource: a tensor-map box holds at most 256 rows, BN = ${BN}`);
  const { combine, direct } = skinnyOutputCode(gate, {
    region: 'ring', pitch: 'SUM_PITCH', consumers: 'warp < CW', ...(spec.accumulate ? { accumulate: true } : {}),
  });
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${typedefLine('T', spec.dtype)}
${CLUSTER_LIB}
constexpr unsigned long long BARRIER_TIMEOUT_NS = 2000000000ull;
${BULK_COPY_LIB}
${constants({ NT, FT, WT, BN, WROWS, XROWS: 8 * NT, CW, THREADS: (CW + 1) * 32, STAGES: spec.stages, KC: spec.chunkK, STAGE_BYTES: streamStageBytes(spec), TMA_BYTES: streamTmaBytes(spec), GATED: gate !== undefined, SPLITS: S, SUM_PITCH: WROWS + COMBINE_PAD })}

${TENSOR_MAP_LIB}
${tmaWeightLoadCode()}
${gemvOutputCode(spec.epilogue, gate, 'mma')}${INT4 ? `
${int4MmaDequantCode(spec.dtype)}constexpr int G = ${spec.int4!.groupSize};
__device__ __forceinline__ uint4 lds_u4(u32 addr) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(addr));
  return r;
}` : ''}
// Every C fragment value (i, j, q) of the first TILES weight tiles: tile i, row tile j, register q.
#define FOR_EACH_FRAGMENT(TILES) \
  _Pragma("unroll") for (int i = 0; i < (TILES); i++) _Pragma("unroll") for (int j = 0; j < NT; j++) _Pragma("unroll") for (int q = 0; q < 4; q++)

// x [M, K], w [N, K] (gated: [2N, K]), bias [N] (gated: [2N]) or null, out [M, N]; K a multiple of KC.${INT4 ? '\n// INT4: w is qweight u32 [N, K/8] (gated [2N, K/8]) read as 16-bit pairs; scales f16 and zeros u8 [rows, K/G].' : ''}
// Grid (⌈N / BN⌉, SPLITS), block THREADS (warp CW is the producer); the SPLITS blocks of a feature tile are one cluster.
extern "C" __global__ void ${S > 1 ? `__cluster_dims__(1, ${S}, 1) ` : ''}__launch_bounds__(THREADS, 1) ${name}(
    const __grid_constant__ TensorMap wmap, const __grid_constant__ TensorMap xmap, const T* __restrict__ bias, T* __restrict__ out, int M, int N, int K${INT4 ? ',\n    const __half* __restrict__ scales, const unsigned char* __restrict__ zeros' : ''}) {
  extern __shared__ __align__(128) unsigned char smem[];
  u64* full = reinterpret_cast<u64*>(smem);
  u64* empty = full + STAGES;
  // The ring starts at the first 1024-byte boundary past the barriers: the 128-byte swizzle repeats every 8 rows.
  unsigned char* ring = smem + ((smem_u32(smem) + ${BARRIER_BYTES} + 1023) & ~1023u) - smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * BN, split = blockIdx.y;
  const int chunks = (K + KC - 1) / KC;  // the tail box reads zeros past K
  const int c_begin = (int)((long long)split * chunks / SPLITS), c_end = (int)((long long)(split + 1) * chunks / SPLITS);
  const int count = c_end - c_begin;
  if (tid == 0) {
    // INT4: the full barrier also takes the producer warp's 32 lanes once they have written the stage's scales.
    for (int s = 0; s < STAGES; s++) { mbar_init_count(&full[s], ${INT4 ? 33 : 1}); mbar_init_count(&empty[s], CW); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  float acc[WT][NT][4];
  FOR_EACH_FRAGMENT(WT) acc[i][j][q] = 0.f;
  // Weight tile i of consumer warp "warp": its first row in a stage (gated: the gate tiles, then the up rows' at BN + …).
  const auto tile_row = [&](int i) { return (GATED && i >= FT ? BN : 0) + (warp * FT + (i % FT)) * 16; };

  if (warp == CW) {
    // The producer, one lane: a stage is KC / 64 groups of [WROWS weight rows][XROWS x rows], 128 bytes each
    // (the gated weight rows: BN gate rows n0.., then BN up rows N + n0..); boxes past N, M or K read zeros
    // and count their full bytes.
    const auto copy_weights = [&](int stage, int c) {
      unsigned char* dst = ring + stage * STAGE_BYTES;${INT4 ? `
      // INT4: one box of each packed row, 64 16-bit pairs = 256 k (the map's columns are 16-bit).
      tma_load_2d_weight(dst, &wmap, c * (KC / 4), n0, &full[stage]);
      if (GATED) tma_load_2d_weight(dst + BN * 128, &wmap, c * (KC / 4), N + n0, &full[stage]);` : `
      #pragma unroll
      for (int kb = 0; kb < KC / 64; kb++) {
        unsigned char* group = dst + kb * (WROWS + XROWS) * 128;
        tma_load_2d_weight(group, &wmap, c * KC + 64 * kb, n0, &full[stage]);
        if (GATED) tma_load_2d_weight(group + BN * 128, &wmap, c * KC + 64 * kb, N + n0, &full[stage]);
      }`}
    };
    const auto copy_x = [&](int stage, int c) {
      unsigned char* dst = ring + stage * STAGE_BYTES;
      #pragma unroll
      for (int kb = 0; kb < KC / 64; kb++) tma_load_2d(dst + ${INT4 ? '(WROWS + kb * XROWS) * 128' : '(kb * (WROWS + XROWS) + WROWS) * 128'}, &xmap, c * KC + 64 * kb, 0, &full[stage]);
    };
    // Stage s takes chunk i's weights and x once every consumer warp is done with chunk i - STAGES.
    const auto refill = [&](int s, int i) {
      mbar_wait(&empty[s], ((i / STAGES) - 1) & 1);
      mbar_expect(&full[s], STAGE_BYTES);
      copy_weights(s, c_begin + i);
      copy_x(s, c_begin + i);
    };
${INT4 ? INT4_PRODUCER_CODE : String.raw`    if (lane == 0) {
      const int first = min(count, STAGES);
      for (int i = 0; i < first; i++) {
        mbar_expect(&full[i], STAGE_BYTES);
        copy_weights(i, c_begin + i);
      }
      GRID_DEPENDENCY_WAIT_ONE();  // x is the previous kernel's output (the timeline's stamp: this lane's)
      for (int i = 0; i < first; i++) copy_x(i, c_begin + i);
      for (int i = STAGES; i < count; i++) refill(i % STAGES, i);
    }`}
    __syncwarp();
  } else {${INT4 ? int4ConsumerCode() : String.raw`
    #pragma unroll 1
    for (int i = 0; i < count; i++) {
      const int s = i % STAGES;
      mbar_wait(&full[s], (i / STAGES) & 1);
      const u32 stage = smem_u32(ring + s * STAGE_BYTES);
      #pragma unroll
      for (int ks = 0; ks < KC / 16; ks++) {
        // Group ks / 4 of the stage; 16-byte chunk 2·(ks mod 4) (+1) of a row, swizzled as the TMA wrote it.
        const u32 wtile = stage + (ks / 4) * (WROWS + XROWS) * 128, xtile = wtile + WROWS * 128;
        const auto w_at = [&](int row, int half) { return wtile + swizzled_offset<8>(row, 2 * (ks % 4) + half); };
        const auto x_at = [&](int row, int half) { return xtile + swizzled_offset<8>(row, 2 * (ks % 4) + half); };
        u32 a[WT][4];
        #pragma unroll
        for (int ti = 0; ti < WT; ti++) ldsm_x4(w_at(tile_row(ti) + (lane & 15), lane >> 4), a[ti]);
        #pragma unroll
        for (int j = 0; j < NT; j += 2) {
          u32 b[4];
          ldsm_x4(x_at(8 * j + (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1), b);
          #pragma unroll
          for (int ti = 0; ti < WT; ti++) {
            mma_16816<T>(acc[ti][j], a[ti], b[0], b[1]);
            mma_16816<T>(acc[ti][j + 1], a[ti], b[2], b[3]);
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);  // this warp is done with the stage
    }`}
  }
  GRID_DEPENDENCY_TRIGGER();

  // C fragment q of tile (i, j): feature n0 + (warp·FT + i mod FT)·16 + g + 8·(q >> 1) (the up tiles' as
  // the gate's), row 8j + 2t + (q & 1); its weight row in the stage is tile_row(i) + g + 8·(q >> 1).
  const auto row_of = [&](int j, int q) { return 8 * j + 2 * t + (q & 1); };
${S > 1 ? combine : direct}}
`;
  return { name, source, gridDependencyWait: true };
}

/**
 * The rows the backend routes to the kernel: 5–32. At 64 rows it was slower than cuBLASLt on three of
 * Llama's four products (session 22 call 6: QKV 8.9 against 6.6 µs, out 7.3 against 6.1, down 16.5
 * against 13.8); at 8–32 rows as fast or faster on all of them (gate/up 16.6–18.1 against 20.1–20.6).
 */
export const STREAM_ROUTED_MAX_ROWS = 32;
const STREAM_LIMITS = { minRows: STREAM_MIN_ROWS, maxRows: STREAM_ROUTED_MAX_ROWS, kMultiple: STREAM_K_MULTIPLE, accumulates: true };

/** Whether the backend sends this checked GEMM to the kernel (skinnyTakesGemm: 5–32 rows, K a multiple of 64, beta 0 or 1). */
export function streamGemmApplies(g: CheckedGemm): boolean {
  return skinnyTakesGemm(g, STREAM_LIMITS);
}

/** Whether the backend sends this gatedLinear to the gated kernel (skinnyTakesGated: 5–32 rows, K a multiple of 64). */
export function streamGatedApplies(g: CheckedGatedLinear): boolean {
  return skinnyTakesGated(g, STREAM_LIMITS);
}

/**
 * Plans around the planner's for M rows, N outputs, K inputs — 4 or 8 consumer warps, 1 or 2 feature
 * tiles a warp, 64 or 128 k a stage, the deepest ring that fits and one of 4 stages, the planner's
 * splits and its neighbours (half, double) — for bench/skinny-sweep.ts to time against the planner's
 * pick and cuBLASLt.
 */
export function streamGemmSpace(dtype: 'bf16' | 'f16', M: number, N: number, K: number, epilogue: GemmEpilogue, gate: StreamGemmSpec['gate'], multiProcessorCount: number): StreamGemmPlan[] {
  const rowTiles = 2 * Math.ceil(M / 16), out: StreamGemmPlan[] = [], seen = new Set<string>();
  for (const warps of [4, 8] as const) {
    for (const featureTiles of [1, 2] as const) {
      for (const chunkK of [64, 128] as const) {
        if (K % chunkK !== 0) continue;
        const base = { dtype, rowTiles, warps, featureTiles, chunkK, ...(gate ? { gate } : {}) };
        const deepest = stagesFor(base, MAX_SHARED_BYTES - BARRIER_BYTES - RING_ALIGN_BYTES);
        if (deepest === null) continue;
        const tiles = Math.ceil(N / streamBlockFeatures(base)), chunks = K / chunkK;
        const maxSplits = Math.max(1, Math.min(STREAM_MAX_SPLITS, Math.floor(chunks / 2)));
        const fit = Math.max(1, Math.min(maxSplits, Math.floor(multiProcessorCount / tiles)));
        for (const splits of new Set([Math.max(1, fit >> 1), fit, Math.min(maxSplits, fit * 2)])) {
          for (const stages of new Set([deepest, Math.min(deepest, 4)])) {
            const spec: StreamGemmSpec = { ...base, stages, splits, epilogue };
            if (streamSharedBytes(spec) > MAX_SHARED_BYTES || seen.has(streamGemmKey(spec))) continue;
            seen.add(streamGemmKey(spec));
            out.push({ spec, grid: [tiles, splits] });
          }
        }
      }
    }
  }
  return out;
}

/** A streamed GEMM's operands: the skinny GEMM's (device pointers, bias 0n when absent; gated: N = F). */
export type StreamLaunch = SkinnyLaunch;

/** Launches `plan` (the planner's, or one of streamGemmSpace's: the sweep). */
export function launchStreamPlan(host: KernelHost, plan: StreamGemmPlan, a: StreamLaunch): void {
  const spec = plan.spec;
  if (spec.int4) throw new RangeError(`launchStreamPlan: ${streamGemmKey(spec)} is an INT4 plan (launchStreamInt4)`);
  const operands = [arg.tensorMap(streamTensorMap(spec, a.w, (spec.gate ? 2 : 1) * a.N, a.K, streamBlockFeatures(spec))), arg.tensorMap(streamTensorMap(spec, a.x, a.M, a.K, 8 * spec.rowTiles))];
  host.kernel(streamGemmKey(spec), () => streamGemmSource(spec)).launch(
    { grid: [...plan.grid], block: (spec.warps + 1) * 32, sharedBytes: streamSharedBytes(spec) },
    [...operands, arg.ptr(a.bias), arg.ptr(a.out), arg.i32(a.M), arg.i32(a.N), arg.i32(a.K)],
  );
}

/** The tensor map of a row-major [rows, K] operand at `address`, read in boxes of boxRows × 64 k. */
export function streamTensorMap(spec: Pick<StreamGemmSpec, 'dtype'>, address: bigint, rows: number, K: number, boxRows: number): TensorMap2d {
  return { address, dtype: spec.dtype, cols: K, rows, rowStrideBytes: 2 * K, boxCols: 64, boxRows };
}

/** Launches the kernel for a GEMM streamGemmApplies() accepted (beta = 1: accumulating into out). */
export function launchStreamGemm(host: KernelHost, g: CheckedGemm): void {
  const a = skinnyGemmOperands(g);
  const plan = planStreamGemm(g.problem.dtype as 'bf16' | 'f16', a.M, a.N, a.K, g.problem.epilogue, undefined, host.multiProcessorCount, g.beta === 1 ? { accumulate: true } : {});
  launchStreamPlan(host, plan, a);
}

/** Launches the gated kernel for a gatedLinear streamGatedApplies() accepted (the scratch `up` is not written). */
export function launchStreamGated(host: KernelHost, g: CheckedGatedLinear): void {
  const { operands: a, gate } = skinnyGatedOperands(g);
  launchStreamPlan(host, planStreamGemm(g.x.dtype as 'bf16' | 'f16', a.M, a.N, a.K, 'none', gate, host.multiProcessorCount), a);
}

/** The process's settings, read once (tests set them directly). */
export const streamGemmOptions: { int4Shape: StreamInt4Shape } = { int4Shape: streamInt4Shape() };

/** Representative plans for the nvcc compile check (132 SMs): Llama 1.2B at batch 32, GPT-2's products, odd rows, the gated MLP. */
export function catalog(): KernelSource[] {
  const plans: ['bf16' | 'f16', number, number, number, GemmEpilogue, StreamGemmSpec['gate']][] = [
    ['bf16', 32, 3072, 2048, 'none', undefined],   // Llama 1.2B QKV at batch 32
    ['bf16', 32, 2048, 8192, 'none', undefined],   // its down product
    ['bf16', 32, 8192, 2048, 'none', { activation: 'silu', bias: false }], // gate/up + SwiGLU
    ['f16', 13, 3072, 768, 'gelu_bias', undefined], // GPT-2 fc, odd rows
    ['f16', 40, 768, 3072, 'none', { activation: 'gelu_tanh', bias: true }],
    ['bf16', 64, 2304, 768, 'bias', undefined],
    ['bf16', 5, 2048, 2048, 'relu_bias', undefined],
  ];
  return [
    ...plans.map(([dtype, M, N, K, epilogue, gate]) => streamGemmSource(planStreamGemm(dtype, M, N, K, epilogue, gate, 132).spec)),
    // The sweep's other shapes: two feature tiles a warp, split and gated.
    streamGemmSource({ dtype: 'bf16', rowTiles: 4, warps: 4, featureTiles: 2, chunkK: 128, stages: 4, splits: 4, epilogue: 'none' }),
    streamGemmSource({ dtype: 'bf16', rowTiles: 4, warps: 4, featureTiles: 2, chunkK: 64, stages: 4, splits: 2, epilogue: 'none', gate: { activation: 'silu', bias: false } }),
    // Accumulating into out (beta = 1): an O or down product adding into the residual stream.
    ...[
      planStreamGemm('bf16', 32, 2048, 2048, 'none', undefined, 132, { accumulate: true }),
      planStreamGemm('f16', 7, 1024, 2048, 'bias', undefined, 132, { accumulate: true }),
    ].map((plan) => streamGemmSource(plan.spec)),
    // The INT4 form: Llama 1.2B's gate/up at 32 rows, its down at 17 (three row tiles), QKV at 8, GPT-2's f16 QKV with
    // tanh-GELU at 5, the sweep's 4-warp shapes.
    ...[
      planStreamInt4('bf16', 32, 8192, 2048, 128, 'none', { activation: 'silu', bias: false }, 132, { warps: 8, featureTiles: 1 }),
      planStreamInt4('bf16', 17, 2048, 8192, 128, 'none', undefined, 132, { warps: 8, featureTiles: 1 }),
      planStreamInt4('bf16', 8, 3072, 2048, 256, 'bias', undefined, 132, { warps: 8, featureTiles: 1 }),
      planStreamInt4('f16', 5, 2304, 768, 128, 'gelu_bias', undefined, 132, { warps: 8, featureTiles: 1 }),
      planStreamInt4('bf16', 32, 8192, 2048, 128, 'none', { activation: 'silu', bias: false }, 132, { warps: 4, featureTiles: 1 }),
      planStreamInt4('bf16', 32, 2048, 8192, 128, 'none', undefined, 132, { warps: 4, featureTiles: 2 }),
    ].map((plan) => streamGemmSource(plan.spec)),
  ];
}
