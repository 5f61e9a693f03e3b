// Checks on a directory a command is about to write, made before the command does any work: an
// unusable path should fail in a second with a message naming the option, not after an hour of
// quantizing with an EEXIST stack trace — and a directory the user keeps must never be replaced.

import { existsSync, mkdtempSync, readdirSync, rmdirSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { ArgumentError } from '../errors.js';

/**
 * `path` can be created or written as a directory: it is one already, or its nearest existing ancestor
 * is a writable directory. `option` names the flag in the error (e.g. '--out').
 */
export function checkOutputDirectory(path: string, option: string): void {
  if (path.trim() === '') throw new ArgumentError(`${option}: the path is empty`);
  if (existsSync(path)) {
    if (!statSync(path).isDirectory()) throw new ArgumentError(`${option}: '${path}' exists and is not a directory`);
    assertWritable(path, option, path);
    return;
  }
  let ancestor = dirname(resolve(path));
  while (!existsSync(ancestor)) ancestor = dirname(ancestor);
  if (!statSync(ancestor).isDirectory()) throw new ArgumentError(`${option}: '${path}' cannot be created: '${ancestor}' is a file, not a directory`);
  assertWritable(ancestor, option, path);
}

/**
 * A directory can be created in `dir`: probed by creating (and removing) one, not by access(2) alone —
 * root passes every permission check, yet cannot create in /proc or on a read-only mount (where Node's
 * recursive mkdir even loops forever on /proc's ENOENT).
 */
function assertWritable(dir: string, option: string, path: string): void {
  let probe: string;
  try {
    probe = mkdtempSync(join(dir, '.fuseformer-probe-'));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'EACCES' || code === 'EPERM' ? `no write permission on '${dir}'`
      : code === 'EROFS' ? `'${dir}' is on a read-only file system`
      : `a directory cannot be created in '${dir}' (${code ?? String(e)})`;
    throw new ArgumentError(`${option}: '${path}' is not writable (${why})`);
  }
  rmdirSync(probe);
}

/** `inner` is `outer` or lies inside it. */
export function isSameOrInside(inner: string, outer: string): boolean {
  const rel = relative(resolve(outer), resolve(inner));
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

export interface ReplaceableDirectoryOptions {
  /** The flag that names the directory, for errors. */
  readonly option: string;
  /** Directories the output must not be, nor contain (the input model: replacing it would delete it). */
  readonly inputs: readonly { readonly path: string; readonly option: string }[];
  /** An existing directory this command may replace (e.g. an earlier output of the same command). */
  readonly replaceable: (dir: string) => boolean;
  /** What `replaceable` accepts, for the error. */
  readonly replaceableWhat: string;
}

/**
 * A directory that will be written whole and swapped in (written beside it, then renamed over it): it
 * may not exist yet, be empty, or be `replaceable`; it may never be an input or contain one. Anything
 * else — a directory of the user's files — is refused, since the swap would delete it.
 */
export function checkReplaceableDirectory(path: string, o: ReplaceableDirectoryOptions): void {
  checkOutputDirectory(path, o.option);
  for (const input of o.inputs) {
    if (isSameOrInside(input.path, path)) {
      throw new ArgumentError(`${o.option}: '${path}' ${resolve(path) === resolve(input.path) ? 'is' : 'contains'} the ${input.option} directory '${input.path}'; writing it would delete that model — choose another directory`);
    }
  }
  if (!existsSync(path) || readdirSync(path).length === 0 || o.replaceable(path)) return;
  throw new ArgumentError(`${o.option}: '${path}' exists and is not empty, and is not ${o.replaceableWhat}; it would be replaced whole — choose a new or empty directory`);
}
