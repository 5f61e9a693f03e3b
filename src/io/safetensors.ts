// safetensors files (Hugging Face's weight format), read and written by hand with every bound checked:
// a malformed or hostile file is a SafetensorsError naming the file and the problem, never a crash, a
// huge allocation or a silently wrong tensor.
//
// Layout: u64 little-endian N | N bytes of JSON header | data. The header maps each tensor name to
// { dtype, shape, data_offsets: [begin, end] } (offsets relative to the start of the data), plus an
// optional "__metadata__" object of string values. The tensors' byte ranges must tile the data
// exactly: no gaps, no overlaps, nothing after the last one (what the reference implementation enforces).
// Tensors are read one at a time at their offset, so a model larger than a Node Buffer can be loaded.

import { closeSync, fstatSync, openSync } from 'node:fs';
import { writeFileAtomically } from './atomic-write.js';
import { elementRangesTotal, readFileRange } from './file-range.js';
import type { DType } from '../dtype.js';
import { decodeFloats } from '../dtype.js';
import { FuseformerError } from '../errors.js';

export class SafetensorsError extends FuseformerError {}

/** Element types of the format, with their sizes in bytes. */
export const SAFETENSORS_DTYPES = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1,
} as const;
export type SafetensorsDType = keyof typeof SAFETENSORS_DTYPES;

/** Our dtype for each safetensors dtype that maps without conversion. */
const TO_DTYPE: Partial<Record<SafetensorsDType, DType>> = { F32: 'f32', F16: 'f16', BF16: 'bf16', I32: 'i32', I8: 'i8', U8: 'u8', BOOL: 'u8' };
const FROM_DTYPE: Record<DType, SafetensorsDType> = { f32: 'F32', f16: 'F16', bf16: 'BF16', i32: 'I32', i8: 'I8', u8: 'U8' };

/** Headers larger than this are refused before allocating (real headers are kilobytes to a few MB). */
const MAX_HEADER_BYTES = 100 * 2 ** 20;

export interface TensorInfo {
  readonly name: string;
  readonly dtype: SafetensorsDType;
  readonly shape: readonly number[];
  /** Byte range in the file (absolute). */
  readonly begin: number;
  readonly end: number;
}

export interface TensorData {
  readonly dtype: SafetensorsDType;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
}

export function fuseformerDType(dtype: SafetensorsDType): DType | undefined {
  return TO_DTYPE[dtype];
}

export function safetensorsDType(dtype: DType): SafetensorsDType {
  return FROM_DTYPE[dtype];
}

