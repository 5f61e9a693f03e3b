// normMlp: a decode step's whole non-gated MLP (GPT-2's fc, GELU and proj) as one kernel, after the residual
// norm before it: h = norm(x += y + bias) (gemv.ts's norm prologue), a = act(h·upᵀ + upBias) rounded to T,
// out += a·downᵀ in f32 — one kernel boundary a layer fewer than the norm GEMV + GEMV pair (backend.ts has the
// contract). At batch 1 a GPT-2 layer is a chain of five short kernels, each ~2–4 µs of which well under half is
// moving its weights, so a boundary (its wait, the ramp of its loads, the tail of its writes) is worth removing.
//
// Thread mapping: block b owns the F-slice f0 = b·FB .. f0 + FB − 1 of the hidden features; 8 warps.
//   up:   warp w computes features f0 + w, f0 + w + 8, … (FA = FB/8 of them), each a dot product over K by
//         its 32 lanes (NVA = K/(32·VEC) 16-byte vectors a lane: a warp reads whole 512-byte row segments);
//         the warp's sum goes through the activation and is kept (as T, the value the unfused path stores)
//         in shared memory.
//   down: the block's FB columns of down [K, F]: pair p = n·CV + c (row n, 16-byte vector c of the slice,
//         CV = FB/VEC) is thread p mod THREADS's (NB pairs a thread): a warp reads 32/CV rows' slices of
//         CV·16 bytes (whole 32-byte sectors from CV = 2: GPT-2's 16 features). The CV lanes of a row add their partials by shuffles and the
//         first adds the row's sum into out[m, n] with one f32 atomic (a fire-and-forget RED).
// Every weight load of the block (NVA·FA + NB vectors a thread) is issued before the grid-dependency wait by
// the coherent path (ptxas keeps those above the wait; weight-stream.ts), so the whole slice streams while
// the kernel before (the O GEMV, or attention with the projection) finishes. After the wait: `zero` cleared
// (an earlier accumulator whose reader has finished: the forward cycles them), the norm prologue, the two
// products from registers.
// The atomics make the f32 sums' order vary from run to run (out differs in its last bits, so a greedy
// decode may differ where two logits nearly tie); the norm reading out rounds x + out + bias to T.
// Bytes: the weights 2·F·K·s once, x and y (M·K) by every block (cached), out M·K f32 atomics a block.

import type { Activation } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import type { CudaTensor } from '../runtime/tensor.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { ACTIVATION_CODE } from './gated-activation.js';
import { constants, kernelIdentifier } from './row-kernels.js';
import { weightLoadCode } from './weight-stream.js';
import { envFlag } from '../env-switch.js';
import type { CheckedNorm, GemvNorm } from './gemv.js';
import { GEMV_MAX_ROWS, NORM_PROLOGUE_MAX_BYTES, NORM_PROLOGUE_STATE, normPrologueArgs, normPrologueCallCode, normPrologueCode, normPrologueFinishCode, normSwitchesKey, prologueNorm, WARPS } from './gemv.js';

export interface MlpGemvSpec {
  readonly dtype: FloatDType;
  /** Rows (M), 1..GEMV_MAX_ROWS. */
  readonly rows: number;
  /** Model width K (the norm's H, up's input, down's output). */
  readonly k: number;
  /** Hidden features F (up's output, down's input). */
  readonly hidden: number;
  /** Hidden features a block owns (FB): 8, 16, 32 or 64, dividing F. */
  readonly features: number;
  readonly activation: Activation;
  readonly upBias: boolean;
  readonly norm: GemvNorm;
  /** Four rows' sums a lane added by one red.global.add.v4.f32 (sm_90) instead of four scalar atomics (mlpOptions.vectorRed). */
  readonly vectorRed?: boolean;
  /** The next kernel let launch right after the wait instead of after the proj's sums (mlpOptions.earlyTrigger). */
  readonly earlyTrigger?: boolean;
}

/**
 * FUSEFORMER_MLP_RED_V4=1: the proj's sums added four rows at a time by vector atomics (a fourth of the
 * atomics: 147k scalar ones a GPT-2 layer at batch 1 otherwise). Read once; tests set it directly.
 */
