// gemv: a GEMM of few rows, out[m, n] = ep(Σ_k a[m, k]·w[n, k] + bias[n]) for M ≤ 4 (decode steps:
// one row per sequence), with the weight stored [N, K] (transB; every inference matrix is [out, in]).
// An alternative to cuBLASLt for those shapes (CudaBackend option decodeGemv), for two reasons: a small
// matrix (GPT-2's 768 × 768, Llama's QKV and output projections: 1–12 MB) read by one short cuBLASLt
// kernel reaches a third to half of HBM bandwidth, the rest being the kernel's ramp; and this kernel
// can be launched programmatically (runtime/launch.ts): its blocks prefetch their weight rows into L2
// before GRID_DEPENDENCY_WAIT, overlapping the previous kernel's tail — the weights never depend on it.
//
// Thread mapping. Blocks of WARPS warps; warp j of block b owns output columns n0 = (b·WARPS + j)·R ..
// n0 + R − 1 for all M rows of a. Lanes stride along K in 16-byte vectors (VEC elements): at step s
// lane l reads w[n, s·32·VEC + l·VEC ..] for its R columns (a warp reads 512 contiguous bytes of each
// weight row: whole 32-byte sectors) and the same slice of each row of a (the M × K activations are
// read by every warp of the GPU: L1/L2 hits after the first). f32 accumulation in registers, R·M sums
// per lane, reduced by shuffles at the end; lane r·M + m writes out[m, n0 + r] with the epilogue.
// Bytes: the weights N·K·s once, a M·K·s (cached), out M·N·s; FLOPs 2·M·N·K (SIMT f32: see GEMV_MAX_ROWS).
// Precision: f32 products and sums of the stored values (as cuBLASLt with f32 compute).

import type { Activation, GemmEpilogue } from '../../backend.js';
import type { Tensor } from '../../../tensor.js';
import type { CudaTensor } from '../runtime/tensor.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import type { CheckedGemm } from '../gemm-plan.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { ACTIVATION_CODE } from './gated-activation.js';
import { constants, kernelIdentifier } from './row-kernels.js';

/**
 * Rows of a the kernel takes at most. Each 16-byte weight load feeds VEC·M FMAs and the M activation
 * vectors VEC·M conversions: at M = 8 that is ~270·10⁹ operations a second per SM to keep up with HBM
 * (31 GB/s an SM), above the ~250·10⁹ an H200 SM issues, so from 5 rows cuBLASLt's tensor cores win.
 */
export const GEMV_MAX_ROWS = 4;
/** The epilogues the kernel has. */
export const GEMV_EPILOGUES: readonly GemmEpilogue[] = ['none', 'bias', 'relu_bias', 'gelu_bias'];

export interface GemvSpec {
  readonly dtype: FloatDType;
  /** Rows of a (M), 1..GEMV_MAX_ROWS. */
  readonly rows: number;
  /** Input width, a multiple of VEC. */
  readonly k: number;
  readonly epilogue: GemmEpilogue;
  /**
   * gatedLinear: the weight is [2F, K] (gate rows, then up rows); a warp computes gate column n and up
   * column n together and writes out[m, n] = act(gate + bias[n])·(up + bias[F + n]) (bias optional).
   */
  readonly gate?: { readonly activation: Activation; readonly bias: boolean };
}

export function gemvKey(s: GemvSpec): string {
  return `gemv.${s.dtype}.m${s.rows}.k${s.k}.${s.gate ? `gated_${s.gate.activation}${s.gate.bias ? '_bias' : ''}` : s.epilogue}`;
}

const WARPS = 4;
/** Output columns a warp computes. */
const COLUMNS_PER_WARP = 2;

/** Elements of a 16-byte vector. */
function vectorWidth(dtype: FloatDType): number {
  return 16 / byteSize(dtype);
}

const EPILOGUE_CODE: Record<string, string> = {
  none: 'x',
  bias: 'x + to_float(bias[n])',
  relu_bias: 'fmaxf(x + to_float(bias[n]), 0.f)',
  gelu_bias: 'gelu_tanh(x + to_float(bias[n]))',
};

