// The table of contents of a ZIP archive, read from its central directory, and each entry's bytes on
// request — what a PyTorch checkpoint (torch.save since 1.6: an uncompressed ZIP of a pickle and one
// file per tensor storage) needs, with every offset and size checked against the file.
//
// Layout read (APPNOTE 6.3): the end-of-central-directory record (EOCD, signature 0x06054b50) within the
// last 65,557 bytes; for archives past 4 GiB or 65,535 entries a ZIP64 EOCD locator (0x07064b50) just before
// it points at the ZIP64 EOCD record (0x06064b50). Central-directory headers (0x02014b50) give each entry's
// name, method, sizes and local-header offset; values of 0xFFFFFFFF are in the ZIP64 extra field
// (id 0x0001, in the order uncompressed size, compressed size, local offset). An entry's data starts after
// its local header (0x04034b50), whose name and extra lengths may differ from the central copy (PyTorch pads
// the local extra field so that every storage starts on a 64-byte boundary).
// Stored entries are read in place (a tensor's bytes at a file offset, however large the archive);
// deflated ones are inflated whole by zlib on request.

import { closeSync, fstatSync, openSync } from 'node:fs';
import { inflateRawSync } from 'node:zlib';
import { FuseformerError } from '../errors.js';
import { readFileRange } from './file-range.js';

export class ZipError extends FuseformerError {}

export interface ZipEntry {
  readonly name: string;
  /** 0 stored, 8 deflated; anything else is refused when read. */
  readonly method: number;
  readonly compressedSize: number;
  readonly size: number;
  readonly localHeaderOffset: number;
}

const EOCD = 0x06054b50, ZIP64_LOCATOR = 0x07064b50, ZIP64_EOCD = 0x06064b50, CENTRAL = 0x02014b50, LOCAL = 0x04034b50;
/** The EOCD record is 22 bytes plus a comment of at most 65,535. */
const EOCD_SEARCH = 22 + 0xffff;
/** A central directory larger than this is refused before allocating (a 7B model's has ~300 KB). */
const MAX_DIRECTORY_BYTES = 256 * 2 ** 20;

export class ZipArchive {
  private readonly byName: Map<string, ZipEntry>;
  private fd: number | null;

  private constructor(readonly path: string, fd: number, readonly fileBytes: number, readonly entries: readonly ZipEntry[]) {
    this.fd = fd;
    this.byName = new Map(entries.map((e) => [e.name, e]));
  }

