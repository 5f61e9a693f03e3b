// `npm run bench:kernels`: every fused op at GPT-2 / BERT-base / Llama shapes on the GPU.
//
// Method (see docs/perf.md): inputs rotate over enough buffer sets that each call reads HBM, not L2;
// `CALLS` launches are captured into one CUDA graph and the graph's replays are timed with CUDA events
// (median of REPEATS), which is the kernel time plus ~0.8 µs of in-graph launch cost. The same ops are
// also timed launched one by one from JS. Achieved bandwidth = bytes the op must move / time, against
// the device-to-device copy bandwidth measured in the same run. PyTorch eager runs the same
// computation in the same run (bench/torch_kernels.py) when python3 with torch is installed.
// GEMMs are benchmarked by bench/gemm.ts (our wrapper against cuBLASLt's best algorithm per shape).
// Results: bench/results/kernels.json and bench/results/kernels.md (and $OUT when set).
//
// Options: --only A,B,... times only the cases whose id ("<model> <dtype> <op>") or op contains one of
// the substrings (case-insensitive: --only layerNormBackward, --only BERT, --only "GPT-2 bf16"); a
// filtered run prints its table and writes it to $OUT or --json PATH, but leaves bench/results/
// (the full run's record) alone. --no-torch skips the PyTorch baseline.

import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Activation } from '../src/backend/backend.js';
import { CudaBackend } from '../src/backend/cuda/index.js';
import { randomTensor, timeRegion as timeRegionOf } from './device-timing.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { FloatDType } from '../src/dtype.js';
import { byteSize } from '../src/dtype.js';
import { Rng } from '../src/testing/random.js';

const CALLS = 20;
const REPEATS = 15;
const L2_BYTES = 60 << 20;

interface Case {
  id: string;
  model: string;
  op: string;
  dtype: FloatDType;
  shape: string;
  /** The fewest bytes the op must move (each input read once, each output written once). */
  bytes: number;
  /** Parameters for the PyTorch baseline (bench/torch_kernels.py), or null when it has none. */
  torch: Record<string, unknown> | null;
  /** Builds one input set and returns the launch that uses it. */
  setup(b: CudaBackend, rng: Rng): () => void;
}

interface Result {
  id: string; model: string; op: string; dtype: string; shape: string; bytes: number;
  graphUs: number; eagerUs: number; gbps: number; percentOfCopy: number;
  /** Time of our copy kernel moving the same bytes (half read, half written), timed the same way. */
  sameSizeCopyUs: number; percentOfSameSizeCopy: number;
  torchUs: number | null; speedupVsTorch: number | null;
}

// --- helpers ----------------------------------------------------------------------------------------


/** Median ms per call of `region` (which makes `calls` calls), REPEATS samples. */
const timeRegion = (b: CudaBackend, region: () => void, calls: number) => timeRegionOf(b, region, calls, REPEATS);

/** Median ms per launch: (graph of CALLS launches replayed, launches issued one by one from JS). */
function timeLaunches(b: CudaBackend, launches: (() => void)[]): { graphMs: number; eagerMs: number } {
  const eager = () => { for (let i = 0; i < CALLS; i++) launches[i % launches.length]!(); };
  eager(); // compile and warm before capture
  b.synchronize();
  const graph = b.captureGraph(eager);
  const graphMs = timeRegion(b, () => graph.replay(), CALLS);
  graph.dispose();
  const eagerMs = timeRegion(b, eager, CALLS);
  return { graphMs, eagerMs };
}

// --- cases --------------------------------------------------------------------------------------------

const MODELS = [
  { model: 'GPT-2', rows: 16 * 1024, B: 16, L: 1024, H: 768, ffn: 3072, heads: 12, vocab: 50257, causal: true, activation: 'gelu_tanh' as Activation },
  { model: 'BERT-base', rows: 32 * 256, B: 32, L: 256, H: 768, ffn: 3072, heads: 12, vocab: 30522, causal: false, activation: 'gelu' as Activation },
];
const LLAMA = { model: 'Llama-1.2B', rows: 8 * 1024, H: 2048 };

