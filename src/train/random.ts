// Host-side random numbers for data loading (shuffles, masked-LM masks), from Philox4x32-10 — the same
// counter-based generator the dropout kernels use (backend/rng.ts). Counter-based means draw n of
// stream s is a pure function of (seed, s, n): the generator's whole state is three integers, so a
// resumed run regenerates exactly the numbers it would have drawn, and independent uses (the shuffle
// of epoch 3, the mask of batch 812) get their own stream instead of sharing one sequence.
//
// Mapping: block b of (domain d, stream s) is philox4x32(c0 = b lo, c1 = b hi, c2 = s, c3 = d;
// key = seed lo, hi); draw n is word n % 4 of block floor(n / 4). The domain separates uses (shuffles,
// masks) so that one seed drives all of them without two uses ever sharing numbers.

import { philox4x32 } from '../backend/rng.js';
import { ArgumentError } from '../errors.js';

export interface CounterRngState {
  readonly seed: number;
  readonly stream: number;
  readonly domain: number;
  /** 32-bit words drawn so far. */
  readonly drawn: number;
}

export class CounterRng {
  private readonly k0: number;
  private readonly k1: number;
  private block: [number, number, number, number] = [0, 0, 0, 0];
  private blockIndex = -1;
  private n: number;

  /** `seed`: integer in [0, 2^53); `stream`, `domain`: integers in [0, 2^32). */
  constructor(readonly seed: number, readonly stream = 0, readonly domain = 0, drawn = 0) {
    checkSeed(seed);
    for (const [name, v] of [['stream', stream], ['domain', domain]] as const) {
      if (!Number.isInteger(v) || v < 0 || v >= 2 ** 32) throw new ArgumentError(`rng: ${name} must be an integer in [0, 2^32), got ${v}`);
    }
    if (!Number.isSafeInteger(drawn) || drawn < 0) throw new ArgumentError(`rng: drawn must be an integer >= 0, got ${drawn}`);
    this.k0 = seed >>> 0;
    this.k1 = Math.floor(seed / 2 ** 32) >>> 0;
    this.n = drawn;
  }

  static restore(state: CounterRngState): CounterRng {
    return new CounterRng(state.seed, state.stream, state.domain, state.drawn);
  }

  state(): CounterRngState {
    return { seed: this.seed, stream: this.stream, domain: this.domain, drawn: this.n };
  }

  /** A uniform 32-bit unsigned integer. */
  nextU32(): number {
    const b = Math.floor(this.n / 4);
    if (b !== this.blockIndex) {
      this.block = philox4x32(b >>> 0, Math.floor(b / 2 ** 32) >>> 0, this.stream, this.domain, this.k0, this.k1);
      this.blockIndex = b;
    }
    return this.block[this.n++ % 4]!;
  }

  /** A uniform number in [0, 1) with 32 random bits. */
  nextFloat(): number {
    return this.nextU32() / 2 ** 32;
  }

  /** A uniform integer in [0, n), n in [1, 2^32]; unbiased (rejects the top sliver of the 32-bit range). */
  nextInt(n: number): number {
    if (!Number.isInteger(n) || n < 1 || n > 2 ** 32) throw new ArgumentError(`rng: nextInt bound must be an integer in [1, 2^32], got ${n}`);
    const limit = 2 ** 32 - (2 ** 32 % n);
    for (;;) {
      const u = this.nextU32();
      if (u < limit) return u % n;
    }
  }
}

/** Domains of the data pipeline's random streams (see the file comment). */
export const RNG_DOMAIN = { shuffle: 1, maskedLM: 2 } as const;

export function checkSeed(seed: number, what = 'seed'): void {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new ArgumentError(`${what} must be an integer in [0, 2^53), got ${String(seed)}`);
}

/** Fisher–Yates permutation of [0, n) drawn from `rng`. */
export function permutation(n: number, rng: CounterRng): Uint32Array {
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = i;
  for (let i = n - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    const t = out[i]!; out[i] = out[j]!; out[j] = t;
  }
  return out;
}
