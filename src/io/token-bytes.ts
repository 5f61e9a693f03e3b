// The bytes each token id adds to the text, read from tokenizer.json's vocabulary and decoder: what constrained
// decoding (infer/structured/) matches a grammar against. Byte-level BPE (GPT-2, Llama 3, Qwen) maps each
// character of a token back to its byte; SentencePiece-style decoders (Llama 2, Mistral) turn '▁' into a space
// and <0xHH> tokens into the byte HH. Special tokens (and ids past the tokenizer's vocabulary) add no text: null.
//
// Decoders that only trim the whole text's ends (Strip, a Metaspace's first space) are left out: a model's
// answer continues its prompt, so its tokens' spaces stay (as TokenStreamDecoder returns them).

import type { Tokenizer } from './tokenizer.js';
import { TokenizerError } from './tokenizer.js';
import { bytesToUnicode } from './byte-tokenizer.js';

type Piece = string | Uint8Array;

const utf8 = new TextEncoder();
const BYTE_FALLBACK = /^<0x([0-9A-Fa-f]{2})>$/;

/** tokenizer.json of a tokenizer, where it has one (loaded from a file, or the byte tokenizer's own). */
function tokenizerJsonOf(tokenizer: Tokenizer): Record<string, unknown> {
  const json = tokenizer.definition?.tokenizerJson ?? (tokenizer as { tokenizerJson?: () => Record<string, unknown> }).tokenizerJson?.();
  if (!json) throw new TokenizerError(`${tokenizer.source}: structured outputs need a tokenizer.json tokenizer (its vocabulary and decoder), and this one has none`);
  return json;
}

/** Bytes of every token id below vocabSize (the model's vocabulary; the tokenizer's may be smaller); null: no text. */
export function tokenByteTable(tokenizer: Tokenizer, vocabSize: number): (Uint8Array | null)[] {
  const json = tokenizerJsonOf(tokenizer), source = tokenizer.source;
  const model = json['model'] as Record<string, unknown> | undefined;
  const pieces = new Map<number, string>();
  const vocab = model?.['vocab'];
  if (Array.isArray(vocab)) vocab.forEach((entry, id) => { if (Array.isArray(entry) && typeof entry[0] === 'string') pieces.set(id, entry[0]); });
  else if (vocab && typeof vocab === 'object') {
    for (const [piece, id] of Object.entries(vocab as Record<string, unknown>)) if (typeof id === 'number') pieces.set(id, piece);
  } else {
    throw new TokenizerError(`${source}: tokenizer.json has no model.vocab`);
  }
  const special = new Set<number>(), added = new Map<number, string>();
  for (const token of (json['added_tokens'] as { id?: unknown; content?: unknown; special?: unknown }[] | undefined) ?? []) {
    if (typeof token.id !== 'number' || typeof token.content !== 'string') continue;
    if (token.special === true) special.add(token.id);
    else added.set(token.id, token.content);
  }
  const decode = pieceDecoder(json['decoder'], source);
  const table: (Uint8Array | null)[] = new Array(vocabSize).fill(null);
  for (let id = 0; id < vocabSize; id++) {
    if (special.has(id)) continue;
    const content = added.get(id);
    if (content !== undefined) table[id] = utf8.encode(content); // added tokens are their text, as written
    else {
      const piece = pieces.get(id);
      if (piece !== undefined) table[id] = decode(piece);
    }
  }
  return table;
}

/** A token piece's bytes under tokenizer.json's "decoder". */
function pieceDecoder(decoder: unknown, source: string): (piece: string) => Uint8Array {
  const steps = decoderSteps(decoder, source);
  return (piece) => {
    let p: Piece = piece;
    for (const step of steps) p = step(p);
    return typeof p === 'string' ? utf8.encode(p) : p;
  };
}

function decoderSteps(decoder: unknown, source: string): ((p: Piece) => Piece)[] {
  if (decoder === null || decoder === undefined) return [];
  const d = decoder as Record<string, unknown>;
  const type = d['type'];
  switch (type) {
    case 'Sequence': return ((d['decoders'] as unknown[] | undefined) ?? []).flatMap((inner) => decoderSteps(inner, source));
    case 'ByteLevel': {
      const byteOf = new Map(bytesToUnicode().map((ch, b) => [ch, b]));
      return [(p) => {
        if (typeof p !== 'string') return p;
        const out: number[] = [];
        for (const ch of p) {
          const b = byteOf.get(ch);
          if (b !== undefined) out.push(b);
          else out.push(...utf8.encode(ch));
        }
        return Uint8Array.from(out);
      }];
    }
    case 'Replace': {
      const pattern = (d['pattern'] as Record<string, unknown> | undefined)?.['String'], content = d['content'];
      if (typeof pattern !== 'string' || typeof content !== 'string') throw new TokenizerError(`${source}: a Replace decoder with a regex pattern is not supported for structured outputs`);
      return [(p) => (typeof p === 'string' ? p.split(pattern).join(content) : p)];
    }
    case 'Metaspace': {
      const replacement = typeof d['replacement'] === 'string' ? d['replacement'] : '\u2581';
      return [(p) => (typeof p === 'string' ? p.split(replacement).join(' ') : p)];
    }
    case 'ByteFallback':
      return [(p) => {
        const m = typeof p === 'string' ? BYTE_FALLBACK.exec(p) : null;
        return m ? Uint8Array.of(parseInt(m[1]!, 16)) : p;
      }];
    case 'Fuse':
    case 'Strip':
      return [];
    default:
      throw new TokenizerError(`${source}: tokenizer.json's decoder '${String(type)}' is not supported for structured outputs (byte-level and SentencePiece-style decoders are)`);
  }
}
