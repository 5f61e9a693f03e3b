// Speculative decoding (batch 1): a small draft model proposes K tokens one at a time, the target model
// scores all K + 1 positions in one pass (DecodeEngine.extend), and speculative-accept.ts keeps a prefix of
// the draft plus one token of the target's, so the output is distributed exactly as the target's own
// sampling (greedy: equal to the target's greedy output token for token).
//
// A round, with the sequence s of length T (prompt + tokens so far):
//   draft   extend(s[dv..T)) → q_1; x_1 ~ q_1; extend([x_1]) → q_2; ...; x_K ~ q_K      K draft passes
//   target  extend(s[tv..T) ++ x_1..x_K) → p_1..p_{K+1} (its last K + 1 rows)            one target pass
//   accept  n of the K, then y (a residual draw on a rejection, a bonus draw from p_{K+1} otherwise);
//           greedy without a repetition penalty: the target's argmax of each row is taken on the device
//           (DecodeEngine.extendGreedy) and only K + 1 ints are read
//   s ← s ++ x_1..x_n ++ y
// Both caches hold positions [0, tv) and [0, dv) of s, its tokens with every key already computed; the last
// token of s is fed at the start of the next round. Rollback after a rejection is only the lengths:
// tv = T + n (the target wrote keys for s[T−1], x_1..x_K; those of x_{n+1}.. are now stale), dv = min(the
// draft's, T + n); the next extend overwrites the stale positions before any query reads them. The first
// round's extends are the prompt's prefill.
//
// Greedy drafting runs on the draft engine's decode path instead: K decode steps (CUDA graphs, the device's
// greedy picks), one read of the K tokens, and rewind() for the rollback (draftOnDevice below).
// Sampling without a repetition penalty can run so too (deviceAcceptance): the draft's K steps draw on the
// device (sampleTokens' Gumbel-max: exact draws from q_i), one more draft pass over the K positions and
// the target's pass keep their logits on the device, where tokenProbabilities scores q_i(x_i) and
// p_i(x_i); the host reads those 2K floats and runs the acceptance test, and speculativeSample draws the
// residual (or bonus) token from the rows still on the device: one int comes back. verifyScored in
// speculative-accept.ts; its Gumbel-max draws are exact, as the host's inverse-CDF draws are.
//
// Cost per round: K draft passes and one target pass over K + 1 rows (whose weights are read once, as in
// one decode step); when sampling, downloads of K + 1 target and K draft rows of V f32 logits (V = 50257:
// ~200 KB a row) and the host's acceptance (speculative-accept.ts: O(V) per row, a sort for top-p without
// top-k); greedy, K + 1 ints. On a graph engine every extend of ≤ 32 rows (the target's K + 1, a
// sampled draft's one-row steps, a catch-up) replays a graph per row count: the rows run the decode
// step's kernels over the cache row, positions uploaded, so nothing in it depends on where the sequence
// is (engine.ts, replayExtend); each still ends with a synchronising download.
//
// Adaptive K (HF's assistant heuristic): K + 2 after a round that accepted every draft token, K − 1 (at
// least 1) otherwise, capped at maxDraftTokens and at the tokens left.

import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { DecodeEngine } from './engine.js';
import { newTokenBudget } from './generation-config.js';
import type { GenerateOptions } from './generate.js';
import type { DecoderModel } from './model.js';
import { resolveSampling } from './sampling.js';
import type { ResolvedSampling } from './sampling.js';
import { SpeculativeDraw } from './speculative-draw.js';
import { DrawKind, drawFrom, greedyToken, samplingDistribution, speculativeUniform, verifyGreedy, verifySampled, verifyScored } from './speculative-accept.js';

export interface SpeculativeSettings {
  /** The draft model: same vocabulary as the target, smaller (it runs K times per target pass). */
  readonly draft: DecoderModel;
  /** Draft tokens per round to start with (default 4). */
  readonly draftTokens?: number;
  /** Adapt K after each round (default true); false keeps draftTokens fixed (benchmarks, the formula). */
  readonly adaptive?: boolean;
  /** The largest K adaptation may reach (default 16). */
  readonly maxDraftTokens?: number;
  /** Filled in as generation runs (counts of the whole call). */
  readonly stats?: SpeculativeStats;
  /** Capture the greedy draft's decode steps as CUDA graphs (default: on for CUDA) in the engines the session makes. */
  readonly graphs?: boolean;
  /** Engines to reuse (sequence slot 0 of each; maxLen must fit prompt + new tokens); by default made and disposed. */
  readonly engines?: { readonly target: DecodeEngine; readonly draft: DecodeEngine };
  /**
   * Sampling without a repetition penalty: draw the draft's tokens on its decode path, score the
   * acceptance test on the device (tokenProbabilities) and draw the residual or bonus token there too
   * (speculativeSample), so a round reads 2K floats and one int instead of 2K + 1 rows of logits
   * (default on; FUSEFORMER_SPEC_DEVICE_ACCEPT=0 turns it off).
   */
  readonly deviceAcceptance?: boolean;
}

