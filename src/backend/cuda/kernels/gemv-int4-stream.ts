// INT4 W4A16 GEMV streamed through shared memory by the copy engine: int4Linear for 1–8 rows of 16-bit x
// on Hopper — batch-1 decoding, where every weight byte is read once and the product's time should be
// its bytes ÷ HBM bandwidth.
//
// Why another INT4 GEMV: gemv-int4-mma.ts's lanes load their own 16-byte vectors, a few chunks ahead, so
// a warp spends most of its life waiting on two or three round trips to HBM; its kernels ran at 17–46% of
// the copy bandwidth (bench/results/gpu-pending-s11/call6/profile-int4.log: gate/up 9.4 µs for 17.6 MB,
// down 7.0 µs for 8.8 MB). Here one warp of each block only issues bulk copies (cp.async.bulk, the TMA
// unit): a block's whole share of the matrix is requested at once, as far as a ring of shared-memory
// stages allows, before the kernel even waits for the one that writes x (programmatic launch), and the
// eight (or sixteen) consumer warps compute on the stages as they land.
//
// A stage is TS consecutive tiles of 16 weight rows × all of K. Rows are contiguous in the packed layout,
// so a stage is three bulk copies: its weights (16·TS·K/2 bytes), its f16 scales and its u8 zeros. The
// copy engine costs ~50–70 ns a copy, whatever its size: the first version copied each row on its own
// (18 copies a 16 KB stage) and its consumers waited on the copies, at 15–44% of the copy bandwidth
// (bench/results/gpu-pending-s16/call3/int4-sweep.json; column pieces of 256 B were slower still).
// Block b takes stages b, b + grid, …; rows g and g + 1 of a quarter-warp share banks (a 2-way conflict on
// the weight loads: the copy cannot pad rows).
//
// The arithmetic is gemv-int4-mma.ts's: mma.sync m16n8k16 with the 16 weight rows as A and up to 8 rows
// of x as B, the nibbles turned into exact (q − z) pairs by LOP3 + FMA, each 128-wide chunk's sum scaled
// by its group's scale in f32. Consumer warp w takes chunks w, w + CW, … of each tile (two accumulator
// chains); the CW partial sums meet in shared memory in a fixed order (deterministic), and warp
// (tile mod CW) adds bias and activation and writes the 16 outputs.
//
// Measured on the H200 (session 16, bench/results/gpu-pending-s16/call4/int4-sweep.json, M = 1, µs against
// the mma GEMV): QKV 4.11 vs 3.33, O 2.72 vs 2.67, gate/up 10.6 vs 8.2, down 6.69 vs 7.00, LM head 62.1 vs
// 56.7; Llama 1.2B INT4 + head decode 0.608 vs 0.544 ms/token. The consumers are the limit: one block of
// eight warps an SM spends ~1.3 µs on a 16 KB stage (the dequantizing takes ~170 instructions a warp per
// 128-wide chunk), slower than HBM delivers it. So 'auto' takes it only with FUSEFORMER_INT4_STREAM=1.
//
// Bytes: K·N/2 (weights) + 3·K·N/G (scales, zeros) + M·K·s (x, once a block, from L2) + M·N·s (out).

import type { FloatDType } from '../../../dtype.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { BULK_COPY_LIB } from './bulk-copy-lib.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import type { Int4MmaGemvLaunch } from './gemv-int4-mma.js';
import { int4MmaDequantCode, INT4_MMA_CHUNK_K } from './gemv-int4-mma.js';
import { MMA_LIB } from './mma-lib.js';
import type { EpilogueActivation } from './quant-int4.js';
import { activationExpression, EPILOGUE_ACTIVATION_CODE } from './quant-int4.js';
import { constants, kernelIdentifier } from './row-kernels.js';

/** Rows of x the kernel takes (one mma column tile). */
export const INT4_STREAM_MAX_ROWS = 8;
/** Weight rows a stage holds (the mma's A tile). */
export const INT4_STREAM_TILE_ROWS = 16;
/** Most ring stages a block keeps in flight. */
const MAX_SLOTS = 16;

