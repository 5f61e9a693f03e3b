// The kernel emulator's host side (docs/emulator.md): memory for "device" tensors (host memory with poisoned
// guard zones), a KernelHost that compiles each generated kernel for the CPU with g++ and runs it through
// cuda-emu.h, and a CudaBackend on it (emulatedCudaBackend) whose ops are fuseformer's CUDA kernels, routed
// and launched exactly as on a GPU, run on the CPU. GEMMs that would go to cuBLASLt run on the CPU backend.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import type { Backend, GemmArgs, BatchedGemmArgs, Graph, Int8GemmArgs, MemoryStats } from '../../backend/backend.js';
import { CpuBackend } from '../../backend/cpu/index.js';
import { CudaBackend, encodeHost, hostArrayFrom } from '../../backend/cuda/index.js';
import type { GemmRunner } from '../../backend/cuda/gemm.js';
import type { Int8GemmRunner } from '../../backend/cuda/int8-gemm.js';
import { compiledSource, type CompiledKernel, type KernelArg, type KernelHost, type KernelSource, type LaunchConfig, type Dim3 } from '../../backend/cuda/runtime/kernel.js';
import type { CudaRuntime } from '../../backend/cuda/runtime/runtime.js';
import { CudaTensor, type DeviceBlock } from '../../backend/cuda/runtime/tensor.js';
import { cudaIncludeDirs } from '../../cuda/library.js';
import type { HostArray, Tensor } from '../../tensor.js';
import { EmulatorUnsupported, emulatedSource } from './rewrite.js';

export { EmulatorUnsupported } from './rewrite.js';

const HEADER = fileURLToPath(new URL('../../../../src/testing/emulator/cuda-emu.h', import.meta.url));
/** Poisoned bytes before and after every allocation; a kernel that writes into them is reported. */
const GUARD_BYTES = 256;
const POISON = 0xff;

/** Where the emulator can compile kernels: g++ and the CUDA headers (cuda_bf16.h); null with the reason if not. */
export function emulatorUnavailable(): string | null {
  try { execFileSync('g++', ['--version'], { stdio: 'ignore' }); } catch { return 'g++ is not installed'; }
  if (!existsSync(HEADER)) return `the emulator's header is missing: ${HEADER}`;
  return cudaInclude() ? null : 'no CUDA include directory with cuda_bf16.h (set CUDA_HOME or FUSEFORMER_CUDA_PATH)';
}

function cudaInclude(): string | null {
  return [...cudaIncludeDirs(), '/usr/local/cuda/include'].find((dir) => existsSync(join(dir, 'cuda_bf16.h'))) ?? null;
}

interface Libc {
  alloc: (alignment: number, bytes: number) => unknown;
  free: (p: number | bigint) => void;
  toDevice: (dst: number | bigint, src: Uint8Array, bytes: number) => unknown;
  toHost: (dst: Uint8Array, src: number | bigint, bytes: number) => unknown;
  move: (dst: number | bigint, src: number | bigint, bytes: number) => unknown;
  set: (dst: number | bigint, value: number, bytes: number) => unknown;
}

let libc: Libc | undefined;
function loadLibc(): Libc {
  if (libc) return libc;
  const lib = koffi.load('libc.so.6');
  libc = {
    alloc: lib.func('uintptr_t aligned_alloc(size_t alignment, size_t size)'),
    free: lib.func('void free(uintptr_t p)'),
    toDevice: lib.func('uintptr_t memcpy(uintptr_t dst, const uint8_t* src, size_t n)'),
    toHost: lib.func('uintptr_t memcpy(_Out_ uint8_t* dst, uintptr_t src, size_t n)'),
    move: lib.func('uintptr_t memmove(uintptr_t dst, uintptr_t src, size_t n)'),
    set: lib.func('uintptr_t memset(uintptr_t dst, int value, size_t n)'),
  };
  return libc;
}

/** Host memory standing in for device memory: 256-byte aligned blocks between poisoned guard zones. */
export class EmulatorMemory {
  private readonly blocks = new Map<bigint, { base: bigint; bytes: number }>();
  private readonly libc = loadLibc();
  private inUse = 0;
  private peak = 0;
  private count = 0;

