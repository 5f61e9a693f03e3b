// Small helpers shared by the profile's hand-written SVG charts (roofline-plot.ts, bar-chart.ts):
// XML escaping, a rough text-width estimate for layout, and writing a chart as SVG + PNG (the PNG
// through train/plot.ts's resvg renderer; where that cannot load, the SVG is still written).

export { writeSvgAndPng } from '../train/plot.js';

export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c]!);
}

/** Approximate width in pixels of `text` in DejaVu Sans at `fontSize` (average advance ≈ 0.6 em). */
export function textWidth(text: string, fontSize: number): number {
  return text.length * fontSize * 0.6;
}

/** Pixel coordinates with one decimal. */
export const px = (v: number): string => v.toFixed(1);

