// What structured outputs cost: one request on the serving engine, a random GPT-2 124M with GPT-2's real
// 50,257-token vocabulary, unconstrained against a JSON object / a JSON Schema, greedy and sampled. Random
// weights never write JSON of their own, so every constrained step is the worst case — the pick refused, the
// mask made, the row of logits read, the token picked on the host — and the constrained rows are upper bounds;
// a model that writes what fits pays one token's check a step instead. The host's share (mask, check, pick) is
// timed apart. No baseline is claimed against: transformers has no constrained decoding of its own.
//   node dist/bench/structured.js --tokenizer DIR [--tokens 128] [--reps 3] [--json FILE]
// DIR: GPT-2's tokenizer.json (or tokenizer.json.gz, as bench/spec-tokenizer.ts writes it for the GPU machine).

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { selectBackend } from '../src/backend/index.js';
import { randomDecoderModel } from '../src/infer/model.js';
import { resolveSampling } from '../src/infer/sampling.js';
import type { SamplingOptions } from '../src/infer/sampling.js';
import { anyJsonObject, compileJsonSchema } from '../src/infer/structured/json-schema.js';
import type { GrammarNode } from '../src/infer/structured/json-schema.js';
import { JsonConstraint, TokenVocabulary } from '../src/infer/structured/token-mask.js';
import type { TokenConstraint } from '../src/infer/structured/token-mask.js';
import { tokenByteTable } from '../src/io/token-bytes.js';
import { loadTokenizer } from '../src/io/tokenizer.js';
import { presetConfig } from '../src/models/registry.js';
import { ServingEngine } from '../src/serve/engine.js';

const { values } = parseArgs({ options: { tokenizer: { type: 'string' }, tokens: { type: 'string', default: '128' }, reps: { type: 'string', default: '3' }, json: { type: 'string' } } });
if (!values.tokenizer) throw new Error('--tokenizer DIR is required (GPT-2\'s tokenizer.json or tokenizer.json.gz)');
const tokens = Number(values.tokens), reps = Number(values.reps);

// The tokenizer directory, with a gzipped tokenizer.json unpacked beside a copy of its config.
function tokenizerDir(dir: string): string {
  if (existsSync(join(dir, 'tokenizer.json'))) return dir;
  const out = mkdtempSync(join(tmpdir(), 'fuseformer-structured-tokenizer-'));
  process.on('exit', () => rmSync(out, { recursive: true, force: true }));
  writeFileSync(join(out, 'tokenizer.json'), gunzipSync(readFileSync(join(dir, 'tokenizer.json.gz'))));
  writeFileSync(join(out, 'tokenizer_config.json'), readFileSync(join(dir, 'tokenizer_config.json')));
  return out;
}

const { backend } = await selectBackend();
const tokenizer = loadTokenizer(tokenizerDir(values.tokenizer));
const model = randomDecoderModel(presetConfig('gpt2-124M'), backend);
let start = performance.now();
const vocabulary = new TokenVocabulary(tokenByteTable(tokenizer, model.vocabSize));
const vocabularyMs = performance.now() - start;
const PERSON = compileJsonSchema({
  type: 'object', additionalProperties: false, required: ['name', 'age', 'city', 'tags'],
  properties: { name: { type: 'string', maxLength: 40 }, age: { type: 'integer', minimum: 0, maximum: 150 }, city: { type: 'string' }, tags: { type: 'array', items: { type: 'string' }, maxItems: 8 } },
});

/** A constraint whose calls are timed (the host's share of a constrained step). */
function timed(inner: TokenConstraint, clock: { ms: number }): TokenConstraint {
  const time = <T>(f: () => T): T => { const t0 = performance.now(); try { return f(); } finally { clock.ms += performance.now() - t0; } };
  return {
    allowedTokens: () => time(() => inner.allowedTokens()), allows: (t) => time(() => inner.allows(t)), accept: (t) => time(() => inner.accept(t)),
    get complete() { return time(() => inner.complete); },
  };
}

interface Row { case: string; sampling: string; seed: number; tokens: number; msPerToken: number; hostMsPerToken: number; finish: string }

function run(name: string, grammar: GrammarNode | null, sampling: SamplingOptions, label: string): Row {
  const prompt = tokenizer.encode('A person, as JSON:');
  const once = (seed: number) => {
    const engine = new ServingEngine(model, { maxRunning: 1 });
    const clock = { ms: 0 };
    let count = 0, finish = '';
    engine.submit({
      prompt, maxTokens: tokens, sampling: resolveSampling({ ...sampling, seed }), stopTokenIds: [],
      ...(grammar ? { constraint: timed(new JsonConstraint(grammar, vocabulary, []), clock) } : {}),
      onToken: () => { count++; }, onFinish: (r) => { finish = r; },
    });
    engine.step(); // the prompt's step (and its first token): not timed
    backend.synchronize();
    const t0 = performance.now(), host0 = clock.ms, first = count;
    engine.runToCompletion();
    backend.synchronize();
    const ms = performance.now() - t0;
    engine.dispose();
    return { ms, count: count - first, host: clock.ms - host0, finish };
  };
  // Warm-up (kernels, graphs, the vocabulary's masks), and the seed: a draw may close the value at once (GPT-2
  // has a "{}" token), which times nothing — sampled runs take the first seed from 11 that writes half the tokens.
  let seed = 11;
  while (once(seed).count < tokens / 2 && sampling.temperature !== 0 && seed < 30) seed++;
  const runs = Array.from({ length: reps }, () => once(seed)).sort((a, b) => a.ms / Math.max(1, a.count) - b.ms / Math.max(1, b.count));
  const m = runs[Math.floor(runs.length / 2)]!, n = Math.max(1, m.count);
  return { case: name, sampling: label, seed, tokens: m.count, msPerToken: m.ms / n, hostMsPerToken: m.host / n, finish: m.finish };
}

const rows: Row[] = [];
for (const [label, sampling] of [['greedy', { temperature: 0 }], ['T 1, top-p 0.95', { temperature: 1, topP: 0.95, topK: 0 }]] as [string, SamplingOptions][]) {
  rows.push(run('unconstrained', null, sampling, label));
  rows.push(run('json_object', anyJsonObject(), sampling, label));
  rows.push(run('json_schema (4 fields)', PERSON, sampling, label));
}
const device = backend.description;
console.log(`${device}; GPT-2 124M (random weights, ${model.dtype}), GPT-2's vocabulary (${model.vocabSize}); vocabulary trie built in ${vocabularyMs.toFixed(0)} ms`);
console.log('| case | sampling | seed | tokens | ms/token | host ms/token (constraint) | finish |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.case} | ${r.sampling} | ${r.seed} | ${r.tokens} | ${r.msPerToken.toFixed(3)} | ${r.hostMsPerToken.toFixed(3)} | ${r.finish} |`);
if (values.json) writeFileSync(values.json, `${JSON.stringify({ device, model: `gpt2-124M random ${model.dtype}`, vocabulary: model.vocabSize, vocabularyMs, tokens, reps, rows }, null, 2)}\n`);
model.free();