function cases(dtype: FloatDType): Case[] {
  const s = byteSize(dtype);
  const out: Case[] = [];
  for (const m of MODELS) {
    const n = m.rows * m.H, nf = m.rows * m.ffn, tag = `${m.model} ${dtype}`;
    const dropout = { p: 0.1, seed: 42n, offset: 0n };
    out.push({
      id: `${tag} layerNormForward`, model: m.model, op: 'layerNormForward', dtype, shape: `[${m.rows}, ${m.H}]`,
      bytes: 2 * n * s + 8 * m.rows, torch: { op: 'layerNormForward', rows: m.rows, H: m.H },
      setup: (b, rng) => {
        const x = randomTensor(b, rng, [m.rows, m.H], dtype), gamma = randomTensor(b, rng, [m.H], dtype), beta = randomTensor(b, rng, [m.H], dtype);
        const out = b.empty([m.rows, m.H], dtype), mean = b.empty([m.rows], 'f32'), rstd = b.empty([m.rows], 'f32');
        return () => b.layerNormForward({ x, gamma, beta, out, mean, rstd, eps: 1e-5 });
      },
    });
    out.push({
      id: `${tag} layerNormBackward`, model: m.model, op: 'layerNormBackward', dtype, shape: `[${m.rows}, ${m.H}]`,
      bytes: 3 * n * s + 8 * m.rows, torch: { op: 'layerNormBackward', rows: m.rows, H: m.H },
      setup: (b, rng) => {
        const x = randomTensor(b, rng, [m.rows, m.H], dtype), gamma = randomTensor(b, rng, [m.H], dtype), beta = randomTensor(b, rng, [m.H], dtype);
        const y = b.empty([m.rows, m.H], dtype), mean = b.empty([m.rows], 'f32'), rstd = b.empty([m.rows], 'f32');
        b.layerNormForward({ x, gamma, beta, out: y, mean, rstd, eps: 1e-5 });
        const dOut = randomTensor(b, rng, [m.rows, m.H], dtype), dX = b.empty([m.rows, m.H], dtype);
        const dGamma = b.empty([m.H], dtype), dBeta = b.empty([m.H], dtype);
        return () => b.layerNormBackward({ dOut, x, gamma, mean, rstd, dX, dGamma, dBeta });
      },
    });
    const attn = m.B * m.heads * m.L * m.L;
    out.push({
      id: `${tag} softmaxForward`, model: m.model, op: 'softmaxForward', dtype, shape: `[${m.B}, ${m.heads}, ${m.L}, ${m.L}]${m.causal ? ' causal' : ' padded'}`,
      bytes: 2 * attn * s, torch: { op: 'softmaxForward', B: m.B, heads: m.heads, L: m.L, causal: m.causal },
      setup: (b, rng) => {
        const x = randomTensor(b, rng, [m.B, m.heads, m.L, m.L], dtype, 3), y = b.empty([m.B, m.heads, m.L, m.L], dtype);
        const keyLengths = b.fromArray(rng.ints(m.B, m.L / 2, m.L + 1), [m.B], 'i32');
        return () => b.softmaxForward({ x, out: y, scale: 0.125, causal: m.causal, ...(m.causal ? {} : { keyLengths }) });
      },
    });
    out.push({
      id: `${tag} softmaxBackward`, model: m.model, op: 'softmaxBackward', dtype, shape: `[${m.B}, ${m.heads}, ${m.L}, ${m.L}]`,
      bytes: 3 * attn * s, torch: { op: 'softmaxBackward', B: m.B, heads: m.heads, L: m.L },
      setup: (b, rng) => {
        const x = randomTensor(b, rng, [m.B, m.heads, m.L, m.L], dtype), y = b.empty([m.B, m.heads, m.L, m.L], dtype);
        b.softmaxForward({ x, out: y });
        const dY = randomTensor(b, rng, [m.B, m.heads, m.L, m.L], dtype);
        return () => b.softmaxBackward({ y, dY, dX: x, scale: 0.125 });
      },
    });
    out.push({
      id: `${tag} biasDropoutResidual`, model: m.model, op: 'biasDropoutResidual', dtype, shape: `[${m.rows}, ${m.H}]`,
      bytes: 3 * n * s + n, torch: { op: 'biasDropoutResidual', rows: m.rows, H: m.H },
      setup: (b, rng) => {
        const input = randomTensor(b, rng, [m.rows, m.H], dtype), bias = randomTensor(b, rng, [m.H], dtype), residual = randomTensor(b, rng, [m.rows, m.H], dtype);
        const y = b.empty([m.rows, m.H], dtype), mask = b.empty([m.rows, m.H], 'u8');
        return () => b.biasDropoutResidual({ input, bias, residual, out: y, mask, ...dropout });
      },
    });
    out.push({
      id: `${tag} biasDropoutResidualBackward`, model: m.model, op: 'biasDropoutResidualBackward', dtype, shape: `[${m.rows}, ${m.H}] +dBias`,
      bytes: 2 * n * s + n, torch: { op: 'biasDropoutResidualBackward', rows: m.rows, H: m.H },
      setup: (b, rng) => {
        const dOut = randomTensor(b, rng, [m.rows, m.H], dtype), mask = b.empty([m.rows, m.H], 'u8');
        b.fill(mask, 1);
        const dInput = b.empty([m.rows, m.H], dtype), dBias = b.empty([m.H], dtype);
        return () => b.biasDropoutResidualBackward({ dOut, mask, p: 0.1, dInput, dBias });
      },
    });
    out.push({
      id: `${tag} biasActivationDropout`, model: m.model, op: `biasActivationDropout(${m.activation})`, dtype, shape: `[${m.rows}, ${m.ffn}]`,
      bytes: 2 * nf * s + nf, torch: { op: 'biasActivationDropout', rows: m.rows, H: m.ffn, activation: m.activation },
      setup: (b, rng) => {
        const input = randomTensor(b, rng, [m.rows, m.ffn], dtype), bias = randomTensor(b, rng, [m.ffn], dtype);
        const y = b.empty([m.rows, m.ffn], dtype), mask = b.empty([m.rows, m.ffn], 'u8');
        return () => b.biasActivationDropout({ input, bias, out: y, mask, activation: m.activation, ...dropout });
      },
    });
    out.push({
      id: `${tag} biasActivationDropoutBackward`, model: m.model, op: `biasActivationDropoutBackward(${m.activation})`, dtype, shape: `[${m.rows}, ${m.ffn}] +dBias`,
      bytes: 3 * nf * s + nf, torch: { op: 'biasActivationDropoutBackward', rows: m.rows, H: m.ffn, activation: m.activation },
      setup: (b, rng) => {
        const input = randomTensor(b, rng, [m.rows, m.ffn], dtype), bias = randomTensor(b, rng, [m.ffn], dtype), dOut = randomTensor(b, rng, [m.rows, m.ffn], dtype);
        const mask = b.empty([m.rows, m.ffn], 'u8');
        b.fill(mask, 1);
        const dInput = b.empty([m.rows, m.ffn], dtype), dBias = b.empty([m.ffn], dtype);
        return () => b.biasActivationDropoutBackward({ dOut, input, bias, mask, p: 0.1, activation: m.activation, dInput, dBias });
      },
    });
    const d = m.H / m.heads;
    out.push({
      id: `${tag} biasQkvSplit`, model: m.model, op: 'biasQkvSplit', dtype, shape: `[${m.B}, ${m.L}, 3·${m.H}]`,
      bytes: 6 * n * s, torch: { op: 'biasQkvSplit', B: m.B, L: m.L, heads: m.heads, d },
      setup: (b, rng) => {
        const qkv = randomTensor(b, rng, [m.B, m.L, 3 * m.H], dtype), bias = randomTensor(b, rng, [3 * m.H], dtype);
        const q = b.empty([m.B, m.heads, m.L, d], dtype), k = b.empty([m.B, m.heads, m.L, d], dtype), v = b.empty([m.B, m.heads, m.L, d], dtype);
        return () => b.biasQkvSplit({ qkv, bias, heads: m.heads, q, k, v, qScale: 1 / Math.sqrt(d) });
      },
    });
    const ceRows = m.rows / 2;
    out.push({
      id: `${tag} crossEntropy fwd+bwd`, model: m.model, op: 'crossEntropy fwd+bwd', dtype, shape: `[${ceRows}, ${m.vocab}]`,
      bytes: 3 * ceRows * m.vocab * s, torch: { op: 'crossEntropy', rows: ceRows, V: m.vocab },
      setup: (b, rng) => {
        const logits = randomTensor(b, rng, [ceRows, m.vocab], dtype, 2), targets = b.fromArray(rng.ints(ceRows, 0, m.vocab), [ceRows], 'i32');
        const loss = b.empty([ceRows], 'f32'), lse = b.empty([ceRows], 'f32'), dLogits = b.empty([ceRows, m.vocab], dtype);
        return () => {
          b.crossEntropyForward({ logits, targets, loss, lse, ignoreIndex: -100 });
          b.crossEntropyBackward({ logits, targets, lse, dLogits, gradScale: 1 / ceRows, ignoreIndex: -100 });
        };
      },
    });
    out.push({
      id: `${tag} embeddingForward`, model: m.model, op: 'embeddingForward', dtype, shape: `[${m.B}, ${m.L}] → ${m.H}`,
      bytes: 3 * n * s + n + 4 * m.rows, torch: { op: 'embeddingForward', B: m.B, L: m.L, V: m.vocab, H: m.H },
      setup: (b, rng) => {
        const tokens = b.fromArray(rng.ints(m.rows, 0, m.vocab), [m.B, m.L], 'i32');
        const tokenTable = randomTensor(b, rng, [m.vocab, m.H], dtype, 0.02), positionTable = randomTensor(b, rng, [m.L, m.H], dtype, 0.02);
        const y = b.empty([m.B, m.L, m.H], dtype), mask = b.empty([m.B, m.L, m.H], 'u8');
        return () => b.embeddingForward({ tokens, tokenTable, positionTable, out: y, mask, ...dropout });
      },
    });
  }
  const n = LLAMA.rows * LLAMA.H;
  out.push({
    id: `${LLAMA.model} ${dtype} rmsNormForward`, model: LLAMA.model, op: 'rmsNormForward', dtype, shape: `[${LLAMA.rows}, ${LLAMA.H}]`,
    bytes: 2 * n * s + 4 * LLAMA.rows, torch: { op: 'rmsNormForward', rows: LLAMA.rows, H: LLAMA.H },
    setup: (b, rng) => {
      const x = randomTensor(b, rng, [LLAMA.rows, LLAMA.H], dtype), gamma = randomTensor(b, rng, [LLAMA.H], dtype);
      const y = b.empty([LLAMA.rows, LLAMA.H], dtype), rstd = b.empty([LLAMA.rows], 'f32');
      return () => b.rmsNormForward({ x, gamma, out: y, rstd, eps: 1e-6 });
    },
  });
  const params = 124_439_808; // GPT-2 124M
  out.push({
    id: `GPT-2 ${dtype} adamW no-master`, model: 'GPT-2', op: 'adamW (no master)', dtype, shape: `[${params}]`,
    bytes: params * (3 * s + 16), torch: { op: 'adamW', n: params },
    setup: (b, rng) => {
      const p = randomTensor(b, rng, [params], dtype), g = randomTensor(b, rng, [params], dtype, 0.01);
      const m = b.empty([params], 'f32'), v = b.empty([params], 'f32');
      b.fill(m, 0); b.fill(v, 0);
      let step = 1;
      return () => b.adamW({ params: p, grads: g, m, v, lr: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, step: step++ });
    },
  });
  return out;
}

