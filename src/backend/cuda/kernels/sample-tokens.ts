// sampleTokens: each sequence's next token — greedy, or temperature + top-k + top-p with a seeded
// Gumbel-max draw — and the sequence's update, in one kernel per step (backend.ts has the contract).
//
// Why Gumbel-max: argmax_j (z_j + g_j) with g_j = −ln(−ln u_j) is an exact draw from softmax(z) over
// the candidates, so sampling is one more argmax pass: no cumulative sum over the vocabulary, no sort,
// and the draw of candidate j depends only on (seed, position, j), never on how threads split the row.
//
// Thread mapping: SPLITS blocks of THREADS threads per sequence (row), grid (SPLITS, B). A greedy row,
// or one sampled with temperature alone, is cut into SPLITS slices of vectors: block s takes the
// argmax (of z, or of z + g for a draw) over slice s, writes it to a partial, and the last of the row's
// blocks to finish (a zeroed counter per row, set back to zero by that block) reduces the partials and
// updates the sequence — one block reading a 256 KB row alone waited ~16 memory latencies for it.
// A row with top-k or top-p needs its whole row for the radix select: block 0 does all of it, the
// others return. Every pass walks a range of the row's logits in 16-byte vectors (thread t takes
// vectors t, t + THREADS, ... of it) and recomputes
//   z_j = (penalised logit_j) / T        (f32 with IEEE division, −0 folded to +0)
// instead of storing it: the row (V·s bytes) stays in L1/L2 between passes. The repetition penalty
// marks the sequence's previous tokens in a bitmask in shared memory (V/8 bytes) first.
//   greedy      1 pass: argmax z, the lowest index on ties.
//   top-k       radix select of the k-th largest z on the order-preserving 32-bit key of z: 4 passes
//               of 8-bit digits, counts in a 256-bin shared histogram; warp 0 scans the bins from the
//               top (a shuffle scan over 8-bin chunks) and picks the digit where the count crosses k.
//   top-p       1 pass for max z, then the same radix select over mass instead of counts (masses in
//               fixed point, integer atomics: add_mass), the first pass's bins adding up to the kept
//               mass: τ = the largest key whose top set holds ≥ p of the mass.
//   draw        1 pass: argmax over kept j of z_j + g_j, u_j from Philox4x32-10 (device-lib.ts) with
//               key seeds[b] and counter (j/4, position + 1, 0, SAMPLING_DOMAIN), 4 draws a call; a
//               token that cannot beat the thread's best even with the largest noise is skipped
//               (draw_vector).
// Thread 0 (of the last block, with splits) then writes history/tokens/positions/finished.
// With the LM head's packed greedy picks (SampleTokensArgs.argmax, session 41) a greedy row without a penalty
// skips the pass: block 0 reads its slot (and zeroes it) and writes the state; the row's logits stay unread.
//
// Precision: f32; z and the top-k threshold are bit-identical to the CPU reference; the top-p masses are
// exp in f32 summed in 2^−36 fixed point here (add_mass), f64 on the CPU; g is f32 here, f64 on the CPU.
// Bytes per sequence: (passes)·V·s read, mostly from L2 after the first pass; 4·(position + 1) of history
// with a repetition penalty; a few words written. Greedy bf16 at V = 128256: 256 KB, one pass.

import { SAMPLING_DOMAIN, SPECULATIVE_DOMAIN, SPECULATIVE_NOISE_BONUS, SPECULATIVE_NOISE_RESIDUAL } from '../../backend.js';
import type { SampleTokensArgs, SpeculativeSampleArgs, TokenProbabilitiesArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkSampleTokens, checkSpeculativeSample, checkTokenProbabilities } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';
import { envFlag } from '../env-switch.js';
import { sampleTokensCluster, sampleTokensClusterKey, sampleTokensClusterSource } from './sample-tokens-cluster.js';

export interface SampleTokensSpec {
  readonly dtype: FloatDType;
  /** V (classes), baked in: loop bounds and the size of the penalty bitmask. */
  readonly classes: number;
  /** Elements per vector access; divides the row pitch. */
  readonly vec: number;
  readonly threads: number;
  /** Blocks a greedy or temperature-only row is split over (sampleTokensSplits). */
  readonly splits: number;
  /**
   * The thread's first LOADS_IN_FLIGHT vectors of its split's slice loaded right after the wait, before the
   * row's state (finished, position, parameters) is read — a greedy row then waits for one round trip, not for
   * the state's and then the logits' (sampleTokensPreload).
   */
  readonly preload?: boolean;
  /**
   * SampleTokensArgs.argmax: block 0 of a row reads the row's packed pick and zeroes the slot first; a greedy row
   * without a penalty then takes its token from it (the other blocks of the row return at once), unless the slot
   * was empty (a row of NaN), when block 0 walks the whole row as usual. Kernel argument `argmax` after the others.
   */
  readonly argmax?: boolean;
}

export function sampleTokensKey(s: SampleTokensSpec): string {
  return `sample_tokens.${s.dtype}.v${s.classes}.vec${s.vec}.t${s.threads}.s${s.splits}${s.preload ? '.pre' : ''}${s.argmax ? '.argmax' : ''}`;
}

/** The penalty bitmask lives in static shared memory: V/8 bytes. */
export const MAX_CLASSES = 262144;

export function sampleTokensThreads(classes: number): number {
  return classes >= 16384 ? 1024 : classes >= 4096 ? 512 : 256;
}

/** Vectors a thread loads per split (two loads in flight: one memory latency a block). */
const VECTORS_PER_THREAD = 2;

/**
 * Blocks per row: the row's vectors over THREADS · VECTORS_PER_THREAD a block (1: unsplit). With `wave`
 * (rows, SMs), no more than one wave of blocks: a 1024-thread block holds an SM alone at this kernel's
 * registers, so Llama's 128k vocabulary at 32 rows (8 splits: 256 blocks) ran in two waves — sampling
 * took 19–20 µs of a batch-32 step against ~10 at one row (session 27's timelines). Opt-in until
 * measured (sampleTokensWave).
 */
