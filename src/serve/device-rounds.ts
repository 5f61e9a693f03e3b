// Sampled speculative rounds of the serving engine on the device (engine.ts, "Speculative decoding"): the
// draft's tokens are drawn by sampleTokens, q_i(x_i) and p_i(x_i) scored by tokenProbabilities, and the
// round's last token drawn by speculativeSample from the rows still on the device — so a round reads its
// K tokens, 2K floats and one int, not 2K + 1 rows of V logits (the rule is the one SpeculativeSession
// runs for `generate --draft`: infer/speculative-accept.ts's verifyScored).
//
// The draft's logits of pass j are overwritten by pass j + 1, so the rows a residual draw may need are
// copied into `kept` as each pass ends (the proposing rows of a pass are contiguous in its logits, so one
// copy a pass). Everything here is valid until the next step's drafting.

import type { Backend } from '../backend/backend.js';
import { samplingParamsRow } from '../infer/sampling.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import { SpeculativeDraw } from '../infer/speculative-draw.js';
import type { Tensor } from '../tensor.js';

/** sampleTokens' settings for a row with its penalty dropped: speculative serving's distributions have none. */
export function penaltyFree(sampling: ResolvedSampling): ResolvedSampling {
  return sampling.repetitionPenalty === 1 ? sampling : { ...sampling, repetitionPenalty: 1 };
}

export class DeviceRounds {
  /** The draft's kept rows of logits [keptRows, Vp]. */
  private readonly kept: Tensor;
  private keptUsed = 0;
  private readonly params: Tensor;
  private readonly tokens: Tensor;
  private readonly out: Tensor;
  private readonly draw: SpeculativeDraw;

  /**
   * Buffers for `keptRows` draft rows (maxRunning · maxDraftTokens) and `scoreRows` rows scored at once
   * (the target's logit rows of a step), of logits [., Vp] in `dtype`.
   */
  constructor(private readonly backend: Backend, readonly keptRows: number, readonly scoreRows: number, private readonly paddedVocab: number, dtype: Tensor['dtype'], private readonly classes: number) {
    const b = backend;
    const made: Tensor[] = [];
    const keep = (t: Tensor) => { made.push(t); return t; };
    try {
      this.kept = keep(b.empty([keptRows, paddedVocab], dtype));
      this.params = keep(b.empty([scoreRows, 4], 'f32'));
      this.tokens = keep(b.empty([scoreRows], 'i32'));
      this.out = keep(b.empty([scoreRows], 'f32'));
      this.draw = new SpeculativeDraw(b, classes);
    } catch (e) {
      for (const t of made) b.free(t);
      throw e;
    }
  }

  /** A new step's drafting starts: the kept rows are reused from the top. */
  reset(): void { this.keptUsed = 0; }

  /** Copies a pass's n rows of logits [n, Vp] into the kept rows; returns the index of the first. */
  keep(logits: Tensor): number {
    const n = logits.shape[0]!, first = this.keptUsed;
    if (first + n > this.keptRows) throw new RangeError(`internal: ${first + n} kept draft rows, the buffer holds ${this.keptRows}`);
    this.backend.copy(logits, this.backend.view(this.kept, first * this.paddedVocab, [n, this.paddedVocab]));
    this.keptUsed += n;
    return first;
  }

  /** Kept draft row i, [1, Vp]. */
  keptRow(i: number): Tensor { return this.backend.view(this.kept, i * this.paddedVocab, [1, this.paddedVocab]); }

  /**
   * Each row's probability of its token under its settings (tokenProbabilities; `rows[r]` null: a row that
   * is not scored, given greedy settings and token 0). Reads the R floats back.
   */
  score(logits: Tensor, rows: readonly ({ readonly sampling: ResolvedSampling; readonly token: number } | null)[]): Float32Array {
    const b = this.backend, R = rows.length;
    if (R > this.scoreRows) throw new RangeError(`internal: ${R} rows to score, the buffers hold ${this.scoreRows}`);
    const params = new Float32Array(4 * R), tokens = new Int32Array(R);
    rows.forEach((row, r) => {
      const p = row ? samplingParamsRow(penaltyFree(row.sampling)) : [0, 0, 1, 1];
      p[1] = Math.min(p[1]!, this.classes);
      params.set(p, 4 * r);
      tokens[r] = row?.token ?? 0;
    });
    const paramsView = b.view(this.params, 0, [R, 4]), tokensView = b.view(this.tokens, 0, [R]);
    b.upload(paramsView, params);
    b.upload(tokensView, tokens);
    return this.probabilities(logits, paramsView, tokensView);
  }

  /** tokenProbabilities of tokens and settings already on the device (the draft's draws: sampleTokens' inputs and output); reads the R floats back. */
  probabilities(logits: Tensor, params: Tensor, tokens: Tensor): Float32Array {
    const b = this.backend, R = logits.shape[0]!;
    if (R > this.scoreRows) throw new RangeError(`internal: ${R} rows to score, the buffers hold ${this.scoreRows}`);
    const out = b.view(this.out, 0, [R]);
    b.tokenProbabilities({ logits, classes: this.classes, params, tokens, out });
    return b.download(out) as Float32Array;
  }

  /** The round's last token at `position`: speculativeSample from the target's row [1, Vp] (and the draft's, for a residual). */
  sample(target: Tensor, draft: Tensor | undefined, sampling: ResolvedSampling, position: number): number {
    return this.draw.sample(target, draft, sampling, position);
  }

  free(): void {
    for (const t of [this.kept, this.params, this.tokens, this.out]) this.backend.free(t);
    this.draw.free();
  }
}
