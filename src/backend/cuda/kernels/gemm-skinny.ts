// Skinny GEMM: out[M, N] = ep(x[M, K]·w[N, K]ᵀ + bias) for 5 ≤ M ≤ 64 rows on the tensor cores, the
// weights streamed once through a cp.async pipeline — a decode step of a batch of sequences (the decode
// engine at batch 32, the serving engine's decode buckets), where cuBLASLt read Llama 1.2B's matrices at
// 1.5–3.2 TB/s on the H200 and its other algorithms did no better (gemm.ts, AUTOTUNE_MIN_FLOPS), and
// the mma GEMV (gemv-mma.ts: fragments straight from global memory, every warp re-reading all M rows of
// x from L1/L2 for each 16 features) was slower still. Gated: act(x·w_gᵀ + b_g) ⊙ (x·w_uᵀ + b_u) with the
// gate rows n and the up rows N + n of one [2N, K] weight (gatedLinear).
//
// Block: 4 warps, BN = 4·16·FT output features (gated: 4·16·FT gate rows and as many up rows), all M
// rows (NT = ⌈M / 8⌉ rounded up to even row tiles of 8; rows past M are zeros), and one split of K.
// Pipeline: K in chunks of 64; STAGES stages in dynamic shared memory, each the chunk's weight rows and
// x rows, 128-byte rows with the 128-byte XOR swizzle (mma-lib.ts); chunk c + STAGES − 1 is issued by
// cp.async before chunk c is computed, so STAGES − 1 chunks of weights are in flight per block
// (16 KiB each at BN = 128). The first stages' weight copies are issued before GRID_DEPENDENCY_WAIT
// (the weights never depend on the previous kernel), their x copies after it. Rows past N and k past K
// are zero-filled (cp.async with src-size 0) and never stored.
// Fragments: mma.sync m16n8k16 with the weights as A (16 features × 16 k, ldmatrix.x4 from the
// [feature][k] tile) and x as B (16 k × 8 rows, ldmatrix.x4 giving two row tiles from the [row][k]
// tile), so C is [feature][row]: lane (g, t) holds features base + g (+ 8) of rows 8j + 2t (+ 1).
// Split-K (grid.y = S, 2 ≤ S ≤ 8, chosen so the grid covers the SMs): the S blocks of a feature tile
// form one thread-block cluster. Each writes its f32 sums into its own shared memory (the drained
// stages), the cluster synchronises, and block r adds up rows r, r + S, … of the tile from all S
// blocks' shared memory (distributed shared memory, in split order: deterministic), applies the
// epilogue and writes out; a second cluster barrier keeps every block's sums alive until all are read.
// (The first version combined through global partials, the last block of a tile adding all S of them
// alone: on the H200, session 11, ~2.5 µs a split — 32×2048×2048 took 26 µs, cuBLASLt 5.8. This one:
// 7.3 µs there, Llama 1.2B's down projection 16.0 µs against cuBLASLt's 13.8, the step at batch 32
// 1.262 against 1.109 ms/token — hence opt-in: 4 warps and ≤ 48 KiB of weights in flight a block
// stream slower than cuBLASLt's kernels.)
// Bytes: N·K·s of weights once, M·K·s of x per feature tile (L2 hits after the first); the combine
// stays on chip.
// Precision: f32 products and sums of the stored 16-bit values (as cuBLASLt with f32 compute).

import type { Activation, GemmEpilogue } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { CudaTensor } from '../runtime/tensor.js';
import type { CheckedGemm } from '../gemm-plan.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { CLUSTER_LIB, DEVICE_LIB, typedefLine } from './device-lib.js';
import { GEMV_EPILOGUES, gemvOutputCode } from './gemv.js';
import type { CheckedGatedLinear } from './gemv.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, kernelIdentifier } from './row-kernels.js';