  alloc(bytes: number): DeviceBlock {
    const padded = Math.ceil(Math.max(bytes, 1) / GUARD_BYTES) * GUARD_BYTES;
    const base = BigInt(this.libc.alloc(GUARD_BYTES, padded + 2 * GUARD_BYTES) as number | bigint);
    if (base === 0n) throw new Error(`emulator: out of host memory for ${bytes} bytes`);
    this.libc.set(base, POISON, padded + 2 * GUARD_BYTES);
    const ptr = base + BigInt(GUARD_BYTES);
    this.blocks.set(ptr, { base, bytes: padded });
    this.inUse += padded;
    this.peak = Math.max(this.peak, this.inUse);
    this.count++;
    return { ptr, bytes: padded, freed: false };
  }

  release(block: DeviceBlock): void {
    const b = this.blocks.get(block.ptr);
    if (!b || block.freed) return;
    this.checkGuards('free');
    this.libc.free(b.base);
    this.blocks.delete(block.ptr);
    this.inUse -= b.bytes;
    block.freed = true;
  }

  write(ptr: bigint, bytes: Uint8Array): void {
    this.owning(ptr, bytes.byteLength);
    if (bytes.byteLength > 0) this.libc.toDevice(ptr, bytes, bytes.byteLength);
  }

  read(ptr: bigint, into: Uint8Array): void {
    this.owning(ptr, into.byteLength);
    if (into.byteLength > 0) this.libc.toHost(into, ptr, into.byteLength);
  }

  move(dst: bigint, src: bigint, bytes: number): void {
    this.owning(dst, bytes);
    this.owning(src, bytes);
    if (bytes > 0) this.libc.move(dst, src, bytes);
  }

  /** Throws if any guard zone lost its poison: a kernel wrote outside the block it was given. */
  checkGuards(after: string): void {
    const guard = new Uint8Array(GUARD_BYTES);
    for (const [ptr, b] of this.blocks) {
      for (const at of [b.base, ptr + BigInt(b.bytes)]) {
        this.libc.toHost(guard, at, GUARD_BYTES);
        const bad = guard.findIndex((v) => v !== POISON);
        if (bad >= 0) {
          this.libc.set(at, POISON, GUARD_BYTES);  // reported once: later launches are not blamed for it
          const where = at === b.base ? `${GUARD_BYTES - bad} bytes before` : `${bad} bytes past the end of`;
          throw new Error(`emulator: after ${after}, memory ${where} the block at 0x${ptr.toString(16)} (${b.bytes} bytes) was written`);
        }
      }
    }
  }

  stats(): MemoryStats {
    return { allocations: this.count, deviceAllocations: this.count, bytesInUse: this.inUse, peakBytesInUse: this.peak, bytesReserved: this.inUse };
  }

  resetPeak(): void { this.peak = this.inUse; }

  /** The block holding [ptr, ptr + bytes), or an error naming the address. */
  private owning(ptr: bigint, bytes: number): void {
    for (const [start, b] of this.blocks) {
      if (ptr >= start && ptr + BigInt(bytes) <= start + BigInt(b.bytes)) return;
    }
    throw new Error(`emulator: [0x${ptr.toString(16)}, +${bytes}) is not inside an allocated block`);
  }
}

type LaunchFn = (gx: number, gy: number, gz: number, bx: number, by: number, bz: number, shared: number, args: Uint8Array, count: number) => string | null;

function dims(d: Dim3): [number, number, number] {
  return typeof d === 'number' ? [d, 1, 1] : [d[0], d[1] ?? 1, d[2] ?? 1];
}

/** Kernel arguments in 8-byte slots, as emu::launch unpacks them. */
function packArgs(name: string, args: readonly KernelArg[]): Uint8Array {
  const buffer = Buffer.alloc(8 * Math.max(args.length, 1));
  args.forEach((a, i) => {
    const at = 8 * i;
    switch (a.type) {
      case 'ptr': case 'u64': buffer.writeBigUInt64LE(BigInt.asUintN(64, a.value), at); break;
      case 'i64': buffer.writeBigInt64LE(a.value, at); break;
      case 'i32': buffer.writeInt32LE(a.value, at); break;
      case 'u32': buffer.writeUInt32LE(a.value >>> 0, at); break;
      case 'f32': buffer.writeFloatLE(a.value, at); break;
      case 'tensorMap': throw new EmulatorUnsupported(`${name}: tensor-map arguments (TMA) are not emulated`);
    }
  });
  return buffer;
}

