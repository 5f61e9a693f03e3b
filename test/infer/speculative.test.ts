// Speculative decoding on the CPU backend with tiny random GPT-2 / Llama folders: the engine's extend()
// against full recomputation; the acceptance rule's output distribution (chi-square against the target's,
// over a fixed set of seeds, so the statistics are deterministic; the draft's own distribution must fail
// the same test); greedy speculative output equal to plain greedy decoding; the target's KV cache after a
// rejection equal to a fresh prefill of the accepted prefix; reproducibility and errors.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generate } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { ResolvedSampling } from '../../src/infer/sampling.js';
import { emptySpeculativeStats, SpeculativeSession } from '../../src/infer/speculative.js';
import { DrawKind, drawFrom, expectedTokensPerPass, greedyToken, kthLargest, samplingDistribution, speculativeUniform, verifySampled } from '../../src/infer/speculative-accept.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';
import type { FolderOptions } from './hf-folder.js';
import { chiSquare, chiSquareBound as critical, nearDraftEdit } from './speculative-stats.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-spec-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();
const PROMPT = [72, 101, 108, 108, 111, 44, 32, 119];

function model(name: string, family: 'gpt2' | 'llama', config: Gpt2Config | LlamaConfig, seed: number, options: FolderOptions = {}): DecoderModel {
  const dir = join(root, name);
  writeModelFolder(dir, family, config, seed, options);
  return loadDecoderModel(dir, backend).model;
}

/** A draft close to the target (speculative-stats.ts's edit of its weights). */
function nearDraft(name: string, family: 'gpt2' | 'llama', config: Gpt2Config | LlamaConfig, seed: number, gain: number): DecoderModel {
  return model(name, family, config, seed, { edit: nearDraftEdit(family, gain) });
}

const sampled = (extra: Partial<ResolvedSampling> = {}): ResolvedSampling => ({ ...resolveSampling({ temperature: 1, topK: 8 }), ...extra });
const greedy = resolveSampling({ temperature: 0 });

test('acceptance rule: emitted tokens follow p for synthetic p and q (20000 fixed seeds), and the draft alone does not', () => {
  const p = Float64Array.from([0.05, 0.3, 0.1, 0.25, 0.2, 0.1]);
  const q = Float64Array.from([0.3, 0.1, 0.2, 0.05, 0.3, 0.05]);
  const bonus = Float64Array.from([0.5, 0.1, 0.1, 0.1, 0.1, 0.1]);
  const N = 20000, emitted = new Array(6).fill(0), drafted = new Array(6).fill(0);
  let accepted = 0;
  for (let s = 0; s < N; s++) {
    const seed = BigInt(s) * 0x9e3779b97f4a7c15n & ((1n << 64n) - 1n);
    const x = drawFrom(q, speculativeUniform(seed, 0, DrawKind.Draft));
    const v = verifySampled([x], [q], [p, bonus], seed, 0);
    drafted[x]++;
    emitted[v.accepted === 1 ? x : v.next]++;
    accepted += v.accepted;
  }
  const [stat, df] = chiSquare(emitted, p, N), [draftStat] = chiSquare(drafted, p, N);
  console.log(`# synthetic: chi2 = ${stat.toFixed(2)} (df ${df}, bound ${critical(df).toFixed(2)}); draft alone chi2 = ${draftStat.toFixed(0)}; acceptance ${(accepted / N).toFixed(4)}`);
  assert.ok(stat < critical(df), `chi2 ${stat} >= ${critical(df)}`);
  assert.ok(draftStat > 100 * critical(df), `the draft's own distribution should fail: chi2 ${draftStat}`);
  // P(accept) = Σ min(p, q) = 0.05 + 0.1 + 0.1 + 0.05 + 0.2 + 0.05 = 0.55.
  assert.ok(Math.abs(accepted / N - 0.55) < 4 * Math.sqrt(0.55 * 0.45 / N), `acceptance ${accepted / N}`);
});

