// A minimal protobuf writer for SentencePiece model files built by hand in tests (the fixtures under
// test/fixtures/sentencepiece/ are the library's own; these are for small and malformed models).

export const varint = (n: number): number[] => {
  const out: number[] = [];
  do { out.push((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)); n = Math.floor(n / 128); } while (n > 0);
  return out;
};
export const field = (number: number, wire: number, body: number[]): number[] => [...varint(number * 8 + wire), ...body];
export const bytesField = (number: number, body: number[]): number[] => field(number, 2, [...varint(body.length), ...body]);
export const text = (s: string): number[] => [...new TextEncoder().encode(s)];
const float = (x: number): number[] => { const b = new Uint8Array(4); new DataView(b.buffer).setFloat32(0, x, true); return [...b]; };
/** ModelProto.pieces: a piece, its score and type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte). */
export const piece = (p: string, score: number, type: number): number[] => bytesField(1, [...bytesField(1, text(p)), ...field(2, 5, float(score)), ...field(3, 0, varint(type))]);
/** NormalizerSpec without a character map (identity), with its three whitespace flags. */
export const identityNormalizer = (addDummyPrefix = true, removeExtraWhitespaces = true): number[] =>
  bytesField(3, [...bytesField(1, text('identity')), ...field(3, 0, [addDummyPrefix ? 1 : 0]), ...field(4, 0, [removeExtraWhitespaces ? 1 : 0])]);
export const modelOf = (...parts: number[][]): Uint8Array => Uint8Array.from(parts.flat());
