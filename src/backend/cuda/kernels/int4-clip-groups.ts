// int4ClipGroups (backend.ts has the contract): AWQ's clip search, a warp a group of G weights.
//
// The lanes hold G/32 weights each (coalesced along the row), their extremes by shuffles; each ratio's
// group parameters follow from the clamped extremes [lo·r, hi·r] alone (the group's minimum clamps to
// lo·r, its maximum to hi·r, zero included as quant-math.ts's int4GroupParams includes it), so a ratio
// costs G/32 quantize-and-compare steps a lane and one shuffle sum. Llama 1.2B's gate/up (33.5 M weights,
// 11 ratios): the host's loop took ~6 s; this is a few hundred MB of traffic.

import type { Int4ClipGroupsArgs } from '../../backend.js';
import { checkInt4ClipGroups, INT4_CLIP_MAX_GROUP } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { devicePtr } from './row-kernels.js';

const WARPS = 8;
const MAX_VALUES = INT4_CLIP_MAX_GROUP / 32;

export function int4ClipGroupsSource(): KernelSource {
  const name = 'int4_clip_groups';
  const source = String.raw`${DEVICE_LIB}
// weight [N, K] f32 (clamped in place), meanSquare [K], ratios [R]; G a multiple of 32 up to ${INT4_CLIP_MAX_GROUP}.
// Grid ceil(groups / ${WARPS}), block ${WARPS * 32}: warp w of block b takes group b·${WARPS} + w (row-major over [N, K/G]).
extern "C" __global__ void __launch_bounds__(${WARPS * 32}) ${name}(
    float* __restrict__ weight, const float* __restrict__ mean_square, const float* __restrict__ ratios,
    int R, int K, int G, u64 groups) {
  const int lane = threadIdx.x & 31;
  const u64 group = (u64)blockIdx.x * ${WARPS} + (threadIdx.x >> 5);
  if (group >= groups) return;  // whole warps leave: the shuffles below stay full-warp
  const int per_row = K / G, values = G / 32;
  const u64 n = group / (u64)per_row;
  const int g0 = (int)(group - n * (u64)per_row) * G;
  float* w = weight + n * (u64)K + g0;
  float v[${MAX_VALUES}], m[${MAX_VALUES}];
  float lo = 0.f, hi = 0.f;
  #pragma unroll
  for (int i = 0; i < ${MAX_VALUES}; i++) {
    if (i < values) {
      v[i] = w[i * 32 + lane];
      m[i] = __ldg(mean_square + g0 + i * 32 + lane);
      lo = fminf(lo, v[i]);
      hi = fmaxf(hi, v[i]);
    }
  }
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  int best = 0;
  float best_error = __int_as_float(0x7f800000);  // +inf
  for (int j = 0; j < R; j++) {
    const float r = __ldg(ratios + j);
    const float a = __fmul_rn(lo, r), b = __fmul_rn(hi, r);
    const float range = fmaxf(__fsub_rn(b, a), 1e-5f);
    const float scale = __half2float(__float2half_rn(__fdiv_rn(range, 15.f)));
    const int zero = min(15, max(0, (int)rintf(__fdiv_rn(-a, scale))));
    float error = 0.f;
    #pragma unroll
    for (int i = 0; i < ${MAX_VALUES}; i++) {
      if (i < values) {
        const float c = fminf(b, fmaxf(a, v[i]));
        const int q = min(15, max(0, (int)rintf(__fdiv_rn(c, scale)) + zero));
        const float d = __fmaf_rn(-scale, (float)(q - zero), v[i]);
        error = __fmaf_rn(m[i], d * d, error);
      }
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) error += __shfl_xor_sync(0xffffffffu, error, o);  // every lane the same sum
    if (error < best_error) {
      best_error = error;
      best = j;
    }
  }
  const float r = __ldg(ratios + best);
  const float a = __fmul_rn(lo, r), b = __fmul_rn(hi, r);
  #pragma unroll
  for (int i = 0; i < ${MAX_VALUES}; i++) {
    if (i < values) w[i * 32 + lane] = fminf(b, fmaxf(a, v[i]));
  }
}
`;
  return { name, source };
}

export function int4ClipGroups(host: KernelHost, args: Int4ClipGroupsArgs): void {
  const c = new OpCheck('int4ClipGroups', 'cuda');
  const { weight, meanSquare, ratios, N, K, R, G } = checkInt4ClipGroups(c, args);
  const ptrs = [devicePtr(c, 'weight', weight), devicePtr(c, 'meanSquare', meanSquare), devicePtr(c, 'ratios', ratios)];
  const groups = (N * K) / G;
  if (groups === 0) return;
  host.kernel('int4_clip_groups', int4ClipGroupsSource).launch(
    { grid: Math.ceil(groups / WARPS), block: WARPS * 32 },
    [...ptrs.map((p) => arg.ptr(p)), arg.i32(R), arg.i32(K), arg.i32(G), arg.u64(BigInt(groups))],
  );
}

export function catalog(): KernelSource[] {
  return [int4ClipGroupsSource()];
}