/** What the emulator did: kernels compiled (or found cached) and launched, by name. */
export interface EmulatorStats {
  compiled: number;
  launches: Map<string, number>;
}

/**
 * A KernelHost on the CPU: each kernel source rewritten (rewrite.ts), compiled by g++ into a shared library
 * (cached on disk by the source's hash) and launched block by block. Launches run at once, in order.
 */
export class EmulatorHost implements KernelHost {
  readonly multiProcessorCount: number;
  readonly maxSharedBytesPerBlock = 227 * 1024;
  /** Unset, so launchers choose no sm_90a-only kernel (wgmma), which the emulator cannot run; the rest is Hopper's. */
  readonly arch: string | undefined = undefined;
  /** No tensor maps: TMA copies are not emulated. */
  readonly tensorMaps = false;
  /** Blocks run one after another: a cluster's barriers could never be passed. */
  readonly clusters = false;
  readonly stats: EmulatorStats = { compiled: 0, launches: new Map() };
  /** Launches recorded instead of run while a graph is captured (captureGraph). */
  recording: (() => void)[] | null = null;
  private readonly kernels = new Map<string, CompiledKernel>();
  private readonly cacheDir: string;
  private scratchBlock: DeviceBlock | null = null;
  private counterBlock: DeviceBlock | null = null;

  constructor(readonly memory: EmulatorMemory, options: { multiProcessorCount?: number; cacheDir?: string } = {}) {
    this.multiProcessorCount = options.multiProcessorCount ?? 132;
    this.cacheDir = options.cacheDir ?? process.env['FUSEFORMER_EMULATOR_CACHE'] ?? join(tmpdir(), 'fuseformer-emulator');
  }

  kernel(key: string, build: () => KernelSource): CompiledKernel {
    const cached = this.kernels.get(key);
    if (cached) return cached;
    const source = build();
    const launchFn = this.compile(source);
    const kernel: CompiledKernel = {
      name: source.name,
      launch: (config: LaunchConfig, args: readonly KernelArg[]) => {
        const run = () => this.run(source.name, launchFn, config, args);
        if (this.recording) this.recording.push(run);
        else run();
      },
    };
    this.kernels.set(key, kernel);
    return kernel;
  }

  scratch(bytes: number): bigint {
    // An outgrown block is kept, not freed: a captured graph may still use its address (as the runtime's).
    if (!this.scratchBlock || this.scratchBlock.bytes < bytes) this.scratchBlock = this.memory.alloc(bytes);
    return this.scratchBlock.ptr;
  }

  counters(count: number): bigint {
    if (!this.counterBlock || this.counterBlock.bytes < 4 * count) {
      const block = this.memory.alloc(4 * count);
      this.memory.write(block.ptr, new Uint8Array(block.bytes));
      this.counterBlock = block;
    }
    return this.counterBlock.ptr;
  }

  private run(name: string, launchFn: LaunchFn, config: LaunchConfig, args: readonly KernelArg[]): void {
    const [gx, gy, gz] = dims(config.grid), [bx, by, bz] = dims(config.block);
    const error = launchFn(gx, gy, gz, bx, by, bz, config.sharedBytes ?? 0, packArgs(name, args), args.length);
    if (error) throw new Error(`emulator: ${name}: ${error}`);
    this.memory.checkGuards(`kernel ${name}`);
    this.stats.launches.set(name, (this.stats.launches.get(name) ?? 0) + 1);
  }

