// LayerNorm and RMSNorm, forward and backward, over the last dimension H of x [rows, H].
//
// Math (backend.ts has the contract):
//   LayerNorm forward   mean = Σx/H, var = Σx²/H − mean², rstd = 1/sqrt(var + eps),
//                       out = (x − mean)·rstd·gamma + beta; mean and rstd (f32 [rows]) are saved.
//   RMSNorm forward     rstd = 1/sqrt(Σx²/H + eps), out = x·rstd·gamma; rstd saved.
//   LayerNorm backward  x̂ = (x − mean)·rstd, g = dOut⊙gamma,
//                       dX = rstd·(g − Σg/H − x̂·Σ(g⊙x̂)/H) (+ dResidual),
//                       dGamma = Σ_rows dOut⊙x̂, dBeta = Σ_rows dOut (+= with accumulate).
//   RMSNorm backward    x̂ = x·rstd, dX = rstd·(g − x̂·Σ(g⊙x̂)/H) (+ dResidual), dGamma = Σ_rows dOut⊙x̂.
//
// One pass over memory (LightSeq's rewrite): the forward reduces Σx and Σx² together (one
// warp_sum2/block_sum2), the backward reduces Σg and Σg⊙x̂ together, and each row stays in registers
// between its reduction and its output. To keep Σx² − (Σx)²/H from cancelling when |mean| ≫ std,
// the forward sums d = x − x[0] (the row's first element) instead of x: same single reduction,
// variance exact up to rounding of d.
//
// Forward, persistent warps (f16/bf16 while a lane holds ≤ 32 elements, H ≤ 1024): one warp per
// row, 8 warps a block, a grid of at most one wave, warp w taking rows w, w + W, ... (W = all warps,
// rows spread evenly). Lane t keeps vectors t, t + 32, ... of its row packed (3 × 16 bytes at
// H = 768) and converts on use; the next row's loads are issued before the current row's reduction
// and stores (two rows in flight a warp); single-pass shifted Σd, Σd² by shuffles; no shared memory,
// no barriers (64 registers at H = 768, 4 blocks = 1024 threads an SM).
//
// Backward, staged (f16/bf16, 16-byte vectors, H ≤ 1024): also a warp per row and a fixed grid of
// two 8-warp blocks an SM, but the row loads go through shared memory: each warp owns STAGES = 2 row
// slots and cp.async.cg copies x, dOut (and dResidual) of its next row into one while it works on
// the other. The earlier versions held in-flight rows in registers next to the lane's dGamma/dBeta
// column sums (48–63% of copy bandwidth, bound by per-row latency); the loads now hold no registers
// and the column sums stay in f32 registers (48 at H = 768) for the warp's whole row range; no
// barriers in the loop. Per row, from the slot: Σg and Σg⊙x̂ by shuffles while accumulating the
// lane's columns, then a second read of the slot for dX. At the end the block's 8 warps are folded in
// warp order into one partial row per block (P = 256–264 on an H200). Bytes: read x, dOut once,
// write dX once. (The shape is swept: STAGED_BACKWARD_* below; FUSEFORMER_NORM_BACKWARD for sweeps.)
//
// A tensor-map TMA form of the backward (session 22) was measured slower on the H200 in session 23
// (BERT bf16 14.9 → 20.9 µs, GPT-2 25.6 → 34.5) and removed; commit 0b58bbe has it.
//
// Otherwise (f32, wider rows; row-kernels.ts): H/vec vectors per row, 16-byte vectors where H and the addresses
// allow. Forward: one warp per row (4 rows per block) while a lane holds ≤ 32 elements (H ≤ 1024),
// else a block per row with ≤ 16 elements per thread (H = 4096 bf16: 256 threads × 2 vectors).
// Backward: each element costs ~4 registers (x̂, g and two column sums), so rows are spread wider,
// ≤ 8 elements per thread (H = 768 bf16: 96 threads a row, 5 rows a 480-thread block).
//
// dGamma/dBeta (column sums over rows) are deterministic: the backward runs a fixed grid of P
// blocks (one wave of resident blocks), each walking a fixed set of rows and keeping per-column
// sums in registers; a block folds its warps or row slots together in a fixed order through shared
// memory and writes one f32 partial row per column sum to scratch ([P][sums][H]); then
// `norm_column_sums` adds the P partials in a fixed order and writes (or adds to) dGamma/dBeta in
// their dtype. P is small (≤ 264 at H = 768 on 132 SMs), so the partials are still in L2 when read.
// `norm_column_sums` (a block per 32 columns of each sum: 48 blocks at H = 768) is launched
// programmatically (it waits for the row kernel at its first line), and the staged row kernel triggers
// it when its rows are done: its launch overlaps the row kernel's fold. The staged row kernel is itself
// launched programmatically (its blocks get resident while the kernel before it drains) and the column
// sums trigger their successor at once.
// The two sizes measured on 2026-11-29 (8192 and 16384 rows at H = 768) put the 16-bit backward at
// ~10 µs per 8192 rows (copy: 9) plus ~7 µs fixed: launch, prologue, fold and the column sums.
//
// Measured on an H200 (CUDA graphs over rotating buffers, against a 16-byte copy kernel moving the
// same bytes; 2026-11-29): forward BERT 8192×768 84.8% (bf16) / 89.5% (f16) / 93.5% (f32), GPT-2
// 16384×768 90–97%; backward (both kernels) f32 86% / 94%; the 16-bit backward before staging
// 48–63% of the 1 GiB copy (the staged kernel is not yet measured).
//
// Precision: f32 arithmetic, storage f32/f16/bf16; mean, rstd and partials f32.
//
// Bytes per element of x (s = sizeof(dtype)), for the roofline:
//   forward:  read s (x), write s (out); per row + 8 (mean, rstd; RMSNorm + 4); gamma/beta ≈ 0 (cached).
//   backward: read 2s (dOut, x) [+ s dResidual], write s (dX); per row read 8; plus partials
//             P·sums·H·4 written and read once (about 2–4% of the traffic at BERT/GPT-2 sizes).

