// What a profile leaves on disk: profile.json (the run's description, the roofs, the summary, the
// kernel table and every op launch) and, where there are roofs, roofline.svg + roofline.png.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomically } from '../io/atomic-write.js';
import type { Profile } from './profiler.js';
import { rooflineSvg } from './roofline-plot.js';
import { writeSvgAndPng } from './svg.js';

export interface ProfileFiles {
  readonly json: string;
  readonly svg?: string;
  readonly png?: string;
  /** Why there is no roofline, or no PNG of it. */
  readonly note?: string;
}

/** The JSON document of a profile; `run` describes what was profiled (model, mode, shapes, dtype). */
export function profileJson(profile: Profile, run: Record<string, unknown>): Record<string, unknown> {
  const { ops, kernels, byOp, ...summary } = profile;
  return {
    tool: 'fuseformer profile', version: 1, date: new Date().toISOString(), run, ...summary,
    kernels, byOp, ops,
  };
}

/** Writes profile.json and the roofline (SVG + PNG) into `dir`. */
export function writeProfileOutputs(dir: string, profile: Profile, run: Record<string, unknown>, title: string): ProfileFiles {
  mkdirSync(dir, { recursive: true });
  const json = join(dir, 'profile.json');
  writeFileAtomically(json, `${JSON.stringify(profileJson(profile, run), null, 1)}\n`);
  if (!profile.roofs) return { json, note: `no roofline: ${profile.device} has no measured roofs (times and counts only)` };
  const written = writeSvgAndPng(join(dir, 'roofline'), rooflineSvg(profile.kernels, profile.roofs, { title }));
  return { json, svg: written.svg, ...(written.png ? { png: written.png } : {}), ...(written.pngError ? { note: `no PNG: ${written.pngError}` } : {}) };
}