test('acceptance rule: a two-token round emits (x1, x2) with the target joint p1(x1)·p2(x2) (20000 fixed seeds)', () => {
  // Position 0: p1, q1; position 1's distributions depend on the token at position 0 (a Markov chain).
  const p1 = Float64Array.from([0.5, 0.3, 0.2]), q1 = Float64Array.from([0.2, 0.3, 0.5]);
  const p2 = [Float64Array.from([0.1, 0.6, 0.3]), Float64Array.from([0.7, 0.2, 0.1]), Float64Array.from([0.3, 0.3, 0.4])];
  const q2 = [Float64Array.from([0.4, 0.4, 0.2]), Float64Array.from([0.2, 0.2, 0.6]), Float64Array.from([0.3, 0.3, 0.4])];
  const N = 20000, counts = new Array(9).fill(0);
  for (let s = 0; s < N; s++) {
    const seed = BigInt(1000003 * s + 17);
    // Round 1 drafts K = 2; on a rejection at position 0, round 2 drafts position 1 anew (K = 1).
    const x1 = drawFrom(q1, speculativeUniform(seed, 0, DrawKind.Draft));
    const x2 = drawFrom(q2[x1]!, speculativeUniform(seed, 1, DrawKind.Draft));
    const v = verifySampled([x1, x2], [q1, q2[x1]!], [p1, p2[x1]!, p1], seed, 0);
    let first: number, second: number;
    if (v.accepted === 0) {
      first = v.next;
      const y = drawFrom(q2[first]!, speculativeUniform(seed, 1, DrawKind.Draft));
      const w = verifySampled([y], [q2[first]!], [p2[first]!, p1], seed, 1);
      second = w.accepted === 1 ? y : w.next;
    } else {
      first = x1;
      second = v.accepted === 2 ? x2 : v.next;
    }
    counts[3 * first + second]++;
  }
  const joint = Float64Array.from({ length: 9 }, (_, i) => p1[Math.floor(i / 3)]! * p2[Math.floor(i / 3)]![i % 3]!);
  const [stat, df] = chiSquare(counts, joint, N);
  console.log(`# synthetic joint: chi2 = ${stat.toFixed(2)} (df ${df}, bound ${critical(df).toFixed(2)})`);
  assert.ok(stat < critical(df), `chi2 ${stat} >= ${critical(df)}`);
});

test('formula: E[tokens per target pass] = (1 − α^(K+1)) / (1 − α)', () => {
  assert.equal(expectedTokensPerPass(0, 4), 1);
  assert.equal(expectedTokensPerPass(1, 4), 5);
  assert.ok(Math.abs(expectedTokensPerPass(0.5, 3) - 1.875) < 1e-12);
});