import type { LayerNormBackwardArgs, LayerNormForwardArgs, RmsNormBackwardArgs, RmsNormForwardArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import type { Tensor } from '../../../tensor.js';
import type { CheckedNormBackward, CheckedNormForward } from '../../op-checks/index.js';
import { checkLayerNormBackward, checkLayerNormForward, checkRmsNormBackward, checkRmsNormForward } from '../../op-checks/index.js';
import { ArgumentError } from '../../../errors.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro, planRowMapping, ROW_MAPPING_DEVICE_CODE, rowVectorWidth } from './row-kernels.js';

// ---- specs -------------------------------------------------------------------------------------------

export type NormKind = 'layer' | 'rms';

/** What a forward kernel is compiled for; rows are a launch argument. */
export interface NormForwardSpec {
  readonly norm: NormKind;
  readonly dtype: FloatDType;
  /** H, baked in: loop bounds, the 1/H factors and the register array sizes are constants. */
  readonly hidden: number;
  /** Elements per vector access (16 bytes when H and the tensors' addresses allow). */
  readonly vec: number;
  /** Threads sharing a row, a multiple of 32: one warp, or several warps of the block. */
  readonly threadsPerRow: number;
  /** Rows a block works on at once (its row slots, threadIdx.y); with `persistent`, its warps. */
  readonly rowsPerBlock: number;
  /**
   * Persistent warps (16-bit, a warp per row): each warp walks rows warp, warp + W, ... (W = all
   * warps of the grid), keeps its row as packed 16-bit vectors and loads the next row before the
   * current row's math. threadsPerRow is 32 and rowsPerBlock the warps of a block.
   */
  readonly persistent?: boolean;
}

/** The backward's per-row kernel (dX and the column partials). */
export interface NormBackwardSpec extends NormForwardSpec {
  /** dX += dResidual in the same kernel (the residual branch's gradient joins here). */
  readonly dResidual: boolean;
  /**
   * With `persistent` (16-bit, 16-byte vectors, H ≤ 1024): row slots in shared memory per warp,
   * i.e. the cp.async pipeline runs STAGES − 1 rows ahead of the math.
   */
  readonly stages?: number;
  /** With `persistent`: resident blocks an SM the kernel is compiled and launched for (default 1). */
  readonly blocksPerSm?: number;
}

/** The kernel that adds the partials into dGamma (and dBeta for LayerNorm). */
export interface NormColumnSumsSpec {
  readonly norm: NormKind;
  readonly dtype: FloatDType;
  readonly hidden: number;
  /** dGamma/dBeta += sums instead of = sums. */
  readonly accumulate: boolean;
}

export function normForwardKey(s: NormForwardSpec): string {
  return `norm_forward.${s.norm}.${s.dtype}.h${s.hidden}.v${s.vec}.t${s.threadsPerRow}.r${s.rowsPerBlock}${s.persistent ? '.pw' : ''}`;
}

export function normBackwardKey(s: NormBackwardSpec): string {
  return `norm_backward.${s.norm}.${s.dtype}.h${s.hidden}.v${s.vec}.t${s.threadsPerRow}.r${s.rowsPerBlock}${s.persistent ? `.pw.s${s.stages ?? 2}${(s.blocksPerSm ?? 1) > 1 ? `.b${s.blocksPerSm}` : ''}` : ''}${s.dResidual ? '.dres' : ''}`;
}

export function normColumnSumsKey(s: NormColumnSumsSpec): string {
  return `norm_column_sums.${s.norm}.${s.dtype}.h${s.hidden}${s.accumulate ? '.acc' : ''}`;
}

/** Column sums each backward block produces: dGamma and dBeta for LayerNorm, dGamma for RMSNorm. */
export function columnSumCount(norm: NormKind): number {
  return norm === 'layer' ? 2 : 1;
}

export function vecsPerThread(s: NormForwardSpec): number {
  return Math.ceil(s.hidden / s.vec / s.threadsPerRow);
}

// ---- planning ------------------------------------------------------------------------------------------

/** Forward: a warp per row while a lane holds at most this many elements (H ≤ 1024). */
const WARP_ROW_MAX_ELEMENTS = 32;
/**
 * Forward with a block per row: the first tier that fits, as (elements per thread, threads). The
 * last tier spills to local memory but keeps very wide rows (up to 65536) working.
 */
const FORWARD_BLOCK_TIERS: readonly (readonly [number, number])[] = [[16, 1024], [64, 1024]];
/** Warps (rows) per block with a warp per row: 128-thread blocks, 16 resident per SM. */
const FORWARD_WARP_ROWS_PER_BLOCK = 4;
/**
 * Backward: each thread holds x̂, g and two column sums per element (~4 registers an element), so
 * rows are spread over more threads: ≤ 8 elements a thread (H = 768 bf16: 96 threads a row), more
 * only for very wide rows.
 */
const BACKWARD_ELEMENT_TIERS = [8, 16, 32, 64] as const;
/** Backward blocks hold several rows (row slots) up to about this many threads. */
const BACKWARD_BLOCK_THREADS = 512;
/** Threads per SM the backward aims for: 64 registers a thread at ≤ 8 elements. */
const BACKWARD_THREADS_PER_SM = 1024;

/**
 * Persistent warps (16-bit, a warp per row): warps per block and blocks per SM the kernels are
 * compiled for (__launch_bounds__), from ptxas -v (sm_90, CUDA 13.0). Forward: 8 warps × 4 blocks =
 * 1024 threads an SM at ≤ 64 registers (H = 768 uses 62–64, no spills; a 40 or 48 bound spills
 * 56–240 bytes, and without the next-row prefetch it needs 48).
 */
const PERSISTENT_WARPS_PER_BLOCK = 8;
const PERSISTENT_FORWARD_BLOCKS_PER_SM = 4;
/** Forward: 3 blocks an SM above this many elements a lane (H > 768 at 16-byte vectors). */
const PERSISTENT_FORWARD_FOUR_BLOCK_ELEMENTS = 24;
/**
 * The staged backward (16-bit, 16-byte vectors): two blocks of 8 warps an SM (≤ 128 registers: the
 * lane's dGamma/dBeta columns and gamma stay in f32 registers, 72 at H = 768), one partial row per
 * block (264 on an H200), while a lane holds at most 4 vectors (H ≤ 1024), and two row slots a warp
 * (the row being worked on and the next one in flight). Swept on an H200 (session 12, bf16, BERT
 * 8192 × 768 / GPT-2 16384 × 768, µs): 16 warps × 1 block × 4 slots 18.4 / 28.5, × 2 slots 16.9 / 26.5;
 * 8 × 2 × 2 14.9 / 25.3; 8 × 2 × 3 15.9 / 26.4; 8 × 2 × 4 17.5 / 28.1; 4 × 4 × 2 15.2 / 26.4; 6 × 2 × 2
 * 16.2 / 25.9. More slots issue every row of a warp at once (~4 rows a warp at these sizes), which
 * serialises the loads behind one burst; two blocks an SM let one fold and write while the other streams.
 */
const STAGED_BACKWARD_WARPS = 8;
const STAGED_BACKWARD_BLOCKS_PER_SM = 2;
const STAGED_BACKWARD_MAX_VECS_PER_LANE = 4;
const STAGED_BACKWARD_MAX_STAGES = 2;
/** Shared memory the staged backward plans with (an H200 block may opt into 227 KiB). */
export const STAGED_BACKWARD_SHARED_BUDGET = 220 * 1024;
/** The staged backward's launch shape: warps a block, resident blocks an SM, the most row slots a warp. */
export interface StagedBackwardShape {
  readonly warps: number;
  readonly blocksPerSm: number;
  readonly maxStages: number;
}

/**
 * FUSEFORMER_NORM_BACKWARD="warps,blocksPerSm,maxStages" (e.g. "16,1,4"): a tuning knob for sweeps of the
 * staged backward's shape on a GPU (bench/gpu-pending.sh norm-sweep); unset, the default 8,2,2.
 */
export function stagedBackwardShapeFromEnv(value = process.env['FUSEFORMER_NORM_BACKWARD']): StagedBackwardShape | null {
  if (value === undefined || value === '') return null;
  const parts = value.split(',').map((p) => Number(p.trim()));
  const [warps, blocksPerSm, maxStages] = parts;
  const valid = parts.length === 3 && parts.every((n) => Number.isInteger(n) && n > 0) && warps! <= 32 && blocksPerSm! <= 4 && warps! * blocksPerSm! <= 64 && maxStages! >= 2 && maxStages! <= 8;
  if (!valid) throw new ArgumentError(`FUSEFORMER_NORM_BACKWARD must be "warps,blocksPerSm,maxStages" (warps 1–32, blocks 1–4, at most 64 warps an SM, stages 2–8), got "${value}"`);
  return { warps: warps!, blocksPerSm: blocksPerSm!, maxStages: maxStages! };
}

let envShape: { value: string | undefined; shape: StagedBackwardShape | null } | undefined;
function envStagedShape(): StagedBackwardShape | null {
  const value = process.env['FUSEFORMER_NORM_BACKWARD'];
  if (envShape?.value !== value || envShape === undefined) envShape = { value, shape: stagedBackwardShapeFromEnv(value) };
  return envShape.shape;
}

export const MAX_HIDDEN = 65536;

/** Elements a lane holds with a warp per row, or null when a warp row needs more than `maxElements`. */
function warpRowElements(hidden: number, vec: number, maxElements: number): number | null {
  const elements = Math.ceil(hidden / vec / 32) * vec;
  return elements <= maxElements ? elements : null;
}

function checkHidden(check: OpCheck, hidden: number): void {
  if (hidden > MAX_HIDDEN) check.fail(`hidden size ${hidden} is larger than the largest supported (${MAX_HIDDEN})`);
}

/** The forward spec for a shape; `pointers` are the addresses the vectors must be aligned to. */
export function planNormForward(check: OpCheck, norm: NormKind, dtype: FloatDType, hidden: number, pointers: readonly bigint[]): NormForwardSpec {
  checkHidden(check, hidden);
  const vec = rowVectorWidth(dtype, hidden, pointers);
  if (dtype !== 'f32' && warpRowElements(hidden, vec, WARP_ROW_MAX_ELEMENTS) !== null) {
    return { norm, dtype, hidden, vec, threadsPerRow: 32, rowsPerBlock: PERSISTENT_WARPS_PER_BLOCK, persistent: true };
  }
  for (const [elements, threads] of FORWARD_BLOCK_TIERS) {
    const mapping = planRowMapping(hidden / vec, vec, WARP_ROW_MAX_ELEMENTS, elements, threads);
    if (mapping) {
      const { threadsPerRow } = mapping;
      return { norm, dtype, hidden, vec, threadsPerRow, rowsPerBlock: threadsPerRow === 32 ? FORWARD_WARP_ROWS_PER_BLOCK : 1 };
    }
  }
  return check.fail(`hidden size ${hidden} does not fit the row kernels with vectors of ${vec}`);
}

/**
 * `sharedBudget`: dynamic shared memory a block may use (the device's opt-in limit, at most
 * STAGED_BACKWARD_SHARED_BUDGET); the staged kernel needs room for two row slots a warp.
 */
export function planNormBackward(check: OpCheck, norm: NormKind, dtype: FloatDType, hidden: number, dResidual: boolean, pointers: readonly bigint[], sharedBudget = STAGED_BACKWARD_SHARED_BUDGET, stagedShape: StagedBackwardShape | null = envStagedShape()): NormBackwardSpec {
  checkHidden(check, hidden);
  const vec = rowVectorWidth(dtype, hidden, pointers);
  if (dtype !== 'f32' && vec * byteSize(dtype) === 16 && Math.ceil(hidden / vec / 32) <= STAGED_BACKWARD_MAX_VECS_PER_LANE) {
    const shape = stagedShape ?? { warps: STAGED_BACKWARD_WARPS, blocksPerSm: STAGED_BACKWARD_BLOCKS_PER_SM, maxStages: STAGED_BACKWARD_MAX_STAGES };
    const staged: NormBackwardSpec = { norm, dtype, hidden, vec, threadsPerRow: 32, rowsPerBlock: shape.warps, persistent: true, dResidual, ...(shape.blocksPerSm > 1 ? { blocksPerSm: shape.blocksPerSm } : {}) };
    // Blocks sharing an SM share its shared memory (an SM has 228 KiB, 1 KiB of it reserved per block).
    const budget = Math.min(sharedBudget, Math.floor(STAGED_BACKWARD_SHARED_BUDGET / shape.blocksPerSm));
    const stages = Math.min(shape.maxStages, Math.floor((budget - hidden * byteSize(dtype)) / (shape.warps * stagedSlotBytes(staged))));
    const spec = { ...staged, stages };
    if (stages >= 2 && stagedSharedBytes(spec) <= budget) return spec;
  }
  for (const elements of BACKWARD_ELEMENT_TIERS) {
    const mapping = planRowMapping(hidden / vec, vec, elements, elements);
    if (mapping) {
      const { threadsPerRow } = mapping;
      return { norm, dtype, hidden, vec, threadsPerRow, rowsPerBlock: Math.max(1, Math.floor(BACKWARD_BLOCK_THREADS / threadsPerRow)), dResidual };
    }
  }
  return check.fail(`hidden size ${hidden} does not fit the row kernels with vectors of ${vec}`);
}

/**
 * Blocks per SM the backward is compiled for (__launch_bounds__' second argument): enough to reach
 * BACKWARD_THREADS_PER_SM at ≤ 8 elements a thread; wider rows need their registers more than occupancy.
 */
export function backwardMinBlocksPerSm(spec: NormBackwardSpec): number {
  if (spec.persistent) return spec.blocksPerSm ?? 1;
  const blockThreads = spec.threadsPerRow * spec.rowsPerBlock;
  return vecsPerThread(spec) * spec.vec <= BACKWARD_ELEMENT_TIERS[0] ? Math.max(1, Math.floor(BACKWARD_THREADS_PER_SM / blockThreads)) : 1;
}

/** Blocks of the backward's fixed grid: the resident blocks (one wave), never more than there are row groups. */
export function backwardGridSize(spec: NormBackwardSpec, rows: number, multiProcessorCount: number): number {
  if (spec.persistent) return persistentGridSize(spec.rowsPerBlock, rows, backwardMinBlocksPerSm(spec) * multiProcessorCount);
  return Math.max(1, Math.min(Math.ceil(rows / spec.rowsPerBlock), backwardMinBlocksPerSm(spec) * multiProcessorCount));
}

/** Blocks of the forward: one per row group, or for persistent warps one wave (see persistentGridSize). */
export function forwardGridSize(spec: NormForwardSpec, rows: number, multiProcessorCount: number): number {
  if (spec.persistent) return persistentGridSize(spec.rowsPerBlock, rows, forwardMinBlocksPerSm(spec) * multiProcessorCount);
  return Math.ceil(rows / spec.rowsPerBlock);
}

/**
 * Persistent forward blocks per SM: 4 (64 registers, no spills at H = 768: two packed rows, gamma and
 * beta in flight); 3 (85) above 24 elements a lane (H = 1024 spills 32–40 bytes at 64).
 */
export function forwardMinBlocksPerSm(spec: NormForwardSpec): number {
  return vecsPerThread(spec) * spec.vec <= PERSISTENT_FORWARD_FOUR_BLOCK_ELEMENTS ? PERSISTENT_FORWARD_BLOCKS_PER_SM : PERSISTENT_FORWARD_BLOCKS_PER_SM - 1;
}

/** Bytes of one row slot of the staged backward: x, dOut (and dResidual) rows, then mean and rstd (16 bytes). */
export function stagedSlotBytes(spec: NormBackwardSpec): number {
  return (spec.dResidual ? 3 : 2) * spec.hidden * byteSize(spec.dtype) + 16;
}

/** Dynamic shared memory of the staged backward: every warp's slots, or the end-of-kernel fold if larger. */
export function stagedSharedBytes(spec: NormBackwardSpec): number {
  const slots = spec.hidden * byteSize(spec.dtype) + spec.rowsPerBlock * (spec.stages ?? 2) * stagedSlotBytes(spec);
  const fold = spec.rowsPerBlock * columnSumCount(spec.norm) * spec.hidden * 4;
  return Math.max(slots, fold);
}

/**
 * Persistent warps: at most one wave (`maxBlocks` resident blocks), with the rows spread evenly:
 * every warp gets ceil(rows / resident warps) rows or (the last warps) fewer, instead of some warps
 * taking one row more than the rest. Depends only on rows and the SM count (deterministic sums).
 */
function persistentGridSize(warpsPerBlock: number, rows: number, maxBlocks: number): number {
  const rowsPerWarp = Math.ceil(rows / (maxBlocks * warpsPerBlock));
  return Math.max(1, Math.min(maxBlocks, Math.ceil(Math.ceil(rows / rowsPerWarp) / warpsPerBlock)));
}

// ---- sources -----------------------------------------------------------------------------------------

const COLUMN_SUMS_LANES_X = 32;
const COLUMN_SUMS_LANES_Y = 32;

function rowConstants(s: NormForwardSpec): string {
  return constants({
    H: s.hidden,
    VEC: s.vec,
    VECS_PER_ROW: s.hidden / s.vec,
    THREADS_PER_ROW: s.threadsPerRow,
    ROWS_PER_BLOCK: s.rowsPerBlock,
    VECS_PER_THREAD: vecsPerThread(s),
    BLOCK_THREADS: s.threadsPerRow * s.rowsPerBlock,
  });
}

// Persistent warps (16-bit, H ≤ 1024): lane t of a warp holds vectors t, t + 32, ... of its row
// as packed 16-bit Vec<T, VEC> (3 × 16 bytes at H = 768) and converts them to f32 where used.
// PACKED_ROW_DEVICE_CODE loads one row that way (vectors the lane does not own are zeroed).
const PACKED_ROW_DEVICE_CODE = String.raw`
__device__ __forceinline__ void load_row(const T* p, int t, Vec<T, VEC> (&v)[VECS_PER_THREAD]) {
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (owns_vec(k, t)) {
      v[k] = load_vec<T, VEC>(p + (k * 32 + t) * VEC);
    } else {
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[k].v[i] = from_float<T>(0.f);
    }
  }
}
// Register-pressure fences (no instructions). opaque(p): the compiler can no longer prove the
// pointer loop-invariant, so gamma/beta are re-read from L1 each row instead of being hoisted into
// registers for the whole loop (+24 registers at H = 768 with beta). launder_row(v): the row is
// kept packed (4 registers a 16-byte vector) and converted again where it is used, instead of
// holding its f32 copy (8 registers a vector) across the reduction.
template <typename P> __device__ __forceinline__ P* opaque(P* p) { asm volatile("" : "+l"(p)); return p; }
__device__ __forceinline__ void launder_row(Vec<T, VEC> (&v)[VECS_PER_THREAD]) {
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if constexpr (sizeof(Vec<T, VEC>) % 4 == 0) {
      u32* w = reinterpret_cast<u32*>(&v[k]);
      #pragma unroll
      for (int j = 0; j < (int)(sizeof(Vec<T, VEC>) / 4); j++) asm volatile("" : "+r"(w[j]));
    } else {
      unsigned short* w = reinterpret_cast<unsigned short*>(&v[k]);
      #pragma unroll
      for (int j = 0; j < (int)(sizeof(Vec<T, VEC>) / 2); j++) asm volatile("" : "+h"(w[j]));
    }
  }
}
`;

function persistentForwardSource(spec: NormForwardSpec, name: string): string {
  const layer = spec.norm === 'layer';
  const statistics = layer
    ? String.raw`
    // One reduction for both sums; shifting by x[0] (lane 0's first element) keeps the variance
    // from cancelling.
    const float shift = __shfl_sync(0xffffffffu, to_float(cur[0].v[0]), 0);
    float2 sums = make_float2(0.f, 0.f);
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      #pragma unroll
      for (int i = 0; i < VEC; i++) { const float d = to_float(cur[k].v[i]) - shift; sums.x += d; sums.y += d * d; }
    }
    sums = warp_sum2(sums);
    const float mean_shifted = sums.x * (1.f / H);
    const float var = fmaxf(sums.y * (1.f / H) - mean_shifted * mean_shifted, 0.f);
    const float mean = shift + mean_shifted;
    const float rstd = rsqrtf(var + eps);
    if (t == 0) { mean_out[row] = mean; rstd_out[row] = rstd; }`
    : String.raw`
    float squares = 0.f;
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      #pragma unroll
      for (int i = 0; i < VEC; i++) { const float v = to_float(cur[k].v[i]); squares += v * v; }
    }
    squares = warp_sum(squares);
    const float mean = 0.f;
    const float rstd = rsqrtf(squares * (1.f / H) + eps);
    if (t == 0) rstd_out[row] = rstd;`;
  return String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${rowConstants(spec)}
${ROW_MAPPING_DEVICE_CODE}
${PACKED_ROW_DEVICE_CODE}
${launchBoundsMacro(spec.threadsPerRow * spec.rowsPerBlock, forwardMinBlocksPerSm(spec))}

// Persistent warps: block (32, ROWS_PER_BLOCK); warp w = blockIdx.x·ROWS_PER_BLOCK + threadIdx.y
// normalises rows w, w + W, w + 2W, ... (W = gridDim.x·ROWS_PER_BLOCK), shuffles only, no shared
// memory and no barriers. The next row's loads are issued before this row's reduction and stores,
// so each warp keeps two rows in flight. x and out are not __restrict__: normalising in place
// (out == x) is safe, a row is read (whole, into registers) before the same warp writes it, and no
// other warp touches it. gamma/beta are read per row after the reduction (L1 hits).
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* x, const T* __restrict__ gamma, ${layer ? 'const T* __restrict__ beta, ' : ''}T* out,
    ${layer ? 'float* __restrict__ mean_out, ' : ''}float* __restrict__ rstd_out, int rows, float eps) {
  const int t = threadIdx.x;
  const int stride = gridDim.x * ROWS_PER_BLOCK;
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= rows) return;
  Vec<T, VEC> cur[VECS_PER_THREAD];
  load_row(x + (long long)row * H, t, cur);
  for (;;) {
    const int next = row + stride;
    const bool more = next < rows;
    Vec<T, VEC> nxt[VECS_PER_THREAD];
    if (more) load_row(x + (long long)next * H, t, nxt);
${statistics}
    launder_row(cur);
    const T* gam = opaque(gamma);${layer ? `
    const T* bet = opaque(beta);` : ''}
    T* outr = out + (long long)row * H;
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      const int c = (k * 32 + t) * VEC;
      const Vec<T, VEC> g = load_vec<T, VEC>(gam + c);
${layer ? `      const Vec<T, VEC> b = load_vec<T, VEC>(bet + c);
` : ''}      Vec<T, VEC> o;
      #pragma unroll
      for (int i = 0; i < VEC; i++)
        o.v[i] = from_float<T>((to_float(cur[k].v[i]) - mean) * rstd * to_float(g.v[i])${layer ? ' + to_float(b.v[i])' : ''});
      store_vec<T, VEC>(outr + c, o);
    }
    if (!more) break;
    row = next;
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) cur[k] = nxt[k];
  }
}
`;
}

export function normForwardSource(spec: NormForwardSpec): KernelSource {
  const name = kernelIdentifier(normForwardKey(spec));
  if (spec.persistent) return { name, source: persistentForwardSource(spec, name) };
  const layer = spec.norm === 'layer';
  const statistics = layer
    ? String.raw`
  // One reduction for both sums; shifting by x[0] keeps the variance from cancelling. With a warp
  // per row lane 0 holds x[0] already; a wider row reads it once more (one cached load per row).
  const float shift = WARPS_PER_ROW == 1 ? __shfl_sync(0xffffffffu, v[0][0], 0) : to_float(xr[0]);
  float2 sums = make_float2(0.f, 0.f);
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    #pragma unroll
    for (int i = 0; i < VEC; i++) { const float d = v[k][i] - shift; sums.x += d; sums.y += d * d; }
  }
  sums = row_sum2(sums, reduce_buf);
  const float mean_shifted = sums.x * (1.f / H);
  const float var = fmaxf(sums.y * (1.f / H) - mean_shifted * mean_shifted, 0.f);
  const float mean = shift + mean_shifted;
  const float rstd = rsqrtf(var + eps);
  if (t == 0) { mean_out[row] = mean; rstd_out[row] = rstd; }`
    : String.raw`
  float squares = 0.f;
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    #pragma unroll
    for (int i = 0; i < VEC; i++) squares += v[k][i] * v[k][i];
  }
  squares = row_sum(squares, reinterpret_cast<float*>(reduce_buf));
  const float mean = 0.f;
  const float rstd = rsqrtf(squares * (1.f / H) + eps);
  if (t == 0) rstd_out[row] = rstd;`;
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${rowConstants(spec)}
${ROW_MAPPING_DEVICE_CODE}
${launchBoundsMacro(spec.threadsPerRow * spec.rowsPerBlock)}

// Block (THREADS_PER_ROW, ROWS_PER_BLOCK); thread (t, r) works on row blockIdx.x·ROWS_PER_BLOCK + r.
// x and out are not __restrict__: normalising in place (out == x) is safe, every element is read
// into registers before the reduction and written after it by the same thread. gamma/beta are read
// after the reduction: every row of the SM reads the same H values, so they are L1 hits.
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* x, const T* __restrict__ gamma, ${layer ? 'const T* __restrict__ beta, ' : ''}T* out,
    ${layer ? 'float* __restrict__ mean_out, ' : ''}float* __restrict__ rstd_out, int rows, float eps) {
  __shared__ float2 reduce_buf[BLOCK_THREADS / 32];
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  // Whole rows leave together: with a warp per row a warp, with a block per row never (grid = rows).
  if (row >= rows) return;
  const int t = threadIdx.x;
  const T* xr = x + (long long)row * H;
  T* outr = out + (long long)row * H;

  float v[VECS_PER_THREAD][VEC];
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++)
    if (owns_vec(k, t)) load_floats<T, VEC>(xr + (k * THREADS_PER_ROW + t) * VEC, v[k], VEC);
${statistics}

  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    const int c = (k * THREADS_PER_ROW + t) * VEC;
    float g[VEC];
    load_floats<T, VEC>(gamma + c, g, VEC);
${layer ? `    float b[VEC];
    load_floats<T, VEC>(beta + c, b, VEC);
    #pragma unroll
    for (int i = 0; i < VEC; i++) v[k][i] = (v[k][i] - mean) * rstd * g[i] + b[i];`
    : `    #pragma unroll
    for (int i = 0; i < VEC; i++) v[k][i] = (v[k][i] - mean) * rstd * g[i];`}
    store_floats<T, VEC>(outr + c, v[k], VEC);
  }
}
`;
  return { name, source };
}

