// Masked-language-model batches for BERT (Devlin et al. 2019, §3.1 and appendix A.1): each token is
// selected for prediction with probability 15%; a selected token is replaced by [MASK] 80% of the
// time, by a uniformly random token 10%, and left unchanged 10% (so the model cannot rely on seeing
// [MASK] where it must predict). targets hold the original id at selected positions and ignoreIndex
// (-100, PyTorch's convention, which our cross-entropy skips) everywhere else. Selection is an
// independent draw per token, as in Hugging Face's DataCollatorForLanguageModeling; special tokens
// ([CLS], [SEP], [PAD]) are never selected.
//
// Randomness: batch k's masks come from the Philox stream (seed, k), so they are a pure function of
// the seed and the batch number — a resumed run masks exactly as the uninterrupted one would have.

import { ArgumentError } from '../errors.js';
import type { TokenArray } from '../io/token-file.js';
import { CausalLMLoader, type CausalLMLoaderOptions, type CausalLMLoaderState } from './data.js';
import { checkSeed, CounterRng, RNG_DOMAIN } from './random.js';

export const IGNORE_INDEX = -100;

export interface MaskingOptions {
  maskTokenId: number;
  /** Random replacements are drawn from [0, vocabSize). */
  vocabSize: number;
  /** Default 0.15. */
  selectProbability?: number;
  /** Of the selected: fraction replaced by [MASK] (default 0.8) and by a random token (default 0.1); the rest stay. */
  maskFraction?: number;
  randomFraction?: number;
  /** Ids never selected. */
  specialTokenIds?: readonly number[];
  ignoreIndex?: number;
}

export interface MaskedLMBatch {
  /** [B, L] ids after masking. */
  readonly inputs: Int32Array;
  /** [B, L] original ids at selected positions, ignoreIndex elsewhere. */
  readonly targets: Int32Array;
  readonly batchSize: number;
  readonly seqLen: number;
}

/** Masks `tokens` (not modified) with the Philox stream of (seed, batchIndex). */
export function maskTokens(tokens: Int32Array, options: MaskingOptions, seed: number, batchIndex: number): { inputs: Int32Array; targets: Int32Array } {
  const o = validateMasking(options);
  checkSeed(seed, 'masked LM: seed');
  if (!Number.isInteger(batchIndex) || batchIndex < 0 || batchIndex >= 2 ** 32) throw new ArgumentError(`masked LM: batchIndex must be an integer in [0, 2^32), got ${batchIndex}`);
  const rng = new CounterRng(seed, batchIndex, RNG_DOMAIN.maskedLM);
  const special = new Set(o.specialTokenIds);
  const inputs = Int32Array.from(tokens);
  const targets = new Int32Array(tokens.length).fill(o.ignoreIndex);
  for (let i = 0; i < tokens.length; i++) {
    // Three draws per position, used or not, so position i's outcome is words 3i..3i+2 of the stream
    // whatever happened before it. floor(u · V) is uniform over the vocabulary up to a 2^-32 bias.
    const select = rng.nextFloat(), action = rng.nextFloat(), randomId = Math.floor(rng.nextFloat() * o.vocabSize);
    const id = tokens[i]!;
    if (select >= o.selectProbability || special.has(id)) continue;
    targets[i] = id;
    if (action < o.maskFraction) inputs[i] = o.maskTokenId;
    else if (action < o.maskFraction + o.randomFraction) inputs[i] = randomId;
  }
  return { inputs, targets };
}

export interface MaskedLMLoaderOptions extends CausalLMLoaderOptions, MaskingOptions {
  /** Put [CLS] first and [SEP] last in every row (BERT's single-segment input); the text fills L − 2. */
  clsTokenId?: number;
  sepTokenId?: number;
}

/**
 * Rows of L tokens from the stream (windows drawn as in CausalLMLoader, with its shuffling and exact
 * resume), optionally framed as [CLS] … [SEP], then masked.
 */
