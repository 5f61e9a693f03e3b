// A text file read as lines, for the commands that take --input FILE (generate's translation, embed).

import { readFileSync } from 'node:fs';
import { ArgumentError } from '../errors.js';

/** The lines of `path` ('-': standard input), without their line ends; a trailing newline ends the last line. */
export function readInputLines(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (error) {
    throw new ArgumentError(`--input: cannot read '${path}': ${(error as Error).message}`);
  }
  const lines = text.split(/\r?\n/);
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}
