// The cost model: for every Backend op and its actual arguments, the FLOPs it performs and the fewest
// bytes it must move, which place a measured launch on the roofline (profile/profiler.ts).
//
// Bytes: each input read once, each output written once, at its dtype's size (s = 4 for f32, 2 for
// f16/bf16, 1 for the u8 dropout masks, 4 for i32 tokens); accumulating outputs (`accumulate`, AdamW's
// state, embedding gradients) are read and written. Re-reads a kernel makes because a tile does not
// fit on chip are not counted: they are the kernel's inefficiency, which the roofline should show.
// Three refinements where the shapes alone say an input need not be read:
//  - causal masks: masked scores are never read (softmaxForward reads only visible entries of x;
//    flashAttention* count only visible (query, key) pairs). Padding masks (keyLengths) live on the
//    device, so the model counts every key up to Lk: an upper bound when sequences are padded.
//  - cross-entropy reads only the C real columns of padded logits (its backward writes all Vp).
//  - embeddingForward reads the position rows it uses once ([L, H]); token rows once per occurrence
//    (how many are distinct is on the device).
//
// FLOPs: multiply and add count one each (a fused multiply-add two); exp, log, sqrt, division and
// tanh count one each; integer work (the Philox draws of dropout and randomFill, index arithmetic,
// comparisons for max) is not a FLOP. Per element:
//   GEMM                    2·M·N·K per product (+ 2·M·N when beta ≠ 0), plus its epilogue:
//                           bias 1, relu_bias 2, gelu_bias 1 + ACT['gelu_tanh'], dgelu ACT' + 1,
//                           dgelu_bgrad ACT' + 2, bgrad_a 1 per element of op(a) (the row sums)
//   flash attention         forward 4·d per visible (query, key) pair (q·k and p·v; FA2's count, the
//                           softmax's exp/max/sum not included); backward 10·d per pair (recomputing
//                           S, then dP, dV, dQ, dK: 5 products of 2·d, FA2's 2.5× the forward). The
//                           SIMT kernels of kernels/attention.ts execute 14·d (S and dP in both of
//                           their kernels); the extra 40% is their overhead, not the op's work.
//   layerNormForward        7: Σx, x−μ, Σ(x−μ)² (2), ·rstd, ·γ+β (2); + 3 per row (μ, var, rsqrt)
//   layerNormBackward       13: x̂ (2), g = dOut·γ, Σg, Σg·x̂ (2), dX = rstd·(g − mean g − x̂·mean gx̂) (4),
//                           dγ += dOut·x̂ (2), dβ += dOut; + 1 with dResidual
//   rmsNorm forward/back    4 (Σx² (2), ·rstd, ·γ) + 2 per row / 9 (+1 with dResidual)
//   softmax forward         5 per visible score (scale, max, exp, Σ, ÷); backward 5 (y·dY Σ (2), −, ·y, ·scale)
//   cross-entropy           3 per real column (max, exp, Σ) forward, 3 backward (exp(z − lse), ·scale, −)
//   activations             ACTIVATION_FLOPS below (value) and ACTIVATION_GRAD_FLOPS (derivative)
//   AdamW                   ADAMW_FLOPS_PER_ELEMENT = 18 (g scaling 2, m 3, v 4, bias corrections 2,
//                           sqrt 1, +eps 1, ÷ 1, + weight decay 2, ·lr and update 2)
//   decode attention        4·d per (query head, cached key): keys 0..positions[b] as the op read them
//   int4Linear / int8Gemm / int8Linear   2·M·N·K (+ 2 per INT4 weight for its dequantization, once); integer
//                           multiply-adds count like float ones. Their roof is still the float GEMM's.
//   beam search             top-K 4 per candidate; self-/cross-attention as decode attention, over the
//                           positions (cache rows) and source lengths as the op read them
// Only the magnitude matters for the roofline: these ops are memory-bound by two orders of magnitude
// (a few FLOPs per 2–7 bytes against a ridge of ~200 FLOP/B), so ±30% in a count moves nothing.
//
// Every op of Backend has an entry (test/profile/cost.test.ts reads backend.ts and fails on a missing
// one); NON_KERNEL_MEMBERS lists the members that launch no device work (allocation, views, host
// transfers, graphs, markers), which the profiler passes through untimed.

import { isInt4Projection, normLinearProduct } from '../backend/backend.js';
import type {
  Activation, AdamWArgs, AttentionProjection, Backend, BatchedGemmArgs, DecodeAttentionArgs, FlashAttentionBackwardArgs, FlashAttentionForwardArgs, GemmArgs,
  GemmEpilogue, QkvRopeAppendArgs,
} from '../backend/backend.js';
import { byteSize } from '../dtype.js';
import type { HostArray, Tensor } from '../tensor.js';

export interface OpCost {
  /** Floating-point operations the op performs (see the counts above). */
  readonly flops: number;
  /** The fewest bytes the op must move between memory and the chip. */
  readonly bytes: number;
}

/** Backend members that launch no device work of their own: the profiler does not time them. */
export const NON_KERNEL_MEMBERS = [
  'name', 'description', 'empty', 'fromArray', 'upload', 'download', 'downloadLater', 'view', 'free', 'createArena',
  'memoryStats', 'resetPeakMemory', 'synchronize', 'captureGraph', 'mark', 'setGemmTuning', 'fusesMlp', 'argmaxInProduct', 'projectsAttention',
] as const;

export type NonKernelMember = (typeof NON_KERNEL_MEMBERS)[number];
/** Every Backend member that queues device work (a kernel, a cuBLASLt call, a device copy). */
export type KernelOp = Exclude<keyof Backend, NonKernelMember>;

/** The arguments of a Backend op. */
export type OpArgs<K extends KernelOp> = Backend[K] extends (...args: infer A) => unknown ? A : never;

/** Values of small device tensors (sequence lengths, positions) as the op read them. */
export type DeviceValues = Readonly<Record<string, HostArray>>;

export interface OpCostEntry<K extends KernelOp> {
  /** A matrix product (cuBLASLt, or our quantized GEMM kernels): the profiler's GEMM share. */
  readonly gemm?: boolean;
  /**
   * The cost from the arguments; where it depends on device values (`deviceInputs`), from `values`
   * when given, else an upper bound from the shapes.
   */
  cost(args: OpArgs<K>, values?: DeviceValues): OpCost;
  /** Small device tensors the exact cost depends on; the profiler copies them as the op runs. */
  deviceInputs?(args: OpArgs<K>): Readonly<Record<string, Tensor | undefined>>;
  /** What tells calls of this op apart in a table (sizes, flags); default: the first tensor's shape. */
  variant?(args: OpArgs<K>): string;
}

