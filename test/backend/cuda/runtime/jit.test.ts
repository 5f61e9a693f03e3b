import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import {
  compileErrorMessage, debugEnabled, decodeCacheFile, defaultKernelCacheDir, DiskCubinCache, encodeCacheFile, findCudaIncludeDir,
  kernelArch, kernelCacheKey, KernelJit, numberedSource, nvrtcOptions, type CacheKeyParts, type CubinCompiler, type ModuleLoader,
} from '../../../../src/backend/cuda/runtime/jit.js';
import { CudaError, KernelCompileError } from '../../../../src/errors.js';
import { compiledSource, PROGRAMMATIC_PRELUDE } from '../../../../src/backend/cuda/runtime/kernel.js';

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-jit-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Compiles by "encoding" the source; fails when the source contains "error". */
class FakeCompiler implements CubinCompiler {
  readonly version = '13.0';
  compiles = 0;
  compile(source: string, programName: string, options: readonly string[]) {
    this.compiles++;
    if (source.includes('error')) return { ok: false, log: `${programName}(2): error: identifier "error" is undefined`, cubin: null };
    return { ok: true, log: '', cubin: new TextEncoder().encode(`CUBIN[${options.join(' ')}]${source}`) };
  }
}

class FakeLoader implements ModuleLoader {
  loads: string[] = [];
  unloads = 0;
  rejectNext = false;
  load(cubin: Uint8Array): bigint {
    if (this.rejectNext) {
      this.rejectNext = false;
      throw new CudaError('cuModuleLoadData', 200, 'CUDA_ERROR_INVALID_IMAGE');
    }
    this.loads.push(new TextDecoder().decode(cubin));
    return BigInt(this.loads.length);
  }
  getFunction(module: bigint, name: string): bigint {
    if (name === 'mangled') throw new CudaError('cuModuleGetFunction', 500, 'CUDA_ERROR_NOT_FOUND');
    return module * 100n;
  }
  unload(): void {
    this.unloads++;
  }
}

const kernel = { name: 'axpb', source: 'extern "C" __global__ void axpb(float* y) {\n  y[0] = 1.0f;\n}\n' };

test('nvrtc options: the device arch, C++17, -default-device, -I when given; fast math only on request', () => {
  assert.deepEqual(nvrtcOptions('sm_90', null), ['--gpu-architecture=sm_90', '--std=c++17', '-default-device']);
  assert.deepEqual(nvrtcOptions('sm_80', '/usr/local/cuda/include', { fastMath: true, extraOptions: ['-lineinfo'] }),
    ['--gpu-architecture=sm_80', '--std=c++17', '-default-device', '-I/usr/local/cuda/include', '--use_fast_math', '-lineinfo']);
});

test('the cache key changes with each input and is stable otherwise', () => {
  const base: CacheKeyParts = { source: kernel.source, name: 'axpb', options: ['--std=c++17'], arch: 'sm_90', compilerVersion: '13.0' };
  const key = kernelCacheKey(base);
  assert.match(key, /^[0-9a-f]{64}$/);
  assert.equal(kernelCacheKey({ ...base, options: [...base.options] }), key);
  const variants: CacheKeyParts[] = [
    { ...base, source: `${base.source} ` },
    { ...base, name: 'axpb2' },
    { ...base, options: ['--std=c++17', '--use_fast_math'] },
    { ...base, arch: 'sm_80' },
    { ...base, compilerVersion: '12.8' },
  ];
  const keys = variants.map(kernelCacheKey);
  for (const k of keys) assert.notEqual(k, key);
  assert.equal(new Set(keys).size, keys.length);
});

test('numbered source pads line numbers to the widest', () => {
  const source = Array.from({ length: 10 }, (_, i) => `line${i + 1}`).join('\n');
  const numbered = numberedSource(source).split('\n');
  assert.equal(numbered[0], ' 1 | line1');
  assert.equal(numbered[9], '10 | line10');
});

test('a compile error throws KernelCompileError with the log and the numbered source', (t) => {
  const jit = new KernelJit({ compiler: new FakeCompiler(), loader: new FakeLoader(), arch: 'sm_90', includeDir: null, diskCache: new DiskCubinCache(tempDir(t)) });
  const bad = { name: 'broken', source: 'extern "C" __global__ void broken() {\n  error;\n}' };
  assert.throws(() => jit.compile(bad), (err: unknown) => {
    assert.ok(err instanceof KernelCompileError);
    const m = err.message;
    assert.match(m, /kernel 'broken' failed to compile for sm_90 \(NVRTC 13\.0, options: --gpu-architecture=sm_90 --std=c\+\+17 -default-device\)/);
    assert.match(m, /broken\.cu\(2\): error: identifier "error" is undefined/);
    assert.match(m, /\n1 \| extern "C" __global__ void broken\(\) \{\n2 \|   error;\n3 \| \}$/);
    return true;
  });
});

