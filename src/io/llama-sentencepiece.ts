// A Llama-family tokenizer from tokenizer.model alone (Llama 1 / 2 era checkpoints and their fine-tunes that
// ship no tokenizer.json), built the way transformers 5's LlamaTokenizer builds it and handed to the same
// tokenizer.json pipeline as every other tokenizer:
//   model          BPE over the SentencePiece pieces (vocab: piece → id), byte fallback, unknowns fused, no
//                  unknown token; merges generated from the vocabulary as generate_merges does — every split
//                  of a piece into two pieces of the vocabulary, ordered by the merged piece's id, then the
//                  lengths of the left and right parts (code points);
//   pre-tokenizer  Metaspace ("▁" for spaces, not split), prepending "▁" to the first section of the text
//                  (prepend_scheme "first"), or to every section between added tokens where tokenizer_config.json
//                  says legacy: true ("always"), or never where add_prefix_space is false;
//   post-processor <s> before (add_bos_token) and </s> after (add_eos_token), each only where
//                  tokenizer_config.json sets it (transformers 5 adds neither by default);
//   decoder        "▁" → " ", <0xXX> bytes joined, fused, one leading space stripped (with the prefix space);
//   added tokens   the unknown, control and user-defined pieces (the first two special), then
//                  tokenizer_config.json's added_tokens_decoder (e.g. a <pad> past the vocabulary).
// bos / eos / unk default to <s>, </s>, <unk> as LlamaTokenizer's do. bench/tokenizer-parity.ts compares the
// result with transformers' AutoTokenizer on such directories (check:tokenizer).

import { PieceType } from './sentencepiece.js';
import type { SentencePieceModel } from './sentencepiece.js';
import { specialTokenOf, TokenizerError } from './tokenizer.js';

/** tokenizer_config.json's tokenizer_class values a tokenizer.model is read for. */
export const LLAMA_TOKENIZER_CLASSES = ['LlamaTokenizer', 'LlamaTokenizerFast'];

/** The tokenizer.json transformers' LlamaTokenizer builds from `spm` and tokenizer_config.json. */
export function llamaTokenizerJson(spm: SentencePieceModel, config: Record<string, unknown>, source: string, configSource: string): Record<string, unknown> {
  if (spm.modelType !== 'bpe') {
    throw new TokenizerError(`${source}: a SentencePiece ${spm.modelType} model; a Llama tokenizer reads BPE models (tokenizer.json is missing, so tokenizer.model is all there is)`);
  }
  const flag = (field: string, fallback: boolean): boolean => {
    const value = config[field] ?? fallback;
    if (typeof value !== 'boolean') throw new TokenizerError(`${configSource}: field "${field}" is ${JSON.stringify(value)}; expected true or false`);
    return value;
  };
  const addPrefixSpace = flag('add_prefix_space', true), legacy = flag('legacy', false);
  const addBos = flag('add_bos_token', false), addEos = flag('add_eos_token', false);
  const vocab: Record<string, number> = {};
  spm.entries.forEach((p, id) => { vocab[p.piece] = id; });
  const added: Record<string, unknown>[] = [];
  spm.entries.forEach((p, id) => {
    if (p.type === PieceType.Unknown || p.type === PieceType.Control || p.type === PieceType.UserDefined) {
      added.push(addedToken(id, p.piece, p.type !== PieceType.UserDefined));
    }
  });
  for (const [key, entry] of Object.entries(addedTokensDecoder(config, configSource))) {
    const id = Number(key);
    if (!added.some((t) => t['id'] === id)) added.push({ ...addedToken(id, entry.content, entry.special), lstrip: entry.lstrip, rstrip: entry.rstrip, single_word: entry.singleWord, normalized: entry.normalized });
  }
  added.sort((a, b) => (a['id'] as number) - (b['id'] as number));
  const bos = specialTokenOf(config, 'bos_token', configSource) ?? '<s>', eos = specialTokenOf(config, 'eos_token', configSource) ?? '</s>';
  const idOf = (token: string, field: string): number => {
    const id = added.find((t) => t['content'] === token)?.['id'] ?? vocab[token];
    if (typeof id !== 'number') throw new TokenizerError(`${configSource}: ${field} ${JSON.stringify(token)} is neither a piece of ${source} nor an added token`);
    return id;
  };
  const specials: [string, number][] = [...(addBos ? [[bos, idOf(bos, 'bos_token')] as [string, number]] : []), ...(addEos ? [[eos, idOf(eos, 'eos_token')] as [string, number]] : [])];
  const sequence = (id: 'A' | 'B', typeId: number) => [
    ...(addBos ? [{ SpecialToken: { id: bos, type_id: typeId } }] : []), { Sequence: { id, type_id: typeId } }, ...(addEos ? [{ SpecialToken: { id: eos, type_id: typeId } }] : []),
  ];
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: addPrefixSpace ? (legacy ? 'always' : 'first') : 'never', split: false },
    post_processor: {
      type: 'TemplateProcessing', single: sequence('A', 0), pair: [...sequence('A', 0), ...sequence('B', 1)],
      // Sorted by token, as the Rust library writes them.
      special_tokens: Object.fromEntries(specials.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([token, id]) => [token, { id: token, ids: [id], tokens: [token] }])),
    },
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
        ...(addPrefixSpace ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
      ],
    },
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges: generateMerges(spm.entries.map((p) => p.piece)),
    },
  };
}

