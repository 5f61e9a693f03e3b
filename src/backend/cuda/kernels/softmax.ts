// Attention softmax over the last dimension of x [B, heads, Lq, Lk], forward and backward.
//
// Math (backend.ts has the contract):
//   forward   out_j = exp(scale·x_j − M) / Σ_k exp(scale·x_k − M) over the keys j the row may see,
//             0 for masked keys; M = max_k scale·x_k. Key j of query i in batch b is masked when
//             j ≥ keyLengths[b] (padding) or, if causal, j > i + Lk − Lq. So a row sees exactly the
//             keys j < n(row) = min(Lk, keyLengths[b], i + Lk − Lq + 1); n ≤ 0 gives a row of zeros.
//   backward  dX = scale · y ⊙ (dY − Σ_j y_j·dY_j).
//   exp is exp2 of log2(e)-prescaled values (one FMUL per element, folded into the scale).
//
// Launch shape by row length, as LightSeq picks template instances (the row length Lk is baked in):
//   Lk ≤ 32            one warp per row, one element per lane (scalar accesses).
//   Lk ≤ 1024          one warp per row, the row in registers (≤ 32 elements per lane), vectors of
//                      up to 16 bytes (narrower when that keeps all 32 lanes busy).
//   Lk ≤ 16384         one block per row (64–1024 threads, ≤ 16 elements each), the row in registers.
//   longer             one 512-thread block per row looping over global memory: an online
//                      max/sum pass, then a pass that re-reads (mostly from L2) and writes.
// Masked keys are neither read nor exponentiated: a causal row reads only its visible prefix.
// out may alias x and dX may alias dY: every element is read, then written by the same thread.
//
// Precision: f32 arithmetic (exp2 on the SFU: relative error about 2^-22); storage f32/f16/bf16.
// Measured on an H200 (CUDA graphs over rotating buffers, against a copy kernel moving the same
// bytes; 2026-11-29): BERT [32,12,256,256] forward 95–104%, GPT-2 [16,12,1024,1024] causal forward
// 125% (masked keys are not read), unmasked 90%; backward 104–110%. The looping path with few rows
// ([1,4,16,32768]: 64 blocks for 132 SMs) reaches about 50%.
// Bytes per element (s = sizeof(dtype)), for the roofline:
//   forward:  read s (only visible keys: about half of them when causal), write s. Loop path: read 2s.
//   backward: read 2s (y, dY), write s. Loop path: read 4s.

import type { SoftmaxBackwardArgs, SoftmaxForwardArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { FLOAT_DTYPES } from '../../../dtype.js';
import { checkSoftmaxBackward, checkSoftmaxForward } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro, planRowMapping, ROW_MAPPING_DEVICE_CODE, rowVectorWidth } from './row-kernels.js';

// ---- specs -------------------------------------------------------------------------------------------

/** 'registers': the row is loaded once and kept in registers; 'loop': a block streams it twice. */
export type SoftmaxPath = 'registers' | 'loop';

/** How one row maps to threads (shared by forward and backward). */
export interface SoftmaxLayout {
  readonly dtype: FloatDType;
  /** Lk, baked in. */
  readonly rowLength: number;
  /** Elements per vector access. */
  readonly vec: number;
  /** 32: one warp per row; more: one block per row. */
  readonly threadsPerRow: number;
  /** Rows (warps) per block with a warp per row; 1 otherwise. */
  readonly rowsPerBlock: number;
  readonly path: SoftmaxPath;
}

export interface SoftmaxForwardSpec extends SoftmaxLayout {
  readonly causal: boolean;
  /** Padding mask from keyLengths. */
  readonly padding: boolean;
}

export type SoftmaxBackwardSpec = SoftmaxLayout;

function layoutKey(s: SoftmaxLayout): string {
  return `${s.dtype}.l${s.rowLength}.v${s.vec}.t${s.threadsPerRow}.r${s.rowsPerBlock}.${s.path}`;
}