for (const family of ['gpt2', 'llama'] as const) {
  const config = family === 'gpt2' ? TINY_GPT2 : TINY_LLAMA;

  test(`${family}: extend() logits equal promptLogits, in one pass and in chunks over the cache`, () => {
    const m = model(`${family}-extend`, family, config, 7);
    const engine = new DecodeEngine(m, { maxBatch: 2, maxLen: 16 });
    const V = m.vocabSize, reference = engine.promptLogits(PROMPT);
    const whole = engine.extend(1, 0, PROMPT);
    const chunked = [...engine.extend(0, 0, PROMPT.slice(0, 3)), ...engine.extend(0, 3, PROMPT.slice(3, 4)), ...engine.extend(0, 4, PROMPT.slice(4))];
    for (const ours of [whole, chunked]) {
      assert.equal(ours.length, PROMPT.length * V);
      let worst = 0;
      for (let i = 0; i < ours.length; i++) worst = Math.max(worst, Math.abs(ours[i]! - reference[i]!));
      assert.ok(worst < 1e-4, `max |diff| ${worst}`);
    }
    const last2 = engine.extend(0, 0, PROMPT, 2), tail = reference.subarray((PROMPT.length - 2) * V);
    assert.equal(last2.length, 2 * V);
    for (let i = 0; i < last2.length; i++) assert.ok(Math.abs(last2[i]! - tail[i]!) < 1e-4, `lastRows: logit ${i}`);
    assert.throws(() => engine.extend(0, 0, PROMPT, 9), /1 to 8 rows of logits, asked for 9/);
    // Device-side greedy picks equal the host's argmax of the same rows.
    const picks = engine.extendGreedy(0, 0, PROMPT, 5);
    assert.deepEqual(picks, Array.from({ length: 5 }, (_, i) => greedyToken(reference.subarray((PROMPT.length - 5 + i) * V, (PROMPT.length - 4 + i) * V), greedy, [])));
    // The graph engine's extendGreedy (a replayed decode-style pass over the cache row, captured on the
    // second call of a row count): the same picks as the eager pass, call after call, at new positions.
    const graphed = new DecodeEngine(m, { maxBatch: 2, maxLen: 16, graphs: true });
    graphed.extend(1, 0, PROMPT.slice(0, 3));
    engine.extend(1, 0, PROMPT.slice(0, 3));
    for (const [start, fed] of [[3, PROMPT.slice(3, 6)], [6, PROMPT.slice(6, 8).concat([5])], [4, [9, 17, 33]]] as const) {
      const eager = engine.extendGreedy(1, start, fed), replayed = graphed.extendGreedy(1, start, fed);
      assert.deepEqual(replayed, eager, `picks at ${start}`);
      assert.deepEqual(graphed.extendGreedy(1, start, fed, 2), eager.slice(1), 'the last rows only');
      // extend()'s logits through the replayed pass (its own graph per row count) against the eager pass.
      const want = engine.extend(1, start, fed, 2);
      for (let rep = 0; rep < 2; rep++) {
        const got = graphed.extend(1, start, fed, 2);
        assert.equal(got.length, want.length);
        let worst = 0;
        for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
        assert.ok(worst < 1e-4, `replayed extend logits at ${start}: max |diff| ${worst}`);
      }
    }
    // extendKeys writes the cache as extend does and reads nothing back: over positions first filled with
    // other tokens, the keys it writes give the prompt's own logits to the rows after them (twice each:
    // the graph engine replays a row count from its second call).
    for (const e of [engine, graphed]) {
      for (let rep = 0; rep < 2; rep++) {
        e.extend(0, 0, [11, 12, 13, 14, 15, 16]);
        assert.equal(e.extendKeys(0, 0, PROMPT.slice(0, 6)), undefined);
        const rest = e.extend(0, 6, PROMPT.slice(6)), want = reference.subarray(6 * V);
        let worst = 0;
        for (let i = 0; i < rest.length; i++) worst = Math.max(worst, Math.abs(rest[i]! - want[i]!));
        assert.ok(worst < 1e-4, `after extendKeys (${e === graphed ? 'graphs' : 'eager'}, call ${rep + 1}): max |diff| ${worst}`);
      }
    }
    assert.throws(() => graphed.extendGreedy(1, 14, [1, 2, 3]), /positions 14\.\.16; the cache holds positions 0\.\.15/);
    graphed.dispose();
    assert.throws(() => engine.extend(0, 14, [1, 2, 3]), /positions 14\.\.16; the cache holds positions 0\.\.15/);
    assert.throws(() => engine.extend(2, 0, [1]), /sequence 2/);
    assert.throws(() => engine.extend(0, 0, [V]), /outside the vocabulary/);
    engine.dispose();
    m.free();
  });

  test(`${family}: extendScored's probabilities equal tokenProbabilities of extend()'s rows and its logits stay on the device (eager and replayed)`, async () => {
    const m = model(`${family}-scored`, family, config, 7);
    const { samplingDistribution: distribution } = await import('../../src/infer/speculative-accept.js');
    const settings = sampled(), Vp = m.arch.paddedVocab, V = m.vocabSize;
    for (const graphs of [false, true]) {
      const engine = new DecodeEngine(m, { maxBatch: 1, maxLen: 16, graphs });
      engine.extend(0, 0, PROMPT.slice(0, 4));
      for (let call = 0; call < 3; call++) {  // a graph engine replays a row count from its second call
        const fed = PROMPT.slice(4, 7), scored = [3, 17, 40];
        const want = engine.extend(0, 4, fed, 3);
        const rows = engine.extendScored(0, 4, fed, 3, scored, settings);
        const probabilities = rows.probabilities();
        for (let i = 0; i < 3; i++) {
          const p = distribution(want.subarray(i * V, (i + 1) * V), settings, []);
          assert.ok(Math.abs(probabilities[i]! - p[scored[i]!]!) < 1e-5, `${graphs ? 'graphs' : 'eager'} call ${call}, row ${i}: ${probabilities[i]} vs ${p[scored[i]!]}`);
          const logits = backend.download(rows.logits(i)) as Float32Array;
          assert.deepEqual([rows.logits(i).shape, logits.length], [[1, Vp], Vp]);
          let worst = 0;
          for (let j = 0; j < V; j++) worst = Math.max(worst, Math.abs(logits[j]! - want[i * V + j]!));
          assert.ok(worst < 1e-4, `row ${i}'s logits: max |diff| ${worst}`);
        }
        assert.equal(rows.probabilities(), probabilities, 'read once');
        // A later scoring of as many rows overwrites the buffers: the unread earlier one says so.
        const first = engine.extendScored(0, 4, fed, 3, scored, settings);
        engine.extendScored(0, 4, fed, 3, scored, settings);
        assert.throws(() => first.probabilities(), /overwritten by a later extendScored of 3 rows/);
        assert.throws(() => rows.logits(3), /row 3 of 3 scored rows/);
      }
      engine.dispose();
    }
    m.free();
  });

  test(`${family}: greedy speculative output equals plain greedy decoding (unrelated, near and identical drafts)`, async () => {
    const target = model(`${family}-greedy-target`, family, config, 7);
    const drafts = [
      model(`${family}-greedy-other`, family, { ...config, layers: 1 }, 99),
      nearDraft(`${family}-greedy-near`, family, config, 7, 0.8),
      target,
    ];
    const plain: number[] = [];
    for await (const t of generate(target, PROMPT, { maxNewTokens: 40, temperature: 0, stopTokenIds: [] })) plain.push(t);
    assert.equal(plain.length, 40);
    const rates: number[] = [];
    for (const draft of drafts) {
      const stats = emptySpeculativeStats();
      const ours: number[] = [];
      for await (const t of generate(target, PROMPT, { maxNewTokens: 40, temperature: 0, stopTokenIds: [], speculative: { draft, draftTokens: 3, stats } })) ours.push(t);
      assert.deepEqual(ours, plain);
      assert.equal(stats.emitted, 40);
      assert.equal(stats.targetPasses, stats.rounds);
      rates.push(stats.accepted / stats.drafted);
    }
    assert.equal(rates[2], 1, 'the target as its own draft accepts everything');
    // Sampling with the target as its own draft: q = p (to rounding), so every draft token is accepted —
    // which also checks the draft's cache after each round's rollback (a wrong cache would change q).
    const sampledStats = emptySpeculativeStats();
    const sampledOut: number[] = [];
    for await (const t of generate(target, PROMPT, { maxNewTokens: 40, temperature: 1, topK: 20, seed: 9, stopTokenIds: [], speculative: { draft: target, draftTokens: 3, stats: sampledStats } })) sampledOut.push(t);
    assert.equal(sampledOut.length, 40);
    assert.equal(sampledStats.accepted, sampledStats.drafted);
    // The same with the acceptance test scored on the device (the draft drawing on its decode path, its
    // cache rewound and caught up each round); with a repetition penalty that path steps aside for the
    // host's, so the output equals the host path's token for token.
    const scoredStats = emptySpeculativeStats(), scoredOut: number[] = [];
    for await (const t of generate(target, PROMPT, { maxNewTokens: 40, temperature: 1, topK: 20, seed: 9, stopTokenIds: [], speculative: { draft: target, draftTokens: 3, stats: scoredStats, deviceAcceptance: true } })) scoredOut.push(t);
    assert.equal(scoredOut.length, 40);
    assert.equal(scoredStats.accepted, scoredStats.drafted);
    const withPenalty = async (deviceAcceptance: boolean) => {
      const out: number[] = [];
      for await (const t of generate(target, PROMPT, { maxNewTokens: 16, temperature: 1, topK: 20, repetitionPenalty: 1.3, seed: 4, stopTokenIds: [], speculative: { draft: drafts[0]!, draftTokens: 2, deviceAcceptance } })) out.push(t);
      return out;
    };
    assert.deepEqual(await withPenalty(true), await withPenalty(false));
    // With a repetition penalty the greedy picks are made on the host (history-dependent): still plain greedy's.
    const penalised = { maxNewTokens: 24, temperature: 0, repetitionPenalty: 1.5, stopTokenIds: [] };
    const plainPenalised: number[] = [], oursPenalised: number[] = [];
    for await (const t of generate(target, PROMPT, penalised)) plainPenalised.push(t);
    for await (const t of generate(target, PROMPT, { ...penalised, speculative: { draft: drafts[1]!, draftTokens: 3 } })) oursPenalised.push(t);
    assert.deepEqual(oursPenalised, plainPenalised);
    assert.notDeepEqual(plainPenalised, plain.slice(0, 24), 'the penalty should change the output');
    assert.ok(rates[0]! < 0.5, `an unrelated draft should be rejected mostly: ${rates[0]}`);
    for (const m of new Set([target, ...drafts])) m.free();
  });

  test(`${family}: target KV cache after a rejection equals a fresh prefill of the accepted prefix`, () => {
    const target = model(`${family}-rollback-target`, family, config, 7);
    const draft = nearDraft(`${family}-rollback-draft`, family, config, 7, 0.5);
    const session = new SpeculativeSession(target, draft, PROMPT, 24, sampled({ seed: 5n }), [], { draftTokens: 4, adaptive: false });
    // Run rounds until one rejects a draft token (its keys were written past the accepted length).
    let rejected = false;
    while (!session.done && !rejected) {
      const before = session.stats.accepted;
      const drafted = session.stats.drafted;
      session.round();
      rejected = session.stats.accepted - before < session.stats.drafted - drafted;
    }
    assert.ok(rejected, 'no round rejected a draft token');
    const tv = session.targetCachedLength, arch = target.arch;
    assert.equal(tv, session.tokens.length - 1);
    const fresh = new DecodeEngine(target, { maxBatch: 1, maxLen: session.targetEngine.maxLen });
    fresh.start([{ prompt: session.tokens.slice(0, tv), maxNewTokens: 1, sampling: greedy }], []);
    const ours = backend.download(session.targetEngine.cache.storage) as Float32Array;
    const theirs = backend.download(fresh.cache.storage) as Float32Array;
    const L = fresh.maxLen, d = arch.headDim;
    let worst = 0, scale = 0, compared = 0;
    // [layers][2][maxBatch = 1][Hkv][maxLen][d]: positions [0, tv) of every layer, k and v, head.
    for (let block = 0; block < arch.layers * 2 * arch.kvHeads; block++) {
      for (let i = block * L * d; i < (block * L + tv) * d; i++) {
        worst = Math.max(worst, Math.abs(ours[i]! - theirs[i]!));
        scale = Math.max(scale, Math.abs(theirs[i]!));
        compared++;
      }
    }
    assert.equal(compared, arch.layers * 2 * arch.kvHeads * tv * d);
    assert.ok(worst <= 1e-5 * scale, `max |diff| ${worst} (max |k|, |v| ${scale})`);
    // And the next round's target logits (the last token fed over the rolled-back cache) match the fresh engine's.
    const last = session.tokens[tv]!;
    const a = session.targetEngine.extend(0, tv, [last]), b = fresh.extend(0, tv, [last]);
    let diff = 0;
    for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    assert.ok(diff < 1e-4, `next logits differ by ${diff}`);
    fresh.dispose();
    session.dispose();
    target.free();
    draft.free();
  });
}

