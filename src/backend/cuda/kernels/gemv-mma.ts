// mma GEMV: a GEMM of 5–64 rows against [N, K] weights on the tensor cores, streaming the weights once
// at HBM rate — a decode step of a batch of sequences (fuseformer's batch-32 decode; a serving engine's
// decode buckets of 8–64 rows), where cuBLASLt's kernels reach 1.5–3.2 TB/s on Llama 1.2B's matrices
// (bench/results/profile/llama-1.2B-decode-b32.log) and the SIMT GEMV (gemv.ts) runs out of FMA issue
// slots above 4 rows. out[m, n] = ep(Σ_k a[m, k]·w[n, k] + bias[n]); gated as gemv.ts (act(g)·u of the
// gate rows n and the up rows N + n).
//
// mma.sync m16n8k16 with the weights as A (16 output features × 16 k) and the activations as B (16 k ×
// 8 rows), so C is [feature][row] and a row tile is 8 rows (M ≤ 8·NT). Fragments come straight from
// global memory, without shared memory, by permuting k: the reduction Σ_k is order-free, so within each
// 32-wide k chunk lane (g, t) (g = lane >> 2, t = lane & 3) loads 16 bytes — k0 + 8t … k0 + 8t + 7 — of
// weight rows g and g + 8 and of activation rows 8j + g, and feeds them to two k16 steps s = 0, 1:
// logical positions {2t, 2t+1 | 2t+8, 2t+9} of step s are physical k0 + 8t + 4s + {0, 1 | 2, 3}, i.e.
// words 2s and 2s + 1 of the lane's vector — the same map for A (a[0], a[1] | a[2], a[3]) and for B
// (b0 | b1), so Σ over the 16 positions of each step, over both steps, is Σ over the chunk's 32 k.
// A warp computes FT feature tiles (16 features each; gated 2·FT: the gate's tiles, then the up rows'),
// all NT row tiles, over its share of K: the block's 8 warps are CG = 8/KW column groups × KW warps
// splitting the K chunks (warp kw takes chunks kw, kw + KW, …). A lane issues the weight loads of U
// chunks (U·WT·2 16-byte vectors) before using any, the first group before GRID_DEPENDENCY_WAIT (the
// weights never depend on the previous kernel). f32 accumulators; the KW partial sums reduced through
// shared memory in a fixed order (deterministic).
// Bytes: N·K·s of weights once, M·K·s of activations per column group (L1/L2 hits after the first).
// Precision: f32 products and sums of the stored 16-bit values (as cuBLASLt with f32 compute).

import type { Activation, GemmEpilogue } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { CudaTensor } from '../runtime/tensor.js';
import type { CheckedGemm } from '../gemm-plan.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { GEMV_EPILOGUES, gemvOutputCode, MAX_VECTORS, TARGET_BYTES_PER_SM, WARPS } from './gemv.js';
import type { CheckedGatedLinear } from './gemv.js';
import { MMA_LIB } from './mma-lib.js';
import { constants, kernelIdentifier } from './row-kernels.js';

/** Rows the kernel takes at most (8 row tiles of 8); gated products at most 32 (their accumulators are twice as many). */
export const MMA_GEMV_MAX_ROWS = 64;
export const MMA_GEMV_MAX_GATED_ROWS = 32;
/** The epilogues the kernel has (those of gemv.ts). */
export const MMA_GEMV_EPILOGUES: readonly GemmEpilogue[] = GEMV_EPILOGUES;

/** k of one chunk: 32 lanes… 4 lanes (t) × 8 elements per weight row. */
const CHUNK_K = 32;
/** f32 accumulators a lane may hold (WT·NT·4). */
export const MAX_ACCUMULATORS = 32;

