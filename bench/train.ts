// Training throughput: fuseformer against PyTorch (HF transformers eager + torch.compile) in the same run.
//
// GPT-2 124M, batch 16 × 1024, and BERT-base (masked LM), batch 32 × 256, bf16 and fp16 with loss
// scaling: tokens/s from the median step time, peak memory, MFU. A step here is everything a training loop does per batch: upload the batch and
// optimizer scalars, forward, backward, gradient norm, AdamW, and read the loss back (a sync).
// Dropout is off on both sides (as in llm.c's GPT-2 runs).
//
// Usage: node dist/bench/train.js [--json bench/results/train.json] [--steps 20] [--no-torch] [--model gpt2]

import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import type { Gpt2Config } from '../src/models/gpt2.js';
import { GPT2_PRESETS, gpt2ConfigToJson, gpt2ParameterCount } from '../src/models/gpt2.js';
import type { BertConfig } from '../src/models/bert.js';
import { BERT_PRESETS, bertConfigToJson, bertParameterCount } from '../src/models/bert.js';
import { BertModel } from '../src/models/bert-model.js';
import type { LanguageModel } from '../src/models/language-model.js';
import { Gpt2Model } from '../src/models/gpt2-model.js';
import type { FusedAttentionChoice } from '../src/nn/attention.js';
import { describePlan } from '../src/nn/step-context.js';
import { StepRunner } from '../src/train/step-runner.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/train.json' },
    steps: { type: 'string', default: '20' },
    'no-torch': { type: 'boolean', default: false },
    /**
     * Which of our configurations to time: bf16 and f16 (attention path chosen by shape), bf16-ckpt
     * (gradient checkpointing of every block), bf16-lightseq / bf16-fused (one attention path forced).
     */
    variants: { type: 'string', default: 'bf16,f16,bf16-ckpt,bf16-lightseq,bf16-fused' },
    model: { type: 'string', default: 'gpt2,bert' },
    batch: { type: 'string', default: '16' },
    'seq-len': { type: 'string', default: '1024' },
  },
});
const STEPS = Number(cli.steps), B = Number(cli.batch), L = Number(cli['seq-len']);
const BERT_B = 32, BERT_L = 256;
const PEAK_TFLOPS = 790; // cuBLAS bf16 dense GEMM rate measured on the H200 (docs/perf.md)

interface ModelCase {
  readonly name: string;
  readonly batch: number;
  readonly seqLen: number;
  readonly parameters: number;
  readonly flopsPerToken: number;
  readonly build: (dtype: FloatDType, fusedAttention: FusedAttentionChoice) => LanguageModel;
  /** HF config for the PyTorch side. */
  readonly torch: { model: 'gpt2' | 'bert'; config: Record<string, unknown> };
  /** Masked LM: only ~15% of positions carry a target. */
  readonly masked: boolean;
}

const gpt2: Gpt2Config = { ...GPT2_PRESETS['gpt2-124M']!, residualDropout: 0, embeddingDropout: 0, attentionDropout: 0 };
const bert: BertConfig = { ...BERT_PRESETS['bert-base']!, hiddenDropout: 0, attentionDropout: 0 };
// Training FLOPs per token: 6N for the weights, plus attention's QKᵀ and PV (2·2·L·C per layer forward, ×3 with backward).
const attentionFlops = (layers: number, L: number, C: number) => 12 * layers * L * C;
const CASES: ModelCase[] = [
  {
    name: 'GPT-2 124M', batch: B, seqLen: L, parameters: gpt2ParameterCount(gpt2),
    flopsPerToken: 6 * gpt2ParameterCount(gpt2) + attentionFlops(gpt2.layers, L, gpt2.hidden),
    build: (dtype, fusedAttention) => new Gpt2Model(backend, gpt2, dtype, { fusedAttention }), masked: false,
    torch: { model: 'gpt2', config: { ...gpt2ConfigToJson(gpt2), architectures: undefined } },
  },
  {
    name: 'BERT-base', batch: BERT_B, seqLen: BERT_L, parameters: bertParameterCount(bert, 'masked-lm'),
    flopsPerToken: 6 * bertParameterCount(bert, 'masked-lm') + attentionFlops(bert.layers, BERT_L, bert.hidden),
    build: (dtype, fusedAttention) => new BertModel(backend, bert, dtype, { fusedAttention }), masked: true,
    torch: { model: 'bert', config: { ...bertConfigToJson(bert), architectures: undefined } },
  },
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

interface Breakdown { gpuStepMs: number; gemmMs: number; otherKernelsMs: number; gapsMs: number; topOps: { op: string; calls: number; ms: number }[] }
interface Measured { stepMs: number; tokensPerS: number; peakBytes: number; loss: number; mfu: number; allocationsPerStep: number; arenaBytes: number; breakdown: Breakdown }

const { backend } = await selectBackend('cuda');
const results: Record<string, unknown> = { date: new Date().toISOString().slice(0, 10), device: backend.description, steps: STEPS, peakTflops: PEAK_TFLOPS, models: {} };

function randomTokens(n: number, vocab: number, seed: number, maskedFraction = 1): Int32Array {
  let s = seed;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s; };
  return Int32Array.from({ length: n }, () => (next() / 2 ** 32 < maskedFraction ? next() % vocab : -100));
}

