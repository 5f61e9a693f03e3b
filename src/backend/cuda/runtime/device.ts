// One GPU: its primary context, its properties, and the streams and events made on it.
//
// We use the device's primary context (the one the CUDA runtime and PyTorch share) rather than a
// context of our own, so fuseformer can live in a process beside other CUDA users, and make it
// current on the calling thread (Node's main thread, where every koffi call runs).

import { CudaDriver, cudaDriver, CU_EVENT_DEFAULT, CU_EVENT_DISABLE_TIMING, CU_STREAM_NON_BLOCKING, DeviceAttribute, StreamCaptureStatus } from '../../../cuda/driver.js';
import { ArgumentError, CudaError } from '../../../errors.js';

export interface DeviceProperties {
  ordinal: number;
  name: string;
  computeCapability: { major: number; minor: number };
  /** The NVRTC/NVCC target, e.g. "sm_90". */
  arch: string;
  multiProcessorCount: number;
  totalMemoryBytes: number;
  l2CacheBytes: number;
  /** Largest dynamic shared memory a block may opt into (227 KiB on Hopper). */
  maxSharedBytesPerBlockOptin: number;
  maxSharedBytesPerMultiprocessor: number;
  maxThreadsPerBlock: number;
  maxThreadsPerMultiProcessor: number;
  warpSize: number;
  /** The driver's CUDA version, major·1000 + minor·10. */
  driverVersion: number;
  /** Peak memory clock and bus width; null where the driver no longer reports them. */
  memoryClockKHz: number | null;
  memoryBusWidthBits: number | null;
  /** 2 (double data rate) × clock × bus width; null when either is unknown. */
  peakMemoryBandwidthBytesPerSecond: number | null;
}

export class CudaDevice {
  private static readonly opened = new Map<number, CudaDevice>();

  private constructor(
    readonly driver: CudaDriver,
    /** The CUdevice handle. */
    readonly handle: number,
    /** The primary context (CUcontext). */
    readonly context: bigint,
    readonly properties: DeviceProperties,
  ) {}

  /** Opens GPU `ordinal` (once per process): cuInit, retain its primary context, make it current. */
  static open(ordinal = 0): CudaDevice {
    const existing = CudaDevice.opened.get(ordinal);
    if (existing) {
      existing.makeCurrent();
      return existing;
    }
    const driver = cudaDriver();
    const count = driver.deviceCount();
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= count) {
      throw new ArgumentError(`CUDA device ordinal ${ordinal} does not exist: ${count} device(s) visible (0..${count - 1})`);
    }
    const handle = driver.deviceGet(ordinal);
    const context = driver.primaryContextRetain(handle);
    driver.contextSetCurrent(context);
    const device = new CudaDevice(driver, handle, context, readProperties(driver, handle, ordinal));
    CudaDevice.opened.set(ordinal, device);
    return device;
  }

  get name(): string { return this.properties.name; }

  makeCurrent(): void {
    this.driver.contextSetCurrent(this.context);
  }

  /** Waits for all work on every stream of this device. */
  synchronize(): void {
    this.driver.contextSynchronize();
  }

  memoryInfo(): { freeBytes: number; totalBytes: number } {
    return this.driver.memoryInfo();
  }

  /** A stream that does not wait for the legacy NULL stream (so other libraries cannot stall it). */
  createStream(): Stream {
    return new Stream(this.driver, this.driver.streamCreate(CU_STREAM_NON_BLOCKING));
  }

  createEvent(options: { timing?: boolean } = {}): Event {
    return new Event(this.driver, this.driver.eventCreate(options.timing === false ? CU_EVENT_DISABLE_TIMING : CU_EVENT_DEFAULT));
  }
}

function readProperties(driver: CudaDriver, device: number, ordinal: number): DeviceProperties {
  const attr = (a: DeviceAttribute) => driver.deviceAttribute(device, a);
  const optionalAttr = (a: DeviceAttribute): number | null => {
    try {
      const value = attr(a);
      return value > 0 ? value : null;
    } catch (err) {
      if (err instanceof CudaError) return null;
      throw err;
    }
  };
  const major = attr(DeviceAttribute.COMPUTE_CAPABILITY_MAJOR);
  const minor = attr(DeviceAttribute.COMPUTE_CAPABILITY_MINOR);
  const memoryClockKHz = optionalAttr(DeviceAttribute.MEMORY_CLOCK_RATE_KHZ);
  const memoryBusWidthBits = optionalAttr(DeviceAttribute.GLOBAL_MEMORY_BUS_WIDTH_BITS);
  return {
    ordinal,
    name: driver.deviceName(device),
    computeCapability: { major, minor },
    arch: `sm_${major}${minor}`,
    multiProcessorCount: attr(DeviceAttribute.MULTIPROCESSOR_COUNT),
    totalMemoryBytes: driver.deviceTotalMemory(device),
    l2CacheBytes: attr(DeviceAttribute.L2_CACHE_SIZE),
    maxSharedBytesPerBlockOptin: attr(DeviceAttribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    maxSharedBytesPerMultiprocessor: attr(DeviceAttribute.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    maxThreadsPerBlock: attr(DeviceAttribute.MAX_THREADS_PER_BLOCK),
    maxThreadsPerMultiProcessor: attr(DeviceAttribute.MAX_THREADS_PER_MULTIPROCESSOR),
    warpSize: attr(DeviceAttribute.WARP_SIZE),
    driverVersion: driver.driverVersion(),
    memoryClockKHz,
    memoryBusWidthBits,
    peakMemoryBandwidthBytesPerSecond: memoryClockKHz !== null && memoryBusWidthBits !== null
      ? 2 * memoryClockKHz * 1000 * (memoryBusWidthBits / 8)
      : null,
  };
}

/** A CUDA stream: work issued on it runs in order. */
export class Stream {
  private destroyed = false;

  constructor(private readonly driver: CudaDriver, readonly handle: bigint) {}

  /** Blocks until everything issued on this stream has finished. */
  synchronize(): void {
    this.driver.streamSynchronize(this.handle);
  }

  /** Later work on this stream waits for `event`'s last record (cuStreamWaitEvent); the host does not wait. */
  waitEvent(event: Event): void {
    this.driver.streamWaitEvent(this.handle, event.handle);
  }

  /** True while the stream is being captured into a CUDA graph. */
  get isCapturing(): boolean {
    return this.driver.streamCaptureStatus(this.handle) !== StreamCaptureStatus.none;
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.driver.streamDestroy(this.handle);
  }
}

/** A CUDA event: a marker in a stream, for waiting and for timing. */
export class Event {
  private destroyed = false;

  constructor(private readonly driver: CudaDriver, readonly handle: bigint) {}

  /** Milliseconds between two recorded (and completed) events, with ~0.5 µs resolution. */
  static elapsedMs(start: Event, end: Event): number {
    return start.driver.eventElapsedMs(start.handle, end.handle);
  }

  record(stream: Stream): void {
    this.driver.eventRecord(this.handle, stream.handle);
  }

  /** Records into the graph being captured on `stream`: every replay records the event (timing a graph's parts). */
  recordInCapture(stream: Stream): void {
    this.driver.eventRecordExternal(this.handle, stream.handle);
  }

  /** Blocks until the work before the last record() has finished. */
  synchronize(): void {
    this.driver.eventSynchronize(this.handle);
  }

  /** Whether the work before the last record() has finished (does not wait). */
  query(): boolean {
    return this.driver.eventQuery(this.handle);
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.driver.eventDestroy(this.handle);
  }
}
