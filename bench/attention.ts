// `npm run bench:attention`: fused attention (flashAttentionForward / Backward) against PyTorch's
// scaled_dot_product_attention with the FlashAttention-2 and cuDNN backends, in the same run.
//
// Shapes: bf16, head dim 64 and 128, hidden 2048 (H = 2048 / d heads), sequence 1k…16k with
// B·L = 16k tokens, causal and not. FLOPs: forward 4·B·H·Lq·Lk·d, halved when causal; backward 2.5×
// the forward (FA2's count: 5 GEMMs of which the forward has 2), so forward+backward is 3.5×.
// Timing: CUDA events around back-to-back calls after warm-up, median of repeats (calls per sample
// chosen so a sample takes ~20 ms). bench/torch_attention.py times SDPA the same way.
// Also in the run (each phase rewrites the JSON and markdown, so a run cut short keeps what it measured):
//   - attention dropout p = 0.1 inside the fused op, ours against SDPA's FA2 and cuDNN backends with
//     dropout_p (rows marked 'dropout' in the main table);
//   - a forward tile sweep at L = 4k (the per-d default tile against alternatives: the previous
//     schedule that rescales O on every tile, one barrier per K/V tile), to tune flash-forward.ts's
//     defaultFlashForwardTile from one GPU run;
//   - the wgmma forward (flash-forward-wgmma.ts, the default on sm_90 for d 64/128) tile by tile against
//     the mma.sync forward's default tile, at L = 1k and 4k, causal and not (sm_90 only);
//   - a backward tile sweep at L = 4k: dK/dV-kernel tiles with the default dQ tile, and dQ-kernel tiles
//     with the default dK/dV tile (backward alone, TFLOP/s counted as FA2 does: 2.5× the forward), so
//     the best of each kernel can be picked independently (flash-backward.ts's defaultFlashBackwardTile);
//   - the causal launch order at L = 1k, B = 16 (sections of heads, longest tiles first, against
//     head-major), forward and backward;
//   - packed variable-length sequences (16 sequences of 256–2048 tokens) against the same batch padded
//     to the longest with keyLengths, forward and forward+backward, TFLOP/s over the real pairs;
//   - a correctness check: for a few shapes (odd lengths, GQA, causal with Lq ≠ Lk), q, k, v, dOut and
//     our out, lse, dq, dk, dv go to raw f32 files; python recomputes them with SDPA's math backend in
//     fp32 and prints relative errors (‖ours − ref‖ / ‖ref‖); pass when out/lse ≤ 1e-2, grads ≤ 2e-2.
//
//   node dist/bench/attention.js [--json bench/results/attention.json] [--repeats 10] [--no-torch] [--no-sweep]
//       [--no-bwd-sweep] [--no-wgmma-sweep] [--no-extras] [--no-check] [--no-main]   (--no-main: skip the main table)

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import type { DropoutArgs } from '../src/backend/backend.js';
import type { FlashBackwardTile } from '../src/backend/cuda/kernels/flash-backward.js';
import { defaultFlashBackwardTile, FLASH_DKDV_SWEEP, FLASH_DQ_SWEEP, flashAttentionBackwardTensorCore } from '../src/backend/cuda/kernels/flash-backward.js';
import type { FlashForwardTile } from '../src/backend/cuda/kernels/flash-forward.js';
import { defaultFlashForwardTile, FLASH_FORWARD_SWEEP, launchFlashForward } from '../src/backend/cuda/kernels/flash-forward.js';
import type { WgmmaForwardTile } from '../src/backend/cuda/kernels/flash-forward-wgmma.js';
import type { WgmmaBackwardTile } from '../src/backend/cuda/kernels/flash-backward-wgmma.js';
import { defaultWgmmaBackwardTile, flashAttentionBackwardWgmma, WGMMA_BACKWARD_SWEEP } from '../src/backend/cuda/kernels/flash-backward-wgmma.js';
import { defaultWgmmaForwardTile, hostRunsWgmma, launchWgmmaForward, WGMMA_FORWARD_SWEEP } from '../src/backend/cuda/kernels/flash-forward-wgmma.js';
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