export interface Int4StreamGemvSpec {
  readonly dtype: 'bf16' | 'f16';
  readonly K: number;
  readonly groupSize: number;
  /** Consumer warps (8 or 16); one more warp issues the copies. */
  readonly consumerWarps: 8 | 16;
  /** Tiles of 16 rows a stage holds (1, 2 or 4; N a multiple of 16·TS). */
  readonly tilesPerStage: 1 | 2 | 4;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
}

export function int4StreamGemvKey(s: Int4StreamGemvSpec): string {
  return `int4_gemv_stream.${s.dtype}.k${s.K}.g${s.groupSize}.cw${s.consumerWarps}.ts${s.tilesPerStage}${s.bias ? '.bias' : ''}.${s.activation}`;
}

/** Bytes of one stage: TS·16 rows of weights, then their scales and zeros; a multiple of 128. */
export function int4StreamStageBytes(K: number, groupSize: number, tilesPerStage: number): number {
  const rows = INT4_STREAM_TILE_ROWS * tilesPerStage;
  return roundUp(rows * (K / 2) + rows * (K / groupSize) * 3, 128);
}

/** Shared memory of a block before the ring: x (M rows), the partial sums (two sets), the barriers. */
function headerBytes(M: number, K: number, consumerWarps: number, slots: number): number {
  return roundUp(M * K * 2, 128) + 2 * consumerWarps * 32 * 16 + roundUp(16 * slots, 128);
}

export interface Int4StreamGemvPlan {
  readonly spec: Int4StreamGemvSpec;
  readonly grid: number;
  readonly slots: number;
  readonly sharedBytes: number;
}

/**
 * Whether int4Linear's 'auto' path may take the kernel: opt-in with FUSEFORMER_INT4_STREAM=1, since on the
 * H200 it ran slower than the mma GEMV at 4 of Llama 1.2B's 5 decode products (see the header).
 */
export function int4StreamGemvEnabled(): boolean {
  return process.env['FUSEFORMER_INT4_STREAM'] === '1';
}

/**
 * Whether the kernel takes this int4Linear: an sm_90-or-newer GPU (bulk copies), 1–8 rows of 16-bit x,
 * not gated, N a multiple of 16 (whole tiles), groups a multiple of 128 dividing K, at least two stages
 * in shared memory, and 16-byte aligned scales and zeros (each tile's are copied as one piece).
 */
export function int4StreamGemvApplies(host: Pick<KernelHost, 'arch' | 'maxSharedBytesPerBlock'>, dtype: FloatDType, M: number, N: number, K: number, groupSize: number, gated: boolean): boolean {
  const sm = /^sm_(\d+)/.exec(host.arch ?? '');
  if (!sm || Number(sm[1]) < 90) return false;
  if ((dtype !== 'bf16' && dtype !== 'f16') || gated || M < 1 || M > INT4_STREAM_MAX_ROWS || N % INT4_STREAM_TILE_ROWS !== 0) return false;
  if (groupSize % INT4_MMA_CHUNK_K !== 0 || K % groupSize !== 0) return false;
  return headerBytes(M, K, 8, 2) + 2 * int4StreamStageBytes(K, groupSize, 1) <= host.maxSharedBytesPerBlock;
}

/**
 * One block per SM (its ring takes the SM's shared memory); stages of up to 4 tiles while every SM still
 * gets two stages (fewer, larger copies); as many stages in flight as shared memory holds, no more than
 * a block's share.
 */
export function planInt4StreamGemv(dtype: 'bf16' | 'f16', M: number, N: number, K: number, groupSize: number, bias: boolean, activation: EpilogueActivation, multiProcessorCount: number, maxSharedBytes: number, consumerWarps: 8 | 16 = 8): Int4StreamGemvPlan {
  const tiles = N / INT4_STREAM_TILE_ROWS;
  const fits = (ts: number) => headerBytes(M, K, consumerWarps, 2) + 2 * int4StreamStageBytes(K, groupSize, ts) <= maxSharedBytes;
  const tilesPerStage = ([4, 2] as const).find((ts) => tiles % ts === 0 && tiles / ts >= 2 * multiProcessorCount && fits(ts)) ?? 1;
  const spec: Int4StreamGemvSpec = { dtype, K, groupSize, consumerWarps, tilesPerStage, bias, activation };
  return { spec, ...int4StreamLayout(spec, M, N, multiProcessorCount, maxSharedBytes) };
}