/** FLOPs of an activation's value, per element (tanh, erf, exp count one; see the header). */
export const ACTIVATION_FLOPS: Readonly<Record<Activation, number>> = {
  relu: 1, // max(x, 0)
  gelu: 5, // 0.5·x·(1 + erf(x/√2)): ·, erf, +1, ·x, ·0.5
  gelu_tanh: 9, // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): x², x³, fma (2), ·c, tanh, +1, ·x, ·0.5
  silu: 4, // x / (1 + exp(−x)): exp, +1, ÷ (and the sign)
};

/** FLOPs of an activation's derivative at the pre-activation, per element. */
export const ACTIVATION_GRAD_FLOPS: Readonly<Record<Activation, number>> = {
  relu: 1,
  gelu: 9, // Φ(x) + x·φ(x): erf, exp, x², and 6 multiplies and adds
  gelu_tanh: 14, // 0.5·(1 + t) + 0.5·x·(1 − t²)·c·(1 + 3·0.044715·x²), t as in the forward
  silu: 7, // σ·(1 + x·(1 − σ))
};

export const ADAMW_FLOPS_PER_ELEMENT = 18;
/** FLOPs per visible (query, key) pair per head dimension. */
export const FLASH_FORWARD_FLOPS = 4;
export const FLASH_BACKWARD_FLOPS = 10;

const bytesOf = (t: Tensor | undefined): number => (t ? t.numel * byteSize(t.dtype) : 0);
const dims = (t: Tensor): string => t.shape.join('×');
const shapeOf = (t: Tensor): string => `[${t.shape.join(', ')}]`;
/** Rows of a [rows, H] tensor (any leading dimensions) and H. */
const rowsOf = (t: Tensor): { rows: number; h: number } => {
  const h = t.shape[t.shape.length - 1] ?? 1;
  return { rows: h === 0 ? 0 : t.numel / h, h };
};

/** M, N, K and the batch of a (batched) GEMM, from the output and op(a). */
export function gemmDims(args: GemmArgs | BatchedGemmArgs, batched: boolean): { batch: number; m: number; n: number; k: number } {
  const { a, out } = args;
  if (batched) {
    const batch = out.shape[0]!, m = out.shape[1]!, n = out.shape[2]!;
    const k = args.transA ? a.shape[1]! : a.shape[2]!;
    return { batch, m, n, k };
  }
  const { rows: m, h: n } = rowsOf(out);
  return { batch: 1, m, n, k: m === 0 ? 0 : a.numel / m };
}

/** Epilogue FLOPs per output element (bgrad_a's row sums are counted per element of op(a)). */
function epilogueFlops(epilogue: GemmEpilogue): number {
  switch (epilogue) {
    case 'none': return 0;
    case 'bias': return 1;
    case 'relu_bias': return 1 + ACTIVATION_FLOPS.relu;
    case 'gelu_bias': return 1 + ACTIVATION_FLOPS.gelu_tanh;
    case 'dgelu': return ACTIVATION_GRAD_FLOPS.gelu_tanh + 1;
    case 'dgelu_bgrad': return ACTIVATION_GRAD_FLOPS.gelu_tanh + 2;
    case 'bgrad_a': return 0;
  }
}

function gemmCost(args: GemmArgs): OpCost {
  const { m, n, k } = gemmDims(args, false);
  const epilogue = args.epilogue ?? 'none';
  const beta = args.beta ?? 0;
  const flops = 2 * m * n * k + (beta !== 0 ? 2 * m * n : 0) + epilogueFlops(epilogue) * m * n + (epilogue === 'bgrad_a' ? m * k : 0);
  const bytes = bytesOf(args.a) + bytesOf(args.b) + bytesOf(args.out) * (beta !== 0 ? 2 : 1) +
    bytesOf(args.bias) + bytesOf(args.preActivation) + bytesOf(args.biasGrad);
  return { flops, bytes };
}

function batchedGemmCost(args: BatchedGemmArgs): OpCost {
  const { batch, m, n, k } = gemmDims(args, true);
  const beta = args.beta ?? 0;
  return {
    flops: batch * (2 * m * n * k + (beta !== 0 ? 2 * m * n : 0)),
    bytes: bytesOf(args.a) + bytesOf(args.b) + bytesOf(args.out) * (beta !== 0 ? 2 : 1),
  };
}

/**
 * (query, key) pairs a mask leaves visible in one [Lq, Lk] score matrix: query i sees keys j < limit
 * (a sequence's length; default Lk) and, if causal, j ≤ i + (Lk − Lq).
 */
export function visiblePairs(lq: number, lk: number, causal: boolean, limit = lk): number {
  const keys = Math.max(0, Math.min(lk, limit));
  if (!causal) return lq * keys;
  // Query i sees min(keys, max(0, i + Lk − Lq + 1)) keys: 0 before `first`, then a ramp, then `keys`.
  const offset = lk - lq;
  const first = Math.max(0, lq - lk); // queries before this one see no key
  const full = Math.min(lq, Math.max(first, keys - offset - 1)); // from here on the limit binds
  const ramp = full - first;
  return ramp * (first + offset + 1) + (ramp * (ramp - 1)) / 2 + (lq - full) * keys;
}

/** Σ over the score matrices [B, heads, Lq, Lk] of the visible pairs, with per-sequence lengths when known. */
function maskedPairs(b: number, heads: number, lq: number, lk: number, causal: boolean, lengths: HostArray | undefined): number {
  if (!lengths) return b * heads * visiblePairs(lq, lk, causal);
  let pairs = 0;
  for (let i = 0; i < b; i++) pairs += heads * visiblePairs(lq, lk, causal, lengths[i]!);
  return pairs;
}

function attentionPairs(args: FlashAttentionForwardArgs | FlashAttentionBackwardArgs, values: DeviceValues | undefined): { pairs: number; d: number } {
  const [b, hq, lq, d] = args.q.shape as [number, number, number, number];
  return { pairs: maskedPairs(b, hq, lq, keysOf(args), args.causal ?? false, values?.['keyLengths']), d };
}

/** Lk: the dense k's length, or the keys a paged call reads through its block table. */
function keysOf(args: FlashAttentionForwardArgs | FlashAttentionBackwardArgs): number {
  return 'paged' in args && args.paged?.keys !== undefined ? args.paged.keys : args.k.shape[2]!;
}

/**
 * Packed queries over paged keys: each sequence's visible pairs from its query rows and keys (causal: the
 * queries are its last keys); without the device values, every query row sees the table's whole capacity
 * (an upper bound).
 */
