// The 16-bit LayerNorm backward taken apart (issue #2: ≥ 85% of a same-size copy at BERT / GPT-2 shapes):
// at several row counts, the whole op (row kernel + norm_column_sums), the row kernel alone, the column-sum
// kernel alone, and our copy kernel moving the same bytes — each launched CALLS times over rotating buffer
// sets (past 3× the L2) in one CUDA graph, median of REPEATS replays. Fitting time = fixed + rows · rate
// over the row counts separates a per-launch cost from a bandwidth shortfall. With --shapes, the staged
// kernel's launch shapes (FUSEFORMER_NORM_BACKWARD "warps,blocksPerSm,maxStages") are swept as well. With
// --forms, the op is also timed in other forms, its two kernels launched here (LAUNCH_FORMS): the row kernel
// not launched programmatically, the column sums of session 55 (both sums a block, 24 blocks at H 768), and
// two probes whose results are wrong, for timing only (the row kernel without its end-of-kernel fold of the
// warps' column sums; without gamma's copy into shared memory).
//
//   node dist/bench/norm-backward.js [--hidden 768] [--dtype bf16] [--rows 2048,4096,...] [--shapes 8,2,2;8,2,3] [--forms] [--json PATH]

import { parseArgs } from 'node:util';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { CudaBackend } from '../src/backend/cuda/index.js';
import { arg } from '../src/backend/cuda/runtime/kernel.js';
import { DEVICE_LIB } from '../src/backend/cuda/kernels/device-lib.js';
import {
  backwardGridSize, columnSumCount, normBackwardKey, normBackwardSource, normColumnSumsKey, normColumnSumsSource,
  planNormBackward, stagedBackwardShapeFromEnv, stagedSharedBytes,
} from '../src/backend/cuda/kernels/layernorm.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { FloatDType } from '../src/dtype.js';
import { byteSize } from '../src/dtype.js';
import type { Tensor } from '../src/tensor.js';
import { devicePtr, kernelIdentifier } from '../src/backend/cuda/kernels/row-kernels.js';
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
    forms: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});

interface Row {
  shape: string; rows: number; bytes: number; opUs: number; rowKernelUs: number; columnKernelUs: number; copyUs: number;
  /** With --forms: µs of the op launched in each of LAUNCH_FORMS. */
  forms?: Record<string, number>;
}

/** How the two kernels of an op form are made from the library's sources. */
interface LaunchForm {
  /** The row kernel's source rewritten (a probe may drop code), and whether it is launched programmatically. */
  rows(source: string): { source: string; programmatic: boolean };
  /** Session 55's column kernel (both sums a block) instead of one sum a block row. */
  oneBlockColumns: boolean;
}

const asIs = (source: string) => ({ source, programmatic: true });
const withoutFold = (source: string) => source.slice(0, source.indexOf('  __syncthreads();\n  float* fold')) + '}\n';
const withoutGammaCopy = (source: string) => source.replace(/  for \(int c = \(threadIdx\.y \* 32 \+ t\) \* VEC; c < H; c \+= BLOCK_THREADS \* VEC\) store_vec[^\n]*\n  __syncthreads\(\);\n/, '');
export const LAUNCH_FORMS: Record<string, LaunchForm> = {
  'as-launched': { rows: asIs, oneBlockColumns: false },
  'rows-eager': { rows: (source) => ({ source: source.replace('  GRID_DEPENDENCY_WAIT();\n', ''), programmatic: false }), oneBlockColumns: false },
  'columns-one-block': { rows: asIs, oneBlockColumns: true },
  'session-55': { rows: (source) => ({ source: source.replace('  GRID_DEPENDENCY_WAIT();\n', ''), programmatic: false }), oneBlockColumns: true },
  'probe-no-fold': { rows: (source) => ({ source: withoutFold(source), programmatic: true }), oneBlockColumns: false },
  'probe-no-gamma-copy': { rows: (source) => ({ source: withoutGammaCopy(source), programmatic: true }), oneBlockColumns: false },
};

