// Batches for causal language-model training, from a token stream held in memory.
//
// The stream is cut into windows of L + 1 tokens that overlap by one token (window i covers tokens
// [o + iL, o + iL + L]); a window gives one row: inputs = its first L tokens, targets = its last L
// (each position predicts the next token). Each epoch draws a fresh offset o in [0, L) and a fresh
// order of the windows, both from Philox streams keyed by (seed, epoch): so every epoch sees other
// contexts and another order, and the loader's whole state is (epoch, position) — a resumed run
// regenerates the epoch's order and continues with exactly the rows it would have produced.
// A batch that runs past the end of an epoch continues into the next, so every batch is full (fixed
// shapes are what a captured CUDA graph needs).
//
// Data parallel: with worldSize W, each step draws W·B windows and rank r keeps rows [rB, rB + B);
// every rank advances the same state, so ranks never see the same window in an epoch.
//
// The validation split is the *end* of the stream, contiguous, so no training window overlaps it.

import { ArgumentError } from '../errors.js';
import type { TokenArray } from '../io/token-file.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { checkSeed, CounterRng, permutation, RNG_DOMAIN } from './random.js';

export interface CausalLMBatch {
  /** [B, L] token ids, row-major. */
  readonly inputs: Int32Array;
  /** [B, L]: targets[b, t] = the token after inputs[b, t]. */
  readonly targets: Int32Array;
  readonly batchSize: number;
  readonly seqLen: number;
}

export interface CausalLMLoaderOptions {
  /** B: rows per batch (per rank). */
  batchSize: number;
  /** L: tokens per row. */
  seqLen: number;
  seed: number;
  /** Random window offset and order each epoch; default true. false: windows in order from token 0. */
  shuffle?: boolean;
  rank?: number;
  worldSize?: number;
}

/** Plain JSON; the epoch's shuffle is regenerated from (seed, epoch), so no RNG words are stored. */
export interface CausalLMLoaderState {
  readonly seed: number;
  readonly shuffle: boolean;
  readonly epoch: number;
  /** Windows of this epoch already consumed. */
  readonly position: number;
  /** Batches produced since the start (for logs; not needed to resume). */
  readonly batches: number;
  /** Fingerprint of the run's shape: resuming with other data or other B, L, W is refused. */
  readonly tokens: number;
  readonly batchSize: number;
  readonly seqLen: number;
  readonly worldSize: number;
}

export class CausalLMLoader {
  readonly batchSize: number;
  readonly seqLen: number;
  readonly seed: number;
  readonly shuffle: boolean;
  readonly rank: number;
  readonly worldSize: number;
  private epochNumber = 0;
  private position = 0;
  private batches = 0;
  private offset = 0;
  private order: Uint32Array = new Uint32Array(0);

  constructor(private readonly tokens: TokenArray, options: CausalLMLoaderOptions) {
    const { batchSize, seqLen, seed } = options;
    positiveInteger(batchSize, 'batchSize');
    positiveInteger(seqLen, 'seqLen');
    checkSeed(seed, 'data loader: seed');
    const worldSize = options.worldSize ?? 1, rank = options.rank ?? 0;
    positiveInteger(worldSize, 'worldSize');
    if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) throw new ArgumentError(`data loader: rank must be an integer in [0, worldSize = ${worldSize}), got ${rank}`);
    if (tokens.length < seqLen + 1) {
      throw new ArgumentError(`data loader: ${tokens.length} tokens cannot fill one window of seqLen + 1 = ${seqLen + 1} tokens; use more text or a shorter seqLen`);
    }
    this.batchSize = batchSize; this.seqLen = seqLen; this.seed = seed;
    this.shuffle = options.shuffle ?? true; this.rank = rank; this.worldSize = worldSize;
    this.startEpoch(0);
  }

  get epoch(): number { return this.epochNumber; }

  /** Windows in the current epoch (varies by at most one between epochs, with the offset). */
  get windowsPerEpoch(): number { return this.order.length; }

  /** The next [B, L] batch of this rank. */
  next(): CausalLMBatch {
    const { batchSize: B, seqLen: L, tokens } = this;
    const inputs = new Int32Array(B * L), targets = new Int32Array(B * L);
    for (let row = 0; row < this.worldSize * B; row++) {
      if (this.position === this.order.length) this.startEpoch(this.epochNumber + 1);
      const start = this.offset + this.order[this.position++]! * L;
      const mine = row - this.rank * B;
      if (mine < 0 || mine >= B) continue;
      for (let t = 0; t < L; t++) {
        inputs[mine * L + t] = tokens[start + t]!;
        targets[mine * L + t] = tokens[start + t + 1]!;
      }
    }
    this.batches++;
    return { inputs, targets, batchSize: B, seqLen: L };
  }

  state(): CausalLMLoaderState {
    return {
      seed: this.seed, shuffle: this.shuffle, epoch: this.epochNumber, position: this.position, batches: this.batches,
      tokens: this.tokens.length, batchSize: this.batchSize, seqLen: this.seqLen, worldSize: this.worldSize,
    };
  }

  /** Continues from `state()` of an earlier run over the same tokens and options. */
  restore(state: CausalLMLoaderState, source = 'data loader state'): void {
    const fail = (message: string): never => { throw new ArgumentError(`${source}: ${message}`); };
    if (typeof state !== 'object' || state === null) fail('must be an object');
    const same: [keyof CausalLMLoaderState, unknown][] = [
      ['tokens', this.tokens.length], ['batchSize', this.batchSize], ['seqLen', this.seqLen],
      ['worldSize', this.worldSize], ['seed', this.seed], ['shuffle', this.shuffle],
    ];
    for (const [key, mine] of same) {
      if (state[key] !== mine) fail(`was saved with ${key} = ${JSON.stringify(state[key])} but this loader has ${key} = ${JSON.stringify(mine)}`);
    }
    for (const key of ['epoch', 'position', 'batches'] as const) {
      if (!Number.isSafeInteger(state[key]) || state[key] < 0) fail(`${key} must be an integer >= 0, got ${JSON.stringify(state[key])}`);
    }
    this.startEpoch(state.epoch);
    if (state.position > this.order.length) fail(`position ${state.position} is past the ${this.order.length} windows of epoch ${state.epoch}`);
    this.position = state.position;
    this.batches = state.batches;
  }

  private startEpoch(epoch: number): void {
    const L = this.seqLen, n = this.tokens.length;
    if (this.shuffle) {
      const rng = new CounterRng(this.seed, epoch >>> 0, RNG_DOMAIN.shuffle);
      // Start positions 0 .. n - L - 1 leave room for a window, so at least one window always fits.
      this.offset = rng.nextInt(Math.min(L, n - L));
      this.order = permutation(Math.floor((n - 1 - this.offset) / L), rng);
    } else {
      this.offset = 0;
      this.order = Uint32Array.from({ length: Math.floor((n - 1) / L) }, (_, i) => i);
    }
    this.epochNumber = epoch;
    this.position = 0;
  }
}