// --- roofline and launch cost ----------------------------------------------------------------------------

function copyBandwidth(b: CudaBackend): number {
  const bytes = 1 << 30;
  const src = b.empty([bytes], 'u8'), dst = b.empty([bytes], 'u8');
  b.fill(src, 7);
  const ms = timeRegion(b, () => b.runtime.copyDeviceToDevice(dst.ptr, src.ptr, bytes), 1);
  b.free(src); b.free(dst);
  return (2 * bytes) / (ms / 1e3) / 1e9; // GB/s, read + write
}

/**
 * The achievable roofline for a kernel of `bytes`: our 16-byte-vector copy kernel reading bytes/2
 * and writing bytes/2, rotated over as many buffer sets and timed in a graph like the case itself.
 * Small kernels pay launch, ramp-up and tail costs that the 1 GiB copy amortises; this column
 * separates those from the kernel's own inefficiency.
 */
function sameSizeCopyMs(b: CudaBackend, bytes: number, sets: number): number {
  const elements = Math.max(8, Math.round(bytes / 2 / 4 / 8) * 8);
  const buffers = Array.from({ length: sets }, () => ({ src: b.empty([elements], 'f32'), dst: b.empty([elements], 'f32') }));
  for (const { src } of buffers) b.fill(src, 1);
  const { graphMs } = timeLaunches(b, buffers.map(({ src, dst }) => () => b.copy(src, dst)));
  for (const { src, dst } of buffers) { b.free(src); b.free(dst); }
  return graphMs;
}