test('engine.rewind: decoding after a rollback equals decoding the prefix from scratch', () => {
  const m = model('rewind', 'llama', TINY_LLAMA, 7);
  const engine = new DecodeEngine(m, { maxBatch: 1, maxLen: 32 });
  engine.start([{ prompt: PROMPT, maxNewTokens: 20, sampling: greedy }], []);
  engine.decode(7);
  const first = engine.collect()[0]!.tokens;
  assert.equal(first.length, 8);
  // Keep 3 generated tokens and replace the 4th: the cache holds positions < PROMPT.length + 3 for it.
  const history = [...PROMPT, ...first.slice(0, 3), (first[3]! + 1) % m.vocabSize];
  engine.rewind(0, history);
  assert.deepEqual(engine.lengths, [history.length]);
  engine.decode(5);
  const resumed = engine.collect()[0]!.tokens;
  const fresh = new DecodeEngine(m, { maxBatch: 1, maxLen: 32 });
  fresh.start([{ prompt: history, maxNewTokens: 20, sampling: greedy }], []);
  fresh.decode(4);
  assert.deepEqual(resumed, fresh.collect()[0]!.tokens);
  assert.throws(() => { engine.decode(1); engine.rewind(0, history); }, /collected first/);
  engine.collect();
  assert.throws(() => engine.rewind(0, new Array(32).fill(1)), /1 to 31 tokens/);
  fresh.dispose();
  engine.dispose();
  m.free();
});

