// Serving speed (issue #6): the ServingEngine (src/serve/engine.ts) under a closed-loop load, continuous
// batching against static batching of the same engine, and HF transformers generate() batched, in one run.
// In process, no HTTP: this measures the engine; `npm run bench:serve` is the robustness load test.
//
// Model: the Llama 1.2B preset (Llama 3.2 1B shape), random bf16 weights, on CUDA (--preset gpt2-tiny
// --backend cpu runs the harness anywhere as a smoke test). No stop tokens: a request makes exactly its
// drawn number of tokens (maxTokens), greedy.
// Workload (seeded): per concurrency C, N requests (default 4·C in [64, 1024]) with prompt and output
// lengths drawn lognormal — prompt median 256 (σ 1) clipped to [16, 1024], output median 128 (σ 0.8)
// clipped to [16, 512] — and random prompt tokens (no accidental prefix sharing). A closed loop of C
// clients: each submits its next request as soon as its previous one finishes (after the step returns).
// The same requests run under
//   continuous  batching: 'continuous' — a finished request's slot is refilled in the next step;
//   static      batching: 'static' — waves of up to maxRunning = C requests; the next wave starts only
//               when the whole wave has finished (scheduler.ts); same kernels, same step, same budget.
// Each engine is first warmed up as `fuseformer serve` does at start (src/serve/warmup.ts: a prompt of each
// power-of-two length, decode steps of each power-of-two batch — kernel compiles, GEMM tuning per row-count
// bucket, decode graphs; its time is reported as warmupMs), then runs C short requests (8 tokens).
// Measured per run: output tokens/s = tokens ÷ wall time of the run; TTFT = submit → first token; ITL =
// gaps between one request's successive tokens (tokens are stamped when the step that made them returns);
// p50/p99 by nearest rank; steps; mean batch = requests per step (mean decode batch: over steps with no
// prompt chunk); preemptions; peak KV blocks in use.
// Roofline: a step's floor = the larger of its bytes ÷ the device-to-device copy bandwidth measured in
// this run (as bench/decode.ts) — weight bytes it reads once (the LM head only when it samples) + the KV
// bytes its attention reads (start + count keys and values per item, all layers) — and its GEMM FLOPs ÷
// a large bf16 GEMM's rate measured in this run (2·layer weights per row, 2·vocab·hidden per sampled
// row; attention FLOPs are left out: ~1% of a prompt's at these lengths). Decode steps are bound by the
// bytes, long prompt chunks by the FLOPs. Step times are host timestamps around
// engine.step() + backend.synchronize() (a step that samples already ends with a download; prompt-only
// steps do not); with --pipeline (engine.ts, "Pipelined steps") around engine.step() alone, which
// launches a plan's step and returns once the step before it is read: a call's time is charged to the
// plan launched by the call before (the step it waited for), so the sums stay the run's wall time. "% of roofline" = Σ floor ÷ Σ step time, over the decode-only steps (the issue's target:
// ≥ 70% at the batch sizes the scheduler reaches) and over all steps (prefill steps are compute-bound, so
// this one is lower by design).
// Prefix sharing: C = 64 clients, 2·64 requests, each a shared 1024-token system prompt + a distinct
// suffix of 16–64 tokens; prefix caching on vs off: TTFT p50/p99, peak KV blocks in use × bytes a block
// (KV memory), tokens/s, prefix hit rate.
// HF baseline (bench/torch_serve.py): LlamaForCausalLM, same config, random init, bf16, CUDA; the first
// --torch-batches (default 2) static batches of C requests of the same workload, left-padded, generate()
// greedy with max_new_tokens = min_new_tokens = the batch's longest output; useful tokens = each request's
// drawn length; useful tokens/s = Σ useful ÷ Σ batch wall times.
// Targets (issue #6): continuous ≥ 2× static at C = 256; ≥ 70% of the roofline (decode steps).
//
// Usage: node dist/bench/serve-speed.js [--json bench/results/serve-speed.json] [--backend cuda|cpu]
//   [--preset llama-1.2B] [--concurrency 16,64,256] [--requests N] [--max-running N (default and minimum: C)]
//   [--max-batch-tokens 2048] [--block-size 16] [--kv-blocks N | --kv-memory-fraction F] [--seed 1]
//   [--prompt-median 256] [--prompt-range 16,1024] [--output-median 128] [--output-range 16,512]
//   [--prefix-length 1024] [--prefix-concurrency 64] [--prefix-requests 128] [--suffix-range 16,64] [--no-prefix]
//   [--no-torch] [--torch-batches 2] [--no-graphs (every step eager; graphs are the engine default on CUDA)]
//   [--no-pipeline (each step to its end before the next; pipelined is the engine's default on CUDA) | --pipeline]
// Smoke test: --preset gpt2-tiny --backend cpu --no-torch with small lengths (test/bench/serve-speed.test.ts).