  static open(path: string): ZipArchive {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (error) {
      throw new ZipError(`${path}: cannot open (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
    }
    try {
      const fileBytes = fstatSync(fd).size;
      return new ZipArchive(path, fd, fileBytes, readDirectory(fd, fileBytes, path));
    } catch (error) {
      closeSync(fd);
      throw error;
    }
  }

  entry(name: string): ZipEntry | undefined { return this.byName.get(name); }

  /** The absolute file offset of a stored entry's first byte (its local header checked). */
  dataOffset(entry: ZipEntry): number {
    const header = this.readAt(entry.localHeaderOffset, 30);
    const view = new DataView(header.buffer, header.byteOffset, 30);
    if (view.getUint32(0, true) !== LOCAL) throw new ZipError(`${this.path}: entry '${entry.name}' has no local header at offset ${entry.localHeaderOffset}`);
    const start = entry.localHeaderOffset + 30 + view.getUint16(26, true) + view.getUint16(28, true);
    if (start + entry.compressedSize > this.fileBytes) throw new ZipError(`${this.path}: entry '${entry.name}' (${entry.compressedSize} bytes at ${start}) runs past the end of the ${this.fileBytes}-byte file`);
    return start;
  }

  /** An entry's whole content, inflated if deflated. */
  read(entry: ZipEntry): Uint8Array {
    const raw = this.readAt(this.dataOffset(entry), entry.compressedSize);
    if (entry.method === 0) return raw;
    if (entry.method !== 8) throw new ZipError(`${this.path}: entry '${entry.name}' uses compression method ${entry.method}; only stored (0) and deflated (8) entries are read`);
    let inflated: Buffer;
    try {
      inflated = inflateRawSync(raw);
    } catch (error) {
      throw new ZipError(`${this.path}: entry '${entry.name}' does not inflate (${(error as Error).message})`);
    }
    if (inflated.length !== entry.size) throw new ZipError(`${this.path}: entry '${entry.name}' inflates to ${inflated.length} bytes, its header says ${entry.size}`);
    // A plain Uint8Array: a Buffer's slice() is a view, not the copy callers expect of a Uint8Array.
    return new Uint8Array(inflated.buffer, inflated.byteOffset, inflated.length);
  }

  /** `length` bytes at absolute offset `position`, checked against the file's end. */
  readAt(position: number, length: number): Uint8Array {
    if (this.fd === null) throw new ZipError(`${this.path}: the archive is closed`);
    return readExactly(this.fd, position, length, this.fileBytes, this.path);
  }

  close(): void {
    if (this.fd !== null) { closeSync(this.fd); this.fd = null; }
  }
}

/** Whether the first bytes are a ZIP local header ("PK\x03\x04"). */
export function looksLikeZip(head: Uint8Array): boolean {
  return head.length >= 4 && head[0] === 0x50 && head[1] === 0x4b && head[2] === 0x03 && head[3] === 0x04;
}

function readDirectory(fd: number, fileBytes: number, path: string): ZipEntry[] {
  const fail = (message: string): never => { throw new ZipError(`${path}: ${message}`); };
  const tailBytes = Math.min(fileBytes, EOCD_SEARCH);
  const tail = readExactly(fd, fileBytes - tailBytes, tailBytes, fileBytes, path);
  const tailView = new DataView(tail.buffer, tail.byteOffset, tail.byteLength);
  let at = -1;
  for (let i = tailBytes - 22; i >= 0; i--) {
    if (tailView.getUint32(i, true) === EOCD && i + 22 + tailView.getUint16(i + 20, true) <= tailBytes) { at = i; break; }
  }
  if (at < 0) fail('not a ZIP archive (no end-of-central-directory record)');
  let count = tailView.getUint16(at + 10, true);
  let directoryBytes = tailView.getUint32(at + 12, true);
  let directoryOffset = tailView.getUint32(at + 16, true);
  if (count === 0xffff || directoryBytes === 0xffffffff || directoryOffset === 0xffffffff) {
    // ZIP64: the locator sits in the 20 bytes before the EOCD record.
    if (at < 20 || tailView.getUint32(at - 20, true) !== ZIP64_LOCATOR) fail('a ZIP64 archive without its ZIP64 locator');
    const recordOffset = safeNumber(tailView.getBigUint64(at - 20 + 8, true), 'ZIP64 record offset', path);
    const record = readExactly(fd, recordOffset, 56, fileBytes, path);
    const view = new DataView(record.buffer, record.byteOffset, 56);
    if (view.getUint32(0, true) !== ZIP64_EOCD) fail(`no ZIP64 end-of-central-directory record at offset ${recordOffset}`);
    count = safeNumber(view.getBigUint64(32, true), 'entry count', path);
    directoryBytes = safeNumber(view.getBigUint64(40, true), 'central directory size', path);
    directoryOffset = safeNumber(view.getBigUint64(48, true), 'central directory offset', path);
  }
  if (directoryBytes > MAX_DIRECTORY_BYTES) fail(`a central directory of ${directoryBytes} bytes exceeds the ${MAX_DIRECTORY_BYTES}-byte limit`);
  if (directoryOffset + directoryBytes > fileBytes) fail(`the central directory (${directoryBytes} bytes at ${directoryOffset}) runs past the end of the ${fileBytes}-byte file`);
  const directory = readExactly(fd, directoryOffset, directoryBytes, fileBytes, path);
  const view = new DataView(directory.buffer, directory.byteOffset, directory.byteLength);
  const names = new TextDecoder('utf-8');
  const entries: ZipEntry[] = [];
  let p = 0;
  for (let i = 0; i < count; i++) {
    if (p + 46 > directoryBytes || view.getUint32(p, true) !== CENTRAL) fail(`central directory entry ${i} of ${count} is malformed (at byte ${directoryOffset + p})`);
    const method = view.getUint16(p + 10, true);
    let compressedSize = view.getUint32(p + 20, true), size = view.getUint32(p + 24, true);
    const nameLength = view.getUint16(p + 28, true), extraLength = view.getUint16(p + 30, true), commentLength = view.getUint16(p + 32, true);
    let localHeaderOffset = view.getUint32(p + 42, true);
    const end = p + 46 + nameLength + extraLength + commentLength;
    if (end > directoryBytes) fail(`central directory entry ${i} runs past the directory's end`);
    const name = names.decode(directory.subarray(p + 46, p + 46 + nameLength));
    // ZIP64 extra field: only the fields whose 32-bit value is saturated are present, in this order.
    for (let e = p + 46 + nameLength; e + 4 <= p + 46 + nameLength + extraLength;) {
      const id = view.getUint16(e, true), length = view.getUint16(e + 2, true);
      if (id === 0x0001) {
        let f = e + 4;
        const next = (what: string): number => {
          if (f + 8 > e + 4 + length) fail(`entry '${name}': its ZIP64 extra field lacks the ${what}`);
          const value = safeNumber(view.getBigUint64(f, true), what, path);
          f += 8;
          return value;
        };
        if (size === 0xffffffff) size = next('uncompressed size');
        if (compressedSize === 0xffffffff) compressedSize = next('compressed size');
        if (localHeaderOffset === 0xffffffff) localHeaderOffset = next('local header offset');
      }
      e += 4 + length;
    }
    if (localHeaderOffset + 30 > fileBytes) fail(`entry '${name}' has its local header at ${localHeaderOffset}, past the end of the ${fileBytes}-byte file`);
    entries.push({ name, method, compressedSize, size, localHeaderOffset });
    p = end;
  }
  return entries;
}

function safeNumber(value: bigint, what: string, path: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new ZipError(`${path}: ${what} ${value} is too large`);
  return Number(value);
}

function readExactly(fd: number, position: number, length: number, fileBytes: number, path: string): Uint8Array {
  return readFileRange(fd, position, length, path, (message) => new ZipError(message), fileBytes);
}
