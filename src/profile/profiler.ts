// Where the time goes: profile(backend, fn) runs `fn` — anything that issues Backend ops: a training
// step, a forward pass, a decode step — and times every op it launches between two markers (CUDA
// events; the host clock on the CPU), with the op's FLOPs and bytes from the cost model (cost.ts).
//
// Measurements, in order:
//  1. roofs (roofs.ts), measured once per process on CUDA;
//  2. `warmup` runs of fn (kernels compile, GEMMs autotune, graphs are captured);
//  3. the step time: `reference` (the work as it normally runs, e.g. a graph replay; default fn on
//     the plain backend) between two markers, median of `repeats`;
//  4. one run of fn through a wrapper that brackets each op with markers.
// The op times of 4 must be GPU times, not host time. A kernel launched from JS costs ~5–10 µs of
// host work (argument checks, cuLaunchKernel, two markers), more than many kernels run; a GPU that
// has caught up with the host would idle inside the markers and the op would absorb that idle. So
// before 4 the GPU is given a backlog ("queue ahead"): a run of large fills timed to outlast the
// host's work for the step (calibrated by one unheld profiled run), during which every launch of the
// step queues up behind them and then runs back to back. Whether that worked is checked after the
// fact: each start marker's GPU time against the host clock at its record; an op whose marker ran
// less than HOST_BOUND_MS after the host recorded it had a GPU waiting for the host, and is counted
// in `hostBoundOps` (with a warning).
//
// The step's idle time is step time − Σ op times: launch gaps (eager work), or in-graph launch cost
// (~0.7 µs a kernel on an H200) for a replayed graph. Ops issued inside a captureGraph() call within fn
// are recorded into the graph, not timed; replays of graphs fn makes are seen as idle time.
//
// Graph mode (CUDA; `graph: true`, or `replay`): the work is timed as it runs when replayed — the way
// training steps and decode steps do run. Eager op times carry a few µs each of launch and event
// overhead that a graph does not have (on a 10 ms step of 350 ops, or a 1 ms decode step of 150, that
// is 10% or more); inside a graph the markers are event nodes, recorded by every replay:
//   - `graph: true`: fn(ops) itself is captured with a marker node before and after each op, the graph
//     replayed `repeats` times, and each op's time is the median of its marker intervals;
//   - `replay`: a graph captured earlier through the ProfilingBackend with timeCaptures on (an engine
//     that captures its own step) is replayed by calling replay(); the ops of that capture are timed.
// A marker node has a launch latency of its own, which an op's interval then includes; a calibration
// graph of tiny kernels with and without markers measures it (markerOverheadMs) and each op's
// interval is reduced by it. On H200 decode steps (~100–150 kernels of 2–120 µs) the intervals so
// reduced added up to the replayed step within 1.7% (GPT-2, batch 8) and 1.6% and 7.6% (Llama 1.2B,
// batch 1; two runs). Kernels launched programmatically (PDL) overlap
// their neighbours in the step, but not across a marker node: their intervals add up to more than
// the step by that overlap.
//   - removal (`opTiming: 'removal'`, asked for explicitly): the step is captured again with op k left
//     out (ProfilingBackend.skipInCaptures), for every k, and the whole step and the step without op k
//     are replayed in turn; op k's time is the median of t(whole) − t(without k): what the op costs the
//     step, with no marker in the measured graphs (with PDL: its run less the overlap it had). The
//     variants are built by `variant(k)` (an engine that captures its own step supplies one; for
//     `graph: true` the profiler captures fn itself). The marker intervals stay in the profile
//     (`markedMs`) for comparison. Caveat, measured on the H200: on the GPT-2 decode step (batch 8)
//     the removal times add up to the step within 1%, on the Llama 1.2B one (batch 1) to twice it —
//     every op ~8 µs over its marker interval, which is not understood; markers are the default.
// Device inputs of the cost model (decode positions) are then read from the op's own tensors after the
// replay, which still hold what the replay used.
//
// fn gets the backend to issue its ops on. Code that keeps its own reference (an inference engine) is
// built on a ProfilingBackend's `backend` instead, and that ProfilingBackend is passed to profile().
// Ops whose exact cost depends on small device tensors (sequence lengths, decode positions) have them
// copied right after the op, in stream order, and read back after the run (cost.ts deviceInputs).

