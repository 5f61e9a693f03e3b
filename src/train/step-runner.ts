// The device side of training: one call runs a whole step — forward, loss, backward, gradient norm,
// AdamW — on memory that is allocated once.
//
// Per step shape (batch × seqLen, train or eval) the step is traced and planned (nn/step-context.ts)
// into one activation arena sized at construction for the largest shape. The first step of a shape
// runs eagerly (kernels compile, GEMMs autotune); the next one is captured into a CUDA graph that
// every later step of that shape replays. Everything that changes from step to step is read from
// device memory the host writes before the replay: the batch (tokens, targets) and the optimizer's
// scalars (learning rate, gradient scale, bias corrections). The loss scale is a constant of the
// graph (it scales the cross-entropy gradient), so a new loss scale — rare — means a new capture.
//
// Gradient scale bookkeeping. The cross-entropy backward multiplies by lossScale / rows, so fp16
// gradients stay in range whatever the batch; AdamW then multiplies by rows / (lossScale · nValid),
// which makes the update use the mean gradient over the nValid non-ignored targets exactly.
// Clipping and the fp16 overflow skip happen inside AdamW from the gradient's sum of squares.
//
// Dropout: a step's ops draw from counters relative to the step's start, and the start itself is a
// device scalar (DropoutArgs.offsetBase) written before each step, so replays draw fresh masks.
//
// Models whose loss needs only the rows with a target (LanguageModel.sparseLoss: BERT's masked LM,
// where ~15% of positions carry one) get those rows' indices (CausalLmBatch.lossRows), gathered on
// the host and padded to a multiple of LOSS_ROW_BUCKET with ignored entries, so a handful of shapes
// (and graphs) cover every batch; the step's shape includes that count.
//
// Encoder-decoder models (LanguageModel.source) take a source side with every batch: its tokens and
// lengths live in device buffers sized for maxBatch × maxSourceLen, and the step's shape includes the
// source length.
//
// Parallel training. Tensor-parallel models (LanguageModel.gradientSharding) hold shards of some
// gradients: Σg² for clipping is then Σ over the shard ranges, all-reduced over the ranks, plus Σ over
// the replicated ranges counted once. ZeRO-1 (options.zero): the optimizer's moments and master weights
// are sharded over the data-parallel ranks (dist/data-parallel.ts ZeroAdamW) — the gradients are
// reduce-scattered, each rank updates its 1/w of the workspace, and the parameters are all-gathered,
// all inside the step (so inside its CUDA graph); the runner then allocates no full-size moments.
// Collectives are skipped while a step is traced (they act in place on buffers the ops around them touch).

import type { AdamWArgs, Arena, Backend, Graph } from '../backend/backend.js';
import type { Communicator } from '../dist/communicator.js';
import { DataParallelModel, ZeroAdamW } from '../dist/data-parallel.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { CausalLmBatch, LanguageModel } from '../models/language-model.js';
import type { StepContext, StepPlan } from '../nn/step-context.js';
import { planStep, runStep } from '../nn/step-context.js';
import type { Profile, ProfileOptions } from '../profile/profiler.js';
import { profile } from '../profile/profiler.js';

export interface OptimizerConfig {
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** Global gradient-norm clipping threshold; Infinity disables clipping. */
  readonly maxGradNorm: number;
  /** fp32 master weights (default); false is LightSeq2's no-master mode (16-bit params updated in place). */
  readonly masterWeights: boolean;
}

export const DEFAULT_OPTIMIZER: OptimizerConfig = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 1, masterWeights: true };

/** Sparse-loss row counts are rounded up to a multiple of this: few distinct shapes, little padding. */
export const LOSS_ROW_BUCKET = 256;

