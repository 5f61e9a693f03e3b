// Cross-entropy over logits [rows, V] with integer targets, forward (loss, log-sum-exp) and backward.
// Only the first C ≤ V columns are classes (C = `classes`, default V); columns [C, V) are padding
// (llm.c's padded vocabulary: V = Vp, a multiple of 64, keeps every row 16-byte aligned).
//
// Math (backend.ts has the contract), ε = label smoothing, t = target, sums over j < C:
//   forward   lse = log Σ_j exp z_j,  loss = (1−ε)·(lse − z_t) + ε·(lse − Σ_j z_j / C)
//             t == ignoreIndex → loss 0 (lse still written); t outside [0, C) otherwise → loss NaN.
//   backward  dLogits_j = gradScale·(exp(z_j − lse) − (1−ε)·[j = t] − ε/C) for j < C, 0 for j ≥ C;
//             ignored rows → zeros; an out-of-range target → NaN over [0, C) (the forward's NaN loss,
//             carried to the gradient), zeros over the padding.
//
// One block per row. The forward reads the row once: each thread keeps an online state
// (max m, Σ exp2(z·log2 e − m)) over its elements, rescaled once per chunk of LOOP_UNROLL vectors
// (one FFMA and one SFU exp2 per element), with Σz alongside when smoothing is on; the block merges
// the states (block_max_sum in device-lib) and thread 0 writes loss and lse.
// Rows start at any element (V = 50257 is odd; with a padded V every row is aligned), so a row is
// read as single elements up to the first 16-byte boundary, whole 16-byte vectors, then single
// elements again. The forward reads [0, C) only: the padding is never loaded. The backward walks
// the whole row [0, V) so that the padding gets its zeros, masking only the vector that straddles C.
// The backward splits rows by the logits address; dLogits shares those vectors only when it sits at
// the same distance from a boundary (always when in place), else the vector narrows
// (planCrossEntropyBackward). dLogits may alias logits: each element is read, then written by the
// same thread.
//
// Fused (crossEntropyForward with dLogits; LightSeq's fused cross-entropy): when a backward follows,
// the forward kernel stages the row's classes in shared memory as it reads them, and once the block
// has the lse it writes the backward's gradient from that copy — the logits cross HBM once instead of
// twice (GPT-2's 16384 × 50304 bf16 logits: 1.65 GB less per step). The gradient uses the f32 lse the
// block computed, which is what the backward kernel would read from lse[row]: the same bits. Rows whose
// classes do not fit in shared memory (Llama's 128256 × 2 bytes) run the two kernels.
//
// Precision: f32 arithmetic and outputs (loss, lse); logits/dLogits f32, f16 or bf16.
// Measured on an H200 (CUDA graphs over rotating buffers, against a copy kernel moving the same
// bytes; 2026-11-29): forward bf16 16384×50257 83% (75% with smoothing: bf16 holds twice the
// elements per byte, so the per-element exp and adds show), 4096×128256 100%, f32 100%; backward
// 93–105%. A few rows (decoding) use only as many SMs as rows.
// Bytes per logit (s = sizeof(dtype)), for the roofline:
//   forward:  read s per class (C per row); per row read 4 (target) + s (z_t), write 8 (loss, lse).
//   backward: read s, write s per column (V per row; ignored rows: write s only); per row read 8
//             (target, lse).

import type { CrossEntropyBackwardArgs, CrossEntropyForwardArgs } from '../../backend.js';
import type { FloatDType } from '../../../dtype.js';
import { byteSize, FLOAT_DTYPES } from '../../../dtype.js';
import { checkCrossEntropyBackward, checkCrossEntropyForward } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB, typedefLine } from './device-lib.js';
import { alignedVectorWidth, constants, devicePtr, kernelIdentifier, launchBoundsMacro } from './row-kernels.js';

// ---- specs -------------------------------------------------------------------------------------------

export interface CrossEntropySpec {
  readonly dtype: FloatDType;
  /** V, the logits' last dimension and row stride (Vp when padded), baked in. */
  readonly vocab: number;
  /** C ≤ V, the real classes, baked in; columns [C, V) are padding. */
  readonly classes: number;
  /** Elements per vector access in the row's aligned middle. */
  readonly vec: number;
  /** Threads of the block that owns a row. */
  readonly threads: number;
  /** Label smoothing on: the forward also sums z; the backward subtracts ε/V everywhere. */
  readonly smoothing: boolean;
  /**
   * Forward only: also write the gradient (the backward's formula, from this block's lse) from a copy
   * of the row staged in shared memory, so the logits are read once for loss and gradient.
   */
  readonly fused?: boolean;
}

