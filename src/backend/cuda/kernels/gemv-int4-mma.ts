// INT4 W4A16 GEMV on the tensor cores: int4Linear (backend.ts) for 1–32 rows with 16-bit activations
// and groups of a multiple of 128 — decode steps, where the SIMT GEMV (quant-int4.ts) spends ~6
// instructions a weight (nibble → float, FMA, the x sums) and tops out at ~2.1 TB/s of packed weights
// even on the 138 MB LM head (bench/results/gpu-pending-s8/call1/profile-int4.log).
//
// mma.sync m16n8k16 with the weights as A (16 weight rows × 16 k) and the activations as B (16 k × 8
// rows of x), so C is [weight row][x row]; NT row tiles of 8 take M ≤ 8·NT. Per 128-wide k chunk, lane
// (g, t) (g = lane >> 2, t = lane & 3) loads one 16-byte vector — k0 + 32t … k0 + 32t + 31, 4 packed
// words — of weight rows g and g + 8 of each tile, and the same 32 k of x rows 8j + g. The reduction Σ_k
// is order-free, so k is permuted inside the chunk (the same map for A and B): word w's nibble pairs
// (e, e + 4) — one LOP3 turns both into a 16-bit pair, (w >> 4e) & 0x000F000F | magic, the magic being
// the exponent of 128 (bf16) or 1024 (f16), so the pair reads (magic + q) exactly — are the logical
// positions {2t, 2t+1} (pair e = 0, 2) and {2t+8, 2t+9} (e = 1, 3) of mma steps 2w and 2w + 1; on the
// B side the same pairs (x[8w + e], x[8w + e + 4]) come from the 16-byte vector of word w by PRMT.
// Subtracting (magic + zero) is exact (|q − z| ≤ 15), so the tensor cores multiply the exact integers
// q − z by the stored x; a chunk lies in one group (G a multiple of 128), so the group's scale is applied
// once per chunk in f32: acc += s·C. More exact than dequantizing to 16 bits (the tiled kernel's way).
// Gated (act(g)·u of gate row n and up row F + n): a tile is 8 features, rows g = gate n and g + 8 = up
// F + n, so a lane holds both halves of its outputs.
// A warp takes FT tiles (16·FT features, gated 8·FT) and its K chunks kw, kw + KW, …; the block's W warps
// (8, or 16 for a long K at about one block an SM) are CG = W/KW column groups × KW K-splits. A lane issues U chunks of weight loads (U·FT·2 vectors)
// and their scales and zeros before using any, the first group before GRID_DEPENDENCY_WAIT (the weights
// never depend on the previous kernel). f32 accumulators; the KW partial sums reduced through shared
// memory in a fixed order (deterministic).
// Bytes: K·N/2 (weights) + K·N/G·3 (scales, zeros) + M·K·s (x, L1/L2 after the first) + M·N·s (out).
// normLinear (spec.norm): x is norm(r + y + bias) of the residual stream r, formed by every block after
// its grid-dependency wait into shared memory by gemv.ts's norm prologue (the same code; the first
// weight loads are in flight meanwhile), and the B fragments are read from there; the last block past its
// prologue updates r and writes h. M is then a compile-time constant (the prologue's sums are per row).

import type { FloatDType } from '../../../dtype.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { MMA_LIB } from './mma-lib.js';
import { MAX_ACCUMULATORS, mmaSplitReduceCode } from './gemv-mma.js';
import type { GemvNorm, NormPrologue } from './gemv.js';
import { ARGMAX_PACK_CODE, argmaxWriteCode, MAX_VECTORS, NORM_PROLOGUE_MAX_BYTES, normPrologueArgs, normSwitchesKey, NORM_PROLOGUE_STATE, normPrologueCallCode, normPrologueCode, normPrologueFinishCode, TARGET_BYTES_PER_SM, WARPS } from './gemv.js';
import type { EpilogueActivation } from './quant-int4.js';
import { activationExpression, EPILOGUE_ACTIVATION_CODE } from './quant-int4.js';
import { constants, kernelIdentifier } from './row-kernels.js';
import { weightLoadCode } from './weight-stream.js';

/** Rows the kernel takes (4 row tiles of 8). */
export const INT4_MMA_MAX_ROWS = 32;
/** k of one chunk: 4 lanes (t) × 32 nibbles of a weight row. */
export const INT4_MMA_CHUNK_K = 128;

// A lane's budget (gemv-mma.ts's): MAX_ACCUMULATORS f32 values — here the sums and a chunk's C, 2·FT·NT·4.

