// gptqRoundBlock (backend.ts has the contract): GPTQ's rounding of one block of input columns, the part
// of GPTQ that is sequential along the columns but independent across the N output rows — a thread a row.
//
// A block of ROW_THREADS threads holds its rows' values in shared memory as [width][ROW_THREADS]
// (thread t's column t: every access by the warp is one conflict-free row of banks), loaded and stored
// coalesced from weights [width, N]. U's entries are the same for every thread of a step: read through
// the read-only cache as broadcasts. Work: N·width²/2 fused multiply-adds a block of columns (Llama 1.2B's
// gate/up: 16,384 rows × 8,192 updates — the host's f64 loop took seconds, here microseconds).

import type { GptqRoundBlockArgs } from '../../backend.js';
import { checkGptqRoundBlock } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { devicePtr } from './row-kernels.js';

/** Rows (threads) a block: its shared memory is width · ROW_THREADS · 4 bytes (32 KiB at width 128). */
export const ROW_THREADS = 64;
/** The widest block of columns: 128 KiB of shared memory a block. */
export const GPTQ_MAX_BLOCK_WIDTH = 512;

export function gptqRoundBlockSource(): KernelSource {
  const name = 'gptq_round_block';
  const source = String.raw`${DEVICE_LIB}
typedef unsigned char u8;

// weights [width, N] f32 (updated in place), u [width, width] f32, q [N, width] u8, scales / zeros
// [N, width / G], errors [width, N]. Grid ceil(N / ${ROW_THREADS}), block ${ROW_THREADS}, width·${ROW_THREADS}·4 bytes of
// dynamic shared memory.
extern "C" __global__ void __launch_bounds__(${ROW_THREADS}) ${name}(
    float* __restrict__ weights, const float* __restrict__ u, u8* __restrict__ q, float* __restrict__ scales,
    u8* __restrict__ zeros, float* __restrict__ errors, int width, int N, int G) {
  extern __shared__ float w[];  // [width][${ROW_THREADS}]
  const int t = threadIdx.x, n = blockIdx.x * ${ROW_THREADS} + t;
  const bool live = n < N;
  if (!live) return;  // no barriers below: each thread touches only its own column of w
  for (int i = 0; i < width; i++) w[i * ${ROW_THREADS} + t] = weights[(size_t)i * N + n];
  const int groups = width / G;
  float scale = 1.f;
  int zero = 0;
  for (int i = 0; i < width; i++) {
    if (i % G == 0) {
      // quant-math.ts int4GroupParams: the range includes zero; the scale is stored as an f16.
      float lo = 0.f, hi = 0.f;
      for (int k = i; k < i + G; k++) {
        const float v = w[k * ${ROW_THREADS} + t];
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
      }
      const float range = fmaxf(__fsub_rn(hi, lo), 1e-5f);
      scale = __half2float(__float2half_rn(__fdiv_rn(range, 15.f)));
      zero = min(15, max(0, (int)rintf(__fdiv_rn(-lo, scale))));
      scales[(size_t)n * groups + i / G] = scale;
      zeros[(size_t)n * groups + i / G] = (u8)zero;
    }
    const float wi = w[i * ${ROW_THREADS} + t];
    const int value = min(15, max(0, (int)rintf(__fdiv_rn(wi, scale)) + zero));
    q[(size_t)n * width + i] = (u8)value;
    const float e = __fdiv_rn(__fmaf_rn(-scale, (float)(value - zero), wi), __ldg(u + (size_t)i * width + i));
    errors[(size_t)i * N + n] = e;
    const float* urow = u + (size_t)i * width;
    for (int j = i + 1; j < width; j++) w[j * ${ROW_THREADS} + t] = __fmaf_rn(-e, __ldg(urow + j), w[j * ${ROW_THREADS} + t]);
  }
  for (int i = 0; i < width; i++) weights[(size_t)i * N + n] = w[i * ${ROW_THREADS} + t];
}
`;
  return { name, source };
}

export function gptqRoundBlock(host: KernelHost, args: GptqRoundBlockArgs): void {
  const c = new OpCheck('gptqRoundBlock', 'cuda');
  const { weights, u, q, scales, zeros, errors, width, N, G } = checkGptqRoundBlock(c, args);
  if (width > GPTQ_MAX_BLOCK_WIDTH) c.fail(`a block of ${width} columns is wider than the kernel's ${GPTQ_MAX_BLOCK_WIDTH} (its rows live in shared memory)`);
  const ptrs = [devicePtr(c, 'weights', weights), devicePtr(c, 'u', u), devicePtr(c, 'q', q), devicePtr(c, 'scales', scales), devicePtr(c, 'zeros', zeros), devicePtr(c, 'errors', errors)];
  if (N === 0 || width === 0) return;
  host.kernel('gptq_round_block', gptqRoundBlockSource).launch(
    { grid: Math.ceil(N / ROW_THREADS), block: ROW_THREADS, sharedBytes: width * ROW_THREADS * 4 },
    [...ptrs.map((p) => arg.ptr(p)), arg.i32(width), arg.i32(N), arg.i32(G)],
  );
}

export function catalog(): KernelSource[] {
  return [gptqRoundBlockSource()];
}
