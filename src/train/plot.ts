// Loss curves as hand-written SVG (no plotting dependency), and as PNG through @resvg/resvg-js (a Rust
// SVG renderer with prebuilt Node binaries; no browser, no network). The text uses DejaVu Sans, the
// font most Linux systems have; resvg takes it from the system fonts, and without any font installed
// the PNG has lines but no text (the SVG is unaffected).
//
// Layout: title on top, y axis (loss) on the left, x axis (step) below, grid lines at "nice" tick
// values (1, 2 or 5 × 10^k), legend at the top right. Non-finite values (a NaN loss) break the line
// rather than bend the scale. Series with few points (evaluation) also get a marker per point. A long
// run's series is thinned to the lowest and highest point per pixel column before drawing: the
// picture is the same (the noise band keeps its envelope) and the file stays small.

import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { FuseformerError } from '../errors.js';
import { writeFileAtomically } from '../io/atomic-write.js';

export class PlotError extends FuseformerError {}

export interface PlotPoint {
  readonly step: number;
  readonly value: number;
}

export interface PlotSeries {
  readonly name: string;
  readonly points: readonly PlotPoint[];
  /** CSS colour; default from a fixed palette by position. */
  readonly color?: string;
}

export interface PlotOptions {
  readonly title?: string;
  readonly xLabel?: string;
  readonly yLabel?: string;
  /** Pixels; default 800 × 480. */
  readonly width?: number;
  readonly height?: number;
}

export const PLOT_FONT_FAMILY = 'DejaVu Sans';
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];
const MARGIN = { left: 72, right: 24, top: 44, bottom: 56 };
/** A series with at most this many points gets markers. */
const MARKER_LIMIT = 60;

