// Run-time compilation of generated kernels: NVRTC → CUBIN for the device's exact architecture →
// cuModuleLoadData, with two caches in front of NVRTC (a compile takes 50–500 ms):
//  - in memory, for the life of the process;
//  - on disk, at $FUSEFORMER_CACHE_DIR (default ~/.cache/fuseformer/kernels), one file per kernel,
//    named by sha256(source, name, options, arch, NVRTC version) so any change recompiles.
// A disk file carries a header with the payload's length and sha256, so a truncated or corrupt file
// is detected, deleted and recompiled; files are written to a temporary name and renamed into place,
// so a reader never sees half a file even with several processes sharing the directory.
//
// We compile to CUBIN (machine code), not PTX: no driver JIT at load time, and a CUBIN from a newer
// NVRTC of the same major version loads on an older driver, where PTX would not.

import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { CudaError, KernelCompileError } from '../../../errors.js';
import { compiledSource, type KernelSource } from './kernel.js';

export interface JitOptions {
  /** --use_fast_math (approximate division, sqrt, exp; flush denormals). Off unless a kernel asks. */
  fastMath?: boolean;
  /** More NVRTC options, appended as given. */
  extraOptions?: readonly string[];
}

/** Compiles CUDA C to a CUBIN; the Nvrtc binding implements it, tests use fakes. */
export interface CubinCompiler {
  /** The compiler's version ("13.0"), part of the cache key. */
  readonly version: string;
  compile(source: string, programName: string, options: readonly string[]): { ok: boolean; log: string; cubin: Uint8Array | null };
}

/** Loads a CUBIN into the current context; throws CudaError when the image is unusable. */
export interface ModuleLoader {
  load(cubin: Uint8Array): bigint;
  getFunction(module: bigint, name: string): bigint;
  unload(module: bigint): void;
}

export interface JitKernel {
  readonly name: string;
  readonly key: string;
  readonly module: bigint;
  /** The CUfunction handle. */
  readonly function: bigint;
  /** Where the code came from when this process first asked for it. */
  readonly origin: 'disk' | 'nvrtc';
}

// --- pure parts -----------------------------------------------------------------------------------

/** The architecture a kernel compiles for: the device's, with the "a" suffix for sm_90a-only code (wgmma). */
export function kernelArch(deviceArch: string, kernel: Pick<KernelSource, 'archSpecific'>): string {
  return kernel.archSpecific === true ? `${deviceArch}a` : deviceArch;
}

/** The NVRTC options for `arch` (e.g. "sm_90"). */
export function nvrtcOptions(arch: string, includeDir: string | null, options: JitOptions = {}): string[] {
  const result = [`--gpu-architecture=${arch}`, '--std=c++17', '-default-device'];
  if (includeDir !== null) result.push(`-I${includeDir}`);
  if (options.fastMath) result.push('--use_fast_math');
  result.push(...(options.extraOptions ?? []));
  return result;
}

export interface CacheKeyParts {
  source: string;
  name: string;
  options: readonly string[];
  arch: string;
  compilerVersion: string;
}

/** Bumped when the disk format or the meaning of a key changes. */
const CACHE_FORMAT = 1;

export function kernelCacheKey(parts: CacheKeyParts): string {
  const canonical = JSON.stringify([CACHE_FORMAT, parts.name, parts.arch, parts.compilerVersion, parts.options, parts.source]);
  return createHash('sha256').update(canonical).digest('hex');
}

/** The source with right-aligned line numbers, matching NVRTC's "name.cu(LINE)" messages. */
export function numberedSource(source: string): string {
  const lines = source.split('\n');
  const width = String(lines.length).length;
  return lines.map((line, i) => `${String(i + 1).padStart(width)} | ${line}`).join('\n');
}

export function compileErrorMessage(args: {
  name: string; key: string; arch: string; compilerVersion: string; options: readonly string[]; log: string; source: string;
}): string {
  const missingHeaders = /could not open source file/.test(args.log) && !args.options.some((o) => o.startsWith('-I'))
    ? 'No CUDA include directory was found: set CUDA_HOME (or FUSEFORMER_CUDA_PATH) to a CUDA toolkit that has include/cuda_fp16.h.\n'
    : '';
  return `kernel '${args.name}' failed to compile for ${args.arch} (NVRTC ${args.compilerVersion}, options: ${args.options.join(' ')}):\n` +
    `${args.log || '(NVRTC gave no log)'}\n${missingHeaders}` +
    `--- generated source of '${args.name}' (cache key ${args.key.slice(0, 16)}) ---\n${numberedSource(args.source)}`;
}

