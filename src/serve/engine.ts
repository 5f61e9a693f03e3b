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
// Rows of a step and the attention ops over them: paged-forward.ts (the decode region, row s = slot s, for
// one-position items; then each longer item's positions as a segment with paged flash attention).
// Sampling uses backend.sampleTokens on the rows that end a request's computed positions: its draw depends
// on (seed, position) only, so a request samples the same tokens however it is batched or preempted.
//
// Steps as graphs (options.graphs): a step's launches depend only on its shape (paged-forward.ts), so each
// shape is captured once and replayed. A step is padded to its shape: the decode region to its bucket B
// (1 + the largest decoding slot rounded up to a power of two up to 32, then to a multiple of 32, at most
// maxRunning: decodeBucket), the prompt rows to a multiple of STEP_ROW_QUANTUM, the segment slots to a
// power of two (stepShape). The host uploads the step's rows and segments (one buffer), the sampling
// parameters and block-table changes; the graph runs the model, the head over the B decode-region rows
// and each segment slot's last row, and sampleTokens over them; the host reads those tokens. Idle rows
// (no request in that slot, padding) have cache position −1 and sample greedily into nothing. Without
// graphs a step runs the same ops in its exact shape. A step that samples nothing skips the head.

// Multi-step decoding (options.decodeSteps = k > 1; FUSEFORMER_SERVE_DECODE_STEPS): a step whose every item
// decodes one token — nothing admitted or preempted, nothing waiting for a free slot, no draft, no
// logprobs or repetition penalty — runs up to k decode steps back to back on the device: the step is uploaded once, then k times
// the model, the head, sampleTokens and decodeAdvance (each active row's sampled token becomes its next
// input, its positions move on by one, the tokens go to row j of a record buffer), and the host reads the
// k × rows tokens once. The blocks for the k positions are taken up front; k never passes a request's
// length limit. A request that samples a stop token at step j < k − 1 keeps computing to the end of the k
// (its later tokens are dropped; its blocks are released at retire). The host's per-step work — scheduling,
// layout, uploads, the sync — is paid once for k steps; the cost is tokens arriving k at a time and
// admissions and cancellations waiting up to k − 1 steps. Greedy and seeded sampled output equal k = 1's.

// Pipelined steps (options.pipeline; FUSEFORMER_SERVE_PIPELINE=1): the host's part of a step — scheduling,
// the row layout, the uploads, reading the tokens back, streaming them — otherwise leaves the GPU idle. So
// step() launches step i + 1 before it reads step i's tokens, and reads them while step i + 1 runs:
//   launch   a request that samples in step i gets a placeholder (PENDING_TOKEN) as its next token at
//            once (SchedRequest.pending), and its positions count as computed, so the scheduler gives it
//            step i + 1's decode position; step i + 1's row for it takes its token on the device from
//            step i's samples (PagedForward's feedFrom: feedTokens ahead of the embedding, from the row
//            of io.sTokens step i sampled it at; everything else is uploaded as usual, in stream order
//            behind step i's graph). The tokens' download is queued behind the step (downloadLater).
//   finish   then step i's tokens are read (waiting for step i only) and take their placeholders' places;
//            stops and cancellations retire requests as usual. A request that stopped at step i has
//            had one more position computed in step i + 1: its blocks are released at once (later steps
//            reuse them only after step i + 1 in stream order) and that token is dropped.
// A request's last token (its length limit) gets no placeholder. A block is hashed for prefix sharing
// once all its tokens are known. Tokens stream one step late. Log-probabilities: the step's rows of
// logits are downloaded behind it too (the next step overwrites them). A step with a repetition penalty
// (its history upload needs the tokens themselves) runs as without: the step in flight first. Not with a
// draft model, tensor parallelism or decodeSteps > 1. Same tokens as without, greedy and seeded sampling.

// Constrained requests (request.constraint: structured outputs, infer/structured/): before each token the
// constraint says which tokens may come. A greedy request keeps the device's pick where the constraint allows
// it (checked for that token alone; the argmax of the allowed tokens is then the argmax of all); otherwise its
// mask goes to the device, where maskLogits sets its row's refused logits to −∞ and the step's rows are sampled
// again — temperature, top-k and top-p over the allowed tokens, the mask first as vLLM applies it, the draw of
// the same (seed, position). The next mask depends on that token, so a step holding a constrained request runs
// unpipelined, as one decode step, without a draft. The request ends ('stop') as soon as its constraint is
// complete: a JSON object at its closing brace. A request with a logit_bias (request.logitBias) is handled the
// same way: biasLogits adds its biases to its row and the row is sampled again (no greedy shortcut: a bias may
// move the argmax); so is one with a frequency or presence penalty, its biases counted from the tokens it has
// generated so far (biasesOf).

// Speculative decoding (options.speculative: a draft model with the target's vocabulary). The draft keeps
// a KV pool of its own with the same blocks as the target's — one block table, one BlockPool and one
// scheduler serve both — and mirrors the target: every position the target computes (prompt chunks,
// recomputes, decode tokens) the draft computes in the same step, so the draft's keys are valid exactly
// where the target's are, prefix-cache hits, preemption and cancellation included. A decoding request with
// speculation on is scheduled as one item of 1 + K positions (scheduler.ts: K = its own adaptive draft
// length, never cut by the batch, so its output does not depend on what it is batched with):
//   draft   K + 1 passes: pass j computes position p + j (token t_p, then the draft tokens) and, for j < K,
//           yields x_{j+1} from its logits (greedy: the argmax; sampled: a draw from q_{j+1}); pass 0 also
//           carries the mirror of the step's other items;
//   target  one pass in which the item is a segment of the K + 1 positions p..p+K (tokens t_p, x_1..x_K);
//   accept  speculative-accept.ts on the host (exact rule, or greedy: the target's argmax per row — picked
//           on the device by greedy-picks.ts, as the greedy draft tokens are, so no rows come back; sampled
//           rounds with deviceSampling: drawn, scored and finished on the device, device-rounds.ts), giving
//           n accepted tokens and one more; n + 1 positions are kept (numComputed += n + 1), the rest of
//           both pools' writes are stale and rewritten before anything reads them; the blocks they took
//           stay with the request for its next round.
// Greedy output equals the engine's without a draft token for token; sampled output is distributed as
// the target's (seeded draws by position and kind, speculative-accept.ts) but is not the same sequence as
// without a draft. K adapts per request (+2 after a round that accepted all, −1 otherwise), at most
// maxDraftTokens and the tokens the request has left − 1.

import { freemem } from 'node:os';
import type { Backend, Graph, PendingDownload } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import { GreedyPicker } from '../infer/greedy-picks.js';
import type { DecoderModel } from '../infer/model.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import { checkSampling, samplingParamsRow, seedWords } from '../infer/sampling.js';
import { DrawKind, drawFrom, greedyToken, samplingDistribution, speculativeUniform, verifyGreedy, verifySampled, verifyScored } from '../infer/speculative-accept.js';
import type { Tensor } from '../tensor.js';
import { BlockPool } from './block-pool.js';
import { DeviceRounds, penaltyFree } from './device-rounds.js';
import type { TokenConstraint } from '../infer/structured/token-mask.js';
import { exactShape, kvBlockBytes, PagedForward } from './paged-forward.js';
import type { StepRows, StepShape } from './paged-forward.js';
import { Scheduler } from './scheduler.js';
import type { Batching, ScheduledItem, SchedRequest, StepPlan } from './scheduler.js';

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
  /**
   * Blocks in the pool (default: enough for maxRunning full-length requests, at most 90% of the memory
   * free after the weights and step buffers; or from kvMemoryFraction).
   */
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
  /** Speculative decoding with a draft model (see the header). */
  readonly speculative?: ServingSpeculation;
  /**
   * Replay steps as CUDA graphs, one per step shape (stepShape; see "Steps as graphs" in the header).
   * Default: on with the CUDA backend and no draft (measured on the H200, 2026-12-01, Llama 1.2B, 16
   * clients: decode steps 1.63 ms against 3.06 eager); not with a draft.
   */
  readonly graphs?: boolean;
  /**
   * Decode steps run back to back on the device when a step only decodes (see "Multi-step decoding" in the
   * header): 1 (the default, unless FUSEFORMER_SERVE_DECODE_STEPS says otherwise) runs every step on its
   * own; up to MAX_DECODE_STEPS.
   */
  readonly decodeSteps?: number;
  /**
   * Pipelined steps (see "Pipelined steps" in the header): the host prepares and launches step i + 1
   * before it reads step i's tokens, so its work overlaps the device's. Default: on with the CUDA backend
   * where they apply (H200, session 36: +6–12% tokens/s at 16–256 clients), off on the CPU;
   * FUSEFORMER_SERVE_PIPELINE=1 / 0 sets the default. Not with a draft model, tensor parallelism or
   * decodeSteps > 1 (asked for explicitly there, refused; by default, off).
   */
  readonly pipeline?: boolean;
}