import { performance } from 'node:perf_hooks';
import type { Backend, Graph, TimeMarker } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { FloatDType } from '../dtype.js';
import type { BackendName, HostArray, Tensor } from '../tensor.js';
import { describeCall, isGemmOp, NON_KERNEL_MEMBERS, opCost, opDeviceInputs } from './cost.js';
import type { Roofs } from './roofs.js';
import { measureRoofs, median, roofMs } from './roofs.js';

/** One op launch of the profiled run. */
export interface ProfiledOp {
  readonly op: string;
  /** The op and what tells its calls apart (sizes, flags): the kernel table's rows. */
  readonly name: string;
  readonly ms: number;
  /** Graph mode timed by removal: the op's marker interval (less the calibrated marker cost), for comparison. */
  readonly markedMs?: number;
  readonly gemm: boolean;
  /** From the cost model; absent for an op without a cost entry. */
  readonly flops?: number;
  readonly bytes?: number;
}

/** All calls of one name. Rates and roof shares are present where the cost and the roofs are known. */
export interface KernelRow {
  readonly name: string;
  readonly op: string;
  readonly gemm: boolean;
  readonly calls: number;
  readonly totalMs: number;
  readonly medianMs: number;
  /** totalMs over the step time. */
  readonly share: number;
  /** Σ over the calls. */
  readonly flops?: number;
  readonly bytes?: number;
  /** FLOP per byte. */
  readonly intensity?: number;
  readonly tflops?: number;
  readonly gbps?: number;
  /** 100 · (time at the roof: Σ max(F/peak, B/bandwidth) per call) / measured time. */
  readonly percentOfRoof?: number;
  readonly bound?: 'memory' | 'compute';
}

export interface Profile {
  readonly backend: BackendName;
  readonly device: string;
  readonly roofs?: Roofs;
  /** The work as it normally runs (the reference), wall time between markers: median, and every sample. */
  readonly stepMs: number;
  readonly stepSamplesMs: readonly number[];
  /** Σ of the op times of the profiled run, and its GEMM / other split. */
  readonly kernelMs: number;
  readonly gemmMs: number;
  readonly otherMs: number;
  /** stepMs − kernelMs, at least 0: launch gaps and in-graph launch cost. */
  readonly idleMs: number;
  readonly ops: readonly ProfiledOp[];
  /** One row per name, by total time, largest first. */
  readonly kernels: readonly KernelRow[];
  /** Σ by op, largest first. */
  readonly byOp: readonly { op: string; calls: number; ms: number }[];
  /** Ops whose launch the GPU had to wait for (their times include host time). 0 on the CPU. */
  readonly hostBoundOps: number;
  readonly warnings: readonly string[];
  /** Graph mode: what the marker nodes add to an op's interval, subtracted from each op (ms). */
  readonly markerOverheadMs?: number;
  /** How the op times were taken: eager markers, marker nodes in a replayed graph, or removal. */
  readonly opTiming?: 'eager' | 'markers' | 'removal';
  /** Timed by removal: Σ of the ops' marker intervals (markedMs), beside kernelMs. */
  readonly markedKernelMs?: number;
}

/** The step as it normally runs, with one op left out (or none): see removal in the header. */
export interface StepVariant {
  run(): void;
  dispose(): void;
}

