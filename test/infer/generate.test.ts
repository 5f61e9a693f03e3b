// Text generation: streamed pieces equal the decoded tokens, stop strings cut the text before them,
// generation_config.json supplies defaults; StopStringMatcher on its own.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { generate, generateBatch, generateText } from '../../src/infer/generate.js';
import { generationDefaultsFromJson } from '../../src/infer/generation-config.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { StopStringMatcher } from '../../src/infer/stop-strings.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { TINY_GPT2, writeModelFolder } from './hf-folder.js';
import type { HostWeights } from './hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-generate-'));
after(() => rmSync(root, { recursive: true, force: true }));
const backend = new CpuBackend();

test('streamed text is the decoded tokens; a stop string ends it just before the match', async () => {
  const dir = join(root, 'gpt2');
  // Zero embedding rows outside printable ASCII: their logits are 0, so greedy picks ASCII (readable text).
  const asciiOnly = (w: HostWeights) => {
    const wte = w.get('transformer.wte.weight')!, C = TINY_GPT2.hidden;
    for (let t = 0; t < TINY_GPT2.vocabSize; t++) if (t < 32 || t > 126) wte.data.fill(0, t * C, (t + 1) * C);
  };
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 21, { generationConfig: { eos_token_id: 256, max_new_tokens: 24 }, edit: asciiOnly });
  const { model } = loadDecoderModel(dir, backend);
  const tokenizer = loadTokenizer(dir);
  const ids: number[] = [];
  for await (const t of generate(model, tokenizer.encode('The sea'), { temperature: 0 })) ids.push(t);
  assert.ok(ids.length >= 1 && ids.length <= 24, 'max_new_tokens from generation_config.json');
  const full = tokenizer.decode(ids.filter((t) => t !== 256), { skipSpecialTokens: true });
  let streamed = '';
  for await (const piece of generateText(model, tokenizer, 'The sea', { temperature: 0 })) streamed += piece;
  assert.equal(streamed, full);
  assert.match(full, /^[\x20-\x7e]{24}$/);
  const stop = full.slice(5, 7);
  let cut = '';
  for await (const piece of generateText(model, tokenizer, 'The sea', { temperature: 0, stopStrings: [stop, 'never-there'] })) cut += piece;
  assert.equal(cut, full.slice(0, full.indexOf(stop)));
  model.free();
});

test('StopStringMatcher holds back possible starts and cuts at the earliest stop', () => {
  const m = new StopStringMatcher(['END', 'xyz']);
  assert.deepEqual(m.push('hello E'), { text: 'hello ', stopped: false });
  assert.deepEqual(m.push('N'), { text: '', stopped: false });
  assert.deepEqual(m.push('Dless'), { text: '', stopped: true });
  const n = new StopStringMatcher(['END']);
  assert.deepEqual(n.push('the EN'), { text: 'the ', stopped: false });
  assert.deepEqual(n.push('ds'), { text: 'ENds', stopped: false });
  assert.equal(n.flush(), '');
  const o = new StopStringMatcher(['ab']);
  o.push('xa');
  assert.equal(o.flush(), 'a');
  assert.throws(() => new StopStringMatcher(['']), /non-empty/);
});

test('sampling defaults follow HF: greedy unless do_sample; top-k 50 when sampling; checks name the setting', () => {
  assert.deepEqual(resolveSampling({}), { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n });
  const llama3 = generationDefaultsFromJson({ do_sample: true, temperature: 0.6, top_p: 0.9, eos_token_id: [128001, 128009] }, 'generation_config.json');
  assert.deepEqual(llama3.eosTokenIds, [128001, 128009]);
  assert.deepEqual(resolveSampling({ seed: 3 }, llama3), { temperature: 0.6, topK: 50, topP: 0.9, repetitionPenalty: 1, seed: 3n });
  assert.equal(resolveSampling({ temperature: 0 }, llama3).temperature, 0);
  assert.equal(resolveSampling({ temperature: 1 }).topK, 50);
  assert.throws(() => resolveSampling({ topP: 0 }), /top-p must be in \(0, 1\]/);
  assert.throws(() => resolveSampling({ topK: 1.5 }), /top-k must be an integer/);
  assert.throws(() => generationDefaultsFromJson({ top_p: 2 }, 'g.json'), /g\.json: field "top_p" is 2; expected a number in \(0, 1\]/);
});

test('generation_config.json: max_length bounds prompt + new tokens when max_new_tokens is absent; sampling values past the sampler\'s limits are refused at load', async () => {
  const dir = join(root, 'gpt2-max-length');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 22, { generationConfig: { max_length: 8 } });
  const { model } = loadDecoderModel(dir, backend);
  const prompt = [72, 101, 108, 108, 111]; // 5 tokens: 3 new ones fit in max_length 8
  const ids: number[] = [];
  for await (const t of generate(model, prompt, { temperature: 0, stopTokenIds: [] })) ids.push(t);
  assert.equal(ids.length, 3);
  const [short, long] = await generateBatch(model, [prompt, prompt.slice(0, 2)], { temperature: 0, stopTokenIds: [] });
  assert.deepEqual([short!.length, long!.length], [3, 6]);
  await assert.rejects(async () => { for await (const _ of generate(model, Array.from({ length: 9 }, () => 65), {})) { /* none */ } },
    /max_length 8 leaves no room for new tokens after a prompt of 9 tokens/);
  const explicit: number[] = [];
  for await (const t of generate(model, prompt, { temperature: 0, stopTokenIds: [], maxNewTokens: 5 })) explicit.push(t);
  assert.equal(explicit.length, 5, 'maxNewTokens overrides max_length');
  model.free();
  assert.throws(() => generationDefaultsFromJson({ do_sample: true, temperature: 2e6 }, 'g.json'), /g\.json: field "temperature" is 2000000; expected a number in \[0, 1000000\]/);
  assert.throws(() => generationDefaultsFromJson({ repetition_penalty: 5e6 }, 'g.json'), /g\.json: field "repetition_penalty" is 5000000; expected a number in \[0\.000001, 1000000\]/);
});