export function softmaxForwardKey(s: SoftmaxForwardSpec): string {
  return `softmax_forward.${layoutKey(s)}${s.causal ? '.causal' : ''}${s.padding ? '.padded' : ''}`;
}

export function softmaxBackwardKey(s: SoftmaxBackwardSpec): string {
  return `softmax_backward.${layoutKey(s)}`;
}

// ---- planning ------------------------------------------------------------------------------------------

/** A warp per row while a lane holds at most this many elements (Lk ≤ 1024). */
const WARP_ROW_MAX_ELEMENTS = 32;
/** A block per row keeps each thread at or under this many elements (so Lk ≤ 16384 in registers). */
const BLOCK_ROW_MAX_ELEMENTS = 16;
/** Warps (rows) per block with a warp per row. */
const WARP_ROWS_PER_BLOCK = 4;
/** Threads of the looping path's block. */
const LOOP_THREADS = 512;
/** Vectors each thread of the looping path loads before using any (memory-level parallelism). */
const LOOP_UNROLL = 4;

/**
 * The layout for row length `rowLength`. Vectors are as wide as the row length and the addresses
 * allow, but no wider than Lk/32 elements, so a warp-per-row row spreads over all 32 lanes.
 */
export function planSoftmaxLayout(dtype: FloatDType, rowLength: number, pointers: readonly bigint[]): SoftmaxLayout {
  let vec = rowVectorWidth(dtype, rowLength, pointers);
  while (vec > 1 && vec * 32 > rowLength) vec /= 2;
  const mapping = planRowMapping(rowLength / vec, vec, WARP_ROW_MAX_ELEMENTS, BLOCK_ROW_MAX_ELEMENTS);
  if (!mapping) return { dtype, rowLength, vec, threadsPerRow: LOOP_THREADS, rowsPerBlock: 1, path: 'loop' };
  const { threadsPerRow } = mapping;
  return { dtype, rowLength, vec, threadsPerRow, rowsPerBlock: threadsPerRow === 32 ? WARP_ROWS_PER_BLOCK : 1, path: 'registers' };
}

// ---- sources -----------------------------------------------------------------------------------------

function layoutConstants(s: SoftmaxLayout): string {
  return constants({
    L: s.rowLength,
    VEC: s.vec,
    VECS_PER_ROW: s.rowLength / s.vec,
    THREADS_PER_ROW: s.threadsPerRow,
    ROWS_PER_BLOCK: s.rowsPerBlock,
    VECS_PER_THREAD: Math.ceil(s.rowLength / s.vec / s.threadsPerRow),
    BLOCK_THREADS: s.threadsPerRow * s.rowsPerBlock,
    LOOP_UNROLL,
  });
}

function preamble(s: SoftmaxLayout): string {
  return `${DEVICE_LIB}
${typedefLine('T', s.dtype)}
${layoutConstants(s)}
${ROW_MAPPING_DEVICE_CODE}
${launchBoundsMacro(s.threadsPerRow * s.rowsPerBlock)}
`;
}

const FORWARD_PARAMS = 'const T* x, T* out, const int* __restrict__ key_lengths, int rows, int q_len, int rows_per_batch, float scale_log2e';

