// The decode engine: a batch of sequences, their KV cache and device-side state, prefill, and decode
// steps captured as CUDA graphs.
//
// Device state per sequence b (all allocated once for maxBatch sequences):
//   tokens[b]     the token the next decode step reads;   positions[b]  its position
//   history[b, :] every token of the sequence by position (prompt + generated)
//   finished[b], limits[b] (the length at which it stops), params[b] (sampling), seeds[b]; stopIds (shared)
// A decode step reads them and its last op, sampleTokens, writes the next token into history, tokens and
// positions (or sets finished): the step's inputs for the next replay are on the device, so a step is
// captured once per batch-size bucket (1, 2, 4, ... maxBatch) and replayed, each replay advancing every
// unfinished sequence by one token. The host reads the new tokens from history every few steps
// (collect()) and mirrors the stop rule (stop id or length limit) to know where each sequence ended;
// stop strings are the host's: finish(b) marks a sequence finished on the device.
//
// Prefill runs the prompts through the model in groups of at most maxPrefillTokens rows (prompts padded
// to the group's longest), writes their keys and values into the cache, and samples the first token of
// each from its last prompt position. It is not captured (shapes vary with the prompts).
//
// Rows of a bucket beyond the batch are dummies marked finished: they compute (their cache slots are
// unused) and never advance.

import { modelAttentionSplits } from './attention-splits.js';
import type { Backend, Graph } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { DecoderForward } from './forward.js';
import type { ProjectionCapture, RowViews } from './forward.js';
import { KvCache } from './kv-cache.js';
import type { DecoderModel } from './model.js';
import type { ResolvedSampling } from './sampling.js';
import { GreedyPicker } from './greedy-picks.js';
import { samplingParamsRow, seedWords } from './sampling.js';

export interface EngineOptions {
  /** Sequences decoded together at most (the KV cache holds this many). */
  readonly maxBatch: number;
  /** Positions per sequence, prompt included: at most the model's maximum. */
  readonly maxLen: number;
  /** Capture each bucket's decode step into a graph (default: on for CUDA, off for the CPU). */
  readonly graphs?: boolean;
  /** Prompt tokens one prefill pass takes (default max(maxLen, 2048)); the activation buffers are sized by it. */
  readonly maxPrefillTokens?: number;
  /** Prefill attention: the fused flash op (default) or LightSeq's materialised scores. */
  readonly prefillAttention?: 'flash' | 'materialized';
  /** Chunks the cache is split into in decode attention (default: from maxLen and the batch size). */
  readonly attentionSplits?: number;
  /**
   * Decode steps one replayed graph runs (default decodeGraphSteps: FUSEFORMER_DECODE_GRAPH_STEPS, else
   * DECODE_GRAPH_STEPS_DEFAULT). decode(n) replays the k-step graph ⌊n / k⌋ times and the one-step graph for
   * the rest, so the tokens are the same; a longer graph spares the gap between graph launches (the step's
   * inputs already live on the device, and its first kernel waits on the last one's by a programmatic edge
   * inside a graph instead of a launch between two).
   */
  readonly graphSteps?: number;
}

/** decode()'s steps a replayed graph at most, unless EngineOptions.graphSteps or FUSEFORMER_DECODE_GRAPH_STEPS says. */
export const DECODE_GRAPH_STEPS_DEFAULT = 1;

/** FUSEFORMER_DECODE_GRAPH_STEPS: a positive integer ≤ 64; unset or empty gives the default; anything else an error naming it. */
export function decodeGraphStepsFromEnv(value: string | undefined): number {
  if (value === undefined || value === '') return DECODE_GRAPH_STEPS_DEFAULT;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 64) throw new ArgumentError(`FUSEFORMER_DECODE_GRAPH_STEPS must be an integer in [1, 64], got '${value}'`);
  return n;
}

/** The default of EngineOptions.graphSteps, read once from FUSEFORMER_DECODE_GRAPH_STEPS. */
export const decodeGraphSteps: { steps: number } = { steps: decodeGraphStepsFromEnv(process.env['FUSEFORMER_DECODE_GRAPH_STEPS']) };

export interface SequenceRequest {
  readonly prompt: readonly number[];
  /** At least 1; the sequence also stops at maxLen. */
  readonly maxNewTokens: number;
  readonly sampling: ResolvedSampling;
}

export interface SequenceUpdate {
  /** Tokens generated since the last collect() (a stop token included). */
  readonly tokens: number[];
  readonly finished: boolean;
}

/** Stop ids the sampler compares against (the tensor's slots; −1 marks an unused one). */
export const MAX_STOP_IDS = 16;
interface HostRow { length: number; limit: number; finished: boolean }

interface StateViews {
  readonly tokens: Tensor; readonly positions: Tensor; readonly finished: Tensor; readonly limits: Tensor;
  readonly seeds: Tensor; readonly params: Tensor; readonly history: Tensor; readonly logits: Tensor;
  /** [rows, 2]: the LM head's packed greedy picks (RowArgmax), zero between steps (sampleTokens clears them). */
  readonly argmax: Tensor;
}

/** A bucket's decode step: its ops, their one-step graph and the graphSteps-step graph, once captured. */
interface PreparedDecode { readonly run: () => void; graph?: Graph; multi?: Graph; runs: number }

/**
 * Rows a graph-replayed extendGreedy takes at most (speculative verification: K + 1 rows, K ≤ 16 by
 * default); longer extends (a first round's prompt) run eagerly.
 */
export const VERIFY_GRAPH_MAX_ROWS = 32;

/** What extendScored returns: the scored tokens' probabilities, and the rows' logits where they stay on the device. */
export interface ScoredRows {
  /** The probabilities, read from the device on the first call (which waits for the pass). */
  probabilities(): Float32Array;
  /** Row i's logits, [1, paddedVocab] on the engine's backend: valid until this engine's next extend. */
  logits(i: number): Tensor;
}

/** extendScored's tokenProbabilities buffers for one row count; `stamp` counts the passes that wrote them. */
interface ScoreBuffers {
  readonly params: Tensor;
  readonly picks: Tensor;
  readonly out: Tensor;
  stamp: number;
}

/** A graph-replayable extend of m rows into cache row `row`: its inputs, its logits (and greedy picks), its run. */
/** What a replayed extend ends with: the last rows' logits, the device's greedy picks of them, or nothing (the cache writes alone). */
type VerifyMode = 'logits' | 'picks' | 'keys';

