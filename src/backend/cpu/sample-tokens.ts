// sampleTokens: each sequence's next token from its logits — greedy, or temperature with top-k / top-p
// filtering and a Gumbel-max draw from Philox — and the sequence's update (backend.ts has the contract).
//
// The values z are computed exactly as the GPU computes them in f32 (every division and product rounded
// to f32 with Math.fround; −0 counts as +0), so greedy picks and the top-k threshold agree bit for bit.
// The top-p mass and the Gumbel noise are float64 here and f32 on the GPU: the two backends then agree
// unless two candidates' scores (or a mass and the top-p boundary) tie to within rounding.

import { argmaxColumn, SAMPLING_DOMAIN, SPECULATIVE_DOMAIN, SPECULATIVE_NOISE_BONUS, SPECULATIVE_NOISE_RESIDUAL } from '../backend.js';
import type { SampleTokensArgs, SpeculativeSampleArgs, TokenProbabilitiesArgs } from '../backend.js';
import { checkSampleTokens, checkSpeculativeSample, checkTokenProbabilities } from '../op-checks/index.js';
import { philox4x32 } from '../rng.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { floatsOf, int32sOf } from './tensor.js';

/** The Gumbel noise of candidate j for a draw at `position` with (seedLo, seedHi): −ln(−ln u_j). */
export function gumbelNoise(j: number, position: number, seedLo: number, seedHi: number): number {
  const words = philox4x32(Math.floor(j / 4) >>> 0, position >>> 0, 0, SAMPLING_DOMAIN, seedLo >>> 0, seedHi >>> 0);
  const u = ((words[j % 4]! >>> 9) + 0.5) * 2 ** -23;
  return -Math.log(-Math.log(u));
}

/** speculativeSample's noise of candidate v (backend.ts): −ln(−ln u_v) from the SPECULATIVE_DOMAIN stream at counter c2 = noise. */
export function speculativeNoise(v: number, position: number, noise: number, seedLo: number, seedHi: number): number {
  const words = philox4x32(Math.floor(v / 4) >>> 0, position >>> 0, noise, SPECULATIVE_DOMAIN, seedLo >>> 0, seedHi >>> 0);
  const u = ((words[v % 4]! >>> 9) + 0.5) * 2 ** -23;
  return -Math.log(-Math.log(u));
}

/** Index of the largest value among those `keep` accepts; the lowest index wins a tie. */
function argmax(values: ArrayLike<number>, keep: (j: number) => boolean = () => true): number {
  let best = -1;
  for (let j = 0; j < values.length; j++) {
    if (!keep(j)) continue;
    if (best < 0 || values[j]! > values[best]!) best = j;
  }
  return best;
}

/** The smallest value of the top-k set: the k-th largest value counted with multiplicity. */
function topKThreshold(z: Float32Array, k: number): number {
  if (k <= 0 || k >= z.length) return -Infinity;
  const sorted = Float32Array.from(z).sort();
  return sorted[z.length - k]!;
}

/** τ: the largest value whose top set {z ≥ τ} (within `kept`) holds at least `p` of the kept mass. */
function topPThreshold(z: Float32Array, kept: (j: number) => boolean, p: number): number {
  if (p >= 1) return -Infinity;
  let max = -Infinity;
  for (let j = 0; j < z.length; j++) if (kept(j)) max = Math.max(max, z[j]!);
  const byValue = new Map<number, number>();
  let total = 0;
  for (let j = 0; j < z.length; j++) {
    if (!kept(j)) continue;
    const w = Math.exp(z[j]! - max);
    total += w;
    byValue.set(z[j]!, (byValue.get(z[j]!) ?? 0) + w);
  }
  const target = p * total;
  let mass = 0;
  for (const value of [...byValue.keys()].sort((a, b) => b - a)) {
    mass += byValue.get(value)!;
    if (mass >= target) return value;
  }
  return -Infinity;
}

/** Row b of sampleTokens' params (temperature, top-k, top-p, penalty), each checked. */
function samplingRow(check: CpuCheck, settings: Float32Array, b: number): [number, number, number, number] {
  const [temperature, topK, topP, penalty] = [0, 1, 2, 3].map((i) => settings[b * 4 + i]!) as [number, number, number, number];
  if (!(temperature >= 0) || !Number.isFinite(temperature)) check.fail(`'params'[${b}] temperature ${temperature} must be a finite number >= 0`);
  if (!Number.isInteger(topK) || topK < 0) check.fail(`'params'[${b}] top-k ${topK} must be an integer >= 0`);
  if (!(topP > 0 && topP <= 1)) check.fail(`'params'[${b}] top-p ${topP} must be in (0, 1]`);
  if (!(penalty > 0) || !Number.isFinite(penalty)) check.fail(`'params'[${b}] repetition penalty ${penalty} must be a finite number > 0`);
  return [temperature, topK, topP, penalty];
}

