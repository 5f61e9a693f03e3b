// The CUDA runtime the backend runs on: one device, one compute stream, the caching allocator, the
// kernel JIT and the launcher. Everything is issued asynchronously on the current stream (the
// compute stream unless withStream() says otherwise); only host copies and synchronize() wait.

import { existsSync } from 'node:fs';
import koffi from 'koffi';
import { cudaIncludeDirs, includeDirBeside } from '../../../cuda/library.js';
import { nvrtc } from '../../../cuda/nvrtc.js';
import { ArgumentError, FuseformerError } from '../../../errors.js';
import type { MemoryStats } from '../../backend.js';
import { CudaDevice, Event, Stream } from './device.js';
import { CudaGraph } from './graph.js';
import { debugEnabled, defaultKernelCacheDir, DiskCubinCache, findCudaIncludeDir, KernelJit, type JitOptions } from './jit.js';
import type { CompiledKernel, KernelHost, KernelSource } from './kernel.js';
import { KernelLauncher, LaunchableKernel } from './launch.js';
import { CachingAllocator } from './memory.js';
import { PINNED_UPLOAD_MAX_BYTES, PinnedStaging } from './pinned.js';
import type { PendingBytes } from './pinned.js';
import type { DeviceBlock } from './tensor.js';
import { KernelTimeline, timelineOptions, timelineRequested } from './timeline.js';

export interface CudaRuntimeOptions {
  /** Kernel cache directory; null disables the disk cache. Default: defaultKernelCacheDir(). */
  kernelCacheDir?: string | null;
  /** Programmatic dependent launch (see programmaticLaunch); default: on where the GPU and driver have it (compute capability ≥ 9.0, cuLaunchKernelEx), unless FUSEFORMER_PDL=0. */
  programmaticLaunch?: boolean;
}

export class CudaRuntime implements KernelHost {
  readonly device: CudaDevice;
  /** The compute stream: every op, copy and graph of this runtime is ordered on it. */
  readonly stream: Stream;
  readonly allocator: CachingAllocator;
  readonly jit: KernelJit;
  /** Kernel timelines (timeline.ts): non-null when FUSEFORMER_TIMELINE=1 was set as the runtime was created. */
  readonly timeline: KernelTimeline | null;
  private readonly launcher: KernelLauncher;
  private readonly kernels = new Map<string, CompiledKernel>();
  private currentStream: Stream;
  private capturing = false;
  private scratchBlock: DeviceBlock | null = null;
  /** KernelHost.counters: zero between kernels. */
  private counterBlock: DeviceBlock | null = null;
  /** Whether a captured graph holds the scratch block's address (then growing must not free it). */
  private scratchCaptured = false;
  /** Scratch blocks outgrown after a graph captured them: kept for the runtime's lifetime. */
  private readonly retiredScratch: DeviceBlock[] = [];
  /** Page-locked buffers of downloadLater() and pinned uploads, made on first use (staging()). */
  private pinned?: PinnedStaging<Stream>;

  private constructor(device: CudaDevice, options: CudaRuntimeOptions) {
    this.device = device;
    const driver = device.driver;
    this.stream = device.createStream();
    this.currentStream = this.stream;
    this.allocator = new CachingAllocator({
      allocate: (bytes) => {
        // A cache miss needs cuMemAlloc, which global-mode capture forbids; say why instead of
        // letting the driver invalidate the capture.
        if (this.capturing) {
          throw new FuseformerError(`cannot allocate ${bytes} bytes of new device memory while a CUDA graph is being captured: allocate every buffer the graph uses before captureGraph()`);
        }
        return driver.memAlloc(bytes);
      },
      free: (ptr) => driver.memFree(ptr),
      synchronize: () => device.synchronize(),
    });
    const compiler = nvrtc();
    const cacheDir = options.kernelCacheDir === undefined ? defaultKernelCacheDir() : options.kernelCacheDir;
    this.jit = new KernelJit({
      compiler,
      loader: {
        load: (cubin) => driver.moduleLoadData(cubin),
        getFunction: (module, name) => driver.moduleGetFunction(module, name),
        unload: (module) => driver.moduleUnload(module),
      },
      arch: device.properties.arch,
      includeDir: findCudaIncludeDir([includeDirBeside(compiler.library), ...cudaIncludeDirs()], existsSync),
      diskCache: cacheDir === null ? null : new DiskCubinCache(cacheDir),
      debug: debugEnabled('kernels'),
    });
    this.timeline = timelineRequested() ? new KernelTimeline(driver, (bytes) => this.allocator.allocate(bytes)) : null;
    this.launcher = new KernelLauncher(driver, device.properties.maxSharedBytesPerBlockOptin);
    const programmatic = options.programmaticLaunch ?? (process.env['FUSEFORMER_PDL'] !== '0' && this.supportsProgrammaticLaunch());
    if (programmatic) this.programmaticLaunch = true;
  }