test('a missing header without an include directory points at CUDA_HOME', () => {
  const message = compileErrorMessage({
    name: 'k', key: '0'.repeat(64), arch: 'sm_90', compilerVersion: '13.0', options: ['--gpu-architecture=sm_90'],
    log: 'k.cu(1): catastrophic error: could not open source file "cuda_fp16.h" (no directories in search list)', source: '#include <cuda_fp16.h>',
  });
  assert.match(message, /set CUDA_HOME/);
  assert.doesNotMatch(compileErrorMessage({
    name: 'k', key: '0'.repeat(64), arch: 'sm_90', compilerVersion: '13.0', options: ['-I/usr/local/cuda/include'], log: 'error', source: '',
  }), /CUDA_HOME/);
});

test('disk cache: atomic write leaves one intact file and no temporaries', (t) => {
  const dir = join(tempDir(t), 'nested', 'kernels');
  const cache = new DiskCubinCache(dir);
  const cubin = new Uint8Array([1, 2, 3, 250]);
  cache.write('abc', cubin);
  assert.deepEqual(readdirSync(dir), ['abc.cubin']);
  assert.deepEqual(cache.read('abc'), cubin);
  cache.write('abc', new Uint8Array([9]));
  assert.deepEqual(readdirSync(dir), ['abc.cubin'], 'overwriting renames over the old file');
  assert.deepEqual(cache.read('abc'), new Uint8Array([9]));
  assert.equal(cache.read('missing'), null);
});

test('disk cache: corrupt, truncated or foreign files read as missing and are deleted', (t) => {
  const dir = tempDir(t);
  const cache = new DiskCubinCache(dir);
  const good = encodeCacheFile(new Uint8Array([5, 6, 7, 8]));
  const flipped = Buffer.from(good);
  flipped[flipped.length - 1]! ^= 0xff;
  const cases: [string, Uint8Array][] = [
    ['flipped', flipped],
    ['truncated', good.subarray(0, good.length - 1)],
    ['empty', new Uint8Array(0)],
    ['foreign', new TextEncoder().encode('\x7fELF not our format at all, but long enough to hold a header......')],
  ];
  for (const [key, bytes] of cases) {
    writeFileSync(cache.pathFor(key), bytes);
    assert.equal(cache.read(key), null, key);
  }
  assert.deepEqual(readdirSync(dir), []);
  assert.deepEqual(decodeCacheFile(good), new Uint8Array([5, 6, 7, 8]));
});

test('jit: memory cache within a process, disk cache across processes', (t) => {
  const dir = tempDir(t);
  const compiler = new FakeCompiler();
  const loader = new FakeLoader();
  const config = { compiler, loader, arch: 'sm_90', includeDir: '/cuda/include', diskCache: new DiskCubinCache(dir) };
  const first = new KernelJit(config);
  const a = first.compile(kernel);
  assert.equal(a.origin, 'nvrtc');
  assert.equal(a.name, 'axpb');
  assert.equal(a.function, a.module * 100n);
  assert.equal(first.compile(kernel), a, 'the in-memory cache returns the same kernel');
  assert.equal(compiler.compiles, 1);
  assert.equal(loader.loads.length, 1);
  assert.match(loader.loads[0]!, /-I\/cuda\/include/);

  const second = new KernelJit({ ...config, diskCache: new DiskCubinCache(dir) });
  const b = second.compile(kernel);
  assert.equal(b.origin, 'disk');
  assert.equal(b.key, a.key);
  assert.equal(compiler.compiles, 1, 'no recompile on a disk hit');
  assert.equal(loader.loads[1], loader.loads[0], 'the same CUBIN was loaded');

  assert.notEqual(second.compile(kernel, { fastMath: true }).key, a.key, 'options are part of the key');
  assert.equal(compiler.compiles, 2);
});

test('jit: a corrupt cache file, or one the driver rejects, is recompiled and rewritten', (t) => {
  const dir = tempDir(t);
  const compiler = new FakeCompiler();
  const loader = new FakeLoader();
  const cache = new DiskCubinCache(dir);
  const key = new KernelJit({ compiler, loader, arch: 'sm_90', includeDir: null, diskCache: cache }).compile(kernel).key;
  writeFileSync(cache.pathFor(key), 'garbage');
  const recovered = new KernelJit({ compiler, loader, arch: 'sm_90', includeDir: null, diskCache: cache }).compile(kernel);
  assert.equal(recovered.origin, 'nvrtc');
  assert.equal(compiler.compiles, 2);
  assert.notEqual(cache.read(key), null, 'the file was rewritten');

  loader.rejectNext = true;
  const reloaded = new KernelJit({ compiler, loader, arch: 'sm_90', includeDir: null, diskCache: cache }).compile(kernel);
  assert.equal(reloaded.origin, 'nvrtc');
  assert.equal(compiler.compiles, 3);
});

