// In-process ranks for the CPU backend: N ranks as N worker threads of one process, each with its own
// CpuBackend, running the same SPMD code that would run one-process-per-GPU over NCCL. Collectives
// exchange host copies through one SharedArrayBuffer:
//
//   data:    worldSize slots of `slotBytes` each; a collective writes the rank's host copy into its slot,
//            waits at a barrier, reads every slot, waits again (so no slot is overwritten while read)
//   control: Int32 [arrived, generation, failedRank + 1]: a generation-counting barrier on Atomics.wait;
//            a rank that throws marks itself failed, so its peers stop waiting and fail too
//
// Reductions add the ranks' values in f64 in rank order, so every rank computes bit-identical results
// (as NCCL's ring does in its own fixed order). This is the oracle for the parallel math: it tests the
// splits and the collectives' placement, not speed.

import { Worker } from 'node:worker_threads';
import type { Backend } from '../backend/backend.js';
import { ArgumentError, FuseformerError } from '../errors.js';
import type { HostArray, Tensor } from '../tensor.js';
import type { Communicator, ReduceOp } from './communicator.js';
import { checkCollective } from './communicator.js';

export class RankFailedError extends FuseformerError {}

/** The shared memory of one in-process group (structured-cloneable: SharedArrayBuffers are shared, not copied). */
export interface InProcessGroup {
  readonly worldSize: number;
  readonly slotBytes: number;
  readonly control: SharedArrayBuffer;
  readonly data: SharedArrayBuffer;
  /** A barrier waiting longer than this fails (a rank stuck or diverged). */
  readonly timeoutMs: number;
}

export function createInProcessGroup(worldSize: number, options: { slotBytes?: number; timeoutMs?: number } = {}): InProcessGroup {
  if (!Number.isInteger(worldSize) || worldSize < 1) throw new ArgumentError(`in-process group: world size must be a positive integer, got ${worldSize}`);
  const slotBytes = options.slotBytes ?? 4 << 20;
  if (slotBytes % 8 !== 0) throw new ArgumentError(`in-process group: slotBytes ${slotBytes} must be a multiple of 8`);
  return {
    worldSize, slotBytes, timeoutMs: options.timeoutMs ?? 120_000,
    control: new SharedArrayBuffer(3 * 4), data: new SharedArrayBuffer(worldSize * slotBytes),
  };
}

/** Marks `rank` failed and wakes every waiting peer. */
export function markRankFailed(group: InProcessGroup, rank: number): void {
  const control = new Int32Array(group.control);
  Atomics.compareExchange(control, 2, 0, rank + 1);
  Atomics.add(control, 1, 1);
  Atomics.notify(control, 1);
}

type HostConstructor = Float32ArrayConstructor | Int32ArrayConstructor | Int8ArrayConstructor | Uint8ArrayConstructor;

function hostConstructor(host: HostArray): HostConstructor {
  if (host instanceof Float32Array) return Float32Array;
  if (host instanceof Int32Array) return Int32Array;
  if (host instanceof Int8Array) return Int8Array;
  return Uint8Array;
}

export class InProcessCommunicator implements Communicator {
  readonly worldSize: number;
  private readonly control: Int32Array;

  constructor(readonly backend: Backend, readonly rank: number, readonly group: InProcessGroup) {
    if (!Number.isInteger(rank) || rank < 0 || rank >= group.worldSize) throw new ArgumentError(`in-process rank ${rank} is outside [0, ${group.worldSize})`);
    this.worldSize = group.worldSize;
    this.control = new Int32Array(group.control);
  }

  private barrier(what: string): void {
    const generation = Atomics.load(this.control, 1);
    this.throwIfPeerFailed(what);
    if (Atomics.add(this.control, 0, 1) === this.worldSize - 1) {
      Atomics.store(this.control, 0, 0);
      Atomics.add(this.control, 1, 1);
      Atomics.notify(this.control, 1);
      return;
    }
    const deadline = Date.now() + this.group.timeoutMs;
    while (Atomics.load(this.control, 1) === generation) {
      const left = deadline - Date.now();
      if (left <= 0) throw new RankFailedError(`rank ${this.rank}: ${what} waited ${this.group.timeoutMs} ms for the other ranks (did they issue different collectives?)`);
      Atomics.wait(this.control, 1, generation, Math.min(left, 1000));
    }
    this.throwIfPeerFailed(what);
  }

  private throwIfPeerFailed(what: string): void {
    const failed = Atomics.load(this.control, 2);
    if (failed !== 0) throw new RankFailedError(`rank ${this.rank}: ${what} abandoned because rank ${failed - 1} failed`);
  }

  /** The slot of `rank` viewed as `Ctor`, `count` elements long. */
  private slot<C extends HostConstructor>(Ctor: C, rank: number, count: number): InstanceType<C> {
    return new Ctor(this.group.data as unknown as ArrayBuffer, rank * this.group.slotBytes, count) as InstanceType<C>;
  }