function packedPagedCost(a: FlashAttentionForwardArgs, values: DeviceValues | undefined): OpCost {
  const [tq, hq, d] = a.q.shape as [number, number, number];
  const [, hkv, bs] = a.k.shape as [number, number, number, number], s = byteSize(a.k.dtype);
  const capacity = a.paged!.blockTable.shape[1]! * bs;
  const cu = values?.['cuSeqlensQ'], keys = values?.['seqKeys'];
  let pairs = tq * capacity, keyRows = (a.paged!.seqKeys!.shape[0] ?? 0) * capacity;
  if (cu && keys) {
    pairs = 0;
    keyRows = 0;
    for (let b = 0; b < keys.length; b++) {
      const lq = Math.max(0, cu[b + 1]! - cu[b]!), lk = Math.max(0, keys[b]!);
      pairs += visiblePairs(lq, lk, a.causal ?? false);
      keyRows += lq > 0 ? lk : 0;
    }
  }
  return {
    flops: FLASH_FORWARD_FLOPS * d * hq * pairs,
    bytes: bytesOf(a.q) + bytesOf(a.out) + bytesOf(a.lse) + 2 * keyRows * hkv * d * s + bytesOf(a.cuSeqlensQ) + bytesOf(a.paged!.seqKeys),
  };
}

/** Bytes of k and v an attention call reads: the tensors, or (paged) only the rows its sequences use. */
function kvBytesOf(args: FlashAttentionForwardArgs): number {
  if (!args.paged) return bytesOf(args.k) + bytesOf(args.v);
  const [b] = args.q.shape as [number], [, hkv, , d] = args.k.shape as [number, number, number, number];
  return 2 * b * hkv * (args.paged.keys ?? 0) * d * byteSize(args.k.dtype) + bytesOf(args.paged.blockTable);
}

function attentionVariant(args: FlashAttentionForwardArgs | FlashAttentionBackwardArgs): string {
  if ('paged' in args && args.paged?.seqKeys) {
    const [tq, hq, d] = args.q.shape, hkv = args.k.shape[1];
    return `packed ${args.paged.seqKeys.shape[0]} seqs ${tq} rows H${hq}${hkv !== hq ? `/${hkv}` : ''} d${d} paged${args.causal ? ' causal' : ''}`;
  }
  const [b, hq, lq, d] = args.q.shape;
  const hkv = args.k.shape[1], lk = keysOf(args);
  return `B${b} H${hq}${hkv !== hq ? `/${hkv}` : ''} ${lq}×${lk} d${d}${args.causal ? ' causal' : ''}${args.keyLengths ? ' padded' : ''}`;
}

function adamWCost(args: AdamWArgs): OpCost {
  const n = args.params.numel;
  // With fp32 master weights the 16-bit params are only written (θ lives in master).
  const params = args.master ? bytesOf(args.params) : 2 * bytesOf(args.params);
  const bytes = params + bytesOf(args.grads) + 2 * bytesOf(args.m) + 2 * bytesOf(args.v) + 2 * bytesOf(args.master) +
    bytesOf(args.scalars) + bytesOf(args.clip?.sumSquares);
  return { flops: ADAMW_FLOPS_PER_ELEMENT * n, bytes };
}

/** Keys each decode query sees: positions[b] + 1 (clamped to the cache), or the whole cache without the values. */
/** Positions a sequence's cache holds: the contiguous cache's length, or paged, its table's blocks (maxBlocks · blockSize). */
function cacheLength(args: Pick<DecodeAttentionArgs, 'kCache' | 'blockTable'>): number {
  return args.blockTable ? args.blockTable.shape[1]! * args.kCache.shape[2]! : args.kCache.shape[2]!;
}

/** A cache's label in the kernel table: its length, and for a paged one its block size. */
function cacheLabel(args: Pick<DecodeAttentionArgs, 'kCache' | 'blockTable'>): string {
  return `cache ${cacheLength(args)}${args.blockTable ? ` paged ${args.kCache.shape[2]}` : ''}`;
}

function decodeKeys(args: DecodeAttentionArgs, values: DeviceValues | undefined): number {
  const b = args.q.shape[0]!;
  const maxLen = cacheLength(args);
  const positions = values?.['positions'];
  if (!positions) return b * maxLen;
  let keys = 0;
  for (let i = 0; i < b; i++) keys += Math.max(0, Math.min(maxLen, positions[i]! + 1));
  return keys;
}

function qkvRopeAppendCost(a: QkvRopeAppendArgs): OpCost {
  const { rows, h: width } = rowsOf(a.qkv);
  const [, hq, , d] = a.q.shape as [number, number, number, number];
  const hkv = a.kCache.shape[1]!;
  const s = byteSize(a.qkv.dtype);
  // Rotation: 3 FLOPs per rotated element (2 multiplies and an add); per (row, pair) θ, cos, sin and the scale (5).
  const rope = a.rope ? rows * ((hq + hkv) * d * 3 + (d / 2) * 5) : 0;
  // Head norm: per q / k element a square-add, the scale and gamma (4); per head the mean and rsqrt (3).
  const headNorm = a.headNorm ? rows * (hq + hkv) * (d * 4 + 3) : 0;
  return {
    flops: (a.bias ? rows * width : 0) + rope + headNorm,
    bytes: bytesOf(a.qkv) + bytesOf(a.bias) + bytesOf(a.headNorm?.q) + bytesOf(a.headNorm?.k) + bytesOf(a.positions) + bytesOf(a.rope?.invFreq) + bytesOf(a.q) +
      2 * rows * hkv * d * s /* the new cache rows */ + bytesOf(a.kOut) + bytesOf(a.vOut),
  };
}

/** The cost of every op that queues device work. */
/** A sampling op's variant: the logits' shape, and the vocabulary where it is narrower than the rows. */
function logitsVariant(a: { readonly logits: Tensor; readonly classes?: number }): string {
  return `${shapeOf(a.logits)}${a.classes !== undefined && a.classes !== a.logits.shape.at(-1) ? ` C=${a.classes}` : ''}`;
}

/** decodeAttention's project: the O weight read once, the f32 accumulator read and written, 2·B·H·(Hq·d) FLOPs. */
function projectionCost(p: AttentionProjection | undefined, attended: Tensor): { flops: number; bytes: number } {
  if (!p) return { flops: 0, bytes: 0 };
  const w = p.weight, H = p.out.shape[1]!, K = attended.numel / attended.shape[0]!;
  const product = { flops: 2 * attended.numel * H, bytes: 2 * bytesOf(p.out) };
  if (!isInt4Projection(w)) return { flops: product.flops, bytes: product.bytes + bytesOf(w) };
  // INT4: the packed words, scales and zeros, each weight dequantized once (as int4Linear's).
  return { flops: product.flops + 2 * H * K, bytes: product.bytes + bytesOf(w.qweight) + bytesOf(w.scales) + bytesOf(w.zeros) };
}

