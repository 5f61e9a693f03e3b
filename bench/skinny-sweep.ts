// `node dist/bench/skinny-sweep.js`: every launch plan of the skinny GEMM (kernels/gemm-skinny.ts: warps
// a block, feature tiles a warp, pipeline stages, K splits), the plans around the streamed skinny GEMM's
// pick (kernels/gemm-stream.ts: consumer warps, feature tiles, k a stage, ring depth, splits) and of the tensor-core GEMV (kernels/gemv-mma.ts:
// feature tiles, K-splitting warps, chunks in flight, one or two blocks an SM) timed on its own at Llama
// 1.2B's decode products for a batch of sequences, beside each planner's pick and the backend's default
// path for the same product (cuBLASLt; gated: cuBLASLt + gatedActivation).
// The batch-32 decode target needs these products near HBM bandwidth: in session 11 the skinny GEMM's
// planned shape (4 warps, ≤ 48 KiB of weights in flight a block) streamed at 29–54% of copy and
// cuBLASLt at 35–60%; this says which shape, if any, does better, product by product.
// Method (bench/gemv-sweep.ts's): the weights rotate over enough sets to exceed the L2 cache, CALLS
// launches are one CUDA graph, its replays timed with CUDA events, median of REPEATS; GB/s = weight
// bytes ÷ time, against the copy bandwidth measured in the same run.
//
//   node dist/bench/skinny-sweep.js [--rows 32] [--kernels skinny,stream,mma] [--stream-planned] [--model llama|gpt2] [--shapes QKV,out,'LM head'] [--json bench/results/skinny-sweep.json]
// (a few minutes on an H200, most of it compiling each plan once)

import { parseArgs } from 'node:util';
import type { SkinnyGemmPlan } from '../src/backend/cuda/kernels/gemm-skinny.js';
import type { StreamGemmPlan } from '../src/backend/cuda/kernels/gemm-stream.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { Tensor } from '../src/tensor.js';
import { Rng } from '../src/testing/random.js';
import { copyBandwidth, randomTensor, timeGraph } from './device-timing.js';
import { devicePointer, finishSweep, GPT2_DECODE_PRODUCTS, LLAMA_DECODE_PRODUCTS, runSweep, sweepRecorder } from './sweep-lib.js';
import type { SweepRow } from './sweep-lib.js';

const CALLS = 20;
const REPEATS = 9;
const L2_BYTES = 60 << 20;

/** The batched products of --model (llama: Llama 1.2B, gpt2: GPT-2 124M); the LM head only when --shapes names it. */
const PRODUCTS = { llama: LLAMA_DECODE_PRODUCTS, gpt2: GPT2_DECODE_PRODUCTS } as const;

