// Element ranges of a tensor checked, and a byte range of an open file read exactly, for the weight-file readers (safetensors.ts, zip-archive.ts,
// torch-checkpoint.ts): in chunks of at most 1 GiB (readSync's limit), a range past `limit` or a file that ends
// early being an error of the caller's class that names the file and the range.

import { readSync } from 'node:fs';

/** `length` bytes at `position` of `fd`; `fail` makes the caller's error from a message that starts with `path`. */
export function readFileRange(fd: number, position: number, length: number, path: string, fail: (message: string) => Error, limit = Infinity): Uint8Array {
  if (position < 0 || length < 0 || position + length > limit) throw fail(`${path}: ${length} bytes at offset ${position} run past the end of the data (${limit} bytes)`);
  const out = new Uint8Array(length);
  for (let done = 0; done < length;) {
    const n = readSync(fd, out, done, Math.min(length - done, 1 << 30), position + done);
    if (n === 0) throw fail(`${path}: the file ended after ${position + done} bytes while reading ${length} bytes at ${position}`);
    done += n;
  }
  return out;
}

/** The element count of `ranges` ([start, end) row-major element indices) of tensor `name` in `path`, each checked to lie in [0, numel]. */
export function elementRangesTotal(ranges: readonly (readonly [number, number])[], numel: number, path: string, name: string, fail: (message: string) => Error): number {
  let total = 0;
  for (const [start, end] of ranges) {
    if (!(Number.isInteger(start) && Number.isInteger(end) && start >= 0 && start <= end && end <= numel)) {
      throw fail(`${path}: elements [${start}, ${end}) of tensor '${name}' are outside its ${numel} elements`);
    }
    total += end - start;
  }
  return total;
}
