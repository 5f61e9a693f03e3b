// The serving engine: one loop feeding every request (continuous batching). A step is
//   schedule (scheduler.ts: {request: positions this step}) → execute (one forward over all the step's
//   rows: prompt chunks and decode tokens mixed) → sample (one token per request whose last position was
//   computed) → update (append, retire finished requests, register full blocks for prefix sharing).
//
// KV memory is one paged pool (docs/serving.md, "Paged attention"):
//   pool         [layers][2][numBlocks][Hkv][blockSize][d] — the only store of keys and values; a block
//                holds blockSize positions of one kv head contiguously (blockSize·d elements: whole
//                16-byte vectors and 32-byte sectors for the kernels' row loads);
//   blockTables  i32 [maxRunning, maxBlocksPerSeq] on the device, row = the request's slot, entry i = the
//                pool block holding its positions [i·blockSize, (i + 1)·blockSize); a host mirror says
//                which rows changed, and only those entries are uploaded, when the scheduler grows a
//                table or admits a request.
// The attention ops read and write the pool through the table (backend.ts: qkvRopeAppend, decodeAttention
// and flashAttentionForward with a block table), so a prefix-cache hit only points the new request's
// table at the shared blocks (block-pool.ts counts the references; only full blocks are shared, and a
// full block is never written again, so no copy-on-write is needed). Preemption and cancellation release
// the blocks (block-pool.ts); nothing is copied. The pool's size is the capacity limit: a request holds
// blocks for every computed position, and when they run out the newest request is preempted and later
// recomputed.
//
// Rows of a step: first a decode region, row s = slot s for every slot below the largest one with a
// one-position item (a decode token; idle rows — position −1 for the cache ops, nothing written or read —
// fill the gaps), then each prompt chunk's positions [start, start + count) as consecutive rows. Per layer
// the QKV GEMM covers all rows; attention is
//   decode region: one qkvRopeAppend + one decodeAttention over table rows [0, S);
//   each chunk:    qkvRopeAppend writes its keys and values into its blocks, then one flash attention of
//                  its query heads [1, Hq, count, d] over its start + count keys through its table row,
//                  causal with the chunk at the end (key j visible to query i iff j ≤ start + i);
//                  permute0213 turns [Hq, count, d] into rows [count, Hq·d].
// Sampling uses backend.sampleTokens on the rows that end a request's computed positions: its draw depends
// on (seed, position) only, so a request samples the same tokens however it is batched or preempted.

import { freemem } from 'node:os';
import type { Backend } from '../backend/backend.js';
import { byteSize } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { decodeAttentionSplits } from '../infer/attention-splits.js';
import { DecoderForward } from '../infer/forward.js';
import type { DecoderModel } from '../infer/model.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import { samplingParamsRow, seedWords } from '../infer/sampling.js';
import type { Tensor } from '../tensor.js';
import { BlockPool } from './block-pool.js';
import { Scheduler } from './scheduler.js';
import type { Batching, ScheduledItem, SchedRequest } from './scheduler.js';

export type { Batching } from './scheduler.js';

export interface ServingEngineOptions {
  /** Positions per request, prompt included (default and maximum: the model's). */
  readonly maxLen?: number;
  /** Requests running at once (default 16). */
  readonly maxRunning?: number;
  /** Positions computed per step (default 256). */
  readonly maxBatchTokens?: number;
  /** Positions per KV block (default 16). */
  readonly blockSize?: number;
  /** Blocks in the pool (default: enough for maxRunning full-length requests; or from kvMemoryFraction). */
  readonly numBlocks?: number;
  /**
   * Size the pool to this fraction of the memory free when the engine is built (the device's on CUDA, the
   * host's on the CPU), after the weights and the step buffers; (0, 1], not with numBlocks.
   */
  readonly kvMemoryFraction?: number;
  /** Share full blocks between requests with a common prefix (default true). */
  readonly prefixCaching?: boolean;
  /**
   * 'continuous' (default): a waiting request is admitted as soon as there is room. 'static': requests are
   * admitted in waves of up to maxRunning, the next wave only once the whole previous one has finished
   * (scheduler.ts; a baseline for benchmarks: same kernels, same steps).
   */
  readonly batching?: Batching;
}

