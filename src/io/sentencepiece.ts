// SentencePiece model files (`*.model`, Marian's `source.spm` / `target.spm`): the protobuf ModelProto
// read directly, and the library's encoding and decoding reimplemented to give its exact pieces —
// models that ship no tokenizer.json (every Helsinki-NLP opus-mt model) are tokenized through these.
//
// Encoding, as sentencepiece's C++ does it (normalizer.cc, unigram_model.cc, bpe_model.cc):
//  1. Normalize: the precompiled character map (a Darts double-array trie over UTF-8 bytes whose values
//     index a blob of replacement strings; the longest rule matching at each position wins), leading,
//     trailing and repeated whitespace removed, a dummy "▁" prefix, spaces escaped as "▁".
//  2. Unigram: the Viterbi path of highest total piece score over the normalized text (f32 sums, the
//     first of equal paths kept); a character no piece covers is an unknown piece scored min − 10.
//     BPE: the highest-scored adjacent pair merged until none is in the vocabulary.
//  3. Runs of unknown pieces merged into one piece holding their text (byte-fallback models spell them
//     as <0xXX> pieces instead).
// Decoding: pieces to text, "▁" to spaces, the first piece's dummy space dropped, control pieces
// silent, the unknown piece as " ⁇ ", byte pieces joined as UTF-8.

import { readFileSync } from 'node:fs';
import { FuseformerError } from '../errors.js';

export class SentencePieceError extends FuseformerError {}

/** ModelProto.SentencePiece.Type. */
export const enum PieceType { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 }

export interface Piece { readonly piece: string; readonly score: number; readonly type: PieceType }

interface NormalizerSpec {
  readonly name: string;
  readonly charsmap?: Uint8Array;
  readonly addDummyPrefix: boolean;
  readonly removeExtraWhitespaces: boolean;
  readonly escapeWhitespaces: boolean;
}

const SPACE_SYMBOL = '\u2581';
const UNK_PENALTY = 10;
// ignoreBOM: a U+FEFF in the text is a character like any other, not a byte-order mark to drop.
const UTF8 = new TextDecoder('utf-8', { ignoreBOM: true });
const FLT_MAX = 3.4028234663852886e38, FLT_MIN = 1.1754943508222875e-38;

export class SentencePieceModel {
  readonly modelType: 'unigram' | 'bpe';
  readonly unkId: number;
  private readonly pieceIds = new Map<string, number>();
  /** Pieces the encoder may produce (normal, user-defined; unused ones are matched then skipped). */
  private readonly matchable = new Map<string, number>();
  private readonly maxPieceLength: number;
  private readonly minScore: number;
  private readonly maxScore: number;
  private readonly byteFallback: boolean;
  private readonly treatWhitespaceAsSuffix: boolean;
  private readonly unkSurface: string;
  private readonly normalizer: CharsMapNormalizer;

  private constructor(readonly source: string, private readonly pieces: readonly Piece[], trainer: TrainerSpec, private readonly spec: NormalizerSpec) {
    if (trainer.modelType !== 1 && trainer.modelType !== 2) {
      throw new SentencePieceError(`${source}: trainer_spec.model_type is ${trainer.modelType} (${['', 'UNIGRAM', 'BPE', 'WORD', 'CHAR'][trainer.modelType] ?? 'unknown'}); only UNIGRAM and BPE models are supported`);
    }
    this.modelType = trainer.modelType === 1 ? 'unigram' : 'bpe';
    this.byteFallback = trainer.byteFallback;
    this.treatWhitespaceAsSuffix = trainer.treatWhitespaceAsSuffix;
    this.unkSurface = trainer.unkSurface;
    // C++ starts these at FLT_MAX and FLT_MIN (the smallest positive float), so with the usual negative
    // scores the user-defined bonus below is length · ~0 − 0.1.
    let minScore = FLT_MAX, maxScore = FLT_MIN, maxLength = 0, unkId = -1;
    pieces.forEach((p, id) => {
      if (p.piece === '') throw new SentencePieceError(`${source}: piece ${id} is empty`);
      if (this.pieceIds.has(p.piece)) throw new SentencePieceError(`${source}: piece ${JSON.stringify(p.piece)} appears twice (ids ${this.pieceIds.get(p.piece)} and ${id})`);
      this.pieceIds.set(p.piece, id);
      if (p.type === PieceType.Unknown) {
        if (unkId !== -1) throw new SentencePieceError(`${source}: two unknown pieces (ids ${unkId} and ${id})`);
        unkId = id;
      }
      if (p.type === PieceType.Normal || p.type === PieceType.UserDefined || p.type === PieceType.Unused) {
        this.matchable.set(p.piece, id);
        maxLength = Math.max(maxLength, [...p.piece].length);
      }
      if (p.type === PieceType.Normal) { minScore = Math.min(minScore, p.score); maxScore = Math.max(maxScore, p.score); }
    });
    if (unkId === -1) throw new SentencePieceError(`${source}: no piece of type UNKNOWN (the model cannot encode text it has no piece for)`);
    this.unkId = unkId;
    this.maxPieceLength = maxLength;
    this.minScore = minScore;
    this.maxScore = maxScore;
    this.normalizer = new CharsMapNormalizer(spec.charsmap, source);
  }