export interface Int4MmaGemvSpec {
  readonly dtype: 'bf16' | 'f16';
  /** Row tiles of 8 (NT): M in (8·(NT − 1), 8·NT], M an argument. */
  readonly rowTiles: number;
  readonly K: number;
  readonly groupSize: number;
  /** Weight tiles of 16 rows a warp computes (FT). */
  readonly tiles: number;
  /** Warps splitting K (KW: 1, 2, 4 or 8). */
  readonly kWarps: number;
  /** Chunks of weight loads in flight per lane (U). */
  readonly unroll: number;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
  readonly gated: boolean;
  /**
   * Independent accumulator chains per chunk (1 or 2; default 1): a chunk's 8 mma steps alternate
   * between them, halving the dependent chain (an mma's latency is ~30 cycles), summed at the chunk's end.
   * The planner takes 1 (measured); bench/gemv-sweep.ts times both.
   */
  readonly chains?: 1 | 2;
  /**
   * Warps of a block (8, the default, two blocks an SM; or 16, one block an SM of the same registers):
   * twice the warps split K twice as finely, so each warp's chain of chunks after the grid-dependency
   * wait is half as long — faster where a grid of about one block an SM leaves each of 8 warps a long
   * K (Llama's down product), not at 2–4 chunks a warp (its QKV and O; session 17's sweeps).
   */
  readonly warps?: 8 | 16;
  /** normLinear: the residual norm in the prologue, for exactly `rows` rows (see the header). */
  readonly norm?: Int4MmaNorm;
  /**
   * RowArgmax (Int4LinearArgs.argmax; not gated): each lane keeps the best packed word of the rows it writes, the
   * lanes of a row (the 8 groups g) combine by shuffles, and the warp adds each row's best by one atomicMax unless
   * the slot already holds as much — per warp, not per block: the split-K warps return before the write. Kernel
   * arguments `argmax`, `argmax_classes` last.
   */
  readonly argmax?: boolean;
}

/** The norm prologue of an Int4MmaGemvSpec: gemv.ts's GemvNorm for a fixed row count. */
export interface Int4MmaNorm extends GemvNorm {
  readonly rows: number;
}

/** Warps of a block of this spec. */
export function int4MmaWarps(s: Int4MmaGemvSpec): 8 | 16 {
  return s.warps ?? 8;
}

export function int4MmaGemvKey(s: Int4MmaGemvSpec): string {
  const norm = s.norm ? `.norm_${s.norm.kind}_m${s.norm.rows}${normSwitchesKey(s.norm)}` : '';
  return `int4_gemv_mma.${s.dtype}.nt${s.rowTiles}.k${s.K}.g${s.groupSize}.ft${s.tiles}.kw${s.kWarps}.u${s.unroll}${s.chains === 2 ? '.c2' : ''}${int4MmaWarps(s) === 16 ? '.w16' : ''}${s.bias ? '.bias' : ''}.${s.activation}${s.gated ? '.gated' : ''}${norm}${s.argmax ? '.argmax' : ''}`;
}

export interface Int4MmaGemvPlan {
  readonly spec: Int4MmaGemvSpec;
  readonly grid: number;
}

/** Chunks in flight a lane (U) for a warp's `perWarp` chunks: within its vector budget, 4 at up to two row tiles, 1 above. */
function int4MmaUnroll(perWarp: number, tiles: number, rowTiles: number): number {
  return Math.max(1, Math.min(perWarp, Math.floor(MAX_VECTORS / (2 * tiles)), rowTiles > 2 ? 1 : 4));
}

/**
 * Whether the norm prologue fits: the M × K normed rows in shared memory within NORM_PROLOGUE_MAX_BYTES
 * (16-bit), M in the row tiles' range.
 */
export function int4MmaNormFits(M: number, K: number, rowTiles = Math.ceil(M / 8)): boolean {
  return M >= 1 && Math.ceil(M / 8) === rowTiles && M * K * 2 <= NORM_PROLOGUE_MAX_BYTES;
}

/** Whether the kernel takes this int4Linear: 16-bit x, 1–32 rows, groups a multiple of 128. */
export function int4MmaGemvApplies(dtype: FloatDType, M: number, groupSize: number): boolean {
  return (dtype === 'bf16' || dtype === 'f16') && M >= 1 && M <= INT4_MMA_MAX_ROWS && groupSize % INT4_MMA_CHUNK_K === 0;
}

/**
 * For N output features (F when gated), among FT ∈ {1, 2, 4} and KW ∈ {1, 2, 4, 8} within a lane's
 * accumulator and vector budget: the most evenly spread blocks that keep TARGET_BYTES_PER_SM of weights
 * in flight (two resident blocks an SM at ≤ 128 registers a thread), two tiles a warp where that still
 * leaves two blocks an SM (one row tile), then fewer K-splits; 16-warp blocks for a long K at one block an SM.
 */