/** Rows the kernel takes: fewer are gemv.ts's, more are cuBLASLt's. */
export const SKINNY_MIN_ROWS = 5;
export const SKINNY_MAX_ROWS = 64;
/** k of one pipeline chunk (a 128-byte row of 16-bit elements). */
export const SKINNY_CHUNK_K = 64;
/** Warps of a block unless the spec says otherwise. */
export const SKINNY_WARPS = 4;
export const SKINNY_EPILOGUES: readonly GemmEpilogue[] = GEMV_EPILOGUES;
/** Chunks a split takes at least, so its pipeline has something to overlap. */
const MIN_CHUNKS_PER_SPLIT = 4;
/** Resident blocks an SM the split count aims for (two of ≤ 96 KiB of stages). */
const TARGET_BLOCKS_PER_SM = 2;
/** Splits of K at most: the blocks of a cluster (the largest portable cluster). */
export const SKINNY_MAX_SPLITS = 8;
/** Pipeline stages: 4 (two blocks an SM), 6 when the grid has one block an SM or fewer (more bytes in flight each). */
const STAGES = 4, STAGES_ONE_PER_SM = 6;
/** Extra floats a row of the combine's shared sums carries, so the fragments' stores miss no bank twice. */
const COMBINE_PAD = 4;

export interface SkinnyGemmSpec {
  readonly dtype: 'bf16' | 'f16';
  /** Row tiles of 8 (even, ≤ 8): the kernel takes M ≤ 8·NT (M is an argument). */
  readonly rowTiles: number;
  /** Feature tiles of 16 a warp computes (gated: of the gate, and as many of the up rows). */
  readonly featureTiles: number;
  /** Pipeline stages (3..6). */
  readonly stages: number;
  /** Splits of K, the blocks of a cluster (1 = unsplit, no cluster; ≤ SKINNY_MAX_SPLITS). */
  readonly splits: number;
  /** Warps of a block, 4 or 8 (default SKINNY_WARPS): BN = warps·16·featureTiles features. */
  readonly warps?: 4 | 8;
  readonly epilogue: GemmEpilogue;
  readonly gate?: { readonly activation: Activation; readonly bias: boolean };
}

export function skinnyGemmKey(s: SkinnyGemmSpec): string {
  const tail = s.gate ? `gated_${s.gate.activation}${s.gate.bias ? '_bias' : ''}` : s.epilogue;
  return `gemm_skinny.${s.dtype}.nt${s.rowTiles}.ft${s.featureTiles}.s${s.stages}${s.splits > 1 ? `.k${s.splits}` : ''}${warpsOf(s) !== SKINNY_WARPS ? `.w${warpsOf(s)}` : ''}.${tail}`;
}

/** The spec's warps a block. */
export function warpsOf(spec: Pick<SkinnyGemmSpec, 'warps'>): number {
  return spec.warps ?? SKINNY_WARPS;
}

export interface SkinnyGemmPlan {
  readonly spec: SkinnyGemmSpec;
  /** [feature tiles, K splits]. */
  readonly grid: readonly [number, number];
  /** Output features a block computes. */
  readonly blockFeatures: number;
}

/** Weight rows of a block's tile: BN, gated 2·BN. */
function weightRows(spec: SkinnyGemmSpec): number {
  return (spec.gate ? 2 : 1) * warpsOf(spec) * 16 * spec.featureTiles;
}

/** Bytes of one pipeline stage: the chunk's weight rows and x rows, 128 bytes each. */
export function skinnyStageBytes(spec: SkinnyGemmSpec): number {
  return (weightRows(spec) + 8 * spec.rowTiles) * 128;
}

/** Dynamic shared memory of a block: its stages, which the split combine reuses for the block's sums. */
export function skinnySharedBytes(spec: SkinnyGemmSpec): number {
  const combine = spec.splits > 1 ? 8 * spec.rowTiles * (weightRows(spec) + COMBINE_PAD) * 4 : 0;
  return Math.max(spec.stages * skinnyStageBytes(spec), combine);
}

/**
 * The plan for M rows, N outputs (gated: N = F), K inputs: two feature tiles a warp (one each of gate
 * and up when gated; one when two would leave the SMs short of blocks even split), and K split — at
 * most SKINNY_MAX_SPLITS ways, each split keeping MIN_CHUNKS_PER_SPLIT chunks — so the grid holds about
 * TARGET_BLOCKS_PER_SM blocks an SM; six stages where it holds one block an SM or fewer, else four.
 */