/** decodeSteps at most (the record buffer's rows). */
export const MAX_DECODE_STEPS = 16;

export interface ServingSpeculation {
  /** Same vocabulary as the target, at least maxLen positions, on the same backend. */
  readonly draft: DecoderModel;
  /** Draft tokens a request starts with (default 4). */
  readonly draftTokens?: number;
  /** The most adaptation may reach (default 8; at most maxBatchTokens − 1). */
  readonly maxDraftTokens?: number;
  /** Adapt K per request (default true). */
  readonly adaptive?: boolean;
  /**
   * Sampled rounds on the device (device-rounds.ts: draws, scores and the last token there, no rows of
   * logits read back). Default on (FUSEFORMER_SERVE_DEVICE_SAMPLING=0 turns it off): its GPU test passes
   * (χ² 30.2, df 33, over 1200 seeds; bench/results/gpu-pending-s14/call1/). Needs the draft's dtype and padded vocabulary
   * to be the target's (else the host's path); log-probabilities read rows anyway.
   */
  readonly deviceSampling?: boolean;
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
  /**
   * Structured outputs: the tokens allowed before each pick (see "Constrained requests" in the header). The
   * request ends ('stop') once the constraint is complete.
   */
  readonly constraint?: TokenConstraint;
  /** The API's logit_bias: [token, bias] pairs added to the request's logits before each pick (distinct tokens). */
  readonly logitBias?: readonly (readonly [number, number])[];
  /**
   * The API's frequency_penalty and presence_penalty (each in [−2, 2]; absent or 0: off): before each pick, a
   * token the request has generated c > 0 times so far loses c · frequencyPenalty + presencePenalty from its logit
   * (OpenAI's rule, over the answer's tokens, not the prompt's), added to any logit_bias it has.
   */
  readonly frequencyPenalty?: number;
  readonly presencePenalty?: number;
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
  /** Speculative decoding: draft tokens proposed, and accepted by the target; rounds (target verification passes). */
  readonly draftedTokens: number;
  readonly acceptedTokens: number;
  readonly speculativeRounds: number;
  /** Steps replayed as CUDA graphs (options.graphs). */
  readonly graphSteps: number;
  /** Rows those graph-replayed steps computed (Σ of their shapes' rows), and the positions they carried: the padding's share is 1 − used ÷ computed. */
  readonly graphRowsComputed: number;
  readonly graphRowsUsed: number;
  /** Step shapes captured as graphs so far (each shape's second step; its first runs eagerly). */
  readonly graphCaptures: number;
  /** Runs of several decode steps back to back (options.decodeSteps; their steps count in steps). */
  readonly multiStepRuns: number;
}

interface Live {
  readonly id: string;
  readonly request: GenerationRequest;
  readonly sched: SchedRequest;
  readonly limit: number;
  slot: number;
  done: boolean;
  /** Speculative decoding: the request's current draft length (0 without a draft model). */
  draftTokens: number;
  /** Pipelined steps: the row of the in-flight step's sampled tokens that holds its pending token. */
  pendingRow: number;
}

/** A step launched on the device: the rows its requests sample at (rows of io.sTokens), and their tokens once read. */
interface LaunchedStep {
  readonly sampled: readonly { readonly live: Live; readonly row: number }[];
  /** Rows sampled (io.sTokens[0, rows), the logits buffer's first rows), idle and padded ones included. */
  readonly rows: number;
  /** Pipelined steps: the download of io.sTokens queued behind the step (none when nothing samples). */
  readonly tokens?: PendingDownload;
  /** Pipelined steps with log-probabilities asked for: the rows of logits, queued behind the step too. */
  readonly logits?: PendingDownload;
}

/** What a step produced for one request: its new tokens and, for a speculative round, the draft tokens the target kept. */
interface StepOutcome {
  readonly live: Live;
  readonly events: TokenEvent[];
  readonly accepted?: readonly number[];
}

/** A draft's proposals for one speculative item: x_1..x_K and, when sampling, the distributions they came from. */
interface Proposal {
  readonly tokens: number[];
  /** The host's path: q_i whole. */
  readonly q: Float64Array[];
  /** The device's path (device-rounds.ts): q_i(x_i), and the kept draft row of each pass. */
  readonly draftAt: number[];
  readonly keptRows: number[];
}