export interface ProfileOptions {
  /** Runs of fn before anything is timed (compilation, autotuning, graph capture); default 1. */
  readonly warmup?: number;
  /** The work as it normally runs, timed as the step (e.g. a graph replay); default fn(backend). */
  readonly reference?: () => void;
  /** Timed runs of the reference (median); default 5. */
  readonly repeats?: number;
  /** The roofs to place kernels against; measured (cached per process) when absent; false for none. */
  readonly roofs?: Roofs | false;
  /** The dtype of the GEMM roof when it is measured here; default bf16. */
  readonly dtype?: FloatDType;
  /** Give the GPU a backlog before the profiled run (see the header); default true on CUDA. */
  readonly queueAhead?: boolean;
  /** Time fn(ops) as a replayed graph with a marker node around each op (see the header); CUDA only. */
  readonly graph?: boolean;
  /**
   * Replays a graph whose capture the ProfilingBackend recorded with timeCaptures on: its ops are the
   * profiled ops (see the header). fn is then not run by profile(). The graph's marker nodes are
   * destroyed when profile() returns: that graph must not be replayed afterwards.
   */
  readonly replay?: () => void;
  /**
   * Graph mode: how the ops are timed (see the header). 'auto' (the default) is markers; 'removal'
   * needs a variant builder (`variant`, or `graph: true`) and also runs on the CPU backend (host clock).
   */
  readonly opTiming?: 'auto' | 'markers' | 'removal';
  /**
   * For removal with `replay`: builds the step as it normally runs with the k-th op of its capture
   * left out (`skip` = k, through this ProfilingBackend's skipInCaptures), or whole (`skip` undefined).
   */
  readonly variant?: (skip: number | undefined) => StepVariant;
  /** How often one variant may run before a fresh one is built (a decode engine's room); default unlimited. */
  readonly variantRuns?: number;
}

/** A start marker that ran within this long of its record on the host had a GPU waiting for the host. */
export const HOST_BOUND_MS = 0.05;
/** Elements of the f32 buffer the queue-ahead fills write (256 MiB). */
const HOLD_ELEMENTS = 1 << 26;
const MAX_HOLD_MS = 2000;
const MAX_HOLD_FILLS = 4000;

const SKIPPED = new Set<string>(NON_KERNEL_MEMBERS);

/** An op recorded by a ProfilingBackend, before its markers are read. */
export interface PendingOp {
  readonly op: string;
  readonly args: unknown[];
  readonly start: TimeMarker;
  readonly end: TimeMarker;
  /** performance.now() when the start marker was recorded. */
  readonly hostStart: number;
  /** Copies of the small device tensors the op's exact cost needs, taken right after it (cost.ts deviceInputs). */
  readonly snapshots: Readonly<Record<string, Tensor>>;
  /** Whether the snapshots are copies to free (false: the op's own tensors, in a captured graph). */
  readonly ownsSnapshots: boolean;
}

/**
 * A backend that forwards to `target` and, while recording, brackets every op launch with two
 * markers. Build long-lived objects (an inference engine, a model) on `backend` and pass this object
 * to profile(): the ops they issue during the profiled run are recorded, wherever they keep their
 * reference. Members that launch nothing pass through; ops issued while a graph is being captured
 * pass through untimed (markers cannot be recorded into a capture).
 */
export class ProfilingBackend {
  readonly backend: Backend;
  /** Ops recorded inside captures between startTimingCaptures() and stopTimingCaptures(), in issue order. */
  readonly captured: PendingOp[] = [];
  private pending: PendingOp[] | undefined;
  private capturing = 0;
  private timeCaptures = false;
  /** Ops issued so far in the current capture (their index in it). */
  private captureOps = 0;
  /** The index of the op that captures leave out (removal timing), if any. */
  private skip: number | undefined;
  /** i32 buffer the captured ops' device cost inputs are copied into (nothing can be allocated in a capture). */
  private snapshotPool: { tensor: Tensor; used: number } | undefined;

  constructor(readonly target: Backend) {
    const methods = new Map<string | symbol, (...a: unknown[]) => unknown>();
    this.backend = new Proxy(target, {
      get: (t, property, receiver) => {
        const value = Reflect.get(t, property, receiver) as unknown;
        if (typeof value !== 'function') return value;
        let method = methods.get(property);
        if (!method) methods.set(property, (method = this.forwarder(property, value as (...a: unknown[]) => unknown)));
        return method;
      },
    });
  }

  /**
   * From now on, ops issued inside a graph capture are recorded (into `captured`) with marker nodes, so
   * every replay of that graph times them (CUDA; see the header's graph mode).
   */
  startTimingCaptures(): void {
    this.releaseCaptured();
    this.timeCaptures = true;
    this.snapshotPool = { tensor: this.target.empty([SNAPSHOT_POOL_ELEMENTS], 'i32'), used: 0 };
  }

  stopTimingCaptures(): void {
    this.timeCaptures = false;
  }