/** The kernel cache directory: $FUSEFORMER_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache, under fuseformer/kernels. */
export function defaultKernelCacheDir(env: NodeJS.ProcessEnv = process.env, home: string = homedir()): string {
  const explicit = env['FUSEFORMER_CACHE_DIR'];
  if (explicit) return explicit;
  return join(env['XDG_CACHE_HOME'] || join(home, '.cache'), 'fuseformer', 'kernels');
}

/** True when FUSEFORMER_DEBUG names `topic` (a comma- or space-separated list; "all" names everything). */
export function debugEnabled(topic: string, env: NodeJS.ProcessEnv = process.env): boolean {
  const topics = (env['FUSEFORMER_DEBUG'] ?? '').split(/[\s,]+/).filter((t) => t.length > 0);
  return topics.includes(topic) || topics.includes('all');
}

// --- disk cache -----------------------------------------------------------------------------------

const MAGIC = Buffer.from('FFCUBIN1', 'latin1');
const HEADER_BYTES = MAGIC.length + 4 + 32;

/** CUBIN files keyed by cache key. Reads never throw; a bad file is deleted and reported missing. */
export class DiskCubinCache {
  private writeFailed = false;

  constructor(readonly dir: string) {}

  pathFor(key: string): string {
    return join(this.dir, `${key}.cubin`);
  }

  read(key: string): Uint8Array | null {
    const path = this.pathFor(key);
    let file: Buffer;
    try {
      file = readFileSync(path);
    } catch {
      return null;
    }
    const payload = decodeCacheFile(file);
    if (payload === null) removeQuietly(path);
    return payload;
  }

  /** Atomic: written to a unique temporary file, then renamed over the final name. */
  write(key: string, cubin: Uint8Array): void {
    if (this.writeFailed) return;
    const path = this.pathFor(key);
    const temp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      mkdirSync(this.dir, { recursive: true });
      writeFileSync(temp, encodeCacheFile(cubin));
      renameSync(temp, path);
    } catch (err) {
      removeQuietly(temp);
      // The cache only saves time; a read-only or full disk must not stop the program.
      this.writeFailed = true;
      process.emitWarning(`fuseformer: cannot write the kernel cache in ${this.dir} (${err instanceof Error ? err.message : String(err)}); kernels will be recompiled in every process`);
    }
  }
}

function removeQuietly(path: string): void {
  try {
    rmSync(path, { force: true });
  } catch {
    // Nothing to clean up, or no right to: either way the cache stays usable.
  }
}

export function encodeCacheFile(cubin: Uint8Array): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  MAGIC.copy(header, 0);
  header.writeUInt32LE(cubin.byteLength, MAGIC.length);
  createHash('sha256').update(cubin).digest().copy(header, MAGIC.length + 4);
  return Buffer.concat([header, cubin]);
}

