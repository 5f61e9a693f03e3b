// Encoder-decoder (cross) attention: queries from the decoder stream, keys and values from the encoder
// output, keys masked by the source lengths, no causal mask.
//
// K and V of *every* decoder layer depend only on the encoder output, so they are projected together,
// as LightSeq2 does: one GEMM of the encoder output with all layers' K and V weights stored back to
// back ([n·2H, H], layer i's K rows then its V rows), then each layer's slice is split into heads.
//
// Forward (n decoder layers, source length Lk, target length Lq):
//   kv     = enc·Wkvᵀ + bkv                   one GEMM, bias epilogue          [B·Lk, n·2H]
//   slices = permute0213(kv)                  [1, B·Lk, 2n, H] → [1, 2n, B·Lk, H]: slice j contiguous
//   k_i, v_i = split heads(slice 2i, 2i+1)    permute0213 per slice            [B, heads, Lk, d]
//  per layer:
//   q      = split heads(x·Wqᵀ + bq)          GEMM with bias epilogue, permute [B, heads, Lq, d]
//   p      = softmax(q·k_iᵀ/√d + key padding)  the shared attention core (attention.ts), scale in the softmax
//   y      = merge heads(p·v_i)·Woᵀ           the block adds bo with its fused bias + dropout + residual
//
// Backward: each layer's dk_i, dv_i (heads) are merged back into one [2n, B·Lk, H] buffer as the
// decoder's backward walks down; then one permute gives dKv [B·Lk, n·2H], one GEMM gives dWkv (with
// dbkv from its BGRADA epilogue) and one GEMM gives the encoder output's gradient dEnc = dKv·Wkv.

import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { AttendDims, AttendSaved } from './attention.js';
import { attendBackward, attendForward } from './attention.js';
import type { Linear } from './linear.js';
import { linearForward, linearInputGrad, linearWeightGrad } from './linear.js';
import type { StepContext } from './step-context.js';

export interface CrossAttention {
  /** Query projection [H → H] with bias ('out_in', so its bias gradient comes from the dW GEMM). */
  readonly q: Linear;
  /** Output projection [H → H]; its bias is applied by the block's fused residual op. */
  readonly out: Linear;
  readonly heads: number;
  /** Dropout on the attention probabilities. */
  readonly dropout: number;
}

/** K and V of all decoder layers from one projection of the encoder output. */
export interface EncoderKvProjection {
  /** [H → n·2H] ('out_in', with bias): layer i's K rows at 2i·H, its V rows at (2i+1)·H. */
  readonly kv: Linear;
  readonly layers: number;
  readonly heads: number;
}

export interface CrossAttentionShape {
  readonly batch: number;
  /** Lq: the decoder (target) length. */
  readonly queryLen: number;
  /** Lk: the encoder (source) length. */
  readonly keyLen: number;
  /** i32 [batch]: source lengths; keys at positions ≥ keyLengths[b] are padding. */
  readonly keyLengths?: Tensor;
}

/** One layer's keys and values, [B, heads, Lk, d] each (or their gradients). */
export interface LayerKv {
  readonly k: Tensor;
  readonly v: Tensor;
}

export interface CrossAttentionSaved extends AttendSaved {
  readonly x: Tensor;
  readonly merged: Tensor;
}

export interface EncoderKvSaved {
  readonly encoder: Tensor;
  readonly layers: readonly LayerKv[];
}

export function crossAttention(q: Linear, out: Linear, heads: number, dropout = 0): CrossAttention {
  const hidden = out.outFeatures;
  if (q.outFeatures !== hidden || q.inFeatures !== hidden || out.inFeatures !== hidden) {
    throw new ArgumentError(`crossAttention: query and output projections must both be [${hidden} → ${hidden}]`);
  }
  if (hidden % heads !== 0) throw new ArgumentError(`crossAttention: hidden ${hidden} is not divisible by ${heads} heads`);
  if (!q.bias || q.layout !== 'out_in') throw new ArgumentError("crossAttention: the query projection needs a bias and the 'out_in' layout (its bias gradient is fused into the weight-gradient GEMM)");
  return { q, out, heads, dropout };
}