export function planInt4MmaGemv(dtype: 'bf16' | 'f16', M: number, N: number, K: number, groupSize: number, bias: boolean, activation: EpilogueActivation, gated: boolean, multiProcessorCount: number, norm?: GemvNorm): Int4MmaGemvPlan {
  const rowTiles = Math.ceil(M / 8), chunks = K / INT4_MMA_CHUNK_K, featuresPerTile = gated ? 8 : 16;
  let best: { plan: Int4MmaGemvPlan; score: number } | undefined;
  for (const tiles of [1, 2, 4]) {
    if (2 * tiles * rowTiles * 4 > MAX_ACCUMULATORS) continue;
    for (const kWarps of [1, 2, 4, 8]) {
      if (kWarps > chunks && kWarps > 1) continue;
      const CG = WARPS / kWarps, grid = Math.ceil(N / (CG * tiles * featuresPerTile));
      const perWarp = Math.ceil(chunks / kWarps);
      // More row tiles hold more sums and x pairs: fewer chunks in flight keep a lane within 128 registers
      // (above two row tiles one chunk: the fastest at every Llama 1.2B product at 32 rows, session 17).
      const unroll = int4MmaUnroll(perWarp, tiles, rowTiles);
      const resident = Math.min(grid, 2 * multiProcessorCount);
      const inFlight = (resident / multiProcessorCount) * WARPS * 32 * unroll * tiles * 2 * 16;
      // The share of the GPU the grid keeps busy: SMs with a block, up to one block an SM; past that, the two
      // resident slots an SM, filled wave by wave.
      const slots = 2 * multiProcessorCount;
      const balance = grid <= multiProcessorCount ? grid / multiProcessorCount : grid / (Math.ceil(grid / slots) * slots);
      // Two tiles a warp share each chunk's x pairs: faster where the grid still holds two blocks an SM, at one
      // row tile (H200, sessions 9 and 17, bench/gemv-sweep.ts: Llama 1.2B's gated gate/up 8.33 → 7.86 µs,
      // its LM head 56.7 → 45.5–46.4; the smaller products, one block an SM, lost with them).
      const shareX = rowTiles === 1 && tiles === 2 && grid >= 1.9 * multiProcessorCount ? 0.05 : 0;
      const score = balance * Math.min(1, inFlight / TARGET_BYTES_PER_SM) + shareX - kWarps * 1e-3 - tiles * 1e-4;
      const spec: Int4MmaGemvSpec = { dtype, rowTiles, K, groupSize, tiles, kWarps, unroll, bias, activation, gated, ...(norm ? { norm: { ...norm, rows: M } } : {}) };
      if (!best || score > best.score) best = { plan: { spec, grid }, score };
    }
  }
  // About one block an SM whose 8 warps each still walk ≥ 8 chunks (a long K): 16-warp blocks split K 16
  // ways, halving each warp's chain after the grid-dependency wait (H200, session 17, bench/gemv-sweep.ts:
  // Llama 1.2B's down product 7.06 → 5.36 µs at 1 row, 22.2 → 14.6 µs at 32; at 2–4 chunks a warp — its
  // QKV, O, gate/up — no gain).
  const chosen = best!.plan.spec;
  if (chosen.kWarps === 8 && Math.ceil(chunks / 8) >= 8 && best!.plan.grid <= multiProcessorCount) {
    const spec: Int4MmaGemvSpec = { ...chosen, kWarps: 16, unroll: int4MmaUnroll(Math.ceil(chunks / 16), chosen.tiles, rowTiles), warps: 16 };
    return { spec, grid: int4MmaGemvGrid(spec, N) };
  }
  return best!.plan;
}

/**
 * The device code the tensor-core INT4 kernels (this GEMV, the INT4 streamed GEMM) dequantize with: a
 * packed word's nibbles e and e + 4 as the exact 16-bit pair (q − z) by one LOP3 and one fused
 * multiply-add (see the header), and the streaming load of a weight vector.
 */