function measure(c: ModelCase, dtype: FloatDType, checkpointEvery: number, fusedAttention: FusedAttentionChoice): Measured {
  backend.resetPeakMemory();
  const baseline = backend.memoryStats().bytesInUse;
  const model = c.build(dtype, fusedAttention);
  model.checkpointEvery = checkpointEvery;
  model.params.initialize(1n);
  const runner = new StepRunner(model, { maxBatch: c.batch, maxSeqLen: c.seqLen });
  console.log(`${c.name} ${dtype}: ${describePlan(runner.largestPlan)}`);
  const n = c.batch * c.seqLen;
  const batch = { batch: c.batch, seqLen: c.seqLen, tokens: randomTokens(n, model.vocabSize, 1), targets: randomTokens(n, model.vocabSize, 2, c.masked ? 0.15 : 1) };
  const lossScale = dtype === 'f16' ? 1024 : 1;
  for (let i = 0; i < 3; i++) runner.trainStep(batch, 1e-4, lossScale); // compile + autotune, capture, first replay
  const times: number[] = [];
  let loss = 0, allocations = 0;
  for (let i = 0; i < STEPS; i++) {
    const t0 = performance.now();
    loss = runner.trainStep(batch, 1e-4, lossScale).loss;
    times.push(performance.now() - t0);
    allocations += runner.lastStepAllocations;
  }
  const stepMs = median(times);
  const tokensPerS = n / (stepMs / 1000);
  const peakBytes = backend.memoryStats().peakBytesInUse - baseline;
  // Where the time goes: GPU time of the replayed step against its ops timed one by one.
  const p = runner.profileTrainStep(batch, 1e-4, lossScale);
  const breakdown: Breakdown = {
    gpuStepMs: p.stepMs, gemmMs: p.gemmMs, otherKernelsMs: p.otherKernelsMs,
    gapsMs: Math.max(0, p.stepMs - p.gemmMs - p.otherKernelsMs), topOps: p.byOp.slice(0, 12),
  };
  const m: Measured = {
    stepMs, tokensPerS, peakBytes, loss,
    mfu: (tokensPerS * c.flopsPerToken) / (PEAK_TFLOPS * 1e12), allocationsPerStep: allocations / STEPS, arenaBytes: runner.arenaBytes, breakdown,
  };
  runner.dispose();
  model.params.free();
  return m;
}