/** The width part of a key: `v<V>`, with `.c<C>` added only when padded (unpadded keys are unchanged). */
function widthKey(s: CrossEntropySpec): string {
  return `v${s.vocab}${s.classes !== s.vocab ? `.c${s.classes}` : ''}`;
}

export function crossEntropyForwardKey(s: CrossEntropySpec): string {
  return `cross_entropy_forward.${s.dtype}.${widthKey(s)}.x${s.vec}.t${s.threads}${s.smoothing ? '.smooth' : ''}${s.fused ? '.fused' : ''}`;
}

/** Dynamic shared memory of the fused forward: the row's classes at their global alignment (+ one vector). */
export function crossEntropyFusedSharedBytes(s: CrossEntropySpec): number {
  return Math.ceil(((s.classes + s.vec) * byteSize(s.dtype)) / 16) * 16;
}

export function crossEntropyBackwardKey(s: CrossEntropySpec): string {
  return `cross_entropy_backward.${s.dtype}.${widthKey(s)}.x${s.vec}.t${s.threads}${s.smoothing ? '.smooth' : ''}`;
}

// ---- planning ------------------------------------------------------------------------------------------

/** Vectors each thread loads before using any of them. */
const LOOP_UNROLL = 4;

/** Enough threads that each loops a few times over its chunks, at most 512 (several blocks per SM). */
export function crossEntropyThreads(dtype: FloatDType, vocab: number): number {
  const vectors = Math.ceil(vocab * byteSize(dtype) / 16);
  let threads = 64;
  while (threads < 512 && threads * LOOP_UNROLL * 2 < vectors) threads *= 2;
  return threads;
}

/** vocab is the row width V (Vp when padded); classes the real class count C ≤ V (default V). */
export function planCrossEntropyForward(dtype: FloatDType, vocab: number, smoothing: boolean, classes = vocab): CrossEntropySpec {
  return { dtype, vocab, classes, vec: 16 / byteSize(dtype), threads: crossEntropyThreads(dtype, vocab), smoothing };
}

/**
 * The backward peels each row by the logits address; dLogits can share its vectors only when it sits
 * at the same offset from a vector boundary, so the vector is the widest one that divides the
 * distance between the two tensors.
 */
export function planCrossEntropyBackward(dtype: FloatDType, vocab: number, smoothing: boolean, logits: bigint, dLogits: bigint, classes = vocab): CrossEntropySpec {
  const distance = logits > dLogits ? logits - dLogits : dLogits - logits;
  return { dtype, vocab, classes, vec: alignedVectorWidth(dtype, [distance]), threads: crossEntropyThreads(dtype, vocab), smoothing };
}

// ---- sources -----------------------------------------------------------------------------------------

function preamble(s: CrossEntropySpec): string {
  if (!(Number.isInteger(s.classes) && s.classes >= 1 && s.classes <= s.vocab)) {
    throw new Error(`internal: cross-entropy spec has classes ${s.classes} outside [1, ${s.vocab}]`);
  }
  return String.raw`${DEVICE_LIB}
${typedefLine('T', s.dtype)}
${constants({ V: s.vocab, C: s.classes, PADDED: s.classes < s.vocab, VEC: s.vec, THREADS: s.threads, LOOP_UNROLL, SMOOTHING: s.smoothing })}
${launchBoundsMacro(s.threads)}
constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// The first n elements of a row (rows are V apart; n = C or V) split into single elements
// [0, head), VEC-vectors [head, tail), singles [tail, n): head is the distance of the row start to
// the next VEC·sizeof(T) boundary.
struct RowSplit { int head, vectors, tail; };
__device__ __forceinline__ RowSplit split_row(const T* row, int n) {
  constexpr unsigned ALIGN = VEC * sizeof(T);
  const unsigned misalign = (unsigned)((unsigned long long)row % ALIGN);
  RowSplit s;
  s.head = min(n, (int)(((ALIGN - misalign) % ALIGN) / sizeof(T)));
  s.vectors = (n - s.head) / VEC;
  s.tail = s.head + s.vectors * VEC;
  return s;
}
`;
}

