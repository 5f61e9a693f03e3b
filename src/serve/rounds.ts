// Requests served in rounds (the embeddings and rerank servers): a loop waits for work, then takes every waiting
// request whose items fit the round's budget (at least one request, however large) and hands them to `run`
// together — concurrent requests share the device's batches — yielding to the event loop between rounds so new
// requests, disconnects and socket writes are delivered. A request whose client went away before its round is
// dropped uncomputed. drain() lets what is queued finish (up to a deadline), refuses the rest and stops the loop.

/** A queued request: its item count (inputs, documents) and whether its client has gone. */
export interface RoundRequest {
  readonly size: number;
  gone: boolean;
}

export class RoundLoop<R extends RoundRequest> {
  private readonly queue: R[] = [];
  private queuedItems = 0;
  private stopped = false;
  private wake: (() => void) | null = null;
  private readonly done: Promise<void>;

  /** `run` serves one round (it answers its requests, failures included); `maxRoundItems` bounds a round's items. */
  constructor(private readonly maxRoundItems: number, private readonly run: (round: R[]) => Promise<void>) {
    this.done = this.loop();
  }

  /** Requests waiting for a round. */
  get length(): number { return this.queue.length; }
  /** Their items together. */
  get items(): number { return this.queuedItems; }

  push(request: R): void {
    this.queue.push(request);
    this.queuedItems += request.size;
    this.wake?.();
  }

  /** Lets queued requests finish until `deadline` (ms since the epoch), gives the rest to `refuse`, stops the loop. */
  async drain(deadline: number, refuse: (request: R) => void): Promise<void> {
    while (this.queue.length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    for (const request of this.queue.splice(0)) refuse(request);
    this.queuedItems = 0;
    this.stopped = true;
    this.wake?.();
    await this.done;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      if (this.queue.length === 0) {
        await new Promise<void>((resolve) => { this.wake = resolve; });
        this.wake = null;
        // One event-loop turn before the round: requests that arrived with the one that woke the loop join it.
        await new Promise<void>((resolve) => setImmediate(resolve));
        continue;
      }
      const round: R[] = [];
      let items = 0;
      while (this.queue.length > 0 && (round.length === 0 || items + this.queue[0]!.size <= this.maxRoundItems)) {
        const request = this.queue.shift()!;
        this.queuedItems -= request.size;
        if (request.gone) continue;
        round.push(request);
        items += request.size;
      }
      if (round.length > 0) await this.run(round);
      // Let the event loop deliver new requests, disconnects and socket writes between rounds.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}

/**
 * Which requests of a round are complete as its items finish: request r owns the round's items
 * [starts[r], starts[r + 1]) (the requests' items concatenated in order); `answer(r)` is called once, when the last
 * of them is reported (finished()) — or, for any not yet answered, by answerRest() at the round's end.
 */
export class RoundAnswers {
  private readonly starts: number[] = [0];
  private readonly owner: Int32Array;
  private readonly left: number[];
  private readonly answered: boolean[];

  constructor(sizes: readonly number[], private readonly answer: (request: number, items: readonly [number, number]) => void) {
    for (const n of sizes) this.starts.push(this.starts.at(-1)! + n);
    this.owner = new Int32Array(this.starts.at(-1)!);
    sizes.forEach((_, r) => this.owner.fill(r, this.starts[r]!, this.starts[r + 1]!));
    this.left = [...sizes];
    this.answered = sizes.map(() => false);
  }

  /** Items finished (each reported once): answers the requests they complete. */
  finished(items: readonly number[]): void {
    for (const i of items) {
      const r = this.owner[i]!;
      if (--this.left[r]! === 0) this.answerOnce(r);
    }
  }

  /** Answers every request not yet answered (the round's end, or its failure). */
  answerRest(answer: (request: number, items: readonly [number, number]) => void = this.answer): void {
    this.answered.forEach((done, r) => { if (!done) { this.answered[r] = true; answer(r, [this.starts[r]!, this.starts[r + 1]!]); } });
  }

  private answerOnce(r: number): void {
    if (this.answered[r]) return;
    this.answered[r] = true;
    this.answer(r, [this.starts[r]!, this.starts[r + 1]!]);
  }
}
