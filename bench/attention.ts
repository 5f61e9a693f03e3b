// `npm run bench:attention`: fused attention (flashAttentionForward / Backward) against PyTorch's
// scaled_dot_product_attention with the FlashAttention-2 and cuDNN backends, in the same run.
//
// Shapes: bf16, head dim 64 and 128, hidden 2048 (H = 2048 / d heads), sequence 1k…16k with
// B·L = 16k tokens, causal and not. FLOPs: forward 4·B·H·Lq·Lk·d, halved when causal; backward 2.5×
// the forward (FA2's count: 5 GEMMs of which the forward has 2), so forward+backward is 3.5×.
// Timing: CUDA events around back-to-back calls after warm-up, median of repeats (calls per sample
// chosen so a sample takes ~20 ms). bench/torch_attention.py times SDPA the same way.
// Also in the run:
//   - a forward tile sweep at L = 4k (the per-d default tile against alternatives), to tune
//     flash-forward.ts's defaultFlashForwardTile from one GPU run;
//   - a correctness check: for a few shapes (odd lengths, GQA, causal with Lq ≠ Lk), q, k, v, dOut and
//     our out, lse, dq, dk, dv go to raw f32 files; python recomputes them with SDPA's math backend in
//     fp32 and prints relative errors (‖ours − ref‖ / ‖ref‖); pass when out/lse ≤ 1e-2, grads ≤ 2e-2.
//
//   node dist/bench/attention.js [--json bench/results/attention.json] [--repeats 10] [--no-torch] [--no-sweep] [--no-check]

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import type { FlashForwardTile } from '../src/backend/cuda/kernels/flash-forward.js';
import { defaultFlashForwardTile, launchFlashForward } from '../src/backend/cuda/kernels/flash-forward.js';
import { Event } from '../src/backend/cuda/runtime/device.js';
import { OpCheck } from '../src/backend/validate.js';
import { dropoutOffsetAdvance } from '../src/backend/rng.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { Tensor } from '../src/tensor.js';

const HIDDEN = 2048;
const TOKENS = 16 * 1024;
const SEQUENCES = [1024, 2048, 4096, 8192, 16384];
const HEAD_DIMS = [64, 128];
const SAMPLE_MS = 20;

interface Shape { id: string; B: number; H: number; L: number; d: number; causal: boolean }
interface Result extends Shape {
  fwdFlops: number;
  oursFwdMs: number; oursFwdBwdMs: number;
  torchFlashFwdMs: number | null; torchFlashFwdBwdMs: number | null;
  torchCudnnFwdMs: number | null; torchCudnnFwdBwdMs: number | null;
}

function shapes(): Shape[] {
  const out: Shape[] = [];
  for (const d of HEAD_DIMS) {
    for (const L of SEQUENCES) {
      for (const causal of [false, true]) {
        const B = TOKENS / L, H = HIDDEN / d;
        out.push({ id: `d${d} L${L}${causal ? ' causal' : ''}`, B, H, L, d, causal });
      }
    }
  }
  return out;
}

const forwardFlops = (s: { B: number; H: number; L: number; d: number; causal: boolean }): number =>
  (4 * s.B * s.H * s.L * s.L * s.d) / (s.causal ? 2 : 1);
const tflops = (flops: number, ms: number | null): string => (ms ? (flops / (ms * 1e-3) / 1e12).toFixed(0) : '—');

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

let randomOffset = 0n;
function randomTensor(b: CudaBackend, shape: number[], seed: bigint): Tensor {
  const t = b.empty(shape, 'bf16');
  b.randomFill({ out: t, distribution: 'normal', std: 1, seed, offset: randomOffset });
  randomOffset += dropoutOffsetAdvance(t.numel);
  return t;
}

/** Median ms per call: after a compile/warm-up call, one timed call sizes the batch of calls per sample (~SAMPLE_MS); 2 warm-up samples. */
function timeCalls(b: CudaBackend, fn: () => void, repeats: number): number {
  const start = b.runtime.createEvent({ timing: true }), end = b.runtime.createEvent({ timing: true });
  const sample = (calls: number): number => {
    start.record(b.runtime.stream);
    for (let i = 0; i < calls; i++) fn();
    end.record(b.runtime.stream);
    end.synchronize();
    return Event.elapsedMs(start, end) / calls;
  };
  fn(); // compiles the kernels on first use
  b.synchronize();
  const once = sample(1);
  const calls = Math.max(1, Math.min(50, Math.round(SAMPLE_MS / Math.max(once, 1e-3))));
  sample(calls);
  sample(calls);
  const samples = Array.from({ length: once * calls > 200 ? Math.min(repeats, 3) : repeats }, () => sample(calls));
  start.destroy(); end.destroy();
  return median(samples);
}

