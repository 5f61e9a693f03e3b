// Scratch model directories for the tokenizer and chat-template tests: files written as given (objects as
// JSON, strings as they are) under one temporary root, removed when the test file ends.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

/** A function writing `files` into a new directory `name` under a temporary root that `after` removes. */
export function scratchModelDirs(prefix: string): (name: string, files: Record<string, object | string>) => string {
  const root = mkdtempSync(join(tmpdir(), prefix));
  after(() => rmSync(root, { recursive: true, force: true }));
  return (name, files) => {
    const dir = join(root, name);
    mkdirSync(dir);
    for (const [file, contents] of Object.entries(files)) {
      writeFileSync(join(dir, file), typeof contents === 'string' ? contents : JSON.stringify(contents));
    }
    return dir;
  };
}
