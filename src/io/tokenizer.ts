// Tokenizers from Hugging Face's tokenizer.json (the format of the Rust `tokenizers` library, shipped
// with nearly every model on the Hub), run by @huggingface/tokenizers (pure JS, no network). The rest
// of fuseformer sees only the small `Tokenizer` interface below, never the library's API, so the
// library can be replaced without touching models, generation or the server.
//
// Beside tokenizer.json a model usually ships tokenizer_config.json: it names the special tokens
// (bos/eos/pad, as strings or as {content} objects) and carries the chat template. Newer models keep
// the template in chat_template.jinja instead; both are read when present, and the .jinja file wins
// (as in transformers).
//
// The library trusts tokenizer.json where the Rust library checks it at load (merges against the
// vocabulary, the unknown token, added tokens' ids, patterns), and then drops text or hands back
// `undefined` ids; createTokenizer makes those checks itself.

import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Tokenizer as HuggingFaceTokenizer } from '@huggingface/tokenizers';
import { ArgumentError, FuseformerError } from '../errors.js';
import { LLAMA_TOKENIZER_CLASSES, llamaTokenizerJson } from './llama-sentencepiece.js';
import { useExactPrecompiled } from './precompiled-normalizer.js';
import { SentencePieceModel } from './sentencepiece.js';

export class TokenizerError extends FuseformerError {}

export interface EncodeOptions {
  /** Let the tokenizer's post-processor add its special tokens (BERT's [CLS]/[SEP], Llama's BOS). Default true. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Leave out special tokens (eos, pad, [CLS], ...). Default false. */
  skipSpecialTokens?: boolean;
  /**
   * Remove the space before punctuation (" ." → "."), as tokenizer_config.json's
   * clean_up_tokenization_spaces asks. Default: that field, or false where it is absent.
   */
  cleanUpTokenizationSpaces?: boolean;
}

export interface Tokenizer {
  /** Where it came from (a file path, or a name for one built in memory), for error messages. */
  readonly source: string;
  /** One more than the largest token id the tokenizer can produce (a model's vocab_size may be larger). */
  readonly vocabSize: number;
  readonly bosTokenId?: number;
  readonly eosTokenId?: number;
  readonly padTokenId?: number;
  /** The Jinja chat template (the one named "default" where tokenizer_config.json lists several). */
  readonly chatTemplate?: string;
  /**
   * Where chatTemplate came from, for error messages: chat_template.jinja, or tokenizer_config.json's
   * "chat_template" field.
   */
  readonly chatTemplateSource?: string;
  /**
   * Why there is no chatTemplate although the model ships templates (a list with none named "default"),
   * for the chat endpoint to report; loading, generation and the rest never need the template.
   */
  readonly chatTemplateUnavailable?: string;
  /**
   * The special tokens' strings as tokenizer_config.json names them (bos_token, eos_token, unk_token,
   * pad_token, sep_token, cls_token, mask_token, additional_special_tokens): the variables transformers
   * gives a chat template.
   */
  readonly specialTokensMap?: Readonly<Record<string, string | readonly string[]>>;
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[], options?: DecodeOptions): string;
  tokenToId(token: string): number | undefined;
  idToToken(id: number): string | undefined;
  /**
   * A text pair as the post-processor joins two sequences ([CLS] a [SEP] b [SEP], <s> a </s></s> b </s>, …)
   * with its token type ids, the longer side cut token by token from its end until the whole fits
   * `maxTokens` (transformers' truncation="longest_first"). Without a pair template the two are joined as they are.
   */
  encodePair?(a: string, b: string, maxTokens?: number): PairEncoding;
  /**
   * A text as encode() gives it, but cut to `maxTokens` as transformers truncates (truncation=True, max_length):
   * the text's tokens cut from their end so that they and the post-processor's special tokens fit.
   */
  encodeTruncated?(text: string, maxTokens: number): { ids: number[]; truncated: boolean };
  /** What built it, where it came from tokenizer.json: enough to build the same tokenizer in a worker thread. */
  readonly definition?: TokenizerDefinition;
}

export interface PairEncoding {
  readonly ids: number[];
  readonly typeIds: number[];
  /** Whether either text was cut to fit. */
  readonly truncated: boolean;
}

/** createTokenizer's arguments (plain JSON: they cross to a worker thread by structured clone). */
export interface TokenizerDefinition {
  readonly tokenizerJson: Record<string, unknown>;
  readonly tokenizerConfig: Record<string, unknown>;
  readonly source: string;
  readonly configSource: string;
  /** The chat_template.jinja whose text tokenizerConfig.chat_template holds, where the template came from one. */
  readonly chatTemplateFile?: string;
}

/** The model types the library implements, as tokenizer.json's model.type names them. */
export const SUPPORTED_MODEL_TYPES = ['BPE', 'WordPiece', 'Unigram'] as const;

