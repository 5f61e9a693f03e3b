// Fused elementwise kernels (LightSeq's "bias + dropout + residual", "bias + activation + dropout",
// "bias + reshape Q, K, V") with their backwards, and the column sum behind every dBias. The flat
// utility kernels (fill, copy/cast) are in fill-copy.ts.
//
// Math (backend.ts has the contract; s = sizeof(dtype), p = dropout probability):
//   biasDropoutResidual           out = dropout(input + bias) + residual          [rows, H], bias [H]
//   biasDropoutResidualBackward   dInput = dOut ⊙ mask / (1−p);  dBias = Σ_rows dInput
//   biasActivationDropout         out = dropout(act(input + bias)),  act ∈ relu | gelu (erf) | gelu_tanh | silu
//   biasActivationDropoutBackward dInput = dOut ⊙ mask / (1−p) ⊙ act'(input + bias);  dBias = Σ_rows dInput
//   biasQkvSplit                  qkv [B, L, 3·heads·d] + bias → q, k, v [B, heads, L, d];  q ·= qScale
//   biasQkvSplitBackward          dq·qScale, dk, dv → dQkv [B, L, 3·heads·d];  dBias = Σ_{B,L} dQkv
//   columnSum                     out[h] (+)= Σ_rows input[r, h]
// Dropout: element i (row-major index) is kept iff its 16-bit Philox uniform (counter ⌊i/8⌋, word
// ⌊(i mod 8)/2⌋, low or high half; see rng.ts) is >= dropoutThreshold(p) = ⌈p·2^16⌉, and kept values
// are scaled by 1/(1−p) (an f32 argument): one Philox call per 16-byte vector of f16/bf16. The
// mask (u8, 1 = kept) is always written, all ones when p = 0; a dropped element is exactly 0 (also
// when its input is NaN, as on the CPU). The backwards read the mask and never redraw it.
//
// Thread mapping of the row kernels ("row tiles"): the row is split into H/VEC vectors; a block of
// (TX, TY) threads owns TX consecutive column vectors (blockIdx.y) of a tile of rows (blockIdx.x).
// Thread (x, y) keeps its column vector's bias in registers and walks rows y, y + TY, ... of the tile
// (one row per thread without a reduction). A warp reads 32 × 16 = 512 contiguous bytes of one row
// per load instruction; occupancy, not per-thread unrolling, keeps the 16-byte requests in flight:
// loading two rows per thread before using either measured equal or slower on the H200 for every
// kernel here (up to 30% slower for the ones that draw dropout masks: the extra registers cost
// occupancy). Column and row offsets need no integer division: H, VEC and the head layout are
// compile-time constants (the QKV split divides by L once per row).
//
// dBias without atomics, deterministic: a backward with dBias runs ~one wave of 512-thread blocks,
// each summing its tile's rows per column in f32 registers, then across its TY row lanes through
// shared memory in a fixed order, and writes one f32 partial row to host.scratch() ([rowTiles, H]).
// The dropout backward with dBias issues two rows' loads a thread before using either (inFlight),
// so a thread's few rows (2–8 at BERT/GPT-2 sizes) cost half the memory round trips.
// `column_sum_finalize` then adds the rowTiles partials of each column in a fixed order and writes
// dBias in its dtype. Partials are ~1–2% of the traffic at BERT/GPT-2 sizes.
//
// Vector width: 16 bytes per access (4 × f32, 8 × f16/bf16) when H is a multiple and every pointer is
// aligned to the access size; otherwise the widest narrower width that is (views at odd offsets
// fall back as far as scalar).
//
// Precision: loads convert to f32, all arithmetic is f32, results round once to the output dtype.
// GELUs are branch-free (see FAST_ACTIVATIONS_DEVICE_CODE): gelu_tanh exact up to a few ulp; gelu
// (erf) for f16/bf16 outputs within 1e-7 absolute of Φ, far below the output's rounding; f32 keeps erff.
//
// Bytes per element (s = sizeof(dtype); bias/qScale reads are per column, cached, ≈ 0):
//   biasDropoutResidual           read 2s (input, residual), write s + 1 (out, mask)       f16: 7
//   biasDropoutResidualBackward   read s + 1 (dOut, mask),   write s (dInput)              f16: 5
//   biasActivationDropout         read s (input),            write s + 1 (out, mask)       f16: 5
//   biasActivationDropoutBackward read 2s + 1 (dOut, input, mask), write s (dInput)        f16: 7
//   biasQkvSplit / backward       read s, write s                                          f16: 4
//   dBias (any backward)          + 8·rowTiles·H bytes of partials (written, then read)
//   columnSum                     read s
//
// Measured on an H200 (bf16, 16384 rows, CUDA-graph replay; memcpy D2D = 4.28 TB/s): bias + dropout +
// residual fwd 3.77–3.99 TB/s and bwd 3.88–4.10 (H = 768–4096), bwd with dBias 3.29 (H ≤ 1024) to
// 3.73 (H = 4096); relu backward 3.9–4.1; QKV split 3.6–3.7, its backward with dBias 3.1–3.4;
// columnSum 3.2–4.0. Bias + GELU + dropout forward was issue-bound at ~2.1 TB/s (Philox-4x32-10
// per 4 elements, ~11 integer instructions an element, plus ~25 for erff/tanhf-style GELUs) and
// its backward with dBias at 2.5–3.3 TB/s with 1024 threads an SM (44 registers). Since: one Philox
// call per 8 elements, MUFU GELUs (~7–16 instructions), one-row-per-thread bodies without a loop
// and __launch_bounds__ for 2048 threads an SM (1536 for the activation backward with dBias); PTX
// for bias + GELU(tanh) + dropout went from 522 to ~300 instructions per 8 elements, registers from
// 40 to 26. Measured then (2026-11-29, % of the 1 GiB copy): GELU(tanh) forward 84–85% at GPT-2
// size, GELU(erf) forward 69–70% at BERT size (~37 instructions an element: issue-bound next to
// HBM), dropout backward with dBias 73% / 59% (GPT-2 / BERT). Since (not yet measured): the forward
// computes every element's activation and masks dropped ones with an AND (the compiler had put each
// element behind a divergent branch on its keep flag: 8 branches a thread, nearly every warp taking
// both sides at p = 0.1), rounds outputs in pairs (cvt.rn.bf16x2/f16x2), and GELU(erf) is
// relu(x) − |x|·Φ(−|x|) (one FFMA instead of multiply, subtract and select): PTX for bias +
// GELU(erf) + dropout 359 → 341 instructions per 8 elements with 8 fewer branches, GELU(tanh) 269.