interface Buffers { q: Tensor; k: Tensor; v: Tensor; out: Tensor; lse: Tensor; dOut: Tensor; dq: Tensor; dk: Tensor; dv: Tensor }

function allocate(b: CudaBackend, B: number, Hq: number, Hkv: number, Lq: number, Lk: number, d: number, seed: number): Buffers {
  const qs = [B, Hq, Lq, d], kvs = [B, Hkv, Lk, d];
  return {
    q: randomTensor(b, qs, BigInt(seed)), k: randomTensor(b, kvs, BigInt(seed + 1)), v: randomTensor(b, kvs, BigInt(seed + 2)),
    dOut: randomTensor(b, qs, BigInt(seed + 3)), out: b.empty(qs, 'bf16'), lse: b.empty([B, Hq, Lq], 'f32'),
    dq: b.empty(qs, 'bf16'), dk: b.empty(kvs, 'bf16'), dv: b.empty(kvs, 'bf16'),
  };
}
function release(b: CudaBackend, x: Buffers): void {
  for (const t of Object.values(x)) b.free(t);
  b.synchronize();
  b.runtime.emptyCache();
}

// --- PyTorch -------------------------------------------------------------------------------------------

function runPython(input: unknown): unknown | null {
  const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'torch_attention.py');
  const run = spawnSync('python3', [script], { input: JSON.stringify(input), encoding: 'utf8', maxBuffer: 64 << 20, timeout: 1_200_000 });
  if (run.status !== 0) {
    process.stderr.write(`python (bench/torch_attention.py) skipped: ${run.error?.message ?? run.stderr.split('\n').slice(-4).join(' ')}\n`);
    return null;
  }
  return JSON.parse(run.stdout);
}

// --- tile sweep ------------------------------------------------------------------------------------------

const SWEEP_TILES: Record<number, FlashForwardTile[]> = {
  64: [
    { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: false, minBlocks: 2 },
    { warps: 4, rowsPerWarp: 32, blockK: 64, qInRegisters: true, minBlocks: 2 },
    { warps: 8, rowsPerWarp: 32, blockK: 64, qInRegisters: false, minBlocks: 1 },
    { warps: 8, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 1 },
    { warps: 4, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 3 },
    { warps: 8, rowsPerWarp: 16, blockK: 128, qInRegisters: true, minBlocks: 1 },
  ],
  128: [
    { warps: 8, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 1 },
    { warps: 8, rowsPerWarp: 16, blockK: 64, qInRegisters: false, minBlocks: 1 },
    { warps: 4, rowsPerWarp: 16, blockK: 64, qInRegisters: true, minBlocks: 2 },
    { warps: 4, rowsPerWarp: 32, blockK: 32, qInRegisters: false, minBlocks: 2 },
    { warps: 8, rowsPerWarp: 16, blockK: 32, qInRegisters: true, minBlocks: 1 },
  ],
};
const tileName = (t: FlashForwardTile): string => `${t.warps}w×${t.rowsPerWarp} BK${t.blockK}${t.qInRegisters ? ' Qreg' : ''} ≥${t.minBlocks}/SM`;

interface SweepRow { d: number; causal: boolean; tile: string; isDefault: boolean; ms: number; tflops: number }

function sweep(b: CudaBackend, repeats: number): SweepRow[] {
  const rows: SweepRow[] = [];
  const L = 4096;
  for (const d of HEAD_DIMS) {
    const B = TOKENS / L, H = HIDDEN / d;
    const x = allocate(b, B, H, H, L, L, d, 100 + d);
    for (const causal of [false, true]) {
      const check = new OpCheck('flashAttentionForward', 'cuda');
      const sizes = { B, Hq: H, Lq: L, Lk: L, d, group: 1, scale: 1 / Math.sqrt(d), causal };
      const fallback = defaultFlashForwardTile(d);
      for (const tile of SWEEP_TILES[d]!) {
        const ms = timeCalls(b, () => launchFlashForward(b.runtime, check, { q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, keyLengths: undefined }, sizes, tile), repeats);
        const isDefault = JSON.stringify(tile) === JSON.stringify(fallback);
        rows.push({ d, causal, tile: tileName(tile), isDefault, ms, tflops: forwardFlops({ B, H, L, d, causal }) / (ms * 1e-3) / 1e12 });
      }
    }
    release(b, x);
  }
  return rows;
}

