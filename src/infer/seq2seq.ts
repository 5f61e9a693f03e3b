// Encoder-decoder generation (translation) with Hugging Face's semantics, on any Backend:
//   loadSeq2Seq(dir, backend, { dtype })      a MarianMTModel directory: config.json, model.safetensors (or
//                                              shards), generation_config.json, tokenizer.json or Marian's
//                                              source.spm / target.spm / vocab.json (optional)
//   translate(translator, sources, options)   token ids in, the best hypothesis per source out
//   translateText(translator, texts, options) through the directory's tokenizer
//   timeDecodeSteps(translator, sources, ...)  device time of the decoder steps alone (benchmarks)
// num_beams > 1 is HF's beam search (beam-search.ts); num_beams = 1 is greedy search. The model runs on the
// device (seq2seq-model.ts); the host reads each step's candidates every `syncEvery` steps — the device
// picks its running beams by itself, so running ahead never changes the result, it only may compute a few
// steps past the end. Pipelined (the default), the host reads one chunk of syncEvery steps while the next
// chunk runs: two sets of history slots, each chunk's candidates downloaded behind its steps.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { hasMarianTokenizerFiles, loadMarianTokenizer } from '../io/marian-tokenizer.js';
import { loadTokenizer } from '../io/tokenizer.js';
import { checkLayerCount, shardFiles } from '../models/hf-weights.js';
import { loadModelConfig } from '../models/registry.js';
import type { SearchResult, StepCandidates } from './beam-search.js';
import { BeamSearch, GreedySearch, candidatesPerItem } from './beam-search.js';
import type { GenerationSettings } from './seq2seq-config.js';
import { readGenerationSettings } from './seq2seq-config.js';
import { Seq2SeqModel } from './seq2seq-model.js';
import type { DecodeSession, PendingHistory, SessionShape } from './seq2seq-model.js';
import { loadMarianWeights } from './seq2seq-weights.js';

export interface Translator {
  readonly model: Seq2SeqModel;
  readonly generation: GenerationSettings;
  readonly tokenizer?: Tokenizer;
  /** Checkpoint tensors that filled no parameter (for the caller to report). */
  readonly unusedTensors: readonly string[];
}

export interface TranslateOptions {
  /** Default: generation_config.json's num_beams. */
  numBeams?: number;
  /** 'auto' (default): greedy for one beam, as HF; 'beam' runs beam search's bookkeeping even for one beam. */
  strategy?: 'auto' | 'beam';
  /** Default: generation_config.json's max_new_tokens, else max_length − 1. */
  maxNewTokens?: number;
  /** Default: generation_config.json's length_penalty (1). */
  lengthPenalty?: number;
  /** Default: generation_config.json's early_stopping (false). */
  earlyStopping?: boolean | 'never';
  /** Decoder steps between host reads of the candidates (default 4; 1 reads after every step). */
  syncEvery?: number;
  /**
   * Pipelined host reads (default true; off with observeStep): the next syncEvery steps are launched before
   * the candidates of these are read, so the device runs while the host does the search's bookkeeping — at
   * the cost of up to 2·syncEvery steps computed past the end instead of syncEvery.
   */
  pipeline?: boolean;
  /** Capture decoder steps as CUDA graphs (default true; the CPU backend replays recorded closures). */
  graphs?: boolean;
  /** Sources per batch (default: all at once). */
  batchSize?: number;
  /** Called after every decoder step (forces syncEvery 1): each row's decoder input so far and the logits [rows, Vp]. */
  observeStep?: (step: ObservedStep) => void;
}

export interface ObservedStep {
  /** The decoder length before the step (start token included). */
  readonly length: number;
  /** Per row (item b's beam j at b·beams + j): the decoder input of this step, start token first. */
  readonly inputs: readonly (readonly number[])[];
  readonly logits: Float32Array;
}

export type Translation = SearchResult;

