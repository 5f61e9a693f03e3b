// `node dist/bench/gemv-sweep.js`: every launch plan of the quantized decode GEMVs timed on its own —
// the tensor-core INT4 GEMV (kernels/gemv-int4-mma.ts: tiles FT, K-splits KW, chunks in flight U) and
// the W8A8 GEMV (kernels/gemv-int8.ts: columns R, K-splits KW) — at Llama 1.2B's decode shapes, beside
// the plan each planner picks, so a planner can be checked (or replaced) from one short device run.
// The profile of a decode step (fuseformer profile --quantize rtn4) puts these kernels at 28–57% of
// HBM bandwidth; this says whether a different plan does better, shape by shape.
// Method (bench/quant.ts's): weights rotate over enough sets to exceed the L2 cache, CALLS launches are
// one CUDA graph, its replays timed with CUDA events, median of REPEATS; GB/s = the weight bytes (with
// scales and zeros) ÷ time, against the copy bandwidth measured in the same run.
//
//   node dist/bench/gemv-sweep.js [--rows 1,32] [--mma-only] [--json bench/results/gemv-sweep.json]
// (--mma-only: the mma GEMV's plans alone; --paths: int4Linear through each of its kernels — the mma
//  GEMV, the INT4 streamed GEMM ('tma') and the tiled INT4 GEMM ('gemm') — at their planned launches,
//  nothing else: which kernel a product's row count should take; --bf16: every plan of the 16-bit GEMV
//  (gemv.ts: columns R a warp, K-splits KW) at Llama 1.2B's and GPT-2's products, plain and gated, no
//  norm prologue, nothing else: whether planGemv picks the fastest weight stream)
// (about 2–4 minutes on an H200, most of it compiling each plan once; cached on disk after that)

import { parseArgs } from 'node:util';
import type { Int4MmaGemvSpec } from '../src/backend/cuda/kernels/gemv-int4-mma.js';
import type { Int8GemvSpec } from '../src/backend/cuda/kernels/gemv-int8.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { Tensor } from '../src/tensor.js';
import { Rng } from '../src/testing/random.js';
import { copyBandwidth, randomTensor, timeGraph } from './device-timing.js';
import { devicePointer, finishSweep, GPT2_DECODE_PRODUCTS, LLAMA_DECODE_PRODUCTS, runSweep, sweepRecorder } from './sweep-lib.js';
import { GEMV_MAX_ROWS, gemvGrid, gemvKey, gemvSource, gemvSpace, planGemv, WARPS } from '../src/backend/cuda/kernels/gemv.js';
import { arg } from '../src/backend/cuda/runtime/kernel.js';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import type { SweepRow } from './sweep-lib.js';

const CALLS = 20;
const REPEATS = 9;
const L2_BYTES = 60 << 20;
const GROUP = 128;

const SHAPES = LLAMA_DECODE_PRODUCTS;