import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { Backend } from '../src/backend/backend.js';
import { selectBackend } from '../src/backend/index.js';
import { byteSize } from '../src/dtype.js';
import { decodeWeightBytes } from '../src/infer/architecture.js';
import { randomDecoderModel } from '../src/infer/model.js';
import type { DecoderModel } from '../src/infer/model.js';
import { resolveSampling } from '../src/infer/sampling.js';
import { presetConfig, toHfJson } from '../src/models/registry.js';
import type { ModelConfig } from '../src/models/registry.js';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { ServingEngine } from '../src/serve/engine.js';
import type { Batching, ServingEngineOptions } from '../src/serve/engine.js';
import type { StepPlan } from '../src/serve/scheduler.js';
import { warmUp } from '../src/serve/warmup.js';
import { Rng } from '../src/testing/random.js';

// --- workload -----------------------------------------------------------------------------------------

export interface LengthDistribution { readonly median: number; readonly sigma: number; readonly min: number; readonly max: number }
export interface BenchRequest { readonly prompt: number[]; readonly outputTokens: number }

/** round(median · e^(σ·z)), z standard normal, clipped to [min, max]. */
export function drawLength(rng: Rng, d: LengthDistribution): number {
  return Math.min(d.max, Math.max(d.min, Math.round(d.median * Math.exp(d.sigma * rng.normal()))));
}

/** n requests: lognormal prompt and output lengths, uniform random prompt tokens; `prefix` starts every prompt. */
export function randomTokens(n: number, vocab: number, seed: number): number[] {
  const rng = new Rng(seed);
  return Array.from({ length: n }, () => Math.floor(rng.next() * vocab));
}

export function drawWorkload(n: number, prompt: LengthDistribution, output: LengthDistribution, vocab: number, seed: number, prefix: readonly number[] = []): BenchRequest[] {
  const rng = new Rng(seed);
  return Array.from({ length: n }, () => {
    const promptLength = drawLength(rng, prompt), outputTokens = drawLength(rng, output);
    const own = Array.from({ length: promptLength }, () => Math.floor(rng.next() * vocab));
    return { prompt: [...prefix, ...own], outputTokens };
  });
}

/** Nearest-rank percentile (q in [0, 1]); NaN for no samples. */
export function percentile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

// --- the bandwidth floor of a step ------------------------------------------------------------------

export interface StepCost {
  /** Weight bytes a step reads, the LM head included (it runs when some request samples). */
  readonly weightBytes: number;
  readonly lmHeadBytes: number;
  /** Key + value bytes of one position over all layers. */
  readonly kvBytesPerPosition: number;
  /** Device-to-device copy bandwidth, bytes/s (read + written). */
  readonly bandwidth: number;
  /** GEMM FLOPs of one row through every layer (2 · layer weights), and of one sampled row through the LM head. */
  readonly layerFlopsPerRow: number;
  readonly lmHeadFlopsPerRow: number;
  /** A large GEMM's rate, FLOP/s (Infinity: no compute floor). */
  readonly gemmRate: number;
}

export function stepCost(model: DecoderModel, bandwidth: number, gemmRate: number): StepCost {
  const arch = model.arch, e = byteSize(model.dtype);
  const weightBytes = decodeWeightBytes(arch, e), lmHeadBytes = arch.vocabSize * arch.hidden * e;
  return {
    weightBytes, lmHeadBytes, kvBytesPerPosition: 2 * arch.layers * arch.kvHeads * arch.headDim * e, bandwidth,
    layerFlopsPerRow: (2 * (weightBytes - lmHeadBytes)) / e, lmHeadFlopsPerRow: 2 * arch.vocabSize * arch.hidden, gemmRate,
  };
}

/** The floor of one step in ms: its bytes at copy bandwidth or its GEMM FLOPs at the GEMM rate, whichever is longer. */
export function stepFloorMs(plan: StepPlan, cost: StepCost): number {
  const samples = plan.items.some((it) => it.samples);
  const keys = plan.items.reduce((n, it) => n + it.start + it.count, 0);
  const rows = plan.items.reduce((n, it) => n + it.count, 0), sampled = plan.items.filter((it) => it.samples).length;
  const bytes = cost.weightBytes - (samples ? 0 : cost.lmHeadBytes) + keys * cost.kvBytesPerPosition;
  const flops = rows * cost.layerFlopsPerRow + sampled * cost.lmHeadFlopsPerRow;
  return Math.max(bytes / cost.bandwidth, flops / cost.gemmRate) * 1000;
}

/** The median ms of 10 runs of `op` between two stream markers, after one untimed run (a GEMM's first call tunes it). */
function medianOpMs(backend: Backend, op: () => void): number {
  op();
  const times: number[] = [];
  for (let i = 0; i < 10; i++) {
    const start = backend.mark();
    op();
    const end = backend.mark();
    times.push(end.elapsedSince(start));
    start.dispose(); end.dispose();
  }
  return percentile(times, 0.5);
}