export function sampleTokensSplits(classes: number, vec: number, threads: number, wave?: { rows: number; multiProcessorCount: number }): number {
  const byVocabulary = Math.max(1, Math.ceil(Math.ceil(classes / vec) / (threads * VECTORS_PER_THREAD)));
  if (!wave) return byVocabulary;
  const residentBlocks = wave.multiProcessorCount * Math.max(1, Math.floor(1024 / threads));
  return Math.max(1, Math.min(byVocabulary, Math.floor(residentBlocks / wave.rows)));
}

/**
 * FUSEFORMER_SAMPLE_SPLITS=N (a probe): every greedy or temperature-only row split over N blocks instead of
 * sampleTokensSplits' count (1: one block walks the whole row, no partials, counter or last-block round trips).
 * Session 40 (H100): 1, 2 and the default within 1% of each other at GPT-2 and Llama b1 / b4; the preload no gain.
 * Read once; anything but a positive integer is an error naming the variable.
 */
export const sampleTokensForcedSplits: { splits: number | undefined } = { splits: forcedSplitsFromEnv() };

export function forcedSplitsFromEnv(env: NodeJS.ProcessEnv = process.env): number | undefined {
  const value = env['FUSEFORMER_SAMPLE_SPLITS'];
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`FUSEFORMER_SAMPLE_SPLITS must be a positive integer, got '${value}'`);
  return n;
}

/** FUSEFORMER_SAMPLE_PRELOAD=1: SampleTokensSpec.preload (a probe; read once). */
export const sampleTokensPreload: { enabled: boolean } = { enabled: envFlag('FUSEFORMER_SAMPLE_PRELOAD', process.env['FUSEFORMER_SAMPLE_PRELOAD'], false) };

/**
 * Rows of a large vocabulary sampled by a thread-block cluster (sample-tokens-cluster.ts) where the host has
 * them; FUSEFORMER_SAMPLE_CLUSTER=0: the one-block-per-sampled-row kernel below (read once).
 */
export const sampleTokensClusterOption: { enabled: boolean } = { enabled: envFlag('FUSEFORMER_SAMPLE_CLUSTER', process.env['FUSEFORMER_SAMPLE_CLUSTER'], true) };

/** FUSEFORMER_SAMPLE_WAVE=1: sampleTokens' splits capped at one wave of blocks (sampleTokensSplits); read once. */
export const sampleTokensWave: { enabled: boolean } = { enabled: envFlag('FUSEFORMER_SAMPLE_WAVE', process.env['FUSEFORMER_SAMPLE_WAVE'], false) };

/**
 * Device code shared by sampleTokens and tokenProbabilities: the spec's constants, the order-preserving
 * key, a row's z (penalty, temperature), the vectorised row walk, argmax reductions and the radix
 * select's digit pick.
 */
export function samplingDeviceCode(spec: SampleTokensSpec): string {
  return String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ V: spec.classes, VEC: spec.vec, VECS: Math.ceil(spec.classes / spec.vec), THREADS: spec.threads, WARPS: spec.threads / 32, WORDS: Math.ceil(spec.classes / 32), SPLITS: spec.splits, SLICE: Math.ceil(Math.ceil(spec.classes / spec.vec) / spec.splits), PRELOAD: spec.preload === true })}
constexpr u32 SAMPLING_DOMAIN = ${SAMPLING_DOMAIN}u;
constexpr u32 FULL = 0xffffffffu;

// The order-preserving key of a float: larger value, larger key (−0 never reaches it).
__device__ __forceinline__ u32 key_of(float z) {
  const u32 u = __float_as_uint(z);
  return (u >> 31) ? ~u : (u | 0x80000000u);
}

// Top-p's masses in fixed point: exp(z − top) ∈ (0, 1] as a multiple of 2^−36, added into a bin's two u32
// words (low, high) with integer atomics. A float atomicAdd on shared memory is a compare-and-swap loop on
// sm_90 (ATOMS.CAST.SPIN): with every key of a flat row in a few top-digit bins, 1024 threads spun on the
// same words and a top-p draw at GPT-2's vocabulary took ~0.3 ms. ATOMS.ADD is one instruction, and the
// integer sums do not depend on the order of the adds. A token below 2^−37 of the top one counts as 0 (at
// most V · 2^−37 ≈ 1e−6 of the mass, against a total ≥ 1); a bin holds at most V · 2^36 < 2^54.
constexpr float MASS_SCALE = 68719476736.f;  // 2^36
__device__ __forceinline__ void add_mass(u32* lo, u32* hi, u32 bin, float m) {
  const unsigned long long q = __float2ull_rn(m * MASS_SCALE);
  const u32 q_lo = (u32)q, old = atomicAdd(&lo[bin], q_lo);
  const u32 q_hi = (u32)(q >> 32) + (old + q_lo < old ? 1u : 0u);  // the carry out of the low word
  if (q_hi != 0u) atomicAdd(&hi[bin], q_hi);
}
__device__ __forceinline__ unsigned long long mass_at(const u32* lo, const u32* hi, int bin) {
  return ((unsigned long long)hi[bin] << 32) + lo[bin];
}

struct RowState {
  const T* row;
  const u32* seen;
  bool penalize;
  float penalty;
  bool sampling;
  float temperature;
};

__device__ __forceinline__ float z_at(const RowState& r, float raw, int j) {
  float z = raw;
  if (r.penalize && ((r.seen[j >> 5] >> (j & 31)) & 1u)) z = z > 0.f ? __fdiv_rn(z, r.penalty) : __fmul_rn(z, r.penalty);
  if (r.sampling) z = __fdiv_rn(z, r.temperature);
  return z == 0.f ? 0.f : z;
}

// Calls f(z, j) for every j of vectors [first, end) of the row; thread t takes vectors first + t,
// first + t + THREADS, ... in that order. LOADS_IN_FLIGHT vectors are loaded before any is used, so a
// thread waits for one memory latency per LOADS_IN_FLIGHT vectors, not per one (a whole 256 KB row
// in one block: 4 latencies).
constexpr int LOADS_IN_FLIGHT = 4;
// f(z, j) for the vectors v0, v0 + THREADS, … of a chunk already in raw (those below end).
template <typename F>
__device__ __forceinline__ void use_chunk(const RowState& r, int v0, int end, const float (&raw)[LOADS_IN_FLIGHT][VEC], F&& f) {
  #pragma unroll
  for (int b = 0; b < LOADS_IN_FLIGHT; b++) {
    const int vi = v0 + b * THREADS;
    if (vi >= end) break;
    #pragma unroll
    for (int e = 0; e < VEC; e++) {
      const int j = vi * VEC + e;
      if (j < V) f(z_at(r, raw[b][e], j), j);
    }
  }
}

