// Element types, their sizes, and host-side conversion between float32 and the 16-bit formats.
// Node 20 has no Float16Array, so fp16/bf16 are converted by hand (round to nearest even).

import { ArgumentError, DTypeError } from './errors.js';

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

/**
 * Decode raw little-endian bytes of `dtype` into float32 values. A hot path (every download of a
 * 16-bit tensor: logits rows of 50k–128k values): bf16 is the high half of an f32, so one shift per
 * value into the output's bits; f16 goes through a 65,536-entry table (256 KB, built on first use).
 * Per-value calls of the scalar converters took 3.5 ns (bf16) and 34 ns (f16) a value.
 */
export function decodeFloats(bytes: Uint8Array, dtype: FloatDType): Float32Array {
  if (dtype === 'f32') return new Float32Array(bytes.slice().buffer);
  if (bytes.length % 2 !== 0) throw new ArgumentError(`decodeFloats: ${bytes.length} bytes is not a whole number of ${dtype} values`);
  const halves = bytes.byteOffset % 2 === 0 ? new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2) : new Uint16Array(bytes.slice().buffer);
  const n = halves.length;
  if (dtype === 'bf16') {
    const bits = new Int32Array(n);  // Int32: x << 16 is an int32, stored without a conversion
    for (let i = 0; i < n; i++) bits[i] = halves[i]! << 16;
    return new Float32Array(bits.buffer);
  }
  const table = f16Table();
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = table[halves[i]!]!;
  return out;
}

/**
 * The n 16-bit values in the first 2n bytes of `buffer` (4n bytes long), widened in place to float32:
 * a download lands in the first half of the result's own memory, so no second buffer is allocated
 * (a fresh 400 KB array costs ~0.25 ms of page faults on first touch). Walks from the end: value i's
 * four bytes [4i, 4i + 4) cover only halves ≥ 2i, which were read already (i = 0 reads before it writes).
 */
export function widenHalvesInPlace(buffer: ArrayBuffer, n: number, dtype: 'f16' | 'bf16'): Float32Array {
  if (buffer.byteLength < 4 * n) throw new ArgumentError(`widenHalvesInPlace: ${n} values need a ${4 * n}-byte buffer, got ${buffer.byteLength}`);
  const halves = new Uint16Array(buffer, 0, n);
  if (dtype === 'bf16') {
    const bits = new Int32Array(buffer, 0, n);
    for (let i = n - 1; i >= 0; i--) bits[i] = halves[i]! << 16;
  } else {
    const table = f16Table(), out = new Float32Array(buffer, 0, n);
    for (let i = n - 1; i >= 0; i--) out[i] = table[halves[i]!]!;
  }
  return new Float32Array(buffer, 0, n);
}

let f16Values: Float32Array | undefined;
/** Every f16 bit pattern's value (f16BitsToF32), index = bits. */
function f16Table(): Float32Array {
  if (!f16Values) {
    f16Values = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16Values[h] = f16BitsToF32(h);
  }
  return f16Values;
}
