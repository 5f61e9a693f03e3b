// Grouped horizontal bar charts as SVG, for benchmark results: one group per case (a model, a kernel,
// a sequence length), one bar per series (fuseformer and its variants beside their baselines), the
// value printed at the end of each bar. Horizontal, so long case names stay readable; the chart grows
// downwards with the number of groups. A reference line (100% of copy bandwidth) can be drawn.
//
// Layout: title, subtitle (what is better), legend; then the groups; the value axis at the bottom
// with "nice" ticks (train/plot.ts) from 0. A missing value leaves its bar out (the series did not
// run for that case), and is said in the bar's place as "—".

import { formatTick, niceTicks, PLOT_FONT_FAMILY, PlotError } from '../train/plot.js';
import { escapeXml, px, textWidth } from './svg.js';

export interface BarSeries {
  readonly name: string;
  /** CSS colour; default from the palette by position. */
  readonly color?: string;
}

export interface BarGroup {
  readonly label: string;
  /** Value per series name; missing or non-finite: no bar. */
  readonly values: Readonly<Record<string, number | null | undefined>>;
}

export interface BarChartSpec {
  readonly title: string;
  /** The value axis label, with its unit ("tokens/s", "% of copy bandwidth"). */
  readonly unit: string;
  readonly series: readonly BarSeries[];
  readonly groups: readonly BarGroup[];
  /** Shown under the title: "higher is better" (default) or "lower is better". */
  readonly better?: 'higher' | 'lower';
  /** Extra text under the title (device, date, shapes). */
  readonly note?: string;
  /** Printed after each bar's value ('%'). */
  readonly valueSuffix?: string;
  /** A vertical line at this value, labelled. */
  readonly reference?: { readonly value: number; readonly label: string };
  /** Pixels; default 1000. */
  readonly width?: number;
}

const PALETTE = ['#1f77b4', '#6baed6', '#08519c', '#2ca02c', '#d62728', '#ff7f0e', '#9467bd', '#8c564b', '#7f7f7f'];
const BAR = 15, BAR_GAP = 3, GROUP_GAP = 14;

/** A value as printed at a bar's end: 3 significant digits, thousands separated. */
export function formatValue(v: number): string {
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  return v.toPrecision(2);
}

