// Serving load test: `npm run bench:serve`. An in-process server (src/serve/) on a model — a random
// preset (default gpt2-tiny, vocabulary 257, with the byte tokenizer) or a Hugging Face directory
// (--model DIR) — and a pool of HTTP clients in the same process:
//   N requests (default 1000), C at a time (default 128); completions and chat, half of them streamed;
//   a share (default 10%) disconnect after their first streamed chunk; a share (default 5%) are malformed
//   (bad JSON, n = 2, a negative temperature, no prompt, a prompt past the context window).
// Checks (exit code 1 if one fails): every valid request completes (200, a finish_reason) or gets a clear
// error (an OpenAI error body with a message); every malformed one gets a 4xx with an error body; every
// disconnected one is cancelled; afterwards the engine is idle and no KV block is held.
// Reports client-side throughput (generated tokens/s), TTFT and latency percentiles, and the server's
// prefix-cache hit rate and preemptions; JSON to --json, a markdown table on stdout.
//
// Usage: node dist/bench/serve.js [--json bench/results/serve.json] [--requests 1000] [--concurrency 128]
//   [--disconnect 0.1] [--malformed 0.05] [--max-tokens 16] [--backend auto|cpu|cuda] [--preset gpt2-tiny | --model DIR]
//   [--max-running 64] [--max-batch-tokens 512] [--kv-blocks N | --kv-memory-fraction F]

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { BackendChoice } from '../src/backend/index.js';
import { loadDecoderModel, randomDecoderModel } from '../src/infer/model.js';
import type { DecoderModel } from '../src/infer/model.js';
import { createByteTokenizer } from '../src/io/byte-tokenizer.js';
import { loadTokenizer } from '../src/io/tokenizer.js';
import type { Tokenizer } from '../src/io/tokenizer.js';
import { presetConfig } from '../src/models/registry.js';
import { Rng } from '../src/testing/random.js';
import { ServingEngine } from '../src/serve/engine.js';
import { InferenceServer } from '../src/serve/server.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/serve.json' },
    requests: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '128' },
    disconnect: { type: 'string', default: '0.1' },
    malformed: { type: 'string', default: '0.05' },
    'max-tokens': { type: 'string', default: '16' },
    backend: { type: 'string', default: 'auto' },
    preset: { type: 'string', default: 'gpt2-tiny' },
    model: { type: 'string' },
    'max-running': { type: 'string', default: '64' },
    'max-batch-tokens': { type: 'string', default: '512' },
    'kv-blocks': { type: 'string' },
    'kv-memory-fraction': { type: 'string' },
  },
});
const positive = (name: string, v: string, integer = true): number => {
  const x = Number(v);
  if (!(x >= 0) || (integer && !Number.isSafeInteger(x))) throw new Error(`--${name} must be a non-negative ${integer ? 'integer' : 'number'}, got '${v}'`);
  return x;
};
const N = positive('requests', cli.requests!), C = Math.max(1, positive('concurrency', cli.concurrency!));
const pDisconnect = positive('disconnect', cli.disconnect!, false), pMalformed = positive('malformed', cli.malformed!, false);
const maxTokens = Math.max(1, positive('max-tokens', cli['max-tokens']!));

const { backend } = await selectBackend(cli.backend as BackendChoice);
let model: DecoderModel, tokenizer: Tokenizer, scratch: string | undefined;
if (cli.model) {
  model = loadDecoderModel(cli.model, backend).model;
  tokenizer = loadTokenizer(cli.model);
} else {
  model = randomDecoderModel(presetConfig(cli.preset!), backend, { std: 0.2 });
  if (model.vocabSize > 257) throw new Error(`--preset ${cli.preset}: a random preset needs the byte tokenizer's vocabulary (257); give --model DIR for others`);
  scratch = mkdtempSync(join(tmpdir(), 'fuseformer-bench-serve-'));
  const byte = createByteTokenizer();
  writeFileSync(join(scratch, 'tokenizer.json'), JSON.stringify(byte.tokenizerJson()));
  writeFileSync(join(scratch, 'tokenizer_config.json'), JSON.stringify({
    ...byte.tokenizerConfig(), chat_template: '{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}',
  }));
  tokenizer = loadTokenizer(scratch);
}
const engine = new ServingEngine(model, {
  maxRunning: positive('max-running', cli['max-running']!), maxBatchTokens: positive('max-batch-tokens', cli['max-batch-tokens']!),
  ...(cli['kv-blocks'] ? { numBlocks: positive('kv-blocks', cli['kv-blocks']) } : {}),
  ...(cli['kv-memory-fraction'] ? { kvMemoryFraction: positive('kv-memory-fraction', cli['kv-memory-fraction'], false) } : {}),
});
const server = new InferenceServer(engine, tokenizer, { modelName: 'bench', maxQueue: Math.max(256, 2 * C) });
const address = await server.listen(0);
const base = `http://127.0.0.1:${address.port}`;