  /** Whether this GPU and driver can launch programmatically (see programmaticLaunch). */
  supportsProgrammaticLaunch(): boolean {
    return this.device.properties.computeCapability.major >= 9 && this.launcher.canLaunchProgrammatically;
  }

  /**
   * Programmatic dependent launch of the kernels that wait for their prerequisites themselves (launch.ts):
   * Hopper or newer (compute capability 9.0), and a driver with cuLaunchKernelEx. Takes effect for
   * launches and captures made after it is set.
   */
  get programmaticLaunch(): boolean { return this.launcher.programmaticLaunch; }

  set programmaticLaunch(on: boolean) {
    const { major, minor } = this.device.properties.computeCapability;
    if (on && major < 9) {
      throw new ArgumentError(`programmatic dependent launch needs compute capability 9.0 or newer; ${this.device.properties.name} is ${major}.${minor}`);
    }
    this.launcher.programmaticLaunch = on;
  }

  /** A runtime on GPU `ordinal`, with its own compute stream. */
  static create(ordinal = 0, options: CudaRuntimeOptions = {}): CudaRuntime {
    return new CudaRuntime(CudaDevice.open(ordinal), options);
  }

  get multiProcessorCount(): number { return this.device.properties.multiProcessorCount; }
  get maxSharedBytesPerBlock(): number { return this.device.properties.maxSharedBytesPerBlockOptin; }
  get arch(): string { return this.device.properties.arch; }
  /** KernelHost.tensorMaps: Hopper or newer, and a driver that encodes tensor maps. */
  get tensorMaps(): boolean { return this.device.properties.computeCapability.major >= 9 && this.device.driver.hasTensorMapEncode; }
  /** KernelHost.clusters: Hopper or newer. */
  get clusters(): boolean { return this.device.properties.computeCapability.major >= 9; }
  /** The stream launches and copies go to now. */
  get current(): Stream { return this.currentStream; }
  get isCapturing(): boolean { return this.capturing; }

  // --- kernels -------------------------------------------------------------------------------------

  kernel(key: string, build: () => KernelSource, options: JitOptions = {}): CompiledKernel {
    let kernel = this.kernels.get(key);
    if (kernel === undefined) {
      const source = build();
      const timed = this.timeline ? { ...options, extraOptions: [...(options.extraOptions ?? []), ...timelineOptions(source.name)] } : options;
      const compiled = this.jit.compile(source, timed, key);
      this.timeline?.add(compiled.module, source.name, !this.capturing);
      kernel = new LaunchableKernel({ ...compiled, gridDependencyWait: source.gridDependencyWait === true }, this.launcher, () => this.currentStream.handle);
      this.kernels.set(key, kernel);
    }
    return kernel;
  }

  /** Runs fn with `stream` as the current stream (e.g. a side stream for overlapping copies). */
  withStream<T>(stream: Stream, fn: () => T): T {
    const previous = this.currentStream;
    this.currentStream = stream;
    try {
      return fn();
    } finally {
      this.currentStream = previous;
    }
  }

  // --- memory --------------------------------------------------------------------------------------

  alloc(bytes: number): DeviceBlock {
    return this.allocator.allocate(bytes);
  }

  release(block: DeviceBlock): void {
    if (this.capturing) {
      // The graph keeps using this address on every replay; reusing it elsewhere would corrupt both.
      throw new FuseformerError(`cannot release device memory (0x${block.ptr.toString(16)}, ${block.bytes} bytes) while a CUDA graph is being captured: release it after the graph is disposed`);
    }
    this.allocator.release(block);
  }

  /**
   * Device scratch of at least `bytes`, valid until the next scratch() call. It only grows; the old
   * buffer goes back to the cache, which is safe because later work on the stream is ordered after
   * the work that used it.
   */
  scratch(bytes: number): bigint {
    if (this.scratchBlock !== null && this.scratchBlock.bytes >= bytes) {
      if (this.capturing) this.scratchCaptured = true;
      return this.scratchBlock.ptr;
    }
    if (this.capturing) {
      throw new FuseformerError(`scratch memory must grow to ${bytes} bytes (now ${this.scratchBlock?.bytes ?? 0}) while a CUDA graph is being captured: ` +
        'run the step once before capturing it, or call scratch() with the largest size first');
    }
    // A graph captured earlier replays with the old address: keep that block alive.
    if (this.scratchBlock !== null) {
      if (this.scratchCaptured) this.retiredScratch.push(this.scratchBlock);
      else this.allocator.release(this.scratchBlock);
    }
    this.scratchCaptured = false;
    this.scratchBlock = null;
    this.scratchBlock = this.allocator.allocate(bytes);
    return this.scratchBlock.ptr;
  }