// The thread's chunk of vectors v0, v0 + THREADS, … below end, loaded into raw.
__device__ __forceinline__ void load_chunk(const T* row, int v0, int end, float (&raw)[LOADS_IN_FLIGHT][VEC]) {
  #pragma unroll
  for (int b = 0; b < LOADS_IN_FLIGHT; b++) {
    const int vi = v0 + b * THREADS;
    if (vi < end) load_floats<T, VEC>(row + vi * VEC, raw[b], VEC);
  }
}

template <typename F>
__device__ __forceinline__ void for_each_z(const RowState& r, int first, int end, F&& f) {
  for (int v0 = first + threadIdx.x; v0 < end; v0 += THREADS * LOADS_IN_FLIGHT) {
    float raw[LOADS_IN_FLIGHT][VEC];
    load_chunk(r.row, v0, end, raw);
    use_chunk(r, v0, end, raw, f);
  }
}

// The thread's first chunk of vectors [first, end) (for_each_z's first round), loaded into raw.
__device__ __forceinline__ void load_first_chunk(const T* row, int first, int end, float (&raw)[LOADS_IN_FLIGHT][VEC]) {
  load_chunk(row, first + threadIdx.x, end, raw);
}

// for_each_z with its first round's vectors already in raw (load_first_chunk of the same [first, end)).
template <typename F>
__device__ __forceinline__ void for_each_z_preloaded(const RowState& r, int first, int end, const float (&pre)[LOADS_IN_FLIGHT][VEC], F&& f) {
  use_chunk(r, first + threadIdx.x, end, pre, f);
  const int rest = first + THREADS * LOADS_IN_FLIGHT;
  if (rest < end) for_each_z(r, rest, end, f);
}

// The largest Gumbel noise a draw adds: u ≤ 1 − 2^−24 gives −ln(−ln u) ≈ 16.64. A kept token whose z + 17 is
// below the thread's best score so far cannot win (f32 rounding is monotone, so its score rounds no higher),
// and its Philox words and two logarithms are skipped: on a trained model's peaked row, most of them.
constexpr float GUMBEL_BOUND = 17.f;

// The Gumbel-max draw over one loaded vector (vector vi of the row): keeps the best z_j − ln(−ln u_j) over
// kept j, u_j from Philox keyed by the row's seed and countered by (j / 4, position + 1, 0, SAMPLING_DOMAIN).
__device__ __forceinline__ void draw_vector(const RowState& r, const float (&raw)[VEC], int vi, int p, uint2 key, u32 threshold, float& best_v, int& best_j);

// (value, index) with the larger value winning and the lower index breaking ties.
__device__ __forceinline__ bool beats(float v, int j, float best_v, int best_j) {
  return v > best_v || (v == best_v && j < best_j);
}
__device__ __forceinline__ void draw_vector(const RowState& r, const float (&raw)[VEC], int vi, int p, uint2 key, u32 threshold, float& best_v, int& best_j) {
  int group = -1;
  uint4 words = make_uint4(0u, 0u, 0u, 0u);
  #pragma unroll
  for (int e = 0; e < VEC; e++) {
    const int j = vi * VEC + e;
    if (j >= V) break;
    const float z = z_at(r, raw[e], j);
    if (key_of(z) < threshold || z + GUMBEL_BOUND < best_v) continue;
    if ((j >> 2) != group) {
      group = j >> 2;
      words = philox4x32_10(make_uint4((u32)group, (u32)(p + 1), 0u, SAMPLING_DOMAIN), key);
    }
    const float u = ((float)(word_at(words, j & 3) >> 9) + 0.5f) * 1.1920928955078125e-07f;
    const float score = z - logf(-logf(u));
    if (beats(score, j, best_v, best_j)) { best_v = score; best_j = j; }
  }
}
__device__ __forceinline__ void warp_best(float& v, int& j) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(FULL, v, o);
    const int oj = __shfl_xor_sync(FULL, j, o);
    if (beats(ov, oj, v, j)) { v = ov; j = oj; }
  }
}
__device__ __forceinline__ void block_best(float& v, int& j, float* sv, int* sj) {
  warp_best(v, j);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = v; sj[threadIdx.x >> 5] = j; }
  __syncthreads();
  #pragma unroll 1
  for (int w = 0; w < WARPS; w++) if (beats(sv[w], sj[w], v, j)) { v = sv[w]; j = sj[w]; }
}

// Warp 0 picks the digit: the first bin, from 255 down, where the running total reaches "need"; bin(i)
// reads bin i. Lane l holds bins 255 − 8l .. 248 − 8l. Returns the digit (every lane) and, through
// before_pick, the total of the bins above it. Bins must be non-negative and their sum ≥ need > 0 (a
// sum short of it picks the lowest non-empty bin).
template <typename C, typename Bin>
__device__ __forceinline__ int pick_digit(Bin bin, C need, C& before_pick) {
  const int lane = threadIdx.x & 31;
  C c[8], chunk = 0;
  #pragma unroll
  for (int i = 0; i < 8; i++) { c[i] = bin(255 - 8 * lane - i); chunk += c[i]; }
  C inclusive = chunk;
  #pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const C y = __shfl_up_sync(FULL, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  const C total = __shfl_sync(FULL, inclusive, 31);
  if (need > total) need = total;
  const unsigned hit = __ballot_sync(FULL, inclusive >= need);
  const int first = hit ? __ffs(hit) - 1 : 31;
  int digit = 0;
  C before = 0;
  if (lane == first) {
    C acc = inclusive - chunk;  // the bins above this lane's
    int pick = -1, last = -1;
    C last_before = 0;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
      if (c[i] > 0) {
        last = i;
        last_before = acc;
        if (pick < 0 && acc + c[i] >= need) { pick = i; before = acc; }
      }
      acc += c[i];
    }
    if (pick < 0) { pick = last; before = last_before; }
    digit = 255 - 8 * lane - pick;
  }
  digit = __shfl_sync(FULL, digit, first);
  before_pick = __shfl_sync(FULL, before, first);
  return digit;
}

