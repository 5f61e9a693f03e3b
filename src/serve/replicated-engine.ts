// Tensor-parallel serving: one ServingEngine per rank, each over its rank's shards of the model, kept in
// lockstep by rank 0 (docs/serving.md, "Tensor-parallel serving").
//
// Every rank's forward issues the same all-reduces (infer/forward.ts), so every rank must run the same
// steps over the same rows. The ranks' engines are deterministic functions of the sequence of operations
// applied to them — submit, cancel, step — and of the logits, which are bit-identical on every rank (the
// LM head is replicated and its input comes out of an all-reduce). So only the operations are replicated:
//
//   leader (rank 0, behind the HTTP server): applies submit and cancel to its engine at once and appends
//     each to a log, in the order applied; step() first broadcasts the log (replication-wire.ts), then
//     steps its engine;
//   followers (every other rank): follow() loops — receive a message, apply its commands in order, check
//     the engine's counts against the leader's, step — until the stop message that dispose() sends.
//
// One exception keeps the order exact: a cancel made while the leader's engine is stepping (the server
// cancels from inside onToken when a stop string matches) cannot be applied to the followers at that point
// of their step. The leader finishes the request for its client at once (onFinish(reason), later events
// swallowed) but applies the engine's cancel at the start of its next step, where the followers apply it
// too. A submit made inside a step needs no such care: it only appends to the waiting queue, which the
// rest of a step does not read. Ids are the engines' own ('r' + a counter); a follower checks that its
// engine assigned the leader's id to every submit, and before every step that its scheduler matches the
// leader's (counts and a fingerprint of the block tables, sent in the message header).
//
// Idle followers wait inside the header broadcast (with NCCL, a kernel spinning on the device and a host
// thread in a stream synchronize) until the leader's next step or its stop message.

import type { Communicator } from '../dist/communicator.js';
import { ArgumentError, FuseformerError } from '../errors.js';
import type { DecoderModel } from '../infer/model.js';
import type { Tensor } from '../tensor.js';
import { ServingEngine } from './engine.js';
import type { EngineStats, FinishReason, GenerationRequest, ServingEngineOptions } from './engine.js';
import { blockTableFingerprint, decodeCommands, decodeHeader, encodeCommands, encodeHeader, HEADER_WORDS } from './replication-wire.js';
import type { EngineCommand, MessageHeader, MessageKind } from './replication-wire.js';

/** A follower's engine is no longer in the leader's state: the ranks would issue different collectives. */
export class ReplicaDivergenceError extends FuseformerError {}

/**
 * A ServingEngine on this rank's shards with the same configuration on every rank (a collective: every
 * rank calls it). A pool sized by memory (kvMemoryFraction, or a default pool capped by the free memory)
 * takes the smallest rank's block count (free memory differs between GPUs); then maxLen, maxRunning, maxBatchTokens, blockSize, numBlocks, prefix caching and batching
 * are compared across ranks, and a difference is an error naming the setting.
 */
export function replicatedServingEngine(model: DecoderModel, comm: Communicator, options: ServingEngineOptions = {}): ServingEngine {
  let engine = new ServingEngine(model, options);
  try {
    // Two all-reduces on every rank whatever its options say, so that the ranks' collectives always pair up.
    const [fewest] = rankExtremes(comm, [engine.pool.numBlocks]).min;
    // Sized by memory (kvMemoryFraction, or the default pool's cap at 90% of the free memory): the smallest rank's count.
    if (options.numBlocks === undefined && engine.pool.numBlocks !== fewest) {
      engine.dispose();
      const { kvMemoryFraction: _sizedByMemory, ...rest } = options;
      engine = new ServingEngine(model, { ...rest, numBlocks: fewest! });
    }
    const settings: [string, number][] = [
      ['maxLen', engine.maxLen], ['maxRunning', engine.maxRunning], ['maxBatchTokens', engine.maxBatchTokens], ['blockSize', engine.blockSize],
      ['numBlocks', engine.pool.numBlocks], ['prefixCaching', engine.scheduler.options.prefixCaching === false ? 0 : 1],
      ['batching (static = 1)', engine.scheduler.batching === 'static' ? 1 : 0],
    ];
    const { min, max } = rankExtremes(comm, settings.map(([, v]) => v));
    settings.forEach(([name, value], i) => {
      if (min[i] !== max[i]) throw new ArgumentError(`replicated serving engine: ${name} differs between ranks (from ${min[i]} to ${max[i]}; rank ${comm.rank} has ${value}); every rank must be given the same options`);
    });
    return engine;
  } catch (error) {
    engine.dispose();
    throw error;
  }
}

