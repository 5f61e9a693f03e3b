// The library API against inputs a third audit found mishandled: a serving request with bad sampling or stop
// ids used to be accepted and then fail every later step of the engine (every request's); files the
// safetensors writer wrote that its reader refused; training configs checked only after the run; a NaN
// dimension that turned the CPU backend's memory statistics into NaN for good; non-integer vocabulary ids,
// seeds and prompts that escaped as TypeErrors or wrong ids.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  ArgumentError, CpuBackend, DecodeEngine, SafetensorsError, ServingEngine, ShapeError, TokenizerError, createByteTokenizer, createTokenizer,
  generate, generateBatch, generateText, loadDecoderModel, loadTokenizer, resolveSampling, trainLanguageModel, writeSafetensors,
} from '../../src/index.js';
import type { TrainConfig } from '../../src/index.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-api-inputs-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();
const dir = join(root, 'gpt2');
writeModelFolder(dir, 'gpt2', TINY_GPT2, 1);
const model = loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
const tokenizer = loadTokenizer(dir);

test('a serving request is checked at submit: a bad one is refused, the others still run', () => {
  const engine = new ServingEngine(model, { maxRunning: 2 });
  const greedy = resolveSampling({ temperature: 0 });
  const tokens: number[] = [];
  const request = (patch: Record<string, unknown>) => ({ prompt: [1, 2, 3], maxTokens: 3, sampling: greedy, stopTokenIds: [256], onToken: (e: { token: number }) => tokens.push(e.token), onFinish: () => {}, ...patch });
  engine.submit(request({}));
  assert.throws(() => engine.submit(request({ sampling: { ...greedy, temperature: Number.NaN } })), /temperature must be a number in \[0, 1000000\]/);
  assert.throws(() => engine.submit(request({ sampling: { ...greedy, seed: 5 } })), /sampling\.seed must be a bigint, got number 5/);
  assert.throws(() => engine.submit(request({ stopTokenIds: [999] })), /stop token id 999 is outside the vocabulary \[0, 257\)/);
  assert.throws(() => engine.submit(request({ onFinish: undefined })), /needs onToken and onFinish callbacks/);
  engine.runToCompletion();
  assert.equal(tokens.length, 3, 'the good request ran to its end');
  engine.dispose();
});

test('generation refuses seeds, prompts and options of the wrong kind by name', async () => {
  const drain = async (g: AsyncGenerator<unknown>) => { for await (const _ of g) { /* consume */ } };
  await assert.rejects(drain(generate(model, [1, 2], { seed: 1.5, temperature: 1, maxNewTokens: 2 })), /seed must be an integer in \[0, 2\^64\), got 1.5/);
  await assert.rejects(generateBatch(model, [[1, 2], 5 as unknown as number[]], { maxNewTokens: 2 }), /prompt 1 must be an array of token ids, got number 5/);
  await assert.rejects(drain(generateText(model, tokenizer, 42 as unknown as string, { maxNewTokens: 2 })), /the prompt must be text or an array of token ids, got number/);
  assert.throws(() => new DecodeEngine(model, { maxBatch: 1, maxLen: 8, prefillAttention: 'bogus' as 'flash' }), /prefillAttention must be 'flash' or 'materialized', got "bogus"/);
  assert.throws(() => loadDecoderModel(dir, backend, { dtype: 'f64' as 'f32' }), /dtype must be f32, f16 or bf16, got "f64"/);
  assert.throws(() => backend.gemm({ a: [1, 2] as unknown as never, b: backend.empty([2, 2], 'f32'), out: backend.empty([2, 2], 'f32') }), /gemm: 'a' must be a tensor .* got an array/);
});

test('a NaN dimension is a ShapeError that leaves the memory statistics as they were', () => {
  const cpu = new CpuBackend();
  const before = cpu.memoryStats();
  assert.throws(() => cpu.empty([Number.NaN], 'f32'), ShapeError);
  assert.throws(() => cpu.empty([-4], 'f32'), ShapeError);
  assert.deepEqual(cpu.memoryStats(), before);
});