export type FinishReason = 'stop' | 'length' | 'cancelled';

export interface TokenEvent {
  readonly token: number;
  /** ln p(token) under the model's distribution, and the top alternatives (when logprobs were asked for). */
  readonly logprob?: number;
  readonly top?: { token: number; logprob: number }[];
}

export interface GenerationRequest {
  readonly prompt: readonly number[];
  /** New tokens at most (≥ 1); generation also stops at maxLen. */
  readonly maxTokens: number;
  readonly sampling: ResolvedSampling;
  readonly stopTokenIds: readonly number[];
  /** Alternatives to report per token (0 = no log-probabilities; at most 5). */
  readonly logprobs?: number;
  readonly onToken: (event: TokenEvent) => void;
  readonly onFinish: (reason: FinishReason) => void;
}

export interface EngineStats {
  readonly running: number;
  readonly waiting: number;
  readonly blocksUsed: number;
  readonly blocksTotal: number;
  /** Bytes of the KV pool (all of the engine's KV memory). */
  readonly kvPoolBytes: number;
  readonly prefixQueried: number;
  readonly prefixHits: number;
  readonly preemptions: number;
  /** Positions run through the model (prompts, recomputes and decode tokens). */
  readonly computedPositions: number;
  readonly generatedTokens: number;
  readonly steps: number;
}

interface Live {
  readonly id: string;
  readonly request: GenerationRequest;
  readonly sched: SchedRequest;
  readonly limit: number;
  slot: number;
  done: boolean;
}

export const MAX_LOGPROBS = 5;
const STOP_SLOTS = 16;

export class ServingEngine {
  readonly backend: Backend;
  readonly maxLen: number;
  readonly maxRunning: number;
  readonly maxBatchTokens: number;
  readonly blockSize: number;
  /** Entries of a block table: ⌈maxLen / blockSize⌉. */
  readonly maxBlocksPerSeq: number;
  readonly pool: BlockPool;
  readonly scheduler: Scheduler;
  /** [layers, 2, numBlocks, Hkv, blockSize, d]: every key and value of every request. */
  readonly kvPool: Tensor;
  /** i32 [maxRunning, maxBlocksPerSeq] on the device; row = slot. */
  readonly blockTables: Tensor;
  /** What the device's block tables hold (−1 = never written); rows are re-sent when a request's table changed. */
  private readonly tableMirror: Int32Array;
  private readonly forward: DecoderForward;
  /** Split-K scratch of decode attention (f32 [maxRunning·Hq·maxSplits·(d + 2)]), when some decode region splits. */
  private readonly partials?: Tensor;
  private readonly io: Record<'tokens' | 'positions' | 'cachePositions' | 'gather' | 'sPositions' | 'sTokens' | 'sFinished' | 'sLimits' | 'seeds' | 'history' | 'stopIds' | 'params' | 'logits' | 'q' | 'context' | 'lse', Tensor>;
  private readonly live = new Map<string, Live>();
  private readonly bySched = new Map<SchedRequest, Live>();
  private readonly freeSlots: number[];
  private nextId = 0;
  private counters = { preemptions: 0, computedPositions: 0, generatedTokens: 0, steps: 0 };
  private disposed = false;

