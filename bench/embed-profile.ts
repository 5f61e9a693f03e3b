// Where a batch of sentence embeddings spends its time on the GPU: the Embedder's pass over one batch of
// 32 sequences (of the median length in bench:embed's workload, BERT's or --model qwen3's decoder) profiled op by op (src/profile), and the
// whole workload timed per batch as wall time against device time (CUDA events), to tell host-bound
// batches from slow kernels. Needs the directory bench:embed builds (bench/hf_embed.py build DIR).
//
// Usage: node dist/bench/embed-profile.js DIR [--dtype bf16] [--host-only (three passes, for node --cpu-prof)]

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { Event } from '../src/backend/cuda/runtime/device.js';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { Embedder } from '../src/infer/embedder.js';
import { profile, ProfilingBackend } from '../src/profile/profiler.js';
import { formatKernelTable, formatSummary } from '../src/profile/report.js';
import { median } from './device-timing.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { dtype: { type: 'string', default: 'bf16' }, 'host-only': { type: 'boolean', default: false } } });
const dir = positionals[0]!;
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