/** The CUBIN in a cache file, or null if the file is not a complete, intact cache file. */
export function decodeCacheFile(file: Uint8Array): Uint8Array | null {
  const buffer = Buffer.from(file.buffer, file.byteOffset, file.byteLength);
  if (buffer.length < HEADER_BYTES || !buffer.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  const length = buffer.readUInt32LE(MAGIC.length);
  if (buffer.length !== HEADER_BYTES + length) return null;
  const payload = buffer.subarray(HEADER_BYTES);
  const digest = createHash('sha256').update(payload).digest();
  if (!digest.equals(buffer.subarray(MAGIC.length + 4, HEADER_BYTES))) return null;
  return new Uint8Array(payload);
}

// --- the compiler with its caches -----------------------------------------------------------------

export interface KernelJitConfig {
  compiler: CubinCompiler;
  loader: ModuleLoader;
  /** "sm_90". */
  arch: string;
  /**
   * Passed as -I when not null. NVRTC 13 has no built-in cuda_fp16.h/cuda_bf16.h (seen on the H200
   * machine: "could not open source file cuda_fp16.h" without -I), so kernels need the toolkit's.
   */
  includeDir: string | null;
  /** Null disables the disk cache. */
  diskCache: DiskCubinCache | null;
  /** Print each kernel's source when first compiled (FUSEFORMER_DEBUG=kernels). */
  debug?: boolean;
  log?: (text: string) => void;
}

/** What a KernelJit has done so far: kernels compiled by NVRTC, read from the disk cache, and the host ms both took. */
export interface JitStats {
  compiled: number;
  fromDisk: number;
  ms: number;
}

export class KernelJit {
  private readonly loaded = new Map<string, JitKernel>();
  readonly stats: JitStats = { compiled: 0, fromDisk: 0, ms: 0 };

  constructor(private readonly config: KernelJitConfig) {}

  /**
   * The compiled kernel; compiles (or reads the disk cache) only the first time in this process.
   * `label` (the launcher's cache key) only appears in debug output.
   */
  compile(kernel: KernelSource, options: JitOptions = {}, label = ''): JitKernel {
    const { compiler } = this.config;
    const arch = kernelArch(this.config.arch, kernel);
    const nvrtcArgs = nvrtcOptions(arch, this.config.includeDir, options);
    const source = compiledSource(kernel);
    const key = kernelCacheKey({ source, name: kernel.name, options: nvrtcArgs, arch, compilerVersion: compiler.version });
    const known = this.loaded.get(key);
    if (known) return known;

    const started = performance.now();
    const fromDisk = this.loadFromDisk(kernel.name, key);
    const result = fromDisk ?? this.compileAndLoad(kernel, source, key, nvrtcArgs);
    this.loaded.set(key, result);
    if (fromDisk) this.stats.fromDisk++;
    else this.stats.compiled++;
    this.stats.ms += performance.now() - started;
    if (this.config.debug) {
      const ms = (performance.now() - started).toFixed(1);
      this.log(`// ---- fuseformer kernel '${kernel.name}'${label ? ` [${label}]` : ''} key ${key} (${arch}, ${result.origin === 'disk' ? 'disk cache' : `NVRTC ${compiler.version}`}, ${ms} ms) ----\n` +
        `${numberedSource(source)}\n`);
    }
    return result;
  }

  private loadFromDisk(name: string, key: string): JitKernel | null {
    const cubin = this.config.diskCache?.read(key) ?? null;
    if (cubin === null) return null;
    try {
      return this.load(name, key, cubin, 'disk');
    } catch (err) {
      // An intact file the driver rejects (e.g. written by a broken NVRTC) is recompiled over.
      if (err instanceof CudaError) return null;
      throw err;
    }
  }

  /** Compiles `source` (compiledSource(kernel)) with NVRTC, loads it and writes the disk cache. */
  private compileAndLoad(kernel: KernelSource, source: string, key: string, options: readonly string[]): JitKernel {
    const { compiler } = this.config;
    const arch = kernelArch(this.config.arch, kernel);
    const output = compiler.compile(source, `${kernel.name}.cu`, options);
    if (!output.ok || output.cubin === null) {
      throw new KernelCompileError(compileErrorMessage({
        name: kernel.name, key, arch, compilerVersion: compiler.version, options, log: output.log, source,
      }));
    }
    if (this.config.debug && output.log) this.log(`// NVRTC log for '${kernel.name}':\n${output.log}\n`);
    const result = this.load(kernel.name, key, output.cubin, 'nvrtc');
    this.config.diskCache?.write(key, output.cubin);
    return result;
  }

  private load(name: string, key: string, cubin: Uint8Array, origin: JitKernel['origin']): JitKernel {
    const { loader } = this.config;
    const module = loader.load(cubin);
    try {
      return { name, key, module, function: loader.getFunction(module, name), origin };
    } catch (err) {
      // Usually the kernel is not declared extern "C", so its symbol is C++-mangled.
      loader.unload(module);
      throw err;
    }
  }

  private log(text: string): void {
    (this.config.log ?? ((t: string) => process.stderr.write(t)))(text);
  }
}

/** The include directory for NVRTC: beside the NVRTC library when it has one, else the first CUDA root's. */
export function findCudaIncludeDir(candidates: readonly (string | null)[], exists: (path: string) => boolean = existsSync): string | null {
  for (const dir of candidates) {
    if (dir !== null && exists(join(dir, 'cuda_fp16.h'))) return dir;
  }
  return null;
}