/** Loads a MarianMTModel directory for translation. */
export function loadSeq2Seq(dir: string, backend: Backend, options: { dtype?: FloatDType } = {}): Translator {
  const found = loadModelConfig(dir);
  if (found.family !== 'marian') {
    throw new ArgumentError(`${dir}: config.json describes a ${found.family} model; the encoder-decoder engine runs MarianMTModel checkpoints (model_type "marian")`);
  }
  const files = shardFiles(dir);
  checkLayerCount(dir, files, /^(?:model\.)?encoder\.layers\.(\d+)\./, 'encoder_layers', found.config.encoderLayers);
  checkLayerCount(dir, files, /^(?:model\.)?decoder\.layers\.(\d+)\./, 'decoder_layers', found.config.decoderLayers);
  const generation = readGenerationSettings(dir, found.config);
  // tokenizer.json where there is one; else Marian's own files (every opus-mt model on the Hub ships those only).
  const tokenizer = existsSync(join(dir, 'tokenizer.json')) ? loadTokenizer(dir) : hasMarianTokenizerFiles(dir) ? loadMarianTokenizer(dir) : undefined;
  const model = new Seq2SeqModel(backend, found.config, options.dtype ?? 'f32');
  try {
    const { unused } = loadMarianWeights(model.net.params, dir);
    return { model, generation, ...(tokenizer ? { tokenizer } : {}), unusedTensors: unused };
  } catch (error) {
    model.dispose();
    throw error;
  }
}

/** The search settings of a call, validated. */
function settingsOf(t: Translator, options: TranslateOptions) {
  const g = t.generation, config = t.model.config;
  const numBeams = options.numBeams ?? g.numBeams;
  if (!Number.isInteger(numBeams) || numBeams < 1) throw new ArgumentError(`translate: numBeams must be a positive integer, got ${numBeams}`);
  const maxNewTokens = options.maxNewTokens ?? g.maxNewTokens ?? g.maxLength - 1;
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 1) throw new ArgumentError(`translate: maxNewTokens must be a positive integer, got ${maxNewTokens}`);
  if (maxNewTokens > config.maxPositions) {
    const from = options.maxNewTokens !== undefined ? '' : g.maxNewTokens !== undefined ? ' (generation_config.json\'s max_new_tokens)' : ' (generation_config.json\'s max_length − 1)';
    throw new ArgumentError(`translate: maxNewTokens ${maxNewTokens}${from} needs ${maxNewTokens} decoder positions; the model has max_position_embeddings ${config.maxPositions}`);
  }
  const lengthPenalty = options.lengthPenalty ?? g.lengthPenalty;
  if (!Number.isFinite(lengthPenalty)) throw new ArgumentError(`translate: lengthPenalty must be a finite number, got ${lengthPenalty}`);
  const earlyStopping = options.earlyStopping ?? g.earlyStopping;
  if (earlyStopping !== true && earlyStopping !== false && earlyStopping !== 'never') throw new ArgumentError(`translate: earlyStopping must be true, false or 'never', got ${String(earlyStopping)}`);
  const syncEvery = options.observeStep ? 1 : options.syncEvery ?? 4;
  if (!Number.isInteger(syncEvery) || syncEvery < 1) throw new ArgumentError(`translate: syncEvery must be a positive integer, got ${syncEvery}`);
  const pipeline = !options.observeStep && (options.pipeline ?? true);
  const strategy = options.strategy ?? 'auto';
  if (strategy !== 'auto' && strategy !== 'beam') throw new ArgumentError(`translate: strategy must be 'auto' or 'beam', got ${String(strategy)}`);
  return { numBeams, greedy: numBeams === 1 && strategy === 'auto', maxLength: 1 + maxNewTokens, lengthPenalty, earlyStopping, syncEvery, pipeline };
}

function checkSources(t: Translator, sources: readonly (readonly number[])[]): void {
  const { vocabSize, maxPositions } = t.model.config;
  if (!Array.isArray(sources) || sources.length === 0) throw new ArgumentError('translate: expected a non-empty list of sources (token id lists)');
  sources.forEach((s, i) => {
    if (!Array.isArray(s) || s.length === 0) throw new ArgumentError(`translate: source ${i} is empty; expected a non-empty list of token ids`);
    if (s.length > maxPositions) throw new ArgumentError(`translate: source ${i} has ${s.length} tokens; the model has max_position_embeddings ${maxPositions}`);
    const bad = s.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize);
    if (bad >= 0) throw new ArgumentError(`translate: source ${i} token ${bad} is ${s[bad]}; expected an id in [0, ${vocabSize})`);
  });
}

