// What the launch-plan sweeps (bench/gemv-sweep.ts, bench/skinny-sweep.ts) share: Llama 1.2B's decode
// products, the row each timed plan becomes, and a device pointer of a tensor.

import { writeFileSync } from 'node:fs';
import type { Tensor } from '../src/tensor.js';

/** Llama 1.2B's decode products: [weight rows, K]; the MLP's gate/up gated (2F rows, F outputs). */
export const LLAMA_DECODE_PRODUCTS = [
  { name: 'QKV', N: 3072, K: 2048, gated: false },
  { name: 'out', N: 2048, K: 2048, gated: false },
  { name: 'gate/up (gated)', N: 2 * 8192, K: 2048, gated: true },
  { name: 'down', N: 2048, K: 8192, gated: false },
  { name: 'LM head', N: 128256, K: 2048, gated: false },
] as const;

/** GPT-2 124M's decode products (its MLP is not gated: fc with GELU, then proj). */
export const GPT2_DECODE_PRODUCTS = [
  { name: 'QKV', N: 2304, K: 768, gated: false },
  { name: 'out', N: 768, K: 768, gated: false },
  { name: 'fc', N: 3072, K: 768, gated: false },
  { name: 'proj', N: 768, K: 3072, gated: false },
  { name: 'LM head', N: 50257, K: 768, gated: false },
] as const;

export interface SweepRow { kernel: string; shape: string; M: number; spec: string; planned: boolean; us: number; gbps: number; percentOfCopy: number }

/** Rows and the function that adds one: GB/s from `bytes` in `ms`, and its share of the run's copy bandwidth. */
export function sweepRecorder(copyGBps: number): { rows: SweepRow[]; record: (kernel: string, shape: string, M: number, spec: string, planned: boolean, ms: number, bytes: number) => void } {
  const rows: SweepRow[] = [];
  return {
    rows,
    record: (kernel, shape, M, spec, planned, ms, bytes) => {
      const gbps = bytes / (ms / 1e3) / 1e9;
      rows.push({ kernel, shape, M, spec, planned, us: ms * 1e3, gbps, percentOfCopy: (100 * gbps) / copyGBps });
    },
  };
}

/** A CUDA tensor's device address (the launchers take raw pointers). */
export const devicePointer = (t: Tensor): bigint => (t as unknown as { ptr: bigint }).ptr;

/** Prints the table and, with `json`, writes the run's rows there. */
export function finishSweep(table: readonly string[], json: string | undefined, run: { device: string; copyGBps: number; calls: number; repeats: number; rows: readonly SweepRow[] }): void {
  process.stdout.write(`\n${table.join('\n')}\n`);
  if (!json) return;
  writeFileSync(json, `${JSON.stringify({ date: new Date().toISOString().slice(0, 10), ...run }, null, 2)}\n`);
  process.stdout.write(`wrote ${json}\n`);
}

/** Runs a sweep's main, printing its error and exiting 1 if it throws. */
export function runSweep(main: () => Promise<void>): void {
  main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? e.stack ?? e.message : String(e)}\n`);
    process.exit(1);
  });
}
