// Small helpers shared by the profile's hand-written SVG charts (roofline-plot.ts, bar-chart.ts):
// XML escaping, a rough text-width estimate for layout, and writing a chart as SVG + PNG (the PNG
// through train/plot.ts's resvg renderer; where that cannot load, the SVG is still written).

import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { writeFileAtomically } from '../io/atomic-write.js';
import { svgToPng } from '../train/plot.js';

export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c]!);
}

/** Approximate width in pixels of `text` in DejaVu Sans at `fontSize` (average advance ≈ 0.6 em). */
export function textWidth(text: string, fontSize: number): number {
  return text.length * fontSize * 0.6;
}

/** Pixel coordinates with one decimal. */
export const px = (v: number): string => v.toFixed(1);

/** Writes `<basePath>.svg` and `<basePath>.png`; `pngError` says why the PNG is missing, if it is. */
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
