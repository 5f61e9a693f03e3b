// residualNorm: the residual add and the next LayerNorm/RMSNorm in one pass (inference: no statistics
// are saved). x ← x + y + bias (stored in x's dtype), out = norm(x as stored).
//
// Math: LayerNorm mean = Σx/H, var = Σ(x − mean)²/H (two passes over the row held in registers, so no
// cancellation), out = (x − mean)·rstd·gamma + beta; RMSNorm rstd = 1/sqrt(Σx²/H + eps), out = x·rstd·gamma.
//
// Thread mapping: row-kernels.ts's register-resident rows: a warp per row while a lane holds ≤ 32
// elements (H ≤ 1024 at 16 bit; 4 rows a block), else a block per row with ≤ 16 elements a thread
// (H = 2048 bf16: 128 threads × 2 vectors). Each thread loads its vectors of x, y and bias, forms the
// sum, rounds it to T (the value later layers read), writes it back to x and keeps it as f32; then
// one (RMSNorm) or two (LayerNorm) row reductions, and the output. Decode steps have few rows (one per
// sequence), so the kernel is latency-bound there; at prefill sizes it streams like layernorm.ts.
//
// Precision: f32 arithmetic, storage f32/f16/bf16; y may be f32 beside 16-bit x (yF32: a fused MLP's f32
// accumulator), read as f32 and rounded only in the sum.
// Bytes per element (s = sizeof(dtype)): read 2s (x, y) [without y: s; f32 y: s + 4], write 2s (x, out)
// [without y: s]; gamma, beta, bias ≈ 0 (cached).

import type { ResidualNormArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { checkResidualNorm } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier, planRowMapping, ROW_MAPPING_DEVICE_CODE, rowVectorWidth } from './row-kernels.js';

export interface ResidualNormSpec {
  readonly norm: 'layer' | 'rms';
  readonly dtype: FloatDType;
  readonly hidden: number;
  readonly vec: number;
  readonly threadsPerRow: number;
  readonly rowsPerBlock: number;
  /** x += y (+ bias); without it x is only read. */
  readonly residual: boolean;
  readonly bias: boolean;
  /**
   * gamma, beta and bias loaded before the grid-dependency wait (default), or after it with x and y
   * (FUSEFORMER_NORM_PRELOAD=0, the code before session 20: gamma and beta then cost a round trip after
   * the reductions).
   */
  readonly preload?: boolean;
  /** y is f32 while x is 16-bit (Y = float in the kernel; yLoadCode). */
  readonly yF32?: boolean;
}

export function residualNormKey(s: ResidualNormSpec): string {
  return `residual_norm.${s.norm}.${s.dtype}.h${s.hidden}.v${s.vec}.t${s.threadsPerRow}.r${s.rowsPerBlock}${s.residual ? '.res' : ''}${s.bias ? '.bias' : ''}${s.preload === false ? '.late' : ''}${s.yF32 ? '.yf32' : ''}`;
}

/**
 * `typedef … Y;` — y's element type: float where y is f32 beside 16-bit x (yF32), else T — and load_y<N>,
 * N elements of y as floats. The residual norm and the GEMV norm prologue (gemv.ts) read y through it.
 * An f32 y goes in loads of at most 16 bytes (the widest load sm_90 has): 8 floats, a 16-bit x's vector,
 * would be one 32-byte-aligned Vec, and y is aligned to 16 bytes only (normGemvApplies) or to one piece
 * (planResidualNorm).
 */
export function yLoadCode(yF32: boolean): string {
  return String.raw`typedef ${yF32 ? 'float' : 'T'} Y;
template <int N>
__device__ __forceinline__ void load_y(const Y* p, float (&out)[N]) {
  constexpr int P = N * sizeof(Y) > 16 ? 16 / sizeof(Y) : N;  // elements a load
  #pragma unroll
  for (int i = 0; i < N; i += P) {
    float piece[P];
    load_floats<Y, P>(p + i, piece, P);
    #pragma unroll
    for (int j = 0; j < P; j++) out[i + j] = piece[j];
  }
}`;
}

/** A lane holds at most this many elements with a warp per row; a block-per-row thread at most the second. */
const WARP_ROW_MAX_ELEMENTS = 32;
const BLOCK_ROW_MAX_ELEMENTS = 16;
const WARP_ROWS_PER_BLOCK = 4;

/**
 * The kernel for these sizes and operand addresses (`pointers`: every operand's). `yF32`: y's address where y
 * is f32 beside 16-bit x; the vector width then also keeps y's loads aligned (pieces of min(vec, 4) floats).
 */
