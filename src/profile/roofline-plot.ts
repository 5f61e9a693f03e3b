// The roofline of a profile as SVG (and PNG through svg.ts): log-log, arithmetic intensity
// (FLOP/byte) across, achieved TFLOP/s up. The roof is attainable(AI) = min(peak, AI · bandwidth)
// with the two roofs measured in the same run (roofs.ts); it bends at the ridge, peak / bandwidth.
// Each kernel (a row of the profile's table: one op at one size) is a circle at (its FLOPs / its
// bytes, its FLOPs / its time), its area proportional to its share of the step's time, labelled with
// its name; GEMMs and our own kernels in two colours. A kernel's distance below the roof is its
// distance from the best it could do: on the slanted part it should move more bytes per second, on
// the flat part more FLOPs.
//
// Kernels with no FLOPs (copies, permutes, fills) have no place on a log axis; they stand in a strip
// left of the axis, at the height the bandwidth roof has at the left edge times their share of copy
// bandwidth, so that their distance below the roof still reads as their distance from it.
//
// Labels are placed largest kernel first, at the first of eight positions around the circle that
// overlaps no label or circle placed before; failing that, at the least crowded one.

import { PLOT_FONT_FAMILY, PlotError } from '../train/plot.js';
import type { KernelRow } from './profiler.js';
import type { Roofs } from './roofs.js';
import { escapeXml, px, textWidth } from './svg.js';

export interface RooflineOptions {
  readonly title?: string;
  /** Pixels; default 1100 × 700. */
  readonly width?: number;
  readonly height?: number;
}

const COLORS = { gemm: '#1f77b4', kernel: '#ff7f0e' };
const MARGIN = { left: 150, right: 30, top: 50, bottom: 62 };
const STRIP = 82; // the no-FLOP strip, left of the plot area
const LABEL_SIZE = 10;

interface Box { x0: number; y0: number; x1: number; y1: number }
const overlap = (a: Box, b: Box): number => Math.max(0, Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0)) * Math.max(0, Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0));

const positive = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v > 0;
const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/**
 * The roofs and every row the plot reads, checked (a profile.json read back from disk may hold anything): a
 * ridge of 0 made the axis start at 10^-∞ and the grid loop never end.
 */
function checkRooflineInputs(kernels: readonly KernelRow[], roofs: Roofs): void {
  for (const key of ['copyGBps', 'gemmTflops', 'ridge'] as const) {
    if (!positive(roofs[key])) throw new PlotError(`roofline: roofs.${key} must be a positive number, got ${JSON.stringify(roofs[key]) ?? 'nothing'}`);
  }
  if (typeof roofs.gemmDtype !== 'string') throw new PlotError(`roofline: roofs.gemmDtype must be a dtype name, got ${JSON.stringify(roofs.gemmDtype) ?? 'nothing'}`);
  kernels.forEach((k, i) => {
    const bad = (field: string) => new PlotError(`roofline: kernels[${i}]${typeof (k as { name?: unknown })?.name === 'string' ? ` (${k.name})` : ''}: '${field}' is ${JSON.stringify((k as unknown as Record<string, unknown>)?.[field]) ?? 'missing'}`);
    if (typeof k !== 'object' || k === null) throw new PlotError(`roofline: kernels[${i}] is ${JSON.stringify(k)}; expected a kernel row`);
    if (typeof k.name !== 'string') throw bad('name');
    if (!finite(k.totalMs)) throw bad('totalMs');
    if (!finite(k.share)) throw bad('share');
    if (k.flops === undefined || k.bytes === undefined || !(k.totalMs > 0)) return; // not plotted
    if (!finite(k.flops) || k.flops < 0) throw bad('flops');
    if (!finite(k.bytes)) throw bad('bytes');
    if (k.bytes <= 0) return;
    if (k.flops > 0 && !positive(k.intensity)) throw bad('intensity');
    if (k.flops > 0 && !positive(k.tflops)) throw bad('tflops');
    if (k.flops === 0 && !positive(k.gbps)) throw bad('gbps');
  });
}