export interface MmaGemvSpec {
  readonly dtype: 'bf16' | 'f16';
  /** Row tiles of 8 (NT): the kernel takes M in (8·(NT − 1), 8·NT] (M is an argument). */
  readonly rowTiles: number;
  /** Input width, a multiple of 32. */
  readonly k: number;
  readonly epilogue: GemmEpilogue;
  readonly gate?: { readonly activation: Activation; readonly bias: boolean };
  /** Output feature tiles of 16 a warp computes (FT). */
  readonly featureTiles: number;
  /** Warps splitting K (KW: 1, 2, 4 or 8); CG = 8 / KW column groups. */
  readonly kWarps: number;
  /** K chunks whose weight loads a lane issues before using them (U). */
  readonly unroll: number;
  /**
   * Blocks an SM the registers are bounded for (__launch_bounds__'s minimum): 2 caps a thread at 128
   * registers so two blocks (16 warps) are resident and twice the weight loads in flight; absent, the
   * compiler's choice (~160 registers at 4 row tiles: one block an SM).
   */
  readonly blocksPerSm?: 2;
}

export function mmaGemvKey(s: MmaGemvSpec): string {
  const gate = s.gate ? `.gated_${s.gate.activation}${s.gate.bias ? '_bias' : ''}` : `.${s.epilogue}`;
  return `gemv_mma.${s.dtype}.nt${s.rowTiles}.k${s.k}.ft${s.featureTiles}.kw${s.kWarps}.u${s.unroll}${s.blocksPerSm ? `.b${s.blocksPerSm}` : ''}${gate}`;
}

export interface MmaGemvPlan {
  readonly spec: MmaGemvSpec;
  readonly grid: number;
}

/**
 * The mapping for M rows, N output columns (gated: F), K inputs: among feature tiles per warp 1–2 and
 * K splits 1–8 (accumulators and vectors within a lane's budget), the one whose blocks spread most
 * evenly over the SMs while keeping TARGET_BYTES_PER_SM of weights in flight; ties to fewer K splits.
 */
export function planMmaGemv(dtype: 'bf16' | 'f16', M: number, N: number, K: number, epilogue: GemmEpilogue, gate: MmaGemvSpec['gate'], multiProcessorCount: number): MmaGemvPlan {
  const rowTiles = Math.ceil(M / 8), chunks = K / CHUNK_K;
  let best: { spec: MmaGemvSpec; grid: number; score: number } | undefined;
  for (const featureTiles of [1, 2]) {
    const WT = gate ? 2 * featureTiles : featureTiles;
    if (WT * rowTiles * 4 > MAX_ACCUMULATORS) continue;
    for (const kWarps of [1, 2, 4, 8]) {
      const perWarp = Math.ceil(chunks / kWarps);
      const unroll = Math.max(1, Math.min(perWarp, Math.floor(MAX_VECTORS / (2 * WT)), 4));
      const spec: MmaGemvSpec = { dtype, rowTiles, k: K, epilogue, ...(gate ? { gate } : {}), featureTiles, kWarps, unroll };
      const grid = mmaGemvGrid(spec, N);
      // One resident block per SM at ~160 registers a thread; its warps' loads in flight.
      const resident = Math.min(grid, multiProcessorCount);
      const inFlight = (resident / multiProcessorCount) * WARPS * 32 * unroll * WT * 2 * 16;
      const balance = grid / (Math.ceil(grid / multiProcessorCount) * multiProcessorCount);
      const score = balance * Math.min(1, inFlight / TARGET_BYTES_PER_SM) - kWarps * 1e-3;
      if (!best || score > best.score) best = { spec, grid, score };
    }
  }
  if (!best) throw new RangeError(`planMmaGemv: ${M} rows${gate ? ' (gated)' : ''} exceed the kernel's accumulators`);
  return { spec: best.spec, grid: best.grid };
}

/**
 * The K-splitting warps' partial C fragments `acc` [tiles][NT][4] added into warp kw = 0 through shared
 * `partial` (ACC·32 floats a warp, lane-major: conflict-free) in a fixed order; warps kw > 0 return.
 * Shared by this kernel and gemv-int4-mma.ts (constants KW, CG, NT, ACC and locals kw, cg, lane in scope).
 */