const tables: string[] = [];
const VARIANTS: Record<string, [label: string, dtype: FloatDType, checkpointEvery: number, attention: FusedAttentionChoice]> = {
  'bf16': ['bf16', 'bf16', 0, 'auto'],
  'f16': ['f16', 'f16', 0, 'auto'],
  'bf16-ckpt': ['bf16 checkpointed', 'bf16', 1, 'auto'],
  'bf16-lightseq': ['bf16 LightSeq attention', 'bf16', 0, false],
  'bf16-fused': ['bf16 fused attention', 'bf16', 0, true],
};
const chosen = cli.variants!.split(',').map((v) => {
  const variant = VARIANTS[v];
  if (!variant) throw new Error(`--variants: unknown variant '${v}' (known: ${Object.keys(VARIANTS).join(', ')})`);
  return variant;
});
const models = cli.model!.split(',');
for (const c of CASES.filter((m) => models.includes(m.torch.model))) {
  const ours: Record<string, Measured> = {};
  for (const [label, dtype, checkpointEvery, fusedAttention] of chosen) {
    ours[label] = measure(c, dtype, checkpointEvery, fusedAttention);
    const m = ours[label]!;
    console.log(`fuseformer ${c.name} ${label}: ${m.stepMs.toFixed(1)} ms/step, ${Math.round(m.tokensPerS)} tok/s, MFU ${(100 * m.mfu).toFixed(1)}%, peak ${(m.peakBytes / 2 ** 30).toFixed(2)} GiB`);
    const bd = m.breakdown;
    console.log(`  GPU step ${bd.gpuStepMs.toFixed(1)} ms = GEMMs ${bd.gemmMs.toFixed(1)} + our kernels ${bd.otherKernelsMs.toFixed(1)} + gaps ${bd.gapsMs.toFixed(1)}; top: ${bd.topOps.slice(0, 8).map((o) => `${o.op} ${o.ms.toFixed(1)}`).join(', ')}`);
  }
  let torch: Record<string, { tokens_per_s?: number; step_ms?: number; peak_bytes?: number; error?: string }> | undefined;
  if (!cli['no-torch']) {
    const spec = { model: c.torch.model, config: c.torch.config, batch: c.batch, seq_len: c.seqLen, dtype: 'bf16', steps: STEPS, warmup: 5, modes: ['eager', 'compile'] };
    const run = spawnSync('python3', ['bench/torch_train.py'], { input: JSON.stringify(spec), encoding: 'utf8', maxBuffer: 16 << 20, timeout: 900_000 });
    if (run.status !== 0) {
      console.log(`PyTorch baseline failed: ${run.stderr?.slice(-2000) ?? run.error}`);
    } else {
      torch = JSON.parse(run.stdout.trim().split('\n').pop()!) as typeof torch;
      for (const mode of ['eager', 'compile']) {
        const t = torch![mode]!;
        if (t.error) console.log(`torch ${mode}: ${t.error}`);
        else console.log(`torch ${c.name} ${mode}: ${t.step_ms!.toFixed(1)} ms/step, ${Math.round(t.tokens_per_s!)} tok/s, peak ${(t.peak_bytes! / 2 ** 30).toFixed(2)} GiB`);
      }
    }
  }
  (results.models as Record<string, unknown>)[c.name] = { batch: c.batch, seqLen: c.seqLen, parameters: c.parameters, flopsPerToken: c.flopsPerToken, fuseformer: ours, torch };
  const compileTps = torch?.compile?.tokens_per_s;
  const mfu = (tps: number) => `${(100 * tps * c.flopsPerToken / (PEAK_TFLOPS * 1e12)).toFixed(1)}%`;
  const rows = [
    ...Object.entries(ours).map(([dtype, m]) => [`fuseformer ${dtype}`, m.stepMs.toFixed(1), Math.round(m.tokensPerS).toString(), mfu(m.tokensPerS), (m.peakBytes / 2 ** 30).toFixed(2), compileTps ? `${(m.tokensPerS / compileTps).toFixed(2)}×` : '—']),
    ...(['eager', 'compile'] as const).filter((k) => torch?.[k]?.tokens_per_s).map((k) => {
      const t = torch![k]!;
      return [`PyTorch ${k} bf16`, ((c.batch * c.seqLen) / t.tokens_per_s! * 1000).toFixed(1), Math.round(t.tokens_per_s!).toString(), mfu(t.tokens_per_s!), (t.peak_bytes! / 2 ** 30).toFixed(2), compileTps ? `${(t.tokens_per_s! / compileTps).toFixed(2)}×` : '—'];
    }),
  ];
  tables.push([`| ${c.name}, ${c.batch}×${c.seqLen} | ms/step | tokens/s | MFU | peak GiB | vs torch.compile |`, '|---|---:|---:|---:|---:|---:|', ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n'));
}

const table = tables.join('\n\n');
console.log(`\n${table}`);
results.table = table;
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileSync(cli.json!, JSON.stringify(results, null, 1));
