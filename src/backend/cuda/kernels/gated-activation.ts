// gatedActivation: a gated MLP's middle, out[r, c] = act(x[r, c])·x[r, F + c] (SwiGLU with silu): the
// gate and up projections come from one GEMM with their weights stacked, [rows, 2F].
//
// Thread mapping: a flat grid-stride loop over the rows·F/VEC output vectors; output vector v is row
// v / (F/VEC), columns VEC·(v mod F/VEC) ..; it reads the gate vector and the up vector F columns later.
// Precision: f32 with accurate expf/erff/tanhf (the GEMMs around it dominate the time).
// Bytes per output element (s = sizeof(dtype)): read 2s, write s.

import type { Activation, GatedActivationArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize } from '../../../dtype.js';
import { checkGatedActivation } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import { flatGridSize } from './fill-copy.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

export interface GatedActivationSpec {
  readonly dtype: FloatDType;
  readonly activation: Activation;
  /** F, baked in (the row → column split divides by F/VEC). */
  readonly width: number;
  readonly vec: number;
}

export function gatedActivationKey(s: GatedActivationSpec): string {
  return `gated_activation.${s.activation}.${s.dtype}.f${s.width}.v${s.vec}`;
}

const BLOCK_THREADS = 256;

/** An activation of g in CUDA C (used by the gated GEMV too). */
export const ACTIVATION_CODE: Record<Activation, string> = {
  relu: 'relu_f(g)',
  gelu: 'gelu_erf(g)',
  gelu_tanh: 'gelu_tanh(g)',
  silu: 'g / (1.f + expf(-g))',
};

export function gatedActivationSource(spec: GatedActivationSpec): KernelSource {
  const name = kernelIdentifier(gatedActivationKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ F: spec.width, VEC: spec.vec, VECS_PER_ROW: spec.width / spec.vec, BLOCK: BLOCK_THREADS })}

__device__ __forceinline__ float activate(float g) { return ${ACTIVATION_CODE[spec.activation]}; }

// x [rows, 2F], out [rows, F]; vectors = rows·F/VEC.
extern "C" __global__ void __launch_bounds__(BLOCK) ${name}(const T* __restrict__ x, T* __restrict__ out, u64 vectors) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  const u64 stride = (u64)gridDim.x * BLOCK;
  for (u64 v = (u64)blockIdx.x * BLOCK + threadIdx.x; v < vectors; v += stride) {
    const u64 row = v / VECS_PER_ROW;
    const int col = (int)(v - row * VECS_PER_ROW) * VEC;
    float gate[VEC], up[VEC];
    load_floats<T, VEC>(x + row * (2 * F) + col, gate, VEC);
    load_floats<T, VEC>(x + row * (2 * F) + F + col, up, VEC);
    #pragma unroll
    for (int i = 0; i < VEC; i++) gate[i] = activate(gate[i]) * up[i];
    store_floats<T, VEC>(out + row * F + col, gate, VEC);
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export function gatedActivation(host: KernelHost, args: GatedActivationArgs): void {
  const c = new OpCheck('gatedActivation', 'cuda');
  const { x, out, activation, rows, F } = checkGatedActivation(c, args);
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out);
  if (rows === 0 || F === 0) return;
  const dtype = x.dtype as FloatDType, size = byteSize(dtype);
  const vec = pickVectorWidth(16 / size, [{ ptr: xPtr, elementBytes: size }, { ptr: outPtr, elementBytes: size }], F);
  const spec: GatedActivationSpec = { dtype, activation, width: F, vec };
  const vectors = rows * F / vec;
  host.kernel(gatedActivationKey(spec), () => gatedActivationSource(spec)).launch(
    { grid: flatGridSize(vectors, host.multiProcessorCount), block: BLOCK_THREADS },
    [arg.ptr(xPtr), arg.ptr(outPtr), arg.u64(BigInt(vectors))],
  );
}

/** SwiGLU at Llama 3.2 1B / 3.1 8B widths, every activation once, f32, an odd width. */
export function catalog(): KernelSource[] {
  return [
    gatedActivationSource({ dtype: 'bf16', activation: 'silu', width: 8192, vec: 8 }),
    gatedActivationSource({ dtype: 'f16', activation: 'silu', width: 14336, vec: 8 }),
    gatedActivationSource({ dtype: 'bf16', activation: 'gelu_tanh', width: 3072, vec: 8 }),
    gatedActivationSource({ dtype: 'bf16', activation: 'gelu', width: 3072, vec: 8 }),
    gatedActivationSource({ dtype: 'f32', activation: 'relu', width: 384, vec: 4 }),
    gatedActivationSource({ dtype: 'f32', activation: 'silu', width: 33, vec: 1 }),
  ];
}
