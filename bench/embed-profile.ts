// Where a batch of sentence embeddings spends its time on the GPU: the Embedder's pass over one batch of
// 32 sequences (of the median length in bench:embed's workload, BERT's or --model qwen3's decoder) profiled op by op (src/profile), and the
// whole workload timed per batch as wall time against device time (CUDA events), to tell host-bound
// batches from slow kernels. Needs the directory bench:embed builds (bench/hf_embed.py build DIR).
//
// With --rerank, DIR is bench:rerank's (bench/hf_rerank.py build DIR): one batch of 32 of its pairs (one query,
// documents of the median length) scored by the Reranker, profiled with the query's shared prefix and with every
// pass dense (maxSharedPrefix 0), then the whole workload's batches timed as above.
//
// Usage: node dist/bench/embed-profile.js DIR [--dtype bf16] [--rerank] [--host-only (three passes, for node --cpu-prof)]

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { Event } from '../src/backend/cuda/runtime/device.js';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { Embedder } from '../src/infer/embedder.js';
import { Reranker } from '../src/infer/reranker.js';
import { profile, ProfilingBackend } from '../src/profile/profiler.js';
import { formatKernelTable, formatSummary } from '../src/profile/report.js';
import { median } from './device-timing.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { dtype: { type: 'string', default: 'bf16' }, rerank: { type: 'boolean', default: false }, 'host-only': { type: 'boolean', default: false } } });
const dir = positionals[0]!;
if (values.rerank) {
  await profileRerank(dir, values.dtype as FloatDType);
  process.exit(0);
}
const sequences = (JSON.parse(readFileSync(join(dir, 'sequences.json'), 'utf8')) as { sequences: number[][] }).sequences;
const { backend } = await selectBackend();
const cuda = backend as CudaBackend;
const tap = new ProfilingBackend(backend);
// The model's own pooling: mean for bench:embed's BERT, the last token for its Qwen3 (--model qwen3).
const embedder = Embedder.load(dir, tap.backend, { dtype: values.dtype as FloatDType, batchSize: 32, normalize: true });
const sorted = [...sequences].sort((a, b) => b.length - a.length);
const middle = sorted.slice(Math.max(0, (sorted.length >> 1) - 16), Math.max(0, (sorted.length >> 1) - 16) + 32);
if (values['host-only']) {
  // For node --cpu-prof: the whole workload three times, nothing else.
  embedder.embedSequences(sequences);
  const t0 = performance.now();
  for (let r = 0; r < 3; r++) embedder.embedSequences(sequences);
  console.log(`3 passes over ${sequences.length} sequences: ${(performance.now() - t0).toFixed(0)} ms`);
  embedder.free();
  process.exit(0);
}
console.log(`one batch: 32 sequences of ${middle.at(-1)!.length}–${middle[0]!.length} tokens`);
const p = profile(tap, () => { embedder.embedSequences(middle); }, { repeats: 5, dtype: values.dtype as FloatDType });
console.log(formatSummary(p, 'batch'));
console.log(formatKernelTable(p, 25));

// Per batch of the whole workload: wall vs device time.
embedder.embedSequences(sequences);
const start = cuda.runtime.createEvent({ timing: true }), end = cuda.runtime.createEvent({ timing: true });
const walls: number[] = [], devices: number[] = [];
for (let first = 0; first < sorted.length; first += 32) {
  const batch = sorted.slice(first, first + 32);
  backend.synchronize();
  const t0 = performance.now();
  start.record(cuda.runtime.stream);
  embedder.embedSequences(batch);
  end.record(cuda.runtime.stream);
  end.synchronize();
  walls.push(performance.now() - t0);
  devices.push(Event.elapsedMs(start, end));
}
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
console.log(`\nwhole workload, ${walls.length} batches: wall ${sum(walls).toFixed(1)} ms, device (events) ${sum(devices).toFixed(1)} ms; median batch wall ${median(walls).toFixed(2)} / device ${median(devices).toFixed(2)} ms`);
console.log(`longest batch (${sorted[0]!.length} tokens): wall ${walls[0]!.toFixed(2)} / device ${devices[0]!.toFixed(2)} ms; shortest (${sorted.at(-1)!.length}): ${walls.at(-1)!.toFixed(2)} / ${devices.at(-1)!.toFixed(2)} ms`);
embedder.free();

async function profileRerank(dir: string, dtype: FloatDType): Promise<void> {
  const { query, documents } = JSON.parse(readFileSync(join(dir, 'workload.json'), 'utf8')) as { query: string; documents: string[] };
  const { backend } = await selectBackend();
  const cuda = backend as CudaBackend;
  const tap = new ProfilingBackend(backend);
  const byLength = [...documents].sort((a, b) => b.length - a.length);
  const from = Math.max(0, (byLength.length >> 1) - 16);
  const middle = byLength.slice(from, from + 32);
  for (const maxSharedPrefix of [undefined, 0]) {
    const label = maxSharedPrefix === 0 ? 'dense' : 'shared prefix';
    const reranker = Reranker.load(dir, tap.backend, { dtype, batchSize: 32, ...(maxSharedPrefix === 0 ? { maxSharedPrefix } : {}) });
    try {
      const p = profile(tap, () => { reranker.rerank(query, middle); }, { repeats: 5, dtype });
      console.log(`\n== ${label}: one batch of 32 pairs (documents of ${middle.at(-1)!.length}–${middle[0]!.length} characters)`);
      console.log(formatSummary(p, 'batch'));
      console.log(formatKernelTable(p, 25));
      reranker.rerank(query, documents);
      const start = cuda.runtime.createEvent({ timing: true }), end = cuda.runtime.createEvent({ timing: true });
      backend.synchronize();
      const t0 = performance.now();
      start.record(cuda.runtime.stream);
      reranker.rerank(query, documents);
      end.record(cuda.runtime.stream);
      end.synchronize();
      console.log(`${label}, whole workload (${documents.length} pairs): wall ${(performance.now() - t0).toFixed(1)} ms, device (events) ${Event.elapsedMs(start, end).toFixed(1)} ms`);
    } finally {
      reranker.free();
    }
  }
}