for (const [label, deviceAcceptance, graphs] of [['host acceptance', false, false], ['scored on the device, eager', true, false], ['scored on the device, graphs', true, true]] as const) {
test(`sampled speculative decoding (${label}): the first token over 1200 fixed seeds follows the target (chi-square), reproducibly`, () => {
  const target = model('chi-target', 'gpt2', TINY_GPT2, 7);
  const draft = nearDraft('chi-draft', 'gpt2', TINY_GPT2, 7, 0.6);
  const settings = sampled();
  const V = target.vocabSize;
  const probe = new DecodeEngine(target, { maxBatch: 1, maxLen: 16 });
  const logits = probe.promptLogits(PROMPT);
  const p = samplingDistribution(logits.subarray((PROMPT.length - 1) * V), settings, PROMPT);
  const draftProbe = new DecodeEngine(draft, { maxBatch: 1, maxLen: 16 });
  const dl = draftProbe.promptLogits(PROMPT);
  const q = samplingDistribution(dl.subarray((PROMPT.length - 1) * V), settings, PROMPT);
  probe.dispose();
  draftProbe.dispose();
  const engines = { target: new DecodeEngine(target, { maxBatch: 1, maxLen: 16, graphs }), draft: new DecodeEngine(draft, { maxBatch: 1, maxLen: 16, graphs }) };
  const N = 1200, counts = new Array(V).fill(0), stats = emptySpeculativeStats();
  const runs: number[][] = [];
  for (let s = 0; s < N; s++) {
    const session = new SpeculativeSession(target, draft, PROMPT, 3, { ...settings, seed: BigInt(s) }, [], { draftTokens: 2, adaptive: false, engines, stats, deviceAcceptance });
    const out = session.round();
    counts[out[0]!]++;
    if (s < 5) { while (!session.done) session.round(); runs.push(session.tokens.slice(PROMPT.length)); }
  }
  const [stat, df] = chiSquare(counts, p, N), [draftStat] = chiSquare(counts, q, N);
  let tv = 0;
  for (let j = 0; j < V; j++) tv += Math.abs(p[j]! - q[j]!) / 2;
  console.log(`# tiny GPT-2, T = 1, top-k 8, K = 2, ${label}: chi2 vs target = ${stat.toFixed(2)} (df ${df}, bound ${critical(df).toFixed(2)}); vs draft = ${draftStat.toFixed(1)}; TV(p, q) = ${tv.toFixed(3)}; α = ${(stats.accepted / stats.drafted).toFixed(3)}`);
  assert.ok(stat < critical(df), `chi2 ${stat} >= ${critical(df)}`);
  assert.ok(draftStat > critical(df), `the draft's distribution should be told apart: chi2 ${draftStat}`);
  assert.ok(stats.accepted > 0 && stats.accepted < stats.drafted, 'both acceptances and rejections should occur');
  // The same seeds give the same tokens.
  for (let s = 0; s < runs.length; s++) {
    const session = new SpeculativeSession(target, draft, PROMPT, 3, { ...settings, seed: BigInt(s) }, [], { draftTokens: 2, adaptive: false, engines, deviceAcceptance });
    while (!session.done) session.round();
    assert.deepEqual(session.tokens.slice(PROMPT.length), runs[s]);
  }
  engines.target.dispose();
  engines.draft.dispose();
  target.free();
  draft.free();
});
}