  /** Zeroed u32 counters for "last block done" kernels (KernelHost.counters). */
  counters(count: number): bigint {
    if (!Number.isInteger(count) || count < 1) throw new ArgumentError(`counters: count must be a positive integer, got ${count}`);
    if (this.counterBlock !== null && this.counterBlock.bytes >= 4 * count) return this.counterBlock.ptr;
    if (this.capturing) {
      throw new FuseformerError(`the zeroed counters must grow to ${count} while a CUDA graph is being captured: run the step once before capturing it`);
    }
    // Graphs captured earlier keep the old address: it stays allocated (and zero) for them.
    if (this.counterBlock !== null) this.retiredScratch.push(this.counterBlock);
    const block = this.allocator.allocate(4 * Math.max(count, 1024));
    this.memset32(block.ptr, 0, block.bytes / 4);
    this.counterBlock = block;
    return block.ptr;
  }

  memoryStats(): MemoryStats {
    return this.allocator.stats();
  }

  resetPeakMemory(): void {
    this.allocator.resetPeak();
  }

  /** Returns cached device memory to the driver (waits for the device first). */
  emptyCache(): void {
    this.allocator.emptyCache();
  }

  // --- data movement -------------------------------------------------------------------------------

  /**
   * Host-to-device copies that do not wait for the stream (default; FUSEFORMER_ASYNC_UPLOAD=0 turns it
   * off; on since session 12, when the GPU checks passed with it and serving gained 5–7% at 16–64
   * clients, greedy speculative rounds 17%). The CUDA API's synchronization rules for an asynchronous
   * copy from pageable host memory (JS arrays are pageable): the bytes are copied to a staging buffer
   * before the call returns, with no device synchronization, and the DMA to the device follows in stream
   * order — so `data` may change or go as soon as uploadBytes returns, and later work on the stream sees
   * the copy. Off, every upload drains the stream first: a decode or serving step's small uploads
   * (tokens, positions, block tables) then leave the GPU idle while the host prepares what follows, and
   * a speculative round does about ten of them.
   */
  asyncUploads = process.env['FUSEFORMER_ASYNC_UPLOAD'] !== '0';

  /**
   * With asyncUploads: uploads of at most PINNED_UPLOAD_MAX_BYTES are copied into a page-locked buffer
   * first and queued from there (pinned.ts), so they never wait for the stream — CUDA's notes allow a
   * pageable upload to "synchronize with the stream" to stage it, which would stall a pipelined serving
   * step's uploads behind the step in flight. Opt-in (FUSEFORMER_PINNED_UPLOADS=1) until measured.
   */
  pinnedUploads = process.env['FUSEFORMER_PINNED_UPLOADS'] === '1';

  /** Copies host bytes to the device, ordered on the current stream; returns when the copy is done (asyncUploads: once `data` is staged). */
  uploadBytes(ptr: bigint, data: Uint8Array): void {
    this.refuseDuringCapture('uploadBytes');
    if (data.byteLength === 0) return;
    if (this.asyncUploads && this.pinnedUploads && data.byteLength <= PINNED_UPLOAD_MAX_BYTES) {
      this.staging().upload(ptr, data, this.currentStream);
      return;
    }
    // Ordered on the current stream (a NULL-stream copy would not wait for a non-blocking stream).
    this.device.driver.memcpyHostToDeviceAsync(ptr, data, this.currentStream.handle);
    if (!this.asyncUploads) this.currentStream.synchronize();
  }

  /** Waits for queued work, then copies `bytes` from the device. */
  downloadBytes(ptr: bigint, bytes: number): Uint8Array {
    checkByteCount('downloadBytes', bytes);
    const out = new Uint8Array(bytes);
    this.downloadInto(ptr, out);
    return out;
  }

  /** Waits for queued work, then copies dst.byteLength bytes from the device into `dst`. */
  downloadInto(ptr: bigint, dst: Uint8Array): void {
    this.refuseDuringCapture('download');
    if (dst.byteLength === 0) return;
    this.device.driver.memcpyDeviceToHostAsync(dst, ptr, this.currentStream.handle);
    this.currentStream.synchronize();
  }

