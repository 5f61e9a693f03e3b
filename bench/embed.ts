// `npm run bench:embed`: sentence embeddings from a BERT-base-size encoder (--model bert, the default) or a
// Qwen3-Embedding-0.6B-size decoder (--model qwen3: last-token pooling, `npm run bench:embed-decoder`) —
// fuseformer's Embedder (the engine behind `fuseformer embed` and the /v1/embeddings server) against Hugging
// Face BertModel + mean pooling / Qwen3Model + its last token in PyTorch eager and torch.compile, in the same run
// (bench/hf_embed.py), on the same 2,048 token sequences of 8–256 tokens:
//   1. correctness: each of our vectors against HF's (fp32 math on the same weights): cosine ≥ 0.999 in bf16,
//      ‖ours − HF‖ / ‖HF‖ ≤ 1e-4 in fp32;
//   2. speed: all sequences embedded in batches of 32 (median wall time over --reps, CUDA-synchronised, after
//      a warm-up pass) — ours (batches sorted by length, as the Embedder always does), HF eager in the
//      sequences' order and sorted by length (as SentenceTransformer.encode batches), torch.compile sorted;
//   3. the HTTP server: the same sequences sent by 64 concurrent clients from another process, 16 a request
//      (token ids, base64 answers), through EmbeddingServer on the same Embedder: sequences/s end to end.
// Writes --json (bench/results/embed.json) and prints a table.
//
// Usage: node dist/bench/embed.js [--model bert|qwen3] [--json bench/results/embed.json] [--python python3] [--reps 5] [--keep DIR]
//        [--dtypes bf16,f32] [--no-hf (ours only: no baseline, no correctness check)] [--no-compile]
//        [--round-inputs N (the server's most inputs a round; default its own, 512)]

import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { Embedder } from '../src/infer/embedder.js';
import { writeFileAtomically } from '../src/io/atomic-write.js';
import { EmbeddingServer } from '../src/serve/embedding-server.js';
import { median } from './device-timing.js';
import { hfScript } from './hf-script.js';
import { httpLoadMs } from './http-load.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/embed.json' }, python: { type: 'string', default: 'python3' },
    reps: { type: 'string', default: '5' }, keep: { type: 'string' }, 'no-compile': { type: 'boolean', default: false },
    'no-hf': { type: 'boolean', default: false }, dtypes: { type: 'string', default: 'bf16,f32' }, 'round-inputs': { type: 'string' },
    model: { type: 'string', default: 'bert' },
  },
});
if (cli.model !== 'bert' && cli.model !== 'qwen3') throw new Error(`--model must be bert or qwen3, got '${cli.model}'`);
const pooling = cli.model === 'bert' ? 'mean' : 'last';
const reps = Number(cli.reps);
const BATCH = 32, CLIENTS = 64, PER_REQUEST = 16;
const dir = cli.keep ?? mkdtempSync(join(tmpdir(), 'fuseformer-bench-embed-'));
mkdirSync(dir, { recursive: true });

const python = hfScript(cli.python!, 'bench/hf_embed.py');

// The decoder's workload: 1,024 sequences (a 0.6B model's pass over 2,048 takes seconds in HF eager).
if (!existsSync(join(dir, 'sequences.json'))) python(['build', dir, '--model', cli.model!, ...(cli.model === 'qwen3' ? ['--sequences', '1024'] : [])]);
const sequences = (JSON.parse(readFileSync(join(dir, 'sequences.json'), 'utf8')) as { sequences: number[][] }).sequences;
const tokens = sequences.reduce((n, s) => n + s.length, 0);
const { backend } = await selectBackend();
if (backend.name !== 'cuda') throw new Error('bench:embed times the CUDA backend; no GPU was found');

