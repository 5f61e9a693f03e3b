// The Communicator: collectives over the tensors of one backend, one instance per rank. Layers and
// trainers program against this interface (SPMD: every rank runs the same code and issues the same
// collectives in the same order); two implementations meet it:
//   - NcclCommunicator (this file): NCCL on the CUDA backend's stream, one process per GPU;
//   - InProcessCommunicator (in-process.ts): N CPU-backend ranks as worker threads of one process,
//     exchanging host copies through shared memory — the oracle that tests the parallel math.
//
// Semantics (all tensors contiguous, same dtype; every rank passes the same shapes):
//   allReduce(t, op)          t ← op over ranks of t                       (in place)
//   allGather(input, output)  output [world·n] = input_0 ‖ input_1 ‖ …       (flat, in rank order)
//   reduceScatter(in, out)    out [n] = op over ranks of in[rank·n … rank·n+n)
//   broadcast(t, root)        t ← t of rank `root`                           (in place)
// 'avg' is the sum divided by the world size; 'max' the elementwise maximum (vocab-parallel
// cross-entropy's row max).

import type { Backend } from '../backend/backend.js';
import type { CudaBackend } from '../backend/cuda/index.js';
import type { Event, Stream } from '../backend/cuda/runtime/device.js';
import type { CudaTensor } from '../backend/cuda/runtime/tensor.js';
import type { NcclComm } from '../cuda/nccl.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { formatShape } from '../tensor.js';

export type ReduceOp = 'sum' | 'avg' | 'max';

export interface Communicator {
  readonly rank: number;
  readonly worldSize: number;
  readonly backend: Backend;
  allReduce(t: Tensor, op?: ReduceOp): void;
  allGather(input: Tensor, output: Tensor): void;
  reduceScatter(input: Tensor, output: Tensor, op?: ReduceOp): void;
  broadcast(t: Tensor, root: number): void;
  /**
   * Issues the collectives of `fn` so that they may run at the same time as compute issued later:
   * NCCL queues them on a communication stream that first waits for everything queued so far on the
   * compute stream (an event and cuStreamWaitEvent); in-process ranks run them at once. Every tensor
   * they touch must be left alone by the compute stream until joinOverlapped().
   */
  overlapped(fn: () => void): void;
  /** Makes later compute wait for every collective issued through overlapped() (no host wait). */
  joinOverlapped(): void;
  /** Releases the communicator (NCCL: ncclCommDestroy). */
  destroy(): void;
}

/** Shape and dtype checks shared by the implementations; names the collective and the problem. */
export function checkCollective(kind: 'allReduce' | 'allGather' | 'reduceScatter' | 'broadcast', comm: { worldSize: number }, a: Tensor, b?: Tensor, root?: number): void {
  for (const t of b ? [a, b] : [a]) {
    if (!t.isContiguous) throw new ArgumentError(`${kind}: tensor ${formatShape(t.shape)} must be contiguous`);
  }
  if (b && a.dtype !== b.dtype) throw new ArgumentError(`${kind}: input is ${a.dtype} but output is ${b.dtype}`);
  if (kind === 'allGather' && b!.numel !== a.numel * comm.worldSize) {
    throw new ArgumentError(`${kind}: output ${formatShape(b!.shape)} must hold worldSize (${comm.worldSize}) × input ${formatShape(a.shape)} elements`);
  }
  if (kind === 'reduceScatter' && a.numel !== b!.numel * comm.worldSize) {
    throw new ArgumentError(`${kind}: input ${formatShape(a.shape)} must hold worldSize (${comm.worldSize}) × output ${formatShape(b!.shape)} elements`);
  }
  if (root !== undefined && (!Number.isInteger(root) || root < 0 || root >= comm.worldSize)) {
    throw new ArgumentError(`${kind}: root ${root} is outside [0, ${comm.worldSize})`);
  }
}

/**
 * NCCL on the CUDA backend: every collective is queued on the backend's stream, so it runs after the
 * ops that produced its input and before the ops that read its output, with no host synchronisation.
 * 'avg' is ncclAvg (NCCL ≥ 2.10).
 */
export class NcclCommunicator implements Communicator {
  readonly rank: number;
  readonly worldSize: number;
  /** The communication stream of overlapped() and its two events (made on first use). */
  private side?: { readonly stream: Stream; readonly fork: Event; readonly join: Event };
  /** Collectives were issued on the communication stream since the last join. */
  private pendingJoin = false;

  constructor(readonly backend: CudaBackend, readonly comm: NcclComm) {
    this.rank = comm.rank;
    this.worldSize = comm.worldSize;
  }

  /** The runtime's current stream (the compute stream unless withStream() says otherwise). */
  private get stream(): bigint { return this.backend.runtime.current.handle; }

  private ptr(t: Tensor, kind: string): bigint {
    if (t.backend !== 'cuda') throw new ArgumentError(`${kind}: tensor ${formatShape(t.shape)} is on the ${t.backend} backend; NCCL needs CUDA tensors`);
    return (t as CudaTensor).ptr;
  }

  allReduce(t: Tensor, op: ReduceOp = 'sum'): void {
    checkCollective('allReduce', this, t);
    const p = this.ptr(t, 'allReduce');
    this.comm.allReduce(p, p, t.numel, t.dtype, op, this.stream);
  }

  allGather(input: Tensor, output: Tensor): void {
    checkCollective('allGather', this, input, output);
    this.comm.allGather(this.ptr(input, 'allGather'), this.ptr(output, 'allGather'), input.numel, input.dtype, this.stream);
  }

  reduceScatter(input: Tensor, output: Tensor, op: ReduceOp = 'sum'): void {
    checkCollective('reduceScatter', this, input, output);
    this.comm.reduceScatter(this.ptr(input, 'reduceScatter'), this.ptr(output, 'reduceScatter'), output.numel, input.dtype, op, this.stream);
  }

  broadcast(t: Tensor, root: number): void {
    checkCollective('broadcast', this, t, undefined, root);
    const p = this.ptr(t, 'broadcast');
    this.comm.broadcast(p, p, t.numel, t.dtype, root, this.stream);
  }

  /**
   * fork: record an event on the current (compute) stream, make the communication stream wait for it,
   * issue fn's collectives there. Inside a graph capture the same calls fork the capture onto the
   * second stream; joinOverlapped() joins it back before the capture ends.
   */
  overlapped(fn: () => void): void {
    const runtime = this.backend.runtime;
    const side = this.side ??= {
      stream: runtime.device.createStream(), fork: runtime.createEvent({ timing: false }), join: runtime.createEvent({ timing: false }),
    };
    side.fork.record(runtime.current);
    side.stream.waitEvent(side.fork);
    runtime.withStream(side.stream, fn);
    this.pendingJoin = true;
  }

  joinOverlapped(): void {
    if (!this.side || !this.pendingJoin) return;
    const runtime = this.backend.runtime;
    this.side.join.record(this.side.stream);
    runtime.current.waitEvent(this.side.join);
    this.pendingJoin = false;
  }

  destroy(): void {
    this.comm.destroy();
    if (this.side) {
      this.side.stream.synchronize();
      for (const x of [this.side.fork, this.side.join, this.side.stream]) x.destroy();
      this.side = undefined;
    }
  }
}
