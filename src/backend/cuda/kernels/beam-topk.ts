// Beam search on the device: beamTopK (log-softmax + running score + top-K over every beam of an item,
// fused, by LightSeq's hierarchical auto-regressive search, HARS) and beamAdvance (next beams, cache-row
// table, positions). backend.ts states both contracts; src/infer/beam-topk-hars.ts mirrors this kernel's
// search on the host, step for step, and its tests check it against a full sort.
//
// beamTopK — one block per item, BEAMS·TR threads: threads [j·TR, (j+1)·TR) own row j (beam j). Thread t
// of a row reads vectors t, t + TR, t + 2·TR, ... of VEC logits (a warp reads 32 consecutive 16-byte
// vectors per load); its elements, in increasing token order, are its group. One pass over the row:
//   1. online (max, Σ exp2) of the logits in the normaliser (banned tokens left out when RENORMALIZE) →
//      lse per row, merged over the row's warps;
//   2. the group's M best logits (ties: lower token) in registers, plus `spill`, the largest logit it did
//      not keep — scores are monotone in the logit within a row, so these are also its best scores.
// Then HARS: the threshold R is the K-th largest group maximum of the item (as a score; K rounds of a
// block-wide argmax over the BEAMS·TR group keys). K distinct elements score ≥ R, so every element of the
// top K scores ≥ R: only those survive. A group whose spill also scores ≥ R may have dropped one, so
// then every row is scanned again from memory (L2) instead of read from the lists. The survivors (a few
// times K in practice) are ranked exactly by counting (rank = how many survivors beat it) and the first K
// written. More than CAP survivors (ties at R, rows of −∞) falls back to K exact block-wide argmax passes
// over the item: slow, but correct for any input.
// Order: (score desc, flat asc) as one u64 per candidate, (orderable score bits << 32) | ~flat, so every
// comparison is one integer compare and ties resolve by the lower flat index beam·C + token.
// Bytes: reads each logit once (twice on a rescan), 4 bytes per row of beam scores, writes 12·K per item.
//
// beamAdvance — one block per item: thread 0 picks the next beams from the item's K candidates (first
// non-EOS ones, then, if short, the EOS ones lowered by 1e9), then the block gathers the item's rows of
// the cache-row table (BEAMS·(t+1) ints from the parents' rows) and writes the positions t + 1. Tiny.

import type { BeamAdvanceArgs, BeamTopKArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { FLOAT_DTYPES } from '../../../dtype.js';
import { checkBeamAdvance, checkBeamTopK } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro, rowVectorWidth } from './row-kernels.js';

// ---- specs ---------------------------------------------------------------------------------------------

/** Logits each thread keeps in registers per row (its group's best). */
export const BEAM_TOPK_LOCAL = 4;
/** Survivors ranked in shared memory; more fall back to the exact argmax passes. */
export const BEAM_TOPK_CAPACITY = 1024;
/** Vectors each thread loads before using any: 4 of f32, 2 of 16-bit (whose 8 lanes a vector would spill at 64 registers). */
export function beamTopKUnroll(vec: number): number {
  return vec >= 8 ? 2 : 4;
}
const BLOCK_LIMIT = 1024;
/** Banned tokens are compared one by one in the kernel. */
const MAX_BANNED = 64;

export interface BeamTopKSpec {
  readonly dtype: FloatDType;
  /** Vp: the logits' row stride. */
  readonly rowStride: number;
  /** C ≤ Vp: the vocabulary. */
  readonly classes: number;
  readonly beams: number;
  /** K: candidates written per item. */
  readonly candidates: number;
  /** Threads per row (a multiple of 32); BEAMS·TR ≤ 1024. */
  readonly threadsPerRow: number;
  /** Elements per vector load (divides Vp; the logits are aligned to it). */
  readonly vec: number;
  readonly banned: readonly number[];
  readonly renormalize: boolean;
  readonly hasBeamScores: boolean;
}