export function planResidualNorm(check: OpCheck, norm: 'layer' | 'rms', dtype: FloatDType, hidden: number, residual: boolean, bias: boolean, pointers: readonly bigint[], yF32?: bigint): ResidualNormSpec {
  let vec = rowVectorWidth(dtype, hidden, pointers);
  if (yF32 !== undefined) while (vec > 1 && yF32 % BigInt(4 * Math.min(vec, 4)) !== 0n) vec /= 2;
  const mapping = planRowMapping(hidden / vec, vec, WARP_ROW_MAX_ELEMENTS, BLOCK_ROW_MAX_ELEMENTS)
    ?? planRowMapping(hidden / vec, vec, WARP_ROW_MAX_ELEMENTS, 64);
  if (!mapping) return check.fail(`hidden size ${hidden} is too wide for the register-resident row kernel (at most ${64 * 1024} elements)`);
  const { threadsPerRow } = mapping;
  return {
    norm, dtype, hidden, vec, threadsPerRow, rowsPerBlock: threadsPerRow === 32 ? WARP_ROWS_PER_BLOCK : 1, residual, bias,
    ...(process.env['FUSEFORMER_NORM_PRELOAD'] === '0' ? { preload: false } : {}), ...(yF32 !== undefined ? { yF32: true } : {}),
  };
}

// The thread's columns of gamma, beta and bias: weights, never written by the kernel before this one, so
// by default loaded before the grid-dependency wait — the output pass then waits on no round trip of its own.
const PRELOAD_CODE = String.raw`  // The thread's columns of gamma, beta and bias (weights).
  Vec<T, VEC> gv[VECS_PER_THREAD], bv[VECS_PER_THREAD], rb[VECS_PER_THREAD];
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    const int col = (k * THREADS_PER_ROW + t) * VEC;
    gv[k] = load_vec<T, VEC>(gamma + col);
    if (LAYER) bv[k] = load_vec<T, VEC>(beta + col);
    if (RESIDUAL && BIAS) rb[k] = load_vec<T, VEC>(bias + col);
  }
`;

