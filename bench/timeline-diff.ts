// `node dist/bench/timeline-diff.js A.json B.json [--strip REGEX]`: two decode-timeline runs
// (bench/decode-timeline.ts --json) side by side, kernel by kernel (bench/timeline-compare.ts). No GPU
// needed: it reads the files the device calls brought back.
//
//   node dist/bench/timeline-diff.js off.json on.json --strip '_pre$'

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { TimelineResult } from './timeline-compare.js';
import { compareTimelines, formatComparison } from './timeline-compare.js';

const { values, positionals } = parseArgs({ options: { strip: { type: 'string' } }, allowPositionals: true });
if (positionals.length !== 2) throw new Error(`usage: timeline-diff A.json B.json [--strip REGEX]; got ${positionals.length} files`);
const read = (path: string): TimelineResult[] => {
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as { results?: unknown };
  if (!Array.isArray(parsed.results)) throw new Error(`${path}: no 'results' array (not a decode-timeline --json file)`);
  return parsed.results as TimelineResult[];
};
const [a, b] = positionals.map(read) as [TimelineResult[], TimelineResult[]];
const comparisons = compareTimelines(a, b, values.strip ? new RegExp(values.strip) : undefined);
if (comparisons.length === 0) throw new Error('the two files share no model, precision and batch');
console.log(comparisons.map(formatComparison).join('\n\n'));