export function beamTopKKey(s: BeamTopKSpec): string {
  const width = `v${s.rowStride}${s.classes !== s.rowStride ? `.c${s.classes}` : ''}`;
  const banned = s.banned.length > 0 ? `.ban${s.banned.join('_')}` : '';
  return `beam_topk.${s.dtype}.${width}.b${s.beams}.k${s.candidates}.t${s.threadsPerRow}.x${s.vec}${banned}${s.renormalize ? '.renorm' : ''}${s.hasBeamScores ? '' : '.noscores'}`;
}

/** Threads per row: as many warps as fit BEAMS rows in a 1024-thread block, but no more than keep ~UNROLL vectors each busy. */
export function beamTopKThreadsPerRow(beams: number, classes: number, vec: number): number {
  const fit = Math.floor(BLOCK_LIMIT / beams / 32) * 32;
  const useful = Math.ceil(Math.ceil(classes / vec) / beamTopKUnroll(vec) / 32) * 32;
  return Math.max(32, Math.min(fit, useful));
}

export function planBeamTopK(dtype: FloatDType, rowStride: number, classes: number, beams: number, candidates: number, logitsPtr: bigint,
  banned: readonly number[], renormalize: boolean, hasBeamScores: boolean): BeamTopKSpec {
  const vec = rowVectorWidth(dtype, rowStride, [logitsPtr]);
  return {
    dtype, rowStride, classes, beams, candidates, threadsPerRow: beamTopKThreadsPerRow(beams, classes, vec), vec,
    banned: [...new Set(banned)].sort((a, b) => a - b), renormalize, hasBeamScores,
  };
}

export interface BeamAdvanceSpec {
  readonly beams: number;
  readonly candidates: number;
  readonly eos: readonly number[];
}

export function beamAdvanceKey(s: BeamAdvanceSpec): string {
  return `beam_advance.b${s.beams}.k${s.candidates}${s.eos.length > 0 ? `.eos${s.eos.join('_')}` : ''}`;
}

const ADVANCE_THREADS = 128;

// ---- sources ------------------------------------------------------------------------------------------

/** `v == a || v == b ...` over a token list, or false. */
function membership(variable: string, ids: readonly number[]): string {
  return ids.length === 0 ? 'false' : ids.map((id) => `${variable} == ${id}`).join(' || ');
}