`;
}

/** The shared memory keptThresholdCode(false) works in (and the argmax reductions' red_v / red_j), declared in the kernel. */
const KEPT_THRESHOLD_SHARED = String.raw`  __shared__ u32 counts[256];
  __shared__ u32 mass_lo[256];
  __shared__ u32 mass_hi[256];
  __shared__ float red_v[WARPS];
  __shared__ int red_j[WARPS];
  __shared__ u32 chosen_prefix;
  __shared__ u32 chosen_count;
  __shared__ unsigned long long chosen_mass;
  __shared__ unsigned long long mass_target;
`;

/**
 * The kept set's threshold key (sampleTokens' step 2), as statements inside a kernel: reads r, tid, top_k,
 * top_p and the kernel's shared memory, leaves threshold (kept iff key_of(z) ≥ threshold) in scope. One block
 * walks the whole row (KEPT_THRESHOLD_SHARED), or with cluster (sample-tokens-cluster.ts) the block walks its
 * slice [first, end) into its own bins, bins[phase][counts, mass low, mass high], and after a cluster barrier
 * sums the cluster's into cluster_counts / cluster_mass; top-p's max z meets the same way through exchange_v.
 */
export function keptThresholdCode(cluster: boolean): string {
  const range = cluster ? 'first, end' : '0, VECS', next = cluster ? ', phase ^= 1' : '';
  const counts = cluster ? 'bins[phase][0]' : 'counts', lo = cluster ? 'bins[phase][1]' : 'mass_lo', hi = cluster ? 'bins[phase][2]' : 'mass_hi';
  // After a pass: this block's bins (one block) or the cluster's sums, as count_at(i) / mass_of(i).
  const sumCounts = cluster ? String.raw`        cluster_sync();
        for (int i = tid; i < 256; i += THREADS) {
          u32 sum = 0u;
          for (int c = 0; c < SPLITS; c++) sum += cluster_load_u32(&${counts}[i], c);
          cluster_counts[i] = sum;
        }
` : '';
  const sumMasses = cluster ? String.raw`        cluster_sync();
        for (int i = tid; i < 256; i += THREADS) {
          unsigned long long sum = 0ull;
          for (int c = 0; c < SPLITS; c++) sum += ((unsigned long long)cluster_load_u32(&${hi}[i], c) << 32) + cluster_load_u32(&${lo}[i], c);
          cluster_mass[i] = sum;
        }
` : '';
  const countAt = cluster ? 'cluster_counts[i]' : 'counts[i]', massAt = (i: string) => (cluster ? `cluster_mass[${i}]` : `mass_at(mass_lo, mass_hi, ${i})`);
  const topExchange = cluster ? String.raw`
      if (tid == 0) exchange_v[phase] = top;
      cluster_sync();
      for (int c = 0; c < SPLITS; c++) top = fmaxf(top, cluster_load(&exchange_v[phase], c));
      phase ^= 1;` : '';
  return String.raw`    u32 threshold = 0u;${cluster ? '\n    int phase = 0;  // which buffer of bins / exchange_v this exchange uses' : ''}
    if (top_k >= 1 && top_k < V) {
      u32 prefix = 0u, mask = 0u, remaining = (u32)top_k;
      #pragma unroll 1
      for (int shift = 24; shift >= 0; shift -= 8${next}) {
        for (int i = tid; i < 256; i += THREADS) ${counts}[i] = 0u;
        __syncthreads();
        for_each_z(r, ${range}, [&](float z, int) { const u32 k = key_of(z); if ((k & mask) == prefix) atomicAdd(&${counts}[(k >> shift) & 255u], 1u); });
${sumCounts}        __syncthreads();
        if (tid < 32) {
          u32 above;
          const int digit = pick_digit<u32>([&](int i) { return ${countAt}; }, remaining, above);
          if (tid == 0) { chosen_prefix = prefix | ((u32)digit << shift); chosen_count = remaining - above; }
        }
        __syncthreads();
        prefix = chosen_prefix;
        remaining = chosen_count;
        mask |= 255u << shift;
      }
      threshold = prefix;
    }
    if (top_p < 1.f) {
      float top = __int_as_float(0xff800000);
      for_each_z(r, ${range}, [&](float z, int) { top = fmaxf(top, z); });
      top = block_max(top, red_v);${topExchange}
      u32 prefix = 0u, mask = 0u;
      unsigned long long above = 0ull;
      #pragma unroll 1
      for (int shift = 24; shift >= 0; shift -= 8${next}) {
        for (int i = tid; i < 256; i += THREADS) { ${lo}[i] = 0u; ${hi}[i] = 0u; }
        __syncthreads();
        for_each_z(r, ${range}, [&](float z, int) {
          const u32 k = key_of(z);
          if (k >= threshold && (k & mask) == prefix) add_mass(${lo}, ${hi}, (k >> shift) & 255u, expf(z - top));
        });
${sumMasses}        __syncthreads();
        if (tid < 32) {
          // The first pass holds every kept token: its bins add up to the kept mass, and p of it is the target.
          if (shift == 24) {
            unsigned long long total = 0ull;
            #pragma unroll
            for (int i = 0; i < 8; i++) total += ${massAt('8 * tid + i')};
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(FULL, total, o);
            if (tid == 0) mass_target = max(1ull, (unsigned long long)ceil((double)top_p * (double)total));
          }
          __syncwarp();
          unsigned long long before;
          const int digit = pick_digit<unsigned long long>([&](int i) { return ${massAt('i')}; }, mass_target - above, before);
          if (tid == 0) { chosen_prefix = prefix | ((u32)digit << shift); chosen_mass = above + before; }
        }
        __syncthreads();
        prefix = chosen_prefix;
        above = chosen_mass;
        mask |= 255u << shift;
      }
      threshold = max(threshold, prefix);
    }