/** Parses and validates a header; `dataBytes` is the size of the data section. Pure, for tests. */
export function parseHeader(json: string, dataBytes: number, file: string): { tensors: TensorInfo[]; metadata: Record<string, string> } {
  const fail = (message: string): never => { throw new SafetensorsError(`${file}: ${message}`); };
  let header: unknown;
  try {
    header = JSON.parse(json);
  } catch (error) {
    return fail(`the header is not valid JSON (${(error as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) return fail('the header must be a JSON object');
  const metadata: Record<string, string> = {};
  const tensors: TensorInfo[] = [];
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) fail("'__metadata__' must be an object of strings");
      for (const [key, value] of Object.entries(entry as Record<string, unknown>)) {
        if (typeof value !== 'string') fail(`'__metadata__.${key}' must be a string, got ${typeof value}`);
        metadata[key] = value as string;
      }
      continue;
    }
    if (typeof entry !== 'object' || entry === null) return fail(`tensor '${name}': entry must be an object`);
    const { dtype, shape, data_offsets: offsets } = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof dtype !== 'string' || !(dtype in SAFETENSORS_DTYPES)) {
      return fail(`tensor '${name}': unknown dtype ${JSON.stringify(dtype)} (expected one of ${Object.keys(SAFETENSORS_DTYPES).join(', ')})`);
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      return fail(`tensor '${name}': shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) || offsets[0] > offsets[1]) {
      return fail(`tensor '${name}': data_offsets must be [begin, end] with 0 <= begin <= end, got ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    const elementBytes = SAFETENSORS_DTYPES[dtype as SafetensorsDType];
    const numel = (shape as number[]).reduce((a, b) => a * b, 1);
    if (!Number.isSafeInteger(numel * elementBytes) || numel * elementBytes !== end - begin) {
      fail(`tensor '${name}': shape [${(shape as number[]).join(', ')}] of ${dtype} needs ${numel * elementBytes} bytes but data_offsets span ${end - begin}`);
    }
    if (end > dataBytes) fail(`tensor '${name}': data_offsets end at ${end} but the file has only ${dataBytes} bytes of data`);
    tensors.push({ name, dtype: dtype as SafetensorsDType, shape: shape as number[], begin, end });
  }
  // The byte ranges must tile [0, dataBytes) exactly.
  const sorted = [...tensors].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let cursor = 0;
  for (const t of sorted) {
    if (t.begin < cursor) fail(`tensor '${t.name}' overlaps the tensor before it (its data starts at ${t.begin}, before ${cursor})`);
    if (t.begin > cursor) fail(`there are ${t.begin - cursor} unused bytes before tensor '${t.name}' (at ${cursor})`);
    cursor = t.end;
  }
  if (cursor !== dataBytes) fail(`${dataBytes - cursor} bytes of data after the last tensor belong to no tensor`);
  return { tensors, metadata };
}

/** An open safetensors file: the validated header, and each tensor's bytes on request. */
export class SafetensorsReader {
  private readonly byName: Map<string, TensorInfo>;
  private fd: number | null;

  private constructor(readonly path: string, fd: number, readonly tensors: readonly TensorInfo[], readonly metadata: Readonly<Record<string, string>>) {
    this.fd = fd;
    this.byName = new Map(tensors.map((t) => [t.name, t]));
  }

  static open(path: string): SafetensorsReader {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (error) {
      throw new SafetensorsError(`${path}: cannot open (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
    }
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw new SafetensorsError(`${path}: not a file (${stat.isDirectory() ? 'a directory' : 'not a regular file'})`);
      const fileBytes = stat.size;
      if (fileBytes < 8) throw new SafetensorsError(`${path}: ${fileBytes} bytes is too short for a safetensors file (it starts with an 8-byte header length)`);
      const lengthBytes = readExactly(fd, 0, 8, path);
      const headerBytes = Number(new DataView(lengthBytes.buffer, lengthBytes.byteOffset, 8).getBigUint64(0, true));
      if (headerBytes > MAX_HEADER_BYTES) throw new SafetensorsError(`${path}: header length ${headerBytes} exceeds the ${MAX_HEADER_BYTES}-byte limit (not a safetensors file?)`);
      if (8 + headerBytes > fileBytes) throw new SafetensorsError(`${path}: header length ${headerBytes} runs past the end of the ${fileBytes}-byte file`);
      const json = new TextDecoder('utf-8', { fatal: false }).decode(readExactly(fd, 8, headerBytes, path));
      const dataStart = 8 + headerBytes;
      const { tensors, metadata } = parseHeader(json, fileBytes - dataStart, path);
      const absolute = tensors.map((t) => ({ ...t, begin: t.begin + dataStart, end: t.end + dataStart }));
      return new SafetensorsReader(path, fd, absolute, metadata);
    } catch (error) {
      closeSync(fd);
      throw error;
    }
  }

  has(name: string): boolean { return this.byName.has(name); }

  info(name: string): TensorInfo {
    const t = this.byName.get(name);
    if (!t) throw new SafetensorsError(`${this.path}: no tensor named '${name}' (the file has ${this.tensors.length}: ${this.tensors.slice(0, 5).map((x) => x.name).join(', ')}${this.tensors.length > 5 ? ', …' : ''})`);
    return t;
  }

  read(name: string): TensorData {
    const t = this.info(name);
    if (this.fd === null) throw new SafetensorsError(`${this.path}: the reader is closed`);
    return { dtype: t.dtype, shape: t.shape, bytes: readExactly(this.fd, t.begin, t.end - t.begin, this.path) };
  }

  /**
   * The bytes of elements [start, end) of each range of tensor `name` (row-major element indices),
   * concatenated in the order given: a slice of a tensor without reading the rest (a tensor-parallel shard).
   */
  readElements(name: string, ranges: readonly (readonly [number, number])[]): Uint8Array {
    const t = this.info(name);
    if (this.fd === null) throw new SafetensorsError(`${this.path}: the reader is closed`);
    const size = SAFETENSORS_DTYPES[t.dtype], numel = (t.end - t.begin) / size;
    const total = elementRangesTotal(ranges, numel, this.path, name, (message) => new SafetensorsError(message));
    const out = new Uint8Array(total * size);
    let at = 0;
    for (const [start, end] of ranges) {
      const length = (end - start) * size;
      out.set(readExactly(this.fd, t.begin + start * size, length, this.path), at);
      at += length;
    }
    return out;
  }

  /**
   * Tensor `name` (F32, F16 or BF16) as f32 values — all of it, or the element `ranges` of readElements —
   * refusing a NaN or infinity by its index: a checkpoint with one would load and silently compute garbage.
   */
  readFloats(name: string, ranges?: readonly (readonly [number, number])[]): Float32Array {
    const t = this.info(name);
    if (t.dtype !== 'F32' && t.dtype !== 'F16' && t.dtype !== 'BF16') throw new SafetensorsError(`${this.path}: tensor '${name}' is ${t.dtype}; only F32, F16 and BF16 weights are read`);
    return finiteFloats(ranges ? this.readElements(name, ranges) : this.read(name).bytes, t.dtype, `${this.path}: tensor '${name}'`, ranges !== undefined);
  }

  close(): void {
    if (this.fd !== null) { closeSync(this.fd); this.fd = null; }
  }
}