/** Elementwise min and max over ranks of small non-negative integers (one i32 all-reduce of [v, −v]). */
function rankExtremes(comm: Communicator, values: readonly number[]): { min: number[]; max: number[] } {
  const b = comm.backend, n = values.length;
  const t = b.fromArray(Int32Array.from([...values, ...values.map((v) => -v)]), [2 * n], 'i32');
  try {
    comm.allReduce(t, 'max');
    const r = Array.from(b.download(t) as Int32Array);
    return { max: r.slice(0, n), min: r.slice(n).map((v) => -v) };
  } finally {
    b.free(t);
  }
}

/** The header tensor and the two broadcasts of a message, shared by the leader and the followers. */
class MessageChannel {
  private readonly header: Tensor;

  constructor(private readonly comm: Communicator) {
    this.header = comm.backend.empty([HEADER_WORDS], 'i32');
  }

  send(header: MessageHeader, payload?: Int32Array): void {
    const b = this.comm.backend;
    b.upload(this.header, encodeHeader(header));
    this.comm.broadcast(this.header, 0);
    if (!payload) return;
    const t = b.fromArray(payload, [payload.length], 'i32');
    try {
      this.comm.broadcast(t, 0);
    } finally {
      b.free(t);
    }
  }

  receive(): { header: MessageHeader; commands: EngineCommand[] } {
    const b = this.comm.backend;
    this.comm.broadcast(this.header, 0);
    const header = decodeHeader(b.download(this.header) as Int32Array);
    if (header.payloadBytes === 0) return { header, commands: [] };
    const t = b.empty([Math.ceil(header.payloadBytes / 4)], 'i32');
    try {
      this.comm.broadcast(t, 0);
      return { header, commands: decodeCommands(b.download(t) as Int32Array, header.payloadBytes) };
    } finally {
      b.free(t);
    }
  }

  free(): void {
    this.comm.backend.free(this.header);
  }
}

interface Client {
  readonly request: GenerationRequest;
  /** The client has had onFinish (possibly before the engine retired the request: a cancel inside a step). */
  finished: boolean;
}

/**
 * Rank 0 of a tensor-parallel server: the engine surface InferenceServer uses (submit, cancel, step,
 * hasWork, stats, model, maxLen), replicated to the followers. Owns the engine: dispose() sends the stop
 * message and disposes it.
 */
export class ReplicatedLeader {
  private readonly channel: MessageChannel;
  private readonly clients = new Map<string, Client>();
  private log: EngineCommand[] = [];
  /** Cancels made while the engine was stepping, applied at the start of the next step. */
  private deferred: { id: string; reason: FinishReason }[] = [];
  private stepping = false;
  private sequence = 0;
  private closed = false;

  constructor(readonly engine: ServingEngine, readonly comm: Communicator) {
    if (comm.rank !== 0) throw new ArgumentError(`replicated engine: the leader is rank 0, but this communicator is rank ${comm.rank}; other ranks run ReplicatedFollower`);
    this.channel = new MessageChannel(comm);
  }

  get model(): DecoderModel { return this.engine.model; }
  get maxLen(): number { return this.engine.maxLen; }
  get maxRunning(): number { return this.engine.maxRunning; }
  get maxBatchTokens(): number { return this.engine.maxBatchTokens; }
  get blockSize(): number { return this.engine.blockSize; }
  get pool(): ServingEngine['pool'] { return this.engine.pool; }
  /** A cancel deferred from inside a step leaves its request in the engine until the next step, so this covers it. */
  get hasWork(): boolean { return this.engine.hasWork; }
  stats(): EngineStats { return this.engine.stats(); }

  submit(request: GenerationRequest): string {
    this.checkOpen();
    // The followers would sample without the leader's mask, and their tokens (and collectives) would part.
    if (request.constraint) throw new ArgumentError('structured outputs (response_format) are not supported with tensor-parallel serving: every rank samples on its own, and a mask lives on the leader only');
    // The same for biases: the followers would sample without them (the wire carries no logit_bias or penalties).
    if ((request.logitBias?.length ?? 0) > 0) throw new ArgumentError('logit_bias is not supported with tensor-parallel serving: every rank samples on its own, and the biases live on the leader only');
    if ((request.frequencyPenalty ?? 0) !== 0 || (request.presencePenalty ?? 0) !== 0) throw new ArgumentError('frequency_penalty and presence_penalty are not supported with tensor-parallel serving: every rank samples on its own, and the penalties live on the leader only');
    const client: Client = { request, finished: false };
    const id = this.engine.submit({
      ...request,
      onToken: (event) => { if (!client.finished) request.onToken(event); },
      onFinish: (reason) => {
        this.clients.delete(id);
        if (client.finished) return;
        client.finished = true;
        request.onFinish(reason);
      },
    });
    this.clients.set(id, client);
    this.log.push({ kind: 'submit', id, prompt: [...request.prompt], maxTokens: request.maxTokens, sampling: request.sampling, stopTokenIds: [...request.stopTokenIds] });
    return id;
  }

