// The W8A8 GEMV: int8Linear (backend.ts) for decode's few rows in one kernel, instead of
// int8QuantizeRows → cuBLASLt's int8 GEMM → int8Dequantize (three launches, and an IMMA GEMM whose
// ramp dominates at M ≤ 4: the int8 weights are 1–34 MB a matrix, a few µs at HBM rate).
//
// Each block, after its first weight loads are in flight (before GRID_DEPENDENCY_WAIT: the weights never
// depend on the previous kernel), quantizes the M activation rows itself into shared memory — max |x|
// by a block reduction, then q = clamp(rne(x · (127 / amax)), ±127) with the f32 operations of
// int8QuantizeRows (__fdiv_rn, __fmul_rn, __float2int_rn), so the bytes are the three-op path's. The x
// rows are a few KB read from L2 by every block; the weights are the stream.
// Mapping as kernels/gemv.ts: blocks of 8 warps = CG column groups × KW K-splits; warp (kw, cg) owns R
// output columns (gated: R gate rows and R up rows F + n) and the 512-wide K chunks kw, kw + KW, …; a
// lane reads one 16-byte vector (16 int8 k) of each row a chunk and holds U chunks in flight before
// using any. Products are dp4a (4 int8 MACs into an i32): the i32 sums are exact, so they equal
// cuBLASLt's whatever the order. Reduction by shuffles, across the KW warps through shared memory.
// Epilogue (lane r·M + m writes out[m, n0 + r]): v = acc · rowScale · colScale + bias as
// int8Dequantize writes it, then the activation; gated: act(g)·u.
// Bytes: N·K (weights) + 4·N (scales) + M·K·s (x, per block from L2) + M·N·s (out); ops 2·M·N·K.

import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import type { EpilogueActivation } from './quant-int4.js';
import { activationExpression, EPILOGUE_ACTIVATION_CODE } from './quant-int4.js';
import { constants, kernelIdentifier } from './row-kernels.js';
import { weightLoadCode } from './weight-stream.js';
import type { ForcedGemvPlan, GemvNorm } from './gemv.js';
import type { NormPrologue } from './gemv.js';
import { ARGMAX_COMBINE_CODE, ARGMAX_PACK_CODE, argmaxWriteCode, betterScore, gemvPlanOptions, indentBy, gemvPlanScore, gemvPlanSelects, parseForcedGemvPlans, gemvReduceWriteCode, MAX_VECTORS, normPrologueArgs, normSwitchesKey, NORM_PROLOGUE_STATE, normPrologueCallCode, normPrologueCode, normPrologueFinishCode, RESIDENT_WARPS, WARPS } from './gemv.js';

/** Rows the kernel takes: 4 × 16 B of weights feed 16 dp4a a lane, still under an SM's issue rate at HBM speed. */
export const INT8_GEMV_MAX_ROWS = 4;
/** Shared memory for the quantized rows (M·K bytes). */
export const INT8_GEMV_MAX_ACTIVATION_BYTES = 32 * 1024;

/** int8 k per lane per chunk: one 16-byte vector. */
const WVEC = 16;
const CHUNK = 32 * WVEC;
/** Shared memory an H200 SM holds for blocks. */
const SM_SHARED_BYTES = 227 * 1024;