export const OP_COSTS: { readonly [K in KernelOp]?: OpCostEntry<K> } = {
  fill: { cost: ([t]) => ({ flops: 0, bytes: bytesOf(t) }), variant: ([t]) => `${shapeOf(t)} ${t.dtype}` },
  copy: {
    cost: ([src, dst]) => ({ flops: 0, bytes: bytesOf(src) + bytesOf(dst) }),
    variant: ([src, dst]) => `${shapeOf(src)} ${src.dtype}→${dst.dtype}`,
  },
  gemm: {
    gemm: true,
    cost: ([a]) => gemmCost(a),
    variant: ([a]) => `${dims(a.out)}×${gemmDims(a, false).k}${a.epilogue && a.epilogue !== 'none' ? ` ${a.epilogue}` : ''}${a.transA ? ' Aᵀ' : ''}${a.transB ? ' Bᵀ' : ''}`,
  },
  batchedGemm: {
    gemm: true,
    cost: ([a]) => batchedGemmCost(a),
    variant: ([a]) => `${dims(a.out)}×${gemmDims(a, true).k}${a.transA ? ' Aᵀ' : ''}${a.transB ? ' Bᵀ' : ''}`,
  },
  biasDropoutResidual: {
    cost: ([a]) => ({
      flops: a.input.numel * (a.p > 0 ? 3 : 2),
      bytes: bytesOf(a.input) + bytesOf(a.bias) + bytesOf(a.residual) + bytesOf(a.out) + bytesOf(a.mask) + bytesOf(a.offsetBase),
    }),
  },
  biasDropoutResidualBackward: {
    cost: ([a]) => ({
      flops: a.dOut.numel * (1 + (a.dBias ? 1 : 0)),
      bytes: bytesOf(a.dOut) + bytesOf(a.mask) + bytesOf(a.dInput) + bytesOf(a.dBias),
    }),
  },
  biasActivationDropout: {
    cost: ([a]) => ({
      flops: a.input.numel * (1 + ACTIVATION_FLOPS[a.activation] + (a.p > 0 ? 1 : 0)),
      bytes: bytesOf(a.input) + bytesOf(a.bias) + bytesOf(a.out) + bytesOf(a.mask) + bytesOf(a.offsetBase),
    }),
    variant: ([a]) => `${shapeOf(a.input)} ${a.activation}`,
  },
  biasActivationDropoutBackward: {
    cost: ([a]) => ({
      flops: a.dOut.numel * (3 + ACTIVATION_GRAD_FLOPS[a.activation] + (a.dBias ? 1 : 0)),
      bytes: bytesOf(a.dOut) + bytesOf(a.input) + bytesOf(a.bias) + bytesOf(a.mask) + bytesOf(a.dInput) + bytesOf(a.dBias),
    }),
    variant: ([a]) => `${shapeOf(a.dOut)} ${a.activation}`,
  },
  biasQkvSplit: {
    cost: ([a]) => ({
      flops: a.qkv.numel + ((a.qScale ?? 1) !== 1 ? a.q.numel : 0),
      bytes: bytesOf(a.qkv) + bytesOf(a.bias) + bytesOf(a.q) + bytesOf(a.k) + bytesOf(a.v),
    }),
  },
  biasQkvSplitBackward: {
    cost: ([a]) => ({
      flops: ((a.qScale ?? 1) !== 1 ? a.dq.numel : 0) + (a.dBias ? a.dQkv.numel : 0),
      bytes: bytesOf(a.dq) + bytesOf(a.dk) + bytesOf(a.dv) + bytesOf(a.dQkv) + bytesOf(a.dBias),
    }),
    variant: ([a]) => shapeOf(a.dQkv),
  },
  layerNormForward: {
    cost: ([a]) => ({
      flops: 7 * a.x.numel + 3 * rowsOf(a.x).rows,
      bytes: bytesOf(a.x) + bytesOf(a.gamma) + bytesOf(a.beta) + bytesOf(a.out) + bytesOf(a.mean) + bytesOf(a.rstd),
    }),
  },
  layerNormBackward: {
    cost: ([a]) => ({
      flops: a.x.numel * (13 + (a.dResidual ? 1 : 0)),
      bytes: bytesOf(a.dOut) + bytesOf(a.x) + bytesOf(a.gamma) + bytesOf(a.mean) + bytesOf(a.rstd) + bytesOf(a.dX) +
        (bytesOf(a.dGamma) + bytesOf(a.dBeta)) * (a.accumulate ? 2 : 1) + bytesOf(a.dResidual),
    }),
  },
  rmsNormForward: {
    cost: ([a]) => ({ flops: 4 * a.x.numel + 2 * rowsOf(a.x).rows, bytes: bytesOf(a.x) + bytesOf(a.gamma) + bytesOf(a.out) + bytesOf(a.rstd) }),
  },
  rmsNormBackward: {
    cost: ([a]) => ({
      flops: a.x.numel * (9 + (a.dResidual ? 1 : 0)),
      bytes: bytesOf(a.dOut) + bytesOf(a.x) + bytesOf(a.gamma) + bytesOf(a.rstd) + bytesOf(a.dX) +
        bytesOf(a.dGamma) * (a.accumulate ? 2 : 1) + bytesOf(a.dResidual),
    }),
  },
  softmaxForward: {
    cost: ([a], values) => {
      const [lq, lk] = a.x.shape.slice(-2) as [number, number];
      const b = a.x.shape.length === 4 ? a.x.shape[0]! : 1;
      const heads = lq * lk === 0 ? 0 : a.x.numel / (b * lq * lk);
      const visible = maskedPairs(b, heads, lq, lk, a.causal ?? false, a.keyLengths ? values?.['keyLengths'] : undefined);
      return { flops: 5 * visible, bytes: visible * byteSize(a.x.dtype) + bytesOf(a.out) + bytesOf(a.keyLengths) };
    },
    deviceInputs: ([a]) => ({ keyLengths: a.keyLengths }),
    variant: ([a]) => `${shapeOf(a.x)}${a.causal ? ' causal' : ''}${a.keyLengths ? ' padded' : ''}`,
  },
  softmaxBackward: {
    cost: ([a]) => ({ flops: 5 * a.y.numel, bytes: bytesOf(a.y) + bytesOf(a.dY) + bytesOf(a.dX) }),
  },
  flashAttentionForward: {
    cost: ([a], values) => {
      if (a.paged?.seqKeys) return packedPagedCost(a, values);
      const { pairs, d } = attentionPairs(a, a.keyLengths ? values : undefined);
      return {
        flops: FLASH_FORWARD_FLOPS * d * pairs,
        bytes: bytesOf(a.q) + kvBytesOf(a) + bytesOf(a.out) + bytesOf(a.lse) + bytesOf(a.keyLengths),
      };
    },
    deviceInputs: ([a]) => (a.paged?.seqKeys ? { cuSeqlensQ: a.cuSeqlensQ, seqKeys: a.paged.seqKeys } : { keyLengths: a.keyLengths }),
    variant: ([a]) => attentionVariant(a),
  },
  flashAttentionBackward: {
    cost: ([a], values) => {
      const { pairs, d } = attentionPairs(a, a.keyLengths ? values : undefined);
      return {
        flops: FLASH_BACKWARD_FLOPS * d * pairs,
        bytes: bytesOf(a.q) + bytesOf(a.k) + bytesOf(a.v) + bytesOf(a.out) + bytesOf(a.dOut) + bytesOf(a.lse) + bytesOf(a.keyLengths) +
          bytesOf(a.dq) + bytesOf(a.dk) + bytesOf(a.dv),
      };
    },
    deviceInputs: ([a]) => ({ keyLengths: a.keyLengths }),
    variant: ([a]) => attentionVariant(a),
  },
  crossEntropyForward: {
    cost: ([a]) => {
      const { rows, h: vp } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vp);
      // Fused (dLogits given): the gradient too, written over the whole row (padding zeros included).
      return {
        flops: real * (3 + (a.labelSmoothing ? 1 : 0) + (a.dLogits ? 3 : 0)),
        bytes: real * byteSize(a.logits.dtype) + bytesOf(a.targets) + bytesOf(a.loss) + bytesOf(a.lse) + bytesOf(a.dLogits),
      };
    },
    variant: ([a]) => `${shapeOf(a.logits)}${a.classes !== undefined && a.classes !== a.logits.shape.at(-1) ? ` C=${a.classes}` : ''}${a.dLogits ? ' +gradient' : ''}`,
  },
  crossEntropyBackward: {
    cost: ([a]) => {
      const { rows, h: vp } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vp);
      return { flops: 3 * real, bytes: real * byteSize(a.logits.dtype) + bytesOf(a.targets) + bytesOf(a.lse) + bytesOf(a.dLogits) };
    },
    variant: ([a]) => logitsVariant(a),
  },
  vocabShardMax: {
    cost: ([a]) => {
      const { rows, h: vl } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vl);
      return { flops: real, bytes: real * byteSize(a.logits.dtype) + bytesOf(a.rowMax) };
    },
    variant: ([a]) => `${shapeOf(a.logits)}${a.classes !== undefined ? ` C=${a.classes}` : ''}`,
  },
  vocabShardSums: {
    cost: ([a]) => {
      const { rows, h: vl } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vl);
      return { flops: 4 * real, bytes: real * byteSize(a.logits.dtype) + bytesOf(a.targets) + bytesOf(a.rowMax) + bytesOf(a.sums) + rows * byteSize(a.logits.dtype) };
    },
    variant: ([a]) => `${shapeOf(a.logits)}${a.classes !== undefined ? ` C=${a.classes}` : ''}`,
  },
  vocabShardLoss: {
    cost: ([a]) => ({ flops: 8 * a.loss.numel, bytes: bytesOf(a.rowMax) + bytesOf(a.sums) + bytesOf(a.targets) + bytesOf(a.loss) + bytesOf(a.lse) }),
    variant: ([a]) => `rows ${a.loss.numel}`,
  },
  vocabShardCrossEntropyBackward: {
    cost: ([a]) => {
      const { rows, h: vl } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vl);
      return { flops: 3 * real, bytes: real * byteSize(a.logits.dtype) + bytesOf(a.targets) + bytesOf(a.lse) + bytesOf(a.dLogits) };
    },
    variant: ([a]) => `${shapeOf(a.logits)}${a.classes !== undefined ? ` C=${a.classes}` : ''}`,
  },
  embeddingForward: {
    cost: ([a]) => {
      const h = a.tokenTable.shape[1]!, positions = a.tokens.shape[a.tokens.shape.length - 1]!;
      const n = a.out.numel, s = byteSize(a.tokenTable.dtype);
      const perElement = ((a.scale ?? 1) !== 1 ? 1 : 0) + (a.positionTable ? 1 : 0) + (a.p > 0 ? 1 : 0);
      return {
        flops: perElement * n,
        bytes: bytesOf(a.tokens) + n * s + (a.positionTable ? positions * h * s : 0) + bytesOf(a.out) + bytesOf(a.mask) + bytesOf(a.offsetBase),
      };
    },
    variant: ([a]) => `${shapeOf(a.out)} V=${a.tokenTable.shape[0]}`,
  },
  embeddingBackward: {
    cost: ([a]) => {
      const h = a.dTokenTable.shape[1]!, positions = a.tokens.shape[a.tokens.shape.length - 1]!;
      const n = a.dOut.numel, s = byteSize(a.dTokenTable.dtype);
      // Token rows and the used position rows are accumulated into: read and written.
      const tables = 2 * n * s + (a.dPositionTable ? 2 * positions * h * byteSize(a.dPositionTable.dtype) : 0);
      return {
        flops: n * (2 + ((a.scale ?? 1) !== 1 ? 1 : 0) + (a.dPositionTable ? 1 : 0)),
        bytes: bytesOf(a.tokens) + bytesOf(a.dOut) + bytesOf(a.mask) + tables,
      };
    },
    variant: ([a]) => `${shapeOf(a.dOut)} V=${a.dTokenTable.shape[0]}`,
  },
  permute0213: { cost: ([a]) => ({ flops: 0, bytes: bytesOf(a.x) + bytesOf(a.out) }) },
  dropout: {
    cost: ([a]) => ({ flops: a.p > 0 ? a.x.numel : 0, bytes: bytesOf(a.x) + bytesOf(a.out) + bytesOf(a.mask) + bytesOf(a.offsetBase) }),
  },
  sumSquares: {
    cost: ([a]) => ({ flops: 2 * a.x.numel, bytes: bytesOf(a.x) + bytesOf(a.out) * (a.accumulate ? 2 : 1) }),
    variant: ([a]) => `${shapeOf(a.x)} ${a.x.dtype}`,
  },
  adamW: {
    cost: ([a]) => adamWCost(a),
    variant: ([a]) => `${shapeOf(a.params)} ${a.params.dtype}${a.master ? ' +master' : ''}`,
  },
  randomFill: {
    cost: ([a]) => ({ flops: a.out.numel * (a.distribution === 'normal' ? 8 : 2), bytes: bytesOf(a.out) }),
    variant: ([a]) => `${shapeOf(a.out)} ${a.distribution}`,
  },
  // inference
  embedTokens: {
    cost: ([a]) => {
      const { rows } = rowsOf(a.out);
      const s = byteSize(a.tokenTable.dtype), h = a.tokenTable.shape[1]!;
      const perElement = ((a.scale ?? 1) !== 1 ? 1 : 0) + (a.positionTable ? 1 : 0);
      return {
        flops: perElement * a.out.numel,
        bytes: bytesOf(a.tokens) + bytesOf(a.positions) + rows * h * s * (a.positionTable ? 2 : 1) + bytesOf(a.out),
      };
    },
    variant: ([a]) => `${shapeOf(a.out)} V=${a.tokenTable.shape[0]}`,
  },
  qkvRopeAppend: {
    cost: ([a]) => qkvRopeAppendCost(a),
    variant: ([a]) => `${shapeOf(a.qkv)} H${a.q.shape[1]}/${a.kCache.shape[1]}${a.rope ? ' rope' : ''}`,
  },
  decodeAttention: {
    cost: ([a], values) => {
      const keys = decodeKeys(a, values);
      const [, hq, d] = a.q.shape as [number, number, number];
      const hkv = a.kCache.shape[1]!, s = byteSize(a.kCache.dtype);
      const project = projectionCost(a.project, a.out);
      return {
        flops: FLASH_FORWARD_FLOPS * d * hq * keys + project.flops,
        bytes: bytesOf(a.q) + bytesOf(a.positions) + 2 * keys * hkv * d * s + bytesOf(a.out) + project.bytes,
      };
    },
    deviceInputs: ([a]) => ({ positions: a.positions }),
    variant: ([a]) => `B${a.q.shape[0]} H${a.q.shape[1]}/${a.kCache.shape[1]} d${a.q.shape[2]} ${cacheLabel(a)}${a.partials ? ` split ${a.partials.shape[2]}` : ''}${a.project ? ' +O' : ''}`,
  },
  appendDecodeAttention: {
    // The fused minimum: qkvRopeAppend's reads and cache writes and decodeAttention's key, value and output
    // bytes; the query heads stay on chip (neither written nor read back).
    cost: ([a], values) => {
      const [B, hq, d] = a.q.shape as [number, number, number];
      const hkv = a.kCache.shape[1]!, s = byteSize(a.kCache.dtype);
      const keys = decodeKeys({ q: a.q, kCache: a.kCache, vCache: a.vCache, positions: a.positions, out: a.out, ...(a.blockTable ? { blockTable: a.blockTable } : {}) }, values);
      const rope = a.rope ? B * ((hq + hkv) * d * 3 + (d / 2) * 5) : 0;
      const project = projectionCost(a.project, a.out);
      return {
        flops: (a.bias ? a.qkv.numel : 0) + rope + FLASH_FORWARD_FLOPS * d * hq * keys + project.flops,
        bytes: bytesOf(a.qkv) + bytesOf(a.bias) + bytesOf(a.positions) + bytesOf(a.rope?.invFreq) + 2 * B * hkv * d * s + 2 * keys * hkv * d * s + bytesOf(a.out) + project.bytes,
      };
    },
    deviceInputs: ([a]) => ({ positions: a.positions }),
    variant: ([a]) => `B${a.q.shape[0]} H${a.q.shape[1]}/${a.kCache.shape[1]} d${a.q.shape[2]} ${cacheLabel(a)}${a.rope ? ' rope' : ''}${a.partials ? ` split ${a.partials.shape[2]}` : ''}${a.project ? ' +O' : ''}`,
  },
  residualNorm: {
    cost: ([a]) => {
      const { rows } = rowsOf(a.x);
      const norm = a.norm === 'layer' ? 7 * a.x.numel + 3 * rows : 4 * a.x.numel + 2 * rows;
      return {
        flops: norm + (a.y ? a.x.numel : 0) + (a.y && a.bias ? a.x.numel : 0),
        bytes: bytesOf(a.x) * (a.y ? 2 : 1) + bytesOf(a.y) + bytesOf(a.bias) + bytesOf(a.gamma) + bytesOf(a.beta) + bytesOf(a.out),
      };
    },
    variant: ([a]) => `${shapeOf(a.x)} ${a.norm}${a.y ? ' +residual' : ''}`,
  },
  gatedActivation: {
    cost: ([a]) => ({ flops: a.out.numel * (ACTIVATION_FLOPS[a.activation] + 1), bytes: bytesOf(a.x) + bytesOf(a.out) }),
    variant: ([a]) => `${shapeOf(a.out)} ${a.activation}`,
  },
  gatedLinear: {
    // The fused minimum: the weight, x and bias read once, out written once (the fallback's scratch `up`
    // is written and read back once more: at decode sizes a few KB beside the weight's MBs).
    gemm: true,
    cost: ([a]) => {
      const rows = a.out.numel / a.out.shape[a.out.rank - 1]!, F = a.out.shape[a.out.rank - 1]!, K = a.x.shape[a.x.rank - 1]!;
      return {
        flops: 2 * rows * 2 * F * K + (a.bias ? rows * 2 * F : 0) + rows * F * (ACTIVATION_FLOPS[a.activation] + 1),
        bytes: bytesOf(a.weight) + bytesOf(a.x) + bytesOf(a.bias) + bytesOf(a.out),
      };
    },
    variant: ([a]) => `${shapeOf(a.out)}×${a.x.shape[a.x.rank - 1]} ${a.activation}${a.bias ? ' +bias' : ''}`,
  },
  normLinear: {
    // The fused minimum: the norm's reads and writes (residualNorm's count) plus the product's (gemm's
    // or gatedLinear's), its input counted once — h is written (unless skipNormOut), and read back only by
    // the unfused path.
    gemm: true,
    cost: ([a]) => {
      const norm = OP_COSTS.residualNorm!.cost([a.norm]);
      const p = normLinearProduct(a);
      const product = 'gated' in p ? OP_COSTS.gatedLinear!.cost([p.gated]) : 'int8' in p ? OP_COSTS.int8Linear!.cost([p.int8])
        : 'int4' in p ? OP_COSTS.int4Linear!.cost([p.int4]) : gemmCost(p.gemm);
      return { flops: norm.flops + product.flops, bytes: norm.bytes + product.bytes - (a.skipNormOut ? 2 : 1) * bytesOf(a.norm.out) };
    },
    variant: ([a]) => {
      const l = a.linear, quantized = l.kind === 'int8' || l.kind === 'int4';
      const kind = `${quantized ? `${l.kind} ` : ''}${l.kind === 'gated' || (quantized && l.gated) ? 'gated ' : ''}`;
      return `${shapeOf(a.norm.x)} ${a.norm.norm}${a.norm.y ? ' +residual' : ''} → ${kind}${shapeOf(l.out)}`;
    },
  },
  normMlp: {
    // The fused minimum: the norm's reads and writes (residualNorm's count, h only unless skipNormOut), both
    // weights and the up bias once, out read and written (f32) once; the hidden row stays on chip.
    gemm: true,
    cost: ([a]) => {
      const norm = OP_COSTS.residualNorm!.cost([a.norm]);
      const H = a.up.shape[1]!, F = a.up.shape[0]!, rows = a.out.numel / H;
      return {
        flops: norm.flops + 2 * rows * F * H * 2 + rows * F * (ACTIVATION_FLOPS[a.activation] + (a.upBias ? 2 : 1)) + rows * H,
        bytes: norm.bytes - (a.skipNormOut ? 1 : 0) * bytesOf(a.norm.out) + bytesOf(a.up) + bytesOf(a.down) + bytesOf(a.upBias) + 2 * bytesOf(a.out),
      };
    },
    variant: ([a]) => `${shapeOf(a.norm.x)} ${a.norm.norm}${a.norm.y ? ' +residual' : ''} → ${a.up.shape[0]} ${a.activation} → f32 ${shapeOf(a.out)}`,
  },
  decodeAdvance: {
    cost: ([a]) => ({ flops: 0, bytes: 7 * 4 * a.tokens.numel + 8 }),
    variant: ([a]) => `${shapeOf(a.tokens)} of ${shapeOf(a.record)}`,
  },
  gatherColumns: {
    cost: ([a]) => ({ flops: 0, bytes: 2 * bytesOf(a.out) + 4 * a.index.numel }),
    variant: ([a]) => `${shapeOf(a.x)} → ${shapeOf(a.out)}`,
  },
  int4ClipGroups: {
    // Each weight read once and written once; R ratios of a quantize-and-compare a weight.
    cost: ([a]) => ({ flops: 8 * a.ratios.numel * a.weight.numel, bytes: 2 * bytesOf(a.weight) + bytesOf(a.meanSquare) }),
    variant: ([a]) => `${shapeOf(a.weight)} G ${a.groupSize} × ${a.ratios.numel} ratios`,
  },
  maskLogits: {
    cost: ([a]) => ({ flops: 0, bytes: 4 * a.masks.numel + a.rows.numel * a.classes * byteSize(a.logits.dtype) }),
    variant: ([a]) => `${shapeOf(a.masks)} over ${shapeOf(a.logits)}`,
  },
  biasLogits: {
    cost: ([a]) => ({ flops: a.tokens.numel, bytes: 8 * a.tokens.numel + 2 * a.tokens.numel * byteSize(a.logits.dtype) }),
    variant: ([a]) => `${shapeOf(a.tokens)} over ${shapeOf(a.logits)}`,
  },
  scaleColumns: {
    cost: ([a]) => ({ flops: a.x.numel, bytes: bytesOf(a.x) + bytesOf(a.out) + bytesOf(a.scale) }),
    variant: ([a]) => `${shapeOf(a.x)}${a.divide ? ' ÷' : ''}`,
  },
  gptqRoundBlock: {
    // width²/2 multiply-adds a row; the block's values read and written, the errors and q written.
    cost: ([a]) => ({ flops: a.u.shape[0]! * a.weights.numel, bytes: 3 * bytesOf(a.weights) + a.q.numel + bytesOf(a.u) }),
    variant: ([a]) => `${shapeOf(a.weights)} G ${a.groupSize}`,
  },
  feedTokens: {
    cost: ([a]) => ({ flops: 0, bytes: 3 * 4 * a.tokens.numel }),
    variant: ([a]) => `${shapeOf(a.tokens)} from ${shapeOf(a.sampled)}`,
  },
  tanhActivation: {
    cost: ([a]) => ({ flops: a.out.numel * (a.bias ? 2 : 1), bytes: bytesOf(a.x) + bytesOf(a.bias) + bytesOf(a.out) }),
    variant: ([a]) => `${shapeOf(a.out)}${a.bias ? ' +bias' : ''}`,
  },
  sampleTokens: {
    // Read as if sampling with a temperature (6 FLOPs a column: ÷T, exp and Σ for top-p, the Gumbel
    // noise's two logs and the add); the repetition penalty's reads of the history are not counted.
    cost: ([a]) => {
      const { rows, h: vp } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vp);
      return {
        flops: 6 * real,
        bytes: real * byteSize(a.logits.dtype) + bytesOf(a.params) + bytesOf(a.seeds) + 2 * bytesOf(a.positions) + 2 * bytesOf(a.tokens) +
          2 * bytesOf(a.finished) + bytesOf(a.limits) + bytesOf(a.stopIds) + 4 * rows /* the history entry written */,
      };
    },
    variant: ([a]) => logitsVariant(a),
  },
  tokenProbabilities: {
    // One read of each row (later passes hit L1/L2) and ~3 FLOPs a column (÷T, exp, Σ).
    cost: ([a]) => {
      const { rows, h: vp } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vp);
      return { flops: 3 * real, bytes: real * byteSize(a.logits.dtype) + bytesOf(a.params) + bytesOf(a.tokens) + bytesOf(a.out) };
    },
    variant: ([a]) => logitsVariant(a),
  },
  speculativeSample: {
    // One read of each row given (later passes hit L1/L2); ~12 FLOPs a column: ÷T, exp and Σ per row, the
    // Philox noise's two logs, the residual's exps, difference and log.
    cost: ([a]) => {
      const { rows, h: vp } = rowsOf(a.target);
      const real = rows * (a.classes ?? vp), inputs = a.draft ? 2 : 1;
      return { flops: 12 * real, bytes: inputs * real * byteSize(a.target.dtype) + bytesOf(a.params) + bytesOf(a.seeds) + bytesOf(a.positions) + bytesOf(a.out) };
    },
    variant: ([a]) => `${shapeOf(a.target)}${a.draft ? ' residual' : ' bonus'}`,
  },
  // quantized inference (W4A16, W8A8)
  int4Linear: {
    gemm: true,
    // 2·M·N·K, the epilogue, and dequantizing each weight once (q − zero)·scale.
    cost: ([a]) => {
      // n: the weight's rows (gated: gate and up, 2F; out is [M, F]).
      const { rows: m, h: k } = rowsOf(a.x), n = a.qweight.shape[0]!;
      return {
        flops: 2 * m * n * k + 2 * n * k + (a.bias ? m * n : 0) + (a.activation ? ACTIVATION_FLOPS[a.activation] * m * n : 0),
        bytes: bytesOf(a.x) + bytesOf(a.qweight) + bytesOf(a.scales) + bytesOf(a.zeros) + bytesOf(a.bias) + bytesOf(a.out),
      };
    },
    variant: ([a]) => `${rowsOf(a.x).rows}×${rowsOf(a.out).h}×${rowsOf(a.x).h} g${a.groupSize}${a.bias ? ' bias' : ''}${a.activation ? ` ${a.activation}` : ''}`,
  },
  int4QuantizeWeights: {
    cost: ([a]) => ({
      flops: 2 * a.weight.numel + 4 * a.scales.numel,
      bytes: bytesOf(a.weight) + bytesOf(a.qweight) + bytesOf(a.scales) + bytesOf(a.zeros),
    }),
    variant: ([a]) => `${shapeOf(a.weight)} g${a.groupSize}`,
  },
  int8QuantizeRows: {
    cost: ([a]) => ({ flops: a.x.numel + rowsOf(a.x).rows, bytes: bytesOf(a.x) + bytesOf(a.out) + bytesOf(a.scales) }),
  },
  int8Gemm: {
    gemm: true,
    cost: ([a]) => {
      const { rows: m, h: n } = rowsOf(a.out), k = rowsOf(a.a).h;
      return { flops: 2 * m * n * k, bytes: bytesOf(a.a) + bytesOf(a.b) + bytesOf(a.out) };
    },
    variant: ([a]) => `${rowsOf(a.out).rows}×${rowsOf(a.out).h}×${rowsOf(a.a).h}`,
  },
  int8Dequantize: {
    cost: ([a]) => ({
      flops: a.out.numel * (2 + (a.bias ? 1 : 0) + (a.activation ? ACTIVATION_FLOPS[a.activation] : 0)),
      bytes: bytesOf(a.acc) + bytesOf(a.rowScales) + bytesOf(a.colScales) + bytesOf(a.bias) + bytesOf(a.out),
    }),
  },
  int8Linear: {
    gemm: true,
    // 2·M·N·K (n: the weight's rows, gated 2F), quantizing x (|x|, × inv), the epilogue (× 2, bias, act).
    cost: ([a]) => {
      const { rows: m, h: k } = rowsOf(a.x), n = a.qweight.shape[0]!;
      return {
        flops: 2 * m * n * k + 2 * m * k + m * n * (2 + (a.bias ? 1 : 0) + (a.activation ? ACTIVATION_FLOPS[a.activation] : 0)),
        bytes: bytesOf(a.x) + bytesOf(a.qweight) + bytesOf(a.scales) + bytesOf(a.bias) + bytesOf(a.out),
      };
    },
    variant: ([a]) => `${rowsOf(a.x).rows}×${a.qweight.shape[0]}×${rowsOf(a.x).h}${a.gated ? ' gated' : ''}${a.bias ? ' bias' : ''}${a.activation ? ` ${a.activation}` : ''}`,
  },
  // beam search
  beamTopK: {
    // log-softmax and the running score per candidate: exp, Σ, − lse, + beam score.
    cost: ([a]) => {
      const { rows, h: vp } = rowsOf(a.logits);
      const real = rows * (a.classes ?? vp);
      return {
        flops: 4 * real,
        bytes: real * byteSize(a.logits.dtype) + bytesOf(a.beamScores) + bytesOf(a.tokens) + bytesOf(a.sourceBeams) + bytesOf(a.scores),
      };
    },
    variant: ([a]) => `${shapeOf(a.logits)} beams ${a.beams} K ${a.tokens.shape.at(-1)}`,
  },
  beamAdvance: {
    // The cache-row table: one half read, the other written, counted at its full length L (an upper bound: rows
    // hold positions < t).
    cost: ([a]) => ({
      flops: 0,
      bytes: bytesOf(a.tokens) + bytesOf(a.sourceBeams) + bytesOf(a.scores) + bytesOf(a.nextTokens) + bytesOf(a.beamScores) +
        bytesOf(a.cacheRows) + 2 * bytesOf(a.positions),
    }),
    variant: ([a]) => `${shapeOf(a.cacheRows)} beams ${a.beams}`,
  },
  beamSelfAttention: {
    cost: ([a], values) => {
      const { rows, h: width } = rowsOf(a.qkv);
      const hidden = width / 3, s = byteSize(a.kCache.dtype), maxLen = a.kCache.shape[2]!;
      const positions = values?.['positions'];
      let keys = rows * maxLen; // upper bound without the positions
      if (positions) { keys = 0; for (let r = 0; r < rows; r++) keys += Math.max(0, Math.min(maxLen, positions[r]! + 1)); }
      return {
        flops: rows * width + rows * hidden + FLASH_FORWARD_FLOPS * hidden * keys,
        bytes: bytesOf(a.qkv) + bytesOf(a.bias) + bytesOf(a.positions) + 2 * rows * hidden * s /* the new cache entries */ +
          2 * keys * hidden * s + 4 * Math.max(0, keys - rows) /* cache-row lookups */ + bytesOf(a.out),
      };
    },
    deviceInputs: ([a]) => ({ positions: a.positions }),
    variant: ([a]) => `${shapeOf(a.qkv)} heads ${a.heads} cache ${a.kCache.shape[2]}`,
  },
  beamCrossAttention: {
    cost: ([a], values) => {
      const { rows, h: hidden } = rowsOf(a.q);
      const [batch, lk] = a.kv.shape as [number, number, number];
      const s = byteSize(a.kv.dtype), lengths = values?.['keyLengths'];
      let keys = batch * lk; // each item's keys (upper bound without the lengths)
      if (lengths) { keys = 0; for (let b = 0; b < batch; b++) keys += Math.max(0, Math.min(lk, lengths[b]!)); }
      return {
        flops: FLASH_FORWARD_FLOPS * hidden * keys * a.beams,
        bytes: bytesOf(a.q) + 2 * keys * hidden * s /* this layer's K and V, once per item */ + bytesOf(a.keyLengths) + bytesOf(a.out),
      };
    },
    deviceInputs: ([a]) => ({ keyLengths: a.keyLengths }),
    variant: ([a]) => `${shapeOf(a.q)} beams ${a.beams} source ${a.kv.shape[1]}`,
  },
};