// The backward's row loads, two ways. At 16-bit, a software pipeline: the next row group's x,
// dOut, mean and rstd are loaded (in their storage type, 4 registers a vector) before this
// group's reductions and stores, so a thread has two rows' loads in flight instead of one: the
// 16-bit backward was bound by that per-row latency (loads → barriers → stores), not by bytes.
// f32 (86–94% of copy already) would spill with the extra registers; it loads each row at the
// top of its iteration. Both define row, active, base, xh, g (zeros where inactive), mu and rs.
function prefetchedRowLoads(layer: boolean): string {
  return String.raw`  const int groups = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  Vec<T, VEC> x_next[VECS_PER_THREAD], g_next[VECS_PER_THREAD];
  float mu_next = 0.f, rs_next = 0.f;
  int next = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  #define LOAD_NEXT_ROW()                                                              \
    if (next < rows) {                                                                 \
      _Pragma("unroll")                                                                \
      for (int k = 0; k < VECS_PER_THREAD; k++) {                                      \
        if (!owns_vec(k, t)) continue;                                                 \
        const long long o = (long long)next * H + (k * THREADS_PER_ROW + t) * VEC;     \
        x_next[k] = load_vec<T, VEC>(x + o);                                           \
        g_next[k] = load_vec<T, VEC>(dout + o);                                        \
      }                                                                                \
      ${layer ? 'mu_next = mean[next];' : ''}                                          \
      rs_next = rstd[next];                                                            \
    }
  LOAD_NEXT_ROW()
  for (int group = blockIdx.x; group < groups; group += gridDim.x) {
    const int row = next;
    const bool active = row < rows;
    const long long base = (long long)row * H;
    float xh[VECS_PER_THREAD][VEC], g[VECS_PER_THREAD][VEC];
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        const bool on = active && owns_vec(k, t);
        xh[k][i] = on ? to_float(x_next[k].v[i]) : 0.f;
        g[k][i] = on ? to_float(g_next[k].v[i]) : 0.f;
      }
    }
    const float mu = ${layer ? 'active ? mu_next : 0.f' : '0.f'}, rs = active ? rs_next : 0.f;
    next = row + gridDim.x * ROWS_PER_BLOCK;
    LOAD_NEXT_ROW()
    #undef LOAD_NEXT_ROW
`;
}