/** A 4096³ bf16 GEMM's FLOP/s (CUDA only; Infinity elsewhere: the CPU backend gets no compute floor). */
function gemmRate(backend: Backend): number {
  if (backend.name !== 'cuda') return Infinity;
  const n = 4096, a = backend.empty([n, n], 'bf16'), b = backend.empty([n, n], 'bf16'), out = backend.empty([n, n], 'bf16');
  backend.fill(a, 0.01); backend.fill(b, 0.01);
  const ms = medianOpMs(backend, () => backend.gemm({ a, b, out }));
  backend.free(a); backend.free(b); backend.free(out);
  return (2 * n ** 3) / (ms / 1000);
}

/** Device-to-device copy bandwidth (bytes read + written per second), median of 10 copies (bench/decode.ts's method). */
function copyBandwidth(backend: Backend): number {
  const n = backend.name === 'cuda' ? 2 ** 29 : 2 ** 20, src = backend.empty([n], 'bf16'), dst = backend.empty([n], 'bf16');
  backend.fill(src, 1);
  const ms = medianOpMs(backend, () => backend.copy(src, dst));
  backend.free(src); backend.free(dst);
  return (2 * n * 2) / (ms / 1000);
}

// --- the closed loop --------------------------------------------------------------------------------

export interface RunMetrics {
  requests: number;
  outputTokens: number;
  /** Σ of the drawn output lengths: outputTokens must equal it (no stop tokens). */
  drawnOutputTokens: number;
  promptTokens: number;
  wallSeconds: number;
  tokensPerSecond: number;
  ttftMs: { p50: number; p99: number };
  itlMs: { p50: number; p99: number };
  steps: number;
  decodeSteps: number;
  meanBatch: number;
  meanDecodeBatch: number;
  decodeStepMsP50: number;
  preemptions: number;
  prefixHitRate: number;
  peakBlocksUsed: number;
  peakKvBytes: number;
  roofline: { decodePercent: number; allPercent: number; decodeFloorMs: number; decodeMeasuredMs: number; floorMs: number; measuredMs: number };
  /** Steps with a prompt chunk: how many, their median ms and rows, and the slowest few (rows, segments, ms). */
  mixedSteps: { count: number; msP50: number; rowsP50: number; slowest: { ms: number; rows: number; segments: number }[] };
  /** Graph-replayed steps: how many, shapes captured, rows computed (their shapes) and rows in use, over the run. */
  graphRows: { steps: number; captures: number; computed: number; used: number };
  /** Host work inside the run's steps on CUDA (kernel compiles, GEMM problems met and tuned): undefined elsewhere. */
  host?: HostCosts;
}

/** Deltas of the CUDA backend's JIT and GEMM-runner counters over a run. */
export interface HostCosts {
  kernelsCompiled: number;
  kernelsFromDisk: number;
  jitMs: number;
  gemmProblems: number;
  gemmProblemMs: number;
  gemmTunings: number;
  gemmTuneMs: number;
  /** The GEMM problems tuned (cache key, host ms), the latest last. */
  tuned: { key: string; ms: number }[];
}

function hostCounters(backend: Backend): HostCosts | undefined {
  if (backend.name !== 'cuda') return undefined;
  const cuda = backend as CudaBackend, j = cuda.runtime.jit.stats, g = cuda.gemmRunner.stats;
  return {
    kernelsCompiled: j.compiled, kernelsFromDisk: j.fromDisk, jitMs: j.ms, gemmProblems: g.entries, gemmProblemMs: g.entryMs,
    gemmTunings: g.tunings, gemmTuneMs: g.tuneMs, tuned: [...g.tuned],
  };
}

function hostDelta(after: HostCosts | undefined, before: HostCosts | undefined): HostCosts | undefined {
  if (!after || !before) return undefined;
  const n = (k: Exclude<keyof HostCosts, 'tuned'>) => after[k] - before[k];
  return {
    kernelsCompiled: n('kernelsCompiled'), kernelsFromDisk: n('kernelsFromDisk'), jitMs: n('jitMs'), gemmProblems: n('gemmProblems'),
    gemmProblemMs: n('gemmProblemMs'), gemmTunings: n('gemmTunings'), gemmTuneMs: n('gemmTuneMs'),
    tuned: n('gemmTunings') > 0 ? after.tuned.slice(-n('gemmTunings')) : [],
  };
}

interface Client { request: BenchRequest; submitted: number; times: number[] }

/**
 * Runs `work` through `engine` as a closed loop of `concurrency` clients and measures it. The scheduler's
 * plan of each step is observed by wrapping engine.scheduler.schedule (the engine calls it once a step).
 */