/** Grid, ring stages and shared memory of `spec` for M rows and N outputs. */
export function int4StreamLayout(spec: Int4StreamGemvSpec, M: number, N: number, multiProcessorCount: number, maxSharedBytes: number): { grid: number; slots: number; sharedBytes: number } {
  const stages = N / (INT4_STREAM_TILE_ROWS * spec.tilesPerStage);
  const grid = Math.max(1, Math.min(stages, multiProcessorCount));
  const stage = int4StreamStageBytes(spec.K, spec.groupSize, spec.tilesPerStage), perBlock = Math.ceil(stages / grid);
  let slots = Math.min(MAX_SLOTS, Math.max(2, perBlock));
  while (slots > 2 && headerBytes(M, spec.K, spec.consumerWarps, slots) + slots * stage > maxSharedBytes) slots--;
  return { grid, slots, sharedBytes: headerBytes(M, spec.K, spec.consumerWarps, slots) + slots * stage };
}

/** Whether `spec`'s two stages fit in shared memory beside M rows of x (forced specs: the sweep). */
export function int4StreamLayoutFits(spec: Int4StreamGemvSpec, M: number, N: number, host: Pick<KernelHost, 'multiProcessorCount' | 'maxSharedBytesPerBlock'>): boolean {
  return N % (INT4_STREAM_TILE_ROWS * spec.tilesPerStage) === 0
    && int4StreamLayout(spec, M, N, host.multiProcessorCount, host.maxSharedBytesPerBlock).sharedBytes <= host.maxSharedBytesPerBlock;
}