  private compile(kernel: KernelSource): LaunchFn {
    const host = emulatedSource(compiledSource(kernel), kernel.name);
    const hash = createHash('sha256').update(host).update(headerHash()).digest('hex').slice(0, 24);
    const library = join(this.cacheDir, `${kernel.name.slice(0, 80)}-${hash}.so`);
    if (!existsSync(library)) {
      mkdirSync(this.cacheDir, { recursive: true });
      const file = `${library}.${process.pid}.cpp`;
      writeFileSync(file, host);
      try {
        execFileSync('g++', [...COMPILE_FLAGS, '-shared', `-I${this.include}`, '-include', this.header(), '-o', `${library}.${process.pid}`, file],
          { stdio: ['ignore', 'ignore', 'pipe'], maxBuffer: 32 << 20 });
      } catch (error) {
        const stderr = String((error as { stderr?: Buffer }).stderr ?? error);
        throw new Error(`emulator: g++ could not compile ${kernel.name} (source kept at ${file}):\n${stderr.split('\n').slice(0, 30).join('\n')}`);
      }
      renameSync(`${library}.${process.pid}`, library);
      rmSync(file, { force: true });
      this.stats.compiled++;
    }
    const lib = koffi.load(library);
    return lib.func('const char* emu_launch(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared, const uint8_t* args, int count)') as LaunchFn;
  }

  private get include(): string {
    const include = cudaInclude();
    if (!include) throw new Error('emulator: no CUDA include directory with cuda_bf16.h');
    return include;
  }

  private pchHeader: string | undefined;
  /**
   * The header every kernel includes: a copy of cuda-emu.h beside its precompiled form (made once per header
   * version in the cache; parsing the CUDA half-precision headers was half of each kernel's compile), or the
   * header itself if the precompile fails (g++ then parses it each time).
   */
  private header(): string {
    if (this.pchHeader) return this.pchHeader;
    const dir = join(this.cacheDir, `pch-${headerHash().slice(0, 16)}`), copy = join(dir, 'cuda-emu.h');
    try {
      if (!existsSync(`${copy}.gch`)) {
        mkdirSync(dir, { recursive: true });
        const temp = `${copy}.${process.pid}`;
        writeFileSync(`${temp}.h`, readFileSync(HEADER));
        execFileSync('g++', [...COMPILE_FLAGS, `-I${this.include}`, '-x', 'c++-header', '-o', `${temp}.gch`, `${temp}.h`], { stdio: ['ignore', 'ignore', 'pipe'] });
        renameSync(`${temp}.h`, copy);
        renameSync(`${temp}.gch`, `${copy}.gch`);
      }
      this.pchHeader = copy;
    } catch {
      this.pchHeader = HEADER;
    }
    return this.pchHeader;
  }
}

/** g++'s flags for the kernels and their precompiled header (which must agree for g++ to use it). */
const COMPILE_FLAGS = ['-std=c++17', '-O1', '-fPIC', '-fvisibility=hidden', '-fno-strict-aliasing', '-w'];

let headerVersion: string | undefined;
/** The header's hash, so an edited cuda-emu.h recompiles every kernel. */
function headerHash(): string {
  if (headerVersion === undefined) headerVersion = createHash('sha256').update(readFileSync(HEADER)).digest('hex');
  return headerVersion;
}

/** A graph of the emulator: the launches made while capturing, run again on replay. */
class EmulatedGraph implements Graph {
  constructor(private launches: (() => void)[] | null) {}
  replay(): void {
    if (!this.launches) throw new Error('emulator: replay of a disposed graph');
    for (const run of this.launches) run();
  }
  dispose(): void { this.launches = null; }
}

/**
 * The parts of CudaRuntime that CudaBackend and the kernel launchers use, on the emulator. Copies and
 * launches run at once (one stream, always synchronized); a capture records launches and copies for replay.
 */
export class EmulatedRuntime extends EmulatorHost {
  readonly stream = { handle: 0n };
  readonly device = { properties: { name: 'kernel emulator', arch: 'sm_90', multiProcessorCount: 132, totalMemoryBytes: 0, computeCapability: { major: 9, minor: 0 } } };
  readonly timeline = null;
  programmaticLaunch = false;

  get isCapturing(): boolean { return this.recording !== null; }
  get current(): { handle: bigint } { return this.stream; }

