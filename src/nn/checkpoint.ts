// Gradient checkpointing of one block: a checkpointed block keeps only its input and the dropout
// counter it started from; its activations are recomputed right before its backward, drawing the
// same dropout masks (ctx.replayDropout), so the gradients equal the unchecked run's bit for bit.
// The recomputed buffers are new buffers with short lifetimes, which is where the memory goes.

import type { StepContext } from './step-context.js';

/** What a block keeps for its backward. */
export type Kept<Saved, Input> = { readonly saved: Saved } | { readonly input: Input; readonly dropoutCursor: bigint };

/** Runs `forward(input)`; keeps its saved activations, or only what recomputing them needs. */
export function forwardKeeping<Saved, Input, Output>(
  ctx: StepContext, checkpointed: boolean, input: Input, forward: (input: Input) => { y: Output; saved: Saved },
): { y: Output; kept: Kept<Saved, Input> } {
  const dropoutCursor = ctx.dropoutCursor;
  const r = forward(input);
  return { y: r.y, kept: checkpointed ? { input, dropoutCursor } : { saved: r.saved } };
}

/** The saved activations for the backward: kept, or recomputed now. */
export function savedForBackward<Saved, Input>(ctx: StepContext, kept: Kept<Saved, Input>, forward: (input: Input) => { saved: Saved }): Saved {
  if ('saved' in kept) return kept.saved;
  return ctx.replayDropout(kept.dropoutCursor, () => forward(kept.input).saved);
}

/** Whether block i is checkpointed when every k-th block is (k = 0: none). */
export function isCheckpointed(i: number, every: number, backward: boolean): boolean {
  return backward && every > 0 && i % every === 0;
}
