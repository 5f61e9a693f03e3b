// The serving engine: one loop feeding every request (continuous batching). A step is
//   schedule (scheduler.ts: {request: positions this step}) → execute (one forward over all the step's
//   rows: prompt chunks and decode tokens mixed) → sample (one token per request whose last position was
//   computed) → update (append, retire finished requests, register full blocks for prefix sharing).
//
// KV memory, as built here ("gather" design; docs/serving.md):
//   slots  [layers][2][maxRunning][Hkv][maxLen][d]  (infer/kv-cache.ts) — each running request owns one
//          contiguous slot, which the existing ops (qkvRopeAppend, flashAttentionForward) read and write;
//   pool   [layers][2][numBlocks][Hkv][blockSize][d] — the paged store behind the block tables: a block
//          that becomes full (and is the first with its hash) is copied slot → pool; a request admitted
//          with a prefix-cache hit gets its cached blocks copied pool → slot and skips computing them.
// The block pool's accounting (block-pool.ts) is the capacity limit: a request holds blocks for every
// computed position, and when they run out the newest request is preempted and later recomputed.
//
// Rows of a step: first a decode region, row s = slot s for every slot below the largest one with a
// one-position item (a decode token; dummy rows at position maxLen − 1, never read, fill the gaps), then
// each prompt chunk's positions [start, start + count) as consecutive rows. Per layer the QKV GEMM covers
// all rows; attention is
//   decode region: qkvRopeAppend + decodeAttention over the slots [0, S) at once (as infer/engine.ts);
//   each chunk:    qkvRopeAppend writes its keys and values into its slot, then per kv head g, flash
//                  attention of the group's query heads [1, Hq/Hkv, count, d] over the slot's keys
//                  [1, 1, start + count, d], causal with the chunk at the end (key j visible to query i
//                  iff j ≤ start + i); permute0213 turns [Hq, count, d] into rows [count, Hq·d].
// Sampling uses backend.sampleTokens on the rows that end a request's computed positions: its draw depends
// on (seed, position) only, so a request samples the same tokens however it is batched or preempted.

import type { Backend } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import { DecoderForward } from '../infer/forward.js';
import { KvCache } from '../infer/kv-cache.js';
import type { DecoderModel } from '../infer/model.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import { samplingParamsRow, seedWords } from '../infer/sampling.js';
import type { Tensor } from '../tensor.js';
import { BlockPool } from './block-pool.js';
import { Scheduler } from './scheduler.js';
import type { ScheduledItem, SchedRequest } from './scheduler.js';