const ptr = devicePointer;

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { json: { type: 'string' }, rows: { type: 'string', default: '1,32' }, 'mma-only': { type: 'boolean', default: false }, paths: { type: 'boolean', default: false }, bf16: { type: 'boolean', default: false } } });
  const probe = probeCuda();
  if (!probe.available) {
    process.stdout.write(`bench/gemv-sweep: skipped, no usable CUDA GPU (${probe.reason})\n`);
    return;
  }
  const rowsList = values.rows!.split(',').map(Number);
  if (rowsList.some((m) => !Number.isInteger(m) || m < 1 || m > 32)) throw new Error(`--rows: integers 1..32, got '${values.rows}'`);
  const { CudaBackend } = await import('../src/backend/cuda/index.js');
  const i4 = await import('../src/backend/cuda/kernels/gemv-int4-mma.js');
  const i8 = await import('../src/backend/cuda/kernels/gemv-int8.js');
  const q4 = await import('../src/backend/cuda/kernels/quant-int4.js');
  const b = CudaBackend.create();
  const host = b.runtime, sms = host.multiProcessorCount;
  const rng = new Rng(20261201);
  const copyGBps = copyBandwidth(b, REPEATS);
  process.stdout.write(`${b.description}: copy ${copyGBps.toFixed(0)} GB/s\n`);
  const { rows, record } = sweepRecorder(copyGBps);
  if (values.bf16) {
    sweepBf16Gemv(b, rng, rowsList, record);
    finishSweep(plannedVsBest(rows), values.json, { device: b.description, copyGBps, calls: CALLS, repeats: REPEATS, rows });
    return;
  }

  for (const { name, N, K, gated } of SHAPES) {
    const width = gated ? N / 2 : N;
    for (const M of rowsList) {
      // INT4: packed words, f16 scales, u8 zeros; random bits (the kernel's speed does not depend on them).
      const int4Bytes = (N * K) / 2 + (N * K / GROUP) * 3;
      const sets4 = Math.max(2, Math.min(16, Math.ceil((2 * L2_BYTES) / int4Bytes)));
      const made: Tensor[] = [];
      const keep = (t: Tensor) => { made.push(t); return t; };
      const int4Sets = Array.from({ length: sets4 }, () => {
        const w = randomTensor(b, rng, [N, K], 'bf16', 0.02);
        const q = { qweight: keep(b.empty([N, K / 8], 'i32')), scales: keep(b.empty([N, K / GROUP], 'f16')), zeros: keep(b.empty([N, K / GROUP], 'u8')) };
        b.int4QuantizeWeights({ weight: w, groupSize: GROUP, ...q });
        b.free(w);
        return { ...q, x: keep(randomTensor(b, rng, [M, K], 'bf16')), out: keep(b.empty([M, N], 'bf16')) };
      });
      const activation = gated ? 'silu' as const : 'none' as const;
      if (values.paths) {
        // int4Linear by path; the planned one is what 'auto' takes for this product and row count.
        const auto = q4.int4TmaRoutes(M, gated, width, K) ? 'tma' : 'mma';
        for (const path of ['mma', 'tma', 'gemm'] as const) {
          const outs = int4Sets.map(() => keep(b.empty([M, width], 'bf16')));
          const launch = int4Sets.map((s, i) => () => q4.int4Linear(host, { x: s.x, qweight: s.qweight, scales: s.scales, zeros: s.zeros, groupSize: GROUP, out: outs[i]!, ...(gated ? { activation: 'silu' as const } : {}), gated }, path));
          try {
            launch[0]!();
          } catch (e) {
            process.stdout.write(`int4Linear ${path} ${name} M ${M}: n/a (${(e as Error).message.split('\n')[0]})\n`);
            continue;
          }
          record('int4Linear', name, M, path, path === auto, timeGraph(b, launch, CALLS, REPEATS), int4Bytes);
        }
        for (const t of made) b.free(t);
        made.length = 0;
        continue;
      }
      const planned4 = i4.planInt4MmaGemv('bf16', M, width, K, GROUP, false, activation, gated, sms).spec;
      const time4 = (spec: Int4MmaGemvSpec) => timeGraph(b, int4Sets.map((s) => () => i4.launchInt4MmaGemv(host, {
        dtype: 'bf16', M, N, K, groupSize: GROUP, gated, activation, x: ptr(s.x), qweight: ptr(s.qweight), scales: ptr(s.scales), zeros: ptr(s.zeros), bias: 0n, out: ptr(s.out),
      }, spec)), CALLS, REPEATS);
      for (const spec of i4.int4MmaGemvSpace('bf16', M, K, GROUP, false, activation, gated)) {
        const key = i4.int4MmaGemvKey(spec);
        record('int4 mma GEMV', name, M, key, key === i4.int4MmaGemvKey(planned4), time4(spec), int4Bytes);
      }
      for (const t of made) b.free(t);
      made.length = 0;

      // W8A8 (≤ 4 rows): i8 weights, f32 scales.
      if (M > i8.INT8_GEMV_MAX_ROWS || values['mma-only']) continue;
      const int8Bytes = N * K + 4 * N;
      const sets8 = Math.max(2, Math.min(16, Math.ceil((2 * L2_BYTES) / int8Bytes)));
      const int8Sets = Array.from({ length: sets8 }, () => {
        const w = randomTensor(b, rng, [N, K], 'bf16', 0.02);
        const q = keep(b.empty([N, K], 'i8')), scales = keep(b.empty([N], 'f32'));
        b.int8QuantizeRows({ x: w, out: q, scales });
        b.free(w);
        return { q, scales, x: keep(randomTensor(b, rng, [M, K], 'bf16')), out: keep(b.empty([M, width], 'bf16')) };
      });
      const planned8 = i8.planInt8Gemv('bf16', M, width, K, false, activation, gated, sms).spec;
      const time8 = (spec: Int8GemvSpec) => timeGraph(b, int8Sets.map((s) => () => i8.launchInt8Gemv(host, {
        dtype: 'bf16', M, N, K, gated, activation, x: ptr(s.x), qweight: ptr(s.q), scales: ptr(s.scales), bias: 0n, out: ptr(s.out),
      }, spec)), CALLS, REPEATS);
      for (const spec of i8.int8GemvSpace('bf16', M, K, false, activation, gated)) {
        const key = i8.int8GemvKey(spec);
        record('W8A8 GEMV', name, M, key, key === i8.int8GemvKey(planned8), time8(spec), int8Bytes);
      }
      for (const t of made) b.free(t);
    }
  }

  const lines = plannedVsBest(rows);
  finishSweep(lines, values.json, { device: b.description, copyGBps, calls: CALLS, repeats: REPEATS, rows });
}