  /** Reads a SentencePiece model file; every malformed field is an error naming the file. */
  static fromFile(path: string): SentencePieceModel {
    let bytes: Uint8Array;
    try {
      bytes = readFileSync(path);
    } catch (error) {
      throw new SentencePieceError(`${path}: cannot be read (${(error as Error).message})`);
    }
    return SentencePieceModel.parse(bytes, path);
  }

  static parse(bytes: Uint8Array, source: string): SentencePieceModel {
    const model = readModelProto(bytes, source);
    return new SentencePieceModel(source, model.pieces, model.trainer, model.normalizer);
  }

  get size(): number { return this.pieces.length; }

  /** Every piece with its score and type, by id (what converters to tokenizer.json read). */
  get entries(): readonly Readonly<Piece>[] { return this.pieces; }

  /** The normalizer spec's character map (empty where the model has none). */
  get characterMap(): CharsMapNormalizer { return this.normalizer; }

  /** The normalizer spec's precompiled_charsmap as stored (what a tokenizer.json's Precompiled normalizer holds, in base64). */
  get characterMapBytes(): Uint8Array | undefined { return this.spec.charsmap; }

  /** Whether the trainer spec asks for <0xXX> byte pieces where no piece covers a character. */
  get usesByteFallback(): boolean { return this.byteFallback; }

  pieceToId(piece: string): number { return this.pieceIds.get(piece) ?? this.unkId; }

  idToPiece(id: number): string | undefined { return this.pieces[id]?.piece; }

  isControl(id: number): boolean { return this.pieces[id]?.type === PieceType.Control; }

  /** The normalized text the model segments (spaces as "▁"). */
  normalize(text: string): string {
    const spec = this.spec;
    const input = new TextEncoder().encode(text);
    let pos = 0;
    if (spec.removeExtraWhitespaces) {
      while (pos < input.length) {
        const [out, used] = this.normalizer.prefix(input, pos);
        if (out !== ' ') break;
        pos += used;
      }
    }
    if (pos >= input.length) return '';
    const space = spec.escapeWhitespaces ? SPACE_SYMBOL : ' ';
    let normalized = '';
    if (!this.treatWhitespaceAsSuffix && spec.addDummyPrefix) normalized += space;
    let previousSpace = spec.removeExtraWhitespaces;
    while (pos < input.length) {
      const [out, used] = this.normalizer.prefix(input, pos);
      let piece = out;
      if (previousSpace) piece = piece.replace(/^ +/, '');
      if (piece !== '') {
        normalized += spec.escapeWhitespaces ? piece.replaceAll(' ', SPACE_SYMBOL) : piece;
        previousSpace = piece.endsWith(' ');
      }
      pos += used;
      if (!spec.removeExtraWhitespaces) previousSpace = false;
    }
    if (spec.removeExtraWhitespaces) while (normalized.endsWith(space)) normalized = normalized.slice(0, -space.length);
    if (this.treatWhitespaceAsSuffix && spec.addDummyPrefix) normalized += space;
    return normalized;
  }

  /** The pieces of `text` (SentencePieceProcessor.encode(text, out_type=str)). */
  encodeAsPieces(text: string): string[] {
    const normalized = this.normalize(text);
    if (normalized === '') return [];
    const segments = this.modelType === 'unigram' ? this.viterbi([...normalized]) : this.bpe([...normalized]);
    const out: string[] = [];
    let previousUnknown = false;
    for (const { text: surface, id } of segments) {
      const unknown = id === this.unkId;
      if (this.byteFallback && unknown) {
        for (const byte of new TextEncoder().encode(surface)) out.push(bytePiece(byte));
      } else if (unknown && previousUnknown) {
        out[out.length - 1] += surface;  // runs of unknown characters become one piece
      } else {
        out.push(surface);
      }
      previousUnknown = unknown;
    }
    return out;
  }