export function closedLoop(engine: ServingEngine, work: readonly BenchRequest[], concurrency: number, cost: StepCost): RunMetrics {
  const backend = engine.backend, scheduler = engine.scheduler;
  const schedule = scheduler.schedule.bind(scheduler);
  let plan: StepPlan | undefined, peakBlocks = 0;
  scheduler.schedule = () => {
    plan = schedule();
    peakBlocks = Math.max(peakBlocks, engine.pool.usedBlocks);
    return plan;
  };
  const before = engine.stats(), hostBefore = hostCounters(backend);
  const greedy = resolveSampling({ temperature: 0 });
  const done: Client[] = [];
  let next = 0, finishedThisStep = 0;
  const submit = (): void => {
    const request = work[next++]!;
    const client: Client = { request, submitted: performance.now(), times: [] };
    engine.submit({
      prompt: request.prompt, maxTokens: request.outputTokens, sampling: greedy, stopTokenIds: [],
      onToken: () => { client.times.push(performance.now()); },
      onFinish: () => { done.push(client); finishedThisStep++; },
    });
  };
  let floorMs = 0, measuredMs = 0, decodeFloorMs = 0, decodeMeasuredMs = 0, steps = 0, decodeSteps = 0, batchSum = 0, decodeBatchSum = 0;
  const decodeStepMs: number[] = [];
  const mixed: { ms: number; rows: number; segments: number }[] = [];
  // One plan's measured time: its floor and its kind (a multi-step run, decodeSteps, is n model steps of
  // one plan, each one position further on).
  const charge = (p: StepPlan, n: number, ms: number) => {
    let floor = 0;
    for (let j = 0; j < n; j++) floor += stepFloorMs(j === 0 ? p : { ...p, items: p.items.map((it) => ({ ...it, start: it.start + j })) }, cost);
    steps += n; batchSum += n * p.items.length; floorMs += floor; measuredMs += ms;
    if (p.items.every((it) => it.count === 1)) {
      decodeSteps += n; decodeBatchSum += n * p.items.length; decodeFloorMs += floor; decodeMeasuredMs += ms;
      for (let j = 0; j < n; j++) decodeStepMs.push(ms / n);
    } else {
      mixed.push({ ms, rows: p.items.reduce((n, it) => n + it.count, 0), segments: p.items.filter((it) => it.count > 1).length });
    }
  };
  // Pipelined: call j launches plan j and returns once step j − 1 is read, so its time is step j − 1's
  // (the device runs one step while the host prepares the next): charged to the plan launched before.
  let launched: StepPlan | undefined;
  const start = performance.now();
  try {
    for (let c = 0; c < Math.min(concurrency, work.length); c++) submit();
    while (engine.hasWork) {
      plan = undefined;
      const stepsBefore = engine.stats().steps;
      const t0 = performance.now();
      const ran = engine.step();
      // Pipelined steps: step() returns with the next step running on the device; waiting for it here
      // would undo the overlap it is there for.
      if (!engine.pipelined) backend.synchronize();
      const ms = performance.now() - t0;
      if (!ran || !plan) throw new Error(`serve-speed: the engine has work but ran no step (${engine.stats().waiting} waiting, ${engine.stats().blocksUsed}/${engine.stats().blocksTotal} blocks): give a larger KV pool`);
      const p: StepPlan = plan;
      if (!engine.pipelined) {
        charge(p, Math.max(1, engine.stats().steps - stepsBefore), ms);
      } else {
        if (launched) charge(launched, 1, ms);
        else measuredMs += ms;  // the first call: its step's launch alone
        launched = p.items.length > 0 ? p : undefined;
      }
      // Clients whose request finished in this step submit their next one now.
      for (; finishedThisStep > 0; finishedThisStep--) if (next < work.length) submit();
    }
  } finally {
    scheduler.schedule = schedule;
  }
  const wallSeconds = (performance.now() - start) / 1000;
  const after = engine.stats(), host = hostDelta(hostCounters(backend), hostBefore);
  const ttft = done.filter((c) => c.times.length > 0).map((c) => c.times[0]! - c.submitted);
  const itl = done.flatMap((c) => c.times.slice(1).map((t, i) => t - c.times[i]!));
  const outputTokens = done.reduce((n, c) => n + c.times.length, 0);
  const blockBytes = engine.kvPoolBytes / engine.pool.numBlocks;
  const queried = after.prefixQueried - before.prefixQueried;
  return {
    requests: done.length, outputTokens, drawnOutputTokens: work.reduce((n, r) => n + r.outputTokens, 0),
    promptTokens: work.reduce((n, r) => n + r.prompt.length, 0), wallSeconds, tokensPerSecond: outputTokens / wallSeconds,
    ttftMs: { p50: percentile(ttft, 0.5), p99: percentile(ttft, 0.99) }, itlMs: { p50: percentile(itl, 0.5), p99: percentile(itl, 0.99) },
    steps, decodeSteps, meanBatch: batchSum / Math.max(1, steps), meanDecodeBatch: decodeBatchSum / Math.max(1, decodeSteps),
    decodeStepMsP50: percentile(decodeStepMs, 0.5), preemptions: after.preemptions - before.preemptions,
    prefixHitRate: queried > 0 ? (after.prefixHits - before.prefixHits) / queried : 0,
    peakBlocksUsed: peakBlocks, peakKvBytes: peakBlocks * blockBytes,
    roofline: {
      decodePercent: (100 * decodeFloorMs) / decodeMeasuredMs, allPercent: (100 * floorMs) / measuredMs,
      decodeFloorMs, decodeMeasuredMs, floorMs, measuredMs,
    },
    graphRows: {
      steps: after.graphSteps - before.graphSteps, captures: after.graphCaptures - before.graphCaptures,
      computed: after.graphRowsComputed - before.graphRowsComputed, used: after.graphRowsUsed - before.graphRowsUsed,
    },
    mixedSteps: {
      count: mixed.length, msP50: percentile(mixed.map((m) => m.ms), 0.5), rowsP50: percentile(mixed.map((m) => m.rows), 0.5),
      slowest: [...mixed].sort((x, y) => y.ms - x.ms).slice(0, 5),
    },
    ...(host ? { host } : {}),
  };
}