export function int4StreamGemvSource(spec: Int4StreamGemvSpec): KernelSource {
  const { K, groupSize: G, tilesPerStage: TS, consumerWarps: CW } = spec;
  if (K % INT4_MMA_CHUNK_K !== 0 || G % INT4_MMA_CHUNK_K !== 0 || K % G !== 0) {
    throw new RangeError(`int4StreamGemvSource: K (${K}) and the group size (${G}) must be multiples of ${INT4_MMA_CHUNK_K}, G dividing K`);
  }
  const name = kernelIdentifier(int4StreamGemvKey(spec));
  const rows = INT4_STREAM_TILE_ROWS * TS;
  const source = String.raw`${DEVICE_LIB}
${MMA_LIB}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({
    K, G, CW, TS, CHUNKS: K / INT4_MMA_CHUNK_K, GPR: K / G, ROW_BYTES: K / 2, STAGE: int4StreamStageBytes(K, G, TS),
    WEIGHT_BYTES: rows * (K / 2), SCALE_BYTES: rows * (K / G) * 2, ZERO_BYTES: rows * (K / G), RED_BYTES: 2 * CW * 32 * 16, BIAS: spec.bias,
  })}
constexpr unsigned long long BARRIER_TIMEOUT_NS = 2000000000ull;
${BULK_COPY_LIB}
${int4MmaDequantCode(spec.dtype)}
// Shared memory: x [M][K] | partial sums [2][CW][32][4] f32 | full[slots], empty[slots] | ring [slots][STAGE],
// a stage: weights [16·TS][K/2 bytes] | scales f16 [16·TS][K/G] | zeros u8 [16·TS][K/G].
// x [M, K], qweight u32 [N, K/8], scales f16 and zeros u8 [N, K/G], bias [N] or null, out [M, N].
// Grid ≤ N/(16·TS) stages, block (CW + 1) warps.
extern "C" __global__ void __launch_bounds__((CW + 1) * 32, 1) ${name}(
    const T* __restrict__ x, const u32* __restrict__ qweight, const __half* __restrict__ scales,
    const unsigned char* __restrict__ zeros, const T* __restrict__ bias, T* __restrict__ out, int M, int N, int slots) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int x_bytes = (M * K * 2 + 127) & ~127;
  T* xs = reinterpret_cast<T*>(smem);
  float* red = reinterpret_cast<float*>(smem + x_bytes);
  u64* full = reinterpret_cast<u64*>(smem + x_bytes + RED_BYTES);
  u64* empty = full + slots;
  unsigned char* ring = smem + x_bytes + RED_BYTES + ((16 * slots + 127) & ~127);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int stages = N / (16 * TS);
  const int my_stages = (int)blockIdx.x < stages ? (stages - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2 * slots; i++) mbar_init(&full[i]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == CW) {
    // The producer: weights depend on no earlier kernel, so every stage the ring holds is requested now.
    if (lane == 0) {
      for (int i = 0; i < my_stages; i++) {
        const int slot = i % slots;
        const size_t row0 = (size_t)(blockIdx.x + i * gridDim.x) * 16 * TS;
        if (i >= slots) mbar_wait(&empty[slot], ((i / slots) - 1) & 1);
        unsigned char* stage = ring + (size_t)slot * STAGE;
        mbar_expect(&full[slot], WEIGHT_BYTES + SCALE_BYTES + ZERO_BYTES);
        bulk_copy(stage, qweight + row0 * (K / 8), WEIGHT_BYTES, &full[slot]);
        bulk_copy(stage + WEIGHT_BYTES, scales + row0 * GPR, SCALE_BYTES, &full[slot]);
        bulk_copy(stage + WEIGHT_BYTES + SCALE_BYTES, zeros + row0 * GPR, ZERO_BYTES, &full[slot]);
      }
    }
    return;
  }

  GRID_DEPENDENCY_WAIT();
  for (int i = threadIdx.x; i < M * K / 8; i += CW * 32) reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x)[i];
  asm volatile("bar.sync 1, %0;" :: "n"(CW * 32) : "memory");

  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < my_stages; i++) {
    const int slot = i % slots;
    mbar_wait(&full[slot], (i / slots) & 1);
    const unsigned char* stage = ring + (size_t)slot * STAGE;
    #pragma unroll 1
    for (int tt = 0; tt < TS; tt++) {
      const int tile = (blockIdx.x + i * gridDim.x) * TS + tt, seq = i * TS + tt;
      const unsigned char* tw = stage + (size_t)tt * 16 * ROW_BYTES;
      const __half* sscale = reinterpret_cast<const __half*>(stage + WEIGHT_BYTES) + tt * 16 * GPR;
      const unsigned char* szero = stage + WEIGHT_BYTES + SCALE_BYTES + tt * 16 * GPR;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      #pragma unroll 1
      for (int c = warp; c < CHUNKS; c += CW) {
        const uint4 wv0 = *reinterpret_cast<const uint4*>(tw + g * ROW_BYTES + 64 * c + 16 * t);
        const uint4 wv1 = *reinterpret_cast<const uint4*>(tw + (g + 8) * ROW_BYTES + 64 * c + 16 * t);
        const int gi = (c * ${INT4_MMA_CHUNK_K}) / G;
        const u32 mz0 = minus_zero_pair(szero[g * GPR + gi]), mz1 = minus_zero_pair(szero[(g + 8) * GPR + gi]);
        // Two accumulator chains (the even and odd mma steps), halving the dependent chain of 8 mma.
        float cf[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        #pragma unroll
        for (int w = 0; w < 4; w++) {
          // x pairs (x[8w + e], x[8w + e + 4]) of row g, for e = 0..3 (gemv-int4-mma.ts's k order).
          const uint4 xv = g < M ? *reinterpret_cast<const uint4*>(xs + g * K + c * ${INT4_MMA_CHUNK_K} + 32 * t + 8 * w) : make_uint4(0u, 0u, 0u, 0u);
          const u32 bp[4] = { __byte_perm(xv.x, xv.z, 0x5410), __byte_perm(xv.x, xv.z, 0x7632),
                              __byte_perm(xv.y, xv.w, 0x5410), __byte_perm(xv.y, xv.w, 0x7632) };
          const u32 w0 = word_of(wv0, w), w1 = word_of(wv1, w);
          #pragma unroll
          for (int s = 0; s < 2; s++) {
            const u32 af[4] = { nibble_pair(w0, 2 * s, mz0), nibble_pair(w1, 2 * s, mz1), nibble_pair(w0, 2 * s + 1, mz0), nibble_pair(w1, 2 * s + 1, mz1) };
            mma_16816<T>(cf[s], af, bp[2 * s], bp[2 * s + 1]);
          }
        }
        const float s0 = __half2float(sscale[g * GPR + gi]), s1 = __half2float(sscale[(g + 8) * GPR + gi]);
        acc[0] = fmaf(s0, cf[0][0] + cf[1][0], acc[0]);
        acc[1] = fmaf(s0, cf[0][1] + cf[1][1], acc[1]);
        acc[2] = fmaf(s1, cf[0][2] + cf[1][2], acc[2]);
        acc[3] = fmaf(s1, cf[0][3] + cf[1][3], acc[3]);
      }
      // The partial sums meet in shared memory (two sets, alternating: the warp that reduces a tile is done
      // with its set before it reaches the next tile's barrier); after the last tile, the slot is free.
      float* r = red + (seq & 1) * CW * 32 * 4;
      *reinterpret_cast<float4*>(r + (warp * 32 + lane) * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      asm volatile("bar.sync 1, %0;" :: "n"(CW * 32) : "memory");
      if (tt == TS - 1 && threadIdx.x == 0) mbar_arrive(&empty[slot]);
      if (warp == seq % CW) {
        // C [q] = (weight row g + 8·(q >> 1), x row 2t + (q & 1)); the warps' sums in warp order.
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        for (int w = 0; w < CW; w++) {
          const float4 p = *reinterpret_cast<const float4*>(r + (w * 32 + lane) * 4);
          v[0] += p.x; v[1] += p.y; v[2] += p.z; v[3] += p.w;
        }
        #pragma unroll
        for (int q = 0; q < 4; q++) {
          const int m = 2 * t + (q & 1), n = 16 * tile + g + 8 * (q >> 1);
          if (m < M) {
            const float y = v[q] + (BIAS ? to_float(bias[n]) : 0.f);
            out[(size_t)m * N + n] = from_float<T>(${activationExpression(spec.activation, 'y')});
          }
        }
      }
    }
  }
  GRID_DEPENDENCY_TRIGGER();
}
`;
  return { name, source, gridDependencyWait: true };
}

