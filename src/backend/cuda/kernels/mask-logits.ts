// maskLogits and biasLogits (backend.ts has the contracts): the listed rows' classes whose mask bit is 0 set to
// −∞ — constrained decoding's allowed tokens — and the API's logit_bias added to their listed tokens, before the
// rows are sampled again (serve/engine.ts). biasLogits: a block a row, a thread a listed token.
//
// Thread mapping: a thread a class, blocks along the row (gridDim.x) and a grid row a listed row (gridDim.y).
// The 32 lanes of a warp read the same mask word (one transaction, broadcast) and write 32 consecutive logits
// (coalesced); a class whose bit is 1 is not touched. Bytes: the masks (V/8 a row) and the logits written.

import type { BiasLogitsArgs, MaskLogitsArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { checkBiasLogits, checkMaskLogits } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { devicePtr, kernelIdentifier } from './row-kernels.js';

const BLOCK_THREADS = 256;

function maskLogitsKey(dtype: FloatDType): string {
  return `mask_logits.${dtype}`;
}

export function maskLogitsSource(dtype: FloatDType): KernelSource {
  const name = kernelIdentifier(maskLogitsKey(dtype));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', dtype)}

// logits [n, Vp], rows [m], masks [m, words]; grid (⌈classes / ${BLOCK_THREADS}⌉, m).
extern "C" __global__ void __launch_bounds__(${BLOCK_THREADS}) ${name}(
    T* __restrict__ logits, const int* __restrict__ rows, const u32* __restrict__ masks, int Vp, int classes, int words) {
  const int j = blockIdx.x * ${BLOCK_THREADS} + threadIdx.x;
  if (j >= classes) return;
  const int i = blockIdx.y;
  const u32 word = masks[(u64)i * words + (j >> 5)];
  if (((word >> (j & 31)) & 1u) == 0u) logits[(u64)rows[i] * Vp + j] = from_float<T>(__int_as_float(0xff800000));
}
`;
  return { name, source };
}

export function maskLogits(host: KernelHost, args: MaskLogitsArgs): void {
  const c = new OpCheck('maskLogits', 'cuda');
  const { logits, rows, masks, classes, words, Vp, m } = checkMaskLogits(c, args);
  if (m === 0) return;
  const dtype = logits.dtype as FloatDType;
  host.kernel(maskLogitsKey(dtype), () => maskLogitsSource(dtype)).launch(
    { grid: [Math.ceil(classes / BLOCK_THREADS), m, 1], block: BLOCK_THREADS },
    [arg.ptr(devicePtr(c, 'logits', logits)), arg.ptr(devicePtr(c, 'rows', rows)), arg.ptr(devicePtr(c, 'masks', masks)), arg.i32(Vp), arg.i32(classes), arg.i32(words)],
  );
}

function biasLogitsKey(dtype: FloatDType): string {
  return `bias_logits.${dtype}`;
}

export function biasLogitsSource(dtype: FloatDType): KernelSource {
  const name = kernelIdentifier(biasLogitsKey(dtype));
  const source = String.raw`${DEVICE_LIB}
${typedefLine('T', dtype)}

// logits [n, Vp], rows [m], tokens [m, k] (−1: none), biases [m, k] f32; grid m blocks.
extern "C" __global__ void __launch_bounds__(${BLOCK_THREADS}) ${name}(
    T* __restrict__ logits, const int* __restrict__ rows, const int* __restrict__ tokens, const float* __restrict__ biases, int Vp, int k) {
  const u64 row = (u64)rows[blockIdx.x] * Vp, base = (u64)blockIdx.x * k;
  for (int t = threadIdx.x; t < k; t += ${BLOCK_THREADS}) {
    const int token = tokens[base + t];
    if (token >= 0) logits[row + token] = from_float<T>(__fadd_rn(to_float(logits[row + token]), biases[base + t]));
  }
}
`;
  return { name, source };
}

export function biasLogits(host: KernelHost, args: BiasLogitsArgs): void {
  const c = new OpCheck('biasLogits', 'cuda');
  const { logits, rows, tokens, biases, Vp, m, k } = checkBiasLogits(c, args);
  if (m === 0 || k === 0) return;
  const dtype = logits.dtype as FloatDType;
  host.kernel(biasLogitsKey(dtype), () => biasLogitsSource(dtype)).launch(
    { grid: m, block: BLOCK_THREADS },
    [arg.ptr(devicePtr(c, 'logits', logits)), arg.ptr(devicePtr(c, 'rows', rows)), arg.ptr(devicePtr(c, 'tokens', tokens)), arg.ptr(devicePtr(c, 'biases', biases)), arg.i32(Vp), arg.i32(k)],
  );
}

export function catalog(): KernelSource[] {
  return (['f32', 'f16', 'bf16'] as const).flatMap((dtype) => [maskLogitsSource(dtype), biasLogitsSource(dtype)]);
}