export function crossEntropyForwardSource(spec: CrossEntropySpec): KernelSource {
  const name = kernelIdentifier(crossEntropyForwardKey(spec));
  const source = preamble(spec) + String.raw`
// Adds one logit (already times log2 e) to an online (max, Σ exp2) state.
__device__ __forceinline__ void fold_one(float2& state, float v) {
  if (v > state.x) { state.y = state.y * exp2_fast(state.x - v) + 1.f; state.x = v; }
  else if (state.x != neg_inf()) state.y += exp2_fast(v - state.x);
}

// FUSED: logits and dlogits are not __restrict__ (the gradient may overwrite the logits in place).
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* ${spec.fused ? '' : '__restrict__ '}logits, const int* __restrict__ targets, float* __restrict__ loss, float* __restrict__ lse,
    float smoothing, int ignore_enabled, int ignore_index${spec.fused ? ', T* dlogits, float grad_scale' : ''}) {
  __shared__ float2 reduce_buf[THREADS / 32];
  const int row = blockIdx.x, t = threadIdx.x;
  const T* z = logits + (long long)row * V;
  const int target = targets[row];
  const bool target_valid = target >= 0 && target < C;
  // The target's logit, loaded early so its latency hides behind the row.
  const float z_target = t == 0 && target_valid ? to_float(z[target]) : 0.f;
  const RowSplit split = split_row(z, C);  // the classes only: padding is never read
${spec.fused ? String.raw`  // The row's classes in shared memory at the same offset from a 16-byte boundary as in global memory,
  // so the vectors of split_row are aligned there too.
  extern __shared__ __align__(16) unsigned char row_smem[];
  T* zs = reinterpret_cast<T*>(row_smem) + (unsigned)((unsigned long long)z % (VEC * sizeof(T))) / sizeof(T);
` : ''}
  float2 state = make_float2(neg_inf(), 0.f);  // (max·log2 e, Σ exp2(z·log2 e − max·log2 e))
  float sum_z = 0.f;
  if (t < split.head) {
    const float zv = to_float(z[t]);
    ${spec.fused ? 'zs[t] = z[t];' : ''}
    fold_one(state, zv * LOG2E);
    if (SMOOTHING) sum_z += zv;
  }
  for (int first = 0; first < split.vectors; first += THREADS * LOOP_UNROLL) {
    float v[LOOP_UNROLL][VEC];
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * THREADS + t;
      if (idx < split.vectors) {
        ${spec.fused ? String.raw`const Vec<T, VEC> raw = load_vec<T, VEC>(z + split.head + idx * VEC);
        store_vec<T, VEC>(zs + split.head + idx * VEC, raw);
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[u][i] = to_float(raw.v[i]);` : 'load_floats<T, VEC>(z + split.head + idx * VEC, v[u], VEC);'}
      } else {
        #pragma unroll
        for (int i = 0; i < VEC; i++) v[u][i] = neg_inf();
      }
    }
    float chunk_max = neg_inf();
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      #pragma unroll
      for (int i = 0; i < VEC; i++) chunk_max = fmaxf(chunk_max, v[u][i]);
      if (SMOOTHING && first + u * THREADS + t < split.vectors)
        #pragma unroll
        for (int i = 0; i < VEC; i++) sum_z += v[u][i];
    }
    const float chunk_max2 = chunk_max * LOG2E;
    if (chunk_max2 > state.x) { state.y *= exp2_fast(state.x - chunk_max2); state.x = chunk_max2; }
    if (state.x == neg_inf()) continue;  // nothing but −inf so far
    // One FFMA and one SFU op per element; a sum per vector keeps the adds off one dependency chain.
    float part[LOOP_UNROLL];
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      part[u] = 0.f;
      #pragma unroll
      for (int i = 0; i < VEC; i++) part[u] += exp2_fast(fmaf(v[u][i], LOG2E, -state.x));
    }
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) state.y += part[u];
  }
  if (t < C - split.tail) {
    const float zv = to_float(z[split.tail + t]);
    ${spec.fused ? 'zs[split.tail + t] = z[split.tail + t];' : ''}
    fold_one(state, zv * LOG2E);
    if (SMOOTHING) sum_z += zv;
  }

  state = block_max_sum(state, reduce_buf);  // (its barriers also publish the staged row)
  if (SMOOTHING) sum_z = block_sum(sum_z, reinterpret_cast<float*>(reduce_buf));
  const float row_lse = (state.x + log2f(state.y)) * 0.6931471805599453f;  // back from base 2
${spec.fused ? FUSED_GRADIENT : ''}
  if (t != 0) return;
  lse[row] = row_lse;
  float row_loss;
  if (ignore_enabled && target == ignore_index) row_loss = 0.f;
  else if (!target_valid) row_loss = __int_as_float(0x7fffffff);
  else {
    row_loss = row_lse - z_target;
    if (SMOOTHING) row_loss = (1.f - smoothing) * row_loss + smoothing * (row_lse - sum_z * (1.f / C));
  }
  loss[row] = row_loss;
}
`;
  return { name, source };
}