export interface ServingEngineOptions {
  /** Positions per request, prompt included (default and maximum: the model's). */
  readonly maxLen?: number;
  /** Requests running at once (default 16). */
  readonly maxRunning?: number;
  /** Positions computed per step (default 256). */
  readonly maxBatchTokens?: number;
  /** Positions per KV block (default 16). */
  readonly blockSize?: number;
  /** Blocks in the pool (default: enough for maxRunning full-length requests). */
  readonly numBlocks?: number;
  /** Share full blocks between requests with a common prefix (default true). */
  readonly prefixCaching?: boolean;
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
  readonly pool: BlockPool;
  readonly scheduler: Scheduler;
  private readonly slots: KvCache;
  private readonly blockStore: Tensor;
  private readonly forward: DecoderForward;
  private readonly io: Record<'tokens' | 'positions' | 'gather' | 'sPositions' | 'sTokens' | 'sFinished' | 'sLimits' | 'seeds' | 'history' | 'stopIds' | 'params' | 'logits' | 'q' | 'context' | 'lse', Tensor>;
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
    const perRequest = Math.ceil(this.maxLen / this.blockSize);
    const numBlocks = options.numBlocks ?? perRequest * this.maxRunning;
    if (!Number.isInteger(numBlocks) || numBlocks < perRequest) throw new ArgumentError(`serving engine: numBlocks must be an integer >= ${perRequest} (one request of maxLen = ${this.maxLen} positions in blocks of ${this.blockSize}), got ${numBlocks}`);
    this.pool = new BlockPool(numBlocks, this.blockSize);
    this.scheduler = new Scheduler(this.pool, { maxBatchTokens: this.maxBatchTokens, maxRunning: this.maxRunning, prefixCaching: options.prefixCaching ?? true });
    this.freeSlots = Array.from({ length: this.maxRunning }, (_, i) => i);
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch;
    this.slots = new KvCache(b, arch.layers, this.maxRunning, Hkv, this.maxLen, d, model.dtype);
    this.blockStore = b.empty([arch.layers, 2, numBlocks, Hkv, this.blockSize, d], model.dtype);
    // A step's rows: at most maxBatchTokens positions, plus up to maxRunning dummy rows of the decode region.
    const T = this.maxBatchTokens + this.maxRunning, N = this.maxRunning;
    this.forward = new DecoderForward(model, T, this.maxLen);
    const i32 = (shape: number[]) => b.empty(shape, 'i32');
    this.io = {
      tokens: i32([T]), positions: i32([T]), gather: i32([N]), sPositions: i32([N]), sTokens: i32([N]), sFinished: i32([N]), sLimits: i32([N]),
      seeds: i32([N, 2]), history: i32([N, this.maxLen]), stopIds: i32([STOP_SLOTS]), params: b.empty([N, 4], 'f32'),
      logits: b.empty([N, arch.paddedVocab], model.dtype), q: b.empty([T * Hq * d], model.dtype), context: b.empty([T * Hq * d], model.dtype),
      lse: b.empty([T * Hq], 'f32'),
    };
    b.fill(this.io.stopIds, -1);
    b.fill(this.io.history, 0);
  }

  get hasWork(): boolean { return this.scheduler.hasWork; }

  stats(): EngineStats {
    return {
      running: this.scheduler.running.length, waiting: this.scheduler.waiting.length,
      blocksUsed: this.pool.usedBlocks, blocksTotal: this.pool.numBlocks,
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
    for (const { request: r, cachedPositions } of plan.admitted) {
      const live = this.bySched.get(r)!;
      live.slot = this.freeSlots.shift()!;
      for (let i = 0; i < cachedPositions / this.blockSize; i++) this.copyBlock(live.slot, i, r.blockTable[i]!, 'toSlot');
    }
    if (plan.items.length === 0) return false;
    const sampled = this.execute(plan.items);
    for (const full of this.scheduler.complete(plan.items)) this.copyBlock(this.bySched.get(full.request)!.slot, full.index, full.block, 'toPool');
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
    b.free(this.blockStore);
    this.slots.free();
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

  /** Copies block `index` of a slot to pool block `block` (or back), for every layer, K and V, kv head. */
  private copyBlock(slot: number, index: number, block: number, direction: 'toSlot' | 'toPool'): void {
    const b = this.backend, arch = this.model.arch, bs = this.blockSize, d = arch.headDim, Hkv = arch.kvHeads, L = this.maxLen;
    const chunk = bs * d;
    for (let l = 0; l < arch.layers; l++) {
      for (let kv = 0; kv < 2; kv++) {
        for (let h = 0; h < Hkv; h++) {
          const inSlot = b.view(this.slots.storage, ((((l * 2 + kv) * this.maxRunning + slot) * Hkv + h) * L + index * bs) * d, [chunk]);
          const inPool = b.view(this.blockStore, (((l * 2 + kv) * this.pool.numBlocks + block) * Hkv + h) * chunk, [chunk]);
          if (direction === 'toPool') b.copy(inSlot, inPool); else b.copy(inPool, inSlot);
        }
      }
    }
  }

  /** The forward over every scheduled row, then sampling for the requests whose last position was computed. */
  private execute(items: readonly ScheduledItem[]): [Live, TokenEvent][] {
    const b = this.backend, m = this.model, arch = m.arch, f = this.forward, io = this.io, L = this.maxLen;
    const { heads: Hq, kvHeads: Hkv, headDim: d } = arch, G = Hq / Hkv, W = (Hq + 2 * Hkv) * d;
    // Rows: the decode region first — row s is slot s, for s < S = 1 + the largest slot with a one-position
    // item; slots without one get a dummy row at position maxLen − 1, a cache position no query ever reads
    // (a request's last computed position is at most limit − 2 ≤ maxLen − 2) — then the prompt chunks.
    const single = items.filter((it) => it.count === 1);
    const S = single.length === 0 ? 0 : 1 + Math.max(...single.map((it) => this.bySched.get(it.request)!.slot));
    const R = S + items.reduce((n, it) => n + (it.count === 1 ? 0 : it.count), 0);
    const tokens = new Int32Array(R), positions = new Int32Array(R).fill(L - 1, 0, S);
    const segments: { live: Live; r0: number; start: number; count: number }[] = [];
    const rowOf = new Map<ScheduledItem, number>();
    let r0 = S;
    for (const it of items) {
      const live = this.bySched.get(it.request)!;
      this.counters.computedPositions += it.count;
      if (it.count === 1) {
        tokens[live.slot] = it.request.tokens[it.start]!;
        positions[live.slot] = it.start;
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
    const v = f.rows(R);
    const rope = f.rope ? { rope: { invFreq: f.rope.invFreq, scale: f.rope.scale } } : {};
    const scale = 1 / Math.sqrt(d);
    const slotBase = (l: number, kv: number, slot: number) => ((l * 2 + kv) * this.maxRunning + slot) * Hkv * L * d;
    f.embed(b, v, tokensView, positionsView);
    f.blocks(b, v, (l) => {
      const bias = m.layers[l]!.qkvBias;
      if (S > 0) {
        // One token per slot: the decode step's ops over slots [0, S) (infer/engine.ts does the same).
        const kCache = this.slots.keys(l, 0, S), vCache = this.slots.values(l, 0, S), decodePositions = b.view(io.positions, 0, [S]);
        b.qkvRopeAppend({ qkv: b.view(v.qkv, 0, [S, W]), positions: decodePositions, q: b.view(io.q, 0, [S, Hq, 1, d]), kCache, vCache, ...rope, ...(bias ? { bias } : {}) });
        b.decodeAttention({ q: b.view(io.q, 0, [S, Hq, d]), kCache, vCache, positions: decodePositions, out: b.view(v.attn, 0, [S, Hq, d]), scale });
      }
      for (const s of segments) {
        const c = s.count, slot = s.live.slot, keys = s.start + c;
        b.qkvRopeAppend({
          qkv: b.view(v.qkv, s.r0 * W, [c, W]), positions: b.view(io.positions, s.r0, [c]), q: b.view(io.q, s.r0 * Hq * d, [1, Hq, c, d]),
          kCache: b.view(this.slots.storage, slotBase(l, 0, slot), [1, Hkv, L, d]), vCache: b.view(this.slots.storage, slotBase(l, 1, slot), [1, Hkv, L, d]),
          ...rope, ...(bias ? { bias } : {}),
        });
        for (let g = 0; g < Hkv; g++) {
          const qOffset = (s.r0 * Hq + g * G * c) * d;
          b.flashAttentionForward({
            q: b.view(io.q, qOffset, [1, G, c, d]), out: b.view(io.context, qOffset, [1, G, c, d]),
            k: b.view(this.slots.storage, slotBase(l, 0, slot) + g * L * d, [1, 1, keys, d]),
            v: b.view(this.slots.storage, slotBase(l, 1, slot) + g * L * d, [1, 1, keys, d]),
            lse: b.view(io.lse, s.r0 * Hq + g * G * c, [1, G, c]), scale, causal: true,
          });
        }
        b.permute0213({ x: b.view(io.context, s.r0 * Hq * d, [1, Hq, c, d]), out: b.view(v.attn, s.r0 * Hq * d, [1, c, Hq, d]) });
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