export function int4MmaDequantCode(dtype: 'bf16' | 'f16'): string {
  const bf16 = dtype === 'bf16';
  return String.raw`// magic | q is the 16-bit float magic + q (exact); one = 1.0 in both halves.
constexpr u32 MAGIC = ${bf16 ? '0x43004300u' : '0x64006400u'}, ONE = ${bf16 ? '0x3F803F80u' : '0x3C003C00u'};

${weightLoadCode('load_stream_u4', 'u32', 'int4')}
__device__ __forceinline__ u32 word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
// Nibbles e and e + 4 of w as the pair (magic + q_e, magic + q_{e+4}): (w >> 4e) & mask | magic as one LOP3
// (0xEA: a & b | c) with the magic in a register; written in C++, ptxas splits it into two, both constants
// as immediates (a LOP3 takes one) — 8 LOP3s a word instead of 4.
__device__ __forceinline__ u32 magic_pair(u32 w, int e) {
  u32 p;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(p) : "r"(w >> (4 * e)), "n"(0x000F000Fu), "r"(MAGIC));
  return p;
}
// Nibbles e and e + 4 of w as the pair (q_e − z, q_{e+4} − z): magic + q, minus the packed (magic + z).
__device__ __forceinline__ u32 nibble_pair(u32 w, int e, u32 minus_zero) {
  const u32 p = magic_pair(w, e);
  u32 d;
  asm("fma.rn.${bf16 ? 'bf16x2' : 'f16x2'} %0, %1, %2, %3;" : "=r"(d) : "r"(p), "r"(ONE), "r"(minus_zero));
  return d;
}
// Tile step p (0, 1) of word index w: the A fragment from weight rows g (word w0) and g + 8 (w1).
__device__ __forceinline__ void weight_fragment(u32 (&af)[4], u32 w0, u32 w1, int p, u32 mz0, u32 mz1) {
  af[0] = nibble_pair(w0, 2 * p, mz0);
  af[1] = nibble_pair(w1, 2 * p, mz1);
  af[2] = nibble_pair(w0, 2 * p + 1, mz0);
  af[3] = nibble_pair(w1, 2 * p + 1, mz1);
}
// The x pairs (x[8w + e], x[8w + e + 4]), e = 0..3, of a 16-byte vector x[8w .. 8w + 7]: the B fragments'
// order for weight_fragment's (bp[2p], bp[2p + 1] for step p).
__device__ __forceinline__ void x_pairs(u32 (&bp)[4], const uint4& xv) {
  bp[0] = __byte_perm(xv.x, xv.z, 0x5410);
  bp[1] = __byte_perm(xv.x, xv.z, 0x7632);
  bp[2] = __byte_perm(xv.y, xv.w, 0x5410);
  bp[3] = __byte_perm(xv.y, xv.w, 0x7632);
}
// −(magic + z) in both halves of a 16-bit pair: the sign bit, the magic's exponent and z as the mantissa's low
// bits (exact for z < 128, an INT4 zero being at most 15) — two integer instructions, not a float round trip.
__device__ __forceinline__ u32 minus_zero_pair(unsigned char z) {
  return ((MAGIC & 0xFFFFu) | 0x8000u | (u32)z) * 0x00010001u;
}

`;
}

export function int4MmaGemvSource(spec: Int4MmaGemvSpec): KernelSource {
  if (spec.K % INT4_MMA_CHUNK_K !== 0 || spec.groupSize % INT4_MMA_CHUNK_K !== 0 || spec.K % spec.groupSize !== 0) {
    throw new RangeError(`int4MmaGemvSource: K (${spec.K}) and the group size (${spec.groupSize}) must be multiples of ${INT4_MMA_CHUNK_K}, G dividing K`);
  }
  const norm = spec.norm;
  if (norm && !int4MmaNormFits(norm.rows, spec.K, spec.rowTiles)) {
    throw new RangeError(`int4MmaGemvSource: the norm prologue takes ${8 * (spec.rowTiles - 1) + 1}–${8 * spec.rowTiles} rows of at most ${NORM_PROLOGUE_MAX_BYTES} bytes, got ${norm.rows} rows of ${spec.K}`);
  }
  const name = kernelIdentifier(int4MmaGemvKey(spec));
  const chunks = spec.K / INT4_MMA_CHUNK_K, perWarp = Math.ceil(chunks / spec.kWarps), groups = Math.ceil(perWarp / spec.unroll);
  const biasOf = (n: string) => (spec.bias ? ` + to_float(bias[${n}])` : '');
  const write = spec.gated
    ? String.raw`const float gv = acc[i][j][q]${biasOf('n')}, uv = acc[i][j][2 + q]${biasOf('N + n')};
            out[(size_t)m * N + n] = from_float<T>(${activationExpression(spec.activation, 'gv')} * uv);`
    : spec.argmax
      ? String.raw`const float v = acc[i][j][2 * h + q]${biasOf('n')};
            ${argmaxWriteCode(activationExpression(spec.activation, 'v'), 'best[j][q]', '            ')}`
      : String.raw`const float v = acc[i][j][2 * h + q]${biasOf('n')};
            out[(size_t)m * N + n] = from_float<T>(${activationExpression(spec.activation, 'v')});`;
  if (spec.argmax && spec.gated) throw new RangeError('int4MmaGemvSource: argmax is for an ungated product (an LM head)');
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({
    K: spec.K, G: spec.groupSize, NT: spec.rowTiles, FT: spec.tiles, KW: spec.kWarps, CG: int4MmaWarps(spec) / spec.kWarps, U: spec.unroll,
    CHUNKS: chunks, GROUPS: groups, WORDS_PER_ROW: spec.K / 8, GROUPS_PER_ROW: spec.K / spec.groupSize,
    ACC: spec.tiles * spec.rowTiles * 4, GATED: spec.gated, FEATURES: spec.gated ? 8 : 16, CH: spec.chains ?? 1,
    ...(norm ? { M: norm.rows, VEC: 8, THREADS: int4MmaWarps(spec) * 32, NWARPS: int4MmaWarps(spec) } : {}),
  })}