export function encoderKvProjection(kv: Linear, layers: number, heads: number): EncoderKvProjection {
  const hidden = kv.inFeatures;
  if (kv.outFeatures !== 2 * layers * hidden) throw new ArgumentError(`encoderKvProjection: ${layers} layers need a [${hidden} → ${2 * layers * hidden}] projection, got [${hidden} → ${kv.outFeatures}]`);
  if (hidden % heads !== 0) throw new ArgumentError(`encoderKvProjection: hidden ${hidden} is not divisible by ${heads} heads`);
  if (!kv.bias || kv.layout !== 'out_in') throw new ArgumentError("encoderKvProjection: the projection needs a bias and the 'out_in' layout");
  return { kv, layers, heads };
}

function dims(layer: { heads: number }, hidden: number, shape: CrossAttentionShape): AttendDims {
  return { batch: shape.batch, heads: layer.heads, queryLen: shape.queryLen, keyLen: shape.keyLen, headDim: hidden / layer.heads };
}

/** enc [B·Lk, H] → every decoder layer's k, v [B, heads, Lk, d] (new buffers, kept for the backward). */
export function encoderKvForward(ctx: StepContext, proj: EncoderKvProjection, shape: CrossAttentionShape, enc: Tensor): EncoderKvSaved {
  const { batch: B, keyLen: Lk } = shape;
  const H = proj.kv.inFeatures, n = proj.layers, heads = proj.heads, d = H / heads, rows = B * Lk;
  const dtype = enc.dtype;
  const kv = ctx.buffer('xkv.proj', [rows, 2 * n * H], dtype);
  linearForward(ctx, proj.kv, enc, kv, 'bias');
  const slices = ctx.buffer('xkv.slices', [2 * n, rows, H], dtype);
  ctx.ops.permute0213({ x: ctx.reshape(kv, [1, rows, 2 * n, H]), out: ctx.reshape(slices, [1, 2 * n, rows, H]) });
  const split = (j: number, name: string): Tensor => {
    const t = ctx.buffer(name, [B, heads, Lk, d], dtype);
    ctx.ops.permute0213({ x: ctx.ops.view(slices, j * rows * H, [B, Lk, heads, d]), out: t });
    return t;
  };
  const layers = Array.from({ length: n }, (_, i): LayerKv => ({ k: split(2 * i, 'xkv.k'), v: split(2 * i + 1, 'xkv.v') }));
  return { encoder: enc, layers };
}

/** The gradient of every layer's K and V slice, [2n, B·Lk, H]: filled by encoderKvStoreGrad, read by encoderKvBackward. */
export function encoderKvGradBuffer(ctx: StepContext, proj: EncoderKvProjection, shape: CrossAttentionShape, dtype: Tensor['dtype']): Tensor {
  return ctx.buffer('xkv.dSlices', [2 * proj.layers, shape.batch * shape.keyLen, proj.kv.inFeatures], dtype);
}

/** Merges layer i's dk, dv [B, heads, Lk, d] into its two slices of the shared gradient buffer. */
export function encoderKvStoreGrad(ctx: StepContext, proj: EncoderKvProjection, shape: CrossAttentionShape, dSlices: Tensor, layer: number, grad: LayerKv): void {
  const { batch: B, keyLen: Lk } = shape;
  const H = proj.kv.inFeatures, heads = proj.heads, d = H / heads, rows = B * Lk;
  ctx.ops.permute0213({ x: grad.k, out: ctx.ops.view(dSlices, 2 * layer * rows * H, [B, Lk, heads, d]) });
  ctx.ops.permute0213({ x: grad.v, out: ctx.ops.view(dSlices, (2 * layer + 1) * rows * H, [B, Lk, heads, d]) });
}

