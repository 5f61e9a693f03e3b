// Seeded host-side random data for tests: fresh per run (the seed is printed on failure), never zeros.

export class Rng {
  private state: number;
  constructor(readonly seed: number) { this.state = seed >>> 0 || 1; }

  /** Uniform in [0, 1) (mulberry32). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  normal(): number {
    const u = Math.max(this.next(), 1e-12), v = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  floats(n: number, scale = 1, mean = 0): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = mean + scale * this.normal();
    return out;
  }

  ints(n: number, low: number, high: number): Int32Array {
    const out = new Int32Array(n);
    for (let i = 0; i < n; i++) out[i] = low + Math.floor(this.next() * (high - low));
    return out;
  }

  /** A random permutation of 0 … n−1 (Fisher–Yates). */
  permutation(n: number): Int32Array {
    const out = Int32Array.from({ length: n }, (_, i) => i);
    for (let k = n - 1; k > 0; k--) {
      const j = Math.floor(this.next() * (k + 1));
      [out[k], out[j]] = [out[j]!, out[k]!];
    }
    return out;
  }
}

export function freshSeed(): number {
  const fromEnv = process.env.FUSEFORMER_TEST_SEED;
  return fromEnv ? Number(fromEnv) : (Date.now() ^ (process.pid << 8)) >>> 0;
}