${norm ? normPrologueCode(norm) : ''}
${spec.argmax ? `${ARGMAX_PACK_CODE}
` : ''}${int4MmaDequantCode(spec.dtype)}// x [M, K], qweight u32 [N, K/8] (gated: [2N, K/8]), scales f16 and zeros u8 [rows, K/G], bias [N]
// (gated [2N]) or null, out [M, N]. Grid ceil(N / (CG·FT·FEATURES)), block ${int4MmaWarps(spec) * 32}.${norm ? `
// Norm prologue (M = ${norm.rows}, the argument M_ unused): x is unused; rx [M, K] the residual stream
// (updated in place), y [M, K] (Y), rbias [K], gamma, beta [K], h [M, K] the normed rows, counter a zeroed
// u32 (left zero).` : ''}
extern "C" __global__ void __launch_bounds__(${int4MmaWarps(spec) * 32}, ${int4MmaWarps(spec) === 16 ? 1 : 2}) ${name}(
    const T* __restrict__ x, const u32* __restrict__ qweight, const __half* __restrict__ scales,
    const unsigned char* __restrict__ zeros, const T* __restrict__ bias, T* __restrict__ out, int ${norm ? 'M_' : 'M'}, int N${norm ? `,
    T* rx, const Y* __restrict__ y, const T* __restrict__ rbias, const T* __restrict__ gamma, const T* __restrict__ beta,
    T* __restrict__ h, float eps, unsigned int* __restrict__ counter` : ''}${spec.argmax ? `,
    unsigned long long* __restrict__ argmax, int argmax_classes` : ''}) {
  __shared__ float partial[KW > 1 ? (KW - 1) * CG * ACC * 32 : 1];${norm ? `
  __shared__ __align__(16) T act_s[M * K];
  ${NORM_PROLOGUE_STATE}
  NormWeights pre;
  load_norm_weights(pre, gamma, beta);` : ''}
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = warp % KW, cg = warp / KW;
  const int f0 = (blockIdx.x * CG + cg) * FT * FEATURES;
  // Weight rows g and g + 8 of each tile (features past N read the last one's rows and are not written).
  int wrow[FT][2];
  #pragma unroll
  for (int i = 0; i < FT; i++) {
    if (GATED) {
      const int n = min(f0 + 8 * i + g, N - 1);
      wrow[i][0] = n;
      wrow[i][1] = N + n;
    } else {
      wrow[i][0] = min(f0 + 16 * i + g, N - 1);
      wrow[i][1] = min(f0 + 16 * i + g + 8, N - 1);
    }
  }
  float acc[FT][NT][4];
  #pragma unroll
  for (int i = 0; i < FT; i++)
    #pragma unroll
    for (int j = 0; j < NT; j++)
      #pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

  #pragma unroll 1
  for (int grp = 0; grp < GROUPS; grp++) {
    uint4 wv[U][FT][2];
    float sc[U][FT][2];
    u32 mz[U][FT][2];  // −(magic + z), packed
    #pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = kw + (grp * U + u) * KW;
      #pragma unroll
      for (int i = 0; i < FT; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
          if (c < CHUNKS) {
            const int r = wrow[i][h];
            const size_t gi = (size_t)r * GROUPS_PER_ROW + (c * ${INT4_MMA_CHUNK_K}) / G;
            wv[u][i][h] = load_stream_u4(qweight + (size_t)r * WORDS_PER_ROW + c * 16 + 4 * t);
            sc[u][i][h] = __half2float(scales[gi]);
            mz[u][i][h] = minus_zero_pair(zeros[gi]);
          } else {
            wv[u][i][h] = make_uint4(0u, 0u, 0u, 0u);
            sc[u][i][h] = 0.f;
            mz[u][i][h] = 0;
          }
        }
    }
    // The first loads are in flight before waiting for the kernel that writes x (programmatic launch).
    if (grp == 0) {
      GRID_DEPENDENCY_WAIT();${norm ? `
      ${normPrologueCallCode('rx')}` : ''}
    }
    #pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = kw + (grp * U + u) * KW;
      if (c < CHUNKS) {
        float cf[CH][FT][NT][4];
        #pragma unroll
        for (int h = 0; h < CH; h++)
          #pragma unroll
          for (int i = 0; i < FT; i++)
            #pragma unroll
            for (int j = 0; j < NT; j++)
              #pragma unroll
              for (int q = 0; q < 4; q++) cf[h][i][j][q] = 0.f;
        #pragma unroll
        for (int w = 0; w < 4; w++) {
          // x pairs (x[8w + e], x[8w + e + 4]) of rows 8j + g, for e = 0..3.
          u32 bp[NT][4];
          #pragma unroll
          for (int j = 0; j < NT; j++) {
            const int m = 8 * j + g;
            const uint4 xv = m < M ? *reinterpret_cast<const uint4*>(${norm ? 'act_s' : 'x'} + (size_t)m * K + c * ${INT4_MMA_CHUNK_K} + 32 * t + 8 * w) : make_uint4(0u, 0u, 0u, 0u);
            x_pairs(bp[j], xv);
          }
          #pragma unroll
          for (int i = 0; i < FT; i++) {
            const u32 w0 = word_of(wv[u][i][0], w), w1 = word_of(wv[u][i][1], w);
            #pragma unroll
            for (int s = 0; s < 2; s++) {
              u32 af[4];
              weight_fragment(af, w0, w1, s, mz[u][i][0], mz[u][i][1]);
              #pragma unroll
              for (int j = 0; j < NT; j++) mma_16816<T>(cf[s % CH][i][j], af, bp[j][2 * s], bp[j][2 * s + 1]);
            }
          }
        }
        // One group per chunk: its scale, per weight row (c0, c1: row g; c2, c3: row g + 8).
        #pragma unroll
        for (int i = 0; i < FT; i++)
          #pragma unroll
          for (int j = 0; j < NT; j++) {
            #pragma unroll
            for (int h = 1; h < CH; h++)
              #pragma unroll
              for (int q = 0; q < 4; q++) cf[0][i][j][q] += cf[h][i][j][q];
            acc[i][j][0] = fmaf(sc[u][i][0], cf[0][i][j][0], acc[i][j][0]);
            acc[i][j][1] = fmaf(sc[u][i][0], cf[0][i][j][1], acc[i][j][1]);
            acc[i][j][2] = fmaf(sc[u][i][1], cf[0][i][j][2], acc[i][j][2]);
            acc[i][j][3] = fmaf(sc[u][i][1], cf[0][i][j][3], acc[i][j][3]);
          }
      }
    }
  }
  GRID_DEPENDENCY_TRIGGER();
