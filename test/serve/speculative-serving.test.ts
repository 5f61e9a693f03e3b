// Speculative decoding in the serving engine, on the CPU backend with tiny random GPT-2 and Llama folders:
// with a draft model, greedy output equals the engine's without one (continuous batching, prefix sharing,
// preemption), stop tokens and logprobs behave as without a draft, seeded sampling does not depend on the
// batch, a draft equal to the target has every token accepted (the draft and the target condition on the
// same prefix at the same position), and no block leaks.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions, TokenEvent } from '../../src/serve/engine.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import { chiSquare, chiSquareBound, secondTokenLaw } from '../infer/speculative-stats.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-serve-spec-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();

/** The target (seed 11), and a draft: the same weights with 30% relative noise on every matrix (it agrees often, not always). */
function load(family: 'gpt2' | 'llama', role: 'target' | 'draft'): DecoderModel {
  const dir = join(root, `${family}-${role}`);
  let s = 977;
  const noise = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  writeModelFolder(dir, family, family === 'gpt2' ? TINY_GPT2 : TINY_LLAMA, 11, role === 'target' ? {} : {
    edit: (weights) => { for (const t of weights.values()) if (t.shape.length === 2) for (let i = 0; i < t.data.length; i++) t.data[i] = t.data[i]! * (1 + 0.3 * noise()); },
  });
  return loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
}
const models = { gpt2: { target: load('gpt2', 'target'), draft: load('gpt2', 'draft') }, llama: { target: load('llama', 'target'), draft: load('llama', 'draft') } };

const shared = [12, 40, 7, 99, 3, 18, 201, 5, 77, 64, 9, 33, 1, 2, 150, 8, 42];
const PROMPTS: number[][] = [shared.slice(0, 13), [...shared, 70, 71], [5, 6], [...shared.slice(0, 16), 250, 251, 252], shared.slice(0, 16)];
const MAX_TOKENS = [20, 14, 30, 9, 17];

interface Outcome { tokens: number[]; reason: FinishReason | undefined; events: TokenEvent[] }

function runAll(model: DecoderModel, options: ServingEngineOptions, sampling: SamplingOptions = {}, indices = PROMPTS.map((_, i) => i), extra: { logprobs?: number; stop?: number[] } = {}): { outcomes: Outcome[]; engine: ServingEngine } {
  const engine = new ServingEngine(model, options);
  const outcomes = indices.map((i) => {
    const o: Outcome = { tokens: [], reason: undefined, events: [] };
    engine.submit({
      prompt: PROMPTS[i]!, maxTokens: MAX_TOKENS[i]!, sampling: resolveSampling({ ...sampling, seed: 1000 + i }), stopTokenIds: extra.stop ?? [],
      ...(extra.logprobs ? { logprobs: extra.logprobs } : {}),
      onToken: (e) => { o.tokens.push(e.token); o.events.push(e); }, onFinish: (r) => { o.reason = r; },
    });
    return o;
  });
  engine.runToCompletion();
  return { outcomes, engine };
}

const settings: [string, ServingEngineOptions][] = [
  ['chunked prefill + prefix sharing', { maxRunning: 4, maxBatchTokens: 12, blockSize: 4 }],
  ['preemption (a pool of 20 blocks)', { maxRunning: 5, maxBatchTokens: 32, blockSize: 4, numBlocks: 20 }],
];

for (const family of ['gpt2', 'llama'] as const) {
  const { target, draft } = models[family];
  const plain = runAll(target, { maxRunning: 1, maxBatchTokens: 64, prefixCaching: false });
  plain.engine.dispose();

  for (const [name, options] of settings) {
    test(`${family}: greedy with a draft model equals greedy without one (${name})`, () => {
      for (const [which, draftModel] of [['perturbed draft', draft], ['draft = target', target]] as const) {
        const { outcomes, engine } = runAll(target, { ...options, speculative: { draft: draftModel } });
        outcomes.forEach((o, i) => {
          assert.deepEqual(o.tokens, plain.outcomes[i]!.tokens, `${which}, request ${i}`);
          assert.equal(o.reason, 'length');
        });
        const s = engine.stats();
        assert.ok(s.speculativeRounds > 0 && s.draftedTokens > 0, `${which}: speculative rounds ran`);
        if (draftModel === target) assert.equal(s.acceptedTokens, s.draftedTokens, 'a draft equal to the target has every token accepted');
        else assert.ok(s.acceptedTokens > 0 && s.acceptedTokens < s.draftedTokens, `${which}: some accepted, some not (${s.acceptedTokens} of ${s.draftedTokens})`);
        if (name.startsWith('preemption')) assert.ok(s.preemptions > 0, 'requests were preempted');
        else assert.ok(s.prefixHits > 0, 'the shared prompt prefix hit the cache');
        assert.equal(s.generatedTokens, outcomes.reduce((n, o) => n + o.tokens.length, 0));
        assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
        assert.equal(engine.hasWork, false);
        engine.dispose();
      }
    });
  }

  test(`${family}: seeded sampling with a draft does not depend on the batch; a draft equal to the target is always accepted (host's and device's rounds)`, () => {
    const sampling = { temperature: 0.9, topK: 40, topP: 0.95 };
    for (const [draftModel, deviceSampling] of [[draft, false], [target, false], [draft, true], [target, true]] as const) {
      const alone = PROMPTS.map((_, i) => {
        const r = runAll(target, { maxRunning: 1, maxBatchTokens: 64, speculative: { draft: draftModel, deviceSampling } }, sampling, [i]);
        r.engine.dispose();
        return r.outcomes[0]!.tokens;
      });
      const { outcomes, engine } = runAll(target, { maxRunning: 4, maxBatchTokens: 12, blockSize: 4, speculative: { draft: draftModel, deviceSampling } }, sampling);
      outcomes.forEach((o, i) => assert.deepEqual(o.tokens, alone[i], `request ${i}`));
      const s = engine.stats();
      if (draftModel === target) assert.equal(s.acceptedTokens, s.draftedTokens, 'p = q: every draft token accepted');
      assert.equal(engine.pool.usedBlocks, 0);
      engine.dispose();
    }
  });
}