interface Shape { id: string; B: number; H: number; L: number; d: number; causal: boolean; dropout?: number }
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
  // Attention dropout inside the kernels (BERT/GPT-2 training uses p = 0.1).
  for (const d of HEAD_DIMS) {
    for (const causal of [false, true]) out.push({ id: `d${d} L4096${causal ? ' causal' : ''} dropout`, B: TOKENS / 4096, H: HIDDEN / d, L: 4096, d, causal, dropout: 0.1 });
  }
  return out;
}

const DROPOUT_DRAW = { seed: 0x5eedn, offset: 0n };
const dropoutOf = (s: { dropout?: number }): { dropout?: DropoutArgs } => (s.dropout ? { dropout: { p: s.dropout, ...DROPOUT_DRAW } } : {});

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

const tileName = (t: FlashForwardTile): string =>
  `${t.warps}w×${t.rowsPerWarp} BK${t.blockK}${t.qInRegisters ? ' Qreg' : ''} ≥${t.minBlocks}/SM${t.eagerRescale ? ' eager-rescale' : ''}${t.oneBarrier ? ' 1-barrier' : ''}`;

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
      for (const tile of FLASH_FORWARD_SWEEP[d]!) {
        const ms = timeCalls(b, () => launchFlashForward(b.runtime, check, { q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, keyLengths: undefined }, sizes, tile), repeats);
        const isDefault = JSON.stringify(tile) === JSON.stringify(fallback);
        rows.push({ d, causal, tile: tileName(tile), isDefault, ms, tflops: forwardFlops({ B, H, L, d, causal }) / (ms * 1e-3) / 1e12 });
      }
    }
    release(b, x);
  }
  return rows;
}

// --- wgmma forward against mma.sync ---------------------------------------------------------------------------

const wgmmaTileName = (t: WgmmaForwardTile): string => `wgmma ${t.warpgroups} warpgroups × 64 rows, BK${t.blockK}`;

interface WgmmaSweepRow { d: number; L: number; causal: boolean; kernel: string; isDefault: boolean; ms: number; tflops: number }

/** Each wgmma tile and the mma.sync default, forward alone, bf16, B·L = 16k tokens, L = 1k and 4k. */
function wgmmaSweep(b: CudaBackend, repeats: number): WgmmaSweepRow[] {
  const rows: WgmmaSweepRow[] = [];
  if (!hostRunsWgmma(b.runtime)) return rows;
  for (const d of HEAD_DIMS) {
    for (const L of [1024, 4096]) {
      const B = TOKENS / L, H = HIDDEN / d;
      const x = allocate(b, B, H, H, L, L, d, 500 + d + L);
      const t = { q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, keyLengths: undefined };
      for (const causal of [false, true]) {
        const check = new OpCheck('flashAttentionForward', 'cuda');
        const sizes = { B, Hq: H, Lq: L, Lk: L, d, group: 1, scale: 1 / Math.sqrt(d), causal };
        const flops = forwardFlops({ B, H, L, d, causal });
        const add = (kernel: string, isDefault: boolean, ms: number) => rows.push({ d, L, causal, kernel, isDefault, ms, tflops: flops / (ms * 1e-3) / 1e12 });
        add(`mma.sync ${tileName(defaultFlashForwardTile(d))}`, false, timeCalls(b, () => launchFlashForward(b.runtime, check, t, sizes), repeats));
        const fallback = JSON.stringify(defaultWgmmaForwardTile(d));
        for (const tile of WGMMA_FORWARD_SWEEP[d]!) {
          add(wgmmaTileName(tile), JSON.stringify(tile) === fallback, timeCalls(b, () => launchWgmmaForward(b.runtime, check, t, sizes, tile), repeats));
        }
        const last = rows.filter((r) => r.d === d && r.L === L && r.causal === causal);
        process.stdout.write(`wgmma sweep d${d} L${L}${causal ? ' causal' : ''}: ${last.map((r) => `${r.kernel} ${r.tflops.toFixed(0)}`).join(' | ')}\n`);
      }
      release(b, x);
    }
  }
  return rows;
}

const wgmmaBackwardTileName = (t: WgmmaBackwardTile): string =>
  `wgmma dK/dV ${t.dkdv.warpgroups}×64 keys BQ${t.dkdv.blockQ}, dQ ${t.dq.warpgroups}×64 rows BK${t.dq.blockK}`;