function directRowLoads(layer: boolean): string {
  return String.raw`  const int groups = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  for (int group = blockIdx.x; group < groups; group += gridDim.x) {
    const int row = group * ROWS_PER_BLOCK + threadIdx.y;
    const bool active = row < rows;
    const long long base = (long long)row * H;
    float xh[VECS_PER_THREAD][VEC], g[VECS_PER_THREAD][VEC];
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      const int c = (k * THREADS_PER_ROW + t) * VEC;
      if (active && owns_vec(k, t)) {
        load_floats<T, VEC>(x + base + c, xh[k], VEC);
        load_floats<T, VEC>(dout + base + c, g[k], VEC);
      } else {
        #pragma unroll
        for (int i = 0; i < VEC; i++) { xh[k][i] = 0.f; g[k][i] = 0.f; }
      }
    }
    const float mu = ${layer ? 'active ? mean[row] : 0.f' : '0.f'}, rs = active ? rstd[row] : 0.f;
`;
}

// The 16-bit backward for H ≤ 1024 at 16-byte vectors: persistent warps with a cp.async pipeline.
// Warp w = blockIdx.x·ROWS_PER_BLOCK + threadIdx.y takes rows w, w + W, w + 2W, ... (W = all warps
// of the fixed grid, so which rows feed which partial depends only on the shape and grid). Each warp
// owns STAGES row slots in shared memory; lane t copies vectors t, t + 32, ... of a row's x, dOut
// (and dResidual) into its slot with cp.async.cg (16 bytes, L1 bypassed, no registers held while in
// flight), lane 0 adds the row's mean and rstd, and the copies run STAGES − 1 rows ahead of the math.
// Shared memory only lands the loads: a lane reads back the vectors it copied itself (mean/rstd
// after a __syncwarp), so there are no block barriers until the final fold. Per row, from the slot:
// x̂ = (x − mean)·rstd, g = dOut⊙gamma, Σg and Σg⊙x̂ by shuffles, the lane's dGamma (Σ dOut⊙x̂) and
// dBeta (Σ dOut) columns in f32 registers; then the slot is read again for dX. At the end the
// block's warps write their column sums to shared memory (reusing the slots) and the block adds them
// in warp order (fixed: deterministic) into its partial row: partials [gridDim.x][COLUMN_SUMS][H].
// dOut, x, dResidual and dX are not __restrict__: dX may share memory with dOut or dResidual (a row
// is copied whole before the same warp writes it; no other warp touches it).
/**
 * The staged backward's work on one row whose x, dOut (and dResidual) are in shared memory, read
 * through X_AT(c), G_AT(c), R_AT(c) (a pointer to column c; the including kernel defines them), with
 * mu, rs, row, t, gam, acc_gamma (acc_beta), gamma_shared in scope: Σg and Σg⊙x̂ by shuffles while
 * accumulating the lane's column sums, then dX from a second read.
 */
