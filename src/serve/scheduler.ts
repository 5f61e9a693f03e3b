// Iteration-level scheduling (vLLM v1's scheduler, in small): each step's only output is
// {request: tokens this step}, which covers a prompt chunk (chunked prefill), a whole prompt, a recompute
// after preemption and a single decode token alike.
//
// A request holds tokens = prompt + generated so far and numComputed, the positions whose keys and values
// are in its blocks. It needs tokens.length − numComputed more positions computed before it can sample
// (1 while decoding). Per step, under a budget of maxBatchTokens positions:
//   1. running requests, oldest first, get min(needed, budget left) positions; their block tables grow to
//      cover them. When the pool runs dry, the newest running request is preempted — its blocks are
//      released, numComputed goes back to 0, and it waits at the head of the queue to be recomputed
//      (its full blocks stay hashed, so the recompute mostly hits the prefix cache). Nothing is dropped.
//   2. if nothing was preempted, waiting requests are admitted in arrival order while the budget, the
//      running limit and the pool allow: first the longest run of its full blocks found in the prefix
//      cache (never the last prompt token: the step must compute it to get logits), then a chunk.
// After the step ran, complete() advances numComputed and registers the hashes of blocks that became
// full, so later requests can share them (with pipelined steps, complete() runs when the step is
// launched: a block holding a token still on the device waits for a later complete() to be hashed).
//
// Speculative decoding (engine.ts): a running request whose `speculate` is K > 0 and that has only its
// last token left to compute is scheduled as one item of 1 + K positions (draft = K): its last token and
// the K draft tokens the engine proposes during the step. If the budget left cannot hold 1 + K, the
// request waits for the next step rather than taking a shorter round: K stays the request's own, so its
// output does not depend on the batch (the oldest running request always fits: K < maxBatchTokens).
// complete() is then told which draft tokens the target accepted: numComputed grows by those + 1, and the
// blocks taken for the rejected positions stay with the request for its next round.
//
// batching: 'static' turns step 2 into classic static batching, as a baseline for the same engine (same
// kernels, same step): when nothing is running, the first min(maxRunning, waiting) requests in the queue
// become a wave; only wave members are admitted (over as many steps as the budget needs), and the next
// wave forms only once every member has finished, so a finished request's slot stays idle until then. A
// preempted member stays in the wave (it goes back to the queue ahead of every later arrival, so the
// wave's members not yet admitted are always the queue's first `waveLeft` entries).

import { ArgumentError } from '../errors.js';
import { BlockPool, blockHashes } from './block-pool.js';

export interface SchedulerOptions {
  /** Positions computed per step at most (prompt chunks + decode tokens). */
  readonly maxBatchTokens: number;
  /** Requests running (holding blocks) at once at most. */
  readonly maxRunning: number;
  /** Share full blocks between requests with the same prefix (default true). */
  readonly prefixCaching?: boolean;
  /** 'continuous' (default): admit whenever there is room; 'static': admit in waves (see the header). */
  readonly batching?: Batching;
}

export type Batching = 'continuous' | 'static';

export class SchedRequest {
  /** Positions whose keys and values are in the blocks. */
  numComputed = 0;
  readonly blockTable: number[] = [];
  /** Chain hashes of this request's full blocks registered so far (blockTable[i] ↔ hashes[i]). */
  hashes: string[] = [];
  state: 'waiting' | 'running' | 'finished' = 'waiting';
  /** Times this request was preempted. */
  preemptions = 0;
  /** Draft tokens of its next speculative round (0: decode one token at a time); set by the engine. */
  speculate = 0;
  /**
   * Tokens at the end of `tokens` that are placeholders for samples still on the device (the engine's
   * pipelined steps; 0 otherwise): they count as tokens to schedule, but no block hash covers them.
   */
  pending = 0;

  constructor(readonly id: string, readonly tokens: number[], readonly arrival: number) {}

  get needed(): number { return this.tokens.length - this.numComputed; }

