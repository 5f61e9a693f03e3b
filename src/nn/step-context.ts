// The context a training or inference step runs in: it hands out activation buffers and dropout
// streams, and it turns "which buffers exist and who touches them" into planned memory.
//
// A step is a function of a StepContext. It is run twice per shape:
//  1. trace: `ctx.buffer()` returns placeholders and `ctx.ops` (a proxy of the backend) runs nothing;
//     it records, for every op issued, which buffers the op touches. A buffer's lifetime is
//     [first op touching it, last op touching it] — the backward-pass dependency analysis of LightSeq2,
//     derived from the code instead of declared by hand.
//  2. run: the same calls in the same order; `ctx.buffer()` now returns views into one arena laid out
//     by plan.ts, where buffers whose lifetimes do not overlap share bytes.
// Every call to buffer() makes a new buffer, so an activation recomputed in backward (gradient
// checkpointing) is a separate, short-lived buffer rather than one spanning the whole step.
//
// The run must issue buffer() calls in the traced order with the traced shapes (the step is a
// deterministic function of its shape); a mismatch is an error, never silently wrong memory.

import type { Arena, Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { byteSize } from '../dtype.js';
import { ArgumentError, FuseformerError } from '../errors.js';
import { Tensor, formatShape, shapeNumel } from '../tensor.js';
import type { ArenaPlan } from './plan.js';
import { planArena } from './plan.js';

/** Byte alignment of every planned buffer (cuBLASLt's preferred operand alignment). */
export const BUFFER_ALIGNMENT = 256;

export class StepTraceError extends FuseformerError {}

/** A placeholder handed out while tracing: it carries the buffer's identity, never memory. */
class TraceTensor extends Tensor {
  constructor(backend: Backend, readonly bufferIndex: number, shape: readonly number[], dtype: DType) {
    super(backend.name, shape, dtype);
  }
}

export interface TracedBuffer {
  readonly name: string;
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly bytes: number;
  /** Index of the first and last op that touch the buffer (−1 while untouched). */
  first: number;
  last: number;
}

/** Backend methods that are part of a step; everything else (allocation, host transfers) is refused while tracing. */
const TRACED_PASSTHROUGH = new Set(['name', 'description']);
const FORBIDDEN_IN_STEP = new Set(['empty', 'fromArray', 'upload', 'download', 'downloadLater', 'free', 'synchronize', 'captureGraph', 'createArena', 'memoryStats']);

/** Dropout stream of one step: every dropout call takes the next block of Philox counters. */
export interface DropoutStream {
  readonly seed: bigint;
  /** Counter offset of the step's first dropout call. */
  readonly baseOffset: bigint;
  /** False in evaluation: every dropout probability becomes 0. */
  readonly training: boolean;
  /**
   * i32 [2] device scalar added to every dropout offset when the op runs (see DropoutArgs): a step
   * captured into a graph then draws new masks each replay when the caller rewrites it.
   */
  readonly offsetBase?: Tensor;
}

export interface StepContext {
  /** The backend to issue ops on (a recording proxy while tracing). */
  readonly ops: Backend;
  readonly tracing: boolean;
  /** A fresh activation buffer for this step. */
  buffer(name: string, shape: readonly number[], dtype: DType): Tensor;
  /** Reshapes a buffer (or any contiguous tensor) without copying. */
  reshape(t: Tensor, shape: readonly number[]): Tensor;
  /** Seed and counter offset for a dropout over `numel` elements (advances the step's counter). */
  dropout(p: number, numel: number): { p: number; seed: bigint; offset: bigint; offsetBase?: Tensor };
  /**
   * Runs `fn` with the dropout counter rewound to `cursor` (a value of dropoutCursor taken earlier),
   * so a recomputed forward (gradient checkpointing) draws exactly the masks of the original one.
   */
  replayDropout<R>(cursor: bigint, fn: () => R): R;
  readonly dropoutCursor: bigint;
}

abstract class BaseContext implements StepContext {
  abstract readonly ops: Backend;
  abstract readonly tracing: boolean;
  dropoutCursor: bigint;

  constructor(protected readonly backend: Backend, private readonly stream: DropoutStream) {
    this.dropoutCursor = stream.baseOffset;
  }

  replayDropout<R>(cursor: bigint, fn: () => R): R {
    const resume = this.dropoutCursor;
    this.dropoutCursor = cursor;
    try {
      return fn();
    } finally {
      this.dropoutCursor = resume;
    }
  }

  abstract buffer(name: string, shape: readonly number[], dtype: DType): Tensor;

  reshape(t: Tensor, shape: readonly number[]): Tensor {
    if (shapeNumel(shape) !== t.numel) throw new ArgumentError(`reshape: ${formatShape(t.shape)} has ${t.numel} elements, ${formatShape(shape)} needs ${shapeNumel(shape)}`);
    return this.ops.view(t, 0, shape);
  }

  dropout(p: number, numel: number): { p: number; seed: bigint; offset: bigint; offsetBase?: Tensor } {
    if (!this.stream.training) p = 0;
    const offset = this.dropoutCursor;
    if (p > 0) this.dropoutCursor += BigInt(Math.ceil(numel / 4));
    return { p, seed: this.stream.seed, offset, ...(this.stream.offsetBase && p > 0 ? { offsetBase: this.stream.offsetBase } : {}) };
  }

  /** Philox counters used by this step (the next step's baseOffset is baseOffset + this). */
  get dropoutCountersUsed(): bigint {
    return this.dropoutCursor - this.stream.baseOffset;
  }
}

class TracingContext extends BaseContext {
  readonly tracing = true;
  readonly buffers: TracedBuffer[] = [];
  readonly ops: Backend;
  private opIndex = 0;

  constructor(backend: Backend, stream: DropoutStream) {
    super(backend, stream);
    this.ops = new Proxy(backend, {
      get: (target, property, receiver) => {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (typeof property !== 'string' || typeof value !== 'function' || TRACED_PASSTHROUGH.has(property)) return value;
        if (FORBIDDEN_IN_STEP.has(property)) {
          return () => { throw new StepTraceError(`backend.${property}() cannot be called inside a planned step; allocate with ctx.buffer() and move data outside the step`); };
        }
        if (property === 'view') return (t: Tensor, offset: number, shape: readonly number[]) => this.viewOf(t, offset, shape);
        return (...args: unknown[]) => this.record(args);
      },
    });
  }

  buffer(name: string, shape: readonly number[], dtype: DType): Tensor {
    const bytes = shapeNumel(shape) * byteSize(dtype);
    const index = this.buffers.length;
    this.buffers.push({ name, shape: [...shape], dtype, bytes, first: -1, last: -1 });
    return new TraceTensor(this.backend, index, shape, dtype);
  }

  private viewOf(t: Tensor, offset: number, shape: readonly number[]): Tensor {
    if (!(t instanceof TraceTensor)) return this.backend.view(t, offset, shape);
    // A view at an offset (one layer's slice of a buffer shared by all layers) is the same buffer for
    // the lifetime analysis; only its bounds are checked here.
    if (!Number.isInteger(offset) || offset < 0 || offset + shapeNumel(shape) > t.numel) {
      throw new StepTraceError(`view: ${formatShape(shape)} at offset ${offset} does not fit in buffer ${formatShape(t.shape)}`);
    }
    return new TraceTensor(this.backend, t.bufferIndex, shape, t.dtype);
  }

  private record(args: unknown[]): void {
    const op = this.opIndex++;
    const touch = (value: unknown, depth: number): void => {
      if (value instanceof TraceTensor) {
        const b = this.buffers[value.bufferIndex]!;
        if (b.first < 0) b.first = op;
        b.last = op;
      } else if (depth < 2 && value !== null && typeof value === 'object' && !(value instanceof Tensor)) {
        for (const v of Object.values(value)) touch(v, depth + 1);
      }
    };
    for (const a of args) touch(a, 0);
  }

  get opCount(): number { return this.opIndex; }
}

class RunContext extends BaseContext {
  readonly tracing = false;
  readonly ops: Backend;
  private next = 0;

  constructor(backend: Backend, stream: DropoutStream, private readonly plan: StepPlan, private readonly arena: Arena) {
    super(backend, stream);
    this.ops = backend;
  }

  buffer(name: string, shape: readonly number[], dtype: DType): Tensor {
    const traced = this.plan.buffers[this.next];
    const placement = this.plan.arena.placements.get(String(this.next));
    this.next++;
    if (!traced || !placement || traced.name !== name || traced.dtype !== dtype || formatShape(traced.shape) !== formatShape(shape)) {
      throw new StepTraceError(`step differs from its trace at buffer #${this.next - 1}: traced ${traced ? `'${traced.name}' ${formatShape(traced.shape)} ${traced.dtype}` : 'nothing'}, got '${name}' ${formatShape(shape)} ${dtype}`);
    }
    return this.arena.view(placement.offset, shape, dtype);
  }

  finish(): void {
    if (this.next !== this.plan.buffers.length) {
      throw new StepTraceError(`step made ${this.next} buffers but its trace made ${this.plan.buffers.length}`);
    }
  }
}

/** The memory plan of one step shape. */
export interface StepPlan {
  readonly buffers: readonly TracedBuffer[];
  readonly arena: ArenaPlan;
  readonly opCount: number;
  readonly dropoutCounters: bigint;
}

export type StepFunction<R> = (ctx: StepContext) => R;

/** Runs `step` in trace mode and plans its buffers into one arena. */
export function planStep(backend: Backend, step: StepFunction<unknown>, training = true): StepPlan {
  const ctx = new TracingContext(backend, { seed: 0n, baseOffset: 0n, training });
  step(ctx);
  const requests = ctx.buffers.map((b, i) => {
    // A buffer nobody touches still gets memory (it is handed out) but lives for no op.
    const first = b.first < 0 ? 0 : b.first;
    return { name: String(i), bytes: b.bytes, start: first, end: Math.max(first, b.last) };
  });
  return { buffers: ctx.buffers, arena: planArena(requests, BUFFER_ALIGNMENT), opCount: ctx.opCount, dropoutCounters: ctx.dropoutCountersUsed };
}

/** Runs `step` for real with buffers placed by `plan` inside `arena` (at least plan.arena.arenaBytes). */
export function runStep<R>(backend: Backend, plan: StepPlan, arena: Arena, stream: DropoutStream, step: StepFunction<R>): R {
  if (arena.bytes < plan.arena.arenaBytes) throw new ArgumentError(`runStep: arena of ${arena.bytes} bytes is smaller than the plan's ${plan.arena.arenaBytes}`);
  const ctx = new RunContext(backend, stream, plan, arena);
  const result = step(ctx);
  ctx.finish();
  return result;
}

/** A readable summary of a plan: the biggest buffers and the bytes saved by sharing. */
export function describePlan(plan: StepPlan): string {
  const mib = (b: number) => (b / 2 ** 20).toFixed(1);
  return `${plan.buffers.length} buffers over ${plan.opCount} ops: arena ${mib(plan.arena.arenaBytes)} MiB ` +
    `(peak live ${mib(plan.arena.peakLiveBytes)} MiB, ${mib(plan.arena.unsharedBytes)} MiB if unshared)`;
}
