// The page-locked staging of downloadLater() and pinned uploads (runtime/pinned.ts), without a GPU: a fake
// device whose copies complete when the test says so. Downloads: a buffer per download in flight, wait()
// waits for its event and hands the bytes to its reader once, buffers reused once waited for (a failing
// reader included), a cap on downloads never waited for. Uploads: the bytes copied into a buffer at once (the caller's array may change), buffers
// reused once their copy's event completed (oldest first), new ones while all are busy, and past the cap
// the oldest copies waited for.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_PENDING_DOWNLOADS, MAX_UPLOAD_BUFFERS, PinnedStaging } from '../../../../src/backend/cuda/runtime/pinned.js';
import type { PinnedHost, StagingEvent } from '../../../../src/backend/cuda/runtime/pinned.js';

const copy = (memory: Uint8Array) => memory.slice();

/** A device of page-locked buffers (plain arrays by address) and a stream of copies that run when flush() says. */
class FakeDevice implements PinnedHost<'stream'> {
  readonly memory = new Map<bigint, Uint8Array>();
  readonly deviceMemory = new Map<bigint, Uint8Array>();
  readonly queue: (() => void)[] = [];
  allocations = 0;
  syncs = 0;
  private next = 0x1000n;

  alloc(bytes: number): { host: bigint; memory: Uint8Array } {
    const host = this.next, memory = new Uint8Array(bytes);
    this.next += BigInt(bytes);
    this.memory.set(host, memory);
    this.allocations++;
    return { host, memory };
  }

  copyToHost(dst: bigint, src: bigint, bytes: number): void {
    this.queue.push(() => this.memory.get(dst)!.set(this.deviceMemory.get(src)!.subarray(0, bytes)));
  }

  copyToDevice(dst: bigint, src: bigint, bytes: number): void {
    this.queue.push(() => this.deviceMemory.set(dst, this.memory.get(src)!.slice(0, bytes)));
  }

  event(): StagingEvent {
    const device = this;
    let recordedAt = -1;
    return {
      record: () => { recordedAt = device.issued + device.queue.length; },
      synchronize: () => { device.syncs++; device.runUntil(recordedAt); },
      query: () => device.issued >= recordedAt,
    };
  }

  /** Copies run so far. */
  issued = 0;

  /** Runs the queued copies up to the count `until` (all when omitted). */
  runUntil(until = Infinity): void {
    while (this.issued < until && this.queue.length > 0) {
      this.queue.shift()!();
      this.issued++;
    }
  }
}

test('downloads: queued without waiting, wait() gives the bytes of that point, buffers reused once waited for', () => {
  const device = new FakeDevice(), staging = new PinnedStaging(device);
  device.deviceMemory.set(0xd0n, Uint8Array.from([1, 2, 3, 4]));
  const first = staging.download(0xd0n, 4, 'stream', copy);
  assert.equal(device.queue.length, 1, 'queued, not run');
  const bytes = first.wait();
  assert.deepEqual(Array.from(bytes), [1, 2, 3, 4]);
  assert.equal(first.wait(), bytes, 'the same bytes on every call');
  device.deviceMemory.set(0xd0n, Uint8Array.from([9, 9, 9, 9]));
  assert.deepEqual(Array.from(bytes), [1, 2, 3, 4], 'a copy, not the buffer');
  const second = staging.download(0xd0n, 4, 'stream', copy), third = staging.download(0xd0n, 4, 'stream', copy);
  assert.deepEqual(staging.buffers, { downloads: 2, uploads: 0 }, 'the first buffer reused, a second for the download in flight beside it');
  assert.deepEqual([Array.from(third.wait()), Array.from(second.wait())], [[9, 9, 9, 9], [9, 9, 9, 9]]);
  const pending = Array.from({ length: MAX_PENDING_DOWNLOADS }, () => staging.download(0xd0n, 4, 'stream', copy));
  assert.throws(() => staging.download(0xd0n, 4, 'stream', copy), /downloadLater: 64 downloads are in flight and none was waited for/);
  for (const p of pending) p.wait();
  assert.doesNotThrow(() => staging.download(0xd0n, 4, 'stream', copy).wait());
  // wait() hands the page-locked bytes to its reader once, and the buffer is free again even if the reader throws.
  let reads = 0;
  const summed = staging.download(0xd0n, 4, 'stream', (m) => { reads++; return m.reduce((a, b) => a + b, 0); });
  assert.deepEqual([summed.wait(), summed.wait(), reads], [36, 36, 1]);
  const before = staging.buffers.downloads;
  assert.throws(() => staging.download(0xd0n, 4, 'stream', () => { throw new Error('reader failed'); }).wait(), /reader failed/);
  staging.download(0xd0n, 4, 'stream', copy).wait();
  assert.equal(staging.buffers.downloads, before, 'no buffer left busy by the failed reader');
});

test('uploads: the bytes taken at once; buffers reused oldest first once their copies are done; past the cap the oldest is waited for', () => {
  const device = new FakeDevice(), staging = new PinnedStaging(device);
  const data = Uint8Array.from([5, 6, 7]);
  staging.upload(0xa0n, data, 'stream');
  data.fill(0);  // the caller's array changes at once
  device.runUntil();
  assert.deepEqual(Array.from(device.deviceMemory.get(0xa0n)!), [5, 6, 7]);
  staging.upload(0xa1n, Uint8Array.from([1]), 'stream');
  assert.equal(staging.buffers.uploads, 1, 'the first copy was done: its buffer is reused');
  staging.upload(0xa2n, Uint8Array.from([2]), 'stream');
  assert.equal(staging.buffers.uploads, 2, 'the first buffer is busy again: a second one');
  staging.upload(0xa3n, new Uint8Array(10_000).fill(3), 'stream');
  assert.equal(staging.buffers.uploads, 3, 'a larger size class');
  device.runUntil();
  assert.deepEqual([device.deviceMemory.get(0xa1n)![0], device.deviceMemory.get(0xa2n)![0], device.deviceMemory.get(0xa3n)![9999]], [1, 2, 3]);
  // Fill to the cap with copies that never run by themselves, then one more: it waits for the oldest.
  for (let i = 0; i < MAX_UPLOAD_BUFFERS; i++) staging.upload(BigInt(0x100 + i), Uint8Array.from([i]), 'stream');
  assert.equal(staging.buffers.uploads, MAX_UPLOAD_BUFFERS);
  const syncs = device.syncs;
  staging.upload(0x999n, Uint8Array.from([42]), 'stream');
  assert.equal(staging.buffers.uploads, MAX_UPLOAD_BUFFERS, 'no buffer past the cap');
  assert.equal(device.syncs, syncs + 1, 'the oldest copy waited for');
  device.runUntil();
  assert.equal(device.deviceMemory.get(0x999n)![0], 42);
  for (let i = 0; i < MAX_UPLOAD_BUFFERS; i++) assert.equal(device.deviceMemory.get(BigInt(0x100 + i))![0], i, `upload ${i}`);
});
