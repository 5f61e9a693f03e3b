// Kernel timelines (FUSEFORMER_TIMELINE=1): where a replayed decode step's time goes with its kernels
// still chained by programmatic launches. The marker-node profile breaks that chain (each op timed
// alone) and the removal profile confounds neighbours (removing one kernel lets the next one prefetch
// more); a timeline keeps the step as it runs.
//
// Kernels built with -DFUSEFORMER_TIMELINE -DFUSEFORMER_KERNEL_TAG=n (device-lib.ts) stamp %globaltimer
// and their tag from block (0, 0, 0) when GRID_DEPENDENCY_WAIT returns (its thread 0; with
// GRID_DEPENDENCY_WAIT_ONE, the one thread that waits: the streamed GEMM's producer) — when every kernel before them
// has completed. So in a chain, stamp i + 1 − stamp i is kernel i's time on the step's critical path:
// from the moment it could start computing to its completion, its launch and weight prefetch already
// hidden under the kernel before. A kernel that never waits (cuBLASLt's, or one without the macro)
// leaves no stamp: its time lands on the stamped kernel before it.
//
// This file: the tag of a kernel, the NVRTC options, the device buffer and its host side, and the
// arithmetic on the stamps. The buffer is u64 words: [0] stamps taken, [1] capacity, then a
// (time in ns, tag) pair per stamp; each module's `fuseformer_timeline` variable points at it.

import type { CudaDriver } from '../../../cuda/driver.js';
import { CudaError } from '../../../errors.js';
import type { DeviceBlock } from './tensor.js';

/** The __device__ pointer each timeline module holds (device-lib.ts). */
export const TIMELINE_VARIABLE = 'fuseformer_timeline';

/** cuModuleGetGlobal's status for a variable the module does not have. */
const CUDA_ERROR_NOT_FOUND = 500;

/** Whether this process builds timeline kernels: FUSEFORMER_TIMELINE=1 when the runtime is created. */
export function timelineRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  return env['FUSEFORMER_TIMELINE'] === '1';
}

/** A kernel's tag: FNV-1a of its name, 31 bits (stable across runs, so cached cubins stay valid). */
export function kernelTag(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h & 0x7fffffff;
}

/** The NVRTC options that make `name` a timeline kernel. */
export function timelineOptions(name: string): string[] {
  return ['-DFUSEFORMER_TIMELINE', `-DFUSEFORMER_KERNEL_TAG=${kernelTag(name)}ull`];
}

export interface TimelineStamp {
  /** ns since the first stamp of the read. */
  readonly ns: number;
  readonly kernel: string;
}

/**
 * The stamps in a downloaded buffer, in time order; `names` maps tags to kernel names (an unknown tag is
 * shown as such). `dropped`: stamps past the capacity (the buffer was too small for the run).
 */
export function parseTimeline(words: BigUint64Array, names: ReadonlyMap<number, string>): { stamps: TimelineStamp[]; dropped: number } {
  if (words.length < 2) throw new RangeError(`a timeline buffer has at least 2 words, got ${words.length}`);
  const taken = Number(words[0]!), capacity = Number(words[1]!);
  const kept = Math.min(taken, capacity, Math.floor((words.length - 2) / 2));
  const raw = Array.from({ length: kept }, (_, i) => ({ t: words[2 + 2 * i]!, tag: Number(words[3 + 2 * i]!) }));
  raw.sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : 0));
  const t0 = raw[0]?.t ?? 0n;
  const stamps = raw.map((r) => ({ ns: Number(r.t - t0), kernel: names.get(r.tag) ?? `(unknown tag ${r.tag})` }));
  return { stamps, dropped: Math.max(0, taken - kept) };
}

export interface ChainTime {
  readonly kernel: string;
  /** µs from this kernel's stamp to the next one: its time on the chain. */
  readonly us: number;
}

/** Each stamp's time until the next stamp (the last stamp has no successor and is left out). */
export function chainTimes(stamps: readonly TimelineStamp[]): ChainTime[] {
  return stamps.slice(0, -1).map((s, i) => ({ kernel: s.kernel, us: (stamps[i + 1]!.ns - s.ns) / 1000 }));
}

/**
 * The stamps cut into steps, each starting at a stamp of `firstKernel` (a decode step's embedding); the
 * last kernel of a step runs until the next step's first stamp, so only complete steps are returned.
 */
export function stepChains(stamps: readonly TimelineStamp[], firstKernel: (name: string) => boolean): ChainTime[][] {
  const starts = stamps.flatMap((s, i) => (firstKernel(s.kernel) ? [i] : []));
  const steps: ChainTime[][] = [];
  for (let k = 0; k + 1 < starts.length; k++) steps.push(chainTimes(stamps.slice(starts[k], starts[k + 1]! + 1)));
  return steps;
}

export interface KernelChainSummary {
  readonly kernel: string;
  /** Stamps of this kernel per step. */
  readonly perStep: number;
  /** Median µs of one stamp on the chain. */
  readonly medianUs: number;
  /** µs a step, on average. */
  readonly stepUs: number;
}