export interface StepRunnerOptions {
  readonly optimizer?: Partial<OptimizerConfig>;
  /** Largest batch × seqLen a step will see; the arena and batch buffers are sized for it. */
  readonly maxBatch: number;
  readonly maxSeqLen: number;
  readonly seed?: bigint;
  /** Capture steady-state steps into CUDA graphs (default: on for CUDA, off for the CPU). */
  readonly graphs?: boolean;
  readonly labelSmoothing?: number;
  /** Targets equal to this are ignored (default −100, the Hugging Face convention). */
  readonly ignoreIndex?: number;
  /** Longest source sequence: required for encoder-decoder models, refused for the others. */
  readonly maxSourceLen?: number;
  /**
   * ZeRO-1 over the data-parallel ranks of `comm`: each rank holds AdamW's moments (and master
   * weights) for 1/w of the workspace, and the gradients are averaged over the ranks by the update's
   * reduce-scatter — so pass the bare model (each rank on its slice of the batch), not a DataParallelModel.
   */
  readonly zero?: { readonly comm: Communicator };
}

/** The source side of a sequence-to-sequence batch. */
export interface HostSource {
  readonly seqLen: number;
  /** batch·seqLen source token ids (anything in [0, source vocabulary) beyond a sequence's length). */
  readonly tokens: Int32Array;
  /** batch source lengths, each in [1, seqLen]. */
  readonly lengths: Int32Array;
}

export interface HostBatch {
  readonly batch: number;
  readonly seqLen: number;
  /** batch·seqLen token ids. */
  readonly tokens: Int32Array;
  /** batch·seqLen next-token targets (or ignoreIndex). */
  readonly targets: Int32Array;
  /** Each sequence's length in [1, seqLen] (default: all seqLen); the rest is padding (targets there should be ignored). */
  readonly lengths?: Int32Array;
  /** Encoder input, for encoder-decoder models only. */
  readonly source?: HostSource;
}

export interface StepProfileOptions extends Omit<ProfileOptions, 'reference' | 'warmup'> {
  /** A training step (forward, backward, AdamW) or an evaluation step (forward and loss). */
  readonly training: boolean;
  readonly lr?: number;
  readonly lossScale?: number;
  /** Ordinary steps before profiling (at least 2: the eager first run and the graph capture); default 3. */
  readonly warmupSteps?: number;
}

export interface StepResult {
  /** Mean loss over the non-ignored targets. */
  readonly loss: number;
  readonly validTargets: number;
  /** Global norm of the mean gradient before clipping (NaN/Infinity on an fp16 overflow). */
  readonly gradNorm: number;
  /** True when the update was skipped (non-finite gradients). */
  readonly skipped: boolean;
  /**
   * The factor that turns the gradient workspace into the gradient of the mean loss (the workspace
   * holds it times lossScale·nValid/rows, a scale that keeps fp16 gradients in range).
   */
  readonly gradScale: number;
}

interface PreparedStep {
  readonly plan: StepPlan;
  readonly batch: CausalLmBatch;
  /** Runs the step's ops on `backend` (the runner's, or a wrapper of it such as the profiler's). */
  readonly run: (backend?: Backend) => void;
  graph?: Graph;
  runs: number;
}