/**
 * The part of the library's Tokenizer that we call. Its package types don't resolve under NodeNext
 * (its .d.ts files import './core/Tokenizer' without an extension), so TypeScript sees the class as
 * `any`; this interface puts the checking back at the one place we touch the library.
 */
interface LibraryTokenizer {
  encode(text: string, options: { add_special_tokens: boolean }): { ids: number[] };
  /** The token strings of a text, without special tokens (normalised, pre-tokenised, modelled). */
  tokenize(text: string, options: { add_special_tokens: boolean }): string[];
  /** The post-processor over token strings: the pair joined with its special tokens, and the type ids. */
  post_processor: ((a: string[], b: string[] | null, addSpecialTokens: boolean) => { tokens: string[]; token_type_ids?: number[] }) | null;
  decode(ids: number[], options: { skip_special_tokens: boolean; clean_up_tokenization_spaces: boolean }): string;
  token_to_id(token: string): number | undefined;
  id_to_token(id: number): string | undefined;
  get_vocab(withAddedTokens: boolean): Map<string, number>;
}
const LibraryTokenizerClass: new (tokenizerJson: object, tokenizerConfig: object) => LibraryTokenizer = HuggingFaceTokenizer;

/**
 * Loads `path` — a tokenizer.json, or a directory holding one — with tokenizer_config.json and
 * chat_template.jinja from the same directory where they exist. As in transformers, chat_template.jinja
 * takes the place of any chat_template in tokenizer_config.json. A directory with tokenizer.model but no
 * tokenizer.json is read as transformers 5's LlamaTokenizer reads it (llama-sentencepiece.ts).
 */
