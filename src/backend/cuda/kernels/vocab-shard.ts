// Cross-entropy over a vocabulary split across tensor-parallel ranks (Megatron's vocab-parallel loss):
// the three forward steps around the two all-reduces, and the backward (backend.ts: VocabShard*).
//
// Math (Vl = this rank's columns, ids [vocabStart, vocabStart + Vl); the first `classes` are real):
//   max       rowMax = max_{j<classes} z_j                                     (−∞ without classes)
//   sums      with the global M: Σ_{j<classes} exp(z_j − M), z_(t − vocabStart) when owned else 0, Σ z_j
//   loss      lse = M + ln S;  loss = (1−ε)·(lse − z_t) + ε·(lse − Σz / C)      (f32, per row)
//   backward  dz_j = gradScale·(exp(z_j − lse) − (1−ε)·[vocabStart + j = t] − ε/C) for j < classes,
//             0 for padded columns; ignored rows zeros; a target outside [0, C) NaN over the classes
//
// Thread mapping: max, sums and backward give each row one block of THREADS threads striding over its
// columns with scalar (coalesced) loads, then block reductions (device-lib); the loss is a grid-stride
// loop over rows. Written for clarity first: the shard's logits are read twice forward (max, sums) and
// once backward, where the single-GPU cross-entropy reads them once (online max) — vectorised 16-byte
// loads are the next step once a GPU run measures them.
// Precision: f32 arithmetic with accurate expf/logf; logits f32, f16 or bf16; every statistic f32.
// Bytes per logit (s = sizeof(dtype)): max s (classes only), sums s, backward 2s (Vl columns); per
// row: max 4, sums 16 + s, loss 24, backward 8.