  /**
   * Queues a copy of `bytes` bytes at ptr to the host on the current stream and returns at once; wait()
   * blocks until the stream has reached it and gives the bytes (as downloadBytes would have here), or what
   * `read` makes of them (read sees the page-locked bytes once and copies what it keeps: one copy, not two).
   */
  downloadLater(ptr: bigint, bytes: number): PendingBytes;
  downloadLater<T>(ptr: bigint, bytes: number, read: (memory: Uint8Array) => T): PendingBytes<T>;
  downloadLater<T>(ptr: bigint, bytes: number, read?: (memory: Uint8Array) => T): PendingBytes<T | Uint8Array> {
    this.refuseDuringCapture('downloadLater');
    checkByteCount('downloadLater', bytes);
    const take: (memory: Uint8Array) => T | Uint8Array = read ?? ((memory) => memory.slice());
    if (bytes === 0) {
      const empty = take(new Uint8Array(0));
      return { wait: () => empty, ready: () => true };
    }
    return this.staging().download(ptr, bytes, this.currentStream, take);
  }

  /** The page-locked buffers of downloadLater() and pinned uploads, made on first use. */
  private staging(): PinnedStaging<Stream> {
    const driver = this.device.driver;
    return (this.pinned ??= new PinnedStaging<Stream>({
      alloc: (bytes) => {
        const host = driver.memHostAlloc(bytes);
        return { host, memory: new Uint8Array(koffi.view(host, bytes)) };
      },
      copyToHost: (dst, src, bytes, stream) => driver.memcpyDeviceToPinnedAsync(dst, src, bytes, stream.handle),
      copyToDevice: (dst, src, bytes, stream) => driver.memcpyPinnedToDeviceAsync(dst, src, bytes, stream.handle),
      event: () => this.device.createEvent({ timing: false }),
    }));
  }

  /** Sets `bytes` bytes at ptr to `value` (0–255), asynchronously. */
  memset8(ptr: bigint, value: number, bytes: number): void {
    checkByteCount('memset8', bytes);
    if (!Number.isInteger(value) || value < 0 || value > 255) throw new ArgumentError(`memset8 value ${value}: expected an integer in [0, 255]`);
    if (bytes === 0) return;
    this.device.driver.memsetD8Async(ptr, value, bytes, this.currentStream.handle);
  }

  /** Sets `count` 32-bit words at ptr (4-byte aligned) to `bits`, asynchronously; fills f32/i32 tensors. */
  memset32(ptr: bigint, bits: number, count: number): void {
    checkByteCount('memset32', count);
    if ((ptr & 3n) !== 0n) throw new ArgumentError(`memset32 at 0x${ptr.toString(16)}: the address must be 4-byte aligned`);
    if (count === 0) return;
    this.device.driver.memsetD32Async(ptr, bits, count, this.currentStream.handle);
  }

  copyDeviceToDevice(dst: bigint, src: bigint, bytes: number): void {
    checkByteCount('copyDeviceToDevice', bytes);
    if (bytes === 0) return;
    this.device.driver.memcpyDeviceToDeviceAsync(dst, src, bytes, this.currentStream.handle);
  }

  // --- synchronization, graphs, timing --------------------------------------------------------------

  synchronize(): void {
    this.refuseDuringCapture('synchronize');
    this.currentStream.synchronize();
  }

  /**
   * Records what fn issues on the compute stream into a CUDA graph (nothing runs until replay()).
   * During capture, new device allocations, releases, scratch growth and host copies are refused.
   */
  captureGraph(fn: () => void): CudaGraph {
    if (this.capturing) throw new FuseformerError('captureGraph() cannot be nested: a CUDA graph is already being captured');
    this.capturing = true;
    try {
      return this.withStream(this.stream, () => CudaGraph.capture(this.device.driver, this.stream, fn));
    } finally {
      this.capturing = false;
    }
  }

  createEvent(options: { timing?: boolean } = {}): Event {
    return this.device.createEvent(options);
  }

  private refuseDuringCapture(what: string): void {
    if (this.capturing) {
      throw new FuseformerError(`${what}() waits for the device, which is not allowed while a CUDA graph is being captured`);
    }
  }
}

function checkByteCount(what: string, bytes: number): void {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new ArgumentError(`${what}: byte count ${bytes} must be a non-negative integer`);
}

const runtimes = new Map<number, CudaRuntime>();

/** The process-wide runtime of GPU `ordinal`, created on first use. */
export function cudaRuntime(ordinal = 0): CudaRuntime {
  let runtime = runtimes.get(ordinal);
  if (runtime === undefined) {
    runtime = CudaRuntime.create(ordinal);
    runtimes.set(ordinal, runtime);
  }
  return runtime;
}
