// What sampling a token costs on the GPU: sampleTokens alone (one kernel per step, replayed in a CUDA graph
// so the ~4 µs a launch from JS costs is not counted) against the way transformers samples (its logits
// warpers: top-k by torch.topk, top-p by a sort + softmax + cumsum, then softmax + torch.multinomial) in
// PyTorch eager and captured into a CUDA graph, in the same run (bench/torch_sample.py).
//   node dist/bench/sample-speed.js [--json FILE] [--reps 15] [--only WORDS] [--no-torch]
// Logits: normal(0, σ) rows, σ 1 (a random model's flat rows: every key in the same few top digits of the
// radix select) and σ 4 (a trained model's peaked rows), bf16, at GPT-2's / Llama 3's / Qwen's vocabularies.

import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CudaBackend } from '../src/backend/cuda/index.js';
import { Rng } from '../src/testing/random.js';
import { randomTensor, timeGraph } from './device-timing.js';

const { values: cli } = parseArgs({ options: { json: { type: 'string' }, reps: { type: 'string', default: '15' }, only: { type: 'string' }, 'no-torch': { type: 'boolean', default: false } } });
const REPEATS = Number(cli.reps), CALLS = 20, MAX_LEN = 4096;

interface Mode { name: string; temperature: number; topK: number; topP: number }
const MODES: Mode[] = [
  { name: 'greedy', temperature: 0, topK: 0, topP: 1 },
  { name: 'T 1', temperature: 1, topK: 0, topP: 1 },
  { name: 'top-k 50', temperature: 1, topK: 50, topP: 1 },
  { name: 'top-p 0.95', temperature: 1, topK: 0, topP: 0.95 },
  { name: 'top-k 50 + top-p 0.9', temperature: 0.8, topK: 50, topP: 0.9 },
];
const VOCABULARIES = [[50257, 50304], [128256, 128256], [151936, 151936]] as const;

interface Case { id: string; mode: Mode; V: number; Vp: number; B: number; sigma: number }
const cases: Case[] = [];
for (const [V, Vp] of VOCABULARIES) for (const B of [1, 32]) for (const sigma of [1, 4]) for (const mode of MODES) {
  cases.push({ id: `${mode.name} V=${V} B=${B} σ=${sigma}`, mode, V, Vp, B, sigma });
}
const wanted = (cli.only ?? '').split(',').filter((w) => w !== '');
const selected = cases.filter((c) => wanted.length === 0 || wanted.some((w) => c.id.includes(w)));

function ours(b: CudaBackend, rng: Rng, c: Case): number {
  const logits = randomTensor(b, rng, [c.B, c.Vp], 'bf16', c.sigma);
  const i32 = (shape: number[], values: number[]) => { const t = b.empty(shape, 'i32'); b.upload(t, Int32Array.from(values)); return t; };
  const params = b.empty([c.B, 4], 'f32');
  b.upload(params, Float32Array.from({ length: 4 * c.B }, (_, i) => [c.mode.temperature, c.mode.topK, c.mode.topP, 1][i % 4]!));
  const seeds = i32([c.B, 2], Array.from({ length: 2 * c.B }, (_, i) => 1000 + i));
  const positions = i32([c.B], new Array<number>(c.B).fill(0)), history = i32([c.B, MAX_LEN], new Array<number>(c.B * MAX_LEN).fill(0));
  const tokens = i32([c.B], new Array<number>(c.B).fill(0)), finished = i32([c.B], new Array<number>(c.B).fill(0));
  const limits = i32([c.B], new Array<number>(c.B).fill(MAX_LEN)), stopIds = i32([1], [-1]);
  const launch = () => b.sampleTokens({ logits, classes: c.V, params, seeds, positions, history, tokens, finished, limits, stopIds });
  const ms = timeGraph(b, [launch], CALLS, REPEATS);
  const done = b.download(finished) as Int32Array;
  if (done.some((f) => f !== 0)) throw new Error(`${c.id}: a row finished during the timing (positions past ${MAX_LEN}?)`);
  for (const t of [logits, params, seeds, positions, history, tokens, finished, limits, stopIds]) b.free(t);
  return ms;
}

function torchBaseline(list: Case[]): { version: string | null; results: Record<string, { eager: number | null; graph: number | null }> } {
  const input = JSON.stringify(list.map((c) => ({ id: c.id, V: c.V, B: c.B, sigma: c.sigma, temperature: c.mode.temperature, topK: c.mode.topK, topP: c.mode.topP, reps: REPEATS })));
  const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'torch_sample.py');
  const run = spawnSync('python3', [script], { input, encoding: 'utf8', maxBuffer: 64 << 20, timeout: 400_000 });
  if (run.status !== 0) {
    process.stderr.write(`PyTorch baseline skipped: ${run.error?.message ?? run.stderr.split('\n').slice(-4).join(' ')}\n`);
    return { version: null, results: {} };
  }
  if (run.stderr) process.stderr.write(run.stderr);
  return JSON.parse(run.stdout) as { version: string; results: Record<string, { eager: number | null; graph: number | null }> };
}

const b = CudaBackend.create();
const rng = new Rng(7);
const rows = selected.map((c) => ({ id: c.id, mode: c.mode.name, V: c.V, B: c.B, sigma: c.sigma, oursUs: ours(b, rng, c) * 1e3 }));
const torch = cli['no-torch'] ? { version: null, results: {} } : torchBaseline(selected);
const fmt = (x: number | null | undefined) => (x == null ? '—' : x.toFixed(1));
console.log(`${b.description}; sampleTokens in a CUDA graph, µs a call (median of ${REPEATS}); PyTorch ${torch.version ?? '(not run)'}: transformers' warpers + multinomial, eager / in a CUDA graph`);
console.log('| mode | V | B | σ | ours µs | torch eager µs | torch graph µs | vs graph |');
console.log('|---|---|---|---|---|---|---|---|');
const table = rows.map((r) => {
  const t = torch.results[r.id];
  const row = { ...r, torchEagerUs: t?.eager == null ? null : t.eager * 1e3, torchGraphUs: t?.graph == null ? null : t.graph * 1e3 };
  console.log(`| ${r.mode} | ${r.V} | ${r.B} | ${r.sigma} | ${fmt(r.oursUs)} | ${fmt(row.torchEagerUs)} | ${fmt(row.torchGraphUs)} | ${row.torchGraphUs == null ? '—' : `${(row.torchGraphUs / r.oursUs).toFixed(1)}×`} |`);
  return row;
});
if (cli.json) {
  mkdirSync(dirname(cli.json), { recursive: true });
  writeFileSync(`${cli.json}.tmp`, `${JSON.stringify({ device: b.description, torch: torch.version, repeats: REPEATS, rows: table }, null, 2)}\n`);
  renameSync(`${cli.json}.tmp`, cli.json);
}
