// Marian's tokenizer, as transformers' MarianTokenizer runs it on an opus-mt directory (which ships no
// tokenizer.json): source text → source.spm's pieces → ids through vocab.json, with </s> appended. A
// leading language code (">>fra<<", multilingual models) is kept as one token; literal special tokens in
// the text (</s>, <unk>, <pad>) are those tokens. Decoding: ids → tokens through vocab.json (or
// target_vocab.json where tokenizer_config.json says separate_vocabs), the pieces between special tokens
// through a SentencePiece model, each special token followed by a space, "▁" as space, the result trimmed
// (convert_tokens_to_string); tokenizer_config.json's clean_up_tokenization_spaces as elsewhere (default
// false). The decoding model is source.spm with the shared vocabulary and target.spm with separate ones —
// transformers 5's default; 4.x took target.spm always. The two differ at most in the spaces next to
// special tokens kept in the text: a translation, decoded without them, is the same either way.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { SentencePieceModel } from './sentencepiece.js';
import type { DecodeOptions, EncodeOptions, Tokenizer } from './tokenizer.js';
import { readJsonObject, specialTokenOf, TokenizerError } from './tokenizer.js';

/** Whether `dir` holds Marian's tokenizer files (source.spm, target.spm, vocab.json). */
export function hasMarianTokenizerFiles(dir: string): boolean {
  return ['source.spm', 'target.spm', 'vocab.json'].every((name) => existsSync(join(dir, name)));
}

export function loadMarianTokenizer(dir: string): Tokenizer {
  const configFile = join(dir, 'tokenizer_config.json');
  const config = existsSync(configFile) ? readJsonObject(configFile) : {};
  const token = (field: string, fallback: string) => specialTokenOf(config, field, configFile) ?? fallback;
  const eos = token('eos_token', '</s>'), unk = token('unk_token', '<unk>'), pad = token('pad_token', '<pad>');
  const separate = config['separate_vocabs'] ?? false;
  if (typeof separate !== 'boolean') throw new TokenizerError(`${configFile}: field "separate_vocabs" is ${JSON.stringify(separate)}; expected true or false`);
  const sourceVocab = readVocabulary(join(dir, 'vocab.json'));
  const targetVocab = separate ? readVocabulary(join(dir, 'target_vocab.json')) : sourceVocab;
  for (const [token, field] of [[unk, 'unk_token'], [pad, 'pad_token'], [eos, 'eos_token']] as const) {
    if (!sourceVocab.ids.has(token)) throw new TokenizerError(`${join(dir, 'vocab.json')}: has no ${JSON.stringify(token)}, the tokenizer's ${field}`);
  }
  const cleanUp = config['clean_up_tokenization_spaces'] ?? false;
  if (typeof cleanUp !== 'boolean') throw new TokenizerError(`${configFile}: field "clean_up_tokenization_spaces" is ${JSON.stringify(cleanUp)}; expected true or false`);
  const sourceSpm = SentencePieceModel.fromFile(join(dir, 'source.spm')), targetSpm = SentencePieceModel.fromFile(join(dir, 'target.spm'));
  return new MarianTokenizer(dir, sourceSpm, separate ? targetSpm : sourceSpm, sourceVocab, targetVocab, { eos, unk, pad }, cleanUp);
}

interface Vocabulary { readonly ids: Map<string, number>; readonly tokens: Map<number, string>; readonly size: number }

function readVocabulary(file: string): Vocabulary {
  const json = readJsonObject(file);
  const ids = new Map<string, number>(), tokens = new Map<number, string>();
  let size = 0;
  for (const [token, id] of Object.entries(json)) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) throw new TokenizerError(`${file}: token ${JSON.stringify(token)} has id ${JSON.stringify(id)}; expected a non-negative integer`);
    ids.set(token, id);
    if (!tokens.has(id)) tokens.set(id, token);
    size = Math.max(size, id + 1);
  }
  if (ids.size === 0) throw new TokenizerError(`${file}: the vocabulary is empty`);
  return { ids, tokens, size };
}

class MarianTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly eosTokenId: number;
  readonly padTokenId: number;
  readonly specialTokensMap: Readonly<Record<string, string>>;
  private readonly unkId: number;
  private readonly specials: readonly string[];

  constructor(readonly source: string, private readonly sourceSpm: SentencePieceModel, private readonly decodingSpm: SentencePieceModel,
    private readonly sourceVocab: Vocabulary, private readonly targetVocab: Vocabulary, tokens: { eos: string; unk: string; pad: string }, private readonly cleanUp: boolean) {
    this.vocabSize = Math.max(sourceVocab.size, targetVocab.size);
    this.eosTokenId = sourceVocab.ids.get(tokens.eos)!;
    this.padTokenId = sourceVocab.ids.get(tokens.pad)!;
    this.unkId = sourceVocab.ids.get(tokens.unk)!;
    this.specials = [tokens.eos, tokens.unk, tokens.pad];
    this.specialTokensMap = { eos_token: tokens.eos, unk_token: tokens.unk, pad_token: tokens.pad };
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const ids: number[] = [];
    for (const part of splitOnSpecials(text, this.specials)) {
      if (this.specials.includes(part)) { ids.push(this.sourceVocab.ids.get(part)!); continue; }
      const { code, rest } = languageCode(part);
      const pieces = [...(code === undefined ? [] : [code]), ...this.sourceSpm.encodeAsPieces(rest)];
      for (const piece of pieces) ids.push(this.sourceVocab.ids.get(piece) ?? this.unkId);
    }
    if (options.addSpecialTokens ?? true) ids.push(this.eosTokenId);
    return ids;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const unk = this.specials[1]!;
    const tokens = ids.map((id) => this.targetVocab.tokens.get(id) ?? unk).filter((t) => !(options.skipSpecialTokens && this.specials.includes(t)));
    let text = '', pieces: string[] = [];
    for (const token of tokens) {
      if (this.specials.includes(token)) {
        text += `${this.decodingSpm.decodePieces(pieces)}${token} `;
        pieces = [];
      } else {
        pieces.push(token);
      }
    }
    text = (text + this.decodingSpm.decodePieces(pieces)).replaceAll('\u2581', ' ').trim();
    return (options.cleanUpTokenizationSpaces ?? this.cleanUp) ? cleanUpTokenization(text) : text;
  }

  tokenToId(token: string): number | undefined { return this.sourceVocab.ids.get(token); }

  idToToken(id: number): string | undefined { return this.targetVocab.tokens.get(id); }
}

/** The text cut at each occurrence of a special token, the tokens kept as parts (leftmost, longest first). */
function splitOnSpecials(text: string, specials: readonly string[]): string[] {
  const parts: string[] = [];
  let start = 0;
  for (let i = 0; i < text.length;) {
    const match = specials.filter((s) => text.startsWith(s, i)).sort((a, b) => b.length - a.length)[0];
    if (match === undefined) { i++; continue; }
    if (i > start) parts.push(text.slice(start, i));
    parts.push(match);
    i += match.length;
    start = i;
  }
  if (start < text.length) parts.push(text.slice(start));
  return parts;
}

/** A leading ">>xx<<" language code (multilingual Marian models), kept whole (MarianTokenizer.remove_language_code). */
function languageCode(text: string): { code?: string; rest: string } {
  const end = text.startsWith('>>') ? text.indexOf('<<') : -1;
  return end === -1 ? { rest: text } : { code: text.slice(0, end + 2), rest: text.slice(end + 2) };
}

/** transformers' clean_up_tokenization: the spaces tokenization put before punctuation and contractions. */
function cleanUpTokenization(text: string): string {
  return text.replaceAll(' .', '.').replaceAll(' ?', '?').replaceAll(' !', '!').replaceAll(' ,', ',').replaceAll(" ' ", "'")
    .replaceAll(" n't", "n't").replaceAll(" 'm", "'m").replaceAll(" 's", "'s").replaceAll(" 've", "'ve").replaceAll(" 're", "'re");
}