export function loadTokenizer(path: string): Tokenizer {
  const file = isDirectory(path) ? join(path, 'tokenizer.json') : path;
  const configFile = join(dirname(file), 'tokenizer_config.json');
  let config = withSpecialTokensMap(existsSync(configFile) ? readJsonObject(configFile) : {}, join(dirname(file), 'special_tokens_map.json'));
  const spmFile = join(dirname(file), 'tokenizer.model');
  let tokenizerJson: Record<string, unknown>, source = file;
  if (!existsSync(file) && isDirectory(path) && existsSync(spmFile)) {
    // No tokenizer.json: a Llama-family tokenizer.model, converted as transformers 5 converts it.
    const tokenizerClass = config['tokenizer_class'];
    if (tokenizerClass !== undefined && !LLAMA_TOKENIZER_CLASSES.includes(String(tokenizerClass))) {
      throw new TokenizerError(`${path}: has no tokenizer.json, and its tokenizer.model is read for ${LLAMA_TOKENIZER_CLASSES.join(' / ')} only (${configFile} says tokenizer_class ${JSON.stringify(tokenizerClass)})`);
    }
    tokenizerJson = llamaTokenizerJson(SentencePieceModel.fromFile(spmFile), config, spmFile, configFile);
    config = { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', ...config };
    source = spmFile;
  } else {
    tokenizerJson = readJsonObject(file);
  }
  const templateFile = join(dirname(file), 'chat_template.jinja');
  if (!existsSync(templateFile)) return createTokenizer(tokenizerJson, config, source, configFile);
  config['chat_template'] = readTextFile(templateFile);
  return createTokenizer(tokenizerJson, config, source, configFile, templateFile);
}

/**
 * The lengths two sequences keep under truncation "longest_first" to fit `room` tokens together, as the
 * Rust tokenizers library computes them: only the longer one cut where that suffices, else both to half the
 * room, the odd token to the one that was longer (the second on a tie).
 */
export function longestFirst(first: number, second: number, room: number): [number, number] {
  if (first + second <= room) return [first, second];
  const swap = first > second;
  let short = swap ? second : first, long = swap ? first : second;
  long = short > room ? short : Math.max(short, room - short);
  if (short + long > room) {
    short = Math.floor(room / 2);
    long = short + (room % 2);
  }
  return swap ? [long, short] : [short, long];
}

/** Whether loadTokenizer reads a tokenizer from directory `dir`: its tokenizer.json, or a Llama tokenizer.model. */
export function hasTokenizer(dir: string): boolean {
  return existsSync(join(dir, 'tokenizer.json')) || existsSync(join(dir, 'tokenizer.model'));
}

/**
 * Builds a tokenizer from the parsed contents of tokenizer.json and tokenizer_config.json.
 * `source` and `configSource` name them in error messages; `chatTemplateFile`, where given, is the
 * chat_template.jinja whose text tokenizerConfig.chat_template holds.
 */
export function createTokenizer(
  tokenizerJson: Record<string, unknown>,
  tokenizerConfig: Record<string, unknown> = {},
  source = 'tokenizer.json',
  configSource = 'tokenizer_config.json',
  chatTemplateFile?: string,
): Tokenizer {
  const model = tokenizerJson['model'];
  if (!isObject(model)) {
    throw new TokenizerError(`${source}: field "model" is ${describe(model)}; expected an object with "type" and "vocab"`);
  }
  const modelType = modelTypeOf(model, source);
  checkVocabulary(model, modelType, source);
  const addedTokens = addedTokensOf(tokenizerJson['added_tokens'], source);
  checkUnknownToken(tokenizerJson, model, modelType, addedTokens, source);
  checkPipeline(tokenizerJson, source);
  const cleanUp = tokenizerConfig['clean_up_tokenization_spaces'] ?? false;
  if (typeof cleanUp !== 'boolean') {
    throw new TokenizerError(`${configSource}: field "clean_up_tokenization_spaces" is ${describe(cleanUp)}; expected true or false`);
  }
  // The library requires these keys to exist (null where a tokenizer has no such stage) and
  // fills in the model type from the keys of `model` only in some cases, so both are made explicit.
  // BPE merges go over as [a, b] pairs, the one form the library reads whatever the file mixes.
  // tokenizer.json's post-processor decides the special tokens encode adds: transformers 5 drops
  // tokenizer_config.json's add_bos_token / add_eos_token when there is a tokenizer.json (4.x rebuilt a
  // Llama class's post-processor from them; check:tokenizer compares with the installed transformers).
  const completeJson = {
    normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null,
    ...tokenizerJson,
    added_tokens: addedTokens,
    model: modelType === 'BPE' ? { ...model, type: modelType, merges: checkedMerges(model, source) } : { ...model, type: modelType },
  };
  // The library reads additional_special_tokens too (decode skips them), as strings only: the listed and the
  // model-specific named ones (the standard ones it finds itself).
  const specialTokensMap = specialTokensMapOf(tokenizerConfig, configSource);
  const libraryConfig = { ...tokenizerConfig, clean_up_tokenization_spaces: cleanUp, additional_special_tokens: skippedSpecialTokens(specialTokensMap) };
  let library: LibraryTokenizer;
  try {
    library = new LibraryTokenizerClass(completeJson, libraryConfig);
    // The library approximates a Precompiled (SentencePiece character map) normalizer; ours applies the map.
    useExactPrecompiled((library as unknown as { normalizer?: unknown }).normalizer, source);
  } catch (error) {
    throw new TokenizerError(`${source}: unsupported or malformed tokenizer (${(error as Error).message})`);
  }
  const specialTokenId = (field: string): number | undefined => {
    const token = specialTokenOf(tokenizerConfig, field, configSource);
    if (token === undefined) return undefined;
    const id = library.token_to_id(token);
    if (id === undefined) {
      throw new TokenizerError(`${configSource}: field "${field}" names ${JSON.stringify(token)}, which is not in the vocabulary of ${source}`);
    }
    return id;
  };
  const definition: TokenizerDefinition = { tokenizerJson, tokenizerConfig, source, configSource, ...(chatTemplateFile !== undefined && { chatTemplateFile }) };
  return new LibraryBackedTokenizer(library, definition, {
    source,
    cleanUpTokenizationSpaces: cleanUp,
    bosTokenId: specialTokenId('bos_token'),
    eosTokenId: specialTokenId('eos_token'),
    padTokenId: specialTokenId('pad_token'),
    specialTokensMap,
    chat: chatTemplateOf(tokenizerConfig['chat_template'], configSource, chatTemplateFile),
  });
}

interface TokenizerProperties {
  source: string;
  cleanUpTokenizationSpaces: boolean;
  bosTokenId: number | undefined;
  eosTokenId: number | undefined;
  padTokenId: number | undefined;
  specialTokensMap: Record<string, string | string[]>;
  chat: ChatTemplateChoice;
}

class LibraryBackedTokenizer implements Tokenizer {
  readonly source: string;
  readonly vocabSize: number;
  readonly bosTokenId?: number;
  readonly eosTokenId?: number;
  readonly padTokenId?: number;
  readonly chatTemplate?: string;
  readonly chatTemplateSource?: string;
  readonly chatTemplateUnavailable?: string;
  readonly specialTokensMap: Readonly<Record<string, string | readonly string[]>>;
  private readonly cleanUpTokenizationSpaces: boolean;

  constructor(private readonly library: LibraryTokenizer, readonly definition: TokenizerDefinition, properties: TokenizerProperties) {
    this.source = properties.source;
    this.cleanUpTokenizationSpaces = properties.cleanUpTokenizationSpaces;
    if (properties.bosTokenId !== undefined) this.bosTokenId = properties.bosTokenId;
    if (properties.eosTokenId !== undefined) this.eosTokenId = properties.eosTokenId;
    if (properties.padTokenId !== undefined) this.padTokenId = properties.padTokenId;
    this.specialTokensMap = properties.specialTokensMap;
    const chat = properties.chat;
    if (chat.template !== undefined) this.chatTemplate = chat.template;
    if (chat.source !== undefined) this.chatTemplateSource = chat.source;
    if (chat.unavailable !== undefined) this.chatTemplateUnavailable = chat.unavailable;
    let largestId = -1;
    for (const id of library.get_vocab(true).values()) largestId = Math.max(largestId, id);
    this.vocabSize = largestId + 1;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') throw new ArgumentError(`${this.source}: encode takes text, got ${text === null ? 'null' : typeof text}`);
    const ids = this.library.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
    this.checkEncodedIds(ids);
    return ids;
  }

  /** The special tokens the post-processor adds to one text (counted on first use). */
  private singleSpecials: number | undefined;

  encodeTruncated(text: string, maxTokens: number): { ids: number[]; truncated: boolean } {
    if (typeof text !== 'string') throw new ArgumentError(`${this.source}: encodeTruncated takes text, got ${text === null ? 'null' : typeof text}`);
    const join = this.library.post_processor;
    let tokens = this.library.tokenize(text, { add_special_tokens: false });
    const specials = (this.singleSpecials ??= join ? join([], null, true).tokens.length : 0);
    if (maxTokens - specials < 1) throw new ArgumentError(`${this.source}: a text needs ${specials} special tokens and one of its own; ${maxTokens} do not fit that`);
    const truncated = tokens.length > maxTokens - specials;
    if (truncated) tokens = tokens.slice(0, maxTokens - specials);
    const ids = (join ? join(tokens, null, true).tokens : tokens).map((t) => this.library.token_to_id(t));
    this.checkEncodedIds(ids);
    return { ids: ids as number[], truncated };
  }

  encodePair(a: string, b: string, maxTokens = Infinity): PairEncoding {
    for (const [name, text] of [['a', a], ['b', b]] as const) {
      if (typeof text !== 'string') throw new ArgumentError(`${this.source}: encodePair's ${name} must be text, got ${text === null ? 'null' : typeof text}`);
    }
    // Without a pair template (no post-processor, or ByteLevel's: Qwen, Llama 3) the two texts' tokens are joined
    // as they are, types 0 then 1, as the tokenizers library joins them.
    const processor = this.definition.tokenizerJson['post_processor'] as { type?: unknown } | null | undefined;
    const join = processor?.type !== 'ByteLevel' && this.library.post_processor
      ? this.library.post_processor
      : (x: string[], y: string[] | null) => ({ tokens: [...x, ...(y ?? [])], token_type_ids: [...x.map(() => 0), ...(y ?? []).map(() => 1)] });
    let first = this.library.tokenize(a, { add_special_tokens: false }), second = this.library.tokenize(b, { add_special_tokens: false });
    const specials = join([], [], true).tokens.length;
    const room = maxTokens - specials;
    if (room < 2) throw new ArgumentError(`${this.source}: a pair needs ${specials} special tokens and one token of each text; ${maxTokens} do not fit that`);
    const truncated = first.length + second.length > room;
    if (truncated) {
      const [keepFirst, keepSecond] = longestFirst(first.length, second.length, room);
      first = first.slice(0, keepFirst);
      second = second.slice(0, keepSecond);
    }
    const joined = join(first, second, true);
    const ids = joined.tokens.map((t) => this.library.token_to_id(t));
    this.checkEncodedIds(ids);
    return { ids: ids as number[], typeIds: joined.token_type_ids ?? ids.map(() => 0), truncated };
  }

  /**
   * The load-time checks keep the library from producing ids outside the vocabulary (it hands back
   * `undefined` for an unknown token that is not in the vocabulary, or whatever id a file gives); this
   * one pass over the output makes sure no such id ever reaches a model.
   */
  private checkEncodedIds(ids: readonly unknown[]): void {
    for (const id of ids) {
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new TokenizerError(`${this.source}: encoding produced the token id ${id === undefined ? 'undefined' : describe(id)}, outside the vocabulary (0 to ${this.vocabSize - 1}); ` +
          'the tokenizer\'s unknown token ("model.unk_token" or "model.unk_id") or "added_tokens" do not match its vocabulary');
      }
    }
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (!Array.isArray(ids) && !ArrayBuffer.isView(ids)) throw new ArgumentError(`${this.source}: decode takes an array of token ids, got ${ids === null ? 'null' : typeof ids}`);
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new ArgumentError(`token id ${id} is outside the vocabulary of ${this.source} (0 to ${this.vocabSize - 1})`);
      }
    }
    if (ids.length === 0) return ''; // the library refuses an empty list
    return this.library.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: options.cleanUpTokenizationSpaces ?? this.cleanUpTokenizationSpaces,
    });
  }

  tokenToId(token: string): number | undefined {
    return this.library.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.library.id_to_token(id);
  }
}

