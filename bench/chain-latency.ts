// `node dist/bench/chain-latency.js [--blocks 1,8,66,132,264] [--json FILE]`: what one kernel boundary costs
// on a chain of dependent kernels replayed as a CUDA graph — the fixed span that sets batch-1 decode (GPT-2
// 124M: ~62 dependent kernels a step at ~3 µs each, against 1 µs of weights each). Every kernel of the chain
// reads what the one before it wrote (each thread one word of it, the block's minimum + 1 its output), so a
// stale read shows as a wrong final value; the ways the next kernel learns that the previous one is done:
//
//   stream      plain launches: the stream orders them (no programmatic launch)
//   pdl         programmatic launch, griddepcontrol.wait first and launch_dependents after the write (the
//               decode kernels' pattern)
//   pdl-early   the same with launch_dependents right after the wait (the next grid is resident sooner)
//   flag        programmatic launch without griddepcontrol.wait: thread 0 spins (ld.acquire.gpu) until the
//               previous kernel's blocks have all counted themselves done (red.release.gpu after the write);
//               launch_dependents once the spin ends
//   flag-early  the same with launch_dependents first: the next kernels are launched while this one spins
//
// With --bytes B (a list; 0 = none), each kernel also streams B bytes of "weights" — its share, 16-byte vectors
// a thread, loaded before it learns the previous kernel is done (coherent loads past L1, as the decode GEMVs'
// weights: weight-stream.ts) and folded into a sink after — from a 512 MB buffer walked kernel by kernel, so a
// replay finds none of it in L2: the GEMVs' shape (GPT-2's: 1.2–4.7 MB over 96–288 blocks).
// A kernel is 256 threads a block; blocks as --blocks. The µs a boundary: (time of a 64-kernel chain − time of
// a 16-kernel chain) / 48, so the graph launch and the reset kernel at the end of each replay cancel. With
// flag sync the step must end with every counter back to zero (here a last kernel resets them), and a kernel
// that spins may only be launched once every kernel it waits on has all its blocks resident: launch_dependents
// runs after the spin (flag) or the chain relies on each grid fitting while its predecessors run (flag-early).
// Results: the table on stdout, --json for bench/results/. On the H200 (session 32, gpu-pending-s32/call1,
// docs/perf.md "Session 32"): 0.70–1.09 µs a boundary under pdl, 0.98–1.31 in stream order, 1.00–1.60 under
// flag (a flag release in the decode step itself was slower still, and was removed); with 4.7 MB of weights a
// kernel, pdl-early 1.69–1.88 µs against pdl's 2.32–3.09.

import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { probeCuda } from '../src/cuda/probe.js';
import type { KernelSource } from '../src/backend/cuda/runtime/kernel.js';
import { arg } from '../src/backend/cuda/runtime/kernel.js';
import { DEVICE_LIB } from '../src/backend/cuda/kernels/device-lib.js';
import { devicePointer } from './sweep-lib.js';
import { timeRegion } from './device-timing.js';

export const CHAIN_MODES = ['stream', 'pdl', 'pdl-early', 'flag', 'flag-early'] as const;
export type ChainMode = (typeof CHAIN_MODES)[number];
const THREADS = 256;

/** The chain kernel of `mode`: out[b] = min over its threads of in[(b·THREADS + t) mod n] + 1. */
export function chainKernelSource(mode: ChainMode, weightVectors = 0): KernelSource {
  const name = `chain_${mode.replace('-', '_')}${weightVectors > 0 ? `_w${weightVectors}` : ''}`;
  const flag = mode === 'flag' || mode === 'flag-early';
  const waitCode = mode === 'stream' ? '' : flag
    ? String.raw`${mode === 'flag-early' ? 'GRID_DEPENDENCY_TRIGGER();\n  ' : ''}if (stage > 0) {
    if (threadIdx.x == 0) {
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counters + stage - 1) : "memory");
      } while (seen < (unsigned)n);
    }
    __syncthreads();  // thread 0's acquire orders the block's reads after the previous kernel's writes
  }${mode === 'flag' ? '\n  GRID_DEPENDENCY_TRIGGER();' : ''}`
    : `GRID_DEPENDENCY_WAIT();${mode === 'pdl-early' ? '\n  GRID_DEPENDENCY_TRIGGER();' : ''}`;
  const doneCode = flag
    ? String.raw`__syncthreads();  // every thread's part is in low, and thread 0 writes it before it counts
  if (threadIdx.x == 0) {
    out[blockIdx.x] = low + 1u;
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counters + stage) : "memory");
  }`
    : String.raw`__syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = low + 1u;${mode === 'pdl' ? '\n  GRID_DEPENDENCY_TRIGGER();' : ''}`;
  const weightsCode = weightVectors > 0 ? String.raw`
  // This block's weight vectors (WV a thread), issued before the wait.
  uint4 wv[${weightVectors}];
  #pragma unroll
  for (int i = 0; i < ${weightVectors}; i++) {
    const uint4* p = weights + ((size_t)blockIdx.x * ${weightVectors} + i) * ${THREADS} + threadIdx.x;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(wv[i].x), "=r"(wv[i].y), "=r"(wv[i].z), "=r"(wv[i].w) : "l"(p));
  }` : '';
  const sinkCode = weightVectors > 0 ? String.raw`
  unsigned acc = 0u;
  #pragma unroll
  for (int i = 0; i < ${weightVectors}; i++) acc ^= wv[i].x ^ wv[i].y ^ wv[i].z ^ wv[i].w;
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the loads; never true for the zeroed buffer` : '';
  const source = String.raw`${DEVICE_LIB}
// in, out [n] u32; counters [stages] u32 (flag modes); n blocks of ${THREADS} threads; weights: this kernel's
// n · ${weightVectors} · ${THREADS} vectors (none when 0); sink [n].
extern "C" __global__ void __launch_bounds__(${THREADS}) ${name}(const unsigned* in, unsigned* out, unsigned* counters, int stage, int n,
    const uint4* weights, unsigned* sink) {
  __shared__ unsigned low;
  if (threadIdx.x == 0) low = 0xffffffffu;${weightsCode}
  ${waitCode}
  __syncthreads();
  const unsigned v = in[(blockIdx.x * ${THREADS} + threadIdx.x) % n];
  atomicMin(&low, v);${sinkCode}
  ${doneCode}
}`;
  return { name, source, gridDependencyWait: mode !== 'stream' };
}