  /** The text of `pieces` (SentencePieceProcessor.decode_pieces). */
  decodePieces(pieces: readonly string[]): string {
    let text = '', bytes: number[] = [], atStart = true;
    const dropDummySpace = this.spec.addDummyPrefix || this.spec.removeExtraWhitespaces;
    const flushBytes = () => {
      if (bytes.length === 0) return;
      const surface = UTF8.decode(Uint8Array.from(bytes));
      text += surface;
      if (surface !== '') atStart = false;
      bytes = [];
    };
    for (const piece of pieces) {
      const id = this.pieceToId(piece), type = this.pieces[id]!.type;
      if (type === PieceType.Byte) { bytes.push(parseInt(piece.slice(3, 5), 16)); continue; }
      flushBytes();
      let surface: string;
      if (type === PieceType.Control) surface = '';
      else if (id === this.unkId) surface = piece === this.pieces[id]!.piece ? this.unkSurface : piece;
      else {
        const body = atStart && dropDummySpace && piece.startsWith(SPACE_SYMBOL) ? piece.slice(SPACE_SYMBOL.length) : piece;
        surface = body.replaceAll(SPACE_SYMBOL, ' ');
      }
      text += surface;
      if (surface !== '') atStart = false;
    }
    flushBytes();
    return text;
  }

  /**
   * The unigram model's best segmentation (unigram_model.cc EncodeOptimized): for each end position the
   * best-scoring path, updated only by a strictly better score (the first of equal paths stays); f32 sums.
   */
  private viterbi(chars: string[]): { text: string; id: number }[] {
    const n = chars.length, unkScore = Math.fround(this.minScore - UNK_PENALTY);
    const best: { score: number; start: number; id: number }[] = Array.from({ length: n + 1 }, () => ({ score: 0, start: -1, id: -1 }));
    for (let start = 0; start < n; start++) {
      const before = best[start]!.score;
      let hasSingle = false;
      let key = '';
      for (let length = 1; length <= Math.min(this.maxPieceLength, n - start); length++) {
        key += chars[start + length - 1];
        const id = this.matchable.get(key);
        if (id === undefined) continue;
        const piece = this.pieces[id]!;
        if (piece.type === PieceType.Unused) continue;
        // A user-defined piece gets a bonus that always selects it (its length in UTF-8 bytes).
        const score = piece.type === PieceType.UserDefined ? Math.fround(Math.fround(utf8Length(key) * this.maxScore) - 0.1) : piece.score;
        const candidate = Math.fround(score + before), target = best[start + length]!;
        if (target.start === -1 || candidate > target.score) { target.score = candidate; target.start = start; target.id = id; }
        if (length === 1) hasSingle = true;
      }
      if (!hasSingle) {
        const candidate = Math.fround(unkScore + before), target = best[start + 1]!;
        if (target.start === -1 || candidate > target.score) { target.score = candidate; target.start = start; target.id = this.unkId; }
      }
    }
    const segments: { text: string; id: number }[] = [];
    for (let end = n; end > 0;) {
      const node = best[end]!;
      segments.push({ text: chars.slice(node.start, end).join(''), id: node.id });
      end = node.start;
    }
    return segments.reverse();
  }