import type { VocabShardCrossEntropyBackwardArgs, VocabShardLossArgs, VocabShardMaxArgs, VocabShardSumsArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { FLOAT_DTYPES } from '../../../dtype.js';
import { checkVocabShardCrossEntropyBackward, checkVocabShardLoss, checkVocabShardMax, checkVocabShardSums } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

/** Threads of the block that owns one row. */
const THREADS = 256;
/** Threads per block of the per-row loss loop. */
const LOSS_THREADS = 256;

export type VocabShardKernel = 'max' | 'sums' | 'backward';

export function vocabShardKey(kernel: VocabShardKernel, dtype: FloatDType): string {
  return `vocab_shard_${kernel}.${dtype}.t${THREADS}`;
}

export const VOCAB_SHARD_LOSS_KEY = `vocab_shard_loss.t${LOSS_THREADS}`;

function preamble(dtype: FloatDType): string {
  return String.raw`${DEVICE_LIB}
${typedefLine('T', dtype)}
${constants({ THREADS })}
${launchBoundsMacro(THREADS)}
__device__ __forceinline__ float vs_neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float vs_nan() { return __int_as_float(0x7fffffff); }
`;
}

export function vocabShardSource(kernel: VocabShardKernel, dtype: FloatDType): KernelSource {
  const name = kernelIdentifier(vocabShardKey(kernel, dtype));
  const bodies: Record<VocabShardKernel, string> = {
    max: String.raw`
extern "C" __global__ void KERNEL_BOUNDS ${name}(const T* __restrict__ logits, float* __restrict__ row_max, int vl, int classes) {
  __shared__ float buf[THREADS / 32];
  const long long row = blockIdx.x;
  const T* z = logits + row * vl;
  float m = vs_neg_inf();
  for (int j = threadIdx.x; j < classes; j += THREADS) m = fmaxf(m, to_float(z[j]));
  m = block_max(m, buf);
  if (threadIdx.x == 0) row_max[row] = m;
}
`,
    sums: String.raw`
// sums [3, rows]: Σ exp(z − M), the owned target logit (or 0), Σ z.
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* __restrict__ logits, const int* __restrict__ targets, const float* __restrict__ row_max, float* __restrict__ sums,
    int rows, int vl, int classes, int vocab_start) {
  __shared__ float buf[THREADS / 32];
  const long long row = blockIdx.x;
  const T* z = logits + row * vl;
  const float m = row_max[row];
  float sum_exp = 0.f, sum_z = 0.f;
  for (int j = threadIdx.x; j < classes; j += THREADS) {
    const float v = to_float(z[j]);
    sum_exp += expf(v - m);
    sum_z += v;
  }
  sum_exp = block_sum(sum_exp, buf);
  sum_z = block_sum(sum_z, buf);
  if (threadIdx.x != 0) return;
  const int local = targets[row] - vocab_start;
  sums[row] = sum_exp;
  sums[rows + row] = local >= 0 && local < classes ? to_float(z[local]) : 0.f;
  sums[2 * rows + row] = sum_z;
}
`,
    backward: String.raw`
// logits and dlogits are not __restrict__: the gradient may overwrite the logits in place (each
// element is read, then written, by the same thread).
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* logits, const int* __restrict__ targets, const float* __restrict__ lse, T* dlogits,
    int vl, int classes, int vocab_start, int total_classes, float grad_scale, float smoothing, int ignore_enabled, int ignore_index) {
  const long long row = blockIdx.x;
  const T* z = logits + row * vl;
  T* d = dlogits + row * vl;
  const int target = targets[row];
  if (ignore_enabled && target == ignore_index) {
    for (int j = threadIdx.x; j < vl; j += THREADS) d[j] = from_float<T>(0.f);
    return;
  }
  if (target < 0 || target >= total_classes) {
    for (int j = threadIdx.x; j < vl; j += THREADS) d[j] = from_float<T>(j < classes ? vs_nan() : 0.f);
    return;
  }
  const float row_lse = lse[row];
  const int local = target - vocab_start;
  const float off = grad_scale * smoothing / (float)total_classes;
  const float on = grad_scale * (1.f - smoothing);
  for (int j = threadIdx.x; j < vl; j += THREADS) {
    float g = 0.f;
    if (j < classes) g = grad_scale * expf(to_float(z[j]) - row_lse) - off - (j == local ? on : 0.f);
    d[j] = from_float<T>(g);
  }
}
`,
  };
  return { name, source: preamble(dtype) + bodies[kernel] };
}

export function vocabShardLossSource(): KernelSource {
  const name = kernelIdentifier(VOCAB_SHARD_LOSS_KEY);
  const source = String.raw`${DEVICE_LIB}
${constants({ LOSS_THREADS })}
extern "C" __global__ void __launch_bounds__(LOSS_THREADS) ${name}(
    const float* __restrict__ row_max, const float* __restrict__ sums, const int* __restrict__ targets,
    float* __restrict__ loss, float* __restrict__ lse, int rows, int total_classes, float smoothing, int ignore_enabled, int ignore_index) {
  for (int r = blockIdx.x * LOSS_THREADS + threadIdx.x; r < rows; r += gridDim.x * LOSS_THREADS) {
    const float row_lse = row_max[r] + logf(sums[r]);
    lse[r] = row_lse;
    const int t = targets[r];
    float l;
    if (ignore_enabled && t == ignore_index) l = 0.f;
    else if (t < 0 || t >= total_classes) l = __int_as_float(0x7fffffff);
    else l = (1.f - smoothing) * (row_lse - sums[rows + r]) + smoothing * (row_lse - sums[2 * rows + r] / (float)total_classes);
    loss[r] = l;
  }
}
`;
  return { name, source };
}

// ---- launchers ----------------------------------------------------------------------------------------

/** Without an ignoreIndex no row is ignored: the kernels get a flag rather than a sentinel value. */
function ignoreRule(ignoreIndex: number | undefined): { enabled: 0 | 1; index: number } {
  return ignoreIndex === undefined ? { enabled: 0, index: 0 } : { enabled: 1, index: ignoreIndex };
}

export function vocabShardMax(host: KernelHost, args: VocabShardMaxArgs): void {
  const c = new OpCheck('vocabShardMax', 'cuda');
  const { logits, rowMax, classes, rows, Vl } = checkVocabShardMax(c, args);
  const ptrs = [devicePtr(c, 'logits', logits), devicePtr(c, 'rowMax', rowMax)];
  if (rows === 0) return;
  const dtype = logits.dtype as FloatDType;
  host.kernel(vocabShardKey('max', dtype), () => vocabShardSource('max', dtype)).launch(
    { grid: rows, block: THREADS }, [arg.ptr(ptrs[0]!), arg.ptr(ptrs[1]!), arg.i32(Vl), arg.i32(classes)],
  );
}

export function vocabShardSums(host: KernelHost, args: VocabShardSumsArgs): void {
  const c = new OpCheck('vocabShardSums', 'cuda');
  const { logits, targets, rowMax, sums, classes, vocabStart, rows, Vl } = checkVocabShardSums(c, args);
  const ptrs = [devicePtr(c, 'logits', logits), devicePtr(c, 'targets', targets), devicePtr(c, 'rowMax', rowMax), devicePtr(c, 'sums', sums)];
  if (rows === 0) return;
  const dtype = logits.dtype as FloatDType;
  host.kernel(vocabShardKey('sums', dtype), () => vocabShardSource('sums', dtype)).launch(
    { grid: rows, block: THREADS },
    [...ptrs.map((p) => arg.ptr(p)), arg.i32(rows), arg.i32(Vl), arg.i32(classes), arg.i32(vocabStart)],
  );
}

export function vocabShardLoss(host: KernelHost, args: VocabShardLossArgs): void {
  const c = new OpCheck('vocabShardLoss', 'cuda');
  const { rowMax, sums, targets, loss, lse, labelSmoothing, ignoreIndex, totalClasses, rows } = checkVocabShardLoss(c, args);
  const ptrs = [devicePtr(c, 'rowMax', rowMax), devicePtr(c, 'sums', sums), devicePtr(c, 'targets', targets), devicePtr(c, 'loss', loss), devicePtr(c, 'lse', lse)];
  if (rows === 0) return;
  const ignore = ignoreRule(ignoreIndex);
  host.kernel(VOCAB_SHARD_LOSS_KEY, () => vocabShardLossSource()).launch(
    { grid: Math.min(Math.ceil(rows / LOSS_THREADS), 4 * host.multiProcessorCount), block: LOSS_THREADS },
    [...ptrs.map((p) => arg.ptr(p)), arg.i32(rows), arg.i32(totalClasses), arg.f32(labelSmoothing), arg.i32(ignore.enabled), arg.i32(ignore.index)],
  );
}

export function vocabShardCrossEntropyBackward(host: KernelHost, args: VocabShardCrossEntropyBackwardArgs): void {
  const c = new OpCheck('vocabShardCrossEntropyBackward', 'cuda');
  const { logits, targets, lse, dLogits, classes, vocabStart, gradScale, labelSmoothing, ignoreIndex, totalClasses, rows, Vl } = checkVocabShardCrossEntropyBackward(c, args);
  const ptrs = [devicePtr(c, 'logits', logits), devicePtr(c, 'targets', targets), devicePtr(c, 'lse', lse), devicePtr(c, 'dLogits', dLogits)];
  if (rows === 0) return;
  const dtype = logits.dtype as FloatDType;
  const ignore = ignoreRule(ignoreIndex);
  host.kernel(vocabShardKey('backward', dtype), () => vocabShardSource('backward', dtype)).launch(
    { grid: rows, block: THREADS },
    [
      ...ptrs.map((p) => arg.ptr(p)), arg.i32(Vl), arg.i32(classes), arg.i32(vocabStart), arg.i32(totalClasses),
      arg.f32(gradScale), arg.f32(labelSmoothing), arg.i32(ignore.enabled), arg.i32(ignore.index),
    ],
  );
}

// ---- catalog -------------------------------------------------------------------------------------------

/** Every kernel in every float dtype, and the loss. */
export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [vocabShardLossSource()];
  for (const dtype of FLOAT_DTYPES) for (const kernel of ['max', 'sums', 'backward'] as const) sources.push(vocabShardSource(kernel, dtype));
  return sources;
}