export const MAX_LOGPROBS = 5;
const STOP_SLOTS = 16;
/** A pipelined step's sampled token in a request's tokens while it is still on the device (never a vocabulary id). */
const PENDING_TOKEN = -1;

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
  /** i32 [maxRunning, maxBlocksPerSeq] on the device; row = slot (shared by the target's and the draft's pools). */
  readonly blockTables: Tensor;
  /** Speculative decoding: K at most (0 without a draft model). */
  readonly maxDraftTokens: number;
  /** What the device's block tables hold (−1 = never written); rows are re-sent when a request's table changed. */
  private readonly tableMirror: Int32Array;
  private readonly target: PagedForward;
  private readonly draft?: PagedForward;
  /** Greedy speculative rounds' picks on the device (drafting and verification), with a draft. */
  private readonly picker?: GreedyPicker;
  private readonly speculation?: { readonly initial: number; readonly adaptive: boolean; readonly deviceSampling: boolean };
  /** Adjusted rows' device buffers (adjustPicks), made at the first step that needs them. */
  private adjust?: { rows: Tensor; words: Tensor; tokens?: Tensor; biases?: Tensor; capacity: number; k: number };
  /** Sampled rounds' device buffers, made with the engine (null: the host's path). */
  private sampledRounds?: DeviceRounds | null;
  /**
   * Whether GEMMs may autotune inside this engine's steps (Backend.setGemmTuning). Off: a step never
   * stalls ~0.1–0.2 s per problem timing algorithms (25 such tunings cost a 256-client run 4.0 of its
   * 11.6 s, H200 session 9; a captured step keeps the algorithms it was captured with anyway). warmUp()
   * turns it on while it runs, so the warm-up's shapes tune and later ones adopt their winners.
   */
  gemmTuning = false;
  private readonly useGraphs: boolean;
  /** Steps by shape (stepShape: decode rows / rows / segment slots): runs so far (the first is eager) and the captured graph. */
  private readonly stepGraphs = new Map<string, { runs: number; graph?: Graph }>();
  private readonly io: Record<'sPositions' | 'sTokens' | 'sFinished' | 'sLimits' | 'seeds' | 'history' | 'stopIds' | 'params' | 'record' | 'stepIndex', Tensor>;
  /** Decode steps a decode-only step may run back to back (options.decodeSteps). */
  readonly decodeSteps: number;
  /** Whether steps are pipelined (options.pipeline). */
  readonly pipelined: boolean;
  /** Pipelined steps: the step launched last, whose tokens the host has not read yet. */
  private inFlight?: LaunchedStep;
  private readonly live = new Map<string, Live>();
  private readonly bySched = new Map<SchedRequest, Live>();
  private readonly freeSlots: number[];
  private nextId = 0;
  private counters = { preemptions: 0, computedPositions: 0, generatedTokens: 0, steps: 0, draftedTokens: 0, acceptedTokens: 0, speculativeRounds: 0, graphSteps: 0, graphRowsComputed: 0, graphRowsUsed: 0, graphCaptures: 0, multiStepRuns: 0 };
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
    const spec = options.speculative;
    const envSteps = process.env['FUSEFORMER_SERVE_DECODE_STEPS'];
    this.decodeSteps = options.decodeSteps ?? (envSteps !== undefined && envSteps !== '' ? Number(envSteps) : 1);
    if (!Number.isInteger(this.decodeSteps) || this.decodeSteps < 1 || this.decodeSteps > MAX_DECODE_STEPS) {
      throw new ArgumentError(`serving engine: decodeSteps must be an integer in [1, ${MAX_DECODE_STEPS}], got ${options.decodeSteps ?? `'${envSteps}' (FUSEFORMER_SERVE_DECODE_STEPS)`}`);
    }
    this.useGraphs = options.graphs ?? (b.name === 'cuda' && spec === undefined);
    if (this.useGraphs && spec) throw new ArgumentError('serving engine: graphs and speculative decoding do not go together yet (a round\'s shape changes every step)');
    // The in-process ranks of the CPU backend exchange partial sums on the host when called, which a
    // recorded graph would not repeat; NCCL's collectives are captured with the kernels.
    if (this.useGraphs && model.tensorParallel && b.name !== 'cuda') throw new ArgumentError('serving engine: graphs with tensor parallelism need the CUDA backend (NCCL collectives are captured; in-process CPU ranks are not)');
    this.maxDraftTokens = spec ? checkSpeculation(spec, model, this.maxLen, this.maxBatchTokens) : 0;
    // Pipelined steps: asked for by the option (refused where they do not apply) or by the environment (taken where they do).
    const pipelineBlocker = spec ? 'a draft model' : model.tensorParallel ? 'tensor parallelism' : this.decodeSteps > 1 ? `decodeSteps ${this.decodeSteps}` : undefined;
    if (options.pipeline && pipelineBlocker) throw new ArgumentError(`serving engine: pipelined steps do not go together with ${pipelineBlocker} (a step there needs the previous step's tokens on the host)`);
    const envPipeline = process.env['FUSEFORMER_SERVE_PIPELINE'];
    const pipelineDefault = envPipeline === '1' ? true : envPipeline === '0' ? false : b.name === 'cuda';
    this.pipelined = (options.pipeline ?? pipelineDefault) && !pipelineBlocker;
    if (spec) {
      this.speculation = {
        initial: Math.min(spec.draftTokens ?? DEFAULT_DRAFT_TOKENS, this.maxDraftTokens), adaptive: spec.adaptive ?? true,
        deviceSampling: spec.deviceSampling ?? process.env['FUSEFORMER_SERVE_DEVICE_SAMPLING'] !== '0',
      };
    }
    const perRequest = Math.ceil(this.maxLen / this.blockSize);
    this.maxBlocksPerSeq = perRequest;
    // A step's rows: at most maxBatchTokens positions, plus up to maxRunning idle rows of the decode region.
    const T = this.maxBatchTokens + this.maxRunning, N = this.maxRunning;
    // Rows a step samples at most: without a draft, the decode region and a row per segment slot (≤ 2N, ≤ T).
    const Ns = spec ? N : Math.min(T, 2 * N);
    const i32 = (shape: number[]) => b.empty(shape, 'i32');
    this.io = {
      sPositions: i32([Ns]), sTokens: i32([Ns]), sFinished: i32([Ns]), sLimits: i32([Ns]),
      seeds: i32([Ns, 2]), history: i32([Ns, this.maxLen]), stopIds: i32([STOP_SLOTS]), params: b.empty([Ns, 4], 'f32'),
      record: i32([this.decodeSteps, N]), stepIndex: i32([1]),
    };
    b.fill(this.io.stopIds, -1);
    b.fill(this.io.history, 0);
    this.blockTables = i32([N, perRequest]);
    this.tableMirror = new Int32Array(N * perRequest).fill(-1);
    b.fill(this.blockTables, -1);
    const freeAll = () => { for (const t of [...Object.values(this.io), this.blockTables]) b.free(t); };
    // The pools last: kvMemoryFraction sizes them from what the weights and the buffers above left free.
    // A block takes room in both pools (the target's and the draft's).
    const blockBytes = kvBlockBytes(model, this.blockSize) + (spec ? kvBlockBytes(spec.draft, this.blockSize) : 0);
    let numBlocks: number;
    try {
      numBlocks = poolBlocks(options, b, blockBytes, perRequest * this.maxRunning, perRequest);
      if (!Number.isInteger(numBlocks) || numBlocks < perRequest) throw new ArgumentError(`serving engine: numBlocks must be an integer >= ${perRequest} (one request of maxLen = ${this.maxLen} positions in blocks of ${this.blockSize}), got ${numBlocks}${options.kvMemoryFraction !== undefined ? ` from kvMemoryFraction ${options.kvMemoryFraction} (${blockBytes} bytes a block)` : ''}`);
    } catch (e) {
      freeAll();
      throw e;
    }
    const common = { maxRows: T, maxRunning: N, maxLen: this.maxLen, blockSize: this.blockSize, numBlocks, blockTables: this.blockTables };
    // Target logits: a row per sampling request, K + 1 per speculative round (all within a step's rows).
    try {
      this.target = new PagedForward(model, { ...common, maxLogitRows: spec ? Math.min(T, N * (1 + this.maxDraftTokens)) : Ns, ...(this.pipelined ? { feedFrom: this.io.sTokens } : {}) });
    } catch (e) {
      freeAll();
      throw e;
    }
    if (spec) {
      try {
        this.draft = new PagedForward(spec.draft, { ...common, maxLogitRows: N });
        // Greedy drafts and verifications: the target's logit rows at most (the draft's N are fewer).
        this.picker = new GreedyPicker(b, Math.max(N, Math.min(T, N * (1 + this.maxDraftTokens))), model.vocabSize);
        // The sampled rounds' buffers now, not at the first sampled round: a lack of memory shows here.
        this.deviceRounds();
      } catch (e) {
        this.picker?.free();
        this.draft?.free();
        this.target.free();
        freeAll();
        throw e;
      }
    }
    this.pool = new BlockPool(numBlocks, this.blockSize);
    this.scheduler = new Scheduler(this.pool, { maxBatchTokens: this.maxBatchTokens, maxRunning: this.maxRunning, prefixCaching: options.prefixCaching ?? true, batching: options.batching ?? 'continuous' });
    this.freeSlots = Array.from({ length: this.maxRunning }, (_, i) => i);
  }

  /** Bytes of the KV pools (the target's, and the draft's with speculative decoding). */
  get kvPoolBytes(): number { return this.target.kvPoolBytes + (this.draft?.kvPoolBytes ?? 0); }

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

  get hasWork(): boolean { return this.scheduler.hasWork || this.inFlight !== undefined; }

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
    // Checked here, once: a bad request found later, inside step(), would fail the step of every request.
    if (typeof request.sampling !== 'object' || request.sampling === null) throw new ArgumentError('serving engine: sampling is missing (resolveSampling() makes one)');
    if (typeof request.sampling.seed !== 'bigint') throw new ArgumentError(`serving engine: sampling.seed must be a bigint, got ${typeof request.sampling.seed} ${String(request.sampling.seed)}`);
    checkSampling(request.sampling);
    if (!Array.isArray(request.stopTokenIds)) throw new ArgumentError('serving engine: stopTokenIds must be an array of token ids');
    request.stopTokenIds.forEach((t) => { if (!Number.isInteger(t) || t < 0 || t >= V) throw new ArgumentError(`serving engine: stop token id ${t} is outside the vocabulary [0, ${V})`); });
    if (typeof request.onToken !== 'function' || typeof request.onFinish !== 'function') throw new ArgumentError('serving engine: a request needs onToken and onFinish callbacks');
    const c = request.constraint;
    if (c !== undefined && (typeof c?.allowedTokens !== 'function' || typeof c.allows !== 'function' || typeof c.accept !== 'function')) {
      throw new ArgumentError('serving engine: constraint must have allowedTokens(), allows() and accept() (a TokenConstraint)');
    }
    if (request.logitBias !== undefined) {
      if (!Array.isArray(request.logitBias)) throw new ArgumentError('serving engine: logitBias must be an array of [token, bias] pairs');
      const seen = new Set<number>();
      for (const [token, bias] of request.logitBias) {
        if (!Number.isInteger(token) || token < 0 || token >= V || seen.has(token)) throw new ArgumentError(`serving engine: logitBias token ${token} is outside the vocabulary [0, ${V}) or listed twice`);
        if (!Number.isFinite(bias)) throw new ArgumentError(`serving engine: logitBias of token ${token} is ${bias}; expected a finite number`);
        seen.add(token);
      }
    }
    for (const key of ['frequencyPenalty', 'presencePenalty'] as const) {
      const value = request[key];
      if (value !== undefined && !(typeof value === 'number' && value >= -2 && value <= 2)) throw new ArgumentError(`serving engine: ${key} must be a number in [-2, 2], got ${String(value)}`);
    }
    const id = `r${this.nextId++}`;
    const sched = this.scheduler.add(id, [...request.prompt]);
    const live: Live = { id, request, sched, limit: Math.min(n + request.maxTokens, this.maxLen), slot: -1, done: false, draftTokens: this.speculation?.initial ?? 0, pendingRow: -1 };
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
    if (plan.items.length === 0) {
      if (!this.inFlight) return false;
      this.finishInFlight(); // the last step launched: its requests all end with it
      this.compactSlots();
      return true;
    }
    let items: readonly ScheduledItem[] = plan.items;
    if (this.pipelined) {
      if (this.pipelines(items)) return this.pipelinedStep(items);
      // A step that needs its requests' tokens themselves runs on its own, the step in flight first.
      if (this.inFlight) {
        this.finishInFlight();
        items = items.filter((it) => it.request.state === 'running');
        if (items.length === 0) {
          this.compactSlots();
          return true;
        }
      }
    }
    const steps = this.decodeStepsFor(plan);
    this.compactSlots();
    for (const it of items) this.syncTable(this.bySched.get(it.request)!);
    if (steps > 1) {
      this.finishDecodeSteps(items, this.tuned(() => this.executeDecodeSteps(items, steps)));
      return true;
    }
    const outcomes = this.tuned(() => this.execute(items));
    // Registers newly full blocks' hashes (they are shareable in place); a speculative round keeps the
    // positions of its accepted draft tokens.
    const accepted = new Map<SchedRequest, readonly number[]>();
    for (const o of outcomes) if (o.accepted) accepted.set(o.live.sched, o.accepted);
    this.scheduler.complete(items, accepted);
    this.counters.steps++;
    for (const { live, events } of outcomes) {
      for (const event of events) this.append(live, event);
      // A request with a repetition penalty decodes without a draft: a round's distributions (the host's
      // and the device's) carry no penalty, and the output would silently differ from the request's own. Nor
      // does a constrained one: its mask changes with every token a round would accept.
      if (this.speculation && !live.done) {
        live.sched.speculate = live.request.sampling.repetitionPenalty !== 1 || adjustsPicks(live.request) ? 0 : Math.max(0, Math.min(live.draftTokens, live.limit - live.sched.tokens.length - 1));
      }
    }
    this.compactSlots(); // between steps the busy slots are 0..running − 1 (cancel() may open a hole; the next step closes it)
    return true;
  }

  /** Runs steps until every request has finished (for tests and batch use). */
  runToCompletion(): void {
    while (this.hasWork) this.step();
  }

  /**
   * Drops the captured step graphs: the next step of a shape that has run before is captured again (the
   * profiler captures a step with its op markers this way).
   */
  resetGraphs(): void {
    for (const s of this.stepGraphs.values()) {
      s.graph?.dispose();
      delete s.graph;
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    const b = this.backend;
    // The step in flight's download waits for it (its page-locked buffer goes back to the backend); its tokens are dropped.
    try {
      this.inFlight?.tokens?.wait();
      this.inFlight?.logits?.wait();
    } catch {
      // the device failed: nothing of this engine's is read again
    }
    this.inFlight = undefined;
    for (const t of Object.values(this.io)) b.free(t);
    b.free(this.blockTables);
    for (const s of this.stepGraphs.values()) s.graph?.dispose();
    this.target.free();
    this.draft?.free();
    this.picker?.free();
    this.sampledRounds?.free();
    this.freeAdjustBuffers();
  }

  // --- internals ------------------------------------------------------------------------------------

  private checkAlive(): void {
    if (this.disposed) throw new ArgumentError('serving engine: used after dispose()');
  }

  /**
   * Moves requests from the highest busy slots into the lowest free ones, so that the busy slots are
   * 0..running − 1: a decode step computes every row up to the highest busy slot (its graph bucket is
   * that slot + 1, rounded up: decodeBucket), so a request left in slot 200 of a half-empty engine
   * would keep every step at 256 rows. A move is the block-table row only (the keys and values stay in
   * their blocks; the new row is uploaded at once); nothing else on the device is kept per slot.
   */
  private compactSlots(): void {
    // Compact already when the lowest free slot is past the busy ones (the common case: no work, no sort).
    const lowestFree = this.freeSlots[0];
    if (lowestFree === undefined || lowestFree >= this.maxRunning - this.freeSlots.length) return;
    const busy = [...this.live.values()].filter((l) => l.slot >= 0).sort((a, b) => b.slot - a.slot);
    for (const live of busy) {
      const lowest = this.freeSlots[0];
      if (lowest === undefined || lowest > live.slot) break;
      this.freeSlots.shift();
      this.freeSlots.push(live.slot);
      this.freeSlots.sort((a, b) => a - b);
      live.slot = lowest;
      this.syncTable(live);
    }
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
    const sched = live.sched;
    // A pipelined step's token takes the place its placeholder has held (the oldest one pending).
    if (sched.pending > 0) sched.tokens[sched.tokens.length - sched.pending--] = event.token;
    else sched.tokens.push(event.token);
    this.counters.generatedTokens++;
    const constraint = live.request.constraint;
    constraint?.accept(event.token);
    live.request.onToken(event);
    if (live.done) return; // the callback cancelled it (a stop string)
    if (live.request.stopTokenIds.includes(event.token) || constraint?.complete) this.retire(live, 'stop');
    else if (sched.tokens.length - sched.pending >= live.limit) this.retire(live, 'length');
  }

  /**
   * Whether a step of these items may run pipelined: none needs its tokens on the host (a repetition penalty
   * uploads its history; a constraint's mask follows its last token).
   */
  private pipelines(items: readonly ScheduledItem[]): boolean {
    return items.every((it) => {
      const request = this.bySched.get(it.request)!.request;
      return request.sampling.repetitionPenalty === 1 && !adjustsPicks(request);
    });
  }

  /**
   * A pipelined step (see "Pipelined steps" in the header): launched with its rows' pending tokens fed
   * from the step in flight, counted as computed at once, a placeholder for each token it samples; then
   * the step in flight is finished — its tokens read, appended, finished requests retired — while this
   * one runs.
   */
  private pipelinedStep(items: readonly ScheduledItem[]): boolean {
    this.compactSlots();
    for (const it of items) this.syncTable(this.bySched.get(it.request)!);
    for (const it of items) this.counters.computedPositions += it.count;
    const launched = this.tuned(() => this.launchStep(items, true));
    this.scheduler.complete(items);
    this.counters.steps++;
    for (const { live, row } of launched.sampled) {
      // A request's last token gets no placeholder: the scheduler has nothing more to give it.
      if (live.sched.tokens.length + 1 >= live.limit) continue;
      live.sched.tokens.push(PENDING_TOKEN);
      live.sched.pending++;
      live.pendingRow = row;
    }
    const previous = this.inFlight;
    this.inFlight = launched;
    if (previous) this.finish(previous);
    this.compactSlots();
    return true;
  }

  /** fn's device work with GEMM autotuning as the engine says (gemmTuning), restored after. */
  private tuned<T>(fn: () => T): T {
    const tuning = this.backend.setGemmTuning?.(this.gemmTuning);
    try {
      return fn();
    } finally {
      if (tuning !== undefined) this.backend.setGemmTuning!(tuning);
    }
  }

  private finishInFlight(): void {
    const step = this.inFlight;
    this.inFlight = undefined;
    if (step) this.finish(step);
  }

  /** A pipelined step's tokens, read (waiting for the step) and appended; requests retired since take none. */
  private finish(step: LaunchedStep): void {
    if (!step.tokens) return;
    const picked = step.tokens.wait() as Int32Array, all = step.logits?.wait() as Float32Array | undefined;
    for (const { live, row } of step.sampled) this.append(live, this.tokenEvent(live, picked[row]!, row, all));
  }

  /** The event of `token`, sampled at logits row `row`: with its log-probabilities where the request asked for them (`all`: the step's rows of logits). */
  private tokenEvent(live: Live, token: number, row: number, all: Float32Array | undefined): TokenEvent {
    const k = live.request.logprobs ?? 0, V = this.model.vocabSize, Vp = this.model.arch.paddedVocab;
    return k === 0 || !all ? { token } : { token, ...logprobsOf(all.subarray(row * Vp, row * Vp + V), token, k) };
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

  /**
   * The step's forward passes (the draft's, then the target's over every scheduled row), then sampling:
   * a token for each request whose last position was computed, and the verdict of each speculative round.
   */
  private execute(items: readonly ScheduledItem[]): StepOutcome[] {
    const liveOf = (it: ScheduledItem) => this.bySched.get(it.request)!;
    for (const it of items) this.counters.computedPositions += it.count;
    if (!this.draft) return this.executeStep(items);
    const proposals = this.runDraft(items);
    // The target: a speculative item is a segment of its last token and its draft tokens.
    const layout = layoutRows(items.map((it) => ({
      slot: liveOf(it).slot, start: it.start,
      tokens: it.draft ? [it.request.tokens[it.start]!, ...proposals.get(it)!.tokens] : it.request.tokens.slice(it.start, it.start + it.count),
    })));
    this.target.run(layout.rows);
    const plain = items.flatMap((it, i) => (it.samples && !it.draft ? [{ it, row: layout.lastRow[i]! }] : []));
    const rounds = items.flatMap((it, i) => (it.draft ? [{ it, row: layout.firstRow[i]! }] : []));
    const n = plain.length, rows = [...plain.map((x) => x.row), ...rounds.flatMap(({ it, row }) => Array.from({ length: it.count }, (_, j) => row + j))];
    if (rows.length === 0) return [];
    const b = this.backend, Vp = this.model.arch.paddedVocab, V = this.model.vocabSize, io = this.io;
    const logits = this.target.logits(rows);
    const outcomes: StepOutcome[] = [];
    let picked: Int32Array | undefined;
    if (n > 0) {
      this.uploadSampling(n, plain.map(({ it }, i) => ({ row: i, sampling: liveOf(it).request.sampling, position: it.start + it.count - 1, tokens: it.request.tokens })));
      this.sampleRows(b.view(logits, 0, [n, Vp]), n);
      picked = b.download(b.view(io.sTokens, 0, [n])) as Int32Array;
    }
    const wantLogprobs = [...plain, ...rounds].some(({ it }) => (liveOf(it).request.logprobs ?? 0) > 0);
    // Greedy rounds are verified by the device's picks (rounds' rows only: n ints a row, not V floats), sampled
    // rounds drafted on the device by its scores and draws (device-rounds.ts); the host's sampled rounds and
    // log-probabilities read the rows.
    const onDevice = (it: ScheduledItem) => proposals.get(it)!.keptRows.length === it.draft;
    const sampledOnHost = rounds.some(({ it }) => liveOf(it).request.sampling.temperature > 0 && !onDevice(it));
    const all = sampledOnHost || wantLogprobs ? (b.download(logits) as Float32Array) : undefined;
    const roundRows = () => b.view(logits, n * Vp, [rows.length - n, Vp]);
    const greedyPicks = rounds.length > 0 && !all ? this.picker!.pick(roundRows()) : undefined;
    // p_i(x_i) of the device's sampled rounds, all round rows scored at once (others as greedy rows, unread).
    let targetAt: Float32Array | undefined;
    if (rounds.some(({ it }) => liveOf(it).request.sampling.temperature > 0 && onDevice(it))) {
      const scored: ({ sampling: ResolvedSampling; token: number } | null)[] = [];
      for (const { it } of rounds) {
        const sampling = liveOf(it).request.sampling, device = sampling.temperature > 0 && onDevice(it);
        for (let j = 0; j <= it.draft!; j++) scored.push(device && j < it.draft! ? { sampling, token: proposals.get(it)!.tokens[j]! } : null);
      }
      targetAt = this.sampledRounds!.score(roundRows(), scored);
    }
    const rowOf = (i: number) => b.view(logits, i * Vp, [1, Vp]);
    const rowLogits = (i: number) => all!.subarray(i * Vp, i * Vp + V);
    const pickAt = (i: number) => (greedyPicks ? greedyPicks[i - n]! : greedyToken(rowLogits(i), IDLE_SAMPLING, []));
    const event = (live: Live, token: number, row: number): TokenEvent => {
      const k = live.request.logprobs ?? 0;
      return k === 0 ? { token } : { token, ...logprobsOf(rowLogits(row), token, k) };
    };
    if (n > 0) this.adjustPicks(plain.map(({ it }, i) => ({ live: liveOf(it), row: i })), picked!, b.view(logits, 0, [n, Vp]), n);
    plain.forEach(({ it }, i) => outcomes.push({ live: liveOf(it), events: [event(liveOf(it), picked![i]!, i)] }));
    let base = n;
    const device = this.sampledRounds;
    for (const { it } of rounds) {
      const live = liveOf(it), proposal = proposals.get(it)!, K = it.draft!, sampling = live.request.sampling, first = base;
      const verdict = sampling.temperature === 0
        ? verifyGreedy(proposal.tokens, Array.from({ length: K + 1 }, (_, j) => pickAt(first + j)))
        : onDevice(it)
          ? verifyScored(proposal.tokens, {
            targetAt: (j) => targetAt![first - n + j]!, draftAt: (j) => proposal.draftAt[j]!,
            residual: (j) => device!.sample(rowOf(first + j), device!.keptRow(proposal.keptRows[j]!), sampling, it.start + 1 + j),
            bonus: () => device!.sample(rowOf(first + K), undefined, sampling, it.start + 1 + K),
          }, sampling.seed, it.start + 1)
          : verifySampled(proposal.tokens, proposal.q, (j) => samplingDistribution(rowLogits(first + j), sampling, []), sampling.seed, it.start + 1);
      const kept = proposal.tokens.slice(0, verdict.accepted);
      outcomes.push({ live, events: [...kept, verdict.next].map((token, j) => event(live, token, first + j)), accepted: kept });
      this.counters.draftedTokens += K;
      this.counters.acceptedTokens += verdict.accepted;
      this.counters.speculativeRounds++;
      if (this.speculation!.adaptive) live.draftTokens = verdict.accepted === K ? Math.min(this.maxDraftTokens, live.draftTokens + 2) : Math.max(1, live.draftTokens - 1);
      base += K + 1;
    }
    return outcomes;
  }

  /**
   * How many decode steps this plan may run back to back (1 = the ordinary step; see "Multi-step decoding"
   * in the header). Takes the blocks of the further positions up front; without room for them, 1.
   */
  private decodeStepsFor(plan: StepPlan): number {
    // Waiting requests hold it back only while a slot is free for them (they would wait out the run).
    const admissible = this.scheduler.waiting.length > 0 && this.freeSlots.length > 0;
    if (this.decodeSteps < 2 || this.draft || this.model.tensorParallel || plan.preempted.length > 0 || plan.admitted.length > 0 || admissible) return 1;
    let k = this.decodeSteps;
    for (const it of plan.items) {
      const live = this.bySched.get(it.request)!, sampling = live.request.sampling;
      if (it.count !== 1 || !it.samples || it.draft || (live.request.logprobs ?? 0) > 0 || sampling.repetitionPenalty !== 1 || adjustsPicks(live.request)) return 1;
      k = Math.min(k, live.limit - it.request.tokens.length);
    }
    if (k < 2) return 1;
    for (const it of plan.items) if (!this.scheduler.reserve(it.request, it.start + k)) return 1;
    return k;
  }

  /**
   * `steps` decode steps of these one-position items, back to back on the device (see "Multi-step
   * decoding" in the header); returns the tokens each step sampled, per item.
   */
  private executeDecodeSteps(items: readonly ScheduledItem[], steps: number): number[][] {
    const b = this.backend, io = this.io, N = this.maxRunning;
    const slots = items.map((it) => this.bySched.get(it.request)!.slot);
    const entries = items.map((it, i) => ({ slot: slots[i]!, start: it.start, tokens: [it.request.tokens[it.start]!] }));
    const exact = 1 + Math.max(...slots);
    const layout = layoutRows(entries, this.useGraphs ? decodeBucket(exact, N) : exact);
    const rows = layout.rows, S = rows.decodePositions.length;
    const shape = this.useGraphs ? stepShape(rows, N, this.maxBatchTokens + N) : exactShape(rows);
    const logitRows = Array.from({ length: S + shape.segments }, (_, s) => (s < S ? s : 0)), n = logitRows.length;
    this.target.upload(rows, shape, logitRows);
    this.uploadSampling(n, items.map((it, i) => ({ row: slots[i]!, sampling: this.bySched.get(it.request)!.request.sampling, position: it.start, tokens: it.request.tokens })));
    b.upload(io.stepIndex, [0]);
    const body = () => {
      this.target.compute(shape);
      this.sampleRows(this.target.computeLogits(n), n);
      this.target.advanceDecode(S, io.sTokens, io.record, io.stepIndex);
    };
    const key = `${shape.decodeRows}/${shape.rows}/${shape.segments}/advance`;
    for (let j = 0; j < steps; j++) this.runStepBody(key, shape, body, items.length);
    const record = b.download(b.view(io.record, 0, [steps * N])) as Int32Array;
    this.counters.multiStepRuns++;
    this.counters.computedPositions += (steps - 1) * items.length; // execute() counts the first step's
    return items.map((_, i) => Array.from({ length: steps }, (_, j) => record[j * N + slots[i]!]!));
  }

  /**
   * The host's side of executeDecodeSteps, step by step as step() does it for one: positions completed
   * (full blocks registered), tokens appended; a request that finished at step j takes no later tokens.
   */
  private finishDecodeSteps(items: readonly ScheduledItem[], tokens: readonly number[][]): void {
    const steps = tokens[0]!.length;
    this.counters.computedPositions += items.length;
    for (let j = 0; j < steps; j++) {
      const alive = items.flatMap((it, i) => (it.request.state === 'running' ? [{ it: { ...it, start: it.start + j }, i }] : []));
      if (alive.length === 0) break;
      this.scheduler.complete(alive.map((a) => a.it));
      this.counters.steps++;
      for (const { it, i } of alive) {
        const live = this.bySched.get(it.request);
        if (live) this.append(live, { token: tokens[i]![j]! });
      }
    }
    this.compactSlots();
  }

  /**
   * A step without a draft model (see "Steps as graphs" in the header): the decode region at the slots,
   * then the segments; the head over every decode-region row and each segment's last row, and
   * sampleTokens over all of them (rows nobody reads sample greedily into nothing). With graphs the step
   * is padded to its shape (stepShape) and replayed from that shape's graph after its inputs are uploaded.
   */
  private executeStep(items: readonly ScheduledItem[]): StepOutcome[] {
    const b = this.backend, io = this.io;
    const { sampled, rows: n } = this.launchStep(items, false);
    if (sampled.length === 0) return [];
    const picked = b.download(b.view(io.sTokens, 0, [n])) as Int32Array;
    const all = wantsLogprobs(sampled) ? (b.download(this.logitRows(n)) as Float32Array) : undefined;
    this.adjustPicks(sampled, picked, this.logitRows(n), n);
    return sampled.map(({ live, row }) => ({ live, events: [this.tokenEvent(live, picked[row]!, row, all)] }));
  }

  /**
   * The picks of a step's rows whose requests adjust them (see "Constrained requests" in the header), in place
   * in `picked`: a greedy pick its constraint allows stands, where no logit_bias could move the argmax (the
   * argmax of the allowed tokens is then the argmax of all); the other rows get their biases and masks on the
   * device (biasLogits, maskLogits over `logits`, the step's n rows), the rows are sampled again with the step's
   * inputs (an unadjusted row draws its token again), and their new picks read.
   */
  private adjustPicks(rows: readonly { readonly live: Live; readonly row: number }[], picked: Int32Array, logits: Tensor, n: number): void {
    const redo: { row: number; mask: Uint32Array | null; bias: readonly (readonly [number, number])[] }[] = [];
    for (const { live, row } of rows) {
      const { constraint, sampling } = live.request;
      const bias = biasesOf(live.request, live.sched.tokens);
      if (!constraint && bias.length === 0) continue;
      if (bias.length === 0 && sampling.temperature === 0 && constraint!.allows(picked[row]!)) continue;
      const mask = constraint?.allowedTokens() ?? null;
      if (mask || bias.length > 0) redo.push({ row, mask, bias });
    }
    if (redo.length === 0) return;
    const b = this.backend, V = this.model.vocabSize, words = Math.ceil(V / 32);
    const masked = redo.filter((r) => r.mask), biased = redo.filter((r) => r.bias.length > 0);
    const k = Math.max(0, ...biased.map((r) => r.bias.length));
    const buffers = this.adjustBuffers(redo.length, words, k);
    const rowsOf = (list: typeof redo, at: number) => {
      const view = b.view(buffers.rows, at, [list.length]);
      b.upload(view, Int32Array.from(list, ({ row }) => row));
      return view;
    };
    if (biased.length > 0) {
      const tokens = new Int32Array(biased.length * k).fill(-1), values = new Float32Array(biased.length * k);
      biased.forEach(({ bias }, i) => bias.forEach(([token, value], j) => { tokens[i * k + j] = token; values[i * k + j] = value; }));
      const tokensView = b.view(buffers.tokens!, 0, [biased.length, k]), biasesView = b.view(buffers.biases!, 0, [biased.length, k]);
      b.upload(tokensView, tokens);
      b.upload(biasesView, values);
      b.biasLogits({ logits, rows: rowsOf(biased, 0), tokens: tokensView, biases: biasesView });
    }
    if (masked.length > 0) {
      const bits = new Int32Array(masked.length * words);
      masked.forEach(({ mask }, i) => bits.set(new Int32Array(mask!.buffer, mask!.byteOffset, words), i * words));
      const wordsView = b.view(buffers.words, 0, [masked.length, words]);
      b.upload(wordsView, bits);
      b.maskLogits({ logits, rows: rowsOf(masked, biased.length), masks: wordsView, classes: V });
    }
    this.sampleRows(logits, n);
    const again = b.download(b.view(this.io.sTokens, 0, [n])) as Int32Array;
    for (const { row } of redo) picked[row] = again[row]!;
  }

  /** adjustPicks' device buffers, grown to hold m rows (the biased and the masked ones), their masks and k biases each. */
  private adjustBuffers(m: number, words: number, k: number): { rows: Tensor; words: Tensor; tokens?: Tensor; biases?: Tensor } {
    const have = this.adjust;
    if (have && have.capacity >= m && have.k >= k) return have;
    this.freeAdjustBuffers();
    const b = this.backend, capacity = Math.max(m, have?.capacity ?? 0, 8), width = Math.max(k, have?.k ?? 0);
    this.adjust = {
      capacity, k: width, rows: b.empty([2 * capacity], 'i32'), words: b.empty([capacity, words], 'i32'),
      ...(width > 0 ? { tokens: b.empty([capacity, width], 'i32'), biases: b.empty([capacity, width], 'f32') } : {}),
    };
    return this.adjust;
  }

  private freeAdjustBuffers(): void {
    const a = this.adjust;
    if (!a) return;
    for (const t of [a.rows, a.words, a.tokens, a.biases]) if (t) this.backend.free(t);
    this.adjust = undefined;
  }

  /** The first n rows of the target's logits buffer (a step's sampled rows). */
  private logitRows(n: number): Tensor {
    return this.backend.view(this.target.logitsBuffer, 0, [n, this.model.arch.paddedVocab]);
  }

  /**
   * executeStep()'s device work, launched: the rows laid out and uploaded (a pipelined step's pending
   * tokens fed from the step in flight), the step's graph replayed (or its ops run); `later`: the sampled
   * tokens' download queued behind it without waiting.
   */
  private launchStep(items: readonly ScheduledItem[], later: boolean): LaunchedStep {
    const b = this.backend, io = this.io;
    const liveOf = (it: ScheduledItem) => this.bySched.get(it.request)!;
    const entries = items.map((it) => ({ slot: liveOf(it).slot, start: it.start, tokens: it.request.tokens.slice(it.start, it.start + it.count) }));
    const exact = Math.max(0, ...entries.filter((e) => e.tokens.length === 1).map((e) => e.slot + 1));
    const layout = layoutRows(entries, this.useGraphs && exact > 0 ? decodeBucket(exact, this.maxRunning) : exact);
    const rows = layout.rows, S = rows.decodePositions.length;
    const shape = this.useGraphs ? stepShape(rows, this.maxRunning, this.maxBatchTokens + this.maxRunning) : exactShape(rows);
    // Logit row s for decode-region row s, then S + k for segment k's last row; padded segment slots read row 0.
    const logitRows = Array.from({ length: S }, (_, s) => s);
    for (const seg of rows.segments) logitRows.push(seg.r0 + seg.count - 1);
    while (logitRows.length < S + shape.segments) logitRows.push(0);
    const n = logitRows.length;
    // Segments are laid out in the items' order (layoutRows), so the k-th multi-position item is segment k.
    let segment = 0;
    const sampled: { it: ScheduledItem; live: Live; row: number }[] = [], feeds: [number, number][] = [];
    items.forEach((it, i) => {
      const entry = entries[i]!, single = entry.tokens.length === 1, row = single ? entry.slot : S + segment++;
      if (it.samples) sampled.push({ it, live: liveOf(it), row });
      // A token still on the device (pipelined steps) is only ever a decoding request's next input.
      if (entry.tokens.includes(PENDING_TOKEN)) {
        if (!single) throw new Error(`internal: request ${it.request.id} has a pending token inside a ${entry.tokens.length}-position item`);
        feeds.push([entry.slot, liveOf(it).pendingRow]);
      }
    });
    this.target.upload(rows, shape, logitRows, feeds);
    if (sampled.length > 0) this.uploadSampling(n, sampled.map(({ it, live, row }) => ({ row, sampling: live.request.sampling, position: it.start + it.count - 1, tokens: it.request.tokens })));
    // A step that samples nothing (a prompt chunk short of the prompt's end, alone) skips the head.
    const head = sampled.length > 0;
    const body = () => {
      this.target.compute(shape);
      if (!head) return;
      this.sampleRows(this.target.computeLogits(n), n);
    };
    this.runStepBody(`${shape.decodeRows}/${shape.rows}/${shape.segments}${head ? '' : '/no-head'}`, shape, body, items.reduce((r, it) => r + it.count, 0));
    const out = { sampled: sampled.map(({ live, row }) => ({ live, row })), rows: n };
    if (!head || !later) return out;
    // Queued behind the step: the next step overwrites both buffers.
    const tokens = b.downloadLater(b.view(io.sTokens, 0, [n]));
    return wantsLogprobs(sampled) ? { ...out, tokens, logits: b.downloadLater(this.logitRows(n)) } : { ...out, tokens };
  }

  /**
   * Runs a step's device work: eagerly without graphs; with them, the graph of its shape's `key` — a
   * shape's first step runs eagerly (kernels compile, GEMMs pick their algorithms), the second is captured.
   */
  private runStepBody(key: string, shape: StepShape, body: () => void, rowsUsed: number): void {
    if (!this.useGraphs) {
      body();
      return;
    }
    let step = this.stepGraphs.get(key);
    if (!step) this.stepGraphs.set(key, (step = { runs: 0 }));
    if (step.graph) step.graph.replay();
    else if (step.runs >= 1) {
      (step.graph = this.backend.captureGraph(body)).replay();
      this.counters.graphCaptures++;
    } else {
      body();
    }
    if (step.graph) {
      this.counters.graphSteps++;
      this.counters.graphRowsComputed += shape.rows;
      this.counters.graphRowsUsed += rowsUsed;
    }
    step.runs++;
  }

  /**
   * The sampler's inputs for rows [0, n): each listed row's sampling parameters, seed and position; the
   * other rows (idle slots of a graph-replayed step) sample greedily into nothing. A row with a
   * repetition penalty also gets its request's tokens 0..position as its history row (the rows a request
   * samples at change between steps, so no row's history is kept on the device from one step to the next).
   */
  private uploadSampling(n: number, rows: readonly { row: number; sampling: ResolvedSampling; position: number; tokens: readonly number[] }[]): void {
    const b = this.backend, io = this.io, V = this.model.vocabSize, L = this.maxLen;
    for (const { row, sampling, position, tokens } of rows) {
      if (sampling.repetitionPenalty !== 1) b.upload(b.view(io.history, row * L, [position + 1]), Int32Array.from(tokens.slice(0, position + 1)));
    }
    const params = new Float32Array(n * 4), seeds = new Int32Array(n * 2), positions = new Int32Array(n);
    const idle = samplingParamsRow(IDLE_SAMPLING);
    for (let r = 0; r < n; r++) params.set(idle, 4 * r);
    for (const { row, sampling, position } of rows) {
      const p = samplingParamsRow(sampling);
      p[1] = Math.min(p[1]!, V);
      params.set(p, 4 * row);
      seeds.set(seedWords(sampling.seed, 0), 2 * row);
      positions[row] = position;
    }
    b.upload(b.view(io.params, 0, [n, 4]), params);
    b.upload(b.view(io.seeds, 0, [n, 2]), seeds);
    b.upload(b.view(io.sPositions, 0, [n]), positions);
  }

  /** sampleTokens over logits [n, paddedVocab] with uploadSampling()'s inputs, into io.sTokens (device work only: capturable). */
  private sampleRows(logits: Tensor, n: number): void {
    const b = this.backend, io = this.io, L = this.maxLen;
    const view1 = (t: Tensor) => b.view(t, 0, [n]);
    b.fill(view1(io.sFinished), 0);
    // Past any position a row reaches (≤ maxLen − 2): sampleTokens then never marks a row finished, which
    // would leave its token out of io.sTokens (a request filling the whole context read a stale one).
    b.fill(view1(io.sLimits), L + 1);
    b.sampleTokens({
      logits, classes: this.model.vocabSize, params: b.view(io.params, 0, [n, 4]), seeds: b.view(io.seeds, 0, [n, 2]), positions: view1(io.sPositions),
      history: b.view(io.history, 0, [n, L]), tokens: view1(io.sTokens), finished: view1(io.sFinished), limits: view1(io.sLimits), stopIds: io.stopIds,
    });
  }

  /** The sampled rounds' device buffers (made on the first call: the constructor's), or undefined for the host's path. */
  private deviceRounds(): DeviceRounds | undefined {
    if (this.sampledRounds === undefined) {
      const draft = this.draft!.model, arch = this.model.arch, N = this.maxRunning;
      const fits = this.speculation!.deviceSampling && draft.dtype === this.model.dtype && draft.arch.paddedVocab === arch.paddedVocab;
      const scoreRows = Math.min(this.maxBatchTokens + N, N * (1 + this.maxDraftTokens));
      this.sampledRounds = fits ? new DeviceRounds(this.backend, N * this.maxDraftTokens, scoreRows, arch.paddedVocab, this.model.dtype, this.model.vocabSize) : null;
    }
    return this.sampledRounds ?? undefined;
  }

  /**
   * The draft's passes (see the header): pass 0 mirrors every item (a speculative item's first position
   * only), pass j computes position start + j of each speculative item with K ≥ j; passes j < K draw
   * the draft tokens from its logits.
   */
  private runDraft(items: readonly ScheduledItem[]): Map<ScheduledItem, Proposal> {
    const draft = this.draft!, V = this.model.vocabSize, Vp = draft.model.arch.paddedVocab;
    const rounds = items.filter((it) => it.draft);
    const proposals = new Map<ScheduledItem, Proposal>(rounds.map((it) => [it, { tokens: [], q: [], draftAt: [], keptRows: [] }]));
    const samplingOf = (it: ScheduledItem) => this.bySched.get(it.request)!.request.sampling;
    const device = rounds.some((it) => samplingOf(it).temperature > 0) ? this.deviceRounds() : undefined;
    device?.reset();
    const K = Math.max(0, ...rounds.map((it) => it.draft!));
    for (let j = 0; j <= K; j++) {
      const entries = (j === 0 ? items : rounds.filter((it) => it.draft! >= j)).map((it) => ({
        it, slot: this.bySched.get(it.request)!.slot, start: it.start + j,
        tokens: !it.draft ? it.request.tokens.slice(it.start, it.start + it.count) : [j === 0 ? it.request.tokens[it.start]! : proposals.get(it)!.tokens[j - 1]!],
      }));
      const layout = layoutRows(entries);
      draft.run(layout.rows);
      const proposing = entries.flatMap((e, i) => (e.it.draft && j < e.it.draft ? [{ it: e.it, row: layout.lastRow[i]! }] : []));
      if (proposing.length === 0) continue;
      const logits = draft.logits(proposing.map((p) => p.row));
      // Greedy proposals are the device's picks; with a sampled one, the pass draws on the device (sampleTokens:
      // greedy rows' argmax, sampled rows' Gumbel-max draws), scores q(x) and keeps its rows for residuals —
      // or, on the host's path, reads the rows.
      const sampledHere = proposing.some(({ it }) => samplingOf(it).temperature > 0);
      if (sampledHere && device) {
        const b = this.backend, n = proposing.length;
        this.uploadSampling(n, proposing.map(({ it }, i) => ({ row: i, sampling: penaltyFree(samplingOf(it)), position: it.start + j, tokens: [] })));
        this.sampleRows(logits, n);
        const drawn = b.download(b.view(this.io.sTokens, 0, [n])) as Int32Array;
        // q(x) under the settings sampleTokens drew with (the penalty-free rows just uploaded), of its draws.
        const q = device.probabilities(logits, b.view(this.io.params, 0, [n, 4]), b.view(this.io.sTokens, 0, [n]));
        const first = device.keep(logits);
        proposing.forEach(({ it }, i) => {
          const proposal = proposals.get(it)!;
          proposal.tokens.push(drawn[i]!);
          proposal.draftAt.push(q[i]!);
          proposal.keptRows.push(first + i);
        });
        continue;
      }
      const all = sampledHere ? (this.backend.download(logits) as Float32Array) : undefined;
      const picks = sampledHere ? undefined : this.picker!.pick(logits);
      proposing.forEach(({ it }, i) => {
        const sampling = samplingOf(it), proposal = proposals.get(it)!;
        const z = () => all!.subarray(i * Vp, i * Vp + V);
        if (sampling.temperature === 0) {
          proposal.tokens.push(picks ? picks[i]! : greedyToken(z(), sampling, []));
        } else {
          const q = samplingDistribution(z(), sampling, []);
          proposal.q.push(q);
          proposal.tokens.push(drawFrom(q, speculativeUniform(sampling.seed, it.start + j + 1, DrawKind.Draft)));
        }
      });
    }
    return proposals;
  }
}

/**
 * Segment slots of a graph-replayed step at least: a step of 1–8 prompt chunks has one shape, so fewer
 * shapes are run eagerly and captured (each costs an eager step and a capture); an empty slot's flash
 * attention blocks exit at once.
 */
export const MIN_SEGMENT_SLOTS = 8;

/** Prompt rows of a graph-replayed step are padded to a multiple of this (a GEMM of a few more rows costs little; fewer shapes, fewer graphs). */
export const STEP_ROW_QUANTUM = 128;

/**
 * The shape a graph-replayed step of these rows runs in: the prompt rows rounded up to STEP_ROW_QUANTUM
 * (at most maxRows in all), the segment slots to a power of two of at least MIN_SEGMENT_SLOTS (at most maxRunning), each segment's
 * flash grid covering all prompt rows. The decode region is the caller's (decodeBucket).
 */
export function stepShape(rows: StepRows, maxRunning: number, maxRows: number): StepShape {
  const S = rows.decodePositions.length, P = rows.tokens.length - S, g = rows.segments.length;
  const padded = P === 0 ? 0 : Math.min(maxRows - S, STEP_ROW_QUANTUM * Math.ceil(P / STEP_ROW_QUANTUM));
  const segments = g === 0 ? 0 : Math.min(maxRunning, Math.max(MIN_SEGMENT_SLOTS, 2 ** Math.ceil(Math.log2(g))));
  return { rows: S + padded, decodeRows: S, segments, maxSegmentRows: padded };
}

/**
 * The rows a graph-replayed decode step computes for a decode region of n rows: n rounded up to a power
 * of two up to 32, above that to a multiple of 32 (at most 31 idle rows, where powers of two would leave
 * up to half the step idle), at most maxRunning. One graph per bucket.
 */
export function decodeBucket(n: number, maxRunning: number): number {
  const rounded = n <= 32 ? 2 ** Math.ceil(Math.log2(Math.max(1, n))) : 32 * Math.ceil(n / 32);
  return Math.min(maxRunning, rounded);
}

/** One request's positions [start, start + tokens.length) in a step, for layoutRows. */
interface RowEntry { readonly slot: number; readonly start: number; readonly tokens: readonly number[] }

/**
 * The rows of a step (paged-forward.ts): one-position entries in the decode region (row = slot; slots
 * without one are idle rows: token 0 at position 0 for the embedding, cache position −1), the others as
 * segments after it. firstRow / lastRow: each entry's first and last row.
 */
export function layoutRows(entries: readonly RowEntry[], decodeRows?: number): { rows: StepRows; firstRow: number[]; lastRow: number[] } {
  const single = entries.filter((e) => e.tokens.length === 1);
  const S = Math.max(decodeRows ?? 0, single.length === 0 ? 0 : 1 + Math.max(...single.map((e) => e.slot)));
  const R = S + entries.reduce((n, e) => n + (e.tokens.length === 1 ? 0 : e.tokens.length), 0);
  const tokens = new Int32Array(R), positions = new Int32Array(R), decodePositions = new Int32Array(S).fill(-1);
  const segments: StepRows['segments'][number][] = [], firstRow: number[] = [], lastRow: number[] = [];
  let r0 = S;
  for (const e of entries) {
    const c = e.tokens.length;
    if (c === 1) {
      tokens[e.slot] = e.tokens[0]!;
      positions[e.slot] = decodePositions[e.slot] = e.start;
      firstRow.push(e.slot);
      lastRow.push(e.slot);
      continue;
    }
    tokens.set(e.tokens, r0);
    for (let j = 0; j < c; j++) positions[r0 + j] = e.start + j;
    segments.push({ slot: e.slot, r0, start: e.start, count: c });
    firstRow.push(r0);
    lastRow.push(r0 + c - 1);
    r0 += c;
  }
  return { rows: { tokens, positions, decodePositions, segments }, firstRow, lastRow };
}

/** Checks a speculation setting against the target and the engine; returns the largest K. */
function checkSpeculation(spec: ServingSpeculation, model: DecoderModel, maxLen: number, maxBatchTokens: number): number {
  const draft = spec.draft;
  if (draft.backend !== model.backend) throw new ArgumentError('serving engine: the draft model must be on the target model\'s backend');
  if (draft.vocabSize !== model.vocabSize) throw new ArgumentError(`serving engine: the draft model's vocabulary has ${draft.vocabSize} tokens, the target's ${model.vocabSize}; speculative decoding needs the same tokenizer`);
  if (draft.arch.maxPositions < maxLen) throw new ArgumentError(`serving engine: the draft model has ${draft.arch.maxPositions} positions, fewer than the context window (maxLen ${maxLen})`);
  if (draft.tensorParallel) throw new ArgumentError('serving engine: a tensor-parallel draft model is not supported');
  const int = (name: string, x: number | undefined) => {
    if (x !== undefined && !(Number.isInteger(x) && x >= 1)) throw new ArgumentError(`serving engine: speculative ${name} must be a positive integer, got ${x}`);
  };
  int('draftTokens', spec.draftTokens);
  int('maxDraftTokens', spec.maxDraftTokens);
  if (maxBatchTokens < 2) throw new ArgumentError('serving engine: speculative decoding needs maxBatchTokens >= 2 (a round computes K + 1 positions)');
  // K the caller asked for is kept or refused, never quietly lowered; only the defaults bend to the batch.
  const k = spec.draftTokens ?? DEFAULT_DRAFT_TOKENS, room = maxBatchTokens - 1;
  if (spec.maxDraftTokens !== undefined && spec.maxDraftTokens < k) throw new ArgumentError(`serving engine: speculative maxDraftTokens ${spec.maxDraftTokens} is below draftTokens ${k}`);
  const asked = spec.maxDraftTokens ?? (spec.draftTokens !== undefined ? Math.max(spec.draftTokens, DEFAULT_MAX_DRAFT_TOKENS) : undefined);
  if (asked !== undefined && Math.max(asked, k) > room && (spec.maxDraftTokens !== undefined || k > room)) {
    throw new ArgumentError(`serving engine: speculative K up to ${Math.max(asked, k)} needs K + 1 = ${Math.max(asked, k) + 1} positions in a step; maxBatchTokens is ${maxBatchTokens}`);
  }
  return Math.min(asked ?? DEFAULT_MAX_DRAFT_TOKENS, room);
}

/** Whether any of a step's sampled requests asked for log-probabilities (the step's logits are then read). */
/** A request whose picks are adjusted after the step (a constraint, a logit_bias): it needs its tokens on the host. */
function adjustsPicks(request: GenerationRequest): boolean {
  return request.constraint !== undefined || (request.logitBias?.length ?? 0) > 0 || penalizes(request);
}

function penalizes(request: GenerationRequest): boolean {
  return (request.frequencyPenalty ?? 0) !== 0 || (request.presencePenalty ?? 0) !== 0;
}

/**
 * A request's biases before its next pick: its logit_bias, plus the frequency / presence penalties of the tokens
 * it has generated (`tokens`: prompt + answer so far), one [token, bias] pair a token.
 */
export function biasesOf(request: GenerationRequest, tokens: readonly number[]): (readonly [number, number])[] {
  if (!penalizes(request)) return request.logitBias ? [...request.logitBias] : [];
  const counts = new Map<number, number>();
  for (let i = request.prompt.length; i < tokens.length; i++) counts.set(tokens[i]!, (counts.get(tokens[i]!) ?? 0) + 1);
  const bias = new Map<number, number>(request.logitBias ?? []);
  const frequency = request.frequencyPenalty ?? 0, presence = request.presencePenalty ?? 0;
  for (const [token, count] of counts) bias.set(token, (bias.get(token) ?? 0) - count * frequency - presence);
  return [...bias];
}

function wantsLogprobs(sampled: readonly { readonly live: Live }[]): boolean {
  return sampled.some(({ live }) => (live.request.logprobs ?? 0) > 0);
}

const DEFAULT_DRAFT_TOKENS = 4;
const DEFAULT_MAX_DRAFT_TOKENS = 8;
/** What the idle rows of a graph-replayed decode step sample with (greedy: no draws). */
const IDLE_SAMPLING: ResolvedSampling = { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n };

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
/**
 * The pool's blocks: numBlocks, or kvMemoryFraction of the free memory, or by default `full` (maxRunning
 * full-length requests) — capped at DEFAULT_KV_FRACTION of the free memory, so that a long-context model
 * (Llama 3.2's 131072 positions: 4 GiB a request) does not ask for more than the device has; the cap
 * never goes below `one` request of maxLen positions (a clear error says so when even that does not fit).
 */
function poolBlocks(options: ServingEngineOptions, backend: Backend, blockBytes: number, full: number, one: number): number {
  const fraction = options.kvMemoryFraction;
  const freeBytes = () => {
    const runtime = (backend as { runtime?: { device?: { memoryInfo?: () => { freeBytes: number } } } }).runtime;
    return runtime?.device?.memoryInfo ? runtime.device.memoryInfo().freeBytes : freemem();
  };
  if (fraction === undefined) {
    if (options.numBlocks !== undefined) return options.numBlocks;
    const free = freeBytes(), cap = Math.floor((DEFAULT_KV_FRACTION * free) / blockBytes);
    if (cap < one) {
      throw new ArgumentError(`serving engine: one request of maxLen positions needs ${one} KV blocks (${(one * blockBytes / 2 ** 30).toFixed(2)} GiB), ` +
        `but ${(free / 2 ** 30).toFixed(2)} GiB are free: give a smaller maxLen (--max-len), or numBlocks / kvMemoryFraction`);
    }
    return Math.min(full, cap);
  }
  if (options.numBlocks !== undefined) throw new ArgumentError('serving engine: give numBlocks or kvMemoryFraction, not both');
  if (!(fraction > 0 && fraction <= 1)) throw new ArgumentError(`serving engine: kvMemoryFraction must be in (0, 1], got ${fraction}`);
  return Math.floor((fraction * freeBytes()) / blockBytes);
}

/** The most of the free memory a default-sized KV pool takes. */
const DEFAULT_KV_FRACTION = 0.9;
