// Tensor-parallel serving (serve/replicated-engine.ts) on in-process CPU ranks, world size 2, f32: rank 0
// drives a ReplicatedLeader through a schedule of requests — submitted at different steps, prompts sharing
// a prefix, greedy and seeded sampling, one cancelled between steps, one cancelled from inside onToken
// (the server's stop-string path), one cancelled before it ever ran, with and without preemption — and
// gets exactly the tokens and finish reasons of one ServingEngine on the whole model; the follower runs the
// same steps and ends with no KV block held once the stop message ends follow(). The tokens are compared
// exactly: the two ranks' partial sums add in another order than one rank's, but at these sizes the f32
// logits agree to ~1e-6 and no greedy or sampled choice sits that close to a tie (logprobs are compared
// to 1e-4). Also: the HTTP server on a leader answers as it does on one engine; the wire format round-trips;
// differing options and a follower out of step are refused by name; kvMemoryFraction agrees on one pool size.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runInProcessRanks } from '../../src/dist/in-process.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { ServingEngineOptions } from '../../src/serve/engine.js';
import { decodeCommands, decodeHeader, encodeCommands, encodeHeader } from '../../src/serve/replication-wire.js';
import type { EngineCommand } from '../../src/serve/replication-wire.js';
import { ReplicatedLeader } from '../../src/serve/replicated-engine.js';
import type { Communicator } from '../../src/dist/communicator.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { anyJsonObject } from '../../src/infer/structured/json-schema.js';
import { JsonConstraint, TokenVocabulary } from '../../src/infer/structured/token-mask.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import type { HttpInput, HttpOutput, ScheduledRequest, TpServeInput, TpServeOutput } from './tp-serve-fixtures.js';
import { runSchedule, singleProcessRun } from './tp-serve-fixtures.js';