/** Scales z by 1/T in place (f32, −0 as +0) and returns sampleTokens' kept set: z ≥ top-k's threshold and ≥ top-p's τ. */
function keptSet(z: Float32Array, temperature: number, topK: number, topP: number): (j: number) => boolean {
  for (let j = 0; j < z.length; j++) { const v = Math.fround(z[j]! / temperature); z[j] = v === 0 ? 0 : v; }
  const kThreshold = topKThreshold(z, topK);
  const inTopK = (j: number) => z[j]! >= kThreshold;
  const pThreshold = topPThreshold(z, inTopK, topP);
  return (j: number) => z[j]! >= kThreshold && z[j]! >= pThreshold;
}

/** tokenProbabilities (backend.ts): each row's probability of its token under sampleTokens' distribution, f64. */
export function prepareTokenProbabilities(args: TokenProbabilitiesArgs): CpuWork {
  const check = new CpuCheck('tokenProbabilities');
  const { logits, params, tokens, out, classes, R, Vp } = checkTokenProbabilities(check, args);
  return check.work(() => {
    const logitRows = floatsOf(logits), settings = floatsOf(params), picks = int32sOf(tokens), probs = floatsOf(out);
    for (let r = 0; r < R; r++) {
      const [temperature, topK, topP, penalty] = samplingRow(check, settings, r);
      if (penalty !== 1) check.fail(`'params'[${r}] repetition penalty ${penalty}: tokenProbabilities does not apply a penalty (it must be 1)`);
      const t = picks[r]!;
      if (!Number.isInteger(t) || t < 0 || t >= classes) check.fail(`'tokens'[${r}] = ${t} is outside the vocabulary [0, ${classes})`);
      const z = Float32Array.from(logitRows.subarray(r * Vp, r * Vp + classes), (v) => (v === 0 ? 0 : v));
      if (temperature === 0) { probs[r] = argmax(z) === t ? 1 : 0; continue; }
      const kept = keptSet(z, temperature, topK, topP);
      if (!kept(t)) { probs[r] = 0; continue; }
      let max = -Infinity, total = 0;
      for (let j = 0; j < classes; j++) if (kept(j)) max = Math.max(max, z[j]!);
      for (let j = 0; j < classes; j++) if (kept(j)) total += Math.exp(z[j]! - max);
      probs[r] = Math.exp(z[t]! - max) / total;
    }
  });
}

/** A row's distribution as tokenProbabilities defines it (f64; 0 outside the kept set) and its z (scaled logits). */
function keptDistribution(row: Float32Array, temperature: number, topK: number, topP: number): { z: Float32Array; p: Float64Array; kept: (j: number) => boolean } {
  const z = Float32Array.from(row, (v) => (v === 0 ? 0 : v));
  const kept = keptSet(z, temperature, topK, topP), p = new Float64Array(z.length);
  let max = -Infinity, total = 0;
  for (let j = 0; j < z.length; j++) if (kept(j)) max = Math.max(max, z[j]!);
  for (let j = 0; j < z.length; j++) if (kept(j)) { p[j] = Math.exp(z[j]! - max); total += p[j]!; }
  for (let j = 0; j < z.length; j++) p[j] = p[j]! / total;
  return { z, p, kept };
}