export class StepRunner {
  readonly optimizer: OptimizerConfig;
  private readonly backend: Backend;
  private readonly tokens: Tensor;
  private readonly targets: Tensor;
  private readonly loss: Tensor;
  /** For sparse-loss models: the rows with a target and their targets, padded to the bucket. */
  private readonly lossRows?: { readonly rows: Tensor; readonly targets: Tensor };
  /** Rows of the loss in the last uploaded batch (all rows, or the padded count of target rows). */
  private lossRowCount = 0;
  private readonly source?: { readonly tokens: Tensor; readonly lengths: Tensor };
  private readonly lengths: Tensor;
  /** AdamW's moments and master weights over the whole workspace (absent under ZeRO-1). */
  private readonly m?: Tensor;
  private readonly v?: Tensor;
  private readonly master?: Tensor;
  /** ZeRO-1: the sharded optimizer (options.zero). */
  readonly zero?: ZeroAdamW;
  /** Tensor-parallel models: the gradient workspace split into shard and replicated ranges, merged. */
  private readonly normRanges?: { readonly sharded: [number, number][]; readonly replicated: [number, number][] };
  private readonly scalars: Tensor;
  /** The step's first dropout counter as a u64 (two i32 words), read by every dropout op. */
  private readonly dropoutBase: Tensor;
  private readonly sumSquares: Tensor;
  private arena: Arena;
  private readonly steps = new Map<string, PreparedStep>();
  private readonly seed: bigint;
  private readonly useGraphs: boolean;
  private readonly ignoreIndex: number;
  private dropoutOffset = 0n;
  /** The plan of the largest training step, made at construction to size the arena. */
  readonly largestPlan: StepPlan;
  /** Optimizer updates applied so far (skipped steps do not count): AdamW's bias-correction step. */
  updates = 0;
  /** Device allocations made by the most recent step (0 in steady state). */
  lastStepAllocations = 0;

  constructor(readonly model: LanguageModel, readonly options: StepRunnerOptions) {
    const { maxBatch, maxSeqLen } = options;
    if (!Number.isInteger(maxBatch) || maxBatch < 1) throw new ArgumentError(`StepRunner: maxBatch must be a positive integer, got ${maxBatch}`);
    if (!Number.isInteger(maxSeqLen) || maxSeqLen < 1 || maxSeqLen > model.maxSeqLen) {
      throw new ArgumentError(`StepRunner: maxSeqLen must be an integer in [1, ${model.maxSeqLen}], got ${maxSeqLen}`);
    }
    this.optimizer = { ...DEFAULT_OPTIMIZER, ...options.optimizer };
    const o = this.optimizer;
    if (!(o.maxGradNorm > 0)) throw new ArgumentError(`StepRunner: maxGradNorm must be > 0 (Infinity disables clipping), got ${o.maxGradNorm}`);
    this.backend = model.backend;
    this.seed = options.seed ?? 1234n;
    this.useGraphs = options.graphs ?? this.backend.name === 'cuda';
    this.ignoreIndex = options.ignoreIndex ?? -100;
    const b = this.backend, rows = maxBatch * maxSeqLen, n = model.params.layout.numel;
    this.tokens = b.empty([rows], 'i32');
    this.lengths = b.empty([maxBatch], 'i32');
    this.targets = b.empty([rows], 'i32');
    this.loss = b.empty([rows], 'f32');
    if (model.sparseLoss) this.lossRows = { rows: b.empty([rows], 'i32'), targets: b.empty([rows], 'i32') };
    const maxSourceLen = options.maxSourceLen ?? 0;
    if (model.source) {
      if (!Number.isInteger(maxSourceLen) || maxSourceLen < 1 || maxSourceLen > model.source.maxSeqLen) {
        throw new ArgumentError(`StepRunner: an encoder-decoder model needs maxSourceLen, an integer in [1, ${model.source.maxSeqLen}], got ${options.maxSourceLen}`);
      }
      this.source = { tokens: b.empty([maxBatch * maxSourceLen], 'i32'), lengths: b.empty([maxBatch], 'i32') };
    } else if (options.maxSourceLen !== undefined) {
      throw new ArgumentError('StepRunner: maxSourceLen is only for encoder-decoder models');
    }
    if (options.zero) {
      if (model instanceof DataParallelModel) throw new ArgumentError('StepRunner: ZeRO-1 averages the gradients itself (reduce-scatter); pass the bare model, not a DataParallelModel');
      if (model.gradientSharding) throw new ArgumentError('StepRunner: ZeRO-1 over a tensor-parallel model is not supported');
      this.zero = new ZeroAdamW(model.params, options.zero.comm, o, { masterWeights: o.masterWeights });
    } else {
      this.m = b.empty([n], 'f32');
      this.v = b.empty([n], 'f32');
      b.fill(this.m, 0);
      b.fill(this.v, 0);
      if (o.masterWeights && model.dtype !== 'f32') {
        this.master = b.empty([n], 'f32');
        b.copy(model.params.values.flat, this.master);
      }
    }
    if (model.gradientSharding) this.normRanges = splitNormRanges(model.gradientSharding.shardedRanges, n);
    this.scalars = b.empty([4], 'f32');
    this.dropoutBase = b.empty([2], 'i32');
    this.sumSquares = b.empty([1], 'f32');
    // Plan the largest training step now, so the arena is allocated once, up front.
    this.largestPlan = this.prepare(maxBatch, maxSeqLen, maxSourceLen, 1, true, false, rows).plan;
    this.arena = b.createArena(this.largestPlan.arena.arenaBytes);
  }