export interface SpeculativeStats {
  rounds: number;
  /** Draft tokens proposed and accepted; acceptance rate α = accepted / drafted. */
  drafted: number;
  accepted: number;
  /** Tokens emitted (accepted + one per round, before a stop or the length limit cut them). */
  emitted: number;
  targetPasses: number;
  draftPasses: number;
}

export function emptySpeculativeStats(): SpeculativeStats {
  return { rounds: 0, drafted: 0, accepted: 0, emitted: 0, targetPasses: 0, draftPasses: 0 };
}

const DEFAULT_DRAFT_TOKENS = 4;
const DEFAULT_MAX_DRAFT_TOKENS = 16;

/** One sequence decoded speculatively; round() advances it. Owns one engine per model (batch 1) unless given them. */
export class SpeculativeSession {
  readonly tokens: number[];
  readonly stats: SpeculativeStats;
  private readonly target: DecodeEngine;
  private readonly draft: DecodeEngine;
  private readonly stop: Set<number>;
  private readonly limit: number;
  private k: number;
  private readonly maxK: number;
  private readonly adaptive: boolean;
  private targetValid = 0;
  private draftValid = 0;
  private ended = false;
  private draftStarted = false;
  private readonly ownsEngines: boolean = true;
  private readonly deviceAcceptance: boolean;
  /** The residual and bonus draws on the device, made on the first. */
  private drawer?: SpeculativeDraw;

