// `npm run bench:quant`: the quantized linear layers against bf16 at Llama-3.2-1B's layer shapes
// (hidden 2048, FFN 8192; the fused QKV projection 2048 → 3072 of its grouped-query attention), for
// decode (M = 1) and a small prefill / batched decode (M = 32):
//   bf16        cuBLASLt through our gemm() wrapper (x·Wᵀ)
//   W4A16       int4Linear, group 128: the GEMV at M = 1, the tensor-core kernel at M = 32 (and the
//               GEMV forced at M = 32, for comparison)
//   W8A8        int8QuantizeRows + cuBLASLt int8 GEMM + int8Dequantize, and the int8 GEMM alone
//   PyTorch     F.linear in bf16 (bench/torch_quant.py), in the same run, when torch is installed
// Method (as bench/kernels.ts): weights rotate over enough sets to exceed the L2 cache, CALLS launches
// are captured into a CUDA graph and its replays timed with CUDA events, median of REPEATS. Bytes =
// what the op must move (weights with their scales/zeros, activations in, outputs out); GB/s as a
// percentage of the device-to-device copy bandwidth measured in the same run.
//
//   node dist/bench/quant.js [--json bench/results/quant.json]

import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { copyBandwidth as measureCopy, randomTensor, timeGraph as timeGraphOf } from './device-timing.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { Tensor } from '../src/tensor.js';
import { Rng } from '../src/testing/random.js';

const CALLS = 20;
const REPEATS = 15;
const L2_BYTES = 60 << 20;
const GROUP = 128;

const SHAPES = [
  { layer: 'attention QKV', K: 2048, N: 3072 },
  { layer: 'attention out', K: 2048, N: 2048 },
  { layer: 'MLP up', K: 2048, N: 8192 },
  { layer: 'MLP down', K: 8192, N: 2048 },
];
const ROWS = [1, 32];

interface Row {
  id: string; layer: string; M: number; K: number; N: number; variant: string;
  us: number; bytes: number; gbps: number; percentOfCopy: number; vsBf16: number | null; torchUs: number | null;
}

/** Median ms per call of CALLS launches rotating over `launches`, replayed as one graph. */
const timeGraph = (b: CudaBackend, launches: (() => void)[]) => timeGraphOf(b, launches, CALLS, REPEATS);
const copyBandwidth = (b: CudaBackend) => measureCopy(b, REPEATS);


