// The host half of beam search: Hugging Face's beam-search bookkeeping (transformers' GenerationMixin.
// _beam_search, which replaced BeamSearchScorer with the same results), fed one step at a time with the
// candidates the device picked (beamTopK: the K = max(2, 1 + #eos)·beams best (beam, token) pairs of each
// item, best first). Per item and step, with c the decoder length before the step (start token included):
//   hit_i      = token_i is an EOS token, or c + 1 ≥ max_length
//   running    = the first `beams` candidates that do not hit (then, if short, the others lowered by 1e9) —
//                what beamAdvance keeps on the device; HF's top-beams of the scores with hits lowered by 1e9
//                picks the same ones whenever the items have `beams` non-hitting candidates, which K ensures
//   finished   ← the best `beams` of (finished ∪ candidates), candidate i scoring
//                s_i / (c + 1 − 1)^length_penalty, lowered by 1e9 unless i < beams and hit_i, and also when the
//                item cannot improve any more (below) or (early_stopping = true) all its slots are finished
//   improvable ← improvable ∧ ∃ slot j: best running score / L^length_penalty > (finished_j ? min finished
//                score : −1e9), L = max_length − 1 with early_stopping = "never" and length_penalty > 0,
//                else the new c − 1
//   continue   = some item improvable ∧ ¬(early_stopping = true ∧ every slot of every item finished)
//                ∧ ¬(every candidate of every item hits)
// The result of an item is its best finished sequence. Arithmetic on scores is f32 (Math.fround after each
// operation), as HF's tensors; ties keep the earlier entry.
// GreedySearch is the num_beams = 1 path (HF's _sample without sampling): the best candidate of each
// sequence is appended until it is an EOS token or the length runs out.

export interface BeamSearchSettings {
  readonly beams: number;
  readonly eosTokenIds: readonly number[];
  /** HF's max_length: the longest decoder sequence, the start token included. */
  readonly maxLength: number;
  readonly lengthPenalty: number;
  readonly earlyStopping: boolean | 'never';
}

/** One step's candidates for every item: [batch, K] each, best first. */
export interface StepCandidates {
  readonly tokens: ArrayLike<number>;
  readonly sourceBeams: ArrayLike<number>;
  readonly scores: ArrayLike<number>;
  readonly perItem: number;
}

export interface SearchResult {
  /** The generated tokens (the decoder start token left out; an ending EOS token kept). */
  readonly tokens: number[];
  /** Its score: the length-normalised sum of log-probabilities (greedy: the plain sum, the forced token counting 0). */
  readonly score: number;
}

const LOWERED = 1e9;
const f32 = Math.fround;

/**
 * A hypothesis's tokens as a chain from its newest token back to the first (null: no token yet): a step
 * extends a parent by one node instead of copying its tokens, so the host's work a step does not grow with
 * the length; tokens are spelled out only where asked for (tokensOf).
 */
interface Chain { readonly token: number; readonly parent: Chain | null }

function tokensOf(chain: Chain | null): number[] {
  const tokens: number[] = [];
  for (let node = chain; node; node = node.parent) tokens.push(node.token);
  return tokens.reverse();
}

interface Beam { readonly chain: Chain | null; readonly score: number }
interface Finished { readonly score: number; readonly chain: Chain | null; readonly done: boolean }
interface Candidate { readonly token: number; readonly score: number; readonly chain: Chain; readonly hit: boolean }

/** The number of candidates beamTopK must produce per item (HF's beams_to_keep). */
export function candidatesPerItem(beams: number, eosCount: number): number {
  return Math.max(2, 1 + eosCount) * beams;
}

export class BeamSearch {
  /** Decoder length c (start token included) before the next step. */
  length = 1;
  private beams: Beam[][];
  private finished: Finished[][];
  private readonly improvable: boolean[];
  private readonly eos: ReadonlySet<number>;
  private stopped = false;

