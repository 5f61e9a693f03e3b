// Long-context training: attention memory O(L) with the fused (FlashAttention) op, O(L²) without.
//
// GPT-2 124M with 32,768 positions, batch 1, bf16, at sequence lengths up to 32k. For each length it
// plans the step both ways (the planner traces the step, so the activation arena it reports is what
// the step would allocate) and trains a few steps where the arena fits in device memory:
//   - LightSeq path: scores and probabilities [B, H, L, L] per layer, kept for the backward; at 32k
//     that is 12 heads × 32768² × 2 bytes = 24 GiB per tensor per layer — far past one H200;
//   - fused attention: only out and the log-sum-exp (B·H·L floats) per layer.
// With --checkpoint, every block is recomputed in the backward (the arena then holds one block's
// activations instead of twelve).
//
// Usage: node dist/bench/long-context.js [--json bench/results/long-context.json] [--seq-lens 4096,8192,16384,32768] [--steps 5]

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { Gpt2Config } from '../src/models/gpt2.js';
import { GPT2_PRESETS } from '../src/models/gpt2.js';
import { Gpt2Model } from '../src/models/gpt2-model.js';
import { StepRunner } from '../src/train/step-runner.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/long-context.json' },
    'seq-lens': { type: 'string', default: '4096,8192,16384,32768' },
    steps: { type: 'string', default: '5' },
    checkpoint: { type: 'boolean', default: false },
  },
});
const SEQ_LENS = cli['seq-lens']!.split(',').map(Number);
const STEPS = Number(cli.steps);
const MAX_L = Math.max(...SEQ_LENS);
const config: Gpt2Config = { ...GPT2_PRESETS['gpt2-124M']!, maxPositions: MAX_L, residualDropout: 0, embeddingDropout: 0, attentionDropout: 0 };
const GiB = 2 ** 30;

const { backend } = await selectBackend('cuda');

interface Row { seqLen: number; path: 'lightseq' | 'fused'; arenaGiB: number; trained: boolean; stepMs?: number; tokensPerS?: number; peakGiB?: number; loss?: number; error?: string }
const rows: Row[] = [];

function tokens(n: number, seed: number): Int32Array {
  let s = seed;
  return Int32Array.from({ length: n }, () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s % config.vocabSize; });
}

for (const L of SEQ_LENS) {
  for (const fused of [false, true]) {
    const path = fused ? 'fused' : 'lightseq';
    backend.resetPeakMemory();
    const before = backend.memoryStats().bytesInUse;
    const model = new Gpt2Model(backend, config, 'bf16', { fusedAttention: fused });
    model.checkpointEvery = cli.checkpoint ? 1 : 0;
    model.params.initialize(1n);
    let runner: StepRunner | undefined;
    const row: Row = { seqLen: L, path, arenaGiB: NaN, trained: false };
    try {
      runner = new StepRunner(model, { maxBatch: 1, maxSeqLen: L });
      row.arenaGiB = runner.arenaBytes / GiB;
      const batch = { batch: 1, seqLen: L, tokens: tokens(L, 1), targets: tokens(L, 2) };
      for (let i = 0; i < 2; i++) runner.trainStep(batch, 1e-4, 1);
      const times: number[] = [];
      for (let i = 0; i < STEPS; i++) {
        const t0 = performance.now();
        row.loss = runner.trainStep(batch, 1e-4, 1).loss;
        times.push(performance.now() - t0);
      }
      times.sort((a, b) => a - b);
      row.stepMs = times[Math.floor(times.length / 2)]!;
      row.tokensPerS = L / (row.stepMs / 1000);
      row.peakGiB = (backend.memoryStats().peakBytesInUse - before) / GiB;
      row.trained = Number.isFinite(row.loss);
    } catch (e) {
      row.error = (e as Error).message.split('\n')[0]!.slice(0, 200);
    } finally {
      runner?.dispose();
      model.params.free();
    }
    rows.push(row);
    console.log(`L=${L} ${path}: ${row.trained ? `${row.stepMs!.toFixed(0)} ms/step, peak ${row.peakGiB!.toFixed(2)} GiB, loss ${row.loss!.toFixed(3)}` : `not trained: ${row.error}`}`);
  }
}

const table = [
  `| GPT-2 124M, batch 1, bf16${cli.checkpoint ? ', checkpointed' : ''} | path | activation arena GiB | peak GiB | ms/step | tokens/s | trains? |`,
  '|---|---|---:|---:|---:|---:|---|',
  ...rows.map((r) => `| L = ${r.seqLen} | ${r.path} | ${Number.isFinite(r.arenaGiB) ? r.arenaGiB.toFixed(2) : '—'} | ${r.peakGiB?.toFixed(2) ?? '—'} | ${r.stepMs?.toFixed(0) ?? '—'} | ${r.tokensPerS ? Math.round(r.tokensPerS) : '—'} | ${r.trained ? 'yes' : `no: ${r.error ?? 'non-finite loss'}`} |`),
].join('\n');
console.log(`\n${table}`);
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileSync(cli.json!, JSON.stringify({ date: new Date().toISOString().slice(0, 10), device: backend.description, checkpoint: cli.checkpoint, rows, table }, null, 1));
