// GPU time of work queued on a stream, measured with CUDA events: the GEMM autotuner and benchmark
// use it to rank cuBLASLt's candidate algorithms. Each sample brackets one enqueue between two
// events, so host-side overhead shows up whenever it leaves the GPU idle (the honest number for a
// wrapper), and the median of the samples is robust to the odd clock or scheduling hiccup.

import { CU_EVENT_DEFAULT, StreamCaptureStatus, cudaDriver } from '../../cuda/driver.js';

export interface StreamTimer {
  /** False while the stream is being captured into a graph (events cannot be waited on then). */
  canTime(stream: bigint): boolean;
  /** Milliseconds of GPU time of each of `repeats` runs of `enqueue`, after `warmup` untimed runs. */
  sample(stream: bigint, enqueue: () => void, repeats: number, warmup?: number): number[];
  dispose(): void;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** A StreamTimer on CUDA events (needs the stream's context current on this thread). */
export function cudaEventTimer(): StreamTimer {
  const driver = cudaDriver();
  const start = driver.eventCreate(CU_EVENT_DEFAULT);
  const end = driver.eventCreate(CU_EVENT_DEFAULT);
  return {
    canTime: (stream) => driver.streamCaptureStatus(stream) === StreamCaptureStatus.none,
    sample(stream, enqueue, repeats, warmup = 2) {
      // Warm-up runs also absorb cuBLASLt's lazy loading of a kernel's module on its first launch.
      for (let i = 0; i < warmup; i++) enqueue();
      const times: number[] = [];
      for (let i = 0; i < repeats; i++) {
        driver.eventRecord(start, stream);
        enqueue();
        driver.eventRecord(end, stream);
        driver.eventSynchronize(end);
        times.push(driver.eventElapsedMs(start, end));
      }
      return times;
    },
    dispose() {
      driver.eventDestroy(start);
      driver.eventDestroy(end);
    },
  };
}