  /** Bytes of the activation arena, and of the plan for each prepared shape. */
  get arenaBytes(): number { return this.arena.bytes; }

  plans(): { key: string; plan: StepPlan }[] {
    return [...this.steps].map(([key, s]) => ({ key, plan: s.plan }));
  }

  /** AdamW's moments and the master weights, on the host (for checkpoints); under ZeRO-1 this rank's shard of them. */
  optimizerState(): { m: Float32Array; v: Float32Array; master?: Float32Array } {
    if (this.zero) return this.zero.state();
    const b = this.backend;
    return {
      m: b.download(this.m!) as Float32Array, v: b.download(this.v!) as Float32Array,
      ...(this.master ? { master: b.download(this.master) as Float32Array } : {}),
    };
  }

  /** Restores what optimizerState() returned; sizes must match this model's workspace (this rank's shard under ZeRO-1). */
  restoreOptimizerState(state: { m: Float32Array; v: Float32Array; master?: Float32Array }, source: string): void {
    if (this.zero) { this.zero.restore(state, source); return; }
    const n = this.model.params.layout.numel;
    for (const [name, data] of [['m', state.m], ['v', state.v], ['master', state.master]] as const) {
      if (data && data.length !== n) throw new ArgumentError(`${source}: optimizer state '${name}' has ${data.length} elements, the model's workspace ${n}`);
    }
    this.backend.upload(this.m!, state.m);
    this.backend.upload(this.v!, state.v);
    if (this.master) {
      if (state.master) this.backend.upload(this.master, state.master);
      else this.syncMasterFromParams();
    }
  }

  /** Bytes of optimizer state (moments and master weights) this rank holds. */
  get optimizerStateBytes(): number {
    if (this.zero) return this.zero.stateBytes;
    return (this.master ? 3 : 2) * this.model.params.layout.numel * 4;
  }

  /** The Philox counter the next step's dropout starts from (saved in checkpoints for exact resume). */
  get dropoutCounter(): bigint { return this.dropoutOffset; }
  set dropoutCounter(value: bigint) { this.dropoutOffset = value; }

  /** Uploads the model's current parameters into the fp32 master copy (after loading weights). */
  syncMasterFromParams(): void {
    if (this.master) this.backend.copy(this.model.params.values.flat, this.master);
    this.zero?.syncMasterFromParams();
  }

  /** One training step: forward, backward, clipping, AdamW. */
  trainStep(host: HostBatch, lr: number, lossScale = 1): StepResult {
    const validTargets = this.upload(host);
    const step = this.prepare(host.batch, host.seqLen, host.source?.seqLen ?? 0, lossScale, true, true);
    const rows = host.batch * host.seqLen;
    const t = this.updates + 1;
    const gradScale = rows / (lossScale * Math.max(1, validTargets));
    const { beta1, beta2 } = this.optimizer;
    this.backend.upload(this.scalars, [lr, gradScale, 1 - beta1 ** t, 1 - beta2 ** t]);
    this.execute(step);
    const loss = this.meanLoss(validTargets);
    const sumSquares = (this.backend.download(this.zero?.sumSquares ?? this.sumSquares) as Float32Array)[0]!;
    const gradNorm = Math.sqrt(sumSquares) * gradScale;
    const skipped = !Number.isFinite(gradNorm);
    if (!skipped) this.updates++;
    return { loss, validTargets, gradNorm, skipped, gradScale };
  }

