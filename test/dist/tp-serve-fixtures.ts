// The tensor-parallel serving runs (serve/replicated-engine.ts) of test/dist/tp-serve.test.ts. One
// schedule of requests — each submitted before a given step, some cancelled between steps, some cancelled
// from inside onToken the way the server does on a stop string — runs on a single-process ServingEngine
// (the reference, on the whole model) and on every rank of an in-process group: rank 0 drives a
// ReplicatedLeader through it, the other ranks follow(). runInProcessRanks imports this module in each
// worker and calls the exported rank functions.

import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { Communicator } from '../../src/dist/communicator.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions } from '../../src/serve/engine.js';
import { ReplicatedFollower, ReplicatedLeader, replicatedServingEngine } from '../../src/serve/replicated-engine.js';
import type { FollowSummary } from '../../src/serve/replicated-engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import type { ServedEngine } from '../../src/serve/server.js';

export interface ScheduledRequest {
  readonly prompt: readonly number[];
  readonly maxTokens: number;
  /** Absent: greedy. */
  readonly sampled?: { readonly temperature: number; readonly topK: number; readonly topP: number; readonly seed: number };
  readonly stopTokenIds?: readonly number[];
  readonly logprobs?: number;
  /** Submitted just before this step (0: before the first). */
  readonly submitAtStep: number;
  /** Cancelled (reason 'cancelled') just before this step, if still running. */
  readonly cancelAtStep?: number;
  /** Cancelled from inside onToken once it has this many tokens (reason 'stop': the server's stop-string path). */
  readonly cancelAfterTokens?: number;
}

export interface TpServeInput {
  readonly dir: string;
  readonly engine: ServingEngineOptions;
  readonly requests: readonly ScheduledRequest[];
  /** Per-rank engine options that replace `engine` (to test that differing options are refused). */
  readonly engineByRank?: readonly ServingEngineOptions[];
  /** A follower submits one request of its own before following (to test that divergence is detected). */
  readonly followerStrays?: boolean;
}

export interface RequestOutcome {
  readonly tokens: number[];
  readonly logprobs: number[];
  reason: FinishReason | null;
}

export interface TpServeOutput {
  readonly rank: number;
  /** Rank 0 (and the reference): each request's tokens, log-probabilities and finish reason. */
  readonly outcomes?: RequestOutcome[];
  /** Other ranks: what follow() ran. */
  readonly follow?: FollowSummary;
  /** The engine's state at the end (a follower's after the stop message). */
  readonly blocksUsed: number;
  readonly running: number;
  readonly waiting: number;
  readonly steps: number;
  readonly numBlocks: number;
}

type Driven = Pick<ServedEngine, 'submit' | 'cancel' | 'step' | 'hasWork'>;

/** Runs the schedule to completion on `engine`; the outcomes in request order. */
export function runSchedule(engine: Driven, requests: readonly ScheduledRequest[]): RequestOutcome[] {
  const outcomes: RequestOutcome[] = requests.map(() => ({ tokens: [], logprobs: [], reason: null }));
  const ids: (string | undefined)[] = requests.map(() => undefined);
  const lastSubmit = Math.max(...requests.map((r) => r.submitAtStep));
  for (let step = 0; step <= lastSubmit || engine.hasWork; step++) {
    requests.forEach((r, i) => {
      if (r.submitAtStep !== step) return;
      const o = outcomes[i]!;
      const sampling = resolveSampling(r.sampled ?? { temperature: 0, seed: 0 });
      ids[i] = engine.submit({
        prompt: r.prompt, maxTokens: r.maxTokens, sampling, stopTokenIds: r.stopTokenIds ?? [], logprobs: r.logprobs ?? 0,
        onToken: (e) => {
          o.tokens.push(e.token);
          if (e.logprob !== undefined) o.logprobs.push(e.logprob);
          if (o.tokens.length === r.cancelAfterTokens) engine.cancel(ids[i]!, 'stop');
        },
        onFinish: (reason) => { o.reason = reason; },
      });
    });
    requests.forEach((r, i) => { if (r.cancelAtStep === step && ids[i] !== undefined) engine.cancel(ids[i]!, 'cancelled'); });
    engine.step();
  }
  return outcomes;
}

function modelOf(input: TpServeInput, comm?: Communicator): DecoderModel {
  return loadDecoderModel(input.dir, comm?.backend ?? new CpuBackend(), { dtype: 'f32', ...(comm ? { tensorParallel: comm } : {}) }).model;
}

/** The reference: the schedule on one engine over the whole model. */
export function singleProcessRun(input: TpServeInput): TpServeOutput {
  const model = modelOf(input);
  const engine = new ServingEngine(model, input.engine);
  try {
    const outcomes = runSchedule(engine, input.requests);
    const s = engine.stats();
    return { rank: 0, outcomes, ...stateOf(engine) };
  } finally {
    engine.dispose();
    model.free();
  }
}