/** The roofline SVG of `kernels` (rows without a cost are left out) against `roofs`. */
export function rooflineSvg(kernels: readonly KernelRow[], roofs: Roofs, options: RooflineOptions = {}): string {
  const width = options.width ?? 1100, height = options.height ?? 700;
  if (!(Number.isInteger(width) && width >= 400 && Number.isInteger(height) && height >= 300)) {
    throw new PlotError(`roofline size ${width} × ${height} is too small or not whole pixels (at least 400 × 300)`);
  }
  checkRooflineInputs(kernels, roofs);
  const measured = kernels.filter((k) => k.flops !== undefined && k.bytes !== undefined && k.totalMs > 0 && k.bytes > 0);
  const withFlops = measured.filter((k) => k.flops! > 0);
  const noFlops = measured.filter((k) => k.flops === 0);
  const bandwidthTflops = roofs.copyGBps / 1e3; // TFLOP/s reached per FLOP/B on the slanted roof

  // Axes: whole decades around the points and the ridge.
  const ais = withFlops.map((k) => k.intensity!), rates = withFlops.map((k) => k.tflops!);
  const xLo = 10 ** Math.floor(Math.log10(Math.min(roofs.ridge / 100, ...ais.map((a) => a / 1.5))));
  const xHi = 10 ** Math.ceil(Math.log10(Math.max(roofs.ridge * 10, ...ais.map((a) => a * 1.5))));
  const stripRates = noFlops.map((k) => (k.gbps! / roofs.copyGBps) * xLo * bandwidthTflops);
  const yHi = 10 ** Math.ceil(Math.log10(roofs.gemmTflops * 1.5));
  const yLo = Math.max(yHi / 1e9, 10 ** Math.floor(Math.log10(Math.min(xLo * bandwidthTflops, ...rates.map((r) => r / 1.5), ...stripRates.map((r) => r / 1.5)))));

  const plot = { x0: MARGIN.left, x1: width - MARGIN.right, y0: MARGIN.top, y1: height - MARGIN.bottom };
  const sx = (ai: number) => plot.x0 + ((Math.log10(ai) - Math.log10(xLo)) / (Math.log10(xHi) - Math.log10(xLo))) * (plot.x1 - plot.x0);
  const sy = (t: number) => plot.y1 - ((Math.log10(Math.max(t, yLo)) - Math.log10(yLo)) / (Math.log10(yHi) - Math.log10(yLo))) * (plot.y1 - plot.y0);

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${PLOT_FONT_FAMILY}, sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  out.push(`<text x="${px(width / 2)}" y="28" text-anchor="middle" font-size="16">${escapeXml(options.title ?? 'Roofline')}</text>`);
  // Grid: decades (labelled) and their 2–9 multiples.
  for (let e = Math.round(Math.log10(xLo)); e <= Math.round(Math.log10(xHi)); e++) {
    for (let m = 1; m < 10; m++) {
      const v = m * 10 ** e;
      if (v > xHi * 1.0001) break;
      out.push(`<line x1="${px(sx(v))}" y1="${plot.y0}" x2="${px(sx(v))}" y2="${plot.y1}" stroke="${m === 1 ? '#d8d8d8' : '#f0f0f0'}"/>`);
      if (m === 1) out.push(`<text x="${px(sx(v))}" y="${plot.y1 + 18}" text-anchor="middle">${decadeLabel(e)}</text>`);
    }
  }
  for (let e = Math.round(Math.log10(yLo)); e <= Math.round(Math.log10(yHi)); e++) {
    for (let m = 1; m < 10; m++) {
      const v = m * 10 ** e;
      if (v > yHi * 1.0001) break;
      out.push(`<line x1="${plot.x0}" y1="${px(sy(v))}" x2="${plot.x1}" y2="${px(sy(v))}" stroke="${m === 1 ? '#d8d8d8' : '#f0f0f0'}"/>`);
      if (m === 1) out.push(`<text x="${plot.x0 - STRIP - 8}" y="${px(sy(v) + 4)}" text-anchor="end">${decadeLabel(e)}</text>`);
    }
  }
  out.push(`<rect x="${plot.x0}" y="${plot.y0}" width="${plot.x1 - plot.x0}" height="${plot.y1 - plot.y0}" fill="none" stroke="#333333"/>`);
  out.push(`<text x="${px((plot.x0 + plot.x1) / 2)}" y="${height - 16}" text-anchor="middle" font-size="13">arithmetic intensity (FLOP/byte)</text>`);
  out.push(`<text transform="translate(20 ${px((plot.y0 + plot.y1) / 2)}) rotate(-90)" text-anchor="middle" font-size="13">achieved TFLOP/s</text>`);

  // The no-FLOP strip.
  const strip = { x0: plot.x0 - STRIP, x1: plot.x0 };
  out.push(`<rect x="${strip.x0}" y="${plot.y0}" width="${STRIP}" height="${plot.y1 - plot.y0}" fill="#fafafa" stroke="#333333" stroke-dasharray="3 3"/>`);
  out.push(`<text x="${px((strip.x0 + strip.x1) / 2)}" y="${plot.y1 + 18}" text-anchor="middle" font-size="11">no FLOPs</text>`);

  // Roofs: bandwidth diagonal up to the ridge, the peak flat after it.
  const ridgeX = sx(roofs.ridge), peakY = sy(roofs.gemmTflops);
  const roofStartAi = Math.max(xLo, (yLo / bandwidthTflops));
  out.push(`<polyline points="${px(sx(roofStartAi))},${px(sy(roofStartAi * bandwidthTflops))} ${px(ridgeX)},${px(peakY)} ${px(plot.x1)},${px(peakY)}" fill="none" stroke="#333333" stroke-width="2.5"/>`);
  out.push(`<line x1="${px(ridgeX)}" y1="${px(peakY)}" x2="${px(ridgeX)}" y2="${plot.y1}" stroke="#777777" stroke-dasharray="4 4"/>`);
  out.push(`<text x="${px(ridgeX + 5)}" y="${plot.y1 - 8}" font-size="11" fill="#555555">ridge ${formatAxisNumber(roofs.ridge)} FLOP/B</text>`);
  const peakLabel = `${roofs.gemmDtype} GEMM ${formatAxisNumber(roofs.gemmTflops)} TFLOP/s`;
  out.push(`<text x="${px(plot.x1 - 6)}" y="${px(peakY - 8)}" text-anchor="end" font-size="12">${escapeXml(peakLabel)}</text>`);
  const slope = Math.atan2(sy(xLo * bandwidthTflops) - sy(xLo * 10 * bandwidthTflops), sx(xLo * 10) - sx(xLo));
  // The bandwidth label sits low on the diagonal, left of where memory-bound kernels gather (0.5–5 FLOP/B).
  const copyLabel = `copy ${formatAxisNumber(roofs.copyGBps)} GB/s`;
  const labelAi = roofStartAi * (roofs.ridge / roofStartAi) ** 0.1, lx0 = sx(labelAi), ly0 = sy(labelAi * bandwidthTflops) - 6;
  const copyWidth = textWidth(copyLabel, 12);
  out.push(`<text transform="translate(${px(lx0)} ${px(ly0)}) rotate(${(-slope * 180 / Math.PI).toFixed(1)})" font-size="12">${escapeXml(copyLabel)}</text>`);
  const roofLabels: Box[] = [
    { x0: plot.x1 - 6 - textWidth(peakLabel, 12), y0: peakY - 22, x1: plot.x1 - 6, y1: peakY - 4 },
    { x0: lx0, y0: ly0 - copyWidth * Math.sin(slope) - 12, x1: lx0 + copyWidth * Math.cos(slope), y1: ly0 + 2 },
  ];

  // Points, largest first (small circles drawn last stay visible).
  interface Point { k: KernelRow; x: number; y: number; r: number }
  const points: Point[] = [
    ...withFlops.map((k) => ({ k, x: sx(k.intensity!), y: sy(k.tflops!) })),
    ...noFlops.map((k, i) => ({ k, x: (strip.x0 + strip.x1) / 2, y: sy(stripRates[i]!) })),
  ].map((p) => ({ ...p, r: 3 + 22 * Math.sqrt(Math.max(0, Math.min(1, p.k.share))) }))
    .sort((a, b) => b.r - a.r);
  for (const p of points) {
    const color = p.k.gemm ? COLORS.gemm : COLORS.kernel;
    out.push(`<circle cx="${px(p.x)}" cy="${px(p.y)}" r="${px(p.r)}" fill="${color}" fill-opacity="0.55" stroke="${color}"><title>${escapeXml(`${p.k.name}: ${(100 * p.k.share).toFixed(1)}% of the step`)}</title></circle>`);
  }
  // Labels.
  const taken: Box[] = [...points.map((p) => ({ x0: p.x - p.r, y0: p.y - p.r, x1: p.x + p.r, y1: p.y + p.r })), ...roofLabels];
  const bounds: Box = { x0: strip.x0, y0: plot.y0, x1: plot.x1, y1: plot.y1 };
  // The legend sits bottom right; labels keep clear of it.
  const lx = plot.x1 - 250, ly = plot.y1 - 84;
  taken.push({ x0: lx, y0: ly, x1: lx + 240, y1: ly + 62 });
  points.forEach((p, index) => {
    const w = textWidth(p.k.name, LABEL_SIZE), h = LABEL_SIZE + 2, gap = p.r + 3;
    const candidates: Box[] = [
      { x0: p.x + gap, y0: p.y - h / 2, x1: p.x + gap + w, y1: p.y + h / 2 },
      { x0: p.x - gap - w, y0: p.y - h / 2, x1: p.x - gap, y1: p.y + h / 2 },
      { x0: p.x - w / 2, y0: p.y - gap - h, x1: p.x + w / 2, y1: p.y - gap },
      { x0: p.x - w / 2, y0: p.y + gap, x1: p.x + w / 2, y1: p.y + gap + h },
      { x0: p.x + gap * 0.7, y0: p.y - gap * 0.7 - h, x1: p.x + gap * 0.7 + w, y1: p.y - gap * 0.7 },
      { x0: p.x + gap * 0.7, y0: p.y + gap * 0.7, x1: p.x + gap * 0.7 + w, y1: p.y + gap * 0.7 + h },
      { x0: p.x - gap * 0.7 - w, y0: p.y - gap * 0.7 - h, x1: p.x - gap * 0.7, y1: p.y - gap * 0.7 },
      { x0: p.x - gap * 0.7 - w, y0: p.y + gap * 0.7, x1: p.x - gap * 0.7, y1: p.y + gap * 0.7 + h },
    ];
    // Farther out, stacked above and below on either side, tied to the circle by a leader line.
    for (let step = 1; step <= 5; step++) {
      for (const dy of [-step * (h + 2), step * (h + 2)]) {
        candidates.push({ x0: p.x + gap + 12, y0: p.y + dy - h / 2, x1: p.x + gap + 12 + w, y1: p.y + dy + h / 2 });
        candidates.push({ x0: p.x - gap - 12 - w, y0: p.y + dy - h / 2, x1: p.x - gap - 12, y1: p.y + dy + h / 2 });
      }
    }
    // Area outside the plot counts four times an overlap with a circle or another label.
    const crowding = (c: Box): number =>
      4 * ((c.x1 - c.x0) * (c.y1 - c.y0) - overlap(c, bounds)) + taken.reduce((s, b, i) => (i === index ? s : s + overlap(c, b)), 0);
    let best = candidates[0]!, bestScore = Infinity;
    for (const c of candidates) {
      const score = crowding(c);
      if (score < bestScore) { best = c; bestScore = score; }
      if (score === 0) break;
    }
    taken.push(best);
    const cy = (best.y0 + best.y1) / 2;
    if (Math.abs(cy - p.y) > p.r + h) {
      const ex = best.x0 > p.x ? best.x0 - 2 : best.x1 + 2;
      out.push(`<line x1="${px(p.x)}" y1="${px(p.y)}" x2="${px(ex)}" y2="${px(cy)}" stroke="#999999" stroke-width="0.7"/>`);
    }
    out.push(`<text x="${px(best.x0)}" y="${px(best.y1 - 2.5)}" font-size="${LABEL_SIZE}" fill="#222222">${escapeXml(p.k.name)}</text>`);
  });
  // Legend.
  out.push(`<rect x="${lx}" y="${ly}" width="240" height="62" fill="#ffffff" fill-opacity="0.9" stroke="#cccccc"/>`);
  out.push(`<circle cx="${lx + 14}" cy="${ly + 14}" r="6" fill="${COLORS.gemm}" fill-opacity="0.55" stroke="${COLORS.gemm}"/><text x="${lx + 26}" y="${ly + 18}">matrix products (GEMM)</text>`);
  out.push(`<circle cx="${lx + 14}" cy="${ly + 32}" r="6" fill="${COLORS.kernel}" fill-opacity="0.55" stroke="${COLORS.kernel}"/><text x="${lx + 26}" y="${ly + 36}">fuseformer kernels</text>`);
  out.push(`<text x="${lx + 8}" y="${ly + 54}" font-size="11" fill="#555555">circle area ∝ share of the step's time</text>`);
  if (measured.length === 0) out.push(`<text x="${px((plot.x0 + plot.x1) / 2)}" y="${px((plot.y0 + plot.y1) / 2)}" text-anchor="middle" fill="#888888">no kernels with a cost</text>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function decadeLabel(e: number): string {
  if (e >= 0 && e <= 4) return String(10 ** e);
  if (e < 0 && e >= -3) return (10 ** e).toFixed(-e);
  return `1e${e}`;
}

function formatAxisNumber(x: number): string {
  return x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toPrecision(3);
}