import type {
  Activation, BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs, BiasDropoutResidualArgs,
  BiasDropoutResidualBackwardArgs, BiasQkvSplitArgs, BiasQkvSplitBackwardArgs, DropoutArgs,
} from '../../backend.js';
import type { DType, FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { ShapeError } from '../../../errors.js';
import type { CudaTensor } from '../runtime/tensor.js';
import type { Tensor } from '../../../tensor.js';
import { dropoutThreshold } from '../../rng.js';
import {
  ACTIVATIONS, checkBiasActivationDropout, checkBiasActivationDropoutBackward, checkBiasDropoutResidual, checkBiasDropoutResidualBackward,
  checkBiasQkvSplit, checkBiasQkvSplitBackward,
} from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelArg, KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

// ==== shared planning (also used by embedding.ts and adam.ts) =========================================

/** One stream of accesses a kernel makes: the tensor's address and the size of its elements. */
export interface Access {
  readonly ptr: bigint;
  readonly elementBytes: number;
}

/**
 * The widest vector (elements per access, a power of two ≤ maxElements) to which every access is
 * aligned and, for row kernels, that divides the row length `multipleOf` (flat kernels leave it
 * out: a scalar tail takes the remainder). An access of n elements is issued in chunks of at most
 * 16 bytes, so it needs alignment min(16, n·elementBytes).
 */
export function pickVectorWidth(maxElements: number, accesses: readonly Access[], multipleOf?: number): number {
  const fits = (n: number): boolean =>
    (multipleOf === undefined || multipleOf % n === 0) && accesses.every((a) => a.ptr % BigInt(Math.min(16, n * a.elementBytes)) === 0n);
  let vec = maxElements;
  while (vec > 1 && !fits(vec)) vec /= 2;
  return vec;
}

/** Elements per 16-byte access of the widest dtype among `dtypes`. */
export function maxVectorElements(...dtypes: DType[]): number {
  return 16 / Math.max(...dtypes.map(byteSize));
}

/** Block size of the row kernels without a column reduction. */
const ROW_BLOCK_THREADS = 256;
/** Larger blocks where a block ends in a partial row: fewer blocks cover the GPU, fewer partials. */
const REDUCE_BLOCK_THREADS = 512;
/** The threads an SM holds (Hopper): sizes the one-wave grid of the reducing kernels. */
export const THREADS_PER_SM = 2048;
/** gridDim.y limit; column chunks go there. */
const MAX_GRID_Y = 65535;

/** Block shape (TX column vectors × TY row lanes) for a row of `vectorsPerRow` vectors. */
export interface RowTileShape {
  readonly tx: number;
  readonly ty: number;
}

export function rowTileShape(vectorsPerRow: number, reduces: boolean): RowTileShape {
  let tx = 1;
  while (tx < 32 && tx < vectorsPerRow) tx *= 2;
  return { tx, ty: (reduces ? REDUCE_BLOCK_THREADS : ROW_BLOCK_THREADS) / tx };
}

export interface RowTiling {
  /** (row tiles, column chunks). */
  readonly grid: readonly [number, number];
  readonly block: readonly [number, number];
  readonly rowsPerTile: number;
  /** Row tiles = partial rows written when the kernel reduces columns. */
  readonly rowTiles: number;
}

/**
 * Without a reduction, each block covers TY rows (one row per thread, many blocks).
 * With one, the grid is about one wave of resident blocks, each walking a longer tile, so that
 * there are few partials to add afterwards.
 */
export function planRowTiles(check: OpCheck, rows: number, vectorsPerRow: number, reduces: boolean, multiProcessorCount: number, threadsPerSm = THREADS_PER_SM, rowsInFlight = 1): RowTiling {
  const { tx, ty } = rowTileShape(vectorsPerRow, reduces);
  const columnChunks = Math.ceil(vectorsPerRow / tx);
  if (columnChunks > MAX_GRID_Y) check.fail(`rows of ${vectorsPerRow} vectors need ${columnChunks} column blocks, more than the grid allows (${MAX_GRID_Y})`);
  let rowsPerTile = reduces ? ty : ty * rowsInFlight;
  if (reduces) {
    const residentBlocks = multiProcessorCount * Math.max(1, Math.floor(threadsPerSm / (tx * ty)));
    const tiles = Math.max(1, Math.min(Math.ceil(rows / ty), Math.floor(residentBlocks / columnChunks)));
    rowsPerTile = Math.max(1, Math.ceil(rows / tiles));
  }
  const rowTiles = Math.ceil(rows / rowsPerTile);
  return { grid: [rowTiles, columnChunks], block: [tx, ty], rowsPerTile, rowTiles };
}

/**
 * The kernel arguments of a dropout draw (DROPOUT_PARAMS): seed, offset, the device u64 added to it
 * (offsetBase, or null), threshold (u32), keep scale 1/(1−p) (f32). Kernels start with
 * DROPOUT_OFFSET, which forms the counter offset they draw from.
 */
export function dropoutArgs(args: DropoutArgs): KernelArg[] {
  const base = args.offsetBase ? (args.offsetBase as CudaTensor).ptr : 0n;
  if (base % 8n !== 0n) throw new ShapeError(`dropout: 'offsetBase' must be 8-byte aligned (it is read as a u64)`);
  return [arg.u64(args.seed), arg.u64(args.offset), arg.ptr(base), arg.u32(dropoutThreshold(args.p)), arg.f32(1 / (1 - args.p))];
}
export const DROPOUT_PARAMS = 'u64 seed, u64 offset_arg, const u64* offset_base, u32 threshold, float keep_scale';
export const DROPOUT_OFFSET = '[[maybe_unused]] const u64 offset = offset_arg + (offset_base != nullptr ? *offset_base : 0ull);';

// ==== the row-tile kernel skeleton ==========================================================================

/** The op-specific parts of a row-tile kernel; the skeleton supplies row, col and i (the element index). */
export interface RowTileParts {
  readonly name: string;
  /** Kernel parameters before the skeleton's (rows, rows_per_tile[, partials]). */
  readonly params: string;
  /** Once per active thread: per-column state (bias in registers, head layout). `col` is defined. */
  readonly setup: string;
  /** The work on row `row` at element index `i` = row·H + col (loads first); a reduction adds each column's value to acc[k]. */
  readonly body: string;
  /** Sum columns into f32 partials [gridDim.x, H] (the dBias reduction). */
  readonly reduces: boolean;
  /**
   * Threads an SM should hold (__launch_bounds__; the launcher's planRowTiles must get the same):
   * THREADS_PER_SM (32 registers a thread) unless the body needs more registers than that without
   * spilling.
   */
  readonly threadsPerSm?: number;
  /**
   * The loads of `rows` rows (a thread's rows row, row + TY, ...) are issued before any of them is
   * used. `declare` declares per-row arrays [rows], `load` fills entry [u] for element index i, and
   * `body` reads entry [u]. In a reducing kernel, without it each iteration loads one row and uses
   * it before the next is requested (the loop carries a full memory latency a row). In a
   * non-reducing one a tile becomes TY·rows rows: a thread holds `rows` rows' loads in flight where
   * its body is long enough that one 16-byte load a thread leaves HBM idle while the SM computes.
   */
  readonly inFlight?: { readonly rows: number; readonly declare: string; readonly load: string };
}

export interface RowTileConstants {
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  readonly extra?: Record<string, number | boolean>;
  /** Device code placed before the kernel (helpers the parts use). */
  readonly prelude?: string;
}

// Sums the TY row lanes' column sums in a fixed order and writes this block's partial row.
const COLUMN_PARTIALS_DEVICE_CODE = String.raw`
__device__ __forceinline__ void write_column_partials(const float (&acc)[VEC], float* partials) {
  GRID_DEPENDENCY_TRIGGER();  // column_sum_finalize may launch (it waits for this grid to finish)
  __shared__ float lanes[TY][TX * VEC];
  #pragma unroll
  for (int k = 0; k < VEC; k++) lanes[threadIdx.y][threadIdx.x * VEC + k] = acc[k];
  __syncthreads();
  const int t = threadIdx.y * TX + threadIdx.x;
  for (int c = t; c < TX * VEC; c += TX * TY) {
    const u32 column = blockIdx.y * (TX * VEC) + c;
    if (column >= H) continue;
    float sum = 0.f;
    #pragma unroll
    for (int y = 0; y < TY; y++) sum += lanes[y][c];
    partials[(size_t)blockIdx.x * H + column] = sum;
  }
}
`;

export function rowTileSource(c: RowTileConstants, parts: RowTileParts): KernelSource {
  const vectorsPerRow = c.hidden / c.vec;
  const { tx, ty } = rowTileShape(vectorsPerRow, parts.reduces);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', c.dtype)}
${constants({ H: c.hidden, VEC: c.vec, VECS_PER_ROW: vectorsPerRow, TX: tx, TY: ty, MIN_BLOCKS_PER_SM: Math.max(1, Math.floor((parts.threadsPerSm ?? THREADS_PER_SM) / (tx * ty))), ...c.extra })}
${c.prelude ?? ''}${parts.reduces ? COLUMN_PARTIALS_DEVICE_CODE : ''}
// Block (TX, TY): thread (x, y) owns column vector blockIdx.y·TX + x and rows y, y + TY, ... of row
// tile blockIdx.x (without a reduction a tile is TY rows: one row a thread, no loop). Pointers are
// not __restrict__: outputs may alias inputs (each element is read before the same thread writes
// it). __launch_bounds__ asks for MIN_BLOCKS_PER_SM blocks an SM (2048 threads = 32 registers a
// thread unless the parts say otherwise): these kernels have one 16-byte load per stream in flight per thread, so
// occupancy is what keeps HBM busy (left to itself the compiler took 37–44 registers: 1536 threads
// an SM, and 1024 for a reducing 512-thread block, half the grid planRowTiles sized as one wave).
extern "C" __global__ void __launch_bounds__(TX * TY, MIN_BLOCKS_PER_SM) ${parts.name}(
    ${parts.params}, u32 rows, u32 rows_per_tile${parts.reduces ? ', float* partials' : ''}) {
  const u32 cvec = blockIdx.y * TX + threadIdx.x;
  const bool active = VECS_PER_ROW % TX == 0 || cvec < VECS_PER_ROW;
  const u32 col = cvec * VEC;
${parts.reduces ? `  const u32 begin = blockIdx.x * rows_per_tile;
  const u32 end = min(rows, begin + rows_per_tile);
  float acc[VEC] = {};
  if (active) {
${indent(parts.setup, 4)}${parts.inFlight ? reduceRowsInFlight(parts) : `    for (u32 row = begin + threadIdx.y; row < end; row += TY) {
      [[maybe_unused]] const size_t i = (size_t)row * H + col;
${indent(parts.body, 6)}    }
`}  }
  write_column_partials(acc, partials);` : `${parts.inFlight ? tileRowsInFlight(parts) : `  const u32 row = blockIdx.x * TY + threadIdx.y;  // rows_per_tile == TY
  if (active && row < rows) {
${indent(parts.setup, 4)}    [[maybe_unused]] const size_t i = (size_t)row * H + col;
    {
${indent(parts.body, 6)}    }
  }`}`}
}
`;
  return { name: parts.name, source };
}

/**
 * The reducing loop with ROWS_IN_FLIGHT rows a step: every row's loads first (independent 16-byte
 * requests, all in flight together), then each row's math, stores and column sums in row order (the
 * same order as one row a step, so the sums are the same bits). Rows past the tile's end load its
 * last row again instead of branching around the load (unused; guarded loads made ptxas keep the
 * arrays in local memory: 62 registers or spills for 2 rows), and skip the math.
 */
function reduceRowsInFlight(parts: RowTileParts): string {
  return `    for (u32 row0 = begin + threadIdx.y; row0 < end; row0 += ${parts.inFlight!.rows} * TY) {
${loadsThenBodies(parts, 'end', 6)}    }
`;
}

/**
 * A non-reducing tile of TY·rows rows (rows_per_tile): thread (x, y) issues the loads of rows
 * y, y + TY, ... first (a row past the end loads the last row again, unused: no guarded loads, see
 * reduceRowsInFlight), then runs the body on each row in order.
 */
function tileRowsInFlight(parts: RowTileParts): string {
  return `  const u32 row0 = blockIdx.x * rows_per_tile + threadIdx.y;  // rows_per_tile == TY * ${parts.inFlight!.rows}
  if (active && row0 < rows) {
${indent(parts.setup, 4)}${loadsThenBodies(parts, 'rows', 4)}  }`;
}

/** The in-flight rows from row0 (rows below `end`): declare, every row's loads, then each row's body. */
function loadsThenBodies(parts: RowTileParts, end: string, spaces: number): string {
  const f = parts.inFlight!;
  const pad = ' '.repeat(spaces);
  return `${indent(f.declare, spaces)}${pad}#pragma unroll
${pad}for (int u = 0; u < ${f.rows}; u++) {
${pad}  [[maybe_unused]] const size_t i = (size_t)min(row0 + u * TY, ${end} - 1) * H + col;
${indent(f.load, spaces + 2)}${pad}}
${pad}#pragma unroll
${pad}for (int u = 0; u < ${f.rows}; u++) {
${pad}  const u32 row = row0 + u * TY;
${pad}  if (row < ${end}) {
${pad}    [[maybe_unused]] const size_t i = (size_t)row * H + col;
${indent(parts.body, spaces + 4)}${pad}  }
${pad}}
`;
}

/** Indents a snippet written flush left (its own nesting kept); an empty snippet gives no line. */
function indent(code: string, spaces: number): string {
  const pad = ' '.repeat(spaces);
  return code.trim() === '' ? '' : code.trim().split('\n').map((line) => (line.trim() ? pad + line : '')).join('\n') + '\n';
}

/** Launches a row-tile kernel: `args` are its own parameters; the skeleton's follow. */
function launchRowTiles(host: KernelHost, key: string, build: () => KernelSource, tiling: RowTiling, rows: number, args: readonly KernelArg[], partials?: bigint): void {
  if (tiling.rowTiles === 0) return;
  const tail = [arg.u32(rows), arg.u32(tiling.rowsPerTile), ...(partials === undefined ? [] : [arg.ptr(partials)])];
  host.kernel(key, build).launch({ grid: tiling.grid, block: tiling.block }, [...args, ...tail]);
}

// ==== column sums: partials → dBias ============================================================================

export interface ColumnSumFinalizeSpec {
  /** The output's dtype (dBias). */
  readonly dtype: FloatDType;
  /** out += Σ instead of out = Σ. */
  readonly accumulate: boolean;
}

export function columnSumFinalizeKey(s: ColumnSumFinalizeSpec): string {
  return `column_sum_finalize.${s.dtype}${s.accumulate ? '.acc' : ''}`;
}

const FINALIZE_LANES_X = 32;
const FINALIZE_LANES_Y = 16;

export function columnSumFinalizeSource(spec: ColumnSumFinalizeSpec): KernelSource {
  const name = kernelIdentifier(columnSumFinalizeKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ LANES_X: FINALIZE_LANES_X, LANES_Y: FINALIZE_LANES_Y, ACCUMULATE: spec.accumulate })}

// Block (LANES_X, LANES_Y) finishes LANES_X columns: lane (x, y) adds partial rows y, y + LANES_Y, ...
// of column blockIdx.x·LANES_X + x (a warp reads 128 contiguous bytes), then lane (x, 0) adds the
// LANES_Y results in order. The order is fixed: the same partials give the same bits. tiles = 0
// writes zeros (a sum over no rows).
extern "C" __global__ void __launch_bounds__(LANES_X * LANES_Y) ${name}(
    const float* __restrict__ partials, u32 tiles, u32 hidden, T* out) {
  // Launched programmatically (the reducing row kernels trigger once their rows are summed): resident
  // as soon as SMs free up, then waits here for the partials.
  GRID_DEPENDENCY_WAIT();
  __shared__ float lanes[LANES_Y][LANES_X + 1];
  const u32 col = blockIdx.x * LANES_X + threadIdx.x;
  float sum = 0.f;
  if (col < hidden) {
    // 8 independent loads in flight a lane: the ~100–260 partial rows come back in one or two L2 round trips.
    #pragma unroll 8
    for (u32 t = threadIdx.y; t < tiles; t += LANES_Y) sum += partials[(size_t)t * hidden + col];
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= hidden) return;
  float total = 0.f;
  #pragma unroll
  for (int y = 0; y < LANES_Y; y++) total += lanes[y][threadIdx.x];
  if (ACCUMULATE) total += to_float(out[col]);
  out[col] = from_float<T>(total);
}
`;
  return { name, source, gridDependencyWait: true };
}

/** Adds `tiles` f32 partial rows of length `hidden` into `out` (its dtype), or overwrites it. */
function launchColumnSumFinalize(host: KernelHost, partials: bigint, tiles: number, hidden: number, out: Tensor, outPtr: bigint, accumulate: boolean): void {
  if (hidden === 0) return;
  const spec: ColumnSumFinalizeSpec = { dtype: out.dtype as FloatDType, accumulate };
  host.kernel(columnSumFinalizeKey(spec), () => columnSumFinalizeSource(spec)).launch(
    { grid: Math.ceil(hidden / FINALIZE_LANES_X), block: [FINALIZE_LANES_X, FINALIZE_LANES_Y] },
    [arg.ptr(partials), arg.u32(tiles), arg.u32(hidden), arg.ptr(outPtr)],
  );
}

/** Scratch for the partial rows of a reducing launch (at least one float, so the pointer is real). */
function partialsScratch(host: KernelHost, tiling: RowTiling, hidden: number): bigint {
  return host.scratch(Math.max(1, tiling.rowTiles * hidden) * 4);
}

// ==== bias + dropout + residual ==================================================================================

export interface BiasDropoutResidualSpec {
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  /** p > 0: draw the mask; p = 0 compiles to a copy-with-bias that writes an all-ones mask. */
  readonly hasDropout: boolean;
}

export function biasDropoutResidualKey(s: BiasDropoutResidualSpec): string {
  return `bias_dropout_residual.${s.dtype}.h${s.hidden}.v${s.vec}${s.hasDropout ? '.drop' : ''}`;
}

// Per-column bias in registers, kept in its storage type (VEC·s bytes: 4 registers at 16-bit
// instead of 8 as floats) and converted where used (one shift or PRMT an element): the saved
// registers let every row-tile kernel run 2048 threads an SM (32 registers a thread).
const LOAD_BIAS = 'const Vec<T, VEC> bias_v = load_vec<T, VEC>(bias + col);';

/** `keep[VEC]` for element i, or nothing when the spec has no dropout. */
function drawKeep(hasDropout: boolean): string {
  return hasDropout ? 'bool keep[VEC];\ndropout_keep_vec<VEC>(seed, offset, i, threshold, keep);' : '';
}
function storeMask(hasDropout: boolean): string {
  return hasDropout ? 'store_mask<VEC>(mask + i, keep);' : 'store_mask_all_kept<VEC>(mask + i);';
}
/** The dropped-or-scaled value of `v` (an f32 expression) for column k. */
function applyDropout(hasDropout: boolean, v: string): string {
  return hasDropout ? `(keep[k] ? (${v}) * keep_scale : 0.f)` : v;
}


export function biasDropoutResidualSource(spec: BiasDropoutResidualSpec): KernelSource {
  return rowTileSource(spec, {
    name: kernelIdentifier(biasDropoutResidualKey(spec)),
    params: `const T* input, const T* bias, const T* residual, T* out, unsigned char* mask, ${DROPOUT_PARAMS}`,
    setup: `${DROPOUT_OFFSET}\n${LOAD_BIAS}`,
    body: `const Vec<T, VEC> x = load_vec<T, VEC>(input + i);
const Vec<T, VEC> res = load_vec<T, VEC>(residual + i);
${drawKeep(spec.hasDropout)}
Vec<T, VEC> y;
#pragma unroll
for (int k = 0; k < VEC; k++) y.v[k] = from_float<T>(${applyDropout(spec.hasDropout, 'to_float(x.v[k]) + to_float(bias_v.v[k])')} + to_float(res.v[k]));
store_vec<T, VEC>(out + i, y);
${storeMask(spec.hasDropout)}`,
    reduces: false,
  });
}

export function biasDropoutResidual(host: KernelHost, args: BiasDropoutResidualArgs): void {
  const c = new OpCheck('biasDropoutResidual', 'cuda');
  const { input, bias, residual, out, mask, rows, H: hidden } = checkBiasDropoutResidual(c, args);
  const dtype = input.dtype as FloatDType;
  const s = byteSize(dtype);
  const ptrs = {
    input: devicePtr(c, 'input', input), bias: devicePtr(c, 'bias', bias), residual: devicePtr(c, 'residual', residual),
    out: devicePtr(c, 'out', out), mask: devicePtr(c, 'mask', mask),
  };
  if (hidden === 0) return;
  const vec = pickVectorWidth(maxVectorElements(dtype), [
    { ptr: ptrs.input, elementBytes: s }, { ptr: ptrs.bias, elementBytes: s }, { ptr: ptrs.residual, elementBytes: s },
    { ptr: ptrs.out, elementBytes: s }, { ptr: ptrs.mask, elementBytes: 1 },
  ], hidden);
  const spec: BiasDropoutResidualSpec = { dtype, hidden, vec, hasDropout: args.p > 0 };
  const tiling = planRowTiles(c, rows, hidden / vec, false, host.multiProcessorCount);
  launchRowTiles(host, biasDropoutResidualKey(spec), () => biasDropoutResidualSource(spec), tiling, rows, [
    arg.ptr(ptrs.input), arg.ptr(ptrs.bias), arg.ptr(ptrs.residual), arg.ptr(ptrs.out), arg.ptr(ptrs.mask), ...dropoutArgs(args),
  ]);
}

// ==== dropout backward (shared by bias + dropout + residual) ======================================================

export interface BiasDropoutResidualBackwardSpec {
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  /** Also sum dInput over rows into partials (dBias). */
  readonly hasDBias: boolean;
}

export function biasDropoutResidualBackwardKey(s: BiasDropoutResidualBackwardSpec): string {
  return `bias_dropout_residual_backward.${s.dtype}.h${s.hidden}.v${s.vec}${s.hasDBias ? '.dbias' : ''}`;
}

/** `acc[k] += d;` when the kernel reduces dBias. */
function accumulate(reduces: boolean, value: string): string {
  return reduces ? `\n  acc[k] += ${value};` : '';
}

/**
 * The dropout backward with dBias: 2 rows' dOut and mask loads in flight a thread (16 + 8 bytes
 * each at 16-bit) at 1536 threads an SM (40 registers, no spills; 4 rows spill 20 bytes at 40 and
 * 2 rows spill at 32), ~74 KB requested per SM at once against ~48 KB before, and half the
 * latency-bound steps per thread (BERT 8192 × 768: 2 instead of 3–4); one row a step measured 73% /
 * 59% of copy bandwidth at GPT-2 / BERT sizes.
 */
const DROPOUT_BACKWARD_ROWS_IN_FLIGHT = 2;
const DROPOUT_BACKWARD_DBIAS_THREADS_PER_SM = 1536;

function dropoutBackwardThreadsPerSm(hasDBias: boolean): number {
  return hasDBias ? DROPOUT_BACKWARD_DBIAS_THREADS_PER_SM : THREADS_PER_SM;
}

export function biasDropoutResidualBackwardSource(spec: BiasDropoutResidualBackwardSpec): KernelSource {
  const scale = (g: string, m: string) => `#pragma unroll
for (int k = 0; k < VEC; k++) {
  const float d = ${m}.v[k] ? to_float(${g}.v[k]) * keep_scale : 0.f;
  y.v[k] = from_float<T>(d);${accumulate(spec.hasDBias, 'd')}
}
store_vec<T, VEC>(d_input + i, y);`;
  const common = {
    name: kernelIdentifier(biasDropoutResidualBackwardKey(spec)),
    params: 'const T* d_out, const unsigned char* mask, T* d_input, float keep_scale',
    setup: '',
    threadsPerSm: dropoutBackwardThreadsPerSm(spec.hasDBias),
  };
  if (!spec.hasDBias) {
    return rowTileSource(spec, {
      ...common,
      body: `const Vec<T, VEC> g = load_vec<T, VEC>(d_out + i);
const Vec<unsigned char, VEC> m = load_vec<unsigned char, VEC>(mask + i);
Vec<T, VEC> y;
${scale('g', 'm')}`,
      reduces: false,
    });
  }
  return rowTileSource(spec, {
    ...common,
    inFlight: {
      rows: DROPOUT_BACKWARD_ROWS_IN_FLIGHT,
      declare: `Vec<T, VEC> g[${DROPOUT_BACKWARD_ROWS_IN_FLIGHT}];\nVec<unsigned char, VEC> m[${DROPOUT_BACKWARD_ROWS_IN_FLIGHT}];`,
      load: 'g[u] = load_vec<T, VEC>(d_out + i);\nm[u] = load_vec<unsigned char, VEC>(mask + i);',
    },
    body: `Vec<T, VEC> y;
${scale('g[u]', 'm[u]')}`,
    reduces: true,
  });
}

export function biasDropoutResidualBackward(host: KernelHost, args: BiasDropoutResidualBackwardArgs): void {
  const c = new OpCheck('biasDropoutResidualBackward', 'cuda');
  const { dOut, mask, dInput, dBias, rows, H: hidden } = checkBiasDropoutResidualBackward(c, args);
  const dtype = dOut.dtype as FloatDType;
  const s = byteSize(dtype);
  const ptrs = { dOut: devicePtr(c, 'dOut', dOut), mask: devicePtr(c, 'mask', mask), dInput: devicePtr(c, 'dInput', dInput) };
  const dBiasPtr = dBias ? devicePtr(c, 'dBias', dBias) : undefined;
  if (hidden === 0) return;
  const vec = pickVectorWidth(maxVectorElements(dtype), [
    { ptr: ptrs.dOut, elementBytes: s }, { ptr: ptrs.mask, elementBytes: 1 }, { ptr: ptrs.dInput, elementBytes: s },
  ], hidden);
  const spec: BiasDropoutResidualBackwardSpec = { dtype, hidden, vec, hasDBias: dBias !== undefined };
  const tiling = planRowTiles(c, rows, hidden / vec, spec.hasDBias, host.multiProcessorCount, dropoutBackwardThreadsPerSm(spec.hasDBias));
  const partials = spec.hasDBias ? partialsScratch(host, tiling, hidden) : undefined;
  launchRowTiles(host, biasDropoutResidualBackwardKey(spec), () => biasDropoutResidualBackwardSource(spec), tiling, rows, [
    arg.ptr(ptrs.dOut), arg.ptr(ptrs.mask), arg.ptr(ptrs.dInput), arg.f32(1 / (1 - args.p)),
  ], partials);
  if (dBias && dBiasPtr !== undefined && partials !== undefined) launchColumnSumFinalize(host, partials, tiling.rowTiles, hidden, dBias, dBiasPtr, false);
}

// ==== bias + activation + dropout ================================================================================


// Branch-free GELUs on the SFU (MUFU) instructions. CUDA's erff and tanhf branch on |x|, and expf
// and IEEE division add range handling and a slow path: ~25 instructions an element, which (with
// the Philox draw) made bias + GELU + dropout integer/FP-issue-bound at ~50% of HBM bandwidth.
//  - gelu_tanh as x·σ(2u) (= ½x(1 + tanh u) exactly, u = √(2/π)(x + 0.044715x³)), σ(2u) =
//    1/(1 + 2^(x·(A + B·x²))) with A = −2√(2/π)·log2(e), B = 0.044715·A: FMUL, FFMA, FMUL, EX2,
//    FADD, RCP, FMUL = 7 instructions (2 on the SFU). ex2.approx (≤ 2 ulp) and rcp.approx (≤ 1 ulp)
//    keep the relative error a few ulp of f32 at every x (1 + e never cancels; the form 1 + tanh u
//    with tanh.approx would lose all digits for x ≪ 0). Limits: e = +inf gives σ = 0, y = −0.
//    Derivative: σ + 2x·σ(1−σ)·u', u' = √(2/π)(1 + 3·0.044715x²).
//  - gelu (erf) for f16/bf16 outputs: Φ(x) from Abramowitz & Stegun 7.1.26 (|error of erf| ≤ 1.5e-7,
//    far below half an ulp of the 16-bit output) with rcp.approx and ex2.approx, sharing its
//    exp(−x²/2) with φ(x) for the derivative Φ(x) + x·φ(x): ~16 instructions, 2 on the SFU.
//    f32 outputs keep device-lib's erff-based gelu_erf.
const FAST_ACTIVATIONS_DEVICE_CODE = String.raw`
__device__ __forceinline__ float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// σ(2u) for GPT-2's gelu_new.
__device__ __forceinline__ float gelu_tanh_sigma(float x) {
  constexpr float A = -2.f * 0.79788456080286536f * 1.4426950408889634f;
  constexpr float B = 0.044715f * A;
  return rcp_fast(1.f + exp2_fast(x * fmaf(B, x * x, A)));
}
__device__ __forceinline__ float gelu_tanh_fast(float x) { return x * gelu_tanh_sigma(x); }
__device__ __forceinline__ float gelu_tanh_fast_grad(float x) {
  const float s = gelu_tanh_sigma(x);
  const float du = 0.79788456080286536f * fmaf(3.f * 0.044715f, x * x, 1.f);
  return fmaf(2.f * x * du, s - s * s, s);
}
// Φ(−|x|) and exp(−x²/2), branch-free (A&S 7.1.26 applied to erfc(|x|/√2); the ½ of Φ = ½erfc is
// folded into the coefficients).
__device__ __forceinline__ float normal_tail_fast(float x, float& gauss) {
  const float t = rcp_fast(fmaf(0.3275911f * 0.70710678118654752f, fabsf(x), 1.f));  // 1/(1 + p·z), z = |x|/√2
  const float poly = t * fmaf(t, fmaf(t, fmaf(t, fmaf(t, 0.5f * 1.061405429f, 0.5f * -1.453152027f), 0.5f * 1.421413741f), 0.5f * -0.284496736f), 0.5f * 0.254829592f);
  gauss = exp2_fast(x * x * (-0.5f * 1.4426950408889634f));
  return poly * gauss;
}
// x·Φ(x) = relu(x) − |x|·Φ(−|x|) for either sign (x ≥ 0: x − x·Φ(−x); x < 0: x·Φ(x)): one FFMA
// after the tail instead of a multiply, a subtraction and a select.
__device__ __forceinline__ float gelu_erf_fast(float x) {
  float g;
  return fmaf(-fabsf(x), normal_tail_fast(x, g), fmaxf(x, 0.f));
}
// Branch-free dropout of an activation: the value is computed for every element and a dropped one
// masked to +0 (also when it is NaN), so the compiler cannot put each element's activation behind
// a divergent branch on its keep flag (it did: 8 branches a thread, each with its reconvergence).
__device__ __forceinline__ float keep_or_zero(bool keep, float v) {
  return __uint_as_float(__float_as_uint(v) & (0u - (u32)keep));
}
// A vector of floats rounded to T, two at a time where T is 16-bit (one cvt.rn.{bf16x2,f16x2}.f32).
template <int N> __device__ __forceinline__ Vec<float, N> round_pairs(const float (&v)[N], float) {
  Vec<float, N> y;
  #pragma unroll
  for (int k = 0; k < N; k++) y.v[k] = v[k];
  return y;
}
template <int N> __device__ __forceinline__ Vec<__half, N> round_pairs(const float (&v)[N], __half) {
  Vec<__half, N> y;
  #pragma unroll
  for (int k = 0; k + 1 < N; k += 2) { const __half2 h = __floats2half2_rn(v[k], v[k + 1]); y.v[k] = h.x; y.v[k + 1] = h.y; }
  if (N % 2) y.v[N - 1] = __float2half_rn(v[N - 1]);
  return y;
}
template <int N> __device__ __forceinline__ Vec<__nv_bfloat16, N> round_pairs(const float (&v)[N], __nv_bfloat16) {
  Vec<__nv_bfloat16, N> y;
  #pragma unroll
  for (int k = 0; k + 1 < N; k += 2) { const __nv_bfloat162 h = __floats2bfloat162_rn(v[k], v[k + 1]); y.v[k] = h.x; y.v[k + 1] = h.y; }
  if (N % 2) y.v[N - 1] = __float2bfloat16_rn(v[N - 1]);
  return y;
}
// silu = x·σ(x), σ(x) = 1/(1 + 2^(−x·log2 e)): FMUL, EX2, FADD, RCP, FMUL (2 on the SFU).
__device__ __forceinline__ float silu_sigma(float x) { return rcp_fast(1.f + exp2_fast(x * -1.4426950408889634f)); }
__device__ __forceinline__ float silu_fast(float x) { return x * silu_sigma(x); }
__device__ __forceinline__ float silu_fast_grad(float x) {
  const float s = silu_sigma(x);
  return s * fmaf(x, 1.f - s, 1.f);
}
__device__ __forceinline__ float gelu_erf_fast_grad(float x) {
  float g;
  const float tail = normal_tail_fast(x, g);
  const float cdf = x >= 0.f ? 1.f - tail : tail;
  return fmaf(x * 0.39894228040143268f, g, cdf);
}
`;

/** Device function names of an activation and its derivative for a storage dtype. */
function activationFunctions(activation: Activation, dtype: FloatDType): { readonly fn: string; readonly grad: string } {
  switch (activation) {
    case 'relu': return { fn: 'relu_f', grad: 'relu_grad' };
    case 'gelu': return dtype === 'f32' ? { fn: 'gelu_erf', grad: 'gelu_erf_grad' } : { fn: 'gelu_erf_fast', grad: 'gelu_erf_fast_grad' };
    case 'gelu_tanh': return { fn: 'gelu_tanh_fast', grad: 'gelu_tanh_fast_grad' };
    case 'silu': return { fn: 'silu_fast', grad: 'silu_fast_grad' };
  }
}

export interface BiasActivationDropoutSpec {
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  readonly activation: Activation;
  readonly hasDropout: boolean;
  /** Rows a thread loads before computing any (1 = one row a thread; see RowTileParts.inFlight). */
  readonly rowsInFlight?: number;
  /**
   * Rows after the first land in shared memory (cp.async: no registers held while in flight), so the
   * thread keeps the 32-register budget of one row; otherwise every row is loaded into registers.
   */
  readonly staged?: boolean;
  /**
   * bf16 only: x and bias converted from the 32-bit word of each pair (float_at) instead of
   * element by element. The default (FUSEFORMER_BF16_PAIRS=0 turns it off).
   */
  readonly bf16Pairs?: boolean;
}

export function biasActivationDropoutKey(s: BiasActivationDropoutSpec): string {
  const rows = s.rowsInFlight ?? 1;
  return `bias_activation_dropout.${s.activation}.${s.dtype}.h${s.hidden}.v${s.vec}${s.hasDropout ? '.drop' : ''}${rows > 1 ? `.r${rows}${s.staged ? 's' : ''}` : ''}${s.bf16Pairs ? '.pairs' : ''}`;
}

/**
 * Whether the bf16 activation forward unpacks its inputs a 32-bit word at a time
 * (BiasActivationDropoutSpec.bf16Pairs): on unless FUSEFORMER_BF16_PAIRS=0. Built from the erf
 * kernel's SASS (bf16 ran 8% slower than f16 from the same PTX: every odd element took a PRMT before
 * its shift, on the integer pipe the Philox draw already loads). Measured on the H200 (session 22,
 * two rounds): BERT erf forward 37.5–37.6 → 36.0–36.2 µs (86% of a same-size copy), GPT-2 tanh
 * 65.8–65.9 → 65.4–65.6.
 */
export function bf16PairsEnabled(): boolean {
  const v = process.env['FUSEFORMER_BF16_PAIRS'];
  if (v === undefined || v === '' || v === '1') return true;
  if (v === '0') return false;
  throw new Error(`FUSEFORMER_BF16_PAIRS must be 0 or 1, got '${v}'`);
}

// Element k of a vector as a float. bf16 comes from the 32-bit word holding the pair: the low element
// shifted up 16 bits, the high one masked — one integer instruction each, where the per-element
// conversion first moves the high half down (PRMT) and then shifts it back up.
const UNPACK_FLOATS_DEVICE_CODE = String.raw`
template <typename T, int N> __device__ __forceinline__ float float_at(const Vec<T, N>& x, int k) { return to_float(x.v[k]); }
template <int N> __device__ __forceinline__ float float_at(const Vec<__nv_bfloat16, N>& x, int k) {
  if (N % 2 == 1 && k == N - 1) return to_float(x.v[k]);
  u32 w;
  memcpy(&w, &x.v[k & ~1], sizeof(w));
  return __uint_as_float(k & 1 ? w & 0xffff0000u : w << 16);
}
`;

/**
 * Rows a thread of the activation forward keeps in flight: FUSEFORMER_ACTIVATION_ROWS (1, 2, 4, or
 * 2s / 4s staged through shared memory); by default two rows, the second staged, for the erf GELU at
 * 16 bits, else one. With a long body (erf-GELU + dropout: ~40 PTX instructions an element) one
 * 16-byte load a thread leaves too few bytes in flight while warps compute. Measured on the H200
 * (session 21, bench:kernels, two rounds, µs at [8192, 3072] bf16 / f16): one row 42.5–42.7 / 41.4–41.7,
 * two in registers 39.5–39.7 / 38.5–38.9, two staged 38.0 / 36.3–36.5, four staged 38.5 / 37.2–37.3.
 * GELU(tanh) at [16384, 3072] (~34 an element, 93% of a same-size copy at one row) does not gain:
 * 65.7–65.9 at one row, 66.1–66.3 at two staged.
 */
export function activationRowsInFlight(activation: Activation, dtype: FloatDType): { readonly rows: number; readonly staged: boolean } {
  const v = process.env['FUSEFORMER_ACTIVATION_ROWS'];
  if (v === undefined || v === '') return activation === 'gelu' && dtype !== 'f32' ? { rows: 2, staged: true } : { rows: 1, staged: false };
  const m = /^([124])(s?)$/.exec(v);
  if (!m) throw new Error(`FUSEFORMER_ACTIVATION_ROWS must be 1, 2 or 4 (2s or 4s: staged through shared memory), got '${v}'`);
  return { rows: Number(m[1]), staged: m[2] === 's' && m[1] !== '1' };
}

/**
 * Threads an SM the activation forward is bounded to: 32 registers a thread at one row, 40 at two
 * (39–40 used), 64 at four (40 spilled 16 bytes); staged through shared memory, 32 at two and 40 at four.
 */
function activationForwardThreadsPerSm(rowsInFlight: number, staged = false): number {
  if (staged) return rowsInFlight >= 4 ? 1536 : THREADS_PER_SM;  // 4 staged rows spilled 12 bytes at 32 registers
  return rowsInFlight >= 4 ? 1024 : rowsInFlight > 1 ? 1536 : THREADS_PER_SM;
}

// Staged rows: each thread copies its 16-byte vector of rows 1.. into its own shared-memory slots
// and reads back only those, after waiting for its own copies (no barrier).
const STAGED_ROWS_DEVICE_CODE = String.raw`
__device__ __forceinline__ void copy_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((u32)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
`;

export function biasActivationDropoutSource(spec: BiasActivationDropoutSpec): KernelSource {
  const act = activationFunctions(spec.activation, spec.dtype).fn;
  const rows = spec.rowsInFlight ?? 1;
  const staged = rows > 1 && spec.staged === true;
  // 16-byte vectors only (cp.async copies 16 bytes): VEC · sizeof(T) = 16 where staged.
  const inFlight = !(rows > 1) ? {} : staged
    ? { inFlight: { rows, declare: `Vec<T, VEC> x0;\n__shared__ __align__(16) Vec<T, VEC> staged_rows[${rows - 1}][TY][TX];`,
        load: `if (u == 0) x0 = load_vec<T, VEC>(input + i);\nelse copy_async_16(&staged_rows[u - 1][threadIdx.y][threadIdx.x], input + i);` } }
    : { inFlight: { rows, declare: `Vec<T, VEC> xs[${rows}];`, load: 'xs[u] = load_vec<T, VEC>(input + i);' } };
  const loadX = !(rows > 1) ? 'load_vec<T, VEC>(input + i)' : staged
    ? `u == 0 ? x0 : (copy_async_wait_all(), staged_rows[u - 1][threadIdx.y][threadIdx.x])`
    : 'xs[u]';
  const pairs = spec.bf16Pairs === true;
  const activate = (x: string, b: string) => spec.hasDropout ? `keep_or_zero(keep[k], ${act}(${x} + ${b}) * keep_scale)` : `${act}(${x} + ${b})`;
  return rowTileSource({ ...spec, prelude: FAST_ACTIVATIONS_DEVICE_CODE + (staged ? STAGED_ROWS_DEVICE_CODE : '') + (pairs ? UNPACK_FLOATS_DEVICE_CODE : '') }, {
    name: kernelIdentifier(biasActivationDropoutKey(spec)),
    params: `const T* input, const T* bias, T* out, unsigned char* mask, ${DROPOUT_PARAMS}`,
    setup: `${DROPOUT_OFFSET}\n${LOAD_BIAS}`,
    threadsPerSm: activationForwardThreadsPerSm(rows, staged),
    ...inFlight,
    body: `const Vec<T, VEC> x = ${loadX};
${drawKeep(spec.hasDropout)}
float y[VEC];
#pragma unroll
for (int k = 0; k < VEC; k++) y[k] = ${pairs ? activate('float_at(x, k)', 'float_at(bias_v, k)') : activate('to_float(x.v[k])', 'to_float(bias_v.v[k])')};
store_vec<T, VEC>(out + i, round_pairs<VEC>(y, T()));
${storeMask(spec.hasDropout)}`,
    reduces: false,
  });
}

export function biasActivationDropout(host: KernelHost, args: BiasActivationDropoutArgs): void {
  const c = new OpCheck('biasActivationDropout', 'cuda');
  const { input, bias, out, mask, activation, rows, H: hidden } = checkBiasActivationDropout(c, args);
  const dtype = input.dtype as FloatDType;
  const s = byteSize(dtype);
  const ptrs = { input: devicePtr(c, 'input', input), bias: devicePtr(c, 'bias', bias), out: devicePtr(c, 'out', out), mask: devicePtr(c, 'mask', mask) };
  if (hidden === 0) return;
  const vec = pickVectorWidth(maxVectorElements(dtype), [
    { ptr: ptrs.input, elementBytes: s }, { ptr: ptrs.bias, elementBytes: s }, { ptr: ptrs.out, elementBytes: s }, { ptr: ptrs.mask, elementBytes: 1 },
  ], hidden);
  const inFlight = activationRowsInFlight(activation, dtype);
  const rowsInFlight = inFlight.rows;
  const staged = inFlight.staged && vec * s === 16;
  const spec: BiasActivationDropoutSpec = {
    dtype, hidden, vec, activation, hasDropout: args.p > 0, ...(rowsInFlight > 1 ? { rowsInFlight, ...(staged ? { staged } : {}) } : {}),
    ...(dtype === 'bf16' && bf16PairsEnabled() ? { bf16Pairs: true } : {}),
  };
  const tiling = planRowTiles(c, rows, hidden / vec, false, host.multiProcessorCount, activationForwardThreadsPerSm(rowsInFlight, staged), rowsInFlight);
  launchRowTiles(host, biasActivationDropoutKey(spec), () => biasActivationDropoutSource(spec), tiling, rows, [
    arg.ptr(ptrs.input), arg.ptr(ptrs.bias), arg.ptr(ptrs.out), arg.ptr(ptrs.mask), ...dropoutArgs(args),
  ]);
}

export interface BiasActivationDropoutBackwardSpec {
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  readonly activation: Activation;
  readonly hasDBias: boolean;
}

export function biasActivationDropoutBackwardKey(s: BiasActivationDropoutBackwardSpec): string {
  return `bias_activation_dropout_backward.${s.activation}.${s.dtype}.h${s.hidden}.v${s.vec}${s.hasDBias ? '.dbias' : ''}`;
}

export function biasActivationDropoutBackwardSource(spec: BiasActivationDropoutBackwardSpec): KernelSource {
  const grad = activationFunctions(spec.activation, spec.dtype).grad;
  return rowTileSource({ ...spec, prelude: FAST_ACTIVATIONS_DEVICE_CODE }, {
    name: kernelIdentifier(biasActivationDropoutBackwardKey(spec)),
    params: 'const T* d_out, const T* input, const T* bias, const unsigned char* mask, T* d_input, float keep_scale',
    setup: LOAD_BIAS,
    body: `const Vec<T, VEC> g = load_vec<T, VEC>(d_out + i);
const Vec<T, VEC> x = load_vec<T, VEC>(input + i);
const Vec<unsigned char, VEC> m = load_vec<unsigned char, VEC>(mask + i);
Vec<T, VEC> y;
#pragma unroll
for (int k = 0; k < VEC; k++) {
  const float d = m.v[k] ? to_float(g.v[k]) * keep_scale * ${grad}(to_float(x.v[k]) + to_float(bias_v.v[k])) : 0.f;
  y.v[k] = from_float<T>(d);${accumulate(spec.hasDBias, 'd')}
}
store_vec<T, VEC>(d_input + i, y);`,
    reduces: spec.hasDBias,
    threadsPerSm: activationBackwardThreadsPerSm(spec.hasDBias),
  });
}

/**
 * The activation backward with dBias holds bias, 8 column sums and the activation's temporaries:
 * at 32 registers it spills (12–28 bytes), so it runs 3 blocks of 512 (40 registers) an SM.
 */
function activationBackwardThreadsPerSm(hasDBias: boolean): number {
  return hasDBias ? 1536 : THREADS_PER_SM;
}

export function biasActivationDropoutBackward(host: KernelHost, args: BiasActivationDropoutBackwardArgs): void {
  const c = new OpCheck('biasActivationDropoutBackward', 'cuda');
  const { dOut, input, bias, mask, dInput, dBias, activation, rows, H: hidden } = checkBiasActivationDropoutBackward(c, args);
  const dtype = dOut.dtype as FloatDType;
  const s = byteSize(dtype);
  const ptrs = {
    dOut: devicePtr(c, 'dOut', dOut), input: devicePtr(c, 'input', input), bias: devicePtr(c, 'bias', bias),
    mask: devicePtr(c, 'mask', mask), dInput: devicePtr(c, 'dInput', dInput),
  };
  const dBiasPtr = dBias ? devicePtr(c, 'dBias', dBias) : undefined;
  if (hidden === 0) return;
  const vec = pickVectorWidth(maxVectorElements(dtype), [
    { ptr: ptrs.dOut, elementBytes: s }, { ptr: ptrs.input, elementBytes: s }, { ptr: ptrs.bias, elementBytes: s },
    { ptr: ptrs.mask, elementBytes: 1 }, { ptr: ptrs.dInput, elementBytes: s },
  ], hidden);
  const spec: BiasActivationDropoutBackwardSpec = { dtype, hidden, vec, activation, hasDBias: dBias !== undefined };
  const tiling = planRowTiles(c, rows, hidden / vec, spec.hasDBias, host.multiProcessorCount, activationBackwardThreadsPerSm(spec.hasDBias));
  const partials = spec.hasDBias ? partialsScratch(host, tiling, hidden) : undefined;
  launchRowTiles(host, biasActivationDropoutBackwardKey(spec), () => biasActivationDropoutBackwardSource(spec), tiling, rows, [
    arg.ptr(ptrs.dOut), arg.ptr(ptrs.input), arg.ptr(ptrs.bias), arg.ptr(ptrs.mask), arg.ptr(ptrs.dInput), arg.f32(1 / (1 - args.p)),
  ], partials);
  if (dBias && dBiasPtr !== undefined && partials !== undefined) launchColumnSumFinalize(host, partials, tiling.rowTiles, hidden, dBias, dBiasPtr, false);
}

// ==== bias + QKV head split ========================================================================================
// Rows are the B·L tokens, columns the 3·heads·d fused features; column col = part·heads·d + h·d + j
// (part 0, 1, 2 = q, k, v) of token (b, l) is element ((b·heads + h)·L + l)·d + j of that part. A
// vector never straddles heads (VEC divides d), so each is one contiguous 16-byte store; a warp's 32
// vectors land in 32·VEC/d runs of d contiguous elements.

export interface BiasQkvSplitSpec {
  readonly dtype: FloatDType;
  readonly heads: number;
  readonly headDim: number;
  readonly vec: number;
}

export interface BiasQkvSplitBackwardSpec extends BiasQkvSplitSpec {
  readonly hasDBias: boolean;
}

export function biasQkvSplitKey(s: BiasQkvSplitSpec): string {
  return `bias_qkv_split.${s.dtype}.n${s.heads}.d${s.headDim}.v${s.vec}`;
}

export function biasQkvSplitBackwardKey(s: BiasQkvSplitBackwardSpec): string {
  return `bias_qkv_split_backward.${s.dtype}.n${s.heads}.d${s.headDim}.v${s.vec}${s.hasDBias ? '.dbias' : ''}`;
}

// This thread's column: which of q/k/v, which head, which element of the head.
const QKV_COLUMN = String.raw`const u32 part = col / (HEADS * HEAD_DIM);
const u32 head = (col / HEAD_DIM) % HEADS;
const u32 j = col % HEAD_DIM;
const float part_scale = part == 0 ? q_scale : 1.f;`;
// Offset in q/k/v of this thread's vector for token `row` = b·L + l.
const QKV_SPLIT_OFFSET = String.raw`const u32 batch = row / seq_len, l = row - batch * seq_len;
const size_t o = (((size_t)batch * HEADS + head) * seq_len + l) * HEAD_DIM + j;`;

function qkvConstants(spec: BiasQkvSplitSpec): RowTileConstants {
  return { dtype: spec.dtype, hidden: 3 * spec.heads * spec.headDim, vec: spec.vec, extra: { HEADS: spec.heads, HEAD_DIM: spec.headDim } };
}

export function biasQkvSplitSource(spec: BiasQkvSplitSpec): KernelSource {
  return rowTileSource(qkvConstants(spec), {
    name: kernelIdentifier(biasQkvSplitKey(spec)),
    params: 'const T* qkv, const T* bias, T* q_out, T* k_out, T* v_out, u32 seq_len, float q_scale',
    setup: `${LOAD_BIAS}\n${QKV_COLUMN}\nT* dst = part == 0 ? q_out : part == 1 ? k_out : v_out;`,
    body: `const Vec<T, VEC> x = load_vec<T, VEC>(qkv + i);
${QKV_SPLIT_OFFSET}
Vec<T, VEC> y;
#pragma unroll
for (int k = 0; k < VEC; k++) y.v[k] = from_float<T>((to_float(x.v[k]) + to_float(bias_v.v[k])) * part_scale);
store_vec<T, VEC>(dst + o, y);`,
    reduces: false,
  });
}

export function biasQkvSplitBackwardSource(spec: BiasQkvSplitBackwardSpec): KernelSource {
  return rowTileSource(qkvConstants(spec), {
    name: kernelIdentifier(biasQkvSplitBackwardKey(spec)),
    params: 'const T* dq, const T* dk, const T* dv, T* d_qkv, u32 seq_len, float q_scale',
    setup: `${QKV_COLUMN}\nconst T* src = part == 0 ? dq : part == 1 ? dk : dv;`,
    body: `${QKV_SPLIT_OFFSET}
const Vec<T, VEC> g = load_vec<T, VEC>(src + o);
Vec<T, VEC> y;
#pragma unroll
for (int k = 0; k < VEC; k++) {
  const float d = to_float(g.v[k]) * part_scale;
  y.v[k] = from_float<T>(d);${accumulate(spec.hasDBias, 'd')}
}
store_vec<T, VEC>(d_qkv + i, y);`,
    reduces: spec.hasDBias,
  });
}

export function biasQkvSplit(host: KernelHost, args: BiasQkvSplitArgs): void {
  const c = new OpCheck('biasQkvSplit', 'cuda');
  const { qkv, bias, q, k, v, qScale, layout } = checkBiasQkvSplit(c, args);
  const dtype = qkv.dtype as FloatDType;
  const ptrs = [qkv, bias, q, k, v].map((t, i) => devicePtr(c, ['qkv', 'bias', 'q', 'k', 'v'][i]!, t));
  const [qkvPtr, biasPtr, qPtr, kPtr, vPtr] = ptrs as [bigint, bigint, bigint, bigint, bigint];
  if (layout.headDim === 0) return;
  const vec = pickVectorWidth(maxVectorElements(dtype), ptrs.map((ptr) => ({ ptr, elementBytes: byteSize(dtype) })), layout.headDim);
  const spec: BiasQkvSplitSpec = { dtype, heads: layout.heads, headDim: layout.headDim, vec };
  const rows = layout.batch * layout.seqLen;
  const tiling = planRowTiles(c, rows, layout.width / vec, false, host.multiProcessorCount);
  launchRowTiles(host, biasQkvSplitKey(spec), () => biasQkvSplitSource(spec), tiling, rows, [
    arg.ptr(qkvPtr), arg.ptr(biasPtr), arg.ptr(qPtr), arg.ptr(kPtr), arg.ptr(vPtr), arg.u32(layout.seqLen), arg.f32(qScale),
  ]);
}

export function biasQkvSplitBackward(host: KernelHost, args: BiasQkvSplitBackwardArgs): void {
  const c = new OpCheck('biasQkvSplitBackward', 'cuda');
  const { dq, dk, dv, dQkv, dBias, qScale, layout } = checkBiasQkvSplitBackward(c, args);
  const dtype = dq.dtype as FloatDType;
  const ptrs = [dq, dk, dv, dQkv].map((t, i) => devicePtr(c, ['dq', 'dk', 'dv', 'dQkv'][i]!, t));
  const [dqPtr, dkPtr, dvPtr, dQkvPtr] = ptrs as [bigint, bigint, bigint, bigint];
  const dBiasPtr = dBias ? devicePtr(c, 'dBias', dBias) : undefined;
  if (layout.headDim === 0) return;
  const hidden = layout.width;
  const vec = pickVectorWidth(maxVectorElements(dtype), ptrs.map((ptr) => ({ ptr, elementBytes: byteSize(dtype) })), layout.headDim);
  const spec: BiasQkvSplitBackwardSpec = { dtype, heads: layout.heads, headDim: layout.headDim, vec, hasDBias: dBias !== undefined };
  const rows = layout.batch * layout.seqLen;
  const tiling = planRowTiles(c, rows, hidden / vec, spec.hasDBias, host.multiProcessorCount);
  const partials = spec.hasDBias ? partialsScratch(host, tiling, hidden) : undefined;
  launchRowTiles(host, biasQkvSplitBackwardKey(spec), () => biasQkvSplitBackwardSource(spec), tiling, rows, [
    arg.ptr(dqPtr), arg.ptr(dkPtr), arg.ptr(dvPtr), arg.ptr(dQkvPtr), arg.u32(layout.seqLen), arg.f32(qScale),
  ], partials);
  if (dBias && dBiasPtr !== undefined && partials !== undefined) launchColumnSumFinalize(host, partials, tiling.rowTiles, hidden, dBias, dBiasPtr, false);
}

// ==== column sum ===================================================================================================

/** out[h] = Σ_rows input[r, h] (or += with accumulate); input [..., H] and out [H] may differ in float dtype. */
export interface ColumnSumArgs {
  input: Tensor;
  out: Tensor;
  accumulate?: boolean;
}

export interface ColumnSumSpec {
  /** The input's dtype (the output's is the finalize kernel's). */
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
}

export function columnSumKey(s: ColumnSumSpec): string {
  return `column_sum.${s.dtype}.h${s.hidden}.v${s.vec}`;
}

export function columnSumSource(spec: ColumnSumSpec): KernelSource {
  return rowTileSource(spec, {
    name: kernelIdentifier(columnSumKey(spec)),
    params: 'const T* input',
    setup: '',
    body: 'const Vec<T, VEC> x = load_vec<T, VEC>(input + i);\n#pragma unroll\nfor (int k = 0; k < VEC; k++) acc[k] += to_float(x.v[k]);',
    reduces: true,
  });
}

export function columnSum(host: KernelHost, args: ColumnSumArgs): void {
  const c = new OpCheck('columnSum', 'cuda');
  const input = c.tensor('input', args.input);
  const out = c.tensor('out', args.out);
  c.float('input', input);
  c.float('out', out);
  c.rows('input', input, 'rows', 'H');
  c.shape('out', out, ['H']);
  const dtype = input.dtype as FloatDType;
  const hidden = c.size('H'), rows = c.size('rows');
  const inputPtr = devicePtr(c, 'input', input), outPtr = devicePtr(c, 'out', out);
  if (hidden === 0) return;
  const vec = pickVectorWidth(maxVectorElements(dtype), [{ ptr: inputPtr, elementBytes: byteSize(dtype) }], hidden);
  const spec: ColumnSumSpec = { dtype, hidden, vec };
  const tiling = planRowTiles(c, rows, hidden / vec, true, host.multiProcessorCount);
  const partials = partialsScratch(host, tiling, hidden);
  launchRowTiles(host, columnSumKey(spec), () => columnSumSource(spec), tiling, rows, [arg.ptr(inputPtr)], partials);
  launchColumnSumFinalize(host, partials, tiling.rowTiles, hidden, out, outPtr, args.accumulate ?? false);
}

// ==== catalog ==========================================================================================================

/** Every kernel of this file with representative specs: each dtype, activation, fusion and a narrow vector. */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    const wide = maxVectorElements(dtype);
    const hidden = 768;
    for (const hasDropout of [true, false]) out.push(biasDropoutResidualSource({ dtype, hidden, vec: wide, hasDropout }));
    for (const hasDBias of [true, false]) out.push(biasDropoutResidualBackwardSource({ dtype, hidden, vec: wide, hasDBias }));
    for (const activation of ACTIVATIONS) {
      out.push(biasActivationDropoutSource({ dtype, hidden: 3072, vec: wide, activation, hasDropout: true }));
      out.push(biasActivationDropoutBackwardSource({ dtype, hidden: 3072, vec: wide, activation, hasDBias: true }));
    }
    out.push(biasActivationDropoutSource({ dtype, hidden, vec: wide, activation: 'gelu', hasDropout: false }));
    for (const rowsInFlight of [2, 4]) for (const staged of [false, true]) out.push(biasActivationDropoutSource({ dtype, hidden: 3072, vec: wide, activation: 'gelu', hasDropout: true, rowsInFlight, staged }));
    if (dtype === 'bf16') for (const activation of ['gelu', 'gelu_tanh'] as const) out.push(biasActivationDropoutSource({ dtype, hidden: 3072, vec: wide, activation, hasDropout: true, rowsInFlight: 2, staged: true, bf16Pairs: true }));
    out.push(biasActivationDropoutBackwardSource({ dtype, hidden, vec: wide, activation: 'relu', hasDBias: false }));
    out.push(biasQkvSplitSource({ dtype, heads: 12, headDim: 64, vec: wide }));
    for (const hasDBias of [true, false]) out.push(biasQkvSplitBackwardSource({ dtype, heads: 12, headDim: 64, vec: wide, hasDBias }));
    out.push(columnSumSource({ dtype, hidden, vec: wide }));
    for (const accumulate of [false, true]) out.push(columnSumFinalizeSource({ dtype, accumulate }));
  }
  // Narrow fallbacks: odd hidden sizes and views at odd offsets (scalar and 2-element vectors).
  out.push(biasDropoutResidualSource({ dtype: 'f16', hidden: 769, vec: 1, hasDropout: true }));
  out.push(biasDropoutResidualSource({ dtype: 'bf16', hidden: 770, vec: 2, hasDropout: true }));
  out.push(biasActivationDropoutBackwardSource({ dtype: 'f32', hidden: 102, vec: 2, activation: 'gelu_tanh', hasDBias: true }));
  out.push(biasQkvSplitSource({ dtype: 'f16', heads: 3, headDim: 10, vec: 2 }));
  out.push(columnSumSource({ dtype: 'f32', hidden: 7, vec: 1 }));
  return out;
}