function launchCost(b: CudaBackend): { jsUs: number; graphUs: number } {
  const t = b.empty([1], 'f32');
  const launch = () => b.fill(t, 1);
  for (let i = 0; i < 2000; i++) launch();
  b.synchronize();
  const n = 5000;
  const start = performance.now();
  for (let i = 0; i < n; i++) launch();
  const jsUs = ((performance.now() - start) * 1e3) / n;
  b.synchronize();
  const graph = b.captureGraph(() => { for (let i = 0; i < 1000; i++) launch(); });
  const graphUs = timeRegion(b, () => graph.replay(), 1000) * 1e3;
  graph.dispose();
  b.free(t);
  return { jsUs, graphUs };
}

// --- PyTorch baseline ---------------------------------------------------------------------------------

function torchBaseline(all: Case[]): { version: string | null; results: Record<string, number | null> } {
  const input = JSON.stringify(all.filter((c) => c.torch).map((c) => ({ id: c.id, dtype: c.dtype, ...c.torch })));
  const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'torch_kernels.py');
  const run = spawnSync('python3', [script], { input, encoding: 'utf8', maxBuffer: 64 << 20, timeout: 300_000 });
  if (run.status !== 0) {
    process.stderr.write(`PyTorch baseline skipped: ${run.error?.message ?? run.stderr.split('\n').slice(-4).join(' ')}\n`);
    return { version: null, results: {} };
  }
  if (run.stderr) process.stderr.write(run.stderr);
  const parsed = JSON.parse(run.stdout) as { torch: string; results: Record<string, number | null> };
  return { version: parsed.torch, results: parsed.results };
}