/** The reset at the end of a replay: both buffers and the counters back to zero (a plain launch: after the chain). */
export function chainResetSource(): KernelSource {
  return {
    name: 'chain_reset',
    source: String.raw`extern "C" __global__ void chain_reset(unsigned* a, unsigned* b, unsigned* counters, int n, int stages) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { a[i] = 0u; b[i] = 0u; }
  if (i < stages) counters[i] = 0u;
}`,
  };
}

export interface ChainRow { mode: ChainMode; blocks: number; bytes: number; usPerKernel: number; check: string }

/** Weight vectors a kernel is compiled with this many of a thread (all loaded before the wait, in registers). */
export const MAX_WEIGHT_VECTORS = 32;

/** 16-byte weight vectors a thread for `bytes` a kernel over `blocks` blocks (rounded up; 0 for none). */
export function weightVectorsPerThread(bytes: number, blocks: number): number {
  return bytes <= 0 ? 0 : Math.ceil(bytes / (blocks * THREADS * 16));
}

/** The summary: a table a weight size, a row a mode, a column a block count ("—": skipped; "(wrong)": a stale read). */
export function formatChainTable(rows: readonly ChainRow[], modes: readonly ChainMode[], blocksList: readonly number[], bytesList: readonly number[]): string {
  let text = '';
  for (const bytes of bytesList) {
    text += `\n${bytes > 0 ? `${(bytes / 1e6).toFixed(1)} MB of weights a kernel` : 'no weights'}:\n| mode | ${blocksList.map((g) => `${g} blocks`).join(' | ')} |\n|---|${blocksList.map(() => '---:').join('|')}|\n`;
    for (const mode of modes) {
      const cells = blocksList.map((g) => {
        const r = rows.find((x) => x.mode === mode && x.blocks === g && weightVectorsPerThread(bytes, g) * g * THREADS * 16 === x.bytes);
        return !r ? '—' : r.check === 'ok' ? r.usPerKernel.toFixed(2) : `${r.usPerKernel.toFixed(2)} (wrong)`;
      });
      text += `| ${mode} | ${cells.join(' | ')} |\n`;
    }
  }
  return text;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { blocks: { type: 'string', default: '1,8,66,132,264' }, bytes: { type: 'string', default: '0,1200000,4700000' }, modes: { type: 'string', default: CHAIN_MODES.join(',') }, json: { type: 'string' } } });
  const probe = probeCuda();
  if (!probe.available) {
    process.stdout.write(`bench/chain-latency: skipped, no usable CUDA GPU (${probe.reason})\n`);
    return;
  }
  const blocksList = values.blocks!.split(',').map(Number);
  if (blocksList.some((g) => !Number.isInteger(g) || g < 1 || g > 4096)) throw new Error(`--blocks: integers 1..4096, got '${values.blocks}'`);
  const bytesList = values.bytes!.split(',').map(Number);
  if (bytesList.some((x) => !Number.isInteger(x) || x < 0 || x > 64 << 20)) throw new Error(`--bytes: integers 0..${64 << 20} (bytes a kernel streams), got '${values.bytes}'`);
  const modes = values.modes!.split(',') as ChainMode[];
  for (const m of modes) if (!CHAIN_MODES.includes(m)) throw new Error(`--modes: each of ${CHAIN_MODES.join(', ')}; got '${m}'`);
  const { CudaBackend } = await import('../src/backend/cuda/index.js');
  const b = CudaBackend.create();
  const host = b.runtime;
  if (!host.programmaticLaunch) process.stdout.write('note: programmatic launch is off on this GPU/driver: the pdl and flag rows launch plainly\n');
  const LONG = 64, SHORT = 16, REPEATS = 15;
  const WEIGHT_BUFFER = 512 << 20; // walked kernel by kernel: a replay's weights are never in L2
  const maxBlocks = Math.max(...blocksList);
  const a = b.empty([maxBlocks], 'i32'), c = b.empty([maxBlocks], 'i32'), counters = b.empty([LONG + 1], 'i32');
  const sink = b.empty([maxBlocks], 'i32'), weights = b.empty([WEIGHT_BUFFER], 'u8');
  b.fill(weights, 0);
  const reset = host.kernel('bench.chain_reset', chainResetSource);
  const rows: ChainRow[] = [];
  for (const bytes of bytesList) {
    for (const mode of modes) {
      for (const blocks of blocksList) {
        const vectors = weightVectorsPerThread(bytes, blocks);
        if (vectors > MAX_WEIGHT_VECTORS) {
          process.stdout.write(`${mode} ${blocks} blocks ${bytes} B: skipped (${vectors} vectors a thread, over ${MAX_WEIGHT_VECTORS})\n`);
          continue;
        }
        const kernel = host.kernel(`bench.chain.${mode}.w${vectors}`, () => chainKernelSource(mode, vectors));
        const kernelBytes = blocks * vectors * THREADS * 16;
        const chain = (stages: number) => () => {
          for (let s = 0; s < stages; s++) {
            const [from, to] = s % 2 === 0 ? [a, c] : [c, a];
            const offset = BigInt((s * kernelBytes) % (WEIGHT_BUFFER - kernelBytes + 1) & ~15);
            kernel.launch({ grid: blocks, block: THREADS }, [arg.ptr(devicePointer(from)), arg.ptr(devicePointer(to)), arg.ptr(devicePointer(counters)), arg.i32(s), arg.i32(blocks),
              arg.ptr(devicePointer(weights) + offset), arg.ptr(devicePointer(sink))]);
          }
        };
        const resetLaunch = () => reset.launch({ grid: Math.ceil(Math.max(maxBlocks, LONG + 1) / 256), block: 256 }, [arg.ptr(devicePointer(a)), arg.ptr(devicePointer(c)), arg.ptr(devicePointer(counters)), arg.i32(maxBlocks), arg.i32(LONG + 1)]);
        const time = (stages: number): { ms: number; check: string } => {
          resetLaunch();
          const graph = b.captureGraph(chain(stages));
          const resetGraph = b.captureGraph(resetLaunch);
          // a replay of the chain, then the reset, timed together
          const ms = timeRegion(b, () => { graph.replay(); resetGraph.replay(); }, 1, REPEATS);
          // correctness: one more replay without the reset; the last buffer holds `stages` everywhere
          graph.replay();
          const got = Array.from(b.download(stages % 2 === 1 ? c : a) as Int32Array).slice(0, blocks);
          const wrong = got.filter((v) => v !== stages).length;
          resetGraph.replay();
          b.synchronize();
          graph.dispose(); resetGraph.dispose();
          return { ms, check: wrong === 0 ? 'ok' : `${wrong} of ${blocks} blocks wrong (e.g. ${got.find((v) => v !== stages)} for ${stages})` };
        };
        const long = time(LONG), short = time(SHORT);
        const usPerKernel = ((long.ms - short.ms) * 1e3) / (LONG - SHORT);
        const check = long.check === 'ok' && short.check === 'ok' ? 'ok' : `${long.check}; ${short.check}`;
        rows.push({ mode, blocks, bytes: kernelBytes, usPerKernel, check });
        process.stdout.write(`${mode} ${blocks} blocks ${kernelBytes} B: ${usPerKernel.toFixed(3)} µs a kernel (${check})\n`);
      }
    }
  }
  process.stdout.write(`\n## ${b.description}: µs a dependent kernel (${LONG}- against ${SHORT}-kernel chains in a CUDA graph, median of ${REPEATS})\n`);
  process.stdout.write(formatChainTable(rows, modes, blocksList, bytesList));
  if (values.json) writeFileSync(values.json, JSON.stringify({ date: new Date().toISOString(), device: b.description, threads: THREADS, rows }, null, 1));
  const failed = rows.filter((r) => r.check !== 'ok');
  if (failed.length > 0) {
    process.stdout.write(`\n${failed.length} rows read stale data: ${failed.map((r) => `${r.mode}/${r.blocks}/${r.bytes}`).join(', ')}\n`);
    process.exitCode = 1;
  }
}

if (process.argv[1]?.endsWith('chain-latency.js')) await main();