export function planSkinnyGemm(dtype: 'bf16' | 'f16', M: number, N: number, K: number, epilogue: GemmEpilogue, gate: SkinnyGemmSpec['gate'], multiProcessorCount: number): SkinnyGemmPlan {
  if (M < 1 || M > SKINNY_MAX_ROWS) throw new RangeError(`planSkinnyGemm: ${M} rows: the kernel takes 1..${SKINNY_MAX_ROWS}`);
  const rowTiles = 2 * Math.ceil(M / 16), chunks = Math.ceil(K / SKINNY_CHUNK_K);
  const maxSplits = Math.max(1, Math.min(SKINNY_MAX_SPLITS, Math.floor(chunks / MIN_CHUNKS_PER_SPLIT)));
  const tilesOf = (featureTiles: number) => Math.ceil(N / (SKINNY_WARPS * 16 * featureTiles));
  const featureTiles = gate || tilesOf(2) * maxSplits < multiProcessorCount ? 1 : 2;
  const blockFeatures = SKINNY_WARPS * 16 * featureTiles, tiles = tilesOf(featureTiles);
  const wanted = Math.ceil((TARGET_BLOCKS_PER_SM * multiProcessorCount) / tiles);
  const splits = Math.max(1, Math.min(wanted, maxSplits));
  const stages = tiles * splits <= multiProcessorCount ? STAGES_ONE_PER_SM : STAGES;
  const spec: SkinnyGemmSpec = { dtype, rowTiles, featureTiles, stages, splits, epilogue, ...(gate ? { gate } : {}) };
  return { spec, grid: [tiles, splits], blockFeatures };
}

/**
 * The output code of the skinny GEMMs (this one and gemm-stream.ts), for a kernel that defines T, M, N,
 * n0, tid, warp, g, FT, WT, NT, BN, THREADS, SPLITS, acc[WT][NT][4], tile_row(i), row_of(j, q),
 * FOR_EACH_FRAGMENT and its epilogue (gemvOutputCode): `combine` — split-K, every split's sums into its
 * block's shared memory (`region`, rows `pitch` floats apart), the cluster synchronises, and block r adds
 * up elements r·THREADS, … of the tile from all SPLITS blocks (distributed shared memory, in split
 * order: deterministic) and writes them; `direct` — unsplit, each fragment value straight out.
 * `consumers` guards the fragment stores (the threads that hold accumulators; '' for all).
 */
export function skinnyOutputCode(gate: SkinnyGemmSpec['gate'], o: { region: string; pitch: string; consumers: string; accumulate?: boolean }): { combine: string; direct: string } {
  // Output of C fragment value v at feature n, row m (gated: gate tile i's value and up tile FT + i's;
  // accumulate: added to what out holds, GEMM's beta = 1).
  const write = gate
    ? String.raw`const float gv = vg${gate.bias ? ' + to_float(bias[n])' : ''}, uv = vu${gate.bias ? ' + to_float(bias[N + n])' : ''};
        out[(size_t)m * N + n] = from_float<T>(activate(gv) * uv);`
    : o.accumulate ? 'out[(size_t)m * N + n] = from_float<T>(epilogue(vg, bias, n) + to_float(out[(size_t)m * N + n]));'
    : 'out[(size_t)m * N + n] = from_float<T>(epilogue(vg, bias, n));';
  const guard = o.consumers === '' ? '' : `if (${o.consumers}) `;
  const combine = String.raw`  __syncthreads();  // every warp is done with the stages: they now take this block's sums [row][weight row]
  float* sums = reinterpret_cast<float*>(${o.region});
  ${guard}{ FOR_EACH_FRAGMENT(WT) sums[row_of(j, q) * ${o.pitch} + tile_row(i) + g + 8 * (q >> 1)] = acc[i][j][q]; }
  cluster_sync();  // every split's sums are in its block's shared memory
  // Block r of the cluster combines elements r·THREADS, … of the tile: output (m, n0 + f) for each
  // element e = m·BN + f it takes, all SPLITS sums of it loaded before any is added (then in split order).
  for (int e = (int)cluster_rank() * THREADS + tid; e < M * BN; e += SPLITS * THREADS) {
    const int m = e / BN, f = e % BN, n = n0 + f;
    if (n >= N) continue;
    float gate_part[SPLITS]${gate ? ', up_part[SPLITS]' : ''};
    #pragma unroll
    for (int s = 0; s < SPLITS; s++) {
      gate_part[s] = cluster_load(&sums[m * ${o.pitch} + f], s);${gate ? `
      up_part[s] = cluster_load(&sums[m * ${o.pitch} + BN + f], s);` : ''}
    }
    float vg = 0.f${gate ? ', vu = 0.f' : ''};
    #pragma unroll
    for (int s = 0; s < SPLITS; s++) { vg += gate_part[s];${gate ? ' vu += up_part[s];' : ''} }
    ${write}
  }
  cluster_sync();  // no block leaves while another may still read its sums
`;
  const direct = String.raw`  ${guard}{
    FOR_EACH_FRAGMENT(FT) {
      const int n = n0 + (warp * FT + i) * 16 + g + 8 * (q >> 1), m = row_of(j, q);
      if (n < N && m < M) {
        const float vg = acc[i][j][q]${gate ? ', vu = acc[FT + i][j][q]' : ''};
        ${write}
      }
    }
  }
`;
  return { combine, direct };
}

