// `--model org/name[@revision]`: repository ids resolved to snapshots of the local Hugging Face cache,
// laid out as huggingface_hub lays it out (refs/<revision> → snapshots/<commit>), and the errors when one
// is not there.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { hubCacheDirectory, resolveModelDirectory } from '../../src/io/hf-cache.js';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-hf-cache-'));
after(() => rmSync(root, { recursive: true, force: true }));
const hub = join(root, 'hub');
const env = { HF_HUB_CACHE: hub };
const MAIN = 'a'.repeat(40), TAGGED = 'b'.repeat(40);
const MAIN_JS = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** A cached repository: its snapshots (each with a config.json) and refs. */
function cacheRepo(repo: string, snapshots: readonly string[], refs: Record<string, string>): string {
  const dir = join(hub, `models--${repo.replaceAll('/', '--')}`);
  for (const commit of snapshots) {
    mkdirSync(join(dir, 'snapshots', commit), { recursive: true });
    writeFileSync(join(dir, 'snapshots', commit, 'config.json'), '{}');
  }
  for (const [name, commit] of Object.entries(refs)) {
    mkdirSync(join(dir, 'refs', name, '..'), { recursive: true });
    writeFileSync(join(dir, 'refs', name), `${commit}\n`);
  }
  return dir;
}

test('an id resolves to the snapshot its ref names; @revision picks a branch, tag or commit', () => {
  const dir = cacheRepo('acme/tiny', [MAIN, TAGGED], { main: MAIN, 'v1.0': TAGGED });
  assert.equal(resolveModelDirectory('acme/tiny', '--model', env), join(dir, 'snapshots', MAIN));
  assert.equal(resolveModelDirectory('acme/tiny@main', '--model', env), join(dir, 'snapshots', MAIN));
  assert.equal(resolveModelDirectory('acme/tiny@v1.0', '--model', env), join(dir, 'snapshots', TAGGED));
  assert.equal(resolveModelDirectory(`acme/tiny@${TAGGED}`, '--model', env), join(dir, 'snapshots', TAGGED));
  // Legacy ids without an organisation (gpt2, bert-base-uncased).
  const legacy = cacheRepo('gpt2', [MAIN], { main: MAIN });
  assert.equal(resolveModelDirectory('gpt2', '--model', env), join(legacy, 'snapshots', MAIN));
});

test('an existing path is taken as it is, before any cache lookup', () => {
  const local = join(root, 'acme', 'tiny');
  mkdirSync(local, { recursive: true });
  const cwd = process.cwd();
  process.chdir(root);
  try {
    assert.equal(resolveModelDirectory('acme/tiny', '--model', env), 'acme/tiny');
  } finally {
    process.chdir(cwd);
  }
});

test('a cache copied without refs: the only snapshot serves the default revision, several are named', () => {
  const dir = cacheRepo('acme/norefs', [MAIN], {});
  assert.equal(resolveModelDirectory('acme/norefs', '--model', env), join(dir, 'snapshots', MAIN));
  cacheRepo('acme/two', [MAIN, TAGGED], {});
  assert.throws(() => resolveModelDirectory('acme/two', '--model', env), new RegExp(`has no refs/main \\(snapshots: (${MAIN}, ${TAGGED}|${TAGGED}, ${MAIN}); name one as acme/two@<commit>\\)`));
  assert.throws(() => resolveModelDirectory('acme/norefs@dev', '--model', env), /has no refs\/dev\).*`hf download acme\/norefs --revision dev`/);
});

test('what is not cached, or not an id, is refused saying where fuseformer looked and how to get it', () => {
  assert.throws(() => resolveModelDirectory('acme/absent', '--draft', env), (e: Error) => {
    assert.match(e.message, /^--draft: 'acme\/absent' is neither a directory nor a repository in the Hugging Face cache/);
    assert.ok(e.message.includes(join(hub, 'models--acme--absent')), e.message);
    assert.match(e.message, /fuseformer does not download models: fetch it first, e\.g\. `hf download acme\/absent`/);
    return true;
  });
  cacheRepo('acme/dangling', [], { main: MAIN });
  assert.throws(() => resolveModelDirectory('acme/dangling', '--model', env), /no snapshot .*snapshots\/a{40}/);
  cacheRepo('acme/badref', [], { main: 'not a hash' });
  assert.throws(() => resolveModelDirectory('acme/badref', '--model', env), /refs\/main holds 'not a hash', not a commit hash/);
  assert.throws(() => resolveModelDirectory('./no/such dir', '--model', env), /--model: '\.\/no\/such dir' does not exist/);
  assert.throws(() => resolveModelDirectory('acme/../../etc', '--model', env), /does not exist/);
});

test('the cache directory: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME, ~/.cache', () => {
  assert.equal(hubCacheDirectory({ HF_HUB_CACHE: '/a', HUGGINGFACE_HUB_CACHE: '/b', HF_HOME: '/c' }), '/a');
  assert.equal(hubCacheDirectory({ HUGGINGFACE_HUB_CACHE: '/b', HF_HOME: '/c' }), '/b');
  assert.equal(hubCacheDirectory({ HF_HOME: '/c', XDG_CACHE_HOME: '/x' }), '/c/hub');
  assert.equal(hubCacheDirectory({ XDG_CACHE_HOME: '/x' }), '/x/huggingface/hub');
  assert.equal(hubCacheDirectory({}), join(homedir(), '.cache', 'huggingface', 'hub'));
});

test('fuseformer generate --model org/name runs the cached snapshot as it runs the directory', () => {
  const dir = cacheRepo('acme/gpt2-tiny', [MAIN], { main: MAIN });
  const snapshot = join(dir, 'snapshots', MAIN);
  writeModelFolder(snapshot, 'gpt2', TINY_GPT2, 5, { generationConfig: { max_new_tokens: 6 } });
  const run = (model: string) => spawnSync(process.execPath, [MAIN_JS, 'generate', '--model', model, '--prompt', 'hi', '--backend', 'cpu', '--max-tokens', '6'], {
    encoding: 'utf8', env: { ...process.env, HF_HUB_CACHE: hub },
  });
  const direct = run(snapshot);
  assert.equal(direct.status, 0, direct.stderr);
  assert.ok(direct.stdout.startsWith('hi') && direct.stdout.length > 3, direct.stdout);
  const cached = run('acme/gpt2-tiny');
  assert.equal(cached.status, 0, cached.stderr);
  assert.equal(cached.stdout, direct.stdout);
  const absent = run('acme/not-cached');
  assert.notEqual(absent.status, 0);
  assert.match(absent.stderr, /'acme\/not-cached' is neither a directory nor a repository in the Hugging Face cache/);
});