/**
 * The fused forward's gradient pass, after the block has the row's lse (every thread computes the same
 * f32 value crossEntropyBackward reads from lse[row], so the gradients are the same bits): the
 * backward kernel's formula over [0, V), the classes read from the staged row, the padding zeros.
 */
const FUSED_GRADIENT = String.raw`
  {
    T* d = dlogits + (long long)row * V;
    const bool ignored = ignore_enabled && target == ignore_index;
    const float lse2 = row_lse * LOG2E;
    const float off = SMOOTHING ? grad_scale * smoothing * (1.f / C) : 0.f;
    const float on = SMOOTHING ? grad_scale * (1.f - smoothing) : grad_scale;
    // Ignored rows: zeros; an out-of-range target: NaN over the classes (as the backward kernel).
    const float fill = ignored ? 0.f : __int_as_float(0x7fffffff);
    const bool plain = !ignored && target_valid;
    auto grad_at = [&](float zv, int j) {
      if (PADDED && j >= C) return 0.f;
      if (!plain) return fill;
      return grad_scale * exp2_fast(fmaf(zv, LOG2E, -lse2)) - off - (j == target ? on : 0.f);
    };
    // The split over the whole row [0, V): the same head as over [0, C), more vectors when padded.
    const RowSplit full = split_row(z, V);
    if (t < full.head) d[t] = from_float<T>(grad_at(to_float(zs[t]), t));
    for (int idx = t; idx < full.vectors; idx += THREADS) {
      const int j0 = full.head + idx * VEC;
      float g[VEC];
      if (j0 + VEC <= C) {
        const Vec<T, VEC> raw = load_vec<T, VEC>(zs + j0);
        #pragma unroll
        for (int i = 0; i < VEC; i++) g[i] = grad_at(to_float(raw.v[i]), j0 + i);
      } else {
        #pragma unroll
        for (int i = 0; i < VEC; i++) g[i] = grad_at(j0 + i < C ? to_float(zs[j0 + i]) : 0.f, j0 + i);
      }
      store_floats<T, VEC>(d + j0, g, VEC);
    }
    if (t < V - full.tail) {
      const int j = full.tail + t;
      d[j] = from_float<T>(grad_at(j < C ? to_float(zs[j]) : 0.f, j));
    }
  }
`;

