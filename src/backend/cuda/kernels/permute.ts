// permute0213: swaps the two middle dimensions, x [A, B, C, D] → out [A, C, B, D],
// out[a, c, b, d] = x[a, b, c, d] — merging attention heads ([batch, heads, L, d] → [batch, L, heads, d])
// and splitting them back. A pure copy, so the kernel moves bits: it is specialised on the element
// size (2 bytes: f16/bf16, 4 bytes: f32/i32), not the dtype, and on D.
//
// Thread mapping: the output is A·C·B rows of D elements, row r = (a·C + c)·B + b, each row D/VEC
// vectors of VEC elements (VEC·s ≤ 16 bytes; VEC divides D and both pointers are aligned to it, so
// rows start on vector boundaries). A grid-stride loop over all output vectors (64-bit index), two
// per iteration, both loaded before either is stored: thread i writes output vector i, so stores
// are fully coalesced; it reads vector (i mod D/VEC) of input row (a·B + b)·C + c, so a warp reads
// whole input rows of D·s contiguous bytes (128 B for d = 64 in f16): full 32-byte sectors whenever
// D·s ≥ 32. The row → (a, c, b) split divides by the runtime B and C in 32 bits (the launcher
// checks A·B·C < 2^32); the division by D/VEC is by a compile-time constant.
//
// Bytes per element: read s, write s. The same traffic as a copy; a row of D·s < 32 bytes wastes
// part of each read sector.

import type { Permute0213Args } from '../../backend.js';
import { byteSize } from '../../../dtype.js';
import { checkPermute0213 } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface Permute0213Spec {
  /** Bytes per element: the kernel copies bit patterns of this size. */
  readonly elementBytes: 2 | 4;
  /** The innermost dimension D (elements per row). */
  readonly rowLength: number;
  /** Elements per vector access; divides rowLength. */
  readonly vec: number;
}

export function permute0213Key(s: Permute0213Spec): string {
  return `permute0213.b${s.elementBytes}.d${s.rowLength}.v${s.vec}`;
}

const BLOCK_THREADS = 256;
const STORAGE_TYPES: Record<2 | 4, string> = { 2: 'unsigned short', 4: 'u32' };

export function permute0213Source(spec: Permute0213Spec): KernelSource {
  const name = kernelIdentifier(permute0213Key(spec));
  const source = String.raw`${DEVICE_LIB}
typedef ${STORAGE_TYPES[spec.elementBytes]} E;
${constants({ VEC: spec.vec, BLOCK: BLOCK_THREADS, VECS_PER_ROW: spec.rowLength / spec.vec })}
typedef Vec<E, VEC> V;

// The input vector that output vector v copies: output row r = (a·C + c)·B + b reads input row (a·B + b)·C + c.
__device__ __forceinline__ u64 source_vector(u64 v, u32 B, u32 C) {
  const u64 row = v / VECS_PER_ROW;
  const u32 k = (u32)(v - row * VECS_PER_ROW);
  const u32 r = (u32)row;
  const u32 b = r % B, ac = r / B;
  const u32 c = ac % C, a = ac / C;
  return ((u64)a * B + b) * C * VECS_PER_ROW + (u64)c * VECS_PER_ROW + k;
}

// vectors = A·B·C·D / VEC; x and out must not overlap.
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(const E* __restrict__ x, E* __restrict__ out, u64 vectors, u32 B, u32 C) {
  const u64 stride = (u64)gridDim.x * BLOCK;
  for (u64 v = (u64)blockIdx.x * BLOCK + threadIdx.x; v < vectors; v += 2 * stride) {
    const u64 w = v + stride;
    const V p = load_vec<E, VEC>(x + source_vector(v, B, C) * VEC);
    V q;
    if (w < vectors) q = load_vec<E, VEC>(x + source_vector(w, B, C) * VEC);
    store_vec<E, VEC>(out + v * VEC, p);
    if (w < vectors) store_vec<E, VEC>(out + w * VEC, q);
  }
}
`;
  return { name, source };
}

export function permute0213(host: KernelHost, args: Permute0213Args): void {
  const c = new OpCheck('permute0213', 'cuda');
  const { x, out, A, B, C, D } = checkPermute0213(c, args);
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out);
  if (x.numel === 0) return;
  if (A * B * C >= 2 ** 32) c.fail(`'x' has ${A * B * C} rows of D = ${D} elements: at most 2^32 − 1 rows are supported`);
  const elementBytes = byteSize(x.dtype) as 2 | 4;
  const vec = pickVectorWidth(16 / elementBytes, [{ ptr: xPtr, elementBytes }, { ptr: outPtr, elementBytes }], D);
  const spec: Permute0213Spec = { elementBytes, rowLength: D, vec };
  const vectors = x.numel / vec;
  host.kernel(permute0213Key(spec), () => permute0213Source(spec)).launch(
    { grid: flatGridSize(vectors, host.multiProcessorCount), block: BLOCK_THREADS },
    [arg.ptr(xPtr), arg.ptr(outPtr), arg.u64(BigInt(vectors)), arg.u32(B), arg.u32(C)],
  );
}

/** Head dims 64/128 at full width in both element sizes, an odd-width row, and the narrow fallbacks. */
export function catalog(): KernelSource[] {
  return [
    permute0213Source({ elementBytes: 2, rowLength: 64, vec: 8 }),
    permute0213Source({ elementBytes: 2, rowLength: 128, vec: 8 }),
    permute0213Source({ elementBytes: 4, rowLength: 64, vec: 4 }),
    permute0213Source({ elementBytes: 4, rowLength: 80, vec: 4 }),
    permute0213Source({ elementBytes: 2, rowLength: 3, vec: 1 }),
    permute0213Source({ elementBytes: 4, rowLength: 6, vec: 2 }),
    permute0213Source({ elementBytes: 2, rowLength: 64, vec: 2 }),
  ];
}