  /**
   * The BPE model's segmentation (bpe_model.cc): characters, then repeatedly the adjacent pair whose merge is
   * the highest-scored piece (the leftmost of equals) merged; user-defined pieces are kept whole.
   */
  private bpe(chars: string[]): { text: string; id: number }[] {
    let symbols: string[] = [];
    for (let i = 0; i < chars.length;) {
      let whole = 0;  // the longest user-defined piece starting here
      let key = '';
      for (let length = 1; length <= Math.min(this.maxPieceLength, chars.length - i); length++) {
        key += chars[i + length - 1];
        const id = this.matchable.get(key);
        if (id !== undefined && this.pieces[id]!.type === PieceType.UserDefined) whole = length;
      }
      const length = Math.max(whole, 1);
      symbols.push(chars.slice(i, i + length).join(''));
      i += length;
    }
    // Pairs in a heap by (score, leftmost), checked when taken: a pair whose symbols merged since is stale.
    const text = symbols, next = symbols.map((_, i) => i + 1), prev = symbols.map((_, i) => i - 1), alive = symbols.map(() => true);
    const heap: { score: number; left: number; right: number; merged: string }[] = [];
    const before = (a: typeof heap[number], b: typeof heap[number]) => a.score > b.score || (a.score === b.score && a.left < b.left);
    const push = (left: number, right: number) => {
      if (left < 0 || right >= text.length) return;
      const merged = text[left]! + text[right]!, id = this.matchable.get(merged);
      if (id === undefined || this.pieces[id]!.type === PieceType.Unused) return;
      heap.push({ score: this.pieces[id]!.score, left, right, merged });
      for (let i = heap.length - 1; i > 0;) {
        const parent = (i - 1) >> 1;
        if (!before(heap[i]!, heap[parent]!)) break;
        [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
        i = parent;
      }
    };
    const pop = () => {
      const top = heap[0]!, last = heap.pop()!;
      if (heap.length > 0) {
        heap[0] = last;
        for (let i = 0; ;) {
          const l = 2 * i + 1, r = l + 1;
          let best = i;
          if (l < heap.length && before(heap[l]!, heap[best]!)) best = l;
          if (r < heap.length && before(heap[r]!, heap[best]!)) best = r;
          if (best === i) break;
          [heap[i], heap[best]] = [heap[best]!, heap[i]!];
          i = best;
        }
      }
      return top;
    };
    for (let i = 0; i + 1 < text.length; i++) push(i, i + 1);
    while (heap.length > 0) {
      const { left, right, merged } = pop();
      if (!alive[left] || !alive[right] || next[left] !== right || text[left]! + text[right]! !== merged) continue;
      text[left] = merged;
      alive[right] = false;
      next[left] = next[right]!;
      if (next[left]! < text.length) prev[next[left]!] = left;
      push(prev[left]!, left);
      push(left, next[left]!);
    }
    symbols = text.filter((_, i) => alive[i]);
    return symbols.map((text) => {
      const id = this.matchable.get(text);
      return { text, id: id === undefined || this.pieces[id]!.type === PieceType.Unused ? this.unkId : id };
    });
  }
}

function bytePiece(byte: number): string {
  return `<0x${byte.toString(16).toUpperCase().padStart(2, '0')}>`;
}

function utf8Length(text: string): number {
  return new TextEncoder().encode(text).length;
}

/**
 * normalizer_spec.precompiled_charsmap: [trie size, u32 LE][Darts double-array trie over UTF-8 bytes, u32
 * units][replacement strings, NUL-terminated]. Without one, text passes through unchanged.
 */
/** A precompiled_charsmap: a Darts double-array trie over UTF-8 bytes whose leaves index NUL-terminated replacements. */
export class CharsMapNormalizer {
  private readonly units?: Uint32Array;
  private readonly replacements?: Uint8Array;

  constructor(charsmap: Uint8Array | undefined, source: string) {
    if (charsmap === undefined || charsmap.length === 0) return;
    const where = `${source}: normalizer_spec.precompiled_charsmap`;
    if (charsmap.length < 4) throw new SentencePieceError(`${where} is ${charsmap.length} bytes; expected at least 4`);
    const view = new DataView(charsmap.buffer, charsmap.byteOffset, charsmap.byteLength);
    const trieSize = view.getUint32(0, true);
    if (trieSize % 4 !== 0 || 4 + trieSize > charsmap.length) throw new SentencePieceError(`${where}: its trie of ${trieSize} bytes does not fit the ${charsmap.length - 4} bytes after the size`);
    this.units = new Uint32Array(trieSize / 4);
    for (let i = 0; i < this.units.length; i++) this.units[i] = view.getUint32(4 + 4 * i, true);
    this.replacements = charsmap.subarray(4 + trieSize);
  }

  /** The normalized text of the longest rule matching at `pos`, or of one character; and the bytes used. */
  prefix(input: Uint8Array, pos: number): [string, number] {
    const match = this.longestMatch(input, pos);
    if (match !== undefined) return match;
    const length = utf8CharLength(input, pos);
    if (length === 0) return ['\uFFFD', 1];  // a malformed byte: U+FFFD for one byte, as sentencepiece does
    return [UTF8.decode(input.subarray(pos, pos + length)), length];
  }

