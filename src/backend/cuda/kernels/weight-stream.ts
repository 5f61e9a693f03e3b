// Streamed weights and the L2 cache. A decode step reads every weight once (2.5 GB a step for Llama
// 1.2B in bf16, against an L2 of ~50 MB), so under the default policy the weights flush everything else
// out of L2 on their way through: the residual stream, the norms' inputs, the KV cache, the logits —
// the small tensors that latency-bound kernels (norms, decode attention, sampling) read right after.
// Loading the weights with an L2 evict-first policy (createpolicy + .L2::cache_hint) lets those stay
// resident. The weights lose nothing where they are many times the L2 (no step reads them twice); a
// small model's (GPT-2 124M: 250 MB) might partly survive from one step to the next without the hint.
//
// The weight loads of the decode GEMVs (gemv.ts and gemv-mma.ts's load_weight, gemv-int8.ts, the INT4
// GEMVs' load_stream_u4) and the streamed GEMM's weight boxes (gemm-stream.ts) come from here.
// FUSEFORMER_WEIGHT_EVICT_FIRST=1 / 0 turns the hint on / off (off by default: see
// WEIGHT_EVICT_FIRST_DEFAULT for what the H200 measured); it is read once, when the module loads
// (kernels are cached by their spec's key for the process's life).

import { envFlag } from '../env-switch.js';

/**
 * Whether weight loads carry the evict-first hint when the environment does not say: off. Measured on the
 * H200 (session 27, bench:decode, one process a setting, 2–4 rounds, ms/token off → on): Llama 1.2B b1
 * 0.811–0.813 → 0.807–0.809, b32 1.020–1.023 → 1.010–1.011, INT4 + head b1 0.468 → 0.465–0.466, INT8 +
 * head b1 0.514–0.519 → 0.515–0.519, GPT-2 INT8 + head b1 0.199 → 0.189 — but GPT-2 bf16 b1 0.218–0.219
 * → 0.236–0.238 in all four rounds (its kernel timeline, a stamped build, says the reverse: 217.9 → 206.2
 * µs a step), and the op cases were not run with it. Opt-in until both are understood.
 */
export const WEIGHT_EVICT_FIRST_DEFAULT = false;

/** FUSEFORMER_WEIGHT_EVICT_FIRST: 1 on, 0 off, unset the default (a bad value is an error naming the variable). */
export function weightEvictFirstFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return envFlag('FUSEFORMER_WEIGHT_EVICT_FIRST', env['FUSEFORMER_WEIGHT_EVICT_FIRST'], WEIGHT_EVICT_FIRST_DEFAULT);
}

/**
 * FUSEFORMER_WEIGHT_HINT_NORMAL=1 (opt-in probe, session 30): where evict-first is off, the weight loads
 * still take the cache-hint form, with an evict-normal policy. ptxas schedules the plain form's grid-
 * dependency wait (griddepcontrol.wait, SASS ACQBULK) above every weight load of GPT-2's batch-1 GEMVs
 * though the source issues the first loads before it; the hinted form keeps 4–9 loads ahead of it
 * (Llama's GEMVs: none ahead in either form, in that build). Measured on the H200 (gpu-pending-s30/call3, two rounds,
 * ms/token off → on): GPT-2 b1 0.220 → 0.246, Llama b1 0.780 → 0.824, INT8 + head 0.515 → 0.552 — slower
 * everywhere, Llama's too where the schedule is unchanged, so an explicit evict-normal policy costs by
 * itself (the plain .nc load is not the same as evict-normal); off.
 */
export function weightHintNormalFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return envFlag('FUSEFORMER_WEIGHT_HINT_NORMAL', env['FUSEFORMER_WEIGHT_HINT_NORMAL'], false);
}

