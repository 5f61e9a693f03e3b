// Flat utility kernels of the CUDA backend: fill (any dtype, a value's bit pattern) and copy with
// conversion between any two dtypes (floats round to nearest; floats to integers truncate toward zero
// and saturate, NaN → 0).
//
// Bytes per element: fill writes s; copy reads s_src and writes s_dst. Measured on an H200 (CUDA-graph
// replay; memcpy D2D = 4.28 TB/s): 3.8–4.3 TB/s.

import type { DType } from '../../../dtype.js';
import { byteSize, cudaType, f32ToBf16Bits, f32ToF16Bits, FLOAT_DTYPES, isFloat } from '../../../dtype.js';
import { ShapeError } from '../../../errors.js';
import type { Tensor } from '../../../tensor.js';
import { formatShape } from '../../../tensor.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { maxVectorElements, pickVectorWidth, THREADS_PER_SM } from './elementwise.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

// A grid-stride loop over numel/VEC vectors (two vectors per thread per iteration, both loaded before
// either is stored), 64-bit indices (a whole parameter workspace can pass 2^31 elements), and a
// scalar tail of numel mod VEC elements taken by the first threads. One wave of resident blocks.

const FLAT_BLOCK_THREADS = 256;
const FLAT_BLOCKS_PER_SM = THREADS_PER_SM / FLAT_BLOCK_THREADS;

/** Blocks for a grid-stride loop over `vectors` (at least one, so the scalar tail always runs). */
export function flatGridSize(vectors: number, multiProcessorCount: number, blocksPerSm = FLAT_BLOCKS_PER_SM): number {
  return Math.max(1, Math.min(Math.ceil(vectors / FLAT_BLOCK_THREADS), multiProcessorCount * blocksPerSm));
}

/** Storage-only element types for fill: the bit pattern is what matters. */
const STORAGE_TYPES: Record<number, string> = { 1: 'unsigned char', 2: 'unsigned short', 4: 'u32' };

export interface FillSpec {
  readonly elementBytes: 1 | 2 | 4;
  readonly vec: number;
}

export function fillKey(s: FillSpec): string {
  return `fill.b${s.elementBytes}.v${s.vec}`;
}

export function fillSource(spec: FillSpec): KernelSource {
  const name = kernelIdentifier(fillKey(spec));
  const source = String.raw`${DEVICE_LIB}
typedef ${STORAGE_TYPES[spec.elementBytes]} E;
${constants({ VEC: spec.vec, BLOCK: FLAT_BLOCK_THREADS })}

// bits: the value's bit pattern in the tensor's dtype (converted and rounded on the host).
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(E* out, u64 n, u32 bits) {
  const E value = (E)bits;
  Vec<E, VEC> x;
  #pragma unroll
  for (int k = 0; k < VEC; k++) x.v[k] = value;
  const u64 vectors = n / VEC;
  const u64 first = (u64)blockIdx.x * BLOCK + threadIdx.x;
  for (u64 v = first; v < vectors; v += (u64)gridDim.x * BLOCK) store_vec<E, VEC>(out + v * VEC, x);
  const u64 tail = vectors * VEC + first;
  if (tail < n) out[tail] = value;
}
`;
  return { name, source };
}

const INTEGER_RANGES: Record<'i32' | 'i8' | 'u8', readonly [number, number]> = {
  i32: [-(2 ** 31), 2 ** 31 - 1],
  i8: [-128, 127],
  u8: [0, 255],
};

/** The bit pattern `value` has in `dtype` (the CPU backend's checks for integer dtypes). */
function fillBits(c: OpCheck, dtype: DType, value: number): number {
  switch (dtype) {
    case 'f32': return new Uint32Array(new Float32Array([value]).buffer)[0]!;
    case 'f16': return f32ToF16Bits(value);
    case 'bf16': return f32ToBf16Bits(value);
    default: {
      if (!Number.isInteger(value)) c.fail(`'value' = ${value} is not an integer, as ${dtype} requires`);
      const [lo, hi] = INTEGER_RANGES[dtype];
      if (value < lo || value > hi) c.fail(`'value' = ${value} does not fit in ${dtype} [${lo}, ${hi}]`);
      return dtype === 'i32' ? value >>> 0 : value & 0xff;
    }
  }
}

/** Every element of `t` = value, rounded to its dtype (integer dtypes need an integer that fits). */
export function fill(host: KernelHost, t: Tensor, value: number): void {
  const c = new OpCheck('fill', 'cuda');
  const dst = c.tensor('t', t);
  if (typeof value !== 'number') c.fail(`'value' must be a number, got ${typeof value}`);
  const bits = fillBits(c, dst.dtype, value);
  const ptr = devicePtr(c, 't', dst);
  if (dst.numel === 0) return;
  const elementBytes = byteSize(dst.dtype) as 1 | 2 | 4;
  const spec: FillSpec = { elementBytes, vec: pickVectorWidth(16 / elementBytes, [{ ptr, elementBytes }]) };
  host.kernel(fillKey(spec), () => fillSource(spec)).launch(
    { grid: flatGridSize(Math.floor(dst.numel / spec.vec), host.multiProcessorCount), block: FLAT_BLOCK_THREADS },
    [arg.ptr(ptr), arg.u64(BigInt(dst.numel)), arg.u32(bits)],
  );
}