export function gemvSource(spec: GemvSpec): KernelSource {
  const name = kernelIdentifier(gemvKey(spec));
  const vec = vectorWidth(spec.dtype), gate = spec.gate;
  // Plain: warp j's columns n0..n0 + R − 1 of out [M, N]. Gated: its one column n of out [M, F], from
  // weight rows n (gate) and F + n (up); N is then F.
  const columns = gate
    ? String.raw`const int n0 = blockIdx.x * WARPS + warp;
  const T* rows[R] = {w + (size_t)min(n0, N - 1) * K, w + (size_t)(N + min(n0, N - 1)) * K};`
    : String.raw`const int n0 = (blockIdx.x * WARPS + warp) * R;
  const T* rows[R];
  #pragma unroll
  for (int r = 0; r < R; r++) rows[r] = w + (size_t)min(n0 + r, N - 1) * K;`;
  const write = gate
    ? String.raw`// Lane m holds row m's gate and up sums.
  float gate_sum = 0.f, up_sum = 0.f;
  #pragma unroll
  for (int m = 0; m < M; m++) {
    const float g = warp_sum(acc[0][m]), u = warp_sum(acc[1][m]);
    if (lane == m) { gate_sum = g; up_sum = u; }
  }
  if (lane < M && n0 < N) {
    const float g = gate_sum${gate.bias ? ' + to_float(bias[n0])' : ''}, u = up_sum${gate.bias ? ' + to_float(bias[N + n0])' : ''};
    out[(size_t)lane * N + n0] = from_float<T>(activate(g) * u);
  }`
    : String.raw`float mine = 0.f;
  #pragma unroll
  for (int r = 0; r < R; r++) {
    #pragma unroll
    for (int m = 0; m < M; m++) {
      const float total = warp_sum(acc[r][m]);
      if (lane == r * M + m) mine = total;
    }
  }
  if (lane < R * M) {
    const int r = lane / M, m = lane - r * M, n = n0 + r;
    if (n < N) out[(size_t)m * N + n] = from_float<T>(epilogue(mine, bias, n));
  }`;
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ M: spec.rows, K: spec.k, VEC: vec, R: COLUMNS_PER_WARP, WARPS, CHUNK: 32 * vec, STEPS: Math.floor(spec.k / (32 * vec)), LINE: 128 / byteSize(spec.dtype) })}

${gate ? `__device__ __forceinline__ float activate(float g) { return ${ACTIVATION_CODE[gate.activation]}; }`
    : `__device__ __forceinline__ float epilogue(float x, const T* __restrict__ bias, int n) { return ${EPILOGUE_CODE[spec.epilogue]}; }`}