  /** Forward only (dropout off): the mean loss of a batch. */
  evalLoss(host: HostBatch): { loss: number; validTargets: number } {
    const validTargets = this.upload(host);
    const step = this.prepare(host.batch, host.seqLen, host.source?.seqLen ?? 0, 1, false, true);
    this.execute(step);
    return { loss: this.meanLoss(validTargets), validTargets };
  }

  dispose(): void {
    for (const s of this.steps.values()) s.graph?.dispose();
    this.steps.clear();
    this.arena.free();
    for (const t of [this.tokens, this.lengths, this.targets, this.loss, this.scalars, this.sumSquares, this.dropoutBase]) this.backend.free(t);
    if (this.m) this.backend.free(this.m);
    if (this.v) this.backend.free(this.v);
    this.zero?.free();
    if (this.lossRows) for (const t of [this.lossRows.rows, this.lossRows.targets]) this.backend.free(t);
    if (this.master) this.backend.free(this.master);
    if (this.source) for (const t of [this.source.tokens, this.source.lengths]) this.backend.free(t);
  }

  // --- internals ----------------------------------------------------------------------------------

  private upload(host: HostBatch): number {
    const { batch, seqLen, tokens, targets } = host;
    const rows = batch * seqLen;
    if (!Number.isInteger(batch) || batch < 1 || !Number.isInteger(seqLen) || seqLen < 1) throw new ArgumentError(`step: batch and seqLen must be positive integers, got ${batch} × ${seqLen}`);
    if (batch * seqLen > this.options.maxBatch * this.options.maxSeqLen || seqLen > this.options.maxSeqLen) {
      throw new ArgumentError(`step: batch ${batch} × ${seqLen} exceeds the runner's bounds (maxBatch ${this.options.maxBatch} × maxSeqLen ${this.options.maxSeqLen})`);
    }
    if (tokens.length !== rows || targets.length !== rows) throw new ArgumentError(`step: tokens (${tokens.length}) and targets (${targets.length}) must both have batch × seqLen = ${rows} entries`);
    const V = this.model.vocabSize, ignore = this.ignoreIndex;
    let valid = 0;
    for (let i = 0; i < rows; i++) {
      const tok = tokens[i]!, tgt = targets[i]!;
      if (tok < 0 || tok >= V) throw new ArgumentError(`step: token ${tok} at position ${i} is outside the vocabulary [0, ${V})`);
      if (tgt === ignore) continue;
      if (tgt < 0 || tgt >= V) throw new ArgumentError(`step: target ${tgt} at position ${i} is outside the vocabulary [0, ${V})`);
      valid++;
    }
    this.backend.upload(this.backend.view(this.tokens, 0, [rows]), tokens);
    this.backend.upload(this.backend.view(this.targets, 0, [rows]), targets);
    this.lossRowCount = this.lossRows ? this.uploadLossRows(targets, valid) : rows;
    const lengths = host.lengths ?? new Int32Array(batch).fill(seqLen);
    if (lengths.length !== batch) throw new ArgumentError(`step: lengths has ${lengths.length} entries, the batch ${batch}`);
    lengths.forEach((len, b) => { if (!Number.isInteger(len) || len < 1 || len > seqLen) throw new ArgumentError(`step: length ${len} of sequence ${b} must be in [1, ${seqLen}]`); });
    this.backend.upload(this.backend.view(this.lengths, 0, [batch]), lengths);
    this.uploadSource(host);
    return valid;
  }