// --- the HF baseline ------------------------------------------------------------------------------

/** torch_serve.py's answer for one concurrency. */
export interface TorchRow { requests?: number; batches?: number; useful_tokens?: number; padded_tokens?: number; seconds?: number; tokens_per_s?: number; padded_tokens_per_s?: number; error?: string }
type TorchOutcome = { ok: true; rows: Record<string, TorchRow> } | { ok: false; note: string };

function runTorch(config: ModelConfig, batchesByConcurrency: Map<number, BenchRequest[][]>, seed: number): TorchOutcome {
  const spec = {
    config: { ...toHfJson(config), architectures: undefined }, seed,
    runs: [...batchesByConcurrency].map(([concurrency, batches]) => ({
      concurrency, batches: batches.map((b) => b.map((r) => ({ prompt: r.prompt.length, output: r.outputTokens }))),
    })),
  };
  const run = spawnSync('python3', ['bench/torch_serve.py'], { input: JSON.stringify(spec), encoding: 'utf8', maxBuffer: 16 << 20, timeout: 1_200_000 });
  if (run.error) return { ok: false, note: `not run: python3: ${run.error.message}` };
  if (run.status !== 0) return { ok: false, note: `not run: ${(run.stderr || `exit ${run.status}`).trim().split('\n').slice(-3).join(' | ')}` };
  return { ok: true, rows: JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<string, TorchRow> };
}

// --- main -------------------------------------------------------------------------------------------

const pair = (name: string, v: string): [number, number] => {
  const xs = v.split(',').map(Number);
  if (xs.length !== 2 || !xs.every((x) => Number.isInteger(x) && x >= 1) || xs[0]! > xs[1]!) throw new Error(`--${name} must be 'min,max' (positive integers, min ≤ max), got '${v}'`);
  return [xs[0]!, xs[1]!];
};
const positive = (name: string, v: string, integer = true): number => {
  const x = Number(v);
  if (!(x > 0) || (integer && !Number.isSafeInteger(x))) throw new Error(`--${name} must be a positive ${integer ? 'integer' : 'number'}, got '${v}'`);
  return x;
};