export function softmaxForwardSource(spec: SoftmaxForwardSpec): KernelSource {
  const name = kernelIdentifier(softmaxForwardKey(spec));
  const visibleKeys = String.raw`
constexpr bool CAUSAL = ${spec.causal};
constexpr bool PADDING = ${spec.padding};
// The row sees keys j < visible_keys(row); row = (b·heads + h)·Lq + i, rows_per_batch = heads·Lq.
__device__ __forceinline__ int visible_keys(int row, const int* key_lengths, int q_len, int rows_per_batch) {
  int n = L;
  if (PADDING) n = min(n, key_lengths[row / rows_per_batch]);
  if (CAUSAL) n = min(n, row % q_len + (L - q_len) + 1);
  return max(n, 0);
}
`;
  const body = spec.path === 'registers' ? String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(${FORWARD_PARAMS}) {
  __shared__ float reduce_buf[BLOCK_THREADS / 32];
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= rows) return;  // a whole warp of the last block; never with a block per row (grid = rows)
  const int t = threadIdx.x;
  const T* xr = x + (long long)row * L;
  T* outr = out + (long long)row * L;
  const int n = visible_keys(row, key_lengths, q_len, rows_per_batch);

  float v[VECS_PER_THREAD][VEC];
  float m = neg_inf();
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    const int c = (k * THREADS_PER_ROW + t) * VEC;
    if (owns_vec(k, t) && c < n) {
      load_floats<T, VEC>(xr + c, v[k], VEC);
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        v[k][i] = c + i < n ? v[k][i] * scale_log2e : neg_inf();
        m = fmaxf(m, v[k][i]);
      }
    } else {
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[k][i] = neg_inf();
    }
  }
  m = row_max(m, reduce_buf);
  // A row with nothing visible (n = 0, or every visible score −inf) has m = −inf and becomes zeros:
  // subtracting 0 instead keeps exp2(−inf) = 0 rather than NaN.
  const bool visible = m != neg_inf();
  const float shift = visible ? m : 0.f;
  float s = 0.f;
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++)
    #pragma unroll
    for (int i = 0; i < VEC; i++) { v[k][i] = exp2_fast(v[k][i] - shift); s += v[k][i]; }
  s = row_sum(s, reduce_buf);
  const float inv = visible ? 1.f / s : 0.f;
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    #pragma unroll
    for (int i = 0; i < VEC; i++) v[k][i] *= inv;
    store_floats<T, VEC>(outr + (k * THREADS_PER_ROW + t) * VEC, v[k], VEC);
  }
}
` : String.raw`
// Block per row, LOOP_UNROLL vectors in flight per thread. Pass 1 keeps an online (max, Σ) state,
// rescaled once per chunk; pass 2 re-reads the row (from L2 mostly) and writes it normalised.
extern "C" __global__ void KERNEL_BOUNDS ${name}(${FORWARD_PARAMS}) {
  __shared__ float2 reduce_buf[BLOCK_THREADS / 32];
  const int row = blockIdx.x;
  const int t = threadIdx.x;
  const T* xr = x + (long long)row * L;
  T* outr = out + (long long)row * L;
  const int n = visible_keys(row, key_lengths, q_len, rows_per_batch);

  float2 state = make_float2(neg_inf(), 0.f);
  for (int first = 0; first < VECS_PER_ROW; first += BLOCK_THREADS * LOOP_UNROLL) {
    float v[LOOP_UNROLL][VEC];
    float chunk_max = neg_inf();
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * BLOCK_THREADS + t, c = idx * VEC;
      if (idx < VECS_PER_ROW && c < n) {
        load_floats<T, VEC>(xr + c, v[u], VEC);
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[u][i] = c + i < n ? v[u][i] * scale_log2e : neg_inf();
      } else {
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[u][i] = neg_inf();
      }
      #pragma unroll
      for (int i = 0; i < VEC; i++) chunk_max = fmaxf(chunk_max, v[u][i]);
    }
    if (chunk_max == neg_inf()) continue;
    if (chunk_max > state.x) { state.y *= exp2_fast(state.x - chunk_max); state.x = chunk_max; }
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++)
      #pragma unroll
      for (int i = 0; i < VEC; i++) state.y += exp2_fast(v[u][i] - state.x);
  }
  state = block_max_sum(state, reduce_buf);
  const bool visible = state.x != neg_inf();  // else the row becomes zeros (see the register path)
  const float shift = visible ? state.x : 0.f;
  const float inv = visible ? 1.f / state.y : 0.f;

  for (int first = 0; first < VECS_PER_ROW; first += BLOCK_THREADS * LOOP_UNROLL) {
    float v[LOOP_UNROLL][VEC];
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * BLOCK_THREADS + t, c = idx * VEC;
      if (idx < VECS_PER_ROW && c < n) load_floats<T, VEC>(xr + c, v[u], VEC);
      else for (int i = 0; i < VEC; i++) v[u][i] = 0.f;
    }
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * BLOCK_THREADS + t, c = idx * VEC;
      if (idx >= VECS_PER_ROW) continue;
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[u][i] = c + i < n && visible ? exp2_fast(v[u][i] * scale_log2e - shift) * inv : 0.f;
      store_floats<T, VEC>(outr + c, v[u], VEC);
    }
  }
}
`;
  return { name, source: preamble(spec) + visibleKeys + body };
}

const BACKWARD_PARAMS = 'const T* y, const T* dy, T* dx, int rows, float scale';

export function softmaxBackwardSource(spec: SoftmaxBackwardSpec): KernelSource {
  const name = kernelIdentifier(softmaxBackwardKey(spec));
  const body = spec.path === 'registers' ? String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}) {
  __shared__ float reduce_buf[BLOCK_THREADS / 32];
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= rows) return;
  const int t = threadIdx.x;
  const long long base = (long long)row * L;
  float yv[VECS_PER_THREAD][VEC], g[VECS_PER_THREAD][VEC];
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    const int c = (k * THREADS_PER_ROW + t) * VEC;
    load_floats<T, VEC>(y + base + c, yv[k], VEC);
    load_floats<T, VEC>(dy + base + c, g[k], VEC);
  }
  float dot = 0.f;
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    #pragma unroll
    for (int i = 0; i < VEC; i++) dot += yv[k][i] * g[k][i];
  }
  dot = row_sum(dot, reduce_buf);
  #pragma unroll
  for (int k = 0; k < VECS_PER_THREAD; k++) {
    if (!owns_vec(k, t)) continue;
    #pragma unroll
    for (int i = 0; i < VEC; i++) g[k][i] = scale * yv[k][i] * (g[k][i] - dot);
    store_floats<T, VEC>(dx + base + (k * THREADS_PER_ROW + t) * VEC, g[k], VEC);
  }
}
` : String.raw`
// Block per row: pass 1 reduces Σ y·dY, pass 2 re-reads y and dY (from L2 mostly) and writes dX.
// Raw vectors stay in their storage type until used, so LOOP_UNROLL of each fit in registers.
extern "C" __global__ void KERNEL_BOUNDS ${name}(${BACKWARD_PARAMS}) {
  __shared__ float reduce_buf[BLOCK_THREADS / 32];
  const int row = blockIdx.x;
  const int t = threadIdx.x;
  const long long base = (long long)row * L;
  float dot = 0.f;
  for (int first = 0; first < VECS_PER_ROW; first += BLOCK_THREADS * LOOP_UNROLL) {
    Vec<T, VEC> yv[LOOP_UNROLL], g[LOOP_UNROLL];
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * BLOCK_THREADS + t;
      if (idx >= VECS_PER_ROW) continue;
      yv[u] = load_vec<T, VEC>(y + base + idx * VEC);
      g[u] = load_vec<T, VEC>(dy + base + idx * VEC);
    }
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      if (first + u * BLOCK_THREADS + t >= VECS_PER_ROW) continue;
      #pragma unroll
      for (int i = 0; i < VEC; i++) dot += to_float(yv[u].v[i]) * to_float(g[u].v[i]);
    }
  }
  dot = block_sum(dot, reduce_buf);
  for (int first = 0; first < VECS_PER_ROW; first += BLOCK_THREADS * LOOP_UNROLL) {
    Vec<T, VEC> yv[LOOP_UNROLL], g[LOOP_UNROLL];
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * BLOCK_THREADS + t;
      if (idx >= VECS_PER_ROW) continue;
      yv[u] = load_vec<T, VEC>(y + base + idx * VEC);
      g[u] = load_vec<T, VEC>(dy + base + idx * VEC);
    }
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * BLOCK_THREADS + t;
      if (idx >= VECS_PER_ROW) continue;
      #pragma unroll
      for (int i = 0; i < VEC; i++) {
        const float yi = to_float(yv[u].v[i]);
        g[u].v[i] = from_float<T>(scale * yi * (to_float(g[u].v[i]) - dot));
      }
      store_vec<T, VEC>(dx + base + idx * VEC, g[u]);
    }
  }
}
`;
  return { name, source: preamble(spec) + body };
}