function torchBaseline(cases: { id: string; M: number; N: number; K: number; sets: number }[]): { version: string | null; results: Record<string, number | null> } {
  const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'torch_quant.py');
  const run = spawnSync('python3', [script], { input: JSON.stringify(cases), encoding: 'utf8', maxBuffer: 16 << 20, timeout: 300_000 });
  if (run.status !== 0) {
    process.stderr.write(`PyTorch baseline skipped: ${run.error?.message ?? run.stderr.split('\n').slice(-4).join(' ')}\n`);
    return { version: null, results: {} };
  }
  const parsed = JSON.parse(run.stdout) as { torch: string; results: Record<string, number | null> };
  return { version: parsed.torch, results: parsed.results };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { json: { type: 'string' } } });
  const probe = probeCuda();
  if (!probe.available) {
    process.stdout.write(`bench/quant: skipped, no usable CUDA GPU (${probe.reason})\n`);
    return;
  }
  const { CudaBackend } = await import('../src/backend/cuda/index.js');
  const { int4Linear } = await import('../src/backend/cuda/kernels/quant-int4.js');
  const b = CudaBackend.create();
  const rng = new Rng(20261201);
  const copyGBps = copyBandwidth(b);
  process.stdout.write(`${b.description}: copy ${copyGBps.toFixed(0)} GB/s\n`);

  const rows: Row[] = [];
  const torchCases: { id: string; M: number; N: number; K: number; sets: number }[] = [];
  for (const { layer, K, N } of SHAPES) {
    for (const M of ROWS) {
      const int4Bytes = (N * K) / 2 + (N * K / GROUP) * 3;
      const sets = Math.max(2, Math.min(16, Math.ceil((2 * L2_BYTES) / int4Bytes)));
      const made: Tensor[] = [];
      const keep = (t: Tensor) => { made.push(t); return t; };
      const weightSets = Array.from({ length: sets }, () => {
        const w = keep(randomTensor(b, rng, [N, K], 'bf16', 0.02));
        const q = { qweight: keep(b.empty([N, K / 8], 'i32')), scales: keep(b.empty([N, K / GROUP], 'f16')), zeros: keep(b.empty([N, K / GROUP], 'u8')) };
        b.int4QuantizeWeights({ weight: w, groupSize: GROUP, ...q });
        const i8 = keep(b.empty([N, K], 'i8'));
        const i8Scales = keep(b.empty([N], 'f32'));
        b.int8QuantizeRows({ x: w, out: i8, scales: i8Scales }); // per-output-channel weights: rows of [N, K]
        return { w, q, i8, i8Scales, x: keep(randomTensor(b, rng, [M, K], 'bf16')), out: keep(b.empty([M, N], 'bf16')),
          xq: keep(b.empty([M, K], 'i8')), xs: keep(b.empty([M], 'f32')), acc: keep(b.empty([M, N], 'i32')) };
      });
      const id = `${layer} M=${M}`;
      const io = 2 * M * (K + N);
      const variants: { variant: string; bytes: number; launch: (s: typeof weightSets[number]) => void }[] = [
        { variant: 'bf16 cuBLASLt', bytes: 2 * N * K + io, launch: (s) => b.gemm({ a: s.x, b: s.w, out: s.out, transB: true }) },
        { variant: `W4A16 g${GROUP}`, bytes: int4Bytes + io, launch: (s) => b.int4Linear({ x: s.x, ...s.q, groupSize: GROUP, out: s.out }) },
        ...(M > 8 ? [{ variant: `W4A16 g${GROUP} (GEMV)`, bytes: int4Bytes + io, launch: (s: typeof weightSets[number]) => int4Linear(b.runtime, { x: s.x, ...s.q, groupSize: GROUP, out: s.out }, 'gemv') }] : []),
        {
          variant: 'W8A8 (quantize + GEMM + dequantize)', bytes: N * K + 4 * N + io + M * K,
          launch: (s) => {
            b.int8QuantizeRows({ x: s.x, out: s.xq, scales: s.xs });
            b.int8Gemm({ a: s.xq, b: s.i8, out: s.acc });
            b.int8Dequantize({ acc: s.acc, rowScales: s.xs, colScales: s.i8Scales, out: s.out });
          },
        },
        { variant: 'W8A8 int8 GEMM alone', bytes: N * K + M * K + 4 * M * N, launch: (s) => b.int8Gemm({ a: s.xq, b: s.i8, out: s.acc }) },
      ];
      let bf16Us = NaN;
      for (const v of variants) {
        const ms = timeGraph(b, weightSets.map((s) => () => v.launch(s)));
        const us = ms * 1e3, gbps = v.bytes / (ms / 1e3) / 1e9;
        if (v.variant.startsWith('bf16')) bf16Us = us;
        rows.push({ id, layer, M, K, N, variant: v.variant, us, bytes: v.bytes, gbps, percentOfCopy: (100 * gbps) / copyGBps, vsBf16: v.variant.startsWith('bf16') ? null : bf16Us / us, torchUs: null });
        process.stdout.write(`${id.padEnd(22)} ${v.variant.padEnd(38)} ${us.toFixed(1).padStart(8)} µs ${gbps.toFixed(0).padStart(6)} GB/s ${((100 * gbps) / copyGBps).toFixed(0).padStart(4)}% of copy\n`);
      }
      torchCases.push({ id, M, N, K, sets: Math.max(2, Math.min(16, Math.ceil((2 * L2_BYTES) / (2 * N * K)))) });
      b.synchronize();
      for (const t of made) b.free(t);
      b.runtime.emptyCache();
    }
  }
  const torch = torchBaseline(torchCases);
  for (const r of rows) {
    const t = torch.results[r.id];
    if (typeof t === 'number') r.torchUs = t * 1e3;
  }
  const table = [
    `| layer (K → N) | M | variant | µs | GB/s | % of copy | speed-up vs bf16 | PyTorch bf16 µs |`,
    '|---|---:|---|---:|---:|---:|---:|---:|',
    ...rows.map((r) => `| ${r.layer} (${r.K} → ${r.N}) | ${r.M} | ${r.variant} | ${r.us.toFixed(1)} | ${r.gbps.toFixed(0)} | ${r.percentOfCopy.toFixed(0)}% | ` +
      `${r.vsBf16 ? `${r.vsBf16.toFixed(2)}×` : ''} | ${r.variant.startsWith('bf16') && r.torchUs ? r.torchUs.toFixed(1) : ''} |`),
  ].join('\n');
  const report = {
    date: new Date().toISOString(), device: b.description, torch: torch.version, copyGBps, group: GROUP,
    method: { callsPerGraph: CALLS, repeats: REPEATS, statistic: 'median', rotation: 'weight sets exceeding 2× L2' }, rows,
  };
  if (values.json) {
    mkdirSync(dirname(values.json), { recursive: true });
    writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
  }
  if (process.env.OUT) writeFileSync(join(process.env.OUT, 'quant.json'), `${JSON.stringify(report, null, 2)}\n`);
  process.stdout.write(`\nPyTorch ${torch.version ?? '(not available)'}; copy ${copyGBps.toFixed(0)} GB/s\n${table}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`bench/quant: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exitCode = 1;
});
