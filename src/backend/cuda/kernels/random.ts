// randomFill: uniform or normal values from Philox4x32-10, for parameter initialisation and for
// filling benchmark inputs at memory speed instead of generating them on the host.
//
// Math (RandomFillArgs in backend.ts): thread g draws the four words of counter offset + g and
// writes elements 4g..4g+3 — uniform: low + (high − low)·(w >>> 8)·2⁻²⁴; normal: Box–Muller on the
// word pairs (w0, w1) and (w2, w3). f32 arithmetic (the CPU reference uses f64; they agree to rounding).
//
// Thread mapping: one Philox group (4 elements) per thread, grid-stride; a group fully inside the
// tensor is stored with one 4-element vector store when the pointer allows it.
// Bytes: writes 4·sizeof(T) per group and reads nothing; ~25 integer instructions per group for
// Philox plus log/sincos for normal, so it runs near, not at, the write bandwidth.

import type { RandomFillArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { OpCheck, randomDistribution } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface RandomFillSpec {
  readonly dtype: FloatDType;
  readonly distribution: 'uniform' | 'normal';
  /** Whether a full group is stored with one 4-element vector store (pointer aligned to 4 elements). */
  readonly vectorStore: boolean;
}

export function randomFillKey(s: RandomFillSpec): string {
  return `random_fill.${s.dtype}.${s.distribution}${s.vectorStore ? '.v4' : ''}`;
}

const BLOCK_THREADS = 256;

export function randomFillSource(spec: RandomFillSpec): KernelSource {
  const name = kernelIdentifier(randomFillKey(spec));
  const transform = spec.distribution === 'uniform'
    ? `#pragma unroll
  for (int j = 0; j < 4; j++) v[j] = a + (b - a) * (float)(word_at(w, j) >> 8) * UNIT;`
    : `#pragma unroll
  for (int pair = 0; pair < 4; pair += 2) {
    // Box–Muller: u1 in (0, 1] so the log is finite; sincospif(2u) = (sin, cos) of 2π·u.
    const float u1 = (float)((word_at(w, pair) >> 8) + 1u) * UNIT;
    const float u2 = (float)(word_at(w, pair + 1) >> 8) * UNIT;
    const float r = sqrtf(-2.f * logf(u1));
    float s, c;
    sincospif(2.f * u2, &s, &c);
    v[pair] = a + b * r * c;
    v[pair + 1] = a + b * r * s;
  }`;
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ BLOCK: BLOCK_THREADS, VECTOR_STORE: spec.vectorStore })}
#define UNIT 5.9604644775390625e-08f

// a, b: (low, high) for uniform, (mean, std) for normal.
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(T* out, u64 n, u64 seed, u64 offset, float a, float b) {
  const u64 groups = (n + 3) / 4;
  for (u64 g = (u64)blockIdx.x * BLOCK + threadIdx.x; g < groups; g += (u64)gridDim.x * BLOCK) {
    const uint4 w = dropout_words(seed, offset, g);
    float v[4];
    ${transform}
    const u64 i = g * 4;
    if (VECTOR_STORE && i + 4 <= n) {
      Vec<T, 4> x;
      #pragma unroll
      for (int j = 0; j < 4; j++) x.v[j] = from_float<T>(v[j]);
      store_vec<T, 4>(out + i, x);
    } else {
      #pragma unroll
      for (int j = 0; j < 4; j++) if (i + j < n) out[i + j] = from_float<T>(v[j]);
    }
  }
}
`;
  return { name, source };
}

export function randomFill(host: KernelHost, args: RandomFillArgs): void {
  const c = new OpCheck('randomFill', 'cuda');
  const out = c.tensor('out', args.out);
  c.float('out', out);
  c.dropout({ p: 0, seed: args.seed, offset: args.offset });
  const distribution = randomDistribution(c, args);
  const ptr = devicePtr(c, 'out', out);
  const dtype = out.dtype as FloatDType;
  const spec: RandomFillSpec = { dtype, distribution: distribution.kind, vectorStore: ptr % BigInt(4 * byteSize(dtype)) === 0n };
  if (out.numel === 0) return;
  const [a, b] = distribution.kind === 'uniform' ? [distribution.low, distribution.high] : [distribution.mean, distribution.std];
  host.kernel(randomFillKey(spec), () => randomFillSource(spec)).launch(
    { grid: flatGridSize(Math.ceil(out.numel / 4), host.multiProcessorCount), block: BLOCK_THREADS },
    [arg.ptr(ptr), arg.u64(BigInt(out.numel)), arg.u64(args.seed), arg.u64(args.offset), arg.f32(a), arg.f32(b)],
  );
}

export function catalog(): KernelSource[] {
  return FLOAT_DTYPES.flatMap((dtype) => (['uniform', 'normal'] as const).flatMap((distribution) =>
    [true, false].map((vectorStore) => randomFillSource({ dtype, distribution, vectorStore }))));
}