  constructor(readonly model: DecoderModel, options: ServingEngineOptions = {}) {
    const arch = model.arch, b = model.backend;
    this.backend = b;
    this.maxLen = options.maxLen ?? arch.maxPositions;
    this.maxRunning = options.maxRunning ?? 16;
    this.maxBatchTokens = options.maxBatchTokens ?? 256;
    this.blockSize = options.blockSize ?? 16;
    if (!Number.isInteger(this.maxLen) || this.maxLen < 2 || this.maxLen > arch.maxPositions) throw new ArgumentError(`serving engine: maxLen must be an integer in [2, ${arch.maxPositions}], got ${this.maxLen}`);
    if (!Number.isInteger(this.maxRunning) || this.maxRunning < 1) throw new ArgumentError(`serving engine: maxRunning must be a positive integer, got ${this.maxRunning}`);
    if (!Number.isInteger(this.maxBatchTokens) || this.maxBatchTokens < 1) throw new ArgumentError(`serving engine: maxBatchTokens must be a positive integer, got ${this.maxBatchTokens}`);
    if (!Number.isInteger(this.blockSize) || this.blockSize < 1) throw new ArgumentError(`serving engine: blockSize must be a positive integer, got ${this.blockSize}`);
    const perRequest = Math.ceil(this.maxLen / this.blockSize);
    this.maxBlocksPerSeq = perRequest;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    // A step's rows: at most maxBatchTokens positions, plus up to maxRunning idle rows of the decode region.
    const T = this.maxBatchTokens + this.maxRunning, N = this.maxRunning;
    this.forward = new DecoderForward(model, T, this.maxLen);
    const i32 = (shape: number[]) => b.empty(shape, 'i32');
    this.io = {
      tokens: i32([T]), positions: i32([T]), cachePositions: i32([N]), gather: i32([N]), sPositions: i32([N]), sTokens: i32([N]), sFinished: i32([N]), sLimits: i32([N]),
      seeds: i32([N, 2]), history: i32([N, this.maxLen]), stopIds: i32([STOP_SLOTS]), params: b.empty([N, 4], 'f32'),
      logits: b.empty([N, arch.paddedVocab], model.dtype), q: b.empty([T * Hq * d], model.dtype), context: b.empty([T * Hq * d], model.dtype),
      lse: b.empty([T * Hq], 'f32'),
    };
    b.fill(this.io.stopIds, -1);
    b.fill(this.io.history, 0);
    const maxSplits = Math.max(...Array.from({ length: N }, (_, i) => this.decodeSplits(i + 1)));
    if (maxSplits > 1) this.partials = b.empty([N * Hq * maxSplits * (d + 2)], 'f32');
    this.blockTables = i32([N, perRequest]);
    this.tableMirror = new Int32Array(N * perRequest).fill(-1);
    b.fill(this.blockTables, -1);
    // The pool last: kvMemoryFraction sizes it from what the weights and the buffers above left free.
    const blockBytes = arch.layers * 2 * Hkv * this.blockSize * d * byteSize(model.dtype);
    let numBlocks: number;
    try {
      numBlocks = poolBlocks(options, b, blockBytes, perRequest * this.maxRunning);
      if (!Number.isInteger(numBlocks) || numBlocks < perRequest) throw new ArgumentError(`serving engine: numBlocks must be an integer >= ${perRequest} (one request of maxLen = ${this.maxLen} positions in blocks of ${this.blockSize}), got ${numBlocks}${options.kvMemoryFraction !== undefined ? ` from kvMemoryFraction ${options.kvMemoryFraction} (${blockBytes} bytes a block)` : ''}`);
    } catch (e) {
      for (const t of [...Object.values(this.io), this.blockTables, ...(this.partials ? [this.partials] : [])]) b.free(t);
      this.forward.free();
      throw e;
    }
    this.pool = new BlockPool(numBlocks, this.blockSize);
    this.scheduler = new Scheduler(this.pool, { maxBatchTokens: this.maxBatchTokens, maxRunning: this.maxRunning, prefixCaching: options.prefixCaching ?? true, batching: options.batching ?? 'continuous' });
    this.freeSlots = Array.from({ length: this.maxRunning }, (_, i) => i);
    this.kvPool = b.empty([arch.layers, 2, numBlocks, Hkv, this.blockSize, d], model.dtype);
    // Zero, so that nothing in the pool is ever NaN (the ops only read positions a request has written).
    b.fill(this.kvPool, 0);
  }