async function main(): Promise<void> {
  const { values: cli } = parseArgs({
    options: {
      json: { type: 'string', default: 'bench/results/serve-speed.json' },
      backend: { type: 'string', default: 'cuda' },
      preset: { type: 'string', default: 'llama-1.2B' },
      concurrency: { type: 'string', default: '16,64,256' },
      requests: { type: 'string' },
      'max-running': { type: 'string' },
      'max-batch-tokens': { type: 'string', default: '2048' },
      'block-size': { type: 'string', default: '16' },
      'kv-blocks': { type: 'string' },
      'kv-memory-fraction': { type: 'string' },
      seed: { type: 'string', default: '1' },
      'prompt-median': { type: 'string', default: '256' },
      'prompt-range': { type: 'string', default: '16,1024' },
      'output-median': { type: 'string', default: '128' },
      'output-range': { type: 'string', default: '16,512' },
      'prefix-length': { type: 'string', default: '1024' },
      'prefix-concurrency': { type: 'string', default: '64' },
      'prefix-requests': { type: 'string' },
      'suffix-range': { type: 'string', default: '16,64' },
      'no-prefix': { type: 'boolean', default: false },
      'no-torch': { type: 'boolean', default: false },
      'torch-batches': { type: 'string', default: '2' },
      'no-graphs': { type: 'boolean', default: false },
      pipeline: { type: 'boolean', default: false }, 'no-pipeline': { type: 'boolean', default: false },
    },
  });
  const concurrencies = cli.concurrency!.split(',').map((c) => positive('concurrency', c));
  const seed = positive('seed', cli.seed!);
  const [pMin, pMax] = pair('prompt-range', cli['prompt-range']!), [oMin, oMax] = pair('output-range', cli['output-range']!);
  const promptDist: LengthDistribution = { median: positive('prompt-median', cli['prompt-median']!), sigma: 1, min: pMin, max: pMax };
  const outputDist: LengthDistribution = { median: positive('output-median', cli['output-median']!), sigma: 0.8, min: oMin, max: oMax };
  const prefixLength = positive('prefix-length', cli['prefix-length']!), [sMin, sMax] = pair('suffix-range', cli['suffix-range']!);
  const prefixC = positive('prefix-concurrency', cli['prefix-concurrency']!);
  const prefixN = cli['prefix-requests'] ? positive('prefix-requests', cli['prefix-requests']) : 2 * prefixC;
  const requestsFor = (c: number) => (cli.requests ? positive('requests', cli.requests) : Math.min(1024, Math.max(64, 4 * c)));
  const torchBatches = positive('torch-batches', cli['torch-batches']!);

  const config = presetConfig(cli.preset!);
  const { backend } = await selectBackend(cli.backend as 'cuda' | 'cpu');
  const model = randomDecoderModel(config, backend, { dtype: backend.name === 'cuda' ? 'bf16' : 'f32', seed: 1n });
  const maxLen = Math.max(pMax + oMax, cli['no-prefix'] ? 0 : prefixLength + sMax + oMax);
  if (maxLen > model.arch.maxPositions) throw new Error(`the longest request (${maxLen} positions) exceeds ${cli.preset}'s context of ${model.arch.maxPositions}: lower --prompt-range, --output-range or --prefix-length`);
  const bandwidth = copyBandwidth(backend);
  const cost = stepCost(model, bandwidth, gemmRate(backend));
  console.log(`${backend.description}; ${cli.preset} random ${model.dtype}${backend.name === 'cuda' && !cli['no-graphs'] ? '; steps as CUDA graphs' : ''}; device-to-device copy ${(bandwidth / 1e9).toFixed(1)} GB/s; ` +
    `bf16 GEMM ${Number.isFinite(cost.gemmRate) ? `${(cost.gemmRate / 1e12).toFixed(0)} TFLOP/s` : 'not timed (no compute floor)'}; weights ${(cost.weightBytes / 1e9).toFixed(3)} GB`);

  const engineOptions = (maxRunning: number, extra: ServingEngineOptions): ServingEngineOptions => ({
    maxLen, maxRunning, maxBatchTokens: positive('max-batch-tokens', cli['max-batch-tokens']!), blockSize: positive('block-size', cli['block-size']!),
    ...(cli['kv-blocks'] ? { numBlocks: positive('kv-blocks', cli['kv-blocks']) } : {}),
    ...(cli['kv-memory-fraction'] ? { kvMemoryFraction: positive('kv-memory-fraction', cli['kv-memory-fraction'], false) } : {}),
    ...(cli['no-graphs'] ? { graphs: false } : {}),
    ...(cli['no-pipeline'] ? { pipeline: false } : cli.pipeline ? { pipeline: true } : {}),
    ...extra,
  });
  /** A fresh engine, warmed up (warmup.ts, as `fuseformer serve` does at start), then on C short requests, then the measured closed loop. */
  let pipelined = false;
  const measure = (maxRunning: number, extra: ServingEngineOptions, work: BenchRequest[], concurrency: number, warmSeed: number): RunMetrics & { kvPoolBytes: number; blocksTotal: number; warmupMs: number } => {
    const engine = new ServingEngine(model, engineOptions(maxRunning, extra));
    pipelined ||= engine.pipelined;
    try {
      const warmup = warmUp(engine);
      const warm = Math.min(8, outputDist.max);
      closedLoop(engine, drawWorkload(concurrency, promptDist, { ...outputDist, min: warm, max: warm }, model.vocabSize, warmSeed), concurrency, cost);
      return { ...closedLoop(engine, work, concurrency, cost), kvPoolBytes: engine.kvPoolBytes, blocksTotal: engine.pool.numBlocks, warmupMs: warmup.ms };
    } finally {
      engine.dispose();
    }
  };

  const runs: Record<string, unknown>[] = [];
  const torchWork = new Map<number, BenchRequest[][]>();
  for (const C of concurrencies) {
    const N = requestsFor(C), maxRunning = cli['max-running'] ? Math.max(C, positive('max-running', cli['max-running'])) : C;
    const work = drawWorkload(N, promptDist, outputDist, model.vocabSize, seed + C);
    const row: Record<string, unknown> = { concurrency: C, requests: N, maxRunning };
    for (const batching of ['continuous', 'static'] as Batching[]) {
      const m = measure(maxRunning, { batching }, work, C, 7 * seed + C);
      row[batching] = m;
      console.log(`C ${C} ${batching}: ${m.tokensPerSecond.toFixed(0)} tok/s, TTFT p50 ${m.ttftMs.p50.toFixed(1)} ms, ITL p50 ${m.itlMs.p50.toFixed(2)} ms, mean decode batch ${m.meanDecodeBatch.toFixed(1)}, roofline ${m.roofline.decodePercent.toFixed(0)}% (decode steps), preemptions ${m.preemptions}`);
      console.log(`  steps: ${m.decodeSteps} decode-only (${m.roofline.decodeMeasuredMs.toFixed(0)} ms), ${m.mixedSteps.count} with a prompt chunk ` +
        `(${(m.roofline.measuredMs - m.roofline.decodeMeasuredMs).toFixed(0)} ms; p50 ${m.mixedSteps.msP50.toFixed(1)} ms at ${m.mixedSteps.rowsP50} rows)` +
        (m.graphRows.computed > 0 ? `; ${m.graphRows.steps} of ${m.steps} steps graph-replayed (${m.graphRows.captures} shapes captured), computing ${m.graphRows.computed} rows for ${m.graphRows.used} positions (${(100 * m.graphRows.used / m.graphRows.computed).toFixed(0)}% used)` : '') +
        (m.host ? `; host: ${m.host.kernelsCompiled} kernels compiled + ${m.host.kernelsFromDisk} from disk (${m.host.jitMs.toFixed(0)} ms), ` +
          `${m.host.gemmProblems} new GEMM problems (${m.host.gemmProblemMs.toFixed(0)} ms), ${m.host.gemmTunings} tuned (${m.host.gemmTuneMs.toFixed(0)} ms)` : ''));
      if (m.host && m.host.tuned.length > 0) console.log(`  tuned in the run: ${m.host.tuned.map((t) => `${t.key} (${t.ms.toFixed(0)} ms)`).join('; ')}`);
    }
    const cont = row.continuous as RunMetrics, stat = row.static as RunMetrics;
    row.ratio = cont.tokensPerSecond / stat.tokensPerSecond;
    // The ratio if both ran every step at the same fraction of its floor: Σ floor static ÷ Σ floor continuous (same tokens).
    row.floorRatio = stat.roofline.floorMs / cont.roofline.floorMs;
    runs.push(row);
    const nt = Math.min(N, torchBatches * C);
    torchWork.set(C, Array.from({ length: Math.ceil(nt / C) }, (_, b) => work.slice(b * C, Math.min(nt, (b + 1) * C))));
  }

  let prefix: Record<string, unknown> | undefined;
  if (!cli['no-prefix']) {
    const system = randomTokens(prefixLength, model.vocabSize, seed + 99);
    const work = drawWorkload(prefixN, { median: Math.round(Math.sqrt(sMin * sMax)), sigma: 0.4, min: sMin, max: sMax }, outputDist, model.vocabSize, seed + 100, system);
    const on = measure(prefixC, { prefixCaching: true }, work, prefixC, 11 * seed), off = measure(prefixC, { prefixCaching: false }, work, prefixC, 11 * seed);
    prefix = { systemPromptTokens: prefixLength, concurrency: prefixC, requests: prefixN, on, off, ttftP50Ratio: off.ttftMs.p50 / on.ttftMs.p50, kvMemoryRatio: off.peakKvBytes / on.peakKvBytes };
    for (const [k, m] of [['on', on], ['off', off]] as const) console.log(`prefix caching ${k}: TTFT p50 ${m.ttftMs.p50.toFixed(1)} ms, peak KV ${(m.peakKvBytes / 2 ** 20).toFixed(1)} MiB, ${m.tokensPerSecond.toFixed(0)} tok/s, hit rate ${(100 * m.prefixHitRate).toFixed(0)}%`);
  }
  model.free();

  // HF last: our engines are gone, so the two processes do not share the GPU's memory.
  const torch: TorchOutcome = cli['no-torch'] ? { ok: false, note: 'left out (--no-torch)' }
    : backend.name !== 'cuda' ? { ok: false, note: 'left out (the HF baseline runs on CUDA only)' }
    : runTorch(config, torchWork, seed);
  if (!torch.ok) console.log(`HF generate: ${torch.note}`);
  for (const row of runs) {
    const t = torch.ok ? torch.rows[String(row.concurrency)] : undefined;
    if (t) row.hf = t;
  }

  const at256 = runs.find((r) => r.concurrency === 256);
  const targets = {
    staticRatioAt256: at256 ? { target: 2, value: at256.ratio as number, floorRatio: at256.floorRatio as number, met: (at256.ratio as number) >= 2 } : { target: 2, note: 'concurrency 256 not run' },
    rooflineDecodePercent: {
      target: 70,
      byConcurrency: Object.fromEntries(runs.map((r) => [String(r.concurrency), (r.continuous as RunMetrics).roofline.decodePercent])),
      met: runs.every((r) => (r.continuous as RunMetrics).roofline.decodePercent >= 70),
    },
  };
  const result = {
    date: new Date().toISOString(), device: backend.description, preset: cli.preset, dtype: model.dtype, copyBandwidth: bandwidth,
    weightBytes: cost.weightBytes, kvBytesPerPosition: cost.kvBytesPerPosition,
    settings: {
      maxLen, maxBatchTokens: Number(cli['max-batch-tokens']), blockSize: Number(cli['block-size']), seed,
      kvPool: cli['kv-blocks'] ? `${cli['kv-blocks']} blocks` : cli['kv-memory-fraction'] ? `${cli['kv-memory-fraction']} of the free memory` : 'maxRunning requests of maxLen positions (the engine default: no preemption)',
      prompt: promptDist, output: outputDist, torchBatches,
      pipelined,
    },
    runs, prefix, torch: { note: torch.ok ? `HF generate: the first ${torchBatches} static batches of C requests of each concurrency's workload` : torch.note },
    targets,
  };
  if (cli.json) { mkdirSync(dirname(cli.json), { recursive: true }); writeFileSync(cli.json, `${JSON.stringify(result, null, 1)}\n`); }
  console.log(`\n${summaryTable(runs, targets, torch.ok ? '' : torch.note).join('\n')}`);
  if (prefix) console.log(`\n${prefixTable(prefix).join('\n')}`);
}

