// A Transformer decoder block of an encoder-decoder model: causal self-attention, cross-attention to
// the encoder output, feed-forward — three residual sublayers (nn/sublayer.ts), pre-LN or post-LN:
//
//   post-LN (Marian, original):  m1 = LN1(x + drop(SelfAttn(x) + bo))
//                                m2 = LNc(m1 + drop(CrossAttn(m1, enc) + bco))
//                                y  = LN2(m2 + drop(FFN(m2) + b2))
//   pre-LN:                      m1 = x + drop(SelfAttn(LN1(x)) + bo), and so on.
//
// The cross-attention's keys and values come precomputed (all layers' in one GEMM, nn/cross-attention.ts);
// the backward returns their gradients for the caller to merge into the shared buffer.

import type { Tensor } from '../tensor.js';
import type { AttentionSaved, SelfAttention } from './attention.js';
import { attentionBackward, attentionForward } from './attention.js';
import type { CrossAttention, CrossAttentionSaved, CrossAttentionShape, LayerKv } from './cross-attention.js';
import { crossAttentionBackward, crossAttentionForward } from './cross-attention.js';
import type { StepContext } from './step-context.js';
import type { FeedForward, FeedForwardSaved, Sublayer, SublayerSaved } from './sublayer.js';
import { feedForwardBackward, feedForwardForward, sublayerBackward, sublayerForward } from './sublayer.js';
import type { LayerNormParams } from './transformer-block.js';

export interface DecoderBlock {
  readonly selfAttention: SelfAttention;
  readonly selfNorm: LayerNormParams;
  readonly crossAttention: CrossAttention;
  readonly crossNorm: LayerNormParams;
  readonly ffn: FeedForward;
  readonly ffnNorm: LayerNormParams;
  readonly preLayerNorm: boolean;
  /** Dropout after each sublayer's output projection. */
  readonly residualDropout: number;
}

export interface DecoderBlockSaved {
  readonly self: SublayerSaved<AttentionSaved>;
  readonly cross: SublayerSaved<CrossAttentionSaved>;
  readonly ffn: SublayerSaved<FeedForwardSaved>;
}

function sublayers(block: DecoderBlock): { self: Sublayer; cross: Sublayer; ffn: Sublayer } {
  const common = { preLayerNorm: block.preLayerNorm, dropout: block.residualDropout };
  return {
    self: { ...common, norm: block.selfNorm, bias: block.selfAttention.out.bias! },
    cross: { ...common, norm: block.crossNorm, bias: block.crossAttention.out.bias! },
    ffn: { ...common, norm: block.ffnNorm, bias: block.ffn.fc2.bias! },
  };
}

/** x [B·Lq, H] (target stream), kv: this layer's encoder keys/values → y [B·Lq, H] (a new buffer). */
export function decoderBlockForward(ctx: StepContext, block: DecoderBlock, shape: CrossAttentionShape, x: Tensor, kv: LayerKv): { y: Tensor; saved: DecoderBlockSaved } {
  const s = sublayers(block);
  const selfShape = { batch: shape.batch, seqLen: shape.queryLen };
  const self = sublayerForward(ctx, s.self, x, 'dec.self', (input, proj) => attentionForward(ctx, block.selfAttention, selfShape, input, proj));
  const cross = sublayerForward(ctx, s.cross, self.y, 'dec.cross', (input, proj) => crossAttentionForward(ctx, block.crossAttention, shape, input, kv, proj));
  const ffn = sublayerForward(ctx, s.ffn, cross.y, 'dec.ffn', (input, proj) => feedForwardForward(ctx, block.ffn, input, proj));
  return { y: ffn.y, saved: { self: self.saved, cross: cross.saved, ffn: ffn.saved } };
}

/**
 * dY [B·Lq, H] → dX [B·Lq, H] (a new buffer) and this layer's dk, dv [B, heads, Lk, d]; writes every
 * parameter gradient of the block.
 */
export function decoderBlockBackward(ctx: StepContext, block: DecoderBlock, shape: CrossAttentionShape, saved: DecoderBlockSaved, dY: Tensor): { dX: Tensor; dKv: LayerKv } {
  const s = sublayers(block);
  const selfShape = { batch: shape.batch, seqLen: shape.queryLen };
  const dM2 = sublayerBackward(ctx, s.ffn, saved.ffn, dY, 'dec.ffn', (b, dProj, dIn, acc) => feedForwardBackward(ctx, block.ffn, b, dProj, dIn, acc));
  let dKv: LayerKv | undefined;
  const dM1 = sublayerBackward(ctx, s.cross, saved.cross, dM2, 'dec.cross', (b, dProj, dIn, acc) => {
    dKv = crossAttentionBackward(ctx, block.crossAttention, shape, b, dProj, dIn, acc);
  });
  const dX = sublayerBackward(ctx, s.self, saved.self, dM1, 'dec.self', (b, dProj, dIn, acc) => attentionBackward(ctx, block.selfAttention, selfShape, b, dProj, dIn, acc));
  return { dX, dKv: dKv! };
}
