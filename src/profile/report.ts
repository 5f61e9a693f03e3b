// A profile as text: a summary (step = GEMMs + other kernels + idle, the roofs) and the per-kernel
// table, as a Markdown table padded to line up in a terminal. With roofs (CUDA): FLOPs and bytes per
// call, arithmetic intensity, achieved rate and the share of the roof; without (the CPU backend):
// times and counts only.

import type { KernelRow, Profile } from './profiler.js';

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;

/** Up to 4 significant digits, no exponent for ordinary magnitudes. */
export function formatNumber(x: number | undefined): string {
  if (x === undefined || !Number.isFinite(x)) return '—';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1000) return Math.round(x).toLocaleString('en-US');
  if (a >= 100) return x.toFixed(1);
  if (a >= 10) return x.toFixed(2);
  if (a >= 0.01) return x.toFixed(3);
  return x.toPrecision(2);
}

/** The summary lines: where the step's time goes, and against which roofs. */
export function formatSummary(p: Profile, stepLabel = 'step'): string {
  const lines: string[] = [];
  const share = (ms: number) => (p.stepMs > 0 ? ` (${pct(ms / p.stepMs)})` : '');
  lines.push(`${stepLabel} ${formatNumber(p.stepMs)} ms (median of ${p.stepSamplesMs.length}) = GEMMs ${formatNumber(p.gemmMs)} ms${share(p.gemmMs)} + other kernels ${formatNumber(p.otherMs)} ms${share(p.otherMs)} + idle ${formatNumber(p.idleMs)} ms${share(p.idleMs)}`);
  lines.push(`${p.ops.length} op launches; their times add up to ${formatNumber(p.kernelMs)} ms = ${p.stepMs > 0 ? pct(p.kernelMs / p.stepMs) : '—'} of the ${stepLabel}`);
  if (p.opTiming === 'removal') {
    const marked = p.markedKernelMs !== undefined && p.stepMs > 0 ? `; by marker nodes they add up to ${formatNumber(p.markedKernelMs)} ms = ${pct(p.markedKernelMs / p.stepMs)}` : '';
    lines.push(`ops timed by removal: each op's time is what the replayed step loses without it${marked}`);
  } else if (p.markerOverheadMs !== undefined) {
    lines.push(`ops timed inside the replayed graph; each op's interval less what its markers add (${formatNumber(p.markerOverheadMs * 1000)} µs, calibrated on a full-wave kernel)`);
  }
  if (p.roofs) {
    const r = p.roofs;
    lines.push(`roofs (${p.device}): copy ${formatNumber(r.copyGBps)} GB/s, ${r.gemmDtype} GEMM ${formatNumber(r.gemmTflops)} TFLOP/s (${r.gemmShape.join('×')}), ridge ${formatNumber(r.ridge)} FLOP/B`);
  } else {
    lines.push(`${p.device}: times and counts only (no roofs on this backend)`);
  }
  for (const w of p.warnings) lines.push(`warning: ${w}`);
  return lines.join('\n');
}

/** The per-kernel table, largest total time first; `limit` rows, then a line for the rest. */
export function formatKernelTable(p: Profile, limit = Infinity): string {
  const withRoofs = p.roofs !== undefined;
  const header = withRoofs
    ? ['kernel', 'calls', 'total ms', 'median µs', 'step %', 'GFLOP/call', 'MB/call', 'FLOP/B', 'TFLOP/s', 'GB/s', '% of roof', 'bound']
    : ['kernel', 'calls', 'total ms', 'median µs', 'step %'];
  const row = (k: KernelRow): string[] => {
    const base = [k.name, String(k.calls), formatNumber(k.totalMs), formatNumber(k.medianMs * 1e3), pct(k.share)];
    if (!withRoofs) return base;
    return [
      ...base,
      formatNumber(k.flops === undefined ? undefined : k.flops / k.calls / 1e9),
      formatNumber(k.bytes === undefined ? undefined : k.bytes / k.calls / 1e6),
      formatNumber(k.intensity), formatNumber(k.tflops), formatNumber(k.gbps),
      k.percentOfRoof === undefined ? '—' : `${k.percentOfRoof.toFixed(0)}%`, k.bound ?? '—',
    ];
  };
  const shown = p.kernels.slice(0, limit);
  const rows = shown.map(row);
  const rest = p.kernels.slice(shown.length);
  if (rest.length > 0) {
    const restMs = rest.reduce((s, k) => s + k.totalMs, 0);
    rows.push([`(${rest.length} more)`, String(rest.reduce((s, k) => s + k.calls, 0)), formatNumber(restMs), '', pct(p.stepMs > 0 ? restMs / p.stepMs : 0), ...(withRoofs ? ['', '', '', '', '', '', ''] : [])]);
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? `${'-'.repeat(w + 2)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}