export const mlpOptions = {
  vectorRed: envFlag('FUSEFORMER_MLP_RED_V4', process.env['FUSEFORMER_MLP_RED_V4'], false),
  /**
   * The next kernel (the next layer's QKV GEMV) may launch right after this one's wait, so its blocks issue their
   * weight loads during this kernel's chain — every weight of this kernel is already in flight by then, which the
   * GEMVs that lost with an early trigger (session 32) could not say. Default on (FUSEFORMER_MLP_EARLY_TRIGGER=0
   * off; measured 2026-12-05 on an H100, GPT-2 ms/token with the fused MLP: b1 0.217 → 0.209, b4 0.296 → 0.291).
   */
  earlyTrigger: envFlag('FUSEFORMER_MLP_EARLY_TRIGGER', process.env['FUSEFORMER_MLP_EARLY_TRIGGER'], true),
};

/**
 * Rows from which the decode forward takes the fused MLP by default (CudaBackend.fusedMlpMinRows). Measured
 * 2026-12-05 on an H100, GPT-2 bf16 ms/token usual → fused: b1 0.208 → 0.217 (0.209 with the early trigger),
 * b2 0.245 → 0.235, b3 0.286 → 0.263, b4 0.327 → 0.296 — one row keeps the usual two kernels.
 */
export const FUSED_MLP_MIN_ROWS_DEFAULT = 2;

/** FUSEFORMER_FUSED_MLP: unset from FUSED_MLP_MIN_ROWS_DEFAULT rows, '1' from one row, '0' off; anything else an error. */
export function fusedMlpFromEnv(value: string | undefined): { on: boolean; minRows: number } {
  return { on: envFlag('FUSEFORMER_FUSED_MLP', value, true), minRows: value === '1' ? 1 : FUSED_MLP_MIN_ROWS_DEFAULT };
}

/** The features a block may own: FB/VEC 16-byte vectors of a down row, a power of two dividing 32. */
export const MLP_FEATURE_CHOICES = [8, 16, 32, 64] as const;
/** 16-byte weight vectors a thread may hold (both products' loads are all in flight before the wait). */
export const MLP_MAX_VECTORS = 24;

export function mlpGemvKey(s: MlpGemvSpec): string {
  return `gemv_mlp.${s.dtype}.m${s.rows}.k${s.k}.f${s.hidden}.fb${s.features}.${s.activation}${s.upBias ? '.bias' : ''}${s.vectorRed ? '.red4' : ''}${s.earlyTrigger ? '.early' : ''}.${normSwitchesKey(s.norm)}`;
}

function vectorWidth(dtype: FloatDType): number {
  return 16 / byteSize(dtype);
}

/** A thread's 16-byte weight vectors of each product: up NVA·FA, down NB. */
export function mlpGemvShape(s: Pick<MlpGemvSpec, 'dtype' | 'k' | 'features'>): { upVectors: number; downVectors: number; upPerWarp: number; lanesPerRow: number } {
  const vec = vectorWidth(s.dtype), threads = WARPS * 32;
  const upPerWarp = Math.ceil(s.features / WARPS), lanesPerRow = s.features / vec;
  return { upVectors: upPerWarp * Math.ceil(s.k / (32 * vec)), downVectors: Math.ceil((s.k * lanesPerRow) / threads), upPerWarp, lanesPerRow };
}

/**
 * FUSEFORMER_MLP_FEATURES=FB forces the features a block owns (a sweep knob); unset, planMlpGemv chooses.
 * Anything but one of MLP_FEATURE_CHOICES is an error naming the variable.
 */
export function mlpFeaturesFromEnv(env: NodeJS.ProcessEnv = process.env): number | undefined {
  const value = env['FUSEFORMER_MLP_FEATURES'];
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!(MLP_FEATURE_CHOICES as readonly number[]).includes(n)) throw new Error(`FUSEFORMER_MLP_FEATURES must be one of ${MLP_FEATURE_CHOICES.join(', ')}, got '${value}'`);
  return n;
}

/**
 * The features a block owns for this shape, or undefined where none fits: FB must divide F, the down slice
 * be whole vectors (FB a multiple of VEC with FB/VEC dividing 32), and a thread's vectors stay within
 * MLP_MAX_VECTORS. Among those, the smallest FB whose grid (F/FB blocks) is at most two blocks an SM — the
 * most weight rows in flight an SM without a second wave.
 */