const fixtures = new URL('./tp-serve-fixtures.js', import.meta.url);
const root = mkdtempSync(join(tmpdir(), 'fuseformer-tp-serve-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** Grouped-query attention split over 2 ranks: 8 query heads sharing 4 key/value heads. */
const GQA_LLAMA: LlamaConfig = { ...TINY_LLAMA, hidden: 64, heads: 8, kvHeads: 4, headDim: 8, ffn: 96 };
const MODELS = [
  { name: 'GPT-2', family: 'gpt2' as const, config: TINY_GPT2 },
  { name: 'Llama GQA', family: 'llama' as const, config: GQA_LLAMA },
];

const shared = [12, 40, 7, 99, 3, 18, 201, 5, 77, 64, 9];
const SAMPLED = { temperature: 0.9, topK: 20, topP: 0.95 };
const REQUESTS: ScheduledRequest[] = [
  { prompt: [...shared.slice(0, 9), 5], maxTokens: 12, submitAtStep: 0 },
  { prompt: [...shared, 70, 71], maxTokens: 10, sampled: { ...SAMPLED, seed: 7 }, logprobs: 2, submitAtStep: 0 },
  { prompt: [5, 6], maxTokens: 20, submitAtStep: 1, cancelAtStep: 6 },
  { prompt: shared.slice(0, 8), maxTokens: 14, submitAtStep: 3, cancelAfterTokens: 4 },
  { prompt: Array.from({ length: 24 }, (_, i) => 100 + i), maxTokens: 9, sampled: { ...SAMPLED, seed: 99 }, submitAtStep: 2 },
  { prompt: [...shared], maxTokens: 8, logprobs: 3, submitAtStep: 5 },
  { prompt: [31, 31, 9], maxTokens: 6, sampled: { ...SAMPLED, seed: 3 }, submitAtStep: 4, cancelAtStep: 4 },
  { prompt: [9, 9, 9, 150, 2], maxTokens: 7, sampled: { ...SAMPLED, seed: 3 }, submitAtStep: 12 },
];
const SETTINGS: [string, ServingEngineOptions][] = [
  ['chunked prefill and prefix sharing', { maxLen: 48, maxRunning: 4, maxBatchTokens: 16, blockSize: 4 }],
  ['a small pool (preemption)', { maxLen: 48, maxRunning: 4, maxBatchTokens: 16, blockSize: 4, numBlocks: 14 }],
];

function folder(m: (typeof MODELS)[number]): string {
  const dir = join(root, m.family);
  writeModelFolder(dir, m.family, m.config, 13);
  return dir;
}
const dirs = new Map(MODELS.map((m) => [m.name, folder(m)]));

for (const m of MODELS) {
  for (const [setting, engine] of SETTINGS) {
    test(`tensor-parallel serving, ${m.name}, ${setting}: the leader's tokens equal one engine's; the follower stops clean`, async () => {
      const input: TpServeInput = { dir: dirs.get(m.name)!, engine, requests: REQUESTS };
      const want = singleProcessRun(input);
      const [leader, follower] = await runInProcessRanks<TpServeInput, TpServeOutput>(2, fixtures, 'tpServeRank', input);
      want.outcomes!.forEach((w, i) => {
        const got = leader!.outcomes![i]!;
        assert.deepEqual(got.tokens, w.tokens, `request ${i}: tokens`);
        assert.equal(got.reason, w.reason, `request ${i}: finish reason`);
        assert.equal(got.logprobs.length, w.logprobs.length, `request ${i}: logprobs`);
        got.logprobs.forEach((lp, j) => assert.ok(Math.abs(lp - w.logprobs[j]!) < 1e-4, `request ${i}, token ${j}: logprob ${lp} vs ${w.logprobs[j]}`));
      });
      const reasons = want.outcomes!.map((o) => o.reason);
      assert.equal(reasons[2], 'cancelled');
      assert.equal(reasons[3], 'stop');
      assert.deepEqual(want.outcomes![3]!.tokens.length, 4);
      assert.deepEqual(want.outcomes![6], { tokens: [], logprobs: [], reason: 'cancelled' });
      assert.ok(new Set(want.outcomes!.flatMap((o) => o.tokens)).size > 5, 'the model does not repeat one token');
      assert.deepEqual(follower!.follow!.submitted, REQUESTS.length);
      assert.equal(follower!.steps, leader!.steps, 'the follower ran the leader\'s engine steps');
      for (const r of [leader!, follower!]) {
        assert.deepEqual([r.blocksUsed, r.running, r.waiting], [0, 0, 0], `rank ${r.rank}: no request or KV block is left`);
      }
    });
  }
}

test('a cancel made inside a step reaches the follower where the leader applies it (free-block order kept)', async () => {
  // A is cancelled from inside onToken in the very step where B, behind it, retires at its length limit.
  // Applied at once, A's blocks would be freed before B's on the leader but after them on the follower,
  // and C would get different blocks on the two ranks: the follower's check would fail.
  const requests: ScheduledRequest[] = [
    { prompt: [1, 2, 3, 4, 5, 6], maxTokens: 10, submitAtStep: 0, cancelAfterTokens: 3 },
    { prompt: [7, 8, 9, 10, 11, 12], maxTokens: 3, submitAtStep: 0 },
    { prompt: Array.from({ length: 18 }, (_, i) => 13 + i), maxTokens: 4, submitAtStep: 6 },
  ];
  const input: TpServeInput = { dir: dirs.get('GPT-2')!, engine: { maxLen: 32, maxRunning: 4, blockSize: 4, numBlocks: 8 }, requests };
  const want = singleProcessRun(input);
  assert.deepEqual(want.outcomes!.map((o) => [o.tokens.length, o.reason]), [[3, 'stop'], [3, 'length'], [4, 'length']]);
  const [leader, follower] = await runInProcessRanks<TpServeInput, TpServeOutput>(2, fixtures, 'tpServeRank', input);
  assert.deepEqual(leader!.outcomes!.map((o) => o.tokens), want.outcomes!.map((o) => o.tokens));
  assert.equal(follower!.blocksUsed, 0);
});

test('the small-pool schedule does preempt', () => {
  // The preemption setting above must preempt, or it would test nothing more than the first.
  for (const m of MODELS) {
    const model = loadDecoderModel(dirs.get(m.name)!, new CpuBackend(), { dtype: 'f32' }).model;
    const engine = new ServingEngine(model, SETTINGS[1]![1]);
    runSchedule(engine, REQUESTS);
    assert.ok(engine.stats().preemptions > 0, `${m.name}: preempted`);
    engine.dispose();
    model.free();
  }
});

test('the HTTP server on a leader answers as on one engine (greedy, seeded sampling, a stop string)', async () => {
  const input: HttpInput = {
    dir: dirs.get('Llama GQA')!, engine: { maxRunning: 4, maxBatchTokens: 16, blockSize: 4 },
    bodies: [
      { prompt: [5, 17, 200, 3, 99], max_tokens: 8, temperature: 0 },
      { prompt: [5, 17, 200, 3, 99, 42], max_tokens: 6, temperature: 0.8, seed: 5 },
      { prompt: [31, 9, 150], max_tokens: 10, temperature: 0 },
    ],
    stopProbe: { prompt: 'Call me', maxTokens: 16 },
  };
  const [rank0, rank1] = await runInProcessRanks<HttpInput, HttpOutput>(2, fixtures, 'tpHttpRank', input);
  assert.equal(rank0!.stop!.length, 2, 'the probe generated some text');
  assert.deepEqual(rank0!.tensorParallel, rank0!.plain);
  for (const a of rank0!.plain!) assert.equal(a.status, 200);
  assert.equal(rank0!.plain!.at(-1)!.finishReason, 'stop');
  assert.deepEqual([rank0!.blocksUsed, rank1!.blocksUsed], [0, 0]);
});

test('the wire format: commands and headers round-trip; malformed messages are refused by name', () => {
  const commands: EngineCommand[] = [
    { kind: 'submit', id: 'r0', prompt: [1, 2, 256], maxTokens: 7, sampling: { temperature: 0.1, topK: 50, topP: 0.95, repetitionPenalty: 1.3, seed: 2n ** 64n - 1n }, stopTokenIds: [256] },
    { kind: 'cancel', id: 'r0', reason: 'stop' },
    { kind: 'submit', id: 'r1', prompt: [3], maxTokens: 1, sampling: { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n }, stopTokenIds: [] },
    { kind: 'cancel', id: 'r1', reason: 'cancelled' },
  ];
  const { words, bytes } = encodeCommands(commands);
  assert.equal(words.length, Math.ceil(bytes / 4));
  assert.deepEqual(decodeCommands(words, bytes), commands);
  const header = { kind: 'stop' as const, payloadBytes: bytes, sequence: 2 ** 32 + 5, running: 3, waiting: 1, blocksUsed: 17, fingerprint: -123456789 };
  assert.deepEqual(decodeHeader(encodeHeader(header)), { ...header, sequence: 5 });
  assert.throws(() => decodeHeader(Int32Array.of(7, 0, 0, 0, 0, 0, 0)), /message kind 7 is neither 0 \(step\) nor 1 \(stop\)/);
  assert.throws(() => decodeCommands(words, bytes + 4), /announces \d+ payload bytes but \d+ arrived/);
  const one = (c: unknown) => { const e = new TextEncoder().encode(JSON.stringify([c])); const w = new Int32Array(Math.ceil(e.length / 4)); new Uint8Array(w.buffer).set(e); return () => decodeCommands(w, e.length); };
  assert.throws(one({ kind: 'resize', id: 'r2' }), /command 0 of the message has kind "resize"; expected submit or cancel/);
  assert.throws(one({ kind: 'cancel', id: 'r2', reason: 'bored' }), /has cancel reason "bored"/);
  assert.throws(one({ kind: 'submit', id: 'r2', prompt: [1], maxTokens: 2, stopTokenIds: [], sampling: { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 5 } }), /decimal seed/);
});

test('ranks given different engine options are refused, naming the option', async () => {
  const base = { maxLen: 48, maxRunning: 4, blockSize: 4 };
  const input: TpServeInput = { dir: dirs.get('GPT-2')!, engine: base, requests: REQUESTS.slice(0, 1), engineByRank: [base, { ...base, maxRunning: 3 }] };
  await assert.rejects(runInProcessRanks(2, fixtures, 'tpServeRank', input), /maxRunning differs between ranks \(from 3 to 4; rank \d has [34]\); every rank must be given the same options/);
});

test('a follower whose engine is out of step with the leader\'s fails with a clear error', async () => {
  const input: TpServeInput = { dir: dirs.get('GPT-2')!, engine: { maxLen: 48, blockSize: 4 }, requests: REQUESTS.slice(0, 2), followerStrays: true };
  await assert.rejects(runInProcessRanks(2, fixtures, 'tpServeRank', input), /rank 1: the leader's request r0 became r1 here; the ranks' engines are out of step/);
});

test('kvMemoryFraction: every rank takes the smallest rank\'s pool', async () => {
  const base = { maxLen: 48, maxRunning: 4, blockSize: 4 };
  const input: TpServeInput = { dir: dirs.get('GPT-2')!, engine: base, requests: REQUESTS.slice(0, 3), engineByRank: [{ ...base, kvMemoryFraction: 0.0002 }, { ...base, kvMemoryFraction: 0.0001 }] };
  const [rank0, rank1] = await runInProcessRanks<TpServeInput, TpServeOutput>(2, fixtures, 'tpServeRank', input);
  assert.equal(rank0!.numBlocks, rank1!.numBlocks);
  assert.deepEqual([rank0!.blocksUsed, rank1!.blocksUsed], [0, 0]);
});

test('the leader refuses what its followers could not apply, by name: structured outputs, logit_bias, frequency / presence penalties', () => {
  const backend = new CpuBackend();
  const model = loadDecoderModel(dirs.get('GPT-2')!, backend, { dtype: 'f32' }).model;
  const engine = new ServingEngine(model, { maxLen: 32, maxRunning: 2 });
  // Submitting broadcasts nothing (the log goes out with the next step), so rank 0's place is all the leader needs here.
  const leader = new ReplicatedLeader(engine, { rank: 0, worldSize: 2, backend } as unknown as Communicator);
  const base = { prompt: [1, 2, 3], maxTokens: 4, sampling: resolveSampling({}), stopTokenIds: [], onToken: () => {}, onFinish: () => {} };
  const vocabulary = new TokenVocabulary(Array.from({ length: model.vocabSize }, (_, i) => Uint8Array.of(i % 256)));
  assert.throws(() => leader.submit({ ...base, constraint: new JsonConstraint(anyJsonObject(), vocabulary, []) }), /structured outputs \(response_format\) are not supported with tensor-parallel serving/);
  assert.throws(() => leader.submit({ ...base, logitBias: [[5, 2]] }), /logit_bias is not supported with tensor-parallel serving/);
  assert.throws(() => leader.submit({ ...base, presencePenalty: 0.5 }), /frequency_penalty and presence_penalty are not supported with tensor-parallel serving/);
  assert.throws(() => leader.submit({ ...base, frequencyPenalty: -1 }), /frequency_penalty and presence_penalty are not supported/);
  assert.equal(engine.stats().running + engine.stats().waiting, 0, 'nothing reached the engine');
  engine.dispose();
  model.free();
});
