// INT8 W8A8 kernels around the cuBLASLt int8 GEMM (backend/cuda/int8-gemm.ts):
//   int8QuantizeRows   per-token dynamic symmetric quantization of activations x [M, K] → i8 + f32 scale
//   int8Dequantize     the GEMM's epilogue: out = act(acc · rowScale · colScale + bias), i32 → float
// backend.ts (Int8QuantizeRowsArgs, Int8DequantizeArgs) has the math.
//
// int8QuantizeRows: one block of 256 threads per row. Pass 1 reads the row with 16-byte vectors and
// reduces max|x| (warp shuffles, then one shared-memory round: block_max); pass 2 reads the row again
// (now from L1/L2) and writes VEC i8 per thread per step. The f32 operations are the CPU's (quant-math.ts):
// inv = 127 / amax (__fdiv_rn), q = rne(x · inv) (__fmul_rn, __float2int_rn), scale = amax / 127 — the
// same bytes on both backends. Bytes: reads K·s (+ K·s from cache), writes K + 4 per row.
//
// int8Dequantize: a thread owns 4 consecutive columns (one 16-byte i32 load) and walks rows
// blockIdx.y, blockIdx.y + gridDim.y, …; the 4 column scales and biases stay in registers.
// Bytes per element: reads 4 (acc), writes s.