function stagedRowMathCode(spec: NormBackwardSpec): string {
  const layer = spec.norm === 'layer';
  return String.raw`    float2 sums = make_float2(0.f, 0.f);  // (Σ g, Σ g·x̂)
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      const int c = (k * 32 + t) * VEC;
      const Vec<T, VEC> xv = load_vec<T, VEC>(X_AT(c)), gv = load_vec<T, VEC>(G_AT(c));
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        const float xh = (to_float(xv.v[i]) - mu) * rs;
        const float dy = to_float(gv.v[i]);
        acc_gamma[k][i] = fmaf(dy, xh, acc_gamma[k][i]);${layer ? `
        acc_beta[k][i] += dy;` : ''}
        const float g = dy * to_float(gam[k].v[i]);
        sums.x += g;
        sums.y = fmaf(g, xh, sums.y);
      }
    }
${layer ? `    sums = warp_sum2(sums);
    const float mean_g = sums.x * (1.f / H);`
    : `    sums.y = warp_sum(sums.y);
    const float mean_g = 0.f;`}
    const float mean_gx = sums.y * (1.f / H);
    // dX = rs·(g − mean_g − x̂·mean_gx) = g·rs + (x̂·(−rs·mean_gx) − rs·mean_g), one vector at a
    // time from the slot and gamma_shared: not unrolled, so ptxas cannot hoist every vector's loads
    // above the first store (unrolled, this pass alone pushed H = 1024 past 168 registers).
    const float c_xh = -rs * mean_gx, c_0 = -rs * mean_g;
    T* dxr = dx + (long long)row * H;
    #pragma unroll 1
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) break;
      const int c = (k * 32 + t) * VEC;
      const Vec<T, VEC> xv = load_vec<T, VEC>(X_AT(c)), gv = load_vec<T, VEC>(G_AT(c)), gm = load_vec<T, VEC>(gamma_shared + c);${spec.dResidual ? `
      const Vec<T, VEC> rv = load_vec<T, VEC>(R_AT(c));` : ''}
      Vec<T, VEC> d;
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        const float xh = (to_float(xv.v[i]) - mu) * rs;
        const float v = fmaf(to_float(gv.v[i]) * to_float(gm.v[i]), rs, fmaf(xh, c_xh, c_0));
        d.v[i] = from_float<T>(${spec.dResidual ? 'to_float(rv.v[i]) + v' : 'v'});
      }
      store_vec<T, VEC>(dxr + c, d);
    }
`;
}

