// Activation memory planning (LightSeq2's fourth technique): every buffer a step needs declares when
// it is first written and last read, and all of them are laid into one arena so that buffers whose
// lifetimes do not overlap share bytes. The arena is allocated once, so a step makes no allocations
// and can be captured into a CUDA graph.
//
// Placement is "greedy by size": the largest buffers are placed first, each at the lowest
// (aligned) offset that does not collide in memory with an already placed buffer alive at the same
// time. The result is never below the peak of live bytes (a lower bound for any placement) and on the
// layer-shaped lifetimes of Transformer steps is typically at or near it.

import { ArgumentError } from '../errors.js';

export interface BufferRequest {
  readonly name: string;
  readonly bytes: number;
  /** Index of the step (op) that first writes the buffer. */
  readonly start: number;
  /** Index of the last step that reads it (inclusive); start <= end. */
  readonly end: number;
}

export interface Placement extends BufferRequest {
  readonly offset: number;
}

export interface ArenaPlan {
  readonly placements: ReadonlyMap<string, Placement>;
  /** Bytes of the arena: the highest placed end offset. */
  readonly arenaBytes: number;
  /** The most bytes alive at any one step: no placement can use less. */
  readonly peakLiveBytes: number;
  /** Bytes if every buffer had its own memory. */
  readonly unsharedBytes: number;
}

function alignUp(x: number, alignment: number): number {
  return Math.ceil(x / alignment) * alignment;
}

function checkRequests(requests: readonly BufferRequest[], alignment: number): void {
  if (!Number.isInteger(alignment) || alignment < 1) throw new ArgumentError(`planArena: alignment must be a positive integer, got ${alignment}`);
  const names = new Set<string>();
  for (const r of requests) {
    if (names.has(r.name)) throw new ArgumentError(`planArena: buffer '${r.name}' is requested twice`);
    names.add(r.name);
    if (!Number.isSafeInteger(r.bytes) || r.bytes < 0) throw new ArgumentError(`planArena: buffer '${r.name}' has invalid size ${r.bytes}`);
    if (!Number.isInteger(r.start) || !Number.isInteger(r.end) || r.start < 0 || r.end < r.start) {
      throw new ArgumentError(`planArena: buffer '${r.name}' has invalid lifetime [${r.start}, ${r.end}]`);
    }
  }
}

function livesOverlap(a: BufferRequest, b: BufferRequest): boolean {
  return a.start <= b.end && b.start <= a.end;
}

/** The most bytes alive at any step (each buffer counted at its aligned size). */
export function peakLiveBytes(requests: readonly BufferRequest[], alignment = 1): number {
  // Sweep over lifetime boundaries: +bytes at start, −bytes after end.
  const events: [number, number][] = [];
  for (const r of requests) {
    const bytes = alignUp(r.bytes, alignment);
    events.push([r.start, bytes], [r.end + 1, -bytes]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let live = 0, peak = 0;
  for (const [, delta] of events) { live += delta; peak = Math.max(peak, live); }
  return peak;
}

export function planArena(requests: readonly BufferRequest[], alignment = 256): ArenaPlan {
  checkRequests(requests, alignment);
  const order = [...requests].sort((a, b) => b.bytes - a.bytes || a.start - b.start || a.name.localeCompare(b.name));
  const placed: Placement[] = [];
  let arenaBytes = 0;
  for (const request of order) {
    const size = alignUp(request.bytes, alignment);
    // Address ranges taken by buffers alive at the same time, in address order.
    const taken = placed.filter((p) => livesOverlap(p, request)).map((p) => [p.offset, p.offset + alignUp(p.bytes, alignment)] as const);
    taken.sort((a, b) => a[0] - b[0]);
    let offset = 0;
    for (const [begin, end] of taken) {
      if (offset + size <= begin) break;
      offset = Math.max(offset, end);
    }
    placed.push({ ...request, offset });
    arenaBytes = Math.max(arenaBytes, offset + size);
  }
  return {
    placements: new Map(placed.map((p) => [p.name, p])),
    arenaBytes,
    peakLiveBytes: peakLiveBytes(requests, alignment),
    unsharedBytes: requests.reduce((sum, r) => sum + alignUp(r.bytes, alignment), 0),
  };
}