  /** Bytes of the KV pool. */
  get kvPoolBytes(): number { return this.kvPool.numel * byteSize(this.model.dtype); }

  /** The blocks slot `slot`'s device block table lists (for tests; −1 = an entry never written). */
  deviceBlockTable(slot: number): number[] {
    const row = this.backend.download(this.backend.view(this.blockTables, slot * this.maxBlocksPerSeq, [this.maxBlocksPerSeq])) as Int32Array;
    return Array.from(row);
  }

  /** The slot (block-table row) of a running request, or −1. */
  slotOf(id: string): number {
    return this.live.get(id)?.slot ?? -1;
  }

  /** The scheduler's block table of a request (its blocks in position order), or undefined once finished. */
  blockTableOf(id: string): readonly number[] | undefined {
    return this.live.get(id)?.sched.blockTable;
  }

  get hasWork(): boolean { return this.scheduler.hasWork; }

  stats(): EngineStats {
    return {
      running: this.scheduler.running.length, waiting: this.scheduler.waiting.length,
      blocksUsed: this.pool.usedBlocks, blocksTotal: this.pool.numBlocks, kvPoolBytes: this.kvPoolBytes,
      prefixQueried: this.pool.queried, prefixHits: this.pool.hits, ...this.counters,
    };
  }

  /** Queues a request; returns its id (for cancel()). Checks what the engine itself needs. */
  submit(request: GenerationRequest): string {
    this.checkAlive();
    const V = this.model.vocabSize, n = request.prompt.length;
    if (n < 1) throw new ArgumentError('serving engine: the prompt is empty; a request needs at least one token');
    if (n >= this.maxLen) throw new ArgumentError(`serving engine: the prompt has ${n} tokens; the context holds ${this.maxLen} positions, so at most ${this.maxLen - 1}`);
    request.prompt.forEach((t, j) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`serving engine: token ${t} at position ${j} is outside the vocabulary [0, ${V})`); });
    if (!Number.isInteger(request.maxTokens) || request.maxTokens < 1) throw new ArgumentError(`serving engine: maxTokens must be a positive integer, got ${request.maxTokens}`);
    const logprobs = request.logprobs ?? 0;
    if (!Number.isInteger(logprobs) || logprobs < 0 || logprobs > MAX_LOGPROBS) throw new ArgumentError(`serving engine: logprobs must be an integer in [0, ${MAX_LOGPROBS}], got ${logprobs}`);
    const id = `r${this.nextId++}`;
    const sched = this.scheduler.add(id, [...request.prompt]);
    const live: Live = { id, request, sched, limit: Math.min(n + request.maxTokens, this.maxLen), slot: -1, done: false };
    this.live.set(id, live);
    this.bySched.set(sched, live);
    return id;
  }

  /** Ends a request now (client gone, or a stop string matched): its blocks are released at once. */
  cancel(id: string, reason: FinishReason = 'cancelled'): boolean {
    const live = this.live.get(id);
    if (!live || live.done) return false;
    this.retire(live, reason);
    return true;
  }

  /** One iteration: schedule, run the model once over the batch, sample, update. False when there was nothing to do. */
  step(): boolean {
    this.checkAlive();
    const plan = this.scheduler.schedule();
    for (const r of plan.preempted) {
      const live = this.bySched.get(r)!;
      this.freeSlot(live);
      this.counters.preemptions++;
    }
    // An admitted request's table starts with its prefix-cache hits: the shared blocks themselves.
    for (const { request: r } of plan.admitted) this.bySched.get(r)!.slot = this.freeSlots.shift()!;
    if (plan.items.length === 0) return false;
    for (const it of plan.items) this.syncTable(this.bySched.get(it.request)!);
    const sampled = this.execute(plan.items);
    this.scheduler.complete(plan.items); // registers newly full blocks' hashes: they are shareable in place
    this.counters.steps++;
    for (const [live, event] of sampled) this.append(live, event);
    return true;
  }

  /** Runs steps until every request has finished (for tests and batch use). */
  runToCompletion(): void {
    while (this.hasWork) this.step();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    const b = this.backend;
    for (const t of Object.values(this.io)) b.free(t);
    b.free(this.kvPool);
    b.free(this.blockTables);
    if (this.partials) b.free(this.partials);
    this.forward.free();
  }

  // --- internals ------------------------------------------------------------------------------------

  private checkAlive(): void {
    if (this.disposed) throw new ArgumentError('serving engine: used after dispose()');
  }

  private freeSlot(live: Live): void {
    if (live.slot >= 0) {
      this.freeSlots.push(live.slot);
      this.freeSlots.sort((a, b) => a - b);
      live.slot = -1;
    }
  }

  private retire(live: Live, reason: FinishReason): void {
    live.done = true;
    this.scheduler.remove(live.sched);
    this.freeSlot(live);
    this.live.delete(live.id);
    this.bySched.delete(live.sched);
    live.request.onFinish(reason);
  }

  private append(live: Live, event: TokenEvent): void {
    if (live.done) return;
    live.sched.tokens.push(event.token);
    this.counters.generatedTokens++;
    live.request.onToken(event);
    if (live.done) return; // the callback cancelled it (a stop string)
    if (live.request.stopTokenIds.includes(event.token)) this.retire(live, 'stop');
    else if (live.sched.tokens.length >= live.limit) this.retire(live, 'length');
  }

  /**
   * Decode attention's split-K chunks for a decode region of n rows (infer/engine.ts's rule): enough blocks
   * to fill the GPU (264 = two waves on 132 SMs) when n·Hkv alone would not, but at least 256 keys a split.
   */
  private decodeSplits(n: number): number {
    return decodeAttentionSplits(this.maxLen, this.model.arch.kvHeads, n);
  }

  /** Sends the entries of a request's block table that differ from what its device row holds. */
  private syncTable(live: Live): void {
    const table = live.sched.blockTable, M = this.maxBlocksPerSeq, base = live.slot * M;
    let first = -1, last = -1;
    for (let i = 0; i < table.length; i++) {
      if (this.tableMirror[base + i] !== table[i]) {
        if (first < 0) first = i;
        last = i;
        this.tableMirror[base + i] = table[i]!;
      }
    }
    if (first >= 0) this.backend.upload(this.backend.view(this.blockTables, base + first, [last - first + 1]), this.tableMirror.subarray(base + first, base + last + 1));
  }

  /** The forward over every scheduled row, then sampling for the requests whose last position was computed. */
  private execute(items: readonly ScheduledItem[]): [Live, TokenEvent][] {
    const b = this.backend, m = this.model, arch = m.arch, f = this.forward, io = this.io, L = this.maxLen;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch, W = (Hq + 2 * Hkv) * d;
    // Rows: the decode region first — row s is slot s (its block-table row), for s < S = 1 + the largest
    // slot with a one-position item; slots without one are idle rows (token 0 at position 0 for the
    // embedding, position −1 for the cache ops: nothing written, no keys read) — then the prompt chunks.
    const single = items.filter((it) => it.count === 1);
    const S = single.length === 0 ? 0 : 1 + Math.max(...single.map((it) => this.bySched.get(it.request)!.slot));
    const R = S + items.reduce((n, it) => n + (it.count === 1 ? 0 : it.count), 0);
    const tokens = new Int32Array(R), positions = new Int32Array(R), cachePositions = new Int32Array(S).fill(-1);
    const segments: { live: Live; r0: number; start: number; count: number }[] = [];
    const rowOf = new Map<ScheduledItem, number>();
    let r0 = S;
    for (const it of items) {
      const live = this.bySched.get(it.request)!;
      this.counters.computedPositions += it.count;
      if (it.count === 1) {
        tokens[live.slot] = it.request.tokens[it.start]!;
        positions[live.slot] = cachePositions[live.slot] = it.start;
        rowOf.set(it, live.slot);
        continue;
      }
      tokens.set(it.request.tokens.slice(it.start, it.start + it.count), r0);
      for (let j = 0; j < it.count; j++) positions[r0 + j] = it.start + j;
      segments.push({ live, r0, start: it.start, count: it.count });
      rowOf.set(it, r0 + it.count - 1);
      r0 += it.count;
    }
    const tokensView = b.view(io.tokens, 0, [R]), positionsView = b.view(io.positions, 0, [R]);
    b.upload(tokensView, tokens);
    b.upload(positionsView, positions);
    const decodePositions = S > 0 ? b.view(io.cachePositions, 0, [S]) : undefined;
    if (decodePositions) b.upload(decodePositions, cachePositions);
    const v = f.rows(R);
    const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
    const scale = 1 / Math.sqrt(d);
    const M = this.maxBlocksPerSeq, NB = this.pool.numBlocks, bs = this.blockSize;
    const poolView = (l: number, kv: number) => b.view(this.kvPool, (l * 2 + kv) * NB * Hkv * bs * d, [NB, Hkv, bs, d]);
    const tableRows = (first: number, count: number) => b.view(this.blockTables, first * M, [count, M]);
    f.embed(b, v, tokensView, positionsView);
    f.blocks(b, v, (l) => {
      const bias = m.layers[l]!.qkvBias, kCache = poolView(l, 0), vCache = poolView(l, 1);
      if (decodePositions) {
        // One token per slot: the decode step's ops over table rows [0, S).
        const blockTable = tableRows(0, S), splits = this.decodeSplits(S);
        const partials = splits > 1 ? { partials: b.view(this.partials!, 0, [S, Hq, splits, d + 2]) } : {};
        b.qkvRopeAppend({ qkv: b.view(v.qkv, 0, [S, W]), positions: decodePositions, q: b.view(io.q, 0, [S, Hq, 1, d]), kCache, vCache, blockTable, ...rope, ...(bias ? { bias } : {}) });
        b.decodeAttention({ q: b.view(io.q, 0, [S, Hq, d]), kCache, vCache, positions: decodePositions, out: b.view(v.attn, 0, [S, Hq, d]), scale, blockTable, ...partials });
      }
      for (const s of segments) {
        const c = s.count, blockTable = tableRows(s.live.slot, 1), qOffset = s.r0 * Hq * d;
        b.qkvRopeAppend({
          qkv: b.view(v.qkv, s.r0 * W, [c, W]), positions: b.view(io.positions, s.r0, [c]), q: b.view(io.q, qOffset, [1, Hq, c, d]),
          kCache, vCache, blockTable, ...rope, ...(bias ? { bias } : {}),
        });
        b.flashAttentionForward({
          q: b.view(io.q, qOffset, [1, Hq, c, d]), k: kCache, v: vCache, out: b.view(io.context, qOffset, [1, Hq, c, d]),
          lse: b.view(io.lse, s.r0 * Hq, [1, Hq, c]), scale, causal: true, paged: { blockTable, keys: s.start + c },
        });
        b.permute0213({ x: b.view(io.context, qOffset, [1, Hq, c, d]), out: b.view(v.attn, qOffset, [1, c, Hq, d]) });
      }
      return v.attn;
    });

    const sampling = items.filter((it) => it.samples).map((it) => {
      const live = this.bySched.get(it.request)!;
      return { live, row: rowOf.get(it)!, position: it.start + it.count - 1 };
    });
    const n = sampling.length;
    if (n === 0) return [];
    const Vp = arch.paddedVocab, V = m.vocabSize;
    const gather = b.view(io.gather, 0, [n]);
    b.upload(gather, sampling.map((x) => x.row));
    const last = f.rows(n).y, logits = b.view(io.logits, 0, [n, Vp]);
    b.embedTokens({ tokens: gather, tokenTable: v.h, out: last });
    f.lmHead(b, last, logits);
    const params = new Float32Array(n * 4), seeds = new Int32Array(n * 2);
    sampling.forEach(({ live }, i) => {
      const row = samplingParamsRow(live.request.sampling);
      row[1] = Math.min(row[1]!, V);
      params.set(row, 4 * i);
      seeds.set(seedWords(live.request.sampling.seed, 0), 2 * i);
    });
    const view1 = (t: Tensor) => b.view(t, 0, [n]);
    b.upload(b.view(io.params, 0, [n, 4]), params);
    b.upload(b.view(io.seeds, 0, [n, 2]), seeds);
    b.upload(view1(io.sPositions), sampling.map((x) => x.position));
    b.fill(view1(io.sFinished), 0);
    b.fill(view1(io.sLimits), L);
    b.sampleTokens({
      logits, classes: V, params: b.view(io.params, 0, [n, 4]), seeds: b.view(io.seeds, 0, [n, 2]), positions: view1(io.sPositions),
      history: b.view(io.history, 0, [n, L]), tokens: view1(io.sTokens), finished: view1(io.sFinished), limits: view1(io.sLimits), stopIds: io.stopIds,
    });
    const picked = b.download(view1(io.sTokens)) as Int32Array;
    const wantLogprobs = sampling.some(({ live }) => (live.request.logprobs ?? 0) > 0);
    const allLogits = wantLogprobs ? (b.download(logits) as Float32Array) : undefined;
    return sampling.map(({ live }, i) => {
      const token = picked[i]!, k = live.request.logprobs ?? 0;
      if (k === 0 || !allLogits) return [live, { token }];
      return [live, { token, ...logprobsOf(allLogits.subarray(i * Vp, i * Vp + V), token, k) }];
    });
  }
}