// a [M, K], w [N, K] (gated: [2N, K]), bias [N] (gated: [2N]) or null, out [M, N].
// Grid ceil(N / (WARPS·R)) (gated: ceil(N / WARPS)), block WARPS·32.
extern "C" __global__ void __launch_bounds__(WARPS * 32) ${name}(
    const T* __restrict__ a, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out, int N) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  ${columns}
  // The weights do not depend on earlier kernels: ask for this warp's rows in L2 before waiting.
  #pragma unroll
  for (int r = 0; r < R; r++) {
    for (int e = lane * LINE; e < K; e += 32 * LINE) asm volatile("prefetch.global.L2 [%0];" :: "l"(rows[r] + e));
  }
  GRID_DEPENDENCY_WAIT();
  float acc[R][M];
  #pragma unroll
  for (int r = 0; r < R; r++) {
    #pragma unroll
    for (int m = 0; m < M; m++) acc[r][m] = 0.f;
  }
  #pragma unroll 2
  for (int s = 0; s <= STEPS; s++) {
    const int k = s * CHUNK + lane * VEC;
    if (s == STEPS && k >= K) break; // the last, partial step (K % CHUNK) covers the first lanes only
    float wv[R][VEC];
    #pragma unroll
    for (int r = 0; r < R; r++) load_floats<T, VEC>(rows[r] + k, wv[r], VEC);
    #pragma unroll
    for (int m = 0; m < M; m++) {
      float av[VEC];
      load_floats<T, VEC>(a + (size_t)m * K + k, av, VEC);
      #pragma unroll
      for (int r = 0; r < R; r++) {
        #pragma unroll
        for (int i = 0; i < VEC; i++) acc[r][m] = fmaf(wv[r][i], av[i], acc[r][m]);
      }
    }
  }
  GRID_DEPENDENCY_TRIGGER();
  ${write}
}
`;
  return { name, source, gridDependencyWait: true };
}

/**
 * Whether the kernel takes this checked GEMM: transB only, M ≤ GEMV_MAX_ROWS, K a multiple of the
 * vector width, 16-byte aligned operands, alpha 1 and beta 0, a forward epilogue without preActivation.
 */
export function gemvApplies(g: CheckedGemm): boolean {
  const p = g.problem, vec = vectorWidth(p.dtype), align = (t: { ptr: bigint }) => t.ptr % 16n === 0n;
  return p.batch === 1 && !p.transA && p.transB && p.M <= GEMV_MAX_ROWS && p.K % vec === 0 && GEMV_EPILOGUES.includes(p.epilogue)
    && !p.writesPreActivation && g.alpha === 1 && g.beta === 0 && align(g.a) && align(g.b);
}

/** Launches the kernel for a GEMM gemvApplies() accepted. */
export function launchGemv(host: KernelHost, g: CheckedGemm): void {
  const p = g.problem;
  const spec: GemvSpec = { dtype: p.dtype, rows: p.M, k: p.K, epilogue: p.epilogue };
  const kernel = host.kernel(gemvKey(spec), () => gemvSource(spec));
  kernel.launch({ grid: Math.ceil(p.N / (WARPS * COLUMNS_PER_WARP)), block: WARPS * 32 }, [
    arg.ptr(g.a.ptr), arg.ptr(g.b.ptr), arg.ptr(g.bias?.ptr ?? 0n), arg.ptr(g.out.ptr), arg.i32(p.N),
  ]);
}

/** Whether the gated kernel takes this checked gatedLinear: M ≤ GEMV_MAX_ROWS, K a multiple of the vector width, aligned operands. */
export function gatedGemvApplies(g: CheckedGatedLinear): boolean {
  const vec = vectorWidth(g.x.dtype as FloatDType), align = (t: Tensor) => (t as CudaTensor).ptr % 16n === 0n;
  return g.rows <= GEMV_MAX_ROWS && g.K % vec === 0 && align(g.x) && align(g.weight);
}

/** Launches the gated kernel for a gatedLinear gatedGemvApplies() accepted (the scratch `up` is not written). */
export function launchGatedGemv(host: KernelHost, g: CheckedGatedLinear): void {
  const spec: GemvSpec = { dtype: g.x.dtype as FloatDType, rows: g.rows, k: g.K, epilogue: 'none', gate: { activation: g.activation, bias: g.bias !== undefined } };
  const kernel = host.kernel(gemvKey(spec), () => gemvSource(spec));
  const ptr = (t: Tensor | undefined) => arg.ptr(t ? (t as CudaTensor).ptr : 0n);
  kernel.launch({ grid: Math.ceil(g.F / WARPS), block: WARPS * 32 }, [ptr(g.x), ptr(g.weight), ptr(g.bias), ptr(g.out), arg.i32(g.F)]);
}

/** What checkGatedLinear returns, as the gated launch reads it. */
export interface CheckedGatedLinear {
  readonly x: Tensor;
  readonly weight: Tensor;
  readonly bias?: Tensor | undefined;
  readonly out: Tensor;
  readonly activation: Activation;
  readonly rows: number;
  readonly F: number;
  readonly K: number;
}

/** Representative specs for the nvcc compile check: decode shapes of GPT-2 and Llama, partial K steps, f32. */
export function catalog(): KernelSource[] {
  return [
    gemvSource({ dtype: 'bf16', rows: 1, k: 2048, epilogue: 'none' }),
    gemvSource({ dtype: 'bf16', rows: 4, k: 8192, epilogue: 'none' }),
    gemvSource({ dtype: 'f16', rows: 3, k: 768, epilogue: 'gelu_bias' }),
    gemvSource({ dtype: 'bf16', rows: 1, k: 3072, epilogue: 'bias' }),
    gemvSource({ dtype: 'f32', rows: 2, k: 100, epilogue: 'relu_bias' }),
    gemvSource({ dtype: 'bf16', rows: 1, k: 2048, epilogue: 'none', gate: { activation: 'silu', bias: false } }),
    gemvSource({ dtype: 'f16', rows: 4, k: 4096, epilogue: 'none', gate: { activation: 'gelu_tanh', bias: true } }),
    gemvSource({ dtype: 'f32', rows: 3, k: 132, epilogue: 'none', gate: { activation: 'relu', bias: true } }),
  ];
}