  alloc(bytes: number): DeviceBlock {
    if (this.recording) throw new Error(`emulator: cannot allocate ${bytes} bytes while a graph is being captured`);
    return this.memory.alloc(bytes);
  }
  release(block: DeviceBlock): void { this.memory.release(block); }
  uploadBytes(ptr: bigint, bytes: Uint8Array): void {
    const copy = bytes.slice();
    const run = () => this.memory.write(ptr, copy);
    if (this.recording) this.recording.push(run); else run();
  }
  downloadInto(ptr: bigint, into: Uint8Array): void { this.memory.read(ptr, into); }
  downloadLater<T>(ptr: bigint, bytes: number, finish: (memory: Uint8Array) => T): { wait: () => T; ready: () => boolean } {
    if (this.recording) throw new Error('emulator: downloadLater while a graph is being captured');
    const memory = new Uint8Array(bytes);
    if (bytes > 0) this.memory.read(ptr, memory);
    const value = finish(memory);
    return { wait: () => value, ready: () => true };
  }
  copyDeviceToDevice(dst: bigint, src: bigint, bytes: number): void {
    const run = () => this.memory.move(dst, src, bytes);
    if (this.recording) this.recording.push(run); else run();
  }
  synchronize(): void {}
  memoryStats(): MemoryStats { return this.memory.stats(); }
  resetPeakMemory(): void { this.memory.resetPeak(); }
  captureGraph(fn: () => void): Graph {
    if (this.recording) throw new Error('emulator: nested graph capture');
    const launches: (() => void)[] = [];
    this.recording = launches;
    try { fn(); } finally { this.recording = null; }
    return new EmulatedGraph(launches);
  }
  createEvent(): never { throw new EmulatorUnsupported('events (timing) are not emulated'); }
}

/** A tensor's bytes on the CPU backend: the emulated tensor's contents, decoded to its dtype. */
function toCpu(cpu: CpuBackend, memory: EmulatorMemory, t: CudaTensor): Tensor {
  return cpu.fromArray(hostArrayFrom(t.dtype, t.numel, (bytes) => memory.read(t.ptr, bytes)), t.shape, t.dtype);
}

/**
 * cuBLASLt's part on the emulator (float and int8 GEMMs): each GEMM's tensors copied to the CPU backend, multiplied there and the
 * results written back — the reference's arithmetic, so a test of a model on the emulator checks our kernels
 * around the GEMMs, not cuBLASLt.
 */
function hostGemmRunners(runtime: EmulatedRuntime): { gemm: GemmRunner; int8Gemm: Int8GemmRunner } {
  const cpu = new CpuBackend(), memory = runtime.memory;
  // Inside a graph capture the GEMM is recorded with the launches, to run on every replay.
  const viaCpu = <A extends object>(args: A, op: (mapped: A) => void) => {
    const run = () => gemmOnCpu(args, op);
    if (runtime.recording) runtime.recording.push(run); else run();
  };
  const gemmOnCpu = <A extends object>(args: A, op: (mapped: A) => void) => {
    const mapped: Record<string, unknown> = {};
    const pairs: [CudaTensor, Tensor][] = [];
    for (const [key, v] of Object.entries(args)) {
      if (v instanceof CudaTensor) {
        const t = toCpu(cpu, memory, v);
        pairs.push([v, t]);
        mapped[key] = t;
      } else mapped[key] = v;
    }
    op(mapped as A);
    for (const [device, host] of pairs) memory.write(device.ptr, encodeHost(cpu.download(host), device.dtype));
  };
  const gemm = {
    tuning: false, workspace: 0n, workspaceBytes: 0,
    gemm: (args: GemmArgs) => viaCpu(args, (a) => cpu.gemm(a)),
    batchedGemm: (args: BatchedGemmArgs) => viaCpu(args, (a) => cpu.batchedGemm(a)),
  } as unknown as GemmRunner;
  const int8Gemm = { gemm: (args: Int8GemmArgs) => viaCpu(args, (a) => cpu.int8Gemm(a)) } as unknown as Int8GemmRunner;
  return { gemm, int8Gemm };
}


/** A CudaBackend whose kernels run on the emulator (and its GEMMs on the CPU backend), with the runtime it uses. */
export function emulatedCudaBackend(options: { cacheDir?: string } = {}): { backend: CudaBackend & Backend; runtime: EmulatedRuntime } {
  const memory = new EmulatorMemory();
  const runtime = new EmulatedRuntime(memory, options);
  const backend = CudaBackend.onRuntime(runtime as unknown as CudaRuntime, hostGemmRunners(runtime));
  return { backend, runtime };
}