export function beamTopKSource(spec: BeamTopKSpec): KernelSource {
  const { beams, threadsPerRow: TR, vec, classes: C, candidates: K } = spec;
  if (beams * TR > BLOCK_LIMIT || TR % 32 !== 0) throw new Error(`internal: beam top-k block of ${beams}×${TR} threads`);
  if (spec.rowStride % vec !== 0 || C > spec.rowStride) throw new Error('internal: beam top-k spec has a row stride that is not a multiple of its vector');
  const name = kernelIdentifier(beamTopKKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({
    VP: spec.rowStride, C, BEAMS: beams, K, TR, VEC: vec, NV: Math.ceil(C / vec), M: BEAM_TOPK_LOCAL, CAP: BEAM_TOPK_CAPACITY,
    UNROLL: beamTopKUnroll(vec), BLOCK: beams * TR, WARPS: (beams * TR) / 32, WARPS_PER_ROW: TR / 32,
    RENORMALIZE: spec.renormalize, HAS_BEAM_SCORES: spec.hasBeamScores,
  })}
${launchBoundsMacro(beams * TR)}
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr int EMPTY = 0x7fffffff;  // an unused list slot: worse than any real element (also −∞ ones)
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ bool is_banned(int v) { return ${membership('v', spec.banned)}; }

// Scores as unsigned integers in the same order (−0 folded into +0, NaN into −∞); key 0 means "no element".
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned b = __float_as_uint(f == 0.f ? 0.f : f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_score(unsigned k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }
// One candidate as one integer: higher score first, then lower flat index.
__device__ __forceinline__ u64 rank_key(unsigned key, int flat) { return ((u64)key << 32) | (u64)(0xffffffffu - (unsigned)flat); }

// score = (z − lse) + beam score, in f32 and in that order (the contract); −∞ rows and elements stay −∞.
__device__ __forceinline__ float score_of(float x, float lse, float bs) {
  if (lse == neg_inf() || x == neg_inf()) return neg_inf();
  const float s = __fadd_rn(__fsub_rn(x, lse), bs);
  return s == s ? s : neg_inf();
}

__device__ __forceinline__ void fold(float2& state, float v) {
  if (v > state.x) { state.y = state.y * exp2_fast(state.x - v) + 1.f; state.x = v; }
  else if (state.x != neg_inf()) state.y += exp2_fast(v - state.x);
}

__device__ __forceinline__ u64 max_u64(u64 a, u64 b) { return a > b ? a : b; }
__device__ __forceinline__ u64 warp_max_u64(u64 x) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max_u64(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Block-wide max; slots alternate between calls so one barrier per call suffices.
__device__ __forceinline__ u64 block_max_u64(u64 x, u64 (*slots)[WARPS], int round) {
  x = warp_max_u64(x);
  if ((threadIdx.x & 31) == 0) slots[round & 1][threadIdx.x >> 5] = x;
  __syncthreads();
  u64 best = slots[round & 1][0];
  #pragma unroll
  for (int w = 1; w < WARPS; w++) best = max_u64(best, slots[round & 1][w]);
  return best;
}

__device__ __forceinline__ void keep_survivor(u64 key, u64* survivors, int* count) {
  const int at = atomicAdd(count, 1);
  if (at < CAP) survivors[at] = key;
}

__device__ __forceinline__ void write_candidate(int item, int rank, u64 key, int* tokens, int* beams, float* scores) {
  const int flat = (int)(0xffffffffu - (unsigned)(key & 0xffffffffu));
  tokens[item * K + rank] = flat % C;
  beams[item * K + rank] = flat / C;
  scores[item * K + rank] = key_score((unsigned)(key >> 32));
}

extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* __restrict__ logits, const float* __restrict__ beam_scores,
    int* __restrict__ out_tokens, int* __restrict__ out_beams, float* __restrict__ out_scores) {
  __shared__ float2 lse_slots[WARPS];
  __shared__ float row_lse[BEAMS];
  __shared__ u64 pick_slots[2][WARPS];
  __shared__ u64 survivors[CAP];
  __shared__ int survivor_count;
  const int item = blockIdx.x;
  const int beam = threadIdx.x / TR, t = threadIdx.x % TR;
  const int row = item * BEAMS + beam;
  const T* z = logits + (long long)row * VP;
  const float bs = HAS_BEAM_SCORES ? beam_scores[row] : 0.f;
  if (threadIdx.x == 0) survivor_count = 0;

  // ---- one pass: the normaliser, the group's M best logits and the best one it let go ----
  float2 state = make_float2(neg_inf(), 0.f);
  float lx[M];
  int li[M];
  #pragma unroll
  for (int s = 0; s < M; s++) { lx[s] = neg_inf(); li[s] = EMPTY; }
  float spill = neg_inf();
  bool spilled = false;
  for (int first = t; first < NV; first += TR * UNROLL) {
    float v[UNROLL][VEC];
    #pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const int vi = first + u * TR;
      if (vi < NV) load_floats<T, VEC>(z + vi * VEC, v[u], VEC);
    }
    #pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const int vi = first + u * TR;
      if (vi >= NV) continue;
      #pragma unroll
      for (int e = 0; e < VEC; e++) {
        const int idx = vi * VEC + e;
        if (idx >= C) continue;
        const float x = v[u][e];
        const bool banned = is_banned(idx);
        if (x == x && !(RENORMALIZE && banned)) fold(state, x * LOG2E);
        const float xc = (banned || x != x) ? neg_inf() : x;
        // Elements arrive in increasing index order, so a tie with a kept value is worse than it.
        if (xc > lx[M - 1] || (xc == lx[M - 1] && li[M - 1] == EMPTY)) {
          if (li[M - 1] != EMPTY) { spill = fmaxf(spill, lx[M - 1]); spilled = true; }
          lx[M - 1] = xc; li[M - 1] = idx;
          #pragma unroll
          for (int s = M - 1; s > 0; s--) {
            if (lx[s] > lx[s - 1] || (lx[s] == lx[s - 1] && li[s] < li[s - 1])) {
              const float tx = lx[s]; lx[s] = lx[s - 1]; lx[s - 1] = tx;
              const int ti = li[s]; li[s] = li[s - 1]; li[s - 1] = ti;
            }
          }
        } else {
          spill = fmaxf(spill, xc);
          spilled = true;
        }
      }
    }
  }

  // ---- lse per row (a row's warps never straddle rows: TR is a multiple of 32) ----
  state = warp_max_sum(state);
  if ((threadIdx.x & 31) == 0) lse_slots[threadIdx.x >> 5] = state;
  __syncthreads();
  if (t == 0) {
    float2 s = lse_slots[beam * WARPS_PER_ROW];
    for (int w = 1; w < WARPS_PER_ROW; w++) s = max_sum_merge(s, lse_slots[beam * WARPS_PER_ROW + w]);
    row_lse[beam] = s.x == neg_inf() ? neg_inf() : (s.x + log2f(s.y)) * LN2;
  }
  __syncthreads();
  const float lse = row_lse[beam];

  // ---- HARS threshold: the K-th largest group maximum of the item ----
  unsigned mine = li[0] != EMPTY ? order_key(score_of(lx[0], lse, bs)) : 0u;
  unsigned threshold = 0u;
  for (int round = 0; round < K; round++) {
    const u64 best = block_max_u64(((u64)mine << 32) | (u64)(0xffffffffu - threadIdx.x), pick_slots, round);
    threshold = (unsigned)(best >> 32);
    if (threshold == 0u) break;  // fewer than K groups hold elements: every element survives
    if ((unsigned)(best & 0xffffffffu) == 0xffffffffu - threadIdx.x) mine = 0u;
  }

  // ---- survivors: from the lists, or from memory when a spilled element might reach R ----
  const bool rescan = __syncthreads_or(spilled && order_key(score_of(spill, lse, bs)) >= threshold);
  if (!rescan) {
    #pragma unroll
    for (int s = 0; s < M; s++) {
      if (li[s] == EMPTY) break;
      const unsigned key = order_key(score_of(lx[s], lse, bs));
      if (key < threshold) break;
      keep_survivor(rank_key(key, beam * C + li[s]), survivors, &survivor_count);
    }
  } else {
    for (int vi = t; vi < NV; vi += TR) {
      float v[VEC];
      load_floats<T, VEC>(z + vi * VEC, v, VEC);
      #pragma unroll
      for (int e = 0; e < VEC; e++) {
        const int idx = vi * VEC + e;
        if (idx >= C) continue;
        const float xc = (is_banned(idx) || v[e] != v[e]) ? neg_inf() : v[e];
        const unsigned key = order_key(score_of(xc, lse, bs));
        if (key >= threshold) keep_survivor(rank_key(key, beam * C + idx), survivors, &survivor_count);
      }
    }
  }
  __syncthreads();
  const int n = survivor_count;

  if (n <= CAP) {
    // ---- rank the few survivors exactly ----
    for (int e = threadIdx.x; e < n; e += BLOCK) {
      const u64 me = survivors[e];
      int rank = 0;
      for (int f = 0; f < n; f++) rank += survivors[f] > me;
      if (rank < K) write_candidate(item, rank, me, out_tokens, out_beams, out_scores);
    }
    return;
  }

  // ---- too many ties for the buffer: K exact argmax passes over the item ----
  u64 previous = ~0ull;
  for (int round = 0; round < K; round++) {
    u64 best = 0ull;
    for (int vi = t; vi < NV; vi += TR) {
      float v[VEC];
      load_floats<T, VEC>(z + vi * VEC, v, VEC);
      #pragma unroll
      for (int e = 0; e < VEC; e++) {
        const int idx = vi * VEC + e;
        if (idx >= C) continue;
        const float xc = (is_banned(idx) || v[e] != v[e]) ? neg_inf() : v[e];
        const u64 key = rank_key(order_key(score_of(xc, lse, bs)), beam * C + idx);
        if (key < previous && key > best) best = key;
      }
    }
    best = block_max_u64(best, pick_slots, round);
    if (threadIdx.x == 0) write_candidate(item, round, best, out_tokens, out_beams, out_scores);
    previous = best;
  }
}
`;
  return { name, source };
}

export function beamAdvanceSource(spec: BeamAdvanceSpec): KernelSource {
  const name = kernelIdentifier(beamAdvanceKey(spec));
  const source = String.raw`${DEVICE_LIB}