  constructor(readonly batch: number, readonly settings: BeamSearchSettings) {
    const k = settings.beams;
    this.eos = new Set(settings.eosTokenIds);
    // HF starts beam 0 at 0 and the others at −1e9, so the first step expands beam 0 only.
    this.beams = Array.from({ length: batch }, () => Array.from({ length: k }, (_, j) => ({ chain: null, score: j === 0 ? 0 : -LOWERED })));
    this.finished = Array.from({ length: batch }, () => Array.from({ length: k }, () => ({ score: -LOWERED, chain: null, done: false })));
    this.improvable = new Array<boolean>(batch).fill(true);
  }

  get done(): boolean { return this.stopped || this.length >= this.settings.maxLength; }

  /** Per item, per running beam: its tokens (without the start token) and score. */
  get running(): { tokens: number[]; score: number }[][] {
    return this.beams.map((beams) => beams.map((beam) => ({ tokens: tokensOf(beam.chain), score: beam.score })));
  }

  /** The running beams' initial scores, row by row (what the device's beamScores start from). */
  initialScores(): Float32Array {
    return Float32Array.from(this.beams.flatMap((beams) => beams.map((b) => b.score)));
  }

  /** Processes one step's candidates; returns whether the search goes on. */
  step(c: StepCandidates): boolean {
    if (this.done) throw new Error('BeamSearch.step: the search has already finished');
    const { beams: k, lengthPenalty, earlyStopping, maxLength } = this.settings;
    const K = c.perItem;
    const atMaxLength = this.length + 1 >= maxLength;
    const denominator = f32((this.length + 1 - 1) ** lengthPenalty);
    let everyCandidateHits = true;
    for (let b = 0; b < this.batch; b++) {
      const parents = this.beams[b]!;
      const candidates = new Array<Candidate>(K);
      for (let i = 0; i < K; i++) {
        const token = c.tokens[b * K + i]!, beam = c.sourceBeams[b * K + i]!, score = c.scores[b * K + i]!;
        const parent = parents[beam];
        if (!parent) throw new Error(`BeamSearch.step: item ${b} candidate ${i} comes from beam ${beam}, outside [0, ${k})`);
        const hit = atMaxLength || this.eos.has(token);
        if (!hit) everyCandidateHits = false;
        candidates[i] = { token, score, chain: { token, parent: parent.chain }, hit };
      }

      // Finished hypotheses: merge this step's (penalised unless they may finish) into the best k.
      const slots = this.finished[b]!;
      const full = earlyStopping === true && slots.every((f) => f.done);
      const merged: Finished[] = slots.slice();
      for (let i = 0; i < K; i++) {
        const x = candidates[i]!;
        let score = f32(x.score / denominator);
        if (full) score = f32(score - LOWERED);
        if (!this.improvable[b]) score = f32(score - LOWERED);
        const done = x.hit && i < k;
        if (!done) score = f32(score - LOWERED);
        merged.push({ score, chain: x.chain, done });
      }
      this.finished[b] = stableTop(merged, k);

      // Running beams: as beamAdvance picks them on the device — the candidates that are not EOS in order,
      // then (if short) the EOS ones lowered by 1e9.
      const next: Beam[] = [];
      for (const x of candidates) if (next.length < k && !this.eos.has(x.token)) next.push({ chain: x.chain, score: x.score });
      for (const x of candidates) if (next.length < k && this.eos.has(x.token)) next.push({ chain: x.chain, score: f32(x.score - LOWERED) });
      this.beams[b] = next;
    }
    this.length++;
    for (let b = 0; b < this.batch; b++) {
      if (!this.improvable[b]) continue;
      const bestLength = earlyStopping === 'never' && lengthPenalty > 0 ? maxLength - 1 : this.length - 1;
      const best = f32(this.beams[b]![0]!.score / f32(bestLength ** lengthPenalty));
      const slots = this.finished[b]!;
      let worst = Infinity;
      for (const f of slots) worst = Math.min(worst, f.score);
      this.improvable[b] = slots.some((f) => best > (f.done ? worst : -LOWERED));
    }
    const allFull = earlyStopping === true && this.finished.every((slots) => slots.every((f) => f.done));
    this.stopped = !this.improvable.some(Boolean) || allFull || everyCandidateHits;
    return !this.done;
  }

