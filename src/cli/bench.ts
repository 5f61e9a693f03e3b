// `fuseformer bench`: runs the benchmark suites that exist (npm scripts bench:<suite> of this package),
// then draws their results (bench/results/*.json) as bar charts into bench/results/charts/ (SVG + PNG).
// A suite whose script does not exist yet is skipped with a message; --charts-only draws the charts
// from the results already there.

import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ArgumentError } from '../errors.js';
import type { BenchSuite } from '../profile/bench-charts.js';
import { BENCH_SUITES, SUITE_BENCHMARK, writeBenchCharts, writeRooflineCharts } from '../profile/bench-charts.js';

export const BENCH_USAGE = `usage: fuseformer bench [options]

  --suite LIST      comma-separated suites to run: ${BENCH_SUITES.join(',')} (default: all)
                    each runs \`npm run bench:<suite>\` (GPU; PyTorch baselines where python3 + torch exist);
                    a suite without a script yet is skipped
  --charts-only     run nothing: draw the charts from the results already in --results
  --results DIR     where the results JSON are (default: the package's bench/results);
                    charts go to DIR/charts (SVG + PNG)
  -h, --help        this text
`;

/** The package root: the nearest directory up from this file with fuseformer's package.json. */
export function packageRoot(from = dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'fuseformer') return dir;
    if (dirname(dir) === dir) throw new ArgumentError(`fuseformer bench: no fuseformer package.json above ${from}`);
  }
}

export function parseSuites(list: string | undefined): BenchSuite[] {
  if (list === undefined) return [...BENCH_SUITES];
  const names = list.split(',').map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new ArgumentError(`--suite: empty list; expected some of ${BENCH_SUITES.join(', ')}`);
  for (const n of names) {
    if (!(BENCH_SUITES as readonly string[]).includes(n)) throw new ArgumentError(`--suite: unknown suite '${n}'; expected some of ${BENCH_SUITES.join(', ')}`);
  }
  return [...new Set(names)] as BenchSuite[];
}

export function runBench(argv: string[], log: (line: string) => void = (line) => process.stdout.write(`${line}\n`)): number {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: { suite: { type: 'string' }, 'charts-only': { type: 'boolean', default: false }, results: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false } },
  });
  if (values.help) { process.stdout.write(BENCH_USAGE); return 0; }
  const suites = parseSuites(values.suite);
  const root = packageRoot();
  const resultsDir = resolve(values.results ?? join(root, 'bench', 'results'));
  if (values.results !== undefined && !(existsSync(resultsDir) && statSync(resultsDir).isDirectory())) {
    throw new ArgumentError(`--results: '${values.results}' is not a directory (the benchmarks' JSON results)`);
  }
  let failed = 0;
  if (!values['charts-only']) {
    const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts?: Record<string, string> }).scripts ?? {};
    for (const suite of suites) {
      const script = `bench:${SUITE_BENCHMARK[suite]}`;
      if (!scripts[script]) { log(`${suite}: skipped — this package has no '${script}' script yet`); continue; }
      log(`${suite}: npm run ${script}`);
      const run = spawnSync('npm', ['run', '-s', script], { cwd: root, stdio: 'inherit' });
      if (run.status !== 0) {
        failed++;
        log(`${suite}: '${script}' failed (${run.error?.message ?? `exit code ${run.status}`}); charts are drawn from whatever results exist`);
      }
    }
  }
  const bars = writeBenchCharts(resultsDir, suites, join(resultsDir, 'charts'));
  const rooflines = writeRooflineCharts(resultsDir, join(resultsDir, 'charts'));
  const report = { written: [...bars.written, ...rooflines.written], skipped: [...bars.skipped, ...rooflines.skipped] };
  for (const line of report.skipped) log(`charts: ${line}`);
  log(report.written.length > 0 ? `charts written: ${report.written.join(', ')}` : 'no charts written');
  return failed > 0 ? 1 : 0;
}