/** The entry for `op`, or undefined for a member without one (a new op nobody has costed yet). */
export function costEntry(op: string): OpCostEntry<KernelOp> | undefined {
  return (OP_COSTS as Record<string, OpCostEntry<KernelOp> | undefined>)[op];
}

type AnyEntry = {
  gemm?: boolean;
  cost(args: readonly unknown[], values?: DeviceValues): OpCost;
  deviceInputs?(args: readonly unknown[]): Readonly<Record<string, Tensor | undefined>>;
  variant?(args: readonly unknown[]): string;
};
const entryOf = (op: string): AnyEntry | undefined => costEntry(op) as AnyEntry | undefined;

/** FLOPs and bytes of one call (exact with `values` for the ops that read device lengths), or undefined without an entry. */
export function opCost(op: string, args: readonly unknown[], values?: DeviceValues): OpCost | undefined {
  return entryOf(op)?.cost(args, values);
}

/** The small device tensors whose values the exact cost of this call needs (none for most ops). */
export function opDeviceInputs(op: string, args: readonly unknown[]): Record<string, Tensor> {
  const inputs = entryOf(op)?.deviceInputs?.(args) ?? {};
  const present: Record<string, Tensor> = {};
  for (const [name, t] of Object.entries(inputs)) if (t) present[name] = t;
  return present;
}

/** True for the matrix products (the GEMM share of a profile). */
export function isGemmOp(op: string): boolean {
  return costEntry(op)?.gemm === true;
}

/** A short description of one call: the op and what tells its calls apart (sizes, flags). */
export function describeCall(op: string, args: readonly unknown[]): string {
  const entry = entryOf(op);
  const variant = entry?.variant ? entry.variant(args) : firstShape(args);
  return variant ? `${op} ${variant}` : op;
}

function firstShape(args: readonly unknown[]): string {
  for (const a of args) {
    const direct = (a as { shape?: unknown } | null)?.shape;
    if (Array.isArray(direct)) return `[${direct.join(', ')}]`;
    if (a && typeof a === 'object') {
      for (const v of Object.values(a)) {
        const shape = (v as { shape?: unknown } | null)?.shape;
        if (Array.isArray(shape)) return `[${shape.join(', ')}]`;
      }
    }
  }
  return '';
}