  /**
   * The replacement of the shortest rule matching a prefix of `input` (the walk stops at a NUL byte), as
   * Hugging Face's spm_precompiled transform() takes it — not sentencepiece's longest match.
   */
  shortestMatch(input: Uint8Array): string | undefined {
    const units = this.units, replacements = this.replacements;
    if (units === undefined || replacements === undefined || units.length === 0) return undefined;
    const offset = (unit: number) => (unit >>> 10) << ((unit & (1 << 9)) >>> 6);
    const label = (unit: number) => unit & ((1 << 31) | 0xff);
    let node = offset(units[0]!);
    for (let i = 0; i < input.length && input[i] !== 0; i++) {
      node ^= input[i]!;
      const unit = units[node];
      if (unit === undefined || (label(unit) >>> 0) !== input[i]) return undefined;
      node ^= offset(unit);
      if ((unit >>> 8) & 1) {
        const leaf = units[node];
        if (leaf === undefined) return undefined;
        const start = leaf & 0x7fffffff;
        let end = start;
        while (end < replacements.length && replacements[end] !== 0) end++;
        return UTF8.decode(replacements.subarray(start, end));
      }
    }
    return undefined;
  }

  private longestMatch(input: Uint8Array, pos: number): [string, number] | undefined {
    const units = this.units, replacements = this.replacements;
    if (units === undefined || replacements === undefined || units.length === 0) return undefined;
    const offset = (unit: number) => (unit >>> 10) << ((unit & (1 << 9)) >>> 6);
    const label = (unit: number) => unit & ((1 << 31) | 0xff);
    let node = offset(units[0]!), found: [number, number] | undefined;
    for (let i = pos; i < input.length; i++) {
      node ^= input[i]!;
      const unit = units[node];
      if (unit === undefined || (label(unit) >>> 0) !== input[i]) break;
      node ^= offset(unit);
      if ((unit >>> 8) & 1) {
        const leaf = units[node];
        if (leaf === undefined) break;
        found = [leaf & 0x7fffffff, i + 1 - pos];
      }
    }
    if (found === undefined) return undefined;
    const [start, length] = found;
    let end = start;
    while (end < replacements.length && replacements[end] !== 0) end++;
    return [UTF8.decode(replacements.subarray(start, end)), length];
  }
}

/** The byte length of a valid UTF-8 character at `pos` (0 if it is malformed). */
function utf8CharLength(bytes: Uint8Array, pos: number): number {
  const b = bytes[pos]!;
  const length = b < 0x80 ? 1 : b >= 0xc2 && b < 0xe0 ? 2 : b >= 0xe0 && b < 0xf0 ? 3 : b >= 0xf0 && b < 0xf5 ? 4 : 0;
  if (length === 0 || pos + length > bytes.length) return 0;
  for (let i = 1; i < length; i++) if ((bytes[pos + i]! & 0xc0) !== 0x80) return 0;
  const decoded = UTF8.decode(bytes.subarray(pos, pos + length));
  return decoded === '\uFFFD' ? 0 : length;  // overlong forms and surrogates
}

interface TrainerSpec { modelType: number; byteFallback: boolean; treatWhitespaceAsSuffix: boolean; unkSurface: string }

/** ModelProto: pieces (1), trainer_spec (2), normalizer_spec (3); other fields skipped. */
function readModelProto(bytes: Uint8Array, source: string): { pieces: Piece[]; trainer: TrainerSpec; normalizer: NormalizerSpec } {
  const pieces: Piece[] = [];
  const trainer: TrainerSpec = { modelType: 1, byteFallback: false, treatWhitespaceAsSuffix: false, unkSurface: ' \u2047 ' };
  let normalizer: NormalizerSpec = { name: '', addDummyPrefix: true, removeExtraWhitespaces: true, escapeWhitespaces: true };
  const top = new ProtoReader(bytes, source, 'ModelProto');
  for (let field = top.next(); field !== undefined; field = top.next()) {
    if (field.number === 1) {
      const r = top.message('pieces');
      let piece: string | undefined, score = 0, type = PieceType.Normal;
      for (let f = r.next(); f !== undefined; f = r.next()) {
        if (f.number === 1) piece = r.string('piece');
        else if (f.number === 2) score = r.float('score');
        else if (f.number === 3) type = r.varint('type') as PieceType;
        else r.skip(f.wireType);
      }
      if (piece === undefined) throw new SentencePieceError(`${source}: piece ${pieces.length} has no "piece" string`);
      if (![1, 2, 3, 4, 5, 6].includes(type)) throw new SentencePieceError(`${source}: piece ${pieces.length} (${JSON.stringify(piece)}) has type ${type}; expected 1-6`);
      pieces.push({ piece, score, type });
    } else if (field.number === 2) {
      const r = top.message('trainer_spec');
      for (let f = r.next(); f !== undefined; f = r.next()) {
        if (f.number === 3) trainer.modelType = r.varint('trainer_spec.model_type');
        else if (f.number === 24) trainer.treatWhitespaceAsSuffix = r.varint('trainer_spec.treat_whitespace_as_suffix') !== 0;
        else if (f.number === 35) trainer.byteFallback = r.varint('trainer_spec.byte_fallback') !== 0;
        else if (f.number === 44) trainer.unkSurface = r.string('trainer_spec.unk_surface');
        else r.skip(f.wireType);
      }
    } else if (field.number === 3) {
      const r = top.message('normalizer_spec');
      let name = '', charsmap: Uint8Array | undefined, addDummyPrefix = true, removeExtraWhitespaces = true, escapeWhitespaces = true;
      for (let f = r.next(); f !== undefined; f = r.next()) {
        if (f.number === 1) name = r.string('normalizer_spec.name');
        else if (f.number === 2) charsmap = r.bytes('normalizer_spec.precompiled_charsmap');
        else if (f.number === 3) addDummyPrefix = r.varint('normalizer_spec.add_dummy_prefix') !== 0;
        else if (f.number === 4) removeExtraWhitespaces = r.varint('normalizer_spec.remove_extra_whitespaces') !== 0;
        else if (f.number === 5) escapeWhitespaces = r.varint('normalizer_spec.escape_whitespaces') !== 0;
        else r.skip(f.wireType);
      }
      normalizer = { name, ...(charsmap ? { charsmap } : {}), addDummyPrefix, removeExtraWhitespaces, escapeWhitespaces };
    } else {
      top.skip(field.wireType);
    }
  }
  if (pieces.length === 0) throw new SentencePieceError(`${source}: no pieces (not a SentencePiece model file?)`);
  return { pieces, trainer, normalizer };
}

/** A protobuf wire-format reader over one message; errors name the file and the field being read. */
class ProtoReader {
  private pos: number;

