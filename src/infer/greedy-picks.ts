// The greedy picks of rows of logits made on the device: sampleTokens run over the rows as if each were a
// sequence at position 0 with greedy settings (T = 0, top-k 0, top-p 1, no penalty), so each row's argmax —
// the lowest index on ties, as greedyToken's on the host — lands in history[r, 1] and n ints cross PCIe
// instead of n rows of V floats. Speculative verification and drafting use it (infer/engine.ts's eager
// extendGreedy, serve/engine.ts's rounds).

import type { Backend } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';

export class GreedyPicker {
  private readonly params: Tensor;
  private readonly positions: Tensor;
  private readonly tokens: Tensor;
  private readonly seeds: Tensor;
  private readonly history: Tensor;
  private readonly finished: Tensor;
  private readonly limits: Tensor;
  private readonly stopIds: Tensor;

  /** Buffers for up to `capacity` rows of a vocabulary of `classes` (the logits' first columns). */
  constructor(private readonly backend: Backend, readonly capacity: number, private readonly classes: number) {
    const b = backend, n = capacity;
    const params = new Float32Array(4 * n);
    for (let r = 0; r < n; r++) params.set([0, 0, 1, 1], 4 * r);
    this.params = b.fromArray(params, [n, 4], 'f32');
    this.positions = b.fromArray(new Int32Array(n), [n], 'i32');
    this.tokens = b.empty([n], 'i32');
    this.seeds = b.fromArray(new Int32Array(2 * n), [n, 2], 'i32');
    this.history = b.fromArray(new Int32Array(2 * n), [n, 2], 'i32');
    this.finished = b.empty([n], 'i32');
    // Position 0 with limit 2: every row finishes after its pick, so sampleTokens writes history and never tokens or positions.
    this.limits = b.fromArray(new Int32Array(n).fill(2), [n], 'i32');
    this.stopIds = b.fromArray([-1], [1], 'i32');
  }

  /** The argmax of each row of logits [n, Vp] (n ≤ capacity). */
  pick(logits: Tensor): number[] {
    const b = this.backend, n = logits.shape[0]!;
    if (n < 1 || n > this.capacity) throw new RangeError(`greedy picks: ${n} rows, the buffers hold 1..${this.capacity}`);
    const view = (t: Tensor, width = 1) => b.view(t, 0, width === 1 ? [n] : [n, width]);
    b.fill(view(this.finished), 0);
    b.sampleTokens({
      logits, classes: this.classes, params: view(this.params, 4), seeds: view(this.seeds, 2), positions: view(this.positions), history: view(this.history, 2),
      tokens: view(this.tokens), finished: view(this.finished), limits: view(this.limits), stopIds: this.stopIds,
    });
    const picks = b.download(view(this.history, 2)) as Int32Array;
    return Array.from({ length: n }, (_, r) => picks[2 * r + 1]!);
  }

  free(): void {
    for (const t of [this.params, this.positions, this.tokens, this.seeds, this.history, this.finished, this.limits, this.stopIds]) this.backend.free(t);
  }
}