export function mmaSplitReduceCode(tiles: string): string {
  return String.raw`  if (KW > 1) {
    float* mine = partial + ((kw - 1) * CG + cg) * ACC * 32;
    if (kw > 0) {
      #pragma unroll
      for (int i = 0; i < ${tiles}; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
          #pragma unroll
          for (int q = 0; q < 4; q++) mine[((i * NT + j) * 4 + q) * 32 + lane] = acc[i][j][q];
    }
    __syncthreads();
    if (kw != 0) return;
    #pragma unroll
    for (int p = 1; p < KW; p++) {
      const float* theirs = partial + ((p - 1) * CG + cg) * ACC * 32;
      #pragma unroll
      for (int i = 0; i < ${tiles}; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
          #pragma unroll
          for (int q = 0; q < 4; q++) acc[i][j][q] += theirs[((i * NT + j) * 4 + q) * 32 + lane];
    }
  }`;
}

export function mmaGemvSource(spec: MmaGemvSpec): KernelSource {
  const name = kernelIdentifier(mmaGemvKey(spec));
  const gate = spec.gate, FT = spec.featureTiles, WT = gate ? 2 * FT : FT, NT = spec.rowTiles;
  if (spec.k % CHUNK_K !== 0) throw new RangeError(`mmaGemvSource: K must be a multiple of ${CHUNK_K}, got ${spec.k}`);
  if (WT * NT * 4 > MAX_ACCUMULATORS) throw new RangeError(`mmaGemvSource: ${WT} weight tiles × ${NT} row tiles exceed the accumulators`);
  const chunks = spec.k / CHUNK_K, perWarp = Math.ceil(chunks / spec.kWarps), groups = Math.ceil(perWarp / spec.unroll);
  const write = gate
    ? String.raw`const float gv = acc[i][j][q]${gate.bias ? ' + to_float(bias[n])' : ''}, uv = acc[FT + i][j][q]${gate.bias ? ' + to_float(bias[N + n])' : ''};
            out[(size_t)m * N + n] = from_float<T>(activate(gv) * uv);`
    : 'out[(size_t)m * N + n] = from_float<T>(epilogue(acc[i][j][q], bias, n));';
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${typedefLine('T', spec.dtype)}
${constants({ K: spec.k, NT, FT, WT, KW: spec.kWarps, CG: WARPS / spec.kWarps, U: spec.unroll, CHUNKS: chunks, PER_WARP: perWarp, GROUPS: groups, ACC: WT * NT * 4, GATED: gate !== undefined })}

${gemvOutputCode(spec.epilogue, gate, 'mma')}
__device__ __forceinline__ u32 word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// a [M, K], w [N, K] (gated: [2N, K]), bias [N] (gated: [2N]) or null, out [M, N]. Grid ceil(N / (CG·16·FT)), block ${WARPS * 32}.
extern "C" __global__ void __launch_bounds__(${WARPS * 32}${spec.blocksPerSm ? `, ${spec.blocksPerSm}` : ''}) ${name}(
    const T* __restrict__ a, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out, int M, int N) {
  __shared__ float partial[KW > 1 ? (KW - 1) * CG * ACC * 32 : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = warp % KW, cg = warp / KW;
  const int f0 = (blockIdx.x * CG + cg) * 16 * FT;
  // Weight rows g and g + 8 of each tile (features past N read the last one's row and are not written).
  const T* wrow[WT][2];
  #pragma unroll
  for (int i = 0; i < WT; i++)
    #pragma unroll
    for (int h = 0; h < 2; h++) {
      const int f = min(f0 + 16 * (i % FT) + g + 8 * h, N - 1);
      wrow[i][h] = w + (size_t)((GATED && i >= FT ? N : 0) + f) * K + 8 * t;
    }
  float acc[WT][NT][4];
  #pragma unroll
  for (int i = 0; i < WT; i++)
    #pragma unroll
    for (int j = 0; j < NT; j++)
      #pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

  #pragma unroll 1
  for (int grp = 0; grp < GROUPS; grp++) {
    uint4 wv[U][WT][2];
    #pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = kw + (grp * U + u) * KW;
      #pragma unroll
      for (int i = 0; i < WT; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++) wv[u][i][h] = c < CHUNKS ? load_weight(wrow[i][h] + c * 32) : make_uint4(0u, 0u, 0u, 0u);
    }
    // The first loads are in flight before waiting for the kernel that writes a (programmatic launch).
    if (grp == 0) GRID_DEPENDENCY_WAIT();
    #pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = kw + (grp * U + u) * KW;
      if (c < CHUNKS) {
        uint4 xv[NT];
        #pragma unroll
        for (int j = 0; j < NT; j++) {
          const int m = 8 * j + g;
          xv[j] = m < M ? *reinterpret_cast<const uint4*>(a + (size_t)m * K + c * 32 + 8 * t) : make_uint4(0u, 0u, 0u, 0u);
        }
        #pragma unroll
        for (int s = 0; s < 2; s++) {
          #pragma unroll
          for (int i = 0; i < WT; i++) {
            const u32 af[4] = { word(wv[u][i][0], 2 * s), word(wv[u][i][1], 2 * s), word(wv[u][i][0], 2 * s + 1), word(wv[u][i][1], 2 * s + 1) };
            #pragma unroll
            for (int j = 0; j < NT; j++) mma_16816<T>(acc[i][j], af, word(xv[j], 2 * s), word(xv[j], 2 * s + 1));
          }
        }
      }
    }
  }
  GRID_DEPENDENCY_TRIGGER();

${mmaSplitReduceCode('WT')}
  // C fragment q of tile (i, j): feature f0 + 16i + g + 8·(q >> 1), row 8j + 2t + (q & 1).
  #pragma unroll
  for (int i = 0; i < FT; i++)
    #pragma unroll
    for (int j = 0; j < NT; j++)
      #pragma unroll
      for (int q = 0; q < 4; q++) {
        const int n = f0 + 16 * i + g + 8 * (q >> 1), m = 8 * j + 2 * t + (q & 1);
        if (n < N && m < M) {
          ${write}
        }
      }
}
`;
  return { name, source, gridDependencyWait: true };
}

const aligned = (t: { ptr: bigint }) => t.ptr % 16n === 0n;

/**
 * Whether the kernel takes this checked GEMM: bf16/f16, transB only, 5 ≤ M ≤ MMA_GEMV_MAX_ROWS (fewer
 * rows are gemv.ts's), K a multiple of 32, 16-byte aligned operands, alpha 1 and beta 0, a forward
 * epilogue without preActivation.
 */
export function mmaGemvApplies(g: CheckedGemm): boolean {
  const p = g.problem;
  return (p.dtype === 'bf16' || p.dtype === 'f16') && p.batch === 1 && !p.transA && p.transB && p.M <= MMA_GEMV_MAX_ROWS
    && p.K % CHUNK_K === 0 && MMA_GEMV_EPILOGUES.includes(p.epilogue) && !p.writesPreActivation && g.alpha === 1 && g.beta === 0
    && aligned(g.a) && aligned(g.b) && aligned(g.out);
}

/** Launches the kernel for a GEMM mmaGemvApplies() accepted. */
export function launchMmaGemv(host: KernelHost, g: CheckedGemm): void {
  const p = g.problem;
  const { spec } = planMmaGemv(p.dtype as 'bf16' | 'f16', p.M, p.N, p.K, p.epilogue, undefined, host.multiProcessorCount);
  launchMmaGemvSpec(host, spec, { a: g.a.ptr, w: g.b.ptr, bias: g.bias?.ptr ?? 0n, out: g.out.ptr, M: p.M, N: p.N });
}

/** Blocks of a plan for N output features (F when gated). */
export function mmaGemvGrid(spec: MmaGemvSpec, N: number): number {
  return Math.ceil(Math.ceil(N / 16) / ((WARPS / spec.kWarps) * spec.featureTiles));
}

/** Launches one plan on raw device addresses (launchMmaGemv's path; bench/skinny-sweep.ts times plans this way). */
export function launchMmaGemvSpec(host: KernelHost, spec: MmaGemvSpec, p: { a: bigint; w: bigint; bias: bigint; out: bigint; M: number; N: number }): void {
  host.kernel(mmaGemvKey(spec), () => mmaGemvSource(spec)).launch({ grid: mmaGemvGrid(spec, p.N), block: WARPS * 32 }, [
    arg.ptr(p.a), arg.ptr(p.w), arg.ptr(p.bias), arg.ptr(p.out), arg.i32(p.M), arg.i32(p.N),
  ]);
}

/**
 * Every plan the kernel takes for M rows and K inputs (bench/skinny-sweep.ts times them): FT 1–2 feature
 * tiles a warp within the accumulators, KW 1–8 K-splits, U 1, 2, 4 chunks in flight (or all of a warp's,
 * if fewer) within a lane's vectors, and the compiler's register count or two blocks an SM.
 */
export function mmaGemvSpace(dtype: 'bf16' | 'f16', M: number, K: number, epilogue: GemmEpilogue, gate: MmaGemvSpec['gate']): MmaGemvSpec[] {
  const rowTiles = Math.ceil(M / 8), chunks = K / CHUNK_K, out: MmaGemvSpec[] = [];
  for (const featureTiles of [1, 2]) {
    const WT = gate ? 2 * featureTiles : featureTiles;
    if (WT * rowTiles * 4 > MAX_ACCUMULATORS) continue;
    for (const kWarps of [1, 2, 4, 8]) {
      if (kWarps > chunks && kWarps > 1) continue;
      const perWarp = Math.ceil(chunks / kWarps);
      for (const unroll of new Set([1, 2, 4, Math.min(perWarp, 4)])) {
        if (unroll > perWarp || unroll * WT * 2 > MAX_VECTORS) continue;
        for (const blocksPerSm of [undefined, 2] as const) {
          out.push({ dtype, rowTiles, k: K, epilogue, ...(gate ? { gate } : {}), featureTiles, kWarps, unroll, ...(blocksPerSm ? { blocksPerSm } : {}) });
        }
      }
    }
  }
  return out;
}


/** Whether the gated kernel takes this gatedLinear: bf16/f16, rows ≤ MMA_GEMV_MAX_GATED_ROWS, K a multiple of 32, aligned operands. */
export function mmaGatedGemvApplies(g: CheckedGatedLinear): boolean {
  const dtype = g.x.dtype, ptr = (t: Tensor) => t as CudaTensor;
  return (dtype === 'bf16' || dtype === 'f16') && g.rows <= MMA_GEMV_MAX_GATED_ROWS && g.K % CHUNK_K === 0
    && aligned(ptr(g.x)) && aligned(ptr(g.weight)) && aligned(ptr(g.out));
}

/** Launches the gated kernel for a gatedLinear mmaGatedGemvApplies() accepted (the scratch `up` is not written). */
export function launchMmaGatedGemv(host: KernelHost, g: CheckedGatedLinear): void {
  const gate = { activation: g.activation, bias: g.bias !== undefined };
  const { spec } = planMmaGemv(g.x.dtype as 'bf16' | 'f16', g.rows, g.F, g.K, 'none', gate, host.multiProcessorCount);
  const ptr = (t: Tensor | undefined) => (t ? (t as CudaTensor).ptr : 0n);
  launchMmaGemvSpec(host, spec, { a: ptr(g.x), w: ptr(g.weight), bias: ptr(g.bias), out: ptr(g.out), M: g.rows, N: g.F });
}

export function catalog(): KernelSource[] {
  const plans: ['bf16' | 'f16', number, number, number, GemmEpilogue, MmaGemvSpec['gate']][] = [
    ['bf16', 32, 3072, 2048, 'none', undefined],   // Llama 1.2B QKV at batch 32
    ['bf16', 32, 2048, 8192, 'none', undefined],   // its down projection
    ['bf16', 32, 8192, 2048, 'none', { activation: 'silu', bias: false }], // gate/up + SwiGLU
    ['bf16', 64, 128256, 2048, 'none', undefined], // an LM head at 64 rows
    ['f16', 13, 2304, 768, 'gelu_bias', undefined], // GPT-2 fc, odd rows
    ['f16', 8, 768, 3072, 'bias', undefined],
    ['bf16', 24, 1000, 96, 'relu_bias', undefined], // N not a multiple of 16, K of 64
    ['f16', 5, 4096, 4096, 'none', { activation: 'gelu_tanh', bias: true }],
  ];
  return plans.map(([dtype, M, N, K, epilogue, gate]) => mmaGemvSource(planMmaGemv(dtype, M, N, K, epilogue, gate, 132).spec));
}
