// decodeLayers (backend.ts): every layer of one sequence's decode step as one persistent kernel — the
// "megakernel" answer to a batch-1 step being a chain of ~6 short kernels a layer, each paying a launch,
// a ramp and a tail while HBM idles (docs/perf.md: GPT-2's step was 64% idle by removal timing).
//
// One block per SM (G = SM count, ~200 KB of shared memory each, so all are resident at once) walks the
// stages of every layer in order, with a grid barrier (a global counter) between dependent stages:
//   QKV    h = norm1(x [+ y + b]) formed by every block; rows of qkv = h·Wqkvᵀ    (block b: rows b·N/G ..)
//   ATTN   units (query head, split of the keys): bias + RoPE of q and the new key, the new key and value
//          written to the cache, softmax over keys 0..p in shared memory, out (or split partials)
//   O      x' = the attention output (splits combined); rows of y = a·Woᵀ
//   UP     h = norm2(x + y + b); rows of act(h·Wupᵀ + b) (gated: act(gate)·up)
//   DOWN   rows of y = u·Wdownᵀ
// and finally block 0 forms x += y + b, h = finalNorm(x). A stage's blocks all compute the same norm of
// the same inputs (bit-identical); block 0 writes the residual stream into the other of two buffers, so no
// block overwrites what another is still reading.
//
// The weights never wait on the barriers: a ninth warp of each block is its producer. Its lane 0 runs
// over the block's whole schedule of weight chunks (its rows of every product of every layer, in order),
// issuing TMA bulk copies up to SLOTS chunks of ≤ SLOT_BYTES ahead of the 8 consumer warps through a ring
// of shared-memory slots (mbarriers: full = landed, empty = released). So while the consumers wait at a
// barrier or sit out the attention stage, their next product's first chunks are already arriving — the
// HBM stream that separate kernels stop and restart at every kernel boundary runs on. The consumers
// synchronise among themselves with a named barrier (csync), never with the producer. Chunks hold whole
// rows: a row of K 16-bit values must fit a slot. A chunk's rows are split among the 8 warps (rows ×
// K-parts) against x held in shared memory as f32, partial sums combined through shared memory by the
// epilogue's threads; or, WARP_CHUNKS, each warp takes whole chunks of its own.
// Intermediates other blocks wrote in this kernel (and the caches) are read through L2 (ld.global.cg):
// L1 is not coherent.
// The barrier spins on a counter with a 2 s timeout that traps (an error, not a hang, should a block ever
// not be resident); the last block out sets the counters back to zero (KernelHost.counters).

import type { DecodeLayersArgs } from '../../backend.js';
import { DECODE_LAYERS_KEYS_PER_SPLIT, decodeLayersWorkspaceLayout } from '../../backend.js';
import type { Activation } from '../../backend.js';
import { checkDecodeLayers } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import { byteSize } from '../../../dtype.js';
import type { Tensor } from '../../../tensor.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { BULK_COPY_LIB, SMEM_ADDRESS_CODE } from './bulk-copy-lib.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { ACTIVATION_CODE } from './gated-activation.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export const DECODE_LAYERS_THREADS = 256;
/**
 * Bytes of one ring slot (whole rows of K ≤ 24576 16-bit weights). Measured (H200, session 14): a chunk
 * costs ~1.2 µs however large — 16 KB slots ran Llama 1.2B's MLP-up at 1.19 µs a chunk, 32 KB at 1.27 —
 * so the chunk is as large as shared memory allows a few of.
 */
export const SLOT_BYTES = 48 * 1024;
/** Ring slots at most (each SM's weight bytes in flight: SLOTS × slotBytes). */
export const MAX_SLOTS = 4;
/**
 * The warp-per-chunk consumers' slot (warpChunks): 16 KB, so that a ring holds a chunk for each of the 8
 * consumer warps and more. Rows of such a chunk a warp holds sums for at most: WARP_CHUNK_ROWS.
 */
export const WARP_SLOT_BYTES = 16 * 1024;
export const WARP_MAX_SLOTS = 12;
export const WARP_CHUNK_ROWS = 12;

/**
 * How the megakernel consumes its ring, for sweeps on the GPU (bench/gpu-pending.sh megakernel-sweep):
 * FUSEFORMER_MEGAKERNEL_RELEASE_FLAG=1 releases grid barriers through a flag word of its own,
 * FUSEFORMER_MEGAKERNEL_KV_PREFETCH=1 asks L2 for attention's older keys and values before the QKV barrier,
 * FUSEFORMER_MEGAKERNEL_SLOT_KB sets a slot size. Read when a kernel is planned. `warpChunks` (each
 * consumer warp takes whole chunks of its own) has no switch: on the H200 (session 16,
 * bench/results/gpu-pending-s16/call5/) it passed the GPU checks but ran GPT-2 124M at 0.365–0.398
 * ms/token against 0.315 with the block per chunk, and at Llama 1.2B's shape the kernel failed (a wait
 * timed out), so only code that sets this object turns it on (the catalog, the CPU plan test).
 */
export const megakernelTuning = {
  warpChunks: false,
  releaseFlag: process.env['FUSEFORMER_MEGAKERNEL_RELEASE_FLAG'] === '1',
  kvPrefetch: process.env['FUSEFORMER_MEGAKERNEL_KV_PREFETCH'] === '1',
  slotKiB: Math.max(0, Number(process.env['FUSEFORMER_MEGAKERNEL_SLOT_KB'] ?? 0) || 0),
};
/** Pointers per layer in the weight table (14 used). */
export const TABLE_STRIDE = 16;

export interface DecodeLayersSpec {
  readonly dtype: 'bf16' | 'f16';
  readonly hidden: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly ffn: number;
  readonly maxLen: number;
  readonly norm: 'layer' | 'rms';
  readonly gated: boolean;
  readonly activation: Activation;
  readonly qkvBias: boolean;
  readonly outBias: boolean;
  readonly upBias: boolean;
  readonly downBias: boolean;
  readonly rope: boolean;
  /** The norms' epsilon (baked in as an f32 constant). */
  readonly eps: number;
  /** Blocks: the SM count (all resident). */
  readonly blocks: number;
  readonly slots: number;
  /** Record %globaltimer stamps of every stage per block (bench/megakernel-trace.ts; off in normal runs). */
  readonly trace?: boolean;
  /** Bytes of a ring slot (default SLOT_BYTES). */
  readonly slotBytes?: number;
  /** Each consumer warp takes whole chunks of its own (megakernelTuning.warpChunks); else the block shares each chunk. */
  readonly warpChunks?: boolean;
  /** Grid barriers released through a flag on a line of its own (megakernelTuning.releaseFlag). */
  readonly releaseFlag?: boolean;
  /** Attention's older keys and values asked of L2 before the QKV stage's barrier (megakernelTuning.kvPrefetch). */
  readonly kvPrefetch?: boolean;
}

/** The counters word a RELEASE_FLAG barrier polls: 128 bytes past the arrival count, a cache line of its own. */
export const RELEASE_WORD = 32;

function slotBytesOf(s: Pick<DecodeLayersSpec, 'slotBytes'>): number { return s.slotBytes ?? SLOT_BYTES; }