export interface Int8GemvSpec {
  readonly dtype: FloatDType;
  /** Rows of x (M), 1..INT8_GEMV_MAX_ROWS. */
  readonly rows: number;
  /** Input features, a multiple of 16. */
  readonly K: number;
  /** Output columns a warp computes (R). */
  readonly columns: number;
  /** Warps splitting K (KW: 1, 2, 4 or 8). */
  readonly kWarps: number;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
  /** act(g)·u of gate column n and up column F + n (N, the launch argument, is F). */
  readonly gated: boolean;
  /**
   * normLinear: the rows are norm(x + y + bias) of the residual stream, formed by every block in its
   * prologue (gemv.ts's norm prologue, the same code) before they are quantized; the last block to pass
   * it updates x and writes h.
   */
  readonly norm?: GemvNorm;
  /**
   * The block loops over column tiles (int8GemvLoopSource): a grid of two rounds or more of the resident
   * blocks becomes the resident blocks, each running the wait, the norm prologue and x's quantization once (FUSEFORMER_GEMV_LOOP's
   * family int8; planInt8Gemv sets it).
   */
  readonly loop?: boolean;
  /**
   * RowArgmax (Int8LinearArgs.argmax), as gemv.ts's GemvSpec.argmax: each lane keeps its rows' best packed word
   * over the tiles it writes, combined once a block at the end. Kernel arguments `argmax`, `argmax_classes` last. Not gated.
   */
  readonly argmax?: boolean;
}

export function int8GemvKey(s: Int8GemvSpec): string {
  const norm = s.norm ? `.norm_${s.norm.kind}${normSwitchesKey(s.norm)}` : '';
  return `int8_gemv.${s.dtype}.m${s.rows}.k${s.K}.r${s.columns}.kw${s.kWarps}${s.bias ? '.bias' : ''}.${s.activation}${s.gated ? '.gated' : ''}${norm}${s.loop ? '.loop' : ''}${s.argmax ? '.argmax' : ''}`;
}

function int8GemvShape(s: Int8GemvSpec): { weightRows: number; chunks: number; perWarp: number; unroll: number; groups: number } {
  const weightRows = s.gated ? 2 * s.columns : s.columns;
  const chunks = Math.ceil(s.K / CHUNK);
  const perWarp = Math.ceil(chunks / s.kWarps);
  const unroll = Math.max(1, Math.min(perWarp, Math.floor(MAX_VECTORS / weightRows)));
  return { weightRows, chunks, perWarp, unroll, groups: Math.ceil(perWarp / unroll) };
}

export interface Int8GemvPlan {
  readonly spec: Int8GemvSpec;
  readonly grid: number;
}

/**
 * The tie-break of the planner's last criterion: the narrowest R (default), or the widest
 * (FUSEFORMER_INT8_NARROW=0, the rule until session 17). Measured on the H200 at batch 1 (bench/gemv-sweep.ts,
 * Llama 1.2B): R = 1 was as fast as the widest R or faster at every product — QKV 3.46 against 3.61 µs
 * (R = 4), the gated gate/up 9.55 against 10.04 (R = 2). Takes effect for launches after it is set.
 */
export const int8GemvOptions: { narrow: boolean; forced: readonly ForcedGemvPlan[] } = {
  narrow: process.env['FUSEFORMER_INT8_NARROW'] !== '0',
  forced: parseForcedGemvPlans('FUSEFORMER_INT8_PLAN', process.env['FUSEFORMER_INT8_PLAN']?.trim() ?? ''),
};

/** Rounds of resident blocks a W8A8 grid must span to take the looping form (see planInt8Gemv). */
export const INT8_LOOP_MIN_ROUNDS = 2;

/**
 * As planGemv: the (R, KW) with the most weight bytes in flight per SM up to the target, weighted by
 * how evenly the blocks spread, then the fewest load rounds, the fewest K-splits and the narrowest R
 * (int8GemvOptions). N is the output width (F when gated). FUSEFORMER_INT8_PLAN (a probe, FUSEFORMER_GEMV_PLAN's
 * syntax, no default) forces the (R, KW) of the products an entry selects.
 */