/** The SVG document of a plot of `series` (value against step). */
export function lossCurveSvg(series: readonly PlotSeries[], options: PlotOptions = {}): string {
  const width = options.width ?? 800, height = options.height ?? 480;
  if (!(Number.isInteger(width) && width >= 200 && Number.isInteger(height) && height >= 150)) {
    throw new PlotError(`plot size ${width} × ${height} is too small or not whole pixels (at least 200 × 150)`);
  }
  const plot = { x0: MARGIN.left, x1: width - MARGIN.right, y0: MARGIN.top, y1: height - MARGIN.bottom };
  const finite = series.flatMap((s) => s.points.filter((p) => Number.isFinite(p.step) && Number.isFinite(p.value)));
  const xRange = paddedRange(finite.map((p) => p.step), 0);
  const yRange = paddedRange(finite.map((p) => p.value), 0.05);
  const xTicks = niceTicks(xRange[0], xRange[1], 6), yTicks = niceTicks(yRange[0], yRange[1], 5);
  // Widen the axes to the outer ticks so the curve never leaves the frame.
  const [xMin, xMax] = [Math.min(xRange[0], xTicks.values[0]!), Math.max(xRange[1], xTicks.values.at(-1)!)];
  const [yMin, yMax] = [Math.min(yRange[0], yTicks.values[0]!), Math.max(yRange[1], yTicks.values.at(-1)!)];
  const px = (x: number): number => plot.x0 + ((x - xMin) / (xMax - xMin)) * (plot.x1 - plot.x0);
  const py = (y: number): number => plot.y1 - ((y - yMin) / (yMax - yMin)) * (plot.y1 - plot.y0);
  const f = (v: number): string => v.toFixed(1);

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${PLOT_FONT_FAMILY}, sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  if (options.title) out.push(`<text x="${f(width / 2)}" y="26" text-anchor="middle" font-size="16">${escapeXml(options.title)}</text>`);
  // Grid and tick labels.
  for (const v of xTicks.values) {
    if (v < xMin || v > xMax) continue;
    out.push(`<line x1="${f(px(v))}" y1="${plot.y0}" x2="${f(px(v))}" y2="${plot.y1}" stroke="#e5e5e5"/>`);
    out.push(`<line x1="${f(px(v))}" y1="${plot.y1}" x2="${f(px(v))}" y2="${plot.y1 + 5}" stroke="#333333"/>`);
    out.push(`<text x="${f(px(v))}" y="${plot.y1 + 19}" text-anchor="middle">${formatTick(v, xTicks.step)}</text>`);
  }
  for (const v of yTicks.values) {
    if (v < yMin || v > yMax) continue;
    out.push(`<line x1="${plot.x0}" y1="${f(py(v))}" x2="${plot.x1}" y2="${f(py(v))}" stroke="#e5e5e5"/>`);
    out.push(`<line x1="${plot.x0 - 5}" y1="${f(py(v))}" x2="${plot.x0}" y2="${f(py(v))}" stroke="#333333"/>`);
    out.push(`<text x="${plot.x0 - 8}" y="${f(py(v) + 4)}" text-anchor="end">${formatTick(v, yTicks.step)}</text>`);
  }
  out.push(`<rect x="${plot.x0}" y="${plot.y0}" width="${plot.x1 - plot.x0}" height="${plot.y1 - plot.y0}" fill="none" stroke="#333333"/>`);
  out.push(`<text x="${f((plot.x0 + plot.x1) / 2)}" y="${height - 14}" text-anchor="middle" font-size="13">${escapeXml(options.xLabel ?? 'step')}</text>`);
  out.push(`<text transform="translate(18 ${f((plot.y0 + plot.y1) / 2)}) rotate(-90)" text-anchor="middle" font-size="13">${escapeXml(options.yLabel ?? 'loss')}</text>`);
  if (finite.length === 0) {
    out.push(`<text x="${f((plot.x0 + plot.x1) / 2)}" y="${f((plot.y0 + plot.y1) / 2)}" text-anchor="middle" fill="#888888">no data yet</text>`);
  }
  // Curves: one polyline per run of finite points.
  series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    const points = thin(s.points, plot.x1 - plot.x0);
    let run: string[] = [];
    const flush = (): void => {
      if (run.length > 1) out.push(`<polyline points="${run.join(' ')}" fill="none" stroke="${color}" stroke-width="1.5" stroke-linejoin="round"/>`);
      run = [];
    };
    for (const p of points) {
      if (Number.isFinite(p.step) && Number.isFinite(p.value)) run.push(`${f(px(p.step))},${f(py(p.value))}`);
      else flush();
    }
    flush();
    if (s.points.length <= MARKER_LIMIT) {
      for (const p of s.points) {
        if (Number.isFinite(p.step) && Number.isFinite(p.value)) out.push(`<circle cx="${f(px(p.step))}" cy="${f(py(p.value))}" r="3" fill="${color}"/>`);
      }
    }
  });
  // Legend, top right inside the frame.
  if (series.length > 0) {
    const rowHeight = 18, boxWidth = 36 + 7.5 * Math.max(...series.map((s) => s.name.length));
    const bx = plot.x1 - boxWidth - 10, by = plot.y0 + 10;
    out.push(`<rect x="${f(bx)}" y="${by}" width="${f(boxWidth)}" height="${series.length * rowHeight + 8}" fill="#ffffff" fill-opacity="0.85" stroke="#cccccc"/>`);
    series.forEach((s, i) => {
      const y = by + 4 + rowHeight * i + rowHeight / 2;
      const color = s.color ?? PALETTE[i % PALETTE.length]!;
      out.push(`<line x1="${f(bx + 8)}" y1="${f(y)}" x2="${f(bx + 28)}" y2="${f(y)}" stroke="${color}" stroke-width="2"/>`);
      out.push(`<text x="${f(bx + 34)}" y="${f(y + 4)}">${escapeXml(s.name)}</text>`);
    });
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** Renders SVG to PNG bytes; a PlotError says why when @resvg/resvg-js cannot load here. */
export function svgToPng(svg: string): Uint8Array {
  const resvg = loadResvg();
  const renderer = new resvg.Resvg(svg, {
    background: '#ffffff',
    font: { loadSystemFonts: true, defaultFontFamily: PLOT_FONT_FAMILY, sansSerifFamily: PLOT_FONT_FAMILY },
  });
  return renderer.render().asPng();
}

/** The loss curves as `<basePath>.svg` and `<basePath>.png` (writeSvgAndPng). */
export function writeLossPlot(basePath: string, series: readonly PlotSeries[], options: PlotOptions = {}): { svg: string; png?: string; pngError?: string } {
  return writeSvgAndPng(basePath, lossCurveSvg(series, options));
}

/**
 * Writes `<basePath>.svg` and `<basePath>.png` (the folder made if missing), each atomically. The PNG is
 * skipped (with the reason in `pngError`) where the renderer cannot load; the SVG is always written.
 */
export function writeSvgAndPng(basePath: string, svg: string): { svg: string; png?: string; pngError?: string } {
  mkdirSync(dirname(basePath), { recursive: true });
  const svgPath = `${basePath}.svg`, pngPath = `${basePath}.png`;
  writeFileAtomically(svgPath, svg);
  let png: Uint8Array;
  try {
    png = svgToPng(svg);
  } catch (error) {
    return { svg: svgPath, pngError: (error as Error).message };
  }
  writeFileAtomically(pngPath, png);
  return { svg: svgPath, png: pngPath };
}

/**
 * At most ~2 points per pixel column: in each of `columns` runs of consecutive points, the lowest and
 * the highest (in step order). Non-finite points are kept, so gaps stay gaps.
 */
function thin(points: readonly PlotPoint[], columns: number): readonly PlotPoint[] {
  if (points.length <= 4 * columns) return points;
  const out: PlotPoint[] = [];
  const per = points.length / columns;
  for (let c = 0; c < columns; c++) {
    const chunk = points.slice(Math.floor(c * per), Math.floor((c + 1) * per));
    let lo: PlotPoint | undefined, hi: PlotPoint | undefined;
    for (const p of chunk) {
      if (!Number.isFinite(p.value) || !Number.isFinite(p.step)) { out.push(p); continue; }
      if (!lo || p.value < lo.value) lo = p;
      if (!hi || p.value > hi.value) hi = p;
    }
    if (lo && hi) out.push(...(lo === hi ? [lo] : lo.step <= hi.step ? [lo, hi] : [hi, lo]));
  }
  return out;
}

// --- axes ----------------------------------------------------------------------------------------

/** [min, max] of the values, widened by `pad` of the span; a single value gets a unit-ish span. */
function paddedRange(values: readonly number[], pad: number): [number, number] {
  if (values.length === 0) return [0, 1];
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) {
    const half = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    return [lo - half, hi + half];
  }
  const span = hi - lo;
  lo -= span * pad; hi += span * pad;
  return [lo, hi];
}

