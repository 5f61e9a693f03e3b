// speculativeSample for one row at a time, with its small inputs kept between calls: the token that ends a
// sampled speculative round, drawn from the rows still on the device — the residual of the target's and the
// draft's row after a rejection, or the target's row for the bonus. SpeculativeSession (generate --draft)
// and the serving engine's device rounds (serve/device-rounds.ts) draw through it.

import type { Backend } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';
import { samplingParamsRow, seedWords } from './sampling.js';
import type { ResolvedSampling } from './sampling.js';

export class SpeculativeDraw {
  private readonly params: Tensor;
  private readonly seeds: Tensor;
  private readonly positions: Tensor;
  private readonly out: Tensor;

  constructor(private readonly backend: Backend, private readonly classes: number) {
    const b = backend;
    this.params = b.empty([1, 4], 'f32');
    this.seeds = b.empty([1, 2], 'i32');
    this.positions = b.empty([1], 'i32');
    this.out = b.empty([1], 'i32');
  }

  /** The token at `position` from target [1, Vp] (and draft [1, Vp]: the residual), under `sampling` without its penalty. */
  sample(target: Tensor, draft: Tensor | undefined, sampling: ResolvedSampling, position: number): number {
    const b = this.backend, p = samplingParamsRow(sampling);
    p[1] = Math.min(p[1]!, this.classes);
    p[3] = 1;
    b.upload(this.params, p);
    b.upload(this.seeds, seedWords(sampling.seed, 0));
    b.upload(this.positions, [position]);
    b.speculativeSample({ target, ...(draft ? { draft } : {}), classes: this.classes, params: this.params, seeds: this.seeds, positions: this.positions, out: this.out });
    return (b.download(this.out) as Int32Array)[0]!;
  }

  free(): void {
    for (const t of [this.params, this.seeds, this.positions, this.out]) this.backend.free(t);
  }
}
