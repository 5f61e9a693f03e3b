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
// Removed in session 58, probes measured slower (the last commit with them is 695f749): an explicit
// evict-normal policy (FUSEFORMER_WEIGHT_HINT_NORMAL, session 30: GPT-2 b1 0.220 → 0.246 ms/token, Llama 0.780 →
// 0.824), an L2 prefetch size on the loads (FUSEFORMER_WEIGHT_PREFETCH_SIZE, session 42: 128 B equal, 256 B slower,
// Llama b1 0.741 → 0.770) and a GEMV letting the next kernel launch right after its grid-dependency wait
// (FUSEFORMER_EARLY_TRIGGER, session 32: Llama b1 0.756 → 0.800, INT4 + head 0.466 → 0.548; a decode GEMV's grid
// fills the SMs, so an early next grid takes room from this one's tail).

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
 * The kernel families whose weight loads weightLoadCode forms, each with its own coherent-load choice:
 * gemv.ts's plain GEMVs, its norm-prologue GEMVs of norms at most NORM_PROLOGUE_AUTO_MAX_K wide
 * ('norm-gemv': GPT-2's) and wider ('wide-norm-gemv': Llama's), its gated GEMVs (1–4 rows all), the
 * tensor-core GEMV and skinny GEMM (5–64 rows: gemv-mma.ts, gemm-skinny.ts), the W8A8 GEMV (gemv-int8.ts)
 * and the INT4 GEMVs (quant-int4.ts, gemv-int4-mma.ts and the streamed GEMM's INT4 form).
 */
export const WEIGHT_LOAD_FAMILIES = ['gemv', 'norm-gemv', 'wide-norm-gemv', 'gated-gemv', 'mma', 'int8', 'int4'] as const;
export type WeightLoadFamily = (typeof WEIGHT_LOAD_FAMILIES)[number];

/**
 * The families whose weight loads take the coherent path (ld.global.L1::no_allocate, without .nc; the same
 * L1 and L2 behaviour otherwise) when the environment does not say. ptxas moves the grid-dependency wait
 * (griddepcontrol.wait) across .nc loads freely but keeps coherent ones where the source puts them, so a
 * GEMV's first group of weight loads (4–16 a thread) is then issued before the wait, overlapping the
 * previous kernel. Measured on the H200 (session 31, two rounds each, ms/token at b1; batch 32 within
 * ±0.003 throughout). Every family against none (gpu-pending-s31/call1): GPT-2 bf16 0.219 → 0.192, INT8 +
 * head 0.187 → 0.180, INT4 + head 0.188 → 0.184; Llama bf16 0.769 → 0.787, INT8 + head 0.520 → 0.503,
 * INT4 + head 0.472 → 0.525 — so the W8A8 GEMV, and not the INT4 ones. The bf16 families one at a time
 * (call 3, beside none: GPT-2 0.219, Llama 0.773): plain GEMVs 0.200 / 0.762 (both faster), norm GEMVs
 * 0.204 (K 768) / 0.778 (K 2048), gated GEMVs — / 0.805 (Llama's only), all three 0.192 / 0.792. So the
 * plain GEMVs and the narrow norm GEMVs; the wide norm and the gated GEMVs keep the .nc path.
 */
export const WEIGHT_LOAD_COHERENT_DEFAULT: readonly WeightLoadFamily[] = ['gemv', 'norm-gemv', 'int8'];

/**
 * FUSEFORMER_WEIGHT_LOAD_COHERENT: 1 every family, 0 none, or a comma list of WEIGHT_LOAD_FAMILIES
 * (unset: WEIGHT_LOAD_COHERENT_DEFAULT; anything else is an error naming the variable). Safe because the
 * programmatic kernels read their inputs coherently (runtime/kernel.ts compiledSource: ptxas was seen moving
 * a GEMV's .nc x loads above the wait). Weights are safe either way: no kernel of a step writes them.
 */
export function weightLoadCoherentFromEnv(env: NodeJS.ProcessEnv = process.env): ReadonlySet<WeightLoadFamily> {
  return weightFamiliesFromEnv('FUSEFORMER_WEIGHT_LOAD_COHERENT', env, WEIGHT_LOAD_COHERENT_DEFAULT);
}

/** A family-list variable: 1 every family, 0 none, a comma list, or unset for `fallback` (anything else is an error naming it). */
export function weightFamiliesFromEnv(name: string, env: NodeJS.ProcessEnv, fallback: readonly WeightLoadFamily[]): ReadonlySet<WeightLoadFamily> {
  const value = env[name];
  if (value === undefined || value.trim() === '') return new Set(fallback);
  if (value === '1') return new Set(WEIGHT_LOAD_FAMILIES);
  if (value === '0') return new Set();
  const families = value.split(',').map((f) => f.trim());
  for (const f of families) {
    if (!(WEIGHT_LOAD_FAMILIES as readonly string[]).includes(f)) {
      throw new Error(`${name} must be 0, 1 or a comma list of ${WEIGHT_LOAD_FAMILIES.join(', ')}; got '${value}' ('${f}' is none of them)`);
    }
  }
  return new Set(families as WeightLoadFamily[]);
}

/** The process's settings, read once (tests set them directly; kernels already built keep theirs). */
export const weightStreamOptions: { evictFirst: boolean; coherent: ReadonlySet<WeightLoadFamily> } = {
  evictFirst: weightEvictFirstFromEnv(), coherent: weightLoadCoherentFromEnv(),
};

/**
 * The device function `name(p)` returning the 16-byte vector at p as a uint4 for a kernel of `family`:
 * past L1 (the activations stay there), and with `hint` evict-first in L2 (by the read-only .nc path
 * unless weightStreamOptions.coherent holds the family, or `coherent` says otherwise). The policy is a pure value (non-volatile asm), so
 * the compiler keeps one per thread, not one per load.
 */
export function weightLoadCode(name: string, pointer: string, family: WeightLoadFamily, options: { volatile?: boolean; hint?: boolean; coherent?: boolean } = {}): string {
  const hint = options.hint ?? weightStreamOptions.evictFirst;
  const asm = options.volatile === false ? 'asm' : 'asm volatile';
  const ld = (options.coherent ?? weightStreamOptions.coherent.has(family)) ? 'ld.global.L1::no_allocate' : 'ld.global.nc.L1::no_allocate';
  if (!hint) {
    return String.raw`__device__ __forceinline__ uint4 ${name}(const ${pointer}* p) {
  uint4 r;
  ${asm}("${ld}.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}`;
  }
  return String.raw`${weightPolicyCode()}
__device__ __forceinline__ uint4 ${name}(const ${pointer}* p) {
  uint4 r;
  ${asm}("${ld}.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
         : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(weight_l2_policy()));
  return r;
}`;
}

/** weight_l2_policy(): an evict-first L2 cache policy for every byte of an access (guarded: a source may include it twice). */
export function weightPolicyCode(): string {
  return String.raw`#ifndef FUSEFORMER_WEIGHT_L2_POLICY
#define FUSEFORMER_WEIGHT_L2_POLICY
__device__ __forceinline__ unsigned long long weight_l2_policy() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
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