/**
 * From the filled [2n, B·Lk, H] gradient: dWkv and dbkv (overwritten), and dEnc [B·Lk, H] (written,
 * or added to with accumulate).
 */
export function encoderKvBackward(ctx: StepContext, proj: EncoderKvProjection, shape: CrossAttentionShape, saved: EncoderKvSaved, dSlices: Tensor, dEnc: Tensor, accumulate = false): void {
  const rows = shape.batch * shape.keyLen, H = proj.kv.inFeatures, n = proj.layers;
  const dKv = ctx.buffer('xkv.dProj', [rows, 2 * n * H], dSlices.dtype);
  ctx.ops.permute0213({ x: ctx.reshape(dSlices, [1, 2 * n, rows, H]), out: ctx.reshape(dKv, [1, rows, 2 * n, H]) });
  linearWeightGrad(ctx, proj.kv, saved.encoder, dKv, { biasGrad: true });
  linearInputGrad(ctx, proj.kv, dKv, dEnc, accumulate);
}

/** x [B·Lq, H] (decoder stream) attending to one layer's encoder k, v → y [B·Lq, H], before the output bias. */
export function crossAttentionForward(ctx: StepContext, layer: CrossAttention, shape: CrossAttentionShape, x: Tensor, kv: LayerKv, y: Tensor): CrossAttentionSaved {
  const H = layer.out.outFeatures, dm = dims(layer, H, shape);
  const { batch: B, queryLen: Lq, heads, headDim: d } = dm;
  const qProj = ctx.buffer('xattn.qProj', [B * Lq, H], x.dtype);
  linearForward(ctx, layer.q, x, qProj, 'bias');
  const q = ctx.buffer('xattn.q', [B, heads, Lq, d], x.dtype);
  ctx.ops.permute0213({ x: ctx.reshape(qProj, [B, Lq, heads, d]), out: q });
  const { saved, merged } = attendForward(ctx, dm, q, kv.k, kv.v, {
    causal: false, dropout: layer.dropout, scale: 1 / Math.sqrt(d), ...(shape.keyLengths ? { keyLengths: shape.keyLengths } : {}),
  });
  linearForward(ctx, layer.out, merged, y);
  return { x, ...saved, merged };
}

/**
 * dY [B·Lq, H] (gradient of the output projection's result) → dX [B·Lq, H] (written, or added to with
 * accumulateDx), the layer's dk, dv [B, heads, Lk, d] (new buffers: hand them to encoderKvStoreGrad),
 * and the gradients of Wq, bq, Wo.
 */
export function crossAttentionBackward(ctx: StepContext, layer: CrossAttention, shape: CrossAttentionShape, saved: CrossAttentionSaved, dY: Tensor, dX: Tensor, accumulateDx = false): LayerKv {
  const H = layer.out.outFeatures, dm = dims(layer, H, shape);
  const { batch: B, queryLen: Lq, keyLen: Lk, heads, headDim: d } = dm;
  const dtype = dY.dtype;
  linearWeightGrad(ctx, layer.out, saved.merged, dY);
  const dMerged = ctx.buffer('xattn.dMerged', [B * Lq, H], dtype);
  linearInputGrad(ctx, layer.out, dY, dMerged);
  const dk = ctx.buffer('xattn.dk', [B, heads, Lk, d], dtype);
  const dv = ctx.buffer('xattn.dv', [B, heads, Lk, d], dtype);
  const dq = attendBackward(ctx, dm, saved, 1 / Math.sqrt(d), dMerged, dk, dv);
  const dQProj = ctx.buffer('xattn.dQProj', [B * Lq, H], dtype);
  ctx.ops.permute0213({ x: dq, out: ctx.reshape(dQProj, [B, Lq, heads, d]) });
  linearWeightGrad(ctx, layer.q, saved.x, dQProj, { biasGrad: true });
  linearInputGrad(ctx, layer.q, dQProj, dX, accumulateDx);
  return { k: dk, v: dv };
}