/** u64 stamps a block records when traced: 3, then TRACE_PER_LAYER a layer, then 1 (see STAMP in the source). */
export const TRACE_PER_LAYER = 16;
export function traceStride(layers: number): number { return 3 + TRACE_PER_LAYER * layers + 1; }

export function decodeLayersKey(s: DecodeLayersSpec): string {
  const bias = ['qkv', 'out', 'up', 'down'].filter((_, i) => [s.qkvBias, s.outBias, s.upBias, s.downBias][i]).join('_') || 'nobias';
  return `decode_layers.${s.dtype}.h${s.hidden}.q${s.heads}.kv${s.kvHeads}.d${s.headDim}.f${s.ffn}.L${s.maxLen}.${s.norm}.${s.gated ? 'gated_' : ''}${s.activation}.${bias}${s.rope ? '.rope' : ''}.e${Math.fround(s.eps).toExponential(6)}.g${s.blocks}.s${s.slots}x${slotBytesOf(s) / 1024}k${s.warpChunks ? '.warps' : ''}${s.releaseFlag ? '.flag' : ''}${s.kvPrefetch ? '.kvpf' : ''}${s.trace ? '.trace' : ''}`;
}

/** Why the megakernel cannot run this model (null: it can). */
export function decodeLayersUnsupported(s: Pick<DecodeLayersSpec, 'hidden' | 'ffn' | 'heads' | 'headDim'>, slotBytes = SLOT_BYTES): string | null {
  const widths = { hidden: s.hidden, ffn: s.ffn, 'attention width': s.heads * s.headDim };
  for (const [name, k] of Object.entries(widths)) {
    if (k % 8 !== 0) return `its ${name} (${k}) is not a multiple of 8`;
    if (k * 2 > slotBytes) return `its ${name} (${k}) is wider than a ${slotBytes / 1024} KiB weight slot holds`;
    if (k < 256) return `its ${name} (${k}) is below 256`;
  }
  if (s.headDim % 8 !== 0 || s.headDim > 256) return `its head dimension ${s.headDim} is not a multiple of 8 up to 256`;
  return null;
}

/** Partial sums a shared chunk makes at most: its rows at K = 256 (the narrowest product), or 8 parts of a row. */
function redHalf(s: Pick<DecodeLayersSpec, 'slotBytes'>): number { return slotBytesOf(s) / (256 * 2); }

/** Shared-memory layout (bytes): the ring, x as f32, partial sums, stage biases, attention's q/k/v/scores/sums, mbarriers, the table. */
function sharedLayout(s: DecodeLayersSpec) {
  const xsFloats = Math.max(s.hidden, s.ffn, s.heads * s.headDim);
  const ring = s.slots * slotBytesOf(s);
  const xs = ring, red = xs + xsFloats * 4, reduce = red + 2 * redHalf(s) * 4, bias = reduce + 32 * 4, attention = bias + 2 * MAX_BLOCK_ROWS * 4;
  const attentionFloats = 3 * s.headDim + DECODE_LAYERS_KEYS_PER_SPLIT + 8 * DECODE_LAYERS_THREADS;
  const bars = Math.ceil((attention + attentionFloats * 4) / 16) * 16;
  const table = bars + Math.ceil((2 * s.slots * 8) / 16) * 16;
  return { xsFloats, xs, red, reduce, bias, attention, bars, table, total: table };
}

/** Rows of one product a block may own (its stage biases are staged in shared memory). */
export const MAX_BLOCK_ROWS = 256;

/** Shared memory the kernel needs without its ring, for `layers` layers (their weight table is staged too). */
export function decodeLayersFixedShared(s: Omit<DecodeLayersSpec, 'slots'>, layers: number): number {
  return sharedLayout({ ...s, slots: 0 }).total + layers * TABLE_STRIDE * 8;
}