export interface CopySpec {
  readonly from: DType;
  readonly to: DType;
  readonly vec: number;
}

export function copyKey(s: CopySpec): string {
  return `copy.${s.from}.${s.to}.v${s.vec}`;
}

const INTEGER_LIMITS: Record<'i32' | 'i8' | 'u8', readonly [string, string]> = { i32: ['-2147483647 - 1', '2147483647'], i8: ['-128', '127'], u8: ['0', '255'] };

/**
 * The C expression converting `x` (of dtype `from`) to dtype `to`. Floats to integers truncate toward
 * zero (as the CPU backend does) and saturate (NaN → 0) where the CPU would reject the value; integers
 * to narrower integers saturate likewise.
 */
function conversion(from: DType, to: DType): string {
  if (from === to) return 'x';
  if (isFloat(to)) return isFloat(from) ? 'from_float<D>(to_float(x))' : 'from_float<D>((float)x)';
  // cvt.rzi.s32.f32 truncates toward zero, saturates to the i32 range and maps NaN to 0.
  const asInt = isFloat(from) ? '__float2int_rz(to_float(x))' : '(int)x';
  if (to === 'i32') return asInt;
  const [lo, hi] = INTEGER_LIMITS[to];
  return `(D)min(max(${asInt}, ${lo}), ${hi})`;
}

export function copySource(spec: CopySpec): KernelSource {
  const name = kernelIdentifier(copyKey(spec));
  const source = String.raw`${DEVICE_LIB}
typedef ${cudaType(spec.from)} S;
typedef ${cudaType(spec.to)} D;
${constants({ VEC: spec.vec, BLOCK: FLAT_BLOCK_THREADS })}

__device__ __forceinline__ D convert(S x) { return ${conversion(spec.from, spec.to)}; }

__device__ __forceinline__ Vec<D, VEC> convert_vec(const Vec<S, VEC>& a) {
  Vec<D, VEC> b;
  #pragma unroll
  for (int k = 0; k < VEC; k++) b.v[k] = convert(a.v[k]);
  return b;
}

// src and dst must not partially overlap (the same range, converting in place between equal sizes,
// is fine: each element is read before the same thread writes it).
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(const S* src, D* dst, u64 n) {
  const u64 vectors = n / VEC;
  const u64 first = (u64)blockIdx.x * BLOCK + threadIdx.x;
  const u64 stride = (u64)gridDim.x * BLOCK;
  for (u64 v = first; v < vectors; v += 2 * stride) {
    const u64 w = v + stride;
    const Vec<S, VEC> a = load_vec<S, VEC>(src + v * VEC);
    Vec<S, VEC> b;
    if (w < vectors) b = load_vec<S, VEC>(src + w * VEC);
    store_vec<D, VEC>(dst + v * VEC, convert_vec(a));
    if (w < vectors) store_vec<D, VEC>(dst + w * VEC, convert_vec(b));
  }
  const u64 tail = vectors * VEC + first;
  if (tail < n) dst[tail] = convert(src[tail]);
}
`;
  return { name, source };
}

/** dst = src converted to dst's dtype; same number of elements, any shapes. */
export function copy(host: KernelHost, src: Tensor, dst: Tensor): void {
  const c = new OpCheck('copy', 'cuda');
  const from = c.tensor('src', src);
  const to = c.tensor('dst', dst);
  if (from.numel !== to.numel) {
    throw new ShapeError(`copy: 'src' ${formatShape(from.shape)} has ${from.numel} elements but 'dst' ${formatShape(to.shape)} has ${to.numel}`);
  }
  const srcPtr = devicePtr(c, 'src', from), dstPtr = devicePtr(c, 'dst', to);
  if (from.numel === 0) return;
  const vec = pickVectorWidth(maxVectorElements(from.dtype, to.dtype), [
    { ptr: srcPtr, elementBytes: byteSize(from.dtype) }, { ptr: dstPtr, elementBytes: byteSize(to.dtype) },
  ]);
  const spec: CopySpec = { from: from.dtype, to: to.dtype, vec };
  host.kernel(copyKey(spec), () => copySource(spec)).launch(
    { grid: flatGridSize(Math.floor(from.numel / vec), host.multiProcessorCount), block: FLAT_BLOCK_THREADS },
    [arg.ptr(srcPtr), arg.ptr(dstPtr), arg.u64(BigInt(from.numel))],
  );
}

/** Each storage width for fill (wide and scalar), every float-to-float cast, and each kind of
 *  integer conversion (int→float, float→int saturating, int→int narrowing and widening, a byte copy). */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  for (const elementBytes of [1, 2, 4] as const) {
    out.push(fillSource({ elementBytes, vec: 16 / elementBytes }));
    out.push(fillSource({ elementBytes, vec: 1 }));
  }
  const casts: [DType, DType][] = [
    ...FLOAT_DTYPES.flatMap((from) => FLOAT_DTYPES.map((to): [DType, DType] => [from, to])),
    ['i32', 'f32'], ['u8', 'bf16'], ['f32', 'i32'], ['f16', 'i8'], ['bf16', 'u8'], ['i32', 'i8'], ['i8', 'i32'], ['u8', 'u8'],
  ];
  for (const [from, to] of casts) out.push(copySource({ from, to, vec: maxVectorElements(from, to) }));
  out.push(copySource({ from: 'f32', to: 'f16', vec: 1 }));
  return out;
}