interface PreparedVerify extends PreparedDecode {
  readonly tokens: Tensor;
  readonly positions: Tensor;
  /** [m, paddedVocab]. */
  readonly logits: Tensor;
  /** [m, 2]: with picks, sampleTokens writes row r's greedy pick to [r, 1]. */
  readonly history: Tensor;
  readonly tensors: readonly Tensor[];
}

export class DecodeEngine {
  readonly backend: Backend;
  readonly maxBatch: number;
  readonly maxLen: number;
  readonly maxPrefillTokens: number;
  readonly cache: KvCache;
  readonly buckets: readonly number[];
  private readonly forward: DecoderForward;
  private readonly state: StateViews & { readonly stopIds: Tensor };
  private readonly prefillIo: { readonly tokens: Tensor; readonly positions: Tensor; readonly lengths: Tensor; readonly gather: Tensor };
  private readonly partials?: Tensor;
  private readonly useGraphs: boolean;
  private readonly graphSteps: number;
  private readonly prefillAttention: 'flash' | 'materialized';
  private readonly splitsOption?: number;
  private readonly stateViews = new Map<string, StateViews>();
  private readonly decodes = new Map<number, PreparedDecode>();
  private readonly verifies = new Map<string, PreparedVerify>();
  private rows: HostRow[] = [];
  private stop = new Set<number>();
  private bucket = 0;
  private picker?: GreedyPicker;
  /** extendScored's eager copy of its rows' logits (scoredLogitsBuffer), made on first use. */
  private scoredLogits?: Tensor;
  private readonly scoring = new Map<number, ScoreBuffers>();
  /** Tokens sampled on the device that collect() has not read yet (per unfinished sequence). */
  private pending = 0;
  private disposed = false;

  constructor(readonly model: DecoderModel, options: EngineOptions) {
    const { maxBatch, maxLen } = options;
    const arch = model.arch;
    if (!Number.isInteger(maxBatch) || maxBatch < 1) throw new ArgumentError(`engine: maxBatch must be a positive integer, got ${maxBatch}`);
    if (!Number.isInteger(maxLen) || maxLen < 2 || maxLen > arch.maxPositions) {
      throw new ArgumentError(`engine: maxLen must be an integer in [2, ${arch.maxPositions}] (the model's positions), got ${maxLen}`);
    }
    this.backend = model.backend;
    this.maxBatch = maxBatch;
    this.maxLen = maxLen;
    this.maxPrefillTokens = options.maxPrefillTokens ?? Math.max(maxLen, 2048);
    if (!Number.isInteger(this.maxPrefillTokens) || this.maxPrefillTokens < 1) throw new ArgumentError(`engine: maxPrefillTokens must be a positive integer, got ${options.maxPrefillTokens}`);
    this.useGraphs = options.graphs ?? this.backend.name === 'cuda';
    this.graphSteps = options.graphSteps ?? decodeGraphSteps.steps;
    if (!Number.isInteger(this.graphSteps) || this.graphSteps < 1 || this.graphSteps > 64) throw new ArgumentError(`engine: graphSteps must be an integer in [1, 64], got ${options.graphSteps}`);
    this.prefillAttention = options.prefillAttention ?? 'flash';
    if (this.prefillAttention !== 'flash' && this.prefillAttention !== 'materialized') throw new ArgumentError(`engine: prefillAttention must be 'flash' or 'materialized', got ${JSON.stringify(options.prefillAttention)}`);
    if (options.attentionSplits !== undefined && (!Number.isInteger(options.attentionSplits) || options.attentionSplits < 1 || options.attentionSplits > maxLen)) {
      throw new ArgumentError(`engine: attentionSplits must be an integer in [1, ${maxLen}], got ${options.attentionSplits}`);
    }
    if (options.attentionSplits !== undefined) this.splitsOption = options.attentionSplits;
    const buckets: number[] = [];
    for (let n = 1; n < maxBatch; n *= 2) buckets.push(n);
    buckets.push(maxBatch);
    this.buckets = buckets;

    const b = this.backend;
    this.cache = new KvCache(b, arch.layers, maxBatch, arch.kvHeads, maxLen, arch.headDim, model.dtype);
    this.forward = new DecoderForward(model, Math.max(maxBatch, this.maxPrefillTokens), maxLen);
    const i32 = (shape: number[]) => b.empty(shape, 'i32');
    this.state = {
      tokens: i32([maxBatch]), positions: i32([maxBatch]), finished: i32([maxBatch]), limits: i32([maxBatch]),
      seeds: i32([maxBatch, 2]), params: b.empty([maxBatch, 4], 'f32'), history: i32([maxBatch, maxLen]),
      logits: b.empty([maxBatch, arch.paddedVocab], model.dtype), argmax: i32([maxBatch, 2]), stopIds: i32([MAX_STOP_IDS]),
    };
    b.fill(this.state.finished, 1);
    b.fill(this.state.argmax, 0);
    b.fill(this.state.history, 0);
    this.prefillIo = { tokens: i32([this.maxPrefillTokens]), positions: i32([this.maxPrefillTokens]), lengths: i32([maxBatch]), gather: i32([maxBatch]) };
    if (buckets.some((n) => this.splits(n) > 1)) {
      const partialRows = Math.max(...buckets.map((n) => n * this.splits(n)));
      this.partials = b.empty([partialRows * arch.heads * (arch.headDim + 2)], 'f32');
    }
  }

  /** Sequences of the current batch. */
  get batch(): number { return this.rows.length; }
  /** True when every sequence of the batch has finished (as of the last collect()). */
  get done(): boolean { return this.rows.every((r) => r.finished); }
  /** Each sequence's length (prompt + generated) as of the last collect(). */
  get lengths(): number[] { return this.rows.map((r) => r.length); }
  /** Bytes of K and V the sequences hold now (as of the last collect()): what a decode step's attention reads. */
  get kvBytesInUse(): number {
    const a = this.model.arch, element = this.cache.bytes / this.cache.storage.numel;
    return this.rows.reduce((n, r) => n + r.length, 0) * 2 * a.layers * a.kvHeads * a.headDim * element;
  }

  /** Decode attention's cache splits for a bucket of n sequences. */
  splits(n: number): number {
    if (this.splitsOption !== undefined) return this.splitsOption;
    return modelAttentionSplits(this.model.arch, this.model.dtype, this.maxLen, n);
  }