/**
 * The end of the staged backward: every warp that holds column sums (acc_gamma, acc_beta; `consumers`
 * guards them, '' for all) writes them to shared memory at `region`, then the block's `threads` threads
 * add the ROWS_PER_BLOCK warps of each column in warp order (deterministic) into the block's partial row.
 */
function stagedFoldCode(spec: NormBackwardSpec, o: { region: string; threads: string; consumers: string }): string {
  const layer = spec.norm === 'layer';
  return String.raw`  __syncthreads();
  float* fold = reinterpret_cast<float*>(${o.region});
  ${o.consumers === '' ? '' : `if (${o.consumers}) `}{
    float* mine = fold + threadIdx.y * (COLUMN_SUMS * H);
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      const int c = (k * 32 + t) * VEC;
      #pragma unroll
      for (int i = 0; i < VEC; i += 4) {
        store_vec<float, 4>(mine + c + i, Vec<float, 4>{{acc_gamma[k][i], acc_gamma[k][i + 1], acc_gamma[k][i + 2], acc_gamma[k][i + 3]}});${layer ? `
        store_vec<float, 4>(mine + H + c + i, Vec<float, 4>{{acc_beta[k][i], acc_beta[k][i + 1], acc_beta[k][i + 2], acc_beta[k][i + 3]}});` : ''}
      }
    }
  }
  __syncthreads();
  float* p = partials + (long long)blockIdx.x * (COLUMN_SUMS * H);
  for (int col = threadIdx.y * 32 + t; col < COLUMN_SUMS * H; col += ${o.threads}) {
    float total = 0.f;
    #pragma unroll
    for (int w = 0; w < ROWS_PER_BLOCK; w++) total += fold[w * (COLUMN_SUMS * H) + col];
    p[col] = total;
  }
`;
}

function persistentBackwardSource(spec: NormBackwardSpec, name: string): string {
  const layer = spec.norm === 'layer';
  const sums = columnSumCount(spec.norm);
  const stages = spec.stages ?? 2;
  const arrays = spec.dResidual ? 3 : 2;
  return String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${rowConstants(spec)}
${constants({ COLUMN_SUMS: sums, STAGES: stages, ROW_BYTES: spec.hidden * byteSize(spec.dtype), SLOT_BYTES: stagedSlotBytes(spec) })}
${ROW_MAPPING_DEVICE_CODE}
${launchBoundsMacro(spec.threadsPerRow * spec.rowsPerBlock, spec.blocksPerSm ?? 1)}

__device__ __forceinline__ void copy_async_16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_4(u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 1) : "memory"); }

// Slot layout (SLOT_BYTES, 16-byte aligned): x [H], dOut [H]${spec.dResidual ? ', dResidual [H]' : ''}, then (mean, rstd) as 2 floats.
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* dout, const T* x, const T* __restrict__ gamma, ${layer ? 'const float* __restrict__ mean, ' : ''}const float* __restrict__ rstd,
    ${spec.dResidual ? 'const T* dres, ' : ''}T* dx, float* __restrict__ partials, int rows) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Launched programmatically: resident while the kernel before finishes, reads nothing before this.
  GRID_DEPENDENCY_WAIT();
  const int t = threadIdx.x;
  const int stride = gridDim.x * ROWS_PER_BLOCK;
  const int first = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  // gamma (ROW_BYTES, for the dX pass) first, then each warp's STAGES slots.
  T* gamma_shared = reinterpret_cast<T*>(smem);
  unsigned char* slots = smem + ROW_BYTES + threadIdx.y * (STAGES * SLOT_BYTES);
  const u32 slots_shared = (u32)__cvta_generic_to_shared(slots);

  // Row j of this warp (row first + j·stride) goes to slot j % STAGES; one commit group per row,
  // empty past the warp's last row, so wait_group<STAGES − 1> always means "row j has landed".
  auto issue = [&](int j) {
    const int row = first + j * stride;
    if (row < rows) {
      const u32 slot = slots_shared + (j % STAGES) * SLOT_BYTES;
      const long long base = (long long)row * H;
      #pragma unroll
      for (int k = 0; k < VECS_PER_THREAD; k++) {
        if (!owns_vec(k, t)) continue;
        const int c = (k * 32 + t) * VEC;
        copy_async_16(slot + c * (int)sizeof(T), x + base + c);
        copy_async_16(slot + ROW_BYTES + c * (int)sizeof(T), dout + base + c);${spec.dResidual ? `
        copy_async_16(slot + 2 * ROW_BYTES + c * (int)sizeof(T), dres + base + c);` : ''}
      }
      ${layer ? `if (t == 0) copy_async_4(slot + ${arrays} * ROW_BYTES, mean + row);
      ` : ''}if (t == 1) copy_async_4(slot + ${arrays} * ROW_BYTES + 4, rstd + row);
    }
    copy_async_commit();
  };
  #pragma unroll
  for (int j = 0; j < STAGES - 1; j++) issue(j);
  for (int c = (threadIdx.y * 32 + t) * VEC; c < H; c += BLOCK_THREADS * VEC) store_vec<T, VEC>(gamma_shared + c, load_vec<T, VEC>(gamma + c));
  __syncthreads();

  // gamma of the lane's columns (packed 16-bit, converted where used: f32 copies would spill at
  // 128 registers) and their column sums in f32, in registers for the whole loop. gamma is read from
  // the block's shared copy (a second global round trip here would stand between the first row and its math).
  Vec<T, VEC> gam[VECS_PER_THREAD];
  float acc_gamma[VECS_PER_THREAD][VEC]${layer ? ', acc_beta[VECS_PER_THREAD][VEC]' : ''};
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (owns_vec(k, t)) {
      gam[k] = load_vec<T, VEC>(gamma_shared + (k * 32 + t) * VEC);
    } else {
      #pragma unroll
      for (int i = 0; i < VEC; i++) gam[k].v[i] = from_float<T>(0.f);
    }
    #pragma unroll
    for (int i = 0; i < VEC; i++) { acc_gamma[k][i] = 0.f;${layer ? ' acc_beta[k][i] = 0.f;' : ''} }
  }

  for (int j = 0, row = first; row < rows; j++, row += stride) {
    // Every lane is done with the slot of row j − 1 (lane 0 refills its mean/rstd) before row
    // j + STAGES − 1 is copied into it.
    __syncwarp();
    issue(j + STAGES - 1);
    copy_async_wait();
    __syncwarp();
    const unsigned char* slot = slots + (j % STAGES) * SLOT_BYTES;
    const T* xs = reinterpret_cast<const T*>(slot);
    const T* gs = reinterpret_cast<const T*>(slot + ROW_BYTES);
    const float* stats = reinterpret_cast<const float*>(slot + ${arrays} * ROW_BYTES);
    const float mu = ${layer ? 'stats[0]' : '0.f'}, rs = stats[1];
    #define X_AT(c) (xs + (c))
    #define G_AT(c) (gs + (c))
    #define R_AT(c) (reinterpret_cast<const T*>(slot + 2 * ROW_BYTES) + (c))

${stagedRowMathCode(spec)}  }

  // Fold: every warp writes its column sums to shared memory (the slots are free once every copy
  // has landed), then the block adds the ROWS_PER_BLOCK rows of each column in warp order.
  asm volatile("cp.async.wait_all;" ::: "memory");
  GRID_DEPENDENCY_TRIGGER();  // the next kernel (the column sums) may launch; it waits for this grid to finish