  /** The indices and targets of the rows with a target, padded with ignored entries (row 0) to the bucket. */
  private uploadLossRows(targets: Int32Array, valid: number): number {
    const count = Math.min(targets.length, Math.max(1, Math.ceil(valid / LOSS_ROW_BUCKET)) * LOSS_ROW_BUCKET);
    const rows = new Int32Array(count), gathered = new Int32Array(count).fill(this.ignoreIndex);
    let k = 0;
    targets.forEach((target, row) => {
      if (target !== this.ignoreIndex) { rows[k] = row; gathered[k++] = target; }
    });
    this.backend.upload(this.backend.view(this.lossRows!.rows, 0, [count]), rows);
    this.backend.upload(this.backend.view(this.lossRows!.targets, 0, [count]), gathered);
    return count;
  }

  private uploadSource(host: HostBatch): void {
    const source = host.source;
    if (!this.source || !this.model.source) {
      if (source) throw new ArgumentError('step: the batch has a source side, but the model is not an encoder-decoder model');
      return;
    }
    if (!source) throw new ArgumentError('step: an encoder-decoder model needs the batch\'s source side (HostBatch.source)');
    const { batch } = host, { seqLen, tokens, lengths } = source;
    const maxSourceLen = this.options.maxSourceLen!;
    if (!Number.isInteger(seqLen) || seqLen < 1 || seqLen > maxSourceLen) throw new ArgumentError(`step: source length ${seqLen} must be an integer in [1, maxSourceLen ${maxSourceLen}]`);
    if (tokens.length !== batch * seqLen || lengths.length !== batch) throw new ArgumentError(`step: source tokens (${tokens.length}) must have batch × seqLen = ${batch * seqLen} entries and lengths (${lengths.length}) ${batch}`);
    const V = this.model.source.vocabSize;
    for (let i = 0; i < tokens.length; i++) {
      const tok = tokens[i]!;
      if (tok < 0 || tok >= V) throw new ArgumentError(`step: source token ${tok} at position ${i} is outside the source vocabulary [0, ${V})`);
    }
    for (let b = 0; b < batch; b++) {
      const len = lengths[b]!;
      if (!Number.isInteger(len) || len < 1 || len > seqLen) throw new ArgumentError(`step: source length ${len} of sequence ${b} must be in [1, ${seqLen}]`);
    }
    this.backend.upload(this.backend.view(this.source.tokens, 0, [batch * seqLen]), tokens);
    this.backend.upload(this.backend.view(this.source.lengths, 0, [batch]), lengths);
  }

  private meanLoss(validTargets: number): number {
    const losses = this.backend.download(this.backend.view(this.loss, 0, [this.lossRowCount])) as Float32Array;
    let sum = 0;
    for (const x of losses) sum += x;
    return validTargets > 0 ? sum / validTargets : 0;
  }