/**
 * The vocabulary's ids are non-negative integers (the library would hand back whatever the file holds as a
 * token id: a -1, a 0.5, a "0").
 */
function checkVocabulary(model: Record<string, unknown>, modelType: string, source: string): void {
  const vocab = model['vocab'];
  const entries: [string, unknown][] = modelType === 'Unigram'
    ? (Array.isArray(vocab) ? vocab.map((entry: unknown, i): [string, unknown] => {
      if (!Array.isArray(entry) || typeof entry[0] !== 'string' || typeof entry[1] !== 'number') throw new TokenizerError(`${source}: "model.vocab"[${i}] is ${describe(entry)}; expected a [piece, score] pair`);
      return [entry[0], i];
    }) : [])
    : isObject(vocab) ? Object.entries(vocab) : [];
  if (modelType === 'Unigram' ? !Array.isArray(vocab) : !isObject(vocab)) {
    throw new TokenizerError(`${source}: field "model.vocab" is ${describe(vocab)}; expected ${modelType === 'Unigram' ? 'an array of [piece, score] pairs' : 'an object of token → id'}`);
  }
  for (const [token, id] of entries) {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) throw new TokenizerError(`${source}: "model.vocab" gives ${JSON.stringify(token)} the id ${describe(id)}; ids are non-negative integers`);
  }
}