${stagedFoldCode(spec, { region: 'smem', threads: 'BLOCK_THREADS', consumers: '' })}}
`;
}

export function normBackwardSource(spec: NormBackwardSpec): KernelSource {
  const name = kernelIdentifier(normBackwardKey(spec));
  if (spec.persistent) return { name, source: persistentBackwardSource(spec, name), gridDependencyWait: true };
  const layer = spec.norm === 'layer';
  const sums = columnSumCount(spec.norm);
  const blockThreads = spec.threadsPerRow * spec.rowsPerBlock;
  const prefetch = spec.dtype !== 'f32';
  // The row slots of a block saw different rows: fold their column sums together in slot order (a
  // fixed order, so the result is deterministic) and let the last slot write the block's partial.
  const combineRowSlots = spec.rowsPerBlock > 1
    ? String.raw`
  __shared__ float column_buf[COLUMN_SUMS * H];
  for (int slot = 0; slot < ROWS_PER_BLOCK; slot++) {
    if (threadIdx.y == slot) {
      #pragma unroll
      for (int k = 0; k < VECS_PER_THREAD; k++) {
        if (!owns_vec(k, t)) continue;
        const int c = (k * THREADS_PER_ROW + t) * VEC;
        #pragma unroll
        for (int i = 0; i < VEC; i++) {
          if (slot > 0) {
            acc_gamma[k][i] += column_buf[c + i];${layer ? `
            acc_beta[k][i] += column_buf[H + c + i];` : ''}
          }
          if (slot < ROWS_PER_BLOCK - 1) {
            column_buf[c + i] = acc_gamma[k][i];${layer ? `
            column_buf[H + c + i] = acc_beta[k][i];` : ''}
          }
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.y != ROWS_PER_BLOCK - 1) return;`
    : '';
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${rowConstants(spec)}
${constants({ COLUMN_SUMS: sums })}
${ROW_MAPPING_DEVICE_CODE}
${launchBoundsMacro(blockThreads, backwardMinBlocksPerSm(spec))}

// f32 partial sums as 16-byte (or narrower) stores.
__device__ __forceinline__ void store_partial(float* p, const float (&a)[VEC]) {
  constexpr int W = VEC < 4 ? VEC : 4;
  #pragma unroll
  for (int i = 0; i < VEC; i += W) {
    Vec<float, W> q;
    #pragma unroll
    for (int j = 0; j < W; j++) q.v[j] = a[i + j];
    store_vec<float, W>(p + i, q);
  }
}

// A fixed grid: block b takes row groups b, b + gridDim.x, ... (ROWS_PER_BLOCK rows each, row slot
// threadIdx.y), so which rows feed which partial depends only on the shape and grid.
// partials: [gridDim.x][COLUMN_SUMS][H]. The loop is uniform across the block (the row reductions
// may synchronise it); slots past the last row contribute zeros.
// dOut, x, dResidual and dX are not __restrict__: dX may share memory with dOut or dResidual (each
// element is read before the same thread writes it).
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* dout, const T* x, const T* __restrict__ gamma, ${layer ? 'const float* __restrict__ mean, ' : ''}const float* __restrict__ rstd,
    ${spec.dResidual ? 'const T* dres, ' : ''}T* dx, float* __restrict__ partials, int rows) {
  __shared__ float2 reduce_buf[BLOCK_THREADS / 32];
  const int t = threadIdx.x;
  // This thread's columns, summed over the rows its slot visits.
  float acc_gamma[VECS_PER_THREAD][VEC]${layer ? ', acc_beta[VECS_PER_THREAD][VEC]' : ''};
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++)
    #pragma unroll
    for (int i = 0; i < VEC; i++) { acc_gamma[k][i] = 0.f;${layer ? ' acc_beta[k][i] = 0.f;' : ''} }

${prefetch ? prefetchedRowLoads(layer) : directRowLoads(layer)}    float2 sums = make_float2(0.f, 0.f);  // (Σ g, Σ g·x̂)
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      float gam[VEC];
      load_floats<T, VEC>(gamma + (k * THREADS_PER_ROW + t) * VEC, gam, VEC);
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        xh[k][i] = (xh[k][i] - mu) * rs;
        acc_gamma[k][i] += g[k][i] * xh[k][i];${layer ? `
        acc_beta[k][i] += g[k][i];` : ''}
        g[k][i] *= gam[i];
        sums.x += g[k][i];
        sums.y += g[k][i] * xh[k][i];
      }
    }
${layer ? `    sums = row_sum2(sums, reduce_buf);
    const float mean_g = sums.x * (1.f / H);`
    : `    sums.y = row_sum(sums.y, reinterpret_cast<float*>(reduce_buf));
    const float mean_g = 0.f;`}
    const float mean_gx = sums.y * (1.f / H);
    if (!active) continue;
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      const int c = (k * THREADS_PER_ROW + t) * VEC;
      float d[VEC];
${spec.dResidual ? `      load_floats<T, VEC>(dres + base + c, d, VEC);` : `      #pragma unroll
      for (int i = 0; i < VEC; i++) d[i] = 0.f;`}
      #pragma unroll
      for (int i = 0; i < VEC; i++) d[i] += rs * (g[k][i] - mean_g - xh[k][i] * mean_gx);
      store_floats<T, VEC>(dx + base + c, d, VEC);
    }
  }
${combineRowSlots}
  float* p = partials + (long long)blockIdx.x * (COLUMN_SUMS * H);
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    const int c = (k * THREADS_PER_ROW + t) * VEC;
    store_partial(p + c, acc_gamma[k]);${layer ? `
    store_partial(p + H + c, acc_beta[k]);` : ''}
  }
}
`;
  return { name, source };
}

export function normColumnSumsSource(spec: NormColumnSumsSpec): KernelSource {
  const name = kernelIdentifier(normColumnSumsKey(spec));
  const layer = spec.norm === 'layer';
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ H: spec.hidden, COLUMN_SUMS: columnSumCount(spec.norm), LANES_X: COLUMN_SUMS_LANES_X, LANES_Y: COLUMN_SUMS_LANES_Y, ACCUMULATE: spec.accumulate })}
${launchBoundsMacro(COLUMN_SUMS_LANES_X * COLUMN_SUMS_LANES_Y)}