  /**
   * The candidates of a forced last step (ForcedEOSTokenLogitsProcessor at c = max_length − 1): every beam
   * continues with each forced token at log-probability 0 (−ln m among m forced tokens when renormalised),
   * best first; the remaining slots are −∞. No forward pass is needed for them.
   */
  forcedCandidates(forced: readonly number[], renormalized: boolean): StepCandidates {
    const k = this.settings.beams, K = candidatesPerItem(k, this.settings.eosTokenIds.length);
    const logProb = renormalized ? f32(-Math.log(forced.length)) : 0;
    const tokens = new Int32Array(this.batch * K), sourceBeams = new Int32Array(this.batch * K), scores = new Float32Array(this.batch * K).fill(-Infinity);
    const ordered = [...new Set(forced)].sort((a, b) => a - b);
    for (let b = 0; b < this.batch; b++) {
      const list = this.beams[b]!.flatMap((beam, j) => ordered.map((token) => ({ token, beam: j, score: f32(beam.score + logProb) })));
      list.sort((x, y) => (y.score - x.score) || x.beam - y.beam || x.token - y.token);
      list.slice(0, K).forEach((x, i) => { tokens[b * K + i] = x.token; sourceBeams[b * K + i] = x.beam; scores[b * K + i] = x.score; });
    }
    return { tokens, sourceBeams, scores, perItem: K };
  }

  results(): SearchResult[] {
    return this.finished.map((slots, b) => {
      const best = slots[0]!;
      if (!best.done) throw new Error(`BeamSearch: item ${b} has no finished hypothesis (the search stopped early)`);
      return { tokens: tokensOf(best.chain), score: best.score };
    });
  }
}

/** The best n of `entries` by score, ties keeping the earlier entry. */
function stableTop(entries: readonly Finished[], n: number): Finished[] {
  const order = entries.map((_, i) => i).sort((x, y) => (entries[y]!.score - entries[x]!.score) || x - y);
  return order.slice(0, n).map((i) => entries[i]!);
}

/** Greedy search: the best candidate of every unfinished sequence is appended. */
export class GreedySearch {
  length = 1;
  private readonly sequences: { tokens: number[]; score: number; finished: boolean }[];
  private readonly eos: ReadonlySet<number>;

  constructor(readonly batch: number, readonly settings: Pick<BeamSearchSettings, 'eosTokenIds' | 'maxLength'>) {
    this.eos = new Set(settings.eosTokenIds);
    this.sequences = Array.from({ length: batch }, () => ({ tokens: [], score: 0, finished: false }));
  }

  get done(): boolean { return this.length >= this.settings.maxLength || this.sequences.every((s) => s.finished); }

  /** Current prefixes (without the start token), one per item. */
  get prefixes(): number[][] { return this.sequences.map((s) => s.tokens); }

  step(c: StepCandidates): boolean {
    if (this.done) throw new Error('GreedySearch.step: the search has already finished');
    this.sequences.forEach((s, b) => {
      if (s.finished) return;
      const token = c.tokens[b * c.perItem]!;
      s.tokens.push(token);
      s.score = f32(s.score + c.scores[b * c.perItem]!);
      if (this.eos.has(token)) s.finished = true;
    });
    this.length++;
    return !this.done;
  }

  /** The forced last token: the lowest of the forced ids (HF's argmax over equal zeros), log-probability 0. */
  forcedCandidates(forced: readonly number[]): StepCandidates {
    const token = Math.min(...forced);
    return { tokens: new Int32Array(this.batch).fill(token), sourceBeams: new Int32Array(this.batch), scores: new Float32Array(this.batch), perItem: 1 };
  }

  results(): SearchResult[] {
    return this.sequences.map((s) => ({ tokens: s.tokens, score: s.score }));
  }
}
