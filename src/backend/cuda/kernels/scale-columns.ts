// scaleColumns (backend.ts has the contract): out[r, c] = x[r, c] · scale[c] (or / scale[c]), a flat
// grid-stride loop — consecutive threads take consecutive columns of a row (coalesced x and out; the
// scale row stays in L1/L2). Used by AWQ's scale search (quant/awq.ts) once per grid point.

import type { ScaleColumnsArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { checkScaleColumns } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { flatGridSize } from './fill-copy.js';
import { devicePtr, kernelIdentifier } from './row-kernels.js';

const BLOCK_THREADS = 256;

function scaleColumnsKey(dtype: FloatDType, divide: boolean): string {
  return `scale_columns.${dtype}.${divide ? 'div' : 'mul'}`;
}

export function scaleColumnsSource(dtype: FloatDType, divide: boolean): KernelSource {
  const name = kernelIdentifier(scaleColumnsKey(dtype, divide));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', dtype)}

// x [rows, C] and out [rows, C] (may be x), scale [C] f32; elements = rows·C.
extern "C" __global__ void __launch_bounds__(${BLOCK_THREADS}) ${name}(
    const T* x, const float* __restrict__ scale, T* out, int C, u64 elements) {
  const u64 stride = (u64)gridDim.x * ${BLOCK_THREADS};
  for (u64 v = (u64)blockIdx.x * ${BLOCK_THREADS} + threadIdx.x; v < elements; v += stride) {
    const int c = (int)(v % (u64)C);
    out[v] = from_float<T>(${divide ? '__fdiv_rn(to_float(x[v]), scale[c])' : '__fmul_rn(to_float(x[v]), scale[c])'});
  }
}
`;
  return { name, source };
}

export function scaleColumns(host: KernelHost, args: ScaleColumnsArgs): void {
  const c = new OpCheck('scaleColumns', 'cuda');
  const { x, scale, out, rows, C, divide } = checkScaleColumns(c, args);
  const ptrs = [devicePtr(c, 'x', x), devicePtr(c, 'scale', scale), devicePtr(c, 'out', out)];
  const elements = rows * C;
  if (elements === 0) return;
  const dtype = x.dtype as FloatDType;
  host.kernel(scaleColumnsKey(dtype, divide), () => scaleColumnsSource(dtype, divide)).launch(
    { grid: flatGridSize(elements, host.multiProcessorCount), block: BLOCK_THREADS },
    [...ptrs.map((p) => arg.ptr(p)), arg.i32(C), arg.u64(BigInt(elements))],
  );
}

export function catalog(): KernelSource[] {
  return (['f32', 'f16', 'bf16'] as const).flatMap((dtype) => [scaleColumnsSource(dtype, false), scaleColumnsSource(dtype, true)]);
}