export class MaskedLMLoader {
  private readonly windows: CausalLMLoader;
  private readonly masking: Required<MaskingOptions>;
  private readonly framed: boolean;

  constructor(tokens: TokenArray, private readonly options: MaskedLMLoaderOptions) {
    const { clsTokenId, sepTokenId } = options;
    if ((clsTokenId === undefined) !== (sepTokenId === undefined)) throw new ArgumentError('masked LM: give both clsTokenId and sepTokenId, or neither');
    this.framed = clsTokenId !== undefined;
    if (this.framed && !(options.seqLen >= 3)) throw new ArgumentError(`masked LM: seqLen ${options.seqLen} leaves no room for text between [CLS] and [SEP]`);
    const specials = [...(options.specialTokenIds ?? []), ...(this.framed ? [clsTokenId!, sepTokenId!] : [])];
    this.masking = validateMasking({ ...options, specialTokenIds: specials });
    // The window loader's seqLen + 1 windows waste one token per row here; simpler than a second sampler.
    this.windows = new CausalLMLoader(tokens, { ...options, seqLen: this.framed ? options.seqLen - 2 : options.seqLen });
  }

  get batchSize(): number { return this.options.batchSize; }
  get seqLen(): number { return this.options.seqLen; }

  next(): MaskedLMBatch {
    const batchIndex = this.windows.state().batches;
    const { inputs: text, batchSize: B } = this.windows.next();
    const L = this.options.seqLen;
    let rows = text;
    if (this.framed) {
      rows = new Int32Array(B * L);
      const n = L - 2;
      for (let b = 0; b < B; b++) {
        rows[b * L] = this.options.clsTokenId!;
        rows.set(text.subarray(b * n, (b + 1) * n), b * L + 1);
        rows[b * L + L - 1] = this.options.sepTokenId!;
      }
    }
    // Each rank masks its own rows with a stream of its own: (batch, rank) → batch · W + rank.
    const stream = (batchIndex * this.windows.worldSize + this.windows.rank) % 2 ** 32;
    const { inputs, targets } = maskTokens(rows, this.masking, this.options.seed, stream);
    return { inputs, targets, batchSize: B, seqLen: L };
  }

  state(): CausalLMLoaderState { return this.windows.state(); }
  restore(state: CausalLMLoaderState, source?: string): void { this.windows.restore(state, source); }
}

function validateMasking(options: MaskingOptions): Required<MaskingOptions> {
  const fail = (message: string): never => { throw new ArgumentError(`masked LM: ${message}`); };
  const o: Required<MaskingOptions> = {
    maskTokenId: options.maskTokenId, vocabSize: options.vocabSize,
    selectProbability: options.selectProbability ?? 0.15, maskFraction: options.maskFraction ?? 0.8,
    randomFraction: options.randomFraction ?? 0.1, specialTokenIds: options.specialTokenIds ?? [],
    ignoreIndex: options.ignoreIndex ?? IGNORE_INDEX,
  };
  if (!Number.isSafeInteger(o.vocabSize) || o.vocabSize < 1) fail(`vocabSize must be an integer >= 1, got ${o.vocabSize}`);
  if (!Number.isInteger(o.maskTokenId) || o.maskTokenId < 0 || o.maskTokenId >= o.vocabSize) fail(`maskTokenId ${o.maskTokenId} is outside [0, vocabSize = ${o.vocabSize})`);
  for (const key of ['selectProbability', 'maskFraction', 'randomFraction'] as const) {
    if (typeof o[key] !== 'number' || !(o[key] >= 0 && o[key] <= 1)) fail(`${key} must be in [0, 1], got ${o[key]}`);
  }
  if (o.maskFraction + o.randomFraction > 1) fail(`maskFraction + randomFraction = ${o.maskFraction + o.randomFraction} exceeds 1`);
  if (!Number.isInteger(o.ignoreIndex) || (o.ignoreIndex >= 0 && o.ignoreIndex < o.vocabSize)) fail(`ignoreIndex ${o.ignoreIndex} must be an integer outside the vocabulary`);
  return o;
}