  /**
   * The chain hashes of its full blocks but the last position (a prefix-cache lookup: the step must compute
   * that position to sample), kept while its tokens stay as they are (a request waiting for room is looked
   * up again every step).
   */
  promptHashes(blockSize: number): string[] {
    const count = Math.floor((this.tokens.length - 1) / blockSize);
    if (this.lookup?.length !== this.tokens.length || this.lookup.blockSize !== blockSize) {
      this.lookup = { length: this.tokens.length, blockSize, hashes: blockHashes(this.tokens, blockSize, count) };
    }
    return this.lookup.hashes;
  }

  private lookup?: { length: number; blockSize: number; hashes: string[] };
}

export interface ScheduledItem {
  readonly request: SchedRequest;
  /** First position computed this step. */
  readonly start: number;
  readonly count: number;
  /** Whether the step computes the request's last token, so a new token is sampled from its logits. */
  readonly samples: boolean;
  /** A speculative round: count = 1 + draft positions, the last token and the draft's proposals. */
  readonly draft?: number;
}

export interface StepPlan {
  readonly items: ScheduledItem[];
  /** Requests admitted this step, with the positions found in the prefix cache (their tables already list those shared blocks). */
  readonly admitted: { request: SchedRequest; cachedPositions: number }[];
  readonly preempted: SchedRequest[];
}

export interface NewlyFullBlock { readonly request: SchedRequest; readonly index: number; readonly block: number }

export class Scheduler {
  readonly waiting: SchedRequest[] = [];
  readonly running: SchedRequest[] = [];
  private readonly prefixCaching: boolean;
  readonly batching: Batching;
  /** Static batching: members of the current wave not yet admitted (the queue's first waveLeft entries). */
  private waveLeft = 0;
  private arrivals = 0;

  constructor(readonly pool: BlockPool, readonly options: SchedulerOptions) {
    if (!Number.isInteger(options.maxBatchTokens) || options.maxBatchTokens < 1) throw new ArgumentError(`scheduler: maxBatchTokens must be a positive integer, got ${options.maxBatchTokens}`);
    if (!Number.isInteger(options.maxRunning) || options.maxRunning < 1) throw new ArgumentError(`scheduler: maxRunning must be a positive integer, got ${options.maxRunning}`);
    this.prefixCaching = options.prefixCaching ?? true;
    this.batching = options.batching ?? 'continuous';
    if (this.batching !== 'continuous' && this.batching !== 'static') throw new ArgumentError(`scheduler: batching must be 'continuous' or 'static', got '${String(this.batching)}'`);
  }

  get hasWork(): boolean { return this.waiting.length > 0 || this.running.length > 0; }

  add(id: string, tokens: number[]): SchedRequest {
    if (tokens.length < 1) throw new ArgumentError(`scheduler: request ${id} has no tokens`);
    const r = new SchedRequest(id, tokens, this.arrivals++);
    this.waiting.push(r);
    return r;
  }

  /** Takes a request out (finished or cancelled): its blocks are released at once. */
  remove(r: SchedRequest): void {
    const w = this.waiting.indexOf(r);
    if (w >= 0) {
      this.waiting.splice(w, 1);
      if (w < this.waveLeft) this.waveLeft--; // a wave member cancelled before it was admitted
    }
    const i = this.running.indexOf(r);
    if (i >= 0) this.running.splice(i, 1);
    this.releaseBlocks(r);
    r.state = 'finished';
  }