  /**
   * From now on (until called with undefined), every capture leaves out the op of index `index` in it
   * (0: its first op launch): the step without that op, for timing by removal. Ops return nothing, so
   * the caller cannot tell; the skipped op's outputs keep what they held.
   */
  skipInCaptures(index: number | undefined): void {
    if (index !== undefined && !(Number.isInteger(index) && index >= 0)) throw new ArgumentError(`skipInCaptures: index must be a non-negative integer, got ${index}`);
    this.skip = index;
  }

  /** Frees what the captured ops hold (after profiling their graph). */
  releaseCaptured(): void {
    release(this.target, this.captured.splice(0));
    if (this.snapshotPool) this.target.free(this.snapshotPool.tensor);
    this.snapshotPool = undefined;
  }

  /** Starts recording (a new, empty list of ops). */
  start(): void {
    this.pending = [];
  }

  /** Stops recording; the caller owns (and disposes) the markers of the ops returned. */
  stop(): PendingOp[] {
    const recorded = this.pending ?? [];
    this.pending = undefined;
    return recorded;
  }

  private forwarder(property: string | symbol, method: (...a: unknown[]) => unknown): (...a: unknown[]) => unknown {
    const target = this.target;
    if (property === 'captureGraph') {
      return (fn: unknown) => {
        if (this.capturing === 0) this.captureOps = 0;
        this.capturing++;
        try { return method.call(target, fn); } finally { this.capturing--; }
      };
    }
    if (typeof property !== 'string' || SKIPPED.has(property)) return method.bind(target);
    return (...args: unknown[]) => {
      if (this.capturing > 0) {
        if (this.captureOps++ === this.skip) return undefined;
        return this.timeCaptures ? this.timed(property, method, args, this.captured, true) : method.apply(target, args);
      }
      const pending = this.pending;
      if (!pending) return method.apply(target, args);
      return this.timed(property, method, args, pending, false);
    };
  }

  /** Runs the op between two markers and records it; `inCapture`: its cost inputs go to the snapshot pool. */
  private timed(property: string, method: (...a: unknown[]) => unknown, args: unknown[], into: PendingOp[], inCapture: boolean): unknown {
    const target = this.target;
    const hostStart = performance.now();
    const start = target.mark();
    let result: unknown;
    try {
      result = method.apply(target, args);
    } catch (error) {
      start.dispose();
      throw error;
    }
    const end = target.mark();
    // Device values the cost depends on (sequence lengths, positions), copied in stream order: outside
    // the op's markers, as the op saw them (in a capture, into views of the pool: nothing can be allocated).
    const snapshots: Record<string, Tensor> = {};
    for (const [name, t] of Object.entries(opDeviceInputs(property, args))) {
      const copy = inCapture ? this.poolView(t) : target.empty(t.shape, t.dtype);
      target.copy(t, copy);
      snapshots[name] = copy;
    }
    into.push({ op: property, args, start, end, hostStart, snapshots, ownsSnapshots: !inCapture });
    return result;
  }

  /** A view of the snapshot pool shaped like `t` (an i32 device input). */
  private poolView(t: Tensor): Tensor {
    const pool = this.snapshotPool;
    if (!pool) throw new ArgumentError('profile: no snapshot pool (startTimingCaptures() first)');
    if (t.dtype !== 'i32' || pool.used + t.numel > SNAPSHOT_POOL_ELEMENTS) {
      throw new ArgumentError(`profile: the snapshot pool holds ${SNAPSHOT_POOL_ELEMENTS} i32 values; a cost input ${t.dtype} [${t.shape.join(', ')}] does not fit`);
    }
    const view = this.target.view(pool.tensor, pool.used, t.shape);
    pool.used += t.numel;
    return view;
  }
}

/** Elements of the snapshot pool (i32): room for the device cost inputs of a captured step's ops. */
const SNAPSHOT_POOL_ELEMENTS = 1 << 18;

/** Releases the markers and snapshots of recorded ops. */
function release(backend: Backend, ops: readonly PendingOp[]): void {
  for (const p of ops) {
    p.start.dispose();
    p.end.dispose();
    if (p.ownsSnapshots) for (const t of Object.values(p.snapshots)) backend.free(t);
  }
}

/**
 * Profiles `fn`, which issues its ops on the backend it is given — or on a ProfilingBackend's
 * `backend` that it holds already, when `on` is that ProfilingBackend (see the header).
 */
