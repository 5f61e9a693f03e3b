// Tokenizers from Hugging Face's tokenizer.json (the format of the Rust `tokenizers` library, shipped
// with nearly every model on the Hub), run by @huggingface/tokenizers (pure JS, no network). The rest
// of fuseformer sees only the small `Tokenizer` interface below, never the library's API, so the
// library can be replaced without touching models, generation or the server.
//
// Beside tokenizer.json a model usually ships tokenizer_config.json: it names the special tokens
// (bos/eos/pad, as strings or as {content} objects) and carries the chat template. Newer models keep
// the template in chat_template.jinja instead; both are read when present.

import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Tokenizer as HuggingFaceTokenizer } from '@huggingface/tokenizers';
import { ArgumentError, FuseformerError } from '../errors.js';

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
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[], options?: DecodeOptions): string;
  tokenToId(token: string): number | undefined;
  idToToken(id: number): string | undefined;
  /** What built it, where it came from tokenizer.json: enough to build the same tokenizer in a worker thread. */
  readonly definition?: TokenizerDefinition;
}

/** createTokenizer's arguments (plain JSON: they cross to a worker thread by structured clone). */
export interface TokenizerDefinition {
  readonly tokenizerJson: Record<string, unknown>;
  readonly tokenizerConfig: Record<string, unknown>;
  readonly source: string;
  readonly configSource: string;
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
  decode(ids: number[], options: { skip_special_tokens: boolean; clean_up_tokenization_spaces: boolean }): string;
  token_to_id(token: string): number | undefined;
  id_to_token(id: number): string | undefined;
  get_vocab(withAddedTokens: boolean): Map<string, number>;
}
const LibraryTokenizerClass: new (tokenizerJson: object, tokenizerConfig: object) => LibraryTokenizer = HuggingFaceTokenizer;

/**
 * Loads `path` — a tokenizer.json, or a directory holding one — with tokenizer_config.json and
 * chat_template.jinja from the same directory where they exist.
 */
export function loadTokenizer(path: string): Tokenizer {
  const file = isDirectory(path) ? join(path, 'tokenizer.json') : path;
  const tokenizerJson = readJsonObject(file);
  const configFile = join(dirname(file), 'tokenizer_config.json');
  const config = existsSync(configFile) ? readJsonObject(configFile) : {};
  const templateFile = join(dirname(file), 'chat_template.jinja');
  if (config['chat_template'] === undefined && existsSync(templateFile)) {
    config['chat_template'] = readFileSync(templateFile, 'utf8');
  }
  return createTokenizer(tokenizerJson, config, file, configFile);
}

/**
 * Builds a tokenizer from the parsed contents of tokenizer.json and tokenizer_config.json.
 * `source` and `configSource` name them in error messages.
 */