  cancel(id: string, reason: FinishReason = 'cancelled'): boolean {
    if (this.closed) return false;
    if (!this.stepping) return this.apply(id, reason);
    const client = this.clients.get(id);
    if (!client || client.finished) return false;
    client.finished = true;
    this.deferred.push({ id, reason });
    client.request.onFinish(reason);
    return true;
  }

  /** Sends the commands since the last step to the followers, then runs one step of every rank's engine. */
  step(): boolean {
    this.checkOpen();
    this.applyDeferred();
    this.send('step');
    this.stepping = true;
    try {
      return this.engine.step();
    } finally {
      this.stepping = false;
    }
  }

  /** Runs steps until every request has finished (for tests and batch use). */
  runToCompletion(): void {
    while (this.hasWork) this.step();
  }

  /** Sends the stop message (the followers' follow() returns), frees the channel and disposes the engine. */
  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.applyDeferred();
      this.send('stop');
    } finally {
      this.channel.free();
      this.engine.dispose();
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new ArgumentError('replicated engine: the leader was used after dispose() (the followers have stopped)');
  }

  private apply(id: string, reason: FinishReason): boolean {
    const done = this.engine.cancel(id, reason);
    if (done) this.log.push({ kind: 'cancel', id, reason });
    return done;
  }

  private applyDeferred(): void {
    for (const { id, reason } of this.deferred.splice(0)) this.apply(id, reason);
  }

  private send(kind: MessageKind): void {
    const payload = this.log.length > 0 ? encodeCommands(this.log) : undefined;
    this.log = [];
    const s = this.engine.stats();
    this.channel.send({
      kind, payloadBytes: payload?.bytes ?? 0, sequence: this.sequence++, running: s.running, waiting: s.waiting, blocksUsed: s.blocksUsed,
      fingerprint: blockTableFingerprint(this.engine.scheduler.running),
    }, payload?.words);
  }
}

export interface FollowSummary {
  /** Engine steps run (the leader's step() calls). */
  readonly steps: number;
  readonly submitted: number;
  readonly cancelled: number;
}

/** Every rank but 0: replays the leader's commands and steps on its own engine (owned: dispose() disposes it). */
export class ReplicatedFollower {
  private readonly channel: MessageChannel;
  private sequence = 0;
  private disposed = false;

  constructor(readonly engine: ServingEngine, readonly comm: Communicator) {
    if (comm.rank === 0) throw new ArgumentError('replicated engine: rank 0 is the leader (ReplicatedLeader); followers are the other ranks');
    this.channel = new MessageChannel(comm);
  }

  /** Receives and runs the leader's steps until its stop message; blocks the thread meanwhile. */
  follow(): FollowSummary {
    if (this.disposed) throw new ArgumentError('replicated engine: follow() after dispose()');
    let steps = 0, submitted = 0, cancelled = 0;
    for (;;) {
      const { header, commands } = this.channel.receive();
      for (const c of commands) {
        if (c.kind === 'cancel') {
          this.engine.cancel(c.id, c.reason);
          cancelled++;
          continue;
        }
        const id = this.engine.submit({ prompt: c.prompt, maxTokens: c.maxTokens, sampling: c.sampling, stopTokenIds: c.stopTokenIds, onToken: () => {}, onFinish: () => {} });
        if (id !== c.id) throw new ReplicaDivergenceError(`replicated engine, rank ${this.comm.rank}: the leader's request ${c.id} became ${id} here; the ranks' engines are out of step`);
        submitted++;
      }
      this.checkState(header);
      if (header.kind === 'stop') return { steps, submitted, cancelled };
      this.engine.step();
      steps++;
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.channel.free();
    this.engine.dispose();
  }

  private checkState(h: MessageHeader): void {
    const s = this.engine.stats();
    const expected = this.sequence++ | 0;
    const mismatch = h.sequence !== expected ? `message ${h.sequence} arrived where ${expected} was due`
      : s.running !== h.running || s.waiting !== h.waiting || s.blocksUsed !== h.blocksUsed
        ? `the leader has ${h.running} running, ${h.waiting} waiting and ${h.blocksUsed} KV blocks in use; rank ${this.comm.rank} has ${s.running}, ${s.waiting} and ${s.blocksUsed}`
        : blockTableFingerprint(this.engine.scheduler.running) !== h.fingerprint ? 'the running requests\' block tables differ from the leader\'s'
          : undefined;
    if (mismatch) throw new ReplicaDivergenceError(`replicated engine, rank ${this.comm.rank}, before step ${h.sequence}: ${mismatch}; the ranks' engines are out of step`);
  }
}
