// `npm run bench:rerank`: reranking with a Qwen3-Reranker-0.6B-size causal LM (random weights; logit("yes") −
// logit("no") at each pair's last token, the pair rendered by the model's chat template) — fuseformer's Reranker
// (the engine behind `fuseformer rerank` and the /v1/rerank server) against Hugging Face Qwen3ForCausalLM scored as
// sentence-transformers' CrossEncoder scores it, in PyTorch eager and torch.compile, in the same run
// (bench/hf_rerank.py), on one query against the same 512 documents of 16–480 words (pairs of ~30–500 tokens):
//   1. correctness: every pair's token count equals HF's; each score against HF's (fp32 math on the same weights):
//      |ours − HF| ≤ 2e-2 in bf16, ≤ 1e-4 in fp32;
//   2. speed: every pair scored in batches of 32 (median wall time over --reps, CUDA-synchronised, after a warm-up
//      pass; rendering and tokenizing included on both sides) — ours (batches sorted by length, as the Reranker
//      always does), HF eager in the documents' order and sorted by length (as CrossEncoder.predict sorts),
//      torch.compile sorted; ours again with every pass dense (maxSharedPrefix 0: the query's tokens before each
//      document computed once a pair, as HF does) — the gain of computing the shared prefix once (shared-prefix.ts);
//   3. the HTTP server: the same documents sent by 8 concurrent clients from another process, 32 a request,
//      through RerankServer on the same Reranker (concurrent requests share rounds): documents/s end to end.
// Writes --json (bench/results/rerank.json) and prints a table.
//
// Usage: node dist/bench/rerank.js [--json bench/results/rerank.json] [--python python3] [--reps 5] [--keep DIR]
//        [--dtypes bf16,f32] [--no-hf (ours only)] [--no-compile]

import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { Reranker } from '../src/infer/reranker.js';
import { writeFileAtomically } from '../src/io/atomic-write.js';
import { RerankServer } from '../src/serve/rerank-server.js';
import { median } from './device-timing.js';
import { hfScript } from './hf-script.js';
import { httpLoadMs } from './http-load.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/rerank.json' }, python: { type: 'string', default: 'python3' },
    reps: { type: 'string', default: '5' }, keep: { type: 'string' }, 'no-compile': { type: 'boolean', default: false },
    'no-hf': { type: 'boolean', default: false }, dtypes: { type: 'string', default: 'bf16,f32' },
  },
});
const reps = Number(cli.reps);
const BATCH = 32, CLIENTS = 8, PER_REQUEST = 32;
const dir = cli.keep ?? mkdtempSync(join(tmpdir(), 'fuseformer-bench-rerank-'));
mkdirSync(dir, { recursive: true });

const python = hfScript(cli.python!, 'bench/hf_rerank.py');

if (!existsSync(join(dir, 'workload.json'))) python(['build', dir]);
const { query, documents } = JSON.parse(readFileSync(join(dir, 'workload.json'), 'utf8')) as { query: string; documents: string[] };
const { backend } = await selectBackend();
if (backend.name !== 'cuda') throw new Error('bench:rerank times the CUDA backend; no GPU was found');