  schedule(): StepPlan {
    const items: ScheduledItem[] = [], preempted: SchedRequest[] = [], admitted: StepPlan['admitted'] = [];
    let budget = this.options.maxBatchTokens;
    for (let i = 0; i < this.running.length && budget > 0; i++) {
      const r = this.running[i]!;
      const draft = r.needed === 1 ? r.speculate : 0;
      if (draft > 0 && 1 + draft > budget) continue; // the round waits for a step with room (see the header)
      const count = draft > 0 ? 1 + draft : Math.min(r.needed, budget);
      if (count <= 0) continue;
      let ok = this.grow(r, r.numComputed + count);
      while (!ok) {
        const victim = this.running[this.running.length - 1]!;
        this.preempt(victim);
        preempted.push(victim);
        if (victim === r) break;
        ok = this.grow(r, r.numComputed + count);
      }
      if (!ok) break; // r itself was the newest and was preempted: everything after it is gone too
      items.push(draft > 0 ? { request: r, start: r.numComputed, count, samples: true, draft } : { request: r, start: r.numComputed, count, samples: r.numComputed + count === r.tokens.length });
      budget -= count;
    }
    const isStatic = this.batching === 'static';
    if (isStatic && this.running.length === 0 && this.waveLeft === 0) this.waveLeft = Math.min(this.options.maxRunning, this.waiting.length);
    while (preempted.length === 0 && budget > 0 && this.waiting.length > 0 && this.running.length < this.options.maxRunning && (!isStatic || this.waveLeft > 0)) {
      const r = this.waiting[0]!;
      const bs = this.pool.blockSize;
      const cached = this.prefixCaching ? this.pool.takePrefix(r.promptHashes(bs)) : [];
      r.blockTable.push(...cached);
      r.hashes = cached.map((b) => this.pool.hashOf(b)!);
      r.numComputed = cached.length * bs;
      const count = Math.min(r.needed, budget);
      if (!this.grow(r, r.numComputed + count)) {
        this.releaseBlocks(r);
        break;
      }
      this.waiting.shift();
      if (isStatic) this.waveLeft--;
      r.state = 'running';
      this.running.push(r);
      admitted.push({ request: r, cachedPositions: r.numComputed });
      items.push({ request: r, start: r.numComputed, count, samples: r.numComputed + count === r.tokens.length });
      budget -= count;
    }
    return { items, admitted, preempted };
  }

  /**
   * After the step ran: advances numComputed and registers the blocks that became full (returned: newly
   * shareable, read in place by later requests). `accepted`: the draft tokens each speculative round
   * kept (their positions count as computed; the request's tokens do not hold them yet).
   */
  complete(items: readonly ScheduledItem[], accepted: ReadonlyMap<SchedRequest, readonly number[]> = new Map()): NewlyFullBlock[] {
    const full: NewlyFullBlock[] = [];
    const bs = this.pool.blockSize;
    for (const { request: r, count, draft } of items) {
      if (r.state !== 'running') continue;
      const kept = draft ? accepted.get(r) : undefined;
      if (draft && !kept) throw new Error(`internal: the speculative round of ${r.id} completed without its verdict`);
      r.numComputed += kept ? 1 + kept.length : count;
      // Blocks whose tokens are all known (a pending placeholder's block is hashed at a later step).
      const nFull = Math.floor(Math.min(r.numComputed, r.tokens.length - r.pending) / bs);
      if (nFull > r.hashes.length) {
        // Only the blocks that became full, chained to the last one hashed (the chain so far is r.hashes).
        const first = r.hashes.length;
        const chain = blockHashes(kept ? [...r.tokens, ...kept] : r.tokens, bs, nFull, first, r.hashes[first - 1] ?? '');
        for (let i = first; i < nFull; i++) {
          const block = r.blockTable[i]!, hash = chain[i - first]!;
          r.hashes.push(hash);
          if (this.prefixCaching && this.pool.hashOf(block) === null && this.pool.register(block, hash)) full.push({ request: r, index: i, block });
        }
      }
    }
    return full;
  }

  /** Takes blocks for a running request's positions up to `positions` (multi-step decoding); false when the pool has too few. */
  reserve(r: SchedRequest, positions: number): boolean {
    return r.state === 'running' && this.grow(r, positions);
  }

  private grow(r: SchedRequest, positions: number): boolean {
    const need = Math.ceil(positions / this.pool.blockSize) - r.blockTable.length;
    if (need <= 0) return true;
    const blocks = this.pool.allocate(need);
    if (!blocks) return false;
    r.blockTable.push(...blocks);
    return true;
  }

  private preempt(r: SchedRequest): void {
    this.running.splice(this.running.indexOf(r), 1);
    this.releaseBlocks(r);
    r.state = 'waiting';
    r.preemptions++;
    // Back into the queue by arrival order (ahead of every later arrival).
    let at = 0;
    while (at < this.waiting.length && this.waiting[at]!.arrival < r.arrival) at++;
    this.waiting.splice(at, 0, r);
    if (this.batching === 'static') this.waveLeft++; // still a member of the wave: readmitted before any later arrival
  }

  private releaseBlocks(r: SchedRequest): void {
    this.pool.release(r.blockTable);
    r.blockTable.length = 0;
    r.hashes = [];
    r.numComputed = 0;
  }
}
