// sampleTokens over a thread-block cluster (Hopper): each row's CLUSTER blocks split the row, and a row
// with top-k or top-p runs its radix selects across all of them, the histograms summed through
// distributed shared memory — the same draws as sample-tokens.ts, whose kernel walks such a row in one
// block: at Llama 3's vocabulary that was ~180 µs a top-p draw, every pass over 128k logits on one SM
// (session 51, bench/sample-speed.ts), a fifth of a 1B model's decode step.
//
// Grid (CLUSTER, B), __cluster_dims__(CLUSTER, 1, 1): block c of row b takes the row's vectors
// [c · SLICE, (c + 1) · SLICE). Every row, whatever its mode, works the same way:
//   - a greedy row whose LM head packed its pick (spec.argmax): block 0 alone (the others return at
//     once, before any cluster barrier), as in sample-tokens.ts;
//   - otherwise each block reduces its slice, and after a cluster barrier block 0 reads every block's
//     (value, index) from its shared memory and writes the row's state; a second barrier keeps the
//     others' shared memory alive until it has.
//   - top-k / top-p (sampled rows): each radix pass counts (or weighs) the block's slice into its own
//     256 bins; after a cluster barrier every block sums the CLUSTER blocks' bins (the same integers in
//     any order, so every block picks the same digit and they stay in step); top-p's max z is exchanged
//     the same way first. A block's bins alternate between two buffers: the next pass writes the other
//     one while the cluster may still read this one, and the pass after that follows a barrier every
//     block reached after its reads.
// Every decision that leads to a barrier (finished, the row's mode, the digits) is the same in every block
// of the cluster, so no block skips a barrier another waits at.
//
// Used where the host launches clusters (KernelHost.clusters: sm_90, not the kernel emulator, which runs
// blocks one after another) and the vocabulary fills them (sampleTokensCluster); the draws are identical to
// sample-tokens.ts's: the same z, thresholds (the fixed-point masses sum to the same integers), Philox draws
// and argmax tie-breaks.

import type { KernelSource } from '../runtime/kernel.js';
import { CLUSTER_LIB } from './device-lib.js';
import type { SampleTokensSpec } from './sample-tokens.js';
import { keptThresholdCode, PENALTY_MASK, ROW_ADVANCE, ROW_STATE, samplingDeviceCode } from './sample-tokens.js';
import { kernelIdentifier } from './row-kernels.js';
import { envFlag } from '../env-switch.js';

/**
 * Blocks per row and threads per block of the cluster kernel for `rows` rows on `multiProcessorCount` SMs, or
 * null where the one-block kernel takes the rows: 8 blocks (the largest portable cluster) from 4096 vectors a row
 * (GPT-2's 50k in 16-bit is 6.3k), none below. With sampleTokensClusterFour (the default), 4 blocks too — below 4096 vectors,
 * and where 8 a row would pass one block an SM while each thread would hold fewer than 3 vectors: there the
 * cluster barriers cost more than the split saves (session 52, H100, µs: GPT-2's vocabulary at 32 rows, top-k 50 +
 * top-p 0.9 87 at 8 × 512 against 63 at 4 × 512, top-k 43 against 33; Llama 3's 128k, 3.9 vectors a thread,
 * keeps 8: top-p 117 against 127).
 */
export function sampleTokensCluster(classes: number, vec: number, rows = 1, multiProcessorCount = 132): { cluster: number; threads: number } | null {
  const vectors = Math.ceil(classes / vec), threads = 512;
  if (classes < 16384) return null;
  if (sampleTokensClusterShape.shape) return sampleTokensClusterShape.shape;
  if (!sampleTokensClusterFour.enabled) return vectors >= 4096 ? { cluster: 8, threads } : null;
  const wide = vectors >= 4096 && (rows * 8 <= multiProcessorCount || vectors >= 3 * 8 * threads);
  return { cluster: wide ? 8 : 4, threads };
}

/**
 * Clusters of 4 blocks where sampleTokensCluster says they pay (the same kernel with SPLITS = 4); the default since
 * session 55 (H100, `bench/results/gpu-pending-s55/call1/`): the sampling op cases 66/66 with them; at 32 rows of
 * GPT-2's vocabulary, µs against the one-block kernel, top-k 50 42.7 → 33.1, top-p 0.95 72.6 → 64.8, both 86.7 →
 * 63.1, greedy 9.3 → 7.0 (temperature alone 18.7 → 19.9); sampled GPT-2 decode at batch 32 0.467 → 0.438 ms/token,
 * batch 1 and Llama 3's 128k unchanged. FUSEFORMER_SAMPLE_CLUSTER_FOUR=0 turns it off (read once).
 */
export const sampleTokensClusterFour: { enabled: boolean } = { enabled: envFlag('FUSEFORMER_SAMPLE_CLUSTER_FOUR', process.env['FUSEFORMER_SAMPLE_CLUSTER_FOUR'], true) };

/**
 * FUSEFORMER_SAMPLE_CLUSTER_SHAPE=C,THREADS (a probe, read once): every cluster-sampled row in C blocks (2, 4 or 8)
 * of THREADS threads (256, 512 or 1024) — at batch 32, 8 × 512 may not fit one wave of clusters.
 */
export const sampleTokensClusterShape: { shape: { cluster: number; threads: number } | undefined } = { shape: clusterShapeFromEnv() };

