// Philox4x32-10, the counter-based RNG behind every dropout mask (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC11). Counter-based means element i's random number is a pure
// function of (seed, offset, i): the CPU backend and the CUDA kernels (device-lib.ts has the same
// rounds in CUDA C) draw identical masks, and a backward pass or a recomputation can redraw them.
//
// Dropout mapping: element i uses counter (offset + floor(i / 8)) as the 64-bit pair (c0, c1),
// c2 = c3 = 0, key = (seed lo, seed hi); of the four output words it takes word floor((i % 8) / 2),
// and of that word the low 16 bits for even i, the high 16 bits for odd i. The element is kept iff
// that 16-bit uniform integer >= dropoutThreshold(p) = ceil(p·2^16). Comparing integers, not
// floats, keeps the decision bit-identical across backends. One Philox call (~45 integer
// instructions on the GPU) thus decides 8 elements: a whole 16-byte vector of f16/bf16, which is
// what keeps the fused dropout kernels memory-bound instead of integer-bound. The kept fraction is
// 1 − ceil(p·2^16)/2^16, within 2^-16 of 1 − p; kept values are scaled by 1/(1 − p), so the
// expectation is biased by less than 2^-16/(1 − p) relative (p = 0.1: 1.7e-5), far below 16-bit
// rounding.
//
// randomFill keeps its own mapping (counter offset + floor(i / 4), word i % 4, 24-bit uniforms).
// dropoutOffsetAdvance(numel) = ceil(numel / 4) covers both: a dropout op uses only the first
// ceil(numel / 8) counters of that range, so streams advanced by it never overlap.

import type { RandomDistribution } from './validate.js';

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** High 32 bits of the 64-bit product of two unsigned 32-bit integers. */
function mulHi32(a: number, b: number): number {
  const al = a & 0xffff, ah = a >>> 16, bl = b & 0xffff, bh = b >>> 16;
  const t0 = al * bl;
  const t1 = ah * bl + (t0 >>> 16);
  const t2 = al * bh + (t1 & 0xffff);
  return (ah * bh + Math.floor(t1 / 65536) + Math.floor(t2 / 65536)) >>> 0;
}

/** The four 32-bit output words of Philox4x32-10 for one counter and key. */
export function philox4x32(c0: number, c1: number, c2: number, c3: number, k0: number, k1: number): [number, number, number, number] {
  for (let round = 0; round < 10; round++) {
    const hi0 = mulHi32(M0, c0), lo0 = Math.imul(M0, c0) >>> 0;
    const hi1 = mulHi32(M1, c2), lo1 = Math.imul(M1, c2) >>> 0;
    const n0 = (hi1 ^ c1 ^ k0) >>> 0, n2 = (hi0 ^ c3 ^ k1) >>> 0;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 = (k0 + W0) >>> 0; k1 = (k1 + W1) >>> 0;
  }
  return [c0, c1, c2, c3];
}

/** Dropout elements decided by one Philox call (four 32-bit words, two 16-bit uniforms each). */
export const DROPOUT_ELEMENTS_PER_COUNTER = 8;

/** Integer threshold on 16-bit uniforms: keep iff uniform16 >= threshold (p = 0 keeps all). */
export function dropoutThreshold(p: number): number {
  return Math.min(2 ** 16, Math.ceil(p * 2 ** 16));
}

/**
 * How far a caller advances `offset` after an op that drew `numel` random values: ceil(numel / 4)
 * counters, what randomFill consumes; dropout consumes ceil(numel / 8) of them.
 */
export function dropoutOffsetAdvance(numel: number): bigint {
  return BigInt(Math.ceil(numel / 4));
}

/** The 16-bit uniform integer that decides dropout element j (0–7) of one counter's words. */
export function dropoutUniform16(words: readonly number[], j: number): number {
  return (words[j >>> 1]! >>> (16 * (j & 1))) & 0xffff;
}

/** Fills `mask` (1 = kept) for elements [0, mask.length) of an op called with (seed, offset). */
export function dropoutMask(mask: Uint8Array, p: number, seed: bigint, offset: bigint): void {
  const threshold = dropoutThreshold(p);
  const k0 = Number(seed & 0xffffffffn), k1 = Number((seed >> 32n) & 0xffffffffn);
  const n = DROPOUT_ELEMENTS_PER_COUNTER;
  for (let i = 0; i < mask.length; i += n) {
    const counter = offset + BigInt(i / n);
    const words = philox4x32(Number(counter & 0xffffffffn), Number((counter >> 32n) & 0xffffffffn), 0, 0, k0, k1);
    for (let j = 0; j < n && i + j < mask.length; j++) mask[i + j] = dropoutUniform16(words, j) >= threshold ? 1 : 0;
  }
}

/** The random value for element i of a randomFill (see RandomFillArgs in backend.ts), in f64. */
export function randomFillValues(
  n: number, seed: bigint, offset: bigint,
  distribution: RandomDistribution,
): Float64Array {
  const out = new Float64Array(n);
  const k0 = Number(seed & 0xffffffffn), k1 = Number((seed >> 32n) & 0xffffffffn);
  const unit = 2 ** -24;
  for (let i = 0; i < n; i += 4) {
    const counter = offset + BigInt(i >>> 2);
    const w = philox4x32(Number(counter & 0xffffffffn), Number((counter >> 32n) & 0xffffffffn), 0, 0, k0, k1);
    const values = [0, 0, 0, 0];
    if (distribution.kind === 'uniform') {
      for (let j = 0; j < 4; j++) values[j] = distribution.low + (distribution.high - distribution.low) * (w[j]! >>> 8) * unit;
    } else {
      for (let pair = 0; pair < 4; pair += 2) {
        const r = Math.sqrt(-2 * Math.log(((w[pair]! >>> 8) + 1) * unit));
        const theta = 2 * Math.PI * (w[pair + 1]! >>> 8) * unit;
        values[pair] = distribution.mean + distribution.std * r * Math.cos(theta);
        values[pair + 1] = distribution.mean + distribution.std * r * Math.sin(theta);
      }
    }
    for (let j = 0; j < 4 && i + j < n; j++) out[i + j] = values[j]!;
  }
  return out;
}