`;
}

const KEPT_THRESHOLD_CODE = keptThresholdCode(false);

/**
 * sampleTokens' kernels' shared statements (sample-tokens-cluster.ts too), inside a kernel with the row b, tid and
 * sampleTokens' arguments in scope. ROW_ADVANCE: advance(p, t), the row's state after its token t at position
 * p + 1 (thread 0 of the row's deciding block).
 */
export const ROW_ADVANCE = String.raw`  const auto advance = [&](int p, int t) {
    history[(size_t)b * max_len + p + 1] = t;
    bool stop = p + 2 >= limits[b];
    for (int i = 0; i < stop_count; i++) stop = stop || stop_ids[i] == t;
    if (stop) {
      finished[b] = 1;
    } else {
      tokens[b] = t;
      positions[b] = p + 1;
    }
  };`;

/** A finished (or full) row returns; else p, the sampling parameters and the row's RowState r. */
export const ROW_STATE = String.raw`  if (finished[b] != 0) return;
  const int p = positions[b];
  if (p < 0 || p + 1 >= max_len) return;
  const float temperature = params[4 * b], top_p = params[4 * b + 2], penalty = params[4 * b + 3];
  const int top_k = (int)params[4 * b + 1];
  RowState r{logits + (size_t)b * pitch, seen, penalty != 1.f, penalty, temperature > 0.f, temperature};
`;

/** With a repetition penalty, the row's previous tokens marked in the block's seen[] bitmask. */
export const PENALTY_MASK = String.raw`  if (r.penalize) {
    for (int i = tid; i < WORDS; i += THREADS) seen[i] = 0u;
    __syncthreads();
    const int* past = history + (size_t)b * max_len;
    for (int i = tid; i <= p; i += THREADS) {
      const int t = past[i];
      if (t >= 0 && t < V) atomicOr(&seen[t >> 5], 1u << (t & 31));
    }
    __syncthreads();
  }
`;

export function sampleTokensSource(spec: SampleTokensSpec): KernelSource {
  const name = kernelIdentifier(sampleTokensKey(spec));
  const source = String.raw`${samplingDeviceCode(spec)}// logits [B, pitch]; params f32 [B, 4]; seeds i32 [B, 2]; history i32 [B, max_len]; the rest i32 [B];
// with SPLITS > 1, partials [B, SPLITS] (value, index) and counters [B] (zero; left zero).
// Grid (SPLITS, B), block THREADS.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const T* __restrict__ logits, int pitch, const float* __restrict__ params, const int* __restrict__ seeds,
    int* __restrict__ positions, int* __restrict__ history, int max_len, int* __restrict__ tokens, int* __restrict__ finished,
    const int* __restrict__ limits, const int* __restrict__ stop_ids, int stop_count, float2* __restrict__ partials, u32* __restrict__ counters${spec.argmax ? `,
    unsigned long long* __restrict__ argmax` : ''}) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  __shared__ u32 seen[WORDS];
${KEPT_THRESHOLD_SHARED}  __shared__ bool last_block;
  const int b = blockIdx.y, split = blockIdx.x, tid = threadIdx.x;
${ROW_ADVANCE}${spec.argmax ? `
  // The row's packed greedy pick (RowArgmax), its slot zeroed for the next LM head, whatever the row does.
  __shared__ unsigned long long picked;
  if (split == 0 && tid == 0) {
    picked = argmax[b];
    argmax[b] = 0ull;
  }` : ''}
  // PRELOAD: the split's first vectors requested before the row's state, so both round trips overlap.
  [[maybe_unused]] float pre[LOADS_IN_FLIGHT][VEC];
  if constexpr (PRELOAD) load_first_chunk(logits + (size_t)b * pitch, split * SLICE, min(VECS, split * SLICE + SLICE), pre);
${ROW_STATE}${spec.argmax ? `  // A greedy row without a penalty: its token is the packed pick, block 0's alone (a walk of the whole row if empty).
  const bool from_argmax = !r.sampling && !r.penalize;
  if (from_argmax) {
    if (split != 0) return;
    __syncthreads();  // picked
    if (picked != 0ull) {
      if (tid == 0) advance(p, (int)(0xffffffffu - (u32)picked));
      return;
    }
  }
` : `  constexpr bool from_argmax = false;
`}  // A row with top-k or top-p is block 0's alone; the others take a slice each.
  const bool whole_row = from_argmax || (r.sampling && ((top_k >= 1 && top_k < V) || top_p < 1.f));
  if (whole_row && split != 0) return;
  const int first = whole_row ? 0 : split * SLICE, end = whole_row ? VECS : min(VECS, first + SLICE);

${PENALTY_MASK}
  float best_v = __int_as_float(0xff800000);
  int best_j = 0x7fffffff;
  if (!r.sampling) {
    const auto keep_best = [&](float z, int j) { if (beats(z, j, best_v, best_j)) { best_v = z; best_j = j; } };
    if (PRELOAD && !whole_row) for_each_z_preloaded(r, first, end, pre, keep_best);  // the same [first, end) as preloaded
    else for_each_z(r, first, end, keep_best);
  } else {
${KEPT_THRESHOLD_CODE}    const uint2 key = make_uint2((u32)seeds[2 * b], (u32)seeds[2 * b + 1]);
    for (int vi = first + tid; vi < end; vi += THREADS) {
      float raw[VEC];
      load_floats<T, VEC>(r.row + vi * VEC, raw, VEC);
      draw_vector(r, raw, vi, p, key, threshold, best_v, best_j);
    }
  }
  block_best(best_v, best_j, red_v, red_j);
  if (SPLITS > 1 && !whole_row) {
    // The last block of the row to get here reduces the row's partials (release: each block's
    // partial is visible device-wide before its count; acquire: the last one fences after it).
    if (tid == 0) {
      partials[(size_t)b * SPLITS + split] = make_float2(best_v, __int_as_float(best_j));
      __threadfence();
      last_block = atomicAdd(&counters[b], 1u) == SPLITS - 1;
    }
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    if (tid < 32) {
      best_v = __int_as_float(0xff800000);
      best_j = 0x7fffffff;
      for (int i = tid; i < SPLITS; i += 32) {
        const float2 q = __ldcg(&partials[(size_t)b * SPLITS + i]);
        if (beats(q.x, __float_as_int(q.y), best_v, best_j)) { best_v = q.x; best_j = __float_as_int(q.y); }
      }
      warp_best(best_v, best_j);
      if (tid == 0) counters[b] = 0u;
    }
  }

  if (tid == 0) advance(p, best_j);
}
`;
  return { name, source, gridDependencyWait: true };
}

export function tokenProbabilitiesKey(s: SampleTokensSpec): string {
  return `token_probabilities.${s.dtype}.v${s.classes}.vec${s.vec}.t${s.threads}`;
}

/**
 * tokenProbabilities (backend.ts): one block per row — greedy rows an argmax pass; sampled rows
 * sampleTokens' kept-set threshold (KEPT_THRESHOLD_CODE: radix selects for top-k and top-p), then two
 * passes for the kept set's largest z and its mass Σ exp(z − m), and p(t) = exp(z_t − m) / mass. The row
 * stays in L1/L2 between passes, as in sampleTokens; f32 throughout.
 */
export function tokenProbabilitiesSource(spec: SampleTokensSpec): KernelSource {
  const name = kernelIdentifier(tokenProbabilitiesKey(spec));
  const source = String.raw`${samplingDeviceCode(spec)}