export function profile(on: Backend | ProfilingBackend, fn: (ops: Backend) => void, options: ProfileOptions = {}): Profile {
  const tap = on instanceof ProfilingBackend ? on : new ProfilingBackend(on);
  const backend = tap.target, ops = tap.backend;
  const onGpu = backend.name === 'cuda';
  const roofs = options.roofs === false ? undefined : options.roofs ?? measureRoofs(backend, options.dtype ?? 'bf16');
  const warmup = options.warmup ?? 1, repeats = Math.max(1, options.repeats ?? 5);
  for (let i = 0; i < warmup; i++) fn(ops);
  backend.synchronize();
  const reference = options.reference ?? (() => fn(ops));
  const stepSamplesMs: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const start = backend.mark();
    reference();
    const end = backend.mark();
    stepSamplesMs.push(end.elapsedSince(start));
    start.dispose();
    end.dispose();
  }
  const stepMs = median(stepSamplesMs);
  const graphMode = options.graph === true || options.replay !== undefined;
  if (graphMode && (onGpu || options.opTiming === 'removal')) {
    return profileReplayed(tap, fn, options, { stepMs, stepSamplesMs, ...(roofs ? { roofs } : {}) });
  }

  const warnings: string[] = [];
  if (options.opTiming === 'removal') warnings.push('timing by removal needs a step replayed as a graph; this one runs eagerly, so its ops are timed by markers around each launch');
  let hold: Tensor | undefined, holdMs = 0;
  if (onGpu && (options.queueAhead ?? true)) {
    // Calibration: one unheld profiled run gives the host time of a profiled run.
    backend.synchronize();
    const t0 = performance.now();
    tap.start();
    try { fn(ops); } finally { backend.synchronize(); release(backend, tap.stop()); }
    const hostMs = performance.now() - t0;
    backend.synchronize();
    try {
      hold = backend.empty([HOLD_ELEMENTS], 'f32');
    } catch (error) {
      warnings.push(`no queue-ahead (${(error as Error).message}): op times may include launch overhead`);
    }
    holdMs = Math.min(MAX_HOLD_MS, 1.5 * hostMs + 1);
  }

  backend.synchronize();
  const anchorHost = performance.now();
  const anchor = backend.mark();
  if (hold) holdGpu(backend, hold, holdMs);
  tap.start();
  try {
    fn(ops);
  } catch (error) {
    backend.synchronize();
    release(backend, tap.stop());
    anchor.dispose();
    if (hold) backend.free(hold);
    throw error;
  }
  const recorded = tap.stop();
  backend.synchronize();
  if (hold) backend.free(hold);
  let hostBoundOps = 0;
  const profiled: ProfiledOp[] = recorded.map((p) => {
    const ms = p.end.elapsedSince(p.start);
    if (onGpu && p.start.elapsedSince(anchor) - (p.hostStart - anchorHost) < HOST_BOUND_MS) hostBoundOps++;
    const values: Record<string, HostArray> = {};
    for (const [name, t] of Object.entries(p.snapshots)) values[name] = backend.download(t);
    const cost = opCost(p.op, p.args, values);
    return { op: p.op, name: describeCall(p.op, p.args), ms, gemm: isGemmOp(p.op), ...(cost ? { flops: cost.flops, bytes: cost.bytes } : {}) };
  });
  release(backend, recorded);
  anchor.dispose();
  return { ...summarize(backend, profiled, { stepMs, stepSamplesMs, hostBoundOps, warnings, ...(roofs ? { roofs } : {}) }), opTiming: 'eager' };
}

/**
 * Graph mode (see the header): the ops of a replayed graph, timed by the marker nodes around them
 * (median over `repeats` replays, less the calibrated marker cost) and, with opTiming removal, by
 * leaving each out in turn.
 */
