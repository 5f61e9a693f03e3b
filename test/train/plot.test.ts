import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { formatTick, lossCurveSvg, niceTicks, svgToPng, writeLossPlot } from '../../src/train/plot.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-plot-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const train = { name: 'train', points: Array.from({ length: 200 }, (_, i) => ({ step: i + 1, value: 10 * Math.exp(-i / 40) + 3 })) };
const evaluation = { name: 'eval <val>', points: [50, 100, 150, 200].map((step) => ({ step, value: 10 * Math.exp(-step / 40) + 3.2 })) };

test('nice ticks: 1, 2 or 5 × 10^k steps enclosing the range; labels with the digits needed', () => {
  assert.deepEqual(niceTicks(0, 200, 6), { step: 50, values: [0, 50, 100, 150, 200] });
  assert.deepEqual(niceTicks(2.9, 13.4, 5), { step: 5, values: [0, 5, 10, 15] });
  assert.deepEqual(niceTicks(3.05, 3.48, 5).values, [3, 3.1, 3.2, 3.3, 3.4, 3.5]);
  assert.equal(formatTick(3.1, 0.1), '3.1');
  assert.equal(formatTick(3, 0.1), '3.0');
  assert.equal(formatTick(20000, 5000), '20k');
  assert.equal(formatTick(150, 50), '150');
  assert.equal(formatTick(1e-17, 0.1), '0');
});

test('SVG: axes, ticks, labels, legend, DejaVu Sans, escaped names, markers on sparse series', () => {
  const svg = lossCurveSvg([train, evaluation], { title: 'GPT-2 tiny & Moby-Dick' });
  assert.ok(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg" width="800" height="480"'));
  assert.match(svg, /font-family="DejaVu Sans, sans-serif"/);
  assert.match(svg, />GPT-2 tiny &amp; Moby-Dick</);
  assert.match(svg, />eval &lt;val&gt;</);
  assert.match(svg, />step</);
  assert.match(svg, />loss</);
  assert.match(svg, />100</);
  assert.equal((svg.match(/<polyline /g) ?? []).length, 2);
  assert.equal((svg.match(/<circle /g) ?? []).length, 4, 'markers only on the 4-point eval series');
  // Non-finite values break the line; an empty plot still renders.
  const gap = { name: 'nan', points: [{ step: 1, value: 2 }, { step: 2, value: 1 }, { step: 3, value: NaN }, { step: 4, value: 1 }, { step: 5, value: 0.5 }] };
  assert.equal((lossCurveSvg([gap]).match(/<polyline /g) ?? []).length, 2);
  assert.match(lossCurveSvg([]), /no data yet/);
  assert.match(lossCurveSvg([{ name: 'one', points: [{ step: 7, value: 4 }] }]), /<circle /);
  assert.throws(() => lossCurveSvg([], { width: 10 }), /too small/);
  // A long series is thinned to about two points per pixel column.
  const long = { name: 'long', points: Array.from({ length: 100_000 }, (_, i) => ({ step: i, value: 5 + Math.sin(i) })) };
  const thinned = lossCurveSvg([long]).match(/<polyline points="([^"]*)"/)![1]!.split(' ').length;
  assert.ok(thinned <= 2 * 704 && thinned > 700, `${thinned} points drawn`);
});

test('PNG through resvg: a valid PNG of the SVG size; files written atomically', () => {
  const png = svgToPng(lossCurveSvg([train, evaluation]));
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const ihdr = Buffer.from(png.subarray(16, 24));
  assert.deepEqual([ihdr.readUInt32BE(0), ihdr.readUInt32BE(4)], [800, 480]);
  const written = writeLossPlot(join(dir, 'loss'), [train, evaluation], { title: 'loss' });
  assert.deepEqual(written, { svg: join(dir, 'loss.svg'), png: join(dir, 'loss.png') });
  assert.match(readFileSync(written.svg, 'utf8'), /<\/svg>\n$/);
  assert.ok(readFileSync(written.png!).length > 5000);
  assert.deepEqual(readdirSync(dir).sort(), ['loss.png', 'loss.svg']);
});