  constructor(private readonly data: Uint8Array, private readonly source: string, private readonly what: string, start = 0, private readonly end = data.length) {
    this.pos = start;
  }

  next(): { number: number; wireType: number } | undefined {
    if (this.pos >= this.end) return undefined;
    const key = this.varint(this.what);
    return { number: Math.floor(key / 8), wireType: key % 8 };
  }

  varint(field: string): number {
    let value = 0, scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) this.fail(field, 'ends inside a varint');
      const b = this.data[this.pos++]!;
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return value > 2 ** 63 ? value - 2 ** 64 : value;
      scale *= 128;
    }
    return this.fail(field, 'has a varint longer than 10 bytes');
  }

  float(field: string): number {
    if (this.pos + 4 > this.end) this.fail(field, 'ends inside a float');
    const value = new DataView(this.data.buffer, this.data.byteOffset + this.pos, 4).getFloat32(0, true);
    this.pos += 4;
    return value;
  }

  private span(field: string): [number, number] {
    const length = this.varint(field);
    if (length < 0 || this.pos + length > this.end) this.fail(field, `claims ${length} bytes where ${this.end - this.pos} are left`);
    const start = this.pos;
    this.pos += length;
    return [start, start + length];
  }

  bytes(field: string): Uint8Array {
    const [start, end] = this.span(field);
    return this.data.subarray(start, end);
  }

  string(field: string): string {
    return UTF8.decode(this.bytes(field));
  }

  message(field: string): ProtoReader {
    const [start, end] = this.span(field);
    return new ProtoReader(this.data, this.source, field, start, end);
  }

  skip(wireType: number): void {
    if (wireType === 0) this.varint(this.what);
    else if (wireType === 1) this.advance(8);
    else if (wireType === 2) this.span(this.what);
    else if (wireType === 5) this.advance(4);
    else this.fail(this.what, `has wire type ${wireType}, which SentencePiece models do not use`);
  }

  private advance(n: number): void {
    if (this.pos + n > this.end) this.fail(this.what, 'ends inside a field');
    this.pos += n;
  }

  private fail(field: string, problem: string): never {
    throw new SentencePieceError(`${this.source}: not a valid SentencePiece model: ${field} ${problem} (byte ${this.pos})`);
  }
}
