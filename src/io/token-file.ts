// Token files: a tokenized corpus on disk, read whole into memory for the data loader.
//
// We use llm.c's .bin format rather than invent one (files made by llm.c's dev/data scripts load
// as they are): a header of 256 little-endian int32 (1024 bytes) — [0] magic, [1] version,
// [2] token count, the rest zero — then the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2's 50,257 ids fit)
//   magic 20240801, version 7: uint32 tokens (Llama 3's 128k vocabulary)
// The count in the header catches a truncated file. Header-less files (nanoGPT's train.bin is flat
// uint16) are read with an explicit `format: 'raw-u16' | 'raw-i32'`, since nothing in them says what
// they hold. Typed arrays use the host's byte order; every platform Node runs this project on
// (x86-64, arm64) is little-endian, like the files.

import { readFileSync } from 'node:fs';
import { ArgumentError, FuseformerError } from '../errors.js';
import { writeFileAtomically } from './atomic-write.js';

export class TokenFileError extends FuseformerError {}

export type TokenArray = Uint16Array | Uint32Array | Int32Array;
export type TokenFileFormat = 'llmc' | 'raw-u16' | 'raw-i32';

export const LLMC_HEADER_BYTES = 1024;
export const LLMC_U16 = { magic: 20240520, version: 1 } as const;
export const LLMC_U32 = { magic: 20240801, version: 7 } as const;

/**
 * Reads a token file. `format` defaults to 'llmc'; a file without llm.c's magic is then refused with a
 * message suggesting the raw formats. Raw i32 files must hold no negative ids.
 */
export function readTokenFile(path: string, format: TokenFileFormat = 'llmc'): TokenArray {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    throw new TokenFileError(`${path}: cannot read token file (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  return parseTokenFile(bytes, path, format);
}

/** Parses token-file bytes; `source` names the file in errors. */
export function parseTokenFile(bytes: Uint8Array, source: string, format: TokenFileFormat = 'llmc'): TokenArray {
  const fail = (message: string): never => { throw new TokenFileError(`${source}: ${message}`); };
  if (format === 'raw-u16' || format === 'raw-i32') {
    const width = format === 'raw-u16' ? 2 : 4;
    if (bytes.byteLength % width !== 0) fail(`${bytes.byteLength} bytes is not a whole number of ${width}-byte tokens (${format})`);
    const tokens = format === 'raw-u16' ? new Uint16Array(copyOut(bytes, 0, bytes.byteLength)) : new Int32Array(copyOut(bytes, 0, bytes.byteLength));
    if (tokens instanceof Int32Array) {
      const bad = tokens.findIndex((t) => t < 0);
      if (bad >= 0) fail(`token ${bad} is ${tokens[bad]}; token ids must be >= 0 (is this really a raw-i32 file?)`);
    }
    return tokens;
  }
  if (format !== 'llmc') throw new ArgumentError(`token file format must be 'llmc', 'raw-u16' or 'raw-i32', got ${JSON.stringify(format)}`);
  if (bytes.byteLength < LLMC_HEADER_BYTES) fail(`${bytes.byteLength} bytes is too short for llm.c's 1024-byte header (a header-less file needs format 'raw-u16' or 'raw-i32')`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, LLMC_HEADER_BYTES);
  const magic = view.getInt32(0, true), version = view.getInt32(4, true), count = view.getInt32(8, true);
  let width: 2 | 4;
  if (magic === LLMC_U16.magic && version === LLMC_U16.version) width = 2;
  else if (magic === LLMC_U32.magic && version === LLMC_U32.version) width = 4;
  else return fail(`magic ${magic} / version ${version} is not llm.c's token format (${LLMC_U16.magic}/${LLMC_U16.version} for uint16, ${LLMC_U32.magic}/${LLMC_U32.version} for uint32); a header-less file needs format 'raw-u16' or 'raw-i32'`);
  if (count < 0) fail(`the header's token count is negative (${count})`);
  const expected = LLMC_HEADER_BYTES + count * width;
  if (bytes.byteLength !== expected) {
    fail(`the header says ${count} tokens of ${width} bytes (${expected} bytes in all) but the file has ${bytes.byteLength} bytes${bytes.byteLength < expected ? ' (truncated?)' : ''}`);
  }
  const data = copyOut(bytes, LLMC_HEADER_BYTES, count * width);
  return width === 2 ? new Uint16Array(data) : new Uint32Array(data);
}

/**
 * Writes `tokens` in llm.c's format, atomically: uint16 when every id is below 65,536, else uint32.
 */
export function writeTokenFile(path: string, tokens: ArrayLike<number>): void {
  let max = 0;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (!Number.isInteger(t) || t < 0 || t >= 2 ** 32) throw new ArgumentError(`writeTokenFile ${path}: token ${i} is ${t}; expected an integer in [0, 2^32)`);
    if (t > max) max = t;
  }
  if (tokens.length >= 2 ** 31) throw new ArgumentError(`writeTokenFile ${path}: ${tokens.length} tokens exceed the format's int32 count`);
  const kind = max < 2 ** 16 ? LLMC_U16 : LLMC_U32;
  const width = kind === LLMC_U16 ? 2 : 4;
  const bytes = new Uint8Array(LLMC_HEADER_BYTES + tokens.length * width);
  const header = new DataView(bytes.buffer, 0, LLMC_HEADER_BYTES);
  header.setInt32(0, kind.magic, true);
  header.setInt32(4, kind.version, true);
  header.setInt32(8, tokens.length, true);
  const body = width === 2 ? new Uint16Array(bytes.buffer, LLMC_HEADER_BYTES) : new Uint32Array(bytes.buffer, LLMC_HEADER_BYTES);
  for (let i = 0; i < tokens.length; i++) body[i] = tokens[i]!;
  writeFileAtomically(path, bytes);
}

/** A fresh, aligned ArrayBuffer with bytes [begin, begin + length) (typed arrays need alignment). */
function copyOut(bytes: Uint8Array, begin: number, length: number): ArrayBuffer {
  const out = new Uint8Array(length);
  out.set(bytes.subarray(begin, begin + length));
  return out.buffer;
}