// --- main -------------------------------------------------------------------------------------------------

function writeAtomic(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

/** Cases whose id or op contains one of the comma-separated substrings (all of them without a filter). */
function selectCases(all: readonly { id: string; op: string }[], only: string | undefined): number[] {
  const wanted = (only ?? '').split(',').map((w) => w.trim().toLowerCase()).filter((w) => w !== '');
  return all.flatMap((c, i) => (wanted.length === 0 || wanted.some((w) => c.id.toLowerCase().includes(w) || c.op.toLowerCase().includes(w)) ? [i] : []));
}

function main(): void {
  const { values: cli } = parseArgs({
    options: { only: { type: 'string' }, 'no-torch': { type: 'boolean', default: false }, json: { type: 'string' } },
  });
  const every = [...cases('bf16'), ...cases('f16')];
  const all = selectCases(every, cli.only).map((i) => every[i]!);
  if (all.length === 0) {
    process.stderr.write(`bench:kernels: --only '${cli.only}' matches no case; ids look like '${every[0]!.id}'\n`);
    process.exitCode = 1;
    return;
  }
  const filtered = all.length < every.length;
  const probe = probeCuda();
  if (!probe.available) {
    process.stderr.write(`bench:kernels needs a CUDA GPU: ${probe.reason}\n`);
    process.exitCode = 1;
    return;
  }
  const b = CudaBackend.create();
  const rng = new Rng(20261129);
  const copyGBps = copyBandwidth(b);
  const launch = launchCost(b);
  process.stdout.write(`${b.description}: copy ${copyGBps.toFixed(0)} GB/s; launch from JS ${launch.jsUs.toFixed(2)} µs, in a graph ${launch.graphUs.toFixed(2)} µs; ${all.length} of ${every.length} cases\n`);
  const results: Result[] = [];
  for (const c of all) {
    const sets = Math.max(2, Math.min(8, Math.ceil((3 * L2_BYTES) / c.bytes)));
    const launches = Array.from({ length: sets }, () => c.setup(b, rng));
    const { graphMs, eagerMs } = timeLaunches(b, launches);
    const gbps = c.bytes / (graphMs / 1e3) / 1e9;
    b.synchronize();
    b.runtime.emptyCache();
    const copyMs = sameSizeCopyMs(b, c.bytes, sets);
    const percentOfSameSizeCopy = (100 * copyMs) / graphMs;
    results.push({
      id: c.id, model: c.model, op: c.op, dtype: c.dtype, shape: c.shape, bytes: c.bytes,
      graphUs: graphMs * 1e3, eagerUs: eagerMs * 1e3, gbps, percentOfCopy: (100 * gbps) / copyGBps,
      sameSizeCopyUs: copyMs * 1e3, percentOfSameSizeCopy, torchUs: null, speedupVsTorch: null,
    });
    process.stdout.write(`${c.id.padEnd(52)} ${(graphMs * 1e3).toFixed(1).padStart(8)} µs  ${gbps.toFixed(0).padStart(5)} GB/s  ${((100 * gbps) / copyGBps).toFixed(0)}% of copy  ${percentOfSameSizeCopy.toFixed(0)}% of same-size copy\n`);
    b.synchronize();
    b.runtime.emptyCache();
  }
  const torch = cli['no-torch'] ? { version: null, results: {} as Record<string, number | null> } : torchBaseline(all);
  for (const r of results) {
    const t = torch.results[r.id];
    if (typeof t === 'number') { r.torchUs = t * 1e3; r.speedupVsTorch = r.torchUs / r.graphUs; }
  }

  const report = {
    date: new Date().toISOString(), device: b.description, driver: probe.driverVersion, torch: torch.version,
    method: { callsPerGraph: CALLS, repeats: REPEATS, statistic: 'median', inputRotation: 'enough sets to exceed 3× L2' },
    copyGBps, launchFromJsUs: launch.jsUs, launchInGraphUs: launch.graphUs, kernels: results,
  };
  const md = [
    `# Kernel benchmark — ${b.description}, ${report.date.slice(0, 10)}`, '',
    `Copy bandwidth (device-to-device, read + write): **${copyGBps.toFixed(0)} GB/s**. Launch cost: ${launch.jsUs.toFixed(2)} µs per op from JS, ${launch.graphUs.toFixed(2)} µs per op inside a CUDA graph.`,
    `PyTorch ${torch.version ?? (cli['no-torch'] ? '(skipped: --no-torch)' : '(not available)')} eager, same run, same inputs sizes. Times are medians per call.${filtered ? ` Cases: --only ${cli.only}.` : ''}`,
    '"% of copy" is against the 1 GiB copy above; "% of same-size copy" is our copy kernel\'s time moving the op\'s bytes (half read, half written) over the op\'s time, timed the same way: the roofline a kernel of that size can reach.', '',
    '| model | op | dtype | shape | fuseformer µs (graph) | µs (JS launch) | GB/s | % of copy | same-size copy µs | % of same-size copy | PyTorch eager µs | speed-up |',
    '|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...results.map((r) => `| ${r.model} | ${r.op} | ${r.dtype} | ${r.shape} | ${r.graphUs.toFixed(1)} | ${r.eagerUs.toFixed(1)} | ${r.gbps.toFixed(0)} | ${r.percentOfCopy.toFixed(0)}% | ${r.sameSizeCopyUs.toFixed(1)} | ${r.percentOfSameSizeCopy.toFixed(0)}% | ${r.torchUs?.toFixed(1) ?? '—'} | ${r.speedupVsTorch ? `${r.speedupVsTorch.toFixed(2)}×` : '—'} |`),
    '',
  ].join('\n');
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  if (!filtered) {
    writeAtomic(join(root, 'bench', 'results', 'kernels.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeAtomic(join(root, 'bench', 'results', 'kernels.md'), md);
  }
  if (cli.json) writeAtomic(cli.json, `${JSON.stringify(report, null, 2)}\n`);
  if (process.env.OUT) {
    writeFileSync(join(process.env.OUT, 'kernels.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(process.env.OUT, 'kernels.md'), md);
  }
  process.stdout.write(`\n${md}`);
}

main();