export function crossEntropyBackwardSource(spec: CrossEntropySpec): KernelSource {
  const name = kernelIdentifier(crossEntropyBackwardKey(spec));
  const source = preamble(spec) + String.raw`
// logits and dlogits are not __restrict__: the gradient may overwrite the logits in place.
extern "C" __global__ void KERNEL_BOUNDS ${name}(
    const T* logits, const int* __restrict__ targets, const float* __restrict__ lse, T* dlogits,
    float grad_scale, float smoothing, int ignore_enabled, int ignore_index) {
  const int row = blockIdx.x, t = threadIdx.x;
  const T* z = logits + (long long)row * V;
  T* d = dlogits + (long long)row * V;
  const int target = targets[row];
  const RowSplit split = split_row(z, V);  // the whole row: padded columns [C, V) get zeros

  const bool ignored = ignore_enabled && target == ignore_index;
  if (ignored || target < 0 || target >= C) {
    // Ignored: zeros. Out of range: NaN over the classes, like the forward's loss, and zeros over
    // the padding. No logit needs reading.
    const float fill = ignored ? 0.f : __int_as_float(0x7fffffff);
    auto fill_at = [&](int j) { return PADDED && j >= C ? 0.f : fill; };
    if (t < split.head) d[t] = from_float<T>(fill_at(t));
    for (int idx = t; idx < split.vectors; idx += THREADS) {
      const int j0 = split.head + idx * VEC;
      float f[VEC];
      #pragma unroll
      for (int i = 0; i < VEC; i++) f[i] = fill_at(j0 + i);
      store_floats<T, VEC>(d + j0, f, VEC);
    }
    if (t < V - split.tail) d[split.tail + t] = from_float<T>(fill_at(split.tail + t));
    return;
  }

  const float lse2 = lse[row] * LOG2E;
  const float off = SMOOTHING ? grad_scale * smoothing * (1.f / C) : 0.f;
  const float on = SMOOTHING ? grad_scale * (1.f - smoothing) : grad_scale;
  // dLogits_j for one class j < C.
  auto grad = [&](float zv, int j) {
    return grad_scale * exp2_fast(fmaf(zv, LOG2E, -lse2)) - off - (j == target ? on : 0.f);
  };
  // dLogits_j for any column j: exactly 0 in the padding.
  auto grad_at = [&](float zv, int j) { return PADDED && j >= C ? 0.f : grad(zv, j); };

  if (t < split.head) d[t] = from_float<T>(grad_at(to_float(z[t]), t));
  for (int first = 0; first < split.vectors; first += THREADS * LOOP_UNROLL) {
    float v[LOOP_UNROLL][VEC];
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * THREADS + t;
      if (idx < split.vectors) load_floats<T, VEC>(z + split.head + idx * VEC, v[u], VEC);
    }
    #pragma unroll
    for (int u = 0; u < LOOP_UNROLL; u++) {
      const int idx = first + u * THREADS + t;
      if (idx >= split.vectors) continue;
      const int j0 = split.head + idx * VEC;
      #pragma unroll
      for (int i = 0; i < VEC; i++) v[u][i] = grad(v[u][i], j0 + i);
      if (PADDED && j0 + VEC > C)  // only the vectors at or past C: the rest stay unmasked
        #pragma unroll
        for (int i = 0; i < VEC; i++) if (j0 + i >= C) v[u][i] = 0.f;
      store_floats<T, VEC>(d + j0, v[u], VEC);
    }
  }
  if (t < V - split.tail) {
    const int j = split.tail + t;
    d[j] = from_float<T>(grad_at(to_float(z[j]), j));
  }
}
`;
  return { name, source };
}

// ---- launchers ----------------------------------------------------------------------------------------

/** Without an ignoreIndex no row is ignored, so the kernel gets a flag rather than a sentinel value. */
interface IgnoreRule { enabled: 0 | 1; index: number }

function ignoreRule(ignoreIndex: number | undefined): IgnoreRule {
  return ignoreIndex === undefined ? { enabled: 0, index: 0 } : { enabled: 1, index: ignoreIndex };
}

export function crossEntropyForward(host: KernelHost, args: CrossEntropyForwardArgs): void {
  const check = new OpCheck('crossEntropyForward', 'cuda');
  const { logits, targets, loss, lse, labelSmoothing: smoothing, ignoreIndex, rows, V: vocab, classes, gradient } = checkCrossEntropyForward(check, args);
  const ignore = ignoreRule(ignoreIndex);
  if (rows === 0) return;

  const logitsPtr = devicePtr(check, 'logits', logits);
  const plain = planCrossEntropyForward(logits.dtype as FloatDType, vocab, smoothing > 0, classes);
  const dLogitsPtr = gradient ? devicePtr(check, 'dLogits', gradient.dLogits) : 0n;
  // Fused where the row's classes fit in shared memory and dLogits' rows share the logits' vector
  // boundaries (always in place); otherwise the forward, then the backward kernel.
  const fusedSpec: CrossEntropySpec = { ...plain, fused: true };
  const fused = gradient !== undefined && crossEntropyFusedSharedBytes(fusedSpec) <= host.maxSharedBytesPerBlock &&
    (dLogitsPtr - logitsPtr) % 16n === 0n;
  const spec = fused ? fusedSpec : plain;
  const kernel = host.kernel(crossEntropyForwardKey(spec), () => crossEntropyForwardSource(spec));
  kernel.launch(
    { grid: rows, block: spec.threads, ...(fused ? { sharedBytes: crossEntropyFusedSharedBytes(spec) } : {}) },
    [
      arg.ptr(logitsPtr), arg.ptr(devicePtr(check, 'targets', targets)),
      arg.ptr(devicePtr(check, 'loss', loss)), arg.ptr(devicePtr(check, 'lse', lse)),
      arg.f32(smoothing), arg.i32(ignore.enabled), arg.i32(ignore.index),
      ...(fused ? [arg.ptr(dLogitsPtr), arg.f32(gradient!.gradScale)] : []),
    ],
  );
  if (gradient && !fused) {
    crossEntropyBackward(host, {
      logits: args.logits, targets: args.targets, lse: args.lse, dLogits: gradient.dLogits, gradScale: gradient.gradScale,
      ...(args.labelSmoothing !== undefined ? { labelSmoothing: args.labelSmoothing } : {}),
      ...(args.ignoreIndex !== undefined ? { ignoreIndex: args.ignoreIndex } : {}),
      ...(args.classes !== undefined ? { classes: args.classes } : {}),
    });
  }
}