/** Per kernel name over complete steps: stamps a step, the median µs of one, µs a step; in first-seen order. */
export function summarizeChains(steps: readonly ChainTime[][]): { kernels: KernelChainSummary[]; stepUs: number[] } {
  const byName = new Map<string, number[]>();
  for (const step of steps) for (const c of step) byName.set(c.kernel, [...(byName.get(c.kernel) ?? []), c.us]);
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const kernels = [...byName].map(([kernel, us]) => ({
    kernel, perStep: us.length / steps.length, medianUs: median(us), stepUs: us.reduce((a, b) => a + b, 0) / steps.length,
  }));
  return { kernels, stepUs: steps.map((s) => s.reduce((a, c) => a + c.us, 0)) };
}

export interface KernelRoleSummary {
  readonly kernel: string;
  /** Which of the kernel's stamps a layer this is (0, 1, …), or 'after' for stamps past the last layer's. */
  readonly role: number | 'after';
  /** Stamps of this role per step. */
  readonly perStep: number;
  readonly medianUs: number;
}

/**
 * Per kernel name and role over complete steps, where a kernel stamped r·layers (+ a few) times a step
 * has r roles a layer: its k-th stamp of a step is role k mod r — a decode step's output projection and
 * down projection share one kernel and alternate, 0 and 1 — and stamps past r·layers (the LM head on
 * the output projection's kernel) are 'after'. Kernels stamped fewer than `layers` times a step keep one
 * role per stamp. In first-seen order.
 */
export function summarizeRoles(steps: readonly ChainTime[][], layers: number): KernelRoleSummary[] {
  if (!Number.isInteger(layers) || layers < 1) throw new RangeError(`layers must be a positive integer, got ${layers}`);
  const counts = new Map<string, number>();
  for (const c of steps[0] ?? []) counts.set(c.kernel, (counts.get(c.kernel) ?? 0) + 1);
  const byRole = new Map<string, { kernel: string; role: number | 'after'; us: number[] }>();
  for (const step of steps) {
    const seen = new Map<string, number>();
    for (const c of step) {
      const k = seen.get(c.kernel) ?? 0;
      seen.set(c.kernel, k + 1);
      const count = counts.get(c.kernel) ?? 0;
      const perLayer = Math.floor(count / layers);
      const role: number | 'after' = perLayer === 0 ? k : k < perLayer * layers ? k % perLayer : 'after';
      const key = `${c.kernel}\u0000${role}`;
      const entry = byRole.get(key) ?? { kernel: c.kernel, role, us: [] };
      entry.us.push(c.us);
      byRole.set(key, entry);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  return [...byRole.values()].map((e) => ({ kernel: e.kernel, role: e.role, perStep: e.us.length / steps.length, medianUs: median(e.us) }));
}

/**
 * The runtime's side: the modules built with the flag (their `fuseformer_timeline` set when the buffer
 * exists), the tag → name map, and the buffer. arm() before the work to record, read() after it.
 */
export class KernelTimeline {
  private readonly modules: bigint[] = [];
  private readonly names = new Map<number, string>();
  private buffer: DeviceBlock | null = null;
  private capacity = 0;

  constructor(private readonly driver: CudaDriver, private readonly allocate: (bytes: number) => DeviceBlock) {}

  /** A module just loaded with timelineOptions(name); pointed at the buffer now if it exists. */
  add(module: bigint, name: string, canCopy: boolean): void {
    this.names.set(kernelTag(name), name);
    this.modules.push(module);
    if (this.buffer && canCopy) this.point(module);
  }

  /** Room for `capacity` stamps, emptied, and every timeline module pointed at it (outside graph capture). */
  arm(capacity: number): void {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`timeline capacity must be a positive integer, got ${capacity}`);
    if (!this.buffer || capacity > this.capacity) this.buffer = this.allocate(8 * (2 + 2 * capacity));
    this.capacity = capacity;
    this.driver.memcpyHostToDevice(this.buffer.ptr, new Uint8Array(BigUint64Array.of(0n, BigInt(capacity)).buffer));
    for (const module of this.modules) this.point(module);
  }

  /** The stamps so far (the caller has synchronized the stream). */
  read(): { stamps: TimelineStamp[]; dropped: number } {
    if (!this.buffer) throw new Error('timeline: arm() it before reading');
    const words = new BigUint64Array(2 + 2 * this.capacity);
    this.driver.memcpyDeviceToHost(new Uint8Array(words.buffer), this.buffer.ptr);
    return parseTimeline(words, this.names);
  }

  private point(module: bigint): void {
    let variable: { ptr: bigint; bytes: number };
    try {
      variable = this.driver.moduleGetGlobal(module, TIMELINE_VARIABLE);
    } catch (error) {
      // A module without DEVICE_LIB (or whose compiler dropped the unused variable) has no stamps.
      if (error instanceof CudaError && error.code === CUDA_ERROR_NOT_FOUND) return;
      throw error;
    }
    this.driver.memcpyHostToDevice(variable.ptr, new Uint8Array(BigUint64Array.of(this.buffer!.ptr).buffer));
  }
}