function profileReplayed(
  tap: ProfilingBackend, fn: (ops: Backend) => void, options: ProfileOptions,
  measured: { stepMs: number; stepSamplesMs: readonly number[]; roofs?: Roofs },
): Profile {
  const backend = tap.target, repeats = Math.max(1, options.repeats ?? 5), onGpu = backend.name === 'cuda';
  let replay = options.replay, graph: Graph | undefined, variant = options.variant;
  if (!replay) {
    tap.startTimingCaptures();
    try {
      graph = tap.backend.captureGraph(() => fn(tap.backend));
    } finally {
      tap.stopTimingCaptures();
    }
    replay = () => graph!.replay();
    // The profiler captured fn itself: the variants are fn captured again, one op left out.
    variant ??= (skip) => {
      tap.skipInCaptures(skip);
      let g: Graph;
      try { g = tap.backend.captureGraph(() => fn(tap.backend)); } finally { tap.skipInCaptures(undefined); }
      return { run: () => g.replay(), dispose: () => g.dispose() };
    };
  }
  const recorded = tap.captured;
  try {
    if (recorded.length === 0) {
      throw new ArgumentError('profile: the replayed graph has no timed ops (capture it through the ProfilingBackend with timeCaptures on)');
    }
    const timing = chooseOpTiming(options, variant !== undefined);
    // Marker intervals (CUDA: on the CPU the markers of a capture hold capture-time clock readings).
    let marked: number[] | undefined, overhead: number | undefined;
    if (onGpu) {
      const samples: number[][] = recorded.map(() => []);
      for (let r = 0; r < repeats; r++) {
        replay();
        backend.synchronize();
        recorded.forEach((p, i) => samples[i]!.push(p.end.elapsedSince(p.start)));
      }
      // What the markers add to an op's interval, subtracted from every op (see markerOverheadMs).
      overhead = markerOverheadMs(backend, repeats);
      marked = samples.map((s) => Math.max(0, median(s) - overhead!));
    } else {
      replay(); // fills the cost inputs' snapshots
      backend.synchronize();
    }
    // The cost inputs as the timed graph's last replay saw them, read before other graphs run.
    const costs = recorded.map((p) => {
      const values: Record<string, HostArray> = {};
      for (const [name, t] of Object.entries(p.snapshots)) values[name] = backend.download(t);
      return opCost(p.op, p.args, values);
    });
    const removed = timing === 'removal' ? timesByRemoval(backend, recorded.length, variant!, repeats, options.variantRuns ?? Infinity) : undefined;
    const profiled: ProfiledOp[] = recorded.map((p, i) => {
      const cost = costs[i];
      const ms = removed ? removed[i]! : marked![i]!;
      return {
        op: p.op, name: describeCall(p.op, p.args), ms, ...(removed && marked ? { markedMs: marked[i]! } : {}), gemm: isGemmOp(p.op),
        ...(cost ? { flops: cost.flops, bytes: cost.bytes } : {}),
      };
    });
    return {
      ...summarize(backend, profiled, { ...measured, hostBoundOps: 0, warnings: [] }),
      ...(overhead !== undefined ? { markerOverheadMs: overhead } : {}),
      opTiming: timing,
      ...(removed && marked ? { markedKernelMs: marked.reduce((a, b) => a + b, 0) } : {}),
    };
  } finally {
    graph?.dispose();
    tap.releaseCaptured();
  }
}

/** Graph mode: removal or markers (see ProfileOptions.opTiming). */
function chooseOpTiming(options: ProfileOptions, canRemove: boolean): 'markers' | 'removal' {
  const wanted = options.opTiming ?? 'auto';
  if (wanted === 'removal' && !canRemove) {
    throw new ArgumentError('profile: opTiming removal of a replayed graph needs options.variant (the step built with one op left out)');
  }
  return wanted === 'auto' ? 'markers' : wanted;
}

/**
 * Each op's time by removal (see the header): for op k, the whole step and the step without op k run
 * in turn `repeats` times, each between two markers; the op's time is the median difference (at
 * least 0: an op too short to see costs what the noise hides). Alternating the two cancels drift
 * (clocks). A step whose variants may run only `maxRuns` times has state that advances with each run
 * (a decode step's KV cache grows a position a run, and attention with it): for such a step the whole
 * one is built afresh beside each variant, so the two always run at the same position — a whole step
 * that had run 30 times more would cost more than its variant by 30 positions of attention, which
 * is then counted in every op. A variant must allow `repeats` + 1 runs (one warm-up).
 */