export function crossEntropyBackward(host: KernelHost, args: CrossEntropyBackwardArgs): void {
  const check = new OpCheck('crossEntropyBackward', 'cuda');
  const { logits, targets, lse, dLogits, gradScale, labelSmoothing: smoothing, ignoreIndex, rows, V: vocab, classes } = checkCrossEntropyBackward(check, args);
  const ignore = ignoreRule(ignoreIndex);
  if (rows === 0) return;

  const logitsPtr = devicePtr(check, 'logits', logits), dLogitsPtr = devicePtr(check, 'dLogits', dLogits);
  const spec = planCrossEntropyBackward(logits.dtype as FloatDType, vocab, smoothing > 0, logitsPtr, dLogitsPtr, classes);
  const kernel = host.kernel(crossEntropyBackwardKey(spec), () => crossEntropyBackwardSource(spec));
  kernel.launch(
    { grid: rows, block: spec.threads },
    [
      arg.ptr(logitsPtr), arg.ptr(devicePtr(check, 'targets', targets)), arg.ptr(devicePtr(check, 'lse', lse)),
      arg.ptr(dLogitsPtr), arg.f32(gradScale), arg.f32(smoothing), arg.i32(ignore.enabled), arg.i32(ignore.index),
    ],
  );
}

// ---- catalog -------------------------------------------------------------------------------------------

export function catalog(): KernelSource[] {
  const sources: KernelSource[] = [];
  for (const dtype of FLOAT_DTYPES) {
    for (const [vocab, smoothing] of [[50257, false], [128256, true], [1000, true], [30522, false]] as const) {
      const forward = planCrossEntropyForward(dtype, vocab, smoothing);
      sources.push(crossEntropyForwardSource(forward));
      sources.push(crossEntropyBackwardSource(forward));
    }
    // Padded vocabularies (llm.c's padded_vocab_size): GPT-2's 50257 in 50304 columns, 1001 in 1024.
    for (const [vocab, classes, smoothing] of [[50304, 50257, false], [50304, 50257, true], [1024, 1001, true]] as const) {
      const forward = planCrossEntropyForward(dtype, vocab, smoothing, classes);
      sources.push(crossEntropyForwardSource(forward));
      sources.push(crossEntropyBackwardSource(forward));
    }
    // Fused forward + gradient (LightSeq's fused cross-entropy): GPT-2's padded vocabulary, BERT's, a small smoothed one.
    for (const [vocab, classes, smoothing] of [[50304, 50257, false], [30522, 30522, false], [1024, 1001, true]] as const) {
      sources.push(crossEntropyForwardSource({ ...planCrossEntropyForward(dtype, vocab, smoothing, classes), fused: true }));
    }
    // dLogits at a different misalignment from logits: scalar accesses.
    sources.push(crossEntropyBackwardSource(planCrossEntropyBackward(dtype, 50257, true, 0x1000n, 0x2002n)));
    sources.push(crossEntropyBackwardSource(planCrossEntropyBackward(dtype, 50304, false, 0x1000n, 0x2002n, 50257)));
  }
  return sources;
}
