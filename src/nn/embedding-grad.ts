// The token (+ position) embedding's backward with the gradient tables accumulated in f32.
//
// The embedding backward scatters one row of dOut onto the token's gradient row per (b, l): a frequent
// token (GPT-2's "the", BERT's [MASK]) collects thousands of adds in one step. Rounding the running sum
// to 16 bits after every add (f16/bf16 atomics) loses most of it — measured on GPT-2 and BERT against
// HF's fp32 gradients: 0.9–1.3% relative error on the token table. So for f16/bf16 gradients the adds
// go to f32 copies of the tables (planned step buffers), rounded once into the real gradients at the
// end: 4 extra passes over the tables (copy in, copy out), about 0.1 ms for GPT-2's 50k × 768 per step.

import type { EmbeddingBackwardArgs } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';
import type { StepContext } from './step-context.js';

export interface EmbeddingGradArgs extends Omit<EmbeddingBackwardArgs, 'dTokenTable' | 'dPositionTable'> {
  /** The token table's gradient. */
  tokenGrad: Tensor;
  /** Add to tokenGrad's current value (a tied LM head already wrote its share) instead of overwriting it. */
  accumulateTokenGrad: boolean;
  /** The position table's gradient, overwritten (rows the step does not reach become 0). */
  positionGrad?: Tensor;
}

export function embeddingBackwardF32(ctx: StepContext, args: EmbeddingGradArgs): void {
  const { tokenGrad, accumulateTokenGrad, positionGrad, ...rest } = args;
  if (tokenGrad.dtype === 'f32') {
    if (!accumulateTokenGrad) ctx.ops.fill(tokenGrad, 0);
    if (positionGrad) ctx.ops.fill(positionGrad, 0);
    ctx.ops.embeddingBackward({ ...rest, dTokenTable: tokenGrad, dPositionTable: positionGrad });
    return;
  }
  const tokens32 = ctx.buffer('embed.dTokenTable.f32', tokenGrad.shape, 'f32');
  if (accumulateTokenGrad) ctx.ops.copy(tokenGrad, tokens32);
  else ctx.ops.fill(tokens32, 0);
  const positions32 = positionGrad ? ctx.buffer('embed.dPositionTable.f32', positionGrad.shape, 'f32') : undefined;
  if (positions32) ctx.ops.fill(positions32, 0);
  ctx.ops.embeddingBackward({ ...rest, dTokenTable: tokens32, dPositionTable: positions32 });
  ctx.ops.copy(tokens32, tokenGrad);
  if (positionGrad && positions32) ctx.ops.copy(positions32, positionGrad);
}