  /** Downloads `t` into this rank's slot; returns the host copy's constructor. */
  private publish(t: Tensor, what: string): HostConstructor {
    const host = this.backend.download(t);
    if (host.byteLength > this.group.slotBytes) throw new ArgumentError(`${what}: ${host.byteLength} bytes exceed the in-process slot of ${this.group.slotBytes} (createInProcessGroup's slotBytes)`);
    const Ctor = hostConstructor(host);
    this.slot(Ctor, this.rank, host.length).set(host as never);
    return Ctor;
  }

  /** Σ (or max) over ranks (f64, rank order) of elements [start, start + count) of every slot. */
  private reduce(Ctor: HostConstructor, start: number, count: number, op: ReduceOp): HostArray {
    const sums = new Float64Array(count).fill(op === 'max' ? -Infinity : 0);
    for (let r = 0; r < this.worldSize; r++) {
      const s = this.slot(Ctor, r, start + count);
      if (op === 'max') for (let i = 0; i < count; i++) sums[i] = Math.max(sums[i]!, s[start + i]!);
      else for (let i = 0; i < count; i++) sums[i]! += s[start + i]!;
    }
    if (op === 'avg') for (let i = 0; i < count; i++) sums[i]! /= this.worldSize;
    const out = new Ctor(count);
    for (let i = 0; i < count; i++) out[i] = Ctor === Float32Array ? sums[i]! : Math.round(sums[i]!);
    return out;
  }

  allReduce(t: Tensor, op: ReduceOp = 'sum'): void {
    checkCollective('allReduce', this, t);
    const Ctor = this.publish(t, 'allReduce');
    this.barrier('allReduce');
    const out = this.reduce(Ctor, 0, t.numel, op);
    this.barrier('allReduce');
    this.backend.upload(t, out);
  }

  allGather(input: Tensor, output: Tensor): void {
    checkCollective('allGather', this, input, output);
    const Ctor = this.publish(input, 'allGather');
    this.barrier('allGather');
    const out = new Ctor(output.numel);
    for (let r = 0; r < this.worldSize; r++) out.set(this.slot(Ctor, r, input.numel) as never, r * input.numel);
    this.barrier('allGather');
    this.backend.upload(output, out);
  }

  reduceScatter(input: Tensor, output: Tensor, op: ReduceOp = 'sum'): void {
    checkCollective('reduceScatter', this, input, output);
    const Ctor = this.publish(input, 'reduceScatter');
    this.barrier('reduceScatter');
    const out = this.reduce(Ctor, this.rank * output.numel, output.numel, op);
    this.barrier('reduceScatter');
    this.backend.upload(output, out);
  }

  broadcast(t: Tensor, root: number): void {
    checkCollective('broadcast', this, t, undefined, root);
    const Ctor = this.rank === root ? this.publish(t, 'broadcast') : hostConstructor(this.backend.download(this.backend.view(t, 0, [0])));
    this.barrier('broadcast');
    const out = new Ctor(t.numel);
    out.set(this.slot(Ctor, root, t.numel) as never);
    this.barrier('broadcast');
    this.backend.upload(t, out);
  }

  /** CPU ops run when issued: there is no second stream to overlap on, so the collectives run now. */
  overlapped(fn: () => void): void {
    fn();
  }

  joinOverlapped(): void {
    // Nothing queued elsewhere to wait for.
  }

  destroy(): void {
    // Nothing to free: the shared buffers go with the group.
  }
}

/** What a rank function receives: its communicator (on its own CpuBackend) and the shared input. */
export type RankFunction<I, O> = (comm: Communicator, input: I) => O | Promise<O>;

/**
 * Runs `exportName` of the module at `moduleUrl` (a RankFunction) on `worldSize` worker-thread ranks
 * and returns each rank's result, in rank order. If one rank throws, its peers are released from their
 * barriers, every worker is stopped and the promise rejects with that rank's error.
 */
export async function runInProcessRanks<I, O>(worldSize: number, moduleUrl: URL, exportName: string, input: I, options: { slotBytes?: number; timeoutMs?: number } = {}): Promise<O[]> {
  const group = createInProcessGroup(worldSize, options);
  const workerUrl = new URL('./in-process-worker.js', import.meta.url);
  const workers = Array.from({ length: worldSize }, (_, rank) => new Worker(workerUrl, { workerData: { group, rank, moduleUrl: moduleUrl.href, exportName, input } }));
  const results = new Array<O>(worldSize);
  const errors: Error[] = [];
  await Promise.all(workers.map((worker, rank) => new Promise<void>((resolve) => {
    let settled = false;
    const fail = (err: Error) => {
      errors.push(err);
      markRankFailed(group, rank);
    };
    worker.on('message', (m: { result?: O; error?: string }) => {
      settled = true;
      if (m.error !== undefined) fail(new RankFailedError(`rank ${rank}: ${m.error}`));
      else results[rank] = m.result as O;
    });
    worker.on('error', (err) => { settled = true; fail(err); });
    worker.on('exit', (code) => {
      if (!settled) fail(new RankFailedError(`rank ${rank} exited with code ${code} without a result`));
      resolve();
    });
  })));
  // The rank that failed first explains it; its peers only report that they were abandoned.
  const cause = errors.find((e) => !(e instanceof RankFailedError && e.message.includes('abandoned because rank'))) ?? errors[0];
  if (cause) throw cause;
  return results;
}