/** An int4Linear as the kernel reads it: the mma GEMV's launch, never gated. */
export type Int4StreamGemvLaunch = Omit<Int4MmaGemvLaunch, 'gated'>;

/** Launches the planner's spec, or `forced` (the sweep and the tests). */
export function launchInt4StreamGemv(host: KernelHost, a: Int4StreamGemvLaunch, forced?: Partial<Int4StreamGemvSpec>): void {
  const planned = planInt4StreamGemv(a.dtype, a.M, a.N, a.K, a.groupSize, a.bias !== 0n, a.activation, host.multiProcessorCount, host.maxSharedBytesPerBlock, forced?.consumerWarps);
  const spec = { ...planned.spec, ...forced };
  const { grid, slots, sharedBytes } = forced ? int4StreamLayout(spec, a.M, a.N, host.multiProcessorCount, host.maxSharedBytesPerBlock) : planned;
  host.kernel(int4StreamGemvKey(spec), () => int4StreamGemvSource(spec)).launch({ grid, block: (spec.consumerWarps + 1) * 32, sharedBytes }, [
    arg.ptr(a.x), arg.ptr(a.qweight), arg.ptr(a.scales), arg.ptr(a.zeros), arg.ptr(a.bias), arg.ptr(a.out), arg.i32(a.M), arg.i32(a.N), arg.i32(slots),
  ]);
}

/** Representative specs for the nvcc compile check: Llama 1.2B's decode products, GPT-2's, f16 with bias and GELU, G 256, 16 consumers. */
export function catalog(): KernelSource[] {
  const plans: ['bf16' | 'f16', number, number, number, boolean, EpilogueActivation, 8 | 16][] = [
    ['bf16', 3072, 2048, 128, false, 'none', 8],
    ['bf16', 2048, 8192, 128, false, 'none', 8],
    ['bf16', 128256, 2048, 128, false, 'none', 16],
    ['f16', 3072, 768, 128, true, 'gelu_tanh', 8],
    ['bf16', 4096, 4096, 256, true, 'silu', 16],
  ];
  return plans.map(([dtype, N, K, G, bias, act, cw]) => int4StreamGemvSource(planInt4StreamGemv(dtype, 1, N, K, G, bias, act, 132, 232448, cw).spec));
}

function roundUp(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}
