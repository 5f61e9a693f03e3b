// Constrained requests in the serving engine (structured outputs) on the CPU backend, with tiny GPT-2 and
// Llama models whose random weights know nothing of JSON: every answer the mask lets them write parses and fits
// its schema, and ends ('stop') at the closing brace. A request's tokens are the same alone and batched with
// others — chunked prefill, prefix sharing, pipelined steps, multi-step decoding and a draft model for the
// unconstrained ones beside it — greedy and seeded sampling; the unconstrained requests' tokens are unchanged.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { tokenByteTable } from '../../src/io/token-bytes.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import { anyJsonObject, compileJsonSchema } from '../../src/infer/structured/json-schema.js';
import type { GrammarNode } from '../../src/infer/structured/json-schema.js';
import { JsonConstraint, TokenVocabulary } from '../../src/infer/structured/token-mask.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions } from '../../src/serve/engine.js';
import { quietWhitespace, TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-constrained-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();
// Longer contexts than the usual tiny models: room for a JSON answer after a prompt; whitespace quietened (quietWhitespace).
function load(family: 'gpt2' | 'llama', seed: number, noise = 0): DecoderModel {
  const dir = join(root, `${family}-${seed}-${noise}`);
  let s = 31;
  const jitter = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  writeModelFolder(dir, family, family === 'gpt2' ? { ...TINY_GPT2, maxPositions: 400 } : { ...TINY_LLAMA, maxPositions: 400 }, seed, {
    edit: (weights) => {
      for (const t of weights.values()) if (noise > 0 && t.shape.length === 2) for (let i = 0; i < t.data.length; i++) t.data[i] = t.data[i]! * (1 + noise * jitter());
      quietWhitespace(family)(weights);
    },
  });
  return loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
}

const tokenizer = createByteTokenizer();
const EOS = 256;
const vocabulary = new TokenVocabulary(tokenByteTable(tokenizer, 257));
const SCHEMA = {
  type: 'object',
  properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 99 }, tag: { enum: ['x', 'yz', null] }, s: { type: 'string', maxLength: 5 }, list: { type: 'array', items: { type: 'integer', minimum: -9, maximum: 9 }, maxItems: 3 } },
  required: ['ok', 'n', 'tag', 's', 'list'],
};
const GRAMMARS: (GrammarNode | null)[] = [compileJsonSchema(SCHEMA), null, compileJsonSchema(SCHEMA), compileJsonSchema({ type: 'object', properties: { a: { type: 'boolean' } }, required: ['a'] }), null];
const PROMPTS = [[12, 40, 7, 99, 3], [12, 40, 7, 99, 3, 18], [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110], [12, 40, 7, 99, 3, 18, 201, 4], [9, 33, 1]];
const MAX_TOKENS = [380, 30, 380, 380, 25];

interface Outcome { tokens: number[]; reason: FinishReason | undefined }

function run(model: DecoderModel, options: ServingEngineOptions, sampling: SamplingOptions, indices = PROMPTS.map((_, i) => i)): { outcomes: Outcome[]; engine: ServingEngine } {
  const engine = new ServingEngine(model, options);
  const outcomes = indices.map((i) => {
    const o: Outcome = { tokens: [], reason: undefined };
    const grammar = GRAMMARS[i];
    engine.submit({
      prompt: PROMPTS[i]!, maxTokens: MAX_TOKENS[i]!, sampling: resolveSampling({ ...sampling, seed: 500 + i }), stopTokenIds: [EOS],
      ...(grammar ? { constraint: new JsonConstraint(grammar, vocabulary, [EOS]) } : {}),
      onToken: (e) => o.tokens.push(e.token), onFinish: (r) => { o.reason = r; },
    });
    return o;
  });
  engine.runToCompletion();
  assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
  return { outcomes, engine };
}

function assertValidAnswers(outcomes: Outcome[], what: string): void {
  outcomes.forEach((o, i) => {
    if (!GRAMMARS[i]) return;
    assert.equal(o.reason, 'stop', `${what}: request ${i} ended at its closing brace: ${JSON.stringify(Buffer.from(o.tokens.filter((t) => t < 256)).toString("latin1"))}`);
    const text = new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(o.tokens));
    const value = JSON.parse(text) as Record<string, unknown>;
    if (i === 3) {
      assert.equal(typeof value['a'], 'boolean', text);
      return;
    }
    assert.deepEqual(Object.keys(value), ['ok', 'n', 'tag', 's', 'list'], text);
    assert.equal(typeof value['ok'], 'boolean');
    assert.ok(Number.isInteger(value['n']) && (value['n'] as number) >= 0 && (value['n'] as number) <= 99, text);
    assert.ok(['x', 'yz', null].includes(value['tag'] as string | null), text);
    assert.ok(typeof value['s'] === 'string' && [...(value['s'] as string)].length <= 5, text);
    assert.ok(Array.isArray(value['list']) && (value['list'] as number[]).length <= 3 && (value['list'] as number[]).every((v) => Number.isInteger(v) && v >= -9 && v <= 9), text);
  });
}

