// Downloads the host reads later: a device-to-host copy queued on the stream into page-locked host
// memory returns at once (one into pageable memory — a JS array — makes the driver wait for the copy,
// and so for everything queued before it). The serving engine's pipelined steps read a step's sampled
// tokens this way while the next step already runs.
//
// The page-locked buffers are allocated on first need (a power of two of at least 4 KiB), reused once a
// download's wait() has returned, and live as long as the runtime (the process); the host reads them
// through a koffi view of their memory and hands out copies, never the view.

import koffi from 'koffi';
import type { CudaDriver } from '../../../cuda/driver.js';
import { FuseformerError } from '../../../errors.js';
import type { Event, Stream } from './device.js';

/** A download in flight: wait() blocks until the stream has reached it and returns the bytes (the same ones on every call). */
export interface PendingBytes {
  wait(): Uint8Array;
}

interface PinnedBuffer {
  readonly host: bigint;
  readonly bytes: number;
  readonly memory: Uint8Array;
  readonly done: Event;
  busy: boolean;
}

/** Downloads in flight at once at most: more means a caller never waits for its downloads. */
export const MAX_PENDING_DOWNLOADS = 64;

export class PinnedStaging {
  private readonly buffers: PinnedBuffer[] = [];

  constructor(private readonly driver: CudaDriver, private readonly createEvent: () => Event) {}

  /** Queues a copy of `bytes` bytes at device address `src` on `stream`; returns without waiting. */
  download(src: bigint, bytes: number, stream: Stream): PendingBytes {
    const buffer = this.buffers.find((b) => !b.busy && b.bytes >= bytes) ?? this.allocate(bytes);
    buffer.busy = true;
    try {
      this.driver.memcpyDeviceToPinnedAsync(buffer.host, src, bytes, stream.handle);
      buffer.done.record(stream);
    } catch (error) {
      buffer.busy = false;
      throw error;
    }
    let result: Uint8Array | undefined;
    return {
      wait: () => {
        if (result === undefined) {
          buffer.done.synchronize();
          result = buffer.memory.slice(0, bytes);
          buffer.busy = false;
        }
        return result;
      },
    };
  }

  private allocate(bytes: number): PinnedBuffer {
    if (this.buffers.filter((b) => b.busy).length >= MAX_PENDING_DOWNLOADS) {
      throw new FuseformerError(`downloadLater: ${MAX_PENDING_DOWNLOADS} downloads are in flight and none was waited for; call wait() on each`);
    }
    const size = Math.max(4096, 2 ** Math.ceil(Math.log2(Math.max(1, bytes))));
    const host = this.driver.memHostAlloc(size);
    const buffer = { host, bytes: size, memory: new Uint8Array(koffi.view(host, size)), done: this.createEvent(), busy: false };
    this.buffers.push(buffer);
    return buffer;
  }
}
