// A byte-level tokenizer: token id b (0–255) is the byte b of the UTF-8 text, and special tokens follow
// from id 256. It needs no vocabulary file, handles any text, and suits tiny models (a 257-entry
// embedding instead of GPT-2's 50,257). Encoding is Buffer.from(text): instant even for a whole novel.
//
// `tokenizerJson()` writes the same tokenizer as a Hugging Face tokenizer.json — byte-level BPE with
// no merges, the vocabulary mapping GPT-2's printable stand-in for byte b to id b — so a trained
// model's directory loads with our tokenizer.json path and with Hugging Face's libraries; the tests
// check that both give identical ids.

import { ArgumentError } from '../errors.js';
import type { DecodeOptions, EncodeOptions, Tokenizer } from './tokenizer.js';

export interface ByteTokenizerOptions {
  /** Special tokens, given ids 256, 257, ... in order. Default ['<|endoftext|>']. */
  specialTokens?: readonly string[];
  /** Which special tokens act as bos / eos / pad. Default: bos = eos = '<|endoftext|>' when present. */
  bosToken?: string;
  eosToken?: string;
  padToken?: string;
}

export interface ByteTokenizer extends Tokenizer {
  readonly specialTokens: readonly string[];
  tokenizerJson(): Record<string, unknown>;
  tokenizerConfig(): Record<string, unknown>;
}

export function createByteTokenizer(options: ByteTokenizerOptions = {}): ByteTokenizer {
  return new ByteLevelTokenizer(options);
}

/** GPT-2's bytes_to_unicode: a printable character standing for each byte (printable bytes map to themselves). */
export function bytesToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 0; b < 256; b++) if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) printable.push(b);
  const map = new Array<string>(256);
  for (const b of printable) map[b] = String.fromCodePoint(b);
  let next = 256;
  for (let b = 0; b < 256; b++) if (map[b] === undefined) map[b] = String.fromCodePoint(next++);
  return map;
}

class ByteLevelTokenizer implements ByteTokenizer {
  readonly source = 'byte-level tokenizer';
  readonly vocabSize: number;
  readonly specialTokens: readonly string[];
  readonly bosTokenId?: number;
  readonly eosTokenId?: number;
  readonly padTokenId?: number;
  private readonly specialIds = new Map<string, number>();
  /** Matches any special token in text, longest first (as added_tokens matching does). */
  private readonly specialPattern: RegExp | undefined;
  private readonly byteChars = bytesToUnicode();

  constructor(options: ByteTokenizerOptions) {
    this.specialTokens = [...(options.specialTokens ?? ['<|endoftext|>'])];
    this.specialTokens.forEach((token, i) => {
      if (typeof token !== 'string' || token === '' || this.specialIds.has(token)) throw new ArgumentError(`byte tokenizer: special token ${JSON.stringify(token)} is empty, not a string, or repeated`);
      this.specialIds.set(token, 256 + i);
    });
    this.vocabSize = 256 + this.specialTokens.length;
    const defaultEnd = this.specialIds.has('<|endoftext|>') ? '<|endoftext|>' : undefined;
    const idOf = (role: string, token: string | undefined): number | undefined => {
      if (token === undefined) return undefined;
      const id = this.specialIds.get(token);
      if (id === undefined) throw new ArgumentError(`byte tokenizer: ${role} ${JSON.stringify(token)} is not one of the special tokens (${this.specialTokens.join(', ')})`);
      return id;
    };
    const bos = idOf('bosToken', options.bosToken ?? defaultEnd), eos = idOf('eosToken', options.eosToken ?? defaultEnd), pad = idOf('padToken', options.padToken);
    if (bos !== undefined) this.bosTokenId = bos;
    if (eos !== undefined) this.eosTokenId = eos;
    if (pad !== undefined) this.padTokenId = pad;
    const escaped = [...this.specialTokens].sort((a, b) => b.length - a.length).map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    this.specialPattern = escaped.length > 0 ? new RegExp(escaped.join('|'), 'g') : undefined;
  }

  /** Special tokens in the text become their ids; addSpecialTokens has no effect (no post-processor). */
  encode(text: string, _options?: EncodeOptions): number[] {
    if (typeof text !== 'string') throw new ArgumentError(`${this.source}: encode takes text, got ${text === null ? 'null' : typeof text}`);
    const ids: number[] = [];
    const pushBytes = (piece: string): void => { for (const b of Buffer.from(piece, 'utf8')) ids.push(b); };
    if (!this.specialPattern) { pushBytes(text); return ids; }
    let last = 0;
    for (const match of text.matchAll(this.specialPattern)) {
      pushBytes(text.slice(last, match.index));
      ids.push(this.specialIds.get(match[0])!);
      last = match.index! + match[0].length;
    }
    pushBytes(text.slice(last));
    return ids;
  }

  /** Invalid UTF-8 (a multi-byte character cut in two) decodes to U+FFFD, like the library does. */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (!Array.isArray(ids) && !ArrayBuffer.isView(ids)) throw new ArgumentError(`${this.source}: decode takes an array of token ids, got ${ids === null ? 'null' : typeof ids}`);
    let out = '';
    let bytes: number[] = [];
    const flush = (): void => { out += Buffer.from(bytes).toString('utf8'); bytes = []; };
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new ArgumentError(`token id ${id} is outside the vocabulary of ${this.source} (0 to ${this.vocabSize - 1})`);
      if (id < 256) { bytes.push(id); continue; }
      flush();
      if (!options.skipSpecialTokens) out += this.specialTokens[id - 256];
    }
    flush();
    return out;
  }

  tokenToId(token: string): number | undefined {
    const special = this.specialIds.get(token);
    if (special !== undefined) return special;
    const b = this.byteChars.indexOf(token);
    return b >= 0 ? b : undefined;
  }

  idToToken(id: number): string | undefined {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) return undefined;
    return id < 256 ? this.byteChars[id] : this.specialTokens[id - 256];
  }

  tokenizerJson(): Record<string, unknown> {
    const vocab: Record<string, number> = {};
    this.byteChars.forEach((char, b) => { vocab[char] = b; });
    for (const [token, id] of this.specialIds) vocab[token] = id;
    // use_regex false: the pre-tokenizer only maps bytes to their stand-ins (no GPT-2 word split; with
    // no merges it would change nothing but the speed).
    const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
    return {
      version: '1.0', truncation: null, padding: null,
      added_tokens: this.specialTokens.map((content) => ({
        id: this.specialIds.get(content), content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
      })),
      normalizer: null, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
      model: {
        type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
        fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: [],
      },
    };
  }

  tokenizerConfig(): Record<string, unknown> {
    const config: Record<string, unknown> = { tokenizer_class: 'PreTrainedTokenizerFast', clean_up_tokenization_spaces: false };
    const name = (id: number | undefined): string | undefined => (id === undefined ? undefined : this.specialTokens[id - 256]);
    if (this.bosTokenId !== undefined) config['bos_token'] = name(this.bosTokenId);
    if (this.eosTokenId !== undefined) config['eos_token'] = name(this.eosTokenId);
    if (this.padTokenId !== undefined) config['pad_token'] = name(this.padTokenId);
    return config;
  }
}