/** The added tokens, each with a string content and a non-negative integer id (the library trusts both). */
function addedTokensOf(value: unknown, source: string): Record<string, unknown>[] {
  const addedTokens = value ?? [];
  if (!Array.isArray(addedTokens)) {
    throw new TokenizerError(`${source}: field "added_tokens" is ${describe(addedTokens)}; expected an array`);
  }
  addedTokens.forEach((token: unknown, i) => {
    if (!isObject(token)) throw new TokenizerError(`${source}: "added_tokens"[${i}] is ${describe(token)}; expected an object with "id" and "content"`);
    const id = token['id'];
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      throw new TokenizerError(`${source}: "added_tokens"[${i}].id is ${describe(id)}; expected a non-negative integer`);
    }
    if (typeof token['content'] !== 'string') {
      throw new TokenizerError(`${source}: "added_tokens"[${i}].content is ${describe(token['content'])}; expected a string`);
    }
  });
  return addedTokens;
}

/**
 * The unknown token stands for text the vocabulary cannot spell; the library maps it to `undefined` when it
 * is not in the vocabulary, so it must be there wherever the model can need it: always for WordPiece and
 * Unigram, and for BPE unless every byte has a token of its own.
 */
function checkUnknownToken(
  tokenizerJson: Record<string, unknown>, model: Record<string, unknown>, modelType: string,
  addedTokens: readonly Record<string, unknown>[], source: string,
): void {
  if (modelType === 'Unigram') return checkUnigramUnknownId(model, source);
  const unkToken = model['unk_token'];
  const required = modelType === 'WordPiece';
  if (unkToken === undefined || unkToken === null) {
    if (required) throw new TokenizerError(`${source}: field "model.unk_token" is ${describe(unkToken)}; expected the token that stands for unknown text`);
    return;
  }
  if (typeof unkToken !== 'string') throw new TokenizerError(`${source}: field "model.unk_token" is ${describe(unkToken)}; expected a token string`);
  const vocab = model['vocab'] as Record<string, unknown>;
  if (Object.hasOwn(vocab, unkToken) || addedTokens.some((token) => token['content'] === unkToken)) return;
  if (!required && bpeSpellsEveryByte(tokenizerJson, model)) return;
  throw new TokenizerError(`${source}: field "model.unk_token" names ${JSON.stringify(unkToken)}, which is not in the vocabulary ("model.vocab" or "added_tokens")`);
}

function checkUnigramUnknownId(model: Record<string, unknown>, source: string): void {
  const unkId = model['unk_id'];
  const size = (model['vocab'] as unknown[]).length;
  if (size === 0) throw new TokenizerError(`${source}: field "model.vocab" is empty; expected [piece, score] pairs`);
  if (typeof unkId !== 'number' || !Number.isInteger(unkId) || unkId < 0 || unkId >= size) {
    throw new TokenizerError(`${source}: field "model.unk_id" is ${describe(unkId)}; expected the index of the unknown token in "model.vocab" (0 to ${size - 1})`);
  }
}

/**
 * Whether a BPE model never falls back to its unknown token: a ByteLevel pre-tokenizer first turns all text
 * into the 256 byte characters (byte-level vocabularies hold them all), and byte_fallback spells anything
 * the merges miss as <0xNN> tokens where the vocabulary has all 256.
 */
function bpeSpellsEveryByte(tokenizerJson: Record<string, unknown>, model: Record<string, unknown>): boolean {
  if (stageConfigs(tokenizerJson['pre_tokenizer'], 'pretokenizers').some((stage) => stage['type'] === 'ByteLevel')) return true;
  if (model['byte_fallback'] !== true) return false;
  const vocab = model['vocab'] as Record<string, unknown>;
  for (let byte = 0; byte < 256; byte++) {
    if (!Object.hasOwn(vocab, `<0x${byte.toString(16).toUpperCase().padStart(2, '0')}>`)) return false;
  }
  return true;
}