for (const family of ['gpt2', 'llama'] as const) {
  const model = load(family, 3);
  for (const [kind, sampling] of [['greedy', {}], ['sampled', { temperature: 1.3, topK: 0 }], ['top-p', { temperature: 0.8, topP: 0.9, repetitionPenalty: 1.2 }]] as [string, SamplingOptions][]) {
    test(`${family} ${kind}: constrained answers are valid JSON of their schema, alone and batched (pipelined, chunked, multi-step)`, () => {
      const alone = PROMPTS.map((_, i) => {
        const r = run(model, { maxRunning: 1, maxBatchTokens: 400, prefixCaching: false, pipeline: false }, sampling, [i]);
        r.engine.dispose();
        return r.outcomes[0]!;
      });
      assertValidAnswers(alone, 'alone');
      for (const options of [
        { maxRunning: 4, maxBatchTokens: 12, blockSize: 4, pipeline: true },
        { maxRunning: 5, maxBatchTokens: 32, blockSize: 4, pipeline: false, decodeSteps: 4 },
      ] as ServingEngineOptions[]) {
        const { outcomes, engine } = run(model, options, sampling);
        assert.deepEqual(outcomes, alone, JSON.stringify(options));
        engine.dispose();
      }
    });
  }
}

test('a draft model speeds the unconstrained requests of a batch; the constrained ones decode without it, the same tokens', () => {
  const target = load('llama', 3), draft = load('llama', 3, 0.3);
  const alone = PROMPTS.map((_, i) => {
    const r = run(target, { maxRunning: 1, maxBatchTokens: 400, pipeline: false }, {}, [i]);
    r.engine.dispose();
    return r.outcomes[0]!;
  });
  const { outcomes, engine } = run(target, { maxRunning: 4, maxBatchTokens: 32, blockSize: 4, speculative: { draft } }, {});
  assert.deepEqual(outcomes, alone);
  assert.ok(engine.stats().speculativeRounds > 0, 'the unconstrained requests ran speculative rounds');
  engine.dispose();
});