// logits [R, pitch]; params f32 [R, 4]; tokens i32 [R]; out f32 [R]. Grid R, block THREADS.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const T* __restrict__ logits, int pitch, const float* __restrict__ params, const int* __restrict__ tokens, float* __restrict__ out) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
${KEPT_THRESHOLD_SHARED}  const int b = blockIdx.x, tid = threadIdx.x;
  const int t = tokens[b];
  if (t < 0 || t >= V) { if (tid == 0) out[b] = 0.f; return; }
  const float temperature = params[4 * b], top_p = params[4 * b + 2];
  const int top_k = (int)params[4 * b + 1];
  // No repetition penalty (the contract: callers with one keep the host's acceptance).
  RowState r{logits + (size_t)b * pitch, nullptr, false, 1.f, temperature > 0.f, temperature};
  if (!r.sampling) {
    float best_v = __int_as_float(0xff800000);
    int best_j = 0x7fffffff;
    for_each_z(r, 0, VECS, [&](float z, int j) { if (beats(z, j, best_v, best_j)) { best_v = z; best_j = j; } });
    block_best(best_v, best_j, red_v, red_j);
    if (tid == 0) out[b] = best_j == t ? 1.f : 0.f;
    return;
  }
${KEPT_THRESHOLD_CODE}  float m = __int_as_float(0xff800000);
  for_each_z(r, 0, VECS, [&](float z, int) { if (key_of(z) >= threshold) m = fmaxf(m, z); });
  m = block_max(m, red_v);
  float mass = 0.f;
  for_each_z(r, 0, VECS, [&](float z, int) { if (key_of(z) >= threshold) mass += expf(z - m); });
  mass = block_sum(mass, red_v);
  if (tid == 0) {
    const float z = z_at(r, to_float(r.row[t]), t);
    out[b] = key_of(z) >= threshold ? expf(z - m) / mass : 0.f;
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

/** A kept set's largest z and mass Σ exp(z − m), as statements: reads r and `threshold`, declares m_<tag>, mass_<tag>. */
function keptMassCode(tag: string): string {
  return `  float m_${tag} = __int_as_float(0xff800000);
  for_each_z(r, 0, VECS, [&](float z, int) { if (key_of(z) >= threshold) m_${tag} = fmaxf(m_${tag}, z); });
  m_${tag} = block_max(m_${tag}, red_v);
  float mass_${tag} = 0.f;
  for_each_z(r, 0, VECS, [&](float z, int) { if (key_of(z) >= threshold) mass_${tag} += expf(z - m_${tag}); });
  mass_${tag} = block_sum(mass_${tag}, red_v);
`;
}

export function speculativeSampleKey(s: SampleTokensSpec): string {
  return `speculative_sample.${s.dtype}.v${s.classes}.vec${s.vec}.t${s.threads}`;
}

/**
 * speculativeSample (backend.ts): one block per row. A greedy row is an argmax pass. A sampled row:
 * the target's kept-set threshold, largest z and mass (KEPT_THRESHOLD_CODE, as in tokenProbabilities),
 * the draft's likewise when there is one, then one pass over both rows that draws Philox noise per
 * candidate (4 a call) and keeps two running Gumbel-max winners — the residual's, ln(p − q) + g over
 * p > q, and the target's, z + g over its kept set (the bonus, and the residual's fallback when it has
 * no mass) — reduced across the block at the end. f32 throughout; the rows stay in L1/L2 between passes.
 */
export function speculativeSampleSource(spec: SampleTokensSpec): KernelSource {
  const name = kernelIdentifier(speculativeSampleKey(spec));
  const source = String.raw`${samplingDeviceCode(spec)}
constexpr u32 SPECULATIVE_DOMAIN = ${SPECULATIVE_DOMAIN}u;
// target_logits, draft_logits (or null) [R, pitch]; params f32 [R, 4]; seeds i32 [R, 2]; positions, out i32 [R]. Grid R, block THREADS.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const T* __restrict__ target_logits, const T* __restrict__ draft_logits, int pitch, const float* __restrict__ params,
    const int* __restrict__ seeds, const int* __restrict__ positions, int* __restrict__ out) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
${KEPT_THRESHOLD_SHARED}  const int b = blockIdx.x, tid = threadIdx.x;
  const float temperature = params[4 * b], top_p = params[4 * b + 2];
  const int top_k = (int)params[4 * b + 1];
  const bool has_draft = draft_logits != nullptr;
  // No repetition penalty (the contract, as tokenProbabilities).
  const RowState rt{target_logits + (size_t)b * pitch, nullptr, false, 1.f, temperature > 0.f, temperature};
  const RowState rd{has_draft ? draft_logits + (size_t)b * pitch : rt.row, nullptr, false, 1.f, temperature > 0.f, temperature};
  if (!rt.sampling) {
    float best_v = __int_as_float(0xff800000);
    int best_j = 0x7fffffff;
    for_each_z(rt, 0, VECS, [&](float z, int j) { if (beats(z, j, best_v, best_j)) { best_v = z; best_j = j; } });
    block_best(best_v, best_j, red_v, red_j);
    if (tid == 0) out[b] = best_j;
    return;
  }
  u32 threshold_t, threshold_d = 0u;
  float rt_m, rt_mass, m_d = 0.f, mass_d = 1.f;
  {
    const RowState& r = rt;
${KEPT_THRESHOLD_CODE}    threshold_t = threshold;
${keptMassCode('t')}    rt_m = m_t;
    rt_mass = mass_t;
  }
  if (has_draft) {
    const RowState& r = rd;
${KEPT_THRESHOLD_CODE}    threshold_d = threshold;
${keptMassCode('q')}    m_d = m_q;
    mass_d = mass_q;
  }
  const float inv_t = 1.f / rt_mass, inv_d = 1.f / mass_d;
  const uint2 key = make_uint2((u32)seeds[2 * b], (u32)seeds[2 * b + 1]);
  const u32 position = (u32)positions[b], noise = has_draft ? ${SPECULATIVE_NOISE_RESIDUAL}u : ${SPECULATIVE_NOISE_BONUS}u;
  float res_v = __int_as_float(0xff800000), tgt_v = __int_as_float(0xff800000);
  int res_j = 0x7fffffff, tgt_j = 0x7fffffff;
  for (int vi = tid; vi < VECS; vi += THREADS) {
    float raw_t[VEC], raw_d[VEC];
    load_floats<T, VEC>(rt.row + vi * VEC, raw_t, VEC);
    if (has_draft) load_floats<T, VEC>(rd.row + vi * VEC, raw_d, VEC);
    uint4 words = make_uint4(0u, 0u, 0u, 0u);
    #pragma unroll
    for (int e = 0; e < VEC; e++) {
      const int j = vi * VEC + e;
      if (j >= V) break;
      if (e == 0 || (j & 3) == 0) words = philox4x32_10(make_uint4((u32)(j >> 2), position, noise, SPECULATIVE_DOMAIN), key);
      const float z = z_at(rt, raw_t[e], j);
      if (key_of(z) < threshold_t) continue;  // p_j = 0: in neither draw
      const float u = ((float)(word_at(words, j & 3) >> 9) + 0.5f) * 1.1920928955078125e-07f;
      const float g = -logf(-logf(u));
      if (beats(z + g, j, tgt_v, tgt_j)) { tgt_v = z + g; tgt_j = j; }
      if (has_draft) {
        // Each probability rounded on its own (no FMA contraction of one product into the difference),
        // so a draft row equal to the target's gives w = 0 exactly, as on the CPU: the fallback to p.
        const float zq = z_at(rd, raw_d[e], j);
        const float w = __fsub_rn(__fmul_rn(expf(z - rt_m), inv_t), key_of(zq) >= threshold_d ? __fmul_rn(expf(zq - m_d), inv_d) : 0.f);
        if (w > 0.f && beats(logf(w) + g, j, res_v, res_j)) { res_v = logf(w) + g; res_j = j; }
      }
    }
  }
  block_best(tgt_v, tgt_j, red_v, red_j);
  if (has_draft) block_best(res_v, res_j, red_v, red_j);
  if (tid == 0) out[b] = has_draft && res_j != 0x7fffffff ? res_j : tgt_j;
}
`;
  return { name, source, gridDependencyWait: true };
}

export function speculativeSample(host: KernelHost, args: SpeculativeSampleArgs): void {
  const c = new OpCheck('speculativeSample', 'cuda');
  const { target, draft, params, seeds, positions, out, classes, R, Vp } = checkSpeculativeSample(c, args);
  const p = {
    target: devicePtr(c, 'target', target), draft: draft ? devicePtr(c, 'draft', draft) : 0n, params: devicePtr(c, 'params', params),
    seeds: devicePtr(c, 'seeds', seeds), positions: devicePtr(c, 'positions', positions), out: devicePtr(c, 'out', out),
  };
  if (R === 0) return;
  if (classes > MAX_CLASSES) c.fail(`a vocabulary of ${classes} classes is larger than the largest supported (${MAX_CLASSES})`);
  const dtype = target.dtype as FloatDType, size = byteSize(dtype);
  const vec = pickVectorWidth(16 / size, [{ ptr: p.target, elementBytes: size }, ...(draft ? [{ ptr: p.draft, elementBytes: size }] : [])], Vp);
  const spec: SampleTokensSpec = { dtype, classes, vec, threads: sampleTokensThreads(classes), splits: 1 };
  host.kernel(speculativeSampleKey(spec), () => speculativeSampleSource(spec)).launch(
    { grid: R, block: spec.threads },
    [arg.ptr(p.target), arg.ptr(p.draft), arg.i32(Vp), arg.ptr(p.params), arg.ptr(p.seeds), arg.ptr(p.positions), arg.ptr(p.out)],
  );
}

export function tokenProbabilities(host: KernelHost, args: TokenProbabilitiesArgs): void {
  const c = new OpCheck('tokenProbabilities', 'cuda');
  const { logits, params, tokens, out, classes, R, Vp } = checkTokenProbabilities(c, args);
  const p = { logits: devicePtr(c, 'logits', logits), params: devicePtr(c, 'params', params), tokens: devicePtr(c, 'tokens', tokens), out: devicePtr(c, 'out', out) };
  if (R === 0) return;
  if (classes > MAX_CLASSES) c.fail(`a vocabulary of ${classes} classes is larger than the largest supported (${MAX_CLASSES})`);
  const dtype = logits.dtype as FloatDType, size = byteSize(dtype);
  const vec = pickVectorWidth(16 / size, [{ ptr: p.logits, elementBytes: size }], Vp);
  const spec: SampleTokensSpec = { dtype, classes, vec, threads: sampleTokensThreads(classes), splits: 1 };
  host.kernel(tokenProbabilitiesKey(spec), () => tokenProbabilitiesSource(spec)).launch(
    { grid: R, block: spec.threads },
    [arg.ptr(p.logits), arg.i32(Vp), arg.ptr(p.params), arg.ptr(p.tokens), arg.ptr(p.out)],
  );
}

export function sampleTokens(host: KernelHost, args: SampleTokensArgs): void {
  const c = new OpCheck('sampleTokens', 'cuda');
  const { logits, params, seeds, positions, history, tokens, finished, limits, stopIds, classes, B, Vp, maxLen, stopSlots, argmax } = checkSampleTokens(c, args);
  const ptr = (name: string, t: typeof logits) => devicePtr(c, name, t);
  const p = {
    logits: ptr('logits', logits), params: ptr('params', params), seeds: ptr('seeds', seeds), positions: ptr('positions', positions),
    history: ptr('history', history), tokens: ptr('tokens', tokens), finished: ptr('finished', finished), limits: ptr('limits', limits), stopIds: ptr('stopIds', stopIds),
  };
  if (B === 0) return;
  if (classes > MAX_CLASSES) c.fail(`a vocabulary of ${classes} classes is larger than the largest supported (${MAX_CLASSES})`);
  const dtype = logits.dtype as FloatDType, size = byteSize(dtype);
  const vec = pickVectorWidth(16 / size, [{ ptr: p.logits, elementBytes: size }], Vp);
  const threads = sampleTokensThreads(classes);
  const spec: SampleTokensSpec = {
    dtype, classes, vec, threads, splits: sampleTokensForcedSplits.splits ?? sampleTokensSplits(classes, vec, threads, sampleTokensWave.enabled ? { rows: B, multiProcessorCount: host.multiProcessorCount } : undefined),
    ...(sampleTokensPreload.enabled ? { preload: true } : {}), ...(argmax ? { argmax: true } : {}),
  };
  const rowArgs = [
    arg.ptr(p.logits), arg.i32(Vp), arg.ptr(p.params), arg.ptr(p.seeds), arg.ptr(p.positions), arg.ptr(p.history), arg.i32(maxLen),
    arg.ptr(p.tokens), arg.ptr(p.finished), arg.ptr(p.limits), arg.ptr(p.stopIds), arg.i32(stopSlots),
  ];
  const argmaxArg = argmax ? [arg.ptr(devicePtr(c, 'argmax', argmax))] : [];
  const cluster = host.clusters && sampleTokensClusterOption.enabled && !sampleTokensPreload.enabled && sampleTokensForcedSplits.splits === undefined ? sampleTokensCluster(classes, vec, B, host.multiProcessorCount) : null;
  if (cluster) {
    const clusterSpec: SampleTokensSpec = { dtype, classes, vec, threads: cluster.threads, splits: cluster.cluster, ...(argmax ? { argmax: true } : {}) };
    host.kernel(sampleTokensClusterKey(clusterSpec), () => sampleTokensClusterSource(clusterSpec)).launch({ grid: [cluster.cluster, B], block: cluster.threads }, [...rowArgs, ...argmaxArg]);
    return;
  }
  const partials = spec.splits > 1 ? host.scratch(B * spec.splits * 8) : 0n, counters = spec.splits > 1 ? host.counters(B) : 0n;
  host.kernel(sampleTokensKey(spec), () => sampleTokensSource(spec)).launch(
    { grid: [spec.splits, B], block: spec.threads },
    [...rowArgs, arg.ptr(partials), arg.ptr(counters), ...argmaxArg],
  );
}

/** GPT-2's and Llama 3's vocabularies in bf16, f16 and f32, and a small odd one. */
export function catalog(): KernelSource[] {
  return [
    sampleTokensSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits: sampleTokensSplits(50257, 8, 1024) }),
    // The state read after the first logits are requested (FUSEFORMER_SAMPLE_PRELOAD): GPT-2's split row, Llama's whole row in one block.
    sampleTokensSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits: sampleTokensSplits(50257, 8, 1024), preload: true }),
    sampleTokensSource({ dtype: 'bf16', classes: 128256, vec: 8, threads: 1024, splits: 1, preload: true }),
    sampleTokensSource({ dtype: 'bf16', classes: 128256, vec: 8, threads: 1024, splits: sampleTokensSplits(128256, 8, 1024) }),
    // The LM head's packed greedy pick (SampleTokensArgs.argmax): GPT-2's split row, Llama's.
    sampleTokensSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits: sampleTokensSplits(50257, 8, 1024), argmax: true }),
    sampleTokensSource({ dtype: 'bf16', classes: 128256, vec: 8, threads: 1024, splits: sampleTokensSplits(128256, 8, 1024), argmax: true }),
    sampleTokensSource({ dtype: 'f16', classes: 32000, vec: 8, threads: 1024, splits: sampleTokensSplits(32000, 8, 1024) }),
    sampleTokensSource({ dtype: 'f32', classes: 50257, vec: 4, threads: 1024, splits: sampleTokensSplits(50257, 4, 1024) }),
    sampleTokensSource({ dtype: 'f32', classes: 1003, vec: 1, threads: 256, splits: sampleTokensSplits(1003, 1, 256) }),
    sampleTokensSource({ dtype: 'f32', classes: 300, vec: 4, threads: 256, splits: 1 }),
    // Thread-block clusters: GPT-2's and Llama 3's vocabularies, with and without the packed greedy picks.
    sampleTokensClusterSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 512, splits: 8 }),
    sampleTokensClusterSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 512, splits: 4 }),
    sampleTokensClusterSource({ dtype: 'bf16', classes: 128256, vec: 8, threads: 512, splits: 8, argmax: true }),
    sampleTokensClusterSource({ dtype: 'f32', classes: 32000, vec: 4, threads: 512, splits: 8 }),
    tokenProbabilitiesSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits: 1 }),
    tokenProbabilitiesSource({ dtype: 'f16', classes: 32000, vec: 8, threads: 1024, splits: 1 }),
    tokenProbabilitiesSource({ dtype: 'f32', classes: 1003, vec: 1, threads: 256, splits: 1 }),
    speculativeSampleSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits: 1 }),
    speculativeSampleSource({ dtype: 'bf16', classes: 128256, vec: 8, threads: 1024, splits: 1 }),
    speculativeSampleSource({ dtype: 'f32', classes: 1003, vec: 1, threads: 256, splits: 1 }),
  ];
}