export function mlpFeatures(dtype: FloatDType, k: number, hidden: number, multiProcessorCount: number, forced = mlpFeaturesFromEnv()): number | undefined {
  const vec = vectorWidth(dtype);
  const fits = (fb: number) => hidden % fb === 0 && fb % vec === 0 && 32 % (fb / vec) === 0 && k % vec === 0
    && (() => { const s = mlpGemvShape({ dtype, k, features: fb }); return s.upVectors + s.downVectors <= MLP_MAX_VECTORS; })();
  if (forced !== undefined) return fits(forced) ? forced : undefined;
  const candidates = MLP_FEATURE_CHOICES.filter(fits);
  return candidates.find((fb) => hidden / fb <= 2 * multiProcessorCount) ?? candidates.at(-1);
}

/** Whether the vector atomics take this shape: four consecutive rows in a warp (FB/VEC ≤ 8) and K a multiple of 4. */
export function vectorRedFits(dtype: FloatDType, features: number, k: number): boolean {
  return features / vectorWidth(dtype) <= 8 && k % 4 === 0;
}

export function mlpGemvSource(spec: MlpGemvSpec): KernelSource {
  const vec = vectorWidth(spec.dtype), name = kernelIdentifier(mlpGemvKey(spec));
  const { upPerWarp, lanesPerRow } = mlpGemvShape(spec);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ M: spec.rows, K: spec.k, F: spec.hidden, FB: spec.features, VEC: vec, THREADS: WARPS * 32, NWARPS: WARPS,
    FA: upPerWarp, NVA: Math.ceil(spec.k / (32 * vec)), CV: lanesPerRow, NB: Math.ceil((spec.k * lanesPerRow) / (WARPS * 32)), UP_BIAS: spec.upBias, RED_V4: spec.vectorRed === true, EARLY_TRIGGER: spec.earlyTrigger === true })}
${normPrologueCode(spec.norm)}

__device__ __forceinline__ float activate(float g) { return ${ACTIVATION_CODE[spec.activation]}; }
// Streamed weights: coherent loads (kept above the grid-dependency wait), past L1.
${weightLoadCode('load_weight', 'T', 'norm-gemv', { coherent: true })}