  /**
   * Starts a new batch: uploads the prompts and settings, runs prefill, and samples each sequence's first
   * token (collect() returns it). stopTokenIds end a sequence when sampled (shared by the batch).
   */
  start(requests: readonly SequenceRequest[], stopTokenIds: readonly number[]): void {
    this.checkAlive();
    const V = this.model.vocabSize, B = requests.length, L = this.maxLen;
    if (B < 1 || B > this.maxBatch) throw new ArgumentError(`engine: a batch of ${B} sequences; expected 1 to maxBatch = ${this.maxBatch}`);
    if (stopTokenIds.length > MAX_STOP_IDS) throw new ArgumentError(`engine: ${stopTokenIds.length} stop token ids; at most ${MAX_STOP_IDS} are supported`);
    for (const id of stopTokenIds) if (!Number.isInteger(id) || id < 0 || id >= V) throw new ArgumentError(`engine: stop token id ${id} is outside the vocabulary [0, ${V})`);
    requests.forEach((r, i) => {
      const n = r.prompt.length;
      if (n < 1) throw new ArgumentError(`engine: prompt ${i} is empty; a sequence needs at least one token`);
      if (n >= L) throw new ArgumentError(`engine: prompt ${i} has ${n} tokens; the cache holds ${L} positions, so prompts may have at most ${L - 1}`);
      if (n > this.maxPrefillTokens) throw new ArgumentError(`engine: prompt ${i} has ${n} tokens; one prefill pass takes at most maxPrefillTokens = ${this.maxPrefillTokens}`);
      r.prompt.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`engine: token ${t} at position ${j} of prompt ${i} is outside the vocabulary [0, ${V})`); });
      if (!Number.isInteger(r.maxNewTokens) || r.maxNewTokens < 1) throw new ArgumentError(`engine: maxNewTokens of sequence ${i} must be a positive integer, got ${r.maxNewTokens}`);
    });
    const bucket = this.buckets.find((n) => n >= B)!;
    this.bucket = bucket;
    this.rows = requests.map((r) => ({ length: r.prompt.length, limit: Math.min(r.prompt.length + r.maxNewTokens, L), finished: false }));
    this.stop = new Set(stopTokenIds);
    this.pending = 0;

    // Device state of the bucket's rows; rows past the batch are finished dummies.
    const history = new Int32Array(bucket * L), positions = new Int32Array(bucket), tokens = new Int32Array(bucket);
    const finished = new Int32Array(bucket).fill(1), limits = new Int32Array(bucket).fill(L);
    const params = new Float32Array(bucket * 4), seeds = new Int32Array(bucket * 2);
    for (let b = 0; b < bucket; b++) params.set([0, 0, 1, 1], 4 * b);
    requests.forEach((r, b) => {
      history.set(r.prompt, b * L);
      positions[b] = r.prompt.length - 1;
      tokens[b] = r.prompt[r.prompt.length - 1]!;
      finished[b] = 0;
      limits[b] = this.rows[b]!.limit;
      const row = samplingParamsRow(r.sampling);
      row[1] = Math.min(row[1]!, V);
      params.set(row, 4 * b);
      seeds.set(seedWords(r.sampling.seed, 0), 2 * b);
    });
    const st = this.views(0, bucket), bk = this.backend;
    bk.upload(st.history, history);
    bk.upload(st.positions, positions);
    bk.upload(st.tokens, tokens);
    bk.upload(st.finished, finished);
    bk.upload(st.limits, limits);
    bk.upload(st.params, params);
    bk.upload(st.seeds, seeds);
    const stops = new Int32Array(MAX_STOP_IDS).fill(-1);
    stops.set(stopTokenIds);
    bk.upload(this.state.stopIds, stops);
    // The head's greedy picks: every step's sampler zeroes them; cleared here too, should a step have been cut short.
    bk.fill(this.state.argmax, 0);

    // Prefill in groups of consecutive prompts that fit maxPrefillTokens rows (padded to the longest).
    let first = 0;
    while (first < B) {
      let end = first + 1, longest = requests[first]!.prompt.length;
      while (end < B && (end - first + 1) * Math.max(longest, requests[end]!.prompt.length) <= this.maxPrefillTokens) {
        longest = Math.max(longest, requests[end]!.prompt.length);
        end++;
      }
      this.prefillGroup(first, requests.slice(first, end).map((r) => r.prompt));
      first = end;
    }
    this.pending = 1;
  }

  /** Runs `steps` decode steps (graph replays after the first step of a bucket). */
  decode(steps = 1): void {
    this.checkAlive();
    if (this.rows.length === 0) throw new ArgumentError('engine: decode() before start()');
    if (!Number.isInteger(steps) || steps < 0) throw new ArgumentError(`engine: steps must be a non-negative integer, got ${steps}`);
    const step = this.prepared(this.bucket), k = this.graphSteps;
    for (let left = steps; left > 0; ) {
      if (step.graph && k > 1 && left >= k) {
        step.multi ??= this.backend.captureGraph(() => { for (let i = 0; i < k; i++) step.run(); });
        step.multi.replay();
        step.runs += k;
        left -= k;
        continue;
      }
      if (step.graph) {
        step.graph.replay();
      } else if (this.useGraphs && step.runs >= 1) {
        step.graph = this.backend.captureGraph(step.run);
        step.graph.replay();
      } else {
        step.run();
      }
      step.runs++;
      left--;
    }
    this.pending += steps;
  }

  /** The tokens each sequence generated since the last collect() (waits for the device). */
  collect(): SequenceUpdate[] {
    this.checkAlive();
    const L = this.maxLen, B = this.rows.length;
    if (this.pending === 0) return this.rows.map((r) => ({ tokens: [], finished: r.finished }));
    const history = this.backend.download(this.backend.view(this.state.history, 0, [B * L])) as Int32Array;
    const updates = this.rows.map((row, b) => {
      const tokens: number[] = [];
      for (let k = 0; k < this.pending && !row.finished; k++) {
        const t = history[b * L + row.length]!;
        tokens.push(t);
        row.length++;
        if (this.stop.has(t) || row.length >= row.limit) row.finished = true;
      }
      return { tokens, finished: row.finished };
    });
    this.pending = 0;
    return updates;
  }

  /** Marks sequence `row` finished (a stop string matched): it no longer advances. */
  finish(row: number): void {
    this.checkRow(row);
    this.backend.upload(this.backend.view(this.state.finished, row, [1]), [1]);
    this.rows[row]!.finished = true;
  }

  /**
   * Replaces the last token of sequence `row` (the one the next step reads) by `token`: teacher forcing,
   * for checks against a reference. Call after collect().
   */
  force(row: number, token: number): void {
    this.checkRow(row);
    const r = this.rows[row]!;
    if (this.pending !== 0) throw new ArgumentError('engine: force() needs the sampled tokens collected first');
    if (r.finished) throw new ArgumentError(`engine: sequence ${row} has finished; a forced token would not be read`);
    if (!Number.isInteger(token) || token < 0 || token >= this.model.vocabSize) throw new ArgumentError(`engine: forced token ${token} is outside the vocabulary`);
    const b = this.backend;
    b.upload(b.view(this.state.history, row * this.maxLen + r.length - 1, [1]), [token]);
    b.upload(b.view(this.state.tokens, row, [1]), [token]);
  }

  /**
   * Sets sequence `row` of the running batch to `history` (prompt + tokens, all of it): the next decode step
   * reads its last token at position history.length − 1. The cache must already hold the keys of positions
   * < history.length − 1 for this history (decode steps or extend() wrote them): speculative decoding's
   * rollback of the draft after a rejection, whose cache holds a longer, partly rejected sequence. Clears
   * finished (unless the length reaches the sequence's limit). Call after collect().
   */
  rewind(row: number, history: readonly number[]): void {
    this.checkRow(row);
    const r = this.rows[row]!, n = history.length, V = this.model.vocabSize;
    if (this.pending !== 0) throw new ArgumentError('engine: rewind() needs the sampled tokens collected first');
    if (n < 1 || n >= this.maxLen) throw new ArgumentError(`engine: rewind to ${n} tokens; a sequence holds 1 to ${this.maxLen - 1} tokens and a position for the next`);
    history.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`engine: token ${t} at position ${j} of rewind is outside the vocabulary [0, ${V})`); });
    const b = this.backend, L = this.maxLen;
    r.length = n;
    r.finished = n >= r.limit;
    b.upload(b.view(this.state.history, row * L, [n]), history);
    b.upload(b.view(this.state.positions, row, [1]), [n - 1]);
    b.upload(b.view(this.state.tokens, row, [1]), [history[n - 1]!]);
    b.upload(b.view(this.state.finished, row, [1]), [r.finished ? 1 : 0]);
  }

  /** The logits of the last prefill or decode step, one Float32Array of vocabSize values per sequence. */
  logits(): Float32Array[] {
    this.checkAlive();
    const V = this.model.vocabSize, Vp = this.model.arch.paddedVocab;
    const all = this.backend.download(this.backend.view(this.state.logits, 0, [this.rows.length * Vp])) as Float32Array;
    return this.rows.map((_, b) => all.slice(b * Vp, b * Vp + V));
  }

  /**
   * Logits at every position of one prompt [L·vocabSize] (row-major), from one prefill pass: the
   * full-recompute reference that KV-cached decoding is checked against. Uses sequence slot 0 and ends
   * the current batch.
   */
  promptLogits(prompt: readonly number[]): Float32Array {
    this.checkAlive();
    const n = prompt.length, V = this.model.vocabSize, Vp = this.model.arch.paddedVocab;
    if (n < 1 || n > this.maxLen || n > this.maxPrefillTokens) throw new ArgumentError(`engine: promptLogits needs 1 to ${Math.min(this.maxLen, this.maxPrefillTokens)} tokens, got ${n}`);
    prompt.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`engine: token ${t} at position ${j} is outside the vocabulary [0, ${V})`); });
    this.rows = [];
    this.pending = 0;
    const b = this.backend;
    const logits = b.empty([n, Vp], this.model.dtype);
    try {
      const v = this.prefillForward(0, [prompt]);
      this.forward.lmHead(b, v.h, logits);
      const all = b.download(logits) as Float32Array;
      const out = new Float32Array(n * V);
      for (let i = 0; i < n; i++) out.set(all.subarray(i * Vp, i * Vp + V), i * V);
      return out;
    } finally {
      b.free(logits);
    }
  }

  /**
   * One prefill pass over `windows` (token sequences of one length) as sequences 0..B−1, nothing
   * sampled; ends the current batch. For calibrating and evaluating quantized models
   * (quant/decoder-quantize.ts): `capture` sees each projection's input as the layers run
   * (DecoderForward.capture), `logits` gets the LM head's rows [B·L, paddedVocab] before they are freed.
   */
  forwardWindows(windows: readonly (readonly number[])[], hooks: { capture?: ProjectionCapture; logits?: (logits: Tensor) => void } = {}): void {
    this.checkAlive();
    const B = windows.length, L = windows[0]?.length ?? 0, V = this.model.vocabSize;
    if (B < 1 || B > this.maxBatch) throw new ArgumentError(`engine: forwardWindows takes 1 to maxBatch = ${this.maxBatch} windows, got ${B}`);
    if (L < 1 || L > this.maxLen || B * L > this.maxPrefillTokens) throw new ArgumentError(`engine: forwardWindows of ${B} × ${L} tokens; the engine holds ${this.maxLen} positions a sequence and ${this.maxPrefillTokens} prompt tokens a pass`);
    windows.forEach((w, i) => {
      if (w.length !== L) throw new ArgumentError(`engine: forwardWindows' windows must have one length; window ${i} has ${w.length} tokens, window 0 ${L}`);
      w.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`engine: token ${t} at position ${j} of window ${i} is outside the vocabulary [0, ${V})`); });
    });
    this.rows = [];
    this.pending = 0;
    const b = this.backend;
    if (hooks.capture) this.forward.capture = hooks.capture;
    try {
      const v = this.prefillForward(0, windows);
      if (!hooks.logits) return;
      const logits = b.empty([B * L, this.model.arch.paddedVocab], this.model.dtype);
      try {
        this.forward.lmHead(b, v.h, logits);
        hooks.logits(logits);
      } finally {
        b.free(logits);
      }
    } finally {
      delete this.forward.capture;
    }
  }

  /**
   * Appends `tokens` to sequence `row` at positions [start, start + m) and returns the logits of the last
   * `lastRows` of them (default all m), [lastRows·vocabSize] row-major (row i of m predicts position
   * start + i + 1; only those rows go through the LM head and the download): speculative decoding's verification
   * pass (the target scores a draft's K tokens and the last accepted one in one pass) and the draft's own
   * steps (speculative.ts). Each token attends to the cached positions 0..start−1 and to the tokens before
   * it; their keys and values are written into the cache at their positions. Rolling a sequence back to
   * `length` tokens is passing start = length next time: positions ≥ start + m are never read (stale
   * values there are overwritten before any query sees them). Per layer, the keys and values of positions
   * < start + m are gathered into a contiguous [Hkv, start + m, d] copy (embedTokens as a row gather) for
   * the fused attention op, whose causal mask is aligned to the last key (query i sees keys ≤ start + i):
   * 2·Hkv·(start + m)·d values copied per layer on top of what attention reads. On a graph engine, up to
   * VERIFY_GRAPH_MAX_ROWS tokens run instead as a replayed graph per row count (replayExtend: the decode
   * step's kernels, nothing shaped by start). Independent of start() / decode(): the caller tracks the
   * sequence's length.
   */
  extend(row: number, start: number, tokens: readonly number[], lastRows = tokens.length): Float32Array {
    const V = this.model.vocabSize, Vp = this.model.arch.paddedVocab;
    const unpad = (all: Float32Array) => {
      if (Vp === V) return all;
      const out = new Float32Array(lastRows * V);
      for (let i = 0; i < lastRows; i++) out.set(all.subarray(i * Vp, i * Vp + V), i * V);
      return out;
    };
    if (this.replaysExtend(tokens.length)) {
      const v = this.replayExtend(row, start, tokens, lastRows, 'logits'), m = tokens.length;
      return unpad(this.backend.download(this.backend.view(v.logits, (m - lastRows) * Vp, [lastRows * Vp])) as Float32Array);
    }
    return this.extendRun(row, start, tokens, lastRows, (logits) => unpad(this.backend.download(logits) as Float32Array));
  }

  /**
   * extend() for greedy verification, with the picks made on the device: the argmax of each of the last
   * `lastRows` rows of logits (no repetition penalty; the lowest index wins a tie), by sampleTokens run over
   * those rows as if each were a sequence, so lastRows ints cross PCIe instead of lastRows·V floats.
   */
  extendGreedy(row: number, start: number, tokens: readonly number[], lastRows = tokens.length): number[] {
    if (this.replaysExtend(tokens.length)) {
      const v = this.replayExtend(row, start, tokens, lastRows, 'picks'), m = tokens.length;
      const picks = this.backend.download(v.history) as Int32Array;
      return Array.from({ length: lastRows }, (_, i) => picks[2 * (m - lastRows + i) + 1]!);
    }
    return this.extendRun(row, start, tokens, lastRows, (logits) => this.greedyPicker(lastRows).pick(logits));
  }

  /** The eager extendGreedy's picker (greedy-picks.ts), grown when a pass has more rows. */
  private greedyPicker(n: number): GreedyPicker {
    if (!this.picker || this.picker.capacity < n) {
      this.picker?.free();
      this.picker = new GreedyPicker(this.backend, Math.max(n, 16), this.model.vocabSize);
    }
    return this.picker;
  }

  /**
   * extend() for sampled speculative verification, scored on the device: the logits of the last
   * `lastRows` rows stay there, tokenProbabilities gives row i's probability of scored[i] under
   * `sampling` (sampleTokens' distribution; no repetition penalty), and only those scored.length ≤
   * lastRows floats come back, when probabilities() is first called (valid until the engine's next
   * extendScored of as many rows). logits(i) is row i's logits on the device, for speculativeSample — on a
   * graph engine the replayed pass's buffer, eagerly a copy in an engine-owned buffer (the pass's own
   * are freed with it); either is valid until this engine's next extend.
   */
  extendScored(row: number, start: number, tokens: readonly number[], lastRows: number, scored: readonly number[], sampling: ResolvedSampling): ScoredRows {
    if (sampling.repetitionPenalty !== 1) throw new ArgumentError('engine: extendScored does not apply a repetition penalty; with one, score the rows of extend() on the host');
    if (scored.length < 1 || scored.length > lastRows) throw new ArgumentError(`engine: extendScored scores 1 to lastRows = ${lastRows} rows, got ${scored.length}`);
    const b = this.backend, V = this.model.vocabSize, Vp = this.model.arch.paddedVocab, n = scored.length;
    // tokenProbabilities into the engine's buffers for n rows; read back when the caller first asks, so a
    // caller can queue more work (the other model's pass) before it waits for this one.
    const score = (rows: Tensor): (() => Float32Array) => {
      const io = this.scoreBuffers(n);
      b.upload(io.params, Array.from({ length: n }, () => samplingParamsRow(sampling)).flat());
      b.upload(io.picks, scored);
      b.tokenProbabilities({ logits: b.view(rows, 0, [n, Vp]), classes: V, params: io.params, tokens: io.picks, out: io.out });
      const stamp = ++io.stamp;
      let read: Float32Array | undefined;
      return () => {
        if (!read && io.stamp !== stamp) throw new ArgumentError(`engine: these scored rows' probabilities were overwritten by a later extendScored of ${n} rows; read them first`);
        return (read ??= b.download(io.out) as Float32Array);
      };
    };
    const rowsOf = (logits: Tensor, first: number) => (i: number) => {
      if (!Number.isInteger(i) || i < 0 || i >= lastRows) throw new ArgumentError(`engine: row ${i} of ${lastRows} scored rows`);
      return b.view(logits, (first + i) * Vp, [1, Vp]);
    };
    if (this.replaysExtend(tokens.length)) {
      const v = this.replayExtend(row, start, tokens, lastRows, 'logits'), m = tokens.length;
      return { probabilities: score(b.view(v.logits, (m - lastRows) * Vp, [lastRows, Vp])), logits: rowsOf(v.logits, m - lastRows) };
    }
    return this.extendRun(row, start, tokens, lastRows, (logits) => {
      const kept = this.scoredLogitsBuffer(lastRows);
      b.copy(logits, b.view(kept, 0, [lastRows, Vp]));
      return { probabilities: score(b.view(kept, 0, [lastRows, Vp])), logits: rowsOf(kept, 0) };
    });
  }

  /** extendScored's tokenProbabilities inputs and output for n rows (made on first use, kept until dispose). */
  private scoreBuffers(n: number): ScoreBuffers {
    let io = this.scoring.get(n);
    if (!io) {
      const b = this.backend;
      io = { params: b.empty([n, 4], 'f32'), picks: b.empty([n], 'i32'), out: b.empty([n], 'f32'), stamp: 0 };
      this.scoring.set(n, io);
    }
    return io;
  }

  /** The eager extendScored's copy of its rows' logits: [rows ≥ n, paddedVocab], grown when a pass has more. */
  private scoredLogitsBuffer(n: number): Tensor {
    if (!this.scoredLogits || this.scoredLogits.shape[0]! < n) {
      if (this.scoredLogits) this.backend.free(this.scoredLogits);
      this.scoredLogits = this.backend.empty([Math.max(n, 9), this.model.arch.paddedVocab], this.model.dtype);
    }
    return this.scoredLogits;
  }

  /**
   * extend() for its cache writes alone: the tokens' keys and values go into the cache at positions
   * start.., and nothing is read back — no LM head on a graph engine, no download, so nothing waits for
   * the device (a greedy draft catching up on the token it proposed last round: speculative.ts).
   */
  extendKeys(row: number, start: number, tokens: readonly number[]): void {
    if (this.replaysExtend(tokens.length)) {
      this.replayExtend(row, start, tokens, 1, 'keys');
      return;
    }
    this.extendRun(row, start, tokens, 1, () => undefined);
  }

  /**
   * extend / extendGreedy / extendKeys as a replayed graph per (row, m, mode) — a graph engine's path for m ≤ VERIFY_GRAPH_MAX_ROWS:
   * the m rows run as a decode step of m one-token "sequences" that share cache row `row`, each seeing
   * keys 0..start + i. The cache layer [maxBatch, Hkv, maxLen, d] is read as a block pool of one block
   * per sequence (blockSize = maxLen) through a [m, 1] block table of `row`, so qkvRopeAppend writes the m
   * keys and values at positions start..start + m − 1 and decodeAttention's causal prefix is each row's
   * own position — the decode step's kernels, no gathered copy of the keys, no shape that depends on
   * start. Host work per call: two uploads of m ints, the replay, then the caller's one download — the
   * greedy picks (2m ints) or the last rows' logits — where the eager pass allocates, uploads a gather
   * table and launches the whole pass each round. The first call of a shape runs eagerly (one-off
   * shapes, such as a first round's prompt, are never captured); the second captures it.
   */
  /** Whether an extend of m rows takes the replayed path (a graph engine, m ≤ VERIFY_GRAPH_MAX_ROWS). */
  private replaysExtend(m: number): boolean {
    return this.useGraphs && m <= VERIFY_GRAPH_MAX_ROWS;
  }

  private replayExtend(row: number, start: number, tokens: readonly number[], lastRows: number, mode: VerifyMode): PreparedVerify {
    this.checkExtend(row, start, tokens, lastRows);
    const b = this.backend, m = tokens.length;
    const v = this.preparedVerify(row, m, mode);
    b.upload(v.tokens, tokens);
    b.upload(v.positions, Array.from({ length: m }, (_, i) => start + i));
    if (v.graph) v.graph.replay();
    else if (v.runs >= 1) (v.graph = b.captureGraph(v.run)).replay();
    else v.run();
    v.runs++;
    return v;
  }

  private preparedVerify(row: number, m: number, mode: VerifyMode): PreparedVerify {
    const key = `${row}.${m}.${mode}`, picks = mode === 'picks';
    let prepared = this.verifies.get(key);
    if (prepared) return prepared;
    const b = this.backend, mdl = this.model, arch = mdl.arch, f = this.forward, cache = this.cache;
    const { heads: Hq, headDim: d } = arch;
    const tensors: Tensor[] = [];
    const make = (shape: number[], dtype: 'f32' | 'i32', values?: Int32Array | readonly number[]) => {
      const t = b.empty(shape, dtype);
      tensors.push(t);
      if (values) b.upload(t, values);
      return t;
    };
    try {
      const tokens = make([m], 'i32'), positions = make([m], 'i32'), table = make([m, 1], 'i32', new Int32Array(m).fill(row));
      const history = make([m, 2], 'i32', new Int32Array(2 * m));
      // Greedy picks by sampleTokens, each row its own "sequence" at position 0 whose pick goes to history[r, 1]:
      // (T = 0, top-k 0, top-p 1, ρ = 1); a limit of 2 finishes it there, so `finished` is zeroed before each run.
      const sampling = picks ? {
        params: make([m, 4], 'f32', Array.from({ length: m }, () => [0, 0, 1, 1]).flat()), seeds: make([m, 2], 'i32', new Int32Array(2 * m)),
        positions: make([m], 'i32', new Int32Array(m)), history, tokens: make([m], 'i32', new Int32Array(m)), finished: make([m], 'i32', new Int32Array(m)),
        limits: make([m], 'i32', new Int32Array(m).fill(2)), stopIds: make([MAX_STOP_IDS], 'i32', new Int32Array(MAX_STOP_IDS).fill(-1)),
      } : undefined;
      const logits = b.empty([m, arch.paddedVocab], mdl.dtype);
      tensors.push(logits);
      const v = f.rows(m);
      const q4 = b.view(v.q, 0, [m, Hq, 1, d]), q3 = b.view(v.q, 0, [m, Hq, d]), out3 = b.view(v.attn, 0, [m, Hq, d]);
      const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
      const scale = 1 / Math.sqrt(d);
      const run = () => {
        if (sampling) b.fill(sampling.finished, 0);
        f.embed(b, v, tokens, positions);
        f.blocks(b, v, (l) => {
          const kPool = cache.keys(l, 0, this.maxBatch), vPool = cache.values(l, 0, this.maxBatch);
          b.qkvRopeAppend({ qkv: v.qkv, positions, q: q4, kCache: kPool, vCache: vPool, blockTable: table, ...rope, ...f.qkvExtras(l) });
          // Row i's keys start..start + i were appended just now: at most m fresh keys a row.
          b.decodeAttention({ q: q3, kCache: kPool, vCache: vPool, positions, out: out3, scale, blockTable: table, freshKeys: m });
          return v.attn;
        });
        if (mode === 'keys') return;
        f.lmHead(b, v.h, logits);
        if (sampling) b.sampleTokens({ logits, classes: mdl.vocabSize, ...sampling });
      };
      prepared = { run, runs: 0, tokens, positions, logits, history, tensors };
    } catch (e) {
      for (const t of tensors) b.free(t);
      throw e;
    }
    this.verifies.set(key, prepared);
    return prepared;
  }

  private checkExtend(row: number, start: number, tokens: readonly number[], lastRows: number): void {
    this.checkAlive();
    const m = tokens.length, V = this.model.vocabSize, L = this.maxLen;
    if (!Number.isInteger(row) || row < 0 || row >= this.maxBatch) throw new ArgumentError(`engine: extend of sequence ${row}; the cache holds sequences 0..${this.maxBatch - 1}`);
    if (m < 1 || m > this.maxPrefillTokens) throw new ArgumentError(`engine: extend takes 1 to maxPrefillTokens = ${this.maxPrefillTokens} tokens, got ${m}`);
    if (!Number.isInteger(start) || start < 0 || start + m > L) throw new ArgumentError(`engine: extend writes positions ${start}..${start + m - 1}; the cache holds positions 0..${L - 1}`);
    tokens.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`engine: token ${t} at index ${j} of extend is outside the vocabulary [0, ${V})`); });
    if (!Number.isInteger(lastRows) || lastRows < 1 || lastRows > m) throw new ArgumentError(`engine: extend returns 1 to ${m} rows of logits, asked for ${lastRows}`);
  }

  /** The pass of extend(): runs the tokens, then `read(logits of the last rows, temp)` before the temporaries are freed. */
  private extendRun<R>(row: number, start: number, tokens: readonly number[], lastRows: number, read: (logits: Tensor, temp: (shape: number[], dtype: 'f32' | 'i32') => Tensor) => R): R {
    this.checkExtend(row, start, tokens, lastRows);
    const m = tokens.length, arch = this.model.arch, Vp = arch.paddedVocab, L = this.maxLen;
    const b = this.backend, mdl = this.model, f = this.forward, cache = this.cache;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    const Lk = start + m;
    const io = this.prefillIo;
    const tokensView = b.view(io.tokens, 0, [m]), positionsView = b.view(io.positions, 0, [m]);
    b.upload(tokensView, tokens);
    b.upload(positionsView, Array.from({ length: m }, (_, i) => start + i));
    const temporaries: Tensor[] = [];
    const temp = (shape: number[], dtype: 'f32' | 'i32' | typeof mdl.dtype) => { const t = b.empty(shape, dtype); temporaries.push(t); return t; };
    try {
      const gather = temp([Hkv * Lk], 'i32');
      const rows = new Int32Array(Hkv * Lk);
      for (let h = 0; h < Hkv; h++) for (let j = 0; j < Lk; j++) rows[h * Lk + j] = h * L + j;
      b.upload(gather, rows);
      const kAll = temp([1, Hkv, Lk, d], mdl.dtype), vAll = temp([1, Hkv, Lk, d], mdl.dtype);
      const context = temp([1, Hq, m, d], mdl.dtype), lse = temp([1, Hq, m], 'f32'), logits = temp([lastRows, Vp], mdl.dtype);
      const kRows = b.view(kAll, 0, [Hkv * Lk, d]), vRows = b.view(vAll, 0, [Hkv * Lk, d]);
      const v = f.rows(m);
      const q4 = b.view(v.q, 0, [1, Hq, m, d]), merged = b.view(v.attn, 0, [1, m, Hq, d]);
      const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
      const scale = 1 / Math.sqrt(d);
      f.embed(b, v, tokensView, positionsView);
      f.blocks(b, v, (l) => {
        const kCache = cache.keys(l, row, 1), vCache = cache.values(l, row, 1);
        b.qkvRopeAppend({ qkv: v.qkv, positions: positionsView, q: q4, kCache, vCache, ...rope, ...f.qkvExtras(l) });
        b.embedTokens({ tokens: gather, tokenTable: b.view(kCache, 0, [Hkv * L, d]), out: kRows });
        b.embedTokens({ tokens: gather, tokenTable: b.view(vCache, 0, [Hkv * L, d]), out: vRows });
        b.flashAttentionForward({ q: q4, k: kAll, v: vAll, out: context, lse, scale, causal: true });
        b.permute0213({ x: context, out: merged });
        return v.attn;
      });
      f.lmHead(b, lastRows === m ? v.h : b.view(v.h, (m - lastRows) * arch.hidden, [lastRows, arch.hidden]), logits);
      return read(logits, temp);
    } finally {
      for (const t of temporaries) b.free(t);
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const d of this.decodes.values()) {
      d.graph?.dispose();
      d.multi?.dispose();
    }
    this.decodes.clear();
    for (const v of this.verifies.values()) {
      v.graph?.dispose();
      for (const t of v.tensors) this.backend.free(t);
    }
    this.verifies.clear();
    const b = this.backend;
    for (const t of [...Object.values(this.state), ...Object.values(this.prefillIo)]) b.free(t);
    if (this.partials) b.free(this.partials);
    if (this.scoredLogits) b.free(this.scoredLogits);
    this.picker?.free();
    for (const io of this.scoring.values()) for (const t of [io.params, io.picks, io.out]) b.free(t);
    this.scoring.clear();
    this.cache.free();
    this.forward.free();
  }

  // --- internals ------------------------------------------------------------------------------------

  private checkAlive(): void {
    if (this.disposed) throw new ArgumentError('engine: used after dispose()');
  }

  private checkRow(row: number): void {
    this.checkAlive();
    if (!Number.isInteger(row) || row < 0 || row >= this.rows.length) throw new ArgumentError(`engine: sequence ${row} is not in the batch of ${this.rows.length}`);
  }

  /** Views of the state for sequences [first, first + count) (cached: GEMMs and graphs see the same tensors). */
  private views(first: number, count: number): StateViews {
    const key = `${first}.${count}`;
    let v = this.stateViews.get(key);
    if (!v) {
      const b = this.backend, s = this.state, L = this.maxLen, Vp = this.model.arch.paddedVocab;
      const rows = (t: Tensor, width: number) => b.view(t, first * width, width === 1 ? [count] : [count, width]);
      v = {
        tokens: rows(s.tokens, 1), positions: rows(s.positions, 1), finished: rows(s.finished, 1), limits: rows(s.limits, 1),
        seeds: rows(s.seeds, 2), params: rows(s.params, 4), history: rows(s.history, L), logits: rows(s.logits, Vp), argmax: rows(s.argmax, 2),
      };
      this.stateViews.set(key, v);
    }
    return v;
  }

  /** sampleTokens over the rows of `st`; `argmax`: the LM head left the rows' greedy picks in st.argmax. */
  private sample(st: StateViews, argmax = false): void {
    this.backend.sampleTokens({
      logits: st.logits, classes: this.model.vocabSize, params: st.params, seeds: st.seeds, positions: st.positions,
      history: st.history, tokens: st.tokens, finished: st.finished, limits: st.limits, stopIds: this.state.stopIds,
      ...(argmax ? { argmax: st.argmax } : {}),
    });
  }

  /** The decode step of a bucket of n sequences: embed, layers with cached attention, LM head, sampling. */
  private prepared(n: number): PreparedDecode {
    let prepared = this.decodes.get(n);
    if (prepared) return prepared;
    const b = this.backend, m = this.model, arch = m.arch, f = this.forward, cache = this.cache;
    const v = f.rows(n), st = this.views(0, n);
    const { heads: Hq, headDim: d } = arch;
    const q3 = b.view(v.q, 0, [n, Hq, d]), out3 = b.view(v.attn, 0, [n, Hq, d]);
    const splits = this.splits(n);
    const partials = splits > 1 ? b.view(this.partials!, 0, [n, Hq, splits, d + 2]) : undefined;
    const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
    const scale = 1 / Math.sqrt(d);
    // The head's greedy picks (headArgmaxOptions), which sampleTokens then reads for greedy rows.
    const argmax = f.headFormsArgmax(b, n);
    const run = () => {
      f.embed(b, v, st.tokens, st.positions);
      f.blocks(b, v, (l, _v, project) => {
        const kCache = cache.keys(l, 0, n), vCache = cache.values(l, 0, n);
        b.appendDecodeAttention({
          qkv: v.qkv, positions: st.positions, q: q3, kCache, vCache, out: out3, scale, ...rope, ...f.qkvExtras(l), ...(partials ? { partials } : {}),
          ...(project ? { project } : {}),
        });
        return v.attn;
      }, { logits: st.logits, projects: true, ...(argmax ? { argmax: st.argmax } : {}) });
      this.sample(st, argmax);
    };
    prepared = { run, runs: 0 };
    this.decodes.set(n, prepared);
    return prepared;
  }

  /** Embeds and runs the layers over prompts for sequences [first, first + count); h = final-norm output. */
  private prefillForward(first: number, prompts: readonly (readonly number[])[]): RowViews {
    const b = this.backend, m = this.model, arch = m.arch, f = this.forward, cache = this.cache;
    const Bp = prompts.length, Lp = Math.max(...prompts.map((p) => p.length)), R = Bp * Lp;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    const tokens = new Int32Array(R), positions = new Int32Array(R);
    prompts.forEach((p, s) => {
      tokens.set(p, s * Lp);
      for (let l = 0; l < Lp; l++) positions[s * Lp + l] = l;
    });
    const io = this.prefillIo;
    const tokensView = b.view(io.tokens, 0, [R]), positionsView = b.view(io.positions, 0, [R]), lengthsView = b.view(io.lengths, 0, [Bp]);
    b.upload(tokensView, tokens);
    b.upload(positionsView, positions);
    b.upload(lengthsView, prompts.map((p) => p.length));
    const v = f.rows(R);
    const flash = this.prefillAttention === 'flash';
    const kvHeads = flash ? Hkv : Hq;
    const temporaries: Tensor[] = [];
    const temp = (shape: number[], dtype: 'f32' | typeof m.dtype) => { const t = b.empty(shape, dtype); temporaries.push(t); return t; };
    try {
      const kOut = temp([Bp, kvHeads, Lp, d], m.dtype), vOut = temp([Bp, kvHeads, Lp, d], m.dtype), context = temp([Bp, Hq, Lp, d], m.dtype);
      const lse = flash ? temp([Bp, Hq, Lp], 'f32') : undefined;
      const scores = flash ? undefined : temp([Bp, Hq, Lp, Lp], m.dtype);
      const q4 = b.view(v.q, 0, [Bp, Hq, Lp, d]), merged = b.view(v.attn, 0, [Bp, Lp, Hq, d]);
      const scale = 1 / Math.sqrt(d);
      const bh = (t: Tensor, rows: number, cols: number) => b.view(t, 0, [Bp * Hq, rows, cols]);
      const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
      f.embed(b, v, tokensView, positionsView);
      f.blocks(b, v, (l) => {
        b.qkvRopeAppend({
          qkv: v.qkv, positions: positionsView, q: q4, kCache: cache.keys(l, first, Bp), vCache: cache.values(l, first, Bp), kOut, vOut,
          ...rope, ...f.qkvExtras(l),
        });
        if (lse) {
          b.flashAttentionForward({ q: q4, k: kOut, v: vOut, out: context, lse, scale, causal: true, keyLengths: lengthsView });
        } else {
          b.batchedGemm({ a: bh(q4, Lp, d), b: bh(kOut, Lp, d), out: bh(scores!, Lp, Lp), transB: true });
          b.softmaxForward({ x: scores!, out: scores!, scale, causal: true, keyLengths: lengthsView });
          b.batchedGemm({ a: bh(scores!, Lp, Lp), b: bh(vOut, Lp, d), out: bh(context, Lp, d) });
        }
        b.permute0213({ x: context, out: merged });
        return v.attn;
      });
      // The temporaries are freed below while the queued work may still read them: free() hands memory
      // back to the stream-ordered caching allocator (CUDA) or drops host arrays after the ops ran (CPU).
      return v;
    } finally {
      for (const t of temporaries) b.free(t);
    }
  }

  /** Prefill of sequences [first, first + prompts.length), then their first sampled token. */
  private prefillGroup(first: number, prompts: readonly (readonly number[])[]): void {
    const b = this.backend, f = this.forward;
    const Bp = prompts.length, Lp = Math.max(...prompts.map((p) => p.length));
    const gather = b.view(this.prefillIo.gather, 0, [Bp]);
    b.upload(gather, prompts.map((p, s) => s * Lp + p.length - 1));
    const v = this.prefillForward(first, prompts);
    const last = f.rows(Bp).y;
    b.embedTokens({ tokens: gather, tokenTable: v.h, out: last });
    const st = this.views(first, Bp);
    f.lmHead(b, last, st.logits);
    this.sample(st);
  }
}