/** The backward alone (preprocess included), each wgmma tile against the mma.sync default, L = 4k; TFLOP/s as FA2 counts (2.5× forward). */
function wgmmaBackwardSweep(b: CudaBackend, repeats: number): WgmmaSweepRow[] {
  const rows: WgmmaSweepRow[] = [];
  if (!hostRunsWgmma(b.runtime)) return rows;
  const L = 4096;
  for (const d of HEAD_DIMS) {
    const B = TOKENS / L, H = HIDDEN / d;
    const x = allocate(b, B, H, H, L, L, d, 600 + d);
    for (const causal of [false, true]) {
      b.flashAttentionForward({ q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, causal });
      const check = new OpCheck('flashAttentionBackward', 'cuda');
      const problem = backwardProblem(x, B, H, L, d, causal);
      const flops = 2.5 * forwardFlops({ B, H, L, d, causal });
      const add = (kernel: string, isDefault: boolean, ms: number) => rows.push({ d, L, causal, kernel, isDefault, ms, tflops: flops / (ms * 1e-3) / 1e12 });
      add('mma.sync default', false, timeCalls(b, () => flashAttentionBackwardTensorCore(b.runtime, check, problem), repeats));
      const fallback = JSON.stringify(defaultWgmmaBackwardTile(d));
      for (const tile of WGMMA_BACKWARD_SWEEP[d]!) {
        add(wgmmaBackwardTileName(tile), JSON.stringify(tile) === fallback, timeCalls(b, () => flashAttentionBackwardWgmma(b.runtime, check, problem, tile), repeats));
      }
      const last = rows.filter((r) => r.d === d && r.causal === causal);
      process.stdout.write(`wgmma backward sweep d${d} L${L}${causal ? ' causal' : ''}: ${last.map((r) => `${r.kernel} ${r.tflops.toFixed(0)}`).join(' | ')}\n`);
    }
    release(b, x);
  }
  return rows;
}

// --- backward tile sweep ---------------------------------------------------------------------------------

// dK/dV tiles (flash-backward.ts's FLASH_DKDV_SWEEP) are timed with the default dQ tile and dQ tiles with
// the default dK/dV tile, so the difference to the default row is one kernel's.
const dkdvName = (t: FlashBackwardTile['dkdv']): string => `dK/dV ${t.warps}w×${t.keysPerWarp} keys BQ${t.blockQ} ≥${t.minBlocks}/SM`;
const dqName = (t: FlashBackwardTile['dq']): string => `dQ ${t.warps}w×${t.rowsPerWarp} rows BK${t.blockK} ≥${t.minBlocks}/SM`;

interface BackwardSweepRow { d: number; causal: boolean; kernel: 'default' | 'dkdv' | 'dq'; tile: string; tileSpec: FlashBackwardTile; ms: number; tflops: number }

function backwardProblem(x: Buffers, B: number, H: number, L: number, d: number, causal: boolean) {
  return { ...x, keyLengths: undefined, scale: 1 / Math.sqrt(d), causal, B, Hq: H, Hkv: H, Lq: L, Lk: L, d, group: 1 };
}

function backwardSweep(b: CudaBackend, repeats: number): BackwardSweepRow[] {
  const rows: BackwardSweepRow[] = [];
  const L = 4096;
  for (const d of HEAD_DIMS) {
    const B = TOKENS / L, H = HIDDEN / d;
    const x = allocate(b, B, H, H, L, L, d, 200 + d);
    const base = defaultFlashBackwardTile(d);
    const candidates: { kernel: BackwardSweepRow['kernel']; tile: FlashBackwardTile; name: string }[] = [
      { kernel: 'default', tile: base, name: `${dkdvName(base.dkdv)}, ${dqName(base.dq)}` },
      ...FLASH_DKDV_SWEEP[d]!.map((dkdv) => ({ kernel: 'dkdv' as const, tile: { ...base, dkdv }, name: dkdvName(dkdv) })),
      ...FLASH_DQ_SWEEP[d]!.map((dq) => ({ kernel: 'dq' as const, tile: { ...base, dq }, name: dqName(dq) })),
    ];
    for (const causal of [false, true]) {
      b.flashAttentionForward({ q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, causal });
      const check = new OpCheck('flashAttentionBackward', 'cuda');
      const problem = backwardProblem(x, B, H, L, d, causal);
      for (const c of candidates) {
        const ms = timeCalls(b, () => flashAttentionBackwardTensorCore(b.runtime, check, problem, c.tile), repeats);
        rows.push({ d, causal, kernel: c.kernel, tile: c.name, tileSpec: c.tile, ms, tflops: (2.5 * forwardFlops({ B, H, L, d, causal })) / (ms * 1e-3) / 1e12 });
      }
    }
    release(b, x);
  }
  return rows;
}

