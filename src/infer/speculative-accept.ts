// Speculative decoding's acceptance rule, on the host (Leviathan et al. 2023; Chen et al. 2023).
//
// A draft model proposed x_1..x_K, drawn from its distributions q_1..q_K; the target scored the K + 1
// positions in one pass, giving p_1..p_{K+1} (p_i and q_i condition on the same prefix). For i = 1..K:
//   accept x_i with probability min(1, p_i(x_i)/q_i(x_i))       (u·q_i(x_i) < p_i(x_i), u uniform in [0, 1))
//   on the first rejection, emit y ~ r(v) = max(0, p_i(v) − q_i(v)) / Σ_w max(0, p_i(w) − q_i(w)) and stop;
// if all K are accepted, emit a bonus y ~ p_{K+1}. Every emitted token is then distributed exactly as the
// target's: P(emit v) = q(v)·min(1, p(v)/q(v)) + (1 − Σ_w min(p(w), q(w)))·r(v) = min(p, q)(v) + max(0, p − q)(v)
// = p(v). Greedy decoding uses the argmax instead: accept while the target's argmax equals the draft token,
// then emit the target's argmax (the output equals plain greedy decoding token for token).
//
// Distributions are built from the logits exactly as sampleTokens filters them (backend.ts): repetition
// penalty ρ on the tokens seen so far, z = fround(logit / T), top-k keeps z ≥ the k-th largest z, top-p
// keeps z ≥ τ (HF's rule), then softmax over the kept set (f64). Each row costs O(V) plus a sort for
// top-p (a sort of the values above a cutoff that already holds top-p of the mass); top-k's threshold is
// a size-k heap (O(V log k)); after it, the work is over the kept set. At V = 50257 on the 2-core dev
// host a row takes ~0.6 ms with top-k 50 (1.4 ms before the kept-set passes) and ~3.5 ms with top-p 0.9
// alone on a peaked row (8 ms with the full sort). Sampled speculative decoding on the H200 was bound by
// these rows (session 11, GPT-2 124M: 2.6–5.7 ms a token at K 1–8 against 0.32 plain, 2K + 1 rows a
// round): the reason acceptance on the device is the next step for sampling at GPU speeds.
//
// Random numbers: a Philox4x32-10 draw (rng.ts) per decision, keyed by the sequence's seed and countered
// by (position of the token decided, kind of decision, 0, SPECULATIVE_DOMAIN); two output words give a
// 53-bit uniform. A decision therefore depends only on the seed, its position and its kind, so runs are
// reproducible on either backend. Reusing a position's draft draw in a later round (after the token there
// was discarded) keeps every decision's uniform independent of what led to it: a rejection at position s
// never depends on the draws at positions after s. Scored on the device (speculative.ts), the residual and
// bonus draws are speculativeSample's Gumbel-max draws instead (backend.ts: per-candidate noise from the same
// SPECULATIVE_DOMAIN stream at counter words c2 = 3 and 4, apart from these uniforms' c2 = 0): exact draws
// from the same distributions, so either path emits tokens distributed as the target's, but a seed gives
// different tokens on the two.

import { SPECULATIVE_DOMAIN } from '../backend/backend.js';
import { philox4x32 } from '../backend/rng.js';
import type { ResolvedSampling } from './sampling.js';


/** Which decision a uniform is for (counter word c1). */
export const DrawKind = { Draft: 0, Accept: 1, Residual: 2, Bonus: 3 } as const;
export type DrawKind = (typeof DrawKind)[keyof typeof DrawKind];

/** The uniform in [0, 1) (53 bits) of decision `kind` about the token at `position`, for `seed`. */
export function speculativeUniform(seed: bigint, position: number, kind: DrawKind): number {
  const k0 = Number(seed & 0xffffffffn), k1 = Number((seed >> 32n) & 0xffffffffn);
  const [w0, w1] = philox4x32(position >>> 0, kind, 0, SPECULATIVE_DOMAIN, k0, k1);
  return ((w0 >>> 5) * 2 ** 26 + (w1 >>> 6)) * 2 ** -53;
}

/** The logits of one row with the repetition penalty applied (as sampleTokens: f32, ÷ρ if positive, ×ρ if not). */
function penalised(logits: ArrayLike<number>, penalty: number, history: readonly number[]): Float32Array {
  const z = new Float32Array(logits.length);
  z.set(logits);
  if (penalty !== 1) {
    for (const t of new Set(history)) z[t] = z[t]! > 0 ? z[t]! / penalty : z[t]! * penalty;
  }
  return z;
}