test('sampled speculative decoding with a draft of another dtype takes the host\'s path (no row-width mismatch on the device), reproducibly', async () => {
  const target = model('dtype-target', 'gpt2', TINY_GPT2, 7);
  // Other weights (rejections happen, so residual draws read a draft row), stored in bf16.
  model('dtype-draft', 'gpt2', TINY_GPT2, 3).free();
  const draft = loadDecoderModel(join(root, 'dtype-draft'), backend, { dtype: 'bf16' }).model;
  const run = async (stats = emptySpeculativeStats()) => {
    const out: number[] = [];
    for await (const t of generate(target, PROMPT, { maxNewTokens: 12, temperature: 1, topK: 20, seed: 5, stopTokenIds: [], speculative: { draft, draftTokens: 2, stats } })) out.push(t);
    return out;
  };
  const stats = emptySpeculativeStats();
  const first = await run(stats);
  assert.equal(first.length, 12);
  assert.ok(stats.accepted < stats.drafted, `${stats.accepted} of ${stats.drafted} accepted: a residual was drawn`);
  assert.deepEqual(await run(), first);
  draft.free();
  target.free();
});

test('speculative decoding: stop ids, limits and errors', async () => {
  const target = model('err-target', 'gpt2', TINY_GPT2, 7);
  const other = model('err-other', 'gpt2', { ...TINY_GPT2, vocabSize: 300 }, 3);
  const plain: number[] = [];
  for await (const t of generate(target, PROMPT, { maxNewTokens: 12, temperature: 0, stopTokenIds: [] })) plain.push(t);
  const stopAt = plain[5]!, firstStop = plain.indexOf(stopAt);
  const ours: number[] = [];
  for await (const t of generate(target, PROMPT, { maxNewTokens: 12, temperature: 0, stopTokenIds: [stopAt], speculative: { draft: target, draftTokens: 4 } })) ours.push(t);
  assert.deepEqual(ours, plain.slice(0, firstStop + 1));
  // Short limits: K is cut to the tokens left (K = 0 at the last token: a target pass alone).
  for (const maxNewTokens of [1, 2, 3]) {
    for (const temperature of [0, 1]) {
      const out: number[] = [];
      for await (const t of generate(target, PROMPT, { maxNewTokens, temperature, seed: 4, stopTokenIds: [], speculative: { draft: target, draftTokens: 4 } })) out.push(t);
      assert.equal(out.length, maxNewTokens);
      if (temperature === 0) assert.deepEqual(out, plain.slice(0, maxNewTokens));
    }
  }
  await assert.rejects(async () => { for await (const _ of generate(target, PROMPT, { maxNewTokens: 4, speculative: { draft: other } })) void _; }, /vocabulary of 300 tokens, the target .* 257/);
  await assert.rejects(async () => { for await (const _ of generate(target, PROMPT, { maxNewTokens: 4, speculative: { draft: target, draftTokens: 0 } })) void _; }, /draftTokens must be a positive integer/);
  target.free();
  other.free();
});