// --- launch order, packed sequences -------------------------------------------------------------------------

interface ScheduleRow { id: string; headMajorMs: number; sectionsMs: number; headMajorTflops: number; sectionsTflops: number }

/** Causal L = 1024, B = 16: the default sections (longest tiles first) against head-major, forward and backward. */
function scheduleCompare(b: CudaBackend, repeats: number): ScheduleRow[] {
  const rows: ScheduleRow[] = [];
  const L = 1024;
  for (const d of HEAD_DIMS) {
    const B = TOKENS / L, H = HIDDEN / d;
    const x = allocate(b, B, H, H, L, L, d, 300 + d);
    const sizes = { B, Hq: H, Lq: L, Lk: L, d, group: 1, scale: 1 / Math.sqrt(d), causal: true };
    const fcheck = new OpCheck('flashAttentionForward', 'cuda'), bcheck = new OpCheck('flashAttentionBackward', 'cuda');
    const forward = (sections?: number) => () => launchFlashForward(b.runtime, fcheck, { q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, keyLengths: undefined }, sizes, undefined, sections);
    const flops = forwardFlops({ B, H, L, d, causal: true });
    const fwd = { head: timeCalls(b, forward(1), repeats), sections: timeCalls(b, forward(), repeats) };
    rows.push({ id: `d${d} L${L} causal forward`, headMajorMs: fwd.head, sectionsMs: fwd.sections, headMajorTflops: flops / (fwd.head * 1e-3) / 1e12, sectionsTflops: flops / (fwd.sections * 1e-3) / 1e12 });
    const problem = backwardProblem(x, B, H, L, d, true);
    const backward = (sections?: number) => () => flashAttentionBackwardTensorCore(b.runtime, bcheck, problem, undefined, sections);
    const bwd = { head: timeCalls(b, backward(1), repeats), sections: timeCalls(b, backward(), repeats) };
    rows.push({ id: `d${d} L${L} causal backward`, headMajorMs: bwd.head, sectionsMs: bwd.sections, headMajorTflops: 2.5 * flops / (bwd.head * 1e-3) / 1e12, sectionsTflops: 2.5 * flops / (bwd.sections * 1e-3) / 1e12 });
    release(b, x);
  }
  return rows;
}

interface VarlenRow { id: string; sequences: number; tokens: number; maxLen: number; packedFwdMs: number; packedFwdBwdMs: number; paddedFwdMs: number; paddedFwdBwdMs: number; flops: number }