/** The best hypothesis for every source. */
export function translate(t: Translator, sources: readonly (readonly number[])[], options: TranslateOptions = {}): Translation[] {
  checkSources(t, sources);
  const settings = settingsOf(t, options);
  const batchSize = options.batchSize ?? sources.length;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new ArgumentError(`translate: batchSize must be a positive integer, got ${batchSize}`);
  const results: Translation[] = [];
  for (let first = 0; first < sources.length; first += batchSize) {
    results.push(...translateBatch(t, sources.slice(first, first + batchSize), settings, options));
  }
  return results;
}

/** Source positions a session holds: the longest source rounded up to 16 (fewer sessions, fewer graphs). */
function sourceCapacity(longest: number, maxPositions: number): number {
  return Math.min(maxPositions, Math.ceil(longest / 16) * 16);
}

interface PreparedBatch {
  readonly session: DecodeSession;
  readonly search: BeamSearch | GreedySearch;
  /** Candidates per item and step. */
  readonly K: number;
  /** Decoder forward passes at most (HF's forced last step needs none). */
  readonly forwardSteps: number;
}

/** The session for this batch (created or reused), started: sources uploaded, encoder run, decoder state set. */
function prepareBatch(t: Translator, sources: readonly (readonly number[])[], settings: ReturnType<typeof settingsOf>, options: TranslateOptions): PreparedBatch {
  const g = t.generation, model = t.model;
  const B = sources.length, k = settings.numBeams, { maxLength, syncEvery, greedy } = settings;
  const search = greedy
    ? new GreedySearch(B, { eosTokenIds: g.eosTokenIds, maxLength })
    : new BeamSearch(B, { beams: k, eosTokenIds: g.eosTokenIds, maxLength, lengthPenalty: settings.lengthPenalty, earlyStopping: settings.earlyStopping });
  const K = greedy ? 1 : candidatesPerItem(k, g.eosTokenIds.length);
  const shape: SessionShape = {
    batch: B, beams: k, sourceCapacity: sourceCapacity(Math.max(...sources.map((s) => s.length)), model.config.maxPositions), maxLength,
    mode: greedy ? 'greedy' : 'beam', candidates: K, eosTokens: greedy ? [] : g.eosTokenIds, bannedTokens: g.bannedTokens,
    renormalize: g.renormalizeLogits, slots: settings.pipeline ? 2 * syncEvery : syncEvery, graphs: options.graphs ?? true,
  };
  const session = model.session(shape);
  session.begin(sources, g.decoderStartTokenId, search instanceof BeamSearch ? search.initialScores() : new Float32Array(B));
  // HF forces the last token (at length max_length − 1) without needing the model: that step is the host's.
  return { session, search, K, forwardSteps: g.forcedEosTokenIds.length > 0 ? maxLength - 2 : maxLength - 1 };
}