test('fuseformer generate --draft: greedy text equals plain greedy text; bad options are named', () => {
  const dirs = ['cli-target', 'cli-draft'].map((n) => join(root, n));
  writeModelFolder(dirs[0]!, 'gpt2', TINY_GPT2, 7);
  writeModelFolder(dirs[1]!, 'gpt2', { ...TINY_GPT2, layers: 1 }, 8);
  const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
  const cli = (extra: string[]) => spawnSync(process.execPath, [main, 'generate', '--model', dirs[0]!, '--prompt', 'Hello', '--max-tokens', '16', '--temperature', '0', '--backend', 'cpu', ...extra], { encoding: 'utf8' });
  const plain = cli([]), spec = cli(['--draft', dirs[1]!, '--draft-tokens', '3']);
  assert.equal(plain.status, 0, plain.stderr);
  assert.equal(spec.status, 0, spec.stderr);
  assert.equal(spec.stdout, plain.stdout);
  assert.match(spec.stderr, /speculative: \d+ target passes, \d+\/\d+ draft tokens accepted/);
  const bad = cli(['--draft-tokens', '3']);
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /need --draft DIR/);
  const zero = cli(['--draft', dirs[1]!, '--speculative-k', '0']);
  assert.match(zero.stderr, /--speculative-k must be a positive integer/);
});

test('kthLargest (top-k threshold) equals the sorted k-th largest, ties counted', () => {
  let s = 3;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s; };
  for (const n of [10, 257, 5000]) {
    const z = Float32Array.from({ length: n }, () => (next() % 97) / 7 - 5);
    const sorted = Float32Array.from(z).sort();
    for (const k of [1, 2, 5, 50, Math.floor(n / 9), n - 1]) if (k >= 1 && k < n) assert.equal(kthLargest(z, k), sorted[n - k], `n ${n}, k ${k}`);
  }
});

/** samplingDistribution written the plain way (every row value sorted for top-p), the oracle of the one that sorts only above a cutoff. */
function plainDistribution(logits: Float32Array, sampling: ResolvedSampling, history: readonly number[]): Float64Array {
  const V = logits.length, z = Float32Array.from(logits);
  if (sampling.repetitionPenalty !== 1) for (const t of new Set(history)) z[t] = z[t]! > 0 ? z[t]! / sampling.repetitionPenalty : z[t]! * sampling.repetitionPenalty;
  for (let j = 0; j < V; j++) z[j] = z[j]! / sampling.temperature;
  const kThreshold = sampling.topK > 0 && sampling.topK < V ? Float32Array.from(z).sort()[V - sampling.topK]! : -Infinity;
  let max = -Infinity;
  for (const v of z) if (v >= kThreshold && v > max) max = v;
  const w = new Float64Array(V);
  let total = 0;
  for (let j = 0; j < V; j++) if (z[j]! >= kThreshold) { w[j] = Math.exp(z[j]! - max); total += w[j]!; }
  let tau = -Infinity;
  if (sampling.topP < 1) {
    const sorted = Float32Array.from(z.filter((_, j) => w[j]! > 0)).sort();
    let mass = 0;
    for (let i = sorted.length - 1; i >= 0; i--) {
      mass += Math.exp(sorted[i]! - max);
      if ((i === 0 || sorted[i - 1] !== sorted[i]) && mass >= sampling.topP * total) { tau = sorted[i]!; break; }
    }
  }
  let sum = 0;
  for (let j = 0; j < V; j++) { if (z[j]! < tau) w[j] = 0; sum += w[j]!; }
  return w.map((x) => x / sum);
}