  /** lossRowCount: the loss's rows (sparse-loss models; default: those of the last uploaded batch). */
  private prepare(batchSize: number, seqLen: number, sourceLen: number, lossScale: number, training: boolean, forUse: boolean, lossRowCount = this.lossRowCount): PreparedStep {
    const sparse = this.lossRows !== undefined;
    const key = `${training ? 'train' : 'eval'} ${batchSize}x${seqLen}${this.source ? ` source=${sourceLen}` : ''}${sparse ? ` lossRows=${lossRowCount}` : ''} scale=${lossScale}`;
    const existing = this.steps.get(key);
    if (existing) return existing;
    const rows = batchSize * seqLen;
    const b = this.backend;
    const batch: CausalLmBatch = {
      batch: batchSize, seqLen,
      tokens: b.view(this.tokens, 0, [batchSize, seqLen]),
      targets: sparse ? b.view(this.lossRows!.targets, 0, [lossRowCount]) : b.view(this.targets, 0, [rows]),
      loss: b.view(this.loss, 0, [sparse ? lossRowCount : rows]),
      ...(sparse ? { lossRows: b.view(this.lossRows!.rows, 0, [lossRowCount]) } : {}),
      lengths: b.view(this.lengths, 0, [batchSize]),
      lossGradScale: lossScale / rows,
      ...(this.options.labelSmoothing ? { labelSmoothing: this.options.labelSmoothing } : {}),
      ignoreIndex: this.ignoreIndex,
      ...(this.source ? {
        source: { seqLen: sourceLen, tokens: b.view(this.source.tokens, 0, [batchSize, sourceLen]), lengths: b.view(this.source.lengths, 0, [batchSize]) },
      } : {}),
    };
    const stepFn = training
      ? (ctx: Parameters<Parameters<typeof planStep>[1]>[0]) => { this.model.lossStep(ctx, batch, true); this.optimizerUpdate(ctx); }
      : (ctx: Parameters<Parameters<typeof planStep>[1]>[0]) => { this.model.lossStep(ctx, batch, false); };
    const plan = planStep(b, stepFn, training);
    const prepared: PreparedStep = {
      plan, batch, runs: 0,
      run: (on = b) => {
        runStep(on, plan, this.arena, { seed: this.seed, baseOffset: 0n, training, offsetBase: this.dropoutBase }, stepFn);
      },
    };
    if (forUse) {
      if (this.arena.bytes < plan.arena.arenaBytes) {
        // A shape bigger than the one planned at construction (rare: a different batch/length mix).
        for (const s of this.steps.values()) { s.graph?.dispose(); delete s.graph; }
        this.arena.free();
        this.arena = b.createArena(plan.arena.arenaBytes);
      }
      this.steps.set(key, prepared);
    }
    return prepared;
  }

  /**
   * Profiles one step of this batch's shape (profile/profiler.ts): `warmupSteps` ordinary steps
   * (kernels compile, GEMMs autotune, the graph is captured), then the step as it normally runs — its
   * graph replay where there is one — timed as the step, then one eager run with every op timed.
   * A training step applies AdamW at every run (with the learning rate of the warm-up steps); an
   * evaluation step (training: false) is the forward pass and the loss, dropout off.
   */
  profileStep(host: HostBatch, options: StepProfileOptions): Profile {
    const { training, lr = 1e-4, lossScale = 1 } = options;
    const warmupSteps = Math.max(2, options.warmupSteps ?? 3);
    for (let i = 0; i < warmupSteps; i++) {
      if (training) this.trainStep(host, lr, lossScale);
      else this.evalLoss(host);
    }
    const step = this.prepare(host.batch, host.seqLen, host.source?.seqLen ?? 0, lossScale, training, true);
    let runs = 0;
    // Timed as it runs: a replayed graph when the runner uses graphs (profiler.ts graph mode).
    const result = profile(this.backend, (ops) => { runs++; step.run(ops); }, {
      ...options, warmup: 0, graph: step.graph !== undefined,
      reference: () => { runs++; if (step.graph) step.graph.replay(); else step.run(); },
    });
    if (training) this.updates += runs;
    return result;
  }

  /** profileStep of a training step, with the totals bench/train.ts reports. */
  profileTrainStep(host: HostBatch, lr: number, lossScale = 1): Profile & { otherKernelsMs: number; replayed: boolean } {
    const result = this.profileStep(host, { training: true, lr, lossScale, roofs: false });
    const key = this.prepare(host.batch, host.seqLen, host.source?.seqLen ?? 0, lossScale, true, true);
    return { ...result, otherKernelsMs: result.otherMs, replayed: key.graph !== undefined };
  }