  constructor(
    readonly targetModel: DecoderModel,
    readonly draftModel: DecoderModel,
    prompt: readonly number[],
    readonly maxNewTokens: number,
    readonly sampling: ResolvedSampling,
    stopTokenIds: readonly number[],
    settings: Omit<SpeculativeSettings, 'draft'> = {},
  ) {
    const V = targetModel.vocabSize;
    if (draftModel.vocabSize !== V) {
      throw new ArgumentError(`speculative decoding: the draft model (${draftModel.source}) has a vocabulary of ${draftModel.vocabSize} tokens, the target (${targetModel.source}) ${V}; they must share one tokenizer`);
    }
    if (draftModel.backend !== targetModel.backend) throw new ArgumentError('speculative decoding: the draft and target models must live on the same backend');
    if (prompt.length < 1) throw new ArgumentError('speculative decoding: the prompt is empty; a sequence needs at least one token');
    prompt.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`speculative decoding: token ${t} at position ${j} of the prompt is outside the vocabulary [0, ${V})`); });
    if (!Number.isInteger(maxNewTokens) || maxNewTokens < 1) throw new ArgumentError(`speculative decoding: maxNewTokens must be a positive integer, got ${maxNewTokens}`);
    const k = settings.draftTokens ?? DEFAULT_DRAFT_TOKENS, maxK = settings.maxDraftTokens ?? Math.max(k, DEFAULT_MAX_DRAFT_TOKENS);
    if (!Number.isInteger(k) || k < 1) throw new ArgumentError(`speculative decoding: draftTokens must be a positive integer, got ${k}`);
    if (!Number.isInteger(maxK) || maxK < k) throw new ArgumentError(`speculative decoding: maxDraftTokens must be an integer >= draftTokens = ${k}, got ${maxK}`);
    const positions = Math.min(targetModel.arch.maxPositions, draftModel.arch.maxPositions);
    // The draft must not end a generation the target alone would continue.
    if (draftModel.arch.maxPositions < targetModel.arch.maxPositions && prompt.length + maxNewTokens > draftModel.arch.maxPositions) {
      throw new ArgumentError(`speculative decoding: the draft model (${draftModel.source}) takes ${draftModel.arch.maxPositions} positions, the target ${targetModel.arch.maxPositions}; a prompt of ${prompt.length} tokens plus ${maxNewTokens} new ones needs ${prompt.length + maxNewTokens} — use a draft with as many positions, fewer new tokens, or no draft`);
    }
    if (prompt.length >= positions) throw new ArgumentError(`speculative decoding: the prompt has ${prompt.length} tokens; the models take at most ${positions} positions, leaving no room for a new token`);
    this.limit = Math.min(prompt.length + maxNewTokens, positions);
    this.k = k;
    this.maxK = maxK;
    this.adaptive = settings.adaptive ?? true;
    // speculativeSample reads a target and a draft row of one dtype and width: other pairs take the host's path.
    const rowsMatch = draftModel.dtype === targetModel.dtype && draftModel.arch.paddedVocab === targetModel.arch.paddedVocab;
    this.deviceAcceptance = (settings.deviceAcceptance ?? process.env['FUSEFORMER_SPEC_DEVICE_ACCEPT'] !== '0') && rowsMatch;
    this.stats = settings.stats ?? emptySpeculativeStats();
    this.stop = new Set(stopTokenIds);
    this.tokens = [...prompt];
    if (settings.engines) {
      const { target, draft } = settings.engines;
      if (target.model !== targetModel || draft.model !== draftModel) throw new ArgumentError('speculative decoding: the engines given must be the target\'s and the draft\'s');
      for (const e of [target, draft]) {
        if (e.maxLen < this.limit || e.maxPrefillTokens < this.limit) throw new ArgumentError(`speculative decoding: an engine given holds ${Math.min(e.maxLen, e.maxPrefillTokens)} positions (maxLen, maxPrefillTokens); this sequence needs ${this.limit}`);
      }
      this.target = target;
      this.draft = draft;
      this.ownsEngines = false;
      return;
    }
    const engineOptions = { maxBatch: 1, maxLen: Math.max(2, this.limit), maxPrefillTokens: Math.max(2, this.limit), ...(settings.graphs !== undefined ? { graphs: settings.graphs } : {}) };
    this.target = new DecodeEngine(targetModel, engineOptions);
    try {
      this.draft = new DecodeEngine(draftModel, engineOptions);
    } catch (e) {
      this.target.dispose();
      throw e;
    }
  }

  /** True once a stop token or the length limit ended the sequence. */
  get done(): boolean { return this.ended; }
  /** K for the next round. */
  get draftTokens(): number { return this.k; }

  /** One round: returns the tokens it added (1 to K + 1; fewer when a stop token or the limit cuts them). */
  round(): number[] {
    if (this.ended) return [];
    const s = this.tokens, T = s.length, greedy = this.sampling.temperature === 0;
    const K = Math.min(this.k, this.limit - T - 1);
    const draft: number[] = [], q: Float64Array[] = [];
    const V = this.targetModel.vocabSize;
    // Sampling scored on the device: the draft draws on its decode path as greedy drafting does, then one
    // more draft pass over the K positions scores q_i(x_i) (the decode steps keep no logits).
    const scored = !greedy && K > 0 && this.deviceAcceptance && this.sampling.repetitionPenalty === 1;
    let draftRows: ReturnType<DecodeEngine['extendScored']> | undefined;
    if ((greedy || scored) && K > 0) draft.push(...this.draftOnDevice(K));
    if (scored) {
      draftRows = this.draft.extendScored(0, T - 1, [s[T - 1]!, ...draft.slice(0, K - 1)], K, draft, this.sampling);
      this.stats.draftPasses++;
    }
    for (let i = 0; i < K && !greedy && !scored; i++) {
      // Feed what the draft has not seen (the round's first pass catches up; later passes feed x_i).
      const rows = i === 0 ? this.draft.extend(0, this.draftValid, s.slice(this.draftValid, T), 1) : this.draft.extend(0, T + i - 1, [draft[i - 1]!]);
      this.stats.draftPasses++;
      const qi = samplingDistribution(rows, this.sampling, i === 0 ? s : s.concat(draft));
      q.push(qi);
      draft.push(drawFrom(qi, speculativeUniform(this.sampling.seed, T + i, DrawKind.Draft)));
    }
    if (K > 0) this.draftValid = T + K - 1;

    const fed = s.slice(this.targetValid, T).concat(draft);
    this.stats.targetPasses++;
    const historyAt = (i: number) => (i === 0 ? s : s.concat(draft.slice(0, i)));
    let verdict;
    if (greedy && this.sampling.repetitionPenalty === 1) {
      // The target's picks are made on the device: K + 1 ints come back instead of K + 1 rows of logits.
      verdict = verifyGreedy(draft, this.target.extendGreedy(0, this.targetValid, fed, K + 1));
    } else if (greedy) {
      const all = this.target.extend(0, this.targetValid, fed, K + 1), picks: number[] = [];
      for (let i = 0; i <= K; i++) {
        picks.push(greedyToken(all.subarray(i * V, (i + 1) * V), this.sampling, historyAt(i)));
        if (i < K && picks[i] !== draft[i]) break;
      }
      verdict = verifyGreedy(draft, picks);
    } else if (draftRows) {
      // The target's pass is queued before the draft's probabilities are read: one wait for both.
      const targetRows = this.target.extendScored(0, this.targetValid, fed, K + 1, draft, this.sampling), d = draftRows;
      verdict = verifyScored(draft, {
        targetAt: (i) => targetRows.probabilities()[i]!, draftAt: (i) => d.probabilities()[i]!,
        residual: (i) => this.drawOnDevice(targetRows.logits(i), d.logits(i), T + i),
        bonus: () => this.drawOnDevice(targetRows.logits(K), undefined, T + K),
      }, this.sampling.seed, T);
    } else {
      const all = this.target.extend(0, this.targetValid, fed, K + 1);
      const targetRow = (i: number) => all.subarray(i * V, (i + 1) * V);
      verdict = verifySampled(draft, q, (i) => samplingDistribution(targetRow(i), this.sampling, historyAt(i)), this.sampling.seed, T);
    }
    const n = verdict.accepted;
    this.targetValid = T + n;
    this.draftValid = Math.min(this.draftValid, T + n);
    this.stats.rounds++;
    this.stats.drafted += K;
    this.stats.accepted += n;
    if (this.adaptive && K > 0) this.k = n === K ? Math.min(this.maxK, this.k + 2) : Math.max(1, this.k - 1);

    const added: number[] = [];
    for (const t of [...draft.slice(0, n), verdict.next]) {
      s.push(t);
      added.push(t);
      if (this.stop.has(t) || s.length >= this.limit) { this.ended = true; break; }
    }
    this.stats.emitted += added.length;
    return added;
  }

  /**
   * Drafting on the draft engine's decode path (captured graphs on CUDA, the picks or draws by
   * sampleTokens on the device): K steps, then one read of the K tokens. The first round starts the
   * engine's batch (its prefill picks x_1); later rounds catch the cache up with extendKeys() if it lacks
   * positions (after a round that accepted every draft token, x_K's: its keys only, nothing read back),
   * then rewind() the sequence to s.
   */
  private draftOnDevice(K: number): number[] {
    const s = this.tokens, T = s.length, e = this.draft;
    if (!this.draftStarted) {
      e.start([{ prompt: s, maxNewTokens: e.maxLen - T, sampling: this.sampling }], []);
      this.draftStarted = true;
      e.decode(K - 1);
    } else {
      if (this.draftValid < T - 1) {
        e.extendKeys(0, this.draftValid, s.slice(this.draftValid, T - 1));
        this.stats.draftPasses++;
      }
      e.rewind(0, s);
      e.decode(K);
    }
    this.stats.draftPasses += K;
    const tokens = e.collect()[0]!.tokens;
    if (tokens.length !== K) throw new Error(`internal: the draft engine produced ${tokens.length} of ${K} tokens`);
    return tokens;
  }

  /**
   * speculativeSample on the target's row of logits (and the draft's, for a residual draw) for the token
   * at `position`: one int comes back. Both engines share the backend (one device).
   */
  private drawOnDevice(target: Tensor, draft: Tensor | undefined, position: number): number {
    this.drawer ??= new SpeculativeDraw(this.target.backend, this.targetModel.vocabSize);
    return this.drawer.sample(target, draft, this.sampling, position);
  }

  /** The target's cache (for checks: positions [0, cachedLength) hold the sequence's keys and values). */
  get targetEngine(): DecodeEngine { return this.target; }
  get draftEngine(): DecodeEngine { return this.draft; }
  /** Positions of the sequence whose keys the target's cache holds (the last token is fed next round). */
  get targetCachedLength(): number { return this.targetValid; }

  /** Frees the engines the session made (engines given in the settings stay the caller's) and its draw buffers. */
  dispose(): void {
    this.drawer?.free();
    this.drawer = undefined;
    if (!this.ownsEngines) return;
    this.target.dispose();
    this.draft.dispose();
  }
}

/**
 * The new tokens of one sequence, decoded speculatively with `options.speculative.draft` (the stop token,
 * if one ended it, included): generate()'s contract, whose options it reads (engine options aside).
 */
export async function* speculativeGenerate(model: DecoderModel, promptTokens: readonly number[], options: GenerateOptions & { readonly speculative: SpeculativeSettings }): AsyncGenerator<number, void, undefined> {
  const maxNewTokens = newTokenBudget(model.generation, promptTokens.length, options.maxNewTokens);
  if (maxNewTokens === 0) return;
  if (options.engine) throw new ArgumentError('speculative decoding makes its own engines (one per model); do not pass options.engine');
  const sampling = resolveSampling(options, model.generation);
  const stopIds = options.stopTokenIds ?? model.generation.eosTokenIds ?? model.arch.eosTokenIds;
  const { draft, ...settings } = options.speculative;
  const graphs = settings.graphs ?? options.engineOptions?.graphs;
  const session = new SpeculativeSession(model, draft, promptTokens, maxNewTokens, sampling, stopIds, { ...settings, ...(graphs !== undefined ? { graphs } : {}) });
  try {
    while (!session.done) {
      for (const t of session.round()) yield t;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    session.dispose();
  }
}