/**
 * FUSEFORMER_WEIGHT_LOAD_COHERENT=1 (opt-in, session 30, not yet run on a GPU): the weight loads without
 * .nc (ld.global.L1::no_allocate: the coherent path, the same L1 and L2 behaviour otherwise). ptxas moves
 * the grid-dependency wait across .nc loads freely but keeps coherent ones where the source puts them, so a
 * GEMV's first group of weight loads (4–16 a thread) is then issued before the wait, overlapping the
 * previous kernel, with the default L2 policy — the schedule the hinted forms had, without their policy
 * (nvdisasm: GPT-2's batch-1 output projection, wait at SASS line 19 with no load ahead → line 71 with 8
 * weight loads ahead, 380 → 379 instructions). Safe only in the default build, whose programmatic kernels
 * read their inputs coherently (runtime/kernel.ts compiledSource): with FUSEFORMER_PROGRAMMATIC_RESTRICT=1
 * ptxas was seen moving a GEMV's .nc x loads above the wait.
 */
export function weightLoadCoherentFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return envFlag('FUSEFORMER_WEIGHT_LOAD_COHERENT', env['FUSEFORMER_WEIGHT_LOAD_COHERENT'], false);
}

/** The process's settings, read once (tests set them directly; kernels already built keep theirs). */
export const weightStreamOptions: { evictFirst: boolean; hintNormal: boolean; coherent: boolean } = {
  evictFirst: weightEvictFirstFromEnv(), hintNormal: weightHintNormalFromEnv(), coherent: weightLoadCoherentFromEnv(),
};

/**
 * The device function `name(p)` returning the 16-byte vector at p as a uint4: past L1 (the activations
 * stay there), and with `hint` evict-first in L2 (by the read-only .nc path unless
 * weightStreamOptions.coherent). The policy is a pure value (non-volatile asm), so the
 * compiler keeps one per thread, not one per load.
 */
export function weightLoadCode(name: string, pointer: string, options: { volatile?: boolean; hint?: boolean } = {}): string {
  const evictFirst = options.hint ?? weightStreamOptions.evictFirst;
  const hint = evictFirst || (options.hint === undefined && weightStreamOptions.hintNormal);
  const asm = options.volatile === false ? 'asm' : 'asm volatile';
  const ld = weightStreamOptions.coherent ? 'ld.global.L1::no_allocate' : 'ld.global.nc.L1::no_allocate';
  if (!hint) {
    return String.raw`__device__ __forceinline__ uint4 ${name}(const ${pointer}* p) {
  uint4 r;
  ${asm}("${ld}.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}`;
  }
  return String.raw`${weightPolicyCode(evictFirst ? 'evict_first' : 'evict_normal')}
__device__ __forceinline__ uint4 ${name}(const ${pointer}* p) {
  uint4 r;
  ${asm}("${ld}.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
         : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(weight_l2_policy()));
  return r;
}`;
}

/** weight_l2_policy(): an L2 cache policy (evict-first by default) for every byte of an access (guarded: a source may include it twice). */
export function weightPolicyCode(priority: 'evict_first' | 'evict_normal' = 'evict_first'): string {
  return String.raw`#ifndef FUSEFORMER_WEIGHT_L2_POLICY
#define FUSEFORMER_WEIGHT_L2_POLICY
__device__ __forceinline__ unsigned long long weight_l2_policy() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::${priority}.b64 %0, 1.0;" : "=l"(p));
  return p;
}
#endif`;
}

/**
 * tma_load_2d_weight(dst, map, c0, c1, bar): TENSOR_MAP_LIB's tma_load_2d for weight boxes, with the
 * evict-first hint when `hint` (include after TENSOR_MAP_LIB).
 */
export function tmaWeightLoadCode(hint: boolean = weightStreamOptions.evictFirst): string {
  if (!hint) {
    return String.raw`__device__ __forceinline__ void tma_load_2d_weight(void* dst, const TensorMap* map, int c0, int c1, u64* bar) { tma_load_2d(dst, map, c0, c1, bar); }`;
  }
  return String.raw`${weightPolicyCode()}
__device__ __forceinline__ void tma_load_2d_weight(void* dst, const TensorMap* map, int c0, int c1, u64* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(smem_u32(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "l"(weight_l2_policy()) : "memory");
}`;
}