/** 16 causal sequences of 256–2048 tokens (fixed lengths), packed against padded to the longest. */
function varlenBench(b: CudaBackend, repeats: number): VarlenRow[] {
  const lengths = [1841, 260, 1024, 733, 2048, 512, 1377, 300, 1999, 888, 640, 1500, 256, 1111, 777, 1720];
  const tokens = lengths.reduce((a, c) => a + c, 0), maxLen = Math.max(...lengths), n = lengths.length;
  const cu = Int32Array.from([0, ...lengths.map((_, i) => lengths.slice(0, i + 1).reduce((a, c) => a + c, 0))]);
  const rows: VarlenRow[] = [];
  for (const d of HEAD_DIMS) {
    const H = HIDDEN / d;
    const flops = lengths.reduce((a, L) => a + (4 * H * L * L * d) / 2, 0);
    // Packed [tokens, H, d]: the same random tensors viewed packed (their contents do not matter here).
    const x = allocate(b, 1, H, H, tokens, tokens, d, 400 + d);
    const cuSeqlens = b.fromArray(cu, [n + 1], 'i32');
    const pk = (t: Tensor) => b.view(t, 0, [tokens, H, d]);
    const layout = { cuSeqlensQ: cuSeqlens, cuSeqlensK: cuSeqlens, maxSeqlenQ: maxLen, maxSeqlenK: maxLen, causal: true };
    const lse = b.view(x.lse, 0, [H, tokens]);
    const packedFwd = () => b.flashAttentionForward({ q: pk(x.q), k: pk(x.k), v: pk(x.v), out: pk(x.out), lse, ...layout });
    const packedBwd = () => b.flashAttentionBackward({ q: pk(x.q), k: pk(x.k), v: pk(x.v), out: pk(x.out), dOut: pk(x.dOut), lse, dq: pk(x.dq), dk: pk(x.dk), dv: pk(x.dv), ...layout });
    const packedFwdMs = timeCalls(b, packedFwd, repeats);
    const packedFwdBwdMs = timeCalls(b, () => { packedFwd(); packedBwd(); }, repeats);
    release(b, x);
    b.free(cuSeqlens);
    // Padded: [n, H, maxLen, d] with keyLengths (and causal): the queries past a sequence's length still run.
    const y = allocate(b, n, H, H, maxLen, maxLen, d, 500 + d);
    const keyLengths = b.fromArray(Int32Array.from(lengths), [n], 'i32');
    const paddedFwd = () => b.flashAttentionForward({ q: y.q, k: y.k, v: y.v, out: y.out, lse: y.lse, causal: true, keyLengths });
    const paddedFwdMs = timeCalls(b, paddedFwd, repeats);
    const paddedFwdBwdMs = timeCalls(b, () => { paddedFwd(); b.flashAttentionBackward({ ...y, causal: true, keyLengths }); }, repeats);
    release(b, y);
    b.free(keyLengths);
    rows.push({ id: `d${d} causal, ${n} sequences`, sequences: n, tokens, maxLen, packedFwdMs, packedFwdBwdMs, paddedFwdMs, paddedFwdBwdMs, flops });
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
      'no-bwd-sweep': { type: 'boolean', default: false }, 'no-extras': { type: 'boolean', default: false },
      'no-wgmma-sweep': { type: 'boolean', default: false }, 'no-main': { type: 'boolean', default: false },
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

  const report = {
    date: new Date().toISOString(), device: b.description, torch: null as string | null,
    method: { flops: 'forward 4·B·H·L²·d (÷2 causal); backward 2.5× forward', statistic: 'median', repeats, sampleMs: SAMPLE_MS },
    results: [] as Result[], sweep: [] as SweepRow[], wgmmaSweep: [] as WgmmaSweepRow[], wgmmaBackwardSweep: [] as WgmmaSweepRow[], backwardSweep: [] as BackwardSweepRow[], schedule: [] as ScheduleRow[],
    varlen: [] as VarlenRow[], correctness: null as CheckResult[] | null,
  };
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  // Written after every phase: a run cut short keeps what it measured.
  const write = (final: boolean): void => {
    const text = markdown(report);
    writeAtomic(join(root, 'bench', 'results', 'attention.md'), text);
    if (values.json) writeAtomic(values.json, `${JSON.stringify(report, null, 2)}\n`);
    if (process.env.OUT) {
      writeFileSync(join(process.env.OUT, 'attention.json'), `${JSON.stringify(report, null, 2)}\n`);
      writeFileSync(join(process.env.OUT, 'attention.md'), text);
    }
    if (final) process.stdout.write(`\n${text}`);
  };

  for (const [i, s] of (values['no-main'] ? [] : shapes()).entries()) {
    const x = allocate(b, s.B, s.H, s.H, s.L, s.L, s.d, 10 * i);
    const options = { causal: s.causal, ...dropoutOf(s) };
    const forward = () => b.flashAttentionForward({ q: x.q, k: x.k, v: x.v, out: x.out, lse: x.lse, ...options });
    const fwdMs = timeCalls(b, forward, repeats);
    const fwdBwdMs = timeCalls(b, () => { forward(); b.flashAttentionBackward({ ...x, ...options }); }, repeats);
    release(b, x);
    const flops = forwardFlops(s);
    report.results.push({
      ...s, fwdFlops: flops, oursFwdMs: fwdMs, oursFwdBwdMs: fwdBwdMs,
      torchFlashFwdMs: null, torchFlashFwdBwdMs: null, torchCudnnFwdMs: null, torchCudnnFwdBwdMs: null,
    });
    process.stdout.write(`${s.id.padEnd(24)} ours fwd ${tflops(flops, fwdMs).padStart(4)} TFLOP/s, fwd+bwd ${tflops(3.5 * flops, fwdBwdMs).padStart(4)} TFLOP/s\n`);
  }
  write(false);

  if (!values['no-torch'] && !values['no-main']) {
    const parsed = runPython({ mode: 'time', repeats, sampleMs: SAMPLE_MS, shapes: shapes() }) as
      { torch: string; results: Record<string, Record<string, number | null>> } | null;
    if (parsed) {
      report.torch = parsed.torch;
      for (const r of report.results) {
        const t = parsed.results[r.id] ?? {};
        r.torchFlashFwdMs = t.flash_fwd ?? null; r.torchFlashFwdBwdMs = t.flash_fwdbwd ?? null;
        r.torchCudnnFwdMs = t.cudnn_fwd ?? null; r.torchCudnnFwdBwdMs = t.cudnn_fwdbwd ?? null;
      }
    }
    write(false);
  }
  if (!values['no-wgmma-sweep']) {
    report.wgmmaSweep = wgmmaSweep(b, repeats);
    write(false);
    report.wgmmaBackwardSweep = wgmmaBackwardSweep(b, repeats);
    write(false);
  }
  if (!values['no-sweep']) { report.sweep = sweep(b, repeats); write(false); }
  if (!values['no-bwd-sweep']) { report.backwardSweep = backwardSweep(b, repeats); write(false); }
  if (!values['no-extras']) {
    report.schedule = scheduleCompare(b, repeats);
    write(false);
    report.varlen = varlenBench(b, repeats);
    write(false);
  }
  if (!values['no-check']) {
    report.correctness = correctness(b);
    if (report.correctness?.some((c) => !c.pass)) process.exitCode = 1;
  }
  write(true);
}

function markdown(report: {
  date: string; device: string; torch: string | null; results: Result[]; sweep: SweepRow[]; wgmmaSweep: WgmmaSweepRow[];
  wgmmaBackwardSweep: WgmmaSweepRow[]; backwardSweep: BackwardSweepRow[];
  schedule: ScheduleRow[]; varlen: VarlenRow[]; correctness: CheckResult[] | null;
}): string {
  const md: string[] = [
    `# Attention benchmark — ${report.device}, ${report.date.slice(0, 10)}`, '',
    `bf16, hidden ${HIDDEN}, B·L = ${TOKENS} tokens. TFLOP/s (forward 4·B·H·L²·d, ÷2 causal; fwd+bwd 3.5× that). PyTorch ${report.torch ?? '(not available)'} SDPA, same run. ` +
      '"dropout": attention dropout p = 0.1 inside the kernels (SDPA dropout_p).', '',
    '| shape | B×H | ours fwd | FA2 fwd | cuDNN fwd | ours fwd+bwd | FA2 fwd+bwd | cuDNN fwd+bwd |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
    ...report.results.map((r) => `| ${r.id} | ${r.B}×${r.H} | ${tflops(r.fwdFlops, r.oursFwdMs)} | ${tflops(r.fwdFlops, r.torchFlashFwdMs)} | ${tflops(r.fwdFlops, r.torchCudnnFwdMs)} | ` +
      `${tflops(3.5 * r.fwdFlops, r.oursFwdBwdMs)} | ${tflops(3.5 * r.fwdFlops, r.torchFlashFwdBwdMs)} | ${tflops(3.5 * r.fwdFlops, r.torchCudnnFwdBwdMs)} |`),
  ];
  const { sweep: sweepRows, backwardSweep: bwdRows } = report;
  const wgmmaTable = (title: string, rows: WgmmaSweepRow[]): void => {
    if (rows.length === 0) return;
    md.push('', title, '', '| d | L | kernel | non-causal | causal |', '|---|---|---|---:|---:|');
    for (const r of rows.filter((x) => !x.causal)) {
      const c = rows.find((x) => x.causal && x.d === r.d && x.L === r.L && x.kernel === r.kernel);
      md.push(`| ${r.d} | ${r.L} | ${r.kernel}${r.isDefault ? ' *' : ''} | ${r.tflops.toFixed(0)} | ${c ? c.tflops.toFixed(0) : '—'} |`);
    }
  };
  wgmmaTable('wgmma forward (sm_90) against the mma.sync forward, forward alone (TFLOP/s; * = the wgmma default):', report.wgmmaSweep);
  wgmmaTable('wgmma backward (sm_90) against the mma.sync backward, backward alone with its preprocess (TFLOP/s as FA2 counts, 2.5× forward; * = the wgmma default):', report.wgmmaBackwardSweep);
  if (sweepRows.length > 0) {
    md.push('', 'Forward tile sweep, L = 4096 (TFLOP/s; * = current default):', '', '| d | tile | non-causal | causal |', '|---|---|---:|---:|');
    for (const r of sweepRows.filter((x) => !x.causal)) {
      const c = sweepRows.find((x) => x.causal && x.d === r.d && x.tile === r.tile);
      md.push(`| ${r.d} | ${r.tile}${r.isDefault ? ' *' : ''} | ${r.tflops.toFixed(0)} | ${c ? c.tflops.toFixed(0) : '—'} |`);
    }
  }
  if (bwdRows.length > 0) {
    md.push('', 'Backward tile sweep, L = 4096 (backward alone: preprocess + dK/dV + dQ; TFLOP/s as FA2 counts, 2.5× forward; ms; first row per d = current default, the others change one kernel):', '',
      '| d | tile | non-causal | causal | ms non-causal | ms causal |', '|---|---|---:|---:|---:|---:|');
    for (const r of bwdRows.filter((x) => !x.causal)) {
      const c = bwdRows.find((x) => x.causal && x.d === r.d && x.tile === r.tile);
      md.push(`| ${r.d} | ${r.tile}${r.kernel === 'default' ? ' *' : ''} | ${r.tflops.toFixed(0)} | ${c ? c.tflops.toFixed(0) : '—'} | ${r.ms.toFixed(3)} | ${c ? c.ms.toFixed(3) : '—'} |`);
    }
  }
  if (report.schedule.length > 0) {
    md.push('', 'Causal launch order, L = 1024, B = 16 (TFLOP/s; sections = default):', '', '| case | head-major | sections |', '|---|---:|---:|');
    for (const r of report.schedule) md.push(`| ${r.id} | ${r.headMajorTflops.toFixed(0)} | ${r.sectionsTflops.toFixed(0)} |`);
  }
  if (report.varlen.length > 0) {
    md.push('', 'Packed sequences against padding to the longest (keyLengths), TFLOP/s over the real pairs:', '', '| case | tokens (max) | packed fwd | padded fwd | packed fwd+bwd | padded fwd+bwd |', '|---|---|---:|---:|---:|---:|');
    for (const r of report.varlen) {
      md.push(`| ${r.id} | ${r.tokens} (${r.maxLen}) | ${tflops(r.flops, r.packedFwdMs)} | ${tflops(r.flops, r.paddedFwdMs)} | ${tflops(3.5 * r.flops, r.packedFwdBwdMs)} | ${tflops(3.5 * r.flops, r.paddedFwdBwdMs)} |`);
    }
  }
  if (report.correctness) {
    md.push('', 'Correctness against SDPA math backend in fp32 (relative error ‖ours − ref‖ / ‖ref‖):', '', '| case | out | lse | dq | dk | dv | result |', '|---|---:|---:|---:|---:|---:|---|');
    for (const c of report.correctness) {
      const e = (k: string) => (c.errors[k] !== undefined ? c.errors[k]!.toExponential(1) : '—');
      md.push(`| ${c.id} | ${e('out')} | ${e('lse')} | ${e('dq')} | ${e('dk')} | ${e('dv')} | ${c.pass ? 'pass' : '**FAIL**'} |`);
    }
  }
  return `${md.join('\n')}\n`;
}

void main();