/**
 * BPE merges as [a, b] pairs, each checked as the Rust library checks them at load (where a merge that
 * disagrees with the vocabulary is MergeTokenOutOfVocabulary): a merge is "a b" or ["a", "b"], and a, b
 * and the token they merge into are all in the vocabulary. Ours would otherwise drop the text silently.
 */
function checkedMerges(model: Record<string, unknown>, source: string): [string, string][] {
  const merges = model['merges'];
  if (!Array.isArray(merges)) throw new TokenizerError(`${source}: field "model.merges" is ${describe(merges)}; expected an array of "a b" strings or ["a", "b"] pairs`);
  const vocab = model['vocab'] as Record<string, unknown>;
  // A BPE continuing-subword prefix ("##" on every piece after a word's first) changes how words are split
  // and merged; the JS library ignores the field, so such a tokenizer would encode differently from
  // transformers: refused rather than run wrong. (null or "" — nearly every BPE file — means none.)
  const prefix = model['continuing_subword_prefix'];
  if (prefix !== undefined && prefix !== null && prefix !== '') {
    throw new TokenizerError(`${source}: field "model.continuing_subword_prefix" is ${describe(prefix)}; a BPE model with a continuing-subword prefix is not supported (the tokenizer library fuseformer uses ignores it, so text would encode differently from transformers)`);
  }
  return merges.map((merge: unknown, i): [string, string] => {
    const pair = mergePairOf(merge);
    if (pair === undefined) throw new TokenizerError(`${source}: "model.merges"[${i}] is ${describe(merge)}; expected "a b" (two tokens, one space between) or ["a", "b"]`);
    const [a, b] = pair;
    const merged = a + b;
    for (const token of [a, b, merged]) {
      if (!Object.hasOwn(vocab, token)) {
        throw new TokenizerError(`${source}: "model.merges"[${i}] merges ${JSON.stringify(a)} and ${JSON.stringify(b)} into ${JSON.stringify(merged)}, but ${JSON.stringify(token)} is not in "model.vocab"`);
      }
    }
    return pair;
  });
}

function mergePairOf(merge: unknown): [string, string] | undefined {
  const parts = typeof merge === 'string' ? merge.split(' ') : merge;
  if (!Array.isArray(parts) || parts.length !== 2 || typeof parts[0] !== 'string' || typeof parts[1] !== 'string') return undefined;
  return [parts[0], parts[1]];
}

/** What each stage of the pipeline calls the list of its parts when it is a Sequence. */
const SEQUENCE_KEYS = { normalizer: 'normalizers', pre_tokenizer: 'pretokenizers', decoder: 'decoders' } as const;

/** The Split behaviours the Rust library knows; the library we run implements only Removed and Isolated. */
const SPLIT_BEHAVIORS = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];
const IMPLEMENTED_SPLIT_BEHAVIORS = ['Removed', 'Isolated'];

/**
 * Checks what the library takes on trust in the normalizer, pre-tokenizer and decoder: it runs a Replace
 * without a usable pattern as a no-op (with a console warning), a Split without one drops all text, and a
 * Split with a behaviour it does not know as Isolated.
 */
function checkPipeline(tokenizerJson: Record<string, unknown>, source: string): void {
  for (const [stage, sequenceKey] of Object.entries(SEQUENCE_KEYS)) {
    forEachStageConfig(tokenizerJson[stage], stage, sequenceKey, (config, field) => {
      if (config['type'] === 'Replace') checkReplace(config, field, source);
      if (config['type'] === 'Split' && stage === 'pre_tokenizer') checkSplit(config, field, source);
    });
  }
}

function checkReplace(config: Record<string, unknown>, field: string, source: string): void {
  checkPattern(config['pattern'], `${field}.pattern`, source);
  if (typeof config['content'] !== 'string') throw new TokenizerError(`${source}: field "${field}.content" is ${describe(config['content'])}; expected a string`);
}

function checkSplit(config: Record<string, unknown>, field: string, source: string): void {
  checkPattern(config['pattern'], `${field}.pattern`, source);
  const behavior = config['behavior'];
  if (typeof behavior !== 'string' || !SPLIT_BEHAVIORS.includes(behavior)) {
    throw new TokenizerError(`${source}: field "${field}.behavior" is ${describe(behavior)}; expected one of ${SPLIT_BEHAVIORS.join(', ')}`);
  }
  if (!IMPLEMENTED_SPLIT_BEHAVIORS.includes(behavior)) {
    throw new TokenizerError(`${source}: field "${field}.behavior" is ${JSON.stringify(behavior)}, which this tokenizer does not support (only ${IMPLEMENTED_SPLIT_BEHAVIORS.join(', ')})`);
  }
  // The library's inverted split keeps only the matches, which is right for Removed alone.
  if (config['invert'] === true && behavior !== 'Removed') {
    throw new TokenizerError(`${source}: field "${field}.invert" is true with behavior ${JSON.stringify(behavior)}, which this tokenizer does not support (only with Removed)`);
  }
}