export function planInt8Gemv(dtype: FloatDType, M: number, N: number, K: number, bias: boolean, activation: EpilogueActivation, gated: boolean, multiProcessorCount: number, norm?: GemvNorm): Int8GemvPlan {
  const residentWarps = int8ResidentWarps(dtype, M, K, norm);
  let best: { plan: Int8GemvPlan; score: number[] } | undefined;
  const forced = int8GemvOptions.forced.find((f) => gemvPlanSelects(f, M, N, K, gated, norm !== undefined));
  for (const kWarps of [1, 2, 4, 8]) {
    for (const columns of gated ? [1, 2] : [1, 2, 4]) {
      if (forced && (columns !== forced.columns || kWarps !== forced.kWarps)) continue;
      const spec: Int8GemvSpec = { dtype, rows: M, K, columns, kWarps, bias, activation, gated, ...(norm ? { norm } : {}) };
      const shape = int8GemvShape(spec);
      if (kWarps > shape.chunks && kWarps > 1) continue;
      if (shape.weightRows * M > 16) continue; // the sums a lane holds
      const grid = Math.ceil(N / ((WARPS / kWarps) * columns));
      const score = gemvPlanScore(grid, shape, kWarps, int8GemvOptions.narrow ? -columns : columns, residentWarps, multiProcessorCount);
      if (!best || betterScore(score, best.score)) best = { plan: { spec, grid }, score };
    }
  }
  if (!best) throw new RangeError(`FUSEFORMER_INT8_PLAN: r${forced!.columns}.kw${forced!.kWarps} is not a plan of the W8A8 GEMV for ${M} rows of K ${K}${gated ? ' (gated)' : ''}`);
  // gemvPlanOptions.loop (family int8): a grid of two rounds or more of the resident blocks becomes that
  // many looping blocks. Under two rounds the loop only serialises the leftover tiles: GPT-2's QKV (288 tiles
  // on 264 resident blocks) lost 0.4 µs a layer looping (session 37), Llama's 1024-tile gated product gained.
  const residentBlocks = multiProcessorCount * Math.floor(residentWarps / WARPS);
  if (gemvPlanOptions.loop.has('int8') && best.plan.grid >= INT8_LOOP_MIN_ROUNDS * residentBlocks) {
    return { spec: { ...best.plan.spec, loop: true }, grid: residentBlocks };
  }
  return best.plan;
}

/** Warps an SM holds of the kernel for M rows of K (its shared memory: xq, and with a norm the normed rows). */
function int8ResidentWarps(dtype: FloatDType, M: number, K: number, norm: GemvNorm | undefined): number {
  const blocksBySharedMemory = Math.floor(SM_SHARED_BYTES / (M * K * (norm ? 1 + byteSize(dtype) : 1) + 1024));
  return Math.min(RESIDENT_WARPS, blocksBySharedMemory * WARPS);
}