/** The greedy pick of a row (penalised logits; the lowest index wins a tie, as sampleTokens). */
export function greedyToken(logits: ArrayLike<number>, sampling: Pick<ResolvedSampling, 'repetitionPenalty'>, history: readonly number[]): number {
  const z = sampling.repetitionPenalty === 1 ? logits : penalised(logits, sampling.repetitionPenalty, history);
  let best = 0, top = z[0]!;
  for (let j = 1; j < z.length; j++) if (z[j]! > top) { top = z[j]!; best = j; }
  return best;
}

/**
 * The k-th largest value counted with multiplicity (sampleTokens' top-k threshold): a min-heap of the k
 * largest so far, O(V log k), when k is small against V (HF's 50 of 50257); a sort otherwise.
 */
export function kthLargest(z: Float32Array, k: number): number {
  if (8 * k > z.length) return Float32Array.from(z).sort()[z.length - k]!;
  // The first k values, heapified; then each later value above the heap's minimum replaces it.
  const heap = Float64Array.from(z.subarray(0, k));
  const siftDown = (i: number) => {
    const v = heap[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= k) break;
      const c = l + 1 < k && heap[l + 1]! < heap[l]! ? l + 1 : l;
      if (heap[c]! >= v) break;
      heap[i] = heap[c]!;
      i = c;
    }
    heap[i] = v;
  };
  for (let i = (k >> 1) - 1; i >= 0; i--) siftDown(i);
  let min = heap[0]!;
  for (let j = k; j < z.length; j++) {
    const v = z[j]!;
    if (v > min) { heap[0] = v; siftDown(0); min = heap[0]!; }
  }
  return min;
}

/** Scratch of the scaled logits and the kept indices, reused across rows (grown to the largest V seen). */
let scratchZ = new Float32Array(0), scratchKept = new Int32Array(0);

/**
 * The distribution sampleTokens draws from for a row of logits (temperature > 0): f64, sums to 1.
 * Two passes over the row — z = fround(penalised / T) into a reused scratch (top-k's threshold from
 * it), then the indices of the kept set — and the rest over the kept set only (with top-k 50, ~50 of
 * 50257), in ascending index order, so the sums are those of a pass over the whole row.
 */
export function samplingDistribution(logits: ArrayLike<number>, sampling: ResolvedSampling, history: readonly number[]): Float64Array {
  const { temperature, topK, topP } = sampling;
  const V = logits.length;
  if (scratchZ.length < V) { scratchZ = new Float32Array(V); scratchKept = new Int32Array(V); }
  const z = scratchZ.subarray(0, V), kept = scratchKept;
  z.set(logits);
  if (sampling.repetitionPenalty !== 1) {
    const penalty = sampling.repetitionPenalty;
    for (const t of new Set(history)) z[t] = z[t]! > 0 ? z[t]! / penalty : z[t]! * penalty;
  }
  for (let j = 0; j < V; j++) z[j] = z[j]! / temperature; // stored as f32: fround(z / T), as the sampler
  const kThreshold = topK > 0 && topK < V ? kthLargest(z, topK) : -Infinity;
  let n = 0, max = -Infinity;
  for (let j = 0; j < V; j++) {
    const v = z[j]!;
    if (v >= kThreshold) { kept[n++] = j; if (v > max) max = v; }
  }
  const weights = new Float64Array(V);
  let total = 0;
  for (let i = 0; i < n; i++) { const j = kept[i]!, w = Math.exp(z[j]! - max); weights[j] = w; total += w; }
  let pThreshold = -Infinity;
  if (topP < 1) {
    // τ: the largest value whose top set {z ≥ τ} holds at least topP of the kept mass (equal values go
    // together), found by adding the kept values' masses from the largest down. Only values above a
    // cutoff c whose set {z ≥ c} already holds topP of the mass can be τ, so those are sorted alone (c
    // widened from max − 2 until it holds; every value when none does, or when rounding of the sum in
    // this order leaves the crossing outside them).
    const crossing = (cutoff: number): number | undefined => {
      const sorted = new Float32Array(n);
      let m = 0;
      for (let i = 0; i < n; i++) { const j = kept[i]!; if (weights[j]! > 0 && z[j]! >= cutoff) sorted[m++] = z[j]!; }
      const values = sorted.subarray(0, m).sort();
      let mass = 0;
      for (let i = m - 1; i >= 0; i--) {
        mass += Math.exp(values[i]! - max);
        if ((i === 0 || values[i - 1] !== values[i]) && mass >= topP * total) return values[i]!;
      }
      return undefined;
    };
    let found: number | undefined;
    for (const width of [2, 4, 8, 16, 32]) {
      let mass = 0;
      for (let i = 0; i < n; i++) { const j = kept[i]!; if (z[j]! >= max - width) mass += weights[j]!; }
      if (mass >= topP * total) { found = crossing(max - width); break; }
    }
    found ??= crossing(-Infinity);
    if (found !== undefined) pThreshold = found;
  }
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const j = kept[i]!;
    if (z[j]! < pThreshold) weights[j] = 0;
    sum += weights[j]!;
  }
  for (let i = 0; i < n; i++) { const j = kept[i]!; weights[j] = weights[j]! / sum; }
  return weights;
}