test('jit: a kernel whose symbol is missing unloads its module and reports the lookup error', () => {
  const loader = new FakeLoader();
  const jit = new KernelJit({ compiler: new FakeCompiler(), loader, arch: 'sm_90', includeDir: null, diskCache: null });
  assert.throws(() => jit.compile({ name: 'mangled', source: 'void mangled() {}' }), /cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND/);
  assert.equal(loader.unloads, 1);
});

test('FUSEFORMER_DEBUG=kernels prints each kernel once, with its name and key', () => {
  const printed: string[] = [];
  const jit = new KernelJit({ compiler: new FakeCompiler(), loader: new FakeLoader(), arch: 'sm_90', includeDir: null, diskCache: null, debug: true, log: (s) => printed.push(s) });
  const compiled = jit.compile(kernel, {}, 'elementwise/axpb');
  jit.compile(kernel);
  assert.equal(printed.length, 1);
  assert.ok(printed[0]!.includes(`kernel 'axpb' [elementwise/axpb] key ${compiled.key}`), printed[0]);
  assert.ok(printed[0]!.includes('1 | extern "C" __global__ void axpb(float* y) {'));
  assert.equal(debugEnabled('kernels', { FUSEFORMER_DEBUG: 'alloc,kernels' }), true);
  assert.equal(debugEnabled('kernels', { FUSEFORMER_DEBUG: 'all' }), true);
  assert.equal(debugEnabled('kernels', { FUSEFORMER_DEBUG: 'alloc' }), false);
  assert.equal(debugEnabled('kernels', {}), false);
});

test('cache directory and include directory defaults', () => {
  assert.equal(defaultKernelCacheDir({ FUSEFORMER_CACHE_DIR: '/x/k' }, '/home/u'), '/x/k');
  assert.equal(defaultKernelCacheDir({ XDG_CACHE_HOME: '/xdg' }, '/home/u'), '/xdg/fuseformer/kernels');
  assert.equal(defaultKernelCacheDir({}, '/home/u'), '/home/u/.cache/fuseformer/kernels');
  const exists = (p: string) => p === '/b/include/cuda_fp16.h';
  assert.equal(findCudaIncludeDir([null, '/a/include', '/b/include'], exists), '/b/include');
  assert.equal(findCudaIncludeDir(['/a/include'], exists), null);
});

test('an unwritable cache directory warns once and does not fail the compile', (t) => {
  const file = join(tempDir(t), 'not-a-dir');
  writeFileSync(file, 'x');
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.message);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const jit = new KernelJit({ compiler: new FakeCompiler(), loader: new FakeLoader(), arch: 'sm_90', includeDir: null, diskCache: new DiskCubinCache(join(file, 'kernels')) });
  assert.equal(jit.compile(kernel).origin, 'nvrtc');
  jit.compile({ name: 'other', source: 'x' });
  assert.equal(readFileSync(file, 'utf8'), 'x');
  return new Promise<void>((resolve) => setImmediate(() => {
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!, /cannot write the kernel cache/);
    resolve();
  }));
});

test('jit: an archSpecific kernel (wgmma) compiles for the device arch with the "a" suffix, under its own key', () => {
  const compiler = new FakeCompiler(), loader = new FakeLoader();
  const jit = new KernelJit({ compiler, loader, arch: 'sm_90', includeDir: null, diskCache: null });
  const plain = jit.compile(kernel);
  const specific = jit.compile({ ...kernel, archSpecific: true });
  assert.match(loader.loads[0]!, /--gpu-architecture=sm_90 /);
  assert.match(loader.loads[1]!, /--gpu-architecture=sm_90a /);
  assert.notEqual(specific.key, plain.key);
  assert.equal(kernelArch('sm_90', {}), 'sm_90');
  assert.equal(kernelArch('sm_90', { archSpecific: true }), 'sm_90a');
});

test('jit: a kernel that may be launched programmatically compiles with __restrict__ defined away (coherent reads of its inputs), under its own key', () => {
  const compiler = new FakeCompiler(), loader = new FakeLoader();
  const jit = new KernelJit({ compiler, loader, arch: 'sm_90', includeDir: null, diskCache: null });
  const source = 'extern "C" __global__ void axpb(const float* __restrict__ x, float* y) {\n  y[0] = x[0];\n}\n';
  const plain = jit.compile({ name: 'axpb', source });
  const waiting = jit.compile({ name: 'axpb', source, gridDependencyWait: true });
  assert.ok(!loader.loads[0]!.includes('#define __restrict__'), 'a kernel launched plainly keeps its qualifiers');
  assert.ok(loader.loads[1]!.includes(`]${PROGRAMMATIC_PRELUDE}${source}`), 'the prelude comes first, the source unchanged after it');
  assert.notEqual(waiting.key, plain.key);
  assert.equal(compiledSource({ source, gridDependencyWait: false }), source);
  assert.equal(compiledSource({ source, gridDependencyWait: true }), PROGRAMMATIC_PRELUDE + source);
  assert.match(PROGRAMMATIC_PRELUDE, /^#define __restrict__\b[^\n]*\n$/);
});