const ptr = devicePointer;

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { json: { type: 'string' }, rows: { type: 'string', default: '32' }, kernels: { type: 'string', default: 'skinny,stream,mma' }, shapes: { type: 'string' }, 'stream-planned': { type: 'boolean', default: false }, model: { type: 'string', default: 'llama' } } });
  const kernels = new Set(values.kernels!.split(','));
  if ([...kernels].some((k) => k !== 'skinny' && k !== 'stream' && k !== 'mma')) throw new Error(`--kernels: skinny, stream and/or mma, got '${values.kernels}'`);
  const model = values.model as keyof typeof PRODUCTS;
  if (!(model in PRODUCTS)) throw new Error(`--model: llama or gpt2, got '${values.model}'`);
  const ALL_SHAPES: readonly { name: string; N: number; K: number; gated: boolean }[] = PRODUCTS[model];
  const names = values.shapes?.split(',') ?? ALL_SHAPES.filter((s) => s.name !== 'LM head').map((s) => s.name);
  const unknown = names.filter((n) => !ALL_SHAPES.some((s) => s.name === n));
  if (unknown.length > 0) throw new Error(`--shapes: ${unknown.join(', ')} unknown (${ALL_SHAPES.map((s) => s.name).join(', ')})`);
  const SHAPES = ALL_SHAPES.filter((s) => names.includes(s.name));
  const probe = probeCuda();
  if (!probe.available) {
    process.stdout.write(`bench/skinny-sweep: skipped, no usable CUDA GPU (${probe.reason})\n`);
    return;
  }
  const { CudaBackend } = await import('../src/backend/cuda/index.js');
  const sk = await import('../src/backend/cuda/kernels/gemm-skinny.js');
  const st = await import('../src/backend/cuda/kernels/gemm-stream.js');
  const mma = await import('../src/backend/cuda/kernels/gemv-mma.js');
  const rowsList = values.rows!.split(',').map(Number);
  if (rowsList.some((m) => !Number.isInteger(m) || m < sk.SKINNY_MIN_ROWS || m > sk.SKINNY_MAX_ROWS)) {
    throw new Error(`--rows: integers ${sk.SKINNY_MIN_ROWS}..${sk.SKINNY_MAX_ROWS}, got '${values.rows}'`);
  }
  const b = CudaBackend.create();
  const host = b.runtime, sms = host.multiProcessorCount;
  const rng = new Rng(20261202);
  const copyGBps = copyBandwidth(b, REPEATS);
  process.stdout.write(`${b.description}: copy ${copyGBps.toFixed(0)} GB/s\n`);
  const { rows, record } = sweepRecorder(copyGBps);

  for (const { name, N, K, gated } of SHAPES) {
    const width = gated ? N / 2 : N, bytes = N * K * 2;
    for (const M of rowsList) {
      const sets = Math.max(2, Math.min(16, Math.ceil((2 * L2_BYTES) / bytes)));
      const made: Tensor[] = [];
      const keep = (t: Tensor) => { made.push(t); return t; };
      const operands = Array.from({ length: sets }, () => ({
        w: keep(randomTensor(b, rng, [N, K], 'bf16', 0.02)), x: keep(randomTensor(b, rng, [M, K], 'bf16')),
        out: keep(b.empty([M, width], 'bf16')), up: keep(b.empty([M, N], 'bf16')),
      }));
      const gate = gated ? { activation: 'silu' as const, bias: false } : undefined;
      // The backend's own path for the product (skinny off, its default).
      const defaultMs = timeGraph(b, operands.map((o) => () => (gated
        ? b.gatedLinear({ x: o.x, weight: o.w, up: o.up, out: o.out, activation: 'silu' })
        : b.gemm({ a: o.x, b: o.w, out: o.out, transB: true }))), CALLS, REPEATS);
      record('default path', name, M, gated ? 'gatedLinear (cuBLASLt + gatedActivation)' : 'gemm', false, defaultMs, bytes);
      const planned = sk.planSkinnyGemm('bf16', M, width, K, 'none', gate, sms);
      for (const plan of kernels.has('skinny') ? sk.skinnyGemmSpace('bf16', M, width, K, 'none', gate) : []) {
        const key = sk.skinnyGemmKey(plan.spec);
        const ms = timeGraph(b, operands.map((o) => () => sk.launchSkinnyPlan(host, plan as SkinnyGemmPlan, { x: ptr(o.x), w: ptr(o.w), bias: 0n, out: ptr(o.out), M, N: width, K })), CALLS, REPEATS);
        record('skinny', name, M, `${key} grid ${plan.grid.join('×')}`, key === sk.skinnyGemmKey(planned.spec), ms, bytes);
      }
      const streamApplies = K % st.STREAM_K_MULTIPLE === 0;
      const plannedStream = streamApplies ? st.streamGemmKey(st.planStreamGemm('bf16', M, width, K, 'none', gate, sms).spec) : '';
      // --stream-planned: the planner's pick only (every row count and shape in one short run).
      const streamPlans = kernels.has('stream') && streamApplies && !values['stream-planned'] ? st.streamGemmSpace('bf16', M, width, K, 'none', gate, sms) : [];
      if (streamApplies && kernels.has('stream') && values['stream-planned']) streamPlans.push(st.planStreamGemm('bf16', M, width, K, 'none', gate, sms));
      else if (streamApplies && kernels.has('stream') && !streamPlans.some((p) => st.streamGemmKey(p.spec) === plannedStream)) streamPlans.push(st.planStreamGemm('bf16', M, width, K, 'none', gate, sms));
      for (const plan of streamPlans) {
        const key = st.streamGemmKey(plan.spec);
        const ms = timeGraph(b, operands.map((o) => () => st.launchStreamPlan(host, plan as StreamGemmPlan, { x: ptr(o.x), w: ptr(o.w), bias: 0n, out: ptr(o.out), M, N: width, K })), CALLS, REPEATS);
        record('stream', name, M, `${key} grid ${plan.grid.join('×')}`, key === plannedStream, ms, bytes);
      }
      const mmaApplies = kernels.has('mma') && M <= (gated ? mma.MMA_GEMV_MAX_GATED_ROWS : mma.MMA_GEMV_MAX_ROWS);
      const plannedMma = mmaApplies ? mma.planMmaGemv('bf16', M, width, K, 'none', gate, sms).spec : undefined;
      for (const spec of mmaApplies ? mma.mmaGemvSpace('bf16', M, K, 'none', gate) : []) {
        const key = mma.mmaGemvKey(spec);
        const ms = timeGraph(b, operands.map((o) => () => mma.launchMmaGemvSpec(host, spec, { a: ptr(o.x), w: ptr(o.w), bias: 0n, out: ptr(o.out), M, N: width })), CALLS, REPEATS);
        record('mma', name, M, `${key} grid ${mma.mmaGemvGrid(spec, width)}`, plannedMma !== undefined && key === mma.mmaGemvKey(plannedMma), ms, bytes);
      }
      for (const t of made) b.free(t);
    }
  }

  // Per (kernel, shape, M): the default path, the planner's pick and the five fastest plans.
  const lines = ['| kernel | shape | M | default µs | % of copy | planned µs | % of copy | best µs | % of copy | best plan | next best |', '|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|'];
  for (const kernel of ['skinny', 'stream', 'mma'].filter((k) => kernels.has(k))) {
    for (const { name } of SHAPES) {
      for (const M of rowsList) {
        const g = rows.filter((r) => r.shape === name && r.M === M);
        const def = g.find((r) => r.kernel === 'default path')!, planned = g.find((r) => r.kernel === kernel && r.planned);
        const ranked = g.filter((r) => r.kernel === kernel).sort((x, y) => x.us - y.us);
        const best = ranked[0];
        if (!best) continue;
        const pct = (r: SweepRow | undefined) => (r ? `${r.us.toFixed(2)} | ${r.percentOfCopy.toFixed(0)}%` : '— | —');
        lines.push(`| ${kernel} | ${name} | ${M} | ${pct(def)} | ${pct(planned)} | ${pct(best)} | ${best.spec} | ${ranked.slice(1, 5).map((r) => `${r.spec} ${r.us.toFixed(2)}`).join('; ')} |`);
      }
    }
  }
  finishSweep(lines, values.json, { device: b.description, copyGBps, calls: CALLS, repeats: REPEATS, rows });
}

runSweep(main);
