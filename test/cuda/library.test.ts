import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import koffi from 'koffi';
import type { LibraryHandle } from 'koffi';
import {
  cudaIncludeDirs, cudaRoots, findLibrary, includeDirBeside, librarySearchDirs, mappedLibraryPath, type LibraryLoader,
} from '../../src/cuda/library.js';
import { LibraryNotFoundError } from '../../src/errors.js';

const fakeHandle = {} as LibraryHandle;

/** A loader over an imaginary file system: `files` exist; `loadable` load (plain names included). */
function fakeLoader(files: string[], loadable: string[] = files): LibraryLoader & { attempts: string[] } {
  const attempts: string[] = [];
  return {
    attempts,
    exists: (path) => files.includes(path),
    list: (dir) => files.filter((f) => f.startsWith(`${dir}/`)).map((f) => f.slice(dir.length + 1)),
    load: (pathOrName) => {
      attempts.push(pathOrName);
      if (!loadable.includes(pathOrName)) throw new Error(`cannot open ${pathOrName}`);
      return fakeHandle;
    },
  };
}

test('search directories: FUSEFORMER_CUDA_PATH entries, CUDA_HOME, /usr/local/cuda, then the multiarch dir', () => {
  const dirs = librarySearchDirs({ FUSEFORMER_CUDA_PATH: '/a:/b', CUDA_HOME: '/c' }, 'x64');
  assert.deepEqual(dirs, [
    '/a', '/a/lib64', '/a/lib', '/a/targets/x86_64-linux/lib',
    '/b', '/b/lib64', '/b/lib', '/b/targets/x86_64-linux/lib',
    '/c', '/c/lib64', '/c/lib', '/c/targets/x86_64-linux/lib',
    '/usr/local/cuda', '/usr/local/cuda/lib64', '/usr/local/cuda/lib', '/usr/local/cuda/targets/x86_64-linux/lib',
    '/usr/lib/x86_64-linux-gnu',
  ]);
  assert.deepEqual(librarySearchDirs({}, 'arm64').slice(-2), ['/usr/local/cuda/targets/sbsa-linux/lib', '/usr/lib/aarch64-linux-gnu']);
  assert.deepEqual(cudaRoots({ CUDA_HOME: '/usr/local/cuda' }), ['/usr/local/cuda'], 'duplicates are removed');
  assert.deepEqual(cudaIncludeDirs({ CUDA_HOME: '/c' }, 'x64').slice(0, 2), ['/c/include', '/c/targets/x86_64-linux/include']);
});

test('the first directory with the library wins, newest version first within a directory', () => {
  const env = { FUSEFORMER_CUDA_PATH: '/a', CUDA_HOME: '/c' };
  const loader = fakeLoader(['/c/lib64/libnvrtc.so.13', '/a/lib64/libnvrtc.so.12', '/a/lib64/libnvrtc.so.13']);
  const found = findLibrary('nvrtc', { env, loader, arch: 'x64' });
  assert.equal(found.path, '/a/lib64/libnvrtc.so.13');
  assert.equal(found.viaLoader, false);
  assert.equal(includeDirBeside(found), '/a/include');
});

test('NVRTC\'s builtins library of the same major version is loaded first from the same directory', () => {
  const loader = fakeLoader(['/a/libnvrtc.so.13', '/a/libnvrtc-builtins.so.13.0', '/a/libnvrtc-builtins.so.12.8', '/a/libnvrtc-builtins.so']);
  const found = findLibrary('nvrtc', { env: { FUSEFORMER_CUDA_PATH: '/a' }, loader, arch: 'x64' });
  assert.equal(found.path, '/a/libnvrtc.so.13');
  assert.deepEqual(loader.attempts, ['/a/libnvrtc-builtins.so.13.0', '/a/libnvrtc.so.13']);
});

test('a file that exists but fails to load is skipped, then the dynamic loader is tried', () => {
  const loader = fakeLoader(['/a/libcuda.so.1'], ['libcuda.so.1']);
  const found = findLibrary('cuda', { env: { FUSEFORMER_CUDA_PATH: '/a' }, loader, arch: 'x64' });
  assert.equal(found.path, 'libcuda.so.1');
  assert.equal(found.viaLoader, true);
  assert.deepEqual(loader.attempts, ['/a/libcuda.so.1', 'libcuda.so.1']);
  assert.equal(includeDirBeside(found), null);
});

test('nothing found: the error names the library, every place tried, what to install, and the CPU fallback', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-lib-'));
  try {
    // A file with the right name that is not a shared library: found, fails to load, reported.
    writeFileSync(join(dir, 'libnvrtc.so.13'), 'not an ELF file');
    const loader: LibraryLoader = {
      exists: (path) => path.startsWith(dir) && existsSync(path),
      list: () => [],
      load: (pathOrName) => {
        if (!pathOrName.startsWith('/')) throw new Error(`${pathOrName}: cannot open shared object file (test loader)`);
        return koffi.load(pathOrName);
      },
    };
    const env = { FUSEFORMER_CUDA_PATH: dir, CUDA_HOME: join(dir, 'toolkit') };
    assert.throws(() => findLibrary('nvrtc', { env, loader, arch: 'x64' }), (err: unknown) => {
      assert.ok(err instanceof LibraryNotFoundError);
      const m = err.message;
      assert.match(m, /NVRTC/);
      assert.ok(m.includes(`${join(dir, 'libnvrtc.so.13')}: found but failed to load`), m);
      assert.ok(m.includes(`${join(dir, 'lib64')}/{libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so}: not found`), m);
      assert.ok(m.includes(join(dir, 'toolkit', 'targets', 'x86_64-linux', 'lib')), m);
      assert.ok(m.includes('/usr/local/cuda/lib64'), m);
      assert.ok(m.includes('/usr/lib/x86_64-linux-gnu'), m);
      for (const name of ['libnvrtc.so.13', 'libnvrtc.so.12', 'libnvrtc.so']) assert.ok(m.includes(`${name} through the dynamic loader`), m);
      assert.match(m, /Install the CUDA toolkit/);
      assert.match(m, /CPU backend/);
      return true;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a missing driver library asks for the NVIDIA driver', () => {
  assert.throws(() => findLibrary('cuda', { env: {}, loader: fakeLoader([]), arch: 'x64' }),
    (err: unknown) => err instanceof LibraryNotFoundError && /NVIDIA driver/.test(err.message) && /libcuda\.so\.1 through the dynamic loader/.test(err.message));
});

test('mappedLibraryPath finds the real file behind a loader-resolved name', () => {
  const maps = [
    '7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcudart.so.13.0.1',
    '7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.03',
    '7f04-7f05 rw-p 00000000 00:00 0 [heap]',
  ].join('\n');
  assert.equal(mappedLibraryPath('libcuda.so', maps), '/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.03');
  assert.equal(mappedLibraryPath('libnvrtc.so', maps), null);
});