/** ln softmax(z)[token] and the k most likely tokens with theirs (f64 log-sum-exp). */
export function logprobsOf(z: ArrayLike<number>, token: number, k: number): { logprob: number; top: { token: number; logprob: number }[] } {
  let max = -Infinity;
  for (let j = 0; j < z.length; j++) if (z[j]! > max) max = z[j]!;
  let sum = 0;
  for (let j = 0; j < z.length; j++) sum += Math.exp(z[j]! - max);
  const lse = max + Math.log(sum);
  const top: { token: number; logprob: number }[] = [];
  for (let j = 0; j < z.length; j++) {
    const lp = z[j]! - lse;
    if (top.length < k || lp > top[top.length - 1]!.logprob) {
      top.push({ token: j, logprob: lp });
      top.sort((a, c) => c.logprob - a.logprob || a.token - c.token);
      if (top.length > k) top.pop();
    }
  }
  return { logprob: z[token]! - lse, top };
}

/**
 * Blocks of the KV pool: options.numBlocks, or kvMemoryFraction of the free memory (the device's on CUDA,
 * read from the runtime; the host's otherwise) in blocks of blockBytes, or the default.
 */
function poolBlocks(options: ServingEngineOptions, backend: Backend, blockBytes: number, fallback: number): number {
  const fraction = options.kvMemoryFraction;
  if (fraction === undefined) return options.numBlocks ?? fallback;
  if (options.numBlocks !== undefined) throw new ArgumentError('serving engine: give numBlocks or kvMemoryFraction, not both');
  if (!(fraction > 0 && fraction <= 1)) throw new ArgumentError(`serving engine: kvMemoryFraction must be in (0, 1], got ${fraction}`);
  const runtime = (backend as { runtime?: { device?: { memoryInfo?: () => { freeBytes: number } } } }).runtime;
  const free = runtime?.device?.memoryInfo ? runtime.device.memoryInfo().freeBytes : freemem();
  return Math.floor((fraction * free) / blockBytes);
}