export function residualNormSource(spec: ResidualNormSpec): KernelSource {
  const name = kernelIdentifier(residualNormKey(spec));
  const vectorsPerRow = spec.hidden / spec.vec;
  const vecsPerThread = Math.ceil(vectorsPerRow / spec.threadsPerRow);
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${yLoadCode(spec.yF32 === true)}
${constants({
    H: spec.hidden, VEC: spec.vec, VECS_PER_ROW: vectorsPerRow, THREADS_PER_ROW: spec.threadsPerRow, ROWS_PER_BLOCK: spec.rowsPerBlock,
    VECS_PER_THREAD: vecsPerThread, LAYER: spec.norm === 'layer', RESIDUAL: spec.residual, BIAS: spec.bias,
  })}
${ROW_MAPPING_DEVICE_CODE}

// x, y, out [rows, H]; bias, gamma, beta [H]. Block (THREADS_PER_ROW, ROWS_PER_BLOCK), grid ceil(rows / ROWS_PER_BLOCK).
extern "C" __global__ void __launch_bounds__(THREADS_PER_ROW * ROWS_PER_BLOCK) ${name}(
    T* __restrict__ x, const Y* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ gamma,
    const T* __restrict__ beta, T* __restrict__ out, int rows, float eps) {
  const int t = threadIdx.x;
${spec.preload === false ? '' : PRELOAD_CODE}  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading x and y.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
${spec.preload === false ? PRELOAD_CODE : ''}  __shared__ float shared[ROWS_PER_BLOCK * WARPS_PER_ROW];
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  // A partial block's missing rows: with a block per row the whole block leaves together; with a warp
  // per row the reductions are shuffles only, so a warp may leave alone.
  if (row >= rows) return;
  T* xr = x + (size_t)row * H;
  float v[VECS_PER_THREAD][VEC];
  float sum = 0.f;
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    #pragma unroll
    for (int i = 0; i < VEC; i++) v[k][i] = 0.f;
    if (!owns_vec(k, t)) continue;
    const int col = (k * THREADS_PER_ROW + t) * VEC;
    load_floats<T, VEC>(xr + col, v[k], VEC);
    if (RESIDUAL) {
      float w[VEC];
      load_y(y + (size_t)row * H + col, w);
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[k][i] += w[i];
      if (BIAS) {
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[k][i] += to_float(rb[k].v[i]);
      }
      Vec<T, VEC> stored;
      #pragma unroll
      for (int i = 0; i < VEC; i++) { stored.v[i] = from_float<T>(v[k][i]); v[k][i] = to_float(stored.v[i]); }
      store_vec<T, VEC>(xr + col, stored);
    }
    #pragma unroll
    for (int i = 0; i < VEC; i++) sum += LAYER ? v[k][i] : v[k][i] * v[k][i];
  }
  float mean = 0.f, rstd;
  if (LAYER) {
    mean = row_sum(sum, shared) * (1.f / H);
    float squares = 0.f;
    #pragma unroll
    for (int k = 0; k < VECS_PER_THREAD; k++) {
      if (!owns_vec(k, t)) continue;
      #pragma unroll
      for (int i = 0; i < VEC; i++) { const float d = v[k][i] - mean; squares += d * d; }
    }
    rstd = rsqrtf(row_sum(squares, shared) * (1.f / H) + eps);
  } else {
    rstd = rsqrtf(row_sum(sum, shared) * (1.f / H) + eps);
  }
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    const int col = (k * THREADS_PER_ROW + t) * VEC;
    float o[VEC];
    #pragma unroll
    for (int i = 0; i < VEC; i++) o[i] = (v[k][i] - mean) * rstd * to_float(gv[k].v[i]) + (LAYER ? to_float(bv[k].v[i]) : 0.f);
    store_floats<T, VEC>(out + (size_t)row * H + col, o, VEC);
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export function residualNorm(host: KernelHost, args: ResidualNormArgs): void {
  const c = new OpCheck('residualNorm', 'cuda');
  const { x, y, bias, gamma, beta, out, norm, eps, rows, H } = checkResidualNorm(c, args);
  const ptr = (name: string, t: typeof x | undefined) => (t ? devicePtr(c, name, t) : 0n);
  const p = { x: ptr('x', x), y: ptr('y', y), bias: ptr('bias', bias), gamma: ptr('gamma', gamma), beta: ptr('beta', beta), out: ptr('out', out) };
  if (rows === 0) return;
  const used = Object.values(p).filter((a) => a !== 0n);
  const yF32 = y !== undefined && y.dtype === 'f32' && x.dtype !== 'f32';
  const spec = planResidualNorm(c, norm, x.dtype as FloatDType, H, y !== undefined, bias !== undefined, used, yF32 ? p.y : undefined);
  host.kernel(residualNormKey(spec), () => residualNormSource(spec)).launch(
    { grid: Math.ceil(rows / spec.rowsPerBlock), block: [spec.threadsPerRow, spec.rowsPerBlock] },
    [arg.ptr(p.x), arg.ptr(p.y), arg.ptr(p.bias), arg.ptr(p.gamma), arg.ptr(p.beta), arg.ptr(p.out), arg.i32(rows), arg.f32(eps)],
  );
}

/** GPT-2 (LayerNorm, H = 768, bias), Llama 1B/8B (RMSNorm, 2048/4096), the first layer's plain norm, f32, odd H. */
export function catalog(): KernelSource[] {
  const c = new OpCheck('residualNorm catalog', 'cuda');
  const spec = (norm: 'layer' | 'rms', dtype: FloatDType, hidden: number, residual: boolean, bias: boolean) =>
    residualNormSource(planResidualNorm(c, norm, dtype, hidden, residual, bias, [0n]));
  return [
    spec('layer', 'bf16', 768, true, true),
    spec('layer', 'bf16', 768, false, false),
    spec('rms', 'bf16', 2048, true, false),
    spec('rms', 'bf16', 2048, false, false),
    spec('rms', 'f16', 4096, true, false),
    spec('layer', 'f32', 1024, true, true),
    spec('rms', 'f32', 130, true, false),
    // gamma, beta and bias loaded after the wait (FUSEFORMER_NORM_PRELOAD=0).
    residualNormSource({ ...planResidualNorm(c, 'layer', 'bf16', 768, true, true, [0n]), preload: false }),
    // An f32 y (a fused MLP's accumulator) beside 16-bit x: GPT-2's norm (8 floats a vector, two loads), Llama's
    // (block per row), and f16 with a y aligned to 8 bytes (vectors of 2).
    residualNormSource(planResidualNorm(c, 'layer', 'bf16', 768, true, true, [0n], 0n)),
    residualNormSource(planResidualNorm(c, 'rms', 'bf16', 2048, true, false, [0n], 0n)),
    residualNormSource(planResidualNorm(c, 'rms', 'f16', 1024, true, false, [0n], 8n)),
  ];
}