test('stop tokens inside an accepted run end the request there; logprobs are the target\'s', () => {
  const { target, draft } = models.llama;
  const reference = runAll(target, { maxRunning: 2 }, {}, [2], { logprobs: 3 });
  reference.engine.dispose();
  const free = reference.outcomes[0]!;
  const withDraft = runAll(target, { maxRunning: 2, speculative: { draft: target } }, {}, [2], { logprobs: 3 });
  const got = withDraft.outcomes[0]!;
  assert.deepEqual(got.tokens, free.tokens);
  got.events.forEach((e, i) => {
    const r = free.events[i]!;
    assert.ok(Math.abs(e.logprob! - r.logprob!) < 1e-4, `token ${i}: logprob ${e.logprob} vs ${r.logprob}`);
    assert.deepEqual(e.top!.map((t) => t.token), r.top!.map((t) => t.token));
  });
  withDraft.engine.dispose();
  const stop = free.tokens[7]!, first = free.tokens.indexOf(stop);
  const stopped = runAll(target, { maxRunning: 2, speculative: { draft, draftTokens: 6 } }, {}, [2], { stop: [stop] });
  assert.deepEqual(stopped.outcomes[0]!.tokens, free.tokens.slice(0, first + 1));
  assert.equal(stopped.outcomes[0]!.reason, 'stop');
  assert.equal(stopped.engine.pool.usedBlocks, 0);
  stopped.engine.dispose();
});

test('greedy rounds draft and verify on the device\'s picks: no row of logits is read back (with logprobs, the rows are)', () => {
  const { target, draft } = models.gpt2, V = target.vocabSize;
  const largestDownload = (logprobs: number) => {
    const original = backend.download.bind(backend);
    let largest = 0;
    backend.download = (t) => { largest = Math.max(largest, t.numel); return original(t); };
    try {
      const { outcomes, engine } = runAll(target, { maxRunning: 4, maxBatchTokens: 12, blockSize: 4, speculative: { draft } }, {}, PROMPTS.map((_, i) => i), logprobs ? { logprobs } : {});
      assert.ok(engine.stats().draftedTokens > 0 && outcomes.every((o) => o.reason !== undefined));
      engine.dispose();
    } finally {
      backend.download = original;
    }
    return largest;
  };
  assert.ok(largestDownload(0) < V, 'greedy: ints only');
  assert.ok(largestDownload(2) >= V, 'with logprobs the rows come back');
});

