// Two kernel timelines side by side (the JSON bench/decode-timeline.ts writes with --json): for every
// model, precision and batch both runs hold, each kernel's µs a step in A and in B and the difference,
// and the median step. A and B are usually one process each with a switch off and on, so a kernel whose
// key changes with the switch (a `_pre` or `_norm_…` suffix) is matched by a name with `--strip` removed.

/** One kernel's row of a decode-timeline result (runtime/timeline.ts summarizeChains). */
export interface TimelineKernel {
  readonly kernel: string;
  readonly perStep: number;
  readonly medianUs: number;
  readonly stepUs: number;
}

/** One result of a decode-timeline JSON file. */
export interface TimelineResult {
  readonly model: string;
  readonly precision: string;
  readonly batch: number;
  readonly stepUs: readonly number[];
  readonly kernels: readonly TimelineKernel[];
}

export interface KernelComparison {
  /** The kernel's name with `strip` removed (A's full name where only one side has it). */
  readonly kernel: string;
  /** µs a step in A and in B; undefined where that run has no such kernel. */
  readonly a?: number;
  readonly b?: number;
}

export interface TimelineComparison {
  readonly label: string;
  /** Median µs a step of A and of B. */
  readonly stepA: number;
  readonly stepB: number;
  readonly kernels: readonly KernelComparison[];
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted.length === 0 ? NaN : sorted[Math.floor(sorted.length / 2)]!;
}

/** A kernel's µs a step summed by its name with `strip` removed (two keys may meet in one name). */
function byName(kernels: readonly TimelineKernel[], strip: RegExp | undefined): Map<string, number> {
  const out = new Map<string, number>();
  for (const k of kernels) {
    const name = strip ? k.kernel.replace(strip, '') : k.kernel;
    out.set(name, (out.get(name) ?? 0) + k.stepUs);
  }
  return out;
}

/**
 * The results both runs hold (matched by model, precision and batch), in A's order; within each, A's
 * kernels in A's order, then those only B has.
 */
export function compareTimelines(a: readonly TimelineResult[], b: readonly TimelineResult[], strip?: RegExp): TimelineComparison[] {
  const key = (r: TimelineResult) => `${r.model} ${r.precision} batch ${r.batch}`;
  const bByKey = new Map(b.map((r) => [key(r), r]));
  const out: TimelineComparison[] = [];
  for (const ra of a) {
    const rb = bByKey.get(key(ra));
    if (!rb) continue;
    const ka = byName(ra.kernels, strip), kb = byName(rb.kernels, strip);
    const names = [...ka.keys(), ...[...kb.keys()].filter((n) => !ka.has(n))];
    out.push({
      label: key(ra), stepA: median(ra.stepUs), stepB: median(rb.stepUs),
      kernels: names.map((kernel) => ({ kernel, ...(ka.has(kernel) ? { a: ka.get(kernel)! } : {}), ...(kb.has(kernel) ? { b: kb.get(kernel)! } : {}) })),
    });
  }
  return out;
}

/** A comparison as markdown: a heading with the two steps, then kernel | A | B | B − A (µs a step). */
export function formatComparison(c: TimelineComparison): string {
  const us = (v: number | undefined) => (v === undefined ? '—' : v.toFixed(1));
  const lines = [
    `## ${c.label}: ${c.stepA.toFixed(1)} → ${c.stepB.toFixed(1)} µs a step (${(c.stepB - c.stepA >= 0 ? '+' : '') + (c.stepB - c.stepA).toFixed(1)})`,
    '| kernel | A µs a step | B µs a step | B − A |',
    '|---|---:|---:|---:|',
  ];
  for (const k of c.kernels) {
    const delta = (k.b ?? 0) - (k.a ?? 0);
    lines.push(`| ${k.kernel} | ${us(k.a)} | ${us(k.b)} | ${(delta >= 0 ? '+' : '') + delta.toFixed(1)} |`);
  }
  return lines.join('\n');
}