/** Session 55's norm_column_sums: a block per 32 columns adding both sums (dGamma, dBeta). */
export function oneBlockColumnSumsSource(name: string, dtype: FloatDType, H: number): string {
  const T = dtype === 'f16' ? '__half' : dtype === 'bf16' ? '__nv_bfloat16' : 'float';
  return String.raw`${DEVICE_LIB}
typedef ${T} T;
constexpr int H = ${H};
extern "C" __global__ void __launch_bounds__(1024) ${name}(const float* __restrict__ partials, int num_partials, T* dgamma, T* dbeta) {
  GRID_DEPENDENCY_WAIT();
  __shared__ float buf[2][32][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float s[2] = {0.f, 0.f};
  if (col < H) {
    #pragma unroll 8
    for (int p = threadIdx.y; p < num_partials; p += 32) {
      const float* partial = partials + (long long)p * (2 * H);
      s[0] += partial[col];
      s[1] += partial[H + col];
    }
  }
  buf[0][threadIdx.y][threadIdx.x] = s[0];
  buf[1][threadIdx.y][threadIdx.x] = s[1];
  __syncthreads();
  if (threadIdx.y != 0 || col >= H) return;
  for (int a = 0; a < 2; a++) {
    float total = 0.f;
    #pragma unroll
    for (int y = 0; y < 32; y++) total += buf[a][y][threadIdx.x];
    (a == 0 ? dgamma : dbeta)[col] = from_float<T>(total);
  }
}
`;
}

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
      let forms: Record<string, number> | undefined;
      if (values.forms) {
        forms = {};
        const rowSource = normBackwardSource(spec).source;
        for (const [formName, form] of Object.entries(LAUNCH_FORMS)) {
          const rowsForm = form.rows(rowSource);
          const rowName = `${kernelIdentifier(normBackwardKey(spec))}_${formName.replace(/-/g, '_')}`;
          const formRows = host.kernel(`bench.${rowName}`, () => ({ name: rowName, source: rowsForm.source.replace(kernelIdentifier(normBackwardKey(spec)), rowName), gridDependencyWait: rowsForm.programmatic }));
          const columnName = `${kernelIdentifier(normColumnSumsKey(columnSpec))}_one_block`;
          const formColumns = form.oneBlockColumns ? host.kernel(`bench.${columnName}`, () => ({ name: columnName, source: oneBlockColumnSumsSource(columnName, dtype, H), gridDependencyWait: true })) : columnKernel;
          const columnGrid = form.oneBlockColumns ? Math.ceil(H / 32) : [Math.ceil(H / 32), columnSumCount('layer')] as const;
          forms[formName] = time(inputs.map((a) => () => {
            formRows.launch(
              { grid, block: [spec.threadsPerRow, spec.rowsPerBlock], ...(spec.persistent ? { sharedBytes: stagedSharedBytes(spec) } : {}) },
              [arg.ptr(ptr(a.dOut)), arg.ptr(ptr(a.x)), arg.ptr(ptr(a.gamma)), arg.ptr(ptr(a.mean)), arg.ptr(ptr(a.rstd)), arg.ptr(ptr(a.dX)), arg.ptr(ptr(partials)), arg.i32(rows)],
            );
            formColumns.launch({ grid: columnGrid, block: [32, 32] }, [arg.ptr(ptr(partials)), arg.i32(grid), arg.ptr(ptr(a.dGamma)), arg.ptr(ptr(a.dBeta))]);
          }));
        }
      }

      const elements = Math.max(8, Math.round(bytes / 2 / 4 / 8) * 8);
      const copies = Array.from({ length: sets }, () => ({ src: b.empty([elements], 'f32'), dst: b.empty([elements], 'f32') }));
      for (const { src } of copies) b.fill(src, 1);
      const copyUs = time(copies.map(({ src, dst }) => () => b.copy(src, dst)));
      b.synchronize();
      for (const { src, dst } of copies) { b.free(src); b.free(dst); }
      for (const a of inputs) for (const t of Object.values(a)) b.free(t);
      b.free(partials);
      b.runtime.emptyCache();

      const row: Row = { shape: shape || 'default', rows, bytes, opUs, rowKernelUs, columnKernelUs, copyUs, ...(forms ? { forms } : {}) };
      results.push(row);
      const formText = forms ? `; forms ${Object.entries(forms).map(([n, us]) => `${n} ${us.toFixed(2)}`).join(', ')}` : '';
      process.stdout.write(`${row.shape} rows ${rows}: op ${opUs.toFixed(2)} µs (${(100 * copyUs / opUs).toFixed(1)}% of copy), row kernel ${rowKernelUs.toFixed(2)}, column kernel ${columnKernelUs.toFixed(2)}, same-size copy ${copyUs.toFixed(2)}${formText}\n`);
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
      const series: [string, number[]][] = (['opUs', 'rowKernelUs', 'copyUs'] as const).map((key) => [key.replace('Us', ''), rs.map((r) => r[key])]);
      if (values.forms) for (const name of Object.keys(LAUNCH_FORMS)) series.push([`form ${name}`, rs.map((r) => r.forms![name]!)]);
      for (const [variant, ys] of series) {
        const f = fit(rs.map((r) => r.rows), ys);
        fits.push({ shape, variant, ...f });
        lines.push(`| ${shape} | ${variant} | ${f.fixedUs.toFixed(2)} | ${f.usPer8192Rows.toFixed(2)} |`);
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