  private execute(step: PreparedStep): void {
    const before = this.backend.memoryStats().deviceAllocations;
    const base = this.dropoutOffset;
    this.backend.upload(this.dropoutBase, new Int32Array([Number(base & 0xffffffffn) | 0, Number(base >> 32n) | 0]));
    this.dropoutOffset += step.plan.dropoutCounters;
    if (step.graph) {
      step.graph.replay();
    } else if (this.useGraphs && step.runs >= 1) {
      step.graph = this.backend.captureGraph(() => step.run());
      step.graph.replay();
    } else {
      step.run();
    }
    step.runs++;
    this.lastStepAllocations = this.backend.memoryStats().deviceAllocations - before;
  }

  /** Σ grad² over the gradient workspace, then AdamW over the decayed and the undecayed parts (or ZeRO-1's update). */
  private optimizerUpdate(ctx: StepContext): void {
    const ops = ctx.ops;
    if (this.zero) { this.zero.update(ops, this.scalars, !ctx.tracing); return; }
    const params = this.model.params;
    const o = this.optimizer;
    this.gradientSumSquares(ctx);
    const n = params.layout.numel, split = params.decayedElements;
    const part = (t: Tensor, start: number, end: number) => ops.view(t, start, [end - start]);
    for (const [start, end, decay] of [[0, split, o.weightDecay], [split, n, 0]] as const) {
      if (end <= start) continue;
      const args: AdamWArgs = {
        params: part(params.values.flat, start, end), grads: part(params.grads.flat, start, end),
        m: part(this.m!, start, end), v: part(this.v!, start, end),
        beta1: o.beta1, beta2: o.beta2, eps: o.eps, weightDecay: decay,
        scalars: this.scalars, clip: { sumSquares: this.sumSquares, maxNorm: o.maxGradNorm },
        ...(this.master ? { master: part(this.master, start, end) } : {}),
      };
      ops.adamW(args);
    }
  }

  /**
   * this.sumSquares ← Σ g² over the whole model: over the flat workspace, or, for a tensor-parallel
   * model, over its shard ranges (all-reduced over the ranks) plus its replicated ranges (counted once).
   */
  private gradientSumSquares(ctx: StepContext): void {
    const ops = ctx.ops, grads = this.model.params.grads.flat;
    if (!this.normRanges) { ops.sumSquares({ x: grads, out: this.sumSquares }); return; }
    const { sharded, replicated } = this.normRanges;
    const range = ([start, end]: [number, number]) => ops.view(grads, start, [end - start]);
    if (sharded.length === 0) ops.fill(this.sumSquares, 0);
    sharded.forEach((r, i) => ops.sumSquares({ x: range(r), out: this.sumSquares, accumulate: i > 0 }));
    if (!ctx.tracing) this.model.gradientSharding!.allReduceSum(this.sumSquares);
    for (const r of replicated) ops.sumSquares({ x: range(r), out: this.sumSquares, accumulate: true });
  }
}

/** Sorted, merged shard ranges within [0, n), and the replicated ranges between them. */
export function splitNormRanges(shardedRanges: readonly (readonly [number, number])[], n: number): { sharded: [number, number][]; replicated: [number, number][] } {
  const sorted = [...shardedRanges].map(([s, e]) => [s, e] as [number, number]).sort((a, b) => a[0] - b[0]);
  const sharded: [number, number][] = [];
  for (const [s, e] of sorted) {
    if (!(Number.isInteger(s) && Number.isInteger(e) && 0 <= s && s <= e && e <= n)) throw new ArgumentError(`gradient sharding: range [${s}, ${e}) is outside the workspace [0, ${n})`);
    if (e === s) continue;
    const last = sharded.at(-1);
    if (last && s < last[1]) throw new ArgumentError(`gradient sharding: ranges [${last[0]}, ${last[1]}) and [${s}, ${e}) overlap`);
    if (last && s === last[1]) last[1] = e;
    else sharded.push([s, e]);
  }
  const replicated: [number, number][] = [];
  let at = 0;
  for (const [s, e] of sharded) { if (s > at) replicated.push([at, s]); at = e; }
  if (at < n) replicated.push([at, n]);
  return { sharded, replicated };
}