export function barChartSvg(spec: BarChartSpec): string {
  const width = spec.width ?? 1000;
  if (!Number.isInteger(width) || width < 400) throw new PlotError(`bar chart width ${width} is too small or not whole pixels (at least 400)`);
  if (spec.series.length === 0) throw new PlotError(`bar chart '${spec.title}': no series`);
  const color = (i: number) => spec.series[i]!.color ?? PALETTE[i % PALETTE.length]!;
  const valueOf = (g: BarGroup, s: BarSeries): number | undefined => {
    const v = g.values[s.name];
    return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
  };
  const values = spec.groups.flatMap((g) => spec.series.map((s) => valueOf(g, s)).filter((v): v is number => v !== undefined));
  if (values.some((v) => v < 0)) throw new PlotError(`bar chart '${spec.title}': negative values are not drawn`);
  const top = Math.max(spec.reference?.value ?? 0, ...values, 0);
  const ticks = niceTicks(0, top > 0 ? top * 1.08 : 1, 6);
  const axisMax = ticks.values.at(-1)!;

  const labelWidth = Math.min(380, Math.max(80, ...spec.groups.map((g) => textWidth(g.label, 12)))) + 16;
  // Legend rows: as many series per row as fit.
  const legendItems = spec.series.map((s) => 34 + textWidth(s.name, 12));
  const legendRows: number[][] = [[]];
  let rowWidth = 0;
  legendItems.forEach((w, i) => {
    if (rowWidth + w > width - 40 && legendRows.at(-1)!.length > 0) { legendRows.push([]); rowWidth = 0; }
    legendRows.at(-1)!.push(i);
    rowWidth += w;
  });
  const headerHeight = 30 + 20 + (spec.note ? 18 : 0) + legendRows.length * 20 + 10;
  const groupHeight = spec.series.length * (BAR + BAR_GAP) - BAR_GAP;
  const plot = { x0: labelWidth, x1: width - 70, y0: headerHeight, y1: headerHeight + spec.groups.length * (groupHeight + GROUP_GAP) + (spec.groups.length ? 0 : 40) };
  const height = plot.y1 + 56;
  const sx = (v: number) => plot.x0 + (v / axisMax) * (plot.x1 - plot.x0);

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${PLOT_FONT_FAMILY}, sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  out.push(`<text x="${px(width / 2)}" y="26" text-anchor="middle" font-size="16">${escapeXml(spec.title)}</text>`);
  let y = 46;
  out.push(`<text x="${px(width / 2)}" y="${y}" text-anchor="middle" font-size="12" fill="#555555">${escapeXml(`${spec.unit} — ${spec.better ?? 'higher'} is better`)}</text>`);
  if (spec.note) { y += 18; out.push(`<text x="${px(width / 2)}" y="${y}" text-anchor="middle" font-size="11" fill="#777777">${escapeXml(spec.note)}</text>`); }
  for (const row of legendRows) {
    y += 20;
    const total = row.reduce((s, i) => s + legendItems[i]!, 0);
    let x = (width - total) / 2;
    for (const i of row) {
      out.push(`<rect x="${px(x)}" y="${y - 10}" width="22" height="11" fill="${color(i)}"/>`);
      out.push(`<text x="${px(x + 27)}" y="${y}">${escapeXml(spec.series[i]!.name)}</text>`);
      x += legendItems[i]!;
    }
  }
  // Grid and axis.
  for (const v of ticks.values) {
    out.push(`<line x1="${px(sx(v))}" y1="${plot.y0 - 4}" x2="${px(sx(v))}" y2="${plot.y1}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${px(sx(v))}" y="${plot.y1 + 18}" text-anchor="middle">${formatTick(v, ticks.step)}</text>`);
  }
  out.push(`<line x1="${plot.x0}" y1="${plot.y0 - 4}" x2="${plot.x0}" y2="${plot.y1}" stroke="#333333"/>`);
  out.push(`<line x1="${plot.x0}" y1="${plot.y1}" x2="${plot.x1}" y2="${plot.y1}" stroke="#333333"/>`);
  out.push(`<text x="${px((plot.x0 + plot.x1) / 2)}" y="${plot.y1 + 40}" text-anchor="middle" font-size="13">${escapeXml(spec.unit)}</text>`);
  // Bars.
  let gy = plot.y0;
  for (const g of spec.groups) {
    const h = groupHeight;
    out.push(`<text x="${plot.x0 - 10}" y="${px(gy + h / 2 + 4)}" text-anchor="end">${escapeXml(truncate(g.label, labelWidth - 16))}</text>`);
    spec.series.forEach((s, i) => {
      const by = gy + i * (BAR + BAR_GAP), v = valueOf(g, s);
      if (v === undefined) {
        out.push(`<text x="${plot.x0 + 4}" y="${px(by + BAR - 3)}" font-size="11" fill="#999999">—</text>`);
        return;
      }
      out.push(`<rect x="${plot.x0}" y="${px(by)}" width="${px(Math.max(0.5, sx(v) - plot.x0))}" height="${BAR}" fill="${color(i)}"><title>${escapeXml(`${g.label} — ${s.name}: ${formatValue(v)} ${spec.unit}`)}</title></rect>`);
      out.push(`<text x="${px(sx(v) + 4)}" y="${px(by + BAR - 3)}" font-size="11">${formatValue(v)}${escapeXml(spec.valueSuffix ?? '')}</text>`);
    });
    gy += h + GROUP_GAP;
  }
  if (spec.groups.length === 0) out.push(`<text x="${px((plot.x0 + plot.x1) / 2)}" y="${plot.y0 + 24}" text-anchor="middle" fill="#888888">no results</text>`);
  if (spec.reference) {
    const rx = sx(spec.reference.value);
    out.push(`<line x1="${px(rx)}" y1="${plot.y0 - 4}" x2="${px(rx)}" y2="${plot.y1}" stroke="#d62728" stroke-dasharray="5 4" stroke-width="1.5"/>`);
    out.push(`<text x="${px(rx - 4)}" y="${plot.y0 - 8}" text-anchor="end" font-size="11" fill="#d62728">${escapeXml(spec.reference.label)}</text>`);
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function truncate(text: string, maxWidth: number): string {
  if (textWidth(text, 12) <= maxWidth) return text;
  const chars = Math.max(4, Math.floor(maxWidth / (12 * 0.6)) - 1);
  return `${text.slice(0, chars)}…`;
}