export function decodeLayersSource(s: DecodeLayersSpec): KernelSource {
  const name = kernelIdentifier(decodeLayersKey(s));
  const sh = sharedLayout(s), ws = decodeLayersWorkspaceLayout({ hidden: s.hidden, heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim, ffn: s.ffn, maxLen: s.maxLen });
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', s.dtype)}
${constants({
    H: s.hidden, HQ: s.heads, HKV: s.kvHeads, D: s.headDim, F: s.ffn, QKV_W: (s.heads + 2 * s.kvHeads) * s.headDim, ATT_W: s.heads * s.headDim,
    GROUP: s.heads / s.kvHeads, G: s.blocks, SLOTS: s.slots, SLOT_BYTES: slotBytesOf(s), WARP_CHUNKS: s.warpChunks === true, WARP_CHUNK_ROWS, RELEASE_FLAG: s.releaseFlag === true, RELEASE_WORD, KV_PREFETCH: s.kvPrefetch === true, THREADS: DECODE_LAYERS_THREADS, WARPS: DECODE_LAYERS_THREADS / 32, VEC: 8,
    KPS: DECODE_LAYERS_KEYS_PER_SPLIT, MAX_SPLITS: Math.ceil(s.maxLen / DECODE_LAYERS_KEYS_PER_SPLIT), TABLE_STRIDE,
    SH_XS: sh.xs, SH_RED: sh.red, SH_REDUCE: sh.reduce, SH_BIAS: sh.bias, SH_ATT: sh.attention, SH_BARS: sh.bars, SH_TABLE: sh.table, MAX_BLOCK_ROWS, RED_HALF: redHalf(s),
    WS_XA: ws.xa, WS_XB: ws.xb, WS_QKV: ws.qkv, WS_ATTN: ws.attn, WS_Y: ws.y, WS_ACT: ws.act, WS_PART: ws.part,
    TRACE: s.trace === true, NORM_RMS: s.norm === 'rms', GATED: s.gated, QKV_BIAS: s.qkvBias, OUT_BIAS: s.outBias, UP_BIAS: s.upBias, DOWN_BIAS: s.downBias, ROPE: s.rope,
  })}
static_assert(sizeof(T) == 2, "16-bit weights");
// Table entries of a layer.
enum { T_N1G = 0, T_N1B, T_WQKV, T_BQKV, T_WO, T_BO, T_N2G, T_N2B, T_WUP, T_BUP, T_WDOWN, T_BDOWN, T_KC, T_VC };
constexpr unsigned long long BARRIER_TIMEOUT_NS = 2000000000ull;
// Traced builds: thread 0 stamps %globaltimer into trace[block][i] (TRACE_PER_LAYER stamps a layer).
#define STAMP(i) do { if (TRACE && threadIdx.x == 0) trace[(size_t)blockIdx.x * trace_stride + (i)] = global_timer(); } while (0)
constexpr float EPS = ${Math.fround(s.eps).toExponential(9)}f;

__device__ __forceinline__ float activate(float g) { return ${ACTIVATION_CODE[s.activation]}; }
__device__ __forceinline__ float round_t(float v) { return to_float(from_float<T>(v)); }
// A 16-bit value another block wrote in this kernel: through L2, not a stale L1 line.
__device__ __forceinline__ float load_cg(const T* p) {
  const unsigned short u = __ldcg(reinterpret_cast<const unsigned short*>(p));
  T v;
  *reinterpret_cast<unsigned short*>(&v) = u;
  return to_float(v);
}

// The consumers' own barrier (named barrier 1 over THREADS threads: the producer warp never joins).
__device__ __forceinline__ void csync() { asm volatile("bar.sync 1, %0;" :: "n"(THREADS) : "memory"); }
// A reduction over the consumer warps (csync, not __syncthreads: the producer warp never joins).
template <bool MAX>
__device__ __forceinline__ float creduce(float x, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  x = MAX ? warp_max(x) : warp_sum(x);
  csync();
  if (lane == 0) shared[warp] = x;
  csync();
  const float v = lane < WARPS ? shared[lane] : MAX ? __int_as_float(0xff800000) : 0.f;
  return MAX ? warp_max(v) : warp_sum(v);
}
__device__ __forceinline__ float csum(float x, float* shared) { return creduce<false>(x, shared); }
__device__ __forceinline__ float cmax(float x, float* shared) { return creduce<true>(x, shared); }
// 8 consecutive 16-bit values (16-byte aligned) as floats: through L2 (another block's output) or plainly (weights).
__device__ __forceinline__ void unpack8(const uint4& r, float (&out)[8]) {
  const T* e = reinterpret_cast<const T*>(&r);
  #pragma unroll
  for (int k = 0; k < 8; k++) out[k] = to_float(e[k]);
}
__device__ __forceinline__ uint4 pack8(const float (&in)[8]) {
  uint4 r;
  T* e = reinterpret_cast<T*>(&r);
  #pragma unroll
  for (int k = 0; k < 8; k++) e[k] = from_float<T>(in[k]);
  return r;
}
// xs[0..N) = src as floats, every thread's loads issued before any is used (one L2 round trip, not N/THREADS).
template <int N>
__device__ __forceinline__ void stage_input(float* xs, const T* src) {
  constexpr int NV = (N / 8 + THREADS - 1) / THREADS;
  uint4 r[NV];
  #pragma unroll
  for (int n = 0; n < NV; n++) {
    const int i = (threadIdx.x + n * THREADS) * 8;
    if (i < N) r[n] = __ldcg(reinterpret_cast<const uint4*>(src + i));
  }
  #pragma unroll
  for (int n = 0; n < NV; n++) {
    const int i = (threadIdx.x + n * THREADS) * 8;
    if (i < N) {
      float f[8];
      unpack8(r[n], f);
      *reinterpret_cast<float4*>(xs + i) = make_float4(f[0], f[1], f[2], f[3]);
      *reinterpret_cast<float4*>(xs + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
  }
  csync();
}

// ---- the ring: TMA bulk copies issued by a producer warp, completed on mbarriers -------------------------
// Warp specialisation: warp WARPS (the ninth) only issues copies, so when the copy engine's queue is full
// only it stalls. (Two earlier versions issued from the consumers — one TMA copy by thread 0, then
// cp.async by every thread — and either way the issue stalled the whole block: ~1.4 µs a 16 KB chunk,
// 12 GB/s an SM; bench/results/gpu-pending-s14/call4, call5.) full[s]: the copy into slot s landed;
// empty[s]: the consumers are done with slot s.
${SMEM_ADDRESS_CODE}
${BULK_COPY_LIB}__device__ __forceinline__ u32 load_acquire(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block arrives, then waits until all G have: the count only grows within a launch (target = G·n
// for the n-th barrier). Writes before it are visible to every block after it (fence, then the count).
// RELEASE_FLAG (megakernelTuning.releaseFlag, not yet run on a GPU): the last block to arrive publishes
// the barrier's number in a word of its own cache line (counters[RELEASE_WORD]) and the others poll that,
// so 131 polling blocks do not queue on the line the arrivals' atomics go to.
__device__ __forceinline__ void grid_barrier(u32* count, u32 target) {
  csync();
  if (threadIdx.x == 0) {
    __threadfence();
    const u32 arrived = atomicAdd(count, 1u) + 1u;
    const u64 start = global_timer();
    if (RELEASE_FLAG) {
      u32* release = count + RELEASE_WORD;
      if (arrived == target) {
        __threadfence();  // the arrivals it has seen (and the writes they published) before the flag
        asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(release), "r"(target / G) : "memory");
      }
      else while (load_acquire(release) < target / G) if (global_timer() - start > BARRIER_TIMEOUT_NS) __trap();
    } else {
      while (load_acquire(count) < target) {
        if (global_timer() - start > BARRIER_TIMEOUT_NS) __trap();  // a block not resident: fail, do not hang
      }
    }
    __threadfence();
  }
  csync();
}

// ---- the weight schedule ----------------------------------------------------------------------------------
// Stage s of a layer: N rows of K inputs (UP gated: each chunk holds n gate rows, then the n up rows F + r).
__device__ __forceinline__ int stage_rows(int s) { return s == 0 ? QKV_W : s == 1 ? H : s == 2 ? F : H; }
__device__ __forceinline__ int stage_k(int s) { return s == 0 ? H : s == 1 ? ATT_W : s == 2 ? H : F; }
__device__ __forceinline__ bool stage_pair(int s) { return GATED && s == 2; }
__device__ __forceinline__ int stage_weight(int s) { return s == 0 ? T_WQKV : s == 1 ? T_WO : s == 2 ? T_WUP : T_WDOWN; }
// Rows a chunk of stage s holds (warp-per-chunk: at most WARP_CHUNK_ROWS sums a warp, gate and up counted).
__host__ __device__ constexpr int chunk_rows(int K, bool pair) {
  return !WARP_CHUNKS || SLOT_BYTES / (K * 2 * (pair ? 2 : 1)) <= WARP_CHUNK_ROWS / (pair ? 2 : 1)
    ? SLOT_BYTES / (K * 2 * (pair ? 2 : 1)) : WARP_CHUNK_ROWS / (pair ? 2 : 1);
}
__device__ __forceinline__ int rows_per_chunk(int s) { return chunk_rows(stage_k(s), stage_pair(s)); }
__device__ __forceinline__ void block_rows(int s, int& r0, int& r1) {
  const int n = stage_rows(s);
  r0 = (int)(((long long)blockIdx.x * n) / G);
  r1 = (int)(((long long)(blockIdx.x + 1) * n) / G);
}
__device__ __forceinline__ int stage_chunks(int s) {
  int r0, r1;
  block_rows(s, r0, r1);
  const int per = rows_per_chunk(s);
  return (r1 - r0 + per - 1) / per;
}

// The producer warp's lane 0: the schedule's next chunk into the next ring slot (false: the schedule is done).
struct Producer {
  int layer, stage, chunk;
  u32 issued;
};
__device__ __forceinline__ bool produce_chunk(Producer& p, int layers, const u64* table, T* ring, u64* full, u64* empty) {
  while (p.layer < layers) {
    if (p.chunk < stage_chunks(p.stage)) {
      int r0, r1;
      block_rows(p.stage, r0, r1);
      const int per = rows_per_chunk(p.stage), K = stage_k(p.stage);
      const int row = r0 + p.chunk * per, n = min(per, r1 - row);
      const u32 bytes = (u32)n * K * 2u;
      const int slot = (int)(p.issued % SLOTS);
      if (p.issued >= SLOTS) {  // the consumers' release of this slot's previous use
        mbar_wait(&empty[slot], ((p.issued / SLOTS) - 1u) & 1u);
      }
      T* dst = ring + (size_t)slot * (SLOT_BYTES / 2);
      const T* w = reinterpret_cast<const T*>(table[p.layer * TABLE_STRIDE + stage_weight(p.stage)]);
      if (stage_pair(p.stage)) {
        mbar_expect(&full[slot], 2u * bytes);
        bulk_copy(dst, w + (size_t)row * K, bytes, &full[slot]);
        bulk_copy(dst + (size_t)n * K, w + (size_t)(F + row) * K, bytes, &full[slot]);
      } else {
        mbar_expect(&full[slot], bytes);
        bulk_copy(dst, w + (size_t)row * K, bytes, &full[slot]);
      }
      p.chunk++;
      p.issued++;
      return true;
    }
    p.chunk = 0;
    if (++p.stage == 4) { p.stage = 0; p.layer++; }
  }
  return false;
}

struct Shared {
  T* ring;
  float* xs;      // the product's input, f32 [≤ max(H, F, ATT_W)]
  float* red;     // partial sums of a chunk's (row, part) units [2 × RED_HALF]: alternate chunks, alternate halves
  float* reduce;  // block reductions [32]
  float* bias;    // a product's biases for the block's rows [2 × MAX_BLOCK_ROWS] (gate, then up)
  float* att;     // attention: q, k, v [3·D], scores [KPS], value sums [8 · THREADS]
  u64* full;      // [SLOTS] mbarriers: a slot's copy landed
  u64* empty;     // [SLOTS] mbarriers: the consumers released a slot
};

// Chunk c of the schedule has landed in its slot (c mod SLOTS); traced builds add the wait to "waited".
__device__ __forceinline__ void wait_chunk(const Shared& sm, u32 c, u64& waited) {
  const u64 start = TRACE ? global_timer() : 0;
  mbar_wait(&sm.full[c % SLOTS], (c / SLOTS) & 1u);
  if (TRACE) waited += global_timer() - start;
}

// acc + Σ_e w[e]·x[e] over a 16-byte vector of weights and its 8 inputs.
__device__ __forceinline__ float dot8(const Vec<T, VEC>& w, const float4& a, const float4& b, float acc) {
  acc = fmaf(to_float(w.v[0]), a.x, acc);
  acc = fmaf(to_float(w.v[1]), a.y, acc);
  acc = fmaf(to_float(w.v[2]), a.z, acc);
  acc = fmaf(to_float(w.v[3]), a.w, acc);
  acc = fmaf(to_float(w.v[4]), b.x, acc);
  acc = fmaf(to_float(w.v[5]), b.y, acc);
  acc = fmaf(to_float(w.v[6]), b.z, acc);
  return fmaf(to_float(w.v[7]), b.w, acc);
}

// ---- products ---------------------------------------------------------------------------------------------
// The block's rows of stage s against xs, chunk by chunk as they arrive; out(row, sum[, up sum]) stores.
template <int S, typename Store>
__device__ __forceinline__ void product(const Shared& sm, u32& consumed, u64& waited, Store store) {
  constexpr int K = S == 0 ? H : S == 1 ? ATT_W : S == 2 ? H : F;
  constexpr bool PAIR = GATED && S == 2;
  constexpr int PER = chunk_rows(K, PAIR);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int r0, r1;
  block_rows(S, r0, r1);
  if (WARP_CHUNKS) {
    // Warp w takes the block's chunks c ≡ w (mod WARPS) whole: its rows' sums in registers (x read once
    // a sweep for all of them), a warp reduction each, no block barrier a chunk; it releases the slot itself.
    constexpr int ROWS = PAIR ? WARP_CHUNK_ROWS / 2 : WARP_CHUNK_ROWS;
    const int chunks = (r1 - r0 + PER - 1) / PER;
    for (int ch = (warp - (int)(consumed % WARPS) + WARPS) % WARPS; ch < chunks; ch += WARPS) {
      const u32 c = consumed + (u32)ch;
      const int row0 = r0 + ch * PER, n = min(PER, r1 - row0), slot = (int)(c % SLOTS);
      wait_chunk(sm, c, waited);
      const T* w = sm.ring + (size_t)slot * (SLOT_BYTES / 2);
      float gate[ROWS], up[ROWS];
      #pragma unroll
      for (int i = 0; i < ROWS; i++) { gate[i] = 0.f; up[i] = 0.f; }
      for (int k = lane * VEC; k < K; k += 32 * VEC) {
        const float4 a = *reinterpret_cast<const float4*>(sm.xs + k), b = *reinterpret_cast<const float4*>(sm.xs + k + 4);
        #pragma unroll
        for (int i = 0; i < ROWS; i++) {
          if (i < n) {
            gate[i] = dot8(load_vec<T, VEC>(w + (size_t)i * K + k), a, b, gate[i]);
            if (PAIR) up[i] = dot8(load_vec<T, VEC>(w + (size_t)(n + i) * K + k), a, b, up[i]);
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&sm.empty[slot]);  // every lane has read the slot
      #pragma unroll
      for (int i = 0; i < ROWS; i++) {
        if (i < n) {
          const float g = warp_sum(gate[i]), u = PAIR ? warp_sum(up[i]) : 0.f;
          if (lane == 0) store(row0 + i, g, u);
        }
      }
    }
    consumed += (u32)chunks;
    return;
  }
  for (int row0 = r0; row0 < r1; row0 += PER) {
    const int n = min(PER, r1 - row0), eff = PAIR ? 2 * n : n;
    const int slot = (int)(consumed % SLOTS);
    wait_chunk(sm, consumed, waited);
    const T* w = sm.ring + (size_t)slot * (SLOT_BYTES / 2);
    float* red = sm.red + (consumed & 1u) * RED_HALF;
    const int parts = max(1, WARPS / eff), units = eff * parts;
    const int kp = ((K / parts + VEC - 1) / VEC) * VEC;
    for (int u = warp; u < units; u += WARPS) {
      const int r = u / parts, k0 = (u % parts) * kp, k1 = min(K, k0 + kp);
      const T* wr = w + (size_t)r * K;
      // Two vectors an iteration into two sums: independent loads and FMA chains in flight together.
      float acc0 = 0.f, acc1 = 0.f;
      int k = k0 + lane * VEC;
      for (; k + 32 * VEC < k1; k += 64 * VEC) {
        const Vec<T, VEC> w0 = load_vec<T, VEC>(wr + k), w1 = load_vec<T, VEC>(wr + k + 32 * VEC);
        const float4 a0 = *reinterpret_cast<const float4*>(sm.xs + k), b0 = *reinterpret_cast<const float4*>(sm.xs + k + 4);
        const float4 a1 = *reinterpret_cast<const float4*>(sm.xs + k + 32 * VEC), b1 = *reinterpret_cast<const float4*>(sm.xs + k + 32 * VEC + 4);
        acc0 = dot8(w0, a0, b0, acc0);
        acc1 = dot8(w1, a1, b1, acc1);
      }
      if (k < k1) {
        const Vec<T, VEC> w0 = load_vec<T, VEC>(wr + k);
        acc0 = dot8(w0, *reinterpret_cast<const float4*>(sm.xs + k), *reinterpret_cast<const float4*>(sm.xs + k + 4), acc0);
      }
      const float acc = warp_sum(acc0 + acc1);
      if (lane == 0) red[u] = acc;
    }
    csync();
    consumed++;
    if (threadIdx.x == 0) mbar_arrive(&sm.empty[slot]);  // every consumer has read the slot (the barrier above)
    if ((int)threadIdx.x < n) {
      float sum = 0.f, up = 0.f;
      for (int p = 0; p < parts; p++) sum += red[threadIdx.x * parts + p];
      if (PAIR) for (int p = 0; p < parts; p++) up += red[(n + threadIdx.x) * parts + p];
      store(row0 + (int)threadIdx.x, sum, up);
    }
    // No barrier here: the next chunk's sums go to the other half of sm.red, and the one after waits for
    // the csync above it, which these epilogue threads reach only when done.
  }
}

// xs = norm(v) rounded, v = cur + y + bias rounded (y null: v = cur); block 0 also stores v to x_write.
// Each thread's 8-element vectors, all loads issued first: one round trip to L2/HBM, not one per element.
__device__ __forceinline__ void norm_input(const Shared& sm, const T* cur, const T* y, const T* bias, const T* gamma, const T* beta,
                                           T* x_write) {
  constexpr int NV = (H / 8 + THREADS - 1) / THREADS;
  uint4 rc[NV], ry[NV], rb[NV], rg[NV], rbeta[NV];
  #pragma unroll
  for (int n = 0; n < NV; n++) {
    const int i = (threadIdx.x + n * THREADS) * 8;
    if (i < H) {
      rc[n] = __ldcg(reinterpret_cast<const uint4*>(cur + i));
      if (y) ry[n] = __ldcg(reinterpret_cast<const uint4*>(y + i));
      if (bias) rb[n] = *reinterpret_cast<const uint4*>(bias + i);
      rg[n] = *reinterpret_cast<const uint4*>(gamma + i);
      if (!NORM_RMS) rbeta[n] = *reinterpret_cast<const uint4*>(beta + i);
    }
  }
  float v[NV][8];
  float local = 0.f;
  #pragma unroll
  for (int n = 0; n < NV; n++) {
    const int i = (threadIdx.x + n * THREADS) * 8;
    if (i >= H) continue;
    unpack8(rc[n], v[n]);
    if (y) {
      float fy[8], fb[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      unpack8(ry[n], fy);
      if (bias) unpack8(rb[n], fb);
      #pragma unroll
      for (int k = 0; k < 8; k++) v[n][k] = round_t(v[n][k] + fy[k] + fb[k]);
      if (x_write && blockIdx.x == 0) *reinterpret_cast<uint4*>(x_write + i) = pack8(v[n]);
    }
    #pragma unroll
    for (int k = 0; k < 8; k++) local += NORM_RMS ? v[n][k] * v[n][k] : v[n][k];
  }
  const float total = csum(local, sm.reduce);
  float mean = 0.f, rstd;
  if (NORM_RMS) {
    rstd = rsqrtf(total / H + EPS);
  } else {
    mean = total / H;
    float dev = 0.f;
    #pragma unroll
    for (int n = 0; n < NV; n++) {
      if ((threadIdx.x + n * THREADS) * 8 >= H) continue;
      #pragma unroll
      for (int k = 0; k < 8; k++) { const float c = v[n][k] - mean; dev += c * c; }
    }
    rstd = rsqrtf(csum(dev, sm.reduce) / H + EPS);
  }
  #pragma unroll
  for (int n = 0; n < NV; n++) {
    const int i = (threadIdx.x + n * THREADS) * 8;
    if (i >= H) continue;
    float g[8], b[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, h[8];
    unpack8(rg[n], g);
    if (!NORM_RMS) unpack8(rbeta[n], b);
    #pragma unroll
    for (int k = 0; k < 8; k++) h[k] = round_t((v[n][k] - mean) * rstd * g[k] + b[k]);
    *reinterpret_cast<float4*>(sm.xs + i) = make_float4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<float4*>(sm.xs + i + 4) = make_float4(h[4], h[5], h[6], h[7]);
  }
  csync();
}

// ---- attention --------------------------------------------------------------------------------------------
__device__ __forceinline__ int attention_splits(int keys) { return min(MAX_SPLITS, (keys + KPS - 1) / KPS); }

// KV_PREFETCH (megakernelTuning.kvPrefetch, not yet run on a GPU): before the barrier that ends the QKV
// stage, each block asks L2 for the keys and values 0..p−1 its attention units will read — they were
// written by earlier steps, so they depend on nothing this step computes — taking HBM's latency off the
// attention stage's chain (one unit a kv head and split asks, the others share its lines).
__device__ __forceinline__ void prefetch_attention(const u64* lt, int pos, int max_len) {
  const int keys = pos + 1, splits = attention_splits(keys), chunk = (keys + splits - 1) / splits;
  constexpr int LINES = (D * 2 + 127) / 128;  // 128-byte lines a row
  for (int unit = blockIdx.x; unit < HQ * splits; unit += G) {
    const int hq = unit / splits, s = unit % splits, g = hq / GROUP;
    if (hq % GROUP != 0) continue;
    const int j0 = s * chunk, j1 = min(pos, j0 + chunk);  // row p is this step's, not yet written
    const char* kc = reinterpret_cast<const char*>(reinterpret_cast<const T*>(lt[T_KC]) + (size_t)g * max_len * D);
    const char* vc = reinterpret_cast<const char*>(reinterpret_cast<const T*>(lt[T_VC]) + (size_t)g * max_len * D);
    for (int i = threadIdx.x; i < (j1 - j0) * LINES * 2; i += THREADS) {
      const int row = j0 + (i >> 1) / LINES, line = (i >> 1) % LINES;
      const char* p = ((i & 1) ? vc : kc) + (size_t)row * D * 2 + line * 128;
      asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
    }
  }
}

__device__ __forceinline__ void attention(const Shared& sm, const u64* lt, const T* qkv, T* attn_out, float* part, int pos, int max_len,
                                          const float* inv_freq, float rope_scale, float score_scale) {
  const int keys = pos + 1, splits = attention_splits(keys), chunk = (keys + splits - 1) / splits, tid = threadIdx.x;
  float* qf = sm.att;
  float* kf = qf + D;
  float* vf = kf + D;
  float* sc = vf + D;
  float* sums = sc + KPS;
  const T* bias = QKV_BIAS ? reinterpret_cast<const T*>(lt[T_BQKV]) : nullptr;
  for (int unit = blockIdx.x; unit < HQ * splits; unit += G) {
    const int hq = unit / splits, s = unit % splits, g = hq / GROUP;
    const int j0 = s * chunk, j1 = min(keys, j0 + chunk);
    T* kc = reinterpret_cast<T*>(lt[T_KC]) + (size_t)g * max_len * D;
    T* vc = reinterpret_cast<T*>(lt[T_VC]) + (size_t)g * max_len * D;
    if (tid < D) {
      const int qi = hq * D + tid, ki = (HQ + g) * D + tid, vi = (HQ + HKV + g) * D + tid;
      qf[tid] = load_cg(qkv + qi) + (bias ? to_float(bias[qi]) : 0.f);
      kf[tid] = load_cg(qkv + ki) + (bias ? to_float(bias[ki]) : 0.f);
      vf[tid] = round_t(load_cg(qkv + vi) + (bias ? to_float(bias[vi]) : 0.f));
    }
    csync();
    if (ROPE && tid < D / 2) {
      // a' = a·c − z·s, z' = z·c + a·s over the pairs (i, i + d/2), θ = p·inv_freq[i] (qkvRopeAppend's rotation).
      float sn, cs;
      sincosf((float)pos * inv_freq[tid], &sn, &cs);
      cs *= rope_scale;
      sn *= rope_scale;
      const float a = qf[tid], z = qf[tid + D / 2], ka = kf[tid], kz = kf[tid + D / 2];
      qf[tid] = a * cs - z * sn;
      qf[tid + D / 2] = z * cs + a * sn;
      kf[tid] = ka * cs - kz * sn;
      kf[tid + D / 2] = kz * cs + ka * sn;
    }
    csync();
    if (tid < D) {
      qf[tid] = round_t(qf[tid]);
      kf[tid] = round_t(kf[tid]);
      if (hq % GROUP == 0 && s == 0) {  // one unit a kv head appends its key and value
        kc[(size_t)pos * D + tid] = from_float<T>(kf[tid]);
        vc[(size_t)pos * D + tid] = from_float<T>(vf[tid]);
      }
    }
    csync();
    // Scores, one key a thread (the new key from shared memory: its cache row may not be written yet).
    float local_max = __int_as_float(0xff800000);
    for (int j = j0 + tid; j < j1; j += THREADS) {
      float dot = 0.f;
      if (j == pos) {
        for (int c = 0; c < D; c++) dot += qf[c] * kf[c];
      } else {
        const T* kr = kc + (size_t)j * D;
        #pragma unroll
        for (int c = 0; c < D; c += VEC) {
          const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(kr + c));
          const Vec<T, VEC> kv = *reinterpret_cast<const Vec<T, VEC>*>(&raw);
          #pragma unroll
          for (int e = 0; e < VEC; e++) dot += qf[c + e] * to_float(kv.v[e]);
        }
      }
      const float score = dot * score_scale;
      sc[j - j0] = score;
      local_max = fmaxf(local_max, score);
    }
    const float m = cmax(local_max, sm.reduce);
    float local_sum = 0.f;
    for (int j = j0 + tid; j < j1; j += THREADS) {
      const float p = exp2f(sc[j - j0] - m);
      sc[j - j0] = p;
      local_sum += p;
    }
    const float l = csum(local_sum, sm.reduce);  // its barriers publish sc
    // Σ p_j·v_j: thread (key group kg, 16-byte chunk ch of a row) takes keys j0 + kg, j0 + kg + KG, …, one
    // vector load each, all independent (the loop is a stream of loads, not a chain of round trips).
    constexpr int CH = D / 8, KG = THREADS / CH;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    const int ch = tid % CH, kg = tid / CH;
    if (kg < KG) {
      #pragma unroll 4
      for (int j = j0 + kg; j < j1; j += KG) {
        const float p = sc[j - j0];
        float vv[8];
        if (j == pos) {
          #pragma unroll
          for (int k = 0; k < 8; k++) vv[k] = vf[ch * 8 + k];
        } else {
          unpack8(__ldcg(reinterpret_cast<const uint4*>(vc + (size_t)j * D + ch * 8)), vv);
        }
        #pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += p * vv[k];
      }
      #pragma unroll
      for (int k = 0; k < 8; k++) sums[kg * D + ch * 8 + k] = acc[k];
    }
    csync();
    if (tid < D) {
      float o = 0.f;
      for (int g2 = 0; g2 < KG; g2++) o += sums[g2 * D + tid];
      if (splits == 1) {
        attn_out[hq * D + tid] = from_float<T>(o / l);
      } else {
        float* pp = part + (size_t)(hq * splits + s) * (D + 2);
        pp[tid] = o;
        if (tid == 0) { pp[D] = m; pp[D + 1] = l; }
      }
    }
    csync();
  }
}

// xs = the attention output (with splits: their partials combined, rounded as decodeAttention stores it).
__device__ __forceinline__ void attention_input(const Shared& sm, const T* attn, const float* part, int pos) {
  const int splits = attention_splits(pos + 1);
  if (splits == 1) {
    stage_input<ATT_W>(sm.xs, attn);
    return;
  }
  for (int i = threadIdx.x; i < ATT_W; i += THREADS) {
    const int hq = i / D, c = i % D;
    const float* pp = part + (size_t)hq * splits * (D + 2);
    float top = __int_as_float(0xff800000);
    for (int s = 0; s < splits; s++) top = fmaxf(top, __ldcg(pp + s * (D + 2) + D));
    float num = 0.f, den = 0.f;
    for (int s = 0; s < splits; s++) {
      const float ms = __ldcg(pp + s * (D + 2) + D);
      const float w = ms == __int_as_float(0xff800000) ? 0.f : exp2f(ms - top);  // an empty split weighs nothing
      num += w * __ldcg(pp + s * (D + 2) + c);
      den += w * __ldcg(pp + s * (D + 2) + D + 1);
    }
    sm.xs[i] = round_t(num / den);
  }
  csync();
}

// table u64 [layers, TABLE_STRIDE]; x, h [H]; positions i32 [1]; inv_freq f32 [D/2] (ROPE); ws: the
// workspace (WS_* byte offsets); counters: zeroed u32 (the barrier count, blocks done; RELEASE_FLAG: the
// flag at RELEASE_WORD). Grid G, block
// THREADS consumers + one producer warp.
extern "C" __global__ void __launch_bounds__(THREADS + 32, 1) ${name}(
    const u64* __restrict__ global_table, int layers, const T* __restrict__ final_gamma, const T* __restrict__ final_beta,
    T* x, T* __restrict__ h_out, const int* __restrict__ positions, const float* __restrict__ inv_freq, float rope_scale,
    float score_scale, int max_len, unsigned char* ws, u32* counters, u64* trace, int trace_stride) {
  extern __shared__ __align__(128) unsigned char smem[];
  Shared sm;
  sm.ring = reinterpret_cast<T*>(smem);
  sm.xs = reinterpret_cast<float*>(smem + SH_XS);
  sm.red = reinterpret_cast<float*>(smem + SH_RED);
  sm.reduce = reinterpret_cast<float*>(smem + SH_REDUCE);
  sm.att = reinterpret_cast<float*>(smem + SH_ATT);
  sm.bias = reinterpret_cast<float*>(smem + SH_BIAS);
  sm.full = reinterpret_cast<u64*>(smem + SH_BARS);
  sm.empty = sm.full + SLOTS;
  // The weight table in shared memory (the producer reads an entry a chunk), the ring's barriers set up.
  u64* stable = reinterpret_cast<u64*>(smem + SH_TABLE);
  for (int i = threadIdx.x; i < layers * TABLE_STRIDE; i += THREADS + 32) stable[i] = global_table[i];
  if (threadIdx.x == 0) {
    for (int i = 0; i < SLOTS; i++) { mbar_init(&sm.full[i]); mbar_init(&sm.empty[i]); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the last barrier of all THREADS + 32 threads: the roles split here
  const u64* table = stable;
  STAMP(0);
  if (threadIdx.x >= THREADS) {
    // The producer warp: the weights depend on no earlier kernel, so it streams from the start, as far
    // ahead as the ring allows, through every barrier the consumers wait at.
    if (threadIdx.x == THREADS) {
      Producer prod{0, 0, 0, 0u};
      while (produce_chunk(prod, layers, table, sm.ring, sm.full, sm.empty)) {}
    }
    return;
  }
  T* xbuf[2] = {reinterpret_cast<T*>(ws + WS_XA), reinterpret_cast<T*>(ws + WS_XB)};
  T* qkv = reinterpret_cast<T*>(ws + WS_QKV);
  T* attn = reinterpret_cast<T*>(ws + WS_ATTN);
  T* y = reinterpret_cast<T*>(ws + WS_Y);
  T* act = reinterpret_cast<T*>(ws + WS_ACT);
  float* part = reinterpret_cast<float*>(ws + WS_PART);

  u64 waited = 0;
  STAMP(1);
  GRID_DEPENDENCY_WAIT();
  STAMP(2);
  const int pos = max(0, min(positions[0], max_len - 1));
  u32 consumed = 0u, barrier = 0u;
  const T* cur = x;
  int update = 0;
  for (int l = 0; l < layers; l++) {
    const u64* lt = table + l * TABLE_STRIDE;
    const int st = 3 + l * ${TRACE_PER_LAYER};
    const T* n1b = NORM_RMS ? nullptr : reinterpret_cast<const T*>(lt[T_N1B]);
    if (l == 0) {
      norm_input(sm, cur, nullptr, nullptr, reinterpret_cast<const T*>(lt[T_N1G]), n1b, nullptr);
    } else {
      T* next = xbuf[update++ & 1];
      const T* bias = DOWN_BIAS ? reinterpret_cast<const T*>(lt[T_BDOWN - TABLE_STRIDE]) : nullptr;
      norm_input(sm, cur, y, bias, reinterpret_cast<const T*>(lt[T_N1G]), n1b, next);
      cur = next;
    }
    STAMP(st + 0);
    product<0>(sm, consumed, waited, [&](int r, float sum, float) { qkv[r] = from_float<T>(sum); });
    if (KV_PREFETCH) prefetch_attention(lt, pos, max_len);
    STAMP(st + 1);
    grid_barrier(counters, ++barrier * G);
    STAMP(st + 2);
    attention(sm, lt, qkv, attn, part, pos, max_len, inv_freq, rope_scale, score_scale);
    STAMP(st + 3);
    grid_barrier(counters, ++barrier * G);
    STAMP(st + 4);
    attention_input(sm, attn, part, pos);
    STAMP(st + 5);
    product<1>(sm, consumed, waited, [&](int r, float sum, float) { y[r] = from_float<T>(sum); });
    STAMP(st + 6);
    grid_barrier(counters, ++barrier * G);
    STAMP(st + 7);
    {
      T* next = xbuf[update++ & 1];
      const T* bias = OUT_BIAS ? reinterpret_cast<const T*>(lt[T_BO]) : nullptr;
      norm_input(sm, cur, y, bias, reinterpret_cast<const T*>(lt[T_N2G]), NORM_RMS ? nullptr : reinterpret_cast<const T*>(lt[T_N2B]), next);
      cur = next;
    }
    STAMP(st + 8);
    if (UP_BIAS) {  // the block's rows' biases, for the epilogue (read once, not a round trip a chunk)
      const T* up_bias = reinterpret_cast<const T*>(lt[T_BUP]);
      int r0, r1;
      block_rows(2, r0, r1);
      for (int t = threadIdx.x; t < r1 - r0; t += THREADS) {
        sm.bias[t] = to_float(up_bias[r0 + t]);
        if (GATED) sm.bias[MAX_BLOCK_ROWS + t] = to_float(up_bias[F + r0 + t]);
      }
      csync();
    }
    int up_r0, up_r1;
    block_rows(2, up_r0, up_r1);
    product<2>(sm, consumed, waited, [&](int r, float sum, float up) {
      const float bg = UP_BIAS ? sm.bias[r - up_r0] : 0.f, bu = UP_BIAS && GATED ? sm.bias[MAX_BLOCK_ROWS + r - up_r0] : 0.f;
      if (GATED) act[r] = from_float<T>(activate(round_t(sum + bg)) * round_t(up + bu));
      else act[r] = from_float<T>(activate(sum + bg));
    });
    STAMP(st + 9);
    grid_barrier(counters, ++barrier * G);
    STAMP(st + 10);
    stage_input<F>(sm.xs, act);
    STAMP(st + 11);
    product<3>(sm, consumed, waited, [&](int r, float sum, float) { y[r] = from_float<T>(sum); });
    STAMP(st + 12);
    grid_barrier(counters, ++barrier * G);
    STAMP(st + 13);
    if (TRACE && threadIdx.x == 0) trace[(size_t)blockIdx.x * trace_stride + st + 14] = waited;  // ns waiting on weights so far
  }
  if (blockIdx.x == 0) {
    const u64* lt = table + (layers - 1) * TABLE_STRIDE;
    norm_input(sm, cur, y, DOWN_BIAS ? reinterpret_cast<const T*>(lt[T_BDOWN]) : nullptr, final_gamma, final_beta, x);
    for (int i = threadIdx.x; i < H; i += THREADS) h_out[i] = from_float<T>(sm.xs[i]);
  }
  STAMP(3 + layers * ${TRACE_PER_LAYER});
  // The last block out sets the counters back to zero: every block has passed every barrier by then.
  if (threadIdx.x == 0) {
    if (atomicAdd(&counters[1], 1u) == G - 1) {
      counters[0] = 0u;
      counters[1] = 0u;
      if (RELEASE_FLAG) counters[RELEASE_WORD] = 0u;
      __threadfence();
    }
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

/** The spec of a checked call on a GPU of `blocks` SMs and `maxShared` bytes of shared memory a block. */
export function planDecodeLayers(c: OpCheck, a: ReturnType<typeof checkDecodeLayers>, args: DecodeLayersArgs, blocks: number, maxShared: number): DecodeLayersSpec {
  if (a.dtype !== 'bf16' && a.dtype !== 'f16') c.fail(`the CUDA kernel takes bf16 or f16 models, not ${a.dtype}`);
  const shape = { hidden: a.H, ffn: a.F, heads: a.Hq, headDim: a.d };
  const why = decodeLayersUnsupported(shape);
  if (why) c.fail(`the CUDA kernel cannot run this model: ${why}`);
  const first = a.layers[0]!;
  const base = {
    dtype: a.dtype as 'bf16' | 'f16', ...shape, kvHeads: a.Hkv, maxLen: a.maxLen, norm: args.norm, gated: a.gated, activation: args.activation,
    qkvBias: first.qkvBias !== undefined, outBias: first.outBias !== undefined, upBias: first.upBias !== undefined, downBias: first.downBias !== undefined,
    rope: args.rope !== undefined, eps: args.eps, blocks,
  };
  const widest = Math.max((a.Hq + 2 * a.Hkv) * a.d, a.F, a.H);
  if (Math.ceil(widest / blocks) > MAX_BLOCK_ROWS) c.fail(`the CUDA kernel gives each of ${blocks} blocks at most ${MAX_BLOCK_ROWS} rows of a product; ${widest} rows need more`);
  const warpChunks = megakernelTuning.warpChunks;
  // A slot holds a whole row (a gated MLP's gate and up rows: two), whatever size is asked for.
  const widestRow = 2 * Math.max(a.H, a.F, a.Hq * a.d) * (a.gated ? 2 : 1);
  const slotBytes = Math.max(megakernelTuning.slotKiB * 1024 || (warpChunks ? WARP_SLOT_BYTES : SLOT_BYTES), Math.ceil(widestRow / 1024) * 1024);
  const fixed = decodeLayersFixedShared({ ...base, slotBytes }, a.layers.length);
  const slots = Math.min(warpChunks ? WARP_MAX_SLOTS : MAX_SLOTS, Math.floor((maxShared - fixed) / slotBytes));
  if (slots < 2) c.fail(`the CUDA kernel needs ${fixed + 2 * slotBytes} bytes of shared memory a block for ${a.layers.length} layers; this GPU allows ${maxShared}`);
  return { ...base, slots, slotBytes, ...(warpChunks ? { warpChunks } : {}), ...(megakernelTuning.releaseFlag ? { releaseFlag: true } : {}),
    ...(megakernelTuning.kvPrefetch ? { kvPrefetch: true } : {}) };
}

/** The u64 weight table of decodeLayers (TABLE_STRIDE pointers a layer) as i32 words, low word first. */
export function decodeLayersTable(c: OpCheck, a: ReturnType<typeof checkDecodeLayers>, args: DecodeLayersArgs): Int32Array {
  const words = new Int32Array(a.layers.length * TABLE_STRIDE * 2);
  const put = (l: number, entry: number, name: string, t: Tensor | undefined) => {
    if (!t) return;
    const p = devicePtr(c, `layers[${l}].${name}`, t);
    if (p % 16n !== 0n) c.fail(`'layers[${l}].${name}' is not 16-byte aligned (its 16-byte copies need it)`);
    const at = (l * TABLE_STRIDE + entry) * 2;
    words[at] = Number(p & 0xffffffffn) | 0;
    words[at + 1] = Number(p >> 32n) | 0;
  };
  args.layers.forEach((l, i) => {
    const entries: [string, Tensor | undefined][] = [
      ['norm1.gamma', l.norm1.gamma], ['norm1.beta', l.norm1.beta], ['qkv', l.qkv], ['qkvBias', l.qkvBias], ['out', l.out], ['outBias', l.outBias],
      ['norm2.gamma', l.norm2.gamma], ['norm2.beta', l.norm2.beta], ['up', l.up], ['upBias', l.upBias], ['down', l.down], ['downBias', l.downBias],
      ['kCache', l.kCache], ['vCache', l.vCache],
    ];
    entries.forEach(([name, t], entry) => put(i, entry, name, t));
  });
  return words;
}

/**
 * decodeLayers on CUDA: `table` is the device copy of decodeLayersTable for these layers (the backend
 * keeps one per layer list). One launch of G = SM-count blocks.
 */
export function decodeLayers(host: KernelHost, args: DecodeLayersArgs, table: (c: OpCheck, a: ReturnType<typeof checkDecodeLayers>) => bigint, trace?: Tensor): void {
  const c = new OpCheck('decodeLayers', 'cuda');
  const a = checkDecodeLayers(c, args);
  const planned = planDecodeLayers(c, a, args, host.multiProcessorCount, host.maxSharedBytesPerBlock);
  const spec = trace ? { ...planned, trace: true } : planned;
  if (trace && trace.numel * byteSize(trace.dtype) < spec.blocks * traceStride(a.layers.length) * 8) c.fail(`the trace buffer holds ${trace.numel * byteSize(trace.dtype)} bytes: ${spec.blocks} blocks × ${traceStride(a.layers.length)} u64 stamps needed`);
  const ptr = (name: string, t: Tensor) => devicePtr(c, name, t);
  const tablePtr = table(c, a);
  host.kernel(decodeLayersKey(spec), () => decodeLayersSource(spec)).launch(
    { grid: spec.blocks, block: DECODE_LAYERS_THREADS + 32, sharedBytes: sharedLayout(spec).total + a.layers.length * TABLE_STRIDE * 8 },
    [
      arg.ptr(tablePtr), arg.i32(a.layers.length), arg.ptr(ptr('finalNorm.gamma', args.finalNorm.gamma)),
      arg.ptr(args.finalNorm.beta ? ptr('finalNorm.beta', args.finalNorm.beta) : 0n), arg.ptr(ptr('x', a.x)), arg.ptr(ptr('h', a.h)),
      arg.ptr(ptr('positions', a.positions)), arg.ptr(a.invFreq ? ptr('rope.invFreq', a.invFreq) : 0n), arg.f32(args.rope?.scale ?? 1),
      arg.f32(a.scale * Math.LOG2E), arg.i32(a.maxLen), arg.ptr(ptr('workspace', a.workspace)), arg.ptr(host.counters(spec.releaseFlag ? RELEASE_WORD + 1 : 2)),
      arg.ptr(trace ? ptr('trace', trace) : 0n), arg.i32(traceStride(a.layers.length)),
    ],
  );
}

export function catalog(): KernelSource[] {
  const llama: DecodeLayersSpec = {
    dtype: 'bf16', hidden: 2048, heads: 32, kvHeads: 8, headDim: 64, ffn: 8192, maxLen: 160, norm: 'rms', gated: true, activation: 'silu',
    qkvBias: false, outBias: false, upBias: false, downBias: false, rope: true, eps: 1e-5, blocks: 132, slots: 3,
  };
  const gpt2: DecodeLayersSpec = {
    dtype: 'f16', hidden: 768, heads: 12, kvHeads: 12, headDim: 64, ffn: 3072, maxLen: 1024, norm: 'layer', gated: false, activation: 'gelu_tanh',
    qkvBias: true, outBias: true, upBias: true, downBias: true, rope: false, eps: 1e-5, blocks: 132, slots: 4,
  };
  return [decodeLayersSource(llama), decodeLayersSource({ ...llama, trace: true }), decodeLayersSource(gpt2),
    decodeLayersSource({ ...llama, warpChunks: true, slotBytes: WARP_SLOT_BYTES, slots: 11, releaseFlag: true }), decodeLayersSource({ ...gpt2, warpChunks: true, slotBytes: WARP_SLOT_BYTES, slots: 12, kvPrefetch: true }), decodeLayersSource({ ...llama, headDim: 128, heads: 16, kvHeads: 2, qkvBias: true, blocks: 78, slots: 2 })];
}