test('samplingDistribution equals the plain computation bit for bit: peaked and flat rows, ties, top-k, top-p (its sort above a cutoff), repetition penalty', () => {
  let s = 5;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s / 2 ** 32; };
  const rows: [string, Float32Array][] = [];
  for (const V of [9, 300, 50257]) {
    rows.push([`flat V ${V}`, Float32Array.from({ length: V }, () => Math.floor(next() * 40) / 8)]);  // ties
    rows.push([`peaked V ${V}`, Float32Array.from({ length: V }, (_, j) => (j % 97 === 3 ? 12 : 0) + 3 * Math.log(next() + 1e-9))]);
  }
  for (const [name, logits] of rows) {
    for (const settings of [{ temperature: 1 }, { temperature: 0.7, topK: 0, topP: 0.9 }, { temperature: 1.2, topK: 0, topP: 0.5 }, { temperature: 0.9, topK: 7, topP: 0.95 }, { temperature: 1, topK: 0, topP: 0.999, repetitionPenalty: 1.3 }, { temperature: 1, topK: 0, topP: 1 }]) {
      const sampling = resolveSampling({ ...settings, seed: 1 }), history = [0, 2, 2, logits.length - 1];
      const ours = samplingDistribution(logits, sampling, history), plain = plainDistribution(logits, sampling, history);
      const first = ours.findIndex((x, j) => !Object.is(x, plain[j]));
      assert.equal(first, -1, `${name} ${JSON.stringify(settings)}: index ${first}: ${ours[first]} vs ${plain[first]}`);
    }
  }
});

for (const [topK, topP] of [[20, 0.9], [0, 0.8]] as const) test(`samplingDistribution is what sampleTokens draws from (T 0.7, top-k ${topK}, top-p ${topP}, repetition penalty 1.3; 4000 rows)`, () => {
  const V = 64, B = 4000, L = 8;
  let s = 11;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s / 2 ** 32; };
  const row = Float32Array.from({ length: V }, () => 4 * next() - 2);
  const history = [3, 5, 9, 3, 60];
  const settings: ResolvedSampling = { temperature: 0.7, topK, topP, repetitionPenalty: 1.3, seed: 0n };
  const p = samplingDistribution(row, settings, history);
  const logits = new Float32Array(B * V), params = new Float32Array(B * 4), seeds = new Int32Array(B * 2), hist = new Int32Array(B * L);
  for (let b = 0; b < B; b++) {
    logits.set(row, b * V);
    params.set([0.7, topK, topP, 1.3], 4 * b);
    seeds.set([b * 7919 + 1, b], 2 * b);
    hist.set(history, b * L);
  }
  const t = (data: Float32Array | Int32Array, shape: number[]) => { const x = backend.empty(shape, data instanceof Float32Array ? 'f32' : 'i32'); backend.upload(x, data); return x; };
  const tokens = t(new Int32Array(B), [B]);
  backend.sampleTokens({
    logits: t(logits, [B, V]), params: t(params, [B, 4]), seeds: t(seeds, [B, 2]), positions: t(new Int32Array(B).fill(history.length - 1), [B]),
    history: t(hist, [B, L]), tokens, finished: t(new Int32Array(B), [B]), limits: t(new Int32Array(B).fill(L), [B]), stopIds: t(new Int32Array(16).fill(-1), [16]),
  });
  const drawn = backend.download(tokens) as Int32Array, counts = new Array(V).fill(0);
  for (const x of drawn) counts[x]++;
  const [stat, df] = chiSquare(counts, p, B);
  console.log(`# sampleTokens vs samplingDistribution: chi2 = ${stat.toFixed(2)} (df ${df}, bound ${critical(df).toFixed(2)}), ${p.filter((x) => x > 0).length} tokens kept`);
  assert.ok(stat < critical(df), `chi2 ${stat} >= ${critical(df)}`);
  assert.ok(p.filter((x) => x > 0).length < Math.min(20, V / 2), 'top-p should cut the set here');
});
