// checkOutputDirectory probes by creating a directory: access(2) passes for root where nothing can be
// created (/proc, a read-only mount), and Node's recursive mkdir loops forever on /proc's ENOENT — so
// `train --out /proc/x` hung before the probe.

import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { checkOutputDirectory } from '../../src/io/output-dir.js';

test('a directory under /proc is refused at once, naming the option and why', { skip: !existsSync('/proc/self') && 'no /proc here' }, () => {
  assert.throws(() => checkOutputDirectory('/proc/fuseformer-out', 'train --out'), /train --out: '\/proc\/fuseformer-out' is not writable \(a directory cannot be created in '\/proc' \(ENOENT\)\)/);
  assert.throws(() => checkOutputDirectory('/proc/a/b/c', '--out'), /'\/proc\/a\/b\/c' is not writable/);
});

test('writable paths pass and leave nothing behind; a file in the way and a read-only directory are named', () => {
  const root = mkdtempSync(join(tmpdir(), 'fuseformer-outdir-'));
  try {
    checkOutputDirectory(join(root, 'new', 'deeper'), '--out');
    checkOutputDirectory(root, '--out');
    assert.deepEqual(readdirSync(root), [], 'the probe directory is removed');
    writeFileSync(join(root, 'file'), 'x');
    assert.throws(() => checkOutputDirectory(join(root, 'file'), '--out'), /'.*file' exists and is not a directory/);
    assert.throws(() => checkOutputDirectory(join(root, 'file', 'sub'), '--out'), /cannot be created: '.*file' is a file, not a directory/);
    assert.throws(() => checkOutputDirectory('  ', '--out'), /--out: the path is empty/);
    const locked = join(root, 'locked');
    mkdirSync(locked);
    chmodSync(locked, 0o555);
    // Root writes anywhere its mode bits forbid: only an unprivileged user sees this refusal.
    if (process.getuid?.() !== 0) assert.throws(() => checkOutputDirectory(join(locked, 'out'), '--out'), /not writable \(no write permission on '.*locked'\)/);
    chmodSync(locked, 0o755);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