/** The pieces both forms of the kernel (one tile a block; GemvSpec.loop's looping blocks) are made of. */
function int8GemvParts(spec: Int8GemvSpec) {
  const name = kernelIdentifier(int8GemvKey(spec));
  const norm = spec.norm;
  const { weightRows, chunks, perWarp, unroll, groups } = int8GemvShape(spec);
  const xVec = 16 / byteSize(spec.dtype);
  const value = (i: string, n: string) => `__int2float_rn(${i}) * row_scale[m] * scales[${n}] + ${spec.bias ? `to_float(bias[${n}])` : '0.f'}`;
  const write = spec.gated
    ? String.raw`const float g = ${value('acc[r][m]', 'n')}, u = ${value('acc[R + r][m]', 'N + n')};
        out[(size_t)m * N + n] = from_float<T>(${activationExpression(spec.activation, 'g')} * u);`
    : spec.argmax
      ? String.raw`const float v = ${value('acc[r][m]', 'n')};
        ${argmaxWriteCode(activationExpression(spec.activation, 'v'), 'best[m]', '        ')}`
      : String.raw`const float v = ${value('acc[r][m]', 'n')};
        out[(size_t)m * N + n] = from_float<T>(${activationExpression(spec.activation, 'v')});`;
  const preamble = String.raw`${DEVICE_LIB}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({
    M: spec.rows, K: spec.K, WVEC, VEC: xVec, R: spec.columns, WR: weightRows, KW: spec.kWarps, CG: WARPS / spec.kWarps,
    CHUNK, CHUNKS: chunks, PER_WARP: perWarp, U: unroll, GROUPS: groups, THREADS: WARPS * 32, NWARPS: WARPS, GATED: spec.gated,
  })}
${norm ? normPrologueCode(norm) : ''}
${spec.argmax ? ARGMAX_PACK_CODE : ''}
${weightLoadCode('load_weight', 'signed char', 'int8')}
__device__ __forceinline__ int dp4a(u32 a, u32 b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ int warp_sum_int(int x) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The M rows of x quantized into xq (shared, M × K), as int8QuantizeRows does; row_scale = amax / 127.
// "red": NWARPS · M floats.
__device__ __forceinline__ void quantize_rows(const T* x, signed char* xq, float (&row_scale)[M], float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float amax[M];
  #pragma unroll
  for (int m = 0; m < M; m++) amax[m] = 0.f;
  for (int v = threadIdx.x; v < K / VEC; v += THREADS) {
    #pragma unroll
    for (int m = 0; m < M; m++) {
      float f[VEC];
      load_floats<T, VEC>(x + (size_t)m * K + v * VEC, f, VEC);
      #pragma unroll
      for (int e = 0; e < VEC; e++) amax[m] = fmaxf(amax[m], fabsf(f[e]));
    }
  }
  #pragma unroll
  for (int m = 0; m < M; m++) {
    amax[m] = warp_max(amax[m]);
    if (lane == 0) red[warp * M + m] = amax[m];
  }
  __syncthreads();
  float inv[M];
  #pragma unroll
  for (int m = 0; m < M; m++) {
    float a = red[m];
    #pragma unroll
    for (int w = 1; w < NWARPS; w++) a = fmaxf(a, red[w * M + m]);
    inv[m] = a > 0.f ? __fdiv_rn(127.f, a) : 0.f;
    row_scale[m] = __fdiv_rn(a, 127.f);
  }
  for (int v = threadIdx.x; v < K / VEC; v += THREADS) {
    #pragma unroll
    for (int m = 0; m < M; m++) {
      float f[VEC];
      load_floats<T, VEC>(x + (size_t)m * K + v * VEC, f, VEC);
      Vec<signed char, VEC> q;
      #pragma unroll
      for (int e = 0; e < VEC; e++) q.v[e] = (signed char)max(-127, min(127, __float2int_rn(__fmul_rn(f[e], inv[m]))));
      store_vec<signed char, VEC>(xq + m * K + v * VEC, q);
    }
  }
  __syncthreads();
}`;
  const signature = String.raw`// x [M, K], qweight i8 [N, K] (gated: [2N, K]), scales f32 [N] (gated [2N]), bias [N] (gated [2N]) or
// null, out [M, N]. Grid ceil(N / (CG·R)), block THREADS.${norm ? `
// Norm prologue: x is unused; rx [M, K] the residual stream (updated in place), y [M, K] (Y), rbias [K],
// gamma, beta [K], h [M, K] the normed rows, counter a zeroed u32 (left zero).` : ''}
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const T* __restrict__ x, const signed char* __restrict__ w, const float* __restrict__ scales,
    const T* __restrict__ bias, T* __restrict__ out, int N${norm ? `,
    T* rx, const Y* __restrict__ y, const T* __restrict__ rbias, const T* __restrict__ gamma, const T* __restrict__ beta,
    T* __restrict__ h, float eps, unsigned int* __restrict__ counter` : ''}${spec.argmax ? `,
    unsigned long long* __restrict__ argmax, int argmax_classes` : ''}) {
  __shared__ __align__(16) signed char xq[M * K];${spec.argmax ? `
  __shared__ unsigned long long argmax_s[NWARPS][M];
  unsigned long long best[M];
  #pragma unroll
  for (int m = 0; m < M; m++) best[m] = 0ull;` : ''}${norm ? `
  __shared__ __align__(16) T act_s[M * K];
  ${NORM_PROLOGUE_STATE}
  NormWeights pre;
  load_norm_weights(pre, gamma, beta);` : ''}
  __shared__ int partial[KW > 1 ? (KW - 1) * CG * WR * M : 1];
  __shared__ float red[NWARPS * M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kw = warp % KW, cg = warp / KW;`;
  // The wait for the kernel that writes x (programmatic launch), then the rows quantized into xq.
  const waitAndQuantize = (pad: string) => String.raw`${pad}GRID_DEPENDENCY_WAIT();${norm ? `
${pad}${normPrologueCallCode('rx')}
${pad}quantize_rows(act_s, xq, row_scale, red);` : `
${pad}quantize_rows(x, xq, row_scale, red);`}`;
  // Group g's U × WR weight vectors of the warp's chunks kw, kw + KW, … (zeros past K) into wv.
  const loadGroup = (pad: string, g: string) => String.raw`${pad}#pragma unroll
${pad}for (int u = 0; u < U; u++) {
${pad}  const int j = ${g} * U + u, k = (kw + j * KW) * CHUNK + lane * WVEC;
${pad}  #pragma unroll
${pad}  for (int r = 0; r < WR; r++) wv[u][r] = j < PER_WARP && k < K ? load_weight(rows[r] + k) : make_uint4(0u, 0u, 0u, 0u);
${pad}}`;
  // Group g's dot products: acc[r][m] += wv[u][r] · xq[m, k…k+15] by dp4a.
  const dotGroup = (pad: string, g: string) => String.raw`${pad}#pragma unroll
${pad}for (int u = 0; u < U; u++) {
${pad}  const int j = ${g} * U + u, k = (kw + j * KW) * CHUNK + lane * WVEC;
${pad}  if (j < PER_WARP && k < K) {
${pad}    #pragma unroll
${pad}    for (int m = 0; m < M; m++) {
${pad}      const uint4 a = *reinterpret_cast<const uint4*>(xq + m * K + k);
${pad}      #pragma unroll
${pad}      for (int r = 0; r < WR; r++) {
${pad}        int s = acc[r][m];
${pad}        s = dp4a(wv[u][r].x, a.x, s);
${pad}        s = dp4a(wv[u][r].y, a.y, s);
${pad}        s = dp4a(wv[u][r].z, a.z, s);
${pad}        acc[r][m] = dp4a(wv[u][r].w, a.w, s);
${pad}      }
${pad}    }
${pad}  }
${pad}}`;
  // Warp (kw, cg)'s weight rows of the tile whose first column is `first` (gated: and the up rows N + n).
  const tileRows = (pad: string, first: string) => String.raw`${pad}#pragma unroll
${pad}for (int r = 0; r < R; r++) {
${pad}  const int n = min(${first} + r, N - 1); // columns past N compute a copy of the last and are not written
${pad}  rows[r] = w + (size_t)n * K;
${pad}  if constexpr (GATED) rows[R + r] = w + (size_t)(N + n) * K;
${pad}}`;
  const zeroSums = (pad: string) => String.raw`${pad}#pragma unroll
${pad}for (int r = 0; r < WR; r++)
${pad}  #pragma unroll
${pad}  for (int m = 0; m < M; m++) acc[r][m] = 0;`;
  return { name, norm, preamble, signature, write, waitAndQuantize, loadGroup, dotGroup, tileRows, zeroSums };
}

export function int8GemvSource(spec: Int8GemvSpec): KernelSource {
  if (spec.loop) return int8GemvLoopSource(spec);
  const { name, norm, preamble, signature, write, waitAndQuantize, loadGroup, dotGroup, tileRows, zeroSums } = int8GemvParts(spec);
  const source = String.raw`${preamble}

${signature}
  const int n0 = (blockIdx.x * CG + cg) * R;
  const signed char* rows[WR];
${tileRows('  ', 'n0')}
  int acc[WR][M];
${zeroSums('  ')}
  float row_scale[M];

  #pragma unroll
  for (int g = 0; g < GROUPS; g++) {
    uint4 wv[U][WR];
${loadGroup('    ', 'g')}
    // The first loads are in flight before waiting for the kernel that writes x (programmatic launch).
    if (g == 0) {
${waitAndQuantize('      ')}
    }
${dotGroup('    ', 'g')}
  }
  GRID_DEPENDENCY_TRIGGER();
${norm ? normPrologueFinishCode('rx') : ''}
${spec.argmax ? `${gemvReduceWriteCode('acc', 'warp_sum_int', write, true)}
${ARGMAX_COMBINE_CODE}` : gemvReduceWriteCode('acc', 'warp_sum_int', write)}
}
`;
  return { name, source, gridDependencyWait: true };
}

/**
 * Int8GemvSpec.loop's kernel: the block loops over column tiles (tile = blockIdx.x, then + gridDim.x while
 * below ⌈N / (CG·R)⌉), as gemv.ts's looping form: the wait, the norm prologue and the quantization of x run
 * once a block, before the first tile; each next tile's first group of weight loads is issued before the
 * finished tile's reduction and write.
 */
function int8GemvLoopSource(spec: Int8GemvSpec): KernelSource {
  const { name, norm, preamble, signature, write, waitAndQuantize, loadGroup, dotGroup, tileRows, zeroSums } = int8GemvParts(spec);
  const source = String.raw`${preamble}

${signature}
  const int tiles = (N + CG * R - 1) / (CG * R);
  int tile = blockIdx.x, n0 = (tile * CG + cg) * R;
  const signed char* rows[WR];
${tileRows('  ', 'n0')}
  int acc[WR][M];
  float row_scale[M];
  uint4 wv[U][WR];
${loadGroup('  ', '0')}
  // The first loads are in flight before waiting for the kernel that writes x (programmatic launch).
${waitAndQuantize('  ')}
  while (true) {
${zeroSums('    ')}
    #pragma unroll
    for (int g = 0; g < GROUPS; g++) {
      if (g > 0) {
${loadGroup('        ', 'g')}
      }
${dotGroup('      ', 'g')}
    }
    // The next tile's first loads go out now, into the registers this tile's products have freed.
    const int next = tile + gridDim.x;
    if (next < tiles) {
${tileRows('      ', '(next * CG + cg) * R')}
${loadGroup('      ', '0')}
    } else {
      GRID_DEPENDENCY_TRIGGER();
    }
${indentBy(gemvReduceWriteCode('acc', 'warp_sum_int', write, true), '  ')}
    if (next >= tiles) break;
    tile = next;
    n0 = (tile * CG + cg) * R;
  }
${norm ? normPrologueFinishCode('rx') : ''}${spec.argmax ? ARGMAX_COMBINE_CODE : ''}
}
`;
  return { name, source, gridDependencyWait: true };
}

/** An int8Linear as the GEMV reads it: its sizes and device pointers (bias 0n when absent). */
export interface Int8GemvLaunch {
  readonly dtype: FloatDType;
  readonly M: number;
  /** Weight rows (gated: 2F). */
  readonly N: number;
  readonly K: number;
  readonly gated: boolean;
  readonly activation: EpilogueActivation;
  readonly x: bigint;
  readonly qweight: bigint;
  readonly scales: bigint;
  readonly bias: bigint;
  readonly out: bigint;
  /** RowArgmax's slots (u64 [M]) and classes, or none. */
  readonly argmax?: { readonly out: bigint; readonly classes: number };
}

/** Whether the GEMV takes it: 1–4 rows, K a multiple of 16, the M × K bytes within its shared memory, x and qweight 16-byte aligned. */
export function int8GemvApplies(a: Int8GemvLaunch): boolean {
  return a.M >= 1 && a.M <= INT8_GEMV_MAX_ROWS && a.K % WVEC === 0 && a.M * a.K <= INT8_GEMV_MAX_ACTIVATION_BYTES
    && a.x % 16n === 0n && a.qweight % 16n === 0n;
}

/** Blocks of a launch of `spec` over `width` output columns (F when gated); a looping spec's at most the resident blocks. */
export function int8GemvGrid(spec: Int8GemvSpec, width: number, multiProcessorCount?: number): number {
  const tiles = Math.ceil(width / ((WARPS / spec.kWarps) * spec.columns));
  if (!spec.loop) return tiles;
  if (multiProcessorCount === undefined) throw new RangeError('int8GemvGrid: a looping spec needs the SM count');
  return Math.min(tiles, multiProcessorCount * Math.floor(int8ResidentWarps(spec.dtype, spec.rows, spec.K, spec.norm) / WARPS));
}

/** Launches of the looping form (Int8GemvSpec.loop) in this process (tests check that a case took it). */
export const int8GemvLoopStats = { launches: 0 };

/** Every (R, KW) the kernel takes for these rows and K (bench/gemv-sweep.ts times them against the planner's pick). */
export function int8GemvSpace(dtype: FloatDType, M: number, K: number, bias: boolean, activation: EpilogueActivation, gated: boolean): Int8GemvSpec[] {
  const out: Int8GemvSpec[] = [];
  for (const kWarps of [1, 2, 4, 8]) {
    for (const columns of gated ? [1, 2] : [1, 2, 4]) {
      const spec: Int8GemvSpec = { dtype, rows: M, K, columns, kWarps, bias, activation, gated };
      const shape = int8GemvShape(spec);
      if ((kWarps > shape.chunks && kWarps > 1) || shape.weightRows * M > 16) continue;
      out.push(spec);
    }
  }
  return out;
}

/** Shared memory the norm prologue's rows (T) and their quantized copy (i8) may take: M·K·(s + 1) bytes. */
export const INT8_NORM_MAX_BYTES = 40 * 1024;

/** Whether the GEMV with the norm prologue takes it (the norm's own conditions are gemv.ts's normGemvApplies). */
export function int8NormGemvApplies(a: Int8GemvLaunch): boolean {
  return int8GemvApplies({ ...a, x: 0n }) && a.M * a.K * (1 + byteSize(a.dtype)) <= INT8_NORM_MAX_BYTES;
}

/** Launches the kernel with the planner's spec, or `spec` (the sweep); with `prologue`, the normLinear form (a.x unused). */
export function launchInt8Gemv(host: KernelHost, a: Int8GemvLaunch, forced?: Int8GemvSpec, prologue?: NormPrologue): void {
  const width = a.gated ? a.N / 2 : a.N;
  const planned = forced ?? planInt8Gemv(a.dtype, a.M, width, a.K, a.bias !== 0n, a.activation, a.gated, host.multiProcessorCount, prologue?.norm).spec;
  const spec: Int8GemvSpec = a.argmax ? { ...planned, argmax: true } : planned;
  const grid = int8GemvGrid(spec, width, host.multiProcessorCount);
  if (spec.loop) int8GemvLoopStats.launches++;
  const normArgs = prologue ? normPrologueArgs(host, prologue) : [];
  host.kernel(int8GemvKey(spec), () => int8GemvSource(spec)).launch({ grid, block: WARPS * 32 }, [
    arg.ptr(prologue ? 0n : a.x), arg.ptr(a.qweight), arg.ptr(a.scales), arg.ptr(a.bias), arg.ptr(a.out), arg.i32(width), ...normArgs,
    ...(a.argmax ? [arg.ptr(a.argmax.out), arg.i32(a.argmax.classes)] : []),
  ]);
}

/** Representative plans for the nvcc compile check (132 SMs): Llama and GPT-2 decode shapes, gated, f32, odd N. */
export function catalog(): KernelSource[] {
  const plans: [FloatDType, number, number, number, boolean, EpilogueActivation, boolean][] = [
    ['bf16', 1, 3072, 2048, false, 'none', false],
    ['bf16', 1, 2048, 8192, false, 'none', false],
    ['bf16', 4, 128256, 2048, false, 'none', false],
    ['bf16', 1, 8192, 2048, false, 'silu', true],
    ['f16', 3, 2304, 768, true, 'gelu_tanh', false],
    ['f32', 2, 131, 112, true, 'relu', false],
    ['f16', 4, 300, 1024, true, 'gelu', true],
  ];
  const normed: [FloatDType, number, number, number, boolean, EpilogueActivation, boolean, GemvNorm][] = [
    ['bf16', 1, 3072, 2048, false, 'none', false, { kind: 'rms', residual: true, bias: false }],
    ['bf16', 4, 8192, 2048, false, 'silu', true, { kind: 'rms', residual: true, bias: false }],
    ['f16', 2, 2304, 768, true, 'none', false, { kind: 'layer', residual: true, bias: true }],
    ['f32', 1, 132, 112, true, 'gelu_tanh', false, { kind: 'layer', residual: false, bias: false }],
    ['bf16', 1, 3072, 2048, false, 'none', false, { kind: 'rms', residual: true, bias: false, preload: true }],
    // The last block writing x and h right after its prologue (FUSEFORMER_NORM_WRITE: early; deferred at four rows), and a norm that only reads x.
    ['bf16', 1, 8192, 2048, false, 'silu', true, { kind: 'rms', residual: true, bias: false, preload: true, write: 'early' }],
    ['f16', 1, 2304, 768, true, 'none', false, { kind: 'layer', residual: false, bias: false, write: 'early' }],
    ['bf16', 4, 8192, 2048, false, 'silu', true, { kind: 'rms', residual: true, bias: false, write: 'deferred' }],
    // LayerNorm in one pass (FUSEFORMER_NORM_ONE_PASS): GPT-2's QKV at two rows.
    ['bf16', 2, 2304, 768, true, 'none', false, { kind: 'layer', residual: true, bias: true, preload: true, write: 'deferred', onePass: true }],
    // An f32 y (a fused MLP's accumulator) beside bf16 x: GPT-2's QKV at one row, Llama's at four.
    ['bf16', 1, 2304, 768, true, 'none', false, { kind: 'layer', residual: true, bias: true, preload: true, write: 'deferred', onePass: true, yF32: true }],
    ['bf16', 4, 3072, 2048, false, 'none', false, { kind: 'rms', residual: true, bias: false, preload: true, write: 'deferred', yF32: true }],
  ];
  return [
    ...plans.map(([dtype, M, N, K, bias, act, gated]) => int8GemvSource(planInt8Gemv(dtype, M, N, K, bias, act, gated, 132).spec)),
    ...normed.map(([dtype, M, N, K, bias, act, gated, norm]) => int8GemvSource(planInt8Gemv(dtype, M, N, K, bias, act, gated, 132, norm).spec)),
    // The looping form (Int8GemvSpec.loop): Llama's gated product with its prologue, a K split four ways (the
    // guarded partial sums), GPT-2's LM head at three rows.
    int8GemvSource({ ...planInt8Gemv('bf16', 1, 8192, 2048, false, 'silu', true, 132, { kind: 'rms', residual: true, bias: false, preload: true, write: 'deferred' }).spec, loop: true }),
    int8GemvSource({ dtype: 'bf16', rows: 2, K: 4096, columns: 1, kWarps: 4, bias: true, activation: 'gelu', gated: false, loop: true }),
    int8GemvSource({ ...planInt8Gemv('f16', 3, 50257, 768, true, 'none', false, 132).spec, loop: true }),
    // An INT8 LM head packing its greedy picks (Int8GemvSpec.argmax): Llama's at one row as planned, GPT-2's one tile a block.
    int8GemvSource({ ...planInt8Gemv('bf16', 1, 128256, 2048, false, 'none', false, 132).spec, argmax: true }),
    int8GemvSource({ dtype: 'bf16', rows: 2, K: 768, columns: 2, kWarps: 2, bias: false, activation: 'none', gated: false, argmax: true }),
  ];
}