// ---- launchers ----------------------------------------------------------------------------------------

const LOG2E = Math.LOG2E;

function gridFor(layout: SoftmaxLayout, rows: number): number {
  return Math.ceil(rows / layout.rowsPerBlock);
}

export function softmaxForward(host: KernelHost, args: SoftmaxForwardArgs): void {
  const check = new OpCheck('softmaxForward', 'cuda');
  const { x, out, keyLengths, scale, causal, heads, Lq, Lk, rows } = checkSoftmaxForward(check, args);
  if (rows === 0 || Lk === 0) return;

  const xPtr = devicePtr(check, 'x', x), outPtr = devicePtr(check, 'out', out);
  const layout = planSoftmaxLayout(x.dtype as FloatDType, Lk, [xPtr, outPtr]);
  const spec: SoftmaxForwardSpec = { ...layout, causal, padding: keyLengths !== undefined };
  const kernel = host.kernel(softmaxForwardKey(spec), () => softmaxForwardSource(spec));
  kernel.launch(
    { grid: gridFor(spec, rows), block: [spec.threadsPerRow, spec.rowsPerBlock] },
    [
      arg.ptr(xPtr), arg.ptr(outPtr), arg.ptr(keyLengths ? devicePtr(check, 'keyLengths', keyLengths) : 0n),
      arg.i32(rows), arg.i32(Lq), arg.i32(heads * Lq), arg.f32(scale * LOG2E),
    ],
  );
}

