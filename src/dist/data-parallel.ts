// Data parallelism: every rank holds the whole model, runs its own slice of the batch, and the
// gradients are averaged over ranks before the optimizer — in buckets, each all-reduced as soon as the
// backward has written its last gradient, while the rest of the backward is still being issued.
//
// Buckets: contiguous ranges of the gradient workspace (one flat buffer, parameters in layout order),
// cut at parameter boundaries once a bucket holds ≥ bucketBytes (PyTorch DDP's 25 MiB by default).
// The backward writes gradients roughly in reverse layout order (last block first), so the tail buckets
// become ready first. A bucket is one collective on a view of the flat buffer: no copies, no packing.
//
// When is a bucket's last gradient written? The step is traced before it runs (nn/step-context.ts);
// while tracing we count the ops issued on ctx.ops and note, per bucket, the index of the last op that
// touched any of its gradient tensors (the Param.grad views, and views made of them). When the step runs,
// the same code issues the same ops in the same order, so right after op #k we all-reduce the buckets
// whose last op is k. Buckets never reached by the schedule (a shape that was not traced) are reduced at
// the end of the backward.
//
// Overlap: each bucket's all-reduce goes through comm.overlapped(): with NCCL, an event is recorded on
// the compute stream right after the bucket's last op, the communication stream waits for it
// (cuStreamWaitEvent) and runs the all-reduce while the compute stream goes on with the rest of the
// backward; at the end of the backward comm.joinOverlapped() makes the compute stream wait for the
// communication stream, so the optimizer sees averaged gradients. The same calls inside a graph capture
// fork the captured graph onto the second stream and join it back. No backward op touches a bucket's
// gradients after its last op, so the two streams never race on them.
//
// ZeRO-1 (ZeroAdamW): the optimizer state is sharded instead of replicated. The gradients are
// reduce-scattered (each rank gets the average of its 1/w of the workspace), each rank runs AdamW on
// its shard with moments of n/w elements, and the updated shards are all-gathered into every rank's
// parameters. Same arithmetic as AdamW on the averaged gradients; m and v take 2·n/w floats per rank
// instead of 2·n. When w divides n the collectives are NCCL's in-place forms (the reduce-scatter writes
// this rank's slice of the gradient workspace, the all-gather reads its slice of the parameters), so
// no padded copies are needed; otherwise the workspace is copied into buffers padded to w·⌈n/w⌉.
// StepRunner runs it inside the step (options.zero), with device scalars, so it is graph-captured too.