const f = (x: number | undefined, d = 0): string => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : '—');

function summaryTable(runs: Record<string, unknown>[], targets: { staticRatioAt256: { met?: boolean }; rooflineDecodePercent: { met: boolean } }, torchNote: string): string[] {
  const lines = [
    '| concurrency | continuous tok/s | static tok/s | ratio | ratio at equal % of floor | HF generate tok/s | TTFT p50/p99 ms | ITL p50/p99 ms | mean batch (decode) | % roofline (decode / all steps) | preemptions |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of runs) {
    const c = r.continuous as RunMetrics, s = r.static as RunMetrics, hf = r.hf as TorchRow | undefined;
    const hfCell = !hf ? '—' : hf.error ? `error: ${hf.error.slice(0, 60)}` : `${f(hf.tokens_per_s)} (${hf.requests} req)`;
    lines.push(`| ${r.concurrency} | ${f(c.tokensPerSecond)} | ${f(s.tokensPerSecond)} | ${f(r.ratio as number, 2)}× | ${f(r.floorRatio as number, 2)}× | ${hfCell} | ${f(c.ttftMs.p50, 1)}/${f(c.ttftMs.p99, 1)} (static ${f(s.ttftMs.p50, 1)}/${f(s.ttftMs.p99, 1)}) | ${f(c.itlMs.p50, 2)}/${f(c.itlMs.p99, 2)} | ${f(c.meanBatch, 1)} (${f(c.meanDecodeBatch, 1)}) | ${f(c.roofline.decodePercent)}% / ${f(c.roofline.allPercent)}% | ${c.preemptions} |`);
  }
  const ratio = targets.staticRatioAt256.met === undefined ? 'not run (no C = 256)' : targets.staticRatioAt256.met ? 'met' : 'missed';
  if (torchNote) lines.push('', `HF generate column: ${torchNote}.`);
  lines.push('', 'Ratio at equal % of floor: Σ step floors of static ÷ those of continuous — what continuous would make over static if both ran every step at the same share of its roofline floor.');
  lines.push('', `Targets: continuous ≥ 2× static at 256 concurrent: ${ratio}; ≥ 70% of the bandwidth roofline on decode steps (every concurrency, continuous): ${targets.rooflineDecodePercent.met ? 'met' : 'missed'}.`);
  return lines;
}

function prefixTable(p: Record<string, unknown>): string[] {
  const row = (name: string, m: RunMetrics) => `| ${name} | ${f(m.ttftMs.p50, 1)}/${f(m.ttftMs.p99, 1)} | ${m.peakBlocksUsed} | ${f(m.peakKvBytes / 2 ** 20, 1)} | ${f(m.tokensPerSecond)} | ${f(100 * m.prefixHitRate)}% |`;
  return [
    `Prefix sharing: ${p.requests} requests, ${p.concurrency} concurrent, each a shared ${p.systemPromptTokens}-token system prompt + a distinct suffix`,
    '| prefix caching | TTFT p50/p99 ms | peak KV blocks | peak KV MiB | tok/s | prefix hit rate |',
    '|---|---|---|---|---|---|',
    row('on', p.on as RunMetrics), row('off', p.off as RunMetrics),
    `TTFT p50 off ÷ on: ${f(p.ttftP50Ratio as number, 2)}×; peak KV memory off ÷ on: ${f(p.kvMemoryRatio as number, 2)}×`,
  ];
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