// Prompts: a few shared openings (prefix-cache hits) with varied endings.
const OPENINGS = ['Call me Ishmael. Some years ago, never mind how long precisely, ', 'It was the best of times, it was the worst of times, ', 'In the beginning ', ''];
const WORDS = ['whale', 'sea', 'ship', 'captain', 'harpoon', 'storm', 'island', 'sailor', 'night', 'white', 'deep', 'voyage'];
const rng = new Rng(1234);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng.next() * xs.length)]!;
type Kind = 'valid' | 'disconnect' | 'malformed';
interface Outcome { kind: Kind; status: number; ok: boolean; problem?: string; tokens: number; ttft?: number; latency: number }

const MALFORMED: [string, string][] = [
  ['/v1/completions', '{"model": "bench", "prompt": "x",'],
  ['/v1/completions', JSON.stringify({ model: 'bench', prompt: 'x', n: 0 })],
  ['/v1/chat/completions', JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'x' }], temperature: -1 })],
  ['/v1/completions', JSON.stringify({ model: 'bench', max_tokens: 4 })],
  ['/v1/completions', JSON.stringify({ model: 'bench', prompt: 'z'.repeat(engine.maxLen + 5), max_tokens: 4 })],
];

function plan(i: number): { kind: Kind; path: string; body: string; stream: boolean } {
  const r = rng.next();
  if (r < pMalformed) { const [path, body] = MALFORMED[i % MALFORMED.length]!; return { kind: 'malformed', path, body, stream: false }; }
  const disconnect = r < pMalformed + pDisconnect;
  const text = pick(OPENINGS) + Array.from({ length: 1 + Math.floor(rng.next() * 6) }, () => pick(WORDS)).join(' ');
  const stream = disconnect || rng.next() < 0.5;
  const common = { model: 'bench', max_tokens: disconnect ? maxTokens : 1 + Math.floor(rng.next() * maxTokens), temperature: rng.next() < 0.5 ? 0 : 0.8, seed: i, stream };
  const chat = rng.next() < 0.3;
  return {
    kind: disconnect ? 'disconnect' : 'valid', stream,
    path: chat ? '/v1/chat/completions' : '/v1/completions',
    body: JSON.stringify(chat ? { ...common, messages: [{ role: 'user', content: text }] } : { ...common, prompt: text }),
  };
}

