// Argument checks of sampleTokens (pick each sequence's next token and advance it), shared by the backends.
//   logits (B, Vp) float, classes ≤ Vp;  params f32 (B, 4);  seeds i32 (B, 2);  history i32 (B, maxLen);
//   positions, tokens, finished, limits i32 (B);  stopIds i32 (S), S ≥ 1.
// The values in params (temperature, top-k, top-p, penalty) and positions are data: each backend checks
// them where it can (the CPU when the op runs; the GPU kernel treats bad values as documented).

import type { Tensor } from '../../tensor.js';
import type { RowArgmax, SampleTokensArgs, SpeculativeSampleArgs, TokenProbabilitiesArgs } from '../backend.js';
import type { Dim, OpCheck } from '../validate.js';

/** Columns of `params`: what each sequence's sampler is set to. */
export const SAMPLING_PARAMS = ['temperature', 'topK', 'topP', 'repetitionPenalty'] as const;

/** The rows both sampling ops read: logits (B, Vp) float, params f32 (B, 4), and classes ≤ Vp. */
function checkLogitRows<T extends Tensor>(check: OpCheck<T>, args: { logits: Tensor; params: Tensor; classes?: number }, name = 'logits') {
  const logits = check.tensor(name, args.logits);
  const params = check.tensor('params', args.params);
  check.float(name, logits);
  check.shape(name, logits, ['B', 'Vp']);
  check.dtype('params', params, ['f32']);
  check.shape('params', params, ['B', SAMPLING_PARAMS.length]);
  const Vp = check.size('Vp'), classes = args.classes ?? Vp;
  if (!Number.isInteger(classes) || classes < 1 || classes > Vp) check.fail(`'classes' must be an integer in [1, ${Vp}] (the columns of '${name}'), got ${classes}`);
  return { logits, params, classes, B: check.size('B'), Vp };
}

export function checkSampleTokens<T extends Tensor>(check: OpCheck<T>, args: SampleTokensArgs) {
  const { logits, params, classes, B, Vp } = checkLogitRows(check, args);
  const i32 = (name: string, t: Tensor, pattern: readonly Dim[]) => check.typed(name, t, ['i32'], pattern);
  const seeds = i32('seeds', args.seeds, ['B', 2]);
  const history = i32('history', args.history, ['B', 'maxLen']);
  const [positions, tokens, finished, limits] = (['positions', 'tokens', 'finished', 'limits'] as const).map((name) => i32(name, args[name], ['B'])) as [T, T, T, T];
  const stopIds = i32('stopIds', args.stopIds, ['S']);
  const [maxLen, S] = ['maxLen', 'S'].map((n) => check.size(n)) as [number, number];
  if (S < 1) check.fail("'stopIds' must have at least one slot (−1 marks an unused one)");
  if (maxLen < 2) check.fail(`'history' holds ${maxLen} positions: at least 2 are needed (a token and the next)`);
  const argmax = args.argmax === undefined ? undefined : i32('argmax', args.argmax, ['B', 2]);
  return { logits, params, seeds, positions, history, tokens, finished, limits, stopIds, classes, B, Vp, maxLen, stopSlots: S, argmax };
}

/** tokenProbabilities: logits (R, Vp) float, classes ≤ Vp; params f32 (R, 4); tokens i32 (R); out f32 (R) (R named B in messages). */
export function checkTokenProbabilities<T extends Tensor>(check: OpCheck<T>, args: TokenProbabilitiesArgs) {
  const { logits, params, classes, B: R, Vp } = checkLogitRows(check, args);
  const tokens = check.typed('tokens', args.tokens, ['i32'], ['B']);
  const out = check.typed('out', args.out, ['f32'], ['B']);
  return { logits, params, tokens, out, classes, R, Vp };
}

/**
 * speculativeSample: target (R, Vp) float and draft, if given, of the same dtype and shape; classes ≤ Vp;
 * params f32 (R, 4); seeds i32 (R, 2); positions, out i32 (R) (R named B in messages).
 */
export function checkSpeculativeSample<T extends Tensor>(check: OpCheck<T>, args: SpeculativeSampleArgs) {
  const { logits: target, params, classes, B: R, Vp } = checkLogitRows(check, { logits: args.target, params: args.params, ...(args.classes !== undefined ? { classes: args.classes } : {}) }, 'target');
  const draft = args.draft === undefined ? undefined : check.typed('draft', args.draft, [target.dtype], ['B', 'Vp']);
  const seeds = check.typed('seeds', args.seeds, ['i32'], ['B', 2]);
  const positions = check.typed('positions', args.positions, ['i32'], ['B']);
  const out = check.typed('out', args.out, ['i32'], ['B']);
  return { target, draft, params, seeds, positions, out, classes, R, Vp };
}

/** GemmArgs.argmax of a product with M rows and N columns: out i32 (M, 2), classes an integer in [1, N]. */
export function checkRowArgmax<T extends Tensor>(check: OpCheck<T>, argmax: RowArgmax, M: number, N: number): { out: T; classes: number } {
  const out = check.tensor('argmax.out', argmax.out);
  check.dtype('argmax.out', out, ['i32']);
  if (out.shape.length !== 2 || out.shape[0] !== M || out.shape[1] !== 2) check.fail(`'argmax.out' must be [${M}, 2] (a packed word a row of out), got [${out.shape.join(', ')}]`);
  const classes = argmax.classes;
  if (!Number.isInteger(classes) || classes < 1 || classes > N) check.fail(`'argmax.classes' must be an integer in [1, ${N}] (the columns of out), got ${classes}`);
  return { out, classes };
}