// --- correctness against SDPA (math backend, fp32) -----------------------------------------------------

interface CheckShape { id: string; B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; causal: boolean }
const CHECK_SHAPES: CheckShape[] = [
  { id: 'd64 L1000 causal', B: 2, Hq: 16, Hkv: 16, Lq: 1000, Lk: 1000, d: 64, causal: true },
  { id: 'd128 L2048 causal GQA 8:1', B: 1, Hq: 16, Hkv: 2, Lq: 2048, Lk: 2048, d: 128, causal: true },
  { id: 'd128 Lq333 Lk1021 MQA', B: 3, Hq: 8, Hkv: 1, Lq: 333, Lk: 1021, d: 128, causal: false },
  { id: 'd64 Lq200 Lk777 causal GQA 2:1', B: 2, Hq: 8, Hkv: 4, Lq: 200, Lk: 777, d: 64, causal: true },
  { id: 'd128 L4096', B: 1, Hq: 8, Hkv: 8, Lq: 4096, Lk: 4096, d: 128, causal: false },
];
interface CheckResult { id: string; errors: Record<string, number>; pass: boolean }

function correctness(b: CudaBackend): CheckResult[] | null {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-attention-check-'));
  try {
    const cases = CHECK_SHAPES.map((s, i) => {
      const x = allocate(b, s.B, s.Hq, s.Hkv, s.Lq, s.Lk, s.d, 1000 + 10 * i);
      b.flashAttentionForward({ q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, causal: s.causal });
      b.flashAttentionBackward({ ...x, causal: s.causal });
      const caseDir = join(dir, `case${i}`);
      mkdirSync(caseDir);
      for (const name of ['q', 'k', 'v', 'dOut', 'out', 'lse', 'dq', 'dk', 'dv'] as const) {
        const values = Float32Array.from(b.download(x[name]));
        writeFileSync(join(caseDir, `${name}.f32`), new Uint8Array(values.buffer));
      }
      release(b, x);
      return { ...s, dir: caseDir };
    });
    const parsed = runPython({ mode: 'check', cases }) as { results: CheckResult[] } | null;
    return parsed ? parsed.results : null;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// --- main -------------------------------------------------------------------------------------------------

function writeAtomic(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      json: { type: 'string' }, repeats: { type: 'string', default: '10' },
      'no-torch': { type: 'boolean', default: false }, 'no-sweep': { type: 'boolean', default: false }, 'no-check': { type: 'boolean', default: false },
    },
  });
  const repeats = Number(values.repeats);
  const probe = probeCuda();
  if (!probe.available) {
    process.stderr.write(`bench:attention needs a CUDA GPU: ${probe.reason}\n`);
    process.exitCode = 1;
    return;
  }
  const { CudaBackend } = await import('../src/backend/cuda/index.js');
  const b = CudaBackend.create();
  process.stdout.write(`${b.description}\n`);

  const results: Result[] = [];
  for (const [i, s] of shapes().entries()) {
    const x = allocate(b, s.B, s.H, s.H, s.L, s.L, s.d, 10 * i);
    const forward = () => b.flashAttentionForward({ q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, causal: s.causal });
    const fwdMs = timeCalls(b, forward, repeats);
    const fwdBwdMs = timeCalls(b, () => { forward(); b.flashAttentionBackward({ ...x, causal: s.causal }); }, repeats);
    release(b, x);
    const flops = forwardFlops(s);
    results.push({
      ...s, fwdFlops: flops, oursFwdMs: fwdMs, oursFwdBwdMs: fwdBwdMs,
      torchFlashFwdMs: null, torchFlashFwdBwdMs: null, torchCudnnFwdMs: null, torchCudnnFwdBwdMs: null,
    });
    process.stdout.write(`${s.id.padEnd(16)} ours fwd ${tflops(flops, fwdMs).padStart(4)} TFLOP/s, fwd+bwd ${tflops(3.5 * flops, fwdBwdMs).padStart(4)} TFLOP/s\n`);
  }

  let torchVersion: string | null = null;
  if (!values['no-torch']) {
    const parsed = runPython({ mode: 'time', repeats, sampleMs: SAMPLE_MS, shapes: shapes() }) as
      { torch: string; results: Record<string, Record<string, number | null>> } | null;
    if (parsed) {
      torchVersion = parsed.torch;
      for (const r of results) {
        const t = parsed.results[r.id] ?? {};
        r.torchFlashFwdMs = t.flash_fwd ?? null; r.torchFlashFwdBwdMs = t.flash_fwdbwd ?? null;
        r.torchCudnnFwdMs = t.cudnn_fwd ?? null; r.torchCudnnFwdBwdMs = t.cudnn_fwdbwd ?? null;
      }
    }
  }
  const sweepRows = values['no-sweep'] ? [] : sweep(b, repeats);
  const checks = values['no-check'] ? null : correctness(b);

  const report = {
    date: new Date().toISOString(), device: b.description, torch: torchVersion,
    method: { flops: 'forward 4·B·H·L²·d (÷2 causal); backward 2.5× forward', statistic: 'median', repeats, sampleMs: SAMPLE_MS },
    results, sweep: sweepRows, correctness: checks,
  };
  const md: string[] = [
    `# Attention benchmark — ${b.description}, ${report.date.slice(0, 10)}`, '',
    `bf16, hidden ${HIDDEN}, B·L = ${TOKENS} tokens. TFLOP/s (forward 4·B·H·L²·d, ÷2 causal; fwd+bwd 3.5× that). PyTorch ${torchVersion ?? '(not available)'} SDPA, same run.`, '',
    '| shape | B×H | ours fwd | FA2 fwd | cuDNN fwd | ours fwd+bwd | FA2 fwd+bwd | cuDNN fwd+bwd |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
    ...results.map((r) => `| ${r.id} | ${r.B}×${r.H} | ${tflops(r.fwdFlops, r.oursFwdMs)} | ${tflops(r.fwdFlops, r.torchFlashFwdMs)} | ${tflops(r.fwdFlops, r.torchCudnnFwdMs)} | ` +
      `${tflops(3.5 * r.fwdFlops, r.oursFwdBwdMs)} | ${tflops(3.5 * r.fwdFlops, r.torchFlashFwdBwdMs)} | ${tflops(3.5 * r.fwdFlops, r.torchCudnnFwdBwdMs)} |`),
  ];
  if (sweepRows.length > 0) {
    md.push('', 'Forward tile sweep, L = 4096 (TFLOP/s; * = current default):', '', '| d | tile | non-causal | causal |', '|---|---|---:|---:|');
    for (const r of sweepRows.filter((x) => !x.causal)) {
      const c = sweepRows.find((x) => x.causal && x.d === r.d && x.tile === r.tile)!;
      md.push(`| ${r.d} | ${r.tile}${r.isDefault ? ' *' : ''} | ${r.tflops.toFixed(0)} | ${c.tflops.toFixed(0)} |`);
    }
  }
  if (checks) {
    md.push('', 'Correctness against SDPA math backend in fp32 (relative error ‖ours − ref‖ / ‖ref‖):', '', '| case | out | lse | dq | dk | dv | result |', '|---|---:|---:|---:|---:|---:|---|');
    for (const c of checks) {
      const e = (k: string) => (c.errors[k] !== undefined ? c.errors[k]!.toExponential(1) : '—');
      md.push(`| ${c.id} | ${e('out')} | ${e('lse')} | ${e('dq')} | ${e('dk')} | ${e('dv')} | ${c.pass ? 'pass' : '**FAIL**'} |`);
    }
    if (checks.some((c) => !c.pass)) process.exitCode = 1;
  }
  const text = `${md.join('\n')}\n`;
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  writeAtomic(join(root, 'bench', 'results', 'attention.md'), text);
  if (values.json) writeAtomic(values.json, `${JSON.stringify(report, null, 2)}\n`);
  if (process.env.OUT) {
    writeFileSync(join(process.env.OUT, 'attention.json'), `${JSON.stringify(report, null, 2)}\n`);
    writeFileSync(join(process.env.OUT, 'attention.md'), text);
  }
  process.stdout.write(`\n${text}`);
}

void main();