/** speculativeSample (backend.ts): the residual's or the target's Gumbel-max draw per row, f64. */
export function prepareSpeculativeSample(args: SpeculativeSampleArgs): CpuWork {
  const check = new CpuCheck('speculativeSample');
  const { target, draft, params, seeds, positions, out, classes, R, Vp } = checkSpeculativeSample(check, args);
  return check.work(() => {
    const targetRows = floatsOf(target), draftRows = draft ? floatsOf(draft) : undefined, settings = floatsOf(params);
    const seedWords = int32sOf(seeds), pos = int32sOf(positions), picks = int32sOf(out);
    for (let r = 0; r < R; r++) {
      const [temperature, topK, topP, penalty] = samplingRow(check, settings, r);
      if (penalty !== 1) check.fail(`'params'[${r}] repetition penalty ${penalty}: speculativeSample does not apply a penalty (it must be 1)`);
      const rowOf = (rows: Float32Array) => rows.subarray(r * Vp, r * Vp + classes);
      if (temperature === 0) { picks[r] = argmax(Float32Array.from(rowOf(targetRows), (v) => (v === 0 ? 0 : v))); continue; }
      const { z, p, kept } = keptDistribution(rowOf(targetRows), temperature, topK, topP);
      const q = draftRows ? keptDistribution(rowOf(draftRows), temperature, topK, topP).p : undefined;
      const seedLo = seedWords[2 * r]!, seedHi = seedWords[2 * r + 1]!, position = pos[r]!;
      // The residual's draw when it has mass; else (and for the bonus) the target's.
      let best = -1, bestScore = -Infinity;
      if (q) {
        for (let v = 0; v < classes; v++) {
          const w = p[v]! - q[v]!;
          if (!(w > 0)) continue;
          const score = Math.log(w) + speculativeNoise(v, position, SPECULATIVE_NOISE_RESIDUAL, seedLo, seedHi);
          if (best < 0 || score > bestScore) { best = v; bestScore = score; }
        }
      }
      if (best < 0) {
        const noise = q ? SPECULATIVE_NOISE_RESIDUAL : SPECULATIVE_NOISE_BONUS;
        for (let v = 0; v < classes; v++) {
          if (!kept(v)) continue;
          const score = z[v]! + speculativeNoise(v, position, noise, seedLo, seedHi);
          if (best < 0 || score > bestScore) { best = v; bestScore = score; }
        }
      }
      picks[r] = best;
    }
  });
}

export function prepareSampleTokens(args: SampleTokensArgs): CpuWork {
  const check = new CpuCheck('sampleTokens');
  const { logits, params, seeds, positions, history, tokens, finished, limits, stopIds, classes, B, Vp, maxLen, argmax: slots } = checkSampleTokens(check, args);

  return check.work(() => {
    const logitRows = floatsOf(logits), settings = floatsOf(params), seedWords = int32sOf(seeds);
    const pos = int32sOf(positions), past = int32sOf(history), next = int32sOf(tokens), done = int32sOf(finished);
    const cap = int32sOf(limits), stops = new Set(int32sOf(stopIds));
    const packed = slots ? int32sOf(slots) : undefined;
    for (let b = 0; b < B; b++) {
      // The row's packed greedy pick (the LM head's RowArgmax), its slot zeroed for the next product.
      const picked = packed ? argmaxColumn(packed[2 * b]!, packed[2 * b + 1]!) : undefined;
      if (packed) packed.fill(0, 2 * b, 2 * b + 2);
      if (done[b] !== 0) continue;
      const p = pos[b]!;
      if (p < 0 || p + 1 >= maxLen) check.fail(`'positions'[${b}] = ${p}: the next token's position ${p + 1} is outside 'history' [0, ${maxLen})`);
      const [temperature, topK, topP, penalty] = samplingRow(check, settings, b);

      const z = Float32Array.from(logitRows.subarray(b * Vp, b * Vp + classes), (v) => (v === 0 ? 0 : v));
      if (penalty !== 1) {
        const seen = new Set(past.subarray(b * maxLen, b * maxLen + p + 1));
        for (const t of seen) {
          if (t < 0 || t >= classes) check.fail(`'history'[${b}] holds token ${t}, outside the vocabulary [0, ${classes})`);
          z[t] = z[t]! > 0 ? Math.fround(z[t]! / penalty) : Math.fround(z[t]! * penalty);
        }
      }
      let token: number;
      if (temperature === 0 && penalty === 1 && picked !== undefined) {
        token = picked;
      } else if (temperature === 0) {
        token = argmax(z);
      } else {
        const kept = keptSet(z, temperature, topK, topP);
        const seedLo = seedWords[2 * b]!, seedHi = seedWords[2 * b + 1]!;
        const scores = new Float64Array(classes);
        for (let j = 0; j < classes; j++) scores[j] = kept(j) ? z[j]! + gumbelNoise(j, p + 1, seedLo, seedHi) : -Infinity;
        token = argmax(scores, kept);
      }
      past[b * maxLen + p + 1] = token;
      if (stops.has(token) || p + 2 >= cap[b]!) {
        done[b] = 1;
      } else {
        next[b] = token;
        pos[b] = p + 1;
      }
    }
  });
}