// up [F, K], up_bias [F] or null, down [K, F], out [M, K] f32 (added to), zero (zero_count f32, set to 0).
// Norm prologue: x [M, K] the residual stream (updated in place), y [M, K], rbias [K], gamma, beta [K],
// h [M, K] the normed rows, counter a zeroed u32 (left zero). Grid F / FB, block THREADS.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(
    const T* __restrict__ up, const T* __restrict__ up_bias, const T* __restrict__ down, float* __restrict__ out,
    float* __restrict__ zero, int zero_count,
    T* x, const Y* __restrict__ y, const T* __restrict__ rbias, const T* __restrict__ gamma, const T* __restrict__ beta,
    T* __restrict__ h, float eps, unsigned int* __restrict__ counter) {
  __shared__ __align__(16) T act_s[M * K];
  __shared__ float hidden_s[M][FB];
  ${NORM_PROLOGUE_STATE}
  NormWeights pre;
  load_norm_weights(pre, gamma, beta);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, f0 = blockIdx.x * FB;

  // Every weight vector of the block, issued before the wait (the weights are never written by a kernel of the step).
  uint4 wu[FA][NVA], wd[NB];
  #pragma unroll
  for (int i = 0; i < FA; i++) {
    const int f = warp + i * NWARPS;
    #pragma unroll
    for (int j = 0; j < NVA; j++) {
      const int k = (j * 32 + lane) * VEC;
      wu[i][j] = f < FB && k < K ? load_weight(up + (size_t)(f0 + f) * K + k) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  #pragma unroll
  for (int j = 0; j < NB; j++) {
    const int p = j * THREADS + threadIdx.x, n = p / CV, c = p % CV;
    wd[j] = n < K ? load_weight(down + (size_t)n * F + f0 + c * VEC) : make_uint4(0u, 0u, 0u, 0u);
  }
  float ub[FA];
  #pragma unroll
  for (int i = 0; i < FA; i++) {
    const int f = warp + i * NWARPS;
    ub[i] = UP_BIAS && f < FB ? to_float(up_bias[f0 + f]) : 0.f;
  }

  GRID_DEPENDENCY_WAIT();
  if constexpr (EARLY_TRIGGER) GRID_DEPENDENCY_TRIGGER();
  // The next layer's accumulator: its last reader ended before this kernel's wait returned.
  for (int i = blockIdx.x * THREADS + threadIdx.x; i < zero_count; i += gridDim.x * THREADS) zero[i] = 0.f;
  ${normPrologueCallCode('x')}

  // up: the warp's features, act(h·up[f] + up_bias[f]) rounded to T.
  #pragma unroll
  for (int i = 0; i < FA; i++) {
    const int f = warp + i * NWARPS;
    float sum[M];
    #pragma unroll
    for (int m = 0; m < M; m++) sum[m] = 0.f;
    #pragma unroll
    for (int j = 0; j < NVA; j++) {
      const int k = (j * 32 + lane) * VEC;
      if (k < K) {
        const T* e = reinterpret_cast<const T*>(&wu[i][j]);
        #pragma unroll
        for (int m = 0; m < M; m++) {
          float av[VEC];
          load_floats<T, VEC>(act_s + m * K + k, av, VEC);
          #pragma unroll
          for (int v = 0; v < VEC; v++) sum[m] = fmaf(to_float(e[v]), av[v], sum[m]);
        }
      }
    }
    #pragma unroll
    for (int m = 0; m < M; m++) {
      const float s = warp_sum(sum[m]);
      if (lane == 0 && f < FB) hidden_s[m][f] = to_float(from_float<T>(activate(s + ub[i])));
    }
  }
  __syncthreads();

  // down: each pair's partial row sums, the row's CV lanes added by shuffles, one atomic a row and a row of out.
  #pragma unroll
  for (int j = 0; j < NB; j++) {
    const int p = j * THREADS + threadIdx.x, n = p / CV, c = p % CV;
    const T* e = reinterpret_cast<const T*>(&wd[j]);
    float sum[M];
    #pragma unroll
    for (int m = 0; m < M; m++) {
      sum[m] = 0.f;
      #pragma unroll
      for (int v = 0; v < VEC; v++) sum[m] = fmaf(to_float(e[v]), hidden_s[m][c * VEC + v], sum[m]);
      #pragma unroll
      for (int offset = CV / 2; offset > 0; offset /= 2) sum[m] += __shfl_xor_sync(0xffffffffu, sum[m], offset);
    }
    if constexpr (RED_V4) {
      // Rows n..n + 3 sit CV lanes apart (a warp holds 32/CV ≥ 4 consecutive rows; K is a multiple of 4): the
      // lane of row n (n a multiple of 4) gathers the other three and adds all four with one vector atomic.
      #pragma unroll
      for (int m = 0; m < M; m++) {
        const float s1 = __shfl_down_sync(0xffffffffu, sum[m], CV), s2 = __shfl_down_sync(0xffffffffu, sum[m], 2 * CV),
                    s3 = __shfl_down_sync(0xffffffffu, sum[m], 3 * CV);
        if (c == 0 && n % 4 == 0 && n < K) {
          asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(out + (size_t)m * K + n), "f"(sum[m]), "f"(s1), "f"(s2), "f"(s3) : "memory");
        }
      }
    } else if (c == 0 && n < K) {
      #pragma unroll
      for (int m = 0; m < M; m++) atomicAdd(out + (size_t)m * K + n, sum[m]);
    }
  }
  if constexpr (!EARLY_TRIGGER) GRID_DEPENDENCY_TRIGGER();
${normPrologueFinishCode('x')}
}
`;
  return { name, source, gridDependencyWait: true };
}

/** What the launcher needs of a checked normMlp (op-checks/norm-mlp.ts). */
export interface CheckedNormMlp {
  readonly norm: CheckedNorm;
  readonly up: Tensor;
  readonly upBias?: Tensor | undefined;
  readonly down: Tensor;
  readonly out: Tensor;
  readonly zero?: Tensor | undefined;
  readonly activation: Activation;
  readonly rows: number;
  readonly K: number;
  readonly F: number;
}

/**
 * Whether the kernel takes this normMlp: 16- or 32-bit floats, rows ≤ GEMV_MAX_ROWS, a block size that fits
 * (mlpFeatures), the normed rows within NORM_PROLOGUE_MAX_BYTES, every operand 16-byte aligned.
 */
export function mlpGemvApplies(c: CheckedNormMlp, multiProcessorCount: number): boolean {
  const n = c.norm;
  const aligned = [n.x, n.y, n.bias, n.gamma, n.beta, n.out, c.up, c.down, c.out].every((t) => t === undefined || (t as CudaTensor).ptr % 16n === 0n);
  return aligned && mlpGemvTakes(c.rows, n.x.dtype as FloatDType, c.K, c.F, multiProcessorCount);
}

/** mlpGemvApplies without the operands (what the decode forward asks before it has them: CudaBackend.fusesMlp). */
export function mlpGemvTakes(rows: number, dtype: FloatDType, k: number, hidden: number, multiProcessorCount: number): boolean {
  return rows >= 1 && rows <= GEMV_MAX_ROWS && rows * k * byteSize(dtype) <= NORM_PROLOGUE_MAX_BYTES && mlpFeatures(dtype, k, hidden, multiProcessorCount) !== undefined;
}

/** Launches the kernel for a normMlp mlpGemvApplies() accepted. */
export function launchMlpGemv(host: KernelHost, c: CheckedNormMlp): void {
  const n = c.norm, dtype = n.x.dtype as FloatDType;
  const features = mlpFeatures(dtype, c.K, c.F, host.multiProcessorCount)!;
  const spec: MlpGemvSpec = { dtype, rows: c.rows, k: c.K, hidden: c.F, features, activation: c.activation, upBias: c.upBias !== undefined, norm: prologueNorm('bf16', n, n.H),
    ...(mlpOptions.vectorRed && vectorRedFits(dtype, features, c.K) ? { vectorRed: true } : {}), ...(mlpOptions.earlyTrigger ? { earlyTrigger: true } : {}) };
  const pointer = (t: Tensor | undefined) => (t ? (t as CudaTensor).ptr : 0n);
  host.kernel(mlpGemvKey(spec), () => mlpGemvSource(spec)).launch({ grid: c.F / features, block: WARPS * 32 }, [
    ...[c.up, c.upBias, c.down, c.out, c.zero].map((t) => arg.ptr(pointer(t))), arg.i32(c.zero ? c.zero.numel : 0),
    ...normPrologueArgs(host, { norm: spec.norm, x: pointer(n.x), y: pointer(n.y), bias: pointer(n.bias), gamma: pointer(n.gamma), beta: pointer(n.beta), h: pointer(n.out), eps: n.eps }),
  ]);
}

/** Representative plans for the nvcc compile check (132 SMs): GPT-2's MLP at 1 and 4 rows, f16 at 3, f32 with a partial vector row. */
export function catalog(): KernelSource[] {
  const layer: GemvNorm = { kind: 'layer', residual: true, bias: true, onePass: true };
  const shapes: [FloatDType, number, number, number, Activation][] = [
    ['bf16', 1, 768, 3072, 'gelu_tanh'],
    ['bf16', 4, 768, 3072, 'gelu_tanh'],
    ['f16', 3, 1024, 4096, 'relu'],
    ['f32', 2, 132, 256, 'gelu_tanh'],
  ];
  const source = ([dtype, rows, k, hidden, activation]: (typeof shapes)[number], vectorRed: boolean) => mlpGemvSource({
    dtype, rows, k, hidden, features: mlpFeatures(dtype, k, hidden, 132, undefined)!, activation, upBias: true, norm: layer, ...(vectorRed ? { vectorRed } : {}),
  });
  // The vector atomics (FUSEFORMER_MLP_RED_V4): GPT-2's at 1 and 4 rows.
  const gpt2 = mlpGemvSource({ dtype: 'bf16', rows: 1, k: 768, hidden: 3072, features: 16, activation: 'gelu_tanh', upBias: true, norm: layer, earlyTrigger: true });
  return [...shapes.map((s) => source(s, false)), source(shapes[0]!, true), source(shapes[1]!, true), gpt2];
}