function checkPattern(pattern: unknown, field: string, source: string): void {
  const text = isObject(pattern) ? pattern['String'] ?? pattern['Regex'] : undefined;
  if (typeof text !== 'string') throw new TokenizerError(`${source}: field "${field}" is ${describe(pattern)}; expected {"String": text} or {"Regex": pattern}`);
}

/** Calls `visit` on a stage's config and, where it is a Sequence, on each of its parts, with its field path. */
function forEachStageConfig(config: unknown, field: string, sequenceKey: string, visit: (config: Record<string, unknown>, field: string) => void): void {
  if (!isObject(config)) return; // a missing stage is null; a malformed one is the library's to refuse
  visit(config, field);
  const parts = config['type'] === 'Sequence' ? config[sequenceKey] : undefined;
  if (Array.isArray(parts)) parts.forEach((part: unknown, i) => forEachStageConfig(part, `${field}.${sequenceKey}[${i}]`, sequenceKey, visit));
}

function stageConfigs(config: unknown, sequenceKey: string): Record<string, unknown>[] {
  const configs: Record<string, unknown>[] = [];
  forEachStageConfig(config, '', sequenceKey, (part) => configs.push(part));
  return configs;
}

/**
 * tokenizer.json files written by old versions of the Rust library have no model.type; like that
 * library, we recognise the model by its keys then (Unigram's vocab is a list of [piece, score]).
 */
function modelTypeOf(model: Record<string, unknown>, source: string): string {
  const type = model['type'];
  const expected = `expected one of ${SUPPORTED_MODEL_TYPES.join(', ')}`;
  if (type !== undefined) {
    if (typeof type !== 'string' || !(SUPPORTED_MODEL_TYPES as readonly string[]).includes(type)) {
      throw new TokenizerError(`${source}: field "model.type" is ${describe(type)}; ${expected}`);
    }
    return type;
  }
  if (Array.isArray(model['vocab'])) return 'Unigram';
  if (isObject(model['vocab']) && model['merges'] !== undefined) return 'BPE';
  if (isObject(model['vocab']) && model['continuing_subword_prefix'] !== undefined) return 'WordPiece';
  throw new TokenizerError(`${source}: field "model.type" is missing and the model's fields match none of the known models; ${expected}`);
}

/** A special token's string: tokenizer_config.json gives it as a string or as {"content": string}. */
export function specialTokenOf(config: Record<string, unknown>, field: string, configSource: string): string | undefined {
  const value = config[field];
  if (value === undefined || value === null) return undefined;
  return tokenStringOf(value, `"${field}"`, configSource);
}

function tokenStringOf(value: unknown, field: string, configSource: string): string {
  if (typeof value === 'string') return value;
  if (isObject(value) && typeof value['content'] === 'string') return value['content'];
  throw new TokenizerError(`${configSource}: field ${field} is ${describe(value)}; expected a token string or {"content": string}`);
}

/** The special tokens transformers keeps in its special_tokens_map (and passes to chat templates). */
const SPECIAL_TOKEN_FIELDS = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];

function specialTokensMapOf(config: Record<string, unknown>, configSource: string): Record<string, string | string[]> {
  const tokens: Record<string, string | string[]> = {};
  for (const field of SPECIAL_TOKEN_FIELDS) {
    const token = specialTokenOf(config, field, configSource);
    if (token !== undefined) tokens[field] = token;
  }
  // Model-specific named tokens, as transformers 5 reads them: other "*_token" fields holding a token (image_token,
  // boi_token, …), and extra_special_tokens given as {name: token}. They are chat-template variables too.
  for (const [key, value] of Object.entries(config)) {
    if (key.endsWith('_token') && !SPECIAL_TOKEN_FIELDS.includes(key) && (typeof value === 'string' || (isObject(value) && typeof value['content'] === 'string'))) {
      tokens[key] = tokenStringOf(value, `"${key}"`, configSource);
    }
  }
  const extra = config['extra_special_tokens'];
  if (isObject(extra)) {
    for (const [name, value] of Object.entries(extra)) tokens[name] = tokenStringOf(value, `"extra_special_tokens"."${name}"`, configSource);
  }
  // The unnamed list: extra_special_tokens as a list (transformers 5), else the older additional_special_tokens
  // (which transformers 5 keeps beside a {name: token} extra_special_tokens).
  const listField = Array.isArray(extra) ? 'extra_special_tokens' : 'additional_special_tokens';
  const list = Array.isArray(extra) ? extra : config['additional_special_tokens'];
  if (extra !== undefined && extra !== null && !Array.isArray(extra) && !isObject(extra)) {
    throw new TokenizerError(`${configSource}: field "extra_special_tokens" is ${describe(extra)}; expected a list of tokens or an object of named tokens`);
  }
  if (list === undefined || list === null) return tokens;
  if (!Array.isArray(list)) {
    throw new TokenizerError(`${configSource}: field "${listField}" is ${describe(list)}; expected an array of token strings or {"content": string}`);
  }
  tokens['additional_special_tokens'] = list.map((value: unknown, i) => tokenStringOf(value, `"${listField}"[${i}]`, configSource));
  return tokens;
}