function translateBatch(t: Translator, sources: readonly (readonly number[])[], settings: ReturnType<typeof settingsOf>, options: TranslateOptions): Translation[] {
  const g = t.generation, backend = t.model.backend;
  const B = sources.length, { maxLength, syncEvery, pipeline } = settings;
  const { session, search, K, forwardSteps } = prepareBatch(t, sources, settings, options);
  const forced = g.forcedEosTokenIds;
  const inputsOf = (): number[][] => {
    const start = g.decoderStartTokenId;
    return search instanceof BeamSearch ? search.running.flatMap((beams) => beams.map((beam) => [start, ...beam.tokens])) : search.prefixes.map((p) => [start, ...p]);
  };
  // Chunks of up to syncEvery decoder steps, each with its candidates' download queued behind it. Pipelined,
  // chunks alternate between the two halves of the history slots and one more is in flight while the host
  // reads the oldest: the copies of a chunk are queued before the next chunk that reuses its slots.
  const inFlight: PendingHistory[] = [];
  let launched = 0, chunks = 0;
  const launchChunk = (): boolean => {
    const count = Math.min(syncEvery, forwardSteps - launched);
    if (count < 1) return false;
    const first = pipeline ? (chunks % 2) * syncEvery : 0;
    for (let j = 0; j < count; j++) session.step(first + j);
    launched += count;
    chunks++;
    inFlight.push(session.readHistoryLater(first, count));
    return true;
  };
  try {
    while (!search.done) {
      if (forced.length > 0 && search.length === maxLength - 1) {
        search.step(search instanceof BeamSearch ? search.forcedCandidates(forced, g.renormalizeLogits) : search.forcedCandidates(forced));
        continue;
      }
      const inputs = options.observeStep ? inputsOf() : undefined;
      if (inFlight.length === 0 && !launchChunk()) throw new Error(`internal: the search wants step ${search.length} past the ${forwardSteps} decoder steps`);
      if (pipeline && inFlight.length === 1) launchChunk();
      const pending = inFlight.shift()!;
      const history = pending.wait();
      for (let j = 0; j < pending.count && !search.done; j++) {
        const candidates: StepCandidates = {
          tokens: history.ids.subarray(2 * j * B * K, (2 * j + 1) * B * K),
          sourceBeams: history.ids.subarray((2 * j + 1) * B * K, (2 * j + 2) * B * K),
          scores: history.scores.subarray(j * B * K, (j + 1) * B * K),
          perItem: K,
        };
        if (options.observeStep) options.observeStep({ length: search.length, inputs: inputs!, logits: backend.download(session.logits(j)) as Float32Array });
        search.step(candidates);
      }
    }
  } finally {
    // A chunk launched past the search's end: its download holds a staging buffer until waited for.
    for (const pending of inFlight) pending.wait();
  }
  return search.results();
}

/**
 * Device time of the decoder alone: the batch is started as translate() starts it, then every decoder
 * step of a full-length search is replayed back to back between two markers (no host reads). Returns the
 * milliseconds per step, after `warmup` passes (the first captures the graphs).
 */
export function timeDecodeSteps(t: Translator, sources: readonly (readonly number[])[], options: TranslateOptions & { warmup?: number } = {}): { stepMs: number; steps: number } {
  checkSources(t, sources);
  const settings = settingsOf(t, options);
  const backend = t.model.backend;
  let result = { stepMs: 0, steps: 0 };
  for (let pass = 0; pass <= (options.warmup ?? 1); pass++) {
    const { session, forwardSteps } = prepareBatch(t, sources, settings, options);
    backend.synchronize();
    const start = backend.mark();
    for (let i = 0; i < forwardSteps; i++) session.step(i % settings.syncEvery);
    const end = backend.mark();
    result = { stepMs: end.elapsedSince(start) / forwardSteps, steps: forwardSteps };
    start.dispose();
    end.dispose();
  }
  return result;
}

/** The directory's tokenizer.json, or an error saying it is missing (`what` names the caller). */
function tokenizerOf(t: Translator, what: string): Tokenizer {
  if (!t.tokenizer) throw new ArgumentError(`${what}: the model directory has no tokenizer (tokenizer.json, or Marian's source.spm, target.spm and vocab.json); pass token ids to translate() instead`);
  return t.tokenizer;
}

/** A source text as token ids through the directory's tokenizer.json (Marian sources end with the EOS token). */
export function sourceIds(t: Translator, text: string): number[] {
  const ids = tokenizerOf(t, 'sourceIds').encode(text);
  const eos = t.generation.eosTokenIds[0]!;
  return ids[ids.length - 1] === eos ? ids : [...ids, eos];
}

/** A translation's text: its tokens decoded, special tokens (EOS, padding) left out. */
export function translationText(t: Translator, translation: Translation): string {
  const tokenizer = tokenizerOf(t, 'translationText');
  return tokenizer.decode(translation.tokens.filter((id) => id < tokenizer.vocabSize), { skipSpecialTokens: true });
}

/** Translates text through the directory's tokenizer.json. */
export function translateText(t: Translator, texts: readonly string[], options: TranslateOptions = {}): string[] {
  tokenizerOf(t, 'translateText');  // named for this call before sourceIds would name itself
  return translate(t, texts.map((text) => sourceIds(t, text)), options).map((r) => translationText(t, r));
}