async function one(i: number): Promise<Outcome> {
  const p = plan(i), t0 = performance.now();
  const controller = new AbortController();
  const res = await fetch(`${base}${p.path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: p.body, signal: controller.signal });
  const latency = () => (performance.now() - t0) / 1000;
  if (p.kind === 'malformed') {
    const body = await res.json().catch(() => null) as { error?: { message?: string } } | null;
    const ok = res.status >= 400 && res.status < 500 && typeof body?.error?.message === 'string';
    return { kind: p.kind, status: res.status, ok, ...(ok ? {} : { problem: `malformed request got ${res.status}` }), tokens: 0, latency: latency() };
  }
  if (res.status !== 200) {
    const body = await res.json().catch(() => null) as { error?: { message?: string } } | null;
    const clear = typeof body?.error?.message === 'string';
    return { kind: p.kind, status: res.status, ok: clear, ...(clear ? {} : { problem: `status ${res.status} without an error body` }), tokens: 0, latency: latency() };
  }
  if (!p.stream) {
    const body = await res.json() as { choices: { finish_reason: string }[]; usage: { completion_tokens: number } };
    const ok = ['stop', 'length'].includes(body.choices[0]?.finish_reason ?? '');
    return { kind: p.kind, status: 200, ok, ...(ok ? {} : { problem: 'no finish_reason' }), tokens: body.usage.completion_tokens, latency: latency() };
  }
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '', tokens = 0, ttft: number | undefined, finish = false, done = false, error: string | undefined;
  while (!done) {
    const { value, done: end } = await reader.read();
    if (end) break;
    if (ttft === undefined) ttft = latency();
    if (p.kind === 'disconnect') { controller.abort(); return { kind: p.kind, status: 200, ok: true, tokens: 0, ttft, latency: latency() }; }
    buffer += decoder.decode(value, { stream: true });
    let at: number;
    while ((at = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (!event.startsWith('data: ')) continue;
      const data = event.slice(6);
      if (data === '[DONE]') { done = true; break; }
      const chunk = JSON.parse(data) as { error?: { message: string }; choices?: { finish_reason: string | null; text?: string; delta?: { content?: string } }[] };
      if (chunk.error) error = chunk.error.message;
      const c = chunk.choices?.[0];
      if (c && ((c.text ?? c.delta?.content ?? '') !== '')) tokens++;
      if (c?.finish_reason) finish = true;
    }
  }
  const ok = finish || error !== undefined;
  return { kind: p.kind, status: 200, ok, ...(ok ? {} : { problem: 'stream ended without finish_reason or error' }), tokens, ...(ttft !== undefined ? { ttft } : {}), latency: latency() };
}

const outcomes: Outcome[] = [];
let next = 0;
const start = performance.now();
await Promise.all(Array.from({ length: Math.min(C, N) }, async () => {
  while (next < N) {
    const i = next++;
    try {
      outcomes.push(await one(i));
    } catch (error) {
      outcomes.push({ kind: 'valid', status: 0, ok: false, problem: `request ${i}: ${(error as Error).message}${(error as { cause?: Error }).cause ? ` (${(error as { cause: Error }).cause.message})` : ''}`, tokens: 0, latency: 0 });
    }
  }
}));
const wall = (performance.now() - start) / 1000;
for (let i = 0; i < 500 && engine.hasWork; i++) await new Promise((r) => setTimeout(r, 10));
const stats = engine.stats();
const metrics = server.metricsText();
await server.close();

const failures = outcomes.filter((o) => !o.ok);
const checks = {
  allAnswered: outcomes.length === N && failures.length === 0,
  engineIdle: !engine.hasWork,
  noLeakedBlocks: engine.pool.usedBlocks === 0,
  // A disconnect after the whole answer arrived cancels nothing; one before always does, and nothing else is cancelled.
  noSpuriousCancels: Number(/fuseformer_requests_finished_total\{reason="cancelled"\} (\d+)/.exec(metrics)?.[1] ?? 0) <= outcomes.filter((o) => o.kind === 'disconnect').length,
};
const pct = (xs: number[], q: number) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))]! : NaN; };
const valid = outcomes.filter((o) => o.kind === 'valid' && o.status === 200);
const ttfts = outcomes.filter((o) => o.ttft !== undefined && o.kind === 'valid').map((o) => o.ttft!);
const generated = valid.reduce((n, o) => n + o.tokens, 0);
const result = {
  backend: backend.description, model: cli.model ?? cli.preset, requests: N, concurrency: C, wallSeconds: wall,
  counts: { valid: valid.length, disconnected: outcomes.filter((o) => o.kind === 'disconnect').length, malformed: outcomes.filter((o) => o.kind === 'malformed').length, errors: outcomes.filter((o) => o.kind === 'valid' && o.status !== 200).length },
  generatedTokensPerSecond: generated / wall,
  ttftSeconds: { p50: pct(ttfts, 0.5), p99: pct(ttfts, 0.99) },
  latencySeconds: { p50: pct(valid.map((o) => o.latency), 0.5), p99: pct(valid.map((o) => o.latency), 0.99) },
  cancelled: Number(/fuseformer_requests_finished_total\{reason="cancelled"\} (\d+)/.exec(metrics)?.[1] ?? 0),
  engine: { steps: stats.steps, preemptions: stats.preemptions, prefixHitRate: stats.prefixQueried ? stats.prefixHits / stats.prefixQueried : 0, blocksTotal: stats.blocksTotal, kvPoolBytes: stats.kvPoolBytes },
  checks, failures: failures.slice(0, 10).map((f) => f.problem),
};
if (cli.json) { mkdirSync(dirname(cli.json), { recursive: true }); writeFileSync(cli.json, `${JSON.stringify(result, null, 2)}\n`); }
const f = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '-');
console.log(`\n| requests | concurrency | valid ok | disconnected | malformed | errors | tok/s | TTFT p50/p99 s | latency p50/p99 s | prefix hit | preempt | leaked blocks |`);
console.log(`|---|---|---|---|---|---|---|---|---|---|---|---|`);
console.log(`| ${N} | ${C} | ${result.counts.valid} | ${result.counts.disconnected} | ${result.counts.malformed} | ${result.counts.errors} | ${f(result.generatedTokensPerSecond, 0)} | ${f(result.ttftSeconds.p50)}/${f(result.ttftSeconds.p99)} | ${f(result.latencySeconds.p50)}/${f(result.latencySeconds.p99)} | ${f(result.engine.prefixHitRate, 2)} | ${stats.preemptions} | ${engine.pool.usedBlocks} |`);
const passed = Object.values(checks).every(Boolean);
console.log(passed ? 'all checks passed' : `FAILED: ${JSON.stringify(checks)} ${result.failures.join('; ')}`);
engine.dispose();
model.free();
if (scratch) rmSync(scratch, { recursive: true, force: true });
process.exitCode = passed ? 0 : 1;