${norm ? normPrologueFinishCode('rx') : ''}
${mmaSplitReduceCode('FT')}${spec.argmax ? `
  // RowArgmax: the best packed word of rows 8j + 2t + q this lane writes.
  unsigned long long best[NT][2];
  #pragma unroll
  for (int j = 0; j < NT; j++) best[j][0] = best[j][1] = 0ull;` : ''}
  // C of tile i, row tile j: [q] = (weight row g + 8·(q >> 1), x row 8j + 2t + (q & 1)).
  #pragma unroll
  for (int i = 0; i < FT; i++)
    #pragma unroll
    for (int j = 0; j < NT; j++)
      #pragma unroll
      for (int q = 0; q < 2; q++) {
        const int m = 8 * j + 2 * t + q;
        ${spec.gated ? String.raw`const int n = f0 + 8 * i + g;
        if (m < M && n < N) {
          ${write}
        }` : String.raw`#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int n = f0 + 16 * i + g + 8 * h;
          if (m < M && n < N) {
            ${write}
          }
        }`}
      }${spec.argmax ? `
  // The 8 lanes of a row (g = lane >> 2) combined; lane t then adds rows 8j + 2t + q.
  #pragma unroll
  for (int j = 0; j < NT; j++)
    #pragma unroll
    for (int q = 0; q < 2; q++) {
      unsigned long long v = best[j][q];
      #pragma unroll
      for (int o = 4; o < 32; o <<= 1) v = max(v, (unsigned long long)__shfl_xor_sync(0xffffffffu, v, o));
      const int m = 8 * j + 2 * t + q;
      if (g == 0 && m < M && v > *reinterpret_cast<volatile unsigned long long*>(argmax + m)) atomicMax(argmax + m, v);
    }` : ''}
}
`;
  return { name, source, gridDependencyWait: true };
}

/** An int4Linear as the kernel reads it: sizes and device pointers (bias 0n when absent). */
export interface Int4MmaGemvLaunch {
  readonly dtype: 'bf16' | 'f16';
  readonly M: number;
  /** Weight rows (gated: 2F). */
  readonly N: number;
  readonly K: number;
  readonly groupSize: number;
  readonly gated: boolean;
  readonly activation: EpilogueActivation;
  readonly x: bigint;
  readonly qweight: bigint;
  readonly scales: bigint;
  readonly zeros: bigint;
  readonly bias: bigint;
  readonly out: bigint;
  /** RowArgmax's slots (u64 [M]) and classes, or none (not gated). */
  readonly argmax?: { readonly out: bigint; readonly classes: number };
}

/** Blocks of a launch of `spec` over `width` output features (F when gated). */
export function int4MmaGemvGrid(spec: Int4MmaGemvSpec, width: number): number {
  return Math.ceil(width / ((int4MmaWarps(spec) / spec.kWarps) * spec.tiles * (spec.gated ? 8 : 16)));
}

/** Every (FT, KW, U, chains; 8- or 16-warp blocks) the kernel takes for these rows and K (bench/gemv-sweep.ts times them against the planner's pick). */
export function int4MmaGemvSpace(dtype: 'bf16' | 'f16', M: number, K: number, groupSize: number, bias: boolean, activation: EpilogueActivation, gated: boolean): Int4MmaGemvSpec[] {
  const rowTiles = Math.ceil(M / 8), chunks = K / INT4_MMA_CHUNK_K, out: Int4MmaGemvSpec[] = [];
  // 8-warp blocks with one or two accumulator chains; 16-warp blocks (K split up to 16 ways) with one.
  const blocks = [
    { warps: 8, kWarps: [1, 2, 4, 8], unrolls: [1, 2, 4, 8], chains: [1, 2] },
    { warps: 16, kWarps: [2, 4, 8, 16], unrolls: [1, 2, 4], chains: [1] },
  ] as const;
  for (const tiles of [1, 2]) {
    if (2 * tiles * rowTiles * 4 > MAX_ACCUMULATORS) continue;
    for (const block of blocks) {
      for (const kWarps of block.kWarps) {
        if (kWarps > chunks && kWarps > 1) continue;
        const perWarp = Math.ceil(chunks / kWarps);
        for (const unroll of block.unrolls) {
          // More than 2 row tiles hold too many sums for more chunks in flight (spills past 128 registers).
          if (unroll > perWarp || 2 * tiles * unroll > MAX_VECTORS || (rowTiles > 2 && unroll > 2)) continue;
          for (const chains of block.chains) {
            out.push({
              dtype, rowTiles, K, groupSize, tiles, kWarps, unroll, bias, activation, gated,
              ...(chains === 2 ? { chains } : {}), ...(block.warps === 16 ? { warps: 16 as const } : {}),
            });
          }
        }
      }
    }
  }
  return out;
}

/**
 * Launches the kernel with the planner's spec, or `spec` (the sweep); with `prologue`, the normLinear
 * form (a.x unused; the caller checked int4MmaNormFits).
 */
export function launchInt4MmaGemv(host: KernelHost, a: Int4MmaGemvLaunch, forced?: Int4MmaGemvSpec, prologue?: NormPrologue): void {
  const width = a.gated ? a.N / 2 : a.N;
  const planned = forced ?? planInt4MmaGemv(a.dtype, a.M, width, a.K, a.groupSize, a.bias !== 0n, a.activation, a.gated, host.multiProcessorCount, prologue?.norm).spec;
  const spec: Int4MmaGemvSpec = a.argmax ? { ...planned, argmax: true } : planned;
  const grid = int4MmaGemvGrid(spec, width);
  host.kernel(int4MmaGemvKey(spec), () => int4MmaGemvSource(spec)).launch({ grid, block: int4MmaWarps(spec) * 32 }, [
    arg.ptr(prologue ? 0n : a.x), arg.ptr(a.qweight), arg.ptr(a.scales), arg.ptr(a.zeros), arg.ptr(a.bias), arg.ptr(a.out), arg.i32(a.M), arg.i32(width),
    ...(prologue ? normPrologueArgs(host, prologue) : []),
    ...(a.argmax ? [arg.ptr(a.argmax.out), arg.i32(a.argmax.classes)] : []),
  ]);
}

/** Representative plans for the nvcc compile check (132 SMs): Llama decode at 1, 12 and 32 rows, gated, f16, G 256. */
export function catalog(): KernelSource[] {
  const plans: ['bf16' | 'f16', number, number, number, number, boolean, EpilogueActivation, boolean][] = [
    ['bf16', 1, 3072, 2048, 128, false, 'none', false],
    ['bf16', 1, 2048, 8192, 128, false, 'none', false],
    ['bf16', 12, 128256, 2048, 128, false, 'none', false],
    ['bf16', 1, 8192, 2048, 128, false, 'silu', true],
    ['bf16', 32, 3072, 2048, 128, false, 'none', false],
    ['bf16', 32, 8192, 2048, 128, false, 'silu', true],
    ['f16', 3, 2304, 768, 256, true, 'gelu_tanh', false],
    ['f16', 17, 300, 1024, 128, true, 'gelu', true],
  ];
  const normed: ['bf16' | 'f16', number, number, number, number, boolean, EpilogueActivation, boolean, GemvNorm][] = [
    ['bf16', 1, 3072, 2048, 128, false, 'none', false, { kind: 'rms', residual: true, bias: false }],
    ['bf16', 4, 8192, 2048, 128, false, 'silu', true, { kind: 'rms', residual: true, bias: false }],
    ['f16', 3, 3072, 768, 128, true, 'gelu_tanh', false, { kind: 'layer', residual: true, bias: true }],
    ['bf16', 1, 3072, 768, 128, true, 'gelu_tanh', false, { kind: 'layer', residual: true, bias: true, preload: true }],
    ['bf16', 1, 8192, 2048, 128, false, 'silu', true, { kind: 'rms', residual: true, bias: false, preload: true }],
    // The last block writing x and h right after its prologue (FUSEFORMER_NORM_WRITE: early; deferred at four rows): Llama's QKV, GPT-2's fc.
    ['bf16', 1, 3072, 2048, 128, false, 'none', false, { kind: 'rms', residual: true, bias: false, preload: true, write: 'early' }],
    ['bf16', 1, 3072, 768, 128, true, 'gelu_tanh', false, { kind: 'layer', residual: true, bias: true, preload: true, write: 'early' }],
    ['bf16', 4, 8192, 2048, 128, false, 'silu', true, { kind: 'rms', residual: true, bias: false, write: 'deferred' }],
    // LayerNorm in one pass (FUSEFORMER_NORM_ONE_PASS): GPT-2's fc as INT4 + head takes it.
    ['bf16', 1, 3072, 768, 128, true, 'gelu_tanh', false, { kind: 'layer', residual: true, bias: true, preload: true, write: 'early', onePass: true }],
    // An f32 y (a fused MLP's accumulator) beside bf16 x: GPT-2's QKV, Llama's at four rows.
    ['bf16', 1, 2304, 768, 128, true, 'none', false, { kind: 'layer', residual: true, bias: true, preload: true, write: 'early', onePass: true, yF32: true }],
    ['bf16', 4, 3072, 2048, 128, false, 'none', false, { kind: 'rms', residual: true, bias: false, preload: true, write: 'early', yF32: true }],
  ];
  return [
    ...plans.map(([dtype, M, N, K, G, bias, act, gated]) => int4MmaGemvSource(planInt4MmaGemv(dtype, M, N, K, G, bias, act, gated, 132).spec)),
    // Two accumulator chains (the sweep's variant), and U = 8 chunks in flight.
    int4MmaGemvSource({ dtype: 'bf16', rowTiles: 1, K: 8192, groupSize: 128, tiles: 1, kWarps: 8, unroll: 8, bias: false, activation: 'none', gated: false, chains: 2 }),
    int4MmaGemvSource({ dtype: 'f16', rowTiles: 4, K: 2048, groupSize: 128, tiles: 1, kWarps: 4, unroll: 2, bias: true, activation: 'silu', gated: true, chains: 2 }),
    // 16-warp blocks beyond the planner's (K split 16 ways at 1 and 32 rows above): 2 column groups × 8, f16
    // with bias; and 2 × 8 with two tiles, gated.
    int4MmaGemvSource({ dtype: 'f16', rowTiles: 1, K: 4096, groupSize: 128, tiles: 1, kWarps: 8, unroll: 4, bias: true, activation: 'gelu', gated: false, warps: 16 }),
    int4MmaGemvSource({ dtype: 'bf16', rowTiles: 2, K: 2048, groupSize: 128, tiles: 2, kWarps: 8, unroll: 2, bias: true, activation: 'silu', gated: true, warps: 16 }),
    // The norm prologue: Llama's QKV and gated gate/up at 1 and 4 rows (RMSNorm after the residual add),
    // GPT-2's fc with LayerNorm, residual bias and GELU at 3 rows (f16), and 16-warp blocks.
    ...normed.map(([dtype, M, N, K, G, bias, act, gated, norm]) => int4MmaGemvSource(planInt4MmaGemv(dtype, M, N, K, G, bias, act, gated, 132, norm).spec)),
    int4MmaGemvSource({ dtype: 'bf16', rowTiles: 1, K: 8192, groupSize: 128, tiles: 1, kWarps: 16, unroll: 4, bias: false, activation: 'none', gated: false, warps: 16, norm: { kind: 'rms', residual: false, bias: false, rows: 2 } }),
    // An INT4 LM head packing its greedy picks (Int4MmaGemvSpec.argmax): Llama's at one row as planned, GPT-2's at four (f16).
    int4MmaGemvSource({ ...planInt4MmaGemv('bf16', 1, 128256, 2048, 128, false, 'none', false, 132).spec, argmax: true }),
    int4MmaGemvSource({ ...planInt4MmaGemv('f16', 4, 50257, 768, 128, false, 'none', false, 132).spec, argmax: true }),
  ];
}
