// The 16-bit LayerNorm backward taken apart (issue #2: ≥ 85% of a same-size copy at BERT / GPT-2 shapes):
// at several row counts, the whole op (row kernel + norm_column_sums), the row kernel alone, the column-sum
// kernel alone, and our copy kernel moving the same bytes — each launched CALLS times over rotating buffer
// sets (past 3× the L2) in one CUDA graph, median of REPEATS replays. Fitting time = fixed + rows · rate
// over the row counts separates a per-launch cost from a bandwidth shortfall. With --shapes, the staged
// kernel's launch shapes (FUSEFORMER_NORM_BACKWARD "warps,blocksPerSm,maxStages") are swept as well.
//
//   node dist/bench/norm-backward.js [--hidden 768] [--dtype bf16] [--rows 2048,4096,...] [--shapes 8,2,2;8,2,3] [--json PATH]

import { parseArgs } from 'node:util';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { CudaBackend } from '../src/backend/cuda/index.js';
import { arg } from '../src/backend/cuda/runtime/kernel.js';
import {
  backwardGridSize, columnSumCount, normBackwardKey, normBackwardSource, normColumnSumsKey, normColumnSumsSource,
  planNormBackward, stagedBackwardShapeFromEnv, stagedSharedBytes,
} from '../src/backend/cuda/kernels/layernorm.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { FloatDType } from '../src/dtype.js';
import { byteSize } from '../src/dtype.js';
import type { Tensor } from '../src/tensor.js';
import { devicePtr } from '../src/backend/cuda/kernels/row-kernels.js';
import { OpCheck } from '../src/backend/validate.js';
import { Rng } from '../src/testing/random.js';
import { copyBandwidth, randomTensor, timeGraph } from './device-timing.js';

const CALLS = 20;
const REPEATS = 15;
const L2_BYTES = 60 << 20;

const { values } = parseArgs({
  options: {
    hidden: { type: 'string', default: '768' },
    dtype: { type: 'string', default: 'bf16' },
    rows: { type: 'string', default: '2048,4096,8192,16384,32768' },
    shapes: { type: 'string', default: '' },
    json: { type: 'string' },
  },
});

interface Row { shape: string; rows: number; bytes: number; opUs: number; rowKernelUs: number; columnKernelUs: number; copyUs: number }