export function clusterShapeFromEnv(env: NodeJS.ProcessEnv = process.env): { cluster: number; threads: number } | undefined {
  const value = env['FUSEFORMER_SAMPLE_CLUSTER_SHAPE'];
  if (value === undefined || value === '') return undefined;
  const [cluster, threads, ...rest] = value.split(',').map(Number);
  if (rest.length > 0 || ![2, 4, 8].includes(cluster!) || ![256, 512, 1024].includes(threads!)) {
    throw new Error(`FUSEFORMER_SAMPLE_CLUSTER_SHAPE must be C,THREADS with C 2, 4 or 8 and THREADS 256, 512 or 1024, got '${value}'`);
  }
  return { cluster: cluster!, threads: threads! };
}

export function sampleTokensClusterKey(s: SampleTokensSpec): string {
  return `sample_tokens_cluster.${s.dtype}.v${s.classes}.vec${s.vec}.t${s.threads}.c${s.splits}${s.argmax ? '.argmax' : ''}`;
}

/** spec.splits is the cluster size (2..8). */
export function sampleTokensClusterSource(spec: SampleTokensSpec): KernelSource {
  if (!(spec.splits >= 2 && spec.splits <= 8)) throw new Error(`internal: sampleTokens cluster of ${spec.splits} blocks (2..8)`);
  const name = kernelIdentifier(sampleTokensClusterKey(spec));
  const source = String.raw`${samplingDeviceCode(spec)}${CLUSTER_LIB}
// logits [B, pitch]; params f32 [B, 4]; seeds i32 [B, 2]; history i32 [B, max_len]; the rest i32 [B].
// Grid (SPLITS, B) in clusters of SPLITS blocks, block THREADS.
extern "C" __global__ void __cluster_dims__(SPLITS, 1, 1) __launch_bounds__(THREADS, 1024 / THREADS) ${name}(
    const T* __restrict__ logits, int pitch, const float* __restrict__ params, const int* __restrict__ seeds,
    int* __restrict__ positions, int* __restrict__ history, int max_len, int* __restrict__ tokens, int* __restrict__ finished,
    const int* __restrict__ limits, const int* __restrict__ stop_ids, int stop_count${spec.argmax ? `,
    unsigned long long* __restrict__ argmax` : ''}) {
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  __shared__ u32 seen[WORDS];
  __shared__ u32 bins[2][3][256];            // [buffer][counts, mass low words, mass high words], this block's
  __shared__ u32 cluster_counts[256];         // the cluster's sums
  __shared__ unsigned long long cluster_mass[256];
  __shared__ float exchange_v[2];             // this block's max z (top-p), by buffer
  __shared__ float best_value;                // this block's pick
  __shared__ u32 best_index;
  __shared__ float red_v[WARPS];
  __shared__ int red_j[WARPS];
  __shared__ u32 chosen_prefix, chosen_count;
  __shared__ unsigned long long chosen_mass, mass_target;
  const int b = blockIdx.y, rank = blockIdx.x, tid = threadIdx.x;
${ROW_ADVANCE}${spec.argmax ? `
  __shared__ unsigned long long picked;
  if (rank == 0 && tid == 0) {
    picked = argmax[b];
    argmax[b] = 0ull;
  }` : ''}
${ROW_STATE}  float best_v = __int_as_float(0xff800000);
  int best_j = 0x7fffffff;
  const auto keep_best = [&](float z, int j) { if (beats(z, j, best_v, best_j)) { best_v = z; best_j = j; } };
${spec.argmax ? `  // A greedy row without a penalty: its token is the packed pick, block 0's alone (a walk of the whole row if empty).
  if (!r.sampling && !r.penalize) {
    if (rank != 0) return;
    __syncthreads();  // picked
    if (picked != 0ull) {
      if (tid == 0) advance(p, (int)(0xffffffffu - (u32)picked));
      return;
    }
    for_each_z(r, 0, VECS, keep_best);
    block_best(best_v, best_j, red_v, red_j);
    if (tid == 0) advance(p, best_j);
    return;
  }
` : ''}  const int first = rank * SLICE, end = min(VECS, first + SLICE);
${PENALTY_MASK}
  if (!r.sampling) {
    for_each_z(r, first, end, keep_best);
  } else {
    // The kept set's threshold key: radix selects over the cluster's histograms (see the header).
${keptThresholdCode(true)}    // The draw: Gumbel-max over the kept tokens of the slice (sample-tokens.ts).
    const uint2 key = make_uint2((u32)seeds[2 * b], (u32)seeds[2 * b + 1]);
    for (int vi = first + tid; vi < end; vi += THREADS) {
      float raw[VEC];
      load_floats<T, VEC>(r.row + vi * VEC, raw, VEC);
      draw_vector(r, raw, vi, p, key, threshold, best_v, best_j);
    }
  }
  block_best(best_v, best_j, red_v, red_j);
  if (tid == 0) { best_value = best_v; best_index = (u32)best_j; }
  cluster_sync();
  if (rank == 0 && tid == 0) {
    for (int c = 1; c < SPLITS; c++) {
      const float v = cluster_load(&best_value, c);
      const int j = (int)cluster_load_u32(&best_index, c);
      if (beats(v, j, best_v, best_j)) { best_v = v; best_j = j; }
    }
    advance(p, best_j);
  }
  cluster_sync();  // the other blocks' shared memory stays until block 0 has read it
}
`;
  return { name, source, gridDependencyWait: true };
}