const rows: Record<string, unknown>[] = [];
for (const dtype of cli.dtypes!.split(',') as FloatDType[]) {
  if (!cli['no-hf']) python(['run', dir, '--dtype', dtype, '--batch-size', String(BATCH), '--reps', String(reps), ...(cli['no-compile'] || dtype === 'f32' ? ['--no-compile'] : [])]);
  const hf = cli['no-hf'] ? { scores: [] as number[], tokens: [] as number[], timings: {} as Record<string, number>, torch: '', device: '' }
    : JSON.parse(readFileSync(join(dir, `hf-${dtype}.json`), 'utf8')) as { scores: number[]; tokens: number[]; timings: Record<string, number>; torch: string; device: string };
  const reranker = Reranker.load(dir, backend, { dtype, batchSize: BATCH });
  try {
    // 1. Correctness: the same tokens, then the scores.
    const lengths = documents.map((d) => reranker.scorer.encode(query, d, reranker.maxTokens, reranker.promptText()).ids.length);
    const tokenMismatches = hf.tokens.filter((n, i) => n !== lengths[i]).length;
    const { scores, tokens } = reranker.rerank(query, documents);
    const worst = hf.scores.reduce((w, s, i) => Math.max(w, Math.abs(scores[i]! - s)), 0);
    const correct = cli['no-hf'] ? undefined : tokenMismatches === 0 && worst <= (dtype === 'f32' ? 1e-4 : 2e-2);
    // 2. Speed: all pairs, median of reps after the warm-up above.
    const times = timedReps(reranker);
    const ms = median(times);
    console.log(`${dtype}: ours ${times.map((t) => t.toFixed(1)).join(' / ')} ms (reps)`);
    const encoder = (reranker.scorer as { encoder?: { prefixStats: object } }).encoder;
    const prefixStats = encoder ? { ...encoder.prefixStats } : undefined;
    const dense = timeDense(dtype, scores);
    console.log(`${dtype}: ours, every pass dense ${dense.times.map((t) => t.toFixed(1)).join(' / ')} ms (reps); scores vs shared prefix worst |Δ| ${dense.worst.toExponential(2)}; prefix ${JSON.stringify(prefixStats)}`);
    // 3. Over HTTP: 8 clients in another process, 32 documents a request.
    // The server's rounds: documents and wall time each (is the loop computing or waiting for requests?).
    const rounds: { documents: number; ms: number }[] = [];
    const timed = Object.create(reranker) as Reranker;
    timed.scorePairsAsync = async (pairs, onScored) => {
      const t0 = performance.now();
      const out = await reranker.scorePairsAsync(pairs, onScored);
      rounds.push({ documents: pairs.length, ms: performance.now() - t0 });
      return out;
    };
    const server = new RerankServer(timed, { modelName: 'reranker', maxDocuments: PER_REQUEST });
    const address = await server.listen(0);
    const requests: { query: string; documents: string[] }[] = [];
    for (let i = 0; i < documents.length; i += PER_REQUEST) requests.push({ query, documents: documents.slice(i, i + PER_REQUEST) });
    const httpMs = await httpLoadMs(`http://127.0.0.1:${address.port}/v1/rerank`, join(dir, 'requests.json'), requests, CLIENTS, reps);
    await server.close();
    const perPass = rounds.length / (reps + 1), computeMs = rounds.reduce((a, r) => a + r.ms, 0) / (reps + 1);
    console.log(`${dtype} over HTTP: ${rounds.length} rounds in ${reps + 1} passes (${perPass.toFixed(1)} a pass); compute ${computeMs.toFixed(1)} ms a pass of ${httpMs.toFixed(1)} ms; round sizes ${rounds.slice(0, 12).map((r) => `${r.documents}:${r.ms.toFixed(1)}ms`).join(' ')} …`);
    const rate = (t: number | undefined) => (t === undefined ? undefined : Math.round(documents.length / (t / 1000)));
    rows.push({
      model: 'Qwen3-Reranker-0.6B size (random weights)', dtype, documents: documents.length, tokens, batch: BATCH, token_mismatches: tokenMismatches, worst_abs_err: worst, correct,
      ours_ms: ms, ours_reps_ms: times, ours_dense_ms: median(dense.times), ours_dense_reps_ms: dense.times, dense_vs_shared_worst_abs: dense.worst, prefix_stats: prefixStats, ours_docs_per_s: rate(ms), ours_tokens_per_s: Math.round(tokens / (ms / 1000)), http_ms: httpMs, http_docs_per_s: rate(httpMs),
      hf_eager_ms: hf.timings['eager'], hf_eager_sorted_ms: hf.timings['eager_sorted'], hf_compile_sorted_ms: hf.timings['compile_sorted'],
      ...(hf.timings['eager_sorted'] ? { speedup_vs_eager_sorted: hf.timings['eager_sorted'] / ms } : {}), ...(hf.timings['compile_sorted'] ? { speedup_vs_compile_sorted: hf.timings['compile_sorted'] / ms } : {}),
      torch: hf.torch, device: hf.device, scores, hf_scores: hf.scores, pair_tokens: lengths,
    });
  } finally {
    reranker.free();
  }
}

/** Wall ms of each of --reps calls scoring every document (CUDA-synchronised). */
function timedReps(reranker: Reranker): number[] {
  const times: number[] = [];
  for (let r = 0; r < reps; r++) {
    backend.synchronize();
    const start = performance.now();
    reranker.rerank(query, documents);
    backend.synchronize();
    times.push(performance.now() - start);
  }
  return times;
}

/** Ours with every pass dense (no shared prefix): its reps after a warm-up, and its scores' worst distance from `shared`'s. */
function timeDense(dtype: FloatDType, shared: readonly number[]): { times: number[]; worst: number } {
  const reranker = Reranker.load(dir, backend, { dtype, batchSize: BATCH, maxSharedPrefix: 0 });
  try {
    const { scores } = reranker.rerank(query, documents);
    const worst = scores.reduce((w, s, i) => Math.max(w, Math.abs(s - shared[i]!)), 0);
    return { times: timedReps(reranker), worst };
  } finally {
    reranker.free();
  }
}

const f = (x: unknown, d = 1) => (typeof x === 'number' ? x.toFixed(d) : '—');
const tokens = rows[0]?.['tokens'];
console.log(`\nbench:rerank — Qwen3-Reranker-0.6B-size Qwen3ForCausalLM (random weights), 1 query × ${documents.length} documents (${tokens} tokens), batches of ${BATCH}, logit("yes") − logit("no"); ${backend.description}`);
console.log('| dtype | correct | worst |Δscore| | ours ms (docs/s) | ours dense ms | over HTTP ms (docs/s) | HF eager ms | HF eager sorted | torch.compile sorted | vs eager sorted / compile |');
console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|---|');
for (const r of rows) {
  console.log(`| ${r['dtype']} | ${r['correct'] === undefined ? '—' : r['correct'] ? 'yes' : `NO (${r['token_mismatches']} token counts differ)`} | ${(r['worst_abs_err'] as number).toExponential(2)} | ${f(r['ours_ms'])} (${r['ours_docs_per_s']}) | ${f(r['ours_dense_ms'])} | ${f(r['http_ms'])} (${r['http_docs_per_s']}) | ${f(r['hf_eager_ms'])} | ${f(r['hf_eager_sorted_ms'])} | ${f(r['hf_compile_sorted_ms'])} | ${f(r['speedup_vs_eager_sorted'], 2)}× / ${f(r['speedup_vs_compile_sorted'], 2)}× |`);
}
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileAtomically(cli.json!, `${JSON.stringify({ date: new Date().toISOString(), device: backend.description, rows }, null, 2)}\n`);
if (!cli.keep) rmSync(dir, { recursive: true, force: true });
if (rows.some((r) => r['correct'] === false)) process.exitCode = 1;