/** A checked GEMM's operands for a skinny kernel. */
export function skinnyGemmOperands(g: CheckedGemm): SkinnyLaunch {
  const p = g.problem;
  return { x: g.a.ptr, w: g.b.ptr, bias: g.bias?.ptr ?? 0n, out: g.out.ptr, M: p.M, N: p.N, K: p.K };
}

/** A checked gatedLinear's operands (N = F; the scratch `up` is not written) and its gate for a skinny kernel. */
export function skinnyGatedOperands(g: CheckedGatedLinear): { operands: SkinnyLaunch; gate: NonNullable<SkinnyGemmSpec['gate']> } {
  const ptr = (t: Tensor | undefined) => (t ? (t as CudaTensor).ptr : 0n);
  return {
    operands: { x: ptr(g.x), w: ptr(g.weight), bias: ptr(g.bias), out: ptr(g.out), M: g.rows, N: g.F, K: g.K },
    gate: { activation: g.activation, bias: g.bias !== undefined },
  };
}

export function skinnyGemmSource(spec: SkinnyGemmSpec): KernelSource {
  const name = kernelIdentifier(skinnyGemmKey(spec));
  const gate = spec.gate, FT = spec.featureTiles, WT = gate ? 2 * FT : FT, NT = spec.rowTiles;
  if (NT < 2 || NT > 8 || NT % 2 !== 0) throw new RangeError(`skinnyGemmSource: row tiles must be 2, 4, 6 or 8, got ${NT}`);
  const WROWS = weightRows(spec), BN = warpsOf(spec) * 16 * FT, S = spec.splits;
  if (spec.warps !== undefined && spec.warps !== 4 && spec.warps !== 8) throw new RangeError(`skinnyGemmSource: warps must be 4 or 8, got ${spec.warps}`);
  if (!Number.isInteger(S) || S < 1 || S > SKINNY_MAX_SPLITS) throw new RangeError(`skinnyGemmSource: splits must be 1..${SKINNY_MAX_SPLITS}, got ${S}`);
  const { combine, direct } = skinnyOutputCode(gate, { region: 'stages', pitch: 'PITCH', consumers: '' });
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${typedefLine('T', spec.dtype)}
${CLUSTER_LIB}
${constants({ NT, FT, WT, BN, WROWS, XROWS: 8 * NT, STAGES: spec.stages, STAGE_BYTES: skinnyStageBytes(spec), CHUNK: SKINNY_CHUNK_K, THREADS: warpsOf(spec) * 32, GATED: gate !== undefined, SPLITS: S, PITCH: WROWS + COMBINE_PAD })}

${gemvOutputCode(spec.epilogue, gate, 'mma')}
// Every C fragment value (i, j, q) of the first TILES weight tiles: tile i, row tile j, register q.
#define FOR_EACH_FRAGMENT(TILES) \
  _Pragma("unroll") for (int i = 0; i < (TILES); i++) _Pragma("unroll") for (int j = 0; j < NT; j++) _Pragma("unroll") for (int q = 0; q < 4; q++)

// x [M, K], w [N, K] (gated: [2N, K]), bias [N] (gated: [2N]) or null, out [M, N].
// Grid (⌈N / BN⌉, SPLITS), block THREADS; the SPLITS blocks of a feature tile are one cluster.
extern "C" __global__ void ${S > 1 ? `__cluster_dims__(1, ${S}, 1) ` : ''}__launch_bounds__(THREADS, 2) ${name}(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char stages[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * BN, split = blockIdx.y, splits = SPLITS;
  const int chunks = (K + CHUNK - 1) / CHUNK;
  const int c_begin = (int)((long long)split * chunks / splits), c_end = (int)((long long)(split + 1) * chunks / splits);
  const u32 base = smem_u32(stages);

  // One chunk's copies: weight rows [0, WROWS) (gated: the gate rows n0.., then the up rows N + n0..),
  // then x rows [0, XROWS); 8 chunks of 16 bytes a row.
  const auto load_weights = [&](int stage, int c) {
    const u32 tile = base + stage * STAGE_BYTES;
    for (int i = tid; i < WROWS * 8; i += THREADS) {
      const int r = i >> 3, ch = i & 7, k = c * CHUNK + 8 * ch;
      const int f = n0 + (GATED && r >= BN ? r - BN : r);
      const bool ok = f < N && k < K;
      const T* src = w + (size_t)((GATED && r >= BN ? N : 0) + (ok ? f : 0)) * K + (ok ? k : 0);
      cp_async_16(tile + swizzled_offset<8>(r, ch), src, ok);
    }
  };
  const auto load_x = [&](int stage, int c) {
    const u32 tile = base + stage * STAGE_BYTES + WROWS * 128;
    for (int i = tid; i < XROWS * 8; i += THREADS) {
      const int r = i >> 3, ch = i & 7, k = c * CHUNK + 8 * ch;
      const bool ok = r < M && k < K;
      cp_async_16(tile + swizzled_offset<8>(r, ch), x + (ok ? (size_t)r * K + k : 0), ok);
    }
  };

  // Prologue: the weights of the first STAGES − 1 chunks before waiting for the kernel that writes x.
  #pragma unroll
  for (int s = 0; s < STAGES - 1; s++)
    if (c_begin + s < c_end) load_weights(s, c_begin + s);
  GRID_DEPENDENCY_WAIT();
  #pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (c_begin + s < c_end) load_x(s, c_begin + s);
    cp_async_commit();  // group s: stage s's x (group 0 also holds every prologue weight copy)
  }

  float acc[WT][NT][4];
  FOR_EACH_FRAGMENT(WT) acc[i][j][q] = 0.f;

  // Weight tile i of this warp: rows (gated: gate tiles, then the up rows' tiles at BN + …).
  const auto tile_row = [&](int i) { return (GATED && i >= FT ? BN : 0) + (warp * FT + (i % FT)) * 16; };

  #pragma unroll 1
  for (int c = c_begin; c < c_end; c++) {
    const int it = c - c_begin;
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // chunk c is in shared memory; every warp is done with the stage refilled next
    const int next = c + STAGES - 1;
    if (next < c_end) { load_weights((it + STAGES - 1) % STAGES, next); load_x((it + STAGES - 1) % STAGES, next); }
    cp_async_commit();
    const u32 wtile = base + (it % STAGES) * STAGE_BYTES, xtile = wtile + WROWS * 128;
    #pragma unroll
    for (int ks = 0; ks < CHUNK / 16; ks++) {
      u32 a[WT][4];
      #pragma unroll
      for (int i = 0; i < WT; i++) ldsm_x4(wtile + swizzled_offset<8>(tile_row(i) + (lane & 15), 2 * ks + (lane >> 4)), a[i]);
      #pragma unroll
      for (int j = 0; j < NT; j += 2) {
        u32 b[4];
        ldsm_x4(xtile + swizzled_offset<8>(8 * j + (lane & 7) + 8 * (lane >> 4), 2 * ks + ((lane >> 3) & 1)), b);
        #pragma unroll
        for (int i = 0; i < WT; i++) {
          mma_16816<T>(acc[i][j], a[i], b[0], b[1]);
          mma_16816<T>(acc[i][j + 1], a[i], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  GRID_DEPENDENCY_TRIGGER();

  // C fragment q of tile (i, j): feature n0 + (warp·FT + i mod FT)·16 + g + 8·(q >> 1) (the up tiles' as
  // the gate's), row 8j + 2t + (q & 1); its weight row in the tile is tile_row(i) + g + 8·(q >> 1).
  const auto row_of = [&](int j, int q) { return 8 * j + 2 * t + (q & 1); };
${S > 1 ? combine : direct}}
`;
  return { name, source, gridDependencyWait: true };
}

const aligned = (ptr: bigint) => ptr % 16n === 0n;

/** What a skinny kernel takes: its row range and the multiple K must be. */
export interface SkinnyLimits {
  readonly minRows: number;
  readonly maxRows: number;
  readonly kMultiple: number;
  /** beta = 1 taken too (the kernel adds its product to out). */
  readonly accumulates?: boolean;
}

/**
 * Whether a skinny kernel with these limits takes this checked GEMM: bf16/f16, transB only, rows in
 * range, K a multiple of kMultiple, 16-byte aligned operands, alpha 1 and beta 0 (or 1 where the kernel
 * accumulates), a forward epilogue without preActivation.
 */
export function skinnyTakesGemm(g: CheckedGemm, l: SkinnyLimits): boolean {
  const p = g.problem;
  return (p.dtype === 'bf16' || p.dtype === 'f16') && p.batch === 1 && !p.transA && p.transB && p.M >= l.minRows && p.M <= l.maxRows
    && p.K % l.kMultiple === 0 && SKINNY_EPILOGUES.includes(p.epilogue) && !p.writesPreActivation && g.alpha === 1 && (g.beta === 0 || (l.accumulates === true && g.beta === 1))
    && aligned(g.a.ptr) && aligned(g.b.ptr) && aligned(g.out.ptr);
}

/** Whether a skinny kernel with these limits takes this gatedLinear: bf16/f16, rows in range, K a multiple of kMultiple, aligned operands. */
export function skinnyTakesGated(g: CheckedGatedLinear, l: SkinnyLimits): boolean {
  const dtype = g.x.dtype, ptr = (t: Tensor) => (t as CudaTensor).ptr;
  return (dtype === 'bf16' || dtype === 'f16') && g.rows >= l.minRows && g.rows <= l.maxRows && g.K % l.kMultiple === 0
    && aligned(ptr(g.x)) && aligned(ptr(g.weight)) && aligned(ptr(g.out));
}

const SKINNY_LIMITS: SkinnyLimits = { minRows: SKINNY_MIN_ROWS, maxRows: SKINNY_MAX_ROWS, kMultiple: 8 };

/** Whether the kernel takes this checked GEMM (skinnyTakesGemm: 5–64 rows, K a multiple of 8). */
export function skinnyGemmApplies(g: CheckedGemm): boolean {
  return skinnyTakesGemm(g, SKINNY_LIMITS);
}

/** Whether the gated kernel takes this gatedLinear (skinnyTakesGated: 5–64 rows, K a multiple of 8). */
export function skinnyGatedApplies(g: CheckedGatedLinear): boolean {
  return skinnyTakesGated(g, SKINNY_LIMITS);
}

/** Shared memory a block may take on sm_90 (227 KiB of dynamic shared memory). */
const MAX_SHARED_BYTES = 227 * 1024;

/**
 * Every plan the kernel takes for M rows, N outputs (gated: N = F), K inputs — 4 or 8 warps, 1 or 2
 * feature tiles a warp, 4, 6 or 8 stages within the shared memory, 1–8 splits each of at least two chunks —
 * for bench/skinny-sweep.ts to time against the planner's pick and cuBLASLt.
 */
export function skinnyGemmSpace(dtype: 'bf16' | 'f16', M: number, N: number, K: number, epilogue: GemmEpilogue, gate: SkinnyGemmSpec['gate']): SkinnyGemmPlan[] {
  const rowTiles = 2 * Math.ceil(M / 16), chunks = Math.ceil(K / SKINNY_CHUNK_K), out: SkinnyGemmPlan[] = [];
  for (const warps of [4, 8] as const) {
    for (const featureTiles of [1, 2]) {
      for (const stages of [4, 6, 8]) {
        for (const splits of [1, 2, 4, 8]) {
          if (splits > 1 && chunks / splits < 2) continue;
          const spec: SkinnyGemmSpec = { dtype, rowTiles, featureTiles, stages, splits, epilogue, ...(gate ? { gate } : {}), ...(warps !== SKINNY_WARPS ? { warps } : {}) };
          if (skinnySharedBytes(spec) > MAX_SHARED_BYTES) continue;
          const blockFeatures = warps * 16 * featureTiles;
          out.push({ spec, grid: [Math.ceil(N / blockFeatures), splits], blockFeatures });
        }
      }
    }
  }
  return out;
}

/** A skinny GEMM's operands: device pointers (bias 0n when absent) and sizes (gated: N = F). */
export interface SkinnyLaunch { x: bigint; w: bigint; bias: bigint; out: bigint; M: number; N: number; K: number }

/** Launches `plan` (the planner's, or one of skinnyGemmSpace's: the sweep). */
export function launchSkinnyPlan(host: KernelHost, plan: SkinnyGemmPlan, a: SkinnyLaunch): void {
  host.kernel(skinnyGemmKey(plan.spec), () => skinnyGemmSource(plan.spec)).launch(
    { grid: [...plan.grid], block: warpsOf(plan.spec) * 32, sharedBytes: skinnySharedBytes(plan.spec) },
    [arg.ptr(a.x), arg.ptr(a.w), arg.ptr(a.bias), arg.ptr(a.out), arg.i32(a.M), arg.i32(a.N), arg.i32(a.K)],
  );
}

/** Launches the kernel for a GEMM skinnyGemmApplies() accepted. */
export function launchSkinnyGemm(host: KernelHost, g: CheckedGemm): void {
  const a = skinnyGemmOperands(g);
  launchSkinnyPlan(host, planSkinnyGemm(g.problem.dtype as 'bf16' | 'f16', a.M, a.N, a.K, g.problem.epilogue, undefined, host.multiProcessorCount), a);
}

/** Launches the gated kernel for a gatedLinear skinnyGatedApplies() accepted (the scratch `up` is not written). */
export function launchSkinnyGated(host: KernelHost, g: CheckedGatedLinear): void {
  const { operands: a, gate } = skinnyGatedOperands(g);
  launchSkinnyPlan(host, planSkinnyGemm(g.x.dtype as 'bf16' | 'f16', a.M, a.N, a.K, 'none', gate, host.multiProcessorCount), a);
}

/** Representative plans for the nvcc compile check (132 SMs): Llama 1.2B at batch 32, GPT-2 fc, odd rows, the gated MLP. */
export function catalog(): KernelSource[] {
  const plans: ['bf16' | 'f16', number, number, number, GemmEpilogue, SkinnyGemmSpec['gate']][] = [
    ['bf16', 32, 3072, 2048, 'none', undefined],   // Llama 1.2B QKV, out and down at batch 32 (K is an argument)
    ['bf16', 32, 8192, 2048, 'none', { activation: 'silu', bias: false }], // gate/up + SwiGLU
    ['bf16', 64, 128256, 2048, 'none', undefined], // an LM head at 64 rows
    ['f16', 13, 3072, 768, 'gelu_bias', undefined], // GPT-2 fc, odd rows
    ['f16', 40, 768, 3072, 'none', { activation: 'gelu_tanh', bias: true }],
    ['bf16', 5, 2048, 2048, 'relu_bias', undefined],
  ];
  return [
    ...plans.map(([dtype, M, N, K, epilogue, gate]) => skinnyGemmSource(planSkinnyGemm(dtype, M, N, K, epilogue, gate, 132).spec)),
    // 8 warps a block, deep pipelines (the sweep's): split and gated, unsplit with 8 stages.
    skinnyGemmSource({ dtype: 'bf16', rowTiles: 4, featureTiles: 2, stages: 4, splits: 4, epilogue: 'none', warps: 8 }),
    skinnyGemmSource({ dtype: 'bf16', rowTiles: 4, featureTiles: 1, stages: 6, splits: 2, epilogue: 'none', gate: { activation: 'silu', bias: false }, warps: 8 }),
    skinnyGemmSource({ dtype: 'bf16', rowTiles: 4, featureTiles: 1, stages: 8, splits: 1, epilogue: 'none' }),
  ];
}
