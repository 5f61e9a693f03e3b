// tanhActivation: out[r, c] = tanh(x[r, c] + bias[c]) (BERT's pooler, after its dense GEMM; the bias
// is optional). Elementwise, so out may alias x.
//
// Thread mapping: a flat grid-stride loop over the rows·H/VEC vectors; vector v is row v / (H/VEC),
// columns VEC·(v mod H/VEC) ..; the bias vector of those columns is read alongside (it stays in L1/L2).
// Precision: f32 with the accurate tanhf (the pooler is [B, H]: a few thousand elements).
// Bytes per element (s = sizeof(dtype)): read s (+ s/rows for the bias), write s.

import type { TanhActivationArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkTanhActivation } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface TanhActivationSpec {
  readonly dtype: FloatDType;
  /** H, baked in (the bias column of a vector is its index mod H/VEC). */
  readonly width: number;
  readonly vec: number;
  readonly hasBias: boolean;
}

export function tanhActivationKey(s: TanhActivationSpec): string {
  return `tanh_activation.${s.dtype}.h${s.width}.v${s.vec}${s.hasBias ? '.bias' : ''}`;
}

const BLOCK_THREADS = 256;

export function tanhActivationSource(spec: TanhActivationSpec): KernelSource {
  const name = kernelIdentifier(tanhActivationKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ VEC: spec.vec, VECS_PER_ROW: spec.width / spec.vec, BLOCK: BLOCK_THREADS, HAS_BIAS: spec.hasBias })}

// x, out [rows, H]; bias [H] (read only when HAS_BIAS); vectors = rows·H/VEC. x and out may be one buffer.
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(const T* x, const T* __restrict__ bias, T* out, u64 vectors) {
  const u64 stride = (u64)gridDim.x * BLOCK;
  for (u64 v = (u64)blockIdx.x * BLOCK + threadIdx.x; v < vectors; v += stride) {
    const int col = (int)(v % VECS_PER_ROW) * VEC;
    float values[VEC];
    load_floats<T, VEC>(x + v * VEC, values, VEC);
    if (HAS_BIAS) {
      float b[VEC];
      load_floats<T, VEC>(bias + col, b, VEC);
      #pragma unroll
      for (int i = 0; i < VEC; i++) values[i] += b[i];
    }
    #pragma unroll
    for (int i = 0; i < VEC; i++) values[i] = tanhf(values[i]);
    store_floats<T, VEC>(out + v * VEC, values, VEC);
  }
}
`;
  return { name, source };
}

export function tanhActivation(host: KernelHost, args: TanhActivationArgs): void {
  const c = new OpCheck('tanhActivation', 'cuda');
  const { x, bias, out, rows, H } = checkTanhActivation(c, args);
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out), biasPtr = bias ? devicePtr(c, 'bias', bias) : 0n;
  if (rows === 0 || H === 0) return;
  const dtype = x.dtype as FloatDType, size = byteSize(dtype);
  const accesses = [{ ptr: xPtr, elementBytes: size }, { ptr: outPtr, elementBytes: size }, ...(bias ? [{ ptr: biasPtr, elementBytes: size }] : [])];
  const vec = pickVectorWidth(16 / size, accesses, H);
  const spec: TanhActivationSpec = { dtype, width: H, vec, hasBias: bias !== undefined };
  const vectors = rows * H / vec;
  host.kernel(tanhActivationKey(spec), () => tanhActivationSource(spec)).launch(
    { grid: flatGridSize(vectors, host.multiProcessorCount), block: BLOCK_THREADS },
    [arg.ptr(xPtr), arg.ptr(biasPtr), arg.ptr(outPtr), arg.u64(BigInt(vectors))],
  );
}

/** BERT-base and BERT-large poolers (bf16, f16), f32 without a bias, an odd width. */
export function catalog(): KernelSource[] {
  return [
    tanhActivationSource({ dtype: 'bf16', width: 768, vec: 8, hasBias: true }),
    tanhActivationSource({ dtype: 'f16', width: 1024, vec: 8, hasBias: true }),
    tanhActivationSource({ dtype: 'f32', width: 384, vec: 4, hasBias: false }),
    tanhActivationSource({ dtype: 'f32', width: 33, vec: 1, hasBias: true }),
  ];
}