// Block (LANES_X, LANES_Y) sums LANES_X columns of sum blockIdx.y (dGamma, dBeta): lane (x, y) adds
// partials y, y + LANES_Y, ... of column blockIdx.x·LANES_X + x (a warp reads 32 consecutive floats),
// then lane (x, 0) adds the LANES_Y results in order. Fixed order throughout: the same inputs give the
// same bits.
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const float* __restrict__ partials, int num_partials, T* dgamma${layer ? ', T* dbeta' : ''}) {
  // Launched programmatically after the row kernel (which triggers as it starts its fold): resident as
  // soon as SMs free up, then waits here for the partials. Its own dependents may launch at once (they
  // wait for this grid to finish before they read anything).
  GRID_DEPENDENCY_TRIGGER();
  GRID_DEPENDENCY_WAIT();
  __shared__ float buf[LANES_Y][LANES_X + 1];
  const int col = blockIdx.x * LANES_X + threadIdx.x, a = blockIdx.y;
  float s = 0.f;
  if (col < H) {
    #pragma unroll 8
    for (int p = threadIdx.y; p < num_partials; p += LANES_Y) s += partials[(long long)p * (COLUMN_SUMS * H) + a * H + col];
  }
  buf[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= H) return;
  float total = 0.f;
  #pragma unroll
  for (int y = 0; y < LANES_Y; y++) total += buf[y][threadIdx.x];
  T* out = ${layer ? 'a == 0 ? dgamma : dbeta' : 'dgamma'};
  out[col] = from_float<T>(ACCUMULATE ? to_float(out[col]) + total : total);
}
`;
  return { name, source, gridDependencyWait: true };
}

// ---- launchers ----------------------------------------------------------------------------------------

export function layerNormForward(host: KernelHost, args: LayerNormForwardArgs): void {
  const check = new OpCheck('layerNormForward', 'cuda');
  launchNormForward(host, check, 'layer', checkLayerNormForward(check, args));
}

export function rmsNormForward(host: KernelHost, args: RmsNormForwardArgs): void {
  const check = new OpCheck('rmsNormForward', 'cuda');
  launchNormForward(host, check, 'rms', checkRmsNormForward(check, args));
}

function launchNormForward(host: KernelHost, check: OpCheck, norm: NormKind, checked: CheckedNormForward<Tensor>): void {
  const { x, gamma, beta, out, mean, rstd, eps, rows, H: hidden } = checked;
  if (rows === 0) return;

  const dtype = x.dtype as FloatDType;
  const ptrs = { x: devicePtr(check, 'x', x), gamma: devicePtr(check, 'gamma', gamma), out: devicePtr(check, 'out', out) };
  const betaPtr = beta ? devicePtr(check, 'beta', beta) : undefined;
  const spec = planNormForward(check, norm, dtype, hidden, betaPtr === undefined ? Object.values(ptrs) : [...Object.values(ptrs), betaPtr]);
  const kernel = host.kernel(normForwardKey(spec), () => normForwardSource(spec));
  kernel.launch(
    { grid: forwardGridSize(spec, rows, host.multiProcessorCount), block: [spec.threadsPerRow, spec.rowsPerBlock] },
    [
      arg.ptr(ptrs.x), arg.ptr(ptrs.gamma), ...(betaPtr === undefined ? [] : [arg.ptr(betaPtr)]), arg.ptr(ptrs.out),
      ...(mean ? [arg.ptr(devicePtr(check, 'mean', mean))] : []), arg.ptr(devicePtr(check, 'rstd', rstd)),
      arg.i32(rows), arg.f32(eps),
    ],
  );
}

export function layerNormBackward(host: KernelHost, args: LayerNormBackwardArgs): void {
  const check = new OpCheck('layerNormBackward', 'cuda');
  launchNormBackward(host, check, 'layer', checkLayerNormBackward(check, args));
}

export function rmsNormBackward(host: KernelHost, args: RmsNormBackwardArgs): void {
  const check = new OpCheck('rmsNormBackward', 'cuda');
  launchNormBackward(host, check, 'rms', checkRmsNormBackward(check, args));
}

function launchNormBackward(host: KernelHost, check: OpCheck, norm: NormKind, checked: CheckedNormBackward<Tensor>): void {
  const { dOut, x, gamma, mean, rstd, dX, dGamma, dBeta, dResidual, accumulate, rows, H: hidden } = checked;
  const dtype = x.dtype as FloatDType;
  const columnSpec: NormColumnSumsSpec = { norm, dtype, hidden, accumulate };
  const columnKernel = host.kernel(normColumnSumsKey(columnSpec), () => normColumnSumsSource(columnSpec));
  const gradPtrs = [arg.ptr(devicePtr(check, 'dGamma', dGamma)), ...(dBeta ? [arg.ptr(devicePtr(check, 'dBeta', dBeta))] : [])];
  const columnLaunch = { grid: [Math.ceil(hidden / COLUMN_SUMS_LANES_X), columnSumCount(norm)] as const, block: [COLUMN_SUMS_LANES_X, COLUMN_SUMS_LANES_Y] as const };
  if (rows === 0) {
    // No rows: the sums are zero. Zero partials are not needed; one empty "partial list" writes
    // dGamma = 0 (or leaves it unchanged when accumulating).
    if (!accumulate) columnKernel.launch(columnLaunch, [arg.ptr(0n), arg.i32(0), ...gradPtrs]);
    return;
  }

  const rowPtrs = [x, dOut, dX, gamma, ...(dResidual ? [dResidual] : [])].map((t) => devicePtr(check, 'tensor', t));
  const spec = planNormBackward(check, norm, dtype, hidden, dResidual !== undefined, rowPtrs, host.maxSharedBytesPerBlock, envStagedShape());
  const grid = backwardGridSize(spec, rows, host.multiProcessorCount);
  const partials = host.scratch(grid * columnSumCount(norm) * hidden * 4);
  const rowKernel = host.kernel(normBackwardKey(spec), () => normBackwardSource(spec));
  rowKernel.launch(
    { grid, block: [spec.threadsPerRow, spec.rowsPerBlock], ...(spec.persistent ? { sharedBytes: stagedSharedBytes(spec) } : {}) },
    [
      arg.ptr(devicePtr(check, 'dOut', dOut)), arg.ptr(devicePtr(check, 'x', x)), arg.ptr(devicePtr(check, 'gamma', gamma)),
      ...(mean ? [arg.ptr(devicePtr(check, 'mean', mean))] : []), arg.ptr(devicePtr(check, 'rstd', rstd)),
      ...(dResidual ? [arg.ptr(devicePtr(check, 'dResidual', dResidual))] : []), arg.ptr(devicePtr(check, 'dX', dX)),
      arg.ptr(partials), arg.i32(rows),
    ],
  );
  columnKernel.launch(columnLaunch, [arg.ptr(partials), arg.i32(grid), ...gradPtrs]);
}

// ---- catalog -------------------------------------------------------------------------------------------

/** Representative specs as the launchers plan them (16-byte-aligned tensors), plus narrow-vector cases. */
export function catalog(): KernelSource[] {
  const plan = new OpCheck('catalog', 'cuda');
  const aligned = [0x1000n];
  const sources: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    for (const hidden of [768, 1024, 4096, 5120, 100, 1000]) {
      sources.push(normForwardSource(planNormForward(plan, 'layer', dtype, hidden, aligned)));
      sources.push(normBackwardSource(planNormBackward(plan, 'layer', dtype, hidden, hidden === 768 || hidden === 5120, aligned)));
    }
    for (const hidden of [4096, 5120]) {
      sources.push(normForwardSource(planNormForward(plan, 'rms', dtype, hidden, aligned)));
      sources.push(normBackwardSource(planNormBackward(plan, 'rms', dtype, hidden, hidden === 4096, aligned)));
    }
    sources.push(normColumnSumsSource({ norm: 'layer', dtype, hidden: 768, accumulate: false }));
    sources.push(normColumnSumsSource({ norm: 'layer', dtype, hidden: 1000, accumulate: true }));
    sources.push(normColumnSumsSource({ norm: 'rms', dtype, hidden: 4096, accumulate: false }));
  }
  // The staged RMSNorm backward (GPT-style models with RMSNorm at H ≤ 1024), with and without dResidual.
  for (const dResidual of [false, true]) sources.push(normBackwardSource(planNormBackward(plan, 'rms', 'bf16', 1024, dResidual, aligned)));
  // An odd hidden size (scalar accesses) and a 4-byte-aligned view (narrow vectors).
  sources.push(normForwardSource(planNormForward(plan, 'layer', 'f16', 771, aligned)));
  sources.push(normBackwardSource(planNormBackward(plan, 'rms', 'bf16', 771, true, aligned)));
  sources.push(normForwardSource(planNormForward(plan, 'rms', 'f16', 1024, [0x1004n])));
  return sources;
}