/**
 * A checkpoint tensor's bytes (F32, F16 or BF16) as f32 values, refusing a NaN or infinity by its index
 * (`what` names the file and tensor): a checkpoint with one would load and silently compute garbage.
 */
export function finiteFloats(bytes: Uint8Array, dtype: 'F32' | 'F16' | 'BF16', what: string, partial = false): Float32Array {
  const values = floatsOf(bytes, dtype);
  for (let i = 0; i < values.length; i++) {
    // v - v is 0 for every finite v and NaN for NaN and ±infinity.
    if (values[i]! - values[i]! !== 0) throw new SafetensorsError(`${what} holds ${values[i]} at element ${i}${partial ? ' of the part read' : ''}; a checkpoint's weights must be finite`);
  }
  return values;
}

/** Checkpoint bytes as f32 values; bf16 widens by a shift (exact and fast for multi-GB files). */
function floatsOf(bytes: Uint8Array, dtype: 'F32' | 'F16' | 'BF16'): Float32Array {
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
  if (dtype === 'F32') return new Float32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / 4);
  if (dtype === 'F16') return decodeFloats(aligned, 'f16');
  const halves = new Uint16Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / 2);
  const words = new Uint32Array(halves.length);
  for (let i = 0; i < halves.length; i++) words[i] = halves[i]! << 16;
  return new Float32Array(words.buffer);
}

function readExactly(fd: number, position: number, length: number, path: string): Uint8Array {
  return readFileRange(fd, position, length, path, (message) => new SafetensorsError(message));
}

export interface TensorToWrite {
  name: string;
  dtype: SafetensorsDType;
  shape: readonly number[];
  bytes: Uint8Array;
}

/**
 * Writes tensors (in the given order) and metadata to `path` atomically: a temporary file beside it,
 * then a rename, so an interrupted write never leaves a truncated file under the real name.
 * The header is padded with spaces to a multiple of 8 bytes so the data starts aligned.
 */
export function writeSafetensors(path: string, tensors: readonly TensorToWrite[], metadata: Readonly<Record<string, string>> = {}): void {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  const seen = new Set<string>();
  for (const t of tensors) {
    if (typeof t.name !== 'string') throw new SafetensorsError(`${path}: a tensor name must be a string, got ${typeof t.name} ${String(t.name)}`);
    if (t.name === '__metadata__' || seen.has(t.name)) throw new SafetensorsError(`${path}: tensor name '${t.name}' is reserved or repeated`);
    seen.add(t.name);
    if (!Object.hasOwn(SAFETENSORS_DTYPES, t.dtype)) throw new SafetensorsError(`${path}: tensor '${t.name}' has dtype ${JSON.stringify(t.dtype)}; expected one of ${Object.keys(SAFETENSORS_DTYPES).join(', ')}`);
    if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new SafetensorsError(`${path}: tensor '${t.name}' has shape ${JSON.stringify(t.shape)}; expected an array of non-negative integers`);
    if (!(t.bytes instanceof Uint8Array)) throw new SafetensorsError(`${path}: tensor '${t.name}': bytes must be a Uint8Array`);
    const numel = t.shape.reduce((a, b) => a * b, 1);
    const expected = numel * SAFETENSORS_DTYPES[t.dtype];
    if (t.bytes.byteLength !== expected) {
      throw new SafetensorsError(`${path}: tensor '${t.name}' of shape [${t.shape.join(', ')}] ${t.dtype} needs ${expected} bytes, got ${t.bytes.byteLength}`);
    }
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + expected] };
    offset += expected;
  }
  let json = JSON.stringify(header);
  // The reader's own checks (metadata values are strings, and the rest), so nothing is written it would refuse.
  parseHeader(json, offset, path);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const headerBytes = Buffer.from(json, 'utf8');
  const lengthBytes = Buffer.alloc(8);
  lengthBytes.writeBigUInt64LE(BigInt(headerBytes.byteLength));
  writeFileAtomically(path, [lengthBytes, headerBytes, ...tensors.map((t) => t.bytes)]);
}