import type { Int8DequantizeArgs, Int8QuantizeRowsArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { checkInt8Dequantize, checkInt8QuantizeRows } from '../../op-checks/quant.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { pickVectorWidth } from './elementwise.js';
import type { EpilogueActivation } from './quant-int4.js';
import { activationExpression, EPILOGUE_ACTIVATION_CODE } from './quant-int4.js';
import { constants, devicePtr, kernelIdentifier } from './row-kernels.js';

// ==== per-row activation quantization ==================================================================

export interface Int8QuantizeRowsSpec {
  readonly dtype: FloatDType;
  readonly K: number;
  /** Elements per access (16 bytes of x when K and the pointers allow; down to 1). */
  readonly vec: number;
}

export function int8QuantizeRowsKey(s: Int8QuantizeRowsSpec): string {
  return `int8_quantize_rows.${s.dtype}.k${s.K}.v${s.vec}`;
}

const ROW_THREADS = 256;

export function int8QuantizeRowsSource(spec: Int8QuantizeRowsSpec): KernelSource {
  const name = kernelIdentifier(int8QuantizeRowsKey(spec));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', spec.dtype)}
${constants({ K: spec.K, VEC: spec.vec, THREADS: ROW_THREADS, VECTORS: spec.K / spec.vec })}

extern "C" __global__ void __launch_bounds__(THREADS) ${name}(const T* __restrict__ x, signed char* __restrict__ out, float* __restrict__ scales) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  __shared__ float shared[THREADS / 32];
  const size_t row = blockIdx.x;
  const T* xr = x + row * K;
  signed char* qr = out + row * K;
  float amax = 0.f;
  for (int v = threadIdx.x; v < VECTORS; v += THREADS) {
    float f[VEC];
    load_floats<T, VEC>(xr + v * VEC, f, VEC);
    #pragma unroll
    for (int e = 0; e < VEC; e++) amax = fmaxf(amax, fabsf(f[e]));
  }
  amax = block_max(amax, shared);
  const float inv = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
  for (int v = threadIdx.x; v < VECTORS; v += THREADS) {
    float f[VEC];
    load_floats<T, VEC>(xr + v * VEC, f, VEC);
    Vec<signed char, VEC> q;
    #pragma unroll
    for (int e = 0; e < VEC; e++) q.v[e] = (signed char)max(-127, min(127, __float2int_rn(__fmul_rn(f[e], inv))));
    store_vec<signed char, VEC>(qr + v * VEC, q);
  }
  if (threadIdx.x == 0) scales[row] = __fdiv_rn(amax, 127.f);
}
`;
  return { name, source, gridDependencyWait: true };
}

export function int8QuantizeRows(host: KernelHost, args: Int8QuantizeRowsArgs): void {
  const c = new OpCheck('int8QuantizeRows', 'cuda');
  const { x, out, scales, M, K } = checkInt8QuantizeRows(c, args);
  if (M === 0 || K === 0) return;
  const dtype = x.dtype as FloatDType;
  const xPtr = devicePtr(c, 'x', x), outPtr = devicePtr(c, 'out', out);
  const vec = pickVectorWidth(16 / byteSize(dtype), [{ ptr: xPtr, elementBytes: byteSize(dtype) }, { ptr: outPtr, elementBytes: 1 }], K);
  const spec: Int8QuantizeRowsSpec = { dtype, K, vec };
  host.kernel(int8QuantizeRowsKey(spec), () => int8QuantizeRowsSource(spec)).launch(
    { grid: M, block: ROW_THREADS }, [arg.ptr(xPtr), arg.ptr(outPtr), arg.ptr(devicePtr(c, 'scales', scales))]);
}

// ==== the dequantizing epilogue =========================================================================

export interface Int8DequantizeSpec {
  readonly dtype: FloatDType;
  readonly bias: boolean;
  readonly activation: EpilogueActivation;
}

export function int8DequantizeKey(s: Int8DequantizeSpec): string {
  return `int8_dequantize.${s.dtype}${s.bias ? '.bias' : ''}.${s.activation}`;
}

const DEQUANT_THREADS = 256;
const MAX_GRID_Y = 65535;

export function int8DequantizeSource(spec: Int8DequantizeSpec): KernelSource {
  const name = kernelIdentifier(int8DequantizeKey(spec));
  const source = String.raw`${DEVICE_LIB}
${EPILOGUE_ACTIVATION_CODE}
${typedefLine('T', spec.dtype)}
${constants({ THREADS: DEQUANT_THREADS, HAS_BIAS: spec.bias })}

// N is a multiple of 4; thread → columns 4v .. 4v + 3.
extern "C" __global__ void __launch_bounds__(THREADS) ${name}(const int* __restrict__ acc, const float* __restrict__ row_scales,
    const float* __restrict__ col_scales, const T* __restrict__ bias, T* __restrict__ out, int M, int N) {
  // May be launched programmatically (kernel.ts gridDependencyWait): wait before reading anything.
  GRID_DEPENDENCY_WAIT();
  GRID_DEPENDENCY_TRIGGER();
  const int n = 4 * (blockIdx.x * THREADS + threadIdx.x);
  if (n >= N) return;
  const float4 cs = *reinterpret_cast<const float4*>(col_scales + n);
  float b[4] = {0.f, 0.f, 0.f, 0.f};
  if (HAS_BIAS) load_floats<T, 4>(bias + n, b, 4);
  for (int m = blockIdx.y; m < M; m += gridDim.y) {
    const int4 a = *reinterpret_cast<const int4*>(acc + (size_t)m * N + n);
    const float rs = row_scales[m];
    float v[4] = {__int2float_rn(a.x) * rs * cs.x + b[0], __int2float_rn(a.y) * rs * cs.y + b[1],
                  __int2float_rn(a.z) * rs * cs.z + b[2], __int2float_rn(a.w) * rs * cs.w + b[3]};
    #pragma unroll
    for (int e = 0; e < 4; e++) v[e] = ${activationExpression(spec.activation, 'v[e]')};
    store_floats<T, 4>(out + (size_t)m * N + n, v, 4);
  }
}
`;
  return { name, source, gridDependencyWait: true };
}

export function int8Dequantize(host: KernelHost, args: Int8DequantizeArgs): void {
  const c = new OpCheck('int8Dequantize', 'cuda');
  const { acc, rowScales, colScales, out, bias, activation, M, N } = checkInt8Dequantize(c, args);
  if (N % 4 !== 0) c.fail(`N = ${N} must be a multiple of 4 (4 columns per thread; the int8 GEMM requires it too)`);
  if (M === 0 || N === 0) return;
  const pointers = [devicePtr(c, 'acc', acc), devicePtr(c, 'colScales', colScales), devicePtr(c, 'out', out), ...(bias ? [devicePtr(c, 'bias', bias)] : [])];
  const dtype = out.dtype as FloatDType;
  if (pointers.some((p, i) => p % BigInt(i < 2 ? 16 : 4 * byteSize(dtype)) !== 0n)) {
    c.fail(`'acc' and 'colScales' must be 16-byte aligned, 'out' and 'bias' aligned to 4 elements`);
  }
  const spec: Int8DequantizeSpec = { dtype, bias: bias !== undefined, activation: activation ?? 'none' };
  host.kernel(int8DequantizeKey(spec), () => int8DequantizeSource(spec)).launch(
    { grid: [Math.ceil(N / 4 / DEQUANT_THREADS), Math.min(M, MAX_GRID_Y)], block: DEQUANT_THREADS },
    [arg.ptr(pointers[0]!), arg.ptr(devicePtr(c, 'rowScales', rowScales)), arg.ptr(pointers[1]!), arg.ptr(bias ? pointers[3]! : 0n), arg.ptr(pointers[2]!), arg.i32(M), arg.i32(N)]);
}

/** Each dtype at full and scalar width; the epilogue with and without bias and activations. */
export function catalog(): KernelSource[] {
  const out: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    out.push(int8QuantizeRowsSource({ dtype, K: 4096, vec: 16 / byteSize(dtype) }));
    out.push(int8DequantizeSource({ dtype, bias: true, activation: 'none' }));
  }
  out.push(int8QuantizeRowsSource({ dtype: 'bf16', K: 771, vec: 1 }));
  out.push(int8DequantizeSource({ dtype: 'bf16', bias: false, activation: 'none' }));
  out.push(int8DequantizeSource({ dtype: 'f16', bias: true, activation: 'gelu_tanh' }));
  out.push(int8DequantizeSource({ dtype: 'f32', bias: true, activation: 'silu' }));
  return out;
}
