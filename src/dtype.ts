// Element types, their sizes, and host-side conversion between float32 and the 16-bit formats.
// Node 20 has no Float16Array, so fp16/bf16 are converted by hand (round to nearest even).

import { DTypeError } from './errors.js';

export type DType = 'f32' | 'f16' | 'bf16' | 'i32' | 'i8' | 'u8';
export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'i32', 'i8', 'u8'];
export type FloatDType = 'f32' | 'f16' | 'bf16';
export const FLOAT_DTYPES: readonly FloatDType[] = ['f32', 'f16', 'bf16'];

export function byteSize(dtype: DType): number {
  switch (dtype) {
    case 'f32': case 'i32': return 4;
    case 'f16': case 'bf16': return 2;
    case 'i8': case 'u8': return 1;
  }
}

export function isFloat(dtype: DType): dtype is FloatDType {
  return dtype === 'f32' || dtype === 'f16' || dtype === 'bf16';
}

/** The CUDA C type that stores this dtype. */
export function cudaType(dtype: DType): string {
  switch (dtype) {
    case 'f32': return 'float';
    case 'f16': return '__half';
    case 'bf16': return '__nv_bfloat16';
    case 'i32': return 'int';
    case 'i8': return 'signed char';
    case 'u8': return 'unsigned char';
  }
}

export function parseDType(name: string): DType {
  if ((DTYPES as readonly string[]).includes(name)) return name as DType;
  throw new DTypeError(`unknown dtype '${name}': expected one of ${DTYPES.join(', ')}`);
}

// --- fp16 / bf16 <-> f32 on the host ------------------------------------------------------------

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToBf16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return ((bits >>> 16) | 0x40) & 0xffff; // quiet NaN
  const roundingBias = 0x7fff + ((bits >>> 16) & 1);
  return ((bits + roundingBias) >>> 16) & 0xffff;
}

export function bf16BitsToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0]!;
}

export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / NaN
  // Re-bias the exponent from 127 to 15.
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow to inf
  if (e <= 0) {
    // Subnormal half (or zero): shift the mantissa with the implicit 1, round to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let m = mant >>> shift;
    if (rest > half || (rest === half && (m & 1))) m++;
    return sign | m;
  }
  const rest = mant & 0x1fff;
  let m = mant >>> 13;
  if (rest > 0x1000 || (rest === 0x1000 && (m & 1))) {
    m++;
    if (m === 0x400) { m = 0; e++; if (e >= 0x1f) return sign | 0x7c00; }
  }
  return sign | (e << 10) | m;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** Round a float32 value to the nearest value representable in `dtype` (identity for f32). */
export function roundToDType(x: number, dtype: FloatDType): number {
  switch (dtype) {
    case 'f32': return Math.fround(x);
    case 'f16': return f16BitsToF32(f32ToF16Bits(x));
    case 'bf16': return bf16BitsToF32(f32ToBf16Bits(x));
  }
}

/** Encode float values as the raw bytes of `dtype` (little-endian), for upload or file writing. */
export function encodeFloats(values: ArrayLike<number>, dtype: FloatDType): Uint8Array {
  if (dtype === 'f32') return new Uint8Array(Float32Array.from(values).buffer);
  const out = new Uint16Array(values.length);
  const encode = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  for (let i = 0; i < values.length; i++) out[i] = encode(values[i]!);
  return new Uint8Array(out.buffer);
}

/** Decode raw little-endian bytes of `dtype` into float32 values. */
export function decodeFloats(bytes: Uint8Array, dtype: FloatDType): Float32Array {
  if (dtype === 'f32') return new Float32Array(bytes.slice().buffer);
  const halves = new Uint16Array(bytes.slice().buffer);
  const decode = dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  const out = new Float32Array(halves.length);
  for (let i = 0; i < halves.length; i++) out[i] = decode(halves[i]!);
  return out;
}
