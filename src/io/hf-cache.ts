// `--model openai-community/gpt2`: a Hugging Face repository id resolved to its snapshot in the local
// Hugging Face cache — the files `hf download`, transformers or any huggingface_hub client already fetched.
// fuseformer downloads nothing; an id that is not in the cache is an error saying where it looked and how
// to get it.
//
// The cache layout (huggingface_hub's): <hub>/models--<org>--<name>/refs/<revision> holds a commit hash,
// <hub>/models--<org>--<name>/snapshots/<commit>/ the files of that commit (links into blobs/). <hub> is
// $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub. A revision is given as `id@revision` (a branch or tag name, or a commit hash);
// the default is main.

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ArgumentError } from '../errors.js';

/** org/name or name (legacy ids such as gpt2), optionally @revision. */
const REPO_ID = /^(?:[A-Za-z0-9][\w.-]*\/)?[A-Za-z0-9][\w.-]*(?:@[\w./-]+)?$/;
const COMMIT = /^[0-9a-f]{40}$/;

/** The hub cache directory the environment names (see the file comment for the order). */
export function hubCacheDirectory(env: NodeJS.ProcessEnv = process.env): string {
  if (env['HF_HUB_CACHE']) return env['HF_HUB_CACHE'];
  if (env['HUGGINGFACE_HUB_CACHE']) return env['HUGGINGFACE_HUB_CACHE'];
  const home = env['HF_HOME'] || join(env['XDG_CACHE_HOME'] || join(homedir(), '.cache'), 'huggingface');
  return join(home, 'hub');
}

/**
 * `spec` itself where it exists (a directory or file path), else the cached snapshot of the repository id
 * it names. `flag` names the option in errors.
 */
export function resolveModelDirectory(spec: string, flag = '--model', env: NodeJS.ProcessEnv = process.env): string {
  if (existsSync(spec)) return spec;
  if (!REPO_ID.test(spec) || spec.includes('..')) throw new ArgumentError(`${flag}: '${spec}' does not exist`);
  const at = spec.indexOf('@');
  const repo = at < 0 ? spec : spec.slice(0, at), revision = at < 0 ? 'main' : spec.slice(at + 1);
  const hub = hubCacheDirectory(env);
  const repoDir = join(hub, `models--${repo.replaceAll('/', '--')}`);
  const notCached = (why: string): never => {
    throw new ArgumentError(`${flag}: '${spec}' is neither a directory nor a repository in the Hugging Face cache (${why}); fuseformer does not download models: fetch it first, e.g. \`hf download ${repo}${at < 0 ? '' : ` --revision ${revision}`}\`, or give the directory it is in`);
  };
  if (!isDirectory(repoDir)) notCached(`no ${repoDir}`);
  const snapshots = join(repoDir, 'snapshots');
  let commit: string;
  if (COMMIT.test(revision)) {
    commit = revision;
  } else {
    const ref = join(repoDir, 'refs', revision);
    if (existsSync(ref)) {
      commit = readFileSync(ref, 'utf8').trim();
      if (!COMMIT.test(commit)) throw new ArgumentError(`${flag}: ${ref} holds '${commit.slice(0, 60)}', not a commit hash`);
    } else {
      // A cache copied without its refs: the only snapshot, if the default revision was asked for.
      const only = isDirectory(snapshots) ? readdirSync(snapshots).filter((d) => COMMIT.test(d)) : [];
      if (at >= 0 || only.length !== 1) notCached(`${repoDir} has no refs/${revision}${only.length > 1 ? ` (snapshots: ${only.join(', ')}; name one as ${repo}@<commit>)` : ''}`);
      commit = only[0]!;
    }
  }
  const snapshot = join(snapshots, commit);
  if (!isDirectory(snapshot)) notCached(`no snapshot ${snapshot}`);
  return snapshot;
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
