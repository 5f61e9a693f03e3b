// gatherColumns: out[r, j] = x[r, index[j]] (backend.ts has the contract): the input of an act-order GPTQ
// product, whose weight stores its input channels sorted by group.
//
// Thread mapping: a flat grid-stride loop over the rows·C outputs; consecutive threads write consecutive
// columns of a row and read index[j] alongside (coalesced), and gather x's row (L1/L2 serve it: a row is
// read C times at scattered columns). Bytes: rows·C elements written, as many read, plus the index.

import type { GatherColumnsArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { checkGatherColumns } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { flatGridSize } from './fill-copy.js';
import { devicePtr, kernelIdentifier } from './row-kernels.js';

const BLOCK_THREADS = 256;

function gatherColumnsKey(dtype: FloatDType): string {
  return `gather_columns.${dtype}`;
}

export function gatherColumnsSource(dtype: FloatDType): KernelSource {
  const name = kernelIdentifier(gatherColumnsKey(dtype));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', dtype)}

// x [rows, K], out [rows, C], index [C] with values in [0, K); outputs = rows·C.
extern "C" __global__ void __launch_bounds__(${BLOCK_THREADS}) ${name}(
    const T* __restrict__ x, const int* __restrict__ index, T* __restrict__ out, int K, int C, u64 outputs) {
  const u64 stride = (u64)gridDim.x * ${BLOCK_THREADS};
  for (u64 v = (u64)blockIdx.x * ${BLOCK_THREADS} + threadIdx.x; v < outputs; v += stride) {
    const u64 r = v / (u64)C;
    const int j = (int)(v - r * (u64)C);
    out[v] = x[r * (u64)K + (u64)index[j]];
  }
}
`;
  return { name, source };
}

export function gatherColumns(host: KernelHost, args: GatherColumnsArgs): void {
  const c = new OpCheck('gatherColumns', 'cuda');
  const { x, index, out, rows, K, C } = checkGatherColumns(c, args);
  const xPtr = devicePtr(c, 'x', x), indexPtr = devicePtr(c, 'index', index), outPtr = devicePtr(c, 'out', out);
  const outputs = rows * C;
  if (outputs === 0) return;
  const dtype = x.dtype as FloatDType;
  host.kernel(gatherColumnsKey(dtype), () => gatherColumnsSource(dtype)).launch(
    { grid: flatGridSize(outputs, host.multiProcessorCount), block: BLOCK_THREADS },
    [arg.ptr(xPtr), arg.ptr(indexPtr), arg.ptr(outPtr), arg.i32(K), arg.i32(C), arg.u64(BigInt(outputs))],
  );
}

export function catalog(): KernelSource[] {
  return (['f32', 'f16', 'bf16'] as const).map((dtype) => gatherColumnsSource(dtype));
}