test('json_object mode: any object; the constraint refuses a token it did not allow', () => {
  const model = load('gpt2', 8);
  const engine = new ServingEngine(model, { maxRunning: 2, maxBatchTokens: 64 });
  const o: Outcome = { tokens: [], reason: undefined };
  engine.submit({
    prompt: [1, 2, 3], maxTokens: 380, sampling: resolveSampling({ temperature: 1, seed: 4 }), stopTokenIds: [EOS],
    constraint: new JsonConstraint(anyJsonObject(), vocabulary, [EOS]), onToken: (e) => o.tokens.push(e.token), onFinish: (r) => { o.reason = r; },
  });
  engine.runToCompletion();
  const text = Buffer.from(o.tokens.filter((t) => t < 256)).toString('utf8');
  assert.ok(text.startsWith('{') || text.trimStart().startsWith('{'), text);
  if (o.reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
  engine.dispose();
  assert.throws(() => new ServingEngine(model, {}).submit({
    prompt: [1], maxTokens: 2, sampling: resolveSampling({}), stopTokenIds: [], constraint: {} as never, onToken: () => {}, onFinish: () => {},
  }), /constraint must have allowedTokens\(\), allows\(\) and accept\(\)/);
});

/** A request of the bias tests: a logit_bias, a grammar, frequency / presence penalties, each optional. */
interface BiasedRequest { prompt: number[]; sampling: SamplingOptions; bias?: [number, number][]; grammar?: GrammarNode; frequency?: number; presence?: number; maxTokens?: number }

/** The requests' tokens from one engine (24 tokens each unless said; seed 90 unless the sampling says), every block back. */
function runBiased(model: DecoderModel, options: ServingEngineOptions, requests: readonly BiasedRequest[]): number[][] {
  const engine = new ServingEngine(model, options);
  const out = requests.map((r) => {
    const tokens: number[] = [];
    engine.submit({
      prompt: r.prompt, maxTokens: r.maxTokens ?? 24, sampling: resolveSampling({ seed: 90, ...r.sampling }), stopTokenIds: [],
      ...(r.bias ? { logitBias: r.bias } : {}), ...(r.grammar ? { constraint: new JsonConstraint(r.grammar, vocabulary, [EOS]) } : {}),
      ...(r.frequency !== undefined ? { frequencyPenalty: r.frequency } : {}), ...(r.presence !== undefined ? { presencePenalty: r.presence } : {}),
      onToken: (e) => tokens.push(e.token), onFinish: () => {},
    });
    return tokens;
  });
  engine.runToCompletion();
  assert.equal(engine.pool.usedBlocks, 0);
  engine.dispose();
  return out;
}

test('logit_bias: −100 bans a token, +100 all but forces one; batched (pipelined, with constrained requests) equals alone', () => {
  const model = load('llama', 3);
  const runOne = (options: ServingEngineOptions, requests: BiasedRequest[]) => runBiased(model, options, requests);
  const prompt = [12, 40, 7, 99, 3];
  const [plain] = runOne({ maxRunning: 1 }, [{ prompt, sampling: {} }]);
  const banned = new Set(plain!.slice(0, 6));
  const [avoiding] = runOne({ maxRunning: 1 }, [{ prompt, sampling: {}, bias: [...banned].map((t): [number, number] => [t, -100]) }]);
  assert.ok(avoiding!.every((t) => !banned.has(t)), `${avoiding} avoids ${[...banned]}`);
  const [forced] = runOne({ maxRunning: 1 }, [{ prompt, sampling: { temperature: 1, topK: 0 }, bias: [[65, 100]] }]);
  assert.ok(forced!.filter((t) => t === 65).length >= 20, `${forced}`);
  const requests = [
    { prompt, sampling: {}, bias: [[65, 5], [66, -100]] as [number, number][] },
    { prompt: [9, 33, 1], sampling: { temperature: 0.9, topP: 0.9, seed: 1 }, bias: [[32, 3]] as [number, number][] },
    { prompt: [5, 6], sampling: { temperature: 0.7, seed: 2 } },
    { prompt: [100, 101, 102], sampling: { temperature: 1, seed: 3 }, bias: [[0x22, 2]] as [number, number][], grammar: anyJsonObject() },
  ];
  const alone = requests.map((r) => runOne({ maxRunning: 1, pipeline: false }, [r])[0]!);
  assert.deepEqual(runOne({ maxRunning: 4, maxBatchTokens: 12, blockSize: 4, pipeline: true }, requests), alone);
  assert.throws(() => new ServingEngine(model, {}).submit({ prompt, maxTokens: 2, sampling: resolveSampling({}), stopTokenIds: [], logitBias: [[3, 1], [3, 2]], onToken: () => {}, onFinish: () => {} }), /logitBias token 3 .* listed twice/);
});

test('frequency / presence penalties: each pick equals a one-token request whose logit_bias holds the penalties so far; batched equals alone', () => {
  const model = load('llama', 3);
  const runAll = (options: ServingEngineOptions, requests: BiasedRequest[]) => runBiased(model, options, requests);
  const prompt = [12, 40, 7, 99, 3];
  const [plain] = runAll({ maxRunning: 1 }, [{ prompt, sampling: {} }]);
  // A tiny random model repeats itself when greedy; a presence penalty of 2 breaks that.
  assert.ok(new Set(plain).size < plain!.length, `greedy repeats: ${plain}`);
  for (const [frequency, presence] of [[1.5, 0], [0, 2], [0.5, -0.5]] as const) {
    const [penalised] = runAll({ maxRunning: 1 }, [{ prompt, sampling: {}, frequency, presence, bias: [[65, 0.5]] }]);
    if (frequency > 0 || presence > 0) assert.notDeepEqual(penalised, plain);
    // Token i against a one-token request from prompt + the first i tokens, its logit_bias the penalties of those i tokens.
    penalised!.forEach((token, i) => {
      const counts = new Map<number, number>();
      for (const t of penalised!.slice(0, i)) counts.set(t, (counts.get(t) ?? 0) + 1);
      const bias = new Map<number, number>([[65, 0.5]]);
      for (const [t, c] of counts) bias.set(t, (bias.get(t) ?? 0) - c * frequency - presence);
      const [alone] = runAll({ maxRunning: 1 }, [{ prompt: [...prompt, ...penalised!.slice(0, i)], sampling: {}, bias: [...bias], maxTokens: 1 }]);
      assert.equal(alone![0], token, `frequency ${frequency}, presence ${presence}: token ${i}`);
    });
  }
  const requests: BiasedRequest[] = [
    { prompt, sampling: {}, frequency: 1 },
    { prompt: [9, 33, 1], sampling: { temperature: 0.9, topP: 0.9, seed: 1 }, presence: 1.5 },
    { prompt: [5, 6], sampling: { temperature: 0.7, seed: 2 } },
    { prompt: [100, 101, 102], sampling: { temperature: 1, seed: 3 }, frequency: -1, presence: 0.5, bias: [[0x22, 2]] },
  ];
  const alone = requests.map((r) => runAll({ maxRunning: 1, pipeline: false }, [r])[0]!);
  assert.deepEqual(runAll({ maxRunning: 4, maxBatchTokens: 12, blockSize: 4, pipeline: true }, requests), alone);
  for (const [key, value] of [['frequencyPenalty', 2.5], ['presencePenalty', Number.NaN]] as const) {
    assert.throws(() => new ServingEngine(model, {}).submit({ prompt, maxTokens: 2, sampling: resolveSampling({}), stopTokenIds: [], [key]: value, onToken: () => {}, onFinish: () => {} }), new RegExp(`${key} must be a number in \\[-2, 2\\]`));
  }
});
