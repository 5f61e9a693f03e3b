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