${constants({ BEAMS: spec.beams, K: spec.candidates, THREADS: ADVANCE_THREADS })}
${launchBoundsMacro(ADVANCE_THREADS)}
__device__ __forceinline__ bool is_eos(int v) { return ${membership('v', spec.eos)}; }

extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const int* __restrict__ cand_tokens, const int* __restrict__ cand_beams, const float* __restrict__ cand_scores,
    int* __restrict__ next_tokens, float* __restrict__ beam_scores, int* __restrict__ cache_rows, int* __restrict__ positions,
    int rows, int cap) {
  __shared__ int parent[BEAMS];
  __shared__ int token[BEAMS];
  __shared__ float score[BEAMS];
  __shared__ int position;
  const int item = blockIdx.x;
  if (threadIdx.x == 0) {
    position = positions[item * BEAMS];
    int n = 0;
    // Pass 0: candidates that go on; pass 1 (only when short): finished ones, lowered by 1e9.
    for (int pass = 0; pass < 2 && n < BEAMS; pass++) {
      for (int k = 0; k < K && n < BEAMS; k++) {
        const int tok = cand_tokens[item * K + k];
        if (is_eos(tok) != (pass == 1)) continue;
        const int beam = min(max(cand_beams[item * K + k], 0), BEAMS - 1);
        token[n] = tok;
        parent[n] = item * BEAMS + beam;
        score[n] = pass == 0 ? cand_scores[item * K + k] : __fsub_rn(cand_scores[item * K + k], 1e9f);
        n++;
      }
    }
  }
  __syncthreads();
  const int t = position;
  for (int j = threadIdx.x; j < BEAMS; j += THREADS) {
    next_tokens[item * BEAMS + j] = token[j];
    beam_scores[item * BEAMS + j] = score[j];
    positions[item * BEAMS + j] = t + 1;
  }
  if (t < 0 || t >= cap) return;
  const int* cur = cache_rows + (long long)(t & 1) * rows * cap;
  int* next = cache_rows + (long long)((t + 1) & 1) * rows * cap;
  for (int e = threadIdx.x; e < BEAMS * (t + 1); e += THREADS) {
    const int j = e / (t + 1), i = e - j * (t + 1);
    next[(long long)(item * BEAMS + j) * cap + i] = i < t ? cur[(long long)parent[j] * cap + i] : parent[j];
  }
}
`;
  return { name, source };
}

// ---- launchers ------------------------------------------------------------------------------------------

export function beamTopK(host: KernelHost, args: BeamTopKArgs): void {
  const check = new OpCheck('beamTopK', 'cuda');
  const { logits, beamScores, tokens, sourceBeams, scores, beams, batch, classes, Vp, K, bannedTokens, renormalize } = checkBeamTopK(check, args);
  if (beams > BLOCK_LIMIT / 32) check.fail(`the CUDA kernel handles at most ${BLOCK_LIMIT / 32} beams (a warp per beam at least), got ${beams}`);
  if (new Set(bannedTokens).size > MAX_BANNED) check.fail(`the CUDA kernel handles at most ${MAX_BANNED} banned tokens, got ${new Set(bannedTokens).size}`);
  if (batch === 0) return;
  const logitsPtr = devicePtr(check, 'logits', logits);
  const spec = planBeamTopK(logits.dtype as FloatDType, Vp, classes, beams, K, logitsPtr, bannedTokens, renormalize, beamScores !== undefined);
  host.kernel(beamTopKKey(spec), () => beamTopKSource(spec)).launch({ grid: batch, block: beams * spec.threadsPerRow }, [
    arg.ptr(logitsPtr), arg.ptr(beamScores ? devicePtr(check, 'beamScores', beamScores) : 0n),
    arg.ptr(devicePtr(check, 'tokens', tokens)), arg.ptr(devicePtr(check, 'sourceBeams', sourceBeams)), arg.ptr(devicePtr(check, 'scores', scores)),
  ]);
}

export function beamAdvance(host: KernelHost, args: BeamAdvanceArgs): void {
  const check = new OpCheck('beamAdvance', 'cuda');
  const { tokens, sourceBeams, scores, nextTokens, beamScores, cacheRows, positions, beams, eosTokens, batch, K, rows, L } = checkBeamAdvance(check, args);
  if (eosTokens.length > MAX_BANNED) check.fail(`the CUDA kernel handles at most ${MAX_BANNED} EOS tokens, got ${eosTokens.length}`);
  if (batch === 0) return;
  const spec: BeamAdvanceSpec = { beams, candidates: K, eos: [...new Set(eosTokens)].sort((a, b) => a - b) };
  host.kernel(beamAdvanceKey(spec), () => beamAdvanceSource(spec)).launch({ grid: batch, block: ADVANCE_THREADS }, [
    arg.ptr(devicePtr(check, 'tokens', tokens)), arg.ptr(devicePtr(check, 'sourceBeams', sourceBeams)), arg.ptr(devicePtr(check, 'scores', scores)),
    arg.ptr(devicePtr(check, 'nextTokens', nextTokens)), arg.ptr(devicePtr(check, 'beamScores', beamScores)),
    arg.ptr(devicePtr(check, 'cacheRows', cacheRows)), arg.ptr(devicePtr(check, 'positions', positions)), arg.i32(rows), arg.i32(L),
  ]);
}

// ---- catalog ---------------------------------------------------------------------------------------------

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    // Marian's 58101 tokens padded to 58112 (4 beams, pad banned, renormalised); GPT-2's 50257 unpadded
    // (odd: scalar loads); greedy (1 beam, 1 candidate) over 32000.
    sources.push(beamTopKSource(planBeamTopK(dtype, 58112, 58101, 4, 8, 0x1000n, [58100], true, true)));
    sources.push(beamTopKSource(planBeamTopK(dtype, 50257, 50257, 5, 10, 0x1000n, [], false, true)));
    sources.push(beamTopKSource(planBeamTopK(dtype, 32000, 32000, 1, 1, 0x1000n, [], false, false)));
  }
  sources.push(beamTopKSource(planBeamTopK('bf16', 128, 100, 32, 64, 0x1000n, [0, 3], false, true)));
  sources.push(beamAdvanceSource({ beams: 4, candidates: 8, eos: [0] }));
  sources.push(beamAdvanceSource({ beams: 1, candidates: 1, eos: [] }));
  sources.push(beamAdvanceSource({ beams: 3, candidates: 12, eos: [2, 7, 9] }));
  return sources;
}