/** Inverse-CDF draw from weights (need not be normalised) with the uniform u ∈ [0, 1). */
export function drawFrom(weights: ArrayLike<number>, u: number): number {
  let total = 0, last = -1;
  for (let j = 0; j < weights.length; j++) if (weights[j]! > 0) { total += weights[j]!; last = j; }
  if (last < 0) throw new Error('internal: a draw from a distribution with no mass');
  const target = u * total;
  let mass = 0;
  for (let j = 0; j < last; j++) {
    mass += weights[j]!;
    if (target < mass) return j;
  }
  return last;
}

export interface Verdict {
  /** Draft tokens accepted (0..K). */
  readonly accepted: number;
  /** The token emitted after them: the residual draw on a rejection, else the bonus draw from p_{K+1}. */
  readonly next: number;
}

/**
 * The exact rule (sampling), on the host. draft[i] was drawn from q[i] and is the token at position
 * firstPosition + i; p gives K + 1 target rows, p[i] for that same position (p[K]: the position after the
 * last draft token), as an array or a function (rows past the first rejection are then never built). The
 * residual and bonus draws are inverse-CDF draws with the position's Residual / Bonus uniform.
 */
export function verifySampled(draft: readonly number[], q: readonly Float64Array[], p: readonly Float64Array[] | ((i: number) => Float64Array), seed: bigint, firstPosition: number): Verdict {
  const K = draft.length;
  if (q.length !== K || (typeof p !== 'function' && p.length !== K + 1)) throw new Error(`internal: ${K} draft tokens need ${K} draft rows and ${K + 1} target rows`);
  const target = typeof p === 'function' ? p : (i: number) => p[i]!;
  return verifyScored(draft, {
    targetAt: (i) => target(i)[draft[i]!]!, draftAt: (i) => q[i]![draft[i]!]!,
    residual: (i) => {
      const pi = target(i), qi = q[i]!, residual = new Float64Array(pi.length);
      let mass = 0;
      for (let j = 0; j < pi.length; j++) { residual[j] = Math.max(0, pi[j]! - qi[j]!); mass += residual[j]!; }
      // p = q to rounding (a rejection then has probability ~0): p itself is the residual's limit.
      return drawFrom(mass > 0 ? residual : pi, speculativeUniform(seed, firstPosition + i, DrawKind.Residual));
    },
    bonus: () => drawFrom(target(K), speculativeUniform(seed, firstPosition + K, DrawKind.Bonus)),
  }, seed, firstPosition);
}

/**
 * A round as the rule reads it: the two probabilities of draft token i (all the acceptance test needs),
 * and the token drawn where the round ends — the residual max(0, p_i − q_i) (normalised; p_i when it has
 * no mass) at the first rejection i, or the bonus from p_K. verifySampled draws them on the host;
 * speculative.ts has them all on the device (tokenProbabilities, speculativeSample).
 */
export interface ScoredRound {
  /** p_i(x_i) and q_i(x_i) for i < K. */
  targetAt(i: number): number;
  draftAt(i: number): number;
  /** The token at position firstPosition + i drawn from the residual of p_i and q_i. */
  residual(i: number): number;
  /** The token at position firstPosition + K drawn from p_K. */
  bonus(): number;
}

/** The acceptance tests over a ScoredRound, then its residual or bonus draw. */
export function verifyScored(draft: readonly number[], round: ScoredRound, seed: bigint, firstPosition: number): Verdict {
  const K = draft.length;
  for (let i = 0; i < K; i++) {
    if (speculativeUniform(seed, firstPosition + i, DrawKind.Accept) * round.draftAt(i) < round.targetAt(i)) continue;
    return { accepted: i, next: round.residual(i) };
  }
  return { accepted: K, next: round.bonus() };
}

/** Greedy verification: target[i] is the target's greedy pick for the position of draft[i] (K + 1 picks). */
export function verifyGreedy(draft: readonly number[], target: readonly number[]): Verdict {
  let i = 0;
  while (i < draft.length && draft[i] === target[i]) i++;
  return { accepted: i, next: target[i]! };
}

/** The lecture's expected tokens per target pass with acceptance rate α and K draft tokens: (1 − α^(K+1)) / (1 − α). */
export function expectedTokensPerPass(alpha: number, K: number): number {
  if (alpha >= 1) return K + 1;
  return (1 - alpha ** (K + 1)) / (1 - alpha);
}