runSweep(main);

/** Per (kernel, shape, M): the planner's pick beside the fastest plan, as table lines. */
function plannedVsBest(rows: readonly SweepRow[]): string[] {
  const lines = ['| kernel | shape | M | planned µs | % of copy | best µs | % of copy | best plan |', '|---|---|---:|---:|---:|---:|---:|---|'];
  const groups = new Map<string, SweepRow[]>();
  for (const r of rows) {
    const k = `${r.kernel}|${r.shape}|${r.M}`;
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k)!.push(r);
  }
  for (const [, g] of groups) {
    const planned = g.find((r) => r.planned)!, best = g.reduce((x, y) => (y.us < x.us ? y : x));
    lines.push(`| ${planned.kernel} | ${planned.shape} | ${planned.M} | ${planned.us.toFixed(2)} | ${planned.percentOfCopy.toFixed(0)}% | ${best.us.toFixed(2)} | ${best.percentOfCopy.toFixed(0)}% | ${best.spec} |`);
  }
  return lines;
}

/**
 * --bf16: every (R, KW) plan of gemv.ts's kernel within its register budget (planGemv's space) for each
 * product and row count, launched directly (no norm prologue), beside the one planGemv picks.
 */
function sweepBf16Gemv(b: CudaBackend, rng: Rng, rowsList: readonly number[], record: ReturnType<typeof sweepRecorder>['record']): void {
  const host = b.runtime, sms = host.multiProcessorCount;
  const products = [...LLAMA_DECODE_PRODUCTS.map((p) => ({ ...p, model: 'Llama' })), ...GPT2_DECODE_PRODUCTS.map((p) => ({ ...p, model: 'GPT-2' }))];
  for (const { name, N, K, gated, model } of products) {
    const width = gated ? N / 2 : N, bytes = N * K * 2;
    const gate = gated ? { activation: 'silu' as const, bias: false } : undefined;
    for (const M of rowsList.filter((m) => m <= GEMV_MAX_ROWS)) {
      const sets = Math.max(2, Math.min(16, Math.ceil((2 * L2_BYTES) / bytes)));
      const made = Array.from({ length: sets }, () => ({ w: randomTensor(b, rng, [N, K], 'bf16', 0.02), x: randomTensor(b, rng, [M, K], 'bf16'), out: b.empty([M, width], 'bf16') }));
      const { loop: _looped, ...planned } = planGemv('bf16', M, width, K, 'none', gate, sms).spec; // the plan its form (looping or not) starts from
      for (const spec of gemvSpace('bf16', M, K, 'none', gate)) {
        const grid = gemvGrid(spec, width), key = gemvKey(spec);
        const kernel = host.kernel(key, () => gemvSource(spec));
        const launches = made.map((s) => () => kernel.launch({ grid, block: WARPS * 32 }, [
          arg.ptr(ptr(s.x)), arg.ptr(ptr(s.w)), arg.ptr(0n), arg.ptr(ptr(s.out)), arg.i32(width),
        ]));
        record('bf16 GEMV', `${model} ${name}`, M, `${key} (${grid} blocks)`, key === gemvKey(planned), timeGraph(b, launches, CALLS, REPEATS), bytes);
      }
      for (const s of made) { b.free(s.w); b.free(s.x); b.free(s.out); }
    }
  }
}
