// Running ops now, or recording them into a graph. Each op validates its arguments when it is
// called and hands back a CpuWork: the computation with its tensors and scalars already bound.
// Outside a capture the work runs at once. Inside captureGraph(fn) it is recorded instead, and
// replay() runs the recorded works in order — the same semantics as a CUDA graph: fn's own
// JavaScript runs once, at capture; the ops re-run on every replay, reading the tensors' current
// contents but with the scalar arguments (seeds, offsets, scales) frozen as they were at capture.

import { ArgumentError } from '../../errors.js';
import type { Graph } from '../backend.js';
import type { CpuTensor } from './tensor.js';

export interface CpuWork {
  readonly op: string;
  /** Every tensor the op reads or writes, by argument name. */
  readonly tensors: readonly { readonly name: string; readonly tensor: CpuTensor }[];
  readonly run: () => void;
}

export class WorkQueue {
  private recording: CpuWork[] | null = null;

  get capturing(): boolean {
    return this.recording !== null;
  }

  issue(work: CpuWork): void {
    if (this.recording) this.recording.push(work);
    else work.run();
  }

  /** Throws if a graph is being captured: `what` needs results the captured ops have not produced. */
  refuseWhileCapturing(what: string): void {
    if (this.recording) {
      throw new ArgumentError(`${what}: not allowed during graph capture (the captured ops have not run yet; call it after replay())`);
    }
  }

  capture(fn: () => void): Graph {
    this.refuseWhileCapturing('captureGraph');
    const works: CpuWork[] = [];
    this.recording = works;
    try {
      fn();
    } finally {
      this.recording = null;
    }
    return new CpuGraph(works, this);
  }
}

class CpuGraph implements Graph {
  private disposed = false;

  constructor(private readonly works: readonly CpuWork[], private readonly queue: WorkQueue) {}

  /** Replaying inside another capture records the whole graph as one step of the outer graph. */
  replay(): void {
    if (this.disposed) throw new ArgumentError('graph replay: the graph was disposed');
    this.queue.issue({ op: 'graph replay', tensors: this.works.flatMap((w) => w.tensors), run: () => this.runAll() });
  }

  private runAll(): void {
    for (const work of this.works) {
      for (const { name, tensor } of work.tensors) {
        if (tensor.allocation.freed) throw new ArgumentError(`graph replay: '${name}' of ${work.op} was freed after capture`);
      }
    }
    for (const work of this.works) work.run();
  }

  dispose(): void {
    this.disposed = true;
  }
}
