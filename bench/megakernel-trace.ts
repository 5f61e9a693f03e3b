// Where the decode megakernel's time goes (kernels/decode-layers.ts built with its trace on): thread 0 of
// every block stamps %globaltimer at each stage boundary of a batch-1 decode step; this prints, per stage
// of a layer (averaged over layers), the median and slowest block's time in it, and for each grid barrier
// the spread of arrivals (first to last block) and the release latency (last arrival to the median
// block's exit), plus the share of product time spent waiting on weights.
//
//   node dist/bench/megakernel-trace.js [--models gpt2-124M,llama-1.2B] [--json out.json]

import { parseArgs } from 'node:util';
import { writeFileSync } from 'node:fs';
import { CudaBackend } from '../src/backend/cuda/index.js';
import { megakernelTuning, TRACE_PER_LAYER, traceStride } from '../src/backend/cuda/kernels/decode-layers.js';
import { DecodeEngine } from '../src/infer/engine.js';
import { megakernelOptions } from '../src/infer/forward.js';
import { randomDecoderModel } from '../src/infer/model.js';
import { resolveSampling } from '../src/infer/sampling.js';
import { presetConfig } from '../src/models/registry.js';

const cli = parseArgs({ options: { models: { type: 'string', default: 'gpt2-124M,llama-1.2B' }, json: { type: 'string' } } }).values;
const backend = CudaBackend.create();
const G = backend.runtime.multiProcessorCount;
// Stage boundaries within a layer (the STAMP indices of the kernel).
const STAGES = ['qkv product', 'barrier 1', 'attention', 'barrier 2', 'O input', 'O product', 'barrier 3', 'UP norm', 'UP product', 'barrier 4', 'DOWN input', 'DOWN product', 'barrier 5', 'QKV norm (next)'] as const;
const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]!; };
const report: Record<string, unknown> = {};
console.log(`consumers: ${megakernelTuning.warpChunks ? 'a warp per chunk' : 'the block per chunk'}; slot ${megakernelTuning.slotKiB ? `${megakernelTuning.slotKiB} KiB` : 'default'}`);

for (const name of cli.models!.split(',')) {
  const model = randomDecoderModel(presetConfig(name), backend, { dtype: 'bf16', seed: 1n });
  const L = model.arch.layers, stride = traceStride(L);
  const trace = backend.empty([G * stride * 2], 'i32');
  backend.decodeLayersTrace = trace;
  megakernelOptions.enabled = true;
  const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 160 });
  try {
    engine.start([{ prompt: Array.from({ length: 32 }, (_, i) => (i * 7919) % 1000), maxNewTokens: 64, sampling: resolveSampling({ temperature: 0 }) }], []);
    engine.decode(6);
    backend.synchronize();
    const words = backend.download(trace) as Int32Array;
    const stamps = new BigUint64Array(words.buffer, words.byteOffset, G * stride);
    const at = (b: number, i: number) => Number(stamps[b * stride + i]! - stamps[0 * stride + 2]!) / 1000;  // µs from block 0's dependency wait
    const blocks = Array.from({ length: G }, (_, b) => b);
    const total = median(blocks.map((b) => at(b, 3 + L * TRACE_PER_LAYER) - at(b, 0)));
    // Per stage: its duration per block (stamp i+1 − stamp i within the layer; the last wraps to the next layer's QKV norm).
    const rows = STAGES.map((stage, i) => {
      const durations: number[] = [], maxes: number[] = [];
      for (let l = 0; l < L; l++) {
        const from = 3 + l * TRACE_PER_LAYER + i, to = i === STAGES.length - 1 ? (l + 1 < L ? 3 + (l + 1) * TRACE_PER_LAYER : null) : from + 1;
        if (to === null) continue;
        const d = blocks.map((b) => at(b, to) - at(b, from));
        durations.push(median(d));
        maxes.push(Math.max(...d));
      }
      const row: Record<string, number | string> = { stage, medianUs: durations.reduce((a, b) => a + b, 0) / durations.length, slowestUs: maxes.reduce((a, b) => a + b, 0) / maxes.length };
      if (stage.startsWith('barrier')) {
        // Arrivals: the stamp before the barrier; release: the stamp after.
        const spread: number[] = [], release: number[] = [];
        for (let l = 0; l < L; l++) {
          const before = 3 + l * TRACE_PER_LAYER + i, after = before + 1;
          const arrivals = blocks.map((b) => at(b, before)), exits = blocks.map((b) => at(b, after));
          spread.push(Math.max(...arrivals) - Math.min(...arrivals));
          release.push(median(exits) - Math.max(...arrivals));
        }
        row['arrivalSpreadUs'] = spread.reduce((a, b) => a + b, 0) / L;
        row['releaseUs'] = release.reduce((a, b) => a + b, 0) / L;
      }
      return row;
    });
    const waited = median(blocks.map((b) => Number(stamps[b * stride + 3 + (L - 1) * TRACE_PER_LAYER + 14]!) / 1000));
    const layerUs = (at(0, 3 + (L - 1) * TRACE_PER_LAYER) - at(0, 3)) / (L - 1);
    console.log(`\n${name}: kernel ${total.toFixed(1)} µs (median block, start to end), ${layerUs.toFixed(2)} µs a layer; weights waited on ${waited.toFixed(1)} µs in all (median block)`);
    console.log(`  prologue: ring filled ${median(blocks.map((b) => at(b, 1) - at(b, 0))).toFixed(2)} µs, dependency wait ${median(blocks.map((b) => at(b, 2) - at(b, 1))).toFixed(2)} µs`);
    console.log('| stage | median block µs | slowest block µs | barrier arrival spread µs | release µs |');
    console.log('|---|---:|---:|---:|---:|');
    for (const r of rows) console.log(`| ${r['stage']} | ${(r['medianUs'] as number).toFixed(2)} | ${(r['slowestUs'] as number).toFixed(2)} | ${r['arrivalSpreadUs'] !== undefined ? (r['arrivalSpreadUs'] as number).toFixed(2) : ''} | ${r['releaseUs'] !== undefined ? (r['releaseUs'] as number).toFixed(2) : ''} |`);
    report[name] = { kernelUs: total, layerUs, waitedUs: waited, stages: rows };
  } finally {
    engine.dispose();
    backend.decodeLayersTrace = null;
    backend.free(trace);
    model.free();
  }
}
if (cli.json) writeFileSync(cli.json, JSON.stringify({ date: new Date().toISOString(), device: backend.description, blocks: G, tuning: megakernelTuning, models: report }, null, 2));