const rows: Record<string, unknown>[] = [];
for (const dtype of cli.dtypes!.split(',') as FloatDType[]) {
  // --no-hf: our rows alone (no correctness check, no baseline; for probing the server).
  if (!cli['no-hf']) python(['run', dir, '--dtype', dtype, '--batch-size', String(BATCH), '--reps', String(reps), ...(cli['no-compile'] || dtype === 'f32' ? ['--no-compile'] : [])]);
  const hf = cli['no-hf'] ? { vectors: [], timings: {} as Record<string, number>, torch: '', device: '' }
    : JSON.parse(readFileSync(join(dir, `hf-${dtype}.json`), 'utf8')) as { vectors: number[][]; timings: Record<string, number>; torch: string; device: string };
  const embedder = Embedder.load(dir, backend, { dtype, batchSize: BATCH, pooling, normalize: true });
  try {
    // 1. Correctness.
    const ours = embedder.embedSequences(sequences);
    let worstCosine = 1, worstRel = 0;
    ours.forEach((v, i) => {
      const r = hf.vectors[i];
      if (!r) return;
      let dot = 0, nv = 0, nr = 0, diff = 0;
      for (let h = 0; h < r.length; h++) { dot += v[h]! * r[h]!; nv += v[h]! ** 2; nr += r[h]! ** 2; diff += (v[h]! - r[h]!) ** 2; }
      worstCosine = Math.min(worstCosine, dot / Math.sqrt(nv * nr));
      worstRel = Math.max(worstRel, Math.sqrt(diff / nr));
    });
    const correct = cli['no-hf'] ? undefined : dtype === 'bf16' ? worstCosine >= 0.999 : worstRel <= 1e-4;
    // 2. Speed: all sequences, median of reps after a warm-up (the pass above).
    const times: number[] = [];
    for (let r = 0; r < reps; r++) {
      backend.synchronize();
      const start = performance.now();
      embedder.embedSequences(sequences);
      backend.synchronize();
      times.push(performance.now() - start);
    }
    const ms = median(times);
    // 3. Over HTTP: 64 clients in another process, 16 sequences a request.
    // The server's rounds: inputs and compute time each (is the loop computing or waiting for requests?).
    const rounds: { inputs: number; ms: number }[] = [];
    const timed = Object.create(embedder) as Embedder;
    timed.embedSequences = (batch) => {
      const t0 = performance.now();
      const out = embedder.embedSequences(batch);
      rounds.push({ inputs: batch.length, ms: performance.now() - t0 });
      return out;
    };
    // The server's default form: a round's wall time (it yields to the event loop while the GPU computes).
    timed.embedSequencesAsync = async (batch, onEmbedded) => {
      const t0 = performance.now();
      const out = await embedder.embedSequencesAsync(batch, onEmbedded);
      rounds.push({ inputs: batch.length, ms: performance.now() - t0 });
      return out;
    };
    const server = new EmbeddingServer(timed, { modelName: cli.model!, maxQueuedInputs: sequences.length, ...(cli['round-inputs'] ? { maxRoundInputs: Number(cli['round-inputs']) } : {}) });
    const address = await server.listen(0);
    const requests: { input: number[][]; encoding_format: 'base64' }[] = [];
    for (let i = 0; i < sequences.length; i += PER_REQUEST) requests.push({ input: sequences.slice(i, i + PER_REQUEST), encoding_format: 'base64' });
    const httpMs = await httpLoadMs(`http://127.0.0.1:${address.port}/v1/embeddings`, join(dir, 'requests.json'), requests, CLIENTS, reps);
    await server.close();
    const perPass = rounds.length / (reps + 1), computeMs = rounds.reduce((a, r) => a + r.ms, 0) / (reps + 1);
    console.log(`${dtype} over HTTP: ${rounds.length} rounds in ${reps + 1} passes (${perPass.toFixed(1)} a pass, ${(sequences.length / perPass).toFixed(1)} inputs a round); compute ${computeMs.toFixed(1)} ms a pass of ${httpMs.toFixed(1)} ms; round sizes ${rounds.slice(0, 12).map((r) => `${r.inputs}:${r.ms.toFixed(1)}ms`).join(' ')} …`);
    const rate = (t: number | undefined) => (t === undefined ? undefined : Math.round(sequences.length / (t / 1000)));
    rows.push({
      model: cli.model, dtype, sequences: sequences.length, tokens, batch: BATCH, worst_cosine: worstCosine, worst_rel_err: worstRel, correct,
      ours_ms: ms, ours_seq_per_s: rate(ms), http_ms: httpMs, http_seq_per_s: rate(httpMs),
      hf_eager_ms: hf.timings['eager'], hf_eager_sorted_ms: hf.timings['eager_sorted'], hf_compile_sorted_ms: hf.timings['compile_sorted'],
      http_rounds_per_pass: perPass, http_compute_ms_per_pass: computeMs,
      ...(hf.timings['eager_sorted'] ? { speedup_vs_eager_sorted: hf.timings['eager_sorted'] / ms } : {}), ...(hf.timings['compile_sorted'] ? { speedup_vs_compile_sorted: hf.timings['compile_sorted'] / ms } : {}),
      torch: hf.torch, device: hf.device,
    });
  } finally {
    embedder.free();
  }
}

const f = (x: unknown, d = 1) => (typeof x === 'number' ? x.toFixed(d) : '—');
console.log(`\nbench:embed — ${cli.model === 'bert' ? 'BERT-base' : 'Qwen3-Embedding-0.6B-size Qwen3Model'} (random weights), ${sequences.length} sequences of 8–256 tokens (${tokens} tokens), batches of ${BATCH}, ${pooling} pooling + L2 norm; ${backend.description}`);
console.log('| dtype | correct | worst cosine / rel err | ours ms (seq/s) | over HTTP ms (seq/s) | HF eager ms | HF eager sorted | torch.compile sorted | vs eager sorted / compile |');
console.log('|---|---|---|---:|---:|---:|---:|---:|---|');
for (const r of rows) {
  console.log(`| ${r['dtype']} | ${r['correct'] === undefined ? '—' : r['correct'] ? 'yes' : 'NO'} | ${(r['worst_cosine'] as number).toFixed(6)} / ${(r['worst_rel_err'] as number).toExponential(2)} | ${f(r['ours_ms'])} (${r['ours_seq_per_s']}) | ${f(r['http_ms'])} (${r['http_seq_per_s']}) | ${f(r['hf_eager_ms'])} | ${f(r['hf_eager_sorted_ms'])} | ${f(r['hf_compile_sorted_ms'])} | ${f(r['speedup_vs_eager_sorted'], 2)}× / ${f(r['speedup_vs_compile_sorted'], 2)}× |`);
}
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileAtomically(cli.json!, `${JSON.stringify({ date: new Date().toISOString(), device: backend.description, rows }, null, 2)}\n`);
if (!cli.keep) rmSync(dir, { recursive: true, force: true });
if (rows.some((r) => r['correct'] === false)) process.exitCode = 1;