/**
 * Ticks at multiples of a "nice" step (1, 2 or 5 × 10^k) chosen to give about `count` intervals over
 * [lo, hi] (Heckbert, "Nice numbers for graph labels", Graphics Gems 1990). The first and last tick
 * enclose the range.
 */
export function niceTicks(lo: number, hi: number, count: number): { step: number; values: number[] } {
  const raw = (hi - lo) / Math.max(1, count);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const fraction = raw / magnitude;
  const step = (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * magnitude;
  const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
  const values: number[] = [];
  for (let k = first; k <= last; k++) values.push(Number((k * step).toPrecision(12)));
  return { step, values };
}

/** A tick label with just the decimals the tick step needs; thousands as "k" for large integers. */
export function formatTick(value: number, step: number): string {
  if (Math.abs(value) < step * 1e-9) return '0';
  if (Number.isInteger(step) && step >= 1000 && value % 1000 === 0) return `${value / 1000}k`;
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return value.toFixed(decimals);
}

function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c]!);
}

interface ResvgModule {
  Resvg: new (svg: string, options: object) => { render(): { asPng(): Uint8Array } };
}

let resvgModule: ResvgModule | undefined;

function loadResvg(): ResvgModule {
  if (resvgModule) return resvgModule;
  try {
    resvgModule = createRequire(import.meta.url)('@resvg/resvg-js') as ResvgModule;
    return resvgModule;
  } catch (error) {
    throw new PlotError(`PNG output needs @resvg/resvg-js and its prebuilt binary for ${process.platform}-${process.arch}, which did not load (${(error as Error).message.split('\n')[0]}); the SVG is written anyway`);
  }
}
