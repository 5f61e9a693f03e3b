// dropout: out = x ⊙ keep / (1−p) over every element of x, and the u8 keep mask; for the places no
// fused op covers (attention probabilities, BERT's embedding output after its LayerNorm). The keep
// decisions are device-lib's dropout_keep_vec (rng.ts has the mapping), identical to the fused ops'
// and the CPU's for the same (seed, offset, element index).
//
// Thread mapping: a flat grid-stride loop over VEC-element vectors (16 bytes of x where the size and
// the pointers allow), one Philox call per 8 elements; the element index is the vector's first.
//
// Bytes per element: read s (x), write s + 1 (out, mask).   f16: 5

import type { DropoutOpArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkDropout } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { DROPOUT_OFFSET, DROPOUT_PARAMS, dropoutArgs, pickVectorWidth } from './elementwise.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface DropoutSpec {
  readonly dtype: FloatDType;
  /** Elements per vector access (divides the element count). */
  readonly vec: number;
}

export function dropoutKey(s: DropoutSpec): string {
  return `dropout.${s.dtype}.v${s.vec}`;
}

const BLOCK_THREADS = 256;

export function dropoutSource(spec: DropoutSpec): KernelSource {
  const name = kernelIdentifier(dropoutKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ VEC: spec.vec, BLOCK: BLOCK_THREADS })}

// vectors = numel / VEC
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(const T* __restrict__ x, T* __restrict__ out, unsigned char* __restrict__ mask, u64 vectors,
                                                        ${DROPOUT_PARAMS}) {
  ${DROPOUT_OFFSET}
  for (u64 v = (u64)blockIdx.x * BLOCK + threadIdx.x; v < vectors; v += (u64)gridDim.x * BLOCK) {
    const u64 i = v * VEC;
    const Vec<T, VEC> in = load_vec<T, VEC>(x + i);
    bool keep[VEC];
    dropout_keep_vec<VEC>(seed, offset, i, threshold, keep);
    Vec<T, VEC> y;
    #pragma unroll
    for (int k = 0; k < VEC; k++) y.v[k] = from_float<T>(keep[k] ? to_float(in.v[k]) * keep_scale : 0.f);
    store_vec<T, VEC>(out + i, y);
    store_mask<VEC>(mask + i, keep);
  }
}
`;
  return { name, source };
}

export function dropout(host: KernelHost, args: DropoutOpArgs): void {
  const c = new OpCheck('dropout', 'cuda');
  const { x, out, mask } = checkDropout(c, args);
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out), maskPtr = devicePtr(c, 'mask', mask);
  if (x.numel === 0) return;
  const dtype = x.dtype as FloatDType;
  const elementBytes = byteSize(dtype);
  const vec = pickVectorWidth(16 / elementBytes, [{ ptr: xPtr, elementBytes }, { ptr: outPtr, elementBytes }, { ptr: maskPtr, elementBytes: 1 }], x.numel);
  const spec: DropoutSpec = { dtype, vec };
  const vectors = x.numel / vec;
  host.kernel(dropoutKey(spec), () => dropoutSource(spec)).launch(
    { grid: flatGridSize(vectors, host.multiProcessorCount), block: BLOCK_THREADS },
    [arg.ptr(xPtr), arg.ptr(outPtr), arg.ptr(maskPtr), arg.u64(BigInt(vectors)), ...dropoutArgs(args)],
  );
}

/** Every dtype at full width, and the narrow fallbacks. */
export function catalog(): KernelSource[] {
  return [
    dropoutSource({ dtype: 'bf16', vec: 8 }),
    dropoutSource({ dtype: 'f16', vec: 8 }),
    dropoutSource({ dtype: 'f32', vec: 4 }),
    dropoutSource({ dtype: 'bf16', vec: 1 }),
    dropoutSource({ dtype: 'f32', vec: 2 }),
  ];
}