test('tokenizers refuse vocabulary ids that are not non-negative integers, and input that is not text', () => {
  const bpe = (vocab: unknown) => createTokenizer({ model: { type: 'BPE', vocab, merges: [] } });
  assert.throws(() => bpe({ a: -1, b: 1 }), (e: unknown) => e instanceof TokenizerError && /gives "a" the id -1; ids are non-negative integers/.test(e.message));
  assert.throws(() => bpe({ a: 0.5 }), /gives "a" the id 0\.5/);
  assert.throws(() => bpe({ a: '0' }), /gives "a" the id "0"/);
  assert.throws(() => createTokenizer({ model: { type: 'Unigram', vocab: [['a']] } }), /"model\.vocab"\[0\] is an array; expected a \[piece, score\] pair/);
  assert.throws(() => tokenizer.encode(null as unknown as string), (e: unknown) => e instanceof ArgumentError && /encode takes text, got null/.test(e.message));
  assert.throws(() => tokenizer.decode(null as unknown as number[]), /decode takes an array of token ids, got null/);
  assert.throws(() => createByteTokenizer().encode(42 as unknown as string), /encode takes text, got number/);
});

test('writeSafetensors refuses what its reader would refuse, writing nothing', () => {
  const path = join(root, 'x.safetensors');
  const one = { name: 'a', dtype: 'F32' as const, shape: [1], bytes: new Uint8Array(4) };
  assert.throws(() => writeSafetensors(path, [{ ...one, shape: [-1, -4], bytes: new Uint8Array(16) }]), (e: unknown) => e instanceof SafetensorsError && /shape \[-1,-4\]; expected an array of non-negative integers/.test(e.message));
  assert.throws(() => writeSafetensors(path, [{ ...one, dtype: 'F128' as 'F32' }]), /dtype "F128"; expected one of/);
  assert.throws(() => writeSafetensors(path, [{ ...one, name: 5 as unknown as string }]), /a tensor name must be a string/);
  assert.throws(() => writeSafetensors(path, [one], { n: 5 as unknown as string }), /'__metadata__\.n' must be a string/);
  assert.equal(existsSync(path), false);
});

test('a training config is checked before any step runs', () => {
  const tokens = Uint16Array.from({ length: 4000 }, (_, i) => (i * 7) % 200);
  const base: TrainConfig = {
    model: { family: 'gpt2', config: { ...GPT2_PRESETS['gpt2-tiny']!, hidden: 32, layers: 1, heads: 2, ffn: 64, maxPositions: 32 } },
    dtype: 'f32', batchSize: 2, seqLen: 8, steps: 1, seed: 1, schedule: { kind: 'constant', lr: 1e-3, minLr: 1e-3, warmupSteps: 0, totalSteps: 1 },
    evalEvery: 0, evalBatches: 1, checkpointEvery: 0, keepCheckpoints: 1, outDir: join(root, 'run'), resume: false, validationFraction: 0.1,
    checkpointActivations: 0, sample: { prompt: 'a', tokens: 0, temperature: 0 },
  };
  const quiet = { log: () => {} };
  const bytes = createByteTokenizer();
  for (const [patch, pattern] of [
    [{ evalBatches: 0 }, /evalBatches must be a positive integer, got 0/], [{ keepCheckpoints: 0 }, /keepCheckpoints must be a positive integer/],
    [{ seed: 1.5 }, /seed must be a non-negative integer, got 1.5/], [{ evalEvery: -1 }, /evalEvery must be a non-negative integer/],
    [{ dtype: 'f64' }, /dtype must be f32, f16 or bf16, got f64/], [{ sample: { prompt: 'a', tokens: 1, temperature: Number.NaN } }, /sample\.temperature must be a finite number/],
  ] as const) {
    assert.throws(() => trainLanguageModel(backend, tokens, bytes, { ...base, ...patch } as TrainConfig, quiet), pattern);
  }
  const outside = Uint16Array.from(tokens, (t, i) => (i === 3000 ? 300 : t));
  assert.throws(() => trainLanguageModel(backend, outside, bytes, base, quiet), /token 3000 is id 300, outside the vocabulary of 257/);
  assert.equal(existsSync(join(root, 'run')), false, 'nothing written for a refused config');
});