function timesByRemoval(backend: Backend, ops: number, variant: (skip: number | undefined) => StepVariant, repeats: number, maxRuns: number): number[] {
  if (maxRuns < repeats + 1) throw new ArgumentError(`profile: a step variant may run ${maxRuns} times; timing by removal needs ${repeats + 1}`);
  const time = (run: () => void): number => {
    const start = backend.mark();
    run();
    const end = backend.mark();
    backend.synchronize();
    const ms = end.elapsedSince(start);
    start.dispose();
    end.dispose();
    return ms;
  };
  const lockstep = Number.isFinite(maxRuns);
  const shared = lockstep ? undefined : variant(undefined);
  const times: number[] = [];
  try {
    for (let k = 0; k < ops; k++) {
      const whole = shared ?? variant(undefined);
      let without: StepVariant | undefined;
      try {
        without = variant(k);
        // Warm-up: a first replay uploads the graph.
        whole.run();
        without.run();
        const differences: number[] = [];
        for (let r = 0; r < repeats; r++) differences.push(time(() => whole.run()) - time(() => without!.run()));
        times.push(Math.max(0, median(differences)));
      } finally {
        without?.dispose();
        if (!shared) whole.dispose();
      }
    }
  } finally {
    shared?.dispose();
  }
  return times;
}

/** Launches in each calibration graph. */
const CALIBRATION_LAUNCHES = 64;

/** Elements of the calibration fill: a grid over the whole GPU (~128 blocks), launched as the ops are. */
const CALIBRATION_ELEMENTS = 1 << 17;

/**
 * What the markers add to an op's interval, measured on a short kernel (a 512 KiB fill, a full wave of
 * blocks like the ops it stands for; a one-block kernel launches faster) whose own duration cancels out: in graph A the fills run back to back, unmarked, as the step's ops do; in
 * graph B each fill has a marker node before and after it. An op's share of the unmarked step is its
 * duration plus the kernel-to-kernel launch latency of a graph (A's time per fill); its marked
 * interval is its duration plus the latency of a marker → kernel and a kernel → marker edge (B's
 * median interval). Their difference is subtracted from every op. (An empty marker pair alone
 * undercounts it: with a kernel between them the two edges cost more than one marker → marker edge,
 * which left decode steps of 100-150 short kernels 15-25% over their step.)
 */
function markerOverheadMs(backend: Backend, repeats: number): number {
  const target = backend.empty([CALIBRATION_ELEMENTS], 'f32');
  const pairs: [TimeMarker, TimeMarker][] = [];
  let plainStart: TimeMarker | undefined, plainEnd: TimeMarker | undefined;
  const graph = backend.captureGraph(() => {
    plainStart = backend.mark();
    for (let i = 0; i < CALIBRATION_LAUNCHES; i++) backend.fill(target, i);
    plainEnd = backend.mark();
    for (let i = 0; i < CALIBRATION_LAUNCHES; i++) {
      const start = backend.mark();
      backend.fill(target, i);
      pairs.push([start, backend.mark()]);
    }
  });
  try {
    const perLaunch: number[] = [], intervals: number[] = [];
    for (let r = 0; r < Math.max(3, repeats); r++) {
      graph.replay();
      backend.synchronize();
      perLaunch.push(plainEnd!.elapsedSince(plainStart!) / CALIBRATION_LAUNCHES);
      for (const [a, b] of pairs) intervals.push(b.elapsedSince(a));
    }
    return Math.max(0, median(intervals) - median(perLaunch));
  } finally {
    graph.dispose();
    plainStart?.dispose();
    plainEnd?.dispose();
    for (const [a, b] of pairs) { a.dispose(); b.dispose(); }
    backend.free(target);
  }
}