/**
 * Splits a stream into training and validation parts: the last `validationFraction` of the tokens
 * (rounded down) is validation. Both are views of `tokens`, not copies.
 */
export function splitTokens<T extends TokenArray>(tokens: T, validationFraction: number): { train: T; validation: T } {
  if (typeof validationFraction !== 'number' || !(validationFraction >= 0 && validationFraction < 1)) {
    throw new ArgumentError(`splitTokens: validationFraction must be in [0, 1), got ${String(validationFraction)}`);
  }
  const cut = tokens.length - Math.floor(tokens.length * validationFraction);
  return { train: tokens.subarray(0, cut) as T, validation: tokens.subarray(cut) as T };
}

/** Batches in evaluation: consecutive windows from token 0, in order; a last partial batch is dropped. */
export function evaluationBatchCount(tokens: number, batchSize: number, seqLen: number): number {
  positiveInteger(batchSize, 'batchSize');
  positiveInteger(seqLen, 'seqLen');
  return Math.floor(Math.max(0, Math.floor((tokens - 1) / seqLen)) / batchSize);
}

/**
 * The validation batches, the same every time they are asked for (so eval losses are comparable
 * across steps). `maxBatches` caps the count (evaluating on a prefix). Throws if not even one fits.
 */
export function* evaluationBatches(tokens: TokenArray, options: { batchSize: number; seqLen: number; maxBatches?: number }): Generator<CausalLMBatch> {
  const { batchSize: B, seqLen: L } = options;
  const available = evaluationBatchCount(tokens.length, B, L);
  if (available === 0) {
    throw new ArgumentError(`evaluation: ${tokens.length} tokens do not fill one batch of ${B} × ${L} (+1) tokens; use a larger validation split or a smaller batch`);
  }
  const count = Math.min(available, options.maxBatches ?? available);
  for (let b = 0; b < count; b++) {
    const inputs = new Int32Array(B * L), targets = new Int32Array(B * L);
    for (let row = 0; row < B; row++) {
      const start = (b * B + row) * L;
      for (let t = 0; t < L; t++) {
        inputs[row * L + t] = tokens[start + t]!;
        targets[row * L + t] = tokens[start + t + 1]!;
      }
    }
    yield { inputs, targets, batchSize: B, seqLen: L };
  }
}

/**
 * Tokenizes documents into one stream (no special tokens added by the tokenizer), with
 * `separatorId` (e.g. GPT-2's <|endoftext|>) before each document, as GPT-2's training data has it:
 * the model learns that a document starts after it. Uint16Array when the vocabulary fits, else Uint32Array.
 */
export function tokenizeDocuments(documents: readonly string[], tokenizer: Tokenizer, options: { separatorId?: number } = {}): TokenArray {
  const { separatorId } = options;
  if (separatorId !== undefined && (!Number.isInteger(separatorId) || separatorId < 0 || separatorId >= tokenizer.vocabSize)) {
    throw new ArgumentError(`tokenizeDocuments: separatorId ${separatorId} is outside the vocabulary of ${tokenizer.source} (0 to ${tokenizer.vocabSize - 1})`);
  }
  const pieces: number[][] = documents.map((text) => tokenizer.encode(text, { addSpecialTokens: false }));
  const total = pieces.reduce((sum, p) => sum + p.length + (separatorId === undefined ? 0 : 1), 0);
  const out = tokenizer.vocabSize <= 2 ** 16 ? new Uint16Array(total) : new Uint32Array(total);
  let at = 0;
  for (const p of pieces) {
    if (separatorId !== undefined) out[at++] = separatorId;
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Throws unless every token is an id below `vocabSize` (a token file made with another tokenizer). */
export function checkTokenRange(tokens: TokenArray, vocabSize: number, source: string): void {
  positiveInteger(vocabSize, 'vocabSize');
  for (let i = 0; i < tokens.length; i++) {
    if (!(tokens[i]! >= 0 && tokens[i]! < vocabSize)) {
      throw new ArgumentError(`${source}: token ${i} is id ${tokens[i]}, outside the vocabulary of ${vocabSize} (made with another tokenizer?)`);
    }
  }
}

function positiveInteger(value: number, name: string): void {
  if (!Number.isSafeInteger(value) || value < 1) throw new ArgumentError(`data loader: ${name} must be an integer >= 1, got ${String(value)}`);
}