export function createTokenizer(
  tokenizerJson: Record<string, unknown>,
  tokenizerConfig: Record<string, unknown> = {},
  source = 'tokenizer.json',
  configSource = 'tokenizer_config.json',
): Tokenizer {
  const model = tokenizerJson['model'];
  if (!isObject(model)) {
    throw new TokenizerError(`${source}: field "model" is ${describe(model)}; expected an object with "type" and "vocab"`);
  }
  const modelType = modelTypeOf(model, source);
  checkVocabulary(model, modelType, source);
  const addedTokens = tokenizerJson['added_tokens'] ?? [];
  if (!Array.isArray(addedTokens)) {
    throw new TokenizerError(`${source}: field "added_tokens" is ${describe(addedTokens)}; expected an array`);
  }
  const cleanUp = tokenizerConfig['clean_up_tokenization_spaces'] ?? false;
  if (typeof cleanUp !== 'boolean') {
    throw new TokenizerError(`${configSource}: field "clean_up_tokenization_spaces" is ${describe(cleanUp)}; expected true or false`);
  }
  // The library requires these keys to exist (null where a tokenizer has no such stage) and
  // fills in the model type from the keys of `model` only in some cases, so both are made explicit.
  const completeJson = {
    normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null,
    ...tokenizerJson,
    added_tokens: addedTokens,
    model: { ...model, type: modelType },
  };
  let library: LibraryTokenizer;
  try {
    library = new LibraryTokenizerClass(completeJson, { ...tokenizerConfig, clean_up_tokenization_spaces: cleanUp });
  } catch (error) {
    throw new TokenizerError(`${source}: unsupported or malformed tokenizer (${(error as Error).message})`);
  }
  const specialTokenId = (field: string): number | undefined => {
    const value = tokenizerConfig[field];
    if (value === undefined || value === null) return undefined;
    const token = typeof value === 'string' ? value : isObject(value) && typeof value['content'] === 'string' ? value['content'] : undefined;
    if (token === undefined) {
      throw new TokenizerError(`${configSource}: field "${field}" is ${describe(value)}; expected a token string or {"content": string}`);
    }
    const id = library.token_to_id(token);
    if (id === undefined) {
      throw new TokenizerError(`${configSource}: field "${field}" names ${JSON.stringify(token)}, which is not in the vocabulary of ${source}`);
    }
    return id;
  };
  return new LibraryBackedTokenizer(library, { tokenizerJson, tokenizerConfig, source, configSource }, {
    source,
    cleanUpTokenizationSpaces: cleanUp,
    bosTokenId: specialTokenId('bos_token'),
    eosTokenId: specialTokenId('eos_token'),
    padTokenId: specialTokenId('pad_token'),
    chatTemplate: chatTemplateOf(tokenizerConfig['chat_template'], configSource),
  });
}

interface TokenizerProperties {
  source: string;
  cleanUpTokenizationSpaces: boolean;
  bosTokenId: number | undefined;
  eosTokenId: number | undefined;
  padTokenId: number | undefined;
  chatTemplate: string | undefined;
}

class LibraryBackedTokenizer implements Tokenizer {
  readonly source: string;
  readonly vocabSize: number;
  readonly bosTokenId?: number;
  readonly eosTokenId?: number;
  readonly padTokenId?: number;
  readonly chatTemplate?: string;
  private readonly cleanUpTokenizationSpaces: boolean;

  constructor(private readonly library: LibraryTokenizer, readonly definition: TokenizerDefinition, properties: TokenizerProperties) {
    this.source = properties.source;
    this.cleanUpTokenizationSpaces = properties.cleanUpTokenizationSpaces;
    if (properties.bosTokenId !== undefined) this.bosTokenId = properties.bosTokenId;
    if (properties.eosTokenId !== undefined) this.eosTokenId = properties.eosTokenId;
    if (properties.padTokenId !== undefined) this.padTokenId = properties.padTokenId;
    if (properties.chatTemplate !== undefined) this.chatTemplate = properties.chatTemplate;
    let largestId = -1;
    for (const id of library.get_vocab(true).values()) largestId = Math.max(largestId, id);
    this.vocabSize = largestId + 1;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') throw new ArgumentError(`${this.source}: encode takes text, got ${text === null ? 'null' : typeof text}`);
    return this.library.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
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
 * tokenizer.json files written by old versions of the Rust library have no model.type; like that
 * library, we recognise the model by its keys then (Unigram's vocab is a list of [piece, score]).
 */
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

function chatTemplateOf(value: unknown, configSource: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    const named = value.find((entry: unknown) => isObject(entry) && entry['name'] === 'default');
    if (isObject(named) && typeof named['template'] === 'string') return named['template'];
  }
  throw new TokenizerError(`${configSource}: field "chat_template" is ${describe(value)}; expected a string or a list of {name, template} with one named "default"`);
}

function readJsonObject(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new TokenizerError(code === 'ENOENT' ? `${file}: file not found` : `${file}: cannot be read (${(error as Error).message})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new TokenizerError(`${file}: not valid JSON (${(error as Error).message})`);
  }
  if (!isObject(value)) throw new TokenizerError(`${file}: the top level is ${describe(value)}; expected a JSON object`);
  return value;
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