/** The tokens of a special-tokens map that decoding skips: every named and listed one. */
function skippedSpecialTokens(tokens: Record<string, string | string[]>): string[] {
  return Object.entries(tokens).flatMap(([key, value]) => (SPECIAL_TOKEN_FIELDS.includes(key) ? [] : Array.isArray(value) ? value : [value]));
}

/**
 * special_tokens_map.json (older models ship their special tokens there, some only there) laid over
 * tokenizer_config.json as transformers does at load: its tokens replace the config's; its additional
 * special tokens are used where the config lists none. Each field is checked here, naming this file.
 */
function withSpecialTokensMap(config: Record<string, unknown>, mapFile: string): Record<string, unknown> {
  if (!existsSync(mapFile)) return config;
  const map = readJsonObject(mapFile);
  const tokens = specialTokensMapOf(map, mapFile);
  const merged: Record<string, unknown> = { ...config };
  for (const field of Object.keys(tokens)) if (field.endsWith('_token') && map[field] !== undefined) merged[field] = map[field];
  // Its additional tokens count only where tokenizer_config.json lists none (transformers 5 keeps the config's list).
  const additional = tokens['additional_special_tokens'], ownList = config['additional_special_tokens'];
  if (additional !== undefined && (ownList === undefined || ownList === null)) merged['additional_special_tokens'] = map['additional_special_tokens'];
  return merged;
}

/** The chat template to use, where it came from, or why there is none to use although the model ships some. */
interface ChatTemplateChoice {
  template?: string;
  source?: string;
  unavailable?: string;
}

/**
 * tokenizer_config.json's chat_template is a string, or a list of {name, template} of which transformers
 * uses the one named "default". A list without one loads (nothing but the chat endpoint needs a template);
 * the reason is kept for the chat endpoint to give. `chatTemplateFile` is the chat_template.jinja the text
 * came from, where it did.
 */
function chatTemplateOf(value: unknown, configSource: string, chatTemplateFile: string | undefined): ChatTemplateChoice {
  const field = `${configSource} (field "chat_template")`;
  if (value === undefined || value === null) return {};
  if (typeof value === 'string') return { template: value, source: chatTemplateFile ?? field };
  const expected = 'expected a string or a list of {"name": string, "template": string}';
  if (!Array.isArray(value)) throw new TokenizerError(`${configSource}: field "chat_template" is ${describe(value)}; ${expected}`);
  const named = new Map<string, string>();
  value.forEach((entry: unknown, i) => {
    if (!isObject(entry) || typeof entry['name'] !== 'string' || typeof entry['template'] !== 'string') {
      throw new TokenizerError(`${configSource}: "chat_template"[${i}] is ${describe(entry)}; ${expected}`);
    }
    named.set(entry['name'], entry['template']);
  });
  const template = named.get('default');
  if (template !== undefined) return { template, source: `${field}, template "default"` };
  const names = [...named.keys()].map((name) => JSON.stringify(name)).join(', ');
  return { unavailable: `${configSource}: field "chat_template" lists templates named ${names || '(none)'} but none named "default", the one chat completions use` };
}

/** A JSON file whose top level is an object; a missing or malformed file is a TokenizerError naming it. */
export function readJsonObject(file: string): Record<string, unknown> {
  const text = readTextFile(file);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new TokenizerError(`${file}: not valid JSON (${(error as Error).message})`);
  }
  if (!isObject(value)) throw new TokenizerError(`${file}: the top level is ${describe(value)}; expected a JSON object`);
  return value;
}

function readTextFile(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new TokenizerError(code === 'ENOENT' ? `${file}: file not found` : `${file}: cannot be read (${(error as Error).message})`);
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false; // a missing path is reported by readJsonObject, with its name
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === undefined) return 'missing';
  if (Array.isArray(value)) return 'an array';
  if (value === null) return 'null';
  if (typeof value === 'object') return 'an object';
  return JSON.stringify(value);
}

/**
 * The special tokens as transformers passes them to a chat template (its special_tokens_map). A tokenizer
 * without that map (one built in code) gives the strings of its bos and eos ids.
 */
export function chatTemplateVariables(tokenizer: Tokenizer): Record<string, string | readonly string[]> {
  const variables: Record<string, string | readonly string[]> = {};
  const name = (id: number | undefined) => (id === undefined ? undefined : tokenizer.idToToken(id));
  const bos = name(tokenizer.bosTokenId), eos = name(tokenizer.eosTokenId);
  if (bos !== undefined) variables['bos_token'] = bos;
  if (eos !== undefined) variables['eos_token'] = eos;
  // transformers 5 passes its special_tokens_map: the named tokens, not the unnamed additional list.
  const { additional_special_tokens: _unnamed, ...named } = tokenizer.specialTokensMap ?? {};
  return { ...variables, ...named };
}