function main(): void {
  const probe = probeCuda();
  if (!probe.available) { process.stdout.write(`bench:norm-backward needs a CUDA GPU: ${probe.reason}\n`); return; }
  const H = Number(values.hidden), dtype = values.dtype as FloatDType;
  const rowCounts = values.rows!.split(',').map(Number);
  const shapes = ['', ...values.shapes!.split(';').filter((s) => s !== '')];
  for (const s of shapes) stagedBackwardShapeFromEnv(s === '' ? undefined : s);  // bad shapes fail before any timing
  const b = CudaBackend.create();
  const host = b.runtime;
  const rng = new Rng(20261207);
  const copyGBps = copyBandwidth(b, REPEATS);
  process.stdout.write(`${b.description}: copy ${copyGBps.toFixed(0)} GB/s; LayerNorm backward ${dtype}, H ${H}\n`);
  const results: Row[] = [];
  for (const shape of shapes) {
    if (shape === '') delete process.env['FUSEFORMER_NORM_BACKWARD']; else process.env['FUSEFORMER_NORM_BACKWARD'] = shape;
    for (const rows of rowCounts) {
      const bytes = 3 * rows * H * byteSize(dtype) + 8 * rows;
      const sets = Math.max(2, Math.min(16, Math.ceil((3 * L2_BYTES) / bytes)));
      const inputs = Array.from({ length: sets }, () => {
        const x = randomTensor(b, rng, [rows, H], dtype), gamma = randomTensor(b, rng, [H], dtype), beta = randomTensor(b, rng, [H], dtype);
        const mean = b.empty([rows], 'f32'), rstd = b.empty([rows], 'f32'), y = b.empty([rows, H], dtype);
        b.layerNormForward({ x, gamma, beta, out: y, mean, rstd, eps: 1e-5 });
        b.free(y);
        return { x, gamma, mean, rstd, dOut: randomTensor(b, rng, [rows, H], dtype), dX: b.empty([rows, H], dtype), dGamma: b.empty([H], dtype), dBeta: b.empty([H], dtype) };
      });
      const op = inputs.map((a) => () => b.layerNormBackward(a));
      const time = (launches: (() => void)[]) => timeGraph(b, launches, CALLS, REPEATS) * 1e3;
      const opUs = time(op);

      // The two kernels one at a time, launched as layerNormBackward launches them.
      const check = new OpCheck('bench', 'cuda');
      const ptr = (t: Tensor) => devicePtr(check, 'tensor', t);
      const spec = planNormBackward(check, 'layer', dtype, H, false, [ptr(inputs[0]!.x), ptr(inputs[0]!.dOut), ptr(inputs[0]!.dX), ptr(inputs[0]!.gamma)], host.maxSharedBytesPerBlock, stagedBackwardShapeFromEnv());
      const grid = backwardGridSize(spec, rows, host.multiProcessorCount);
      const partials = b.empty([grid * columnSumCount('layer') * H], 'f32');
      const rowKernel = host.kernel(normBackwardKey(spec), () => normBackwardSource(spec));
      const columnSpec = { norm: 'layer' as const, dtype, hidden: H, accumulate: false };
      const columnKernel = host.kernel(normColumnSumsKey(columnSpec), () => normColumnSumsSource(columnSpec));
      const rowLaunches = inputs.map((a) => () => rowKernel.launch(
        { grid, block: [spec.threadsPerRow, spec.rowsPerBlock], ...(spec.persistent ? { sharedBytes: stagedSharedBytes(spec) } : {}) },
        [arg.ptr(ptr(a.dOut)), arg.ptr(ptr(a.x)), arg.ptr(ptr(a.gamma)), arg.ptr(ptr(a.mean)), arg.ptr(ptr(a.rstd)), arg.ptr(ptr(a.dX)), arg.ptr(ptr(partials)), arg.i32(rows)],
      ));
      const columnLaunches = inputs.map((a) => () => columnKernel.launch(
        { grid: [Math.ceil(H / 32), columnSumCount('layer')], block: [32, 32] },
        [arg.ptr(ptr(partials)), arg.i32(grid), arg.ptr(ptr(a.dGamma)), arg.ptr(ptr(a.dBeta))],
      ));
      const rowKernelUs = time(rowLaunches);
      const columnKernelUs = time(columnLaunches);

      const elements = Math.max(8, Math.round(bytes / 2 / 4 / 8) * 8);
      const copies = Array.from({ length: sets }, () => ({ src: b.empty([elements], 'f32'), dst: b.empty([elements], 'f32') }));
      for (const { src } of copies) b.fill(src, 1);
      const copyUs = time(copies.map(({ src, dst }) => () => b.copy(src, dst)));
      b.synchronize();
      for (const { src, dst } of copies) { b.free(src); b.free(dst); }
      for (const a of inputs) for (const t of Object.values(a)) b.free(t);
      b.free(partials);
      b.runtime.emptyCache();

      const row: Row = { shape: shape || 'default', rows, bytes, opUs, rowKernelUs, columnKernelUs, copyUs };
      results.push(row);
      process.stdout.write(`${row.shape} rows ${rows}: op ${opUs.toFixed(2)} µs (${(100 * copyUs / opUs).toFixed(1)}% of copy), row kernel ${rowKernelUs.toFixed(2)}, column kernel ${columnKernelUs.toFixed(2)}, same-size copy ${copyUs.toFixed(2)}\n`);
    }
  }

  // time ≈ fixed + rows · per-row cost, least squares over the row counts, per shape and variant.
  const fit = (xs: number[], ys: number[]) => {
    const n = xs.length, mx = xs.reduce((a, v) => a + v, 0) / n, my = ys.reduce((a, v) => a + v, 0) / n;
    const slope = xs.reduce((a, x, i) => a + (x - mx) * (ys[i]! - my), 0) / xs.reduce((a, x) => a + (x - mx) ** 2, 0);
    return { fixedUs: my - slope * mx, usPer8192Rows: slope * 8192 };
  };
  const lines = ['| shape | rows | op µs | % of copy | row kernel µs | column kernel µs | same-size copy µs |', '|---|---:|---:|---:|---:|---:|---:|'];
  for (const r of results) lines.push(`| ${r.shape} | ${r.rows} | ${r.opUs.toFixed(2)} | ${(100 * r.copyUs / r.opUs).toFixed(1)}% | ${r.rowKernelUs.toFixed(2)} | ${r.columnKernelUs.toFixed(2)} | ${r.copyUs.toFixed(2)} |`);
  const fits: Record<string, unknown>[] = [];
  if (rowCounts.length > 1) {
    lines.push('', '| shape | variant | fixed µs | µs per 8192 rows |', '|---|---|---:|---:|');
    for (const shape of new Set(results.map((r) => r.shape))) {
      const rs = results.filter((r) => r.shape === shape);
      for (const key of ['opUs', 'rowKernelUs', 'copyUs'] as const) {
        const f = fit(rs.map((r) => r.rows), rs.map((r) => r[key]));
        fits.push({ shape, variant: key, ...f });
        lines.push(`| ${shape} | ${key.replace('Us', '')} | ${f.fixedUs.toFixed(2)} | ${f.usPer8192Rows.toFixed(2)} |`);
      }
    }
  }
  process.stdout.write(`\n${lines.join('\n')}\n`);
  if (values.json) {
    mkdirSync(dirname(values.json), { recursive: true });
    const tmp = `${values.json}.tmp`;
    writeFileSync(tmp, JSON.stringify({ date: new Date().toISOString(), device: b.description, copyGBps, hidden: H, dtype, callsPerGraph: CALLS, repeats: REPEATS, results, fits }, null, 2));
    renameSync(tmp, values.json);
  }
}

main();
