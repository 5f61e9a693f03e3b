// Finding and loading the CUDA shared libraries (driver, NVRTC, cuBLASLt, NCCL).
//
// Search order, first hit wins: each directory of FUSEFORMER_CUDA_PATH (':'-separated), CUDA_HOME,
// /usr/local/cuda — each as given and with lib64/, lib/ and targets/<arch>-linux/lib/ — then the
// distribution's multiarch directory, then the plain file name through the dynamic loader (which
// honours LD_LIBRARY_PATH, ldconfig and a container's injected driver). Within a directory the newest
// major version comes first. Toolkit `stubs/` directories are never searched: the stub libcuda only
// answers CUDA_ERROR_STUB_LIBRARY.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import koffi from 'koffi';
import type { LibraryHandle } from 'koffi';
import { LibraryNotFoundError } from '../errors.js';

// probeCuda() lives in probe.ts (it needs the driver bindings); it is re-exported here because
// "which CUDA libraries can this process use" is the question callers bring to this file.
export { probeCuda, type CudaProbe, type DeviceProbe, type LibraryProbe } from './probe.js';

export type CudaLibraryName = 'cuda' | 'nvrtc' | 'cublasLt' | 'nccl';

export interface LibrarySpec {
  readonly name: CudaLibraryName;
  /** What the library is, for messages. */
  readonly description: string;
  /** File names to try, newest first. */
  readonly fileNames: readonly string[];
  /** What to install when it is missing. */
  readonly install: string;
  /**
   * Libraries that this one dlopens by soname at run time, matched in the directory it was found in
   * and loaded first, so they resolve even when that directory is not on the loader's search path.
   */
  readonly companions?: RegExp;
}

export const CUDA_LIBRARIES: Readonly<Record<CudaLibraryName, LibrarySpec>> = {
  cuda: {
    name: 'cuda',
    description: 'the CUDA driver API (libcuda)',
    fileNames: ['libcuda.so.1', 'libcuda.so'],
    install: 'Install the NVIDIA driver (it provides libcuda.so.1; check with nvidia-smi); in a container, start it with GPU access (e.g. docker run --gpus all).',
  },
  nvrtc: {
    name: 'nvrtc',
    description: 'NVRTC, the CUDA runtime compiler (libnvrtc)',
    fileNames: ['libnvrtc.so.13', 'libnvrtc.so.12', 'libnvrtc.so'],
    // NVRTC opens libnvrtc-builtins.so.<major>.<minor> when it compiles; without this preload a
    // toolkit outside ldconfig fails with "failed to open libnvrtc-builtins.so.13.0".
    companions: /^libnvrtc-builtins\.so\.\d+\.\d+$/,
    install: 'Install the CUDA toolkit 12 or 13 (or just its NVRTC package) and set CUDA_HOME or FUSEFORMER_CUDA_PATH to its directory.',
  },
  cublasLt: {
    name: 'cublasLt',
    description: 'cuBLASLt, the CUDA matrix-multiply library (libcublasLt)',
    fileNames: ['libcublasLt.so.13', 'libcublasLt.so.12', 'libcublasLt.so'],
    install: 'Install the CUDA toolkit 12 or 13 (or just its cuBLAS package) and set CUDA_HOME or FUSEFORMER_CUDA_PATH to its directory.',
  },
  nccl: {
    name: 'nccl',
    description: 'NCCL, the NVIDIA collective communication library (libnccl)',
    fileNames: ['libnccl.so.2', 'libnccl.so'],
    install: 'Install NCCL 2 (the libnccl2 package, or NVIDIA\'s NCCL archive) and set FUSEFORMER_CUDA_PATH to the directory holding libnccl.so.2.',
  },
};

export interface LoadedLibrary {
  readonly name: CudaLibraryName;
  /** The file that was loaded: an absolute path, or the plain name when the dynamic loader found it. */
  readonly path: string;
  readonly viaLoader: boolean;
  readonly handle: LibraryHandle;
}

/** File-system and loader access, injectable so the search is testable without CUDA. */
export interface LibraryLoader {
  exists(path: string): boolean;
  /** Loads a library by absolute path or, for a plain name, through the dynamic loader; throws on failure. */
  load(pathOrName: string): LibraryHandle;
  /** File names in a directory ([] when it cannot be read). */
  list(dir: string): string[];
}

export interface LibrarySearchOptions {
  env?: NodeJS.ProcessEnv;
  loader?: LibraryLoader;
  /** Node's process.arch; picks targets/<arch>-linux and the multiarch directory. */
  arch?: string;
}

export const systemLoader: LibraryLoader = {
  exists: (path) => existsSync(path),
  load: (pathOrName) => koffi.load(pathOrName),
  list: (dir) => {
    try {
      return readdirSync(dir);
    } catch {
      return [];
    }
  },
};

function archNames(arch: string): { target: string; multiarch: string } {
  return arch === 'arm64'
    ? { target: 'sbsa-linux', multiarch: 'aarch64-linux-gnu' }
    : { target: 'x86_64-linux', multiarch: 'x86_64-linux-gnu' };
}

