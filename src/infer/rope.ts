// Rotary position embedding frequencies for Llama-family models: inv_freq[i] for the pairs i < d/2 of a
// head and the factor that scales cos/sin, exactly as transformers' rope initialisation functions compute
// them for each rope_type (modeling_rope_utils.py):
//   default   inv_freq_i = 1 / base^(2i/d)
//   linear    inv_freq / factor (position interpolation)
//   llama3    low frequencies (wavelength > original_max / low_freq_factor) divided by factor, high ones
//             (wavelength < original_max / high_freq_factor) kept, a linear blend in between
//   yarn      per-pair blend of inv_freq and inv_freq / factor over a ramp between the dimensions that
//             rotate beta_fast and beta_slow times in the original context; cos/sin scaled by
//             attention_factor (default 0.1·ln(factor) + 1)
//   dynamic   NTK scaling that only changes the base once a sequence passes the original context; a cache
//             built for at most that many positions is the default RoPE, longer ones are refused (HF
//             would re-rotate keys computed with an older base).
// Computed in float64 and stored as f32 (HF computes in f32: the two differ by an f32 rounding).

import { ArgumentError } from '../errors.js';
import type { LlamaConfig } from '../models/llama.js';

export interface RopeFrequencies {
  /** f32 [headDim / 2]. */
  readonly invFreq: Float32Array;
  /** Multiplies cos and sin (YaRN's attention factor; 1 otherwise). */
  readonly scale: number;
}

function defaultFrequencies(base: number, dim: number): Float64Array {
  return Float64Array.from({ length: dim / 2 }, (_, i) => 1 / base ** ((2 * i) / dim));
}

/** inv_freq and the cos/sin scale for `config`, for a cache of `maxLen` positions. */
export function ropeFrequencies(config: LlamaConfig, maxLen: number): RopeFrequencies {
  const dim = config.headDim, base = config.ropeTheta;
  const inv = defaultFrequencies(base, dim);
  const scaling = config.ropeScaling;
  const done = (values: Float64Array, scale = 1): RopeFrequencies => ({ invFreq: Float32Array.from(values), scale });
  if (scaling === null) return done(inv);
  switch (scaling.type) {
    case 'linear':
      return done(inv.map((f) => f / scaling.factor));
    case 'dynamic': {
      const original = scaling.originalMaxPositions ?? config.maxPositions;
      if (maxLen > original) {
        throw new ArgumentError(`rope_scaling "dynamic": a cache of ${maxLen} positions passes the original context of ${original}, where HF changes the RoPE base as the sequence grows; generate at most ${original} positions`);
      }
      return done(inv);
    }
    case 'llama3': {
      const { factor, lowFreqFactor, highFreqFactor, originalMaxPositions: original } = scaling;
      const lowFreqWavelen = original / lowFreqFactor, highFreqWavelen = original / highFreqFactor;
      return done(inv.map((f) => {
        const wavelen = (2 * Math.PI) / f;
        if (wavelen > lowFreqWavelen) return f / factor;
        if (wavelen < highFreqWavelen) return f;
        const smooth = (original / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
        return (1 - smooth) * (f / factor) + smooth * f;
      }));
    }
    case 'yarn': {
      // transformers ≥ 4.50: with original_max_position_embeddings given, factor = max_position_embeddings / original.
      let factor = scaling.factor;
      let original = config.maxPositions;
      if (scaling.originalMaxPositions !== undefined) {
        original = scaling.originalMaxPositions;
        factor = config.maxPositions / original;
      }
      const scale = scaling.attentionFactor ?? (factor <= 1 ? 1 : 0.1 * Math.log(factor) + 1);
      const correctionDim = (rotations: number) => (dim * Math.log(original / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
      const low = Math.max(Math.floor(correctionDim(scaling.betaFast)), 0);
      let high = Math.min(Math.ceil(correctionDim(scaling.betaSlow)), dim - 1);
      if (low === high) high += 0.001;
      return done(inv.map((f, i) => {
        const ramp = Math.min(1, Math.max(0, (i - low) / (high - low)));
        const extrapolation = 1 - ramp;
        return (f / factor) * (1 - extrapolation) + f * extrapolation;
      }), scale);
    }
  }
}