/** The tables of a profile from its op records (also used to rebuild a profile from JSON). */
export function summarize(
  backend: Pick<Backend, 'name' | 'description'>, ops: readonly ProfiledOp[],
  measured: { stepMs: number; stepSamplesMs: readonly number[]; hostBoundOps: number; roofs?: Roofs; warnings?: readonly string[] },
): Profile {
  const { stepMs, roofs } = measured;
  const sum = (xs: readonly ProfiledOp[]) => xs.reduce((s, o) => s + o.ms, 0);
  const kernelMs = sum(ops), gemmMs = sum(ops.filter((o) => o.gemm));
  const groups = new Map<string, ProfiledOp[]>();
  for (const o of ops) {
    const list = groups.get(o.name);
    if (list) list.push(o);
    else groups.set(o.name, [o]);
  }
  const kernels = [...groups.values()].map((calls) => kernelRow(calls, stepMs, roofs)).sort((a, b) => b.totalMs - a.totalMs);
  const byOpMap = new Map<string, { op: string; calls: number; ms: number }>();
  for (const o of ops) {
    const t = byOpMap.get(o.op) ?? { op: o.op, calls: 0, ms: 0 };
    t.calls++;
    t.ms += o.ms;
    byOpMap.set(o.op, t);
  }
  const warnings = [...(measured.warnings ?? [])];
  if (measured.hostBoundOps > 0) {
    warnings.push(`${measured.hostBoundOps} of ${ops.length} ops were launched while the GPU waited for the host: their times include host time (launch overhead)`);
  }
  if (kernelMs > stepMs * 1.05) {
    warnings.push(`the ops' times add up to ${(100 * kernelMs / stepMs).toFixed(0)}% of the step (${kernelMs.toFixed(3)} of ${stepMs.toFixed(3)} ms): they were timed in a separate run, one op at a time, and the step varies between runs (${backend.name === 'cpu' ? 'on the CPU, other work on the machine shows in either' : 'launch and clock variations'}); read the shares as estimates`);
  }
  const uncosted = [...new Set(ops.filter((o) => o.flops === undefined).map((o) => o.op))];
  if (uncosted.length > 0) warnings.push(`no cost model for ${uncosted.join(', ')} (src/profile/cost.ts): timed, not placed on the roofline`);
  return {
    backend: backend.name, device: backend.description, ...(roofs ? { roofs } : {}),
    stepMs, stepSamplesMs: measured.stepSamplesMs, kernelMs, gemmMs, otherMs: kernelMs - gemmMs, idleMs: Math.max(0, stepMs - kernelMs),
    ops, kernels, byOp: [...byOpMap.values()].sort((a, b) => b.ms - a.ms), hostBoundOps: measured.hostBoundOps, warnings,
  };
}

function kernelRow(calls: readonly ProfiledOp[], stepMs: number, roofs: Roofs | undefined): KernelRow {
  const first = calls[0]!;
  const totalMs = calls.reduce((s, o) => s + o.ms, 0);
  const base = {
    name: first.name, op: first.op, gemm: first.gemm, calls: calls.length, totalMs,
    medianMs: median(calls.map((o) => o.ms)), share: stepMs > 0 ? totalMs / stepMs : 0,
  };
  if (calls.some((o) => o.flops === undefined || o.bytes === undefined)) return base;
  const flops = calls.reduce((s, o) => s + o.flops!, 0), bytes = calls.reduce((s, o) => s + o.bytes!, 0);
  const intensity = bytes > 0 ? flops / bytes : 0;
  const seconds = totalMs / 1e3;
  const rates = seconds > 0 ? { tflops: flops / seconds / 1e12, gbps: bytes / seconds / 1e9 } : {};
  if (!roofs) return { ...base, flops, bytes, intensity, ...rates };
  const atRoof = calls.reduce((s, o) => s + roofMs(roofs, o.flops!, o.bytes!), 0);
  return {
    ...base, flops, bytes, intensity, ...rates,
    ...(totalMs > 0 ? { percentOfRoof: (100 * atRoof) / totalMs } : {}),
    bound: intensity >= roofs.ridge ? 'compute' : 'memory',
  };
}

/** Queues fills of `buffer` that keep the GPU busy for about `ms` (the launches after them then wait in the stream). */
function holdGpu(backend: Backend, buffer: Tensor, ms: number): void {
  backend.fill(buffer, 0);
  const start = backend.mark();
  backend.fill(buffer, 0);
  const end = backend.mark();
  const fillMs = Math.max(1e-3, end.elapsedSince(start));
  start.dispose();
  end.dispose();
  const fills = Math.min(MAX_HOLD_FILLS, Math.ceil(ms / fillMs));
  for (let i = 0; i < fills; i++) backend.fill(buffer, 0);
}