/**
 * transformers' generate_merges(vocab) without scores: each piece split at every point into two pieces of
 * the vocabulary, sorted by (merged piece id, left length, right length) — lengths in code points.
 */
export function generateMerges(pieces: readonly string[]): [string, string][] {
  const ids = new Map(pieces.map((p, id) => [p, id]));
  const merges: { left: string; right: string; id: number; leftLength: number; rightLength: number }[] = [];
  pieces.forEach((piece, id) => {
    const chars = Array.from(piece);
    for (let i = 1; i < chars.length; i++) {
      const left = chars.slice(0, i).join(''), right = chars.slice(i).join('');
      if (ids.has(left) && ids.has(right)) merges.push({ left, right, id, leftLength: i, rightLength: chars.length - i });
    }
  });
  merges.sort((a, b) => a.id - b.id || a.leftLength - b.leftLength || a.rightLength - b.rightLength);
  return merges.map((m) => [m.left, m.right]);
}

function addedToken(id: number, content: string, special: boolean): Record<string, unknown> {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special };
}

interface AddedTokenEntry { content: string; special: boolean; lstrip: boolean; rstrip: boolean; singleWord: boolean; normalized: boolean }

/** tokenizer_config.json's added_tokens_decoder: {"id": {content, special, lstrip, rstrip, single_word, normalized}}. */
function addedTokensDecoder(config: Record<string, unknown>, configSource: string): Record<string, AddedTokenEntry> {
  const value = config['added_tokens_decoder'];
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new TokenizerError(`${configSource}: field "added_tokens_decoder" is ${JSON.stringify(value)}; expected an object of id → token`);
  const out: Record<string, AddedTokenEntry> = {};
  for (const [key, entry] of Object.entries(value as Record<string, unknown>)) {
    const field = `added_tokens_decoder.${key}`;
    if (!/^\d+$/.test(key)) throw new TokenizerError(`${configSource}: field "${field}": the key must be a token id`);
    if (typeof entry !== 'object' || entry === null || typeof (entry as Record<string, unknown>)['content'] !== 'string') {
      throw new TokenizerError(`${configSource}: field "${field}" is ${JSON.stringify(entry)}; expected an object with a string "content"`);
    }
    const e = entry as Record<string, unknown>;
    const bool = (name: string, fallback: boolean) => (typeof e[name] === 'boolean' ? e[name] as boolean : fallback);
    out[key] = { content: e['content'] as string, special: bool('special', false), lstrip: bool('lstrip', false), rstrip: bool('rstrip', false), singleWord: bool('single_word', false), normalized: bool('normalized', false) };
  }
  return out;
}
