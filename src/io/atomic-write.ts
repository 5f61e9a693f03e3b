// Writing a file so that readers only ever see the old content or the complete new content: the bytes
// go to a temporary file beside the target (same directory, so the same filesystem), are flushed to
// disk with fsync, and the temporary file is renamed over the target. POSIX rename is atomic, so a
// crash or a kill mid-write leaves at worst a stray `*.tmp-*` file, never a truncated target.

import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

/** A temporary name beside `path`, unique per process and call. */
export function temporaryPathFor(path: string): string {
  return `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** Writes `data` (bytes or UTF-8 text) to `path` atomically; see the file comment. */
export function writeFileAtomically(path: string, data: Uint8Array | string | readonly Uint8Array[]): void {
  const chunks = typeof data === 'string' ? [Buffer.from(data, 'utf8')] : data instanceof Uint8Array ? [data] : data;
  const temporary = temporaryPathFor(path);
  try {
    const fd = openSync(temporary, 'w');
    try {
      for (const bytes of chunks) {
        for (let done = 0; done < bytes.byteLength;) done += writeSync(fd, bytes, done, bytes.byteLength - done);
      }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, path);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}

/**
 * A file written in pieces with writeFileAtomically's guarantee: the pieces go to a temporary file beside
 * `path`; commit() flushes it and renames it over `path`, abort() removes it (the target untouched).
 */
export class AtomicFileWriter {
  private readonly temporary: string;
  private fd: number | undefined;

  constructor(readonly path: string) {
    this.temporary = temporaryPathFor(path);
    this.fd = openSync(this.temporary, 'w');
  }

  write(data: Uint8Array | string): void {
    if (this.fd === undefined) throw new Error(`${this.path}: written after commit or abort`);
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    for (let done = 0; done < bytes.byteLength;) done += writeSync(this.fd, bytes, done, bytes.byteLength - done);
  }

  commit(): void {
    if (this.fd === undefined) throw new Error(`${this.path}: committed after commit or abort`);
    try {
      fsyncSync(this.fd);
    } finally {
      closeSync(this.fd);
      this.fd = undefined;
    }
    renameSync(this.temporary, this.path);
  }

  abort(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    rmSync(this.temporary, { force: true });
  }
}
