// Page-locked host buffers for copies that must not wait for the stream.
//   downloads  a device-to-host copy into pageable memory (a JS array) makes the driver wait for the
//              copy, and so for everything queued before it; into page-locked memory it returns at once
//              and an event says when it is done (download(): the serving engine's pipelined steps read
//              a step's sampled tokens this way while the next step already runs);
//   uploads    a host-to-device copy from pageable memory is staged by the driver, which "may
//              synchronize with the stream" to do so (CUDA's API synchronization notes); copied here into
//              a page-locked buffer first, it is queued without any wait (upload(), opt-in:
//              CudaRuntime.pinnedUploads). A buffer is reused once the event recorded after its copy has
//              completed.
// Buffers are allocated on first need (a power of two of at least 4 KiB), live as long as the runtime
// (the process), and are read and written through views of their memory (koffi.view); downloads hand
// out copies, never the view.

import { FuseformerError } from '../../../errors.js';

/** A download in flight: wait() blocks until the stream has reached it and returns what was read of its bytes (the same on every call). */
export interface PendingBytes<T = Uint8Array> {
  wait(): T;
  /** Whether wait() would return without blocking. */
  ready(): boolean;
}

/** An event on the stream (runtime/device.ts Event). */
export interface StagingEvent {
  record(stream: unknown): void;
  synchronize(): void;
  query(): boolean;
}

/** What the staging needs of the device (the runtime's driver; a fake in the CPU tests). */
export interface PinnedHost<S> {
  /** `bytes` of page-locked host memory: its address and a view of it. */
  alloc(bytes: number): { host: bigint; memory: Uint8Array };
  copyToHost(dst: bigint, src: bigint, bytes: number, stream: S): void;
  copyToDevice(dst: bigint, src: bigint, bytes: number, stream: S): void;
  event(): StagingEvent;
}

interface PinnedBuffer {
  readonly host: bigint;
  readonly bytes: number;
  readonly memory: Uint8Array;
  readonly done: StagingEvent;
  /** A copy through it is queued and not known to be done. */
  busy: boolean;
}

/** Downloads in flight at once at most: more means a caller never waits for its downloads. */
export const MAX_PENDING_DOWNLOADS = 64;
/** Upload buffers at most; past them an upload waits for the oldest buffer's copy. */
export const MAX_UPLOAD_BUFFERS = 64;
/** Uploads larger than this go the driver's way (weights at load time: pinning them all would cost more than it saves). */
export const PINNED_UPLOAD_MAX_BYTES = 4 << 20;

export class PinnedStaging<S> {
  private readonly downloads: PinnedBuffer[] = [];
  private readonly uploads: PinnedBuffer[] = [];
  /** Upload buffers in the order their copies were queued (the oldest first). */
  private readonly uploadOrder: PinnedBuffer[] = [];

  constructor(private readonly device: PinnedHost<S>) {}

  /**
   * Queues a copy of `bytes` bytes at device address `src` on `stream`; returns without waiting. wait()
   * hands the page-locked bytes to `read` once (the buffer is reused after it returns: read copies what it keeps).
   */
  download<T>(src: bigint, bytes: number, stream: S, read: (memory: Uint8Array) => T): PendingBytes<T> {
    let buffer = this.downloads.find((b) => !b.busy && b.bytes >= bytes);
    if (!buffer) {
      if (this.downloads.filter((b) => b.busy).length >= MAX_PENDING_DOWNLOADS) {
        throw new FuseformerError(`downloadLater: ${MAX_PENDING_DOWNLOADS} downloads are in flight and none was waited for; call wait() on each`);
      }
      this.downloads.push((buffer = this.allocate(bytes)));
    }
    const taken = buffer;
    taken.busy = true;
    try {
      this.device.copyToHost(taken.host, src, bytes, stream);
      taken.done.record(stream);
    } catch (error) {
      taken.busy = false;
      throw error;
    }
    let done = false, result: T;
    return {
      wait: () => {
        if (!done) {
          taken.done.synchronize();
          try {
            result = read(taken.memory.subarray(0, bytes));
          } finally {
            taken.busy = false;
          }
          done = true;
        }
        return result;
      },
      ready: () => done || taken.done.query(),
    };
  }

  /** Queues a copy of `data` to device address `dst` on `stream` through a page-locked buffer; `data` may change as soon as this returns. */
  upload(dst: bigint, data: Uint8Array, stream: S): void {
    const buffer = this.uploadBuffer(data.byteLength);
    buffer.memory.set(data);
    this.device.copyToDevice(dst, buffer.host, data.byteLength, stream);
    buffer.done.record(stream);
    buffer.busy = true;
    this.uploadOrder.push(buffer);
  }

  /** Buffers allocated so far (for tests and statistics). */
  get buffers(): { downloads: number; uploads: number } {
    return { downloads: this.downloads.length, uploads: this.uploads.length };
  }

  /** A free upload buffer of at least `bytes`: one whose copy is done, a new one, or (at the cap) the oldest, once its copy is done. */
  private uploadBuffer(bytes: number): PinnedBuffer {
    // Copies complete in stream order: the buffers queued first are the ones to look at.
    while (this.uploadOrder.length > 0 && this.uploadOrder[0]!.done.query()) this.uploadOrder.shift()!.busy = false;
    const free = this.uploads.find((b) => !b.busy && b.bytes >= bytes);
    if (free) return free;
    // Below the cap, or no buffer this large at all: a new one.
    if (this.uploads.length < MAX_UPLOAD_BUFFERS || !this.uploads.some((b) => b.bytes >= bytes)) {
      const buffer = this.allocate(bytes);
      this.uploads.push(buffer);
      return buffer;
    }
    // At the cap: wait for the oldest copies until a buffer large enough is free (one is busy: none was free above).
    for (;;) {
      const oldest = this.uploadOrder.shift()!;
      oldest.done.synchronize();
      oldest.busy = false;
      if (oldest.bytes >= bytes) return oldest;
    }
  }

  private allocate(bytes: number): PinnedBuffer {
    const size = Math.max(4096, 2 ** Math.ceil(Math.log2(Math.max(1, bytes))));
    const { host, memory } = this.device.alloc(size);
    return { host, bytes: size, memory, done: this.device.event(), busy: false };
  }
}
