// CUDA graphs: everything issued on a stream while fn() runs is recorded (not executed) and
// instantiated once; replay() then relaunches the whole sequence with one call, which removes the
// per-kernel launch cost (~2–5 µs each) from training and decode steps made of hundreds of kernels.
//
// Capture records device addresses and argument values as they were during fn(): buffers must stay
// allocated and at the same address for as long as the graph is replayed.

import { ArgumentError } from '../../../errors.js';
import type { Graph } from '../../backend.js';
import type { CudaDriver, StreamCaptureMode } from '../../../cuda/driver.js';
import type { Stream } from './device.js';

export class CudaGraph implements Graph {
  private exec: bigint | null;

  private constructor(private readonly driver: CudaDriver, private readonly stream: Stream, exec: bigint) {
    this.exec = exec;
  }

  /**
   * Captures the work `fn` issues on `stream`. 'global' mode (the default) makes the driver reject
   * calls that would be unsafe during capture (synchronization, cuMemAlloc) from any thread, so a
   * mistake fails loudly at capture time instead of producing a graph that misses work.
   */
  static capture(driver: CudaDriver, stream: Stream, fn: () => void, mode: StreamCaptureMode = 'global'): CudaGraph {
    driver.streamBeginCapture(stream.handle, mode);
    try {
      fn();
    } catch (err) {
      // Capture must end even when fn fails, or the stream stays unusable.
      const partial = driver.streamEndCaptureQuietly(stream.handle);
      if (partial !== 0n) driver.graphDestroy(partial);
      throw err;
    }
    const graph = driver.streamEndCapture(stream.handle);
    try {
      return new CudaGraph(driver, stream, driver.graphInstantiate(graph));
    } finally {
      // The executable graph is self-contained; the template is no longer needed.
      driver.graphDestroy(graph);
    }
  }

  /** Launches the recorded work on the stream it was captured from (asynchronously). */
  replay(): void {
    if (this.exec === null) throw new ArgumentError('cannot replay a CUDA graph after dispose()');
    this.driver.graphLaunch(this.exec, this.stream.handle);
  }

  dispose(): void {
    if (this.exec === null) return;
    const exec = this.exec;
    this.exec = null;
    this.driver.graphExecDestroy(exec);
  }
}