/** One rank of a tensor-parallel server: the leader runs the schedule and stops the followers. */
export function tpServeRank(comm: Communicator, input: TpServeInput): TpServeOutput {
  const model = modelOf(input, comm);
  try {
    const engine = replicatedServingEngine(model, comm, input.engineByRank?.[comm.rank] ?? input.engine);
    if (comm.rank === 0) {
      const leader = new ReplicatedLeader(engine, comm);
      let outcomes: RequestOutcome[];
      try {
        outcomes = runSchedule(leader, input.requests);
      } finally {
        leader.dispose();
      }
      return { rank: 0, outcomes, ...stateOf(engine) };
    }
    const follower = new ReplicatedFollower(engine, comm);
    try {
      if (input.followerStrays) engine.submit({ prompt: [1, 2, 3], maxTokens: 2, sampling: resolveSampling({}), stopTokenIds: [], onToken: () => {}, onFinish: () => {} });
      const follow = follower.follow();
      return { rank: comm.rank, follow, ...stateOf(engine) };
    } finally {
      follower.dispose();
    }
  } finally {
    model.free();
  }
}

function stateOf(engine: ServingEngine): Pick<TpServeOutput, 'blocksUsed' | 'running' | 'waiting' | 'steps' | 'numBlocks'> {
  const s = engine.stats();
  return { blocksUsed: s.blocksUsed, running: s.running, waiting: s.waiting, steps: s.steps, numBlocks: s.blocksTotal };
}

export interface HttpInput {
  readonly dir: string;
  readonly engine: ServingEngineOptions;
  /** Completion request bodies, sent concurrently. */
  readonly bodies: readonly Record<string, unknown>[];
  /** A greedy completion of this prompt is asked first; two characters of its text become a stop string of one more body. */
  readonly stopProbe: { readonly prompt: string; readonly maxTokens: number };
}

export interface HttpOutput {
  /** Rank 0: each body's answer from a plain server over the whole model, then from the TP server. */
  readonly plain?: Answer[];
  readonly tensorParallel?: Answer[];
  /** The stop string taken from the probe's text. */
  readonly stop?: string;
  readonly blocksUsed: number;
}

export interface Answer {
  readonly status: number;
  readonly text?: string;
  readonly finishReason?: string;
  readonly completionTokens?: number;
}

async function complete(port: number, body: Record<string, unknown>): Promise<Answer> {
  const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', ...body }) });
  const json = await r.json() as { choices?: { text: string; finish_reason: string }[]; usage?: { completion_tokens: number } };
  const c = json.choices?.[0];
  return { status: r.status, ...(c ? { text: c.text, finishReason: c.finish_reason } : {}), ...(json.usage ? { completionTokens: json.usage.completion_tokens } : {}) };
}

/** The bodies' answers, sent at once to `server` on loopback; the server is closed after. */
async function answers(server: InferenceServer, bodies: readonly Record<string, unknown>[]): Promise<Answer[]> {
  const { port } = await server.listen(0, '127.0.0.1');
  try {
    return await Promise.all(bodies.map((body) => complete(port, body)));
  } finally {
    await server.close();
  }
}

/**
 * An HTTP server on rank 0: the bodies are answered by a plain InferenceServer over the whole model, then
 * by one over a ReplicatedLeader, while the other ranks follow().
 */
export async function tpHttpRank(comm: Communicator, input: HttpInput): Promise<HttpOutput> {
  const shard = loadDecoderModel(input.dir, comm.backend, { dtype: 'f32', tensorParallel: comm }).model;
  try {
    const engine = replicatedServingEngine(shard, comm, input.engine);
    if (comm.rank !== 0) {
      const follower = new ReplicatedFollower(engine, comm);
      try {
        follower.follow();
        return { blocksUsed: engine.stats().blocksUsed };
      } finally {
        follower.dispose();
      }
    }
    const tokenizer = loadTokenizer(input.dir);
    const leader = new ReplicatedLeader(engine, comm);
    try {
      const whole = loadDecoderModel(input.dir, new CpuBackend(), { dtype: 'f32' }).model;
      const single = new ServingEngine(whole, input.engine);
      let plain: Answer[], stop: string;
      try {
        const probe = await answers(new InferenceServer(single, tokenizer, { modelName: 'tiny' }), [{ prompt: input.stopProbe.prompt, max_tokens: input.stopProbe.maxTokens, temperature: 0 }]);
        stop = probe[0]!.text!.slice(4, 6);
        const bodies = [...input.bodies, { prompt: input.stopProbe.prompt, max_tokens: input.stopProbe.maxTokens, temperature: 0, stop: [stop] }];
        plain = await answers(new InferenceServer(single, tokenizer, { modelName: 'tiny' }), bodies);
        const tensorParallel = await answers(new InferenceServer(leader, tokenizer, { modelName: 'tiny' }), bodies);
        return { plain, tensorParallel, stop, blocksUsed: engine.stats().blocksUsed };
      } finally {
        single.dispose();
        whole.free();
      }
    } finally {
      leader.dispose();
    }
  } finally {
    shard.free();
  }
}