export function softmaxBackward(host: KernelHost, args: SoftmaxBackwardArgs): void {
  const check = new OpCheck('softmaxBackward', 'cuda');
  const { y, dY, dX, scale, rows, Lk } = checkSoftmaxBackward(check, args);
  if (rows === 0 || Lk === 0) return;

  const ptrs = [devicePtr(check, 'y', y), devicePtr(check, 'dY', dY), devicePtr(check, 'dX', dX)] as const;
  const spec = planSoftmaxLayout(y.dtype as FloatDType, Lk, ptrs);
  const kernel = host.kernel(softmaxBackwardKey(spec), () => softmaxBackwardSource(spec));
  kernel.launch(
    { grid: gridFor(spec, rows), block: [spec.threadsPerRow, spec.rowsPerBlock] },
    [arg.ptr(ptrs[0]), arg.ptr(ptrs[1]), arg.ptr(ptrs[2]), arg.i32(rows), arg.f32(scale)],
  );
}

// ---- catalog -------------------------------------------------------------------------------------------

/** Row lengths that exercise every path: one element per lane, warp rows, block rows, the loop. */
export const CATALOG_ROW_LENGTHS = [20, 32, 77, 128, 256, 1000, 1024, 4096, 32768] as const;

export function catalog(): KernelSource[] {
  const aligned = [0x1000n];
  const sources: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    for (const rowLength of CATALOG_ROW_LENGTHS) {
      const layout = planSoftmaxLayout(dtype, rowLength, aligned);
      // Mask variants rotate over the row lengths so every combination compiles for some shape.
      const variant = CATALOG_ROW_LENGTHS.indexOf(rowLength) % 4;
      sources.push(softmaxForwardSource({ ...layout, causal: variant === 1 || variant === 3, padding: variant >= 2 }));
      if (dtype === 'f16' || rowLength === 1024 || rowLength === 32768) sources.push(softmaxBackwardSource(layout));
    }
  }
  return sources;
}