test('sampled rounds on the device: the token a round emits follows the target (χ² over 1200 seeds), no row of logits read back; deviceSampling: false reads them', async () => {
  const { target, draft } = models.gpt2, V = target.vocabSize, prompt = PROMPTS[0]!;
  const sampling = resolveSampling({ temperature: 1, topK: 8 });
  // The second token's law (the first comes from the prefill's sampling, the second from a round with K = 1).
  const expected = await secondTokenLaw(target, prompt, sampling);
  const second = (deviceSampling: boolean, seeds: number) => {
    const original = backend.download.bind(backend);
    let largest = 0;
    backend.download = (t) => { largest = Math.max(largest, t.numel); return original(t); };
    const engine = new ServingEngine(target, { maxRunning: 16, maxBatchTokens: 64, blockSize: 4, speculative: { draft, deviceSampling } });
    const tokens: number[][] = Array.from({ length: seeds }, () => []);
    try {
      for (let i = 0; i < seeds; i++) {
        engine.submit({ prompt, maxTokens: 3, sampling: { ...sampling, seed: BigInt(7919 * i + 1) }, stopTokenIds: [], onToken: (e) => tokens[i]!.push(e.token), onFinish: () => {} });
      }
      engine.runToCompletion();
      const s = engine.stats();
      assert.ok(s.speculativeRounds >= seeds && s.acceptedTokens < s.draftedTokens, `${s.speculativeRounds} rounds, ${s.acceptedTokens} of ${s.draftedTokens} accepted`);
      assert.equal(engine.pool.usedBlocks, 0);
    } finally {
      backend.download = original;
      engine.dispose();
    }
    return { tokens: tokens.map((t) => t[1]!), largest };
  };
  const N = 1200, device = second(true, N);
  const counts = new Array<number>(V).fill(0);
  for (const t of device.tokens) counts[t]!++;
  const [stat, df] = chiSquare(counts, expected, N);
  console.log(`# serving, sampled rounds on the device: chi2 = ${stat.toFixed(2)} (df ${df}, bound ${chiSquareBound(df).toFixed(2)})`);
  assert.ok(stat < chiSquareBound(df), `chi2 ${stat} >= ${chiSquareBound(df)}`);
  assert.ok(device.largest < V, `the largest read is ${device.largest} values: no row of V = ${V} logits`);
  assert.ok(second(false, 4).largest >= V, 'the host\'s path reads rows');
});

test('a request with a repetition penalty decodes without a draft: its output is the penalised one, no rounds', () => {
  const { target, draft } = models.llama;
  for (const sampling of [{ repetitionPenalty: 1.4 }, { temperature: 0.8, topK: 20, repetitionPenalty: 1.2 }]) {
    const plainRun = runAll(target, { maxRunning: 3, maxBatchTokens: 32, blockSize: 4 }, sampling);
    const withDraft = runAll(target, { maxRunning: 3, maxBatchTokens: 32, blockSize: 4, speculative: { draft } }, sampling);
    withDraft.outcomes.forEach((o, i) => assert.deepEqual(o.tokens, plainRun.outcomes[i]!.tokens, `request ${i}, ${JSON.stringify(sampling)}`));
    assert.equal(withDraft.engine.stats().speculativeRounds, 0);
    plainRun.engine.dispose();
    withDraft.engine.dispose();
  }
});

test('K adapts per request, within maxDraftTokens and the tokens left', () => {
  const { target } = models.gpt2;
  const engine = new ServingEngine(target, { maxRunning: 1, maxBatchTokens: 64, speculative: { draft: target, draftTokens: 2, maxDraftTokens: 5 } });
  const out: number[] = [];
  engine.submit({ prompt: PROMPTS[2]!, maxTokens: 12, sampling: resolveSampling({}), stopTokenIds: [], onToken: (e) => out.push(e.token), onFinish: () => {} });
  const rounds: number[] = [];
  while (engine.hasWork) {
    const before = engine.stats().draftedTokens;
    engine.step();
    rounds.push(engine.stats().draftedTokens - before);
  }
  // Step 1 computes the prompt and samples token 1. Every round is accepted whole (the draft is the
  // target), so K goes 2 → 4 → 6, capped at 5; rounds emit K + 1 tokens: 3 (4 so far), 5 (9 so far), then
  // K is cut to the 3 tokens left − 1 = 2, and that round's 3 tokens end the request at 12.
  assert.deepEqual(rounds, [0, 2, 4, 2]);
  assert.equal(out.length, 12);
  assert.equal(engine.stats().speculativeRounds, 3);
  engine.dispose();
});

test('speculative settings are checked', () => {
  const { target } = models.gpt2;
  assert.throws(() => new ServingEngine(target, { speculative: { draft: target, draftTokens: 0 } }), /draftTokens must be a positive integer/);
  assert.throws(() => new ServingEngine(target, { speculative: { draft: target, maxDraftTokens: 1.5 } }), /maxDraftTokens must be a positive integer/);
  assert.throws(() => new ServingEngine(target, { maxBatchTokens: 1, speculative: { draft: target } }), /maxBatchTokens >= 2/);
  const folder = (name: string, config: typeof TINY_GPT2, on = backend) => {
    const dir = join(root, name);
    writeModelFolder(dir, 'gpt2', config, 3);
    return loadDecoderModel(dir, on, { dtype: 'f32' }).model;
  };
  assert.throws(() => new ServingEngine(target, { speculative: { draft: folder('gpt2-short', { ...TINY_GPT2, maxPositions: 32 }) } }), /32 positions, fewer than the context window \(maxLen 64\)/);
  assert.throws(() => new ServingEngine(target, { speculative: { draft: folder('gpt2-vocab', { ...TINY_GPT2, vocabSize: 300 }) } }), /vocabulary has 300 tokens, the target's 257/);
  assert.throws(() => new ServingEngine(target, { speculative: { draft: folder('gpt2-other-backend', TINY_GPT2, new CpuBackend()) } }), /on the target model's backend/);
});