import type { AdamWArgs, Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { byteSize } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { CausalLmBatch, LanguageModel } from '../models/language-model.js';
import type { ParameterStore } from '../nn/parameters.js';
import type { StepContext } from '../nn/step-context.js';
import type { WorkspaceLayout } from '../nn/workspace.js';
import type { Communicator } from './communicator.js';

export interface GradientBucket {
  /** Element range [start, end) of the gradient workspace. */
  readonly start: number;
  readonly end: number;
  readonly names: readonly string[];
}

/** Cuts the workspace into buckets of ≥ bucketBytes at parameter boundaries (the last may be smaller). */
export function planGradientBuckets(layout: WorkspaceLayout, bucketBytes: number): GradientBucket[] {
  if (!(bucketBytes > 0)) throw new ArgumentError(`gradient buckets: bucketBytes must be > 0, got ${bucketBytes}`);
  const bytesPer = byteSize(layout.dtype);
  const entries = [...layout.entries].sort((a, b) => a.offset - b.offset);
  const buckets: GradientBucket[] = [];
  let start = 0, names: string[] = [];
  entries.forEach((e, i) => {
    names.push(e.name);
    const end = i + 1 < entries.length ? entries[i + 1]!.offset : layout.numel;
    if ((end - start) * bytesPer >= bucketBytes || i === entries.length - 1) {
      buckets.push({ start, end, names });
      start = end;
      names = [];
    }
  });
  return buckets;
}

export interface DataParallelOptions {
  /** Bucket size in bytes (default 25 MiB). */
  readonly bucketBytes?: number;
}

/**
 * Wraps a model so that its training step averages the gradients over the ranks of `comm` (each rank
 * gives it its own slice of the global batch). Everything else is the wrapped model's.
 */
export class DataParallelModel implements LanguageModel {
  readonly buckets: readonly GradientBucket[];
  /** Per step shape: op index → buckets whose last gradient that op writes. */
  private readonly schedules = new Map<string, Map<number, number[]>>();
  private readonly bucketViews: Tensor[];
  /** Of the last training step run: buckets all-reduced inside the backward (the rest went at its end). */
  reducedDuringBackward = 0;

  constructor(readonly inner: LanguageModel, readonly comm: Communicator, options: DataParallelOptions = {}) {
    if (comm.backend !== inner.backend) throw new ArgumentError('DataParallelModel: the communicator works on a different backend than the model');
    this.buckets = planGradientBuckets(inner.params.layout, options.bucketBytes ?? 25 * 2 ** 20);
    this.bucketViews = this.buckets.map((b) => inner.backend.view(inner.params.grads.flat, b.start, [b.end - b.start]));
  }

  get backend(): Backend { return this.inner.backend; }
  get params(): ParameterStore { return this.inner.params; }
  get dtype(): FloatDType { return this.inner.dtype; }
  get vocabSize(): number { return this.inner.vocabSize; }
  get logitsWidth(): number { return this.inner.logitsWidth; }
  get maxSeqLen(): number { return this.inner.maxSeqLen; }
  get source(): LanguageModel['source'] { return this.inner.source; }
  get sparseLoss(): boolean | undefined { return this.inner.sparseLoss; }
  get checkpointEvery(): number { return this.inner.checkpointEvery; }
  set checkpointEvery(every: number) { this.inner.checkpointEvery = every; }

  lossStep(ctx: StepContext, batch: CausalLmBatch, backward: boolean): void {
    if (!backward || this.comm.worldSize === 1) { this.inner.lossStep(ctx, batch, backward); return; }
    const key = `${batch.batch}x${batch.seqLen}x${batch.lossRows?.numel ?? 0}x${batch.source?.seqLen ?? 0}`;
    if (ctx.tracing) {
      const lastTouch = this.buckets.map(() => -1);
      this.inner.lossStep(this.watching(ctx, (op, bucket) => { lastTouch[bucket] = op; }), batch, true);
      const schedule = new Map<number, number[]>();
      lastTouch.forEach((op, bucket) => { if (op >= 0) schedule.set(op, [...(schedule.get(op) ?? []), bucket]); });
      this.schedules.set(key, schedule);
      return;
    }
    const schedule = this.schedules.get(key) ?? new Map<number, number[]>();
    const reduced = new Set<number>();
    const reduce = (bucket: number) => this.comm.overlapped(() => this.comm.allReduce(this.bucketViews[bucket]!, 'avg'));
    this.inner.lossStep(this.watching(ctx, undefined, (op) => {
      for (const bucket of schedule.get(op) ?? []) { reduce(bucket); reduced.add(bucket); }
    }), batch, true);
    this.reducedDuringBackward = reduced.size;
    this.bucketViews.forEach((_, bucket) => { if (!reduced.has(bucket)) reduce(bucket); });
    this.comm.joinOverlapped();
  }

  /**
   * ctx with ops that count every op and, while tracing, report which buckets each op touches
   * (`touch`); after each op `after(op)` runs.
   */
  private watching(ctx: StepContext, touch?: (op: number, bucket: number) => void, after?: (op: number) => void): StepContext {
    // Element ranges (of the gradient workspace) of the tensors that alias it.
    const ranges = new Map<Tensor, [number, number]>();
    const flat = this.inner.params.grads.flat;
    ranges.set(flat, [0, flat.numel]);
    for (const e of this.inner.params.layout.entries) ranges.set(this.inner.params.grads.get(e.name), [e.offset, e.offset + e.numel]);
    const bucketsOf = ([s, e]: [number, number]) => this.buckets.flatMap((b, i) => (b.start < e && s < b.end ? [i] : []));
    let op = 0;
    const inner = ctx.ops;
    const ops = new Proxy(inner, {
      get: (target, property, receiver) => {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (typeof property !== 'string' || typeof value !== 'function' || property === 'name' || property === 'description') return value;
        if (property === 'view') {
          return (t: Tensor, offset: number, shape: readonly number[]) => {
            const v = inner.view(t, offset, shape);
            const r = ranges.get(t);
            if (r) ranges.set(v, [r[0] + offset, r[0] + offset + v.numel]);
            return v;
          };
        }
        return (...args: unknown[]) => {
          const index = op++;
          if (touch) {
            const visit = (a: unknown, depth: number): void => {
              if (a === null || typeof a !== 'object') return;
              const r = ranges.get(a as Tensor);
              if (r) { for (const b of bucketsOf(r)) touch(index, b); return; }
              if (depth < 2) for (const v of Object.values(a)) visit(v, depth + 1);
            };
            for (const a of args) visit(a, 0);
          }
          const result = (value as (...a: unknown[]) => unknown).apply(inner, args);
          after?.(index);
          return result;
        };
      },
    });
    return {
      ops,
      tracing: ctx.tracing,
      buffer: (name, shape, dtype) => ctx.buffer(name, shape, dtype),
      reshape: (t, shape) => {
        const v = ctx.reshape(t, shape);
        const r = ranges.get(t);
        if (r) ranges.set(v, r);
        return v;
      },
      dropout: (p, numel) => ctx.dropout(p, numel),
      replayDropout: (cursor, fn) => ctx.replayDropout(cursor, fn),
      get dropoutCursor() { return ctx.dropoutCursor; },
    };
  }
}

// --- ZeRO-1 ----------------------------------------------------------------------------------------

export interface ZeroAdamWConfig {
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** Global gradient-norm clipping (over the averaged gradient); Infinity disables it. */
  readonly maxGradNorm: number;
}

/**
 * AdamW with its moments (and f32 master weights for 16-bit models) sharded over the ranks. Rank r owns
 * elements [r·shard, min(n, (r+1)·shard)) of the workspace, shard = ⌈n/w⌉.
 */
export class ZeroAdamW {
  /** Elements per rank's shard (the workspace padded to worldSize · shard). */
  readonly shard: number;
  private readonly start: number;
  private readonly end: number;
  /** w divides n: the collectives work in place on the workspaces, no padded copies. */
  private readonly inPlace: boolean;
  private readonly paddedGrads?: Tensor;
  private readonly paddedValues?: Tensor;
  /** This rank's averaged gradients: a view of the gradient workspace (in place) or its own buffer. */
  private readonly gradShard: Tensor;
  private readonly m: Tensor;
  private readonly v: Tensor;
  private readonly master?: Tensor;
  /** f32 [1]: Σ g² of the averaged gradients over the whole workspace, after the last update. */
  readonly sumSquares: Tensor;
  /** f32 [4]: [lr, gradScale, c1, c2] for step(). */
  private readonly hostScalars: Tensor;
  private steps = 0;

  constructor(readonly params: ParameterStore, readonly comm: Communicator, readonly config: ZeroAdamWConfig, options: { masterWeights?: boolean } = {}) {
    const b = params.backend, n = params.layout.numel, w = comm.worldSize;
    if (b !== comm.backend) throw new ArgumentError('ZeroAdamW: the communicator works on a different backend than the parameters');
    this.shard = Math.ceil(n / w);
    this.start = Math.min(n, comm.rank * this.shard);
    this.end = Math.min(n, this.start + this.shard);
    this.inPlace = n % w === 0;
    if (this.inPlace) {
      this.gradShard = b.view(params.grads.flat, this.start, [this.shard]);
    } else {
      this.paddedGrads = b.empty([w * this.shard], params.dtype);
      b.fill(this.paddedGrads, 0);
      this.paddedValues = b.empty([w * this.shard], params.dtype);
      b.fill(this.paddedValues, 0);
      this.gradShard = b.empty([this.shard], params.dtype);
    }
    this.m = b.empty([this.shard], 'f32');
    this.v = b.empty([this.shard], 'f32');
    b.fill(this.m, 0);
    b.fill(this.v, 0);
    if (params.dtype !== 'f32' && (options.masterWeights ?? true)) {
      this.master = b.empty([this.shard], 'f32');
      b.fill(this.master, 0);
      this.syncMasterFromParams();
    }
    this.sumSquares = b.empty([1], 'f32');
    this.hostScalars = b.empty([4], 'f32');
  }

  /** Bytes of optimizer state this rank holds (moments and master shard). */
  get stateBytes(): number {
    return (this.master ? 3 : 2) * this.shard * 4;
  }

  /** Copies this rank's part of the parameters into its f32 master shard (after loading weights). */
  syncMasterFromParams(): void {
    const b = this.params.backend, local = this.end - this.start;
    if (this.master && local > 0) b.copy(b.view(this.params.values.flat, this.start, [local]), b.view(this.master, 0, [local]));
  }

  /** This rank's moments and master shard, on the host (a checkpoint of ZeRO state is per rank). */
  state(): { m: Float32Array; v: Float32Array; master?: Float32Array } {
    const b = this.params.backend;
    return { m: b.download(this.m) as Float32Array, v: b.download(this.v) as Float32Array, ...(this.master ? { master: b.download(this.master) as Float32Array } : {}) };
  }

  restore(state: { m: Float32Array; v: Float32Array; master?: Float32Array }, source: string): void {
    for (const [name, data] of [['m', state.m], ['v', state.v], ['master', state.master]] as const) {
      if (data && data.length !== this.shard) throw new ArgumentError(`${source}: ZeRO-1 optimizer state '${name}' has ${data.length} elements, this rank's shard ${this.shard} (was it saved at another world size?)`);
    }
    const b = this.params.backend;
    b.upload(this.m, state.m);
    b.upload(this.v, state.v);
    if (this.master) {
      if (state.master) b.upload(this.master, state.master);
      else this.syncMasterFromParams();
    }
  }

  /**
   * One update from every rank's local gradients (in params.grads; each the gradient of its own batch
   * slice times the same scale): average them, update this rank's shard, share the updated shards.
   * gradScale turns the averaged workspace into the mean gradient (StepResult.gradScale).
   */
  step(lr: number, gradScale: number): void {
    this.steps++;
    const c = this.config;
    this.params.backend.upload(this.hostScalars, [lr, gradScale, 1 - c.beta1 ** this.steps, 1 - c.beta2 ** this.steps]);
    this.update(this.params.backend, this.hostScalars, true);
  }

  /**
   * Issues the update on `ops` (a step's ops, so it can be traced and captured), reading lr, gradScale
   * and the bias corrections from `scalars` (f32 [4], AdamWDeviceScalars). collectives = false while the
   * step is traced (every collective acts on persistent workspaces, never on planned buffers).
   */
  update(ops: Backend, scalars: Tensor, collectives: boolean): void {
    const n = this.params.layout.numel, c = this.config, rank = this.comm.rank;
    const grads = this.params.grads.flat, values = this.params.values.flat;
    const local = this.end - this.start;
    if (this.inPlace) {
      if (collectives) this.comm.reduceScatter(grads, this.gradShard, 'avg');
    } else {
      ops.copy(grads, ops.view(this.paddedGrads!, 0, [n]));
      if (collectives) this.comm.reduceScatter(this.paddedGrads!, this.gradShard, 'avg');
    }
    if (local > 0) ops.sumSquares({ x: ops.view(this.gradShard, 0, [local]), out: this.sumSquares });
    else ops.fill(this.sumSquares, 0);
    if (collectives) this.comm.allReduce(this.sumSquares, 'sum');
    const split = this.params.decayedElements;
    // The shard's part with weight decay, then the part without.
    for (const [from, to, decay] of [[this.start, Math.min(this.end, split), c.weightDecay], [Math.max(this.start, split), this.end, 0]] as const) {
      if (to <= from) continue;
      const at = (t: Tensor, offset: number) => ops.view(t, offset, [to - from]);
      const args: AdamWArgs = {
        params: at(values, from), grads: at(this.gradShard, from - this.start),
        m: at(this.m, from - this.start), v: at(this.v, from - this.start),
        ...(this.master ? { master: at(this.master, from - this.start) } : {}),
        beta1: c.beta1, beta2: c.beta2, eps: c.eps, weightDecay: decay,
        scalars, clip: { sumSquares: this.sumSquares, maxNorm: c.maxGradNorm },
      };
      ops.adamW(args);
    }
    if (this.inPlace) {
      if (collectives) this.comm.allGather(ops.view(values, this.start, [this.shard]), values);
      return;
    }
    const slot = ops.view(this.paddedValues!, rank * this.shard, [this.shard]);
    if (local > 0) ops.copy(ops.view(values, this.start, [local]), ops.view(slot, 0, [local]));
    if (collectives) this.comm.allGather(slot, this.paddedValues!);
    ops.copy(ops.view(this.paddedValues!, 0, [n]), values);
  }

  free(): void {
    const b = this.params.backend;
    for (const t of [this.m, this.v, this.sumSquares, this.hostScalars]) b.free(t);
    if (!this.inPlace) for (const t of [this.paddedGrads!, this.paddedValues!, this.gradShard]) b.free(t);
    if (this.master) b.free(this.master);
  }
}