/** The CUDA installation roots to look in, most specific first (duplicates removed). */
export function cudaRoots(env: NodeJS.ProcessEnv = process.env): string[] {
  const roots = [
    ...(env['FUSEFORMER_CUDA_PATH'] ?? '').split(':'),
    env['CUDA_HOME'] ?? '',
    '/usr/local/cuda',
  ];
  return unique(roots.map((r) => r.trim()).filter((r) => r.length > 0));
}

/** Every directory searched for a library file, in order. */
export function librarySearchDirs(env: NodeJS.ProcessEnv = process.env, arch: string = process.arch): string[] {
  const { target, multiarch } = archNames(arch);
  const dirs: string[] = [];
  for (const root of cudaRoots(env)) {
    dirs.push(root, join(root, 'lib64'), join(root, 'lib'), join(root, 'targets', target, 'lib'));
  }
  dirs.push(join('/usr/lib', multiarch));
  return unique(dirs);
}

/** The include directories of the CUDA installations, in search order (they need not exist). */
export function cudaIncludeDirs(env: NodeJS.ProcessEnv = process.env, arch: string = process.arch): string[] {
  const { target } = archNames(arch);
  return unique(cudaRoots(env).flatMap((root) => [join(root, 'include'), join(root, 'targets', target, 'include')]));
}

/**
 * The include directory that belongs with a library file: <root>/lib64/x.so → <root>/include,
 * <root>/targets/<arch>/lib/x.so → <root>/targets/<arch>/include. Null for loader-found libraries.
 */
export function includeDirBeside(library: LoadedLibrary): string | null {
  if (library.viaLoader) return null;
  return join(dirname(dirname(library.path)), 'include');
}

/** Searches for and loads one library; throws LibraryNotFoundError naming every place tried. */
export function findLibrary(name: CudaLibraryName, options: LibrarySearchOptions = {}): LoadedLibrary {
  const spec = CUDA_LIBRARIES[name];
  const env = options.env ?? process.env;
  const loader = options.loader ?? systemLoader;
  const tried: string[] = [];

  for (const dir of librarySearchDirs(env, options.arch ?? process.arch)) {
    const missing: string[] = [];
    for (const fileName of spec.fileNames) {
      const path = join(dir, fileName);
      if (!loader.exists(path)) { missing.push(fileName); continue; }
      try {
        preloadCompanions(spec, dir, fileName, loader);
        return { name, path, viaLoader: false, handle: loader.load(path) };
      } catch (err) {
        tried.push(`${path}: found but failed to load: ${errorText(err)}`);
      }
    }
    if (missing.length > 0) tried.push(`${dir}/{${missing.join(', ')}}: not found`);
  }
  for (const fileName of spec.fileNames) {
    try {
      return { name, path: fileName, viaLoader: true, handle: loader.load(fileName) };
    } catch (err) {
      tried.push(`${fileName} through the dynamic loader: ${errorText(err)}`);
    }
  }
  throw new LibraryNotFoundError(
    `could not load ${spec.description}. Places tried:\n  ${tried.join('\n  ')}\n` +
    `${spec.install}\nUntil then fuseformer uses the CPU backend.`,
  );
}

/** Loads the companions of `fileName` found in `dir` (same major version when the name has one). */
function preloadCompanions(spec: LibrarySpec, dir: string, fileName: string, loader: LibraryLoader): void {
  if (spec.companions === undefined) return;
  const major = /\.so\.(\d+)$/.exec(fileName)?.[1];
  for (const companion of loader.list(dir).sort()) {
    if (!spec.companions.test(companion)) continue;
    if (major !== undefined && !companion.includes(`.so.${major}.`)) continue;
    try {
      loader.load(join(dir, companion));
    } catch {
      // Best effort: if it is really needed, the library reports it by name when it fails.
    }
  }
}

const loaded = new Map<CudaLibraryName, LoadedLibrary | LibraryNotFoundError>();

/** findLibrary with the process environment, memoised (a failure is remembered too). */
export function loadCudaLibrary(name: CudaLibraryName): LoadedLibrary {
  let result = loaded.get(name);
  if (result === undefined) {
    try {
      result = findLibrary(name);
    } catch (err) {
      if (!(err instanceof LibraryNotFoundError)) throw err;
      result = err;
    }
    loaded.set(name, result);
  }
  if (result instanceof LibraryNotFoundError) throw result;
  return result;
}

/**
 * The file behind a library that the dynamic loader found by plain name (libcuda.so.1 usually maps
 * libcuda.so.<driver version>), read from /proc/self/maps; the plain name when it cannot be told.
 */
export function loadedFilePath(library: LoadedLibrary): string {
  if (!library.viaLoader) return library.path;
  const stem = library.path.slice(0, library.path.indexOf('.so') + 3);
  try {
    return mappedLibraryPath(stem, readFileSync('/proc/self/maps', 'utf8')) ?? library.path;
  } catch {
    return library.path;
  }
}

/** The first mapped file in a /proc/<pid>/maps text whose base name starts with `stem`. */
export function mappedLibraryPath(stem: string, maps: string): string | null {
  for (const line of maps.split('\n')) {
    const slash = line.indexOf('/');
    if (slash < 0) continue;
    const path = line.slice(slash).trim();
    if (path.slice(path.lastIndexOf('/') + 1).startsWith(stem)) return path;
  }
  return null;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function unique(items: string[]): string[] {
  return [...new Set(items)];
}
